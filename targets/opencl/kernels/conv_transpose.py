"""`conv_transpose2d`: the gather form, one work-item per output element.

out[n, o, y, x] = bias[o] + sum over the input channels c of o's group and the taps (ky, kx) with
iy = (y + pad_top - ky * dh) / sh and ix = (x + pad_left - kx * dw) / sw whole and in range of
x[n, c, iy, ix] * w[c, o % og, ky, kx]. Transposed convolutions are rare in the models tessel targets
(decoders, upsampling heads), so this is a straightforward kernel, not a tuned one.
"""

from __future__ import annotations

from .base import Ctx, Lowered, launch_1d, require_static, template
from .gemm import check_float32


@template("conv_transpose2d")
def lower_conv_transpose2d(ctx: Ctx) -> Lowered:
    x, w = ctx.operands[:2]
    y = ctx.results[0]
    require_static(x, w, y)
    check_float32("conv_transpose2d", *ctx.operands, y)
    n, c, h, wd = x.dims
    _, og, kh, kw = w.dims
    _, o, ho, wo = y.dims
    sh, sw = ctx.attr("strides")
    ph, pw = ctx.attr("pads")[:2]
    dh, dw = ctx.attr("dilations")
    g = ctx.attr("groups")
    cg = c // g
    bias = len(ctx.operands) == 3
    k = launch_1d(y.numel)
    params = ", __global const float* restrict in2" if bias else ""
    k.source = f"""// conv_transpose2d: {x} * {w} -> {y}
// strides {sh}x{sw}, pads {ph},{pw}, dilations {dh}x{dw}, groups {g}
__kernel void KERNEL(__global const float* restrict in0, __global const float* restrict in1{params},
                     __global float* restrict out0) {{
    const long i = get_global_id(0);
    if (i >= {y.numel}L) return;
    const int xo = i % {wo}, yo = (i / {wo}) % {ho}, oc = (i / {wo * ho}) % {o}, b = i / {wo * ho * o};
    const int grp = oc / {og}, oo = oc % {og};
    float acc = {"in2[oc]" if bias else "0.0f"};
    for (int ky = 0; ky < {kh}; ++ky) {{
        const int ty = yo + {ph} - ky * {dh};
        if (ty < 0 || ty % {sh} != 0 || ty / {sh} >= {h}) continue;
        const int iy = ty / {sh};
        for (int kx = 0; kx < {kw}; ++kx) {{
            const int tx = xo + {pw} - kx * {dw};
            if (tx < 0 || tx % {sw} != 0 || tx / {sw} >= {wd}) continue;
            const int ix = tx / {sw};
            for (int cc = 0; cc < {cg}; ++cc) {{
                const int ci = grp * {cg} + cc;
                acc += in0[((b * {c} + ci) * {h} + iy) * {wd} + ix]
                       * in1[((ci * {og} + oo) * {kh} + ky) * {kw} + kx];
            }}
        }}
    }}
    out0[i] = acc;
}}
"""
    return Lowered([k])
