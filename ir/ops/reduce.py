"""Reductions over a set of axes (`reduce_*`) and index reductions over one axis (`argmax`, `argmin`).

`reduce_*` ops share one attribute scheme, `axes` (empty = every dim, negative counts from the end) and
`keepdims`, and carry the "reduction" trait so passes can treat them as one family. The ONNX frontend turns
opset-18 axes inputs into the attribute. `argmax` / `argmin` have a single `axis` and an i64 result, so they
are kept out of that trait: a pass that reads `axes` off a "reduction" op must not meet them.

References compute in the operand dtype (integer sums and products wrap, as onnxruntime's do); bf16 runs
through f32 since numpy has no bf16 math.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..types import TensorType, widen
from .registry import Cost, OpDef, Sig, attr, check, check_element_kind, io_bytes, norm_axis, register

REDUCE_TRAITS = frozenset({"pure", "reduction"})
INDEX_TRAITS = frozenset({"pure"})

REDUCE_ATTRS = {"axes": attr("ints", []), "keepdims": attr("bool", True)}


def reduced_axes(sig: Sig) -> tuple[int, ...]:
    """The sorted, non-negative axes a `reduce_*` op reduces: every dim when `axes` is empty."""
    rank = sig.operands[0].rank
    axes = list(sig["axes"])
    if not axes:
        return tuple(range(rank))
    check(rank > 0, f"axes {axes} given for a rank-0 operand")
    norm = [norm_axis(a, rank) for a in axes]
    for i, a in enumerate(norm):
        check(a not in norm[:i], f"duplicate axis {a} in axes {axes}")
    return tuple(sorted(norm))


def _reduced_shape(shape: tuple[int | None, ...], axes: tuple[int, ...], keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)



# reduce_* ----------------------------------------------------------------------------------------------
def _sum(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    return np.sum(x, axis=axes, keepdims=True, dtype=x.dtype)


def _max(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    # an empty reduction gives the lowest value, as ONNX specifies (numpy would raise)
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    return np.max(x, axis=axes, keepdims=True, **({"initial": low} if x.size == 0 else {}))  # type: ignore[call-overload]


def _min(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    high = np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).max
    return np.min(x, axis=axes, keepdims=True, **({"initial": high} if x.size == 0 else {}))  # type: ignore[call-overload]


def _log_sum_exp(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Shifted by the max so large inputs do not overflow; an infinite max shifts by 0 instead."""
    m = np.max(x, axis=axes, keepdims=True) if x.size else np.zeros((1,) * x.ndim, x.dtype)
    m = np.where(np.isfinite(m), m, x.dtype.type(0))
    return np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m


def reduction(name: str, fn: Callable[[np.ndarray, tuple[int, ...]], np.ndarray], *, float_only: bool = False,
              flops: int = 1, doc: str = "") -> OpDef:
    """A `reduce_*` op; `fn(x, axes)` reduces with keepdims=True and the factory drops dims if asked."""

    def infer(sig: Sig) -> list[TensorType]:
        t = sig.operands[0]
        check_element_kind(t, float_only)
        return [t.with_shape(_reduced_shape(t.shape, reduced_axes(sig), sig["keepdims"]))]

    def reference(sig: Sig, x: np.ndarray) -> np.ndarray:
        axes = reduced_axes(sig)
        want = sig.results[0].np_dtype if sig.results else x.dtype
        with np.errstate(all="ignore"):
            y = np.asarray(fn(widen(x), axes))
        if not sig["keepdims"]:
            y = y.reshape(_reduced_shape(x.shape, axes, False))
        return y.astype(want, copy=False)

    def cost(sig: Sig) -> Cost:
        r, w = io_bytes(sig)
        out = sig.results[0].numel if sig.results else 0  # the per-output finish: divide, sqrt, log
        return Cost(flops * sig.operands[0].numel + out, r, w)

    return register(OpDef(name, ("x",), infer=infer, reference=reference, attrs=REDUCE_ATTRS,
                          traits=REDUCE_TRAITS, cost=cost, doc=doc))


reduction("reduce_sum", _sum, doc="sum over axes")
reduction("reduce_mean", lambda x, ax: np.mean(x, axis=ax, keepdims=True), float_only=True,
          doc="arithmetic mean over axes")
reduction("reduce_max", _max, doc="maximum over axes (NaN propagates; -inf / the lowest int when empty)")
reduction("reduce_min", _min, doc="minimum over axes (NaN propagates; +inf / the highest int when empty)")
reduction("reduce_prod", lambda x, ax: np.prod(x, axis=ax, keepdims=True, dtype=x.dtype),
          doc="product over axes")
reduction("reduce_l1", lambda x, ax: _sum(np.abs(x), ax), flops=2, doc="sum of |x| over axes")
reduction("reduce_l2", lambda x, ax: np.sqrt(_sum(x * x, ax)), float_only=True, flops=2,
          doc="sqrt of the sum of x^2 over axes")
reduction("reduce_sum_square", lambda x, ax: _sum(x * x, ax), flops=2, doc="sum of x^2 over axes")
reduction("reduce_log_sum_exp", _log_sum_exp, float_only=True, flops=6,
          doc="log(sum(exp(x))) over axes, computed stably")


# argmax / argmin ---------------------------------------------------------------------------------------
def _index_infer(sig: Sig) -> list[TensorType]:
    t = sig.operands[0]
    check(t.dtype != "i1", f"operand must be numeric, got {t}")
    check(t.rank >= 1, f"operand must have rank >= 1, got {t}")
    axis = norm_axis(sig["axis"], t.rank)
    return [TensorType(_reduced_shape(t.shape, (axis,), sig["keepdims"]), "i64")]


def _index_reduction(name: str, fn: Callable[..., np.ndarray], doc: str) -> OpDef:
    def reference(sig: Sig, x: np.ndarray) -> np.ndarray:
        axis = norm_axis(sig["axis"], x.ndim)
        x = widen(x)
        if sig["select_last_index"]:  # search the reversed axis; index i there is n - 1 - i here
            idx = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis, keepdims=True)
        else:
            idx = fn(x, axis=axis, keepdims=True)
        if not sig["keepdims"]:
            idx = np.squeeze(idx, axis)
        return np.asarray(idx).astype(np.int64, copy=False)

    return register(OpDef(
        name, ("x",), infer=_index_infer, reference=reference,
        attrs={"axis": attr("int", 0), "keepdims": attr("bool", True),
               "select_last_index": attr("bool", False)},
        traits=INDEX_TRAITS, cost=lambda sig: Cost(sig.operands[0].numel, *io_bytes(sig)), doc=doc))


_index_reduction("argmax", np.argmax, "index (i64) of the largest element along axis; first one, or the "
                                      "last with select_last_index")
_index_reduction("argmin", np.argmin, "index (i64) of the smallest element along axis; first one, or the "
                                      "last with select_last_index")
