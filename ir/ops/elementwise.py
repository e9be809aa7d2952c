"""Elementwise ops: unary math and activations, broadcasting binary arithmetic, cast.

Each op is one `register(...)` entry made by a small factory; the numpy reference computes in the
operand's dtype (bf16, float8 and float4 through f32, the 4- and 2-bit integers through 8-bit ones).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..types import ELEMENT_TYPES, TensorType, float_max, int_range, widen
from .registry import (
    OpDef,
    Sig,
    attr,
    broadcast_shapes,
    check,
    check_element_kind,
    elementwise_cost,
    register,
)

UNARY_TRAITS = frozenset({"pure", "elementwise", "layout-agnostic"})
BINARY_TRAITS = frozenset({"pure", "elementwise", "broadcasting", "layout-agnostic"})

_erf_object = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf in f64, elementwise; an array at every rank (a ufunc from frompyfunc gives a scalar at rank 0)."""
    return np.asarray(_erf_object(np.asarray(x, np.float64)), dtype=np.float64)


def _in_float(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Run `fn` on widened copies of the operands numpy has no math for (bf16, float8 and float4 as f32,
    sub-byte integers as 8-bit ones) and cast back."""

    def run(sig: Sig, *xs: np.ndarray) -> np.ndarray:
        out_t = sig.results[0] if sig.results else None
        widened = [widen(x) for x in xs]
        with np.errstate(all="ignore"):
            y = np.asarray(fn(sig, *widened))
        want = out_t.np_dtype if out_t is not None else xs[0].dtype
        return y.astype(want, copy=False)

    return run


def unary(name: str, fn: Callable[..., np.ndarray], *, float_only: bool = True, flops: int = 1,
          attrs: dict | None = None, doc: str = "") -> OpDef:
    def infer(sig: Sig) -> list[TensorType]:
        t = sig.operands[0]
        check_element_kind(t, float_only)
        return [t]

    return register(OpDef(name, ("x",), infer=infer, reference=_in_float(fn), attrs=attrs or {},
                          traits=UNARY_TRAITS, cost=elementwise_cost(flops), doc=doc))


def _same_dtype(sig: Sig) -> None:
    a, b = sig.operands
    check(a.dtype == b.dtype, f"operand element types differ: {a.dtype} vs {b.dtype}")


def binary(name: str, fn: Callable[..., np.ndarray], *, commutative: bool = False, numeric: bool = True,
           flops: int = 1, doc: str = "") -> OpDef:
    def infer(sig: Sig) -> list[TensorType]:
        _same_dtype(sig)
        a, b = sig.operands
        if numeric:
            check(a.dtype != "i1", f"operands must be numeric, got {a}")
        return [TensorType(broadcast_shapes(a.shape, b.shape), a.dtype)]

    traits = BINARY_TRAITS | ({"commutative"} if commutative else set())
    return register(OpDef(name, ("lhs", "rhs"), infer=infer, reference=_in_float(fn),
                          traits=frozenset(traits), cost=elementwise_cost(flops), doc=doc))


# unary ---------------------------------------------------------------------------------------------------
unary("neg", lambda s, x: -x, float_only=False, doc="-x")
unary("abs", lambda s, x: np.abs(x), float_only=False, doc="|x|")
unary("sign", lambda s, x: np.sign(x), float_only=False, doc="-1, 0 or 1 by the sign of x")
unary("sqrt", lambda s, x: np.sqrt(x), doc="square root")
unary("reciprocal", lambda s, x: 1 / x, doc="1 / x")
unary("exp", lambda s, x: np.exp(x), flops=4, doc="e^x")
unary("log", lambda s, x: np.log(x), flops=4, doc="natural logarithm")
unary("tanh", lambda s, x: np.tanh(x), flops=6, doc="hyperbolic tangent")
unary("sin", lambda s, x: np.sin(x), flops=4, doc="sine")
unary("cos", lambda s, x: np.cos(x), flops=4, doc="cosine")
unary("floor", lambda s, x: np.floor(x), doc="round down")
unary("ceil", lambda s, x: np.ceil(x), doc="round up")
unary("round", lambda s, x: np.asarray(np.round(x)), doc="round half to even")
unary("erf", lambda s, x: _erf(x), flops=8, doc="Gauss error function")
unary("sigmoid", lambda s, x: 1 / (1 + np.exp(-x)), flops=4, doc="1 / (1 + e^-x)")
unary("relu", lambda s, x: np.maximum(x, 0).astype(x.dtype), float_only=False, doc="max(x, 0)")
unary("leaky_relu", lambda s, x: np.where(x >= 0, x, x * x.dtype.type(s["alpha"])), flops=2,
      attrs={"alpha": attr("float", 0.01)}, doc="x >= 0 ? x : alpha * x")
unary("elu", lambda s, x: np.where(x > 0, x, x.dtype.type(s["alpha"]) * (np.exp(x) - 1)), flops=5,
      attrs={"alpha": attr("float", 1.0)}, doc="x > 0 ? x : alpha * (e^x - 1)")
unary("selu",
      lambda s, x: x.dtype.type(s["gamma"]) * np.where(x > 0, x, x.dtype.type(s["alpha"]) * (np.exp(x) - 1)),
      flops=6, attrs={"alpha": attr("float", 1.6732632423543772), "gamma": attr("float", 1.0507009873554805)},
      doc="gamma * (x > 0 ? x : alpha * (e^x - 1))")
unary("softplus", lambda s, x: np.logaddexp(x, x.dtype.type(0)), flops=8, doc="log(1 + e^x)")
unary("softsign", lambda s, x: x / (1 + np.abs(x)), flops=3, doc="x / (1 + |x|)")
unary("hard_sigmoid", lambda s, x: np.clip(x.dtype.type(s["alpha"]) * x + x.dtype.type(s["beta"]), 0, 1),
      flops=3, attrs={"alpha": attr("float", 0.2), "beta": attr("float", 0.5)},
      doc="clip(alpha * x + beta, 0, 1)")
unary("hard_swish", lambda s, x: x * np.clip(x / x.dtype.type(6) + x.dtype.type(0.5), 0, 1), flops=4,
      doc="x * clip(x / 6 + 1/2, 0, 1)")
unary("mish", lambda s, x: x * np.tanh(np.logaddexp(x, x.dtype.type(0))), flops=12,
      doc="x * tanh(softplus(x))")
unary("gelu", lambda s, x: (0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))))
      if s["approximate"] == "tanh" else 0.5 * x * (1 + _erf(x / math.sqrt(2))),
      flops=10, attrs={"approximate": attr("str", "none", allowed=("none", "tanh"))},
      doc="x * Phi(x), exact (erf) or with the tanh approximation")


def _clip(s: Sig, x: np.ndarray) -> np.ndarray:
    """An infinite bound is an omitted one, which ONNX defines as the type's lowest/highest finite value:
    with max omitted, +inf clips to the largest float (as onnxruntime does), not to +inf."""
    lo, hi = s["min"], s["max"]
    dtype = s.operands[0].dtype  # the operand type's limits: x itself may be a widened copy
    if np.issubdtype(x.dtype, np.integer):
        info_lo, info_hi = int_range(dtype)
        lo = info_lo if math.isinf(lo) else int(lo)
        hi = info_hi if math.isinf(hi) else int(hi)
    else:
        lo = -float_max(dtype) if lo == -math.inf else lo
        hi = float_max(dtype) if hi == math.inf else hi
    return np.minimum(np.maximum(x, x.dtype.type(lo)), x.dtype.type(hi))


unary("clip", _clip, float_only=False, flops=2,
      attrs={"min": attr("float", -math.inf), "max": attr("float", math.inf)},
      doc="min(max(x, min), max); an omitted (infinite) bound is the type's finite limit")


# cast --------------------------------------------------------------------------------------------------
SATURATING = frozenset({"f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ"})
"""The float8 types `saturate` applies to (ONNX Cast-19): with it, out-of-range values and infinities clamp
to the largest finite value; without it they become NaN (inf for f8E5M2, which has one)."""


def _cast_infer(sig: Sig) -> list[TensorType]:
    to = sig["to"]
    check(to in ELEMENT_TYPES, f"'to' must be an element type ({', '.join(ELEMENT_TYPES)}), got '{to}'")
    return [sig.operands[0].with_dtype(to)]


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """Float to f8E8M0FNU (a bare exponent) as ONNX Cast-24 defines it: the f32 exponent, rounded by the
    mantissa per `round_mode`; the sign is dropped, inf and NaN become NaN, and so does rounding past the
    largest exponent unless `saturate`."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exponent == 0xFF
    if round_mode == "nearest":  # guard bit, then round, sticky or (as onnx's reference) a nonzero exponent
        up = ((bits & 0x400000) > 0) & (((bits & 0x200000) > 0) | ((bits & 0x1FFFFF) > 0) | (exponent > 0))
    elif round_mode == "up":
        up = (bits & 0x7FFFFF) > 0
    else:
        up = np.zeros(bits.shape, bool)
    up &= ~special
    if saturate:
        up &= exponent != 0xFE
    out = np.where(special, np.uint16(0xFF), exponent + up).astype(np.uint8)
    return out.view(ELEMENT_TYPES["f8E8M0FNU"])


def _cast_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    to = sig["to"]
    want = ELEMENT_TYPES[to]
    x = widen(x)  # exact; numpy has no conversions from most ml_dtypes types
    with np.errstate(all="ignore"):
        if to == "f8E8M0FNU":
            return _to_e8m0(x, sig["saturate"], sig["round_mode"])
        if to in SATURATING and sig["saturate"]:
            if x.dtype.kind != "f":
                x = x.astype(np.float64)
            x = np.clip(x, -float_max(to), float_max(to))
        return x.astype(want)


register(OpDef("cast", ("x",), infer=_cast_infer, reference=_cast_ref,
               attrs={"to": attr("str"), "saturate": attr("bool", True),
                      "round_mode": attr("str", "up", allowed=("up", "down", "nearest"))},
               traits=UNARY_TRAITS, cost=elementwise_cost(0),
               doc="Converts the element type: float to int truncates toward zero; to float8, `saturate` "
                   "clamps out-of-range values (infinities included) to the largest finite value; to "
                   "f8E8M0FNU, `round_mode` rounds the exponent up, down or to nearest (ONNX Cast-24)."))


# binary ------------------------------------------------------------------------------------------------
def _div(s: Sig, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):  # C semantics: truncate toward zero
        q = np.floor_divide(a, np.where(b == 0, 1, b))
        return q + ((q < 0) & (q * b != a))
    return a / b


def _pow(s: Sig, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        return np.power(a.astype(np.float64), b).astype(a.dtype)
    return np.power(a, b)


binary("add", lambda s, a, b: a + b, commutative=True, doc="a + b")
binary("sub", lambda s, a, b: a - b, doc="a - b")
binary("mul", lambda s, a, b: a * b, commutative=True, doc="a * b")
binary("div", _div, doc="a / b (integers truncate toward zero)")
binary("pow", _pow, flops=8, doc="a ^ b")
binary("max", lambda s, a, b: np.maximum(a, b), commutative=True, doc="elementwise maximum (NaN propagates)")
binary("min", lambda s, a, b: np.minimum(a, b), commutative=True, doc="elementwise minimum (NaN propagates)")
binary("prelu", lambda s, x, slope: np.where(x < 0, x * slope, x), flops=2,
       doc="x < 0 ? slope * x : x (slope broadcasts)")
binary("mod", lambda s, a, b: np.fmod(a, b), doc="a - b * trunc(a / b) (the sign of a)")
