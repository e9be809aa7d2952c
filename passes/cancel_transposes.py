"""cancel-transposes: compose and cancel transposes and reshapes, sinking transposes to where they cancel.

The patterns, each a fact about the ops it rewrites:
- `transpose(x, iota)` -> `x`; `transpose(transpose(x, p), q)` -> `transpose(x, p[q])` (which vanishes
  when the composition is the identity); `reshape(x)` to `x`'s shape -> `x`; `reshape(reshape(x))` ->
  `reshape(x)` (these four are canonicalize's patterns, shared).
- Sinking: `u(transpose(x, p))` -> `transpose(u(x'), p)` for an elementwise `u` whose other operands are
  constants (permuted by the inverse of `p`, or kept when they are splats) and whose result has the
  transposed operand's shape. A transpose sinks, through all its users at once, only when that removes
  transposes: the sunk copies that end at another transpose compose with it (and vanish when inverse),
  and those that end elsewhere are materialized again before that user. `transpose -> relu ->
  transpose(inverse)` becomes `relu`.
- A transpose that only moves size-1 dims (the other dims keep their order) becomes a `reshape`, a view.
- `transpose(reshape(transpose(x, p)), q)` -> `reshape(transpose(transpose(x, p), q'))` when q moves
  the dims the reshape merges or splits as blocks (torch exports transpose a [B, H, S, D] tensor as
  [B*H, S, D] and reshape it back): the transposes meet and compose; `q'` is q on the reshape's operand's
  dims, each merged dim's run of dims moved whole.

It refuses to sink, with a missed remark (category `algebraic`, reason `would-duplicate`), a transpose
whose path to a cancelling transpose branches to so many other users that sinking would not reduce the
number of transposes. It never changes a value's type.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.core import Module, Op, Value
from ..ir.ops.registry import get_op
from ..ir.types import TensorType
from .canonicalize import make_patterns
from .common import const_array, const_attr, const_op, make_const_attr, reshape_groups
from .manager import Pass, PassContext
from .rewrite import Pattern, Rewriter, apply_patterns_greedily


def perm_of(op: Op) -> list[int]:
    return [int(p) for p in op.attrs["perm"]]  # type: ignore[union-attr]


def inverse(p: list[int]) -> list[int]:
    inv = [0] * len(p)
    for i, j in enumerate(p):
        inv[j] = i
    return inv


def moves_only_unit_dims(shape: tuple[int | None, ...], perm: list[int]) -> bool:
    """The dims of size other than 1 keep their relative order, so the transpose is a reshape."""
    kept = [p for p in perm if shape[p] != 1]
    return all(d is not None for d in shape) and kept == sorted(kept)


def block_perm(a: tuple[int, ...], b: tuple[int, ...], q: list[int]) -> list[int] | None:
    """The permutation of dims `a` doing what `q` does to dims `b` (b a reshape of a), when q moves each
    group of `reshape_groups` as one block, its dims adjacent and in order; else None."""
    groups = reshape_groups(a, b)
    if groups is None:
        return None
    of = {d: g for g, (_, gb) in enumerate(groups) for d in gb}
    order: list[int] = []
    k = 0
    while k < len(q):
        g = of[q[k]]
        gb = groups[g][1]
        if q[k : k + len(gb)] != gb:
            return None
        order.append(g)
        k += len(gb)
    return [d for g in order for d in groups[g][0]]


@dataclass
class Region:
    """The ops a transpose sinks through, with where its copies end up.

    ops: the elementwise ops, in block order; terminals: (transpose user, value in the region);
    stays: region values with users outside the region (each needs a transpose copy)."""

    ops: list[Op]
    terminals: list[tuple[Op, Value]]
    stays: list[Value]

    def count_after(self, perm: list[int]) -> int:
        composed = [1 for t, _ in self.terminals if [perm[q] for q in perm_of(t)] != sorted(perm)]
        return len(self.stays) + len(composed)


class Sinker:
    def __init__(self, owner: CancelTransposes, module: Module, ctx: PassContext):
        self.owner, self.module, self.ctx = owner, module, ctx
        self.reported: set[Op] = set()

    def sinkable(self, u: Op, v: Value) -> bool:
        """`u` is elementwise, reads `v` (possibly more than once) and otherwise only constants, and
        its result has `v`'s shape."""
        d = get_op(u.name)
        if d is None or not d.has("elementwise") or len(u.results) != 1 or u.regions:
            return False
        if u.result.type.shape != v.type.shape:
            return False
        return all(w is v or (const_attr(w) is not None and w.type.rank <= v.type.rank) for w in u.operands)

    def region(self, t: Op) -> Region:
        ops: list[Op] = []
        terminals: list[tuple[Op, Value]] = []
        stays: list[Value] = []
        work = [t.result]
        while work:
            v = work.pop()
            outside = False
            for u in v.users:
                if u.name == "transpose":
                    terminals.append((u, v))
                elif self.sinkable(u, v):
                    ops.append(u)
                    work.append(u.result)
                else:
                    outside = True
            if outside:
                stays.append(v)
        order = {id(op): i for i, op in enumerate(t.parent.ops)} if t.parent is not None else {}
        ops.sort(key=lambda op: order[id(op)])
        return Region(ops, terminals, stays)

    def permuted_const(self, c: Value, inv: list[int], rank: int, anchor: Op) -> Value:
        """Constant `c`, aligned to rank `rank` as broadcasting does, permuted by `inv`; `c` itself when
        that changes nothing (a scalar-like constant, or one whose permuted dims are all 1)."""
        full = (1,) * (rank - c.type.rank) + c.type.dims
        if all(d == 1 for d in full):
            return c
        arr = const_array(c, self.module)
        assert arr is not None
        new = np.transpose(np.reshape(arr, full), inv)
        while new.ndim > c.type.rank and new.shape[0] == 1:  # no more leading 1s than broadcasting needs
            new = new[0]
        if new.shape == c.type.dims and np.array_equal(new, arr):
            return c
        assert anchor.parent is not None
        attr = make_const_attr(new, TensorType(new.shape, c.type.dtype), self.module, "permuted")
        new_c = anchor.parent.insert_before(anchor, const_op(c.op.loc if c.op else anchor.loc, attr))
        new_c.result.name = c.name
        return new_c.result

    def sink(self, t: Op, rw: Rewriter) -> bool:
        # u(transpose(x, p), c) -> transpose(u(x, c'), p), c' = transpose(c, inverse(p)): toward a cancel
        r = self.region(t)
        if not r.terminals or not r.ops:
            return False  # adjacent transposes are composed by the pattern above
        p = perm_of(t)
        before, after = 1 + len(r.terminals), r.count_after(p)
        if any(
            const_array(w, self.module) is None
            for op in r.ops
            for w in op.operands
            if const_attr(w) is not None
        ):
            return False  # an elided resource: cannot permute it
        if after >= before:
            if t not in self.reported:
                self.reported.add(t)
                self.ctx.remark_missed(
                    "algebraic",
                    "would-duplicate",
                    [t, *(u for u, _ in r.terminals)],
                    f"'transpose' not sunk toward {len(r.terminals)} transpose(s): it would need "
                    f"{len(r.stays)} copies for other users, leaving {after} transposes instead of {before}",
                )
            return False
        inv = inverse(p)
        x = t.operands[0]
        mapped: dict[int, Value] = {id(t.result): x}
        for op in r.ops:
            operands = [
                mapped[id(w)] if id(w) in mapped else self.permuted_const(w, inv, x.type.rank, op)
                for w in op.operands
            ]
            shape = tuple(op.result.type.shape[i] for i in inv)
            new = rw.create(op, op.name, operands, [op.result.type.with_shape(shape)], dict(op.attrs), op.loc)
            new.result.name = op.result.name
            mapped[id(op.result)] = new.result
        for v in r.stays:  # a copy of the transpose for the users outside the region (t itself for its own)
            if v is t.result or v.op is None:
                continue
            copy = rw.create(v.op, "transpose", [mapped[id(v)]], [v.type], {"perm": p}, t.loc)
            for u, i in list(v.uses):
                if u.name != "transpose" and u not in r.ops:
                    u.set_operand(i, copy.result)
                    rw.changed(u)
        for u, v in r.terminals:
            composed = [p[q] for q in perm_of(u)]
            src = mapped[id(v)]
            if composed == sorted(composed):
                rw.replace_op(u, [src])
            else:
                new = rw.create(u, "transpose", [src], [u.result.type], {"perm": composed}, u.loc)
                rw.replace_op(u, [new.result])
        for op in reversed(r.ops):
            if op.parent is not None and not op.result.uses:
                rw.erase_op(op)
        self.ctx.remark_passed(
            "algebraic",
            "sunk",
            [t, *(u for u, _ in r.terminals)],
            f"sank 'transpose' through {len(r.ops)} elementwise op(s): {before} transposes became {after}",
        )
        self.owner.stat("num-sunk")
        return True

    def hoist_reshape(self, t: Op, rw: Rewriter) -> bool:
        # transpose(reshape(transpose(x, p)), q) -> reshape(transpose(transpose(x, p), q')) when q moves
        # the reshape's merged or split dims as blocks: the two transposes meet and compose
        r = t.operands[0].op
        if r is None or r.name != "reshape" or len(r.result.uses) != 1:
            return False
        y = r.operands[0]
        if y.op is None or y.op.name != "transpose" or not (y.type.is_static and r.result.type.is_static):
            return False
        q = block_perm(y.type.dims, r.result.type.dims, perm_of(t))
        if q is None:
            return False
        moved = rw.create(t, "transpose", [y], [y.type.with_shape(tuple(y.type.dims[i] for i in q))],
                          {"perm": q}, t.loc)  # meets y's transpose: the compose pattern joins them
        out = rw.create(t, "reshape", [moved.result], [t.result.type], {"shape": list(t.result.type.shape)},
                        t.loc)
        out.result.name = t.result.name
        rw.replace_op(t, [out.result])
        self.owner.stat("num-hoisted")
        return True

    def to_reshape(self, t: Op, rw: Rewriter) -> bool:
        # transpose(x, p) -> reshape(x) when p only moves size-1 dims
        x = t.operands[0]
        if not moves_only_unit_dims(x.type.shape, perm_of(t)) or None in t.result.type.shape:
            return False
        new = rw.create(t, "reshape", [x], [t.result.type], {"shape": list(t.result.type.shape)})
        new.result.name = t.result.name
        rw.replace_op(t, [new.result])
        self.owner.stat("num-to-reshape")
        return True


@dataclass
class CancelTransposes(Pass):
    """Compose and cancel transpose/reshape pairs; sink transposes through elementwise ops to cancel."""

    NAME = "cancel-transposes"
    STATISTICS = {
        "num-rewrites": "Number of rewrites (compositions, cancellations, sinkings, dead ops erased)",
        "num-sunk": "Number of transposes sunk through elementwise ops toward a cancelling transpose",
        "num-to-reshape": "Number of transposes that only move size-1 dims turned into reshapes",
        "num-hoisted": "Number of reshapes moved after the transpose reading them, so that it meets the "
        "transpose before them",
    }

    def run(self, module: Module, ctx: PassContext) -> None:
        canonical = make_patterns(module)
        s = Sinker(self, module, ctx)
        patterns: dict[str, list[Pattern]] = {
            "transpose": [*canonical["transpose"], s.hoist_reshape, s.sink, s.to_reshape],
            "reshape": canonical["reshape"],
        }
        self.stat("num-rewrites", apply_patterns_greedily(module, patterns))


PASS = CancelTransposes
