"""The qsoftmax kernel (onnxruntime's QLinearSoftmax, ir/ops/quant.py): one work-item a row along the
axis, the exp table baked in as `__constant` floats, the row's sum taken left to right in float32 as
onnxruntime's loop takes it, so the quantized results are its own to the bit."""

from __future__ import annotations

import math

import numpy as np

from ....ir.ops.quant import qsoftmax_table
from .base import Ctx, Lowered, launch_1d, require_static, template


@template("qsoftmax")
def qsoftmax(ctx: Ctx) -> Lowered:
    require_static(*ctx.operands, *ctx.results)
    x = ctx.operands[0]
    axis = int(ctx.attr("axis")) % x.rank
    n = x.dims[axis]
    inner = math.prod(x.dims[axis + 1:])
    rows = x.numel // max(n, 1)
    table = qsoftmax_table(float(ctx.attr("x_scale")), n)
    ys = float(math.floor(1.0 / float(np.float32(ctx.attr("y_scale")))))
    yz = int(ctx.attr("y_zero_point"))
    values = ", ".join(f"{float(v)!r}f" for v in table)
    src = f"""// qsoftmax along axis {axis} of {x}: {rows} rows of {n}, one a work-item
__constant float KERNEL_table[256] = {{{values}}};
__kernel void KERNEL(__global const uchar* restrict in0, __global uchar* restrict out0) {{
    const int r = get_global_id(0);
    if (r >= {rows}) return;
    const long base = (long)(r / {inner}) * {n * inner} + r % {inner};
    const __global uchar* x = in0 + base;
    __global uchar* y = out0 + base;
    int m = 0;
    for (int k = 0; k < {n}; ++k) m = max(m, (int)x[k * {inner}]);
    __constant float* t = KERNEL_table + 255 - m;
    float s = 0.0f;
    for (int k = 0; k < {n}; ++k) s = s + t[x[k * {inner}]];
    for (int k = 0; k < {n}; ++k) {{
        const float e = t[x[k * {inner}]] * {ys!r}f;
        y[k * {inner}] = (uchar)min((int)rint(e / s) + {yz}, 255);
    }}
}}
"""
    launch = launch_1d(max(rows, 1))
    launch.source = src
    return Lowered([launch])
