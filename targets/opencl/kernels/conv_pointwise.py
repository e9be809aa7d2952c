"""Pointwise (1x1, stride 1, unpadded) convs on NCHW in and out as GEMMs over the pixels (conv.py's choice).

Such a conv is, for each image n and group g, Y[n, g, og, HW] = W[g, og, cg] @ X[n, g, cg, HW]: a matmul
whose B is the input exactly as it lies in memory (each channel's H*W pixels contiguous) and whose A is the
constant weights. The kernel is gemm.py's micro-kernel with the roles set for that: `rows` output channels
x `vcols` float16 vectors of consecutive pixels a work-item; per input channel it loads the vcols pixel
vectors in place and does rows x vcols FMAs with broadcast weights, read from row panels [G, og/rows, cg,
rows] packed at load time. Its stores are whole vectors of one channel's pixels, where the direct kernel
(vectors of output channels) stores NCHW one lane at a time, and it pads no channels: the direct kernel
widens a group of 68 or 34 channels to 80 or 48 lanes.

The pixels of one channel are rarely a multiple of 16 (14x14 = 196): the last vector of a plane is loaded
ending at the plane's end (H*W - 16), so every load stays inside the tensor, and only its lanes past the
previous vector's are stored, as whole sub-vectors (lanes 12..15 of 196). That needs H*W >= 16; smaller
planes keep the direct kernel.

Measured on the Intel Xeon VM (PoCL 3.1, AVX-512, profiling events, bench/conv_sweep.py `default` with and
without `--set pointwise=0`, one after the other): shufflenet's grouped convs 272->272 14x14 g4 0.044 ->
0.032 ms, 136->136 28x28 g4 0.058 -> 0.029, 544->544 7x7 g4 0.052 -> 0.035 (docs/opencl.md gives the same).

Schedule keys: `pointwise` (0: the direct kernel instead; 1: this one), `rows`, `vcols`, `local`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .base import Ctx, Kernel, Lowered, NotLowerable, PackSpec
from .conv_geometry import LANES
from .gemm import Epilogue, block_cost

MAX_ROWS = 24


def pointwise_legal(geo: Any) -> str:
    """Why the conv cannot lower as a pixel GEMM ('' when it can)."""
    if (geo.kh, geo.kw, geo.sh, geo.sw) != (1, 1, 1, 1) or any(geo.pads):
        return "not a 1x1 stride-1 unpadded conv"
    if geo.g > 1 and geo.cg == 1 and geo.og == 1:
        return "a depthwise conv"
    if geo.in_block or geo.out_block:
        return "a blocked (NCHWc) operand"
    if geo.up or geo.scale:
        return "a fused resize or input scale"
    if geo.ho * geo.wo < 16:
        return f"{geo.ho}x{geo.wo} pixels, fewer than a vector of 16"
    return ""


DIRECT_KEYS = ("tile_h", "tile_w", "cin_block", "cols", "unroll", "cols_first")
"""Schedule keys of the direct kernel: a schedule naming one (an older tuning record) keeps it."""


def pointwise_fits(ctx: Ctx, geo: Any, fused: bool) -> bool:
    """Whether the conv lowers as a pixel GEMM: the schedule's `pointwise` key, else whenever it is legal
    (and no fused expansion or channel shuffle reads its input)."""
    asked = ctx.schedule.get("pointwise")
    why = "a fused input" if fused else pointwise_legal(geo)
    if asked is not None and int(asked):
        if why:
            raise NotLowerable(f"'conv2d' schedule pointwise=1: {why}")
        return True
    return asked is None and not why and not any(k in ctx.schedule for k in DIRECT_KEYS)


def pick_shape(ctx: Ctx, og: int, panels: int, batches: int) -> tuple[int, int]:
    """(rows, vcols): the block of output channels x pixel vectors a work-item, by gemm.block_cost (padded
    work over how well each step's loads feed its FMAs) among those whose accumulators fit the registers
    and that leave two work-items a compute unit; ties to more rows (fewer pixel loads)."""
    per = ctx.device.registers_per(16)
    best: tuple[float, int, int, int] | None = None
    for v in range(1, 5):
        if v > panels:
            break
        cap = min(MAX_ROWS, og, ctx.device.accumulators(16, v) // v)
        for r in range(1, cap + 1):
            items = math.ceil(og / r) * math.ceil(panels / v) * batches
            key = (int(items < 2 * ctx.device.compute_units), block_cost(og, panels, r, v, per), -r, v)
            if best is None or key < best:
                best = key
    assert best is not None
    return -best[2], best[3]


def tail_pieces(first: int, width: int = 16) -> list[tuple[int, int]]:
    """Lanes first..width-1 as (lane, size) pieces of aligned power-of-two sizes (12..15: [(12, 4)])."""
    out, lane = [], first
    while lane < width:
        size = 1
        while lane % (2 * size) == 0 and lane + 2 * size <= width:
            size *= 2
        out.append((lane, size))
        lane += size
    return out


def plane_store(j: int, panels: int, vcols: int, rem: int, full: str, piece: Callable[[int, int], str],
                ind: str, head: str = "") -> list[str]:
    """The stores of a work-item's pixel vector j (`q{j}` its panel): the statement `full` for whole
    vectors; for the plane's last, partial one (rem pixels, loaded ending at the plane's end) only its new
    lanes 16 - rem .. 15, each aligned piece by the statement `piece(lane, size)`, after `head` (a
    declaration of the stored vector); vectors past the plane store nothing."""
    if not rem:
        cond = f"if (q{j} < {panels}) " if panels % vcols else ""
        return [f"{ind}{cond}{full}"]
    out = [f"{ind}if (q{j} < {panels - 1}) {full}",
           f"{ind}else if (q{j} == {panels - 1}) {{  // lanes {16 - rem}..15 are new"]
    out += [f"{ind}  {head}"] if head else []
    out += [f"{ind}  {piece(lane, size)}" for lane, size in tail_pieces(16 - rem)]
    return [*out, f"{ind}}}"]


def pointwise_source(geo: Any, rows: int, vcols: int, has_bias: bool, epilogue: Epilogue | None) -> str:
    r, v, og, cg = rows, vcols, geo.og, geo.cg
    hw = geo.ho * geo.wo
    panels = math.ceil(hw / 16)
    mb = math.ceil(og / r)
    rem = hw % 16

    def val(x: str, idx: str, lanes: int) -> str:
        return epilogue(x, idx, lanes) if epilogue else x

    ins = ["__global const float* restrict X", "__global const float* restrict W"]
    if has_bias:
        ins.append("__global const float* restrict in2")
    lines = [f"// conv2d 1x1 groups {geo.g} as a GEMM over pixels: x [{geo.n}, {geo.c}, {geo.h}, {geo.w}] -> "
             f"y [{geo.n}, {geo.o}, {geo.ho}, {geo.wo}]",
             f"// {r} output channels x {v} float16 of pixels a work-item; weights in panels "
             f"[{geo.g}][{mb}][{cg}][{r}]",
             f"__kernel void KERNEL({', '.join(ins)}, __global float* restrict Y) {{",
             "    const int mb = get_global_id(0);",
             "    const int nw = get_global_id(1);",
             f"    const int b = get_global_id(2);  // image * {geo.g} + group",
             f"    if (mb >= {mb}) return;",
             f"    const __global float* a = W + ({'b % ' + str(geo.g) if geo.g > 1 else '0'} * {mb} + mb) * "
             f"{cg * r};",
             f"    const __global float* x = X + (long)b * {cg * hw};"]
    for j in range(v):  # vectors past the plane's last re-read it; the last ends at the plane's end
        lines.append(f"    const int q{j} = nw * {v} + {j};")
        lines.append(f"    const int p{j} = min(q{j} * 16, {hw - 16});")
    accs = [[f"c{i}_{j}" for j in range(v)] for i in range(r)]
    for row in accs:
        lines.append(f"    float16 {', '.join(f'{c} = 0.0f' for c in row)};")
    lines.append(f"    for (int k = 0; k < {cg}; ++k, x += {hw}, a += {r}) {{")
    lines += [f"        const float16 x{j} = vload16(0, x + p{j});" for j in range(v)]
    lines += [f"        {{ const float s = a[{i}]; "
              + " ".join(f"{c} = fma(s, x{j}, {c});" for j, c in enumerate(accs[i])) + " }"
              for i in range(r)]
    lines.append("    }")
    for i in range(r):
        guard = og % r and i >= og % r
        ind = "        " if guard else "    "
        if guard:
            lines.append(f"    if (mb * {r} + {i} < {og}) {{")
        o = f"mb * {r} + {i}"
        lines.append(f"{ind}{{ const long y = ((long)b * {og} + {o}) * {hw};")
        if has_bias:
            lines.append(f"{ind}  const float bo = in2[b % {geo.g} * {og} + {o}];" if geo.g > 1
                         else f"{ind}  const float bo = in2[{o}];")
        def piece(lane: int, size: int) -> str:
            part, at = f"t.s{LANES[lane:lane + size]}", f"y + {hw - 16 + lane}"
            return (f"Y[{at}] = {val(part, at, 1)};" if size == 1
                    else f"vstore{size}({val(part, at, size)}, 0, Y + {at});")

        for j in range(v):
            t = f"{accs[i][j]} + bo" if has_bias else accs[i][j]
            full = f"vstore16({val(t, f'y + p{j}', 16)}, 0, Y + y + p{j});"
            lines += plane_store(j, panels, v, rem, full, piece, f"{ind}  ", f"const float16 t = {t};")
        lines.append(f"{ind}}}")
        if guard:
            lines.append("    }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def lower_pointwise(ctx: Ctx, geo: Any, epilogue: Epilogue | None) -> Lowered:
    hw = geo.ho * geo.wo
    panels = math.ceil(hw / 16)
    batches = geo.n * geo.g
    rows, vcols = pick_shape(ctx, geo.og, panels, batches)
    rows = int(ctx.schedule.get("rows", rows))
    vcols = int(ctx.schedule.get("vcols", vcols))
    if not 1 <= rows <= 32 or not 1 <= vcols <= 4:
        raise NotLowerable(f"'conv2d' schedule rows={rows}, vcols={vcols}: 1 to 32 rows, 1 to 4 pixel "
                           "vectors")
    mb, nw = math.ceil(geo.og / rows), math.ceil(panels / vcols)
    local = int(ctx.schedule.get("local", 4))
    while "local" not in ctx.schedule and local > 1 and math.ceil(mb / local) * nw * batches < 16:
        local //= 2
    if local < 1:
        raise NotLowerable(f"'conv2d' schedule local={local} must be positive")
    has_bias = len(ctx.operands) > 2
    src = pointwise_source(geo, rows, vcols, has_bias, epilogue)
    args = ("in0", "in1", "in2", "out0") if has_bias else ("in0", "in1", "out0")
    kernel = Kernel(src, (math.ceil(mb / local) * local, nw, batches), (local, 1, 1), args)
    # weights [O, cg, 1, 1] as [G, og, cg], og in panels of `rows`: [G, og / rows, cg, rows]
    pack = {1: PackSpec((1,), (rows,), reshape=(geo.g, geo.og, geo.cg))}
    schedule: dict[str, Any] = {"pointwise": 1, "rows": rows, "vcols": vcols}
    if local != 4:
        schedule["local"] = local
    return Lowered([kernel], [], pack, schedule)
