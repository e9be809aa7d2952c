"""Ops ONNX's signal and bit-level operators need that cannot be composed: cumprod and bitcast.

A running product is not exp(cumsum(log(x))): that loses the sign of negatives, turns zeros into NaN and
is inexact for integers, so cumprod is an op of its own. bitcast reinterprets bytes, which no arithmetic
op can express. The DFT family (DFT, STFT) composes from matmuls with constant DFT matrices at import and
needs no op here.
"""

from __future__ import annotations

import numpy as np

from ..types import ELEMENT_TYPES, SUB_BYTE_BITS, TensorType
from .registry import Cost, OpDef, Sig, attr, check, io_bytes, register

PURE = frozenset({"pure"})


# bitcast -------------------------------------------------------------------------------------------------
def _bits(t: TensorType) -> int:
    return SUB_BYTE_BITS.get(t.dtype) or 8 * t.itemsize


def _bitcast_infer(sig: Sig) -> list[TensorType]:
    x, to = sig.operands[0], sig["to"]
    check(to in ELEMENT_TYPES, f"'to' must be an element type ({', '.join(ELEMENT_TYPES)}), got '{to}'")
    out = x.with_dtype(to)
    check(_bits(out) == _bits(x),
          f"cannot reinterpret {x.dtype} ({_bits(x)} bits) as {to} ({_bits(out)} bits)")
    return [out]


def _bitcast_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    want = ELEMENT_TYPES[sig["to"]]
    if x.dtype.byteorder == ">":  # the bytes are little-endian, whatever the host
        x = x.astype(x.dtype.newbyteorder("<"))
    # one element per byte (or bytes), a sub-byte type in the low bits as ml_dtypes holds it
    raw = np.array(x, order="C", copy=True).reshape(-1).view(np.uint8)
    if want == np.bool_:  # a byte is true when it is not zero; a bool array holds only 0 and 1
        return (raw != 0).reshape(x.shape)
    return raw.view(want.newbyteorder("<")).astype(want, copy=False).reshape(x.shape)


register(OpDef("bitcast", ("x",), infer=_bitcast_infer, reference=_bitcast_ref,
               attrs={"to": attr("str")}, traits=PURE,
               cost=lambda sig: Cost(0, *io_bytes(sig)),
               doc="ONNX BitCast: the same bytes (little-endian) read as element type `to`, which must have "
                   "the operand's width; i1 reads a nonzero byte as true."))
