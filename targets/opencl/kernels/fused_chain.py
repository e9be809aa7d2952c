"""What the `kernel` template's region lowerings share (fused.py): the region as they read it (`Region`:
kernel operands, in-region constants, ops, yields), where a chain op runs (`Space`) and how it loads its
operands there, and `Chain`: elementwise ops evaluated on one value by a helper function an anchor's
template calls on each element it loads or stores, spliced into that template's kernels by `finish`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ....ir.core import Op, Value
from ....ir.ops.registry import Sig, get_op, op_sig
from ....ir.types import TensorType
from . import elementwise as ew
from .base import Ctx, Lowered, NotLowerable, ctype, require_static
from .elementwise import offset
from .norm import NO_HOOK, Hook

CHAIN_OPS = frozenset(ew.RULES) | {"batch_norm", "lookup"}  # lookup: of a table in the region (fuse_rules)
Anchor = Callable[..., Lowered]  # (ctx, epilogue, *, in_block, out_block) -> Lowered
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
    if op.name == "lookup":  # names[1]: the table's constant array; x's byte read as unsigned (fuse
        # takes lookups into epilogues of small results only: a load an element)
        x, table = names
        if width == 1:
            return f"{table}[(uchar)({x})]"
        lanes = ", ".join(f"{table}[as_uchar{width}({x}).s{LANES[j]}]" for j in range(width))
        return f"({vt(sig.results[0], width)})({lanes})"
    return ew.expr(op.name, sig, names, width)


def vector_ok(rg: Region, ops: list[Op], types: list[TensorType], mixed: bool = False) -> bool:
    """Whether every op has a vector form and everything is of one C type; with `mixed`, each value may
    have its own type, quantize and dequantize converting between them (ew.converts: a QDQ chain's 8-bit
    loads and stores around float arithmetic)."""
    if any(op.name not in CHAIN_OPS for op in ops):
        return False
    cs = {ctype(t) for t in types} | {ctype(t) for op in ops for t in [*op.operand_types, *op.result_types]}
    if len(cs) == 1 and all(op.name in ("batch_norm", "lookup") or ew.vectorizable(op.name, rg.sig(op))
                            for op in ops):
        return True
    # converting ops (quantize, dequantize, qadd, qmul: float arithmetic between 8-bit values) lane-wise
    return mixed and all(op.name == "lookup" or (op.name != "batch_norm" and (
        ew.vectorizable(op.name, rg.sig(op)) or ew.converts(op.name, rg.sig(op)))) for op in ops)


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
    row_lanes: bool = False  # a vector's lanes never cross a row (the last dim): its broadcast reads need no
    # per-lane fallback (the integer conv's pixel vectors; with the fallback's 16 divisions at each of a
    # conv's unrolled stores, ShuffleNet int8's program doubled and its cold build took 10 s longer)


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
    if sp.row_lanes:  # the coalesced last dim holds whole rows: lanes in one row stay in one of its runs
        return fast
    lanes = ", ".join(f"{ptr}[{offset(dims, strides, f'{sp.pos} + {j}')}]" for j in range(w))
    return f"(({sp.pos}) % {dims[-1]} + {w} <= {dims[-1]} ? {fast} : ({vtype})({lanes}))"


def unblock(blocked: tuple[int, ...], nchw: tuple[int, ...], p: str) -> str:
    """The NCHW flat index of blocked (NCHWc, channel blocks of b) flat index `p`."""
    b, cb, c = blocked[-1], blocked[1], nchw[1]
    s = math.prod(nchw[2:])
    n, cblk = f"({p}) / {b * s * cb}", f"(({p}) / {b * s}) % {cb}"
    return f"({n} * {c} + {cblk} * {b} + ({p}) % {b}) * {s} + (({p}) / {b}) % {s}"


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
    lane_step: int = 1  # positions from one lane to the next (an NCHW plane: lanes across channels)
    outlined: bool = False  # called, not inlined: the integer conv's unrolled stores call it up to 16 times,
    # and inlined there it added 0.3 s of PoCL build to each conv kernel (ResNet-50 int8: 13.5 -> 27.6 s)

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
        # mixed: a requantizing chain (qconv2d's: dequantize, float ops, quantize) converts between its
        # 8-bit values and float lane-wise, as the fused elementwise kernel's does
        native = vector_ok(self.rg, [op for op in self.ops if op.name != "pack"], types, mixed=True)
        if any(w > 1 for w in widths) and not native:
            widths.add(1)
        return "".join(self.function(w, native or w == 1) for w in sorted(widths))

    def function(self, w: int, native: bool) -> str:
        vtype = self.c if w == 1 else f"{self.c}{w}"
        params = [f"{vtype} v", f"{self.it} p"] + [
            f"__global const {ctype(self.rg.args[a].type)}* restrict ep{a}" for a in self.extras
        ]
        kind = "__attribute__((noinline)) static" if self.outlined else "static inline"
        head = f"{kind} {vtype} KERNEL_{self.tag}{w}({', '.join(params)}) {{\n"
        if not native:  # lane by lane through the scalar helper
            rest = "".join(f", ep{a}" for a in self.extras)
            lanes = ", ".join(f"KERNEL_{self.tag}1(v.s{LANES[j]}, p + {j * self.lane_step}{rest})"
                              for j in range(w))
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
                if op.name == "lookup" and k == 1:  # the table: a constant array of the program
                    if id(v) not in self.rg.array:
                        raise NotLowerable("a lookup's table that is not a constant array of the region")
                    operands.append(f"KERNEL_a{self.rg.array[id(v)][0]}")
                    continue
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
