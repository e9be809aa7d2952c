"""The integer depthwise conv with 16 channels in the lanes, in float arithmetic, exact (as
qconv_depthwise.py: every product and partial sum of at most 256 taps is an integer below 2^24).

qconv_depthwise.py puts 16 output columns of one channel in the lanes. On the narrow maps of a mobile
network's late stages that wastes most of them (a 7-column row fills 7 of 16 lanes, a 10-column row 20 of
32 with the overlapping second vector) and launches a work-group a channel. Here a first kernel writes x -
x_zero_point as floats with each 16 channels interleaved, [N, ceil(C / 16), Hp, Wp, 16] (padded with 0,
phase-split as qlinear's repack: a tap's inputs for consecutive output columns are consecutive); the
weights are packed at load time [ceil(C / 16), KH, KW, 16]. A work-item computes `cols` output columns of
one row for 16 channels: per tap one 64-byte weight vector (loaded once), per column one 64-byte input
vector and one FMA. With 4, 8 or 16 columns an item the requantized columns are transposed in registers
(shuffles.transpose16) and each channel's columns stored as one vector; other counts store lane by lane
(qconv_pairs.channel_lane_stores). A fused chain runs across the 16 channels where every block is whole,
else along each channel's columns.

`lanes_pay` says where this kernel is the default: rows of 8 columns or fewer (the row kernel's lanes at
most half used); `depthwise_space` lets the tuner choose the other kernel.
"""

from __future__ import annotations

import math
from typing import Any

from ..space import Knob, Space, around, space
from .base import Ctx, Kernel, Lowered, NotLowerable, PackSpec, ctype
from .fused_chain import LANES
from .gemm import Epilogue
from .qconv_pairs import channel_lane_kernel, channel_lane_stores
from .shuffles import interleave, transpose16


def row_use(wo: int) -> float:
    """The share of the row kernel's lanes that hold real output columns: a row of wo columns takes
    ceil(wo / 16) vectors of 16."""
    return wo / (16 * math.ceil(wo / 16))


def channel_use(c: int) -> float:
    """The share of this kernel's lanes that hold real channels."""
    return c / (16 * math.ceil(c / 16))


def lanes_pay(ctx: Ctx) -> bool:
    """One output channel an input channel, and the row kernel's lanes at most half used (rows of 8
    columns or fewer) and less used than these: this kernel writes and reads its input 4 bytes an element
    where the row kernels read bytes, which the lanes it fills must pay for (measured alone: 7x7 and
    smaller maps 0.6-0.8x the band kernel's time, 10x10 to 14x14 1.0-1.3x)."""
    x, w = ctx.operands[:2]
    c, wo = x.dims[1], ctx.results[0].dims[3]
    return w.dims[0] == c and row_use(wo) <= 0.5 and row_use(wo) < channel_use(c)


def _repack(ctx: Ctx, geo: Any, cb: int) -> Kernel:
    """x - x_zero_point as floats into tmp0 [N * cb, hp, wp, 16] (16 channels interleaved), padded with 0,
    each row in `sw` phases of wq; the lanes past the last channel repeat it (their results are not
    stored). A work-item fills one padded row of one channel block: the padding, then (rows of 16 inputs
    or more) 16 inputs of each of the 16 channels at a time, transposed in registers (the last 16 ending
    at the row's end), else one position at a time."""
    xt = ctype(ctx.operands[0])
    c, wd = geo.c, geo.wd
    plane = geo.h * wd

    def chan(j: int) -> str:
        return f"min(c0 + {j}, {c - 1})" if c % 16 else f"(c0 + {j})"

    at = f"(((ix + {geo.pl}) % {geo.sw}) * {geo.wq} + (ix + {geo.pl}) / {geo.sw})"
    if wd >= 16:
        rows = [f"vload16(0, s + {chan(j)} * {plane} + ix0)" for j in range(16)]
        names = [f"r{j}" for j in range(16)]
        body = [f"const {xt}16 {n} = {r};" for n, r in zip(names, rows, strict=True)]
        body += transpose16(names, "t", xt)
        for p in range(16):
            body.append(f"{{ const int ix = ix0 + {p}; vstore16(convert_float16(t{p}) - xz, {at}, dst); }}")
        inner = "\n            ".join(body)
        interior = f"""    for (int i = 0; i < {wd}; i += 16) {{
        const int ix0 = min(i, {wd - 16});
        {{
            {inner}
        }}
    }}"""
    else:
        lanes = ", ".join(f"(float)s[{chan(j)} * {plane} + ix]" for j in range(16))
        interior = f"""    for (int ix = 0; ix < {wd}; ++ix) vstore16((float16)({lanes}) - xz, {at}, dst);"""
    head = interleave(xt) if wd >= 16 else ""
    src = f"""{head}// {ctx.op_name} input: x - x_zero_point as floats, 16 channels interleaved, padded to
// {geo.hp}x{geo.wp}, {geo.sw} phases a row
__kernel void KERNEL(__global const {xt}* restrict in0, __global const {xt}* restrict in2,
                     __global float* restrict tmp0) {{
    const int yp = get_global_id(0), z = get_global_id(1);
    if (yp >= {geo.hp}) return;
    const int iy = yp - {geo.pt}, b = z / {cb}, c0 = (z % {cb}) * 16;
    const float xz = (float)in2[0];
    __global float* dst = tmp0 + ((long)z * {geo.hp} + yp) * {geo.wp * 16};
    if (iy < 0 || iy >= {geo.h}) {{
        for (int q = 0; q < {geo.wp}; ++q) vstore16((float16)(0.0f), q, dst);
        return;
    }}
    for (int q = 0; q < {geo.wp}; ++q) {{  // the padding
        const int ix = (q % {geo.wq}) * {geo.sw} + q / {geo.wq} - {geo.pl};
        if (ix < 0 || ix >= {wd}) vstore16((float16)(0.0f), q, dst);
    }}
    const __global {xt}* s = in0 + (long)b * {c * plane} + iy * {wd};
{interior}
}}
"""
    ly = min(geo.hp, 16)
    return Kernel(src, (math.ceil(geo.hp / ly) * ly, geo.n * cb), (ly, 1), ("in0", "in2", "tmp0"))


def _columns(ctx: Ctx, wo: int) -> int:
    """Output columns an item: 16 (8 with 16 vector registers: the accumulators and the taps' weights
    fit), fewer in a narrower row (8 or 4, the item's vectors overlapping at the row's end), or the row."""
    cap = 16 if ctx.device.vector_registers >= 32 else 8
    return next((p for p in (16, 8, 4) if p <= min(cap, wo)), wo)


def _transposed_stores(ctx: Ctx, geo: Any, px: int, whole: bool, epilogue: Epilogue | None,
                       channel_epilogue: Epilogue | None) -> list[str]:
    """The item's `px` columns x 16 channels, requantized (through `channel_epilogue` across the channels
    where every lane is one), transposed in registers and stored as one vector of `px` columns a channel
    (through `epilogue` there otherwise); channels past the last skipped."""
    from . import qlinear as q

    yt = ctype(ctx.results[0])
    c = geo.c
    across = whole and channel_epilogue is not None
    lines = []
    for p in range(px):
        val = q._requant(ctx, f"convert_int16(a{p})", 16, "oc0", c, whole)
        if across:
            assert channel_epilogue is not None
            pixel = f"(((long)(b * {c} + oc0) * {geo.ho} + oy) * {geo.wo} + ox0 + {p})"
            val = channel_epilogue(val, pixel, 16)
        lines.append(f"    const {yt}16 v{p} = {val};")
    lines += ["    " + x for x in transpose16([f"v{p}" for p in range(px)] + [""] * (16 - px), "t", yt)]
    for j in range(16):
        at = f"((long)(b * {c} + oc0 + {j}) * {geo.ho} + oy) * {geo.wo} + ox0"
        val = f"t{j}" if px == 16 else f"t{j}.s{LANES[:px]}"
        val = val if across else q.stored(val, at, px, epilogue)
        store = f"vstore{px}({val}, 0, out0 + {at});"
        lines.append(f"    {store}" if whole or j == 0 else f"    if ({j} < nch) {store}")
    return lines


def conv_depthwise_lanes(ctx: Ctx, epilogue: Epilogue | None = None,
                         channel_epilogue: Epilogue | None = None) -> Lowered:
    """schedule `depthwise`: 3; `cols` output columns an item (1..16, default `_columns`): 4, 8 or 16 of
    them transposed to whole stores a channel (the item's vectors overlapping at the row's end), other
    counts stored a lane at a time."""
    from . import qlinear as q

    x, w = ctx.operands[:2]
    y = ctx.results[0]
    c = x.dims[1]
    if w.dims[0] != c:
        raise NotLowerable(f"'{ctx.op_name}' depthwise=3 takes one output channel an input channel")
    wo = y.dims[3]
    px = int(ctx.schedule.get("cols", _columns(ctx, wo)))
    if not 1 <= px <= 16:
        raise NotLowerable(f"'{ctx.op_name}' schedule cols={px} (1..16)")
    transposed = px in (4, 8, 16) and px <= wo
    geo = q._geo(ctx, 1 if transposed else px)
    cb = math.ceil(c / 16)
    whole = c % 16 == 0
    wt = ctype(w)
    taps = geo.kh * geo.kw
    wz = q._channels("in3", ctx.operands[3], "float", 16, "oc0", c, whole)
    lines = [f"    const float16 wz = {wz};"]
    for t in range(taps):
        lines.append(f"    const float16 w{t} = convert_float16(vload16({t}, wc)) - wz;")
    lines.append("    float16 " + ", ".join(f"a{p} = 0" for p in range(px)) + ";")
    for ky in range(geo.kh):
        for kx in range(geo.kw):
            t = ky * geo.kw + kx
            for p in range(px):
                lines.append(f"    a{p} = fma(vload16({geo.tap(ky, kx) + p}, xb), w{t}, a{p});")
    if transposed:
        first = f"min(xi * {px}, {wo - px})"
        stores = _transposed_stores(ctx, geo, px, whole, epilogue, channel_epilogue)
    else:
        first = f"xi * {px}"
        stores = channel_lane_stores(ctx, geo, [f"convert_int16(a{p})" for p in range(px)], whole, epilogue,
                                     channel_epilogue)
    body = "\n".join(lines + stores)
    src = f"""{interleave(ctype(y)) if transposed else ""}// {ctx.op_name} depthwise: {x} * {w} -> {y}
// strides {geo.sh}x{geo.sw}, dilations {geo.dh}x{geo.dw}; 16 channels (lanes) x {px} columns an item, in
// float (exact: integer products and sums below 2^24)
__kernel void KERNEL({q._params(ctx, "__global const float* restrict tmp0")}) {{
    const int xi = get_global_id(0), oy = get_global_id(1), z = get_global_id(2);
    const int ox0 = {first};
    if (xi * {px} >= {geo.wo} || oy >= {geo.ho}) return;
    const int b = z / {cb}, oc0 = (z % {cb}) * 16;
    const int nch = min(16, {c} - oc0);
    const __global float* xb = tmp0 + ((long)z * {geo.plane} + oy * {geo.sh * geo.wp} + ox0) * 16;
    const __global {wt}* wc = in1 + (long)(z % {cb}) * {taps * 16};
{body}
}}
"""
    main = channel_lane_kernel(ctx, src, geo, px, geo.n * cb)
    low = Lowered([_repack(ctx, geo, cb), main], scratch=[4 * 16 * geo.n * cb * geo.plane],
                  schedule={"depthwise": 3, "cols": px})
    # [C, 1, KH, KW] -> [ceil(C / 16), KH, KW, 16]
    low.pack[1] = PackSpec((0,), (16,), reshape=(c, geo.kh, geo.kw))
    low.flops_kernel = 1
    return low


@space("qconv2d", "conv2d_integer")
def depthwise_space(ctx: Ctx, default: Lowered) -> Space | None:
    """The integer depthwise conv (one output channel an input channel): the kernel (3: channels in the
    lanes, 2: the band of rows), the lanes kernel's columns an item, the band kernel's rows an item; the
    tuner corrects the default's rule (rows of 8 columns or fewer) on a CPU where it is off. Other integer
    convs have no space."""
    chosen = default.schedule
    kind = chosen.get("depthwise")
    x, w = ctx.operands[:2]
    if kind not in (2, 3) or w.dims[0] != x.dims[1]:
        return None
    wo = ctx.results[0].dims[3]
    cols = tuple(p for p in (4, 8, 16) if p <= wo) or (wo,)
    if kind == 3:
        return Space("qconv2d-depthwise/1", [Knob("cols", around(int(chosen["cols"]), 1, 16, cols),
                                                  "output columns an item (16 channels in the lanes)")],
                     {"cols": chosen["cols"]}, extra=[{"depthwise": 2, "rows": r} for r in (2, 4)])
    rows = around(int(chosen["rows"]), 1, min(8, ctx.results[0].dims[2]), (1, 2, 4, 8))
    return Space("qconv2d-depthwise/1", [Knob("rows", rows, "output rows an item (16 columns in the lanes)")],
                 {"rows": chosen["rows"]}, extra=[{"depthwise": 3, "cols": c} for c in cols])
