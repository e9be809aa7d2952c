"""Ops on sizes: `shape` (a tensor's dims as an i64 tensor) and `dims` (symbolic dims as an i64 tensor).

An ONNX exporter computes sizes at run time (Shape -> Gather -> Concat -> Reshape). The importer folds such
chains into the attributes of the ops they feed, symbolic dims included (`reshape {shape = [[N], -1]}`), so
these two ops appear only where a size is used as data (a scale computed from the image size), or where a
dim has no name to compute with (`?`). Both fold to constants once the func is specialized to its sizes.
"""

from __future__ import annotations

import numpy as np

from ..symbolic import Sym
from ..types import TensorType
from .registry import Cost, OpDef, Sig, attr, check, register

PURE = frozenset({"pure"})
TO_THE_END = 2**31 - 1
"""`shape`'s default `end`: past the last dim."""
SIZE_TYPES = ("i64", "i32", "f32", "f64", "f16")
"""The element types sizes are given in (a size cast to float, as anchor grids compute with, is whole)."""


def _shape_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    dims = list(x.shape)[int(sig["start"]):int(sig["end"])]
    return [TensorType((len(dims),), "i64")]


def _shape_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    return np.array(x.shape[int(sig["start"]):int(sig["end"])], np.int64)


register(OpDef("shape", ("x",), infer=_shape_infer, reference=_shape_ref,
               attrs={"start": attr("int", 0), "end": attr("int", TO_THE_END)}, traits=PURE,
               cost=lambda sig: Cost(0, 0, sig.results[0].nbytes),
               doc="ONNX Shape: the dims of `x` (from `start` to `end`, Python-style) as an i64 tensor. "
                   "Only its operand's type is read, never its data."))


def _dims_infer(sig: Sig) -> list[TensorType]:
    values, shape = sig["values"], [int(d) for d in sig["shape"]]
    check(isinstance(values, list), "'values' must be a list")
    n = 1
    for d in shape:
        n *= d
    check(n == len(values), f"shape {shape} holds {n} elements, 'values' has {len(values)}")
    check(sig["dtype"] in SIZE_TYPES, f"'dtype' must be one of {', '.join(SIZE_TYPES)}, got {sig['dtype']}")
    return [TensorType(tuple(shape), sig["dtype"])]


def _dims_ref(sig: Sig) -> np.ndarray:
    values = sig["values"]
    if any(isinstance(v, Sym) for v in values):
        raise NotImplementedError("a `dims` op runs once its func is specialized to sizes")
    return np.array(values, TensorType((), sig["dtype"]).np_dtype).reshape([int(d) for d in sig["shape"]])


register(OpDef("dims", (), infer=_dims_infer, reference=_dims_ref,
               attrs={"values": attr("dims"), "shape": attr("ints"), "dtype": attr("str", "i64")},
               traits=PURE, cost=lambda sig: Cost(0, 0, sig.results[0].nbytes),
               doc="A tensor of sizes: `values` (ints and symbolic dims, row-major) with shape `shape`. The "
                   "values of the func's symbols once it is specialized; a constant then."))


def _range_len(start: object, limit: object, delta: int) -> object:
    from ..symbolic import floordiv, smax

    check(type(delta) is int and delta != 0, f"'delta' must be a non-zero int, got {delta}")
    if delta > 0:
        return smax(floordiv(limit - start + delta - 1, delta), 0)  # type: ignore[operator]
    return smax(floordiv(start - limit - delta - 1, -delta), 0)  # type: ignore[operator]


def _range_infer(sig: Sig) -> list[TensorType]:
    check(sig["dtype"] in SIZE_TYPES, f"'dtype' must be one of {', '.join(SIZE_TYPES)}, got {sig['dtype']}")
    return [TensorType((_range_len(sig["start"], sig["limit"], sig["delta"]),), sig["dtype"])]


def _range_ref(sig: Sig) -> np.ndarray:
    dtype = TensorType((), sig["dtype"]).np_dtype
    n = int(_range_len(sig["start"], sig["limit"], sig["delta"]))  # type: ignore[call-overload]
    return (int(sig["start"]) + np.arange(n, dtype=np.int64) * int(sig["delta"])).astype(dtype)


register(OpDef("range", (), infer=_range_infer, reference=_range_ref,
               attrs={"start": attr("dim"), "limit": attr("dim"), "delta": attr("int", 1),
                      "dtype": attr("str", "i64")},
               traits=PURE, cost=lambda sig: Cost(0, 0, sig.results[0].nbytes),
               doc="ONNX Range with whole-number start, limit and delta (in any size type), start or limit a "
                   "size: start, start + delta, ... before limit. A constant once the func is specialized."))
