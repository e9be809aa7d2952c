"""Converters for ONNX's neural-network ops: convolution, pooling, Dropout, depth/space
rearrangements and the small activations ONNX defines as functions.

tessel's window ops are 2-D (NCHW). Other ranks are reshaped or decomposed here: 1-D windows become 2-D
ones with a unit second axis; pooling is separable, so an N-D pool is a 2-D pool over the last two axes
and 1-D pools over the others; a 3-D convolution is a sum over depth taps of 2-D convolutions. Whatever
depends only on shapes (pads from auto_pad, pooling counts, resize interpolation weights) is computed
here in numpy and enters the graph as a constant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..builder import Builder, ConversionError, Tensor
from ..registry import converter
from .common import (
    AUTO_PADS,
    AxisParams,
    Window,
    _float_input,
    _out_len,
    _per_channel,
    _scalar,
    _slice,
    _transpose,
    _wants,
)


# convolution ------------------------------------------------------------------------------------------
def _conv2d(b: Builder, name: str, x: Tensor, w: Tensor, bias: Tensor | None, attrs: dict,
            operands: Sequence[Tensor] = ()) -> Tensor:
    """`name` of x and w, then `operands` (the integer convs' zero points and scales), then the bias."""
    return b.op(name, [x, w, *operands] + ([bias] if bias is not None else []), attrs)


def _conv_1d(b: Builder, name: str, x: Tensor, w: Tensor, bias: Tensor | None, win: Window, group: int,
             extra: dict, operands: Sequence[Tensor] = ()) -> Tensor:
    """A 1-D (transposed) convolution as a 2-D one over (L, 1)."""
    k, s, pb, pe, d = win.axis(0)
    attrs = {"strides": [s, 1], "pads": [pb, 0, pe, 0], "dilations": [d, 1], "groups": group,
             **{key: [v[0], 0] for key, v in extra.items()}}
    y = _conv2d(b, name, b.reshape(x, [*x.shape, 1]), b.reshape(w, [*w.shape, 1]), bias, attrs, operands)
    return b.reshape(y, y.shape[:-1])


def _conv_3d(b: Builder, x: Tensor, w: Tensor, bias: Tensor | None, win: Window, group: int) -> Tensor:
    """Conv3d as a sum over the kd depth taps of 2-D convolutions on (N * OD, C, H, W) depth slices."""
    kd, sd, pbd, ped, dd = win.axis(0)
    n, c, depth = x.shape[:3]
    od = _out_len(depth, kd, sd, pbd, ped, dd, False)
    xt = _transpose(b, x, [0, 2, 1, 3, 4])  # (N, D, C, H, W)
    if pbd or ped:
        xt = b.op("pad", [xt], {"pads": [0, pbd, 0, 0, 0, 0, ped, 0, 0, 0]})
    attrs = {"strides": win.strides[1:], "pads": [*win.pads[1:3], *win.pads[4:6]],
             "dilations": win.dilations[1:], "groups": group}
    acc = None
    for t in range(kd):
        xs = _slice(b, xt, 1, t * dd, t * dd + sd * (od - 1) + 1, sd)
        xs = b.reshape(xs, [n * od, c, *x.shape[3:]])
        wt = b.reshape(_slice(b, w, 2, t, t + 1), [w.shape[0], w.shape[1], *w.shape[3:]])
        y = _conv2d(b, "conv2d", xs, wt, None, attrs)
        acc = y if acc is None else b.op("add", [acc, y])
    assert acc is not None
    y = _transpose(b, b.reshape(acc, [n, od, *acc.shape[1:]]), [0, 2, 1, 3, 4])
    return y if bias is None else b.op("add", [y, _per_channel(b, bias, 5)])


def _check_conv(op: str, x: Tensor, w: Tensor, kernel_shape: Sequence[int] | None) -> list[int]:
    _float_input(x, op)
    if x.rank < 3 or w.rank != x.rank:
        raise ConversionError(f"{op} needs input and weight of the same rank >= 3, got {x.type} and {w.type}")
    kernel = list(w.shape[2:])
    if kernel_shape and [int(k) for k in kernel_shape] != kernel:
        raise ConversionError(f"{op}: kernel_shape {list(kernel_shape)} differs from the weight's {kernel}")
    return kernel


@converter("Conv")
def Conv(b: Builder, x: Tensor, w: Tensor, bias: Tensor | None = None, *, auto_pad: str = "NOTSET",
         dilations: list[int] | None = None, group: int = 1, kernel_shape: list[int] | None = None,
         pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
    kernel = _check_conv("Conv", x, w, kernel_shape)
    win = Window("Conv", x.shape[2:], kernel, strides, pads, dilations, auto_pad)
    if win.n == 2:
        return _conv2d(b, "conv2d", x, w, bias, {"strides": win.strides, "pads": win.pads,
                                                 "dilations": win.dilations, "groups": group})
    if win.n == 1:
        return _conv_1d(b, "conv2d", x, w, bias, win, group, {})
    if win.n == 3:
        return _conv_3d(b, x, w, bias, win, group)
    raise ConversionError(f"Conv with {win.n} spatial dims is unsupported (1-D, 2-D and 3-D are)")


def _convt_pads(win: Window, sizes: Sequence[int], output_padding: list[int], output_shape: list[int] | None,
                auto_pad: str) -> list[int]:
    """ConvTranspose's pads, from output_shape or auto_pad when given, by the ONNX spec's formula (the odd
    pad goes last for SAME_UPPER, first otherwise). A negative pad (an output larger than the full result,
    e.g. a 1-wide kernel with stride 3) extends the output with zeros, as ONNX's reference does."""
    if not output_shape and not auto_pad.startswith("SAME"):
        return win.pads
    n = win.n
    targets = (list(output_shape[-n:]) if output_shape
               else [size * s for size, s in zip(sizes, win.strides, strict=True)])
    begins, ends = [], []
    for i in range(n):
        k, s, _, _, d = win.axis(i)
        total = s * (sizes[i] - 1) + output_padding[i] + (k - 1) * d + 1 - targets[i]
        small, big = total // 2, total - total // 2
        upper = auto_pad == "SAME_UPPER"
        begins.append(small if upper else big)
        ends.append(big if upper else small)
    return begins + ends


def _convt_3d(b: Builder, x: Tensor, w: Tensor, bias: Tensor | None, win: Window, group: int,
              output_padding: list[int]) -> Tensor:
    """ConvTranspose3d: per depth tap, a 2-D transposed conv of every input depth slice; each tap's slab
    is spread to depth positions id * stride + tap * dilation (zero-interleaved, then padded or cropped)."""
    kd, sd, pbd, ped, dd = win.axis(0)
    n, c, depth = x.shape[:3]
    full = sd * (depth - 1) + (kd - 1) * dd + 1 + output_padding[0]
    od = full - pbd - ped
    xs = b.reshape(_transpose(b, x, [0, 2, 1, 3, 4]), [n * depth, c, *x.shape[3:]])
    attrs = {"strides": win.strides[1:], "pads": [*win.pads[1:3], *win.pads[4:6]],
             "dilations": win.dilations[1:], "groups": group, "output_padding": output_padding[1:]}
    acc, slab = None, None
    for t in range(kd):
        first = t * dd - pbd  # output depth of input slice 0 for this tap
        if first + sd * (depth - 1) < 0 or first >= od:
            continue
        wt = b.reshape(_slice(b, w, 2, t, t + 1), [w.shape[0], w.shape[1], *w.shape[3:]])
        z = _conv2d(b, "conv_transpose2d", xs, wt, None, attrs)
        slab = z.shape[1:]  # (O, OH, OW)
        z = b.reshape(z, [n, depth, 1, math.prod(slab)])
        if sd > 1:
            z = b.op("pad", [z], {"pads": [0, 0, 0, 0, 0, 0, sd - 1, 0]})
        z = b.reshape(z, [n, depth * sd, math.prod(slab)])
        z = b.op("pad", [z], {"pads": [0, first, 0, 0, od - first - depth * sd, 0]})
        acc = z if acc is None else b.op("add", [acc, z])
    if acc is None or slab is None:
        raise ConversionError("ConvTranspose: the pads crop away every depth tap")
    y = _transpose(b, b.reshape(acc, [n, od, *slab]), [0, 2, 1, 3, 4])
    return y if bias is None else b.op("add", [y, _per_channel(b, bias, 5)])


@converter("ConvTranspose")
def ConvTranspose(b: Builder, x: Tensor, w: Tensor, bias: Tensor | None = None, *, auto_pad: str = "NOTSET",
                  dilations: list[int] | None = None, group: int = 1, kernel_shape: list[int] | None = None,
                  output_padding: list[int] | None = None, output_shape: list[int] | None = None,
                  pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
    kernel = _check_conv("ConvTranspose", x, w, kernel_shape)
    sizes = list(x.shape[2:])
    win = Window("ConvTranspose", sizes, kernel, strides, pads if auto_pad == "NOTSET" else None, dilations,
                 "NOTSET")
    op_pad = [int(v) for v in output_padding] if output_padding else [0] * win.n
    if len(op_pad) != win.n:
        raise ConversionError(f"ConvTranspose: output_padding has {len(op_pad)} values for {win.n} "
                              "spatial dims")
    if auto_pad not in AUTO_PADS:
        raise ConversionError(f"ConvTranspose: auto_pad '{auto_pad}' is not one of {', '.join(AUTO_PADS)}")
    pads = _convt_pads(win, sizes, op_pad, output_shape, auto_pad)
    # what the op cannot express (negative pads, output padding of a stride or more) runs as the full,
    # unpadded result, then one pad op crops and zero-extends it, then the bias
    limit = [max(s, d) - 1 for s, d in zip(win.strides, win.dilations, strict=True)]
    fix = min(pads) < 0 or any(p > lim for p, lim in zip(op_pad, limit, strict=True))
    win.pads = [0] * (2 * win.n) if fix else pads
    op_attr = [0] * win.n if fix else op_pad
    inner_bias = None if fix else bias
    if win.n == 2:
        y = _conv2d(b, "conv_transpose2d", x, w, inner_bias, {"strides": win.strides, "pads": win.pads,
                                                              "dilations": win.dilations, "groups": group,
                                                              "output_padding": op_attr})
    elif win.n == 1:
        y = _conv_1d(b, "conv_transpose2d", x, w, inner_bias, win, group, {"output_padding": op_attr})
    elif win.n == 3:
        y = _convt_3d(b, x, w, inner_bias, win, group, op_attr)
    else:
        raise ConversionError(f"ConvTranspose with {win.n} spatial dims is unsupported "
                              "(1-D, 2-D and 3-D are)")
    if fix:
        n = win.n
        y = b.op("pad", [y], {"pads": [0, 0, *(-p for p in pads[:n]), 0, 0,
                                       *(o - p for o, p in zip(op_pad, pads[n:], strict=True))]})
        if bias is not None:
            y = b.op("add", [y, _per_channel(b, bias, y.rank)])
    return y


# pooling ----------------------------------------------------------------------------------------------
def _end_pad(size: int, k: int, s: int, pb: int, pe: int, d: int, ceil: bool) -> tuple[int, int]:
    """(output length, end padding the windows reach): ceil mode may reach past the declared pads."""
    n = _out_len(size, k, s, pb, pe, d, ceil)
    return n, max(pe, (n - 1) * s + (k - 1) * d + 1 - size - pb)


def _pool_axes(b: Builder, name: str, x: Tensor, win: Window, ceil: bool, attrs: dict) -> Tensor:
    """An N-D pool from 2-D ones: pooling over a box is separable, so the last two spatial axes pool
    together and every other spatial axis pools alone (as (A, 1, D, B) with a (k, 1) window)."""
    def pool(y: Tensor, axes: list[int]) -> Tensor:
        params = [win.axis(a - 2) for a in axes]
        if len(params) == 1:
            params.append((1, 1, 0, 0, 1))
        a0 = axes[0]
        lead, tail = math.prod(y.shape[:a0]), math.prod(y.shape[axes[-1] + 1:])
        shape4 = ([y.shape[0], math.prod(y.shape[1:a0]), *y.shape[a0:a0 + 2]] if len(axes) == 2
                  else [lead, 1, y.shape[a0], tail])
        pa = {"kernel": [p[0] for p in params], "strides": [p[1] for p in params],
              "pads": [p[2] for p in params] + [p[3] for p in params], "ceil_mode": ceil, **attrs}
        if name == "max_pool2d":
            pa["dilations"] = [p[4] for p in params]
        z = b.op(name, [b.reshape(y, shape4)], pa)
        return b.reshape(z, [*y.shape[:a0], *z.shape[2:2 + len(axes)], *y.shape[axes[-1] + 1:]]
                         if len(axes) == 2 else [*y.shape[:a0], z.shape[2], *y.shape[a0 + 1:]])

    if win.n == 2:
        return pool(x, [2, 3])
    y = x
    if win.n >= 2:
        y = pool(y, [x.rank - 2, x.rank - 1])
    for a in range(x.rank - (3 if win.n >= 2 else 1), 1, -1):
        y = pool(y, [a])
    return y


def _sum_pool_axis(b: Builder, y: Tensor, a: int, params: AxisParams, ceil: bool) -> Tensor:
    """Window sums along axis `a` (zeros outside), as a 2-D convolution with a (k, 1) kernel of ones."""
    k, s, pb, pe, d = params
    size = y.shape[a]
    n, end = _end_pad(size, k, s, pb, pe, d, ceil)
    ones = b.const(np.ones((1, 1, k, 1), y.type.np_dtype))
    z = b.op("conv2d", [b.reshape(y, [math.prod(y.shape[:a]), 1, size, math.prod(y.shape[a + 1:])]), ones],
             {"strides": [s, 1], "pads": [pb, 0, end, 0], "dilations": [d, 1]})
    assert z.shape[2] == n
    return b.reshape(z, [*y.shape[:a], n, *y.shape[a + 1:]])


def _window_count(size: int, params: AxisParams, ceil: bool, include_pad: bool) -> np.ndarray:
    """How many taps of each window along one axis land in the input (or in the declared pads too)."""
    k, s, pb, pe, d = params
    n = _out_len(size, k, s, pb, pe, d, ceil)
    taps = (np.arange(n) * s - pb)[:, None] + np.arange(k)[None, :] * d
    lo, hi = (-pb, size + pe) if include_pad else (0, size)
    return ((taps >= lo) & (taps < hi)).sum(axis=1)


def _int_as_float(b: Builder, x: Tensor) -> tuple[Tensor, str | None]:
    """Integer tensors pool through a float type that holds them exactly; returns the original type."""
    if x.type.is_float:
        return x, None
    if x.dtype == "i1":
        raise ConversionError(f"pooling needs a numeric input, got {x.type}")
    return b.cast(x, "f32" if x.dtype in ("i8", "ui8") else "f64"), x.dtype


def _max_pool_taps(b: Builder, x: Tensor, win: Window, ceil: bool, storage_order: int) -> list[Tensor]:
    """MaxPool with its Indices output: a running max over the kernel taps (strided slices of the input
    padded with -inf), picking each tap's flat input index where it is strictly larger (the first max
    wins, as in onnxruntime)."""
    spatial = x.shape[2:]
    geo = [_end_pad(spatial[i], *win.axis(i), ceil) for i in range(win.n)]
    flat = np.arange(math.prod(spatial), dtype=np.int64)
    if storage_order:  # column-major: the first spatial axis varies fastest
        flat = flat.reshape(spatial[::-1]).transpose(*range(win.n - 1, -1, -1)).reshape(-1)
    idx = (np.arange(x.shape[0] * x.shape[1], dtype=np.int64)[:, None] * len(flat) + flat).reshape(x.shape)
    pads = [0, 0, *win.pads[:win.n], 0, 0, *[e for _, e in geo]]
    xp = b.op("pad", [x], {"pads": pads, "value": -math.inf}) if any(pads) else x
    ip = b.op("pad", [b.const(idx)], {"pads": pads, "value": -1}) if any(pads) else b.const(idx)
    best: Tensor | None = None
    best_i: Tensor | None = None
    for tap in np.ndindex(*win.kernel):
        starts = [t * win.dilations[i] for i, t in enumerate(tap)]
        ends = [st + win.strides[i] * (geo[i][0] - 1) + 1 for i, st in enumerate(starts)]
        attrs = {"starts": starts, "ends": ends, "axes": list(range(2, x.rank)), "steps": win.strides}
        v, vi = b.op("slice", [xp], attrs), b.op("slice", [ip], attrs)
        if best is None or best_i is None:
            best, best_i = v, vi
            continue
        gt = b.op("greater", [v, best])
        best, best_i = b.op("where", [gt, v, best]), b.op("where", [gt, vi, best_i])
    assert best is not None and best_i is not None
    return [best, best_i]


@converter("MaxPool")
def MaxPool(b: Builder, x: Tensor, *, auto_pad: str = "NOTSET", ceil_mode: int = 0,
            dilations: list[int] | None = None, kernel_shape: list[int], pads: list[int] | None = None,
            storage_order: int = 0, strides: list[int] | None = None) -> list[Tensor | None]:
    win = Window("MaxPool", x.shape[2:], kernel_shape, strides, pads, dilations, auto_pad)
    xf, orig = _int_as_float(b, x)
    if _wants(b, 1):
        y, indices = _max_pool_taps(b, xf, win, bool(ceil_mode), storage_order)
        return [b.cast(y, orig) if orig else y, indices]
    y = _pool_axes(b, "max_pool2d", xf, win, bool(ceil_mode), {})
    return [b.cast(y, orig) if orig else y, None]


@converter("AveragePool")
def AveragePool(b: Builder, x: Tensor, *, auto_pad: str = "NOTSET", ceil_mode: int = 0,
                count_include_pad: int = 0, dilations: list[int] | None = None, kernel_shape: list[int],
                pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
    _float_input(x, "AveragePool")
    win = Window("AveragePool", x.shape[2:], kernel_shape, strides, pads, dilations, auto_pad)
    if all(d == 1 for d in win.dilations):
        return _pool_axes(b, "avg_pool2d", x, win, bool(ceil_mode),
                          {"count_include_pad": bool(count_include_pad)})
    # dilated windows: per-axis sums divided by per-axis tap counts (both separable)
    y = x
    for i in range(win.n):
        a = 2 + i
        y = _sum_pool_axis(b, y, a, win.axis(i), bool(ceil_mode))
        count = _window_count(x.shape[a], win.axis(i), bool(ceil_mode), bool(count_include_pad))
        shape = [1] * x.rank
        shape[a] = len(count)
        y = b.op("div", [y, b.const(count.reshape(shape).astype(x.type.np_dtype))])
    return y


def _pow(b: Builder, x: Tensor, p: float) -> Tensor:
    if p == 1:
        return x
    if p == 2:
        return b.op("mul", [x, x])
    if p == 0.5:
        return b.op("sqrt", [x])
    return b.op("pow", [x, _scalar(b, p, x)])


@converter("LpPool")
def LpPool(b: Builder, x: Tensor, *, auto_pad: str = "NOTSET", ceil_mode: int = 0,
           dilations: list[int] | None = None, kernel_shape: list[int], p: int = 2,
           pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
    """(sum of |x|^p over the window) ^ (1/p), zeros outside the input."""
    _float_input(x, "LpPool")
    win = Window("LpPool", x.shape[2:], kernel_shape, strides, pads, dilations, auto_pad)
    y = _pow(b, b.op("abs", [x]) if p % 2 else x, float(p))
    for i in range(win.n):
        y = _sum_pool_axis(b, y, 2 + i, win.axis(i), bool(ceil_mode))
    return _pow(b, y, 1.0 / p)


@converter("GlobalAveragePool")
def GlobalAveragePool(b: Builder, x: Tensor) -> Tensor:
    return b.op("global_avg_pool", [x])


@converter("GlobalMaxPool")
def GlobalMaxPool(b: Builder, x: Tensor) -> Tensor:
    xf, orig = _int_as_float(b, x)
    y = b.op("global_max_pool", [xf])
    return b.cast(y, orig) if orig else y


@converter("GlobalLpPool")
def GlobalLpPool(b: Builder, x: Tensor, *, p: int = 2) -> Tensor:
    _float_input(x, "GlobalLpPool")
    axes = list(range(2, x.rank))
    if p in (1, 2):
        return b.op("reduce_l1" if p == 1 else "reduce_l2", [x], {"axes": axes})
    y = b.op("reduce_sum", [_pow(b, b.op("abs", [x]), float(p))], {"axes": axes})
    return _pow(b, y, 1.0 / p)



# dropout, depth/space, small activations ----------------------------------------------------------------
@converter("Dropout")
def Dropout(b: Builder, data: Tensor, ratio_input: Tensor | None = None,
            training_mode: Tensor | None = None, *, seed: int | None = None, ratio: float = 0.5,
            is_test: int = 0, consumed_inputs: list[int] | None = None) -> list[Tensor]:
    """Inference: the identity, and an all-true mask (the input's type before opset 10). A training-mode
    Dropout (opset 12's training_mode input) is random unless its ratio is 0, so only that one converts."""
    if training_mode is not None and any(training_mode.ints("Dropout's training_mode")):
        drop = ratio_input.floats("Dropout's ratio")[0] if ratio_input is not None else 0.5
        if drop != 0:
            raise ConversionError(f"training-mode Dropout (ratio {drop}) is not supported: it is random, and "
                                  "tessel imports inference graphs")
    one = np.ones((), bool if b.opset >= 10 else data.type.np_dtype)
    if not data.type.is_static:  # an unused mask of symbolic size: broadcast at run time if used
        if not b.outputs[1:2] or not b.outputs[1]:
            return [data]
        return [data, b.op("expand", [b.const(one)], {"shape": list(data.shape)})]
    return [data, b.const(np.broadcast_to(one, data.shape))]


@converter("DepthToSpace")
def DepthToSpace(b: Builder, x: Tensor, *, blocksize: int, mode: str = "DCR") -> Tensor:
    return b.op("depth_to_space", [x], {"blocksize": int(blocksize), "mode": mode})


@converter("SpaceToDepth")
def SpaceToDepth(b: Builder, x: Tensor, *, blocksize: int, mode: str = "DCR") -> Tensor:
    return b.op("space_to_depth", [x], {"blocksize": int(blocksize), "mode": mode})


@converter("ThresholdedRelu", since=10)
def ThresholdedRelu(b: Builder, x: Tensor, *, alpha: float = 1.0) -> Tensor:
    """x > alpha ? x : 0."""
    return b.op("where", [b.op("greater", [x, _scalar(b, alpha, x)]), x, _scalar(b, 0, x)])


@converter("Shrink", since=9)
def Shrink(b: Builder, x: Tensor, *, bias: float = 0.0, lambd: float = 0.5) -> Tensor:
    """x < -lambd ? x + bias : x > lambd ? x - bias : 0."""
    below = b.op("less", [x, _scalar(b, -lambd, x)])
    lo = b.op("where", [below, b.op("add", [x, _scalar(b, bias, x)]), _scalar(b, 0, x)])
    above = b.op("greater", [x, _scalar(b, lambd, x)])
    return b.op("where", [above, b.op("sub", [x, _scalar(b, bias, x)]), lo])


@converter("Celu", since=12)
def Celu(b: Builder, x: Tensor, *, alpha: float = 1.0) -> Tensor:
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) = alpha * elu(x / alpha)."""
    if alpha == 1.0:
        return b.op("elu", [x], {"alpha": 1.0})
    a = _scalar(b, alpha, x)
    return b.op("mul", [b.op("elu", [b.op("div", [x, a])], {"alpha": 1.0}), a])
