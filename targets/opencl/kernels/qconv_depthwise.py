"""The integer depthwise conv (one input channel a group) in float arithmetic, exact.

Each product (x - x_zero_point)(w - w_zero_point) is an integer of at most 255 * 255 in magnitude, so
float32 holds it and every partial sum of up to 258 of them (below 2^24) exactly: for a depthwise conv of
at most 256 taps the f32 FMAs give the i32 accumulator to the bit, at one FMA a product where the
integer kernel (qlinear's pixel lanes) widens to i32 and multiplies with `vpmulld` (two uops).

The input is read padded and phase-split (rows of wq positions a phase, so a tap's inputs for consecutive
output columns are consecutive for any stride). Each work-item computes 16 output columns (the lanes) by
`rows` output rows of one output channel: each input row a tap reads is loaded once per column offset
(kx) and multiply-added into every output row that uses it, the weights (w - w_zero_point) scalars; a row
of 16 columns or more ends with a vector overlapping the one before, so every store is whole.

Rows of up to 128 columns (`depthwise=2`, the default): one kernel, a work-group a band of rows of one
channel across the whole width, whose items first fill local memory with the band's inputs as floats
less x_zero_point (0 in the padding; 16 bytes at a time, stride 2 splitting 32 bytes into phases), meet
at the barrier, then compute from there: no repack launch, each input converted once. Wider rows (and
`depthwise=1`): a first kernel copies x as it is (8-bit) into a padded, phase-split scratch plane per
channel, the padding holding x_zero_point, and the main kernel converts each row it loads.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from typing import Any

from .base import Ctx, Kernel, Lowered, NotLowerable, ctype
from .fused_chain import LANES
from .gemm import Epilogue
from .qconv_depthwise_lanes import conv_depthwise_lanes, lanes_pay  # and the integer depthwise space
from .shuffles import EVENS

MAX_TAPS = 256  # 256 * 255 * 255 < 2^24: the f32 sums stay exact


def fits(ctx: Ctx) -> bool:
    """One input channel a group, at most MAX_TAPS taps (schedule `depthwise`: 0 keeps the integer
    kernel)."""
    w = ctx.operands[1]
    return (w.dims[1] == 1 and w.dims[2] * w.dims[3] <= MAX_TAPS
            and bool(int(ctx.schedule.get("depthwise", 1))))


def _chunk(sw: int) -> str:
    """16 consecutive positions of a phase as one vector from `src + ix0`: a 16-byte load at stride 1,
    the even lanes of a 32-byte load at stride 2, none otherwise ('')."""
    if sw == 1:
        return "vload16(0, src + ix0)"
    if sw == 2:  # shuffles.EVENS' macro, which the kernel's source defines (`_macros`)
        return "KERNEL_EVENS(vload16(0, src + ix0), vload16(0, src + ix0 + 16))"
    return ""


def _macros(sw: int) -> str:
    """The definitions `_chunk`'s loads use."""
    return EVENS if sw == 2 else ""


def _repack(ctx: Ctx, g: Any, hp: int) -> Kernel:
    """x into tmp0 [N * C, hp, wp] (its type), padded with x_zero_point, each row in `sw` phases of wq:
    phase p's position j holds x[j * sw + p - pl]. A work-item fills one padded row: per phase, the
    positions whose inputs lie inside the row 16 at a time (a 16-byte load, or for stride 2 a 32-byte load
    and a shuffle of its even lanes), the rest one at a time."""
    xt = ctype(ctx.operands[0])
    sw, wq, wd, pl = g.sw, g.wq, g.wd, g.pl
    chunk = _chunk(sw)
    span = 16 * sw  # the inputs a chunk reads
    vector = f"""            for (; j + 16 <= hi && (j * {sw} + ph - {pl}) + {span} <= {wd}; j += 16) {{
                const int ix0 = j * {sw} + ph - {pl};
                vstore16({chunk}, 0, dst + j);
            }}
""" if chunk else ""
    src = _macros(sw) + f"""// {ctx.op_name} input padded with its zero point to {hp}x{g.wp}, {sw} phases of
// {wq} a row
__kernel void KERNEL(__global const {xt}* restrict in0, __global const {xt}* restrict in2,
                     __global {xt}* restrict tmp0) {{
    const int yp = get_global_id(0), nc = get_global_id(1);
    if (yp >= {hp}) return;
    const int iy = yp - {g.pt};
    const {xt} xz = in2[0];
    const __global {xt}* src = in0 + ((long)nc * {g.h} + iy) * {wd};
    __global {xt}* row = tmp0 + ((long)nc * {hp} + yp) * {g.wp};
    if (iy < 0 || iy >= {g.h}) {{
        for (int q = 0; q < {g.wp}; q += 16) {{
            if (q + 16 <= {g.wp}) vstore16(({xt}16)(xz), 0, row + q);
            else for (int k = q; k < {g.wp}; ++k) row[k] = xz;
        }}
        return;
    }}
    for (int ph = 0; ph < {sw}; ++ph) {{
        __global {xt}* dst = row + ph * {wq};
        // positions lo..hi - 1 read inside the row: j * sw + ph - pl in [0, wd)
        const int lo = min({wq}, ({pl} - ph + {sw - 1}) / {sw});
        const int hi = max(lo, min({wq}, ({wd} + {pl} - ph + {sw - 1}) / {sw}));
        for (int j = 0; j < lo; ++j) dst[j] = xz;
        int j = lo;
{vector}            for (; j < hi; ++j) dst[j] = src[j * {sw} + ph - {pl}];
        for (j = hi; j < {wq}; ++j) dst[j] = xz;
    }}
}}
"""
    ly = min(hp, 16)
    return Kernel(src, (math.ceil(hp / ly) * ly, g.n * g.c), (ly, 1), ("in0", "in2", "tmp0"))


def _taps(ctx: Ctx, geo: Any, rows: int, load: Any) -> list[str]:
    """The main loop: the weights as float scalars, `rows` float16 accumulators, each input row a tap
    reads loaded once per column offset (`load(offset)`: the float16 of x - x_zero_point at that offset
    from the item's first input) and multiply-added into every output row that uses it."""
    lines = []
    for ky in range(geo.kh):
        for kx in range(geo.kw):
            lines.append(f"    const float w{ky}_{kx} = (float)((int)wc[{ky * geo.kw + kx}] - wz);")
    lines.append("    float16 " + ", ".join(f"a{r} = 0" for r in range(rows)) + ";")
    for i in range((rows - 1) * geo.sh + (geo.kh - 1) * geo.dh + 1):
        offsets = [(r, i - r * geo.sh) for r in range(rows)]
        uses = [(r, d // geo.dh) for r, d in offsets if d >= 0 and d % geo.dh == 0 and d // geo.dh < geo.kh]
        if not uses:
            continue
        for kx in range(geo.kw):
            lines.append(f"    {{ const float16 v = {load(i * geo.wp + geo.tap(0, kx))};")
            lines += [f"      a{r} = fma(v, (float16)(w{ky}_{kx}), a{r});" for r, ky in uses]
            lines.append("    }")
    return lines


def _stores(ctx: Ctx, geo: Any, rows: int, epilogue: Epilogue | None) -> list[str]:
    """Each accumulator row requantized and stored, through `epilogue` where a `kernel` region has one:
    16 bytes (rows of 16 columns or more: a row's last vector overlaps the one before, `first_column`), or
    lane by lane in a narrower row (the lanes past its end are no positions of the row)."""
    from . import qlinear as q

    yt = ctype(ctx.results[0])
    lines = []
    for r in range(rows):
        val = q._requant(ctx, f"convert_int16(a{r})", 16, "oc")
        at = f"((long)(b * {geo.m} + oc) * {geo.ho} + oy0 + {r}) * {geo.wo} + ox0"
        out = f"out0 + {at}"
        if geo.wo >= 16:
            val = q.stored(val, at, 16, epilogue)
            store = "vstore16(v, 0, o);"
        elif epilogue is not None and geo.wo >= 4:
            store = _narrow_row(geo.wo, at, epilogue)
        else:
            store = "\n        ".join(f"o[{j}] = {q.stored(f'v.s{LANES[j]}', f'{at} + {j}', 1, epilogue)};"
                                      for j in range(geo.wo))
        lines.append(f"""    if (oy0 + {r} < {geo.ho}) {{
        const {yt}16 v = {val};
        __global {yt}* o = {out};
        {store}
    }}""")
    return lines


def _narrow_row(wo: int, at: str, epilogue: Epilogue) -> str:
    """A row of 4 to 15 columns through the epilogue: two vectors of 8 (4 under 8 columns), the first from
    the row's start and the second ending at its end (overlapping: each lane a real position, as the
    epilogue's operand reads need, and the overlap written twice with the same values). Lane by lane, the
    epilogue had cost ShuffleNet's 14x14 depthwise convs 12x their time (its per-lane index arithmetic
    and scalar division)."""
    from . import qlinear as q

    w = 8 if wo >= 8 else 4
    lo = q.stored(f"v.s{LANES[:w]}", at, w, epilogue)
    hi = q.stored(f"v.s{LANES[wo - w:wo]}", f"{at} + {wo - w}", w, epilogue)
    return f"vstore{w}({lo}, 0, o);\n        vstore{w}({hi}, 0, o + {wo - w});"


def first_column(geo: Any) -> str:
    """The item's first output column: 16 a vector, the last vector of a row of 16 columns or more ending
    at the row's end (overlapping the one before: its columns are computed twice, every store whole)."""
    return f"min((int)get_global_id(0) * 16, {geo.wo - 16})" if geo.wo >= 16 else "0"


def _band_rows(ctx: Ctx, geo: Any, rows: int, lx: int) -> int:
    """Row blocks (of `rows` output rows) a work-group of the band kernel: up to 16 // lx items, fewer
    where the band of input rows would not fit half the device's local memory; 0 when one block does not."""
    ly = max(1, min(math.ceil(geo.ho / rows), 16 // lx))
    while ly:
        band = ((ly * rows - 1) * geo.sh + (geo.kh - 1) * geo.dh + 1) * geo.wp * 4
        if band <= ctx.device.local_mem_size // 2:
            return ly
        ly -= 1
    return 0


def _band_load(ctx: Ctx, geo: Any, rin: int) -> str:
    """The fill of the band kernel's work-group (before its one barrier, a self-contained block, so
    that cooperative execution runs it as a phase of its own): its items fill the band (`rin` padded input
    rows from row `yb`) with x - x_zero_point as floats, 0 in the padding, each row in `sw` phases of wq:
    16 inputs at a time where they lie inside the row (a 16-byte load; stride 2: 32 bytes, their even
    lanes), the rest one at a time."""
    xt = ctype(ctx.operands[0])
    sw, wq, wd, pl = geo.sw, geo.wq, geo.wd, geo.pl
    chunk = _chunk(sw)
    conv = "convert_float16(as_char16(c)) - xz" if xt == "char" else "convert_float16(c) - xz"
    vector = f"""            for (; j + 16 <= hi && (j * {sw} + ph - {pl}) + {16 * sw} <= {wd}; j += 16) {{
                const int ix0 = j * {sw} + ph - {pl};
                const uchar16 c = as_uchar16({chunk});
                vstore16({conv}, 0, dst + j);
            }}
""" if chunk else ""
    return f"""    for (int r = lid; r < {rin}; r += nthreads) {{
        const int iy = yb + r - {geo.pt};
        __local float* row = band + r * {geo.wp};
        if (iy < 0 || iy >= {geo.h}) {{
            for (int q = 0; q < {geo.wp}; q += 16) {{
                if (q + 16 <= {geo.wp}) vstore16((float16)(0.0f), 0, row + q);
                else for (int k = q; k < {geo.wp}; ++k) row[k] = 0.0f;
            }}
            continue;
        }}
        const __global {xt}* src = xp + (long)iy * {wd};
        for (int ph = 0; ph < {sw}; ++ph) {{
            __local float* dst = row + ph * {wq};
            const int lo = min({wq}, ({pl} - ph + {sw - 1}) / {sw});
            const int hi = max(lo, min({wq}, ({wd} + {pl} - ph + {sw - 1}) / {sw}));
            for (int j = 0; j < lo; ++j) dst[j] = 0.0f;
            int j = lo;
{vector}            for (; j < hi; ++j) dst[j] = (float)src[j * {sw} + ph - {pl}] - xz;
            for (j = hi; j < {wq}; ++j) dst[j] = 0.0f;
        }}
    }}
"""


def conv_depthwise(ctx: Ctx, epilogue: Epilogue | None = None,
                   channel_epilogue: Epilogue | None = None) -> Lowered:
    """schedule `depthwise`: 3 (default where its lanes pay, qconv_depthwise_lanes.py) 16 channels in the
    lanes, 2 (default elsewhere where the band fits local memory) the band kernel, 1 the repack launch and
    the main kernel reading its scratch; `rows` output rows an item (1..8)."""
    from . import qlinear as q

    kind = int(ctx.schedule.get("depthwise", 3 if lanes_pay(ctx) else 2))
    if kind == 3:
        return conv_depthwise_lanes(ctx, epilogue, channel_epilogue)
    rows = int(ctx.schedule.get("rows", 4))
    if not 1 <= rows <= 8:
        raise NotLowerable(f"'{ctx.op_name}' schedule rows={rows} (1..8)")
    geo = q._geo(ctx, 16)
    rows = min(rows, geo.ho)
    lx = math.ceil(geo.wo / 16)  # the band's items cover the whole width
    if kind == 2 and lx <= 8 and _band_rows(ctx, geo, rows, lx):
        return _conv_band(ctx, geo, rows, lx, epilogue)
    return _conv_repacked(ctx, geo, rows, epilogue)


def _conv_band(ctx: Ctx, geo: Any, rows: int, lx: int, epilogue: Epilogue | None) -> Lowered:
    """One work-group a band of `ly * rows` output rows of one channel (the whole width in `lx` items of
    16 columns): its items first load the band's input rows into local memory as floats less the zero
    point (padding 0), then each computes its 16 columns x `rows` rows from there. No repack launch and
    no scratch; each input is converted once, where the repacked kernel converted it once a column tap."""
    from . import qlinear as q

    x, w = ctx.operands[:2]
    y = ctx.results[0]
    groups = int(ctx.attr("groups"))
    og = w.dims[0] // groups
    ly = _band_rows(ctx, geo, rows, lx)
    br = ly * rows  # output rows a band
    rin = (br - 1) * geo.sh + (geo.kh - 1) * geo.dh + 1
    bands = math.ceil(geo.ho / br)
    planes = geo.n * geo.m  # (several channels a work-group, each its own band, measured slower)
    xt, wt = ctype(x), ctype(w)
    body = "\n".join(_taps(ctx, geo, rows, lambda off: f"vload16(0, xb + {off})"))
    src = f"""{_macros(geo.sw)}// {ctx.op_name} depthwise: {x} * {w} -> {y}
// strides {geo.sh}x{geo.sw}, dilations {geo.dh}x{geo.dw}, groups {groups}; a work-group a band of {br} rows
// of a channel loaded into local memory as floats, 16 columns (lanes) x {rows} rows an item (exact: integer
// products and sums below 2^24)
__kernel void KERNEL({q._params(ctx, f"__global const {xt}* restrict in0")}) {{
    __local float band[{rin * geo.wp}];
    {{  // the fill (self-contained, so that cooperative execution can run it as a phase of its own)
        const int lid = get_local_id(1) * {lx} + get_local_id(0), nthreads = {lx * ly};
        const int z = get_global_id(2), b = z / {geo.m}, oc = z % {geo.m};
        const float xz = (float)in2[0];
        const int yb = get_group_id(1) * {br * geo.sh};
        const __global {xt}* xp = in0 + ((long)b * {geo.c} + oc / {og}) * {geo.h * geo.wd};
{textwrap.indent(_band_load(ctx, geo, rin), "    ")}    }}
    barrier(CLK_LOCAL_MEM_FENCE);
    const int ox0 = {first_column(geo)}, z = get_global_id(2);
    const int oy0 = get_group_id(1) * {br} + get_local_id(1) * {rows};
    if (oy0 >= {geo.ho}) return;
    const int b = z / {geo.m}, oc = z % {geo.m};
    const int wz = (int)in3[{"oc" if ctx.operands[3].numel > 1 else "0"}];
    const __local float* xb = band + get_local_id(1) * {rows * geo.sh * geo.wp} + ox0;
    const __global {wt}* wc = in1 + oc * {geo.kh * geo.kw};
{body}
{chr(10).join(_stores(ctx, geo, rows, epilogue))}
}}
"""
    grid = (lx, bands * ly, planes)
    main = Kernel(src, grid, (lx, ly, 1), tuple(f"in{i}" for i in range(len(ctx.operands))) + ("out0",))
    return Lowered([main], schedule={"depthwise": 2, "rows": rows})


def _conv_repacked(ctx: Ctx, geo: Any, rows: int, epilogue: Epilogue | None) -> Lowered:
    from . import qlinear as q

    x, w = ctx.operands[:2]
    y = ctx.results[0]
    groups = int(ctx.attr("groups"))
    og = w.dims[0] // groups
    rb = math.ceil(geo.ho / rows)
    hp = max(geo.hp, (rb * rows - 1) * geo.sh + (geo.kh - 1) * geo.dh + 1)
    geo = dataclasses.replace(geo, hp=hp)
    xt, wt = ctype(x), ctype(w)
    lines = _taps(ctx, geo, rows, lambda off: f"convert_float16(vload16(0, xb + {off})) - xz")
    lines += _stores(ctx, geo, rows, epilogue)
    body = "\n".join(lines)
    src = f"""// {ctx.op_name} depthwise: {x} * {w} -> {y}
// strides {geo.sh}x{geo.sw}, dilations {geo.dh}x{geo.dw}, groups {groups}; 16 columns (lanes) x {rows}
// rows an item, in float (exact: integer products and sums below 2^24)
__kernel void KERNEL({q._params(ctx, f"__global const {xt}* restrict tmp0")}) {{
    const int ox0 = {first_column(geo)}, oy0 = get_global_id(1) * {rows}, z = get_global_id(2);
    if (get_global_id(0) * 16 >= {geo.wo} || oy0 >= {geo.ho}) return;
    const int b = z / {geo.m}, oc = z % {geo.m};
    const float xz = (float)in2[0];
    const int wz = (int)in3[{"oc" if ctx.operands[3].numel > 1 else "0"}];
    const __global {xt}* xb = tmp0 + ((long)b * {geo.c} + oc / {og}) * {geo.plane}
                              + oy0 * {geo.sh * geo.wp} + ox0;
    const __global {wt}* wc = in1 + oc * {geo.kh * geo.kw};
{body}
}}
"""
    xb = math.ceil(geo.wo / 16)
    lx = min(xb, 4)
    ly = max(1, min(rb, 16 // lx))
    grid = (math.ceil(xb / lx) * lx, math.ceil(rb / ly) * ly, geo.n * geo.m)
    main = Kernel(src, grid, (lx, ly, 1), ("tmp0", *(f"in{i}" for i in range(1, len(ctx.operands))), "out0"))
    low = Lowered([_repack(ctx, geo, hp), main], scratch=[x.itemsize * geo.n * geo.c * geo.plane],
                  schedule={"depthwise": 1, "rows": rows})
    low.flops_kernel = 1
    return low
