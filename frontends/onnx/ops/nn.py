"""Converters for ONNX's neural-network ops: convolution, pooling, normalization, softmax, resize, matrix
products, Einsum and the small activations ONNX defines as functions.

tessel's window ops are 2-D (NCHW). Other ranks are reshaped or decomposed here: 1-D windows become 2-D
ones with a unit second axis; pooling is separable, so an N-D pool is a 2-D pool over the last two axes
and 1-D pools over the others; a 3-D convolution is a sum over depth taps of 2-D convolutions. Whatever
depends only on shapes (pads from auto_pad, pooling counts, resize interpolation weights) is computed
here in numpy and enters the graph as a constant.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ..builder import Builder, ConversionError, Tensor
from ..registry import converter

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
AxisParams = tuple[int, int, int, int, int]
"""One spatial axis of a window: (kernel, stride, pad begin, pad end, dilation)."""


# shared helpers ---------------------------------------------------------------------------------------
def _scalar(b: Builder, value: float | int | bool, like: Tensor) -> Tensor:
    """A rank-0 constant of `like`'s element type."""
    return b.const(np.array(value).astype(like.type.np_dtype))


def _wants(b: Builder, i: int) -> bool:
    """Whether the node being converted uses its output `i`."""
    return i < len(b.outputs) and bool(b.outputs[i])


def _float_input(x: Tensor, op: str) -> None:
    if not x.type.is_float:
        raise ConversionError(f"{op} needs a float input, got {x.type}")


def _axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ConversionError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def _slice(b: Builder, x: Tensor, axis: int, start: int, end: int, step: int = 1) -> Tensor:
    return b.op("slice", [x], {"starts": [start], "ends": [end], "axes": [axis], "steps": [step]})


def _transpose(b: Builder, x: Tensor, perm: Sequence[int]) -> Tensor:
    perm = [int(p) for p in perm]
    return x if perm == list(range(x.rank)) else b.op("transpose", [x], {"perm": perm})


def _per_channel(b: Builder, v: Tensor, rank: int) -> Tensor:
    """A [C] vector shaped (1, C, 1, ...) to broadcast over an (N, C, ...) tensor."""
    return b.reshape(v, [1, v.shape[0]] + [1] * (rank - 2))


class Window:
    """The spatial parameters of a conv or pool node, with ONNX's defaults filled in and auto_pad resolved
    to explicit pads (all begins, then all ends, as ONNX and tessel order them)."""

    def __init__(self, op: str, sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int] | None,
                 pads: Sequence[int] | None, dilations: Sequence[int] | None, auto_pad: str):
        n = len(sizes)
        self.kernel = [int(k) for k in kernel]
        self.strides = [int(s) for s in strides] if strides else [1] * n
        self.dilations = [int(d) for d in dilations] if dilations else [1] * n
        self.pads = [int(p) for p in pads] if pads else [0] * (2 * n)
        for name, v, want in (("kernel_shape", self.kernel, n), ("strides", self.strides, n),
                              ("dilations", self.dilations, n), ("pads", self.pads, 2 * n)):
            if len(v) != want:
                raise ConversionError(f"{op}: '{name}' has {len(v)} values, the input has {n} spatial dims "
                                      f"(expected {want})")
        if auto_pad not in AUTO_PADS:
            raise ConversionError(f"{op}: auto_pad '{auto_pad}' is not one of {', '.join(AUTO_PADS)}")
        if auto_pad == "VALID":
            self.pads = [0] * (2 * n)
        elif auto_pad.startswith("SAME"):  # output ceil(size / stride); the odd pad goes last for UPPER
            begins, ends = [], []
            for size, k, s, d in zip(sizes, self.kernel, self.strides, self.dilations, strict=True):
                total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
                small, big = total // 2, total - total // 2
                begins.append(small if auto_pad == "SAME_UPPER" else big)
                ends.append(big if auto_pad == "SAME_UPPER" else small)
            self.pads = begins + ends
        self.n = n

    def axis(self, i: int) -> AxisParams:
        """(kernel, stride, pad begin, pad end, dilation) of spatial axis i."""
        return self.kernel[i], self.strides[i], self.pads[i], self.pads[self.n + i], self.dilations[i]


def _out_len(size: int, k: int, s: int, pb: int, pe: int, d: int, ceil: bool) -> int:
    """Windows along one axis; in ceil mode a last window starting inside the end padding is dropped."""
    ext = (k - 1) * d + 1
    n = (size + pb + pe - ext + (s - 1 if ceil else 0)) // s + 1
    if ceil and (n - 1) * s >= size + pb:
        n -= 1
    if n < 1:
        raise ConversionError(f"kernel extent {ext} exceeds the padded input {size + pb + pe}")
    return n


# convolution ------------------------------------------------------------------------------------------
def _conv2d(b: Builder, name: str, x: Tensor, w: Tensor, bias: Tensor | None, attrs: dict) -> Tensor:
    return b.op(name, [x, w] + ([bias] if bias is not None else []), attrs)


def _conv_1d(b: Builder, name: str, x: Tensor, w: Tensor, bias: Tensor | None, win: Window, group: int,
             extra: dict) -> Tensor:
    """A 1-D (transposed) convolution as a 2-D one over (L, 1)."""
    k, s, pb, pe, d = win.axis(0)
    attrs = {"strides": [s, 1], "pads": [pb, 0, pe, 0], "dilations": [d, 1], "groups": group,
             **{key: [v[0], 0] for key, v in extra.items()}}
    y = _conv2d(b, name, b.reshape(x, [*x.shape, 1]), b.reshape(w, [*w.shape, 1]), bias, attrs)
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
def _coerced(b: Builder, x: Tensor, axis: int | None, fn: Callable[[Tensor, int], Tensor]) -> Tensor:
    """Opset < 13 flattens the input to 2-D at `axis` (default 1) and works on rows; opset 13 works on one
    axis (default -1)."""
    if b.opset >= 13:
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


# resize -----------------------------------------------------------------------------------------------
OP_CTMS = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn")
CTMS = (*OP_CTMS, "half_pixel_symmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coords(n_in: int, n_out: int, scale: float, ctm: str, roi: tuple[float, float]
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    """Input coordinate of each output index (ONNX's formulas, in f64), and for tf_crop_and_resize which
    outputs fall outside the input."""
    y, width = np.arange(n_out, dtype=np.float64), scale * n_in
    if ctm == "align_corners":
        return (np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)), None
    if ctm == "asymmetric":
        return y / scale, None
    if ctm == "tf_crop_and_resize":  # roi arithmetic in f32, as ONNX's reference does it on the f32 roi
        lo, hi = np.float32(roi[0]), np.float32(roi[1])
        start = np.float32(lo * np.float32(n_in - 1))
        x: np.ndarray
        if width == 1:
            x = np.full(n_out, float(np.float32((hi - lo) * np.float32(n_in - 1) / np.float32(2)))) + start
        else:
            x = y * np.float32(hi - lo) * (n_in - 1) / (width - 1) + start
        return x, (x < 0) | (x > n_in - 1)
    if ctm == "pytorch_half_pixel":
        return (np.full(n_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5), None
    if ctm == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale, None
    if ctm == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        return offset + (y + 0.5) / scale - 0.5, None
    return (y + 0.5) / scale - 0.5, None  # half_pixel


def _coeffs(ratio: float, scale: float, mode: str, nearest_mode: str, a: float,
            antialias: bool) -> np.ndarray:
    """Interpolation weights of the taps around a coordinate whose distance past its left tap is `ratio`
    (in (0, 1]); ONNX's reference kernels, antialiased ones widened by 1 / scale when downsampling."""
    if mode == "nearest":
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5, "floor": False,
              "ceil": True}[nearest_mode]
        return np.array([0.0, 1.0] if up else [1.0, 0.0])
    if mode == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        w = np.clip(1 - np.abs((np.arange(start, 2 - start) - ratio) * s), 0, 1)
        return w / w.sum()

    def cubic(t: np.ndarray) -> np.ndarray:
        t = np.abs(t)
        near = ((a + 2) * t - (a + 3)) * t * t + 1
        far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
        return np.where(t <= 1, near, np.where(t < 2, far, 0.0))

    if not antialias:
        return cubic(np.array([ratio + 1, ratio, 1 - ratio, 2 - ratio]))
    s = min(scale, 1.0)
    start = int(np.floor(-2 / s) + 1)
    w = cubic(s * (np.arange(start, 2 - start) - ratio))
    return w / w.sum()


def _interpolation(n_in: int, n_out: int, scale: float, mode: str, ctm: str, nearest_mode: str, a: float,
                   exclude_outside: bool, antialias: bool, roi: tuple[float, float]
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    """The (n_out, n_in) matrix one resized axis multiplies by, and the extrapolated outputs (or None);
    taps past the edges clamp to it, as ONNX's reference does."""
    x, extrapolated = _source_coords(n_in, n_out, scale, ctm, roi)
    left = np.floor(x)
    ratios = np.where(x == left, 1.0, x - left)
    w = np.stack([_coeffs(float(r), scale, mode, nearest_mode, a, antialias) for r in ratios])
    taps = w.shape[1]
    half = -(-taps // 2)
    xp = x + half
    p = np.floor(xp)
    frac = xp - p
    if taps % 2 == 0:
        offset = np.where(frac == 0, -(taps // 2), -(taps // 2) + 1)
    else:
        base = -((taps - 1) // 2)
        offset = np.where(frac <= 0.5, base, base + 1)
    idx = (p + offset).astype(np.int64)[:, None] + np.arange(taps)[None, :] - half
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    m = np.zeros((n_out, n_in))
    np.add.at(m, (np.repeat(np.arange(n_out), taps), np.clip(idx, 0, n_in - 1).reshape(-1)), w.reshape(-1))
    return m, (extrapolated if extrapolated is not None and extrapolated.any() else None)


def _along_axis(b: Builder, y: Tensor, a: int, m: np.ndarray) -> Tensor:
    """y with axis `a` multiplied by matrix m (n_out, n_in): a gather when every row picks one input."""
    if ((m == 0) | (m == 1)).all() and (m.sum(axis=1) == 1).all():
        return b.op("gather", [y, b.const(m.argmax(axis=1).astype(np.int64))], {"axis": a})
    if not y.type.is_float:
        raise ConversionError(f"Resize: interpolating mode on a {y.type} input is unsupported")
    w = m.astype(y.type.np_dtype)
    if a == y.rank - 1:
        return b.op("matmul", [y, b.const(np.ascontiguousarray(w.T))])
    if a == y.rank - 2:
        return b.op("matmul", [b.const(w), y])
    perm = [i for i in range(y.rank) if i != a] + [a]
    z = b.op("matmul", [_transpose(b, y, perm), b.const(np.ascontiguousarray(w.T))])
    return _transpose(b, z, [int(i) for i in np.argsort(perm)])


def _resize(b: Builder, x: Tensor, scales: list[float], sizes: list[int], scales_given: bool, *, mode: str,
            ctm: str, nearest_mode: str, cubic_coeff_a: float = -0.75, exclude_outside: bool = False,
            extrapolation_value: float = 0.0, antialias: bool = False,
            roi: list[float] | None = None) -> Tensor:
    if mode not in ("nearest", "linear", "cubic"):
        raise ConversionError(f"Resize: mode '{mode}' is not one of nearest, linear, cubic")
    if ctm not in CTMS:
        raise ConversionError(f"Resize: coordinate_transformation_mode '{ctm}' is not one of "
                              f"{', '.join(CTMS)}")
    if nearest_mode not in NEAREST_MODES:
        raise ConversionError(f"Resize: nearest_mode '{nearest_mode}' is not one of "
                              f"{', '.join(NEAREST_MODES)}")
    if antialias and mode == "nearest":
        raise ConversionError("Resize: antialias=1 is defined for linear and cubic modes, not nearest")
    shrinks = any(s < 1 for s in scales)
    exact = all(out == int(n * s) for n, out, s in zip(x.shape, sizes, scales, strict=True))
    # ONNX sizes align_corners and pytorch_half_pixel by the unrounded in * scale; the op by the output
    fractional = scales_given and any(out != n * s for n, out, s in zip(x.shape, sizes, scales, strict=True))
    if (mode != "cubic" and ctm in OP_CTMS and not (antialias and shrinks) and (exact or not scales_given)
            and (mode == "nearest" or x.type.is_float)
            and not (fractional and ctm in ("align_corners", "pytorch_half_pixel"))):
        return b.op("resize", [x], {"sizes": sizes, "scales": scales if scales_given else [], "mode": mode,
                                    "coordinate_transformation_mode": ctm, "nearest_mode": nearest_mode})
    rank = x.rank
    roi = roi or [0.0] * rank + [1.0] * rank
    y = x
    for a, (n_in, n_out, s) in enumerate(zip(x.shape, sizes, scales, strict=True)):
        box = (roi[a], roi[rank + a])
        if n_in == n_out and math.isclose(s, 1.0) and (ctm != "tf_crop_and_resize" or box == (0.0, 1.0)):
            continue
        m, outside = _interpolation(n_in, n_out, s, mode, ctm, nearest_mode, cubic_coeff_a, exclude_outside,
                                    antialias, box)
        y = _along_axis(b, y, a, m)
        if outside is not None:
            mask = b.const(outside.reshape([-1 if i == a else 1 for i in range(rank)]))
            y = b.op("where", [mask, _scalar(b, extrapolation_value, y), y])
    return y


@converter("Resize", since=10)
def Resize(b: Builder, x: Tensor, roi: Tensor | None = None, scales: Tensor | None = None,
           sizes: Tensor | None = None, *, antialias: int = 0, axes: list[int] | None = None,
           coordinate_transformation_mode: str = "half_pixel", cubic_coeff_a: float = -0.75,
           exclude_outside: int = 0, extrapolation_value: float = 0.0,
           keep_aspect_ratio_policy: str = "stretch", mode: str = "nearest",
           nearest_mode: str = "round_prefer_floor") -> Tensor:
    """Opset 10 takes (X, scales) with Upsample's semantics (asymmetric coordinates, nearest rounds down);
    opset 11 adds roi and sizes, opset 18 axes and keep_aspect_ratio_policy. What tessel's `resize` op
    covers maps to it; the rest (cubic, antialias, half_pixel_symmetric, tf_crop_and_resize, aspect-ratio
    sizes) multiplies each resized axis by an interpolation matrix computed here."""
    if b.opset < 11:
        if roi is None:
            raise ConversionError("Resize-10 needs its scales input")
        return _upsample(b, x, roi.floats("Resize's scales"), mode, shrink_rounds_up=True)
    rank = x.rank
    ax = [_axis(a, rank, "axes value") for a in axes] if axes else list(range(rank))
    scale_v = scales.floats("Resize's scales") if scales is not None else []
    size_v = sizes.ints("Resize's sizes") if sizes is not None else []
    if bool(scale_v) == bool(size_v):
        raise ConversionError("Resize needs exactly one of scales and sizes (non-empty)")
    given = scale_v or size_v
    if len(given) != len(ax):
        raise ConversionError(f"Resize: {'scales' if scale_v else 'sizes'} has {len(given)} values for "
                              f"{len(ax)} axes")
    full_scales, full_sizes = [1.0] * rank, list(x.shape)
    if scale_v:
        for a, s in zip(ax, scale_v, strict=True):
            full_scales[a], full_sizes[a] = s, int(s * x.shape[a])
    else:
        for a, n in zip(ax, size_v, strict=True):
            full_scales[a], full_sizes[a] = n / x.shape[a], n
        if keep_aspect_ratio_policy not in ("stretch", "not_larger", "not_smaller"):
            raise ConversionError(f"Resize: keep_aspect_ratio_policy '{keep_aspect_ratio_policy}' is not one "
                                  "of stretch, not_larger, not_smaller")
        if keep_aspect_ratio_policy != "stretch":
            pick = min if keep_aspect_ratio_policy == "not_larger" else max
            common = pick(full_scales[a] for a in ax)
            for a in ax:
                full_scales[a], full_sizes[a] = common, int(common * x.shape[a] + 0.5)
    box = None
    if coordinate_transformation_mode == "tf_crop_and_resize":
        if roi is None:
            raise ConversionError("Resize: tf_crop_and_resize needs the roi input")
        rv = roi.floats("Resize's roi")
        if len(rv) != 2 * len(ax):
            raise ConversionError(f"Resize: roi has {len(rv)} values, expected {2 * len(ax)}")
        box = [0.0] * rank + [1.0] * rank
        for i, a in enumerate(ax):
            box[a], box[rank + a] = rv[i], rv[len(ax) + i]
    return _resize(b, x, full_scales, full_sizes, bool(scale_v) or keep_aspect_ratio_policy != "stretch",
                   mode=mode, ctm=coordinate_transformation_mode, nearest_mode=nearest_mode,
                   cubic_coeff_a=cubic_coeff_a, exclude_outside=bool(exclude_outside),
                   extrapolation_value=extrapolation_value, antialias=bool(antialias), roi=box)


def _upsample(b: Builder, x: Tensor, scales: list[float], mode: str,
              shrink_rounds_up: bool = False) -> Tensor:
    """Upsample and Resize-10: output floor(in * scale), asymmetric coordinates, nearest rounds down;
    Resize-10 rounds up on the axes it shrinks (onnxruntime's legacy nearest), so those go first."""
    if len(scales) != x.rank:
        raise ConversionError(f"scales has {len(scales)} values for a rank-{x.rank} input")
    mode = "linear" if mode == "bilinear" else mode
    if mode not in ("nearest", "linear"):
        raise ConversionError(f"mode '{mode}' is not nearest or linear")
    if mode == "nearest" and shrink_rounds_up and any(s < 1 for s in scales):
        down = [s if s < 1 else 1.0 for s in scales]
        x = _resize(b, x, down, [int(n * s) for n, s in zip(x.shape, down, strict=True)], True, mode=mode,
                    ctm="asymmetric", nearest_mode="ceil")
        scales = [1.0 if s < 1 else s for s in scales]
    sizes = [int(n * s) for n, s in zip(x.shape, scales, strict=True)]
    return _resize(b, x, scales, sizes, True, mode=mode, ctm="asymmetric", nearest_mode="floor")


@converter("Upsample")
def Upsample(b: Builder, x: Tensor, scales_input: Tensor | None = None, *, mode: str = "nearest",
             scales: list[float] | None = None, height_scale: float | None = None,
             width_scale: float | None = None) -> Tensor:
    """Opset 9-10 give scales as an input, opset 7 as an attribute, opset 1 as height/width scales."""
    if scales_input is not None:
        values = scales_input.floats("Upsample's scales")
    elif scales is not None:
        values = [float(s) for s in scales]
    elif height_scale is not None and width_scale is not None:
        values = [1.0] * (x.rank - 2) + [float(height_scale), float(width_scale)]
    else:
        raise ConversionError("Upsample needs scales")
    return _upsample(b, x, values, mode)


# matrix products --------------------------------------------------------------------------------------
@converter("Gemm")
def Gemm(b: Builder, A: Tensor, B: Tensor, C: Tensor | None = None, *, alpha: float = 1.0, beta: float = 1.0,
         transA: int = 0, transB: int = 0, broadcast: int = 0) -> Tensor:
    """alpha * A' @ B' + beta * C; opset < 7's `broadcast` flag only allowed what later opsets always do."""
    inputs = [A, B] + ([b.cast(C, A.dtype)] if C is not None else [])
    return b.op("gemm", inputs, {"alpha": float(alpha), "beta": float(beta), "trans_a": bool(transA),
                                 "trans_b": bool(transB)})


@converter("MatMul")
def MatMul(b: Builder, A: Tensor, B: Tensor) -> Tensor:
    return b.op("matmul", [A, B])


def _minus_zero_point(b: Builder, x: Tensor, zero_point: Tensor | None, dtype: str, axis: int) -> Tensor:
    """x - zero_point in `dtype`; a per-channel (1-D) zero point lines up with dim `axis` of x."""
    y = b.cast(x, dtype)
    if zero_point is None:
        return y
    zp = b.cast(zero_point, dtype)
    if zp.rank == 1 and zp.shape[0] != 1:
        zp = b.reshape(zp, [zp.shape[0]] + [1] * (x.rank - 1 - axis % x.rank))
    return b.op("sub", [y, zp])


@converter("MatMulInteger", since=10)
def MatMulInteger(b: Builder, A: Tensor, B: Tensor, a_zero_point: Tensor | None = None,
                  b_zero_point: Tensor | None = None) -> Tensor:
    """(A - a_zero_point) @ (B - b_zero_point) in i32; A's zero point is per row, B's per column."""
    return b.op("matmul", [_minus_zero_point(b, A, a_zero_point, "i32", -2),
                           _minus_zero_point(b, B, b_zero_point, "i32", -1)])


@converter("ConvInteger", since=10)
def ConvInteger(b: Builder, x: Tensor, w: Tensor, x_zero_point: Tensor | None = None,
                w_zero_point: Tensor | None = None, *, auto_pad: str = "NOTSET",
                dilations: list[int] | None = None, group: int = 1, kernel_shape: list[int] | None = None,
                pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
    """Conv of the zero-point-shifted 8-bit operands, in f64 (exact for these sums), then i32."""
    xs, ws = _minus_zero_point(b, x, x_zero_point, "f64", 0), _minus_zero_point(b, w, w_zero_point, "f64", 0)
    y = Conv(b, xs, ws, auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape,
             pads=pads, strides=strides)
    return b.cast(y, "i32")


def _requantize(b: Builder, acc: Tensor, scale: Tensor, y_zero_point: Tensor | None, dtype: str) -> Tensor:
    """round(acc * scale + y_zero_point), saturated to `dtype`: in f64, as ONNX's reference computes it
    (the integer accumulator times the scales' product, which is rounded in the scales' own type)."""
    y = b.op("mul", [b.cast(acc, "f64"), b.cast(scale, "f64")])
    if y_zero_point is not None:
        y = b.op("add", [y, b.cast(y_zero_point, "f64")])
    info = np.iinfo(y.type.with_dtype(dtype).np_dtype)
    return b.cast(b.op("clip", [b.op("round", [y])], {"min": float(info.min), "max": float(info.max)}), dtype)


def _scale_along(b: Builder, scale: Tensor, rank: int, axis: int) -> Tensor:
    """A per-tensor scale as is; a 1-D per-channel one lined up with dim `axis` of a rank-`rank` result."""
    if scale.rank == 1 and scale.shape[0] != 1:
        return b.reshape(scale, [scale.shape[0]] + [1] * (rank - 1 - axis % rank))
    return scale


@converter("QLinearMatMul", since=10)
def QLinearMatMul(b: Builder, a: Tensor, a_scale: Tensor, a_zero_point: Tensor | None, B: Tensor,
                  b_scale: Tensor, b_zero_point: Tensor | None, y_scale: Tensor,
                  y_zero_point: Tensor | None = None) -> Tensor:
    """MatMulInteger, then requantized by a_scale * b_scale / y_scale (per-tensor, or per row of a and
    per column of b)."""
    acc = MatMulInteger(b, a, B, a_zero_point, b_zero_point)
    scale = b.op("div", [b.op("mul", [_scale_along(b, a_scale, acc.rank, -2),
                                      _scale_along(b, b_scale, acc.rank, -1)]), y_scale])
    return _requantize(b, acc, scale, y_zero_point, (y_zero_point or a).dtype)


@converter("QLinearConv", since=10)
def QLinearConv(b: Builder, x: Tensor, x_scale: Tensor, x_zero_point: Tensor | None, w: Tensor,
                w_scale: Tensor, w_zero_point: Tensor | None, y_scale: Tensor,
                y_zero_point: Tensor | None = None, bias: Tensor | None = None, *, auto_pad: str = "NOTSET",
                dilations: list[int] | None = None, group: int = 1, kernel_shape: list[int] | None = None,
                pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
    """ConvInteger plus the i32 bias, requantized by x_scale * w_scale / y_scale (w_scale per tensor or
    per output channel)."""
    xs, ws = _minus_zero_point(b, x, x_zero_point, "f64", 0), _minus_zero_point(b, w, w_zero_point, "f64", 0)
    acc = Conv(b, xs, ws, b.cast(bias, "f64") if bias is not None else None, auto_pad=auto_pad,
               dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads, strides=strides)
    scale = b.op("div", [b.op("mul", [x_scale, _scale_along(b, w_scale, acc.rank, 1)]), y_scale])
    return _requantize(b, acc, scale, y_zero_point, (y_zero_point or x).dtype)


def _einsum_labels(equation: str, operands: Sequence[Tensor]) -> tuple[list[list[str]], list[str]]:
    """Each operand's labels and the output's; the dims an ellipsis covers get labels '...0', '...1', ...
    aligned to the right, as they broadcast."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ConversionError(f"Einsum equation '{equation}' has {len(terms)} operand terms for "
                              f"{len(operands)} inputs")
    for t in [*terms, rhs]:
        if t.count("...") > 1 or not t.replace("...", "").isalpha() and t.replace("...", ""):
            raise ConversionError(f"Einsum equation '{equation}': term '{t}' is not letters with at most "
                                  "one '...'")
    spans = []
    for t, x in zip(terms, operands, strict=True):
        letters = t.replace("...", "")
        extra = x.rank - len(letters)
        if extra < 0 or (extra and "..." not in t):
            raise ConversionError(f"Einsum equation '{equation}': term '{t}' does not fit rank {x.rank}")
        spans.append(extra)
    ell = max(spans, default=0)
    labels = []
    for t, extra in zip(terms, spans, strict=True):
        pre, _, post = t.partition("...")
        labels.append([*pre, *(f"...{ell - extra + j}" for j in range(extra)), *post])
    dots = [f"...{j}" for j in range(ell)]
    if arrow:
        pre, has_dots, post = rhs.partition("...")
        out = [*pre, *(dots if has_dots else []), *post]
    else:
        counts: dict[str, int] = {}
        for ls in labels:
            for label in ls:
                counts[label] = counts.get(label, 0) + 1
        out = dots + sorted(label for label, c in counts.items() if c == 1 and not label.startswith("..."))
    if len(set(out)) != len(out):
        raise ConversionError(f"Einsum equation '{equation}' repeats an output label")
    return labels, out


def _einsum_diagonal(b: Builder, x: Tensor, labels: list[str]) -> tuple[Tensor, list[str]]:
    """Take the diagonal over a label repeated in one operand: its dims moved last and merged, then a
    strided slice (stride 1 + n + n^2 + ...) picks the equal-index entries."""
    label = next(lb for lb in labels if labels.count(lb) > 1)
    where = [i for i, lb in enumerate(labels) if lb == label]
    n = x.shape[where[0]]
    if any(x.shape[i] != n for i in where):
        raise ConversionError(f"Einsum: label '{label}' has differing dims {[x.shape[i] for i in where]}")
    rest = [i for i in range(x.rank) if i not in where]
    y = b.reshape(_transpose(b, x, rest + where), [*(x.shape[i] for i in rest), n ** len(where)])
    step = sum(n ** k for k in range(len(where)))
    y = _slice(b, y, len(rest), 0, n ** len(where), step)
    return y, [labels[i] for i in rest] + [label]


def _einsum_sum(b: Builder, x: Tensor, labels: list[str], keep: set[str]) -> tuple[Tensor, list[str]]:
    axes = [i for i, lb in enumerate(labels) if lb not in keep]
    if not axes:
        return x, labels
    return (b.op("reduce_sum", [x], {"axes": axes, "keepdims": False}),
            [lb for lb in labels if lb in keep])


def _einsum_pair(b: Builder, x: Tensor, lx: list[str], y: Tensor, ly: list[str], keep: set[str]
                 ) -> tuple[Tensor, list[str]]:
    """Contract two operands with one batched matmul: (batch, M, K) @ (batch, K, N)."""
    dx, dy = dict(zip(lx, x.shape, strict=True)), dict(zip(ly, y.shape, strict=True))
    batch = [lb for lb in lx if lb in dy and lb in keep]
    summed = [lb for lb in lx if lb in dy and lb not in keep]
    only_x = [lb for lb in lx if lb not in dy]
    only_y = [lb for lb in ly if lb not in dx]
    for lb in summed:
        if dx[lb] != dy[lb]:
            raise ConversionError(f"Einsum: summed label '{lb}' has dims {dx[lb]} and {dy[lb]}")
    k = math.prod(dx[lb] for lb in summed)
    m, n = math.prod(dx[lb] for lb in only_x), math.prod(dy[lb] for lb in only_y)
    xm = b.reshape(_transpose(b, x, [lx.index(lb) for lb in batch + only_x + summed]),
                   [*(dx[lb] for lb in batch), m, k])
    ym = b.reshape(_transpose(b, y, [ly.index(lb) for lb in batch + summed + only_y]),
                   [*(dy[lb] for lb in batch), k, n])
    z = b.op("matmul", [xm, ym])
    shape = [*z.shape[:len(batch)], *(dx[lb] for lb in only_x), *(dy[lb] for lb in only_y)]
    return b.reshape(z, shape), batch + only_x + only_y


@converter("Einsum", since=12)
def Einsum(b: Builder, *inputs: Tensor, equation: str) -> Tensor:
    """Diagonals by strided slices, labels no later term needs summed early, then operands contracted
    left to right by batched matmuls, and a final transpose to the output order."""
    labels, out = _einsum_labels(equation, inputs)
    terms = []
    for x, ls in zip(inputs, labels, strict=True):
        while len(set(ls)) != len(ls):
            x, ls = _einsum_diagonal(b, x, ls)
        terms.append((x, ls))
    acc, la = terms[0]
    for i in range(1, len(terms)):
        y, ly = terms[i]
        later = set(out).union(*(set(t[1]) for t in terms[i + 1:]))
        acc, la = _einsum_sum(b, acc, la, later | set(ly))
        y, ly = _einsum_sum(b, y, ly, later | set(la))
        acc, la = _einsum_pair(b, acc, la, y, ly, later)
    acc, la = _einsum_sum(b, acc, la, set(out))
    missing = [lb for lb in out if lb not in la]
    if missing:
        raise ConversionError(f"Einsum equation '{equation}': output label(s) {', '.join(missing)} "
                              "appear in no input")
    return _transpose(b, acc, [la.index(lb) for lb in out])


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
    mask = np.ones(data.shape, bool if b.opset >= 10 else data.type.np_dtype)
    return [data, b.const(mask)]


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
