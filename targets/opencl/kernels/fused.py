"""The `kernel` template: one launch for a fusion region (DESIGN §2, the fused-region contract of `fuse`).

- elementwise regions: one kernel over the yields' shape computing the whole chain per element, with the
  loop structure of elementwise.py: output dims coalesced where every operand's broadcast pattern agrees,
  a work-item per chunk of a row, operands contiguous (`vloadN`) or splat along the row, every op's C
  expression from `elementwise.expr` kept in a local, each yield stored to its result; vectorized when
  every op has a vector form on one element type, else a scalar loop. In-region splats become literals,
  other small constants `__constant` arrays. `batch_norm` counts as elementwise here (a per-channel affine
  map), so a reduction region around one lowers the same way.
- epilogue regions: the anchor's own template (`lower_conv2d`, `lower_matmul`, `lower_gemm`) with an
  `Epilogue` calling a helper `KERNEL_epi<w>(value, index, buffers...)` that evaluates the chain on the
  anchor's value in registers before the store: no extra memory pass. The chain's other operands are
  appended to the main kernel's parameters and loaded at the broadcast index of the flat output index. An
  `unpack` before a conv and a `pack` after it (NCHWc) become the conv's `in_block` / `out_block`; a
  channel shuffle (reshape, transpose [0, 2, 1, 3, 4], reshape) before a depthwise conv its `channel_map`.
- reduction regions: softmax, log_softmax and layer_norm through norm.py's `Hook`s (helper functions
  `KERNEL_pro<w>` on every element read, `KERNEL_epi<w>` on every element written); reduce_* through
  `reduce_kernels` with an epilogue; the pools (max/avg 2-D and global) like a conv: `lower_pool` with the
  epilogue helper and their `unpack` / `pack` as blocked layouts.
- gate regions (a global pool and FCs on its features): gate.py, one work-group per image.

Anything else raises NotLowerable, and the lowering runs the region's ops one launch each.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ....ir.core import Op, Value
from ....ir.ops.reduce import reduced_axes
from ....ir.ops.registry import Sig, get_op, norm_axis, op_sig
from ....ir.types import TensorType
from ....passes.fuse_rules import ROW_ANCHORS, channel_factor, channel_shuffle_ops
from ..space import SPACES, space
from ..space import Space as SchedSpace
from . import elementwise as ew
from .base import (
    Ctx,
    Kernel,
    Lowered,
    NotLowerable,
    PackSpec,
    ctype,
    index_type,
    launch_1d,
    require_static,
    template,
)
from .conv import Expand, InScale, Upsample, lower_conv2d
from .elementwise import offset
from .gemm import ANorm, Tail, lower_gemm, lower_matmul
from .norm import NO_HOOK, Hook, layer_norm_kernels, softmax_kernels
from .reduce import reduce_kernels
from .reducers import REDUCERS, V, flit, fold_lanes
from .resize import upsample_tables

CHAIN_OPS = frozenset(ew.RULES) | {"batch_norm"}
Anchor = Callable[..., Lowered]  # (ctx, epilogue, *, in_block, out_block) -> Lowered
CONTRACTIONS: dict[str, Anchor] = {"conv2d": lower_conv2d, "matmul": lower_matmul, "gemm": lower_gemm}
NORMS = {"softmax": softmax_kernels, "log_softmax": softmax_kernels, "layer_norm": layer_norm_kernels}
POOLS = ("max_pool2d", "avg_pool2d", "global_avg_pool", "global_max_pool")
BLOCKED = ("conv2d", *POOLS)  # anchors whose templates read / write NCHWc for an unpack / pack
ARRAY_LIMIT = 1024  # elements of an in-region constant baked into the program as a __constant array
LANES = "0123456789abcdef"


# the region --------------------------------------------------------------------------------------------
class Region:
    """A `kernel` op's body as the template reads it: block args (kernel operands), in-region constants
    (splats as literals, small arrays), the ops in order and the yielded values."""

    def __init__(self, ctx: Ctx) -> None:
        body = ctx.body
        if body is None or not body.ops or body.ops[-1].name != "yield":
            raise NotLowerable("a kernel region must end with yield")
        self.ctx = ctx
        self.arg = {id(a): i for i, a in enumerate(body.args)}
        self.args = list(body.args)
        self.ops = [op for op in body.ops[:-1] if op.name != "const"]
        self._op_ids = {id(op) for op in self.ops}
        self.yields = list(body.ops[-1].operands)
        self.splat: dict[int, tuple[float, str]] = {}  # value id -> (value, dtype)
        self.array: dict[int, tuple[int, np.ndarray, str]] = {}  # value id -> (number, values, dtype)
        self._sigs: dict[int, Sig] = {}
        for op in body.ops[:-1]:
            if op.name != "const":
                continue
            r = op.results[0]
            data = np.asarray(get_op("const").reference(self.sig(op)))  # type: ignore[union-attr]
            flat = data.reshape(-1)
            if flat.size and bool(np.all(flat == flat[0])):
                self.splat[id(r)] = (flat[0].item(), r.type.dtype)
            elif flat.size <= ARRAY_LIMIT:
                self.array[id(r)] = (len(self.array), flat, r.type.dtype)
            else:
                raise NotLowerable(f"an in-region constant of {data.size} elements")

    def sig(self, op: Op) -> Sig:
        s = self._sigs.get(id(op))
        if s is None:
            s = self._sigs[id(op)] = op_sig(op, self.ctx.resources)
        return s

    def producer(self, v: Value) -> Op | None:
        op = v.op
        return op if op is not None and id(op) in self._op_ids else None

    def ancestors(self, v: Value) -> list[Op]:
        """The region ops `v` depends on, in block order."""
        seen: set[int] = set()
        todo = [v]
        while todo:
            op = self.producer(todo.pop())
            if op is not None and id(op) not in seen:
                seen.add(id(op))
                todo += op.operands
        return [op for op in self.ops if id(op) in seen]

    def arrays_source(self) -> str:
        out = []
        for k, data, dtype in sorted(self.array.values(), key=lambda kv: kv[0]):
            c = ctype(dtype)
            out.append(
                f"__constant {c} KERNEL_a{k}[{max(len(data), 1)}] = "
                f"{{{', '.join(ew.literal(x, c) for x in data.tolist()) or '0'}}};"
            )
        return "\n".join(out) + ("\n" if out else "")


def operand_shape(op: Op, k: int, rank: int) -> tuple[int, ...]:
    """The shape operand k of chain op `op` broadcasts from, left-padded to `rank` (its space's): numpy's
    right-aligned rule, except batch_norm's [C] parameters, which run along dim 1."""
    t, res = op.operands[k].type, op.results[0].type
    if op.name == "batch_norm" and k:
        shape = (1, t.dims[0]) + (1,) * (res.rank - 2)
    else:
        shape = (1,) * (res.rank - t.rank) + t.dims
    if len(shape) > rank:
        raise NotLowerable(f"'{op.name}' operand {t} has more dims than the kernel's iteration space")
    shape = (1,) * (rank - len(shape)) + shape
    full = (1,) * (rank - res.rank) + res.dims
    if any(s not in (1, d) for s, d in zip(shape, full, strict=True)):
        raise NotLowerable(f"'{op.name}' operand {t} does not broadcast to {res}")
    return shape


def check_space(op: Op, dims: tuple[int, ...]) -> None:
    res = op.results[0].type
    pad = (1,) * (len(dims) - res.rank) + res.dims
    if res.rank > len(dims) or any(r not in (1, d) for r, d in zip(pad, dims, strict=True)):
        raise NotLowerable(f"'{op.name}' result {res} does not broadcast to the iteration shape {dims}")


def op_expr(op: Op, sig: Sig, names: list[str], width: int) -> str:
    """The C expression of one element (or `width` lanes) of chain op `op`'s result."""
    if op.name == "batch_norm":  # as the reference: x * a + (bias - mean * a), a = scale / sqrt(var + eps)
        x, s, b, m, v = names
        c = ctype(sig.operands[0])
        eps = ew.literal(float(np.dtype(sig.operands[0].np_dtype).type(sig["epsilon"])), c)
        a = f"({s} / sqrt({v} + {eps}))"
        return f"({x} * {a} + ({b} - {m} * {a}))"
    return ew.expr(op.name, sig, names, width)


def vector_ok(rg: Region, ops: list[Op], types: list[TensorType]) -> bool:
    """Whether every op has a vector form and everything is of one C type."""
    if any(op.name not in CHAIN_OPS for op in ops):
        return False
    cs = {ctype(t) for t in types} | {ctype(t) for op in ops for t in [*op.operand_types, *op.result_types]}
    return len(cs) == 1 and all(op.name == "batch_norm" or ew.vectorizable(op.name, rg.sig(op)) for op in ops)


def vt(t: TensorType | str, width: int) -> str:
    c = ctype(t)
    return c if width == 1 else f"{c}{width}"


def check_types(ctx: Ctx, *ops: Op) -> None:
    """The kernel's and `ops`' types are ones the chain computes in on this device."""
    types = [*ctx.operands, *ctx.results, *[t for op in ops for t in [*op.operand_types, *op.result_types]]]
    require_static(*types)
    for t in types[len(ctx.operands):]:  # a kernel operand may be half-precision weights an anchor reads
        if t.dtype in ("f16", "bf16"):
            raise NotLowerable(f"{t.dtype} arithmetic is not covered")
        if t.dtype == "f64" and not ctx.device.fp64:
            raise NotLowerable("f64 needs cl_khr_fp64, which the device lacks")
        ctype(t)
    if not ctx.device.fp64 and any(op.name == "pow" and not op.operand_types[0].is_float for op in ops):
        raise NotLowerable("integer pow computes in double, which the device lacks")


@dataclass(frozen=True)
class Space:
    """Where a chain op runs: its values are indexed by flat position `pos` (a C variable) over `dims`.
    `channel_lanes`: an NCHW space seen from a blocked (NCHWc) output, whose vector lanes are consecutive
    channels, not consecutive positions."""

    dims: tuple[int, ...]
    pos: str = "p"
    channel_lanes: bool = False


def load(ptr: str, shape: tuple[int, ...], sp: Space, w: int, c: str) -> str:
    """C expression of `w` lanes (from flat position sp.pos) of a buffer broadcast from `shape` to sp.dims."""
    vtype = c if w == 1 else f"{c}{w}"
    if math.prod(shape) == 1:
        return f"{ptr}[0]" if w == 1 else f"({vtype})({ptr}[0])"
    dims, (strides,) = ew.coalesce(sp.dims, [shape])
    at = sp.pos if tuple(shape) == tuple(sp.dims) else offset(dims, strides, sp.pos)
    if w == 1:
        return f"{ptr}[{at}]"
    if sp.channel_lanes:  # lane l is channel + l
        step = math.prod(shape[2:]) if shape[1] > 1 else 0
        if step == 0:
            return f"({vtype})({ptr}[{at}])"
        if step == 1:
            return f"vload{w}(0, {ptr} + {at})"
        return f"({vtype})({', '.join(f'{ptr}[{at} + {j * step}]' for j in range(w))})"
    if tuple(shape) == tuple(sp.dims):
        return f"vload{w}(0, {ptr} + {sp.pos})"
    fast = f"vload{w}(0, {ptr} + {at})" if strides[-1] else f"({vtype})({ptr}[{at}])"
    lanes = ", ".join(f"{ptr}[{offset(dims, strides, f'{sp.pos} + {j}')}]" for j in range(w))
    return f"(({sp.pos}) % {dims[-1]} + {w} <= {dims[-1]} ? {fast} : ({vtype})({lanes}))"


def unblock(blocked: tuple[int, ...], nchw: tuple[int, ...], p: str) -> str:
    """The NCHW flat index of blocked (NCHWc, channel blocks of b) flat index `p`."""
    b, cb, c = blocked[-1], blocked[1], nchw[1]
    s = math.prod(nchw[2:])
    n, cblk = f"({p}) / {b * s * cb}", f"(({p}) / {b * s}) % {cb}"
    return f"({n} * {c} + {cblk} * {b} + ({p}) % {b}) * {s} + (({p}) / {b}) % {s}"


# elementwise regions ----------------------------------------------------------------------------------
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
    vec = vector_ok(rg, rg.ops, types + [TensorType((), d) for _, d in rg.splat.values()])
    out = ctx.results[0]
    width = min(16, ew.VECTOR_BYTES // max(t.np_dtype.itemsize for t in types)) if vec else 1
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


# helper functions: a chain evaluated on one value (epilogues and prologues) ---------------------------
@dataclass
class Chain:
    """Chain ops evaluated on one value `main` by a helper `KERNEL_<tag><w>(v, p, buffers...)` returning
    `result`: `v` is `main` at flat position `p` (w consecutive lanes), the other operands are kernel
    operands `ep<i>` loaded at their broadcast index, or constants. Each op runs in its `Space`; a `pack`
    passes its value through (the position maps 1:1 when the pack adds no padding)."""

    rg: Region
    tag: str
    ops: list[Op]
    main: Value
    result: Value
    spaces: dict[int, Space]  # op id -> where it runs
    c: str  # C type of `main` and `result`
    it: str  # index type
    unblock: str = ""  # C expression of `pu` (the NCHW position of blocked `p`), when a space uses it

    @property
    def extras(self) -> list[int]:
        """The kernel operands the chain loads, in order."""
        return sorted(
            {
                self.rg.arg[id(v)]
                for op in self.ops
                for v in op.operands
                if id(v) in self.rg.arg and v is not self.main
            }
        )

    def call(self, x: str, pos: str, w: int) -> str:
        return f"KERNEL_{self.tag}{w}({x}, {pos}{''.join(f', ep{a}' for a in self.extras)})"

    def hook(self) -> Hook:
        if not self.ops:
            return NO_HOOK
        call = f"KERNEL_{self.tag}{{w}}({{x}}, ({{pos}}){''.join(f', ep{a}' for a in self.extras)})"
        return Hook(call, tuple(f"ep{a}" for a in self.extras))

    def definitions(self, source: str) -> str:
        """The helper of every width `source` calls (and the scalar one the vector fallback calls)."""
        widths = {int(w) for w in re.findall(rf"\bKERNEL_{self.tag}(\d+)\(", source)}
        types = [v.type for op in self.ops for v in op.operands] + [self.main.type, self.result.type]
        native = vector_ok(self.rg, [op for op in self.ops if op.name != "pack"], types)
        if any(w > 1 for w in widths) and not native:
            widths.add(1)
        return "".join(self.function(w, native or w == 1) for w in sorted(widths))

    def function(self, w: int, native: bool) -> str:
        vtype = self.c if w == 1 else f"{self.c}{w}"
        params = [f"{vtype} v", f"{self.it} p"] + [
            f"__global const {ctype(self.rg.args[a].type)}* restrict ep{a}" for a in self.extras
        ]
        head = f"static inline {vtype} KERNEL_{self.tag}{w}({', '.join(params)}) {{\n"
        if not native:  # lane by lane through the scalar helper
            rest = "".join(f", ep{a}" for a in self.extras)
            lanes = ", ".join(f"KERNEL_{self.tag}1(v.s{LANES[j]}, p + {j}{rest})" for j in range(w))
            return f"{head}    return ({vtype})({lanes});\n}}\n"
        lines = [f"const {self.it} pu = {self.unblock};"] if self.unblock else []
        names: dict[int, str] = {id(self.main): "v"}
        loaded: dict[tuple[int, tuple[int, ...], Space], str] = {}
        for n, op in enumerate(self.ops):
            if op.name == "pack":
                names[id(op.results[0])] = names[id(op.operands[0])]
                continue
            sp = self.spaces[id(op)]
            operands = []
            for k, v in enumerate(op.operands):
                shape = operand_shape(op, k, len(sp.dims))
                if id(v) in names:
                    operands.append(names[id(v)])
                elif id(v) in self.rg.splat:
                    val, dtype = self.rg.splat[id(v)]
                    lit = ew.literal(val, ctype(dtype))
                    names[id(v)] = f"c{len(lines)}"
                    lines.append(
                        f"const {vt(dtype, w)} {names[id(v)]} = "
                        f"{lit if w == 1 else f'({vt(dtype, w)})({lit})'};"
                    )
                    operands.append(names[id(v)])
                else:
                    key = (id(v), shape, sp)
                    if key not in loaded:
                        ptr = (
                            f"ep{self.rg.arg[id(v)]}"
                            if id(v) in self.rg.arg
                            else f"KERNEL_a{self.rg.array[id(v)][0]}"
                        )
                        loaded[key] = f"s{len(lines)}"
                        lines.append(
                            f"const {vt(v.type, w)} {loaded[key]} = {load(ptr, shape, sp, w, ctype(v.type))};"
                        )
                    operands.append(loaded[key])
            names[id(op.results[0])] = f"t{n}"
            e = op_expr(op, self.rg.sig(op), operands, w)
            lines.append(f"const {vt(op.results[0].type, w)} t{n} = {e};")
        body = "".join(f"    {ln}\n" for ln in lines)
        return f"{head}{body}    return {names[id(self.result)]};\n}}\n"


def chain_spaces(
    rg: Region, ops: list[Op], main: Value, base: Space, blocked: Space | None, pack: Op | None
) -> dict[int, Space]:
    """Each chain op's space: after the pack (using its result) the blocked one, else `base`; refuses ops
    mixing values of both sides."""
    spaces: dict[int, Space] = {}
    unblocked = {id(main)}
    for op in ops:
        for v in op.operands:
            if v is not main and rg.producer(v) is not None and rg.producer(v) not in ops:
                raise NotLowerable(f"'{op.name}' reads a region value outside the chain")
        if op is pack:
            spaces[id(op)] = base
            continue
        if op.name not in CHAIN_OPS or len(op.results) != 1:
            raise NotLowerable(f"'{op.name}' in a fused chain")
        after = pack is not None and any(
            id(v) not in unblocked and rg.producer(v) is not None for v in op.operands
        )
        if after and any(id(v) in unblocked for v in op.operands):
            raise NotLowerable(f"'{op.name}' mixes values before and after the pack")
        sp = blocked if after and blocked is not None else base
        check_space(op, sp.dims)
        spaces[id(op)] = sp
        if not after:
            unblocked.add(id(op.results[0]))
    return spaces


def channel_block(op: Op, sig: Sig) -> int:
    """b for a `pack`/`unpack` that is NCHW <-> NCHWc with channel blocks of b, else NotLowerable."""
    rank = (op.operands[0].type if op.name == "pack" else op.results[0].type).rank
    perm = list(sig["outer_dims_perm"])
    if list(sig["inner_dims_pos"]) != [1] or len(sig["inner_tiles"]) != 1 or perm not in ([], [*range(rank)]):
        raise NotLowerable(f"'{op.name}' is not an NCHWc channel blocking")
    return int(sig["inner_tiles"][0])


def add_params(source: str, params: list[str]) -> str:
    """`source` with `params` appended to the parameter list of its `__kernel void KERNEL(...)`."""
    start = source.index("__kernel void KERNEL(") + len("__kernel void KERNEL(")
    depth, i = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(source[i], 0)
        i += 1
    return source[: i - 1] + "".join(f", {p}" for p in params) + source[i - 1 :]


def finish(
    rg: Region,
    low: Lowered,
    chains: list[Chain],
    names: dict[str, str],
    n_anchor: int,
    extra_params: bool,
    reads: tuple[int, ...] = (),
) -> Lowered:
    """The anchor's lowering in the kernel op's terms: helpers (and constant arrays) prepended to the
    kernels that call them, extra buffers appended (`extra_params`: to the parameter list too, else the
    template already declared them), buffer names mapped (`names`: anchor name -> kernel name). `reads`:
    kernel operands the template's own code reads as `ep<a>` (a fused layer_norm's scale and bias)."""
    extras = sorted({a for ch in chains for a in ch.extras} | set(reads))
    called = False
    for k in low.kernels:
        args = tuple(k.args or (*(f"in{i}" for i in range(n_anchor)), "out0"))
        calls = [ch for ch in chains if ch.ops and f"KERNEL_{ch.tag}" in k.source]
        if calls or any(re.search(rf"\bep{a}\b", k.source) for a in reads):
            called = True
            if extra_params:
                k.source = add_params(
                    k.source, [f"__global const {ctype(rg.args[a].type)}* restrict ep{a}" for a in extras]
                )
                args += tuple(f"ep{a}" for a in extras)
            k.source = rg.arrays_source() + "".join(ch.definitions(k.source) for ch in calls) + k.source
        k.args = tuple(names.get(a, a) for a in args)
    if any(ch.ops for ch in chains) and not called:
        raise NotLowerable("the anchor's template did not apply the fused chain")
    return low


def remap(where: list[int], extras: list[int]) -> dict[str, str]:
    return {**{f"in{i}": f"in{a}" for i, a in enumerate(where)}, **{f"ep{a}": f"in{a}" for a in extras}}


def packed_operands(rg: Region, low: Lowered, where: list[int], anchor: Op) -> dict[int, Any]:
    """The anchor's pack requests as kernel operand packs; refuses a packed operand read elsewhere too."""
    out = {}
    for i, spec in low.pack.items():
        arg = rg.args[where[i]]
        if any(u is not anchor or k != i for u, k in arg.uses):
            raise NotLowerable(f"operand {where[i]} is packed for '{anchor.name}' but also read as is")
        out[where[i]] = spec
    return out


# epilogue regions -------------------------------------------------------------------------------------
def pool_anchors() -> dict[str, Anchor]:
    from . import pool

    fn = getattr(pool, "lower_pool", None)  # pools with an epilogue and blocked layouts
    if fn is None:
        raise NotLowerable("the pool templates take no fused epilogue")
    return dict.fromkeys(POOLS, fn)


def lower_epilogue(ctx: Ctx, rg: Region, table: dict[str, Anchor] = CONTRACTIONS) -> Lowered:
    """One anchor of `table` (its operands kernel operands, operand 0 maybe through an NCHWc `unpack`)
    and the elementwise chain on its result (maybe through one `pack`), by the anchor's template."""
    anchors = [op for op in rg.ops if op.name in table]
    ex = expansion(rg, anchors[1].operands[0]) if len(anchors) == 2 and anchors[1].name == "conv2d" else None
    if ex:
        anchors = [op for op in anchors if op not in ex.ops]  # the expansion is the depthwise conv's fill
    if len(anchors) != 1:
        raise NotLowerable(f"an {ctx.sig.attrs.get('kind')} region needs exactly one of {', '.join(table)}")
    anchor = anchors[0]
    where, unpack, in_block, shuffle, norm, up, scale = [], None, 0, None, NO_NORM, None, None
    for k, v in enumerate(anchor.operands):
        u = rg.producer(v)
        if id(v) in rg.arg:
            where.append(rg.arg[id(v)])
        elif k == 0 and ex is not None:
            where.append(ex.arg)
            in_block = 16
        elif k == 0 and (found := norm_prologue(rg, anchor)) is not None:
            norm = found
            where.append(norm.arg)
        elif k == 0 and anchor.name == "conv2d" and (shuffle := channel_shuffle(rg, v)) is not None:
            where.append(shuffle[0])
        elif k == 0 and anchor.name == "conv2d" and (up := nearest_upsample(rg, v)) is not None:
            where.append(up[0])
        elif k == 0 and anchor.name == "conv2d" and (scale := channel_scale(rg, v)) is not None:
            where.append(scale[0])
        elif (
            k == 0
            and anchor.name in BLOCKED
            and u is not None
            and u.name == "unpack"
            and id(u.operands[0]) in rg.arg
        ):
            unpack, in_block = u, channel_block(u, rg.sig(u))
            where.append(rg.arg[id(u.operands[0])])
        else:
            raise NotLowerable(f"'{anchor.name}' operand {k} is not a kernel operand")
    split = split_yields(rg, anchor)
    main = anchor.results[0]
    result = split.operands[0] if split else rg.yields[0]
    skip = {id(anchor), id(unpack), *(id(o) for o in (shuffle[2] if shuffle else [])),
            *(id(o) for o in norm.ops), *((id(up[2]),) if up else ()), *((id(scale[2]),) if scale else ()),
            *(id(o) for o in (ex.ops if ex else ()))}
    ops = [op for op in rg.ancestors(result) if id(op) not in skip]
    norms = [op for op in ops if op.name == "layer_norm"]
    if norms:
        return lower_row_norm(ctx, rg, anchor, where, ops, norms, result, table, norm)
    packs = [op for op in ops if op.name == "pack"]
    if len(packs) > 1 or (packs and anchor.name not in BLOCKED):
        raise NotLowerable(f"one pack, after {', '.join(BLOCKED)} only")
    pack = packs[0] if packs else None
    out_block = channel_block(pack, rg.sig(pack)) if pack else 0
    if out_block and main.type.dims[1] % out_block and anchor.name != "conv2d":
        # a pool's epilogue runs on whole vectors, padding lanes too, where an NCHW operand of the chain
        # would be read past its end; the conv evaluates it on real channels only
        raise NotLowerable(f"{main.type.dims[1]} channels are not whole blocks of {out_block}")
    if result is not main and not any(op.results[0] is result for op in ops):
        raise NotLowerable("the yield is not the anchor's chain")
    check_types(ctx, *ops)
    if result.type.dtype != main.type.dtype:
        raise NotLowerable(f"the chain gives {result.type.dtype}, the anchor {main.type.dtype}")
    it = index_type(*ctx.operands, *ctx.results, main.type)
    base = Space(main.type.dims, "pu" if out_block else "p", channel_lanes=bool(out_block))
    blocked = Space(pack.results[0].type.dims) if pack else None
    spaces = chain_spaces(rg, ops, main, base, blocked, pack)
    if result.type.dims != (blocked or base).dims:
        raise NotLowerable(f"the region yields {result.type}, the anchor writes {(blocked or base).dims}")
    unb = unblock(pack.results[0].type.dims, main.type.dims, "p") if pack else ""
    has_chain = any(op.name != "pack" for op in ops)
    chain = Chain(rg, "epi", ops if has_chain else [], main, result, spaces, ctype(main.type), it, unb)
    epi = chain.call if has_chain else None
    sub = Ctx(anchor.name, rg.sig(anchor), ctx.device, tuple(ctx.is_constant(a) for a in where),
              dict(ctx.schedule))
    fn = table[anchor.name]
    if in_block or out_block or up or scale or ex:
        import inspect

        if "in_block" not in inspect.signature(fn).parameters:
            raise NotLowerable(f"the {anchor.name} template takes no blocked layouts")
        low = fn(sub, epi, in_block=in_block, out_block=out_block,  # type: ignore[call-arg]
                 **({"upsample": up[1]} if up else {}), **({"in_scale": scale[1]} if scale else {}),
                 **({"expand": ex.hook} if ex else {}))
    elif shuffle:
        low = fn(sub, epi, channel_map=shuffle[1])  # type: ignore[call-arg]
    elif split:
        low = fn(sub, epi, tail=Tail(split=tuple(t.dims[-1] for t in split.result_types)), **norm.kwargs)
    else:
        low = fn(sub, epi, **norm.kwargs)
    low.pack = packed_operands(rg, low, where, anchor)
    reads = (*norm.reads, *((scale[3],) if scale else ()), *(ex.reads if ex else ()))
    if ex:  # the expansion's [C, K, 1, 1] weights as 16-wide vectors per input channel and output block
        low.pack[ex.reads[0]] = PackSpec((1, 0), (16, 16))
    chains = [chain, *((ex.chain,) if ex else ())]
    low = finish(rg, low, chains, remap(where, sorted({*chain.extras, *reads})), len(anchor.operands),
                 extra_params=True, reads=reads)
    fused_ops = (len(ops) + 1 + (unpack is not None) + 3 * bool(shuffle) + (split is not None)
                 + len(norm.ops) + (up is not None) + (scale is not None) + len(ex.ops if ex else ()))
    low.schedule = {**low.schedule, "fused": fused_ops}
    return low


def channel_scale(rg: Region, v: Value) -> tuple[int, InScale, Op, int] | None:
    """A `mul` of a kernel operand x by a per-channel factor s ([N or 1, C, 1, 1], a kernel operand:
    squeeze-excitation's scale) computing a conv2d's input `v`: (x's operand, the template's hook, the
    mul, s's operand); the conv folds s into its weights. None when `v` is no such product."""
    m = rg.producer(v)
    if m is None or m.name != "mul":
        return None
    found = channel_factor(m)
    if found is None:
        return None
    x, s = found
    if id(x) not in rg.arg or id(s) not in rg.arg:
        raise NotLowerable("a channel scale before a conv multiplies two kernel operands")
    if x.type.dtype != "f32" or s.type.dtype != "f32":
        raise NotLowerable("a channel scale before a conv of f32 only")
    per_image = s.type.rank == 4 and s.type.dims[0] > 1
    return rg.arg[id(x)], InScale(f"ep{rg.arg[id(s)]}", per_image), m, rg.arg[id(s)]


@dataclass(frozen=True)
class Expansion:
    """A 1x1 conv and its chain computing a depthwise conv's blocked input from a narrower x (an inverted
    residual's expansion), which the conv's local-memory fill computes (conv.py `Expand`)."""

    arg: int  # x's kernel operand
    hook: Expand
    ops: tuple[Op, ...]  # x's unpack if any, the 1x1 conv, its pack and chain, the unpack the conv reads
    chain: Chain
    reads: tuple[int, ...]  # the weights' and (if any) the bias's kernel operands


def expansion(rg: Region, v: Value) -> Expansion | None:
    """`v` (a depthwise conv's input) as unpack(chain(pack(conv2d 1x1 (x)))) with x a kernel operand,
    maybe through an NCHWc unpack, and a chain of ops on literals only; None when it is not one."""
    u = rg.producer(v)
    if u is None or u.name != "unpack" or channel_block(u, rg.sig(u)) != 16:
        return None
    t = u.operands[0]
    pk = next((o for o in rg.ancestors(t) if o.name == "pack"), None)
    conv = rg.producer(pk.operands[0]) if pk is not None else None
    if pk is None or conv is None or conv.name != "conv2d" or channel_block(pk, rg.sig(pk)) != 16:
        return None
    before = {id(o) for o in rg.ancestors(pk.results[0])}
    chain_ops = [o for o in rg.ancestors(t) if id(o) not in before]
    for o in chain_ops:
        if o.name not in CHAIN_OPS or any(
                rg.producer(w) is None and id(w) not in rg.splat for w in o.operands):
            raise NotLowerable(f"'{o.name}' in a fused expansion reads more than the chain and literals")
    x, xu = conv.operands[0], rg.producer(conv.operands[0])
    block = 0
    if xu is not None and xu.name == "unpack" and id(xu.operands[0]) in rg.arg:
        block = channel_block(xu, rg.sig(xu))
        x = xu.operands[0]
    elif xu is not None or id(x) not in rg.arg:
        raise NotLowerable("a fused expansion reads a kernel operand, maybe through an unpack")
    if any(id(w) not in rg.arg for w in conv.operands[1:]):
        raise NotLowerable("a fused expansion's weights and bias are kernel operands")
    main = conv.results[0]
    ops = [pk, *chain_ops] if chain_ops else []  # a pack alone passes its value through
    spaces = chain_spaces(rg, ops, main, Space(main.type.dims), Space(pk.results[0].type.dims), pk)
    chain = Chain(rg, "exp", ops, main, t if ops else main, spaces, "float", "int")
    w, *b = (rg.arg[id(o)] for o in conv.operands[1:3])
    hook = Expand("X", conv.operands[0].type.dims[1], block, f"ep{w}", f"ep{b[0]}" if b else "",
                  chain.call("{}", "0", 16) if ops else "")
    prologue = (*((xu,) if block else ()), conv, pk, *chain_ops, u)
    return Expansion(rg.arg[id(x)], hook, prologue, chain, (w, *b))


@dataclass(frozen=True)
class NormPrologue:
    """A layer_norm a matmul's or gemm's template applies to A's rows as it reads them."""

    arg: int  # the kernel operand of the norm's input
    hook: ANorm | None  # the template's hook (None: no norm, NO_NORM)
    ops: tuple[Op, ...] = ()  # the layer_norm, and the reshape after it if any
    reads: tuple[int, ...] = ()  # the kernel operands the hook reads (scale, bias)

    @property
    def kwargs(self) -> dict[str, ANorm]:
        """The keyword the contraction templates take the hook by (none without a norm)."""
        return {"a_norm": self.hook} if self.hook else {}


NO_NORM = NormPrologue(-1, None)


def norm_prologue(rg: Region, anchor: Op) -> NormPrologue | None:
    """A `layer_norm` over the last axis computing a matmul's or gemm's A from a kernel operand, maybe
    through a reshape keeping the last axis (a view: the rows are the same memory): the contraction
    normalizes A's rows as it reads them (gemm.ANorm). None when operand 0 is no such norm."""
    ln = rg.producer(anchor.operands[0])
    view = ln if ln is not None and ln.name == "reshape" else None
    if view is not None:
        ln = rg.producer(view.operands[0])
    if anchor.name not in ROW_ANCHORS or ln is None or ln.name != "layer_norm":
        return None
    x = ln.operands[0]
    k = x.type.dims[-1] if x.type.rank else 1
    if view is not None and view.results[0].type.dims[-1:] != (k,):
        raise NotLowerable("a reshape between a layer_norm and a contraction changes the last axis")
    if id(x) not in rg.arg:
        raise NotLowerable("a layer_norm before a contraction must read a kernel operand")
    if norm_axis(rg.sig(ln)["axis"], x.type.rank) != x.type.rank - 1:
        raise NotLowerable("a layer_norm before a contraction normalizes the last axis only")
    params = list(ln.operands[1:])
    if any(id(v) not in rg.arg for v in params) or any(v.type.numel not in (1, k) for v in params):
        raise NotLowerable(f"a layer_norm before a contraction has its scale and bias (1 or {k} elements) "
                           "as kernel operands")
    if x.type.dtype != "f32" or ln.results[0].type.dtype != "f32":
        raise NotLowerable("a layer_norm before a contraction of f32 only")
    names = [f"ep{rg.arg[id(v)]}" for v in params]
    exprs = [f"{nm}[0]" if v.type.numel == 1 else f"{nm}[{{k}}]" for nm, v in zip(names, params, strict=True)]
    eps = float(np.float32(rg.sig(ln)["epsilon"]))
    hook = ANorm(exprs[0], exprs[1] if len(exprs) > 1 else None, eps)
    ops = (ln, view) if view else (ln,)
    return NormPrologue(rg.arg[id(x)], hook, ops, tuple(rg.arg[id(v)] for v in params))


def split_yields(rg: Region, anchor: Op) -> Op | None:
    """The `split` along the last axis whose pieces are the region's yields (a matmul or gemm epilogue
    storing column ranges to separate results), None when the region yields one value that is not one."""
    first = rg.producer(rg.yields[0]) if rg.yields else None
    if first is None or first.name != "split":
        if len(rg.yields) != 1:
            raise NotLowerable("an epilogue region yields one value, or every piece of one split")
        return None
    x = first.operands[0]
    if (
        anchor.name not in ROW_ANCHORS
        or list(rg.yields) != list(first.results)
        or norm_axis(rg.sig(first)["axis"], x.type.rank) != x.type.rank - 1
    ):
        raise NotLowerable("a split ending an epilogue yields every piece, in order, of the last axis "
                           "of a matmul or gemm")
    return first


def lower_row_norm(ctx: Ctx, rg: Region, anchor: Op, where: list[int], ops: list[Op], norms: list[Op],
                   result: Value, table: dict[str, Anchor], norm: NormPrologue = NO_NORM) -> Lowered:
    """A matmul/gemm whose epilogue ends in a `layer_norm` over its last axis (then an elementwise chain):
    each work-item of the contraction's template computes every column block of its rows, storing the
    pre-norm values (`epi` chain applied), then normalizes those rows in place (`post` chain applied): one
    launch where there were two, and the rows are normalized while still in cache."""
    ln = norms[0]
    if len(norms) > 1 or anchor.name not in ROW_ANCHORS or len(rg.yields) != 1:
        raise NotLowerable("one layer_norm after a matmul or gemm, yielding one value")
    main = anchor.results[0]
    n = main.type.dims[-1]
    if norm_axis(rg.sig(ln)["axis"], ln.results[0].type.rank) != main.type.rank - 1:
        raise NotLowerable("a fused layer_norm normalizes the contraction's last axis only")
    params = list(ln.operands[1:])
    if any(id(v) not in rg.arg for v in params):
        raise NotLowerable("the layer_norm's scale and bias are kernel operands")
    if any(v.type.numel not in (1, n) for v in params):
        raise NotLowerable(f"a fused layer_norm's scale and bias have 1 or {n} elements")
    before = {id(anchor), *(id(o) for o in norm.ops)}  # the anchor and the norm of its A
    pre = [op for op in rg.ancestors(ln.operands[0]) if id(op) not in before]
    post = [op for op in ops if op is not ln and op not in pre]
    check_types(ctx, *ops)
    if result.type.dtype != "f32" or main.type.dtype != "f32":
        raise NotLowerable("a fused layer_norm of f32 only")
    it = index_type(*ctx.operands, *ctx.results, main.type)
    base = Space(main.type.dims)
    spaces = chain_spaces(rg, pre, main, base, None, None)
    epi = Chain(rg, "epi", pre, main, ln.operands[0], spaces, "float", it)
    tail = Chain(rg, "post", post, ln.results[0], result,
                 chain_spaces(rg, post, ln.results[0], base, None, None), "float", it)
    eps = float(np.float32(rg.sig(ln)["epsilon"]))
    names = [f"ep{rg.arg[id(v)]}" for v in params]

    def rows(g: Any) -> list[str]:
        v = V("float", g.cols if n % g.cols == 0 else 1)

        def affine(k: int) -> str:
            return f"{names[k]}[0]" if params[k].type.numel == 1 else v.load(names[k], "j")

        y = f"(x - mean) / den * {affine(0)}" + (f" + {affine(1)}" if len(params) > 1 else "")
        if post:
            y = tail.call(y, "o + j", v.w)
        guard = [f"        if (row >= {g.m}) break;"] if g.m % g.rows else []
        loop = f"for (int j = 0; j < {n}; j += {v.w})"
        total = flit(float(n), "float")
        return [
            f"    for (int i = 0; i < {g.rows}; ++i) {{  // normalize the rows just computed",
            f"        const int row = mb * {g.rows} + i;",
            *guard,
            f"        const {it} o = ((({it})b) * {g.m} + row) * {n};",
            "        __global float* yr = Y + o;",
            f"        {v.t} s = 0.0f, q = 0.0f;",
            f"        {loop} s += {v.load('yr', 'j')};",
            *(f"        {ln}" for ln in fold_lanes("add", v, "s")),
            f"        const float mean = s_s / {total};",
            f"        {loop} {{ const {v.t} d = {v.load('yr', 'j')} - mean; q += d * d; }}",
            *(f"        {ln}" for ln in fold_lanes("add", v, "q")),
            f"        const float den = sqrt(q_s / {total} + {flit(eps, 'float')});",
            f"        {loop} {{",
            f"            const {v.t} x = {v.load('yr', 'j')};",
            f"            {v.store(y, 'yr', 'j')}",
            "        }",
            "    }",
        ]

    sub = Ctx(anchor.name, rg.sig(anchor), ctx.device, tuple(ctx.is_constant(a) for a in where),
              dict(ctx.schedule))
    low = table[anchor.name](sub, epi.call if pre else None, tail=Tail(rows=rows), **norm.kwargs)
    low.pack = packed_operands(rg, low, where, anchor)
    reads = tuple(rg.arg[id(v)] for v in params) + norm.reads
    extras = sorted({*epi.extras, *tail.extras, *reads})
    low = finish(rg, low, [epi, tail], remap(where, extras), len(anchor.operands), extra_params=True,
                 reads=reads)
    low.schedule = {**low.schedule, "fused": len(ops) + 1 + len(norm.ops), "row_norm": 1}
    return low


def channel_shuffle(rg: Region, v: Value) -> tuple[int, str, list[Op]] | None:
    """`v` = a channel shuffle of kernel operand `arg` (passes/fuse_rules.channel_shuffle_ops): (the operand's
    index, the C expression of the source channel of channel `c`, the three ops); None for anything else."""
    ops = channel_shuffle_ops(v)
    if ops is None or id(ops[0].operands[0]) not in rg.arg:
        return None
    g, per = ops[0].results[0].type.dims[1:3]
    return rg.arg[id(ops[0].operands[0])], f"(c % {g}) * {per} + c / {g}", ops


def nearest_upsample(rg: Region, v: Value) -> tuple[int, Upsample, Op] | None:
    """`v` = a nearest resize of H and W of kernel operand `arg` (passes/fuse_inputs.absorbable_resize): (the
    operand's index, the conv's Upsample, the resize); None for anything else."""
    r = rg.producer(v)
    if r is None or r.name != "resize" or id(r.operands[0]) not in rg.arg:
        return None
    sig = rg.sig(r)
    x, y = r.operands[0].type, r.result.type
    if sig.attrs["mode"] != "nearest" or x.rank != 4 or x.dims[:2] != y.dims[:2]:
        return None
    rows, cols = upsample_tables(sig.attrs, x, y)
    return rg.arg[id(r.operands[0])], Upsample(x.dims[2], x.dims[3], tuple(map(int, rows)),
                                               tuple(map(int, cols))), r


# reduction regions ------------------------------------------------------------------------------------
def lower_reduction(ctx: Ctx, rg: Region) -> Lowered:
    anchors = [op for op in rg.ops if op.name in (*NORMS, *REDUCERS, *POOLS, "batch_norm")]
    if len(anchors) != 1:
        raise NotLowerable("a reduction region needs exactly one reduction or normalization")
    anchor = anchors[0]
    if anchor.name == "batch_norm":  # a per-channel affine map: the whole region is elementwise
        return lower_elementwise(ctx, rg)
    if anchor.name in POOLS:  # pools take an epilogue (and NCHWc layouts) the way conv2d does
        return lower_epilogue(ctx, rg, pool_anchors())
    if len(rg.yields) != 1:
        raise NotLowerable("a reduction region yields one value")
    x, main, result = anchor.operands[0], anchor.results[0], rg.yields[0]
    pro = rg.ancestors(x)
    ops = [op for op in rg.ancestors(result) if op is not anchor and op not in pro]
    derived = result is main or any(op.results[0] is result for op in ops)
    if not derived or result.type.dims != main.type.dims:
        raise NotLowerable("the yield is not the anchor's epilogue")
    check_types(ctx, *pro, *ops)
    c = ctype(main.type)
    if c not in ("float", "double") or result.type.dtype != main.type.dtype:
        raise NotLowerable(f"a fused '{anchor.name}' of {main.type.dtype} giving {result.type.dtype}")
    # the prologue runs on the anchor's input: its main operand is the one the anchor's kernel reads
    if pro:
        full = [v for op in pro for v in op.operands if id(v) in rg.arg and v.type == x.type]
        if not full:
            raise NotLowerable("no kernel operand of the prologue has the anchor input's shape")
        first, x_arg = full[0], rg.arg[id(full[0])]
        spaces = chain_spaces(rg, pro, first, Space(x.type.dims), None, None)
        pro_chain = Chain(rg, "pro", pro, first, x, spaces, c, index_type(x.type))
    elif id(x) in rg.arg:
        x_arg = rg.arg[id(x)]
        pro_chain = Chain(rg, "pro", [], x, x, {}, c, "int")
    else:
        raise NotLowerable(f"'{anchor.name}' operand 0 is not a kernel operand")
    spaces = chain_spaces(rg, ops, main, Space(main.type.dims), None, None)
    epi_chain = Chain(rg, "epi", ops, main, result, spaces, c, index_type(main.type))
    chains = [pro_chain, epi_chain]
    for a in {a for ch in chains for a in ch.extras}:
        if rg.args[a].type.dtype != main.type.dtype:
            raise NotLowerable(f"operand {a} of the chain is {rg.args[a].type.dtype}, not {main.type.dtype}")
    where = [x_arg]
    for k, v in enumerate(anchor.operands[1:], 1):
        if id(v) not in rg.arg:
            raise NotLowerable(f"'{anchor.name}' operand {k} is not a kernel operand")
        where.append(rg.arg[id(v)])
    sub = Ctx(anchor.name, rg.sig(anchor), ctx.device, tuple(ctx.is_constant(a) for a in where),
              dict(ctx.schedule))
    if anchor.name in NORMS:
        low = NORMS[anchor.name](sub, pro_chain.hook(), epi_chain.hook())
    else:
        low = reduce_kernels(
            anchor.name,
            x.type,
            main.type,
            reduced_axes(rg.sig(anchor)),
            ctx.device,
            epi_chain.hook() if ops else None,  # type: ignore[arg-type]
            pro_chain.hook() if pro else None,  # type: ignore[arg-type]
        )
    low.pack = packed_operands(rg, low, where, anchor)
    extras = sorted({a for ch in chains for a in ch.extras})
    low = finish(rg, low, chains, remap(where, extras), len(anchor.operands), extra_params=False)
    low.schedule = {**low.schedule, "fused": len(pro) + len(ops) + 1}
    return low


@template("kernel")
def fused(ctx: Ctx) -> Lowered:
    """A `kernel` region as one launch, by its kind; NotLowerable for what it does not cover."""
    kind = ctx.sig.attrs.get("kind", "generic")
    rg = Region(ctx)
    if kind == "elementwise":
        return lower_elementwise(ctx, rg)
    if kind == "epilogue":
        return lower_epilogue(ctx, rg)
    if kind == "reduction":
        return lower_reduction(ctx, rg)
    if kind == "gate":
        from .gate import lower_gate  # gate.py builds on this module's chains

        return lower_gate(ctx, rg)
    raise NotLowerable(f"a '{kind}' region runs op by op")


# the schedule space (space.py) -------------------------------------------------------------------------
@space("kernel")
def kernel_space(ctx: Ctx, default: Lowered) -> SchedSpace | None:
    """A fused region is tuned by the knobs of its anchor (the contraction or attention its chain hangs
    on; the last one when an expansion feeds a depthwise conv): its space, with the region's shapes."""
    anchors = [op for op in ctx.body.ops if op.name in ("conv2d", "matmul", "gemm", "attention")]
    if not anchors:
        return None
    anchor = anchors[-1]
    arg = {id(a): i for i, a in enumerate(ctx.body.args)}
    constant = tuple(id(v) in arg and ctx.is_constant(arg[id(v)]) for v in anchor.operands)
    sub = Ctx(anchor.name, op_sig(anchor, ctx.resources), ctx.device, constant, dict(ctx.schedule))
    return SPACES[anchor.name](sub, default)
