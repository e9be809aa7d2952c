"""Shape ops: reshape, transpose, concat, split, slice, gather, gather_elements, pad, expand, tile,
depth_to_space and space_to_depth.

They move data and compute nothing, so every cost has 0 FLOPs; the bytes are those of a materialized copy,
except reshape, which is a view of row-major data and costs nothing. Parameters that ONNX passes as inputs
(Reshape's shape, Slice's starts/ends, Pad's pads, ...) are static attributes here: the frontend folds them,
and static shapes are what the planner and the kernels need. Dynamic dims (`None`) flow through where the
result is still defined without them; checks on a dynamic dim wait until it is known.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..symbolic import Sym, floordiv, format_dim, smax, smin
from ..types import TensorType
from .registry import Cost, OpDef, OpError, Sig, at_least, attr, broadcast_shapes, check, norm_axis, register

PURE = frozenset({"pure"})
INDEX_TYPES = ("i32", "i64")
PAD_MODES = ("constant", "reflect", "edge")
BLOCK_MODES = ("DCR", "CRD")
_INT_MAX_ENDS = (2**31 - 1, 2**63 - 1)


def _ints(sig: Sig, name: str) -> list[int]:
    value = sig[name]
    check(isinstance(value, list | tuple), f"'{name}' must be a list of ints, got {value!r}")
    return [int(v) for v in value]


def _dims(sig: Sig, name: str) -> list[Any]:
    """A `dims` attribute: ints and symbolic dims."""
    value = sig[name]
    check(isinstance(value, list | tuple), f"'{name}' must be a list of ints, got {value!r}")
    return [v if isinstance(v, Sym) else int(v) for v in value]


def _choice(sig: Sig, name: str, allowed: tuple[str, ...]) -> str:
    value = sig[name]
    check(value in allowed, f"'{name}' must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _fmt(shape: Sequence[Any]) -> str:
    return "[" + ", ".join(format_dim(d) for d in shape) + "]"


def _copy_cost(sig: Sig) -> Cost:
    """Read every operand once, write every result once."""
    return Cost(0, sum(t.nbytes for t in sig.operands), sum(t.nbytes for t in sig.results))


def _touched_cost(sig: Sig) -> Cost:
    """A copy that reads only what it writes (slice): strided reads of the kept elements."""
    w = sum(t.nbytes for t in sig.results)
    return Cost(0, w, w)


# reshape -------------------------------------------------------------------------------------------------
def _reshape_infer(sig: Sig) -> list[TensorType]:
    x, shape = sig.operands[0], _dims(sig, "shape")
    check(all(isinstance(d, Sym) or d >= -1 for d in shape), f"shape {_fmt(shape)} has a dim below -1")
    holes = sum(1 for d in shape if d == -1)
    check(holes <= 1, f"shape {_fmt(shape)} has {holes} -1 dims; at most one can be inferred")
    known: Any = 1
    for d in shape:
        known *= d if d != -1 else 1
    if any(d is None for d in x.shape) or (not x.is_static and not holes):
        return [x.with_shape(tuple(None if d == -1 else d for d in shape))]
    if not x.is_static:  # symbolic: the -1 is what the other dims leave of the element count
        n: Any = 1
        for d in x.shape:
            n *= d
        if known == 0:
            return [x.with_shape(tuple(None if d == -1 else d for d in shape))]
        return [x.with_shape(tuple(floordiv(n, known) if d == -1 else d for d in shape))]
    if not all(type(d) is int for d in shape):
        return [x.with_shape(tuple(shape))]
    n = x.numel
    if holes:
        check(known != 0, f"cannot infer the -1 in {shape}: the other dims hold 0 elements")
        check(n % known == 0, f"cannot reshape {n} elements into {shape}")
        shape = [n // known if d == -1 else d for d in shape]
    else:
        check(known == n, f"cannot reshape {n} elements into {shape}")
    return [x.with_shape(shape)]


register(OpDef("reshape", ("x",), infer=_reshape_infer,
               reference=lambda sig, x: np.reshape(x, _ints(sig, "shape")), attrs={"shape": attr("dims")},
               traits=PURE, cost=lambda sig: Cost(0, 0, 0),
               doc="Reinterprets row-major data with a static shape; one -1 is inferred, 0 is a real empty "
                   "dim (ONNX's 0 = 'copy this dim' is resolved by the frontend)."))


# transpose -----------------------------------------------------------------------------------------------
def _transpose_infer(sig: Sig) -> list[TensorType]:
    x, perm = sig.operands[0], _ints(sig, "perm")
    check(sorted(perm) == list(range(x.rank)), f"perm {perm} is not a permutation of 0..{x.rank - 1}")
    return [x.with_shape(tuple(x.shape[p] for p in perm))]


register(OpDef("transpose", ("x",), infer=_transpose_infer,
               reference=lambda sig, x: np.transpose(x, _ints(sig, "perm")), attrs={"perm": attr("ints")},
               traits=PURE, cost=_copy_cost, doc="Permutes the dims: result dim i is operand dim perm[i]."))


# concat / split ------------------------------------------------------------------------------------------
def _concat_infer(sig: Sig) -> list[TensorType]:
    xs = sig.operands
    check(len(xs) >= 1, "concat needs at least one operand")
    first = xs[0]
    check(first.rank >= 1, f"cannot concat rank-0 tensors ({first})")
    axis = norm_axis(sig["axis"], first.rank)
    dims: list[Any] = list(first.shape)
    for i, t in enumerate(xs[1:], 1):
        check(t.dtype == first.dtype, f"operand {i} has element type {t.dtype}, operand 0 has {first.dtype}")
        check(t.rank == first.rank, f"operand {i} has rank {t.rank}, operand 0 has rank {first.rank}")
        for k, d in enumerate(t.shape):
            if k == axis:
                have = dims[k]
                dims[k] = None if have is None or d is None else have + d
            elif d is not None:
                have = dims[k]
                check(have is None or have == d or isinstance(have, Sym) or isinstance(d, Sym),
                      f"operand {i} has shape {_fmt(t.shape)}, unlike {_fmt(dims)} off axis {axis}")
                if have is None or isinstance(have, Sym) and type(d) is int:
                    dims[k] = d
    return [first.with_shape(tuple(dims))]


register(OpDef("concat", ("inputs*",), infer=_concat_infer,
               reference=lambda sig, *xs: np.concatenate(xs, axis=sig["axis"]), attrs={"axis": attr("int")},
               traits=PURE, cost=_copy_cost,
               doc="Joins operands of one dtype and rank along `axis`; the other dims must agree."))


def _split_infer(sig: Sig) -> list[TensorType]:
    x, sizes = sig.operands[0], _ints(sig, "sizes")
    check(x.rank >= 1, f"cannot split a rank-0 tensor ({x})")
    axis = norm_axis(sig["axis"], x.rank)
    check(len(sizes) >= 1, "sizes must not be empty")
    check(all(s >= 0 for s in sizes), f"sizes {sizes} has a negative size")
    d = x.shape[axis]
    check(type(d) is not int or sum(sizes) == d,
          f"sizes {sizes} sum to {sum(sizes)}, but dim {axis} has size {d}")
    return [x.with_shape(tuple(s if k == axis else e for k, e in enumerate(x.shape))) for s in sizes]


def _split_ref(sig: Sig, x: np.ndarray) -> list[np.ndarray]:
    cuts = np.cumsum(_ints(sig, "sizes"))[:-1]
    return np.split(x, cuts, axis=sig["axis"])


register(OpDef("split", ("x",), infer=_split_infer, reference=_split_ref, results="*",
               attrs={"axis": attr("int", 0), "sizes": attr("ints")}, traits=PURE, cost=_copy_cost,
               doc="Cuts `x` along `axis` into consecutive pieces of the given sizes (one result per size)."))


# slice ---------------------------------------------------------------------------------------------------
def _slice_axes(sig: Sig, rank: int) -> list[tuple[int, int, int, int]]:
    """(axis, start, end, step) per sliced axis, as written (not yet resolved against the dim)."""
    starts, ends = _dims(sig, "starts"), _dims(sig, "ends")
    axes, steps = _ints(sig, "axes"), _ints(sig, "steps")
    n = len(starts)
    check(len(ends) == n, f"starts has {n} entries but ends has {len(ends)}")
    if not axes:
        check(n <= rank, f"{n} starts for a rank-{rank} operand")
        axes = list(range(n))
    check(len(axes) == n, f"starts has {n} entries but axes has {len(axes)}")
    steps = steps or [1] * n
    check(len(steps) == n, f"starts has {n} entries but steps has {len(steps)}")
    check(all(s != 0 for s in steps), f"steps {steps} has a 0 step")
    axes = [norm_axis(a, rank) for a in axes]
    check(len(set(axes)) == n, f"axes {axes} repeat an axis")
    return list(zip(axes, starts, ends, steps, strict=True))


def _resolve(start: Any, end: Any, step: int, d: Any) -> tuple[Any, Any, Any]:
    """ONNX Slice: negative start/end count from the end, then clamp; returns (start, end, count).

    An end of INT32/INT64 max means "to the end in the step's direction", as onnxruntime and numpy's
    `None` read it; the spec's clamp alone would make a backward slice to INT64 max empty.
    """
    start = start + d if type(start) is int and start < 0 else start
    if type(end) is int and end in _INT_MAX_ENDS:
        end = d if step > 0 else -1
    elif type(end) is int and end < 0:
        end += d
    if step > 0:
        start, end = smin(smax(start, 0), d), smin(smax(end, 0), d)
        return start, end, smax(0, -floordiv(-(end - start), step))
    start, end = smin(smax(start, 0), d - 1), smin(smax(end, -1), d - 1)
    return start, end, smax(0, -floordiv(-(start - end), -step))


def _slice_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    dims = list(x.shape)
    for axis, start, end, step in _slice_axes(sig, x.rank):
        d = dims[axis]
        dims[axis] = None if d is None else _resolve(start, end, step, d)[2]
    return [x.with_shape(tuple(dims))]


def _slice_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    index = [slice(None)] * x.ndim
    for axis, start, end, step in _slice_axes(sig, x.ndim):
        s, e, _ = _resolve(start, end, step, x.shape[axis])
        index[axis] = slice(s, None if e < 0 else e, step)  # e == -1: run past index 0 (not "from the end")
    return x[tuple(index)]


register(OpDef("slice", ("x",), infer=_slice_infer, reference=_slice_ref,
               attrs={"starts": attr("dims"), "ends": attr("dims"), "axes": attr("ints", []),
                      "steps": attr("ints", [])},
               traits=PURE, cost=_touched_cost,
               doc="ONNX Slice with static parameters: negative starts/ends add the dim, out-of-range values "
                   "clamp (INT max ends mean 'to the end'), negative steps walk backwards. Empty axes = the "
                   "leading dims."))


# gather / gather_elements --------------------------------------------------------------------------------
def _wrap_indices(indices: np.ndarray, d: int) -> np.ndarray:
    """Negative indices count from the end; out-of-range ones are an error, as in onnxruntime."""
    idx = indices.astype(np.int64, copy=False)
    if idx.size:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < -d or hi >= d:
            bad = lo if lo < -d else hi
            raise OpError(f"index {bad} is out of range for a dim of size {d}")
    return np.where(idx < 0, idx + d, idx)


def _gather_infer(sig: Sig) -> list[TensorType]:
    data, indices = sig.operands
    check(indices.dtype in INDEX_TYPES, f"indices must be i32 or i64, got {indices}")
    check(data.rank >= 1, f"cannot gather from a rank-0 tensor ({data})")
    axis = norm_axis(sig["axis"], data.rank)
    return [data.with_shape(data.shape[:axis] + indices.shape + data.shape[axis + 1:])]


def _gather_ref(sig: Sig, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    axis = norm_axis(sig["axis"], data.ndim)
    return np.take(data, _wrap_indices(indices, data.shape[axis]), axis=axis)


def _gather_cost(sig: Sig) -> Cost:
    """Reads the gathered rows (not all of `data`) and the indices."""
    out = sig.results[0].nbytes
    return Cost(0, out + sig.operands[1].nbytes, out)


register(OpDef("gather", ("data", "indices"), infer=_gather_infer, reference=_gather_ref,
               attrs={"axis": attr("int", 0)}, traits=PURE, cost=_gather_cost,
               doc="ONNX Gather: picks slices of `data` along `axis`; the result has shape "
                   "data[:axis] + indices + data[axis+1:]."))


def _gather_elements_infer(sig: Sig) -> list[TensorType]:
    data, indices = sig.operands
    check(indices.dtype in INDEX_TYPES, f"indices must be i32 or i64, got {indices}")
    check(data.rank >= 1, f"cannot gather from a rank-0 tensor ({data})")
    check(indices.rank == data.rank, f"indices has rank {indices.rank}, data has rank {data.rank}")
    axis = norm_axis(sig["axis"], data.rank)
    for k, (i, d) in enumerate(zip(indices.shape, data.shape, strict=True)):
        check(k == axis or i is None or d is None or i <= d,
              f"indices dim {k} has size {i}, larger than data's {d}")
    return [data.with_shape(indices.shape)]


def _gather_elements_ref(sig: Sig, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    axis = norm_axis(sig["axis"], data.ndim)
    grid: list[np.ndarray] = list(np.indices(indices.shape, sparse=True))
    grid[axis] = _wrap_indices(indices, data.shape[axis])
    return data[tuple(grid)]


register(OpDef("gather_elements", ("data", "indices"), infer=_gather_elements_infer,
               reference=_gather_elements_ref, attrs={"axis": attr("int", 0)}, traits=PURE, cost=_gather_cost,
               doc="ONNX GatherElements: result[i..] = data[i.., with the `axis` index taken from "
                   "indices[i..]]."))


# pad -----------------------------------------------------------------------------------------------------
def _pad_pairs(sig: Sig, rank: int) -> list[tuple[int, int]]:
    pads = _ints(sig, "pads")
    check(len(pads) == 2 * rank, f"pads has {len(pads)} entries, a rank-{rank} operand needs {2 * rank}")
    return list(zip(pads[:rank], pads[rank:], strict=True))


def _pad_infer(sig: Sig) -> list[TensorType]:
    x, mode = sig.operands[0], _choice(sig, "mode", PAD_MODES)
    dims: list[Any] = []
    for k, ((b, e), d) in enumerate(zip(_pad_pairs(sig, x.rank), x.shape, strict=True)):
        if d is None:
            dims.append(None)
            continue
        if isinstance(d, Sym):
            dims.append(d + b + e)
            continue
        check(d + b + e >= 0, f"pads {b} and {e} shrink dim {k} of size {d} below 0")
        kept = d + min(b, 0) + min(e, 0)  # negative pads crop first
        grow = max(b, 0, e)
        if mode == "reflect" and grow:
            check(grow < kept, f"reflect pad {grow} on dim {k} needs a dim larger than it, got {kept}")
        if mode == "edge" and grow:
            check(kept > 0, f"edge pad on dim {k} needs a non-empty dim")
        dims.append(d + b + e)
    return [x.with_shape(tuple(dims))]


def _pad_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    pairs = _pad_pairs(sig, x.ndim)
    x = x[tuple(slice(-min(b, 0), d + min(e, 0)) for (b, e), d in zip(pairs, x.shape, strict=True))]
    widths = [(max(b, 0), max(e, 0)) for b, e in pairs]
    if sig["mode"] == "constant":
        return np.pad(x, widths, mode="constant", constant_values=np.asarray(sig["value"]).astype(x.dtype))
    return np.pad(x, widths, mode=sig["mode"])


def _pad_cost(sig: Sig) -> Cost:
    """Reads the kept (uncropped) part of `x` once and writes the whole result."""
    x, out = sig.operands[0], sig.results[0]
    kept = x.itemsize
    for (b, e), d in zip(_pad_pairs(sig, x.rank), x.shape, strict=True):
        check(d is not None, f"the cost of pad needs a static operand, got {x}")
        kept *= int(d) + min(b, 0) + min(e, 0)  # type: ignore[arg-type]
    return Cost(0, kept, out.nbytes)


register(OpDef("pad", ("x",), infer=_pad_infer, reference=_pad_ref,
               attrs={"pads": attr("ints"), "mode": attr("str", "constant", allowed=PAD_MODES),
                      "value": attr("float", 0.0)},
               traits=PURE, cost=_pad_cost,
               doc="ONNX Pad with static pads (all begins, then all ends); negative pads crop. `value` fills "
                   "in constant mode; reflect mirrors without repeating the edge; edge repeats it."))


# expand / tile -------------------------------------------------------------------------------------------
def _expand_infer(sig: Sig) -> list[TensorType]:
    x, shape = sig.operands[0], _dims(sig, "shape")
    check(all(at_least(d, 0) for d in shape), f"shape {_fmt(shape)} has a negative dim")
    try:
        out = broadcast_shapes(x.shape, tuple(shape))
    except OpError:
        raise OpError(f"cannot expand shape {_fmt(x.shape)} to {_fmt(shape)}") from None
    return [x.with_shape(out)]


def _expand_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    """A copy: broadcast_to's read-only zero-stride view would surprise a consumer that writes in place."""
    return np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(_ints(sig, "shape")))).copy()


register(OpDef("expand", ("x",), infer=_expand_infer, reference=_expand_ref,
               attrs={"shape": attr("dims")}, traits=PURE, cost=_copy_cost,
               doc="ONNX Expand: broadcasts `x` and `shape` both ways (a 1 in `shape` keeps x's dim)."))


def _tile_infer(sig: Sig) -> list[TensorType]:
    x, reps = sig.operands[0], _ints(sig, "repeats")
    check(len(reps) == x.rank, f"repeats {reps} has {len(reps)} entries, the operand has rank {x.rank}")
    check(all(r >= 0 for r in reps), f"repeats {reps} has a negative entry")
    return [x.with_shape(tuple(0 if r == 0 else None if d is None else d * r
                               for d, r in zip(x.shape, reps, strict=True)))]


register(OpDef("tile", ("x",), infer=_tile_infer, reference=lambda sig, x: np.tile(x, _ints(sig, "repeats")),
               attrs={"repeats": attr("ints")}, traits=PURE, cost=_copy_cost,
               doc="Repeats `x` repeats[i] times along dim i."))


# depth_to_space / space_to_depth -------------------------------------------------------------------------
def _block_checks(sig: Sig, x: TensorType) -> int:
    check(x.rank == 4, f"operand must be a rank-4 NCHW tensor, got {x}")
    _choice(sig, "mode", BLOCK_MODES)
    b = sig["blocksize"]
    check(b >= 1, f"blocksize {b} must be at least 1")
    return b


def _div(d: int | None, b: int, what: str) -> int | None:
    check(d is None or d % b == 0, f"{what} {d} is not a multiple of {b}")
    return None if d is None else d // b


def _mul(d: int | None, b: int) -> int | None:
    return None if d is None else d * b


def _d2s_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    b = _block_checks(sig, x)
    n, c, h, w = x.shape
    return [x.with_shape((n, _div(c, b * b, "channels"), _mul(h, b), _mul(w, b)))]


def _s2d_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    b = _block_checks(sig, x)
    n, c, h, w = x.shape
    return [x.with_shape((n, _mul(c, b * b), _div(h, b, "height"), _div(w, b, "width")))]


def _d2s_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    b = sig["blocksize"]
    n, c, h, w = x.shape
    if sig["mode"] == "DCR":  # channel = (bh * b + bw) * C' + c'
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:  # CRD: channel = c' * b * b + bh * b + bw
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


def _s2d_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    b = sig["blocksize"]
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b)
    y = y.transpose(0, 3, 5, 1, 2, 4) if sig["mode"] == "DCR" else y.transpose(0, 1, 3, 5, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


_BLOCK_ATTRS: dict[str, Any] = {"blocksize": attr("int"), "mode": attr("str", "DCR", allowed=BLOCK_MODES)}

register(OpDef("depth_to_space", ("x",), infer=_d2s_infer, reference=_d2s_ref, attrs=_BLOCK_ATTRS,
               traits=PURE, cost=_copy_cost,
               doc="ONNX DepthToSpace on NCHW: moves blocksize x blocksize channel groups into spatial "
                   "blocks (DCR: depth-column-row channel order, CRD: column-row-depth)."))

register(OpDef("space_to_depth", ("x",), infer=_s2d_infer, reference=_s2d_ref, attrs=_BLOCK_ATTRS,
               traits=PURE, cost=_copy_cost,
               doc="The inverse of depth_to_space with the same mode; DCR is ONNX SpaceToDepth (which has "
                   "no mode)."))
