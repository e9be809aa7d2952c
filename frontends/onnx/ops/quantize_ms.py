"""Converters for onnxruntime's `com.microsoft` quantized operators, the ones its quantization tool emits
in QOperator format: QLinearAdd, QLinearMul, QLinearConcat, QLinearGlobalAveragePool,
QLinearAveragePool, QLinearSoftmax, QLinearSigmoid, QLinearLeakyRelu and QGemm; and the dynamic ones its
quantize_dynamic and transformer optimizer make: DynamicQuantizeLSTM, MatMulIntegerToFloat and
DynamicQuantizeMatMul (integer matmuls scaled back to float).

Each becomes its dequantize -> float op -> quantize form, as the QDQ format writes it: `fuse` makes the
elementwise ones one kernel reading and writing 8-bit values, and `fold-qdq` turns QGemm into a `qmatmul`,
QLinearAdd into a `qadd`, QLinearSoftmax into a `qsoftmax` and QLinearAveragePool's quantize into its
rounding, onnxruntime's arithmetic for each.
"""

from __future__ import annotations

import numpy as np

from ..builder import Builder, ConversionError, Tensor
from ..registry import converter
from .misc import _scalar
from .nn import AveragePool
from .norm import _coerced
from .quantize import DequantizeLinear, QuantizeLinear

MS = "com.microsoft"


def _dq(b: Builder, x: Tensor, scale: Tensor, zero_point: Tensor | None, axis: int = 1) -> Tensor:
    return DequantizeLinear(b, x, scale, zero_point, axis=axis)


def _q(b: Builder, y: Tensor, scale: Tensor, zero_point: Tensor | None, like: Tensor) -> Tensor:
    """y quantized; with no zero point, to the type of the input `like` (as onnxruntime's kernels do)."""
    if zero_point is None:
        zero_point = _scalar(b, 0, like.dtype)
    return QuantizeLinear(b, y, scale, zero_point)


def _binary(b: Builder, name: str, A: Tensor, A_scale: Tensor, A_zero_point: Tensor | None, B: Tensor,
            B_scale: Tensor, B_zero_point: Tensor | None, C_scale: Tensor,
            C_zero_point: Tensor | None) -> Tensor:
    y = b.op(name, [_dq(b, A, A_scale, A_zero_point), _dq(b, B, B_scale, B_zero_point)])
    return _q(b, y, C_scale, C_zero_point, A)


@converter("QLinearAdd", domain=MS)
def QLinearAdd(b: Builder, A: Tensor, A_scale: Tensor, A_zero_point: Tensor | None, B: Tensor,
               B_scale: Tensor, B_zero_point: Tensor | None, C_scale: Tensor,
               C_zero_point: Tensor | None = None) -> Tensor:
    return _binary(b, "add", A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point)


@converter("QLinearMul", domain=MS)
def QLinearMul(b: Builder, A: Tensor, A_scale: Tensor, A_zero_point: Tensor | None, B: Tensor,
               B_scale: Tensor, B_zero_point: Tensor | None, C_scale: Tensor,
               C_zero_point: Tensor | None = None) -> Tensor:
    return _binary(b, "mul", A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point)


@converter("QLinearConcat", domain=MS)
def QLinearConcat(b: Builder, Y_scale: Tensor, Y_zero_point: Tensor, *inputs: Tensor | None,
                  axis: int) -> Tensor:
    """Inputs after Y's scale and zero point come in (X, X_scale, X_zero_point) triples."""
    if len(inputs) % 3 or not inputs:
        raise ConversionError(f"QLinearConcat takes (X, scale, zero point) triples, got {len(inputs)} inputs")
    parts = []
    for i in range(0, len(inputs), 3):
        x, s, z = inputs[i:i + 3]
        if x is None or s is None:
            raise ConversionError(f"QLinearConcat input triple {i // 3} lacks its tensor or scale")
        parts.append(_dq(b, x, s, z))
    return QuantizeLinear(b, b.op("concat", parts, {"axis": axis}), Y_scale, Y_zero_point)


@converter("QLinearGlobalAveragePool", domain=MS)
def QLinearGlobalAveragePool(b: Builder, X: Tensor, x_scale: Tensor, x_zero_point: Tensor | None,
                             y_scale: Tensor, y_zero_point: Tensor | None = None, *,
                             channels_last: int = 0) -> Tensor:
    x = _dq(b, X, x_scale, x_zero_point)
    if channels_last:
        y = b.op("reduce_mean", [x], {"axes": list(range(1, X.rank - 1)), "keepdims": True})
    else:
        y = b.op("global_avg_pool", [x])
    return _q(b, y, y_scale, y_zero_point, X)


@converter("QLinearAveragePool", domain=MS)
def QLinearAveragePool(b: Builder, X: Tensor, x_scale: Tensor, x_zero_point: Tensor | None, y_scale: Tensor,
                       y_zero_point: Tensor | None = None, *, auto_pad: str = "NOTSET", ceil_mode: int = 0,
                       channels_last: int = 0, count_include_pad: int = 0, kernel_shape: list[int],
                       pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
    x = _dq(b, X, x_scale, x_zero_point)
    if channels_last:  # NHWC: the pool on NCHW between two transposes
        x = b.op("transpose", [x], {"perm": [0, X.rank - 1, *range(1, X.rank - 1)]})
    y = AveragePool(b, x, auto_pad=auto_pad, ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                    kernel_shape=kernel_shape, pads=pads, strides=strides)
    if channels_last:
        y = b.op("transpose", [y], {"perm": [0, *range(2, X.rank), 1]})
    return _q(b, y, y_scale, y_zero_point, X)


@converter("QLinearSoftmax", domain=MS)
def QLinearSoftmax(b: Builder, X: Tensor, X_scale: Tensor, x_zero_point: Tensor | None, y_scale: Tensor,
                   y_zero_point: Tensor | None = None, *, axis: int | None = None, opset: int) -> Tensor:
    """Softmax with the semantics of the opset it was made from (below 13: rows of the input flattened at
    `axis`, default 1; from 13: one axis, default -1)."""
    x = _dq(b, X, X_scale, x_zero_point)
    y = _coerced(b, x, axis, lambda t, a: b.op("softmax", [t], {"axis": a}), opset)
    return _q(b, y, y_scale, y_zero_point, X)


@converter("QLinearSigmoid", domain=MS)
def QLinearSigmoid(b: Builder, X: Tensor, X_scale: Tensor, X_zero_point: Tensor | None, Y_scale: Tensor,
                   Y_zero_point: Tensor | None = None) -> Tensor:
    return _q(b, b.op("sigmoid", [_dq(b, X, X_scale, X_zero_point)]), Y_scale, Y_zero_point, X)


@converter("QLinearLeakyRelu", domain=MS)
def QLinearLeakyRelu(b: Builder, X: Tensor, X_scale: Tensor, X_zero_point: Tensor | None, Y_scale: Tensor,
                     Y_zero_point: Tensor | None = None, *, alpha: float = 0.01) -> Tensor:
    y = b.op("leaky_relu", [_dq(b, X, X_scale, X_zero_point)], {"alpha": float(alpha)})
    return _q(b, y, Y_scale, Y_zero_point, X)


@converter("QGemm", domain=MS)
def QGemm(b: Builder, A: Tensor, a_scale: Tensor, a_zero_point: Tensor | None, B: Tensor, b_scale: Tensor,
          b_zero_point: Tensor | None, C: Tensor | None = None, y_scale: Tensor | None = None,
          y_zero_point: Tensor | None = None, *, alpha: float = 1.0, transA: int = 0,
          transB: int = 0) -> Tensor:
    """alpha * A' @ B' + C with the 8-bit A and B dequantized (B's scale per tensor or per output column)
    and the i32 bias C at scale a_scale * b_scale; quantized when y_scale is given, else float."""
    a = _dq(b, A, a_scale, a_zero_point)
    bf = _dq(b, B, b_scale, b_zero_point, axis=0 if transB else 1)
    inputs = [a, bf]
    if C is not None:
        c_scale = b.op("mul", [b.reshape(a_scale, []), b_scale if b_scale.type.numel > 1
                               else b.reshape(b_scale, [])])
        zero = b.const(np.zeros((), np.int32))
        inputs.append(DequantizeLinear(b, C, c_scale, zero, axis=0))
    y = b.op("gemm", inputs, {"alpha": float(alpha), "beta": 1.0, "trans_a": bool(transA),
                              "trans_b": bool(transB)})
    return y if y_scale is None else _q(b, y, y_scale, y_zero_point, A)


def _integer_to_float(b: Builder, A: Tensor, B: Tensor, a_scale: Tensor, b_scale: Tensor,
                      a_zero_point: Tensor | None, b_zero_point: Tensor | None,
                      bias: Tensor | None) -> Tensor:
    """(A - a_zero_point) @ (B - b_zero_point) as an integer matmul (MatMulInteger's), its i32 result times
    a_scale * b_scale (a scalar, or one per column of B) in float32, plus the bias: as onnxruntime's
    MatMulIntegerToFloat and DynamicQuantizeMatMul compute it. The result is in a_scale's float type."""
    from .linalg import MatMulInteger

    acc = MatMulInteger(b, A, B, a_zero_point, b_zero_point)
    bs = b.cast(b_scale if b_scale.type.numel > 1 else b.reshape(b_scale, []), "f32")
    scale = b.op("mul", [b.cast(b.reshape(a_scale, []), "f32"), bs])
    y = b.op("mul", [b.cast(acc, "f32"), scale])
    if bias is not None:
        y = b.op("add", [y, b.cast(bias, "f32")])
    return b.cast(y, a_scale.dtype)


@converter("MatMulIntegerToFloat", domain=MS)
def MatMulIntegerToFloat(b: Builder, A: Tensor, B: Tensor, a_scale: Tensor, b_scale: Tensor,
                         a_zero_point: Tensor | None = None, b_zero_point: Tensor | None = None,
                         bias: Tensor | None = None) -> Tensor:
    """onnxruntime's fusion of MatMulInteger -> Cast -> Mul (what its transformer optimizer makes of a
    quantize_dynamic model): an integer matmul scaled back to float."""
    return _integer_to_float(b, A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias)


@converter("DynamicQuantizeMatMul", domain=MS)
def DynamicQuantizeMatMul(b: Builder, A: Tensor, B: Tensor, b_scale: Tensor,
                          b_zero_point: Tensor | None = None, bias: Tensor | None = None) -> Tensor:
    """onnxruntime's fusion of DynamicQuantizeLinear -> MatMulInteger -> scale: float A quantized to ui8
    over its own range (`dynamic_quantize`), then MatMulIntegerToFloat's arithmetic."""
    from .quantize import DynamicQuantizeLinear

    aq, a_scale, a_zp = DynamicQuantizeLinear(b, A)
    return b.cast(_integer_to_float(b, aq, B, a_scale, b_scale, a_zp, b_zero_point, bias), A.dtype)


@converter("DynamicQuantizeLSTM", domain=MS)
def DynamicQuantizeLSTM(b: Builder, X: Tensor, W: Tensor, R: Tensor, B: Tensor | None = None,
                        sequence_lens: Tensor | None = None, initial_h: Tensor | None = None,
                        initial_c: Tensor | None = None, P: Tensor | None = None,
                        W_scale: Tensor | None = None, W_zero_point: Tensor | None = None,
                        R_scale: Tensor | None = None, R_zero_point: Tensor | None = None, *,
                        activation_alpha: list[float] | None = None,
                        activation_beta: list[float] | None = None, activations: list[str] | None = None,
                        clip: float | None = None, direction: str = "forward", hidden_size: int | None = None,
                        input_forget: int = 0) -> list[Tensor | None]:
    """onnxruntime's dynamically quantized LSTM (what its quantize_dynamic makes of an LSTM): W [D, I, 4H]
    and R [D, H, 4H] of 8-bit integers (transposed against LSTM's), with one scale and zero point per
    direction or per column. As onnxruntime computes it: X is quantized once (uint8, one scale and zero
    point over the whole sequence) for its projection, an integer matmul per direction scaled back to
    float; the recurrence is a `qlstm_scan`, which quantizes h the same way at every step."""
    from .common import _transpose
    from .linalg import MatMulInteger
    from .quantize import DynamicQuantizeLinear
    from .recurrent import Layer, _scan_activations, _take

    quant = {"W_scale": W_scale, "W_zero_point": W_zero_point, "R_scale": R_scale,
             "R_zero_point": R_zero_point}
    missing = [k for k, v in quant.items() if v is None]
    if missing:
        raise ConversionError(f"DynamicQuantizeLSTM needs {', '.join(missing)}")
    if W.dtype not in ("i8", "ui8") or R.dtype not in ("i8", "ui8"):
        raise ConversionError(f"DynamicQuantizeLSTM needs W and R of 8-bit integers, got {W.type} and "
                              f"{R.type}")
    L = Layer(b, "DynamicQuantizeLSTM", 4, X, _transpose(b, W, [0, 2, 1]), _transpose(b, R, [0, 2, 1]), B,
              sequence_lens, [initial_h, initial_c], direction, 0, hidden_size, clip)
    if _scan_activations(activations, ["Sigmoid", "Tanh", "Tanh"], L.directions) is None:
        raise ConversionError("DynamicQuantizeLSTM with activations other than sigmoid, tanh, tanh is not "
                              "supported")
    T, batch, width = L.X.shape
    xq, x_scale, x_zp = DynamicQuantizeLinear(b, b.reshape(b.cast(L.X, "f32"), [T * batch, width]))
    ys: list[Tensor | None] = []
    finals: list[list[Tensor]] = [[], []]
    for d in range(L.directions):
        per_dir = [_take(b, t, 0, d) if t.rank else t for t in (W_scale, W_zero_point, R_scale, R_zero_point)]
        ws, wz, rs, rz = per_dir  # type: ignore[misc]
        acc = MatMulInteger(b, xq, _take(b, W, 0, d), x_zp, wz)
        xw = b.op("mul", [b.cast(acc, "f32"), b.op("mul", [x_scale, b.cast(ws, "f32")])])
        wr = L.bias(d)
        if wr:
            xw = b.op("add", [xw, b.op("add", list(wr))])
        xw = b.reshape(xw, [T, batch, 4 * L.hidden])
        h, c = _take(b, L.initial[0], 0, d), _take(b, L.initial[1], 0, d)
        operands = [xw, _take(b, R, 0, d), h, c, b.cast(rs, "f32"), rz]
        if P is not None:
            operands.append(_take(b, P, 0, d))
        y_d, h, c = L.scan("qlstm_scan", operands,
                           {"reverse": L.reverse[d], "input_forget": bool(input_forget)})
        ys.append(y_d)
        finals[0].append(h)
        finals[1].append(c)
    return L.finish(ys, finals)
