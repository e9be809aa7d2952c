"""Neural-network ops: convolution and pooling (normalization is in norm.py, resize in resize.py).

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
from .registry import Cost, OpDef, Sig, at_least, attr, check, io_bytes, numel, register

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
    check(at_least(padded, ext), f"kernel extent {ext} exceeds padded input {padded} in spatial dim {i}")
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
        check(at_least(n, 1), f"output size {n} in spatial dim {i} is not positive (pads {p[i]}, {p[i + 2]})")
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
    if "dilations" in sig.attrs:  # max_pool2d: 8-bit integers too (ONNX MaxPool takes i8 and ui8)
        check(x.is_float or x.dtype in ("i8", "ui8"), f"input must be a float or 8-bit tensor, got {x}")
    else:
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
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min  # padding never wins
    xp = _pad_hw(x, p[0], p[1], ends[0], ends[1], low)
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
    doc="2-D max pooling, NCHW, of floats or 8-bit integers; padding is -inf (an integer type's minimum), "
        "so it never wins.",
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
