"""resize: nearest and (multi)linear resampling with ONNX's coordinate transformation modes."""

from __future__ import annotations

import numpy as np

from ..symbolic import Sym
from ..types import TensorType
from .nn import PURE, _float
from .registry import Cost, OpDef, Sig, at_least, attr, check, io_bytes, register


# resize -------------------------------------------------------------------------------------------------
def _resize_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    sizes = [v if isinstance(v, Sym) else int(v) for v in sig["sizes"]]
    scales = [float(v) for v in sig["scales"]]
    check(len(sizes) == x.rank, f"'sizes' must have {x.rank} values (the input rank), got {len(sizes)}")
    check(all(at_least(v, 1) for v in sizes), f"'sizes' values must be positive, got {sizes}")
    check(len(scales) in (0, x.rank), f"'scales' must be empty or have {x.rank} values, got {len(scales)}")
    f32_max = float(np.finfo(np.float32).max)  # a larger scale is inf in f32 (found by tests/fuzz)
    check(all(0 < v <= f32_max for v in scales), f"'scales' values must be positive and finite, got {scales}")
    if sig["mode"] == "linear":
        _float(x)
    else:
        check(x.dtype != "i1", f"input must be numeric, got {x}")
    return [x.with_shape(tuple(sizes))]


def _resize_verify(sig: Sig) -> None:
    """Given scales, ONNX sizes the output floor(in * scale); an importer that passes both must agree."""
    x, sizes, scales = sig.operands[0], sig["sizes"], sig["scales"]
    for i, (n, out, sc) in enumerate(zip(x.shape, sizes, scales, strict=False)):
        if type(n) is int and type(out) is int:
            want = {int(np.float32(n) * np.float32(sc)), int(n * sc)}
            check(out in want, f"'sizes' value {out} in dim {i} is not floor({n} * scale {sc}) = {min(want)}")


def _source_coords(out_len: int, in_len: int, scale: np.float32 | None, ctm: str) -> np.ndarray:
    """Input coordinate of each output index, in f32 with onnxruntime's operation order so that nearest
    rounding ties fall the same way. `scale` None: the model gave sizes, and x / scale is x * in / out,
    one rounding of the exact quotient, as onnxruntime and onnx's reference compute it (x / f32(8 / 7)
    put 4 * 7 / 8 = 3.5 one ulp below the tie; found by tests/fuzz)."""
    xr, f = np.arange(out_len, dtype=np.float32), np.float32

    def over(v: np.ndarray) -> np.ndarray:
        return v / scale if scale is not None else v * f(in_len) / f(out_len)

    if ctm == "half_pixel":
        return over(xr + f(0.5)) - f(0.5)
    if ctm == "pytorch_half_pixel":
        return over(xr + f(0.5)) - f(0.5) if out_len > 1 else np.zeros(1, np.float32)
    if ctm == "tf_half_pixel_for_nn":
        return over(xr + f(0.5))
    if ctm == "align_corners":
        return xr * f(in_len - 1) / f(out_len - 1) if out_len > 1 else np.zeros(1, np.float32)
    return over(xr)  # asymmetric


def _nearest(c: np.ndarray, mode: str) -> np.ndarray:
    half = c == np.trunc(c) + np.float32(0.5)
    if mode == "round_prefer_floor":
        return np.where(half, np.floor(c), np.rint(c))
    if mode == "round_prefer_ceil":
        return np.where(half, np.ceil(c), np.rint(c))
    return np.floor(c) if mode == "floor" else np.ceil(c)


def lerp_axis(n_out: int, n_in: int, scale: np.float32 | None, ctm: str,
              resized: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One axis of a linear resize as onnxruntime sets up its bilinear tables: each output's low and high
    source index and their weights (f32: |c - hi| for the low one, |c - lo| for the high one, 0.5 and 0.5
    where the edge clamps both to one index). An axis the resize leaves alone (`resized` False) has
    coordinate = index, as onnxruntime takes a scale of 1."""
    c = (_source_coords(n_out, n_in, scale, ctm) if resized else np.arange(n_out, dtype=np.float32))
    c = np.clip(c, np.float32(0), np.float32(n_in - 1))
    lo = np.minimum(np.trunc(c).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    w_lo, w_hi = np.abs(c - hi.astype(np.float32)), np.abs(c - lo.astype(np.float32))
    same = lo == hi
    w_lo[same], w_hi[same] = np.float32(0.5), np.float32(0.5)
    return lo, hi, w_lo.astype(np.float32), w_hi.astype(np.float32)


def bilinear_plane(attrs: dict, shape: tuple) -> bool:
    """A linear resize (`attrs`: its attributes) of `shape`'s last two axes only (an NCHW image's H and W,
    or a matrix): computed as onnxruntime's bilinear kernel does (`_bilinear`), to the bit."""
    sizes = attrs["sizes"]
    return (attrs["mode"] == "linear" and len(shape) >= 2
            and all(type(a) is int and a == b for a, b in zip(shape[:-2], sizes[:-2], strict=False))
            and all(float(s) == 1 for s in list(attrs["scales"])[:-2]))


def _bilinear(sig: Sig, x: np.ndarray) -> np.ndarray:
    """onnxruntime's UpsampleBilinear: y = (wxl*wyl) x11 + (wxh*wyl) x21 + (wxl*wyh) x12 + (wxh*wyh) x22,
    the weight products and the sum in f32 (x in its float type), left to right. QDQ models put a resize
    between a dequantize and a quantize, where the many sums landing on a rounding tie quantize as the
    last bit of this arithmetic says (the separable lerps put a zoo U-Net's int8 run 4 steps from
    onnxruntime's)."""
    sizes, scales = sig["sizes"], [float(v) for v in sig["scales"]]
    tables = []
    for ax in (x.ndim - 2, x.ndim - 1):
        n_in, n_out = x.shape[ax], int(sizes[ax])
        scale = np.float32(scales[ax]) if scales else None
        resized = not (n_in == n_out and (scale is None or scale == 1))
        tables.append(lerp_axis(n_out, n_in, scale, sig["coordinate_transformation_mode"], resized))
    (ylo, yhi, wyl, wyh), (xlo, xhi, wxl, wxh) = tables
    rows_lo, rows_hi = x[..., ylo, :], x[..., yhi, :]
    x11, x21, x12, x22 = rows_lo[..., xlo], rows_lo[..., xhi], rows_hi[..., xlo], rows_hi[..., xhi]
    w = [np.multiply.outer(a, b).astype(np.float32).astype(x.dtype) for a, b in
         ((wyl, wxl), (wyl, wxh), (wyh, wxl), (wyh, wxh))]
    return ((w[0] * x11 + w[1] * x21) + w[2] * x12) + w[3] * x22


def _resize_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    """Separable: one gather (nearest) or one two-tap lerp (linear) per resized axis; onnxruntime's
    bilinear form where only the last two axes change (`_bilinear`)."""
    sizes, scales, linear = sig["sizes"], sig["scales"], sig["mode"] == "linear"
    want = sig.results[0].np_dtype if sig.results else x.dtype
    y = x.astype(np.float32) if linear and x.dtype.itemsize < 4 else x
    if bilinear_plane(sig.attrs, x.shape):
        return np.ascontiguousarray(_bilinear(sig, y)).astype(want, copy=False)
    for ax, (n_in, n_out) in enumerate(zip(x.shape, sizes, strict=True)):
        scale = np.float32(scales[ax]) if scales else None  # None: out / in, exactly
        if n_in == n_out and (scale is None or scale == 1):
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
    attrs={"sizes": attr("dims"), "scales": attr("floats", []),
           "mode": attr("str", "nearest", allowed=("nearest", "linear")),
           "coordinate_transformation_mode": attr("str", "half_pixel", allowed=(
               "half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn")),
           "nearest_mode": attr("str", "round_prefer_floor", allowed=(
               "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"))},
    traits=PURE, cost=_resize_cost,
    doc="ONNX Resize to the static `sizes`: nearest or (multi)linear over the resized dims. `scales`, when "
        "given, replaces out/in in the coordinate transform, as ONNX does when a model gives scales.",
))
