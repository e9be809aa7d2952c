"""Converters for matrix products: Gemm, MatMul, the integer and quantized-linear forms, and Einsum
(diagonals, sums and pairwise contractions lowered to transpose + reshape + matmul)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..builder import Builder, ConversionError, Tensor
from ..registry import converter
from .common import (
    Window,
    _slice,
    _transpose,
)
from .nn import Conv, _conv2d, _conv_1d


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
    """(A - a_zero_point) @ (B - b_zero_point) in i32; A's zero point is per row, B's per column: one
    `matmul_integer` for matrices with a scalar A zero point, else the shifted operands' i32 matmul."""
    if (zps := _integer_matmul_zero_points(b, A, B, a_zero_point, b_zero_point)) is not None:
        return b.op("matmul_integer", [A, B, *zps])
    return b.op("matmul", [_minus_zero_point(b, A, a_zero_point, "i32", -2),
                           _minus_zero_point(b, B, b_zero_point, "i32", -1)])


@converter("ConvInteger", since=10)
def ConvInteger(b: Builder, x: Tensor, w: Tensor, x_zero_point: Tensor | None = None,
                w_zero_point: Tensor | None = None, *, auto_pad: str = "NOTSET",
                dilations: list[int] | None = None, group: int = 1, kernel_shape: list[int] | None = None,
                pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
    """One `conv2d_integer` for 1-D and 2-D windows; 3-D ones convolve the zero-point-shifted operands in
    f64 (exact for these sums), then convert to i32."""
    zps = _integer_conv_zero_points(b, x, w, x_zero_point, w_zero_point)
    if zps is not None and x.rank in (3, 4):
        return _integer_conv(b, "conv2d_integer", x, w, [*zps], None, auto_pad, dilations, group,
                             kernel_shape, pads, strides)
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
    zps = _integer_matmul_zero_points(b, a, B, a_zero_point, b_zero_point)
    ydt = (y_zero_point or a).dtype
    if zps is not None and _per_tensor(a_scale) and _per_tensor(y_scale) and ydt in ("i8", "ui8") and \
            (_per_tensor(b_scale) or (b_scale.rank == 1 and b_scale.shape[0] == B.shape[-1])):
        scale = _requant_scale(b, a_scale, b_scale, y_scale)
        return b.op("qmatmul", [a, B, *zps, scale, _zero_point_scalar(b, y_zero_point, ydt)])
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
    per output channel): one `qconv2d` for 1-D and 2-D windows."""
    zps = _integer_conv_zero_points(b, x, w, x_zero_point, w_zero_point)
    ydt = (y_zero_point or x).dtype
    if zps is not None and x.rank in (3, 4) and _per_tensor(x_scale) and _per_tensor(y_scale) and \
            ydt in ("i8", "ui8"):
        scale = _requant_scale(b, x_scale, w_scale, y_scale)
        ops = [*zps, scale, _zero_point_scalar(b, y_zero_point, ydt)]
        return _integer_conv(b, "qconv2d", x, w, ops, bias, auto_pad, dilations, group, kernel_shape, pads,
                             strides)
    xs, ws = _minus_zero_point(b, x, x_zero_point, "f64", 0), _minus_zero_point(b, w, w_zero_point, "f64", 0)
    acc = Conv(b, xs, ws, b.cast(bias, "f64") if bias is not None else None, auto_pad=auto_pad,
               dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads, strides=strides)
    scale = b.op("div", [b.op("mul", [x_scale, _scale_along(b, w_scale, acc.rank, 1)]), y_scale])
    return _requantize(b, acc, scale, y_zero_point, (y_zero_point or x).dtype)


# the integer ops' operands ------------------------------------------------------------------------------
def _per_tensor(t: Tensor) -> bool:
    return t.type.numel == 1 and all(d is not None for d in t.shape)


def _zero_point_scalar(b: Builder, zp: Tensor | None, dtype: str) -> Tensor:
    return b.reshape(zp, []) if zp is not None else b.const(np.zeros((), np.dtype(_NP8[dtype])))


_NP8 = {"i8": "int8", "ui8": "uint8"}


def _channel_zero_point(b: Builder, zp: Tensor | None, dtype: str, channels: int | None) -> Tensor | None:
    """A weight zero point as the integer ops take it: a scalar, or one per output channel; None when it
    is neither."""
    if zp is None or _per_tensor(zp):
        return _zero_point_scalar(b, zp, dtype)
    return zp if zp.rank == 1 and zp.shape[0] == channels else None


def _integer_conv_zero_points(b: Builder, x: Tensor, w: Tensor, xz: Tensor | None,
                              wz: Tensor | None) -> tuple[Tensor, Tensor] | None:
    if x.dtype not in _NP8 or w.dtype not in _NP8 or (xz is not None and not _per_tensor(xz)):
        return None
    wzp = _channel_zero_point(b, wz, w.dtype, w.shape[0])
    return None if wzp is None else (_zero_point_scalar(b, xz, x.dtype), wzp)


def _integer_matmul_zero_points(b: Builder, A: Tensor, B: Tensor, az: Tensor | None,
                                bz: Tensor | None) -> tuple[Tensor, Tensor] | None:
    """The zero points `matmul_integer` / `qmatmul` take (A's a scalar, B's a scalar or one per column);
    None for the forms they do not cover (vector operands, a zero point per row of A)."""
    if A.rank < 2 or B.rank < 2 or A.dtype not in _NP8 or B.dtype not in _NP8 or \
            (az is not None and not _per_tensor(az)):
        return None
    bzp = _channel_zero_point(b, bz, B.dtype, B.shape[-1])
    return None if bzp is None else (_zero_point_scalar(b, az, A.dtype), bzp)


def _requant_scale(b: Builder, x_scale: Tensor, w_scale: Tensor, y_scale: Tensor) -> Tensor:
    """x_scale * w_scale / y_scale in the scales' type, as f32: a scalar or one per output channel."""
    xs, ys = b.reshape(x_scale, []), b.reshape(y_scale, [])
    ws = b.reshape(w_scale, []) if _per_tensor(w_scale) else w_scale
    return b.cast(b.op("div", [b.op("mul", [xs, ws]), ys]), "f32")


def _integer_conv(b: Builder, name: str, x: Tensor, w: Tensor, operands: list[Tensor], bias: Tensor | None,
                  auto_pad: str, dilations: list[int] | None, group: int, kernel_shape: list[int] | None,
                  pads: list[int] | None, strides: list[int] | None) -> Tensor:
    """`conv2d_integer` or `qconv2d` (`operands`: zero points, then a q-op's scale and zero point) over a
    2-D window, a 1-D one as 2-D over (L, 1), as Conv does."""
    kernel = list(w.shape[2:])
    if kernel_shape and [int(k) for k in kernel_shape] != kernel:
        raise ConversionError(f"kernel_shape {list(kernel_shape)} differs from the weight's {kernel}")
    win = Window(name, x.shape[2:], kernel, strides, pads, dilations, auto_pad)
    if win.n == 2:
        attrs = {"strides": win.strides, "pads": win.pads, "dilations": win.dilations, "groups": group}
        return _conv2d(b, name, x, w, bias, attrs, operands)
    return _conv_1d(b, name, x, w, bias, win, group, {}, operands)


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
