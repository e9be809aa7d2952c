"""Normalization ops: batch/instance/layer norm, softmax, log_softmax, LRN (ONNX semantics)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..types import TensorType
from .nn import PURE, REDUCTION, Dim, _channel_vec, _float, _rank, _same_dtype, _widened
from .registry import Cost, OpDef, Sig, attr, check, io_bytes, norm_axis, register


# normalization ------------------------------------------------------------------------------------------
def _per_channel_infer(min_rank: int, params: tuple[str, ...]) -> Callable[[Sig], list[TensorType]]:
    """Input (N, C, ...) of at least `min_rank`, then one [C] vector per name in `params`."""

    def infer(sig: Sig) -> list[TensorType]:
        x = sig.operands[0]
        _float(x)
        _rank(x, min_rank, "input", at_least=True)
        _same_dtype(sig)
        for t, what in zip(sig.operands[1:], params, strict=True):
            _channel_vec(t, x.shape[1], what)
        return [x]

    return infer


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    return (1, x.shape[1], *(1 for _ in x.shape[2:]))


@_widened
def _bn_ref(sig: Sig, x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray,
            var: np.ndarray) -> np.ndarray:
    a = scale / np.sqrt(var + x.dtype.type(sig["epsilon"]))
    shape = _channel_shape(x)
    return x * a.reshape(shape) + (bias - mean * a).reshape(shape)


register(OpDef(
    "batch_norm", ("x", "scale", "bias", "mean", "var"), reference=_bn_ref,
    infer=_per_channel_infer(2, ("scale", "bias", "mean", "var")),
    attrs={"epsilon": attr("float", 1e-5)}, traits=PURE,
    cost=lambda sig: Cost(2 * sig.operands[0].numel, *io_bytes(sig)),
    doc="Inference-mode batch normalization with running statistics, channel dim 1. A per-channel affine "
        "map, so not a reduction.",
))


def _standardize(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    var = np.mean(centered * centered, axis=axes, keepdims=True)
    return centered / np.sqrt(var + x.dtype.type(eps))


@_widened
def _in_ref(sig: Sig, x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    y = _standardize(x, tuple(range(2, x.ndim)), sig["epsilon"])
    return y * scale.reshape(_channel_shape(x)) + bias.reshape(_channel_shape(x))


register(OpDef(
    "instance_norm", ("x", "scale", "bias"), infer=_per_channel_infer(3, ("scale", "bias")),
    reference=_in_ref,
    attrs={"epsilon": attr("float", 1e-5)}, traits=REDUCTION,
    cost=lambda sig: Cost(7 * sig.operands[0].numel, *io_bytes(sig)),
    doc="Normalizes each (sample, channel) over the spatial dims, then a per-channel scale and bias.",
))


def _broadcasts_to(shape: tuple[Dim, ...], target: tuple[Dim, ...]) -> bool:
    if len(shape) > len(target):
        return False
    return all(a in (1, None) or b is None or a == b for a, b in zip(shape[::-1], target[::-1], strict=False))


def _ln_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    _float(x)
    _same_dtype(sig)
    axis = norm_axis(sig["axis"], x.rank)
    norm = x.shape[axis:]
    for t, what in zip(sig.operands[1:], ("scale", "bias"), strict=False):
        fmt = "[" + ",".join("?" if d is None else str(d) for d in norm) + "]"
        check(_broadcasts_to(t.shape, norm), f"{what} {t} does not broadcast to the normalized shape {fmt}")
    return [x]


@_widened
def _ln_ref(sig: Sig, x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    axis = norm_axis(sig["axis"], x.ndim)
    y = _standardize(x, tuple(range(axis, x.ndim)), sig["epsilon"]) * scale
    return y + bias if bias is not None else y


register(OpDef(
    "layer_norm", ("x", "scale", "bias?"), infer=_ln_infer, reference=_ln_ref,
    attrs={"axis": attr("int", -1), "epsilon": attr("float", 1e-5)}, traits=REDUCTION,
    cost=lambda sig: Cost(7 * sig.operands[0].numel, *io_bytes(sig)),
    doc="Normalizes over dims [axis, rank), then scale (and bias) broadcast over those dims.",
))


def _softmax_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    _float(x)
    norm_axis(sig["axis"], x.rank)
    return [x]


@_widened
def _softmax_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    axis = norm_axis(sig["axis"], x.ndim)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@_widened
def _log_softmax_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    axis = norm_axis(sig["axis"], x.ndim)
    z = x - x.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


for _name, _ref, _what in (("softmax", _softmax_ref, "exp(x) / sum(exp(x))"),
                           ("log_softmax", _log_softmax_ref, "x - log(sum(exp(x)))")):
    register(OpDef(
        _name, ("x",), infer=_softmax_infer, reference=_ref, attrs={"axis": attr("int", -1)},
        traits=REDUCTION, cost=lambda sig: Cost(8 * sig.operands[0].numel, *io_bytes(sig)),
        doc=f"{_what} along one axis (ONNX opset 13), with the max subtracted first for stability.",
    ))


def _lrn_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    _float(x)
    _rank(x, 3, "input", at_least=True)
    check(sig["size"] >= 1, f"size must be positive, got {sig['size']}")
    return [x]


@_widened
def _lrn_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    size, c = sig["size"], x.shape[1]
    lo = (size - 1) // 2
    sq = x * x
    padded = np.pad(sq, [(0, 0), (lo, size - 1 - lo)] + [(0, 0)] * (x.ndim - 2))
    total = np.zeros_like(sq)
    for i in range(size):
        total += padded[:, i:i + c]
    f = x.dtype.type
    return x / (f(sig["bias"]) + f(sig["alpha"] / size) * total) ** f(sig["beta"])


register(OpDef(
    "lrn", ("x",), infer=_lrn_infer, reference=_lrn_ref,
    attrs={"size": attr("int"), "alpha": attr("float", 1e-4), "beta": attr("float", 0.75),
           "bias": attr("float", 1.0)},
    traits=PURE, cost=lambda sig: Cost((2 * sig["size"] + 10) * sig.operands[0].numel, *io_bytes(sig)),
    doc="ONNX LRN: x / (bias + alpha / size * sum of squares over `size` neighbouring channels) ^ beta.",
))
