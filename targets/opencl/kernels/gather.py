"""Indexed copies: `gather`, `gather_elements` and `scatter_elements`.

Gather and gather_elements wrap negative indices as the reference does and clamp out-of-range ones into
the dim (the reference raises for those), so no kernel reads out of bounds; scatter_elements copies its
data with movement.py's strided copy, then applies each line's updates in order.
"""

from __future__ import annotations

import math

from .base import (
    Ctx,
    Kernel,
    Lowered,
    NotLowerable,
    ctype,
    index_type,
    launch_1d,
    require_static,
    row_major_strides,
    template,
)
from .movement import CopySpec, Term, copy_kernel, elem, empty_kernel, one_kernel, vector_width


def _wrapped(var: str, load: str, d: int, pad: str = "    ") -> str:
    """C lines setting `var` to index `load` with negatives wrapped and out-of-range values clamped."""
    return (f"{pad}long {var} = (long)({load});\n{pad}if ({var} < 0) {var} += {d};\n"
            f"{pad}{var} = clamp({var}, 0L, {d - 1}L);")


@template("gather")
def gather(ctx: Ctx) -> Lowered:
    from ....ir.ops.registry import norm_axis

    require_static(*ctx.operands, *ctx.results)
    data, ind = ctx.operands
    y = ctx.results[0]
    T, I = elem(data), ctype(ind)
    idx = index_type(data, ind, y)
    axis = norm_axis(int(ctx.attr("axis")), data.rank)
    d = data.dims[axis]
    outer, inner, nidx = math.prod(data.dims[:axis]), math.prod(data.dims[axis + 1:]), ind.numel
    v = vector_width(data.itemsize, inner)
    items = outer * nidx * inner // v
    if not items or not d:
        return one_kernel(empty_kernel(f"gather axis={axis}", T))
    load = f"vload{v}(0, in0 + s)" if v > 1 else "in0[s]"
    store = f"vstore{v}({load}, 0, out0 + g * {v});" if v > 1 else f"out0[g] = {load};"
    src = f"""// gather axis={axis}: out0[o, j, i] = in0[o, wrap(in1[j]), i] over [{outer}, {nidx}, {inner}] \
(negative indices wrap, out-of-range ones clamp)
__kernel void KERNEL(__global const {T}* restrict in0, __global const {I}* restrict in1,
                     __global {T}* restrict out0) {{
    const {idx} g = get_global_id(0);
    if (g >= {items}) return;
    const {idx} i = (g % {inner // v}) * {v}, j = (g / {inner // v}) % {nidx}, o = g / {inner // v * nidx};
{_wrapped("k", "in1[j]", d)}
    const {idx} s = o * {d * inner} + ({idx})k * {inner} + i;
    {store}
}}
"""
    k = launch_1d(items)
    return one_kernel(Kernel(src, k.global_size, k.local_size), vec=v)


@template("gather_elements")
def gather_elements(ctx: Ctx) -> Lowered:
    from ....ir.ops.registry import norm_axis

    require_static(*ctx.operands, *ctx.results)
    data, ind = ctx.operands
    T, I = elem(data), ctype(ind)
    idx = index_type(data, ind)
    axis = norm_axis(int(ctx.attr("axis")), data.rank)
    shape, strides = ind.dims, row_major_strides(data.dims)
    if not ind.numel or not data.dims[axis]:
        return one_kernel(empty_kernel(f"gather_elements axis={axis}", T))
    decode = []
    for d in range(len(shape) - 1, 0, -1):
        decode.append(f"    const {idx} c{d} = r % {shape[d]}; r /= {shape[d]};")
    decode.append(f"    const {idx} c0 = r;")
    terms = [f"c{d} * {strides[d]}" for d in range(len(shape)) if d != axis] + [f"({idx})k * {strides[axis]}"]
    src = f"""// gather_elements axis={axis}: out0[c] = in0[c with dim {axis} replaced by wrap(in1[c])] \
(out-of-range indices clamp)
__kernel void KERNEL(__global const {T}* restrict in0, __global const {I}* restrict in1,
                     __global {T}* restrict out0) {{
    const {idx} g = get_global_id(0);
    if (g >= {ind.numel}) return;
    {idx} r = g;
{chr(10).join(decode)}
{_wrapped("k", "in1[g]", data.dims[axis])}
    out0[g] = in0[{' + '.join(terms)}];
}}
"""
    k = launch_1d(ind.numel)
    return one_kernel(Kernel(src, k.global_size, k.local_size))


_COMBINE = {"none": "{u}", "add": "{o} + {u}", "mul": "{o} * {u}"}


@template("scatter_elements")
def scatter_elements(ctx: Ctx) -> Lowered:
    """out0 = data, then one work-item per line along `axis` applies that line's updates in order: lines
    never write each other's elements, so the result is deterministic and matches numpy's order."""
    from ....ir.ops.registry import norm_axis

    require_static(*ctx.operands, *ctx.results)
    data, ind, upd = ctx.operands
    T, I = elem(data), ctype(ind)
    red = ctx.attr("reduction")
    if data.dtype == "i1" and red in ("add", "mul"):
        raise NotLowerable(f"scatter_elements reduction '{red}' on i1")
    idx = index_type(data, ind)
    axis = norm_axis(int(ctx.attr("axis")), data.rank)
    copy = copy_kernel("scatter_elements, step 1: out0 = in0", CopySpec([data.numel], [[Term(1)]]), data, idx)
    shape, dstr, istr = ind.dims, row_major_strides(data.dims), row_major_strides(ind.dims)
    lines_n = math.prod(n for d, n in enumerate(shape) if d != axis)
    decode = []
    rest = [d for d in range(len(shape)) if d != axis]
    for d in reversed(rest):
        decode.append(f"    const {idx} c{d} = r % {shape[d]}; r /= {shape[d]};")
    ibase = " + ".join([f"c{d} * {istr[d]}" for d in rest]) or "0"
    obase = " + ".join([f"c{d} * {dstr[d]}" for d in rest]) or "0"
    if red in _COMBINE:
        combine = _COMBINE[red].format(o="out0[p]", u="u")
    else:  # max / min, NaN-propagating as numpy's maximum / minimum
        cmp = ">" if red == "max" else "<"
        nan = " || isnan(u)" if data.dtype in ("f32", "f64") else ""
        combine = f"(u {cmp} out0[p]{nan}) ? u : out0[p]"
    src = f"""// scatter_elements axis={axis} reduction={red}, step 2: for each line along dim {axis}, \
in order: \
out0[.., wrap(in1[.., j, ..]), ..] = {_COMBINE.get(red, red + "(out0, in2)").format(o="out0", u="in2")}
__kernel void KERNEL(__global const {I}* restrict in1, __global const {T}* restrict in2,
                     __global {T}* restrict out0) {{
    const {idx} g = get_global_id(0);
    if (g >= {lines_n}) return;
    {idx} r = g;
{chr(10).join(decode)}
    const {idx} ib = {ibase}, ob = {obase};
    for ({idx} j = 0; j < {shape[axis]}; j++) {{
{_wrapped("k", f"in1[ib + j * {istr[axis]}]", data.dims[axis], " " * 8)}
        const {idx} p = ob + ({idx})k * {dstr[axis]};
        const {T} u = in2[ib + j * {istr[axis]}];
        out0[p] = {combine};
    }}
}}
"""
    if not lines_n or not shape[axis]:
        return Lowered([copy])
    k = launch_1d(lines_n)
    return Lowered([copy, Kernel(src, k.global_size, k.local_size, ("in1", "in2", "out0"))])


PERMUTE = "avx512vbmi"


@template("lookup")
def lookup(ctx: Ctx) -> Lowered:
    """table[x], x's byte read as unsigned: 16 elements a work-item, the table (256 elements) read from
    global memory, where it stays in the L1 cache; a byte table on a device with the byte permute
    (device.byte_permute), 64 elements a work-item by `permuted_lookup`."""
    require_static(*ctx.operands, *ctx.results)
    x, table = ctx.operands
    y = ctx.results[0]
    T, n = ctype(table), x.numel
    if not n:
        return one_kernel(empty_kernel("lookup", T))
    if table.itemsize == 1 and n >= 64 and ctx.device.has(PERMUTE):
        return permuted_lookup(ctx)
    idx = index_type(x, y)
    lanes = ", ".join(f"in1[u.s{'0123456789abcdef'[j]}]" for j in range(16))
    src = f"""// lookup: out0[i] = in1[(uchar)in0[i]] over {n} elements, 16 a work-item
__kernel void KERNEL(__global const {ctype(x)}* restrict in0, __global const {T}* restrict in1,
                     __global {T}* restrict out0) {{
    const {idx} i = ({idx})get_global_id(0) * 16;
    if (i + 16 <= {n}) {{
        const uchar16 u = as_uchar16(vload16(0, in0 + i));
        vstore16(({T}16)({lanes}), 0, out0 + i);
    }} else {{
        for ({idx} k = i; k < {n}; ++k) out0[k] = in1[(uchar)in0[k]];
    }}
}}
"""
    launch = launch_1d(n, 16)
    launch.source = src
    return Lowered([launch], schedule={"vector": 16})


def permuted_lookup(ctx: Ctx) -> Lowered:
    """A byte table by AVX-512 VBMI's byte permute: 64 elements a work-item, the table in four 64-byte
    vectors, `vpermi2b` picking from the first two and from the last two by the index's low 7 bits and its
    top bit choosing between them: three instructions for 64 elements, in a function given the target
    attribute (PoCL's CPU name may leave VBMI out). The last work-item ends at the tensor's end,
    overlapping the one before (tensors of 64 elements or more). Loads and stores are vload16 / vstore16
    of the operands' own types (what --check-bounds instruments), joined and split by shuffles."""
    x, table = ctx.operands
    y = ctx.results[0]
    n = x.numel
    idx = index_type(x, y)

    def lanes(lo: int, hi: int) -> str:
        return ", ".join(str(j) for j in range(lo, hi))

    def joined(p: str, at: str, first: int) -> str:
        parts = [f"as_char16(vload16({first + k}, {p}{at}))" for k in range(4)]
        return f"KERNEL_CAT4({', '.join(parts)})"

    yt = ctype(y)
    stores = "\n".join(f"    vstore16(__builtin_astype(__builtin_shufflevector(r, r, "
                       f"{lanes(16 * k, 16 * k + 16)}), {yt}16), {k}, out0 + i);" for k in range(4))
    src = f"""typedef char KERNEL_c32 __attribute__((ext_vector_type(32)));
typedef char KERNEL_c64 __attribute__((ext_vector_type(64)));
#define KERNEL_CAT2(a, b) __builtin_astype(__builtin_shufflevector(a, b, \\
    {lanes(0, 32)}), KERNEL_c32)
#define KERNEL_CAT4(a, b, c, d) __builtin_astype(__builtin_shufflevector(KERNEL_CAT2(a, b), \\
    KERNEL_CAT2(c, d), {lanes(0, 64)}), KERNEL_c64)
__attribute__((target("{PERMUTE}")))
static KERNEL_c64 KERNEL_permute(KERNEL_c64 i, KERNEL_c64 t0, KERNEL_c64 t1, KERNEL_c64 t2, KERNEL_c64 t3) {{
    const KERNEL_c64 lo = __builtin_ia32_vpermi2varqi512(t0, i, t1);
    const KERNEL_c64 hi = __builtin_ia32_vpermi2varqi512(t2, i, t3);
    return i < (KERNEL_c64)(0) ? hi : lo;
}}

// lookup: out0[i] = in1[(uchar)in0[i]] over {n} elements, 64 a work-item by byte permutes
__kernel void KERNEL(__global const {ctype(x)}* restrict in0, __global const {ctype(table)}* restrict in1,
                     __global {ctype(y)}* restrict out0) {{
    if (({idx})get_global_id(0) * 64 >= {n}) return;
    const {idx} i = min(({idx})get_global_id(0) * 64, ({idx}){n - 64});
    const KERNEL_c64 r = KERNEL_permute({joined("in0", " + i", 0)},
        {joined("in1", "", 0)}, {joined("in1", "", 4)},
        {joined("in1", "", 8)}, {joined("in1", "", 12)});
{stores}
}}
"""
    launch = launch_1d(n, 64)
    launch.source = src
    return Lowered([launch], schedule={"vector": 64})
