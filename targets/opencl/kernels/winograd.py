"""3x3 stride-1 convolutions by Winograd's minimal filtering F(2x2, 3x3) (Lavin & Gray, 2015).

Each 2x2 block of output pixels (a tile) is A^T [(G g G^T) . (B^T d B)] A over its 4x4 input patch d: 16
multiplications an input channel where the direct conv does 36, so the product, the part at the FMA peak,
shrinks 2.25x. Three kernels:
1. input transform: a work-item per (tile, 16 input channels) loads the 4x4 patch (pads and tails read as
   zeros; NCHW or NCHW16c input) and stores the 16 vectors V[xi] = (B^T d B)[xi] to scratch tmp0, laid out
   [16, tiles (padded to a multiple of `rows`), Cp] (Cp: C padded to 16);
2. a batched GEMM M[xi] = V[xi] x U[xi]: the GEMM micro-kernel (`rows` tiles x one float16 column of output
   channels a work-item, broadcast A scalars), U the `winograd_filter` of the weights ([16, O/16, Cp, 16]
   panels, computed once at load time), M to scratch tmp1 [16, tiles, Op];
3. output transform: a work-item per (tile, 16 output channels) reads its 16 M vectors, forms the 2x2
   pixels A^T M A, adds the bias, applies the fused epilogue and stores NCHW or NCHW16c (a partial block's
   padding lanes as zeros).

When (`winograd_fits`), on a CPU device (where it was measured; elsewhere only when the schedule asks):
constant weights (the transform is a load-time constant), at least 32 input and output channels and 8
MFLOP (below that the two transforms and two extra launches eat the gain), and the two scratch buffers
within WINOGRAD_SCRATCH bytes. Measured against the direct NCHW16c kernel (220-230
GFLOP/s) on this machine's PoCL: 64->64 56^2 1.06 -> 0.74 ms, 128->128 28^2 1.03 -> 0.62, 512->512 7^2
1.02 -> 0.67, 512->512 28^2 16.1 -> 9.5, 256->256 56^2 (24.5 MiB of scratch) 16.2 -> 10.9; but 128->128
112^2 (49 MiB) only 17.5 -> 16.2 and 64->64 224^2 (102 MiB) 16.7 -> 20.6, the transforms then streaming
from DRAM. Rounding: the transforms' adds and halvings keep results within a few ulps of the direct
conv's (max abs error 2-4e-6 on those shapes with unit-variance inputs).

Schedule keys: `winograd` (1 forces it where legal, 0 keeps the direct kernel), `rows` (tiles a GEMM
work-item).
"""

from __future__ import annotations

import math
from typing import Any

from .base import Ctx, Kernel, Lowered, NotLowerable, PackSpec
from .gemm import Epilogue, pick_rows

WINOGRAD_SCRATCH = 32 << 20
"""Bytes of V and M scratch past which the direct kernel stays (about the L3 of the machine measured)."""
MIN_CHANNELS = 32
MIN_FLOPS = 8_000_000


def winograd_legal(ctx: Ctx, geo: Any, fused: bool) -> str:
    """Why F(2x2, 3x3) cannot lower this conv ('' when it can). `fused`: a resize, input scale, expansion
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


def scratch_bytes(geo: Any, rows: int) -> tuple[int, int]:
    tiles = math.ceil(geo.n * math.ceil(geo.ho / 2) * math.ceil(geo.wo / 2) / rows) * rows
    return 4 * 16 * tiles * cpad(geo.c), 4 * 16 * tiles * cpad(geo.o)


def cpad(c: int) -> int:
    return math.ceil(c / 16) * 16


def pick_gemm_rows(ctx: Ctx, tiles: int) -> int:
    return min(pick_rows(tiles, 12, 16, 16), max(ctx.device.accumulators(16), 1))


def winograd_fits(ctx: Ctx, geo: Any, fused: bool) -> bool:
    """Whether the conv lowers by F(2x2, 3x3): the schedule's `winograd` key, else the rule above."""
    asked = ctx.schedule.get("winograd")
    why = winograd_legal(ctx, geo, fused)
    if asked is not None and int(asked):
        if why:
            raise NotLowerable(f"'conv2d' schedule winograd=1: {why}")
        return True
    if asked is not None or why:
        return False
    flops = 2 * geo.n * geo.o * geo.c * geo.ho * geo.wo * 9
    tiles = geo.n * math.ceil(geo.ho / 2) * math.ceil(geo.wo / 2)
    return (ctx.device.is_cpu and min(geo.c, geo.o) >= MIN_CHANNELS and flops >= MIN_FLOPS
            and sum(scratch_bytes(geo, pick_gemm_rows(ctx, tiles))) <= WINOGRAD_SCRATCH)


def lower_winograd(ctx: Ctx, geo: Any, epilogue: Epilogue | None) -> Lowered:
    th, tw = math.ceil(geo.ho / 2), math.ceil(geo.wo / 2)
    tiles = geo.n * th * tw
    rows = int(ctx.schedule.get("rows", pick_gemm_rows(ctx, tiles)))
    if not 1 <= rows <= 32:
        raise NotLowerable(f"'conv2d' schedule rows={rows}: 1 to 32 tiles a GEMM work-item")
    tp = math.ceil(tiles / rows) * rows
    cp, op = cpad(geo.c), cpad(geo.o)
    has_bias = len(ctx.operands) > 2
    local = 4
    kernels = [
        Kernel(input_source(geo, th, tw, tp), (math.ceil(tiles / local) * local, cp // 16), (local, 1),
               ("in0", "tmp0")),
        Kernel(gemm_source(rows, tp, cp, op), (tp // rows, op // 16, 16), (1, 1, 1),
               ("tmp0", "in1", "tmp1")),
        Kernel(output_source(geo, th, tw, tp, has_bias, epilogue),
               (math.ceil(tiles / local) * local, op // 16), (local, 1),
               ("tmp1", "in2", "out0") if has_bias else ("tmp1", "out0")),
    ]
    schedule: dict[str, Any] = {"winograd": 1, "rows": rows}
    if geo.in_block or geo.out_block:
        schedule.update(in_block=geo.in_block, out_block=geo.out_block)
    return Lowered(kernels, list(scratch_bytes(geo, rows)), {1: PackSpec((), (), transform="winograd")},
                   schedule)


def input_source(geo: Any, th: int, tw: int, tp: int) -> str:
    cp = cpad(geo.c)
    if geo.in_block:  # NCHW16c: one vector a pixel
        load = f"return vload16(0, X + ((((long)nb * {cp // 16} + cb) * {geo.h} + ih) * {geo.w} + iw) * 16);"
    else:  # NCHW: 16 planes, the channels past C zero
        lanes = ", ".join(
            f"c0 + {j} < {geo.c} ? x[{j * geo.h * geo.w}] : 0.0f" if geo.c % 16 else f"x[{j * geo.h * geo.w}]"
            for j in range(16))
        load = (f"const __global float* x = X + (((long)nb * {geo.c} + c0) * {geo.h} + ih) * {geo.w} + iw;\n"
                f"    return (float16)({lanes});")
    blocked = " in 16-channel blocks" if geo.in_block else ""
    return f"""// Winograd F(2x2, 3x3) input transform: x [{geo.n}, {geo.c}, {geo.h}, {geo.w}]{blocked}
// -> V [16, {tp}, {cp}] (B^T d B of each 4x4 patch)
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
    const int ih0 = 2 * ty - {geo.pt}, iw0 = 2 * tx - {geo.pl};
    float16 d[4][4];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) d[i][j] = KERNEL_load(X, nb, cb, ih0 + i, iw0 + j);
    float16 u[4][4];  // B^T d
    for (int j = 0; j < 4; ++j) {{
        u[0][j] = d[0][j] - d[2][j];
        u[1][j] = d[1][j] + d[2][j];
        u[2][j] = d[2][j] - d[1][j];
        u[3][j] = d[1][j] - d[3][j];
    }}
    __global float* v = V + (long)t * {cp} + cb * 16;
    for (int i = 0; i < 4; ++i) {{  // (B^T d) B
        vstore16(u[i][0] - u[i][2], 0, v + (long)(i * 4 + 0) * {tp * cp});
        vstore16(u[i][1] + u[i][2], 0, v + (long)(i * 4 + 1) * {tp * cp});
        vstore16(u[i][2] - u[i][1], 0, v + (long)(i * 4 + 2) * {tp * cp});
        vstore16(u[i][1] - u[i][3], 0, v + (long)(i * 4 + 3) * {tp * cp});
    }}
}}
"""


def gemm_source(rows: int, tp: int, cp: int, op: int) -> str:
    accs = [f"acc{r}" for r in range(rows)]
    args = "__global const float* restrict V, __global const float* restrict U, __global float* restrict M"
    return f"""// Winograd batched GEMM, 16 xi: M[xi] [{tp}, {op}] = V[xi] [{tp}, {cp}] x U[xi] [{cp}, {op}]
// {rows} rows x float16 a work-item
__kernel void KERNEL({args}) {{
    const int rb = get_global_id(0), ob = get_global_id(1), xi = get_global_id(2);
    const __global float* a = V + ((long)xi * {tp} + rb * {rows}) * {cp};
    const __global float* b = U + ((long)xi * {op // 16} + ob) * {cp * 16};
    float16 {', '.join(f'{a} = 0.0f' for a in accs)};
    for (int k = 0; k < {cp}; ++k) {{
        const float16 bk = vload16(k, b);
{chr(10).join(f'        {a} = fma(a[{r * cp} + k], bk, {a});' for r, a in enumerate(accs))}
    }}
    __global float* m = M + ((long)xi * {tp} + rb * {rows}) * {op} + ob * 16;
{chr(10).join(f'    vstore16({a}, 0, m + {r * op});' for r, a in enumerate(accs))}
}}
"""


def output_source(geo: Any, th: int, tw: int, tp: int, has_bias: bool, epilogue: Epilogue | None) -> str:
    op = cpad(geo.o)
    bias = "    const float16 bv = (float16)(0.0f);"
    if has_bias:
        lanes = ", ".join(f"(c0 + {j} < {geo.o} ? B[c0 + {j}] : 0.0f)" for j in range(16))
        bias = (f"    const float16 bv = c0 + 16 <= {geo.o} ? vload16(0, B + c0) : (float16)({lanes});"
                if geo.o % 16 else "    const float16 bv = vload16(0, B + c0);")
    stores = []
    for dy in (0, 1):
        for dx in (0, 1):
            conds = [c for c, need in ((f"oh0 + {dy} < {geo.ho}", dy and geo.ho % 2),
                                       (f"ow0 + {dx} < {geo.wo}", dx and geo.wo % 2)) if need]
            stores.append(store(geo, f"y{dy}{dx}", f"oh0 + {dy}", f"ow0 + {dx}", conds, epilogue))
    ins = "__global const float* restrict M"
    ins += ", __global const float* restrict B" if has_bias else ""
    blocked = " in 16-channel blocks" if geo.out_block else ""
    return f"""// Winograd F(2x2, 3x3) output transform: M [16, {tp}, {op}]
// -> y [{geo.n}, {geo.o}, {geo.ho}, {geo.wo}]{blocked} (A^T M A + bias)
__kernel void KERNEL({ins}, __global float* restrict Y) {{
    const int t = get_global_id(0);  // tile
    const int ob = get_global_id(1);  // 16 output channels
    if (t >= {geo.n * th * tw}) return;
    const int nb = t / {th * tw}, oh0 = t / {tw} % {th} * 2, ow0 = t % {tw} * 2, c0 = ob * 16;
    float16 m[16];
    for (int i = 0; i < 16; ++i) m[i] = vload16(0, M + ((long)i * {tp} + t) * {op} + c0);
    float16 s0[4], s1[4];  // A^T M
    for (int j = 0; j < 4; ++j) {{
        s0[j] = m[j] + m[4 + j] + m[8 + j];
        s1[j] = m[4 + j] - m[8 + j] - m[12 + j];
    }}
{bias}
    const float16 y00 = s0[0] + s0[1] + s0[2] + bv, y01 = s0[1] - s0[2] - s0[3] + bv;
    const float16 y10 = s1[0] + s1[1] + s1[2] + bv, y11 = s1[1] - s1[2] - s1[3] + bv;
{chr(10).join(stores)}
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
