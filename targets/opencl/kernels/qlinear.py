"""The integer contractions: `conv2d_integer` / `qconv2d` and `matmul_integer` / `qmatmul` on 8-bit
operands with i32 accumulators, exact.

conv: a first kernel copies the input into a scratch buffer of shorts, x - x_zero_point, with the conv's
padding as zeros (so padding contributes nothing and the main loop has no bounds checks) and each row
split into `stride` phases (column xp at phase xp % s, position xp / s), so the inputs of consecutive
output columns are consecutive for any stride. A work-item of the main kernel then computes `ob` output
channels (of one group) times `px` consecutive output columns of one row: per input channel and tap one
`vloadN` of the row, widened to int, and one multiply-add per channel with the weight broadcast; the
weights are packed [O / ob, C / g, KH, KW, ob] so each step's `ob` weights are one `vload`. The weight
zero point comes out at the end: sum (x - xz)(w - wz) = sum (x - xz) w - wz sum (x - xz), the last sum
kept per column beside the accumulators.

matmul: a work-item computes `ob` rows times 16 columns; B is packed [.., K, N / 16, 16] (zero-padded
columns), so each k reads 16 consecutive bytes of it, and each row's A value is a scalar broadcast. B's
zero point comes out at the end the same way, with the per-row sums of a - az.

The requantizing forms add the i32 bias, convert to float and multiply by the (float) scale, round half to
even (`rint`), add the output zero point and clamp to [min, max] within the output type, on whole vectors,
as the op's reference does: onnxruntime's requantization (MLAS), so a QDQ model's integer convs give its
results to the bit. A scale or zero point of one
element serves every channel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ....ir.types import TensorType, int_range
from .base import Ctx, Kernel, Lowered, NotLowerable, PackSpec, ctype, require_static, template
from .fused_chain import LANES
from .gemm import Epilogue, aligned_strides, batch_offset
from .qconv_depthwise import conv_depthwise
from .qconv_depthwise import fits as depthwise_fits
from .qconv_pairs import conv_pairs, pointwise_pairs, pointwise_pairs_fits
from .qdot import conv_pixels, conv_quads, matmul_quads, pixels_fit, pointwise_quads
from .qdot import fits as quads_fit

INTEGER_OPS = ("conv2d_integer", "matmul_integer")


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


def _lanes(n: int) -> int:
    """Vector width for a row of n outputs: 16, or the smallest of 4, 8 covering n."""
    return 4 if n <= 4 else 8 if n <= 8 else 16


def _element(t: TensorType, i: str) -> str:
    """Index `i` of a per-channel operand, or element 0 when it has one value for all."""
    return "0" if t.numel == 1 else i


def _channels(arg: str, t: TensorType, ct: str, w: int, base: str, count: int = 0,
              whole: bool = False) -> str:
    """`w` lanes (`ct`) of per-channel operand `arg`: its one element in every lane when it has one;
    with `count` channels, channels base .. base + w - 1 (one vector load when `whole`: they never pass
    the end; else lanes past channel count - 1 read it); with no `count`, channel `base` in every lane."""
    if t.numel == 1:
        return f"({ct}{w})(({ct}){arg}[0])"
    if not count:
        return f"({ct}{w})(({ct}){arg}[{base}])"
    if whole:
        return f"convert_{ct}{w}(vload{w}(0, {arg} + {base}))"
    items = ", ".join(f"({ct}){arg}[min({base} + {j}, {count - 1})]" for j in range(w))
    return f"(({ct}{w})({items}))"


def _requant(ctx: Ctx, acc: str, w: int, base: str, count: int = 0, whole: bool = False) -> str:
    """The stored vector for accumulator vector `acc` (int<w>), its lanes' channels as `_channels` says:
    as is for the integer ops, else requantized (operands 4, 5, 6: scale, output zero point, bias)."""
    if ctx.op_name in INTEGER_OPS:
        return acc
    scale, yz = ctx.operands[4:6]
    v = acc
    if len(ctx.operands) == 7:
        v = f"({v} + {_channels('in6', ctx.operands[6], 'int', w, base, count, whole)})"
    tlo, thi = int_range(yz.dtype)
    lo, hi = max(ctx.attr("min"), tlo), min(ctx.attr("max"), thi)
    if lo > hi:
        raise NotLowerable(f"bounds [{ctx.attr('min')}, {ctx.attr('max')}] are outside {yz.dtype}")
    sc = _channels("in4", scale, "float", w, base, count, whole)
    # float(acc) * scale in float, rounded half to even, then the zero point (onnxruntime's requantization)
    q = f"convert_int{w}(rint(convert_float{w}({v}) * {sc})) + (int{w})((int)in5[0])"
    return f"convert_{ctype(yz)}{w}(clamp({q}, ({lo}), ({hi})))"


def stored(val: str, index: str, w: int, epilogue: Epilogue | None) -> str:
    """`val` (w lanes, consecutive output elements from flat position `index`) as stored: through the
    fused chain of a `kernel` region (fused_epilogue.py) where there is one."""
    return val if epilogue is None else epilogue(val, index, w)


def lane_stores(vt: str, val: str, lanes: int, at: str, stride: int, whole: bool,
                epilogue: Epilogue | None = None, channel_epilogue: Epilogue | None = None) -> str:
    """Store the vector `val` (of type `vt`) one lane at a time: lane j to out0[at + j * stride], lanes at
    or past `nch` skipped unless `whole`. A fused chain: `channel_epilogue` on the whole vector (its lanes
    consecutive channels of one pixel) where every lane is a channel, else `epilogue` a lane at a time (a
    lane at a time, ResNet-18 int8's residual adds made its run 1.5x as long). Static lanes (`v.s3`):
    indexing a vector by a loop variable made LLVM spill it and store byte by byte (the shallow 1x1 convs
    of a MobileNetV2 ran at 7-17 GOP/s)."""
    across = whole and channel_epilogue is not None
    if across:
        assert channel_epilogue is not None
        val = channel_epilogue(val, f"({at})", lanes)
    lines = [f"const {vt} v = {val};", f"const long o = {at};"]
    for j in range(lanes):
        cond = "" if whole or j == 0 else f"if ({j} < nch) "
        lane = f"v.s{LANES[j]}"
        lane = lane if across else stored(lane, f"o + {j * stride}", 1, epilogue)
        lines.append(f"{cond}out0[o + {j * stride}] = {lane};")
    return "\n        ".join(lines)


def _params(ctx: Ctx, first: str) -> str:
    names = [first, f"__global const {ctype(ctx.operands[1])}* restrict in1"]
    for i, t in enumerate(ctx.operands[2:], start=2):
        names.append(f"__global const {ctype(t)}* restrict in{i}")
    names.append(f"__global {ctype(ctx.results[0])}* restrict out0")
    return ",\n                     ".join(names)


@dataclass(frozen=True)
class Geo:
    """A conv's sizes and the padded, phase-split input: rows of wp elements, wq per phase."""

    n: int
    c: int
    h: int
    wd: int
    m: int
    cg: int
    kh: int
    kw: int
    ho: int
    wo: int
    sh: int
    sw: int
    pt: int
    pl: int
    dh: int
    dw: int
    hp: int
    wq: int

    @property
    def wp(self) -> int:
        return self.wq * self.sw

    @property
    def plane(self) -> int:
        return self.hp * self.wp

    def tap(self, ky: int, kx: int) -> int:
        """The offset of tap (ky, kx) from its output column's first input in the padded plane."""
        return ky * self.dh * self.wp + ((kx * self.dw) % self.sw) * self.wq + (kx * self.dw) // self.sw


def _geo(ctx: Ctx, cols: int) -> Geo:
    x, w = ctx.operands[:2]
    n, c, h, wd = x.dims
    m, cg, kh, kw = w.dims
    _, _, ho, wo = ctx.results[0].dims
    sh, sw = ctx.attr("strides")
    pt, pl, pb, pr = ctx.attr("pads")
    dh, dw = ctx.attr("dilations")
    hp = max(h + pt + pb, (ho - 1) * sh + (kh - 1) * dh + 1)
    wq = math.ceil(max(wd + pl + pr, (math.ceil(wo / cols) * cols - 1) * sw + (kw - 1) * dw + 1) / sw)
    return Geo(n, c, h, wd, m, cg, kh, kw, ho, wo, sh, sw, pt, pl, dh, dw, hp, wq)


def _repack(ctx: Ctx, geo: Geo, et: str) -> Kernel:
    """x - x_zero_point as `et`, zero-padded and phase-split, into tmp0: a work-item fills one padded row,
    16 elements at a time (one vector load where they are 16 consecutive inputs)."""
    xt = ctype(ctx.operands[0])
    fast = ""
    if geo.sw == 1:
        inside = f"iy >= 0 && iy < {geo.h} && q0 >= {geo.pl} && q0 + 16 <= {min(geo.pl + geo.wd, geo.wp)}"
        fast = f"""        if ({inside}) {{
            vstore16(convert_{et}16(convert_int16(vload16(0, src + q0 - {geo.pl})) - xz), 0, dst + q0);
            continue;
        }}
"""
    src = f"""// {ctx.op_name} input: x - x_zero_point as {et}, padded to {geo.hp}x{geo.wp}, {geo.sw} phases
// a row
__kernel void KERNEL(__global const {xt}* restrict in0, __global const {xt}* restrict in2,
                     __global {et}* restrict tmp0) {{
    const int yp = get_global_id(0), nc = get_global_id(1);
    if (yp >= {geo.hp}) return;
    const int iy = yp - {geo.pt}, xz = in2[0];
    const __global {xt}* src = in0 + (nc * {geo.h} + iy) * {geo.wd};
    __global {et}* dst = tmp0 + (nc * {geo.hp} + yp) * {geo.wp};
    for (int q0 = 0; q0 < {geo.wp}; q0 += 16) {{
{fast}        for (int q = q0; q < min(q0 + 16, {geo.wp}); ++q) {{
            const int ix = (q % {geo.wq}) * {geo.sw} + q / {geo.wq} - {geo.pl};
            dst[q] = (iy >= 0 && iy < {geo.h} && ix >= 0 && ix < {geo.wd}) ? ({et})((int)src[ix] - xz) : 0;
        }}
    }}
}}
"""
    ly = min(geo.hp, 16)
    return Kernel(src, (math.ceil(geo.hp / ly) * ly, geo.n * geo.c), (ly, 1), ("in0", "in2", "tmp0"))


@template("conv2d_integer", "qconv2d")
def lower_integer_conv(ctx: Ctx, epilogue: Epilogue | None = None,
                       channel_epilogue: Epilogue | None = None) -> Lowered:
    """The integer conv's kernel for its shape (below); `epilogue`: the chain of a `kernel` region applied
    to each stored value (qconv2d's requantized one), as the float conv's templates apply theirs;
    `channel_epilogue`: the same chain on vectors of consecutive channels (the channel-lane kernels)."""
    _check(ctx)
    m, g = ctx.operands[1].dims[0], ctx.attr("groups")
    lanes = int(ctx.schedule.get("lanes", 16 if m // g >= 12 else 0))
    pairs = int(ctx.schedule.get("pairs", 1))
    if pairs not in (0, 1):
        raise NotLowerable(f"'{ctx.op_name}' schedule pairs={pairs} is not 0 or 1")
    quads = pairs and quads_fit(ctx)  # 8-bit dot products where the device has them (else pairs)
    if pairs and ("lanes" not in ctx.schedule or "pointwise" in ctx.schedule) and pointwise_pairs_fits(ctx):
        # a 1x1 conv as a GEMM over 16-pixel vectors
        return pointwise_quads(ctx, epilogue) if quads else pointwise_pairs(ctx, epilogue)
    if pairs and ("lanes" not in ctx.schedule or "pixels" in ctx.schedule) and not depthwise_fits(ctx) \
            and pixels_fit(ctx):
        return conv_pixels(ctx, epilogue)  # 16 output columns in the lanes: whole-vector stores
    if lanes == 16 and pairs:
        px = int(ctx.schedule.get("cols", 8))
        if not 1 <= px <= 16:
            raise NotLowerable(f"'{ctx.op_name}' schedule cols={px} (1..16)")
        # input channels in quads (8-bit dot products) or pairs (16-bit multiply-adds)
        return (conv_quads(ctx, px, epilogue, channel_epilogue) if quads
                else conv_pairs(ctx, px, epilogue, channel_epilogue))
    if lanes:
        return _conv_channel_lanes(ctx, lanes, epilogue, channel_epilogue)
    if depthwise_fits(ctx):
        return conv_depthwise(ctx, epilogue, channel_epilogue)  # one input channel a group: exact float FMAs
    return _conv_pixel_lanes(ctx, epilogue)


def _conv_channel_lanes(ctx: Ctx, lanes: int, epilogue: Epilogue | None = None,
                        channel_epilogue: Epilogue | None = None) -> Lowered:
    """Lanes over `lanes` output channels of a group (weights packed [O / lanes, C / g, KH, KW, lanes],
    one vector load a tap), `px` output columns an item, each input a broadcast int."""
    x, w, _, wz = ctx.operands[:4]
    y = ctx.results[0]
    g = ctx.attr("groups")
    px = int(ctx.schedule.get("cols", 8))
    og = w.dims[0] // g
    if lanes not in (8, 16) or px < 1 or px > 16:
        raise NotLowerable(f"'{ctx.op_name}' schedule lanes={lanes} (8 or 16), cols={px} (1..16)")
    geo = _geo(ctx, px)
    gb = math.ceil(og / lanes)  # lane blocks of a group
    vi = f"int{lanes}"
    # unpadded stride 1 (1x1 convs above all): read x itself, its zero point out at the end through the
    # weights' sums, sum (x - xz) w = sum x w - xz sum w; columns past the row's end read its last one
    direct = geo.sh == geo.sw == 1 and not any(ctx.attr("pads"))
    row = geo.wd if direct else geo.wp
    plane = geo.h * geo.wd if direct else geo.plane

    def tap(ky: int, kx: int) -> int:
        return ky * geo.dh * geo.wd + kx * geo.dw if direct else geo.tap(ky, kx)

    def col(p: int) -> str:
        return f"c{p}" if direct else str(p)
    whole = og % lanes == 0  # lane blocks never pass the group's (and the op's) last channel
    wzv = _channels("in3", wz, "int", lanes, "oc0", w.dims[0], whole)
    taps = []
    for ky in range(geo.kh):
        for kx in range(geo.kw):
            t = (ky * geo.kw + kx) * lanes
            macs = "\n".join(f"            a{p} += ({vi})((int)xr[{tap(ky, kx)} + {col(p)}]) * wv;"
                              for p in range(px))
            wsum = "\n            ws += wv;" if direct else ""
            taps.append(f"""        {{
            const {vi} wv = convert_{vi}(vload{lanes}(0, wc + {t})) - wz;{wsum}
{macs}
        }}""")
    accs = "\n".join(f"    {vi} a{p} = 0;" for p in range(px))
    stores = []
    for p in range(px):
        acc = f"(a{p} - xz * ws)" if direct else f"a{p}"
        val = _requant(ctx, acc, lanes, "oc0", w.dims[0], whole)
        at = f"((long)(b * {geo.m} + oc0) * {geo.ho} + oy) * {geo.wo} + ox0 + {p}"
        stores.append(f"""    if (ox0 + {p} < {geo.wo}) {{
        {lane_stores(f"{ctype(y)}{lanes}", val, lanes, at, geo.ho * geo.wo, whole, epilogue,
                     channel_epilogue)}
    }}""")
    xt = ctype(x) if direct else "int"
    xin = "in0" if direct else "tmp0"
    first = f"__global const {xt}* restrict {xin}"
    extra = ""
    if direct:
        extra = (f"    const int xz = in2[0];\n    {vi} ws = 0;\n"
                 + "".join(f"    const int c{p} = min(ox0 + {p}, {geo.wo - 1}) - ox0;\n" for p in range(px)))
    src = f"""// {ctx.op_name}: {x} * {w} -> {y}
// strides {geo.sh}x{geo.sw}, dilations {geo.dh}x{geo.dw}, groups {g}
// {lanes} channels (lanes) x {px} columns an item{"; x read as it is" if direct else ""}
__kernel void KERNEL({_params(ctx, first)}) {{
    const int xi = get_global_id(0), oy = get_global_id(1), z = get_global_id(2);
    const int ox0 = xi * {px};
    if (ox0 >= {geo.wo} || oy >= {geo.ho}) return;
    const int b = z / {g * gb}, grp = (z / {gb}) % {g}, oc0 = grp * {og} + (z % {gb}) * {lanes};
    const int nch = min({lanes}, {og} - (z % {gb}) * {lanes});
    const {vi} wz = {wzv};
{extra}{accs}
    const __global {xt}* xb = {xin} + (b * {geo.c} + grp * {geo.cg}) * {plane}
                             + oy * {geo.sh * row} + ox0;
    const __global {ctype(w)}* wb = in1 + (grp * {gb} + z % {gb}) * {geo.cg * geo.kh * geo.kw * lanes};
    for (int ci = 0; ci < {geo.cg}; ++ci) {{
        const __global {xt}* xr = xb + ci * {plane};
        const __global {ctype(w)}* wc = wb + ci * {geo.kh * geo.kw * lanes};
{chr(10).join(taps)}
    }}
{chr(10).join(stores)}
}}
"""
    xb = math.ceil(geo.wo / px)
    lx = min(xb, 8)
    ly = int(ctx.schedule.get("local", max(1, 16 // lx)))
    main = Kernel(src, (math.ceil(xb / lx) * lx, math.ceil(geo.ho / ly) * ly, geo.n * g * gb), (lx, ly, 1),
                  (xin, *(f"in{i}" for i in range(1, len(ctx.operands))), "out0"))
    if direct:
        low = Lowered([main], schedule={"lanes": lanes, "cols": px})
    else:
        low = Lowered([_repack(ctx, geo, "int"), main], scratch=[4 * geo.n * geo.c * geo.plane],
                      schedule={"lanes": lanes, "cols": px})
    # [O, Cg, KH, KW] -> [G, ceil(og / lanes), Cg, KH, KW, lanes]: lane blocks never cross a group
    low.pack[1] = PackSpec((1,), (lanes,), reshape=(g, og, geo.cg, geo.kh, geo.kw))
    low.flops_kernel = len(low.kernels) - 1  # the main kernel, after the repack when there is one
    return low


def _conv_pixel_lanes(ctx: Ctx, epilogue: Epilogue | None = None) -> Lowered:
    """Lanes over `px` output columns, `ob` channels an item (depthwise and narrow groups)."""
    x, w, _, wz = ctx.operands[:4]
    y = ctx.results[0]
    g = ctx.attr("groups")
    og = w.dims[0] // g
    ob = _block(og, int(ctx.schedule.get("rows", 8)))
    px = int(ctx.schedule.get("cols", _lanes(ctx.results[0].dims[3])))
    if px not in (4, 8, 16) or og % ob:
        raise NotLowerable(f"'{ctx.op_name}' schedule rows={ob} cols={px}: rows must divide the group's "
                           f"{og} channels, cols be 4, 8 or 16")
    geo = _geo(ctx, px)
    blocks, xb = geo.m // ob, math.ceil(geo.wo / px)
    vi = f"int{px}"
    taps = []
    for ky in range(geo.kh):
        for kx in range(geo.kw):
            t = (ky * geo.kw + kx) * ob
            macs = "\n".join(f"            a{o} += xv * ({vi})((int)wc[{t + o}] - wz{o});" for o in range(ob))
            taps.append(f"""        {{
            const {vi} xv = convert_{vi}(vload{px}(0, xr + {geo.tap(ky, kx)}));
{macs}
        }}""")
    accs = "\n".join(f"    {vi} a{o} = 0;" for o in range(ob))
    zps = "\n".join(f"    const int wz{o} = in3[{_element(wz, f'oc0 + {o}')}];" for o in range(ob))
    stores = []
    for o in range(ob):
        oc = f"oc0 + {o}"
        val = _requant(ctx, f"a{o}", px, oc)
        at = f"((b * {geo.m} + {oc}) * {geo.ho} + oy) * {geo.wo} + ox0"
        whole, lane = stored("v", at, px, epilogue), stored("v[j]", f"{at} + j", 1, epilogue)
        stores.append(f"""    {{
        const {ctype(y)}{px} v = {val};
        if (ox0 + {px} <= {geo.wo}) vstore{px}({whole}, 0, out0 + {at});
        else for (int j = 0; j < {geo.wo} - ox0; ++j) (out0 + {at})[j] = {lane};
    }}""")
    src = f"""// {ctx.op_name}: {x} * {w} -> {y}
// strides {geo.sh}x{geo.sw}, dilations {geo.dh}x{geo.dw}, groups {g}
// {ob} channels x {px} columns (lanes) an item
__kernel void KERNEL({_params(ctx, "__global const short* restrict tmp0")}) {{
    const int ox0 = get_global_id(0) * {px}, oy = get_global_id(1), z = get_global_id(2);
    if (ox0 >= {geo.wo} || oy >= {geo.ho}) return;
    const int b = z / {blocks}, oc0 = (z % {blocks}) * {ob};
{zps}
{accs}
    const __global short* xb = tmp0 + (b * {geo.c} + (oc0 / {og}) * {geo.cg}) * {geo.plane}
                               + oy * {geo.sh * geo.wp} + ox0;
    const __global {ctype(w)}* wb = in1 + oc0 * {geo.cg * geo.kh * geo.kw};
    for (int ci = 0; ci < {geo.cg}; ++ci) {{
        const __global short* xr = xb + ci * {geo.plane};
        const __global {ctype(w)}* wc = wb + ci * {geo.kh * geo.kw * ob};
{chr(10).join(taps)}
    }}
{chr(10).join(stores)}
}}
"""
    ly = int(ctx.schedule.get("local", max(1, min(geo.ho, 32 // max(1, min(xb, 8))))))
    lx = min(xb, 8)
    main = Kernel(src, (math.ceil(xb / lx) * lx, math.ceil(geo.ho / ly) * ly, geo.n * blocks), (lx, ly, 1),
                  ("tmp0", *(f"in{i}" for i in range(1, len(ctx.operands))), "out0"))
    low = Lowered([_repack(ctx, geo, "short"), main], scratch=[2 * geo.n * geo.c * geo.plane],
                  schedule={"rows": ob, "cols": px})
    if ob > 1:
        low.pack[1] = PackSpec((0,), (ob,))
    low.flops_kernel = 1
    return low


def _batch_offset(batch: tuple[int, ...], shape: tuple[int, ...], size: int, q: str) -> str:
    """The element offset of the matrix (of `size` elements) of an operand of `shape`, broadcast over
    the result's `batch` dims, for flat batch index `q` (gemm's helpers)."""
    return batch_offset(q, batch, aligned_strides(batch, shape[:-2], size))


def matmul_store(ctx: Ctx, r: int, acc: str) -> str:
    """The store of row m0 + r of a 16-column block n0 of an integer matmul's result, its accumulators
    `acc` (requantized for qmatmul), rows past the end and columns past the last skipped."""
    y = ctx.results[0]
    mm, nn = y.dims[-2:]
    val = _requant(ctx, acc, 16, "n0", nn, nn % 16 == 0)
    out = f"out0 + (q * {mm} + m0 + {r}) * {nn} + n0"
    return f"""    if (m0 + {r} < {mm}) {{
        const {ctype(y)}16 v = {val};
        if (n0 + 16 <= {nn}) vstore16(v, 0, {out});
        else for (int j = 0; j < {nn} - n0; ++j) ({out})[j] = v[j];
    }}"""


@template("matmul_integer", "qmatmul")
def lower_integer_matmul(ctx: Ctx) -> Lowered:
    _check(ctx)
    if quads_fit(ctx, any_zero_point=True):
        return matmul_quads(ctx)  # 8-bit dot products of four k at once
    a, bt, _, bz = ctx.operands[:4]
    y = ctx.results[0]
    mm, kk = a.dims[-2:]
    nn = bt.dims[-1]
    batch = y.dims[:-2]
    nb = math.prod(batch)
    ob = int(ctx.schedule.get("rows", min(8, mm)))
    if ob < 1 or ob > 16:
        raise NotLowerable(f"'{ctx.op_name}' schedule rows={ob} must be in 1..16")
    cols = 16
    nblk = math.ceil(nn / cols)
    mblk = math.ceil(mm / ob)
    vi = f"int{cols}"
    loads = "\n".join(f"        const int x{r} = (int)ar[{min(r, mm - 1)} * {kk} + k] - az; sa{r} += x{r};"
                       for r in range(ob))
    macs = "\n".join(f"        a{r} += bv * ({vi})(x{r});" for r in range(ob))
    accs = "\n".join(f"    {vi} a{r} = 0; int sa{r} = 0;" for r in range(ob))
    whole = nn % cols == 0
    bzv = _channels("in3", bz, "int", cols, "n0", nn, whole)
    stores = [matmul_store(ctx, r, f"a{r} - {bzv} * sa{r}") for r in range(ob)]
    src = f"""// {ctx.op_name}: {a} x {bt} -> {y}
// {ob} rows x {cols} columns an item, B packed in {cols}-column blocks
__kernel void KERNEL({_params(ctx, f"__global const {ctype(a)}* restrict in0")}) {{
    const int nb = get_global_id(0), m0 = get_global_id(1) * {ob}, q = get_global_id(2);
    if (nb >= {nblk} || m0 >= {mm}) return;
    const int n0 = nb * {cols};
    const int az = in2[0];
{accs}
    const __global {ctype(a)}* ar = in0 + {_batch_offset(batch, a.dims, mm * kk, "q")} + m0 * {kk};
    const __global {ctype(bt)}* bb = in1 + {_batch_offset(batch, bt.dims, kk * nblk * cols, "q")}
                                    + nb * {kk * cols};
    for (int k = 0; k < {kk}; ++k) {{
        const {vi} bv = convert_{vi}(vload{cols}(k, bb));
{loads}
{macs}
    }}
{chr(10).join(stores)}
}}
"""
    lx = min(nblk, 8)
    k = Kernel(src, (math.ceil(nblk / lx) * lx, mblk, nb), (lx, 1, 1))
    low = Lowered([k], schedule={"rows": ob, "cols": cols})
    rank = bt.rank
    low.pack[1] = PackSpec((rank - 1,), (cols,), tuple(range(rank - 2)) + (rank - 1, rank - 2))
    return low
