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
from .shuffles import interleave

FLOATS = ("f32", "f64")


def _lit(v: float, T: str) -> str:
    return repr(float(v)) + ("f" if T == "float" else "")


def _table(name: str, ctype_: str, values: np.ndarray, fmt=str) -> str:
    return f"__constant {ctype_} {name}[{len(values)}] = {{{', '.join(fmt(v) for v in values)}}};"


def axis_scale(scales: list[float], ax: int, n_in: int, n_out: int) -> np.float32 | None:
    """The scale of axis `ax` as the reference's coordinate transform takes it: `scales` when the model
    gave them, else None (out / in, which the transform applies exactly)."""
    return np.float32(scales[ax]) if scales else None


def nearest_table(n_in: int, n_out: int, scale: np.float32 | None, ctm: str, nm: str) -> np.ndarray:
    """The source index of each of an axis' n_out outputs under nearest resampling, as the reference
    computes it (its coordinates, rounding ties and clamping)."""
    from ....ir.ops.resize import _nearest, _source_coords

    return np.clip(_nearest(_source_coords(n_out, n_in, scale, ctm), nm), 0, n_in - 1).astype(np.int64)


def upsample_tables(attrs: dict, x: TensorType, y: TensorType) -> tuple[np.ndarray, np.ndarray]:
    """A nearest resize of H and W of NCHW `x` to `y` (attrs: its Sig's, defaults filled in by the registry):
    the source row of each output row and the source column of each output column."""
    scales = [float(s) for s in attrs["scales"]]
    ctm, nm = attrs["coordinate_transformation_mode"], attrs["nearest_mode"]
    rows, cols = (nearest_table(x.dims[ax], y.dims[ax], axis_scale(scales, ax, x.dims[ax], y.dims[ax]), ctm,
                                nm) for ax in (2, 3))
    return rows, cols


@template("resize")
def resize(ctx: Ctx) -> Lowered:
    from ....ir.ops.resize import _source_coords, bilinear_plane

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
    if bilinear_plane(ctx.sig.attrs, x.dims) and y.numel:
        return Lowered([_bilinear_rows(what, x, y, T, idx, scales, ctm)])
    tables, axes = [], []
    last: dict[str, np.ndarray] = {}  # the last axis' tables as arrays, for _rows' 2x path
    terms: list[list[Term]] = []
    for ax, (n_in, n_out) in enumerate(zip(x.dims, y.dims, strict=True)):
        scale = axis_scale(scales, ax, n_in, n_out)
        if (n_in == n_out and (scale is None or scale == 1)) or not n_out or not n_in:
            terms.append([Term(strides[ax])])
            continue
        axes.append(ax)
        if mode == "nearest":
            ix = nearest_table(n_in, n_out, scale, ctm, nm)
            tables.append(_table(f"KERNEL_ix{ax}", "int", ix))
            if ax == x.rank - 1:
                last = {"lo": ix}
            terms.append([Term(strides[ax], "raw", expr=f"KERNEL_ix{ax}[@]")])
            continue
        cc = np.clip(_source_coords(n_out, n_in, scale, ctm), 0, n_in - 1)
        lo = np.floor(cc).astype(np.int64)
        hi = np.minimum(lo + 1, n_in - 1)
        frac = (cc - lo).astype(x.np_dtype)
        wlo = (x.np_dtype.type(1) - frac).astype(x.np_dtype)
        if ax == x.rank - 1:
            last = {"lo": lo, "hi": hi, "wl": wlo, "wh": frac}
        tables += [_table(f"KERNEL_lo{ax}", "int", lo), _table(f"KERNEL_hi{ax}", "int", hi),
                   _table(f"KERNEL_wl{ax}", T, wlo, lambda f: _lit(f, T)),
                   _table(f"KERNEL_wh{ax}", T, frac, lambda f: _lit(f, T))]
        terms.append([])
    if axes and set(axes) <= {x.rank - 2, x.rank - 1} and all(x.dims[d] * y.dims[d] for d in range(x.rank)):
        return Lowered([_rows(what, x, y, T, idx, mode, set(axes), tables, last)])
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


def _bilinear_rows(what: str, x: TensorType, y: TensorType, T: str, idx: str, scales: list[float],
                   ctm: str) -> Kernel:
    """A linear resize of the last two axes, one work-item per output row, in onnxruntime's bilinear
    arithmetic (the reference's `_bilinear`): each output is (wxl*wyl) x11 + (wxh*wyl) x21 + (wxl*wyh) x12
    + (wxh*wyh) x22 with f32 weight products, summed left to right and never contracted into FMAs, so a
    QDQ model's requantized resize rounds its ties as onnxruntime does. A 2x upsampling of the columns
    computes both phases of 16 source columns as vectors."""
    from ....ir.ops.resize import lerp_axis

    r = x.rank
    h, w = x.dims[r - 2], x.dims[r - 1]
    ho, wo = y.dims[r - 2], y.dims[r - 1]
    rows = y.numel // wo
    tabs = []
    for ax in (r - 2, r - 1):
        n_in, n_out = x.dims[ax], y.dims[ax]
        scale = axis_scale(scales, ax, n_in, n_out)
        tabs.append(lerp_axis(n_out, n_in, scale, ctm, not (n_in == n_out and (scale is None or scale == 1))))
    (ylo, yhi, wyl, wyh), (xlo, xhi, wxl, wxh) = tabs
    tables = [_table("KERNEL_ylo", "int", ylo), _table("KERNEL_yhi", "int", yhi),
              _table("KERNEL_wyl", "float", wyl, lambda f: _lit(f, "float")),
              _table("KERNEL_wyh", "float", wyh, lambda f: _lit(f, "float")),
              _table("KERNEL_xlo", "int", xlo), _table("KERNEL_xhi", "int", xhi),
              _table("KERNEL_wxl", "float", wxl, lambda f: _lit(f, "float")),
              _table("KERNEL_wxh", "float", wxh, lambda f: _lit(f, "float"))]
    doubled = (_doubled({"lo": xlo, "hi": xhi, "wl": wxl, "wh": wxh}, w) if T == "float" and w <= 4096
               else None)
    lines = [f"// {what}: one work-item per output row, onnxruntime's bilinear sums"
             + (f"; columns {2 * doubled[0]}..{2 * doubled[1] - 1} 32 at a time" if doubled else ""), *tables,
             f"__kernel void KERNEL(__global const {T}* restrict in0, __global {T}* restrict out0) {{",
             f"    const {idx} g = get_global_id(0);", f"    if (g >= {rows}) return;",
             f"    const {idx} oy = g % {ho}, plane = g / {ho};",
             f"    __global {T}* dst = out0 + g * {wo};",
             f"    const __global {T}* r0 = in0 + plane * {h * w} + ({idx})KERNEL_ylo[oy] * {w};",
             f"    const __global {T}* r1 = in0 + plane * {h * w} + ({idx})KERNEL_yhi[oy] * {w};",
             "    const float wyl = KERNEL_wyl[oy], wyh = KERNEL_wyh[oy];"]
    scalar = ("{ const int lx = KERNEL_xlo[ox], hx = KERNEL_xhi[ox]; "
              "const float wl = KERNEL_wxl[ox], wh = KERNEL_wxh[ox]; "
              + _sum(T, "t", ["r0[lx] * (wl * wyl)", "r0[hx] * (wh * wyl)", "r1[lx] * (wl * wyh)",
                              "r1[hx] * (wh * wyh)"]) + " dst[ox] = t; }")
    if not doubled:
        return _launch(lines + [f"    for (int ox = 0; ox < {wo}; ++ox) {scalar}", "}"], rows)
    sums: list[str] = []
    for j, (_, _, a, b) in enumerate(doubled[2]):
        lines.append(f"    const float p{j}ll = {_lit(a, 'float')} * wyl, p{j}hl = {_lit(b, 'float')} * wyl, "
                     f"p{j}lh = {_lit(a, 'float')} * wyh, p{j}hh = {_lit(b, 'float')} * wyh;")

    for j, (dl, dh, _, b) in enumerate(doubled[2]):
        terms = [f"vload16(0, r0 + s + {dl}) * p{j}ll", f"vload16(0, r0 + s + {dh}) * p{j}hl",
                 f"vload16(0, r1 + s + {dl}) * p{j}lh", f"vload16(0, r1 + s + {dh}) * p{j}hh"]
        sums.append(_sum("float16", f"v{j}", terms if b else terms[0::2]))  # b = 0: those terms add +0
    return _launch(lines + _interleaved(doubled, "r0", wo, scalar, sums) + ["}"], rows)


def _sum(T: str, name: str, products: list[str]) -> str:
    """`name` = the sum of `products`, left to right, one statement each: OpenCL C contracts a product
    and a sum within one expression into an FMA (FP_CONTRACT is on by default), never across statements.
    (A `#pragma OPENCL FP_CONTRACT OFF` must open the kernel body, where share.py and the bounds checks
    insert their own statements.)"""
    return " ".join([f"{T} {name} = {products[0]};"]
                    + [f"{{ const {T} p = {e}; {name} = {name} + p; }}" for e in products[1:]])


def _rows(what: str, x: TensorType, y: TensorType, T: str, idx: str, mode: str, axes: set[int],
          tables: list[str], last: dict[str, np.ndarray]) -> Kernel:
    """One work-item per output row of a resize of the last two axes (`axes`: which of them); a 2x
    upsampling of the columns (`last`'s tables repeat with period 2 inside the row) computes the two
    phases of 16 source columns as vectors and interleaves them."""
    r = x.rank
    h, w = x.dims[r - 2], x.dims[r - 1]
    ho, wo = y.dims[r - 2], y.dims[r - 1]
    rows = y.numel // wo
    ry, rx = r - 2 in axes, r - 1 in axes
    doubled = _doubled(last, w) if rx and T == "float" and w <= 4096 else None
    lines = [f"// {what}: one work-item per output row"
             + (f"; columns {2 * doubled[0]}..{2 * doubled[1] - 1} 32 at a time" if doubled else ""), *tables,
             f"__kernel void KERNEL(__global const {T}* restrict in0, __global {T}* restrict out0) {{",
             f"    const {idx} g = get_global_id(0);", f"    if (g >= {rows}) return;",
             f"    const {idx} oy = g % {ho}, plane = g / {ho};",
             f"    __global {T}* dst = out0 + g * {wo};"]
    if mode == "nearest":
        sy = f"KERNEL_ix{r - 2}[oy]" if ry else "oy"
        sx = f"KERNEL_ix{r - 1}[ox]" if rx else "ox"
        lines.append(f"    const __global {T}* src = in0 + plane * {h * w} + ({idx}){sy} * {w};")
        if doubled:
            return _launch(lines + _interleaved(doubled, "src", wo, f"dst[ox] = src[{sx}];") + ["}"], rows)
        lines += [f"    for (int ox = 0; ox < {wo}; ++ox) dst[ox] = src[{sx}];", "}"]
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

    if doubled:
        src = "r0"
        if ry:  # the row lerped along y once a source column, as the reference lerps y first
            lines += [f"    {T} row[{w}];", "    int c = 0;",
                      f"    for (; c + 16 <= {w}; c += 16) "
                      "vstore16(vload16(0, r0 + c) * wly + vload16(0, r1 + c) * why, 0, row + c);",
                      f"    for (; c < {w}; ++c) row[c] = r0[c] * wly + r1[c] * why;"]
            src = "row"
        scalar = (f"dst[ox] = {src}[KERNEL_lo{b}[ox]] * KERNEL_wl{b}[ox] + "
                  f"{src}[KERNEL_hi{b}[ox]] * KERNEL_wh{b}[ox];")
        return _launch(lines + _interleaved(doubled, src, wo, scalar) + ["}"], rows)
    if rx:
        lines += [f"    for (int ox = 0; ox < {wo}; ++ox) {{",
                  f"        const int lx = KERNEL_lo{b}[ox], hx = KERNEL_hi{b}[ox];",
                  f"        dst[ox] = {col('lx')} * KERNEL_wl{b}[ox] + {col('hx')} * KERNEL_wh{b}[ox];",
                  "    }", "}"]
    else:
        lines += [f"    for (int ox = 0; ox < {wo}; ++ox) dst[ox] = {col('ox')};", "}"]
    return _launch(lines, rows)


Doubled = tuple[int, int, list[tuple[int, int, float, float]]]
"""(i0, i1, phases): for source columns i in [i0, i1) (at least 16), output column 2i + j is
src[i + dl] * wl + src[i + dh] * wh with phase j's (dl, dh, wl, wh) (nearest: dh = dl, wl = 1, wh = 0)."""


def _doubled(t: dict[str, np.ndarray], w: int) -> Doubled | None:
    """The 2x pattern of a row's column tables: the longest run of source columns whose two outputs follow
    it, when it covers at least 16."""
    lo = t["lo"]
    hi, wl, wh = t.get("hi", lo), t.get("wl"), t.get("wh")
    n = len(lo) // 2
    if n < 16 or len(lo) != 2 * w:
        return None
    mid = n // 2
    phases = [(int(lo[2 * mid + j]) - mid, int(hi[2 * mid + j]) - mid,
               float(wl[2 * mid + j]) if wl is not None else 1.0,
               float(wh[2 * mid + j]) if wh is not None else 0.0) for j in (0, 1)]
    i = np.arange(n)
    good = np.ones(n, bool)
    for j, (dl, dh, a, b) in enumerate(phases):
        ox = 2 * i + j
        good &= (lo[ox] == i + dl) & (hi[ox] == i + dh)
        if wl is not None:
            good &= (wl[ox] == np.float32(a)) & (wh[ox] == np.float32(b))
    best, start = (0, 0), None
    for k in range(n + 1):
        if k < n and good[k]:
            start = k if start is None else start
        elif start is not None:
            best = max(best, (start, k), key=lambda se: se[1] - se[0])
            start = None
    i0, i1 = best
    return (i0, i1, phases) if i1 - i0 >= 16 else None


def _interleaved(d: Doubled, src: str, wo: int, scalar: str, sums: list[str] | None = None) -> list[str]:
    """The row's columns: 16 source columns a step give 32 outputs (both phases as vectors, or `sums`'
    statements computing v0 and v1 from `s` when given, interleaved (shuffles.py); the last step ends at the
    run's end, overlapping the one before), the columns before and after the run through the tables
    (`scalar`, with `ox`)."""
    i0, i1, phases = d

    def phase(j: int) -> str:
        dl, dh, a, b = phases[j]
        v = f"vload16(0, {src} + s + {dl})" if dl else f"vload16(0, {src} + s)"
        if a == 1.0 and b == 0.0:
            return v
        u = f"vload16(0, {src} + s + {dh})" if dh else f"vload16(0, {src} + s)"
        return f"{v} * {_lit(a, 'float')} + {u} * {_lit(b, 'float')}"

    e, o = ("v0", "v1") if sums else (phase(0), phase(1))
    both = f"const float16 e = {e};" if e == o else f"const float16 e = {e}, o = {o};"
    if sums:
        both = " ".join(sums) + " " + both
    odd = "e" if e == o else "o"
    return ([f"    for (int ox = 0; ox < {2 * i0}; ++ox) {scalar}"] if i0 else []) + [
        f"    for (int i = {i0}; i < {i1}; i += 16) {{",
        f"        const int s = min(i, {i1 - 16});",
        f"        {both}",
        f"        vstore16(KERNEL_ZIP_LO(e, {odd}), 0, dst + 2 * s);",
        f"        vstore16(KERNEL_ZIP_HI(e, {odd}), 0, dst + 2 * s + 16);",
        "    }"] + ([f"    for (int ox = {2 * i1}; ox < {wo}; ++ox) {scalar}"] if 2 * i1 < wo else [])


def _launch(lines: list[str], rows: int) -> Kernel:
    k = launch_1d(rows)
    head = interleave("float") if any("KERNEL_ZIP_" in line for line in lines) else ""
    return Kernel(head + "\n".join(lines) + "\n", k.global_size, k.local_size)
