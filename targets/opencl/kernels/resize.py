"""The resize kernel: nearest and linear resampling with the reference's own source coordinates.

The source coordinates of every resized axis are computed here with the reference's numpy code and baked
into the kernel as `__constant` tables (nearest: indices; linear: low/high indices and both weights), so
rounding ties and weights are those of the reference; linear lerps the axes in the reference's order.

Resizing only the last two axes (an image's H and W, what U-Nets and FPNs upsample) runs one work-item
per output row: the row's source row (or the two it lerps) is found once, then the columns go by in one
loop over the column tables. Other resizes run one work-item per output element (nearest through the
shared copy kernel), computing every coordinate from the flat index: the zoo U-Net's 2x upsamplings ran at
1.5-3 GB/s that way.
"""

from __future__ import annotations

import numpy as np

from ....ir.types import TensorType
from .base import (
    Ctx,
    Kernel,
    Lowered,
    NotLowerable,
    index_type,
    launch_1d,
    require_static,
    row_major_strides,
    template,
)
from .movement import CopySpec, Term, copy_kernel, elem

FLOATS = ("f32", "f64")


def _lit(v: float, T: str) -> str:
    return repr(float(v)) + ("f" if T == "float" else "")


def _table(name: str, ctype_: str, values: np.ndarray, fmt=str) -> str:
    return f"__constant {ctype_} {name}[{len(values)}] = {{{', '.join(fmt(v) for v in values)}}};"


@template("resize")
def resize(ctx: Ctx) -> Lowered:
    from ....ir.ops.resize import _nearest, _source_coords

    require_static(*ctx.operands, *ctx.results)
    x, y = ctx.operands[0], ctx.results[0]
    T = elem(x)
    idx = index_type(x, y)
    mode, ctm, nm = ctx.attr("mode"), ctx.attr("coordinate_transformation_mode"), ctx.attr("nearest_mode")
    if mode == "linear" and x.dtype not in FLOATS:
        raise NotLowerable(f"linear resize on {x.dtype}")
    scales = [float(s) for s in ctx.attr("scales")]
    strides = row_major_strides(x.dims)
    what = f"resize {mode} {ctm}{f' {nm}' if mode == 'nearest' else ''}: {list(x.dims)} -> {list(y.dims)}"
    tables, axes = [], []
    terms: list[list[Term]] = []
    for ax, (n_in, n_out) in enumerate(zip(x.dims, y.dims, strict=True)):
        scale = np.float32(scales[ax]) if scales else np.float32(n_out) / np.float32(max(n_in, 1))
        if (n_in == n_out and scale == 1) or not n_out or not n_in:
            terms.append([Term(strides[ax])])
            continue
        coords = _source_coords(n_out, n_in, scale, ctm)
        axes.append(ax)
        if mode == "nearest":
            ix = np.clip(_nearest(coords, nm), 0, n_in - 1).astype(np.int64)
            tables.append(_table(f"KERNEL_ix{ax}", "int", ix))
            terms.append([Term(strides[ax], "raw", expr=f"KERNEL_ix{ax}[@]")])
            continue
        cc = np.clip(coords, 0, n_in - 1)
        lo = np.floor(cc).astype(np.int64)
        hi = np.minimum(lo + 1, n_in - 1)
        frac = (cc - lo).astype(x.np_dtype)
        wlo = (x.np_dtype.type(1) - frac).astype(x.np_dtype)
        tables += [_table(f"KERNEL_lo{ax}", "int", lo), _table(f"KERNEL_hi{ax}", "int", hi),
                   _table(f"KERNEL_wl{ax}", T, wlo, lambda f: _lit(f, T)),
                   _table(f"KERNEL_wh{ax}", T, frac, lambda f: _lit(f, T))]
        terms.append([])
    if axes and set(axes) <= {x.rank - 2, x.rank - 1} and all(x.dims[d] * y.dims[d] for d in range(x.rank)):
        return Lowered([_rows(what, x, y, T, idx, mode, set(axes), tables)])
    if mode == "nearest" or not axes:
        k = copy_kernel(what, CopySpec(list(y.dims), terms), x, idx)
        k.source = "\n".join(tables) + ("\n" if tables else "") + k.source
        return Lowered([k])
    if len(axes) > 4:
        raise NotLowerable(f"linear resize over {len(axes)} axes (at most 4)")
    rank = y.rank
    lines = [f"// {what}: separable lerps, axis {axes[0]} first as the reference does", *tables,
             f"__kernel void KERNEL(__global const {T}* restrict in0, __global {T}* restrict out0) {{",
             f"    const {idx} g = get_global_id(0);", f"    if (g >= {y.numel}) return;",
             f"    {idx} r = g;"]
    for d in range(rank - 1, 0, -1):
        lines.append(f"    const {idx} c{d} = r % {y.dims[d]}; r /= {y.dims[d]};")
    lines.append(f"    const {idx} c0 = r;")
    base = [tm.code(f"c{d}") for d in range(rank) for tm in terms[d]]
    lines.append(f"    const {idx} s = {' + '.join(base) or '0'};")
    for a in axes:
        lines.append(f"    const {idx} lo{a} = ({idx})KERNEL_lo{a}[c{a}] * {strides[a]}, "
                     f"hi{a} = ({idx})KERNEL_hi{a}[c{a}] * {strides[a]};")
        lines.append(f"    const {T} wl{a} = KERNEL_wl{a}[c{a}], wh{a} = KERNEL_wh{a}[c{a}];")

    def lerp(j: int, picks: list[str]) -> str:
        if j < 0:
            return f"in0[s + {' + '.join(picks)}]"
        a = axes[j]
        return (f"({lerp(j - 1, [f'lo{a}', *picks])} * wl{a} + {lerp(j - 1, [f'hi{a}', *picks])} * wh{a})")

    lines += [f"    out0[g] = {lerp(len(axes) - 1, [])};", "}"]
    k = launch_1d(y.numel)
    return Lowered([Kernel("\n".join(lines) + "\n", k.global_size, k.local_size)])


def _rows(what: str, x: TensorType, y: TensorType, T: str, idx: str, mode: str, axes: set[int],
          tables: list[str]) -> Kernel:
    """One work-item per output row of a resize of the last two axes (`axes`: which of them)."""
    r = x.rank
    h, w = x.dims[r - 2], x.dims[r - 1]
    ho, wo = y.dims[r - 2], y.dims[r - 1]
    rows = y.numel // wo
    ry, rx = r - 2 in axes, r - 1 in axes
    lines = [f"// {what}: one work-item per output row", *tables,
             f"__kernel void KERNEL(__global const {T}* restrict in0, __global {T}* restrict out0) {{",
             f"    const {idx} g = get_global_id(0);", f"    if (g >= {rows}) return;",
             f"    const {idx} oy = g % {ho}, plane = g / {ho};",
             f"    __global {T}* dst = out0 + g * {wo};"]
    if mode == "nearest":
        sy = f"KERNEL_ix{r - 2}[oy]" if ry else "oy"
        sx = f"KERNEL_ix{r - 1}[ox]" if rx else "ox"
        lines += [f"    const __global {T}* src = in0 + plane * {h * w} + ({idx}){sy} * {w};",
                  f"    for (int ox = 0; ox < {wo}; ++ox) dst[ox] = src[{sx}];", "}"]
        return _launch(lines, rows)
    a, b = r - 2, r - 1
    if ry:
        lines += [f"    const __global {T}* r0 = in0 + plane * {h * w} + ({idx})KERNEL_lo{a}[oy] * {w};",
                  f"    const __global {T}* r1 = in0 + plane * {h * w} + ({idx})KERNEL_hi{a}[oy] * {w};",
                  f"    const {T} wly = KERNEL_wl{a}[oy], why = KERNEL_wh{a}[oy];"]
    else:
        lines.append(f"    const __global {T}* r0 = in0 + plane * {h * w} + oy * {w};")

    def col(c: str) -> str:  # the column c of the source row, lerped along y first as the reference does
        return f"(r0[{c}] * wly + r1[{c}] * why)" if ry else f"r0[{c}]"

    if rx:
        lines += [f"    for (int ox = 0; ox < {wo}; ++ox) {{",
                  f"        const int lx = KERNEL_lo{b}[ox], hx = KERNEL_hi{b}[ox];",
                  f"        dst[ox] = {col('lx')} * KERNEL_wl{b}[ox] + {col('hx')} * KERNEL_wh{b}[ox];",
                  "    }", "}"]
    else:
        lines += [f"    for (int ox = 0; ox < {wo}; ++ox) dst[ox] = {col('ox')};", "}"]
    return _launch(lines, rows)


def _launch(lines: list[str], rows: int) -> Kernel:
    k = launch_1d(rows)
    return Kernel("\n".join(lines) + "\n", k.global_size, k.local_size)
