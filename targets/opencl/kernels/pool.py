"""Pooling kernels: max_pool2d, avg_pool2d, global_avg_pool, global_max_pool (resize is in resize.py).

2-D pooling: each work-item computes V consecutive outputs of one output row. Blocks whose every column
tap lies inside the row (decided at code-generation time, so the interior of a feature map) load each tap
as one vector (`vload`, or for stride 2 the even/odd lanes of one double-width load shared by two taps)
with no per-tap bounds checks; only a row check per kernel row remains. Edge blocks run a checked scalar
loop. Sums add taps in the reference's order and divide by the reference's window count, so avg_pool
matches numpy to the last bit; max propagates NaN as numpy's maximum does.

Global pools: one work-item per (n, c) plane, V-wide accumulators over the plane, then a lane reduction.
"""

from __future__ import annotations

import math

from ....ir.types import TensorType, int_range
from .base import (
    Ctx,
    Kernel,
    Lowered,
    NotLowerable,
    ctype,
    index_type,
    launch_1d,
    require_static,
    template,
)
from .gemm import Epilogue

FLOATS = ("f32", "f64")
BYTES = ("i8", "ui8")
LANES = "0123456789abcdef"


def _float_type(ctx: Ctx) -> tuple[TensorType, TensorType, str]:
    require_static(*ctx.operands, *ctx.results)
    x, y = ctx.operands[0], ctx.results[0]
    if ctx.op_name == "max_pool2d" and x.dtype in BYTES:
        return x, y, ctype(x)  # 8-bit max pools (a QDQ model's, moved onto the integers by fold-qdq)
    if x.dtype not in FLOATS:
        raise NotLowerable(f"{ctx.op_name} on {x.dtype}: the OpenCL kernels cover f32 and f64")
    return x, y, ctype(x)


def _lit(v: float, T: str) -> str:
    return repr(float(v)) + ("f" if T == "float" else "")


def _max(acc: str, v: str, vector: bool, mask: bool = False, integer: bool = False) -> str:
    """acc = max(acc, v) with NaN winning, as numpy's maximum (`mask`: fmax, and a sticky mask `bad` of
    NaN lanes that the caller applies at the end; `integer`: OpenCL's max)."""
    if integer:
        return f"{acc} = max({acc}, {v});"
    if mask:
        return f"{acc} = fmax({acc}, {v}); bad |= isnan({v});"
    if vector:
        return f"{acc} = select({acc}, {v}, isgreater({v}, {acc}) | isnan({v}));"
    return f"{acc} = ({v} > {acc} || isnan({v})) ? {v} : {acc};"


# max_pool2d / avg_pool2d ----------------------------------------------------------------------------------
@template("max_pool2d", "avg_pool2d", "global_avg_pool", "global_max_pool")
def pool(ctx: Ctx) -> Lowered:
    return lower_pool(ctx)


def lower_pool(ctx: Ctx, epilogue: Epilogue | None = None, *, in_block: int = 0,
               out_block: int = 0) -> Lowered:
    """max_pool2d / avg_pool2d / global_avg_pool / global_max_pool. `in_block`/`out_block` b > 0: in0 / out0
    holds NCHWc (pack inner_dims_pos=[1], inner_tiles=[b], zero-padded channels) while ctx.sig describes
    the NCHW op; `epilogue` (see gemm.Epilogue) gets the flat index in out0's layout."""
    if epilogue is not None and ctx.operands[0].dtype != "f32":
        raise NotLowerable(f"'{ctx.op_name}' with a fused epilogue: f32 only")
    if out_block and not in_block and not ctx.op_name.startswith("global"):
        # gathering b planes a tap costs more than pooling NCHW and packing after (inception_v1's pool
        # after an LRN: 0.7 ms); the region falls back to its ops, one launch each
        raise NotLowerable(f"'{ctx.op_name}' from NCHW to NCHW{out_block}c: pooled in NCHW, packed after")
    if in_block or out_block:
        return pool_blocked(ctx, epilogue, in_block, out_block)
    if ctx.op_name in ("global_avg_pool", "global_max_pool"):
        return global_pool(ctx, epilogue)
    return pool2d(ctx, epilogue)


def pool2d(ctx: Ctx, epilogue: Epilogue | None = None) -> Lowered:
    x, y, T = _float_type(ctx)
    is_max = ctx.op_name == "max_pool2d"
    n, c, h, w = x.dims
    ho, wo = y.dims[2:]
    k0, k1 = (int(v) for v in ctx.attr("kernel"))
    s0, s1 = (int(v) for v in ctx.attr("strides"))
    p = [int(v) for v in ctx.attr("pads")]
    d0, d1 = (int(v) for v in ctx.attr("dilations")) if is_max else (1, 1)
    include = not is_max and bool(ctx.attr("count_include_pad"))
    idx = index_type(x, y)
    if not y.numel:
        from .movement import empty_kernel

        return Lowered([empty_kernel(f"{ctx.op_name}: empty result", T)])
    def epi(value: str, index: str, lanes: int) -> str:
        return epilogue(f"({value})", index, lanes) if epilogue else value

    offsets = [j * d1 for j in range(k1)]  # column offset of each tap from the window start
    first = -(-p[1] // s1)  # the first output whose window starts inside the row
    v, loads, bmax = 1, {}, -1
    for cand in (16, 8, 4, 2):
        if cand * x.itemsize > 64 or cand > wo or s1 > 2 or (s1 == 2 and cand > 8):
            continue
        cand_loads = _tap_loads(offsets, s1, cand)
        span = max(b + (2 * cand - 1 if s1 == 2 else cand - 1) for b, _ in cand_loads.values())
        last = min(wo - cand, (w - 1 - span + p[1]) // s1)  # the last vector start reading inside the row
        if last >= first:
            v, loads, bmax = cand, cand_loads, last
            break
    integer = x.dtype in BYTES
    init = (f"(({T}){int_range(x.dtype)[0]})" if integer else "(-INFINITY)") if is_max else _lit(0.0, T)
    what = (f"{ctx.op_name} kernel=[{k0}, {k1}] strides=[{s0}, {s1}] pads={p} dilations=[{d0}, {d1}]"
            f"{' count_include_pad' if include else ''}: {list(x.dims)} -> {list(y.dims)}, one output row "
            f"per item")
    lo_h, hi_h = (-p[0], h + p[2]) if include else (0, h)
    lo_w, hi_w = (-p[1], w + p[3]) if include else (0, w)
    lines = [f"// {what}",
             f"__kernel void KERNEL(__global const {T}* restrict in0, __global {T}* restrict out0) {{",
             f"    const {idx} g = get_global_id(0);", f"    if (g >= {n * c * ho}) return;",
             f"    const int oh = g % {ho};",
             f"    __global const {T}* xp = in0 + (g / {ho}) * {h * w};",
             f"    __global {T}* yp = out0 + g * {wo};",
             f"    const int hs = oh * {s0} - {p[0]};",
             "    // the kernel rows inside the input",
             f"    const int i0 = hs < 0 ? (-hs + {d0 - 1}) / {d0} : 0;",
             f"    const int i1 = min({k0}, ({h - 1} - hs) / {d0} + 1);"]
    if not is_max:
        lines.append(f"    const int ch = min(hs + {k0}, {hi_h}) - max(hs, {lo_h});")

    def scalar(lo: str, hi: str) -> list[str]:
        out = [f"    for (int ow = {lo}; ow < {hi}; ow++) {{  // edge outputs: taps clipped to the row",
               f"        const int ws = ow * {s1} - {p[1]};",
               f"        const int j0 = ws < 0 ? (-ws + {d1 - 1}) / {d1} : 0;",
               f"        const int j1 = min({k1}, ({w - 1} - ws) / {d1} + 1);",
               f"        {T} acc = {init};",
               "        for (int i = i0; i < i1; i++) {",
               f"            __global const {T}* row = xp + (hs + i * {d0}) * {w} + ws;",
               "            for (int j = j0; j < j1; j++) "
               + (_max("acc", f"row[j * {d1}]", False, integer=integer) if is_max
                  else f"acc += row[j * {d1}];"),
               "        }"]
        at = f"g * {wo} + ow"
        if is_max:
            return out + [f"        yp[ow] = {epi('acc', at, 1)};", "    }"]
        return out + [f"        const int cw = min(ws + {k1}, {hi_w}) - max(ws, {lo_w});",
                      f"        yp[ow] = {epi(f'acc / ({T})(ch * cw)', at, 1)};", "    }"]

    if v == 1:
        lines += scalar("0", str(wo))
    else:
        TV = f"{T}{v}"
        nblk = -(-(bmax - first) // v) + 1
        lines += scalar("0", str(first)) if first else []
        lines += [f"    for (int m = 0; m < {nblk}; m++) {{  // interior: {v} outputs a step, unchecked",
                  f"        const int ow0 = min({first} + m * {v}, {bmax});",
                  f"        __global const {T}* win = xp + ow0 * {s1} - {p[1]};",
                  f"        {TV} acc = ({TV}){init};",
                  *([f"        {'long' if T == 'double' else 'int'}{v} bad = 0;"]
                    if is_max and not integer else []),
                  "        for (int i = i0; i < i1; i++) {",
                  f"            __global const {T}* row = win + (hs + i * {d0}) * {w};"]
        done: set[int] = set()
        for off in offsets:
            if s1 == 1:
                val = f"vload{v}(0, row + {off})"
            else:  # stride 2: even/odd lanes of one 2V-wide load serve two taps
                base, lanes = loads[off]
                if base not in done:
                    done.add(base)
                    lines.append(f"            const {T}{2 * v} l{base} = vload{2 * v}(0, row + {base});")
                val = f"l{base}.{lanes}"
            lines.append("            " + (_max("acc", val, True, mask=True, integer=integer) if is_max
                                          else f"acc += {val};"))
        res = ("acc" if integer else f"select(acc, ({TV})NAN, bad)") if is_max else f"acc / ({T})(ch * {k1})"
        lines += ["        }", f"        vstore{v}({epi(res, f'g * {wo} + ow0', v)}, 0, yp + ow0);", "    }"]
        if bmax + v < wo:
            lines += scalar(str(bmax + v), str(wo))
    lines.append("}")
    kern = launch_1d(n * c * ho)
    return Lowered([Kernel("\n".join(lines) + "\n", kern.global_size, kern.local_size)],
                   schedule={"vec": v})


def _tap_loads(offsets: list[int], stride: int, v: int) -> dict[int, tuple[int, str]]:
    """For stride 2: tap offset -> (offset of the 2V-wide load, 'even' or 'odd' lanes), so that two taps
    share a load and no load reads past the last element the taps need."""
    if stride != 2:
        return {o: (o, "") for o in offsets}
    out: dict[int, tuple[int, str]] = {}
    bases: set[int] = set()
    for o in offsets:
        if o - 1 in bases:
            out[o] = (o - 1, "odd")
        elif o in bases:
            out[o] = (o, "even")
        elif o == offsets[-1] and o >= 1:
            bases.add(o - 1)
            out[o] = (o - 1, "odd")
        else:
            bases.add(o)
            out[o] = (o, "even")
    return out


# global_avg_pool / global_max_pool ------------------------------------------------------------------------
def global_pool(ctx: Ctx, epilogue: Epilogue | None = None) -> Lowered:
    x, y, T = _float_type(ctx)
    is_max = ctx.op_name == "global_max_pool"
    planes, size = x.dims[0] * x.dims[1], math.prod(x.dims[2:])
    idx = index_type(x, y)
    if not planes:
        from .movement import empty_kernel

        return Lowered([empty_kernel(f"{ctx.op_name}: empty result", T)])
    v = next(v for v in (16, 8, 4, 2, 1) if v * x.itemsize <= 64 and v <= max(size, 1))
    full = size // v * v
    init = "(-INFINITY)" if is_max else _lit(0.0, T)
    acc = f"{T}{v}" if v > 1 else T
    lines = [f"// {ctx.op_name}: out0[p] = {'max' if is_max else 'mean'} of the {size} elements of plane p "
             f"of "
             f"{list(x.dims)} ({v}-wide accumulator)",
             f"__kernel void KERNEL(__global const {T}* restrict in0, __global {T}* restrict out0) {{",
             f"    const {idx} g = get_global_id(0);", f"    if (g >= {planes}) return;",
             f"    __global const {T}* xp = in0 + g * {size};", f"    {acc} a = ({acc}){init};"]
    load = f"vload{v}(0, xp + i)" if v > 1 else "xp[i]"
    lines += [f"    for (int i = 0; i < {full}; i += {v}) {{",
              f"        {_max('a', load, v > 1)}" if is_max else f"        a += {load};", "    }"]
    width = v
    while width > 1:  # fold the lanes: halves until one is left
        half = width // 2
        lo, hi = ("a.lo", "a.hi") if width == v else (f"b{width}.lo", f"b{width}.hi")
        typ = f"{T}{half}" if half > 1 else T
        lines.append(f"    {typ} b{half} = {lo};")
        lines.append(f"    {_max(f'b{half}', hi, half > 1)}" if is_max else f"    b{half} += {hi};")
        width = half
    r = "b1" if v > 1 else "a"
    for i in range(full, size):
        lines.append(f"    {_max(r, f'xp[{i}]', False)}" if is_max else f"    {r} += xp[{i}];")
    res = r if is_max else f"{r} / ({T}){size}"
    lines += [f"    out0[g] = {epilogue(f'({res})', 'g', 1) if epilogue else res};", "}"]
    kern = launch_1d(planes)
    return Lowered([Kernel("\n".join(lines) + "\n", kern.global_size, kern.local_size)], schedule={"vec": v})


# blocked (NCHWc) pooling -----------------------------------------------------------------------------------
def pool_blocked(ctx: Ctx, epilogue: Epilogue | None, in_block: int, out_block: int) -> Lowered:
    """2-D and global pools with in0 and/or out0 in NCHWc blocks of b: a work-item computes one output row
    of one channel block as `float<b>` vectors (one vector load a tap from a blocked input, a gather of b
    planes from an NCHW one) and stores a vector a pixel to a blocked output (lanes past C zeroed) or b
    strided scalars to an NCHW one. From a blocked input, a window of at most 25 taps that lies inside the
    image has its taps unrolled with no bounds checks (inception_v2's pools ~1.5x faster); border windows
    take the checked loop."""
    x, y, T = _float_type(ctx)
    op = ctx.op_name
    if T != "float" or x.rank != 4:
        raise NotLowerable(f"blocked '{op}': 4-D f32 only, got {x}")
    if in_block and out_block and in_block != out_block:
        raise NotLowerable(f"blocked '{op}': input block {in_block} differs from output block {out_block}")
    b = in_block or out_block
    if b not in (2, 4, 8, 16):
        raise NotLowerable(f"blocked '{op}': channel block {b} must be 2, 4, 8 or 16")
    n, c, h, w = x.dims
    ho, wo = y.dims[2:]
    cbn = math.ceil(c / b)
    is_max = "max" in op
    if op.startswith("global"):
        (k0, k1), (s0, s1), p, (d0, d1), include = (h, w), (1, 1), [0] * 4, (1, 1), False
    else:
        k0, k1 = (int(v) for v in ctx.attr("kernel"))
        s0, s1 = (int(v) for v in ctx.attr("strides"))
        p = [int(v) for v in ctx.attr("pads")]
        d0, d1 = (int(v) for v in ctx.attr("dilations")) if is_max else (1, 1)
        include = not is_max and bool(ctx.attr("count_include_pad"))
    TV, IV = f"float{b}", f"int{b}"
    iota = f"({IV})({', '.join(str(j) for j in range(b))})"
    if in_block:
        load = f"vload{b}(0, in0 + ((((long)n * {cbn} + cb) * {h} + ih) * {w} + iw) * {b})"
    else:  # gather the block's b channel planes
        lanes = [f"xp[{j * h * w} + off]" for j in range(b)]
        if c % b:
            lanes = [f"(c0 + {j} < {c} ? {e} : 0.0f)" for j, e in enumerate(lanes)]
        load = f"({TV})({', '.join(lanes)})"
    lo_h, hi_h = (-p[0], h + p[2]) if include else (0, h)
    lo_w, hi_w = (-p[1], w + p[3]) if include else (0, w)
    layouts = [f"NCHW{b}c" if blk else "NCHW" for blk in (in_block, out_block)]
    lines = [f"// {op} kernel=[{k0}, {k1}] strides=[{s0}, {s1}] pads={p} dilations=[{d0}, {d1}]"
             f"{' count_include_pad' if include else ''}: {list(x.dims)} -> {list(y.dims)}, input "
             f"{layouts[0]}, output {layouts[1]}; one output row of {b} channels per item",
             "__kernel void KERNEL(__global const float* restrict in0, __global float* restrict out0) {",
             "    const int q = get_global_id(0);  // (n, channel block, output row)",
             f"    if (q >= {n * cbn * ho}) return;",
             f"    const int oh = q % {ho}, cb = q / {ho} % {cbn}, n = q / {ho * cbn};",
             f"    const int c0 = cb * {b}, hs = oh * {s0} - {p[0]};",
             *([] if in_block else [f"    __global const float* xp = in0 + ((long)n * {c} + c0) * {h * w};"]),
             f"    for (int ow = 0; ow < {wo}; ++ow) {{",
             f"        const int ws = ow * {s1} - {p[1]};",
             f"        {TV} acc = ({TV})({'-INFINITY' if is_max else '0.0f'});",
             *_interior_taps(in_block, k0, k1, d0, d1, h, w, load, is_max),
             f"        for (int i = 0; i < {k0}; ++i) {{",
             f"            const int ih = hs + i * {d0};",
             f"            if (ih < 0 || ih >= {h}) continue;",
             f"            for (int j = 0; j < {k1}; ++j) {{",
             f"                const int iw = ws + j * {d1};",
             f"                if (iw < 0 || iw >= {w}) continue;",
             *([] if in_block else ["                const int off = ih * " + str(w) + " + iw;"]),
             f"                const {TV} v = {load};",
             f"                {_max('acc', 'v', True) if is_max else 'acc += v;'}",
             "            }", "        }", *(["        }"] if in_block and k0 * k1 <= 25 else [])]
    res = "acc"
    if not is_max:
        lines += [f"        const int ch = min(hs + {k0}, {hi_h}) - max(hs, {lo_h});",
                  f"        const int cw = min(ws + {k1}, {hi_w}) - max(ws, {lo_w});"]
        res = "acc / (float)(ch * cw)"
    if out_block:
        lines.append(f"        const int yi = (((n * {cbn} + cb) * {ho} + oh) * {wo} + ow) * {b};")
        val = epilogue(f"({res})", "yi", b) if epilogue else res
        if c % b:
            val = f"select({val}, ({TV})(0.0f), {iota} >= ({IV})({c} - c0))"
        lines.append(f"        vstore{b}({val}, 0, out0 + yi);")
    else:
        lines.append(f"        const {TV} r = {res};")
        for j in range(b):
            idx = f"((n * {c} + c0 + {j}) * {ho} + oh) * {wo} + ow"
            store = f"out0[{idx}] = {epilogue(f'r.s{LANES[j]}', idx, 1) if epilogue else f'r.s{LANES[j]}'};"
            lines.append(f"        if (c0 + {j} < {c}) {store}" if c % b else f"        {store}")
    lines += ["    }", "}"]
    kern = launch_1d(n * cbn * ho, local=16)
    return Lowered([Kernel("\n".join(lines) + "\n", kern.global_size, kern.local_size)],
                   schedule={"in_block": in_block, "out_block": out_block})


def _interior_taps(in_block: int, k0: int, k1: int, d0: int, d1: int, h: int, w: int, load: str,
                   is_max: bool) -> list[str]:
    """For a blocked input and a window of at most 25 taps: when the whole window lies inside the image
    (every output but the border ones), its taps unrolled with no bounds checks; the caller closes the
    `else` around the checked loop. Nothing otherwise."""
    if not in_block or k0 * k1 > 25:
        return []
    inside = f"hs >= 0 && hs + {(k0 - 1) * d0} < {h} && ws >= 0 && ws + {(k1 - 1) * d1} < {w}"
    lines = [f"        if ({inside}) {{"]
    for i in range(k0):
        for j in range(k1):
            tap = load.replace("ih)", f"hs + {i * d0})").replace("iw)", f"ws + {j * d1})")
            lines.append(f"            {{ const float{in_block} v = {tap};")
            lines.append(f"              {_max('acc', 'v', True) if is_max else 'acc += v;'} }}")
    lines.append("        } else {")
    return lines
