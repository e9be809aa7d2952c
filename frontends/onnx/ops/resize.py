"""Converters for Resize and Upsample. Interpolation weights depend only on shapes, so they are computed
here in numpy (one matrix per resized axis) and applied as matmuls along each axis."""

from __future__ import annotations

import math

import numpy as np

from ....ir.symbolic import scale_dim
from ..builder import Builder, ConversionError, Tensor
from ..registry import converter
from .common import (
    _axis,
    _scalar,
    _transpose,
)

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
    if type(n_in) is not int or type(n_out) is not int:
        raise ConversionError(f"Resize ({mode}, {ctm}) of a symbolic dim: its interpolation matrix needs "
                              "static sizes (give them with --input-shape)")
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
    exact = not scales_given or all(out == scale_dim(n, s) for n, out, s in zip(x.shape, sizes, scales,
                                                                                strict=True))
    # ONNX sizes align_corners and pytorch_half_pixel by the unrounded in * scale; the op by the output
    fractional = scales_given and any(_fractional(n, out, s) for n, out, s in zip(x.shape, sizes, scales,
                                                                                 strict=True))
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
            full_scales[a], full_sizes[a] = s, scale_dim(x.shape[a], s)
    else:
        for a, n in zip(ax, size_v, strict=True):
            d = x.shape[a]  # a symbolic size gives no float scale: the sizes alone decide (stretch)
            full_scales[a], full_sizes[a] = (n / d if type(n) is int and type(d) is int else math.nan), n
        if keep_aspect_ratio_policy not in ("stretch", "not_larger", "not_smaller"):
            raise ConversionError(f"Resize: keep_aspect_ratio_policy '{keep_aspect_ratio_policy}' is not one "
                                  "of stretch, not_larger, not_smaller")
        if keep_aspect_ratio_policy != "stretch" and any(math.isnan(full_scales[a]) for a in ax):
            raise ConversionError(f"Resize: keep_aspect_ratio_policy '{keep_aspect_ratio_policy}' needs "
                                  "static sizes")
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


def _fractional(n: object, out: object, s: float) -> bool:
    """Whether in * scale is not a whole number (for a symbolic `in`: for some sizes)."""
    if type(n) is int:
        return out != n * s
    from fractions import Fraction

    return Fraction(s).limit_denominator(1 << 16).denominator != 1


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
        shrunk = [scale_dim(n, s) for n, s in zip(x.shape, down, strict=True)]
        x = _resize(b, x, down, shrunk, True, mode=mode,
                    ctm="asymmetric", nearest_mode="ceil")
        scales = [1.0 if s < 1 else s for s in scales]
    sizes = [scale_dim(n, s) for n, s in zip(x.shape, scales, strict=True)]
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
