"""Converters for normalization (Batch/Instance/Layer/Group/RMS/MeanVariance/Lp, LRN) and the softmax
family (Softmax, LogSoftmax, Hardmax; before opset 13 they coerce the input to 2-D at `axis`)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..builder import Builder, ConversionError, Tensor
from ..registry import converter
from .common import (
    _axis,
    _float_input,
    _per_channel,
    _scalar,
    _wants,
)


# normalization ----------------------------------------------------------------------------------------
def _stash(b: Builder, x: Tensor, stash_type: int) -> Tensor:
    """Statistics computed in f32 (stash_type 1, the default) when the input is narrower."""
    return b.cast(x, "f32") if stash_type == 1 and x.dtype in ("f16", "bf16") else x


def _moments(b: Builder, x: Tensor, axes: list[int]) -> tuple[Tensor, Tensor, Tensor]:
    """(mean, x - mean, population variance) over `axes`, kept as size-1 dims."""
    mean = b.op("reduce_mean", [x], {"axes": axes})
    centered = b.op("sub", [x, mean])
    return mean, centered, b.op("reduce_mean", [b.op("mul", [centered, centered])], {"axes": axes})


@converter("BatchNormalization")
def BatchNormalization(b: Builder, x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, *,
                       epsilon: float = 1e-5, momentum: float = 0.9, training_mode: int = 0,
                       consumed_inputs: list[int] | None = None, is_test: int = 0,
                       spatial: int = 1) -> list[Tensor | None]:
    """Inference mode uses the running statistics (opset < 14's is_test and optional statistics outputs
    change nothing then). training_mode=1 normalizes with the batch's statistics and also returns the
    updated running mean and variance."""
    _float_input(x, "BatchNormalization")
    scale, bias, mean, var = (b.cast(t, x.dtype) for t in (scale, bias, mean, var))
    if training_mode:
        axes = [0, *range(2, x.rank)]
        bmean, _, bvar = _moments(b, x, axes)
        bmean, bvar = b.reshape(bmean, [x.shape[1]]), b.reshape(bvar, [x.shape[1]])
        y = b.op("batch_norm", [x, scale, bias, bmean, bvar], {"epsilon": float(epsilon)})
        m, rest = _scalar(b, momentum, x), _scalar(b, 1 - momentum, x)
        run = [b.op("add", [b.op("mul", [old, m]), b.op("mul", [new, rest])])
               for old, new in ((mean, bmean), (var, bvar))]
        return [y, *run]
    if spatial or scale.rank == 1:
        return [b.op("batch_norm", [x, scale, bias, mean, var], {"epsilon": float(epsilon)})]
    # opset < 9 with spatial=0: statistics per activation, (C, D1, ...) tensors
    shape = [1, *scale.shape]
    a = b.op("div", [b.reshape(scale, shape),
                     b.op("sqrt", [b.op("add", [b.reshape(var, shape), _scalar(b, epsilon, x)])])])
    return [b.op("add", [b.op("mul", [b.op("sub", [x, b.reshape(mean, shape)]), a]), b.reshape(bias, shape)])]


@converter("InstanceNormalization")
def InstanceNormalization(b: Builder, x: Tensor, scale: Tensor, bias: Tensor, *, epsilon: float = 1e-5,
                          consumed_inputs: list[int] | None = None) -> Tensor:
    _float_input(x, "InstanceNormalization")
    return b.op("instance_norm", [x, b.cast(scale, x.dtype), b.cast(bias, x.dtype)],
                {"epsilon": float(epsilon)})


@converter("LayerNormalization", since=17)
def LayerNormalization(b: Builder, x: Tensor, scale: Tensor, bias: Tensor | None = None, *, axis: int = -1,
                       epsilon: float = 1e-5, stash_type: int = 1) -> list[Tensor | None]:
    _float_input(x, "LayerNormalization")
    a = _axis(axis, x.rank)
    inputs = [x, b.cast(scale, x.dtype)] + ([b.cast(bias, x.dtype)] if bias is not None else [])
    y = b.op("layer_norm", inputs, {"axis": a, "epsilon": float(epsilon)})
    if not (_wants(b, 1) or _wants(b, 2)):
        return [y, None, None]
    mean, _, var = _moments(b, _stash(b, x, stash_type), list(range(a, x.rank)))
    inv = b.op("reciprocal", [b.op("sqrt", [b.op("add", [var, _scalar(b, epsilon, var)])])])
    return [y, mean, inv]


@converter("GroupNormalization", since=18)
def GroupNormalization(b: Builder, x: Tensor, scale: Tensor, bias: Tensor, *, epsilon: float = 1e-5,
                       num_groups: int, stash_type: int = 1) -> Tensor:
    """Instance normalization of (N, G, C/G * spatial). Opset 18 gives scale and bias per group, opset 21
    per channel; their shapes tell which."""
    _float_input(x, "GroupNormalization")
    n, c, g = x.shape[0], x.shape[1], int(num_groups)
    if g < 1 or c % g:
        raise ConversionError(f"GroupNormalization: {c} channels do not split into num_groups={g} groups")
    scale, bias = b.cast(scale, x.dtype), b.cast(bias, x.dtype)
    if scale.shape not in ((g,), (c,)) or bias.shape != scale.shape:
        raise ConversionError(f"GroupNormalization: scale and bias must have shape [{g}] or [{c}], "
                              f"got {scale.type} and {bias.type}")
    xg = b.reshape(x, [n, g, math.prod(x.shape) // (n * g)])
    if scale.shape == (g,):  # per group (opset 18); with g == c the two forms are the same
        return b.reshape(b.op("instance_norm", [xg, scale, bias], {"epsilon": float(epsilon)}), x.shape)
    ones, zeros = b.const(np.ones(g, x.type.np_dtype)), b.const(np.zeros(g, x.type.np_dtype))
    y = b.reshape(b.op("instance_norm", [xg, ones, zeros], {"epsilon": float(epsilon)}), x.shape)
    return b.op("add", [b.op("mul", [y, _per_channel(b, scale, x.rank)]), _per_channel(b, bias, x.rank)])


@converter("RMSNormalization", since=23)
def RMSNormalization(b: Builder, x: Tensor, scale: Tensor, *, axis: int = -1, epsilon: float = 1e-5,
                     stash_type: int = 1) -> Tensor:
    """x / sqrt(mean(x^2 over dims [axis, rank)) + epsilon) * scale, the statistics in the stash type."""
    _float_input(x, "RMSNormalization")
    a = _axis(axis, x.rank)
    xs = _stash(b, x, stash_type)
    ms = b.op("reduce_mean", [b.op("mul", [xs, xs])], {"axes": list(range(a, x.rank))})
    y = b.op("div", [xs, b.op("sqrt", [b.op("add", [ms, _scalar(b, epsilon, xs)])])])
    return b.op("mul", [b.cast(y, x.dtype), b.cast(scale, x.dtype)])


@converter("MeanVarianceNormalization", since=9)
def MeanVarianceNormalization(b: Builder, x: Tensor, *, axes: list[int] | None = None) -> Tensor:
    """(x - mean) / (sqrt(variance) + 1e-9) over `axes` (default [0, 2, 3]), as ONNX's function body."""
    _float_input(x, "MeanVarianceNormalization")
    axes = [_axis(a, x.rank, "axes value") for a in (axes if axes is not None else [0, 2, 3])]
    _, centered, var = _moments(b, x, axes)
    return b.op("div", [centered, b.op("add", [b.op("sqrt", [var]), _scalar(b, 1e-9, x)])])


@converter("LpNormalization")
def LpNormalization(b: Builder, x: Tensor, *, axis: int = -1, p: int = 2) -> Tensor:
    """x / ||x||_p along `axis`; a zero norm gives 0, as in the ONNX reference."""
    _float_input(x, "LpNormalization")
    if p not in (1, 2):
        raise ConversionError(f"LpNormalization: p={p} is not 1 or 2")
    norm = b.op("reduce_l1" if p == 1 else "reduce_l2", [x], {"axes": [_axis(axis, x.rank)]})
    zero = b.op("equal", [norm, _scalar(b, 0, x)])
    return b.op("div", [x, b.op("where", [zero, _scalar(b, 1, x), norm])])


@converter("LRN")
def LRN(b: Builder, x: Tensor, *, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0,
        size: int) -> Tensor:
    return b.op("lrn", [x], {"size": int(size), "alpha": float(alpha), "beta": float(beta),
                             "bias": float(bias)})


# softmax family ---------------------------------------------------------------------------------------
def _coerced(b: Builder, x: Tensor, axis: int | None, fn: Callable[[Tensor, int], Tensor],
             opset: int | None = None) -> Tensor:
    """Opset < 13 flattens the input to 2-D at `axis` (default 1) and works on rows; opset 13 works on one
    axis (default -1). `opset`: the semantics' opset when not the model's (com.microsoft ops name it)."""
    if (b.opset if opset is None else opset) >= 13:
        return fn(x, _axis(-1 if axis is None else axis, x.rank))
    a = _axis(1 if axis is None else axis, x.rank)
    if a == x.rank - 1:
        return fn(x, a)
    flat = b.reshape(x, [math.prod(x.shape[:a]), math.prod(x.shape[a:])])
    return b.reshape(fn(flat, 1), x.shape)


@converter("Softmax")
def Softmax(b: Builder, x: Tensor, *, axis: int | None = None) -> Tensor:
    return _coerced(b, x, axis, lambda t, a: b.op("softmax", [t], {"axis": a}))


@converter("LogSoftmax")
def LogSoftmax(b: Builder, x: Tensor, *, axis: int | None = None) -> Tensor:
    return _coerced(b, x, axis, lambda t, a: b.op("log_softmax", [t], {"axis": a}))


@converter("Hardmax")
def Hardmax(b: Builder, x: Tensor, *, axis: int | None = None) -> Tensor:
    """1 at the first maximum along the axis, 0 elsewhere: argmax compared with the axis' indices."""
    def hardmax(t: Tensor, a: int) -> Tensor:
        index = b.op("argmax", [t], {"axis": a, "keepdims": True})
        iota = np.arange(t.shape[a], dtype=np.int64).reshape([-1 if i == a else 1 for i in range(t.rank)])
        return b.cast(b.op("equal", [index, b.const(iota)]), t.dtype)

    return _coerced(b, x, axis, hardmax)
