"""3x3 stride-1 convolutions by Winograd's minimal filtering F(m x m, 3x3), m = 2 or 4 (Lavin & Gray, 2015).

Each m x m block of output pixels (a tile) is A^T [(G g G^T) . (B^T d B)] A over its a x a input patch d
(a = m + 2): a^2 multiplications an input channel where the direct conv does 9 m^2 (F(2x2): 16 for 36,
F(4x4): 36 for 144), so the product, the part at the FMA peak, shrinks 2.25x or 4x. Three kernels:
1. input transform: a work-item per (tile, 16 input channels) loads the a x a patch (pads and tails read as
   zeros; NCHW or NCHW16c input) and stores the a^2 vectors V[xi] = (B^T d B)[xi] to scratch tmp0, laid
   out [a^2, tiles (padded to a multiple of `rows`), Cp] (Cp: C padded to 16);
2. a batched GEMM M[xi] = V[xi] x U[xi]: gemm.py's micro-kernel (`rows` tiles x one float16 column of
   output channels a work-item, broadcast A scalars, A's rows read in place), U the `winograd_filter` of the
   weights ([a^2, O/16, Cp, 16] panels, computed once at load time), M to scratch tmp1 [a^2, tiles, Op];
3. output transform: a work-item per (tile, 16 output channels) reads its a^2 M vectors, forms the m x m
   pixels A^T M A, adds the bias, applies the fused epilogue and stores NCHW or NCHW16c (a partial block's
   padding lanes as zeros).
The transforms are straight-line code with the matrices' coefficients as literals (zeros skipped, +-1 as
adds).

When (`winograd_fits`), on a CPU device (where it was measured; elsewhere only when the schedule asks):
constant weights (the transform is a load-time constant), at least 16 input and output channels and 8
MFLOP (below that the two transforms and two extra launches eat the gain), and the two scratch buffers
within WINOGRAD_SCRATCH bytes (past it the transforms stream from DRAM). m = 4 when that gives at least
MIN_TILES_4X4 tiles, else 2; docs/opencl.md has the measurements. Rounding: F(2x2)'s transforms keep
results within a few ulps of the direct conv's, F(4x4)'s coefficients (up to 8 and 1/24) within ~1e-5 of
the outputs' scale.

Schedule keys: `winograd` (1 forces it where legal, 0 keeps the direct kernel), `tile` (m), `rows` (tiles
a GEMM work-item).
"""

from __future__ import annotations

import math
from typing import Any

from ....ir.ops.winograd import TRANSFORMS
from .base import Ctx, Kernel, Lowered, NotLowerable, PackSpec
from .gemm import Epilogue, Gemm, flit, gemm_source, pick_rows, pick_vcols

WINOGRAD_SCRATCH = 64 << 20
"""Bytes of V and M scratch past which the direct kernel stays (vgg19's 64-channel 224^2 convs, 58 MiB
with F(4x4), still ran 0.59x the direct kernel's time)."""
MIN_CHANNELS = 16
"""Input and output channels each, at least (F(4x4) on 16->64 55^2: 0.30 -> 0.19 ms; 16->16 56^2 0.076 ->
0.055)."""
MIN_FLOPS = 8_000_000
MIN_TILES_4X4 = 9
"""F(4x4) needs this many tiles, else F(2x2): the GEMM's rows are tiles, and 512->512 7^2 (4 tiles of 4x4
against 16 of 2x2) took 0.95 ms with F(4x4), 0.73 with F(2x2). It was 32 until tessel-tune's records of
the light models and the zoo (bench/results/tuning/) showed F(4x4) faster on 20 of the 22 convs with 9 to
16 tiles (12^2 to 16^2 images: inception_v2's 14^2 convs 330 -> 242 us, alexnet's 12^2 256->384 666 ->
447, unet's 16^2 128-channel 201 -> 126; 0.63-0.89 of F(2x2)'s time), even on 256->256 14^2 and slower
only on vgg19's 512->512 14^2 (2.70 against 2.52 ms); with 8 tiles or fewer the rows run out (resnet34's
batch-8 2^2 512->512: 1.66 ms against 0.65)."""


def pick_tile(ctx: Ctx, geo: Any) -> int:
    return int(ctx.schedule.get("tile", cheapest(ctx, geo) or default_tile(geo)))


def default_tile(geo: Any) -> int:
    """The tile without the device's peaks (the generic device, or one never calibrated)."""
    return 4 if tile_count(geo, 4) >= MIN_TILES_4X4 else 2


def direct_seconds(d: Any, geo: Any) -> float:
    """The direct kernel's time on the roofline of device `d` (a DeviceInfo with peaks): its FLOPs at the
    SGEMM peak, or its weights at the rate the micro-kernels stream weights, whichever is longer."""
    flops = 2 * geo.n * geo.o * geo.c * geo.ho * geo.wo * 9
    return max(flops / (d.peak_gflops * 1e9), 4 * geo.o * geo.c * 9 / (d.stream_gbps * 1e9))


def winograd_seconds(ctx: Ctx, d: Any, geo: Any, m: int) -> float:
    """F(m x m, 3x3)'s time on the same roofline: the batched GEMM's FLOPs (tiles padded to the GEMM's
    rows) or its transformed weights ((m+2)^2 / 9 times the direct kernel's bytes), plus the two transforms
    writing and reading V and M at the copy bandwidth. Each transformed weight is used once per tile, so
    on few tiles (a deep layer's 7x7 or 14x14 image) the GEMM waits on its weights: there the direct kernel
    or the smaller tile wins, and by how much depends on the device's ratio of FLOPs to streamed bytes."""
    a = m + 2
    tp = math.ceil(tile_count(geo, m) / (rows := pick_gemm_rows(ctx, tile_count(geo, m)))) * rows
    gemm = max(2 * a * a * tp * cpad(geo.c) * cpad(geo.o) / (d.peak_gflops * 1e9),
               4 * a * a * cpad(geo.c) * cpad(geo.o) / (d.stream_gbps * 1e9))
    return gemm + 2 * sum(scratch_bytes(geo, m, rows)) / (d.copy_gbps * 1e9)


def cheapest(ctx: Ctx, geo: Any) -> int | None:
    """The Winograd tile (2 or 4) the device's peaks predict fastest, 0 when the direct kernel is predicted
    faster than both, None without peaks (the device is calibrated here on its first need)."""
    d = ctx.device.measured()
    if not d.has_peaks:
        return None
    # F(4x4) on fewer than MIN_TILES_4X4 tiles leaves the GEMM too few rows to hide the FMA latency
    costs = {m: winograd_seconds(ctx, d, geo, m) for m in sorted(TRANSFORMS)
             if m == 2 or tile_count(geo, m) >= MIN_TILES_4X4}
    best = min(costs, key=costs.__getitem__)
    return best if costs[best] < direct_seconds(d, geo) else 0


def considers(module: Any) -> bool:
    """Whether lowering `module` may ask the cost model above: it holds a conv2d (fused or not) of 3x3
    weights, stride 1, dilation 1 and one group. A dynamic model, whose sizes are lowered at run time, has
    its device calibrated at compile time where this holds (api.compile)."""
    for op in module.walk():
        if op.name != "conv2d" or len(op.operands) < 2:
            continue
        dims = getattr(op.operands[1].type, "dims", None)
        if (dims is not None and len(dims) == 4 and tuple(dims[2:]) == (3, 3)
                and list(op.attrs.get("strides", [1, 1])) == [1, 1]
                and list(op.attrs.get("dilations", [1, 1])) == [1, 1]
                and int(op.attrs.get("groups", 1)) == 1):
            return True
    return False


def winograd_legal(ctx: Ctx, geo: Any, fused: bool) -> str:
    """Why F(m x m, 3x3) cannot lower this conv ('' when it can). `fused`: a resize, input scale, expansion
    or channel map is fused into the conv's input (read by the direct kernel's repack only)."""
    if (geo.kh, geo.kw, geo.sh, geo.sw, geo.dh, geo.dw, geo.g) != (3, 3, 1, 1, 1, 1, 1):
        return "a 3x3 conv of stride 1, dilation 1 and one group only"
    if fused:
        return "a fused resize, input scale, expansion or channel map reads the input"
    if not (len(ctx.constant) > 1 and ctx.constant[1]):
        return "the weights are not a constant (their transform is computed at load time)"
    if geo.in_block not in (0, 16) or geo.out_block not in (0, 16):
        return "NCHW or 16-channel blocks only"
    return ""


def cpad(c: int) -> int:
    return math.ceil(c / 16) * 16


def tile_count(geo: Any, m: int) -> int:
    return geo.n * math.ceil(geo.ho / m) * math.ceil(geo.wo / m)


def scratch_bytes(geo: Any, m: int, rows: int) -> tuple[int, int]:
    tp = math.ceil(tile_count(geo, m) / rows) * rows
    return 4 * (m + 2) ** 2 * tp * cpad(geo.c), 4 * (m + 2) ** 2 * tp * cpad(geo.o)


def pick_gemm_rows(ctx: Ctx, tiles: int) -> int:
    return min(pick_rows(tiles, 12, 16, 16), max(ctx.device.accumulators(16), 1))


def winograd_fits(ctx: Ctx, geo: Any, fused: bool) -> bool:
    """Whether the conv lowers by Winograd: the schedule's `winograd` key, else the rule above."""
    asked = ctx.schedule.get("winograd")
    why = winograd_legal(ctx, geo, fused)
    if asked is not None and int(asked):
        if why:
            raise NotLowerable(f"'conv2d' schedule winograd=1: {why}")
        return True
    if asked is not None or why:
        return False
    flops = 2 * geo.n * geo.o * geo.c * geo.ho * geo.wo * 9
    if not (ctx.device.is_cpu and min(geo.c, geo.o) >= MIN_CHANNELS and flops >= MIN_FLOPS):
        return False  # (before the peaks: a conv this rule refuses never calibrates the device)
    m = pick_tile(ctx, geo)
    rows = pick_gemm_rows(ctx, tile_count(geo, m))
    return sum(scratch_bytes(geo, m, rows)) <= WINOGRAD_SCRATCH and cheapest(ctx, geo) != 0


def lower_winograd(ctx: Ctx, geo: Any, epilogue: Epilogue | None) -> Lowered:
    m = pick_tile(ctx, geo)
    if m not in TRANSFORMS:
        raise NotLowerable(f"'conv2d' schedule tile={m}: Winograd F(2x2, 3x3) or F(4x4, 3x3) only")
    a = m + 2
    th, tw = math.ceil(geo.ho / m), math.ceil(geo.wo / m)
    tiles = geo.n * th * tw
    rows = int(ctx.schedule.get("rows", pick_gemm_rows(ctx, tiles)))
    if not 1 <= rows <= 32:
        raise NotLowerable(f"'conv2d' schedule rows={rows}: 1 to 32 tiles a GEMM work-item")
    cp, op = cpad(geo.c), cpad(geo.o)
    shape = Gemm((a * a,), (), (), tiles, cp, op, rows, 16, a_mode="rows")
    pick_vcols(ctx, shape, batch=a * a)  # two columns of output channels a work-item where they pay
    rows, vcols = shape.rows, shape.vcols
    tp = math.ceil(tiles / rows) * rows
    has_bias = len(ctx.operands) > 2
    local = 4
    # the a^2 GEMMs M[xi] [tp, op] = V[xi] [tp, cp] x U[xi]: gemm.py's micro-kernel, V's rows read as they are
    batched = Gemm((a * a,), (tp * cp,), (op * cp,), tp, cp, op, rows, 16, a_mode="rows", vcols=vcols)
    kernels = [
        Kernel(input_source(geo, m, th, tw, tp), (math.ceil(tiles / local) * local, cp // 16), (local, 1),
               ("in0", "tmp0")),
        Kernel(gemm_source(batched, a_arg="the transformed input"), (tp // rows, batched.nbw, a * a),
               (1, 1, 1), ("tmp0", "in1", "tmp1")),
        Kernel(output_source(geo, m, th, tw, tp, has_bias, epilogue),
               (math.ceil(tiles / local) * local, op // 16), (local, 1),
               ("tmp1", "in2", "out0") if has_bias else ("tmp1", "out0")),
    ]
    schedule: dict[str, Any] = {"winograd": 1, "tile": m, "rows": rows}
    if vcols > 1:
        schedule["vcols"] = vcols
    if geo.in_block or geo.out_block:
        schedule.update(in_block=geo.in_block, out_block=geo.out_block)
    # the profile's flops (the direct conv's) go to the GEMM, which shows the effective GFLOP/s
    return Lowered(kernels, list(scratch_bytes(geo, m, rows)),
                   {1: PackSpec((), (), winograd=m)}, schedule, flops_kernel=1)


def combine(coefs: Any, names: list[str]) -> str:
    """sum(c * name): zero coefficients skipped, +-1 as adds and subtractions."""
    out = ""
    for c, name in zip(coefs, names, strict=True):
        if c == 0:
            continue
        term = name if abs(c) == 1 else f"{flit(abs(c))} * {name}"
        out += (f" - {term}" if c < 0 else f" + {term}") if out else (f"-{term}" if c < 0 else term)
    return out or "0.0f"


def input_source(geo: Any, m: int, th: int, tw: int, tp: int) -> str:
    bt = TRANSFORMS[m][0]
    a = m + 2
    cp = cpad(geo.c)
    if geo.in_block:  # NCHW16c: one vector a pixel
        load = f"return vload16(0, X + ((((long)nb * {cp // 16} + cb) * {geo.h} + ih) * {geo.w} + iw) * 16);"
    else:  # NCHW: 16 planes, the channels past C zero
        lanes = ", ".join(
            f"c0 + {j} < {geo.c} ? x[{j * geo.h * geo.w}] : 0.0f" if geo.c % 16 else f"x[{j * geo.h * geo.w}]"
            for j in range(16))
        load = (f"const __global float* x = X + (((long)nb * {geo.c} + c0) * {geo.h} + ih) * {geo.w} + iw;\n"
                f"    return (float16)({lanes});")
    body = [f"    const float16 d{i}_{j} = KERNEL_load(X, nb, cb, ih0 + {i}, iw0 + {j});"
            for i in range(a) for j in range(a)]
    body += [f"    const float16 t{i}_{j} = {combine(bt[i], [f'd{k}_{j}' for k in range(a)])};"
             for i in range(a) for j in range(a)]
    body += [f"    vstore16({combine(bt[j], [f't{i}_{k}' for k in range(a)])}, 0, "
             f"v + {(i * a + j) * tp * cp}L);" for i in range(a) for j in range(a)]
    blocked = " in 16-channel blocks" if geo.in_block else ""
    nl = "\n"
    return f"""// Winograd F({m}x{m}, 3x3) input transform: x [{geo.n}, {geo.c}, {geo.h}, {geo.w}]{blocked}
// -> V [{a * a}, {tp}, {cp}] (B^T d B of each {a}x{a} patch)
static inline float16 KERNEL_load(__global const float* restrict X, int nb, int cb, int ih, int iw) {{
    const int c0 = cb * 16;
    if (ih < 0 || ih >= {geo.h} || iw < 0 || iw >= {geo.w}) return (float16)(0.0f);
    {load}
}}
__kernel void KERNEL(__global const float* restrict X, __global float* restrict V) {{
    const int t = get_global_id(0);  // tile: (image, tile row, tile column)
    const int cb = get_global_id(1);  // 16 input channels
    if (t >= {geo.n * th * tw}) return;
    const int nb = t / {th * tw}, ty = t / {tw} % {th}, tx = t % {tw};
    const int ih0 = {m} * ty - {geo.pt}, iw0 = {m} * tx - {geo.pl};
    __global float* v = V + (long)t * {cp} + cb * 16;
{nl.join(body)}
}}
"""


def output_source(geo: Any, m: int, th: int, tw: int, tp: int, has_bias: bool,
                  epilogue: Epilogue | None) -> str:
    at = TRANSFORMS[m][2]
    a = m + 2
    op = cpad(geo.o)
    bias = "    const float16 bv = (float16)(0.0f);"
    if has_bias:
        lanes = ", ".join(f"(c0 + {j} < {geo.o} ? B[c0 + {j}] : 0.0f)" for j in range(16))
        bias = (f"    const float16 bv = c0 + 16 <= {geo.o} ? vload16(0, B + c0) : (float16)({lanes});"
                if geo.o % 16 else "    const float16 bv = vload16(0, B + c0);")
    body = [f"    const float16 m{i}_{j} = vload16(0, M + {(i * a + j) * tp * op}L + (long)t * {op} + c0);"
            for i in range(a) for j in range(a)]
    body += [f"    const float16 s{i}_{j} = {combine(at[i], [f'm{k}_{j}' for k in range(a)])};"
             for i in range(m) for j in range(a)]
    body.append(bias)
    for dy in range(m):
        for dx in range(m):
            y = f"y{dy}_{dx}"
            body.append(f"    const float16 {y} = {combine(at[dx], [f's{dy}_{k}' for k in range(a)])} + bv;")
            conds = [c for c, need in ((f"oh0 + {dy} < {geo.ho}", dy and geo.ho % m),
                                       (f"ow0 + {dx} < {geo.wo}", dx and geo.wo % m)) if need]
            body.append(store(geo, y, f"oh0 + {dy}", f"ow0 + {dx}", conds, epilogue))
    ins = "__global const float* restrict M"
    ins += ", __global const float* restrict B" if has_bias else ""
    blocked = " in 16-channel blocks" if geo.out_block else ""
    nl = "\n"
    return f"""// Winograd F({m}x{m}, 3x3) output transform: M [{a * a}, {tp}, {op}]
// -> y [{geo.n}, {geo.o}, {geo.ho}, {geo.wo}]{blocked} (A^T M A + bias)
__kernel void KERNEL({ins}, __global float* restrict Y) {{
    const int t = get_global_id(0);  // tile
    const int ob = get_global_id(1);  // 16 output channels
    if (t >= {geo.n * th * tw}) return;
    const int nb = t / {th * tw}, oh0 = t / {tw} % {th} * {m}, ow0 = t % {tw} * {m}, c0 = ob * 16;
{nl.join(body)}
}}
"""


def store(geo: Any, v: str, oh: str, ow: str, conds: list[str], epilogue: Epilogue | None) -> str:
    """Store the float16 `v` (output channels c0.., pixel (oh, ow) of image nb), guarded by `conds`."""
    idx = f"i{v[1:]}"
    if geo.out_block:
        at = f"(((nb * {math.ceil(geo.o / 16)} + ob) * {geo.ho} + {oh}) * {geo.wo} + {ow}) * 16"
        lines = [f"const int {idx} = {at};"]
        vec = epilogue(v, idx, 16) if epilogue else v
        if geo.o % 16:
            lane = [f"{v}.s{j:x}" for j in range(16)]
            lane = [epilogue(x, f"{idx} + {j}", 1) if epilogue else x for j, x in enumerate(lane)]
            lanes = ", ".join(f"(c0 + {j} < {geo.o} ? {x} : 0.0f)" for j, x in enumerate(lane))
            lines.append(f"if (c0 + 16 <= {geo.o}) vstore16({vec}, 0, Y + {idx});")
            lines.append(f"else vstore16((float16)({lanes}), 0, Y + {idx});")
        else:
            lines.append(f"vstore16({vec}, 0, Y + {idx});")
    else:  # NCHW: lane j is channel c0 + j, a plane apart
        plane = geo.ho * geo.wo
        lines = [f"const int {idx} = ((nb * {geo.o} + c0) * {geo.ho} + {oh}) * {geo.wo} + {ow};"]
        for j in range(16):
            val = epilogue(f"{v}.s{j:x}", f"{idx} + {j * plane}", 1) if epilogue else f"{v}.s{j:x}"
            st = f"Y[{idx} + {j * plane}] = {val};"
            lines.append(f"if (c0 + {j} < {geo.o}) {st}" if geo.o % 16 else st)
    body = "\n".join(f"        {ln}" for ln in lines)
    cond = " && ".join(conds) or "1"
    return f"    if ({cond}) {{\n{body}\n    }}"
