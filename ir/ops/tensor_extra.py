"""Data-movement ops ONNX needs that the shape family cannot compose: cumsum, top_k, scatter_elements.

Everything else the ONNX tensor converters need (GatherND, ScatterND, OneHot, Trilu, ReverseSequence, wrap
padding) is composed from existing ops at import; ScatterND in particular is a `scatter_elements` on the
data flattened to [indexed positions, slice elements]. Parameters ONNX passes as inputs (CumSum's axis,
TopK's k) are static attributes here, as in the shape family.
"""

from __future__ import annotations

import numpy as np

from ..types import TensorType, widen
from .registry import (
    Cost,
    OpDef,
    OpError,
    Sig,
    attr,
    check,
    check_element_kind,
    io_bytes,
    norm_axis,
    register,
)

PURE = frozenset({"pure"})
INDEX_TYPES = ("i32", "i64")
SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")



# cumsum, cumprod ----------------------------------------------------------------------------------------
def _scan_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    check_element_kind(x, float_only=False)
    check(x.rank >= 1, f"operand must have rank >= 1, got {x}")
    norm_axis(sig["axis"], x.rank)
    return [x]


def running(name: str, ufunc: np.ufunc, identity: int, doc: str) -> OpDef:
    """A running reduction along `axis` (ONNX CumSum/CumProd): `exclusive` shifts in the identity so
    element i combines only the ones before it; `reverse` runs from the end."""

    def reference(sig: Sig, x: np.ndarray) -> np.ndarray:
        axis = norm_axis(sig["axis"], x.ndim)
        want = x.dtype
        y = widen(x)
        if sig["reverse"]:
            y = np.flip(y, axis)
        y = ufunc.accumulate(y, axis=axis, dtype=y.dtype) if y.size else y
        if sig["exclusive"]:
            shifted = np.full_like(y, identity)
            dst, src = [slice(None)] * y.ndim, [slice(None)] * y.ndim
            dst[axis], src[axis] = slice(1, None), slice(None, -1)
            shifted[tuple(dst)] = y[tuple(src)]
            y = shifted
        if sig["reverse"]:
            y = np.flip(y, axis)
        return np.ascontiguousarray(y).astype(want, copy=False)

    return register(OpDef(name, ("x",), infer=_scan_infer, reference=reference,
                          attrs={"axis": attr("int"), "exclusive": attr("bool", False),
                                 "reverse": attr("bool", False)},
                          traits=PURE, cost=lambda sig: Cost(sig.operands[0].numel, *io_bytes(sig)), doc=doc))


running("cumsum", np.add, 0, "ONNX CumSum: running sum along `axis`; `exclusive` leaves out the element "
        "itself, `reverse` sums from the end.")
running("cumprod", np.multiply, 1, "ONNX CumProd: running product along `axis`; `exclusive` leaves out the "
        "element itself (the first product is 1), `reverse` multiplies from the end.")


# top_k ---------------------------------------------------------------------------------------------------
def _top_k_infer(sig: Sig) -> list[TensorType]:
    x, k = sig.operands[0], sig["k"]
    check_element_kind(x, float_only=False)
    check(x.rank >= 1, f"operand must have rank >= 1, got {x}")
    axis = norm_axis(sig["axis"], x.rank)
    d = x.shape[axis]
    check(k >= 0, f"k {k} is negative")
    check(d is None or k <= d, f"k {k} is larger than dim {axis} of size {d}")
    shape = tuple(k if i == axis else s for i, s in enumerate(x.shape))
    return [x.with_shape(shape), TensorType(shape, "i64")]


def _top_k_ref(sig: Sig, x: np.ndarray) -> list[np.ndarray]:
    """Ties keep the lower index first, as onnxruntime does, for largest and smallest alike."""
    axis, k = norm_axis(sig["axis"], x.ndim), sig["k"]
    y = widen(x)
    if sig["largest"]:  # stable ascending sort of the reversed axis, read backwards
        n = y.shape[axis]
        order = n - 1 - np.flip(np.argsort(np.flip(y, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(y, axis=axis, kind="stable")
    idx = np.take(order, range(k), axis=axis).astype(np.int64)
    return [np.take_along_axis(x, idx, axis=axis), idx]


register(OpDef("top_k", ("x",), infer=_top_k_infer, reference=_top_k_ref, results=2,
               attrs={"k": attr("int"), "axis": attr("int", -1), "largest": attr("bool", True),
                      "sorted": attr("bool", True)},
               traits=PURE, cost=lambda sig: Cost(sig.operands[0].numel * max(1, sig["k"]).bit_length(),
                                                  *io_bytes(sig)),
               doc="ONNX TopK: the k largest (or smallest) elements along `axis` and their i64 indices, "
                   "always in sorted order (ties: lower index first)."))


# scatter_elements ----------------------------------------------------------------------------------------
def _scatter_infer(sig: Sig) -> list[TensorType]:
    data, indices, updates = sig.operands
    check(indices.dtype in INDEX_TYPES, f"indices must be i32 or i64, got {indices}")
    check(updates.dtype == data.dtype,
          f"updates element type {updates.dtype} differs from data's {data.dtype}")
    check(data.rank >= 1, f"cannot scatter into a rank-0 tensor ({data})")
    check(indices.rank == data.rank, f"indices has rank {indices.rank}, data has rank {data.rank}")
    check(updates.shape == indices.shape, f"updates {updates} and indices {indices} differ in shape")
    norm_axis(sig["axis"], data.rank)
    check(sig["reduction"] in SCATTER_REDUCTIONS,
          f"'reduction' must be one of {', '.join(SCATTER_REDUCTIONS)}, got {sig['reduction']!r}")
    return [data]


_REDUCERS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_ref(sig: Sig, data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
    axis = norm_axis(sig["axis"], data.ndim)
    d = data.shape[axis]
    idx = indices.astype(np.int64, copy=False)
    if idx.size and (int(idx.min()) < -d or int(idx.max()) >= d):
        bad = int(idx.min()) if int(idx.min()) < -d else int(idx.max())
        raise OpError(f"index {bad} is out of range for a dim of size {d}")
    grid: list[np.ndarray] = list(np.indices(idx.shape, sparse=True))
    grid[axis] = np.where(idx < 0, idx + d, idx)
    out = widen(data).copy()
    upd = widen(updates)
    if sig["reduction"] == "none":
        out[tuple(grid)] = upd
    else:
        _REDUCERS[sig["reduction"]].at(out, tuple(grid), upd)
    return out.astype(data.dtype, copy=False)


def _scatter_cost(sig: Sig) -> Cost:
    r, w = io_bytes(sig)
    return Cost(sig.operands[2].numel if sig["reduction"] != "none" else 0, r, w)


register(OpDef("scatter_elements", ("data", "indices", "updates"), infer=_scatter_infer,
               reference=_scatter_ref,
               attrs={"axis": attr("int", 0), "reduction": attr("str", "none", allowed=SCATTER_REDUCTIONS)},
               traits=PURE, cost=_scatter_cost,
               doc="ONNX ScatterElements: a copy of `data` with data[i.., with the `axis` index taken from "
                   "indices[i..]] = updates[i..], or combined with it by `reduction` (add, mul, max, min); "
                   "duplicate indices with reduction none keep the last update."))
