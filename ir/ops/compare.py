"""Comparisons (results are i1; bf16, float8 and float4 compare through f32), logical ops on i1, and
`where`."""

from __future__ import annotations

import numpy as np

from ..types import TensorType, widen
from .elementwise import BINARY_TRAITS, UNARY_TRAITS
from .registry import OpDef, Sig, broadcast_shapes, check, elementwise_cost, register


def comparison(name: str, fn, doc: str, commutative: bool = False) -> OpDef:
    def infer(sig: Sig) -> list[TensorType]:
        a, b = sig.operands
        check(a.dtype == b.dtype, f"operand element types differ: {a.dtype} vs {b.dtype}")
        return [TensorType(broadcast_shapes(a.shape, b.shape), "i1")]

    traits = BINARY_TRAITS | ({"commutative"} if commutative else set())
    return register(OpDef(name, ("lhs", "rhs"), infer=infer, reference=lambda s, a, b: fn(widen(a), widen(b)),
                          traits=frozenset(traits), cost=elementwise_cost(1), doc=doc))


def logical(name: str, fn, doc: str) -> OpDef:
    def infer(sig: Sig) -> list[TensorType]:
        a, b = sig.operands
        check(a.dtype == "i1" and b.dtype == "i1", f"operands must be i1 tensors, got {a} and {b}")
        return [TensorType(broadcast_shapes(a.shape, b.shape), "i1")]

    return register(OpDef(name, ("lhs", "rhs"), infer=infer, reference=lambda s, a, b: fn(a, b),
                          traits=BINARY_TRAITS | {"commutative"}, cost=elementwise_cost(1), doc=doc))


comparison("equal", np.equal, "a == b", commutative=True)
comparison("less", np.less, "a < b")
comparison("less_equal", np.less_equal, "a <= b")
comparison("greater", np.greater, "a > b")
comparison("greater_equal", np.greater_equal, "a >= b")
logical("and", np.logical_and, "a && b")
logical("or", np.logical_or, "a || b")
logical("xor", np.logical_xor, "a != b on i1")


def _not_infer(sig: Sig) -> list[TensorType]:
    check(sig.operands[0].dtype == "i1", f"operand must be an i1 tensor, got {sig.operands[0]}")
    return [sig.operands[0]]


register(OpDef("not", ("x",), infer=_not_infer, reference=lambda s, x: np.logical_not(x),
               traits=UNARY_TRAITS, cost=elementwise_cost(1), doc="!x on i1"))


def _where_infer(sig: Sig) -> list[TensorType]:
    c, x, y = sig.operands
    check(c.dtype == "i1", f"condition must be an i1 tensor, got {c}")
    check(x.dtype == y.dtype, f"operand element types differ: {x.dtype} vs {y.dtype}")
    return [TensorType(broadcast_shapes(c.shape, x.shape, y.shape), x.dtype)]


register(OpDef("where", ("cond", "x", "y"), infer=_where_infer,
               reference=lambda s, c, x, y: np.where(c, x, y),
               traits=BINARY_TRAITS, cost=elementwise_cost(1), doc="cond ? x : y, all three broadcasting"))
