"""The integer contractions: `conv2d_integer` / `qconv2d` and `matmul_integer` / `qmatmul` on 8-bit
operands with i32 accumulators.

conv: a work-item computes `ob` output channels (of one group) at one output pixel; work-items along
dim 0 are consecutive output columns, so PoCL's work-group vectorizer turns the input loads of a stride-1
conv into vector loads while the weights (the same for every lane) are scalar loads. Padding contributes
zero after the zero point is subtracted.

matmul: a work-item computes `ob` rows of one output column; along dim 0 the columns, so the loads of B
are consecutive and A's (one per row) the same for every lane. B's zero point is subtracted once per k
and reused by the rows.

The requantizing forms add the i32 bias, multiply by the scale in double (float where the device has no
fp64; the epilogue runs once per output), add the output zero point, round half to even (`rint`) and
clamp to [min, max] within the output type before the 8-bit store, as the op's reference does.
"""

from __future__ import annotations

import math

from ....ir.types import int_range
from .base import Ctx, Kernel, Lowered, NotLowerable, ctype, require_static, template

INTEGER_OPS = ("conv2d_integer", "matmul_integer")
REQUANT_OPS = ("qconv2d", "qmatmul")


def _check(ctx: Ctx) -> None:
    require_static(*ctx.operands, *ctx.results)
    for t in ctx.operands[:2]:
        if t.dtype not in ("i8", "ui8"):
            raise NotLowerable(f"'{ctx.op_name}' takes i8 or ui8 operands, got {t.dtype}")


def _block(n: int, cap: int = 8) -> int:
    """The largest of cap, cap / 2, ..., 1 dividing n: outputs a work-item computes."""
    b = cap
    while n % b:
        b //= 2
    return b


def _params(ctx: Ctx) -> str:
    names = []
    for i, t in enumerate(ctx.operands):
        names.append(f"__global const {ctype(t)}* restrict in{i}")
    names.append(f"__global {ctype(ctx.results[0])}* restrict out0")
    return ",\n                     ".join(names)


def _store(ctx: Ctx, acc: str, ch: str, index: str) -> str:
    """The statement storing accumulator `acc` of output channel / column `ch` at `index`: as is for the
    integer ops, requantized for the q-ops (operands 4, 5, 6: scale, output zero point, bias)."""
    if ctx.op_name in INTEGER_OPS:
        return f"out0[{index}] = {acc};"
    scale, yz = ctx.operands[4:6]
    real = "double" if ctx.device.fp64 else "float"
    bias = f" + in6[{ch}]" if len(ctx.operands) == 7 else ""
    s = f"in4[{ch}]" if scale.rank == 1 else "in4[0]"
    tlo, thi = int_range(yz.dtype)
    lo, hi = max(ctx.attr("min"), tlo), min(ctx.attr("max"), thi)
    if lo > hi:
        raise NotLowerable(f"bounds [{ctx.attr('min')}, {ctx.attr('max')}] are outside {yz.dtype}")
    v = f"rint(({real})({acc}{bias}) * ({real}){s} + ({real})in5[0])"
    return f"out0[{index}] = ({ctype(yz)})clamp({v}, ({real}){lo}, ({real}){hi});"


def _zero_points(t_rank: int, ch: str, ob: int, arg: str) -> list[str]:
    """The weight zero point of each of `ob` channels from `ch` (one scalar, or one per channel)."""
    return [f"const int wz{o} = {arg}[{ch} + {o}];" if t_rank == 1 else f"const int wz{o} = {arg}[0];"
            for o in range(ob)]


@template("conv2d_integer", "qconv2d")
def lower_integer_conv(ctx: Ctx) -> Lowered:
    _check(ctx)
    x, w, _, wz = ctx.operands[:4]
    y = ctx.results[0]
    n, c, h, wd = x.dims
    m, cg, kh, kw = w.dims
    _, _, ho, wo = y.dims
    sh, sw = ctx.attr("strides")
    ph, pw = ctx.attr("pads")[:2]
    dh, dw = ctx.attr("dilations")
    og = m // ctx.attr("groups")
    ob = _block(og, int(ctx.schedule.get("rows", 8)))
    blocks = m // ob
    lx = min(16, 1 << max(0, math.ceil(math.log2(max(wo, 1)))))
    taps = cg * kh * kw
    accs = "\n".join(f"    int acc{o} = 0;" for o in range(ob))
    macs = "\n".join(f"                acc{o} += xv * ((int)wb[{o * taps} + t] - wz{o});" for o in range(ob))
    stores = "\n".join(
        "        " + _store(ctx, f"acc{o}", f"oc0 + {o}", f"((b * {m} + oc0 + {o}) * {ho} + oy) * {wo} + ox")
        for o in range(ob))
    zps = "\n".join("    " + z for z in _zero_points(wz.rank, "oc0", ob, "in3"))
    src = f"""// {ctx.op_name}: {x} * {w} -> {y}
// strides {sh}x{sw}, pads {ph},{pw}, dilations {dh}x{dw}, groups {ctx.attr("groups")}; {ob} channels an item
__kernel void KERNEL({_params(ctx)}) {{
    const int ox = get_global_id(0), oy = get_global_id(1), z = get_global_id(2);
    const int b = z / {blocks}, oc0 = (z % {blocks}) * {ob};
    const int xc = min(ox, {wo - 1});
    const int xz = in2[0];
{zps}
{accs}
    const __global {ctype(x)}* xb = in0 + (b * {c} + (oc0 / {og}) * {cg}) * {h * wd};
    const __global {ctype(w)}* wb = in1 + oc0 * {taps};
    for (int ci = 0; ci < {cg}; ++ci) {{
        for (int ky = 0; ky < {kh}; ++ky) {{
            const int iy = oy * {sh} - {ph} + ky * {dh};
            if (iy < 0 || iy >= {h}) continue;
            for (int kx = 0; kx < {kw}; ++kx) {{
                const int ix = xc * {sw} - {pw} + kx * {dw};
                const int xv = (ix >= 0 && ix < {wd}) ? (int)xb[(ci * {h} + iy) * {wd} + ix] - xz : 0;
                const int t = (ci * {kh} + ky) * {kw} + kx;
{macs}
            }}
        }}
    }}
    if (ox < {wo}) {{
{stores}
    }}
}}
"""
    k = Kernel(src, (math.ceil(wo / lx) * lx, ho, n * blocks), (lx, 1, 1))
    return Lowered([k], schedule={"rows": ob})


def _batch_offset(batch: tuple[int, ...], shape: tuple[int, ...], q: str) -> str:
    """The element offset of the matrix of an operand of `shape` (broadcast over the result's `batch`
    dims) for flat batch index `q`."""
    own = shape[:-2]
    own = (1,) * (len(batch) - len(own)) + own
    size = shape[-2] * shape[-1]
    terms, stride = [], size
    strides = []
    for d in reversed(own):
        strides.append(stride if d != 1 else 0)
        stride *= d
    strides.reverse()
    for k, (d, s) in enumerate(zip(batch, strides, strict=True)):
        if s == 0:
            continue
        inner = math.prod(batch[k + 1:])
        t = f"({q} / {inner})" if inner > 1 else q
        t = f"({t} % {d})" if k else t
        terms.append(f"{t} * {s}")
    return " + ".join(terms) or "0"


@template("matmul_integer", "qmatmul")
def lower_integer_matmul(ctx: Ctx) -> Lowered:
    _check(ctx)
    a, bt, _, bz = ctx.operands[:4]
    y = ctx.results[0]
    mm, kk = a.dims[-2:]
    nn = bt.dims[-1]
    batch = y.dims[:-2]
    nb = math.prod(batch)
    ob = _block(mm, int(ctx.schedule.get("rows", 4)))
    blocks = mm // ob
    lx = min(16, 1 << max(0, math.ceil(math.log2(max(nn, 1)))))
    accs = "\n".join(f"    int acc{o} = 0;" for o in range(ob))
    macs = "\n".join(f"        acc{o} += ((int)ab[{o * kk} + k] - az) * bv;" for o in range(ob))
    stores = "\n".join(
        "        " + _store(ctx, f"acc{o}", "n", f"(q * {mm} + m0 + {o}) * {nn} + n") for o in range(ob))
    bzv = "in3[nc]" if bz.rank == 1 else "in3[0]"
    src = f"""// {ctx.op_name}: {a} x {bt} -> {y}; {ob} rows an item
__kernel void KERNEL({_params(ctx)}) {{
    const int n = get_global_id(0), m0 = get_global_id(1) * {ob}, q = get_global_id(2);
    const int nc = min(n, {nn - 1});
    const int az = in2[0], bzn = {bzv};
{accs}
    const __global {ctype(a)}* ab = in0 + {_batch_offset(batch, a.dims, "q")} + m0 * {kk};
    const __global {ctype(bt)}* bb = in1 + {_batch_offset(batch, bt.dims, "q")} + nc;
    for (int k = 0; k < {kk}; ++k) {{
        const int bv = (int)bb[k * {nn}] - bzn;
{macs}
    }}
    if (n < {nn}) {{
{stores}
    }}
}}
"""
    k = Kernel(src, (math.ceil(nn / lx) * lx, blocks, nb), (lx, 1, 1))
    return Lowered([k], schedule={"rows": ob})
