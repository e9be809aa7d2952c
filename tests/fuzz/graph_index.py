"""Indexing and resampling generators for graphs.py: Gather and GatherElements with random in-range
indices, Slice with negative steps, Resize in all its modes, and Pad with negative pads and typed data.

- gather: indices (negative ones too) as an int64/int32 initializer, as an int64 graph input fed in-range
  values, or computed (an int value whose magnitude bound fits the axis: an ArgMax result, a small int
  input); GatherElements with indices of the data's rank;
- slice_neg: Slice with steps -1..-3 (and now and then a positive one), starts and ends anywhere from far
  below to far above the axis (int64 extremes included), clamped the way ONNX says, on float, int and bool
  data;
- resize: nearest (every nearest_mode), linear and cubic (cubic_coeff_a, exclude_outside), every
  coordinate_transformation_mode (half_pixel_symmetric from opset 19, tf_crop_and_resize with a roi and
  extrapolation_value), scales or sizes, and from opset 18 axes, antialias and keep_aspect_ratio_policy.
  onnxruntime departs from the spec (and from onnx's reference, which tessel follows) in corners of
  Resize, which are not generated: fractional in * scale in the modes that use the output length, scales
  not exact in float32, a scale that keeps an axis' size, a roi on an unresized axis, antialias outside
  half_pixel, negative axes with keep_aspect_ratio_policy (docs/testing.md lists them);
- pad_modes: constant / reflect / edge / wrap (opset 19+) with negative pads (crops) on either side, on
  float, int and (opset 13+) bool data.
"""

from __future__ import annotations

import math

import numpy as np

from .graph_ops import Gen
from .graphs import BOOL, F32, I32, I64, MAX_ELEMENTS, NP_DTYPE, GraphBuilder, Val, infer_shape

ANY = (F32, I32, I64, BOOL)
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


def _data(b: GraphBuilder, pred=lambda v: v.rank >= 1) -> Val | None:  # noqa: ANN001
    """An operand of any element type (float most often)."""
    return b.pick(pred) if b.chance(60) else b.pick(pred, dtypes=ANY)


# Gather ---------------------------------------------------------------------------------------------------
def gather(b: GraphBuilder) -> Val | None:
    x = _data(b)
    if x is None:
        return None
    axis = b.integer(-x.rank, x.rank - 1)
    a = axis % x.rank
    d = x.shape[a]
    if b.chance(25):
        return _gather_elements(b, x, axis)
    kind = b.choice(["const", "const", "input", "computed"])
    computed = b.pick(lambda v: v.scale <= d - 1 and v.numel <= 64, dtypes=(I32, I64))
    if kind == "computed" and computed is not None:
        idx = computed
    else:
        shape = b.dims(b.choice([0, 1, 1, 2]), 16)
        values = b.rng.integers(-d, d, size=shape)
        dtype = I64 if kind == "input" or b.chance(70) else I32
        if kind == "input" and b.can_add_input():
            idx = b.add_input(shape, I64, values)
        else:
            idx = b.constant(values.astype(NP_DTYPE[dtype]))
    shape = (*x.shape[:a], *idx.shape, *x.shape[a + 1:])
    if math.prod(shape) > MAX_ELEMENTS:
        return None
    return b.node("Gather", [x.name, idx.name], shape, x.scale, dtype=x.dtype, exact=x.exact,
                  axis=axis if axis != 0 or b.chance(50) else None)


def _gather_elements(b: GraphBuilder, x: Val, axis: int) -> Val | None:
    """GatherElements: indices of x's rank, no larger than x except along the axis."""
    a = axis % x.rank
    shape = tuple(b.integer(1, 2 * d) if i == a else b.integer(1, d) for i, d in enumerate(x.shape))
    if math.prod(shape) > MAX_ELEMENTS:
        return None
    d = x.shape[a]
    idx = b.constant(b.rng.integers(-d, d, size=shape).astype(np.int64))
    return b.node("GatherElements", [x.name, idx.name], shape, x.scale, dtype=x.dtype, exact=x.exact,
                  axis=axis)


# Slice ----------------------------------------------------------------------------------------------------
def onnx_slice(start: int, end: int, step: int, d: int) -> range:
    """The indices ONNX's Slice takes on an axis of size d (negative starts/ends count from the end, then
    clamp: to [0, d] with a positive step, starts to [0, d-1] and ends to [-1, d-1] with a negative one)."""
    start += d if start < 0 else 0
    end += d if end < 0 else 0
    if step > 0:
        start, end = min(max(start, 0), d), min(max(end, 0), d)
    else:
        start, end = min(max(start, 0), d - 1), min(max(end, -1), d - 1)
    return range(start, end, step)


def slice_neg(b: GraphBuilder) -> Val | None:
    x = _data(b, lambda v: v.rank >= 1 and v.numel > 1)
    if x is None:
        return None
    axes = b.subset(range(x.rank), min_size=1)
    starts, ends, steps, shape = [], [], [], list(x.shape)
    for a in axes:
        d = x.shape[a]
        for _ in range(10):
            step = b.choice([-1, -1, -2, -3, 1, 2])
            s = b.choice([b.integer(-d - 3, d + 3), b.integer(-d - 3, d + 3), INT64_MAX, INT64_MIN, -d - 9])
            e = b.choice([b.integer(-d - 3, d + 3), INT64_MIN, INT64_MAX, -(2**31), 2**31 - 1, d + 7])
            if len(onnx_slice(s, e, step, d)) > 0:
                break
        else:
            s, e, step = -1, INT64_MIN, -1
        starts.append(s)
        ends.append(e)
        steps.append(step)
        shape[a] = len(onnx_slice(s, e, step, d))
    given = [a - x.rank if b.chance(30) else a for a in axes]
    names = [x.name, b.ints(starts), b.ints(ends), b.ints(given), b.ints(steps)]
    return b.node("Slice", names, shape, x.scale, dtype=x.dtype, exact=x.exact)


# Resize ---------------------------------------------------------------------------------------------------
CTMS = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn",
        "half_pixel_symmetric", "tf_crop_and_resize"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
SCALES = [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0]
"""Exact in float32: with a scale like 0.6 (not exact) a source coordinate lands within an ulp of a
rounding tie, and onnxruntime (which rounds with floor(x + 0.5)) and onnx's reference part ways."""
SIZED_BY_WIDTH = ("align_corners", "pytorch_half_pixel", "tf_crop_and_resize", "half_pixel_symmetric")
"""Modes whose formulas use the output length: onnx's reference (and tessel) take it as the unrounded
in * scale, onnxruntime as the output's size, so scales with a fractional in * scale are not generated."""


def resize(b: GraphBuilder) -> Val | None:
    """Resize with the configurations onnxruntime implements as the spec says (see the module docstring
    and docs/testing.md for what is left out)."""
    mode = b.choice(["nearest", "nearest", "linear", "cubic"])
    if mode == "nearest":
        x = b.pick(lambda v: 1 <= v.rank <= 4 and v.numel <= 1024)
    else:  # onnxruntime interpolates 2-D tensors, or the last two axes of 4-D ones
        x = b.pick(lambda v: v.rank in (2, 4) and v.numel <= 1024)
    if x is None:
        return None
    r = x.rank
    resizable = list(range(r)) if mode == "nearest" or r == 2 else [2, 3]
    ctm = b.choice([c for c in CTMS if b.opset >= 19 or c != "half_pixel_symmetric"])
    attrs: dict = {"mode": mode if mode != "nearest" or b.chance(50) else None,
                   "coordinate_transformation_mode": ctm if ctm != "half_pixel" or b.chance(50) else None}
    if mode == "nearest":
        attrs["nearest_mode"] = b.choice([None, *NEAREST_MODES])
    if mode == "cubic":
        attrs["cubic_coeff_a"] = b.choice([None, -0.5, -0.75])
        attrs["exclude_outside"] = b.choice([None, 0, 1])
    chosen = [a for a in resizable if b.chance(70)] or [resizable[-1]]
    axes = list(range(r))
    policy = "stretch"
    use_sizes = b.chance(40)
    if use_sizes and b.opset >= 18 and b.chance(30):
        policy = b.choice(["stretch", "not_larger", "not_smaller"])
        attrs["keep_aspect_ratio_policy"] = policy
    if b.opset >= 18 and (b.chance(30) or policy != "stretch"):  # the policy scales all listed axes alike
        axes = chosen
        negative = policy == "stretch" and b.chance(30)  # onnxruntime's policies ignore negative axes
        attrs["axes"] = [a - r if negative else a for a in axes]
    if use_sizes:
        sizes = [b.integer(1, min(2 * x.shape[a] + 1, 12)) if a in chosen else x.shape[a] for a in axes]
        changed = [a for a, n in zip(axes, sizes, strict=True) if n != x.shape[a]]
    else:
        scales = [b.choice(SCALES) if a in chosen else 1.0 for a in axes]
        outs = [x.shape[a] * s for a, s in zip(axes, scales, strict=True)]
        if any(int(o) < 1 for o in outs):
            return None
        if any(int(o) == x.shape[a] and s != 1 for a, o, s in zip(axes, outs, scales, strict=True)):
            return None  # onnxruntime copies an axis whose size stays, whatever its scale
        if ctm in SIZED_BY_WIDTH and any(o != int(o) for o in outs):
            return None
        changed = [a for a, s in zip(axes, scales, strict=True) if s != 1]
    if b.opset >= 18 and mode != "nearest" and ctm == "half_pixel" and b.chance(30):
        attrs["antialias"] = 1  # other modes: onnxruntime's antialiased taps differ from onnx's reference
    roi = None
    if ctm == "tf_crop_and_resize":  # a box on resized axes only: onnxruntime skips an axis of scale 1
        lo = [round(float(b.rng.uniform(0, 0.4)), 2) if a in changed else 0.0 for a in axes]
        hi = [round(float(b.rng.uniform(0.6, 1.2)), 2) if a in changed else 1.0 for a in axes]
        roi = np.array(lo + hi, np.float32)
        attrs["extrapolation_value"] = b.choice([None, 0.5, -1.0])
    inputs: list[tuple[str, tuple[int, ...], np.ndarray | None]] = [(x.name, x.shape, None)]
    if b.opset < 13 or roi is not None:  # opset 11 takes roi and scales always (empty when unused)
        arr = roi if roi is not None else np.zeros(0, np.float32)
        inputs.append(("roi", arr.shape, arr))
    else:
        inputs.append(("", (), None))
    if b.opset < 13 or not use_sizes:
        arr = np.zeros(0, np.float32) if use_sizes else np.array(scales, np.float32)
        inputs.append(("scales", arr.shape, arr))
    else:
        inputs.append(("", (), None))
    if use_sizes:
        arr = np.array(sizes, np.int64)
        inputs.append(("sizes", arr.shape, arr))
    attrs = {k: v for k, v in attrs.items() if v is not None}
    shape = infer_shape("Resize", inputs, b.opset, **attrs)
    if not shape or min(shape) < 1 or math.prod(shape) > MAX_ELEMENTS:
        return None
    names = [x.name]
    for name, _, value in inputs[1:]:
        if not name or value is None:
            names.append("")
        elif name == "sizes":
            names.append(b.constant_int(value))
        else:
            names.append(b.constant(value).name)
    scale = x.scale * (1.5 if mode == "cubic" else 1.0) + abs(attrs.get("extrapolation_value", 0.0))
    return b.node("Resize", names, shape, scale, exact=x.exact and mode == "nearest", **attrs)


# Pad ------------------------------------------------------------------------------------------------------
def pad_modes(b: GraphBuilder) -> Val | None:
    dtypes = (F32, I32, I64) + ((BOOL,) if b.opset >= 13 else ())
    x = b.pick(lambda v: v.rank >= 1) if b.chance(50) else b.pick(lambda v: v.rank >= 1, dtypes=dtypes)
    if x is None:
        return None
    modes = ["constant", "reflect", "edge"] + (["wrap"] if b.opset >= 19 else [])
    if x.dtype == BOOL:
        modes = ["constant", "edge"]
    mode = b.choice(modes)
    begins, ends, shape = [], [], []
    for d in x.shape:
        lo = b.integer(-(d - 1), 2) if b.chance(40) else b.integer(0, 2)
        hi = b.integer(-(d - 1 - max(-lo, 0)), 2) if b.chance(40) else b.integer(0, 2)
        kept = d - max(-lo, 0) - max(-hi, 0)  # what the crops leave
        if mode == "reflect":  # reflect within what is left (both orders of crop and pad agree)
            lo, hi = min(lo, kept - 1), min(hi, kept - 1)
        elif mode == "wrap":
            lo, hi = min(lo, kept), min(hi, kept)
        begins.append(lo)
        ends.append(hi)
        shape.append(d + lo + hi)
    if min(shape) < 1 or math.prod(shape) > MAX_ELEMENTS:
        return None
    names = [x.name, b.ints(begins + ends)]
    value: float = 0.0
    if mode == "constant" and b.chance(60):
        if x.dtype == F32:
            value = float(b.rng.uniform(-1, 1))
        elif x.dtype == BOOL:
            value = 1.0
        else:
            value = float(b.integer(-5, 5))
        names.append(b.constant(np.array(value, NP_DTYPE[x.dtype])).name)
    return b.node("Pad", names, shape, max(x.scale, abs(value)), dtype=x.dtype, exact=x.exact,
                  mode=None if mode == "constant" and b.chance(50) else mode)


INDEXING: list[tuple[str, Gen]] = [
    ("gather", gather), ("slice_neg", slice_neg), ("resize", resize), ("pad_modes", pad_modes),
]
"""Indexing and resampling generators."""
