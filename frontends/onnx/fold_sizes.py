"""Folding the size computations of an ONNX graph when sizes are symbolic.

With static inputs, an exporter's shape subgraph (Shape -> Gather -> Unsqueeze -> Concat -> Reshape) folds
to constants at import like any constant subgraph. With symbolic dims, `Shape` gives an i64 array whose
items are symbolic dims (`[N, 3, H, W]` as a numpy object array), and this module folds the ops such arrays
flow through, item by item: data movement (reshape, gather, slice, concat, ...), integer arithmetic
(`+ - *`, division rounding down, products), casts to integer and float types (sizes are whole numbers
in either), and comparisons that the
symbols' bounds decide. What it cannot fold (a size times 0.5, a comparison that depends on the sizes) is
left to run time: the builder emits the op on a `dims` tensor of the symbolic values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...ir.errors import OpError
from ...ir.ops.registry import OpDef, Sig
from ...ir.symbolic import Sym, floordiv, smax, smin
from ...ir.types import FLOAT_TYPES, INT_TYPES

MOVES = frozenset({"reshape", "transpose", "concat", "slice", "gather", "expand", "tile", "identity", "split",
                   "where"})
"""Ops whose numpy reference computes the right thing on object arrays of ints and symbolic dims."""


class NotFoldable(Exception):
    """The op cannot be folded on symbolic values (the builder emits it instead)."""


def is_symbolic(a: np.ndarray | None) -> bool:
    return a is not None and a.dtype == object


def normalize(a: Any) -> np.ndarray:
    """An object array whose items are all ints becomes an int64 array; symbolic ones stay objects."""
    arr = np.asarray(a, dtype=object) if not isinstance(a, np.ndarray) else a
    if arr.dtype != object:
        return arr
    flat = [v if isinstance(v, Sym) else int(v) for v in arr.reshape(-1)]
    if any(isinstance(v, Sym) for v in flat):
        out = np.empty(arr.shape, dtype=object)
        out.reshape(-1)[:] = flat
        return out
    return np.array(flat, dtype=np.int64).reshape(arr.shape)


def _elementwise(fn: Callable[[Any, Any], Any]) -> Callable[..., np.ndarray]:
    uf = np.frompyfunc(fn, 2, 1)
    return lambda sig, a, b: uf(a, b)


def _equal(a: Any, b: Any) -> bool:
    d = a - b
    if not isinstance(d, Sym):
        return d == 0
    if d > 0 or d < 0:  # decided by bounds (or Undecidable)
        return False
    raise NotFoldable("equality of symbolic dims is not decided")


def _compare(op: Callable[[Any, Any], bool]) -> Callable[..., np.ndarray]:
    uf = np.frompyfunc(op, 2, 1)
    return lambda sig, a, b: uf(a, b).astype(bool)


def _reduce(fn: Callable[..., Any]) -> Callable[..., np.ndarray]:
    def run(sig: Sig, x: np.ndarray) -> np.ndarray:
        axes = tuple(int(a) % max(x.ndim, 1) for a in sig.attrs.get("axes") or range(x.ndim))
        return np.asarray(fn(x, axis=axes, keepdims=bool(sig.attrs.get("keepdims", True))), dtype=object)

    return run


SPECIAL: dict[str, Callable[..., np.ndarray]] = {
    "add": _elementwise(lambda a, b: a + b),
    "sub": _elementwise(lambda a, b: a - b),
    "mul": _elementwise(lambda a, b: a * b),
    "neg": lambda sig, a: np.frompyfunc(lambda v: -v, 1, 1)(a),
    "reduce_prod": _reduce(np.prod),
    "reduce_sum": _reduce(np.sum),
    "div": _elementwise(lambda a, b: floordiv(a, b) if (a >= 0) and (b > 0) else _raise()),
    "max": lambda sig, *xs: _reduce_pairs(smax, xs),
    "min": lambda sig, *xs: _reduce_pairs(smin, xs),
    "equal": _compare(_equal),
    "less": _compare(lambda a, b: bool(a < b)),
    "less_equal": _compare(lambda a, b: bool(a <= b)),
    "greater": _compare(lambda a, b: bool(a > b)),
    "greater_equal": _compare(lambda a, b: bool(a >= b)),
}


def _raise() -> Any:
    raise NotFoldable("division of a possibly negative symbolic value")


def _reduce_pairs(fn: Callable[[Any, Any], Any], xs: Sequence[np.ndarray]) -> np.ndarray:
    uf = np.frompyfunc(fn, 2, 1)
    out = xs[0]
    for x in xs[1:]:
        out = uf(out, x)
    return out


def fold(opdef: OpDef, sig: Sig, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The op's results on `arrays`, some of which hold symbolic dims; NotFoldable when it cannot."""
    name = opdef.name
    objs = [a.astype(object) if a.dtype != object else a for a in arrays]
    try:
        if name == "cast":  # sizes are whole numbers: any integer or float type holds them as they are
            if sig["to"] not in INT_TYPES and sig["to"] not in FLOAT_TYPES:
                raise NotFoldable("a cast of symbolic sizes to a non-numeric type")
            out: Any = objs[0].copy()
        elif name in SPECIAL:
            out = SPECIAL[name](sig, *objs)
        elif name in MOVES:
            out = opdef.reference(sig, *objs)
        else:
            raise NotFoldable(f"'{name}' is not folded on symbolic sizes")
    except (OpError, TypeError, ValueError, OverflowError, ZeroDivisionError) as e:
        raise NotFoldable(str(e)) from None
    outs = list(out) if isinstance(out, list | tuple) else [out]
    return [normalize(np.asarray(o, dtype=object) if not isinstance(o, np.ndarray) else o) for o in outs]
