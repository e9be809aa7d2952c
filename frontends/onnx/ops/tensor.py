"""Converters for ONNX's tensor ops: constants and shapes, reshaping, slicing, gathering and scattering,
padding (reductions are in reduce.py).

Shapes are static at import, so Shape and Size are constants, and every parameter ONNX passes as an input
(Reshape's shape, Slice's starts, Pad's pads, a reduction's axes, ...) must fold to a constant too: the
tessel ops take them as attributes. Ops whose output shape depends on data (NonZero, Unique, Compress,
Range) convert only when what decides the shape is a constant. GatherND, ScatterND, OneHot, Trilu,
ReverseSequence and wrap padding are composed from simpler ops; constant index arithmetic folds away.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ....ir.symbolic import Sym
from ..builder import Builder, ConversionError, Tensor
from ..registry import converter
from ..types import onnx_element_type


def _i64(values: Sequence[int] | np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _norm_axes(axes: Sequence[int], rank: int, what: str = "axis") -> list[int]:
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise ConversionError(f"{what} {a} is out of range for rank {rank}")
        out.append(a % rank)
    return out


def _data_dependent(op: str, what: str) -> ConversionError:
    return ConversionError(f"{op}'s output shape depends on the values of {what}, which are only known at "
                           "run time; tessel needs static shapes (it converts only when they are constants)")


def _axes_from(b: Builder, attr: Sequence[int] | None, given: Tensor | None, since: int) -> list[int] | None:
    """Axes from the attribute before opset `since`, from the (constant) input from then on."""
    if b.opset >= since:
        return None if given is None else given.ints("axes")
    return None if attr is None else list(attr)


# constants and shapes ---------------------------------------------------------------------------------
@converter("Constant")
def Constant(b: Builder, *, value: np.ndarray | None = None, value_float: float | None = None,
             value_floats: list[float] | None = None, value_int: int | None = None,
             value_ints: list[int] | None = None, value_string: str | None = None,
             value_strings: list[str] | None = None, sparse_value: object = None) -> Tensor:
    if value is not None:
        if np.asarray(value).dtype.kind in "OSU":
            raise ConversionError("string constants are unsupported (tessel has no string tensors)")
        return b.const(value)
    if value_float is not None:
        return b.const(np.array(value_float, np.float32))
    if value_floats is not None:
        return b.const(np.array(value_floats, np.float32).reshape(-1))
    if value_int is not None:
        return b.const(np.array(value_int, np.int64))
    if value_ints is not None:
        return b.const(_i64(value_ints).reshape(-1))
    if value_string is not None or value_strings is not None:
        raise ConversionError("string constants are unsupported (tessel has no string tensors)")
    if sparse_value is not None:
        raise ConversionError("sparse_value constants are unsupported")
    raise ConversionError("Constant has no value attribute")


@converter("ConstantOfShape", since=9)
def ConstantOfShape(b: Builder, shape: Tensor, *, value: np.ndarray | None = None) -> Tensor:
    dims = shape.ints("ConstantOfShape's shape")
    fill = np.zeros((), np.float32) if value is None else np.asarray(value).reshape(-1)[:1].reshape(())
    if any(isinstance(d, Sym) for d in dims):  # symbolic sizes: the fill broadcast at run time
        return b.op("expand", [b.const(fill)], {"shape": dims})
    # a zero-stride view: the builder sees a splat and never allocates the whole tensor
    return b.const(np.broadcast_to(fill, dims))


def _sizes(dims: Sequence[object]) -> np.ndarray:
    """Dims as an i64 array, or an object array when some are symbolic."""
    if any(isinstance(d, Sym) for d in dims):
        return np.array(list(dims) or [], dtype=object).reshape(-1)
    return _i64(list(dims)).reshape(-1)


@converter("Shape")
def Shape(b: Builder, x: Tensor, *, start: int = 0, end: int | None = None) -> Tensor:
    dims = list(x.shape)[start:end]
    if any(d is None for d in dims):  # an anonymous dim: read at run time
        return b.op("shape", [x], {"start": start, "end": end})
    return b.const(_sizes(dims), "i64")


@converter("Size")
def Size(b: Builder, x: Tensor) -> Tensor:
    if any(d is None for d in x.shape):
        return b.op("reduce_prod", [b.op("shape", [x])], {"axes": [0], "keepdims": False})
    n = math.prod(x.shape)
    return b.const(_sizes([n]).reshape(()), "i64")


@converter("Range", since=11)
def Range(b: Builder, start: Tensor, limit: Tensor, delta: Tensor) -> Tensor:
    if not (start.is_const and limit.is_const and delta.is_const):
        raise _data_dependent("Range", "start, limit and delta")
    if any(t.is_symbolic for t in (start, limit, delta)):  # a symbolic length: made at run time
        s0, l0, d0 = (t.ints()[0] for t in (start, limit, delta))
        return b.op("range", [], {"start": s0, "limit": l0, "delta": d0, "dtype": start.dtype})
    s, lim, d = (np.asarray(t.const()).reshape(()) for t in (start, limit, delta))
    if d == 0:
        raise ConversionError("Range's delta is 0")
    n = max(int(np.ceil((float(lim) - float(s)) / float(d))), 0)
    if start.type.is_float:
        out = s + np.arange(n, dtype=s.dtype) * d  # start + i * delta in the input type, as the spec says
    else:
        out = int(s) + np.arange(n, dtype=np.int64) * int(d)
    return b.const(out.astype(s.dtype), start.dtype)


@converter("EyeLike", since=9)
def EyeLike(b: Builder, x: Tensor, *, dtype: int | None = None, k: int = 0) -> Tensor:
    if x.rank != 2:
        raise ConversionError(f"EyeLike needs a rank-2 input, got {x.type}")
    out = x.dtype if dtype is None else onnx_element_type(dtype, "EyeLike's dtype")
    return b.const(np.eye(x.shape[0], x.shape[1], k), out)


# reshaping --------------------------------------------------------------------------------------------
@converter("Reshape", since=5)
def Reshape(b: Builder, data: Tensor, shape: Tensor, *, allowzero: int = 0) -> Tensor:
    dims = shape.ints("Reshape's shape")
    if not allowzero:  # 0 copies the input's dim
        dims = [data.shape[i] if d == 0 and i < data.rank else d for i, d in enumerate(dims)]
    if dims.count(-1) == 1:
        known = math.prod(d for d in dims if d != -1)
        if known and math.prod(data.shape) % known == 0:
            dims = [math.prod(data.shape) // known if d == -1 else d for d in dims]
    return b.reshape(data, dims) if -1 not in dims else b.op("reshape", [data], {"shape": dims})


@converter("Flatten")
def Flatten(b: Builder, x: Tensor, *, axis: int = 1) -> Tensor:
    if not -x.rank <= axis <= x.rank:
        raise ConversionError(f"axis {axis} is out of range for rank {x.rank}")
    axis = axis + x.rank if axis < 0 else axis
    return b.reshape(x, [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])])


@converter("Squeeze")
def Squeeze(b: Builder, data: Tensor, axes_input: Tensor | None = None, *,
            axes: list[int] | None = None) -> Tensor:
    given = _axes_from(b, axes, axes_input, 13)
    if not given:
        return b.reshape(data, [d for d in data.shape if d != 1])
    drop = _norm_axes(given, data.rank)
    for a in drop:  # a symbolic dim is taken as 1 here; the func specialized to sizes checks it
        if data.shape[a] != 1 and not isinstance(data.shape[a], Sym):
            raise ConversionError(f"cannot squeeze axis {a} of size {data.shape[a]} "
                                  f"(shape {list(data.shape)})")
    return b.reshape(data, [d for i, d in enumerate(data.shape) if i not in drop])


@converter("Unsqueeze")
def Unsqueeze(b: Builder, data: Tensor, axes_input: Tensor | None = None, *,
              axes: list[int] | None = None) -> Tensor:
    given = _axes_from(b, axes, axes_input, 13)
    if given is None:
        raise ConversionError("Unsqueeze needs axes")
    rank = data.rank + len(given)
    new = _norm_axes(given, rank)
    if len(set(new)) != len(new):
        raise ConversionError(f"axes {given} repeat an axis")
    dims = iter(data.shape)
    return b.reshape(data, [1 if i in new else next(dims) for i in range(rank)])


@converter("Transpose")
def Transpose(b: Builder, x: Tensor, *, perm: list[int] | None = None) -> Tensor:
    perm = list(range(x.rank))[::-1] if perm is None else [int(p) for p in perm]
    if perm == list(range(x.rank)):
        return x
    return b.op("transpose", [x], {"perm": perm})


@converter("Expand", since=8)
def Expand(b: Builder, x: Tensor, shape: Tensor) -> Tensor:
    dims = shape.ints("Expand's shape")
    if len(dims) <= x.rank and all(d in (1, s) for d, s in zip(dims[::-1], x.shape[::-1], strict=False)):
        return x  # expands nothing
    return b.op("expand", [x], {"shape": dims})


@converter("Tile", since=6)
def Tile(b: Builder, x: Tensor, repeats: Tensor) -> Tensor:
    reps = repeats.ints("Tile's repeats")
    return x if reps == [1] * x.rank else b.op("tile", [x], {"repeats": reps})


# slicing, splitting, joining ---------------------------------------------------------------------------
@converter("Slice")
def Slice(b: Builder, data: Tensor, starts_input: Tensor | None = None, ends_input: Tensor | None = None,
          axes_input: Tensor | None = None, steps_input: Tensor | None = None, *,
          starts: list[int] | None = None, ends: list[int] | None = None,
          axes: list[int] | None = None) -> Tensor:
    if b.opset >= 10:
        if starts_input is None or ends_input is None:
            raise ConversionError("Slice needs starts and ends")
        starts, ends = starts_input.ints("Slice's starts"), ends_input.ints("Slice's ends")
        axes = axes_input.ints("Slice's axes") if axes_input is not None else None
        steps = steps_input.ints("Slice's steps") if steps_input is not None else []
    else:
        if starts is None or ends is None:
            raise ConversionError("Slice needs the starts and ends attributes")
        steps = []
    return b.op("slice", [data], {"starts": list(starts), "ends": list(ends), "axes": list(axes or []),
                                  "steps": steps})


@converter("Split")
def Split(b: Builder, x: Tensor, split_input: Tensor | None = None, *, axis: int = 0,
          split: list[int] | None = None, num_outputs: int | None = None) -> list[Tensor]:
    if x.rank == 0:
        raise ConversionError("cannot split a rank-0 tensor")
    d = x.shape[_norm_axes([axis], x.rank)[0]]
    if split_input is not None and (b.opset >= 13 or split is None):  # opset 1 had the input too
        sizes = split_input.ints("Split's split")
    elif split is not None and b.opset < 13:
        sizes = [int(s) for s in split]
    elif num_outputs is not None:  # opset 18: the last chunk may be smaller
        chunk = -(-d // num_outputs)
        sizes = [min(chunk, max(d - i * chunk, 0)) for i in range(num_outputs)]
    else:
        n = b.n_outputs
        if d % n:
            raise ConversionError(f"cannot split a dim of size {d} into {n} equal parts")
        sizes = [d // n] * n
    return b.ops("split", [x], {"axis": axis, "sizes": sizes})


@converter("Concat")
def Concat(b: Builder, *xs: Tensor, axis: int | None = None) -> Tensor:
    if axis is None:
        if b.opset >= 4:
            raise ConversionError("Concat needs the axis attribute")
        axis = 1
    return b.op("concat", list(xs), {"axis": axis}) if len(xs) > 1 or xs[0].rank == 0 else xs[0]


# gathering and scattering -----------------------------------------------------------------------------
@converter("Gather")
def Gather(b: Builder, data: Tensor, indices: Tensor, *, axis: int = 0) -> Tensor:
    return b.op("gather", [data, indices], {"axis": axis})


@converter("GatherElements", since=11)
def GatherElements(b: Builder, data: Tensor, indices: Tensor, *, axis: int = 0) -> Tensor:
    return b.op("gather_elements", [data, indices], {"axis": axis})


def _linear_index(b: Builder, indices: Tensor, dims: Sequence[int]) -> Tensor:
    """Row-major offsets into `dims` of the index tuples along the last axis of `indices` (negative
    components count from the end); the result drops that axis."""
    if indices.dtype not in ("i32", "i64"):
        raise ConversionError(f"indices must be i32 or i64, got {indices.type}")
    idx = b.cast(indices, "i64")
    if not dims:
        return b.const(np.zeros(indices.shape[:-1], np.int64))
    idx = b.op("where", [b.op("less", [idx, b.const(np.int64(0))]), b.op("add", [idx, b.const(_i64(dims))]),
                         idx])
    strides = [math.prod(dims[i + 1:]) for i in range(len(dims))]
    return b.op("reduce_sum", [b.op("mul", [idx, b.const(_i64(strides))])], {"axes": [-1], "keepdims": False})


def _index_depth(data: Tensor, indices: Tensor, batch_dims: int) -> int:
    """How many leading (non-batch) dims of `data` one index tuple addresses, checked."""
    if indices.rank < 1 or not 0 <= batch_dims < min(indices.rank, data.rank + 1):
        raise ConversionError(f"indices {indices.type} and batch_dims {batch_dims} do not fit data "
                              f"{data.type}")
    m = indices.shape[-1]
    if batch_dims + m > data.rank or indices.shape[:batch_dims] != data.shape[:batch_dims]:
        raise ConversionError(f"index tuples of length {m} (batch_dims {batch_dims}) do not fit data "
                              f"{data.type}")
    return m


@converter("GatherND", since=11)
def GatherND(b: Builder, data: Tensor, indices: Tensor, *, batch_dims: int = 0) -> Tensor:
    # data flattened to [batch * indexed positions, slice...], gathered at each tuple's offset (a tuple
    # with one component out of range but a valid offset is not caught, unlike onnxruntime)
    m = _index_depth(data, indices, batch_dims)
    batch, indexed = data.shape[:batch_dims], data.shape[batch_dims:batch_dims + m]
    rest = data.shape[batch_dims + m:]
    per_batch = math.prod(indexed)
    lin = _linear_index(b, indices, indexed)
    if batch_dims:
        offsets = (np.arange(math.prod(batch), dtype=np.int64) * per_batch).reshape(
            tuple(batch) + (1,) * (indices.rank - 1 - batch_dims))
        lin = b.op("add", [lin, b.const(offsets)])
    flat = b.reshape(data, [math.prod(batch) * per_batch, *rest])
    return b.op("gather", [flat, lin], {"axis": 0})


@converter("ScatterElements", since=11)
def ScatterElements(b: Builder, data: Tensor, indices: Tensor, updates: Tensor, *, axis: int = 0,
                    reduction: str = "none") -> Tensor:
    return b.op("scatter_elements", [data, indices, updates], {"axis": axis, "reduction": reduction})


@converter("Scatter", since=9)
def Scatter(b: Builder, data: Tensor, indices: Tensor, updates: Tensor, *, axis: int = 0) -> Tensor:
    return b.op("scatter_elements", [data, indices, updates], {"axis": axis})


@converter("ScatterND", since=11)
def ScatterND(b: Builder, data: Tensor, indices: Tensor, updates: Tensor, *,
              reduction: str = "none") -> Tensor:
    # a scatter_elements on axis 0 of data flattened to [indexed positions, slice elements]
    m = _index_depth(data, indices, 0)
    if updates.shape != indices.shape[:-1] + data.shape[m:]:
        raise ConversionError(f"updates {updates.type} must have shape "
                              f"{list(indices.shape[:-1] + data.shape[m:])}")
    positions, per_slice = math.prod(data.shape[:m]), math.prod(data.shape[m:])
    k = math.prod(indices.shape[:-1])
    lin = b.reshape(_linear_index(b, indices, data.shape[:m]), [k, 1])
    lin = b.op("expand", [lin], {"shape": [k, per_slice]})
    out = b.op("scatter_elements", [b.reshape(data, [positions, per_slice]), lin,
                                    b.reshape(updates, [k, per_slice])], {"axis": 0, "reduction": reduction})
    return b.reshape(out, list(data.shape))


@converter("Compress", since=9)
def Compress(b: Builder, x: Tensor, condition: Tensor, *, axis: int | None = None) -> Tensor:
    if not condition.is_const:
        raise _data_dependent("Compress", "condition")
    keep = np.nonzero(np.asarray(condition.const()).reshape(-1))[0].astype(np.int64)
    if axis is None:
        x, axis = b.reshape(x, [math.prod(x.shape)]), 0
    return b.op("gather", [x, b.const(keep)], {"axis": axis})


@converter("NonZero", since=9)
def NonZero(b: Builder, x: Tensor) -> Tensor:
    if not x.is_const:
        raise _data_dependent("NonZero", "its input")
    a = np.asarray(x.const())
    if a.ndim == 0:
        return b.const(np.zeros((0, int(bool(a))), np.int64))
    return b.const(np.array(np.nonzero(a), dtype=np.int64).reshape(a.ndim, -1))


@converter("Unique", since=11)
def Unique(b: Builder, x: Tensor, *, axis: int | None = None, sorted: int = 1) -> list[Tensor]:
    if not x.is_const:
        raise _data_dependent("Unique", "its input")
    a = np.asarray(x.const())
    if axis is None:
        a = a.reshape(-1)
    y, first, inverse, counts = np.unique(a, return_index=True, return_inverse=True, return_counts=True,
                                          axis=None if axis is None else axis)
    inverse = inverse.reshape(-1)
    if not sorted:  # order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y = np.take(a, first[order], axis=0 if axis is None else axis)
        first, inverse, counts = first[order], rank[inverse], counts[order]
    return [b.const(y, x.dtype)] + [b.const(np.asarray(v, np.int64)) for v in (first, inverse, counts)]


# padding ----------------------------------------------------------------------------------------------
def _wrap_pad(b: Builder, x: Tensor, pads: list[int]) -> Tensor:
    """Wrap mode: crop negative pads, then gather each padded axis at (i mod size) of what is left."""
    r = x.rank
    for a in range(r):
        lo, hi = pads[a], pads[a + r]
        if lo == 0 and hi == 0:
            continue
        if type(x.shape[a]) is not int:
            raise ConversionError(f"wrap padding of axis {a}, of symbolic size {x.shape[a]}, gathers a "
                                  "static index list: it needs a static size (give it with --input-shape)")
        start, kept = max(-lo, 0), x.shape[a] - max(-lo, 0) - max(-hi, 0)
        if kept <= 0 and (lo > 0 or hi > 0):
            raise ConversionError(f"wrap padding needs a non-empty axis {a}")
        idx = start + np.arange(-max(lo, 0), kept + max(hi, 0)) % max(kept, 1)
        x = b.op("gather", [x, b.const(idx.astype(np.int64))], {"axis": a})
    return x


@converter("Pad")
def Pad(b: Builder, x: Tensor, pads_input: Tensor | None = None, value_input: Tensor | None = None,
        axes_input: Tensor | None = None, *, mode: str = "constant", pads: list[int] | None = None,
        paddings: list[int] | None = None, value: float = 0.0) -> Tensor:
    r = x.rank
    if b.opset >= 11:
        if pads_input is None:
            raise ConversionError("Pad needs pads")
        pads = pads_input.ints("Pad's pads")
        value = value_input.floats("Pad's constant_value")[0] if value_input is not None else 0.0
        if axes_input is not None:  # opset 18: pads for the named axes only
            axes = _norm_axes(axes_input.ints("Pad's axes"), r)
            full = [0] * (2 * r)
            for i, a in enumerate(axes):
                full[a], full[a + r] = pads[i], pads[i + len(axes)]
            pads = full
    else:
        pads = pads if b.opset >= 2 else paddings
        if pads is None:
            raise ConversionError("Pad needs the pads attribute")
    pads = [int(p) for p in pads]
    if mode == "wrap":
        return _wrap_pad(b, x, pads)
    if mode not in ("constant", "reflect", "edge"):
        raise ConversionError(f"Pad mode '{mode}' is unsupported (constant, reflect, edge, wrap)")
    if not any(pads):
        return x
    return b.op("pad", [x], {"pads": pads, "mode": mode, "value": float(value)})


# index and triangle ops -------------------------------------------------------------------------------
@converter("CumSum", since=11)
def CumSum(b: Builder, x: Tensor, axis: Tensor, *, exclusive: int = 0, reverse: int = 0) -> Tensor:
    return b.op("cumsum", [x], {"axis": axis.ints("CumSum's axis")[0], "exclusive": bool(exclusive),
                                "reverse": bool(reverse)})


@converter("Trilu", since=14)
def Trilu(b: Builder, x: Tensor, k: Tensor | None = None, *, upper: int = 1) -> Tensor:
    if x.rank < 2:
        raise ConversionError(f"Trilu needs rank >= 2, got {x.type}")
    diag = k.ints("Trilu's k")[0] if k is not None else 0
    n, m = x.shape[-2:]
    rows, cols = np.arange(n)[:, None], np.arange(m)[None, :]
    keep = cols - rows >= diag if upper else cols - rows <= diag
    return b.op("where", [b.const(keep), x, b.const(np.zeros((), x.type.np_dtype))])


@converter("TopK")
def TopK(b: Builder, x: Tensor, k_input: Tensor | None = None, *, axis: int = -1, largest: int = 1,
         sorted: int = 1, k: int | None = None) -> list[Tensor]:
    count = k_input.ints("TopK's k")[0] if b.opset >= 10 and k_input is not None else k
    if count is None:
        raise ConversionError("TopK needs k")
    return b.ops("top_k", [x], {"k": int(count), "axis": axis, "largest": bool(largest),
                                "sorted": bool(sorted)})


@converter("OneHot", since=9)
def OneHot(b: Builder, indices: Tensor, depth: Tensor, values: Tensor, *, axis: int = -1) -> Tensor:
    n = int(depth.floats("OneHot's depth")[0])
    rank = indices.rank + 1
    axis = _norm_axes([axis], rank)[0]
    idx = b.cast(indices, "i64")
    negative = b.op("less", [idx, b.const(np.int64(0))])
    idx = b.op("where", [negative, b.op("add", [idx, b.const(np.int64(n))]), idx])
    idx = b.reshape(idx, [*indices.shape[:axis], 1, *indices.shape[axis:]])
    positions = np.arange(n, dtype=np.int64).reshape([n if i == axis else 1 for i in range(rank)])
    hot = b.op("equal", [idx, b.const(positions)])
    flat = b.reshape(values, [2])
    off, on = (b.reshape(b.op("slice", [flat], {"starts": [i], "ends": [i + 1]}), []) for i in (0, 1))
    return b.op("where", [hot, on, off])


@converter("ReverseSequence", since=10)
def ReverseSequence(b: Builder, x: Tensor, sequence_lens: Tensor, *, batch_axis: int = 1,
                    time_axis: int = 0) -> Tensor:
    # element (t, b) reads t' = lens[b] - 1 - t for t < lens[b], else t: a gather_elements along time
    r, t_len, n = x.rank, x.shape[time_axis], x.shape[batch_axis]
    t = b.const(np.arange(t_len, dtype=np.int64).reshape([t_len if i == time_axis else 1 for i in range(r)]))
    lens = b.reshape(b.cast(sequence_lens, "i64"), [n if i == batch_axis else 1 for i in range(r)])
    flipped = b.op("sub", [b.op("sub", [lens, b.const(np.int64(1))]), t])
    idx = b.op("where", [b.op("less", [t, lens]), flipped, t])
    idx = b.op("expand", [idx], {"shape": list(x.shape)})
    return b.op("gather_elements", [x, idx], {"axis": time_axis})
