"""The dynamic_quantize kernels (ONNX DynamicQuantizeLinear, ir/ops/quant.py): x's range and its
quantization in two launches, where the op's ONNX form is a reduce_min and a reduce_max (two launches
each), the scale's scalar arithmetic and the quantize.

1. `parts` work-items each find the range of one slice of x (16 lanes at a time, starting from 0, which
   the range must hold anyway) and write its (min, max) to tmp0.
2. Every work-item of the second launch reads those pairs (at most MAX_PARTS: a few cache lines), takes
   the scale and zero point from them in float32 as the reference does, and quantizes its own slice;
   work-item 0 also writes the scale and zero point.

Neither kernel has a barrier or local memory, so cooperative execution runs both as plain steps.
"""

from __future__ import annotations

import math

from .base import Ctx, Lowered, index_type, launch_1d, require_static, template

MAX_PARTS = 64
"""Slices whose ranges the first launch finds: enough work-items for the cores of a CPU, few enough that
every work-item of the second launch reads all their pairs cheaply."""
PART_ELEMENTS = 4096
"""Elements a slice of the first launch has at least (16 KiB of floats: a slice is worth a work-item)."""
ROUNDER = "12582912.0f"
"""1.5 * 2^23: (r + ROUNDER) - ROUNDER is r rounded half to even for |r| < 2^22 (the quotients here are
within [-255, 255]): a 16K-element quantize took 8 us this way and 10 with PoCL's vector rint (one
launch, profiling events)."""
QUANT_ELEMENTS = 1024
"""Elements a work-item of the second launch quantizes (a multiple of the vector width)."""


def _slice(lanes: int, n: int, parts: int) -> int:
    """Elements in each of `parts` slices covering n, a multiple of `lanes`."""
    return max(lanes, -(-math.ceil(n / parts) // lanes) * lanes)


@template("dynamic_quantize")
def dynamic_quantize(ctx: Ctx) -> Lowered:
    x = ctx.operands[0]
    require_static(x)
    n = x.numel
    lanes = 16
    it = index_type(x)
    parts = max(1, min(MAX_PARTS, n // PART_ELEMENTS))
    part = _slice(lanes, n, parts)
    parts = max(1, math.ceil(n / part))
    v = f"float{lanes}"
    ranges = f"""// the range of {x} in {parts} slices of {part}, each widened to hold 0
__kernel void KERNEL(__global const float* restrict in0, __global float* restrict tmp0) {{
    const {it} p = get_global_id(0);
    if (p >= {parts}) return;
    const {it} begin = p * {part}, end = min(begin + {part}, ({it}){n});
    {v} lo = ({v})(0.0f), hi = ({v})(0.0f);
    {it} i = begin;
    for (; i + {lanes} <= end; i += {lanes}) {{
        const {v} a = vload{lanes}(0, in0 + i);
        lo = fmin(lo, a);
        hi = fmax(hi, a);
    }}
    float l = 0.0f, h = 0.0f;
    for (int k = 0; k < {lanes}; ++k) {{
        l = fmin(l, lo[k]);
        h = fmax(h, hi[k]);
    }}
    for (; i < end; ++i) {{
        l = fmin(l, in0[i]);
        h = fmax(h, in0[i]);
    }}
    tmp0[2 * p] = l;
    tmp0[2 * p + 1] = h;
}}
"""
    quant = _slice(lanes, n, max(1, math.ceil(n / QUANT_ELEMENTS)))
    items = max(1, math.ceil(n / quant))
    quantize = f"""// {x} quantized to ui8 with the scale and zero point of its range ({parts} slices in tmp0)
__kernel void KERNEL(__global const float* restrict in0, __global const float* restrict tmp0,
                     __global uchar* restrict out0, __global float* restrict out1,
                     __global uchar* restrict out2) {{
    const {it} q = get_global_id(0);
    if (q >= {items}) return;
    float lo = 0.0f, hi = 0.0f;
    for (int p = 0; p < {parts}; ++p) {{
        lo = fmin(lo, tmp0[2 * p]);
        hi = fmax(hi, tmp0[2 * p + 1]);
    }}
    const float scale = (hi == lo ? 1.0f : hi - lo) / 255.0f;
    const float zp = rint(clamp(-(lo / scale), 0.0f, 255.0f));
    if (q == 0) {{
        out1[0] = scale;
        out2[0] = (uchar)zp;
    }}
    const {it} begin = q * {quant}, end = min(begin + {quant}, ({it}){n});
    {it} i = begin;
    for (; i + {lanes} <= end; i += {lanes}) {{
        const {v} r = clamp(vload{lanes}(0, in0 + i) / scale, -zp, 255.0f - zp);
        vstore{lanes}(convert_uchar{lanes}((r + {ROUNDER}) - {ROUNDER} + zp), 0, out0 + i);
    }}
    for (; i < end; ++i)
        out0[i] = (uchar)clamp(rint(in0[i] / scale) + zp, 0.0f, 255.0f);
}}
"""
    first = launch_1d(parts, min_groups=ctx.device.compute_units)
    first.source, first.args = ranges, ("in0", "tmp0")
    second = launch_1d(items)
    second.source, second.args = quantize, ("in0", "tmp0", "out0", "out1", "out2")
    return Lowered([first, second],
                   scratch=[8 * parts], schedule={"parts": parts, "slice": quant}, flops_kernel=1)
