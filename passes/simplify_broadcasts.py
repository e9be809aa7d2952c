"""simplify-broadcasts: drop broadcasts that the consuming elementwise ops would do anyway.

The patterns:
- `op(expand(x), y)` -> `op(x, y)` when every user of the `expand` is a `broadcasting` elementwise op
  whose result type stays the same with `x` in its place; the `expand` then dies. A `tile` that only
  repeats size-1 dims is an explicit broadcast and is treated the same way.
- A constant holding a broadcast of a smaller tensor (equal along some dims, a splat along all) shrinks
  to size 1 along those dims, keeping its rank, when every user is a `broadcasting` elementwise op whose
  result type stays the same. The module holds less data and kernels read less.
`mul` by a splat 1 and `add` of a splat 0 whose result has the other operand's type are not handled
here: canonicalize removes them already (its neutral-element patterns).

It refuses, with a missed remark (category `algebraic`, reason `shape-needed`), an expand or tile that
has a user needing the full shape (a non-broadcasting op, a broadcast that would change its result, or a
return), and likewise a shrinkable constant (of at least `min-elements` elements) that some user would
broadcast but another needs in full; constants no elementwise op reads (weights) are left alone silently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.core import Module, Op, Value
from ..ir.ops.registry import OpError, get_op
from ..ir.types import TensorType
from .common import const_array, const_attr, make_const_attr
from .manager import Pass, PassContext
from .rewrite import Pattern, Rewriter, apply_patterns_greedily


def same_result_with(user: Op, old: Value, new_type: TensorType) -> bool:
    """`user` is a broadcasting elementwise op that gives the same result types with every use of `old`
    replaced by a value of `new_type`."""
    d = get_op(user.name)
    if d is None or not d.has("broadcasting") or not d.has("elementwise") or user.regions:
        return False
    types = [new_type if w is old else w.type for w in user.operands]
    try:
        return d.infer(d.sig(types, user.attrs)) == user.result_types
    except OpError:
        return False


def all_broadcast(v: Value, new_type: TensorType) -> Op | None:
    """The first user of `v` that needs its full shape, or None when every user broadcasts anyway."""
    return next((u for u in v.users if not same_result_with(u, v, new_type)), None)


def constant_dims(a: np.ndarray) -> tuple[int, ...]:
    """The shape `a` shrinks to: size 1 along every dim all of whose slices hold the same bits."""
    bits = np.ascontiguousarray(a).view(np.uint8).reshape(*a.shape, -1) if a.size else a
    shape = list(a.shape)
    for i, n in enumerate(a.shape):
        if n > 1 and a.size:
            first = np.take(bits, [0], axis=i)
            if (bits == first).all():
                bits = first
                shape[i] = 1
    return tuple(shape)


@dataclass
class SimplifyBroadcasts(Pass):
    """Drop expands and shrink broadcast constants where the consuming elementwise ops broadcast anyway."""

    NAME = "simplify-broadcasts"
    STATISTICS = {
        "num-expands-removed": "Number of expand/tile ops whose broadcast the users do themselves",
        "num-constants-shrunk": "Number of constants shrunk to their un-broadcast shape",
        "elements-saved": "Number of constant elements no longer stored",
    }
    min_elements: int = 2

    def run(self, module: Module, ctx: PassContext) -> None:
        reported: set[Op] = set()

        def missed(op: Op, user: Op, what: str) -> None:
            if op not in reported:
                reported.add(op)
                ctx.remark_missed(
                    "algebraic",
                    "shape-needed",
                    [op, user],
                    f"{what} kept: its user '{user.name}' needs the broadcast shape",
                )

        def drop_expand(op: Op, rw: Rewriter) -> bool:
            # op(expand(x), y) -> op(x, y) when op broadcasts x to the same result
            x = op.operands[0]
            if op.name == "tile":
                repeats = op.attrs["repeats"]
                assert isinstance(repeats, list)
                if any(r != 1 and d != 1 for r, d in zip(repeats, x.type.shape, strict=True)):
                    return False  # it repeats real data, not size-1 dims
            if not op.result.uses:
                return False
            user = all_broadcast(op.result, x.type)
            if user is not None:
                missed(op, user, f"'{op.name}'")
                return False
            ctx.remark_passed(
                "algebraic",
                "broadcast",
                [op, *op.result.users],
                f"removed '{op.name}': its users broadcast {x.type} themselves",
            )
            rw.replace_op(op, [x])
            self.stat("num-expands-removed")
            return True

        def shrink_const(op: Op, rw: Rewriter) -> bool:
            # const c of shape S equal along dims D -> const c[D = 0:1], when all users broadcast it
            v = op.result
            if not v.uses or const_attr(v) is None or not v.type.is_static:
                return False
            if v.type.numel < self.min_elements:
                return False
            a = const_array(v, module)
            if a is None:
                return False
            shape = constant_dims(a)
            if shape == v.type.dims:
                return False
            small = TensorType(shape, v.type.dtype)
            user = all_broadcast(v, small)
            if user is not None:
                if any(same_result_with(u, v, small) for u in v.users):  # silent for weights and the like
                    missed(op, user, f"constant {v.type} (a broadcast of {small})")
                return False
            index = tuple(slice(0, 1) if n == 1 else slice(None) for n in shape)
            new = rw.create(op, "const", [], [small], {"value": make_const_attr(a[index], small, module)})
            new.result.name = v.name
            ctx.remark_passed("algebraic", "broadcast", [op], f"shrank constant {v.type} to {small}")
            rw.replace_op(op, [new.result])
            self.stat("num-constants-shrunk")
            self.stat("elements-saved", v.type.numel - small.numel)
            return True

        patterns: dict[str, list[Pattern]] = {
            "expand": [drop_expand],
            "tile": [drop_expand],
            "const": [shrink_const],
        }
        apply_patterns_greedily(module, patterns)


PASS = SimplifyBroadcasts
