"""The integer convs on the CPU's 8-bit dot product: x86's `vpdpbusd` (AVX-512 VNNI) sums, in each of 16
i32 lanes, four products of an unsigned byte and a signed byte: 64 multiply-adds an instruction, where the
16-bit `vpmaddwd` of qconv_pairs.py does 32 and an f32 FMA 16.

Operands. The unsigned side is the input as it lies: u = x for ui8 inputs, x + 128 (x ^ 0x80) for i8
ones, with `off` = its zero point in the same terms (x_zero_point, or + 128). The signed side is the
weight less its zero point, which must be a byte: i8 weights whose zero points are all 0, or ui8 weights
whose zero points are all 128 (w ^ 0x80); `fits` checks the constant zero points. Then

    sum (x - xz)(w - wz) = sum u w' - off sum w'

and the last sum is one more dot product per step, of the weights with `off` in every byte, left out
where x_zero_point is a constant 0 of an ui8 input (the activations after a ReLU). Padding and the inputs
of channels past the group's end hold `off`, and the weights of the missing channels are 0, so neither
adds anything.

Kernels. The channel-lane conv (`conv_quads`): a first kernel writes u with each four channels of a group
interleaved, [N, G, ceil(Cg / 4), Hp, Wp, 4] bytes (padded and phase-split as qlinear's repack); the
weights are packed at load time [G, ceil(og / 16), ceil(Cg / 4), KH, KW, 16, 4]: per channel quad and tap
one 64-byte load, and for each of the item's `px` output columns one broadcast 32-bit load of its inputs
and one `vpdpbusd`. The pointwise conv (`pointwise_quads`, unpadded stride-1 1x1): a GEMM over pixels,
the repack [N, G, ceil(Cg / 4), H * W, 4] (16 pixels' quads one 64-byte load) and the weights [G,
ceil(og / rows), ceil(Cg / 4), rows, 4] (a row's quad one broadcast).

The builtin needs its target feature, which PoCL's own CPU name may leave out (PoCL 3.1 targets a
Sapphire Rapids as skylake-avx512), so the loops live in a function given `target("avx512vnni")`, called
once a work-item (LLVM does not inline it into the kernel: their features differ). device.int8_dot says
whether a device has it; other devices keep qconv_pairs.py's kernels.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .base import Ctx, Kernel, Lowered, NotLowerable, PackSpec, ctype
from .gemm import Epilogue
from .qconv_pairs import GroupPanel, channel_lane_kernel, channel_lane_stores, in_group, pixel_gemm_stores

FEATURES = "avx512vnni"
PREAMBLE = f"""// acc + in each i32 lane the four products of u's unsigned and w's signed bytes (vpdpbusd)
__attribute__((target("{FEATURES}")))
static inline int16 KERNEL_dot4(int16 acc, int16 u, int16 w) {{
    return __builtin_ia32_vpdpbusd512(acc, u, w);
}}
"""


def _zero_points(ctx: Ctx) -> tuple[bool, int] | None:
    """(flip weights, weight zero point) when every weight less its zero point is a signed byte, else
    None: i8 weights with zero points all 0, or ui8 weights with zero points all 128."""
    w = ctx.operands[1]
    wz = ctx.value(3)
    if wz is None:
        return None
    if w.dtype == "i8" and not wz.any():
        return False, 0
    if w.dtype == "ui8" and (wz.astype(int) == 128).all():
        return True, 128
    return None


def _shifts(ctx: Ctx) -> tuple[bool, np.ndarray] | None:
    """Constant weight zero points that `_zero_points` refuses (a dynamically quantized model's ui8
    weights at 121): (flip the weights, shift per output channel) with w - w_zero_point = w' + shift, w'
    the signed byte (w - 128 for ui8, w for i8) and shift = (128 or 0) - w_zero_point; None when the
    zero points are not constants."""
    wz = ctx.value(3)
    if wz is None:
        return None
    flip = ctx.operands[1].dtype == "ui8"
    m = ctx.operands[1].dims[0]
    return flip, np.broadcast_to((128 if flip else 0) - wz.astype(np.int64).reshape(-1), (m,)).copy()


def fits(ctx: Ctx, any_zero_point: bool = False) -> bool:
    """The device has the dot product, the operands are 8-bit and the weights less their zero point are
    signed bytes, or `any_zero_point` (the matmul takes any) (schedule `quads`: 0 keeps the other
    kernels)."""
    if not int(ctx.schedule.get("quads", 1)) or not ctx.device.has(FEATURES):
        return False
    return ctx.operands[0].dtype in ("i8", "ui8") and (any_zero_point or _zero_points(ctx) is not None)


def _offset(ctx: Ctx) -> tuple[str, bool, bool]:
    """(C expression of `off`, x is i8 (its bytes flipped), the `off sum w'` term is needed)."""
    x = ctx.operands[0]
    signed = x.dtype == "i8"
    xz = ctx.value(2)
    needed = signed or xz is None or bool(xz.any())
    return ("((int)in2[0] + 128)" if signed else "(int)in2[0]"), signed, needed


def _flip(on: bool) -> str:
    return " ^ (int16)(0x80808080)" if on else ""


def _pixel_dots_head(x: str, w: str, rows: int, vcols: int,
                     panel: bool = False) -> tuple[list[list[str]], list[str]]:
    """The accumulator names c{row}_{vector} and the head of a pixel-lane kernel's dot-product function
    KERNEL_dots(x, w, off, p0.., acc), its accumulators declared; with `panel`, KERNEL_dots(x, w, off,
    acc), x a work-group's interleaved panel (no pixel offsets)."""
    accs = [[f"c{i}_{j}" for j in range(vcols)] for i in range(rows)]
    pixels = "" if panel else f", {', '.join(f'int p{j}' for j in range(vcols))}"
    body = [f"__attribute__((target(\"{FEATURES}\")))",
            f"static void KERNEL_dots(const __global int* restrict {x}, const __global int* restrict {w},",
            f"                        int off{pixels},",
            "                        int16* restrict acc) {"]
    body += [f"    int16 {', '.join(f'{c} = 0' for c in row)};" for row in accs]
    return accs, body


def _weight_sums(ptr: str, rows: int, total: int, flip_w: bool) -> list[str]:
    """off times the sum of each row's weight bytes w' (the input zero point's term), as s0..s{rows-1}:
    the block's `total` weight ints at `ptr` lie with the rows innermost, so a dot product of 16 of them
    with `off` in every byte sums lanes i, i + rows, ... into row i; a tail of fewer than 16 ints is
    assembled with the flip's neutral bytes."""
    whole = total // 16 * 16
    body = ["    const int16 o = (int16)(off * 0x01010101);", "    int16 s = 0;",
            f"    for (int k = 0; k < {whole}; k += 16)",
            f"        s = KERNEL_dot4(s, o, vload16(0, {ptr} + k){_flip(flip_w)});"]
    if total > whole:
        pad = "0x80808080" if flip_w else "0"
        body.append(f"    {{ int16 t = (int16)({pad});")
        for lo in range(0, total - whole, 4):
            body.append(f"      t.s{'0123456789abcdef'[lo:lo + 4]} = vload4(0, {ptr} + {whole + lo});")
        body.append(f"      s = KERNEL_dot4(s, o, t{_flip(flip_w)}); }}")
    for i in range(rows):
        lanes = "".join("0123456789abcdef"[k] for k in range(i, 16, rows))
        body.append(f"    const int s{i} = " + " + ".join(f"s.s{c}" for c in lanes) + ";")
    return body


def repack_quads(ctx: Ctx, g: Any, groups: int, cq: int) -> Kernel:
    """u = x (x ^ 0x80 for i8) with each four channels of a group interleaved, padded with `off` and
    phase-split (`g`: qlinear's Geo)."""
    xt = ctype(ctx.operands[0])
    off, signed, _ = _offset(ctx)
    cg = g.c // groups
    shape = f"[{g.n}][{groups}][{cq}][{g.hp}][{g.wp}][4]"
    flip = " ^ 0x80" if signed else ""
    chans = []
    for j in range(4):
        cond = "in" if j == 0 else f"in && 4 * pc + {j} < {cg}"
        chans.append(f"{cond} ? (uchar)(src[{j * g.h * g.wd} + ix]{flip}) : pad")
    src = f"""// {ctx.op_name} input as unsigned bytes, channel quads interleaved: {shape},
// {g.sw} phases a row
__kernel void KERNEL(__global const {xt}* restrict in0, __global const {xt}* restrict in2,
                     __global uchar* restrict tmp0) {{
    const int yp = get_global_id(0), z = get_global_id(1);
    if (yp >= {g.hp}) return;
    const int pc = z % {cq}, ng = z / {cq};
    const int c0 = (ng % {groups}) * {cg} + 4 * pc;
    const int iy = yp - {g.pt};
    const uchar pad = (uchar){off};
    const bool row = iy >= 0 && iy < {g.h};
    const __global {xt}* src = in0 + ((long)(ng / {groups}) * {g.c} + c0) * {g.h * g.wd} + (long)iy * {g.wd};
    __global uchar* dst = tmp0 + ((long)z * {g.hp} + yp) * {4 * g.wp};
    for (int q = 0; q < {g.wp}; ++q) {{
        const int ix = (q % {g.wq}) * {g.sw} + q / {g.wq} - {g.pl};
        const bool in = row && ix >= 0 && ix < {g.wd};
        vstore4((uchar4)({", ".join(chans)}), q, dst);
    }}
}}
"""
    ly = min(g.hp, 16)
    return Kernel(src, (math.ceil(g.hp / ly) * ly, g.n * groups * cq), (ly, 1), ("in0", "in2", "tmp0"))


def conv_quads(ctx: Ctx, px: int, epilogue: Epilogue | None = None,
               channel_epilogue: Epilogue | None = None) -> Lowered:
    """The channel-lane kernel: 16 output channels in the lanes, `px` output columns an item, input
    channels in quads (one dot product per quad, tap and column)."""
    from . import qlinear as q  # its helpers; qlinear chooses this kernel

    x, w = ctx.operands[:2]
    y = ctx.results[0]
    flip_w, wz = _zero_points(ctx) or (False, 0)
    off, _, needed = _offset(ctx)
    groups = int(ctx.attr("groups"))
    og = w.dims[0] // groups
    geo = q._geo(ctx, px)
    cq = math.ceil(geo.cg / 4)
    gb = math.ceil(og / 16)
    whole = og % 16 == 0
    taps = []
    for ky in range(geo.kh):
        for kx in range(geo.kw):
            t = ky * geo.kw + kx
            dots = " ".join(f"a{p} = KERNEL_dot4(a{p}, (int16)(xr[{geo.tap(ky, kx)} + {p}]), wv);"
                            for p in range(px))
            corr = "s = KERNEL_dot4(s, o, wv); " if needed else ""
            taps.append(f"        {{ const int16 wv = vload16({t}, wc){_flip(flip_w)}; {corr}{dots} }}")
    accs = ", ".join(f"a{p} = 0" for p in range(px))
    sums = "\n".join(f"    acc[{p}] = a{p}{' - s' if needed else ''};" for p in range(px))
    stores = channel_lane_stores(ctx, geo, [f"acc[{p}]" for p in range(px)], whole, epilogue,
                                 channel_epilogue)
    taps_n = geo.kh * geo.kw
    src = f"""{PREAMBLE}
// {ctx.op_name}: {x} * {w} -> {y}
// strides {geo.sh}x{geo.sw}, dilations {geo.dh}x{geo.dw}, groups {groups}
// 16 channels (lanes) x {px} columns an item, input channels in quads (8-bit dot products)
__attribute__((target("{FEATURES}")))
static void KERNEL_dots(const __global int* restrict xb, const __global int* restrict wb, int off,
                        int16* restrict acc) {{
    int16 {accs}, s = 0;
    const int16 o = (int16)(off * 0x01010101);
    for (int pc = 0; pc < {cq}; ++pc) {{
        const __global int* xr = xb + pc * {geo.plane};
        const __global int* wc = wb + pc * {taps_n * 16};
{chr(10).join(taps)}
    }}
{sums}
}}

__kernel void KERNEL({q._params(ctx, "__global const int* restrict tmp0")}) {{
    const int xi = get_global_id(0), oy = get_global_id(1), z = get_global_id(2);
    const int ox0 = xi * {px};
    if (ox0 >= {geo.wo} || oy >= {geo.ho}) return;
    const int b = z / {groups * gb}, grp = (z / {gb}) % {groups}, oc0 = grp * {og} + (z % {gb}) * 16;
    const int nch = min(16, {og} - (z % {gb}) * 16);
    int16 acc[{px}];
    KERNEL_dots(tmp0 + (long)(b * {groups} + grp) * {cq * geo.plane} + oy * {geo.sh * geo.wp} + ox0,
                (const __global int*)(in1) + (long)(grp * {gb} + z % {gb}) * {cq * taps_n * 16}, {off}, acc);
{chr(10).join(stores)}
}}
"""
    main = channel_lane_kernel(ctx, src, geo, px, geo.n * groups * gb)
    low = Lowered([repack_quads(ctx, geo, groups, cq), main], scratch=[4 * geo.n * groups * cq * geo.plane],
                  schedule={"lanes": 16, "cols": px, "quads": 1})
    # [O, Cg, KH, KW] -> [G, ceil(og / 16), ceil(Cg / 4), KH, KW, 16, 4], missing channels at the zero point
    low.pack[1] = PackSpec((1, 2), (16, 4), padding_value=float(wz),
                           reshape=(groups, og, geo.cg, geo.kh, geo.kw))
    low.flops_kernel = 1
    return low


def pixels_fit(ctx: Ctx) -> bool:
    """The pixel-lane conv (`conv_pixels`) where rows are at least 16 output columns wide: its stores are
    whole 16-byte vectors of one channel's row (a row's last vector overlaps the one before), where the
    channel-lane kernel stores each pixel's 16 channels one byte at a time into 16 planes, the larger
    cost on shallow convs (16-32 channels); it takes any constant weight zero point (`_shifts`);
    schedule `pixels`: 0 keeps the channel-lane kernel."""
    return (ctx.results[0].dims[3] >= 16 and bool(int(ctx.schedule.get("pixels", 1)))
            and fits(ctx, any_zero_point=True) and ctx.value(3) is not None)


def conv_pixels(ctx: Ctx, epilogue: Epilogue | None = None) -> Lowered:
    """The pixel-lane kernel: `rows` output channels x `vcols` vectors of 16 output columns of one row a
    work-item, input channels in quads: per quad and tap one 64-byte load of each column vector (16
    pixels' quads, consecutive in the phase-split repack for any stride), a broadcast of each channel's
    weight quad and a dot product for each pair; the stores are 16-byte vectors."""
    from . import qlinear as q  # its helpers; qlinear chooses this kernel

    x, w = ctx.operands[:2]
    y = ctx.results[0]
    signed = _zero_points(ctx)
    shifted = None if signed else _shifts(ctx)  # weights less their zero point past a signed byte
    flip_w, wz = signed or (shifted[0] if shifted else False, 0)
    shifts = shifted[1] if shifted else None
    off, _, needed = _offset(ctx)
    needed = needed or shifts is not None
    groups = int(ctx.attr("groups"))
    og = w.dims[0] // groups
    rows = int(ctx.schedule.get("rows", 8 if og >= 8 else 4))
    vcols = int(ctx.schedule.get("vcols", 2))
    if rows not in (4, 8) or not 1 <= vcols <= 4:
        raise NotLowerable(f"'{ctx.op_name}' schedule rows={rows} (4 or 8), vcols={vcols} (1..4)")
    geo = q._geo(ctx, 16)
    cq = math.ceil(geo.cg / 4)
    mb = math.ceil(og / rows)
    taps_n = geo.kh * geo.kw
    panels = math.ceil(geo.wo / 16)
    vcols = min(vcols, panels)
    accs, body = _pixel_dots_head("xr", "wc", rows, vcols)
    if shifts is not None:  # the input sums of each column vector (a dot product with ones)
        body.append(f"    int16 {', '.join(f'su{j} = 0' for j in range(vcols))};")
    if needed:  # off * sum w' of each row: a block's quads lie [cq][taps][rows]
        body += _weight_sums("wc", rows, rows * cq * taps_n, flip_w)
    body.append(f"    for (int pc = 0; pc < {cq}; ++pc, xr += {geo.plane}, wc += {taps_n * rows}) {{")
    for ky in range(geo.kh):
        for kx in range(geo.kw):
            t = ky * geo.kw + kx
            body.append("        {")
            for j in range(vcols):
                body.append(f"            const int16 x{j} = vload16(0, xr + {geo.tap(ky, kx)} + p{j});")
                if shifts is not None:
                    body.append(f"            su{j} = KERNEL_dot4(su{j}, x{j}, (int16)(0x01010101));")
            for i in range(rows):
                dots = " ".join(f"{c} = KERNEL_dot4({c}, x{j}, wv);" for j, c in enumerate(accs[i]))
                body.append(f"            {{ const int16 wv = (int16)(wc[{t * rows + i}]"
                            f"{' ^ 0x80808080' if flip_w else ''}); {dots} }}")
            body.append("        }")
    body.append("    }")
    n_all = 4 * cq * taps_n  # the sums' terms, padding included (its x - x_zero_point is 0)
    for i in range(rows):
        for j in range(vcols):
            fix = f" + sh{i} * (su{j} - {n_all} * off)" if shifts is not None else ""
            body.append(f"    acc[{i * vcols + j}] = {accs[i][j]}{f' - s{i}' if needed else ''}{fix};")
    body.append("}")
    if shifts is not None:  # sum (x - xz)(w' + shift) = sum x w' - off sum w' + shift (sum x - n off)
        table = ("" if (shifts == shifts[0]).all() else
                 f"__constant int KERNEL_shift[{len(shifts)}] = {{{', '.join(map(str, shifts))}}};")
        params = "int off, " + ", ".join(f"int p{j}" for j in range(vcols))
        at = body.index(f"                        int off, {', '.join(f'int p{j}' for j in range(vcols))},")
        body[at] = f"                        {params}, int o0,"
        last = len(shifts) - 1
        first = next(k for k, line in enumerate(body) if line.startswith("    int16 c0_0"))
        body[first:first] = [f"    const int sh{i} = "
                             + (f"KERNEL_shift[min(o0 + {i}, {last})];" if table else f"{int(shifts[0])};")
                             for i in range(rows)]
        if table:
            body[:0] = [table]

    yt = ctype(y)
    stores = []
    for i in range(rows):
        guard = f"o0 + {i} < {og}" if og % rows else ""
        for j in range(vcols):
            at = f"(((long)b * {geo.m} + grp * {og} + o0 + {i}) * {geo.ho} + oy) * {geo.wo} + p{j}"
            # a row's last vector overlaps the one before (whole stores): every lane a real position
            val = q.stored(q._requant(ctx, f"acc[{i * vcols + j}]", 16, f"grp * {og} + o0 + {i}"), at, 16,
                           epilogue)
            at = f"out0 + {at}"
            cond = " && ".join(c for c in (guard, f"q{j} < {panels}") if c)
            stores.append(f"    if ({cond}) {{ const {yt}16 v = {val}; vstore16(v, 0, {at}); }}")
    lines = [PREAMBLE,
             f"// {ctx.op_name}: {x} * {w} -> {y}",
             f"// strides {geo.sh}x{geo.sw}, dilations {geo.dh}x{geo.dw}, groups {groups}; {rows} output",
             f"// channels x {vcols} vectors of 16 columns (lanes) an item, input channels in quads",
             "// (8-bit dot products)",
             *body, "",
             f"__kernel void KERNEL({q._params(ctx, '__global const int* restrict tmp0')}) {{",
             "    const int nw = get_global_id(0), oy = get_global_id(1), z = get_global_id(2);",
             f"    if (nw * {vcols} >= {panels} || oy >= {geo.ho}) return;",
             f"    const int mb = z % {mb}, grp = (z / {mb}) % {groups}, b = z / {mb * groups};",
             f"    const int o0 = mb * {rows};"]
    for j in range(vcols):  # a row's last vector ends at its end (overlapping the one before)
        lines.append(f"    const int q{j} = nw * {vcols} + {j}, p{j} = min(q{j} * 16, {geo.wo - 16});")
    lines += [f"    int16 acc[{rows * vcols}];",
              f"    KERNEL_dots(tmp0 + (long)(b * {groups} + grp) * {cq * geo.plane}",
              f"                + oy * {geo.sh * geo.wp},",
              f"                (const __global int*)(in1) + (long)(grp * {mb} + mb) * {cq * taps_n * rows},",
              f"                {off},",
              f"                {', '.join(f'p{j}' for j in range(vcols))},"
              + (f" grp * {og} + o0," if shifts is not None else "") + " acc);",
              *stores, "}"]
    xg = math.ceil(panels / vcols)
    lx = min(xg, 8)
    ly = max(1, min(geo.ho, 16 // lx))
    grid = (math.ceil(xg / lx) * lx, math.ceil(geo.ho / ly) * ly, geo.n * groups * mb)
    main = Kernel("\n".join(lines) + "\n", grid, (lx, ly, 1),
                  ("tmp0", *(f"in{i}" for i in range(1, len(ctx.operands))), "out0"))
    low = Lowered([repack_quads(ctx, geo, groups, cq), main], scratch=[4 * geo.n * groups * cq * geo.plane],
                  schedule={"pixels": 1, "rows": rows, "vcols": vcols, "quads": 1})
    # [O, Cg, KH, KW] -> [G, ceil(og / rows), ceil(Cg / 4), KH, KW, rows, 4], missing channels at the zero
    # point
    low.pack[1] = PackSpec((1, 2), (rows, 4), padding_value=float(wz),
                           reshape=(groups, og, geo.cg, geo.kh, geo.kw))
    low.flops_kernel = 1
    return low


def _quad_loads(ctx: Ctx, cg: int, hw: int, pc: str) -> tuple[str, str]:
    """(vector, scalar) C expressions of u for channel quad `pc` of a group read from `src` (its first
    channel's plane): 16 pixels from `p0` as one uint16 (4 bytes a pixel, the quad's channels in order),
    and pixel `p` as one uint; a channel past the group's end holds `pad`."""
    signed = ctx.operands[0].dtype == "i8"
    flip = " ^ (uchar16)(0x80)" if signed else ""
    loads, scalars = [], []
    for j in range(4):
        have = "" if j == 0 else f"4 * {pc} + {j} < {cg} ? "
        tail = "" if j == 0 else " : (uint16)(pad)"
        loads.append(f"({have}convert_uint16(as_uchar16(vload16(0, src + {j * hw} + p0)){flip}){tail})"
                     + (f" << {8 * j}" if j else ""))
        tail1 = "" if j == 0 else " : pad"
        scalars.append(f"(({have}(uint)(uchar)(src[{j * hw} + p]{' ^ 0x80' if signed else ''}){tail1})"
                       f" << {8 * j})")
    return " | ".join(loads), " | ".join(scalars)


def repack_pixels(ctx: Ctx, groups: int, cq: int) -> Kernel:
    """u = x (x ^ 0x80 for i8), each four channels of a group interleaved pixel by pixel: [N, G, cq, H * W,
    4] bytes, 16 pixels an item (a channel past the group's end holds `off`)."""
    x = ctx.operands[0]
    xt = ctype(x)
    off, _, _ = _offset(ctx)
    n, c, h, wd = x.dims
    hw, cg = h * wd, c // groups
    vector, scalar = _quad_loads(ctx, cg, hw, "pc")
    src = f"""// {ctx.op_name} input as unsigned bytes, channel quads interleaved:
// [{n}][{groups}][{cq}][{hw}][4]
__kernel void KERNEL(__global const {xt}* restrict in0, __global const {xt}* restrict in2,
                     __global uint* restrict tmp0) {{
    const int pv = get_global_id(0), z = get_global_id(1);
    const int p0 = pv * 16;
    if (p0 >= {hw}) return;
    const int pc = z % {cq}, ng = z / {cq};
    const uint pad = (uint)(uchar){off};
    const __global {xt}* src = in0 + ((long)(ng / {groups}) * {c} + (ng % {groups}) * {cg} + 4 * pc) * {hw};
    __global uint* dst = tmp0 + (long)z * {hw};
    if (p0 + 16 <= {hw}) {{
        vstore16({vector}, 0, dst + p0);
        return;
    }}
    for (int p = p0; p < {hw}; ++p)
        dst[p] = {scalar};
}}
"""
    panels = math.ceil(hw / 16)
    lx = min(panels, 16)
    return Kernel(src, (math.ceil(panels / lx) * lx, n * groups * cq), (lx, 1), ("in0", "in2", "tmp0"))


def pointwise_quads(ctx: Ctx, epilogue: Epilogue | None = None) -> Lowered:
    """A 1x1 integer conv as a GEMM over pixels: `rows` output channels x `vcols` vectors of 16 pixels a
    work-item; per channel quad one 64-byte load of each pixel vector, a broadcast of each row's weight
    quad and a dot product for each pair; stores as qconv_pairs.pointwise_pairs.

    By default (`_in_group`) a work-group is the output-channel blocks of one panel of `vcols` pixel
    vectors, whose items first interleave the panel's channel quads from x as it lies (16 pixels of 4
    channels a store) into the work-group's own slice of scratch, meet at a barrier, then compute from it
    while it is in cache: one launch where a repack launch a conv had cost mobilenet_v2 int8 34 of its
    97 launches. (The slice is global memory: PoCL 3.1 passes a `__local` pointer to the dot product's
    function, which its target feature keeps from being inlined, as garbage.) Otherwise a first kernel
    writes the whole repack to scratch (`repack_pixels`)."""
    from . import qlinear as q

    x, w = ctx.operands[:2]
    y = ctx.results[0]
    flip_w, wz = _zero_points(ctx) or (False, 0)
    off, _, needed = _offset(ctx)
    groups = int(ctx.attr("groups"))
    cg = w.dims[1]
    og = w.dims[0] // groups
    n, hw = x.dims[0], x.dims[2] * x.dims[3]
    cq = math.ceil(cg / 4)
    rows = int(ctx.schedule.get("rows", 8 if og >= 8 else 4))
    vcols = int(ctx.schedule.get("vcols", 2))
    if rows not in (4, 8) or not 1 <= vcols <= 4:
        raise NotLowerable(f"'{ctx.op_name}' schedule rows={rows} (4 or 8), vcols={vcols} (1..4)")
    panels, mb = math.ceil(hw / 16), math.ceil(og / rows)
    local = in_group(ctx)
    accs, body = _pixel_dots_head("xp", "wp", rows, vcols, local)
    if needed:  # off * sum w' of each row: the rows' quads lie [cq][rows]
        body += _weight_sums("wp", rows, rows * cq, flip_w)
    step = vcols * 16 if local else hw
    body.append(f"    for (int pc = 0; pc < {cq}; ++pc, xp += {step}, wp += {rows}) {{")
    for j in range(vcols):
        at = f"{j}, xp" if local else f"0, xp + p{j}"
        body.append(f"        const int16 x{j} = vload16({at});")
    for i in range(rows):
        body.append(f"        {{ const int16 wv = (int16)(wp[{i}]{' ^ 0x80808080' if flip_w else ''}); "
                    + " ".join(f"{c} = KERNEL_dot4({c}, x{j}, wv);" for j, c in enumerate(accs[i])) + " }")
    body.append("    }")
    for i in range(rows):
        for j in range(vcols):
            body.append(f"    acc[{i * vcols + j}] = {accs[i][j]}{f' - s{i}' if needed else ''};")
    body.append("}")

    first = "__global const int* restrict tmp0"
    if local:
        first = f"__global int* restrict tmp0, __global const {ctype(x)}* restrict in0"
    lines = [PREAMBLE,
             f"// {ctx.op_name} 1x1: {x} * {w} -> {y}, groups {groups}, as a GEMM over pixels: {rows} output",
             f"// channels x {vcols} vectors of 16 pixels an item, input channels in quads (8-bit dot "
             "products)" + ("; a work-group interleaves its pixels' quads" if local else ""),
             *body, "",
             f"__kernel void KERNEL({q._params(ctx, first)}) {{"]
    panel = GroupPanel(mb, panels, vcols, cq)
    items, at_slice = panel.items, panel.at
    if local:
        vector, _ = _quad_loads(ctx, cg, hw, "pc")
        lines += ["    {  // the fill (self-contained, so that cooperative execution can run it as a phase)",
                  f"        __global uint* xl = (__global uint*)tmp0 + {at_slice};",
                  "        const int lid = get_local_id(0), nw = get_global_id(1), b = get_global_id(2);",
                  f"        const uint pad = (uint)(uchar){off};",
                  f"        const __global {ctype(x)}* xs = in0 + ((long)(b / {groups}) * {x.dims[1]}"
                  f" + (b % {groups}) * {cg}) * {hw};",
                  f"        for (int pc = lid; pc < {cq}; pc += {items}) {{",
                  f"            const __global {ctype(x)}* src = xs + (long)4 * pc * {hw};"]
        for j in range(vcols):
            lines += [f"            {{ const int p0 = min((nw * {vcols} + {j}) * 16, {hw - 16});",
                      f"              vstore16({vector}, 0, xl + (pc * {vcols} + {j}) * 16); }}"]
        lines += ["        }", "    }", "    barrier(CLK_GLOBAL_MEM_FENCE);"]
    lines += ["    const int mb = get_global_id(0), nw = get_global_id(1), b = get_global_id(2);",
              f"    if (mb >= {mb}) return;",
              f"    const int grp = b % {groups}, o0 = mb * {rows};"]
    for j in range(vcols):
        lines.append(f"    const int q{j} = nw * {vcols} + {j}, p{j} = min(q{j} * 16, {hw - 16});")
    wptr = f"(const __global int*)(in1) + (long)(grp * {mb} + mb) * {cq * rows}, {off}"
    lines.append(f"    int16 acc[{rows * vcols}];")
    if local:
        lines.append(f"    KERNEL_dots(tmp0 + {at_slice}, {wptr}, acc);")
    else:
        lines += [f"    KERNEL_dots(tmp0 + (long)b * {cq * hw},", f"                {wptr},",
                  f"                {', '.join(f'p{j}' for j in range(vcols))}, acc);"]

    results = [[f"acc[{i * vcols + j}]" for j in range(vcols)] for i in range(rows)]
    lines += pixel_gemm_stores(ctx, og, hw, vcols, results, epilogue)
    lines.append("}")
    low = panel.lowered(ctx, "\n".join(lines) + "\n", n * groups, local,
                        lambda: repack_pixels(ctx, groups, cq), 4 * n * groups * cq * hw,
                        {"pointwise": 1, "rows": rows, "vcols": vcols, "quads": 1,
                         "group_repack": int(local)})
    # [O, Cg, 1, 1] -> [G, ceil(og / rows), ceil(Cg / 4), rows, 4], missing channels at the zero point
    low.pack[1] = PackSpec((1, 2), (rows, 4), padding_value=float(wz), reshape=(groups, og, cg))
    return low


def matmul_quads(ctx: Ctx) -> Lowered:
    """The integer matmul: `rows` rows x 16 columns an item, k in quads. B is packed [.., ceil(N / 16),
    ceil(K / 4), 16, 4] (a quad of a block: one 64-byte load), each row's four bytes of A one broadcast
    32-bit load (the last, partial quad of a row assembled from its bytes, B's missing k at its zero
    point) and one dot product per row."""
    from . import qlinear as q

    a, bt = ctx.operands[:2]
    y = ctx.results[0]
    trivial = _zero_points(ctx) is not None  # B less its zero point is b itself (i8) or b ^ 0x80 (ui8)
    flip_b = bt.dtype == "ui8"
    off, signed, needed = _offset(ctx)
    mm, kk = a.dims[-2:]
    nn = bt.dims[-1]
    batch = y.dims[:-2]
    ob = int(ctx.schedule.get("rows", min(8, mm)))
    if ob < 1 or ob > 16:
        raise NotLowerable(f"'{ctx.op_name}' schedule rows={ob} must be in 1..16")
    nblk, mblk = math.ceil(nn / 16), math.ceil(mm / ob)
    kq, full = math.ceil(kk / 4), kk // 4
    at, flip_a = ctype(a), " ^ 0x80808080" if signed else ""
    rows = [f"r{r}" for r in range(ob)]
    body = [f"__attribute__((target(\"{FEATURES}\")))",
            f"static void KERNEL_dots(const __global {at}* restrict ar, int m0,",
            "                        const __global int* restrict bb, int off, int16* restrict acc,",
            "                        int* restrict su) {",
            # rows past the end read the last (their results are not stored)
            *(f"    const __global {at}* r{r} = ar + min(m0 + {r}, {mm - 1}) * {kk};" for r in range(ob))]
    if not trivial:  # each row's sum of u: 64 bytes a dot product with ones, the rest one at a time
        ones, tail = "(int16)(0x01010101)", f"(uchar)({'{p}[k] ^ 0x80' if signed else '{p}[k]'})"
        chunk = ", ".join(f"as_int4(vload16(0, {{p}} + k + {16 * i}))" for i in range(4))
        for r in range(ob):
            body += ["    { int16 t = 0; int k = 0;",
                     f"      for (; k + 64 <= {kk}; k += 64)",
                     f"          t = KERNEL_dot4(t, (int16)({chunk.format(p=rows[r])})"
                     f"{_flip(signed)}, {ones});",
                     "      int v = " + " + ".join(f"t.s{c}" for c in "0123456789abcdef") + ";",
                     f"      for (; k < {kk}; ++k) v += {tail.format(p=rows[r])};",
                     f"      su[{r}] = v; }}"]
    body += [
            "    " + "int16 " + ", ".join(f"a{r} = 0" for r in range(ob)) + ", s = 0;",
            "    const int16 o = (int16)(off * 0x01010101);",
            f"    for (int k = 0; k < {full}; ++k) {{",
            f"        const int16 bv = vload16(k, bb){_flip(flip_b)};",
            *(["        s = KERNEL_dot4(s, o, bv);"] if needed else []),
            *(f"        a{r} = KERNEL_dot4(a{r}, (int16)(as_int(vload4(k, {rows[r]})){flip_a}), bv);"
              for r in range(ob)),
            "    }"]
    if kq > full:  # the rows' last bytes, past them zeros (B's k there are at its zero point: 0 after all)
        left = kk - 4 * full
        body += ["    {", f"        const int16 bv = vload16({full}, bb){_flip(flip_b)};",
                 *(["        s = KERNEL_dot4(s, o, bv);"] if needed else [])]
        for r in range(ob):
            parts = " | ".join(f"((uint)(uchar)({rows[r]})[{4 * full + j}]{' ^ 0x80u' if signed else ''})"
                               + (f" << {8 * j}" if j else "") for j in range(left))
            body.append(f"        a{r} = KERNEL_dot4(a{r}, (int16)((int)({parts})), bv);")
        body.append("    }")
    body += [f"    acc[{r}] = a{r}{' - s' if needed else ''};" for r in range(ob)] + ["}"]
    store_acc = [f"acc[{r}]" for r in range(ob)]
    fix = []
    if not trivial:  # + (b's lane offset: 128 or 0, less its zero point) * (sum u - K off), per row
        bzv = q._channels("in3", ctx.operands[3], "int", 16, "n0", nn, nn % 16 == 0)
        fix = [f"    const int16 c = (int16)({128 if flip_b else 0}) - {bzv};"]
        store_acc = [f"acc[{r}] + c * (su[{r}] - {kk} * {off})" for r in range(ob)]
    src = "\n".join([
        PREAMBLE,
        f"// {ctx.op_name}: {a} x {bt} -> {y}",
        f"// {ob} rows x 16 columns an item, k in quads (8-bit dot products), B packed [N/16][K/4][16][4]",
        *body, "",
        f"__kernel void KERNEL({q._params(ctx, f'__global const {at}* restrict in0')}) {{",
        "    const int nb = get_global_id(0), m0 = get_global_id(1) * " + f"{ob}, q = get_global_id(2);",
        f"    if (nb >= {nblk} || m0 >= {mm}) return;",
        "    const int n0 = nb * 16;",
        f"    int16 acc[{ob}];",
        f"    int su[{ob}];",
        f"    KERNEL_dots(in0 + {q._batch_offset(batch, a.dims, mm * kk, 'q')}, m0,",
        f"                (const __global int*)(in1) + {q._batch_offset(batch, bt.dims, nblk * kq * 16, 'q')}"
        f" + nb * {kq * 16}, {off}, acc, su);",
        *fix,
        *(q.matmul_store(ctx, r, store_acc[r]) for r in range(ob)),
        "}"]) + "\n"
    lx = min(nblk, 8)
    k = Kernel(src, (math.ceil(nblk / lx) * lx, mblk, math.prod(batch)), (lx, 1, 1))
    low = Lowered([k], schedule={"rows": ob, "cols": 16, "quads": 1})
    rank = bt.rank
    # [.., K, N] -> [.., ceil(N / 16), ceil(K / 4), 16, 4], missing columns and k at 128 (ui8) or 0 (i8):
    # 0 after the flip, so they add nothing to the dot products
    low.pack[1] = PackSpec((rank - 1, rank - 2), (16, 4), (*range(rank - 2), rank - 1, rank - 2),
                           padding_value=128.0 if flip_b else 0.0)
    return low
