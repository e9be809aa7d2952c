"""Neural-network ops: convolution, pooling, normalization, softmax, LRN and resize.

Layouts and attribute meanings follow ONNX (NCHW activations, OIHW weights, pads as [top, left, bottom,
right]) so the importer maps nodes one to one and onnxruntime can serve as the oracle. The references are
vectorized (BLAS matmuls on strided windows; Python loops only over kernel taps, never over pixels or
channels) because the numpy target runs whole models through them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..types import TensorType
from .registry import Cost, OpDef, Sig, attr, check, io_bytes, norm_axis, numel, register

PURE = frozenset({"pure"})
REDUCTION = frozenset({"pure", "reduction"})
Dim = int | None


# shared checks ------------------------------------------------------------------------------------------
def _float(t: TensorType, what: str = "input") -> None:
    check(t.is_float, f"{what} must be a float tensor, got {t}")


def _rank(t: TensorType, want: int, what: str, at_least: bool = False) -> None:
    ok = t.rank >= want if at_least else t.rank == want
    check(ok, f"{what} must have rank {'>= ' if at_least else ''}{want}, got {t}")


def _same_dtype(sig: Sig) -> None:
    x = sig.operands[0]
    for i, t in enumerate(sig.operands[1:], 1):
        check(t.dtype == x.dtype, f"operand {i} element type {t.dtype} differs from the input's {x.dtype}")


def _ints(sig: Sig, name: str, n: int, lo: int) -> list[int]:
    v = [int(i) for i in sig[name]]
    check(len(v) == n, f"'{name}' must have {n} values, got {len(v)}")
    check(all(i >= lo for i in v), f"'{name}' values must be >= {lo}, got {v}")
    return v


def _channel_vec(t: TensorType, c: Dim, what: str) -> None:
    """A per-channel parameter: rank 1 with the input's channel count."""
    ok = t.rank == 1 and (c is None or t.shape[0] is None or t.shape[0] == c)
    check(ok, f"{what} must have shape [{'?' if c is None else c}], got {t}")


def _window_dim(size: Dim, k: Dim, s: int, pb: int, pe: int, d: int, ceil: bool, i: int) -> Dim:
    """Output length of a strided window sweep. In ceil mode a last window that would start inside the end
    padding is dropped (as onnxruntime and PyTorch do), so every window sees at least one real element."""
    if size is None or k is None:
        return None
    ext, padded = (k - 1) * d + 1, size + pb + pe
    check(ext <= padded, f"kernel extent {ext} exceeds padded input {padded} in spatial dim {i}")
    n = (padded - ext + (s - 1 if ceil else 0)) // s + 1
    if ceil and (n - 1) * s >= size + pb:
        n -= 1
    return n


def _widened(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Run `fn` on f32 copies of f16/bf16 operands (numpy has no bf16 BLAS; f16 sums lose too much), then
    cast to the result type."""

    def run(sig: Sig, *xs: np.ndarray) -> np.ndarray:
        want = sig.results[0].np_dtype if sig.results else xs[0].dtype
        xs = tuple(x.astype(np.float32) if x.dtype.name in ("float16", "bfloat16") else x for x in xs)
        return np.ascontiguousarray(fn(sig, *xs)).astype(want, copy=False)

    return run


def _taps(xp: np.ndarray, i: int, j: int, s: list[int], d: list[int], ho: int, wo: int) -> np.ndarray:
    """The (N, C, Ho, Wo) view of padded input `xp` that kernel tap (i, j) reads."""
    r, c = i * d[0], j * d[1]
    return xp[:, :, r:r + s[0] * (ho - 1) + 1:s[0], c:c + s[1] * (wo - 1) + 1:s[1]]


def _pad_hw(x: np.ndarray, top: int, left: int, bottom: int, right: int, value: float = 0.0) -> np.ndarray:
    if not (top or left or bottom or right):
        return x
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


# conv2d -------------------------------------------------------------------------------------------------
CONV_ATTRS = {"strides": attr("ints", [1, 1]), "pads": attr("ints", [0, 0, 0, 0]),
              "dilations": attr("ints", [1, 1]), "groups": attr("int", 1)}


def _conv_common(sig: Sig) -> tuple[TensorType, TensorType, list[int], list[int], list[int], int]:
    x, w = sig.operands[:2]
    _float(x)
    _rank(x, 4, "input")
    _rank(w, 4, "weight")
    _same_dtype(sig)
    g = sig["groups"]
    check(g >= 1, f"groups must be positive, got {g}")
    return x, w, _ints(sig, "strides", 2, 1), _ints(sig, "pads", 4, 0), _ints(sig, "dilations", 2, 1), g


def _conv_infer(sig: Sig) -> list[TensorType]:
    x, w, s, p, d, g = _conv_common(sig)
    c, o, wc = x.shape[1], w.shape[0], w.shape[1]
    if c is not None and wc is not None:
        check(c == wc * g, f"input channels {c} do not match weight channels {wc} * groups {g}")
    if o is not None:
        check(o % g == 0, f"output channels {o} are not divisible by groups {g}")
    if len(sig.operands) == 3:
        _channel_vec(sig.operands[2], o, "bias")
    hw = [_window_dim(x.shape[2 + i], w.shape[2 + i], s[i], p[i], p[i + 2], d[i], False, i) for i in range(2)]
    return [TensorType((x.shape[0], o, *hw), x.dtype)]


@_widened
def _conv_ref(sig: Sig, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    s, p, d, g = sig["strides"], sig["pads"], sig["dilations"], sig["groups"]
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    og = o // g
    ho = (h + p[0] + p[2] - (kh - 1) * d[0] - 1) // s[0] + 1
    wo = (wd + p[1] + p[3] - (kw - 1) * d[1] - 1) // s[1] + 1
    xp = _pad_hw(x, *p)
    if cg == 1 and g > 1:  # depthwise: one multiply-add per tap over all channels beats g tiny matmuls
        wt = w.reshape(c, og, kh, kw)
        acc = np.zeros((n, c, og, ho, wo), x.dtype)
        for i in range(kh):
            for j in range(kw):
                acc += _taps(xp, i, j, s, d, ho, wo)[:, :, None] * wt[:, :, i, j, None, None]
        y = acc.reshape(n, o, ho, wo)
    else:  # im2col from a strided view, then one BLAS matmul (batched over groups)
        sn, sc, sh, sw = xp.strides
        win = as_strided(xp, (g, cg, kh, kw, n, ho, wo),
                         (sc * cg, sc, sh * d[0], sw * d[1], sn, sh * s[0], sw * s[1]), writeable=False)
        # rows (c, i, j), columns (n, y, x): the copy streams along image rows, and for n == 1 the
        # product is already NCHW
        cols = win.reshape(g, cg * kh * kw, n * ho * wo)
        y = np.matmul(w.reshape(g, og, cg * kh * kw), cols)
        y = y.reshape(o, n, ho, wo).transpose(1, 0, 2, 3)
    return y + b[:, None, None] if b is not None else y


def _conv_cost(sig: Sig) -> Cost:
    """Each output (conv) or input (transpose) element meets one weight slice w[o] / w[c]."""
    x, w, y = sig.operands[0], sig.operands[1], sig.results[0]
    macs = (x if "output_padding" in sig.attrs else y).numel * numel(w.shape[1:])
    return Cost(2 * macs + (y.numel if len(sig.operands) == 3 else 0), *io_bytes(sig))


register(OpDef(
    "conv2d", ("x", "w", "bias?"), infer=_conv_infer, reference=_conv_ref, attrs=dict(CONV_ATTRS),
    traits=PURE, cost=_conv_cost,
    doc="2-D convolution (cross-correlation), NCHW x OIHW; grouped when groups > 1, depthwise when "
        "groups == input channels.",
))


# conv_transpose2d ----------------------------------------------------------------------------------------
def _convt_infer(sig: Sig) -> list[TensorType]:
    x, w, s, p, d, g = _conv_common(sig)
    op = _ints(sig, "output_padding", 2, 0)
    c, wc = x.shape[1], w.shape[0]
    if c is not None:
        check(c % g == 0, f"input channels {c} are not divisible by groups {g}")
        check(wc is None or wc == c, f"input channels {c} do not match weight input channels {wc}")
    o = None if w.shape[1] is None else w.shape[1] * g
    if len(sig.operands) == 3:
        _channel_vec(sig.operands[2], o, "bias")
    hw: list[Dim] = []
    for i in range(2):
        check(op[i] < max(s[i], d[i]),
              f"output_padding {op[i]} must be smaller than stride {s[i]} or dilation {d[i]}")
        size, k = x.shape[2 + i], w.shape[2 + i]
        if size is None or k is None:
            hw.append(None)
            continue
        n = s[i] * (size - 1) + op[i] + (k - 1) * d[i] + 1 - p[i] - p[i + 2]
        check(n >= 1, f"output size {n} in spatial dim {i} is not positive (pads {p[i]}, {p[i + 2]})")
        hw.append(n)
    return [TensorType((x.shape[0], o, *hw), x.dtype)]


@_widened
def _convt_ref(sig: Sig, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """Scatter form: one matmul gives every (input pixel, tap) product, then each tap adds its strided
    slab into the uncropped output, which the pads crop."""
    s, p, d, g, op = sig["strides"], sig["pads"], sig["dilations"], sig["groups"], sig["output_padding"]
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg, o = c // g, og * g
    xs = x.reshape(n, g, cg, h * wd).transpose(1, 0, 3, 2).reshape(g, n * h * wd, cg)
    cols = np.matmul(xs, w.reshape(g, cg, og * kh * kw))
    cols = cols.reshape(g, n, h, wd, og, kh, kw).transpose(5, 6, 1, 0, 4, 2, 3).reshape(kh, kw, n, o, h, wd)
    fh = s[0] * (h - 1) + (kh - 1) * d[0] + 1 + op[0]
    fw = s[1] * (wd - 1) + (kw - 1) * d[1] + 1 + op[1]
    full = np.zeros((n, o, fh, fw), cols.dtype)
    for i in range(kh):
        for j in range(kw):
            _taps(full, i, j, s, d, h, wd)[...] += cols[i, j]
    y = full[:, :, p[0]:fh - p[2], p[1]:fw - p[3]]
    return y + b[:, None, None] if b is not None else y


register(OpDef(
    "conv_transpose2d", ("x", "w", "bias?"), infer=_convt_infer, reference=_convt_ref,
    attrs={**CONV_ATTRS, "output_padding": attr("ints", [0, 0])}, traits=PURE, cost=_conv_cost,
    doc="2-D transposed convolution (ONNX ConvTranspose), weight (C_in, C_out / groups, kH, kW).",
))


# pooling ------------------------------------------------------------------------------------------------
def _pool_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    _float(x)
    _rank(x, 4, "input")
    k, s, p = _ints(sig, "kernel", 2, 1), _ints(sig, "strides", 2, 1), _ints(sig, "pads", 4, 0)
    d = _ints(sig, "dilations", 2, 1) if "dilations" in sig.attrs else [1, 1]
    hw: list[Dim] = []
    for i in range(2):
        ext = (k[i] - 1) * d[i] + 1
        check(p[i] < ext and p[i + 2] < ext,
              f"pads {p[i]}, {p[i + 2]} must be smaller than kernel extent {ext} in spatial dim {i}")
        hw.append(_window_dim(x.shape[2 + i], k[i], s[i], p[i], p[i + 2], d[i], sig["ceil_mode"], i))
    return [TensorType((*x.shape[:2], *hw), x.dtype)]


def _pool_geometry(sig: Sig, x: np.ndarray) -> tuple[list[int], list[int], list[int], list[int], list[int],
                                                      int, int]:
    """kernel, strides, pads, dilations, the end pads the windows actually need, and the output size."""
    k, s, p = sig["kernel"], sig["strides"], sig["pads"]
    d = sig.attrs.get("dilations", [1, 1])
    ho, wo = (int(_window_dim(x.shape[2 + i], k[i], s[i], p[i], p[i + 2], d[i], sig["ceil_mode"], i) or 0)
              for i in range(2))
    # ceil mode may need more end padding than `pads` gives; that part never counts
    ends = [max(p[2 + i], (n - 1) * s[i] + (k[i] - 1) * d[i] + 1 - x.shape[2 + i] - p[i])
            for i, n in enumerate((ho, wo))]
    return k, s, p, d, ends, ho, wo


@_widened
def _max_pool_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    k, s, p, d, ends, ho, wo = _pool_geometry(sig, x)
    xp = _pad_hw(x, p[0], p[1], ends[0], ends[1], -np.inf)
    y = _taps(xp, 0, 0, s, d, ho, wo).copy()
    for i in range(k[0]):
        for j in range(k[1]):
            if i or j:
                np.maximum(y, _taps(xp, i, j, s, d, ho, wo), out=y)
    return y


def _window_counts(size: int, k: int, s: int, pb: int, pe: int, n: int, include_pad: bool) -> np.ndarray:
    """How many elements each window averages: real ones, plus the declared pads with count_include_pad."""
    starts = np.arange(n) * s - pb
    lo, hi = (-pb, size + pe) if include_pad else (0, size)
    return np.minimum(starts + k, hi) - np.maximum(starts, lo)


@_widened
def _avg_pool_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    k, s, p, d, ends, ho, wo = _pool_geometry(sig, x)
    xp = _pad_hw(x, p[0], p[1], ends[0], ends[1])
    y = np.zeros((*x.shape[:2], ho, wo), x.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            y += _taps(xp, i, j, s, d, ho, wo)
    inc = sig["count_include_pad"]
    ch = _window_counts(x.shape[2], k[0], s[0], p[0], p[2], ho, inc)
    cw = _window_counts(x.shape[3], k[1], s[1], p[1], p[3], wo, inc)
    return y / np.outer(ch, cw).astype(x.dtype)


def _pool_cost(sig: Sig) -> Cost:
    r, w = io_bytes(sig)
    return Cost(sig.results[0].numel * int(np.prod(sig["kernel"])), r, w)


POOL_ATTRS = {"kernel": attr("ints"), "strides": attr("ints", [1, 1]), "pads": attr("ints", [0, 0, 0, 0]),
              "ceil_mode": attr("bool", False)}
register(OpDef(
    "max_pool2d", ("x",), infer=_pool_infer, reference=_max_pool_ref,
    attrs={**POOL_ATTRS, "dilations": attr("ints", [1, 1])}, traits=PURE, cost=_pool_cost,
    doc="2-D max pooling, NCHW; padding is -inf, so it never wins.",
))
register(OpDef(
    "avg_pool2d", ("x",), infer=_pool_infer, reference=_avg_pool_ref,
    attrs={**POOL_ATTRS, "count_include_pad": attr("bool", False)}, traits=PURE, cost=_pool_cost,
    doc="2-D average pooling, NCHW; count_include_pad divides by the window size within the declared "
        "pads (never the extra ceil-mode overhang).",
))


def _global_pool_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    _float(x)
    _rank(x, 3, "input", at_least=True)
    return [x.with_shape((*x.shape[:2], *(1 for _ in x.shape[2:])))]


def _global_pool(name: str, fn: Callable[..., np.ndarray], doc: str) -> None:
    register(OpDef(
        name, ("x",), infer=_global_pool_infer,
        reference=_widened(lambda sig, x: fn(x, axis=tuple(range(2, x.ndim)), keepdims=True)),
        traits=REDUCTION, cost=lambda sig: Cost(sig.operands[0].numel, *io_bytes(sig)), doc=doc,
    ))


_global_pool("global_avg_pool", np.mean, "Mean over all spatial dims (N, C, ...) -> (N, C, 1, ...).")
_global_pool("global_max_pool", np.max, "Max over all spatial dims (N, C, ...) -> (N, C, 1, ...).")


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


# resize -------------------------------------------------------------------------------------------------
def _resize_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    sizes, scales = [int(v) for v in sig["sizes"]], [float(v) for v in sig["scales"]]
    check(len(sizes) == x.rank, f"'sizes' must have {x.rank} values (the input rank), got {len(sizes)}")
    check(all(v >= 1 for v in sizes), f"'sizes' values must be positive, got {sizes}")
    check(len(scales) in (0, x.rank), f"'scales' must be empty or have {x.rank} values, got {len(scales)}")
    check(all(v > 0 for v in scales), f"'scales' values must be positive, got {scales}")
    if sig["mode"] == "linear":
        _float(x)
    else:
        check(x.dtype != "i1", f"input must be numeric, got {x}")
    return [x.with_shape(tuple(sizes))]


def _resize_verify(sig: Sig) -> None:
    """Given scales, ONNX sizes the output floor(in * scale); an importer that passes both must agree."""
    x, sizes, scales = sig.operands[0], sig["sizes"], sig["scales"]
    for i, (n, out, sc) in enumerate(zip(x.shape, sizes, scales, strict=False)):
        if n is not None:
            want = {int(np.float32(n) * np.float32(sc)), int(n * sc)}
            check(out in want, f"'sizes' value {out} in dim {i} is not floor({n} * scale {sc}) = {min(want)}")


def _source_coords(out_len: int, in_len: int, scale: np.float32, ctm: str) -> np.ndarray:
    """Input coordinate of each output index, in f32 with onnxruntime's operation order so that nearest
    rounding ties fall the same way."""
    xr, f = np.arange(out_len, dtype=np.float32), np.float32
    if ctm == "half_pixel":
        return (xr + f(0.5)) / scale - f(0.5)
    if ctm == "pytorch_half_pixel":
        return (xr + f(0.5)) / scale - f(0.5) if out_len > 1 else np.zeros(1, np.float32)
    if ctm == "tf_half_pixel_for_nn":
        return (xr + f(0.5)) / scale
    if ctm == "align_corners":
        return xr * f(in_len - 1) / f(out_len - 1) if out_len > 1 else np.zeros(1, np.float32)
    return xr / scale  # asymmetric


def _nearest(c: np.ndarray, mode: str) -> np.ndarray:
    half = c == np.trunc(c) + np.float32(0.5)
    if mode == "round_prefer_floor":
        return np.where(half, np.floor(c), np.rint(c))
    if mode == "round_prefer_ceil":
        return np.where(half, np.ceil(c), np.rint(c))
    return np.floor(c) if mode == "floor" else np.ceil(c)


def _resize_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    """Separable: one gather (nearest) or one two-tap lerp (linear) per resized axis."""
    sizes, scales, linear = sig["sizes"], sig["scales"], sig["mode"] == "linear"
    want = sig.results[0].np_dtype if sig.results else x.dtype
    y = x.astype(np.float32) if linear and x.dtype.itemsize < 4 else x
    for ax, (n_in, n_out) in enumerate(zip(x.shape, sizes, strict=True)):
        scale = np.float32(scales[ax]) if scales else np.float32(n_out) / np.float32(n_in)
        if n_in == n_out and scale == 1:
            continue
        c = _source_coords(n_out, n_in, scale, sig["coordinate_transformation_mode"])
        if not linear:
            y = np.take(y, np.clip(_nearest(c, sig["nearest_mode"]), 0, n_in - 1).astype(np.intp), axis=ax)
            continue
        c = np.clip(c, 0, n_in - 1)
        lo = np.floor(c).astype(np.intp)
        hi = np.minimum(lo + 1, n_in - 1)
        frac = (c - lo).astype(y.dtype).reshape([-1 if a == ax else 1 for a in range(x.ndim)])
        y = np.take(y, lo, axis=ax) * (1 - frac) + np.take(y, hi, axis=ax) * frac
    return np.ascontiguousarray(y).astype(want, copy=False)


def _resize_cost(sig: Sig) -> Cost:
    x, y = sig.operands[0], sig.results[0]
    axes = sum(1 for a, b in zip(x.shape, y.shape, strict=True) if a != b)
    return Cost(3 * axes * y.numel if sig["mode"] == "linear" else 0, *io_bytes(sig))


register(OpDef(
    "resize", ("x",), infer=_resize_infer, verify=_resize_verify, reference=_resize_ref,
    attrs={"sizes": attr("ints"), "scales": attr("floats", []),
           "mode": attr("str", "nearest", allowed=("nearest", "linear")),
           "coordinate_transformation_mode": attr("str", "half_pixel", allowed=(
               "half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn")),
           "nearest_mode": attr("str", "round_prefer_floor", allowed=(
               "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"))},
    traits=PURE, cost=_resize_cost,
    doc="ONNX Resize to the static `sizes`: nearest or (multi)linear over the resized dims. `scales`, when "
        "given, replaces out/in in the coordinate transform, as ONNX does when a model gives scales.",
))
