"""Elementwise `kernel` regions (fused.py): one kernel over the yields' shape computing the whole chain per
element (see fused.py's docstring).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from ....ir.core import Value
from ....ir.types import TensorType
from . import elementwise as ew
from .base import Ctx, Kernel, Lowered, NotLowerable, ctype, index_type, launch_1d
from .elementwise import offset
from .fused_chain import CHAIN_OPS, Region, check_space, check_types, op_expr, operand_shape, vector_ok, vt


def lower_elementwise(ctx: Ctx, rg: Region) -> Lowered:
    """One kernel over the yields' shape; see the module docstring."""
    space = ctx.results[0].dims
    if any(r.dims != space for r in ctx.results):
        raise NotLowerable("the yields of an elementwise region differ in shape")
    for op in rg.ops:
        if op.name not in CHAIN_OPS or len(op.results) != 1:
            raise NotLowerable(f"'{op.name}' in an elementwise region")
        check_space(op, space)
    check_types(ctx, *rg.ops)
    # the values read from memory: (value, broadcast shape) -> source number
    srcs: dict[tuple[int, tuple[int, ...]], int] = {}
    src_list: list[tuple[Value, tuple[int, ...]]] = []

    def source(v: Value, shape: tuple[int, ...]) -> None:
        if (id(v) in rg.arg or id(v) in rg.array) and (id(v), shape) not in srcs:
            srcs[(id(v), shape)] = len(src_list)
            src_list.append((v, shape))

    uses = [(op, [operand_shape(op, k, len(space)) for k in range(len(op.operands))]) for op in rg.ops]
    for op, shapes in uses:
        for v, s in zip(op.operands, shapes, strict=True):
            source(v, s)
    for v in rg.yields:
        source(v, space)
    dims, strides = ew.coalesce(space, [s for _, s in src_list]) if src_list else ew.coalesce(space, [])
    types = [v.type for v, _ in src_list] + list(ctx.results)
    vec = vector_ok(rg, rg.ops, types + [TensorType((), d) for _, d in rg.splat.values()], mixed=True)
    out = ctx.results[0]
    width = ew.vector_lanes(ctx.device, max(t.np_dtype.itemsize for t in types)) if vec else 1
    L = dims[-1]
    width = 1 if L < width else width
    rows = out.numel // L if out.numel else 0
    chunk = width if width > 1 else min(L, ew.LOOP_CHUNK)
    cpr = -(-L // chunk)
    items = rows * cpr
    idx = index_type(*ctx.operands, *ctx.results)
    # no `restrict`: the memory plan may write the result in place over a full-shape operand that dies
    # here (lower.launch_in_place); each element is read before it is written, by the same work-item
    params = [f"__global const {ctype(t)}* in{i}" for i, t in enumerate(ctx.operands)]
    params += [f"__global {ctype(t)}* out{j}" for j, t in enumerate(ctx.results)]
    what = ", ".join(op.name for op in rg.ops) or "copy"
    how = f"{vt(out, width)} vectors" if width > 1 else f"a loop of {chunk}"
    head = [
        f"// fused elementwise: {what} -> {len(ctx.results)} x {out} ({how} per work-item, rows of {L})",
        f"__kernel void KERNEL({', '.join(params)}) {{",
    ]
    args = (*(f"in{i}" for i in range(len(ctx.operands))), *(f"out{j}" for j in range(len(ctx.results))))
    schedule = {"vector": width, "chunk": chunk, "rows": rows, "row_length": L, "ops": len(rg.ops)}
    if items == 0:
        return Lowered([Kernel("\n".join([*head, "}"]) + "\n", (0,), None, args)], schedule=schedule)
    launch = launch_1d(items)
    body = [f"const {idx} g = get_global_id(0);"]
    if launch.global_size[0] > items:
        body.append(f"if (g >= {items}) return;")
    if rows == 1:
        body.append(f"const {idx} j = g * {chunk}, o = j;" if chunk > 1 else f"const {idx} j = g, o = j;")
    elif cpr == 1:
        body.append(f"const {idx} row = g, j = 0, o = row * {L};")
    else:
        body.append(f"const {idx} row = g / {cpr}, j = (g - row * {cpr}) * {chunk}, o = row * {L} + j;")
    full = [math.prod(dims[k + 1 :]) for k in range(len(dims))]
    offs = []
    for i, st in enumerate(strides):
        if st == full:
            offs.append("o")
        elif not any(st):
            offs.append("0")
        else:
            row_dims, row_strides = dims[:-1] + [1], st[:-1] + [0]
            base = offset(row_dims, row_strides, "row") if len(dims) > 1 else "0"
            body.append(f"const {idx} o{i} = {base}{' + j' if st[-1] else ''};")
            offs.append(f"o{i}")

    def ptr(i: int) -> str:
        v = src_list[i][0]
        return f"in{rg.arg[id(v)]}" if id(v) in rg.arg else f"KERNEL_a{rg.array[id(v)][0]}"

    def chain(w: int, load_src: Callable[[int], str]) -> list[str]:
        lines, names = [], {}
        used_splats = {id(v) for op in rg.ops for v in op.operands} | {id(v) for v in rg.yields}
        for n, (vid, (val, dtype)) in enumerate(rg.splat.items()):
            if vid in used_splats:
                names[vid] = f"c{n}"
                lit = ew.literal(val, ctype(dtype))
                lines.append(f"const {vt(dtype, w)} c{n} = {lit if w == 1 else f'({vt(dtype, w)})({lit})'};")
        for i, (v, _) in enumerate(src_list):
            lines.append(f"const {vt(v.type, w)} s{i} = {load_src(i)};")

        def name(v: Value, shape: tuple[int, ...]) -> str:
            return names.get(id(v)) or f"s{srcs[(id(v), shape)]}"

        for n, (op, shapes) in enumerate(uses):
            e = op_expr(op, rg.sig(op), [name(v, s) for v, s in zip(op.operands, shapes, strict=True)], w)
            lines.append(f"const {vt(op.results[0].type, w)} t{n} = {e};")
            names[id(op.results[0])] = f"t{n}"
        return lines + [f"Y{j} = {name(v, space)};" for j, v in enumerate(rg.yields)]

    def scalar_loop(count: str) -> list[str]:
        lines = chain(1, lambda i: f"{ptr(i)}[{offs[i]}{' + k' if strides[i][-1] else ''}]")
        lines = [re.sub(r"^Y(\d+) = ", lambda m: f"out{m.group(1)}[o + k] = ", ln) for ln in lines]
        return [f"for (int k = 0; k < {count}; ++k) {{", *[f"    {ln}" for ln in lines], "}"]

    if width > 1:

        def vload(i: int) -> str:
            if strides[i][-1]:
                return f"vload{width}(0, {ptr(i)} + {offs[i]})"
            return f"({vt(src_list[i][0].type, width)})({ptr(i)}[{offs[i]}])"

        store = rf"vstore{width}(\2, 0, out\1 + o);"
        vector = [re.sub(r"^Y(\d+) = (.*);$", store, ln) for ln in chain(width, vload)]
        if L % width == 0:
            body += vector
        else:
            body += [
                f"if (j + {width} <= {L}) {{",
                *[f"    {ln}" for ln in vector],
                "} else {",
                *[f"    {ln}" for ln in scalar_loop(f"{L} - j")],
                "}",
            ]
    elif L % chunk == 0:
        body += scalar_loop(str(chunk))
    else:
        body += [f"const int n = {L} - j < {chunk} ? {L} - j : {chunk};", *scalar_loop("n")]
    launch.source = rg.arrays_source() + "\n".join([*head, *[f"    {ln}" for ln in body], "}"]) + "\n"
    launch.args = args
    return Lowered([launch], schedule=schedule)
