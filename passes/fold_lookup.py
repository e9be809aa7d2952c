"""fold-lookup: an elementwise chain whose only varying input is one 8-bit tensor becomes a table lookup.

An 8-bit tensor has 256 values, so any elementwise function of it alone is a table of 256 results. A QDQ
model computes its activations that way: a SiLU is dequantize(x) -> sigmoid -> quantize -> dequantize ->
mul by dequantize(x) -> quantize, six float ops a element (an exp and two divides among them) between
8-bit tensors. This pass evaluates such a chain once, with the ops' numpy references, on the 256 values,
and replaces it by `lookup(x, table)`, a load per element whose results are the references' to the bit.

A chain qualifies when
- its ops are pure elementwise ops (trait `elementwise`) with one result each and no regions,
- every operand is either the one non-constant 8-bit (i8 or ui8) value x or a constant of one element
  (a per-tensor scale or zero point: a per-channel constant would make the function depend on the
  position), and the result has x's shape,
- it has at least `min-ops` ops (default 2: one op alone is as cheap as a load), and
- its result, the chain's root, is 8-bit: a float result would trade vector arithmetic for gathers.
A root is a value of the chain used by an op outside it (or returned); where that value is a float (a
chain ending in a dequantize), the chain's last 8-bit value is tabulated and the float ops after it stay.
The chain's ops left without users are erased.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.core import Block, Module, Op, Value
from ..ir.ops.registry import get_op, load_all
from ..ir.types import TensorType
from .common import const_array, const_op, control_blocks, make_const_attr
from .manager import Pass, PassContext

EIGHT_BIT = ("i8", "ui8")
CONST = "const"  # the source of a value computed from one-element constants only


@dataclass
class Chain:
    """A value's chain: the 8-bit value x it is a function of, and the ops computing it from x, in order."""

    x: Value
    ops: tuple[Op, ...]


def _eligible(op: Op) -> bool:
    opdef = get_op(op.name)
    return (opdef is not None and opdef.has("elementwise") and opdef.has("pure")
            and opdef.reference is not None and len(op.results) == 1 and not op.regions)


def _merge(parts: list[tuple[Op, ...]]) -> tuple[Op, ...]:
    seen: dict[int, Op] = {}
    for ops in parts:
        for o in ops:
            seen.setdefault(id(o), o)
    return tuple(seen.values())


class Tabulator:
    def __init__(self, module: Module, min_ops: int):
        self.module, self.min_ops = module, min_ops
        self.source: dict[int, Chain | str | None] = {}

    def of(self, v: Value) -> Chain | str | None:
        """The chain `v` belongs to, CONST, or None (it is not a function of one 8-bit value)."""
        if id(v) in self.source:
            return self.source[id(v)]
        if v.op is not None and v.op.name == "const":
            return CONST if v.type.numel == 1 else None
        return Chain(v, ()) if v.type.dtype in EIGHT_BIT and v.type.is_static else None

    def visit(self, op: Op) -> None:
        if op.name == "const":
            self.source[id(op.results[0])] = CONST if op.results[0].type.numel == 1 else None
            return
        for r in op.results:
            self.source[id(r)] = Chain(r, ()) if r.type.dtype in EIGHT_BIT and r.type.is_static else None
        if not _eligible(op):
            return
        srcs = [self.of(v) for v in op.operands]
        chains = [s for s in srcs if isinstance(s, Chain)]
        if None in srcs or not chains or len({id(c.x) for c in chains}) != 1:
            return
        x = chains[0].x
        if op.results[0].type.shape != x.type.shape:
            return
        self.source[id(op.results[0])] = Chain(x, (*_merge([c.ops for c in chains]), op))

    def roots(self, block: Block) -> list[Chain]:
        out: list[Chain] = []
        for op in block.ops:
            if not op.results:
                continue
            c = self.source.get(id(op.results[0]))
            if not isinstance(c, Chain) or not c.ops or c.ops[-1] is not op:
                continue
            r = op.results[0]
            inside = all(isinstance(s := self.source.get(id(u.results[0])) if u.results else None, Chain)
                         and s.x is c.x and op in s.ops for u in r.users)
            if r.users and inside:
                continue
            if r.type.dtype not in EIGHT_BIT:  # a float root (a last dequantize): its last 8-bit value
                last = next((o for o in reversed(c.ops) if o.results[0].type.dtype in EIGHT_BIT), None)
                found = self.source.get(id(last.results[0])) if last is not None else None
                if not isinstance(found, Chain):
                    continue
                c = found
            if len(c.ops) >= self.min_ops and all(c is not d for d in out):
                out.append(c)
        return out

    def table(self, c: Chain) -> np.ndarray:
        """The chain's results on the 256 values of its x, in the order of x's bytes read as unsigned."""
        x = c.x.type
        every = np.arange(256, dtype=np.uint8).view(x.np_dtype)
        values = {id(c.x): every.reshape((1,) * (x.rank - 1) + (256,))}
        for op in c.ops:
            args = []
            for v in op.operands:
                a = values.get(id(v))
                if a is None:
                    a = const_array(v, self.module)
                    assert a is not None
                args.append(np.asarray(a))
            opdef = get_op(op.name)
            assert opdef is not None
            types = [TensorType(a.shape, v.type.dtype) for a, v in zip(args, op.operands, strict=True)]
            sig = opdef.sig(types, dict(op.attrs))
            sig.results = opdef.infer(sig)
            out = np.asarray(opdef.reference(sig, *args))
            values[id(op.results[0])] = out.astype(op.results[0].type.np_dtype, copy=False)
        return values[id(c.ops[-1].results[0])].reshape(256)


@dataclass
class FoldLookup(Pass):
    """Replace an elementwise chain of one 8-bit tensor by a 256-entry table lookup."""

    NAME = "fold-lookup"
    STATISTICS = {
        "num-tabulated": "Number of chains made table lookups",
        "num-ops": "Number of ops those chains had",
    }
    min_ops: int = 2

    def run(self, module: Module, ctx: PassContext) -> None:
        load_all()
        for func in module.funcs:
            for block in control_blocks(func.block):
                self.block(block, module, ctx)

    def block(self, block: Block, module: Module, ctx: PassContext) -> None:
        tab = Tabulator(module, self.min_ops)
        for op in block.ops:
            tab.visit(op)
        plans = [(c, tab.table(c)) for c in tab.roots(block)]
        for c, table in plans:
            root = c.ops[-1]
            r = root.results[0]
            t = TensorType((256,), r.type.dtype)
            cst = block.insert_before(root, const_op(root.loc, make_const_attr(table, t, module, "lookup")))
            look = block.insert_before(root, Op("lookup", [c.x, cst.results[0]], [r.type], {}, loc=root.loc))
            r.replace_all_uses_with(look.results[0])
            look.results[0].name, r.name = r.name, None
            self.stat("num-tabulated")
            self.stat("num-ops", len(c.ops))
            ctx.remark_passed("algebraic", "tabulated", list(c.ops),
                              f"{len(c.ops)} elementwise ops of one {c.x.type.dtype} tensor "
                              f"({', '.join(o.name for o in c.ops)}) made a 256-entry table lookup")
        dead = {id(o): o for c, _ in plans for o in c.ops}
        for op in reversed(block.ops[:]):  # the chains' ops left without users, last first
            if id(op) in dead and not any(r.uses for r in op.results):
                op.erase()


PASS = FoldLookup
