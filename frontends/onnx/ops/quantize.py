"""Converters for QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (per-tensor, per-axis
and blocked; integer, float8 and float4 targets)."""

from __future__ import annotations

import numpy as np

from ....ir.types import int_range
from ..builder import Builder, ConversionError, Tensor
from ..registry import converter
from ..types import onnx_element_type
from .misc import _float_only, _scalar

# quantization ----------------------------------------------------------------------------------------
QUANT_RANGES = {t: int_range(t) for t in ("ui8", "i8", "ui16", "i16", "ui4", "i4", "ui2", "i2")}
QUANT_FLOATS = frozenset({"f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ", "f4E2M1FN"})
"""Float types QuantizeLinear rounds to by a cast (saturating for float8 unless saturate=0); their zero
point must be 0, and only f4E2M1FN adds it, as onnx's reference does."""


def _quant_param(b: Builder, p: Tensor, x: Tensor, axis: int, block_size: int) -> Tensor:
    """A scale or zero point made to broadcast against x: per tensor, per axis, or repeated per block."""
    if p.rank == 0 or p.type.numel == 1:
        return b.reshape(p, [])
    axis = axis % x.rank
    if not block_size:
        if p.rank != 1 or p.shape[0] != x.shape[axis]:
            raise ConversionError(f"a per-axis scale / zero point must be [{x.shape[axis]}], got {p.type}")
        return b.reshape(p, [x.shape[axis] if i == axis else 1 for i in range(x.rank)])
    if p.rank != x.rank or any(p.shape[i] != x.shape[i] for i in range(x.rank) if i != axis) or \
            p.shape[axis] != -(-x.shape[axis] // block_size):
        raise ConversionError(f"blocked scale / zero point {p.type} does not fit input {x.type} with "
                              f"block_size {block_size} on axis {axis}")
    return b.op("gather", [p, b.const(np.arange(x.shape[axis]) // block_size)], {"axis": axis})


def _zero_float_zero_point(zero_point: Tensor | None, dtype: str) -> None:
    """A float zero point must be 0, as ONNX says (and onnx's reference checks for float8); checked where
    it is a constant."""
    if zero_point is not None and zero_point.is_const and \
            np.any(zero_point.const().astype(np.float32) != 0):
        raise ConversionError(f"a {dtype} zero point must be 0")


@converter("QuantizeLinear", since=10)
def QuantizeLinear(b: Builder, x: Tensor, y_scale: Tensor, y_zero_point: Tensor | None = None, *,
                   axis: int = 1, block_size: int = 0, output_dtype: int = 0, precision: int = 0,
                   saturate: int = 1) -> Tensor:
    if y_zero_point is not None:
        out = y_zero_point.dtype
    else:
        out = onnx_element_type(output_dtype, "output_dtype") if output_dtype else "ui8"
    if out not in QUANT_RANGES and out not in QUANT_FLOATS:
        raise ConversionError(f"quantizing to {out} is unsupported (8-, 16-, 4- and 2-bit integers, float8 "
                              f"and float4 are)")
    scale = _quant_param(b, y_scale, x, axis, block_size)
    work = onnx_element_type(precision, "precision") if precision else x.dtype
    if not precision and scale.dtype != x.dtype:
        work = "f32"
    if out in QUANT_FLOATS:
        q = b.op("div", [b.cast(x, work), b.cast(scale, work)])
        if out != "f4E2M1FN":
            _zero_float_zero_point(y_zero_point, out)
        elif y_zero_point is not None:  # onnx's reference adds a float4 zero point
            q = b.op("add", [q, b.cast(_quant_param(b, y_zero_point, x, axis, block_size), work)])
        return b.op("cast", [q], {"to": out} if saturate else {"to": out, "saturate": False})
    zp = _quant_param(b, y_zero_point, x, axis, block_size) if y_zero_point is not None else \
        _scalar(b, 0, out)
    return b.op("quantize", [b.cast(x, work), b.cast(scale, work), zp])


@converter("DequantizeLinear", since=10)
def DequantizeLinear(b: Builder, x: Tensor, x_scale: Tensor, x_zero_point: Tensor | None = None, *,
                     axis: int = 1, block_size: int = 0, output_dtype: int = 0) -> Tensor:
    if x.dtype not in QUANT_RANGES and x.dtype not in QUANT_FLOATS and x.dtype != "i32":
        raise ConversionError(f"dequantizing {x.dtype} is unsupported (8-, 16-, 32-, 4- and 2-bit integers, "
                              f"float8 and float4 are)")
    out = onnx_element_type(output_dtype, "output_dtype") if output_dtype else x_scale.dtype
    scale = _quant_param(b, x_scale, x, axis, block_size)
    if out != scale.dtype:
        scale = b.cast(scale, "f32")
    if x.dtype not in QUANT_FLOATS:
        zp = _quant_param(b, x_zero_point, x, axis, block_size) if x_zero_point is not None else \
            _scalar(b, 0, x.dtype)
        return b.cast(b.op("dequantize", [x, scale, zp]), out)
    _zero_float_zero_point(x_zero_point, x.dtype)
    return b.cast(b.op("mul", [b.cast(x, "f32"), b.cast(scale, "f32")]), out)


@converter("DynamicQuantizeLinear", since=11)
def DynamicQuantizeLinear(b: Builder, x: Tensor) -> list[Tensor]:
    _float_only(x, "DynamicQuantizeLinear's input")
    return b.ops("dynamic_quantize", [b.cast(x, "f32")])
