"""Converters for the rest of ONNX: losses, trig and bitwise ops, windows, sampling (GridSample,
AffineGrid, RoiAlign, Col2Im, MaxUnpool), crop/pad and the training optimizers (attention is in
attention.py, quantization in quantize.py).

Most are compositions of graph ops, so the passes and the targets see matmuls, softmaxes and elementwise
chains they already know; the ops that cannot be composed without losing precision or meaning (asin,
bit shifts, det, grid sampling) live in ir/ops/misc.py. Masks and index patterns that depend only on
shapes are computed here in numpy and enter the graph as constants.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ....ir.types import TensorType
from ..builder import Builder, ConversionError, Tensor
from ..registry import converter
from ..types import onnx_element_type

NEG_INF = -math.inf


def _np(dtype: str) -> np.dtype:
    return TensorType((), dtype).np_dtype


def _scalar(b: Builder, value: float | int | bool, dtype: str) -> Tensor:
    return b.const(np.array(value, _np(dtype)))


def _slice(b: Builder, x: Tensor, axis: int, start: int, end: int, step: int = 1) -> Tensor:
    return b.op("slice", [x], {"starts": [start], "ends": [end], "axes": [axis % x.rank], "steps": [step]})


def _float_only(x: Tensor, what: str) -> None:
    if not x.type.is_float:
        raise ConversionError(f"{what} must be a float tensor, got {x.type}")


# elementwise: trig, NaN/Inf tests, bitwise ------------------------------------------------------------
# ONNX op -> (tessel op, the opset that introduced the ONNX op)
UNARY = {"Tan": ("tan", 7), "Asin": ("asin", 7), "Acos": ("acos", 7), "Atan": ("atan", 7),
         "Sinh": ("sinh", 9), "Cosh": ("cosh", 9), "Asinh": ("asinh", 9), "Acosh": ("acosh", 9),
         "Atanh": ("atanh", 9), "IsNaN": ("is_nan", 9), "BitwiseNot": ("bitwise_not", 18)}
BINARY = {"BitwiseAnd": ("bitwise_and", 18), "BitwiseOr": ("bitwise_or", 18),
          "BitwiseXor": ("bitwise_xor", 18)}


def _unary(onnx_op: str, tessel_op: str, since: int) -> None:
    def convert(b: Builder, x: Tensor) -> Tensor:
        return b.op(tessel_op, [x])

    convert.__name__ = onnx_op
    converter(onnx_op, since)(convert)


def _binary(onnx_op: str, tessel_op: str, since: int) -> None:
    def convert(b: Builder, x: Tensor, y: Tensor) -> Tensor:
        return b.op(tessel_op, [x, y])

    convert.__name__ = onnx_op
    converter(onnx_op, since)(convert)


for _o, (_t, _since) in UNARY.items():
    _unary(_o, _t, _since)
for _o, (_t, _since) in BINARY.items():
    _binary(_o, _t, _since)


@converter("IsInf", since=10)
def IsInf(b: Builder, x: Tensor, *, detect_negative: int = 1, detect_positive: int = 1) -> Tensor:
    _float_only(x, "IsInf's input")
    tests = [b.op("equal", [x, _scalar(b, sign * math.inf, x.dtype)])
             for sign, on in ((1, detect_positive), (-1, detect_negative)) if on]
    if not tests:
        return b.const(np.zeros(x.shape, bool))
    return tests[0] if len(tests) == 1 else b.op("or", tests)


@converter("BitShift", since=11)
def BitShift(b: Builder, x: Tensor, y: Tensor, *, direction: str) -> Tensor:
    if direction not in ("LEFT", "RIGHT"):
        raise ConversionError(f"direction must be LEFT or RIGHT, got '{direction}'")
    return b.op("bit_shift", [x, y], {"direction": direction.lower()})


@converter("Det", since=11)
def Det(b: Builder, x: Tensor) -> Tensor:
    return b.op("det", [x])


@converter("SwiGLU", since=28)
def SwiGLU(b: Builder, a: Tensor, c: Tensor, *, alpha: float = 1.0) -> Tensor:
    scaled = a if alpha == 1.0 else b.op("mul", [a, _scalar(b, alpha, a.dtype)])
    return b.op("mul", [b.op("mul", [a, b.op("sigmoid", [scaled])]), c])


# windows ---------------------------------------------------------------------------------------------
def _window(b: Builder, size: Tensor, output_datatype: int, periodic: int, kind: str) -> Tensor:
    n = size.ints("the window size")[0]
    dtype = onnx_element_type(output_datatype, "output_datatype")
    denom = n if periodic else n - 1
    want = _np(dtype)
    # computed as onnx's reference does: Hann and Hamming in the output type, Blackman in float64
    work = want if want.kind == "f" and want.name != "bfloat16" else np.dtype(np.float32)
    i = np.arange(n, dtype=work)
    with np.errstate(all="ignore"):
        if kind == "hann":
            w = np.sin(i * np.pi / denom) ** 2
        elif kind == "hamming":
            alpha = 25.0 / 46.0
            w = alpha - np.cos(i * np.pi * 2 / denom) * (1 - alpha)
        else:
            j = np.arange(n)
            w = np.cos((j * (np.pi * 2)) / denom) * -0.5 + np.cos((j * (np.pi * 4)) / denom) * 0.08 + 0.42
    return b.const(np.asarray(w).astype(want))


@converter("HannWindow", since=17)
def HannWindow(b: Builder, size: Tensor, *, output_datatype: int = 1, periodic: int = 1) -> Tensor:
    return _window(b, size, output_datatype, periodic, "hann")


@converter("HammingWindow", since=17)
def HammingWindow(b: Builder, size: Tensor, *, output_datatype: int = 1, periodic: int = 1) -> Tensor:
    return _window(b, size, output_datatype, periodic, "hamming")


@converter("BlackmanWindow", since=17)
def BlackmanWindow(b: Builder, size: Tensor, *, output_datatype: int = 1, periodic: int = 1) -> Tensor:
    return _window(b, size, output_datatype, periodic, "blackman")


# losses ----------------------------------------------------------------------------------------------
def _nll(b: Builder, x: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int | None,
         reduction: str) -> Tensor:
    """-x[n, target[n, d...], d...], weighted by weight[target] (0 where target == ignore_index), reduced."""
    if reduction not in ("none", "sum", "mean"):
        raise ConversionError(f"reduction must be none, sum or mean, got '{reduction}'")
    if x.rank < 2 or target.rank != x.rank - 1:
        raise ConversionError(f"input (N, C, d...) and target (N, d...) do not fit: {x.type}, {target.type}")
    keep = None
    t = target
    if ignore_index is not None:
        ii = _scalar(b, ignore_index, target.dtype)
        keep = b.op("not", [b.op("equal", [target, ii])])
        t = b.op("where", [keep, target, _scalar(b, 0, target.dtype)])  # ignored targets may be out of range
    idx = b.reshape(t, [t.shape[0], 1, *t.shape[1:]])
    picked = b.reshape(b.op("gather_elements", [x, idx], {"axis": 1}), list(t.shape))
    loss = b.op("neg", [picked])
    w = None
    if weight is not None:
        w = b.op("gather", [weight, t], {"axis": 0})
        if keep is not None:
            w = b.op("where", [keep, w, _scalar(b, 0, x.dtype)])
    elif keep is not None:
        w = b.op("where", [keep, _scalar(b, 1, x.dtype), _scalar(b, 0, x.dtype)])
    if w is not None:
        loss = b.op("mul", [loss, w])
    if reduction == "none":
        return loss
    total = b.op("reduce_sum", [loss], {"keepdims": False})
    if reduction == "sum":
        return total
    if w is None:
        return b.op("reduce_mean", [loss], {"keepdims": False})
    return b.op("div", [total, b.op("reduce_sum", [w], {"keepdims": False})])


@converter("NegativeLogLikelihoodLoss", since=12)
def NegativeLogLikelihoodLoss(b: Builder, input: Tensor, target: Tensor, weight: Tensor | None = None, *,
                              ignore_index: int | None = None, reduction: str = "mean") -> Tensor:
    return _nll(b, input, target, weight, ignore_index, reduction)


@converter("SoftmaxCrossEntropyLoss", since=12)
def SoftmaxCrossEntropyLoss(b: Builder, scores: Tensor, labels: Tensor, weights: Tensor | None = None, *,
                            ignore_index: int | None = None, reduction: str = "mean") -> list[Tensor]:
    log_prob = b.op("log_softmax", [scores], {"axis": 1})
    return [_nll(b, log_prob, labels, weights, ignore_index, reduction), log_prob]


# sampling --------------------------------------------------------------------------------------------
GRID_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic",
              "nearest": "nearest"}


@converter("GridSample", since=16)
def GridSample(b: Builder, X: Tensor, grid: Tensor, *, align_corners: int = 0, mode: str = "linear",
               padding_mode: str = "zeros") -> Tensor:
    if mode not in GRID_MODES:
        raise ConversionError(f"mode must be one of {', '.join(GRID_MODES)}, got '{mode}'")
    if b.opset < 20 and X.rank != 4:
        raise ConversionError(f"GridSample before opset 20 takes a 4-D input, got {X.type}")
    attrs = {"mode": GRID_MODES[mode], "padding_mode": padding_mode, "align_corners": bool(align_corners)}
    return b.op("grid_sample", [X, b.cast(grid, X.dtype)], attrs)


def _base_grid(dims: Sequence[int], align_corners: int) -> np.ndarray:
    """The homogeneous sampling positions (prod(dims), k + 1) in [-1, 1], x (innermost dim) first."""
    axes = []
    for n in dims:
        if align_corners:
            axes.append(np.linspace(-1.0, 1.0, n) if n > 1 else np.array([-1.0]))
        else:
            axes.append((np.arange(n) * 2.0 + 1.0) / n - 1.0)
    mesh = np.meshgrid(*axes, indexing="ij")
    cols = [m.reshape(-1) for m in reversed(mesh)] + [np.ones(math.prod(dims))]
    return np.stack(cols, axis=1)


@converter("AffineGrid", since=20)
def AffineGrid(b: Builder, theta: Tensor, size: Tensor, *, align_corners: int = 0) -> Tensor:
    _float_only(theta, "AffineGrid's theta")
    shape = size.ints("AffineGrid's size")
    if len(shape) not in (4, 5) or theta.rank != 3 or theta.shape[1:] != (len(shape) - 2, len(shape) - 1):
        raise ConversionError(f"theta {theta.type} and size {shape} do not describe a 2-D or 3-D grid")
    n, dims, k = shape[0], shape[2:], len(shape) - 2
    base = b.const(_base_grid(dims, align_corners).T.copy())  # (k + 1, P), float64 as onnx computes it
    grid = b.op("matmul", [b.cast(theta, "f64"), base])  # (N, k, P)
    grid = b.op("transpose", [grid], {"perm": [0, 2, 1]})
    return b.cast(b.reshape(grid, [n, *dims, k]), theta.dtype)


@converter("RoiAlign", since=10)
def RoiAlign(b: Builder, X: Tensor, rois: Tensor, batch_indices: Tensor, *,
             coordinate_transformation_mode: str = "half_pixel", mode: str = "avg", output_height: int = 1,
             output_width: int = 1, sampling_ratio: int = 0, spatial_scale: float = 1.0) -> Tensor:
    if b.opset < 16:  # opset 10 had no such attribute and behaved as output_half_pixel
        coordinate_transformation_mode = "output_half_pixel"
    return b.op("roi_align", [X, b.cast(rois, X.dtype), batch_indices],
                {"coordinate_transformation_mode": coordinate_transformation_mode, "mode": mode.lower(),
                 "output_height": int(output_height), "output_width": int(output_width),
                 "sampling_ratio": int(sampling_ratio), "spatial_scale": float(spatial_scale)})


@converter("Col2Im", since=18)
def Col2Im(b: Builder, input: Tensor, image_shape: Tensor, block_shape: Tensor, *,
           dilations: list[int] | None = None, pads: list[int] | None = None,
           strides: list[int] | None = None) -> Tensor:
    return b.op("col2im", [input], {"image_shape": image_shape.ints("Col2Im's image_shape"),
                                    "block_shape": block_shape.ints("Col2Im's block_shape"),
                                    "dilations": list(dilations or []), "pads": list(pads or []),
                                    "strides": list(strides or [])})


@converter("MaxUnpool", since=9)
def MaxUnpool(b: Builder, X: Tensor, I: Tensor, output_shape: Tensor | None = None, *,  # noqa: E741
              kernel_shape: list[int], pads: list[int] | None = None,
              strides: list[int] | None = None) -> Tensor:
    k = len(kernel_shape)
    strides = list(strides or [1] * k)
    pads = list(pads or [0] * (2 * k))
    pooled = [*X.shape[:2], *((X.shape[2 + i] - 1) * strides[i] - pads[i] - pads[k + i] + kernel_shape[i]
                              for i in range(k))]
    shape = output_shape.ints("MaxUnpool's output_shape") if output_shape is not None else pooled
    return b.op("max_unpool", [X, b.cast(I, "i64")], {"shape": shape, "pooled_shape": pooled})


@converter("CenterCropPad", since=18)
def CenterCropPad(b: Builder, input_data: Tensor, shape: Tensor, *, axes: list[int] | None = None) -> Tensor:
    want = shape.ints("CenterCropPad's shape")
    rank = input_data.rank
    axes = [a % rank for a in (axes if axes is not None else range(rank))]
    if len(axes) != len(want):
        raise ConversionError(f"shape has {len(want)} values for {len(axes)} axes")
    x = input_data
    pads = [0] * (2 * rank)
    for a, n in zip(axes, want, strict=True):
        d = x.shape[a]
        if n < d:  # crop: the extra element of an odd difference comes off the end
            start = (d - n) // 2
            x = _slice(b, x, a, start, start + n)
        elif n > d:  # pad: the extra element goes on the end
            pads[a], pads[rank + a] = (n - d) // 2, n - d - (n - d) // 2
    return b.op("pad", [x], {"pads": pads}) if any(pads) else x


# training optimizers (ai.onnx.preview.training) ------------------------------------------------------
# The importer accepts this one domain besides the default: the optimizers are pure math.
def _optimizer_groups(inputs: Sequence[Tensor], per: int, op: str) -> list[list[Tensor]]:
    if len(inputs) % per:
        raise ConversionError(f"{op} takes R, T and {per} equal groups of tensors, got {len(inputs) + 2} "
                              "inputs")
    n = len(inputs) // per
    return [[inputs[j * n + i] for j in range(per)] for i in range(n)]


def _s(b: Builder, v: float, like: Tensor) -> Tensor:
    return _scalar(b, v, like.dtype)


@converter("Momentum")
def Momentum(b: Builder, R: Tensor, T: Tensor, *inputs: Tensor, alpha: float, beta: float, mode: str,
             norm_coefficient: float) -> list[Tensor]:
    if mode not in ("standard", "nesterov"):
        raise ConversionError(f"mode must be standard or nesterov, got '{mode}'")
    xs, vs = [], []
    first = b.op("greater", [T, _scalar(b, 0, T.dtype)])
    for x, g, v in _optimizer_groups(inputs, 3, "Momentum"):
        r = b.cast(R, x.dtype)
        g = b.op("add", [b.op("mul", [_s(b, norm_coefficient, x), x]), g])
        beta_t = b.op("where", [first, _s(b, beta, x), _s(b, 1.0, x)])
        v_new = b.op("add", [b.op("mul", [_s(b, alpha, x), v]), b.op("mul", [beta_t, g])])
        step = v_new if mode == "standard" else b.op("add", [g, b.op("mul", [_s(b, alpha, x), v_new])])
        xs.append(b.op("sub", [x, b.op("mul", [r, step])]))
        vs.append(v_new)
    return xs + vs


@converter("Adagrad")
def Adagrad(b: Builder, R: Tensor, T: Tensor, *inputs: Tensor, decay_factor: float = 0.0,
            epsilon: float = 1e-6, norm_coefficient: float = 0.0) -> list[Tensor]:
    xs, hs = [], []
    for x, g, h in _optimizer_groups(inputs, 3, "Adagrad"):
        t = b.cast(T, x.dtype)
        r = b.op("div", [b.cast(R, x.dtype),
                         b.op("add", [_s(b, 1.0, x), b.op("mul", [t, _s(b, decay_factor, x)])])])
        g = b.op("add", [b.op("mul", [_s(b, norm_coefficient, x), x]), g])
        h_new = b.op("add", [h, b.op("mul", [g, g])])
        root = b.op("add", [b.op("sqrt", [h_new]), _s(b, epsilon, x)])
        xs.append(b.op("sub", [x, b.op("div", [b.op("mul", [r, g]), root])]))
        hs.append(h_new)
    return xs + hs


@converter("Adam")
def Adam(b: Builder, R: Tensor, T: Tensor, *inputs: Tensor, alpha: float = 0.9, beta: float = 0.999,
         epsilon: float = 1e-6, norm_coefficient: float = 0.0,
         norm_coefficient_post: float = 0.0) -> list[Tensor]:
    xs, vs, hs = [], [], []
    for x, g, v, h in _optimizer_groups(inputs, 4, "Adam"):
        r, t = b.cast(R, x.dtype), b.cast(T, x.dtype)
        g = b.op("add", [b.op("mul", [_s(b, norm_coefficient, x), x]), g])
        v_new = b.op("add", [b.op("mul", [_s(b, alpha, x), v]), b.op("mul", [_s(b, 1 - alpha, x), g])])
        h_new = b.op("add", [b.op("mul", [_s(b, beta, x), h]),
                             b.op("mul", [_s(b, 1 - beta, x), b.op("mul", [g, g])])])
        root = b.op("add", [b.op("sqrt", [h_new]), _s(b, epsilon, x)])
        # bias correction sqrt(1 - beta^t) / (1 - alpha^t) from the second step on
        corr = b.op("div", [b.op("sqrt", [b.op("sub", [_s(b, 1.0, x), b.op("pow", [_s(b, beta, x), t])])]),
                            b.op("sub", [_s(b, 1.0, x), b.op("pow", [_s(b, alpha, x), t])])])
        r = b.op("where", [b.op("greater", [T, _scalar(b, 0, T.dtype)]), b.op("mul", [r, corr]), r])
        x_new = b.op("sub", [x, b.op("mul", [r, b.op("div", [v_new, root])])])
        xs.append(b.op("mul", [_s(b, 1 - norm_coefficient_post, x), x_new]))
        vs.append(v_new)
        hs.append(h_new)
    return xs + vs + hs
