"""Structural ops: const, identity, return, yield."""

from __future__ import annotations

import numpy as np

from ..attributes import DenseAttr, ResourceAttr
from ..types import TensorType
from .registry import Cost, OpDef, Sig, attr, check, register


def _const_infer(sig: Sig) -> list[TensorType]:
    value = sig["value"]
    check(isinstance(value, DenseAttr | ResourceAttr), "'value' must be a dense<> or dense_resource<> tensor")
    return [value.type]


def const_value(sig: Sig) -> np.ndarray:
    value = sig["value"]
    if isinstance(value, DenseAttr):
        return value.data
    check(sig.resources is not None and value.name in sig.resources, f"unknown resource '{value.name}'")
    return sig.resources[value.name].array(value.type)


register(OpDef(
    "const", (),
    infer=_const_infer,
    reference=lambda sig: const_value(sig),
    attrs={"value": attr("dense")},
    traits=frozenset({"pure", "constant"}),
    cost=lambda sig: Cost(0, 0, 0),
    doc="A tensor constant: `dense<...>` literal or `dense_resource<name>` weight.",
))

register(OpDef(
    "identity", ("x",),
    infer=lambda sig: [sig.operands[0]],
    reference=lambda sig, x: x,
    traits=frozenset({"pure", "elementwise", "layout-agnostic"}),
    doc="Returns its operand unchanged.",
))


def _terminator(name: str, doc: str) -> OpDef:
    return register(OpDef(
        name, ("values*",),
        infer=lambda sig: [],
        reference=lambda sig, *xs: list(xs),
        results=0,
        traits=frozenset({"terminator"}),
        cost=lambda sig: Cost(),
        doc=doc,
    ))


_terminator("return", "Ends a func and gives its results.")
_terminator("yield", "Ends a kernel region and gives the kernel's results.")
