"""The depthwise integer conv (groups = channels, one output channel a group) reading x in place: a
work-item computes 16 consecutive output columns of one row of one channel, the 16 pixels in the lanes.

Per tap it loads the 16 inputs the lanes need straight from the 8-bit input: one 16-byte vector where the
row is stride 1 and the columns lie inside the image, the even lanes of 32 bytes at stride 2, lane by lane
(each lane inside the image or zero, the padding's x - x_zero_point) at the row's edges and other strides;
a tap whose input row lies in the padding is skipped. The accumulators are exact i32 (|x - xz| <= 255,
|w - wz| <= 255). qlinear's pixel-lane kernel did the same from a padded short copy written by a first
kernel, whose launch cost as much as the conv (MobileNetV2 int8: 10 depthwise convs, 20 launches).
"""

from __future__ import annotations

import math

from .base import Ctx, Kernel, Lowered, ctype

LANES = "0123456789abcdef"


MIN_ITEMS = 4
"""Items (16-column runs) a row needs before the direct kernel is the default: a row's first and last
items gather their inputs lane by lane around the padding, so on narrow rows (every item an edge) and at
stride 2 (32-byte spans) the repack's one pass is cheaper. Measured (Intel Xeon VM): MobileNetV2 int8
2.9 ms direct against 3.1 repacked. Not settled: EfficientNet-B0 int8 ran 26-46 ms with either choice,
its time dominated by the scalar dequantize / sigmoid / quantize chains of its SiLUs (one took 1.2 ms in
one compile and 18 ms in another), so it decides nothing here."""


def depthwise_fits(ctx: Ctx) -> bool:
    """A depthwise integer conv (one input and one output channel a group) of stride 1 whose rows hold at
    least MIN_ITEMS items; schedule `direct` (0 or 1) decides instead."""
    x, w = ctx.operands[:2]
    y = ctx.results[0]
    g = int(ctx.attr("groups"))
    if not (g == x.dims[1] == w.dims[0] and w.dims[1] == 1):
        return False
    asked = ctx.schedule.get("direct")
    if asked is not None:
        return bool(int(asked))
    return list(ctx.attr("strides"))[1] == 1 and math.ceil(y.dims[3] / 16) >= MIN_ITEMS


def depthwise_direct(ctx: Ctx) -> Lowered:
    from . import qlinear as q

    x, w, _, wz = ctx.operands[:4]
    y = ctx.results[0]
    n, c, h, wd = x.dims
    kh, kw = w.dims[2:]
    ho, wo = y.dims[2:]
    sh, sw = (int(v) for v in ctx.attr("strides"))
    pt, pl = (int(v) for v in ctx.attr("pads")[:2])
    dh, dw = (int(v) for v in ctx.attr("dilations"))
    xt, wt, yt = (ctype(t) for t in (x, w, y))
    xb = math.ceil(wo / 16)
    wzv = "in3[0]" if wz.numel == 1 else "in3[ch]"
    taps = []
    for ky in range(kh):
        taps.append(f"""    {{
        const int iy = oy * {sh} + {ky * dh - pt};
        if (iy >= 0 && iy < {h}) {{
            const __global {xt}* xr = xc + iy * {wd};""")
        for kx in range(kw):
            off = kx * dw - pl
            fast = ""
            if sw == 1:
                fast = f"convert_int16(vload16(0, xr + ix0 + {off}))"
            elif sw == 2:  # the even bytes of 32
                fast = (f"convert_int16(({xt}16)(vload16(0, xr + ix0 + {off}).even, "
                        f"vload16(0, xr + ix0 + {off} + 16).even))")
            inside = f"ix0 + {off} >= 0 && ix0 + {off} + {15 * sw} < {wd}"
            slow = f"edge(xr, ix0 + {off}, xz)"
            load = f"({inside}) ? {fast} - xz : {slow}" if fast else slow
            taps.append(f"""            {{ const int16 v = {load};
              acc += v * ((int)wc[{ky * kw + kx}] - wz); }}""")
        taps.append("        }\n    }")
    val = q._requant(ctx, "acc", 16, "ch")
    lane = "(int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)"
    gather = ", ".join(f"xr[k.s{LANES[j]}]" for j in range(16))
    rem = wo % 16  # the row's last item stores its first rem lanes
    tail = ("    else {\n" + "".join(f"        yr[{j}] = r.s{LANES[j]};\n" for j in range(rem)) + "    }"
            if rem else "")
    src = f"""// {ctx.op_name} depthwise: {x} * {w} -> {y}, x read in place, 16 output columns an item
static inline int16 KERNEL_edge(const __global {xt}* xr, int ix, int xz) {{
    // the 16 inputs at ix, ix + {sw}, ... of a row: inside it x - xz, outside it (the padding) zero; the
    // loads clamped into the row, static lanes
    const int16 i = ix + {lane} * {sw};
    const int16 k = clamp(i, 0, {wd - 1});
    const int16 v = (int16)({gather}) - xz;
    return select((int16)(0), v, i >= 0 && i < {wd});
}}
__kernel void KERNEL({q._params(ctx, f"__global const {xt}* restrict in0")}) {{
    const int xi = get_global_id(0), oy = get_global_id(1), z = get_global_id(2);
    if (xi >= {xb} || oy >= {ho}) return;
    const int ch = z % {c}, ox0 = xi * 16, ix0 = ox0 * {sw};
    const int xz = in2[0], wz = {wzv};
    const __global {xt}* xc = in0 + (long)z * {h * wd};
    const __global {wt}* wc = in1 + ch * {kh * kw};
    int16 acc = 0;
{chr(10).join(taps)}
    const {yt}16 r = {val};
    __global {yt}* yr = out0 + ((long)z * {ho} + oy) * {wo} + ox0;
    if (ox0 + 16 <= {wo}) vstore16(r, 0, yr);
{tail}
}}
"""
    src = src.replace("edge(xr,", "KERNEL_edge(xr,")
    lx = min(xb, 4)
    ly = max(1, min(ho, 16 // lx))
    grid = (math.ceil(xb / lx) * lx, math.ceil(ho / ly) * ly, n * c)
    main = Kernel(src, grid, (lx, ly, 1), tuple(f"in{i}" for i in range(len(ctx.operands))) + ("out0",))
    return Lowered([main], schedule={"direct": 1})
