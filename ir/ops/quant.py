"""Quantized arithmetic: `quantize` and `dequantize` (ONNX QuantizeLinear / DequantizeLinear on integer
types), the integer contractions `conv2d_integer` and `matmul_integer` (ONNX ConvInteger / MatMulInteger:
i32 results) and their requantizing forms `qconv2d` and `qmatmul` (QLinearConv / QLinearMatMul with an
i32 bias and saturation bounds), which `fold-qdq` makes from dequantize -> conv / matmul -> quantize.

Scales and zero points are operands that broadcast against the data (per tensor: rank 0; per axis or
per block: the importer reshapes or repeats them), so `quantize` and `dequantize` are broadcasting
elementwise ops and fuse like any other. In the contractions the zero points are rank 0 for the
activation and rank 0 or one per output channel (column) for the weight, and the requantizing scale is
rank 0 or one per output channel.

Rounding is half to even and every integer result saturates to its type, as ONNX specifies. The
requantization multiplies the i32 accumulator by the scale in f64 (exact for the accumulator; the scale
is the f32 product x_scale * w_scale / y_scale), adds the output zero point, rounds (in that order, as
onnx's reference does for QLinearConv and QLinearMatMul) and clamps to
[max(min, type min), min(max, type max)]: `min` and `max` are a fused ReLU's or Clip's bounds in the
quantized domain.
"""

from __future__ import annotations

import numpy as np

from ..types import TensorType, int_range, widen
from .linalg import _matmul_parts
from .nn import CONV_ATTRS, _conv_infer, _conv_ref
from .registry import (
    Cost,
    OpDef,
    Sig,
    attr,
    broadcast_shapes,
    check,
    elementwise_cost,
    io_bytes,
    numel,
    register,
)

QUANT_TYPES = frozenset({"i8", "ui8", "i16", "ui16", "i4", "ui4", "i2", "ui2"})
"""Integer types `quantize` produces and `dequantize` reads (besides i32 for dequantize: a bias)."""
EIGHT_BIT = frozenset({"i8", "ui8"})
"""The operand types of the integer contractions."""
ELEMENTWISE = frozenset({"pure", "elementwise", "broadcasting", "layout-agnostic"})
BOUNDS = {"min": attr("int", -(2**31)), "max": attr("int", 2**31 - 1)}


def saturate(y: np.ndarray, dtype: str, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    """Round half to even, clamp to `dtype`'s range (narrowed to [lo, hi]) and convert."""
    tlo, thi = int_range(dtype)
    lo = tlo if lo is None else max(lo, tlo)
    hi = thi if hi is None else min(hi, thi)
    return np.clip(np.rint(y), lo, hi).astype(TensorType((), dtype).np_dtype)


# quantize / dequantize ------------------------------------------------------------------------------------
def _quantize_infer(sig: Sig) -> list[TensorType]:
    x, scale, zp = sig.operands
    check(x.is_float, f"quantize takes a float input, got {x}")
    check(scale.dtype == x.dtype,
          f"the scale's element type {scale.dtype} differs from the input's {x.dtype}")
    check(zp.dtype in QUANT_TYPES, f"the zero point must be an 8-, 16-, 4- or 2-bit integer, got {zp}")
    return [TensorType(broadcast_shapes(x.shape, scale.shape, zp.shape), zp.dtype)]


def _quantize_ref(sig: Sig, x: np.ndarray, scale: np.ndarray, zp: np.ndarray) -> np.ndarray:
    """As onnx's reference and onnxruntime compute it: the rounded quotient converted to i32 (a NaN,
    an infinity or a value out of i32's range becomes i32's minimum, as x86 converts), the zero point
    added with i32 wrap-around, then clamped to the type."""
    with np.errstate(all="ignore"):
        r = np.rint(widen(x) / widen(scale)).astype(np.float64)
        inside = np.isfinite(r) & (r >= -(2.0**31)) & (r < 2.0**31)
        i = np.where(inside, r, -(2.0**31)).astype(np.int64)
    q = (i + widen(zp).astype(np.int64) + 2**31) % 2**32 - 2**31
    return saturate(q.astype(np.float64), sig.operands[2].dtype)


register(OpDef(
    "quantize", ("x", "scale", "zero_point"), infer=_quantize_infer, reference=_quantize_ref,
    traits=ELEMENTWISE, cost=elementwise_cost(3),
    doc="saturate(round_half_even(x / scale) + zero_point) in the zero point's integer type; x / scale in "
        "x's float type, converted to i32 before the add as onnx's reference does (NaN, infinities and "
        "values past i32 become i32's minimum, the add wraps); scale and zero point broadcast against x "
        "(per tensor, axis or block).",
))


def _dequantize_infer(sig: Sig) -> list[TensorType]:
    x, scale, zp = sig.operands
    check(x.dtype in QUANT_TYPES | {"i32"}, f"dequantize takes an 8-, 16-, 32-, 4- or 2-bit integer, got {x}")
    check(zp.dtype == x.dtype, f"the zero point's element type {zp.dtype} differs from the input's {x.dtype}")
    check(scale.is_float, f"the scale must be a float tensor, got {scale}")
    return [TensorType(broadcast_shapes(x.shape, scale.shape, zp.shape), scale.dtype)]


def _dequantize_ref(sig: Sig, x: np.ndarray, scale: np.ndarray, zp: np.ndarray) -> np.ndarray:
    f32 = np.float32
    y = (widen(x).astype(f32) - widen(zp).astype(f32)) * widen(scale).astype(f32)
    return y.astype(sig.results[0].np_dtype if sig.results else scale.dtype)


register(OpDef(
    "dequantize", ("x", "scale", "zero_point"), infer=_dequantize_infer, reference=_dequantize_ref,
    traits=ELEMENTWISE, cost=elementwise_cost(2),
    doc="(x - zero_point) * scale, computed in f32 and given in the scale's float type; scale and zero "
        "point broadcast against x.",
))


# the quantized add ----------------------------------------------------------------------------------------
def _qadd_infer(sig: Sig) -> list[TensorType]:
    """qadd's and qmul's: two 8-bit tensors of one type, the parameters in range."""
    a, b = sig.operands
    check(a.dtype in EIGHT_BIT and b.dtype == a.dtype,
          f"takes two i8 or two ui8 tensors, got {a} and {b}")
    for k in ("a_zero_point", "b_zero_point", "zero_point"):
        lo, hi = int_range(a.dtype)
        check(lo <= sig[k] <= hi, f"{k} {sig[k]} is outside {a.dtype}")
    for k in ("a_scale", "b_scale", "scale"):
        check(np.isfinite(sig[k]) and sig[k] > 0, f"{k} must be positive and finite, got {sig[k]}")
    return [TensorType(broadcast_shapes(a.shape, b.shape), a.dtype)]


QBINARY_ATTRS = {"a_scale": attr("float"), "a_zero_point": attr("int"), "b_scale": attr("float"),
                 "b_zero_point": attr("int"), "scale": attr("float"), "zero_point": attr("int")}
"""qadd's and qmul's attributes: each operand's and the result's scale and zero point."""


def qadd_constants(sig: Sig) -> tuple[np.float32, np.float32, np.float32]:
    """(a_scale / scale, b_scale / scale, zero_point - (those ratios times the input zero points)) in
    float32, as onnxruntime's QLinearAdd (MLAS) derives them: its AVX2 kernel's compiler contracts
    `ScaleRatio_AC * ZeroPointA + ScaleRatio_BC * ZeroPointB` into fma(rac, za, rbc * zb) (one in a few
    thousand sums of a PP-OCR recognizer's residual adds rounded the other way without it)."""
    f = np.float32
    rac, rbc = f(f(sig["a_scale"]) / f(sig["scale"])), f(f(sig["b_scale"]) / f(sig["scale"]))
    zero_points = _fma32(np.array([sig["a_zero_point"]], np.float32), rac,
                         np.array([f(rbc * f(sig["b_zero_point"]))], np.float32))[0]
    fixed = f(f(sig["zero_point"]) - zero_points)
    return rac, rbc, fixed


def _fma32(x: np.ndarray, y: np.float32, z: np.ndarray) -> np.ndarray:
    """float32 fma(x, y, z): the product is exact in float64, the sum rounded to float64 then to float32
    (a double rounding that differs from one rounding only when the float64 sum lands exactly halfway
    between two float32 values, about once in 2^29)."""
    return (x.astype(np.float64) * np.float64(y) + z.astype(np.float64)).astype(np.float32)


def _qadd_ref(sig: Sig, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    rac, rbc, fixed = qadd_constants(sig)
    a32, b32 = np.asarray(a).astype(np.float32), np.asarray(b).astype(np.float32)
    v = _fma32(a32, rac, _fma32(b32, rbc, np.broadcast_to(fixed, b32.shape)))
    return saturate(v.astype(np.float64), sig.operands[0].dtype)


register(OpDef(
    "qadd", ("a", "b"), infer=_qadd_infer, reference=_qadd_ref, traits=ELEMENTWISE, cost=elementwise_cost(4),
    attrs=QBINARY_ATTRS,
    doc="quantize(dequantize(a) + dequantize(b)) with per-tensor parameters, as onnxruntime's QLinearAdd "
        "computes it: saturate(round_half_even(fma(a, a_scale / scale, fma(b, b_scale / scale, zero_point - "
        "fma(a_scale / scale, a_zero_point, b_scale / scale * b_zero_point))))) in float32 (fold-qdq makes "
        "it of a QDQ residual add); a and b broadcast.",
))


# the quantized mul ----------------------------------------------------------------------------------------
def qmul_ratio(sig: Sig) -> np.float32:
    """a_scale * b_scale / scale in float32, left to right, as onnxruntime's QLinearMul (MLAS) takes it."""
    f = np.float32
    return f(f(f(sig["a_scale"]) * f(sig["b_scale"])) / f(sig["scale"]))


def _qmul_ref(sig: Sig, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ia = np.asarray(a).astype(np.int32) - sig["a_zero_point"]
    ib = np.asarray(b).astype(np.int32) - sig["b_zero_point"]
    v = (ia * ib).astype(np.float32) * qmul_ratio(sig) + np.float32(sig["zero_point"])
    return saturate(v.astype(np.float64), sig.operands[0].dtype)


register(OpDef(
    "qmul", ("a", "b"), infer=_qadd_infer, reference=_qmul_ref, traits=ELEMENTWISE, cost=elementwise_cost(4),
    attrs=QBINARY_ATTRS,
    doc="quantize(dequantize(a) * dequantize(b)) with per-tensor parameters, as onnxruntime's QLinearMul "
        "computes it: saturate(round_half_even(float((a - a_zero_point) * (b - b_zero_point)) * (a_scale * "
        "b_scale / scale) + zero_point)) in float32, no fma (fold-qdq makes it of a QDQ mul, such as a "
        "hard-swish's); a and b broadcast.",
))


# the integer contractions ---------------------------------------------------------------------------------
def _zero_point(t: TensorType, channels: int | None, what: str) -> None:
    check(t.rank == 0 or (t.rank == 1 and channels is not None and t.dims[0] in (1, channels)),
          f"{what} must be a scalar or one per output channel ({channels}), got {t}")


def _integer_operands(sig: Sig, channels: int | None) -> None:
    x, w, xz, wz = sig.operands[:4]
    for t, what in ((x, "input"), (w, "weight")):
        check(t.dtype in EIGHT_BIT, f"the {what} must be i8 or ui8, got {t}")
    check(xz.dtype == x.dtype and xz.rank == 0, f"the input zero point must be a {x.dtype} scalar, got {xz}")
    check(wz.dtype == w.dtype, f"the weight zero point must be {w.dtype}, got {wz}")
    _zero_point(wz, channels, "the weight zero point")


def _requant_operands(sig: Sig, channels: int | None) -> str:
    scale, yz = sig.operands[4:6]
    check(scale.dtype == "f32", f"the requantizing scale must be f32, got {scale}")
    _zero_point(scale, channels, "the requantizing scale")
    check(yz.dtype in EIGHT_BIT and yz.rank == 0,
          f"the output zero point must be an i8 or ui8 scalar, got {yz}")
    if len(sig.operands) == 7:
        b = sig.operands[6]
        check(b.dtype == "i32" and b.rank == 1 and (channels is None or b.dims[0] == channels),
              f"the bias must be i32 with one value per output channel ({channels}), got {b}")
    check(sig["min"] <= sig["max"], f"min {sig['min']} is above max {sig['max']}")
    return yz.dtype


def _conv_like(sig: Sig) -> list[TensorType]:
    """conv2d's shape rules on f32 stand-ins of the 8-bit operands."""
    x, w = sig.operands[:2]
    return _conv_infer(Sig([x.with_dtype("f32"), w.with_dtype("f32")], sig.attrs))


def _conv_integer_infer(sig: Sig) -> list[TensorType]:
    (y,) = _conv_like(sig)
    _integer_operands(sig, y.shape[1])
    return [y.with_dtype("i32")]


def _shifted(x: np.ndarray, zp: np.ndarray, shape: tuple[int, ...] = ()) -> np.ndarray:
    """x - zero_point in f64 (exact), a per-channel zero point reshaped to `shape` first."""
    z = np.asarray(zp, np.float64)
    return x.astype(np.float64) - (z.reshape(shape) if z.ndim and shape else z)


def _conv_acc(sig: Sig, x: np.ndarray, w: np.ndarray, xz: np.ndarray, wz: np.ndarray) -> np.ndarray:
    """The exact accumulator in f64 (|sum| < 2^53 for any real layer)."""
    f64 = Sig([TensorType(x.shape, "f64"), TensorType(w.shape, "f64")], sig.attrs)
    return _conv_ref(f64, _shifted(x, xz), _shifted(w, wz, (-1, 1, 1, 1)))


def _contraction_cost(sig: Sig, macs: int) -> Cost:
    return Cost(2 * macs, *io_bytes(sig))


def _conv_cost(sig: Sig) -> Cost:
    return _contraction_cost(sig, sig.results[0].numel * numel(sig.operands[1].shape[1:]))


register(OpDef(
    "conv2d_integer", ("x", "w", "x_zero_point", "w_zero_point"), infer=_conv_integer_infer,
    reference=lambda sig, x, w, xz, wz: _conv_acc(sig, x, w, xz, wz).astype(np.int32),
    attrs=dict(CONV_ATTRS), cost=_conv_cost,
    doc="conv2d of (x - x_zero_point) and (w - w_zero_point), 8-bit operands, i32 result (ONNX "
        "ConvInteger); padding contributes zero.",
))


def _qconv_infer(sig: Sig) -> list[TensorType]:
    (y,) = _conv_like(sig)
    _integer_operands(sig, y.shape[1])
    return [y.with_dtype(_requant_operands(sig, y.shape[1]))]


def _requantize(sig: Sig, acc: np.ndarray, scale: np.ndarray, yz: np.ndarray, axis: int,
                bias: np.ndarray | None) -> np.ndarray:
    """saturate(rint(float32(acc + bias) * scale) + y_zero_point) within [min, max]: the product in float32
    and the zero point added after rounding, as onnxruntime requantizes (MLAS), so integer convs and
    matmuls match its QLinearConv / QGemm to the bit (rounding (acc * scale + zp) in float64 instead
    differs on ties, whose parity the zero point changes, and where float32 rounds a product onto one)."""
    s = np.asarray(scale, np.float32)
    acc = np.asarray(acc, np.int64)
    if bias is not None:
        acc = acc + np.asarray(bias, np.int64).reshape([-1] + [1] * (acc.ndim - 1 - axis % acc.ndim))
    if s.ndim:
        s = s.reshape([-1] + [1] * (acc.ndim - 1 - axis % acc.ndim))
    r = np.rint(acc.astype(np.float32) * s).astype(np.float64)
    return saturate(r + float(yz), sig.operands[5].dtype, sig["min"], sig["max"])


register(OpDef(
    "qconv2d", ("x", "w", "x_zero_point", "w_zero_point", "scale", "y_zero_point", "bias?"),
    infer=_qconv_infer,
    reference=lambda sig, x, w, xz, wz, s, yz, b=None: _requantize(sig, _conv_acc(sig, x, w, xz, wz), s, yz,
                                                                   1, b),
    attrs={**CONV_ATTRS, **BOUNDS}, cost=_conv_cost,
    doc="conv2d_integer plus the i32 bias, requantized: saturate(round(float32(acc) * scale) + y_zero_point) "
        "within [min, max] (ONNX QLinearConv, with a fused ReLU or Clip as the bounds).",
))


def _matmul_like(sig: Sig) -> tuple[TensorType, int | None]:
    a, b = sig.operands[:2]
    check(a.rank >= 2 and b.rank >= 2, f"integer matmul operands need rank >= 2, got {a} and {b}")
    batch, m, _, n = _matmul_parts(a.shape, b.shape)
    return TensorType((*batch, m, n), "i32"), n


def _matmul_integer_infer(sig: Sig) -> list[TensorType]:
    y, n = _matmul_like(sig)
    _integer_operands(sig, n)
    return [y]


def _matmul_acc(x: np.ndarray, w: np.ndarray, xz: np.ndarray, wz: np.ndarray) -> np.ndarray:
    return np.matmul(_shifted(x, xz), _shifted(w, wz, (-1,)))


def _matmul_cost(sig: Sig) -> Cost:
    a = sig.operands[0]
    return _contraction_cost(sig, sig.results[0].numel * (a.dims[-1] or 0))


register(OpDef(
    "matmul_integer", ("a", "b", "a_zero_point", "b_zero_point"), infer=_matmul_integer_infer,
    reference=lambda sig, a, b, az, bz: _matmul_acc(a, b, az, bz).astype(np.int32), cost=_matmul_cost,
    doc="matmul of (a - a_zero_point) and (b - b_zero_point), 8-bit operands of rank >= 2, i32 result "
        "(ONNX MatMulInteger with a scalar a_zero_point; b_zero_point scalar or per column).",
))


def _qmatmul_infer(sig: Sig) -> list[TensorType]:
    y, n = _matmul_like(sig)
    _integer_operands(sig, n)
    return [y.with_dtype(_requant_operands(sig, n))]


register(OpDef(
    "qmatmul", ("a", "b", "a_zero_point", "b_zero_point", "scale", "y_zero_point", "bias?"),
    infer=_qmatmul_infer, attrs=dict(BOUNDS), cost=_matmul_cost,
    reference=lambda sig, a, b, az, bz, s, yz, bias=None: _requantize(sig, _matmul_acc(a, b, az, bz), s, yz,
                                                                      -1, bias),
    doc="matmul_integer plus the i32 bias (per column), requantized like qconv2d with the scale per "
        "tensor or per column (ONNX QLinearMatMul; a quantized Gemm or FC).",
))


# table lookup ---------------------------------------------------------------------------------------------
def _lookup_infer(sig: Sig) -> list[TensorType]:
    x, table = sig.operands
    check(x.dtype in EIGHT_BIT, f"lookup indexes with an i8 or ui8 tensor, got {x}")
    check(table.rank == 1 and table.dims[0] == 256, f"the table must have 256 elements, got {table}")
    return [TensorType(x.shape, table.dtype)]


def _lookup_ref(sig: Sig, x: np.ndarray, table: np.ndarray) -> np.ndarray:
    return table[np.asarray(x).view(np.uint8)]


def _lookup_cost(sig: Sig) -> Cost:
    """Reads x and writes the result; the table (256 elements) stays in cache."""
    return Cost(0, sig.operands[0].nbytes + sig.operands[1].nbytes, sig.results[0].nbytes)


register(OpDef(
    "lookup", ("x", "table"), infer=_lookup_infer, reference=_lookup_ref, cost=_lookup_cost,
    doc="table[x] for 8-bit x, its byte read as unsigned (ui8 x: x; i8 x: x + 256 below 0, so the table "
        "holds f(0..127) then f(-128..-1)): any elementwise function of one 8-bit tensor, tabulated "
        "(fold-lookup makes it from a chain of elementwise ops, such as a QDQ model's dequantize -> "
        "sigmoid -> quantize).",
))


# qsoftmax ---------------------------------------------------------------------------------------------------
def qsoftmax_table(x_scale: float, length: int) -> np.ndarray:
    """onnxruntime's QLinearSoftmax table for ui8 x: exp((i - 255 + shift) * x_scale) as float32, i in
    0..255, shift = max(0, ln(FLT_MAX / length) - 5) / x_scale (the sums of a row cannot overflow), all
    in double as its C++ computes them."""
    import math

    shift = max(0.0, math.log(float(np.finfo(np.float32).max) / length) - 5.0) / float(np.float32(x_scale))
    xs = float(np.float32(x_scale))
    return np.array([math.exp((i - 255 + shift) * xs) for i in range(256)], np.float64).astype(np.float32)


def _qsoftmax_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    check(x.dtype == "ui8", f"qsoftmax takes a ui8 tensor, got {x}")
    check(-x.rank <= sig["axis"] < x.rank, f"axis {sig['axis']} is out of range for rank {x.rank}")
    check(sig["x_scale"] > 0 and sig["y_scale"] > 0, "the scales must be positive")
    check(0 <= sig["y_zero_point"] <= 255, f"y_zero_point {sig['y_zero_point']} is not a ui8")
    return [x]


def _qsoftmax_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    axis = sig["axis"] % x.ndim
    xm = np.moveaxis(np.asarray(x), axis, -1)
    n = xm.shape[-1]
    table = qsoftmax_table(sig["x_scale"], n)
    # the table shifted so that each row's largest x reads table[255]
    e = table[(xm.astype(np.int64) + 255 - xm.max(axis=-1, keepdims=True).astype(np.int64))]
    total = np.cumsum(e, axis=-1, dtype=np.float32)[..., -1:]  # left to right, in float32
    ys = np.float32(np.floor(1.0 / np.float32(sig["y_scale"])))
    q = np.rint((e * ys) / total).astype(np.int64) + sig["y_zero_point"]
    return np.ascontiguousarray(np.moveaxis(np.minimum(q, 255).astype(np.uint8), -1, axis))


register(OpDef(
    "qsoftmax", ("x",), infer=_qsoftmax_infer, reference=_qsoftmax_ref,
    cost=lambda sig: Cost(4 * sig.operands[0].numel, sig.operands[0].nbytes, sig.results[0].nbytes),
    attrs={"axis": attr("int", -1), "x_scale": attr("float"), "y_scale": attr("float"),
           "y_zero_point": attr("int", 0)},
    doc="quantize(softmax(dequantize(x))) along `axis` for ui8 x and y, as onnxruntime's QLinearSoftmax "
        "computes it: a 256-entry float table of exp((i - 255 + shift) * x_scale) read shifted by each "
        "row's largest x, the row summed left to right in float32, y = min(255, round_half_even(e * "
        "floor(1 / y_scale) / sum) + y_zero_point) (fold-qdq makes it of a QDQ softmax).",
))


# dynamic_quantize -------------------------------------------------------------------------------------------
def _dynamic_quantize_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    check(x.dtype == "f32", f"dynamic_quantize takes an f32 tensor, got {x}")
    return [TensorType(x.shape, "ui8"), TensorType((), "f32"), TensorType((), "ui8")]


def dynamic_quantize_params(lo: np.float32, hi: np.float32) -> tuple[np.float32, np.float32]:
    """(scale, zero point as a float) of ui8 dynamic quantization from x's range [lo, hi] with 0 in it: the
    arithmetic onnxruntime's DynamicQuantizeLinear does in float32, (hi - lo) / 255 and round_half_even(
    clamp(-lo / scale, 0, 255)); a range of one point (x all zeros) takes scale 1/255, zero point 0."""
    f = np.float32
    span = f(1.0) if hi == lo else f(f(hi) - f(lo))
    scale = f(span / f(255.0))
    with np.errstate(all="ignore"):
        zp = f(np.rint(np.clip(-(f(lo) / scale), f(0.0), f(255.0))))
    return scale, zp


def _dynamic_quantize_ref(sig: Sig, x: np.ndarray) -> list[np.ndarray]:
    x = np.asarray(x, np.float32)
    lo = np.float32(min(float(x.min()), 0.0)) if x.size else np.float32(0.0)
    hi = np.float32(max(float(x.max()), 0.0)) if x.size else np.float32(0.0)
    scale, zp = dynamic_quantize_params(lo, hi)
    with np.errstate(all="ignore"):
        y = np.clip(np.rint(x / scale) + zp, 0.0, 255.0).astype(np.uint8)
    return [y, np.array(scale, np.float32), np.array(zp, np.float32).astype(np.uint8)]


register(OpDef(
    "dynamic_quantize", ("x",), infer=_dynamic_quantize_infer, reference=_dynamic_quantize_ref, results=3,
    cost=lambda sig: Cost(3 * sig.operands[0].numel, 2 * sig.operands[0].nbytes, sig.results[0].nbytes),
    doc="ONNX DynamicQuantizeLinear: x (f32) quantized to ui8 over its own range, which is widened to hold "
        "0: scale = (max - min) / 255 (1/255 when the range is one point), zero_point = round_half_even("
        "clamp(-min / scale, 0, 255)), y = saturate(round_half_even(x / scale) + zero_point); results y, "
        "scale (f32 scalar) and zero_point (ui8 scalar), all in float32 as onnxruntime computes them. One "
        "op, so that the range reduction and the quantization lower together (two launches, not six).",
))
