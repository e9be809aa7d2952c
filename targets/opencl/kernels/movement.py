"""Copy kernels for the shape ops and pack/unpack (the indexed copies gather, gather_elements and
scatter_elements are gather.py).

Most ops are one generic strided copy (`CopySpec`): each work-item writes one output element, or V
consecutive ones along the innermost dim, and computes its source offset from coordinates decoded with
baked-in extents and strides. A source offset is a sum of `Term`s, one or more per dim (`c * s`,
`(c / t) * s`, `(c % d) * s` or a raw expression such as a reflect), so transpose, slice (any step),
expand, tile, pad, depth_to_space, pack and unpack are all the one kernel; adjacent dims that stay
contiguous are merged first, so a slice of whole rows or a concat piece is a 2-D block copy. V is the
widest vector of at most 64 bytes that divides the innermost extent; its elements are then one
`vload` (unit source step), a splat (step 0, broadcast) or a gather of V scalars. The last two dims of a
transpose (after merging: NCHW <-> NHWC too) swap by 8x8 register tiles. A plain copy whose innermost dim is
a long unit-stride run on both sides (a transpose moving whole planes: a channel shuffle) copies a run a
work-item.
"""


from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ....ir.types import TensorType
from .base import (
    Ctx,
    Kernel,
    Lowered,
    NotLowerable,
    ctype,
    index_type,
    launch_1d,
    require_static,
    row_major_strides,
    template,
)

MOVABLE = ("f32", "f64", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64", "i1")


def elem(t: TensorType) -> str:
    """The OpenCL type of a tensor these kernels copy (f16/bf16 and the sub-byte types are refused)."""
    if t.dtype not in MOVABLE:
        raise NotLowerable(f"element type {t.dtype} is not copied by the OpenCL movement kernels")
    return ctype(t)


def literal(value: float, t: TensorType) -> str:
    """`value` as an OpenCL literal of t's element type (for pad fills)."""
    if t.dtype in ("f32", "f64"):
        v = float(value)
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        return repr(v) + ("f" if t.dtype == "f32" else "")
    if t.dtype == "i1":
        return "1" if value else "0"
    import numpy as np

    v = int(np.asarray(value).astype(t.np_dtype))
    return f"(({ctype(t)}){v}{'L' if abs(v) >= 2**31 else ''})"


def vector_width(itemsize: int, extent: int, limit: int = 16) -> int:
    """The widest V in 16, 8, 4, 2 with V * itemsize <= 64 bytes that divides `extent` (else 1)."""
    for v in (16, 8, 4, 2):
        if v <= limit and v * itemsize <= 64 and extent % v == 0:
            return v
    return 1


# the generic strided copy --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Term:
    """One summand of a source offset: `stride * f(c)` for the coordinate c of one dim, f one of
    `lin` (c), `div` (c / arg), `mod` (c % arg) or `raw` (`expr` with `@` standing for c)."""

    stride: int
    kind: str = "lin"
    arg: int = 0
    expr: str = ""

    def code(self, c: str) -> str:
        f = {"lin": c, "div": f"({c} / {self.arg})", "mod": f"({c} % {self.arg})",
             "raw": f"({self.expr.replace('@', c)})"}[self.kind]
        return f if self.stride == 1 else f"{f} * {self.stride}"

    def step(self, v: int) -> int | None:
        """How f(c) moves across an aligned run of v consecutive c: 1, 0 (constant) or None (neither)."""
        if self.kind == "lin" or (self.kind == "mod" and self.arg % v == 0):
            return 1
        if self.kind == "div" and self.arg % v == 0:
            return 0
        return None


@dataclass
class CopySpec:
    """dst[dst_offset(c)] = cond(c) ? src[src_base + sum of terms(c)] : fill, for every c in `shape`."""

    shape: list[int]
    src: list[list[Term]]
    src_base: int = 0
    dst: list[int] | None = None  # destination strides per dim; None = row-major over `shape`
    dst_base: int = 0
    cond: list[tuple[frozenset[int], str]] = field(default_factory=list)  # (dims used, C with c<d>)
    fill: str = "0"

    def merged(self) -> CopySpec:
        """Dims of extent 1 dropped and adjacent plain dims that stay contiguous on both sides merged; dims
        up to the last one a condition names keep their positions."""
        used = set().union(*(d for d, _ in self.cond)) if self.cond else set()
        fixed = max(used) + 1 if used else 0
        dst = self.dst if self.dst is not None else row_major_strides(self.shape)
        keep = [i for i, n in enumerate(self.shape)
                if i < fixed or n != 1 or any(t.kind == "raw" for t in self.src[i])]
        shape, src, dsts = [self.shape[i] for i in keep], [self.src[i] for i in keep], [dst[i] for i in keep]
        i = len(shape) - 1
        while i > fixed:
            a, b = src[i - 1], src[i]
            plain = all(len(s) <= 1 and all(t.kind == "lin" for t in s) for s in (a, b))
            sa, sb = (s[0].stride if s else 0 for s in (a, b))
            if plain and sa == sb * shape[i] and dsts[i - 1] == dsts[i] * shape[i]:
                shape[i - 1:i + 1] = [shape[i - 1] * shape[i]]
                src[i - 1:i + 1] = [[Term(sb)] if sb else []]
                dsts[i - 1:i + 1] = [dsts[i]]
            i -= 1
        contiguous = self.dst is None or dsts == row_major_strides(shape)
        return CopySpec(shape, src, self.src_base, None if contiguous else dsts, self.dst_base,
                        self.cond, self.fill)


def _join(base: int, terms: list[str]) -> str:
    return " + ".join([str(base)] * bool(base) + terms) or "0"


def copy_kernel(what: str, spec: CopySpec, t: TensorType, idx: str, src: str = "in0", dst: str = "out0",
                vec: bool = True) -> Kernel:
    """The kernel of `spec` (merged first); `what` is the comment saying what it computes. Conditions must
    be intervals in each coordinate: a vector whose first and last lanes pass is copied whole, others lane
    by lane."""
    spec = spec.merged()
    T = elem(t)
    shape = spec.shape or [1]
    src_terms = spec.src or [[]]
    rank, n = len(shape), math.prod(shape)
    last = rank - 1
    step = 1
    v = vector_width(t.itemsize, shape[last]) if vec and (spec.dst is None or spec.dst[last] == 1) else 1
    while v > 1:
        steps = [tm.step(v) for tm in src_terms[last]]
        if None not in steps:
            step = sum(s * tm.stride for s, tm in zip(steps, src_terms[last], strict=True))  # type: ignore
            break
        v //= 2
    items = n // v
    if not items:
        return empty_kernel(what, T, src, dst)
    unit = [(tm.kind, tm.stride) for tm in src_terms[last]] == [("lin", 1)]
    runs = n // shape[last]  # enough runs to share out, each short enough for one work-item
    if unit and not spec.cond and spec.dst is None and runs >= 32 and max(4 * v, 16) <= shape[last] <= 4096:
        return _row_copy(what, spec, v, T, idx, src, dst)
    lines = [f"// {what}",
             f"__kernel void KERNEL(__global const {T}* restrict {src}, __global {T}* restrict {dst}) {{",
             f"    const {idx} g = get_global_id(0);", f"    if (g >= {items}) return;"]
    if rank == 1:
        lines.append(f"    const {idx} c0 = g{f' * {v}' if v > 1 else ''};")
    else:
        lines.append(f"    {idx} r = g;")
        for d in range(last, 0, -1):
            ext = shape[d] // v if d == last else shape[d]
            scale = f" * {v}" if d == last and v > 1 else ""
            lines.append(f"    const {idx} c{d} = 0;" if ext == 1 else
                         f"    const {idx} c{d} = (r % {ext}){scale}; r /= {ext};")
        lines.append(f"    const {idx} c0 = r;")
    terms = [tm.code(f"c{d}") for d in range(rank) for tm in src_terms[d]]
    lines.append(f"    const {idx} s = {_join(spec.src_base, terms)};")
    if spec.dst is None:
        lines.append(f"    const {idx} o = {_join(spec.dst_base, [f'g * {v}' if v > 1 else 'g'])};")
    else:
        dterms = [f"c{d} * {spec.dst[d]}" if spec.dst[d] != 1 else f"c{d}"
                  for d in range(rank) if spec.dst[d]]
        lines.append(f"    const {idx} o = {_join(spec.dst_base, dterms)};")
    cond = " && ".join(c for _, c in spec.cond)
    if v == 1:
        load = f"{src}[s]"
        lines.append(f"    {dst}[o] = ({cond}) ? {load} : {spec.fill};" if cond
                     else f"    {dst}[o] = {load};")
    else:
        if step == 1:
            load = f"vload{v}(0, {src} + s)"
        elif step == 0:
            load = f"({T}{v})({src}[s])"
        else:
            lanes = ", ".join(f"{src}[s + {k * step}]" if k else f"{src}[s]" for k in range(v))
            load = f"({T}{v})({lanes})"
        store = f"vstore{v}({load}, 0, {dst} + o);"
        if not cond:
            lines.append(f"    {store}")
        elif not any(last in d for d, _ in spec.cond):
            lines.append(f"    vstore{v}(({cond}) ? {load} : ({T}{v})({spec.fill}), 0, {dst} + o);")
        else:  # whole vector when both end lanes pass, else lane by lane
            c_last = re.compile(rf"\bc{last}\b")
            at_end = c_last.sub(f"(c{last} + {v - 1})", cond)
            lane = c_last.sub(f"(c{last} + q)", cond)
            lines += [f"    if (({cond}) && ({at_end})) {{", f"        {store}", "    } else {",
                      f"        for (int q = 0; q < {v}; q++)",
                      f"            {dst}[o + q] = ({lane}) ? {src}[s + q * {step}] : {spec.fill};", "    }"]
    lines.append("}")
    k = launch_1d(items)
    return Kernel("\n".join(lines) + "\n", k.global_size, k.local_size, (src, dst))


def _row_copy(what: str, spec: CopySpec, v: int, T: str, idx: str, src: str, dst: str) -> Kernel:
    """A merged copy whose innermost dim is a long contiguous run on both sides (a transpose that moves
    whole planes, shufflenet's channel shuffle): a work-item copies one run with `vload`/`vstore`, so the
    coordinates are decoded once per run instead of once per vector."""
    shape, last = spec.shape, len(spec.shape) - 1
    run, rows = shape[last], math.prod(shape[:last])
    lines = [f"// {what}: {rows} runs of {run} contiguous elements, one a work-item",
             f"__kernel void KERNEL(__global const {T}* restrict {src}, __global {T}* restrict {dst}) {{",
             f"    const {idx} g = get_global_id(0);", f"    if (g >= {rows}) return;",
             f"    {idx} r = g;", f"    const {idx} c{last} = 0;"]
    for d in range(last - 1, 0, -1):
        lines.append(f"    const {idx} c{d} = 0;" if shape[d] == 1 else
                     f"    const {idx} c{d} = r % {shape[d]}; r /= {shape[d]};")
    lines.append(f"    const {idx} c0 = r;")
    terms = [tm.code(f"c{d}") for d in range(last + 1) for tm in spec.src[d]]
    lines += [f"    __global const {T}* s = {src} + {_join(spec.src_base, terms)};",
              f"    __global {T}* o = {dst} + {_join(spec.dst_base, [f'g * {run}'])};",
              f"    for (int q = 0; q < {run}; q += {v}) vstore{v}(vload{v}(0, s + q), 0, o + q);" if v > 1
              else f"    for (int q = 0; q < {run}; ++q) o[q] = s[q];", "}"]
    k = launch_1d(rows)
    return Kernel("\n".join(lines) + "\n", k.global_size, k.local_size, (src, dst))


def empty_kernel(what: str, T: str, src: str = "in0", dst: str = "out0") -> Kernel:
    """A kernel with nothing to do (an empty result), so that every op still has one launch."""
    sig = f"__global const {T}* restrict {src}, __global {T}* restrict {dst}"
    source = f"// {what}: empty, nothing to copy\n__kernel void KERNEL({sig}) {{ }}\n"
    return Kernel(source, (1,), (1,), (src, dst))


def one_kernel(k: Kernel, **schedule: object) -> Lowered:
    """The lowering of an op that is one launch of `k`."""
    return Lowered([k], schedule=dict(schedule))


def _prep(ctx: Ctx) -> tuple[TensorType, TensorType, str]:
    require_static(*ctx.operands, *ctx.results)
    x, y = ctx.operands[0], ctx.results[0]
    elem(x)
    return x, y, index_type(*ctx.operands, *ctx.results)


# reshape / transpose / depth_to_space / space_to_depth -----------------------------------------------------
@template("reshape")
def reshape(ctx: Ctx) -> Lowered:
    x, y, idx = _prep(ctx)
    spec = CopySpec([y.numel], [[Term(1)]])
    return one_kernel(copy_kernel(f"reshape: contiguous copy of {x.numel} elements", spec, x, idx))


def collapse_perm(shape: Sequence[int], perm: Sequence[int]) -> tuple[list[int], list[int]]:
    """`shape` and `perm` with size-1 dims dropped and input dims that stay adjacent in `perm` merged."""
    keep = [d for d in range(len(shape)) if shape[d] != 1]
    perm = [p for p in perm if p in keep]
    groups: list[list[int]] = []
    for p in perm:
        if groups and groups[-1][-1] + 1 == p:
            groups[-1].append(p)
        else:
            groups.append([p])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])
    new_shape = [math.prod(shape[d] for d in groups[g]) for g in order]
    rank_of = {g: i for i, g in enumerate(order)}
    return new_shape, [rank_of[g] for g in range(len(groups))]


def transpose_spec(shape: Sequence[int], perm: Sequence[int]) -> CopySpec:
    strides = row_major_strides(shape)
    return CopySpec([shape[p] for p in perm], [[Term(strides[p])] for p in perm])


def _tile_transpose(what: str, batch: int, rows: int, cols: int, t: TensorType, idx: str) -> Kernel:
    """out[b, j, i] = in[b, i, j] in TxT tiles: T row loads, T column stores built from their lanes."""
    T, tile = elem(t), 8
    lanes = "01234567"
    nt_r, nt_c = rows // tile, cols // tile
    items = batch * nt_r * nt_c
    lines = [f"// {what}: [{batch}, {rows}, {cols}] -> [{batch}, {cols}, {rows}] in {tile}x{tile} tiles",
             f"__kernel void KERNEL(__global const {T}* restrict in0, __global {T}* restrict out0) {{",
             f"    const {idx} g = get_global_id(0);", f"    if (g >= {items}) return;",
             f"    const {idx} tc = g % {nt_c}, tr = (g / {nt_c}) % {nt_r}, b = g / {nt_c * nt_r};",
             f"    __global const {T}* s = in0 + b * {rows * cols} + tr * {tile * cols} + tc * {tile};",
             f"    __global {T}* d = out0 + b * {rows * cols} + tc * {tile * rows} + tr * {tile};"]
    lines += [f"    const {T}{tile} a{i} = vload{tile}(0, s + {i * cols});" for i in range(tile)]
    for j in range(tile):
        col = ", ".join(f"a{i}.s{lanes[j]}" for i in range(tile))
        lines.append(f"    vstore{tile}(({T}{tile})({col}), 0, d + {j * rows});")
    lines.append("}")
    k = launch_1d(items)
    return Kernel("\n".join(lines) + "\n", k.global_size, k.local_size)


def transpose_kernel(what: str, shape: Sequence[int], perm: Sequence[int], t: TensorType, idx: str) -> Kernel:
    cshape, cperm = collapse_perm(shape, perm)
    if len(cperm) in (2, 3) and cperm[-2:] == [len(cperm) - 1, len(cperm) - 2] and t.itemsize <= 4:
        rows, cols = cshape[-2:]
        if rows % 8 == 0 and cols % 8 == 0:
            return _tile_transpose(what, math.prod(cshape[:-2]), rows, cols, t, idx)
    return copy_kernel(what, transpose_spec(cshape, cperm), t, idx)


@template("transpose")
def transpose(ctx: Ctx) -> Lowered:
    x, y, idx = _prep(ctx)
    perm = [int(p) for p in ctx.attr("perm")]
    what = f"transpose perm={perm}: out0[i] = in0[i permuted] ({list(x.dims)} -> {list(y.dims)})"
    return one_kernel(transpose_kernel(what, x.dims, perm, x, idx))


@template("depth_to_space", "space_to_depth")
def depth_space(ctx: Ctx) -> Lowered:
    x, y, idx = _prep(ctx)
    b, mode = int(ctx.attr("blocksize")), ctx.attr("mode")
    n, c, h, w = x.dims
    if ctx.op_name == "depth_to_space":
        view = [n, b, b, c // (b * b), h, w] if mode == "DCR" else [n, c // (b * b), b, b, h, w]
        perm = [0, 3, 4, 1, 5, 2] if mode == "DCR" else [0, 1, 4, 2, 5, 3]
    else:
        view = [n, c, h // b, b, w // b, b]
        perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
    what = f"{ctx.op_name} blocksize={b} {mode}: {list(x.dims)} -> {list(y.dims)} as a 6-D transpose {perm}"
    return one_kernel(transpose_kernel(what, view, perm, x, idx))


# concat / split / slice ------------------------------------------------------------------------------------
@template("concat")
def concat(ctx: Ctx) -> Lowered:
    _, y, idx = _prep(ctx)
    from ....ir.ops.registry import norm_axis

    axis = norm_axis(int(ctx.attr("axis")), y.rank)
    outer, after = math.prod(y.dims[:axis]), math.prod(y.dims[axis + 1:])
    row = y.dims[axis] * after
    kernels, off = [], 0
    for i, x in enumerate(ctx.operands):
        inner = x.dims[axis] * after
        if inner and outer:
            spec = CopySpec([outer, inner], [[Term(inner)], [Term(1)]], dst=[row, 1], dst_base=off * after)
            what = f"concat axis={axis}: operand {i} {list(x.dims)} into out0 at offset {off}"
            kernels.append(copy_kernel(what, spec, x, idx, src=f"in{i}"))
        off += x.dims[axis]
    if not kernels:
        kernels.append(copy_kernel("concat", CopySpec([0], [[Term(1)]]), y, idx))
    return Lowered(kernels)


@template("split")
def split(ctx: Ctx) -> Lowered:
    x, _, idx = _prep(ctx)
    from ....ir.ops.registry import norm_axis

    axis = norm_axis(int(ctx.attr("axis")), x.rank)
    outer, after = math.prod(x.dims[:axis]), math.prod(x.dims[axis + 1:])
    row = x.dims[axis] * after
    kernels, off = [], 0
    for j, y in enumerate(ctx.results):
        inner = y.dims[axis] * after
        spec = CopySpec([outer, inner], [[Term(row)], [Term(1)]], src_base=off * after)
        what = f"split axis={axis}: result {j} {list(y.dims)} from offset {off}"
        kernels.append(copy_kernel(what, spec, x, idx, dst=f"out{j}"))
        off += y.dims[axis]
    return Lowered(kernels)


@template("slice")
def slice_(ctx: Ctx) -> Lowered:
    x, y, idx = _prep(ctx)
    from ....ir.ops.shape import _resolve, _slice_axes

    strides = row_major_strides(x.dims)
    terms, base = [[Term(s)] for s in strides], 0
    for axis, start, end, step in _slice_axes(ctx.sig, x.rank):
        s, _, _ = _resolve(start, end, step, x.dims[axis])
        if y.dims[axis]:
            base += s * strides[axis]
        terms[axis] = [Term(step * strides[axis])]
    spec = CopySpec(list(y.dims), terms, src_base=base)
    what = f"slice: {list(x.dims)} -> {list(y.dims)} (starts/steps baked into the offset)"
    return one_kernel(copy_kernel(what, spec, x, idx))


# expand / tile / pad --------------------------------------------------------------------------------------
@template("expand")
def expand(ctx: Ctx) -> Lowered:
    x, y, idx = _prep(ctx)
    lead = y.rank - x.rank
    strides = row_major_strides(x.dims)
    terms = [[Term(strides[d - lead])] if d >= lead and x.dims[d - lead] != 1 else [] for d in range(y.rank)]
    what = f"expand: broadcast {list(x.dims)} to {list(y.dims)}"
    return one_kernel(copy_kernel(what, CopySpec(list(y.dims), terms), x, idx))


@template("tile")
def tile(ctx: Ctx) -> Lowered:
    x, y, idx = _prep(ctx)
    reps = [int(r) for r in ctx.attr("repeats")]
    strides = row_major_strides(x.dims)
    terms = [[] if d == 1 else [Term(s)] if r == 1 else [Term(s, "mod", d)]
             for d, r, s in zip(x.dims, reps, strides, strict=True)]
    what = f"tile repeats={reps}: out0[c] = in0[c % {list(x.dims)}]"
    return one_kernel(copy_kernel(what, CopySpec(list(y.dims), terms), x, idx))


@template("pad")
def pad(ctx: Ctx) -> Lowered:
    x, y, idx = _prep(ctx)
    mode, pads = ctx.attr("mode"), [int(p) for p in ctx.attr("pads")]
    strides = row_major_strides(x.dims)
    terms: list[list[Term]] = []
    cond: list[tuple[frozenset[int], str]] = []
    base = 0
    for d, (n, s) in enumerate(zip(x.dims, strides, strict=True)):
        b, e = pads[d], pads[x.rank + d]
        lo, kept, pb = -min(b, 0), n + min(b, 0) + min(e, 0), max(b, 0)
        base += (lo - pb) * s  # coordinate c reads kept element c - pb, i.e. input element lo + c - pb
        if max(b, 0) == 0 and max(e, 0) == 0:
            terms.append([Term(s)])
        elif mode == "constant":
            terms.append([Term(s)])
            cond.append((frozenset([d]), f"c{d} >= {pb} && c{d} < {pb + kept}" if pb else f"c{d} < {kept}"))
        elif mode == "reflect":  # j = c - pb; mirror j < 0 to -j and j >= kept to 2 (kept - 1) - j
            j = f"(@ - {pb})" if pb else "@"
            mirror = f"{j} < 0 ? -{j} : {j} >= {kept} ? {2 * (kept - 1)} - {j} : {j}"
            terms.append([Term(s, "raw", expr=f"{pb} + ({mirror})")])
        else:  # edge
            j = f"(@ - {pb})" if pb else "@"
            terms.append([Term(s, "raw", expr=f"{pb} + clamp({j}, 0, {kept - 1})")])
    spec = CopySpec(list(y.dims), terms, src_base=base, cond=cond, fill=literal(ctx.attr("value"), x))
    return one_kernel(copy_kernel(f"pad {mode} pads={pads}: {list(x.dims)} -> {list(y.dims)}", spec, x, idx))


# pack / unpack ----------------------------------------------------------------------------------------------
def _layout(ctx: Ctx, rank: int) -> tuple[list[int], list[int], list[int]]:
    dims = [int(d) for d in ctx.attr("inner_dims_pos")]
    tiles = [int(t) for t in ctx.attr("inner_tiles")]
    perm = [int(p) for p in ctx.attr("outer_dims_perm")] or list(range(rank))
    return dims, tiles, perm


def pack_spec(shape: Sequence[int], dims: list[int], tiles: list[int], perm: list[int], out: Sequence[int],
              fill: str) -> CopySpec:
    """The copy of `pack`: out[outer dims by perm, tiles] = x[outer * tile + inner], fill past the tails."""
    rank, strides = len(shape), row_major_strides(shape)
    tile_of = dict(zip(dims, tiles, strict=True))
    terms = [[Term(strides[p] * tile_of.get(p, 1))] for p in perm] + [[Term(strides[p])] for p in dims]
    cond = [(frozenset([perm.index(p), rank + k]), f"c{perm.index(p)} * {t} + c{rank + k} < {shape[p]}")
            for k, (p, t) in enumerate(zip(dims, tiles, strict=True)) if shape[p] % t]
    return CopySpec(list(out), terms, cond=cond, fill=fill)


@template("pack")
def pack(ctx: Ctx) -> Lowered:
    x, y, idx = _prep(ctx)
    dims, tiles, perm = _layout(ctx, x.rank)
    spec = pack_spec(x.dims, dims, tiles, perm, y.dims, literal(ctx.attr("padding_value"), x))
    what = (f"pack inner_dims_pos={dims} inner_tiles={tiles} outer_dims_perm={perm}: {list(x.dims)} -> "
            f"{list(y.dims)}")
    return one_kernel(copy_kernel(what, spec, x, idx))


@template("unpack")
def unpack(ctx: Ctx) -> Lowered:
    x, y, idx = _prep(ctx)
    dims, tiles, perm = _layout(ctx, y.rank)
    pstrides = row_major_strides(x.dims)
    terms = []
    for p in range(y.rank):
        j = perm.index(p)
        if p in dims:
            k = dims.index(p)
            terms.append([Term(pstrides[j], "div", tiles[k]), Term(pstrides[y.rank + k], "mod", tiles[k])])
        else:
            terms.append([Term(pstrides[j])])
    what = (f"unpack inner_dims_pos={dims} inner_tiles={tiles} outer_dims_perm={perm}: {list(x.dims)} -> "
            f"{list(y.dims)} (tile tails dropped)")
    return one_kernel(copy_kernel(what, CopySpec(list(y.dims), terms), x, idx))
