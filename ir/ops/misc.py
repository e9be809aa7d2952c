"""Ops no other family holds: inverse and hyperbolic trig, NaN tests, integer bitwise ops, determinants,
the sampling ops ONNX defines outright (grid_sample, roi_align, col2im, max_unpool) and the recurrence of
linear attention.

Everything here is something the ONNX frontend cannot compose from other ops without losing precision
(sinh near 0, asin) or meaning (bits of an integer, a data-dependent gather with interpolation). The
references are vectorized over elements; roi_align loops over regions only, since its sample grid
depends on each region's size, and linear_attention over time steps.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from ..types import NATIVE_INT_TYPES, TensorType, widen
from .elementwise import BINARY_TRAITS, UNARY_TRAITS, unary
from .nn import _widened
from .registry import (
    Cost,
    OpDef,
    Sig,
    attr,
    broadcast_shapes,
    check,
    elementwise_cost,
    io_bytes,
    register,
)

PURE = frozenset({"pure"})

# inverse and hyperbolic trig ------------------------------------------------------------------------------
unary("tan", lambda s, x: np.tan(x), flops=8, doc="tangent")
unary("asin", lambda s, x: np.arcsin(x), flops=8, doc="inverse sine (NaN outside [-1, 1])")
unary("acos", lambda s, x: np.arccos(x), flops=8, doc="inverse cosine (NaN outside [-1, 1])")
unary("atan", lambda s, x: np.arctan(x), flops=8, doc="inverse tangent")
unary("sinh", lambda s, x: np.sinh(x), flops=8, doc="hyperbolic sine")
unary("cosh", lambda s, x: np.cosh(x), flops=8, doc="hyperbolic cosine")
unary("asinh", lambda s, x: np.arcsinh(x), flops=8, doc="inverse hyperbolic sine")
unary("acosh", lambda s, x: np.arccosh(x), flops=8, doc="inverse hyperbolic cosine (NaN below 1)")
unary("atanh", lambda s, x: np.arctanh(x), flops=8, doc="inverse hyperbolic tangent (NaN outside [-1, 1])")


def _is_nan_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    check(x.is_float, f"operand must be a float tensor, got {x}")
    return [x.with_dtype("i1")]


register(OpDef("is_nan", ("x",), infer=_is_nan_infer,
               reference=lambda s, x: np.isnan(widen(x)),
               traits=UNARY_TRAITS, cost=elementwise_cost(1), doc="x != x: true where x is NaN (result i1)"))


# bitwise ------------------------------------------------------------------------------------------------
def _int_operand(t: TensorType) -> None:
    check(t.dtype in NATIVE_INT_TYPES,
          f"operand must be an integer tensor of 8 bits or more (i8 to i64, ui8 to ui64), got {t}")


def _bitwise_infer(sig: Sig) -> list[TensorType]:
    a, b = sig.operands
    _int_operand(a)
    check(a.dtype == b.dtype, f"operand element types differ: {a.dtype} vs {b.dtype}")
    return [TensorType(broadcast_shapes(a.shape, b.shape), a.dtype)]


def _bitwise(name: str, fn, doc: str) -> None:
    register(OpDef(name, ("lhs", "rhs"), infer=_bitwise_infer, reference=lambda s, a, b: fn(a, b),
                   traits=BINARY_TRAITS | {"commutative"}, cost=elementwise_cost(1), doc=doc))


_bitwise("bitwise_and", np.bitwise_and, "a & b on integers")
_bitwise("bitwise_or", np.bitwise_or, "a | b on integers")
_bitwise("bitwise_xor", np.bitwise_xor, "a ^ b on integers")


def _bitwise_not_infer(sig: Sig) -> list[TensorType]:
    _int_operand(sig.operands[0])
    return [sig.operands[0]]


register(OpDef("bitwise_not", ("x",), infer=_bitwise_not_infer, reference=lambda s, x: np.invert(x),
               traits=UNARY_TRAITS, cost=elementwise_cost(1), doc="~x on integers"))


def _bit_shift_ref(sig: Sig, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ONNX BitShift-28: a shift by a negative amount or by the bit width or more gives 0 (a right shift
    of a negative signed value gives -1); signed left shifts wrap as the unsigned bits do."""
    a, b = np.broadcast_arrays(a, b)
    bits = a.dtype.itemsize * 8
    out_of_range = (b < 0) | (b >= bits)
    n = np.where(out_of_range, 0, b).astype(np.int64)
    if sig["direction"] == "right":
        fill = np.where(a < 0, -1, 0).astype(a.dtype) if a.dtype.kind == "i" else np.zeros_like(a)
        return np.where(out_of_range, fill, np.right_shift(a, n.astype(a.dtype)))
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    shifted = np.left_shift(a.view(unsigned), n.astype(unsigned)).view(a.dtype)
    return np.where(out_of_range, np.zeros((), a.dtype), shifted)


register(OpDef("bit_shift", ("x", "amount"), infer=_bitwise_infer, reference=_bit_shift_ref,
               attrs={"direction": attr("str", allowed=("left", "right"))},
               traits=BINARY_TRAITS, cost=elementwise_cost(1),
               doc="x << amount or x >> amount (arithmetic for signed types); shifts by a negative amount or "
                   "by the bit width or more give 0 (-1 for a right shift of a negative value)."))


# det ----------------------------------------------------------------------------------------------------
def _det_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    check(x.is_float, f"operand must be a float tensor, got {x}")
    check(x.rank >= 2, f"operand must have rank >= 2, got {x}")
    m, n = x.shape[-2:]
    check(m is None or n is None or m == n, f"matrices must be square, got {m}x{n}")
    return [x.with_shape(x.shape[:-2])]


def _det_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    want = sig.results[0].np_dtype if sig.results else x.dtype
    wide = x.astype(np.float32) if x.dtype.name in ("float16", "bfloat16") else x
    return np.asarray(np.linalg.det(wide)).astype(want)


register(OpDef("det", ("x",), infer=_det_infer, reference=_det_ref,
               traits=PURE, cost=lambda s: Cost(s.operands[0].numel * (s.operands[0].shape[-1] or 1),
                                                 *io_bytes(s)),
               doc="Determinant of each square matrix in the last two dims (LU with partial pivoting)."))


# grid_sample --------------------------------------------------------------------------------------------
GRID_MODES = ("linear", "nearest", "cubic")
GRID_PADDING = ("zeros", "border", "reflection")


def _grid_sample_infer(sig: Sig) -> list[TensorType]:
    x, grid = sig.operands
    check(x.is_float, f"input must be a float tensor, got {x}")
    check(grid.dtype == x.dtype, f"grid element type {grid.dtype} differs from the input's {x.dtype}")
    k = x.rank - 2
    check(k >= 1, f"input must have rank >= 3 (N, C, spatial...), got {x}")
    check(grid.rank == k + 2 and grid.shape[-1] in (k, None),
          f"grid must have shape (N, out..., {k}) for a rank-{x.rank} input, got {grid}")
    check(x.shape[0] is None or grid.shape[0] is None or x.shape[0] == grid.shape[0],
          f"grid batch {grid.shape[0]} differs from the input's {x.shape[0]}")
    return [x.with_shape((x.shape[0], x.shape[1], *grid.shape[1:-1]))]


def _reflect(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Mirror coordinates into [lo, hi] by repeated reflection at the borders (PyTorch's GridSampler)."""
    span = hi - lo
    if span <= 0:
        return np.full_like(v, lo)
    below, above = lo - v, v - hi
    d = np.where(v < lo, below, above)
    n = np.trunc(d / span)
    r = d - n * span
    even = n % 2 == 0
    flipped_low = np.where(even, lo + r, hi - r)
    flipped_high = np.where(even, hi - r, lo + r)
    return np.where(v < lo, flipped_low, np.where(v > hi, flipped_high, v))


def _cubic_coeffs(t: np.ndarray) -> list[np.ndarray]:
    """Keys cubic convolution weights (a = -0.75) of the taps at -1, 0, 1, 2 for fractions t."""
    a = -0.75

    def near(x: np.ndarray) -> np.ndarray:
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: np.ndarray) -> np.ndarray:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _grid_sample_ref(sig: Sig, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    mode, padding, align = sig["mode"], sig["padding_mode"], sig["align_corners"]
    want = sig.results[0].np_dtype if sig.results else x.dtype
    work = np.float64 if x.dtype == np.float64 else np.float32
    x, grid = x.astype(work), grid.astype(work)
    n, c, *dims = x.shape
    k = len(dims)
    out_shape = grid.shape[1:-1]
    flat = x.reshape(n, c, -1)
    coords, bounds = [], []
    for i, size in enumerate(dims):  # grid's last axis lists coordinates innermost dim first
        g = grid[..., k - 1 - i]
        v = (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if mode == "nearest":
            v = np.rint(v)
        outside = (v < lo) | (v > hi)
        if mode != "cubic":  # cubic pads each tap instead of the coordinate, as PyTorch and onnxruntime do
            if padding == "border":
                v = np.where(outside, np.clip(v, 0, size - 1), v)
            elif padding == "reflection":
                v = np.where(outside, _reflect(v, lo, hi), v)
        coords.append(v.astype(work))
        bounds.append((lo, hi))

    def fetch(idx: list[np.ndarray]) -> np.ndarray:
        """x at integer positions idx (each (N, out...)), padding applied per dim: -> (N, C, out...)."""
        valid = np.ones(idx[0].shape, bool)
        lin = np.zeros(idx[0].shape, np.int64)
        for i, (j, size) in enumerate(zip(idx, dims, strict=True)):
            if padding == "zeros":
                valid &= (j >= 0) & (j < size)
                j = np.clip(j, 0, size - 1)
            elif padding == "border":
                j = np.clip(j, 0, size - 1)
            else:
                j = np.clip(_reflect(j.astype(work), *bounds[i]).astype(np.int64), 0, size - 1)
            lin = lin * size + j
        vals = flat[np.arange(n)[:, None], :, lin.reshape(n, -1)]  # (N, P, C)
        vals = np.where(valid.reshape(n, -1, 1), vals, 0).transpose(0, 2, 1)
        return vals.reshape(n, c, *out_shape)

    if mode == "nearest":
        return fetch([v.astype(np.int64) for v in coords]).astype(want)
    base = [np.floor(v).astype(np.int64) for v in coords]
    frac = [(v - np.floor(v)).astype(work) for v in coords]
    offsets: tuple[int, ...] = (0, 1) if mode == "linear" else (-1, 0, 1, 2)
    weights = [[1 - f, f] if mode == "linear" else _cubic_coeffs(f) for f in frac]
    y = np.zeros((n, c, *out_shape), work)
    for taps in itertools.product(range(len(offsets)), repeat=k):
        w = np.ones(coords[0].shape, work)
        for i, t in enumerate(taps):
            w = w * weights[i][t]
        y += w[:, None] * fetch([b + offsets[t] for b, t in zip(base, taps, strict=True)])
    return y.astype(want)


def _grid_sample_cost(sig: Sig) -> Cost:
    k = sig.operands[0].rank - 2
    taps = {"nearest": 1, "linear": 2 ** k, "cubic": 4 ** k}[sig["mode"]]
    return Cost(2 * taps * sig.results[0].numel, *io_bytes(sig))


register(OpDef(
    "grid_sample", ("x", "grid"), infer=_grid_sample_infer, reference=_grid_sample_ref,
    attrs={"mode": attr("str", "linear", allowed=GRID_MODES),
           "padding_mode": attr("str", "zeros", allowed=GRID_PADDING),
           "align_corners": attr("bool", False)},
    traits=PURE, cost=_grid_sample_cost,
    doc="ONNX GridSample on (N, C, D1..Dk) at the normalized [-1, 1] positions of grid (N, O1..Ok, k), "
        "whose last axis lists coordinates innermost dim first; nearest (ties to even), (multi)linear or "
        "cubic (a = -0.75), with zeros, border or reflection padding.",
))


# col2im -------------------------------------------------------------------------------------------------
def _col2im_geometry(sig: Sig) -> tuple[list[int], list[int], list[int], list[int], list[int], list[int]]:
    image, block = [int(v) for v in sig["image_shape"]], [int(v) for v in sig["block_shape"]]
    k = len(image)
    check(k >= 1 and len(block) == k, f"image_shape {image} and block_shape {block} need one length >= 1")
    strides = [int(v) for v in sig["strides"]] or [1] * k
    dilations = [int(v) for v in sig["dilations"]] or [1] * k
    pads = [int(v) for v in sig["pads"]] or [0] * (2 * k)
    check(len(strides) == k and len(dilations) == k and len(pads) == 2 * k,
          f"strides, dilations and pads need {k}, {k} and {2 * k} values")
    blocks = [(image[i] + pads[i] + pads[i + k] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1
              for i in range(k)]
    check(all(b >= 1 for b in blocks), f"no sliding block fits: {blocks} blocks per dim")
    return image, block, strides, dilations, pads, blocks


def _col2im_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    check(x.rank == 3, f"input must have rank 3 (N, C * prod(block_shape), L), got {x}")
    image, block, _, _, _, blocks = _col2im_geometry(sig)
    kk = math.prod(block)
    c, length = x.shape[1], x.shape[2]
    check(c is None or c % kk == 0, f"input dim 1 ({c}) is not divisible by prod(block_shape) = {kk}")
    check(length is None or length == math.prod(blocks),
          f"input dim 2 ({length}) must be the number of sliding blocks {math.prod(blocks)}")
    return [x.with_shape((x.shape[0], None if c is None else c // kk, *image))]


def _col2im_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    image, block, strides, dilations, pads, blocks = _col2im_geometry(sig)
    k = len(image)
    n, ckk, _ = x.shape
    c = ckk // math.prod(block)
    cols = x.reshape(n, c, *block, *blocks)
    padded = np.zeros((n, c, *(image[i] + pads[i] + pads[i + k] for i in range(k))), x.dtype)
    every: list[Any] = [slice(None), slice(None)]
    for tap in itertools.product(*(range(b) for b in block)):
        where = [slice(t * d, t * d + s * (nb - 1) + 1, s)
                 for t, d, s, nb in zip(tap, dilations, strides, blocks, strict=True)]
        padded[tuple(every + where)] += cols[tuple(every + list(tap))]
    return padded[tuple(every + [slice(pads[i], pads[i] + image[i]) for i in range(k)])]


register(OpDef(
    "col2im", ("x",), infer=_col2im_infer, reference=_widened(_col2im_ref),
    attrs={"image_shape": attr("ints"), "block_shape": attr("ints"), "strides": attr("ints", []),
           "dilations": attr("ints", []), "pads": attr("ints", [])},
    traits=PURE, cost=lambda s: Cost(s.operands[0].numel, *io_bytes(s)),
    doc="ONNX Col2Im: sums the sliding blocks of (N, C * prod(block_shape), L) back into an image "
        "(N, C, *image_shape); empty strides/dilations mean 1, empty pads 0 (all begins, then all ends).",
))


# max_unpool ---------------------------------------------------------------------------------------------
def _max_unpool_infer(sig: Sig) -> list[TensorType]:
    x, idx = sig.operands
    check(idx.dtype == "i64", f"indices must be i64, got {idx}")
    check(idx.shape == x.shape, f"indices shape {idx.shape} differs from the input's {x.shape}")
    shape = [int(v) for v in sig["shape"]]
    check(len(shape) == x.rank, f"shape {shape} must have the input's rank {x.rank}")
    return [x.with_shape(tuple(shape))]


def _max_unpool_ref(sig: Sig, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Indices are flat positions in the unpooled tensor (N, C, *pooled_shape), as MaxPool gives them;
    that tensor is then placed at the origin of the (possibly larger) result."""
    inner = [int(v) for v in sig["pooled_shape"]] or [int(v) for v in sig["shape"]]
    full = (*x.shape[:2], *inner[2:]) if len(inner) == x.ndim else tuple(inner)
    y = np.zeros(math.prod(full), x.dtype)
    check(idx.size == 0 or (0 <= idx.min() and idx.max() < y.size), "an index is out of range")
    y[idx.reshape(-1)] = x.reshape(-1)
    out = np.zeros([int(v) for v in sig["shape"]], x.dtype)
    out[tuple(slice(0, d) for d in full)] = y.reshape(full)
    return out


register(OpDef(
    "max_unpool", ("x", "indices"), infer=_max_unpool_infer, reference=_max_unpool_ref,
    attrs={"shape": attr("ints"), "pooled_shape": attr("ints", [])},
    traits=PURE, cost=lambda s: Cost(0, *io_bytes(s)),
    doc="ONNX MaxUnpool: zeros of `pooled_shape` (default: `shape`) with x scattered to the flat `indices`, "
        "placed at the origin of a zero tensor of `shape`.",
))


# roi_align ----------------------------------------------------------------------------------------------
def _roi_align_infer(sig: Sig) -> list[TensorType]:
    x, rois, batch = sig.operands
    check(x.is_float and x.rank == 4, f"input must be a float (N, C, H, W) tensor, got {x}")
    check(rois.dtype == x.dtype and rois.rank == 2 and rois.shape[1] in (4, None),
          f"rois must be (R, 4) of the input's element type, got {rois}")
    check(batch.dtype in ("i32", "i64") and batch.rank == 1,
          f"batch_indices must be an integer vector, got {batch}")
    check(rois.shape[0] is None or batch.shape[0] is None or rois.shape[0] == batch.shape[0],
          f"{rois.shape[0]} rois but {batch.shape[0]} batch indices")
    return [x.with_shape((rois.shape[0], x.shape[1], sig["output_height"], sig["output_width"]))]


def _roi_align_ref(sig: Sig, x: np.ndarray, rois: np.ndarray, batch: np.ndarray) -> np.ndarray:
    """Per region: a sampling grid of roi_bin_grid points per bin, each bilinearly interpolated (weights
    zero outside [-1, size]), then averaged or (weighted corners) maxed per bin, as onnxruntime does."""
    ph, pw = sig["output_height"], sig["output_width"]
    ratio, scale = sig["sampling_ratio"], sig["spatial_scale"]
    half = sig["coordinate_transformation_mode"] == "half_pixel"
    n, c, h, w = x.shape
    y = np.zeros((rois.shape[0], c, ph, pw), x.dtype)
    flat = x.reshape(n, c, h * w)
    for r in range(rois.shape[0]):
        off = 0.5 if half else 0.0
        x0, y0, x1, y1 = (float(v) * scale - off for v in rois[r])
        rw, rh = x1 - x0, y1 - y0
        if not half:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / ph, rw / pw
        gh = ratio if ratio > 0 else int(math.ceil(rh / ph))
        gw = ratio if ratio > 0 else int(math.ceil(rw / pw))
        if gh <= 0 or gw <= 0:
            continue
        ys = y0 + np.arange(ph)[:, None] * bh + (np.arange(gh)[None, :] + 0.5) * bh / gh  # (ph, gh)
        xs = x0 + np.arange(pw)[:, None] * bw + (np.arange(gw)[None, :] + 0.5) * bw / gw  # (pw, gw)
        yy, xx = ys[:, :, None, None], xs[None, None, :, :]  # (ph, gh, 1, 1), (1, 1, pw, gw)
        yy, xx = np.broadcast_arrays(yy, xx)
        outside = (yy < -1.0) | (yy > h) | (xx < -1.0) | (xx > w)
        yc, xc = np.maximum(yy, 0), np.maximum(xx, 0)
        ylo, xlo = yc.astype(np.int64), xc.astype(np.int64)
        ytop, xtop = ylo >= h - 1, xlo >= w - 1
        ylo, xlo = np.where(ytop, h - 1, ylo), np.where(xtop, w - 1, xlo)
        yhi, xhi = np.where(ytop, h - 1, ylo + 1), np.where(xtop, w - 1, xlo + 1)
        ly, lx = np.where(ytop, 0, yc - ylo), np.where(xtop, 0, xc - xlo)
        hy, hx = 1 - ly, 1 - lx
        corners = [(ylo, xlo, hy * hx), (ylo, xhi, hy * lx), (yhi, xlo, ly * hx), (yhi, xhi, ly * lx)]
        img = flat[int(batch[r])]
        # each (C, ph, gh, pw, gw)
        vals = [np.where(outside, 0, wt) * img[:, (yi * w + xi)] for yi, xi, wt in corners]
        if sig["mode"] == "avg":
            y[r] = (sum(vals) / max(gh * gw, 1)).sum(axis=(2, 4))
        else:
            y[r] = np.max(np.maximum.reduce(vals), axis=(2, 4))
    return y


register(OpDef(
    "roi_align", ("x", "rois", "batch_indices"), infer=_roi_align_infer,
    reference=_widened(_roi_align_ref),
    attrs={"output_height": attr("int", 1), "output_width": attr("int", 1), "sampling_ratio": attr("int", 0),
           "spatial_scale": attr("float", 1.0), "mode": attr("str", "avg", allowed=("avg", "max")),
           "coordinate_transformation_mode": attr("str", "half_pixel",
                                                  allowed=("half_pixel", "output_half_pixel"))},
    traits=PURE, cost=lambda s: Cost(16 * s.results[0].numel, *io_bytes(s)),
    doc="ONNX RoiAlign: (R, C, output_height, output_width) bins of x over the regions rois (R, 4: x1, y1, "
        "x2, y2, scaled by spatial_scale) of batch_indices' images, sampled bilinearly, averaged or maxed.",
))


# linear_attention ---------------------------------------------------------------------------------------
LINEAR_RULES = ("linear", "gated", "delta", "gated_delta")


def _linear_attention_infer(sig: Sig) -> list[TensorType]:
    q, k, v, state, decay, beta = sig.operands
    for t, what in ((q, "q"), (k, "k"), (v, "v"), (state, "state"), (decay, "decay"), (beta, "beta")):
        check(t.dtype == "f32" and t.rank == 4, f"{what} must be a rank-4 f32 tensor, got {t}")
    b, hq, steps, dk = q.shape
    hkv, dv = k.shape[1], v.shape[3]
    check(k.shape == (b, hkv, steps, dk) and v.shape[:3] == (b, hkv, steps),
          f"k {k} and v {v} do not fit q {q} as (B, H_kv, T, D)")
    check(hq is None or hkv is None or hq % hkv == 0, f"{hq} query heads are no multiple of {hkv} kv heads")
    check(state.shape == (b, hkv, dk, dv), f"state must be (B, H_kv, d_k, d_v) = ({b}, {hkv}, {dk}, {dv}), "
                                           f"got {state}")
    return [q.with_shape((b, hq, steps, dv)), state]


def _linear_attention_ref(sig: Sig, q: np.ndarray, k: np.ndarray, v: np.ndarray, state: np.ndarray,
                          decay: np.ndarray, beta: np.ndarray) -> list[np.ndarray]:
    rule = sig["update_rule"]
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    b, hq, steps, _ = q.shape
    hkv, dv = k.shape[1], v.shape[3]
    group = hq // hkv
    s = state.astype(np.float32).copy()
    out = np.zeros((b, hq, steps, dv), np.float32)
    for i in range(steps):
        k_t, v_t = k[:, :, i], v[:, :, i]
        if gated:
            s = s * np.exp(decay[:, :, i])[..., None]
        if delta:
            v_t = beta[:, :, i] * (v_t - np.einsum("bhdm,bhd->bhm", s, k_t))
        s = s + k_t[..., :, None] * v_t[..., None, :]
        read = s if group == 1 else np.repeat(s, group, axis=1)
        out[:, :, i] = np.float32(sig["scale"]) * np.einsum("bhd,bhdm->bhm", q[:, :, i], read)
    return [out, s]


def _linear_attention_cost(sig: Sig) -> Cost:
    """Per step: decay, delta read, outer-product write (about 4 FLOPs per state element) and the read-out
    (2 per query element and d_v)."""
    r, w = io_bytes(sig)
    q, state = sig.operands[0], sig.operands[3]
    steps = q.shape[2] or 0
    return Cost(4 * steps * state.numel + 2 * q.numel * (state.shape[3] or 1), r, w)


register(OpDef(
    "linear_attention", ("q", "k", "v", "state", "decay", "beta"), infer=_linear_attention_infer,
    reference=_linear_attention_ref, results=2,
    attrs={"update_rule": attr("str", "gated_delta", allowed=LINEAR_RULES), "scale": attr("float")},
    traits=PURE, cost=_linear_attention_cost,
    doc="ONNX LinearAttention's recurrence in f32 on (B, H, T, D) operands: per step the (B, H_kv, d_k, d_v) "
        "state decays by exp(decay) (gated rules), v is replaced by beta * (v - state^T k) (delta rules), "
        "state += k v^T, and the output is scale * q^T state (kv heads shared by groups of query heads). "
        "decay (..., 1 or d_k) and beta (..., 1) are ignored by rules without them.",
))
