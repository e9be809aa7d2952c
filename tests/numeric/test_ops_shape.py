"""The shape ops of ir/ops/shape.py against onnxruntime, and infer's rejection of bad operands.

ONNX passes Reshape's shape, Slice's starts/ends/axes/steps, Pad's pads, Expand's shape, Tile's repeats and
Split's split as int64 inputs; tessel takes them as attributes, so each case feeds ONNX the arrays and tessel
the same values via `attrs`.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tessel.ir.ops.registry import OpError, get_op
from tessel.ir.types import TensorType

from tests.numeric.ort_util import check_op, op_cost, rand, run_tessel

I64_MAX, I64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def data(shape: tuple[int, ...], dtype: str = "float32", seed: int = 0) -> np.ndarray:
    """Random data of a dtype; ints and bools are spread enough that a misplaced element shows."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rand(*shape, seed=seed, dtype=dt)
    rng = np.random.default_rng(seed)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(-1000, 1000, shape).astype(dt)


# reshape -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,target,dtype", [
    ((2, 3, 4), (6, 4), "float32"),
    ((2, 3, 4), (-1,), "float32"),
    ((2, 3, 4), (4, -1, 2), "int64"),
    ((24,), (2, 3, 2, 2), "int32"),
    ((), (1, 1), "float32"),
    ((1, 1), (), "float32"),
    ((5,), (1, -1, 1), "bool"),
    ((0, 3), (3, 0), "float32"),  # 0 is a real zero-size dim (ONNX allowzero=1)
    ((0, 3), (-1, 3), "float16"),
])
def test_reshape(shape, target, dtype):
    x = data(shape, dtype)
    check_op("Reshape", "reshape", [x, i64(*target)], onnx_attrs={"allowzero": 1},
             attrs={"shape": list(target)}, tessel_inputs=[x])


# transpose -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,perm,dtype", [
    ((), [], "float32"),
    ((5,), [0], "int64"),
    ((2, 3), [1, 0], "float32"),
    ((2, 3, 4), [2, 0, 1], "float32"),
    ((2, 3, 4, 5), [0, 2, 3, 1], "int32"),
    ((1, 0, 3), [2, 1, 0], "float32"),
    ((2, 3, 4), [0, 1, 2], "bool"),
])
def test_transpose(shape, perm, dtype):
    x = data(shape, dtype)
    # onnx.helper cannot write an empty ints attribute; ONNX's default (reversed dims) is [] at rank 0
    check_op("Transpose", "transpose", [x], onnx_attrs={"perm": perm} if perm else {}, attrs={"perm": perm})


# concat / split ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shapes,axis,dtype", [
    ([(3,)], 0, "float32"),
    ([(2,), (3,), (1,)], 0, "int64"),
    ([(2, 3), (2, 5)], 1, "float32"),
    ([(2, 3), (2, 5)], -1, "float32"),
    ([(1, 2, 3), (4, 2, 3)], -3, "int32"),
    ([(2, 0, 3), (2, 4, 3), (2, 1, 3)], 1, "float32"),
    ([(2, 2), (2, 2)], 0, "bool"),
])
def test_concat(shapes, axis, dtype):
    xs = [data(s, dtype, seed=i) for i, s in enumerate(shapes)]
    check_op("Concat", "concat", xs, onnx_attrs={"axis": axis}, attrs={"axis": axis})


@pytest.mark.parametrize("shape,axis,sizes,dtype", [
    ((6,), 0, [2, 4], "float32"),
    ((6,), 0, [6], "int64"),
    ((2, 7), 1, [3, 0, 4], "float32"),
    ((2, 7, 3), -2, [1, 1, 5], "int32"),
    ((4, 2), -2, [1, 1, 1, 1], "float32"),
])
def test_split(shape, axis, sizes, dtype):
    x = data(shape, dtype)
    check_op("Split", "split", [x, i64(*sizes)], onnx_attrs={"axis": axis},
             attrs={"axis": axis, "sizes": sizes}, tessel_inputs=[x], n_outputs=len(sizes))


# slice ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,starts,ends,axes,steps", [
    ((10,), [2], [7], None, None),
    ((10,), [-3], [-1], None, None),                      # negative starts/ends add the dim
    ((10,), [-100], [100], None, None),                   # clamped to [0, dim]
    ((10,), [0], [I64_MAX], None, None),                  # INT64 max: to the end
    ((10,), [8], [2], None, None),                        # empty
    ((10,), [9], [I64_MIN], None, [-1]),                  # reverse all
    ((10,), [3], [I64_MAX], None, [-1]),                  # INT64 max backwards: to index 0, as onnxruntime
    ((10,), [I64_MAX], [2**31 - 1], None, [-2]),          # INT32 max too
    ((10,), [3], [2**31], None, [-1]),                    # any other large end clamps: empty
    ((10,), [-1], [-100], None, [-3]),                    # negative step, clamped end
    ((10,), [100], [0], None, [-2]),                      # start clamped to dim-1
    ((10,), [3], [3], None, [-1]),                        # empty backwards
    ((10,), [0], [10], None, [4]),                        # step larger than 1, uneven
    ((4, 6), [1, 5], [3, 0], [0, 1], [1, -2]),
    ((4, 6), [1], [-1], [-1], None),                      # negative axis
    ((3, 4, 5), [0, 1], [2, 3], None, None),              # axes = the leading dims
    ((3, 4, 5), [4, 1], [0, 2], [2, 0], [-1, 1]),         # axes out of order
    ((3, 4, 5), [0], [0], [1], None),                     # empty result
    ((0, 4), [0, 1], [5, 3], [0, 1], [1, 1]),             # zero-size input
    ((5, 5), [I64_MAX, 0], [I64_MIN, 5], [0, 1], [-1, 2]),
])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_slice(shape, starts, ends, axes, steps, dtype):
    x = data(shape, dtype)
    inputs = [x, i64(*starts), i64(*ends), None if axes is None else i64(*axes),
              None if steps is None else i64(*steps)]
    while inputs[-1] is None:
        inputs.pop()
    attrs = {"starts": starts, "ends": ends}
    if axes is not None:
        attrs["axes"] = axes
    if steps is not None:
        attrs["steps"] = steps
    check_op("Slice", "slice", inputs, attrs=attrs, tessel_inputs=[x])


# gather / gather_elements --------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,indices,axis,dtype", [
    ((5,), np.array([0, 4, -1, -5, 2]), 0, "float32"),
    ((5,), np.array(3), 0, "float32"),                    # rank-0 indices drop the axis
    ((5, 3), np.array([[1, -1], [0, 0]]), 0, "int64"),
    ((5, 3), np.array([2, -3], dtype=np.int32), 1, "float32"),
    ((2, 3, 4), np.array([[[-4]], [[3]]]), -1, "float32"),
    ((2, 3, 4), np.array(-2, dtype=np.int32), 1, "int32"),
    ((4, 3), np.zeros((0, 2), dtype=np.int64), 0, "float32"),
])
def test_gather(shape, indices, axis, dtype):
    x = data(shape, dtype)
    check_op("Gather", "gather", [x, indices], onnx_attrs={"axis": axis}, attrs={"axis": axis})


@pytest.mark.parametrize("shape,indices,axis,dtype", [
    ((5,), np.array([0, 4, -1, -5]), 0, "float32"),
    ((3, 3), np.array([[0, 2], [-1, 0]]), 1, "float32"),      # indices smaller than data off the axis
    ((3, 3), np.array([[1, 2, 0], [2, 0, -3]], dtype=np.int32), 0, "int64"),
    ((2, 3, 4), np.array([[[0, 3, 1, -2]], [[-1, 0, 0, 1]]]), -1, "float32"),
    ((2, 3, 4), np.ones((2, 5, 4), dtype=np.int64), 1, "float32"),  # the axis dim may grow
])
def test_gather_elements(shape, indices, axis, dtype):
    x = data(shape, dtype)
    check_op("GatherElements", "gather_elements", [x, indices], onnx_attrs={"axis": axis},
             attrs={"axis": axis})


def test_gather_out_of_range_index():
    with pytest.raises(OpError, match="index 5 is out of range"):
        run_tessel("gather", [np.zeros((5, 2), np.float32), i64(0, 5)], {"axis": 0})
    with pytest.raises(OpError, match="index -4 is out of range"):
        run_tessel("gather_elements", [np.zeros((3,), np.float32), i64(-4)], {"axis": 0})


# pad -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,pads,mode,value,dtype", [
    ((3,), [1, 2], "constant", 0.0, "float32"),
    ((3, 4), [0, 1, 2, 3], "constant", 1.5, "float32"),
    ((3, 4), [1, 1, 1, 1], "constant", -7.0, "int64"),
    ((3, 4), [-1, 1, 0, -2], "constant", 2.0, "float32"),    # negative pads crop
    ((3, 4), [-2, 1, 3, -3], "constant", 0.0, "int32"),      # crop and pad on one dim
    ((3, 4), [2, 3, 2, 3], "reflect", 0.0, "float32"),       # the largest reflect pads: dim - 1
    ((2, 3, 4), [0, 1, 0, 0, 1, 2], "reflect", 0.0, "int64"),
    ((3, 4), [-1, 2, 0, 0], "reflect", 0.0, "float32"),      # reflect within the cropped part
    ((3, 4), [4, 0, 1, 5], "edge", 0.0, "float32"),
    ((3, 4), [-1, 1, 1, -2], "edge", 0.0, "int64"),
    ((1, 1), [2, 2, 2, 2], "edge", 0.0, "float32"),
    ((0, 2), [1, 0, 1, 0], "constant", 3.0, "float32"),      # padding an empty tensor
])
def test_pad(shape, pads, mode, value, dtype):
    x = data(shape, dtype)
    inputs = [x, i64(*pads)] + ([np.array(value, dtype=x.dtype)] if mode == "constant" else [])
    check_op("Pad", "pad", inputs, onnx_attrs={"mode": mode},
             attrs={"pads": pads, "mode": mode, "value": value}, tessel_inputs=[x])


# expand / tile -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,target,dtype", [
    ((), (2, 3), "float32"),
    ((3,), (2, 3), "float32"),
    ((3, 1), (2, 1, 4), "int64"),            # rank growth, 1s on both sides
    ((1, 4), (3, 1), "float32"),             # both sides broadcast: [3, 4]
    ((2, 3), (1,), "int32"),                 # a shorter target keeps x
    ((2, 1, 3), (2, 5, 1), "float32"),
    ((1, 3), (0, 3), "float32"),             # broadcast to a zero-size dim
    ((2, 2), (1, 1, 1), "bool"),
])
def test_expand(shape, target, dtype):
    x = data(shape, dtype)
    check_op("Expand", "expand", [x, i64(*target)], attrs={"shape": list(target)}, tessel_inputs=[x])


@pytest.mark.parametrize("shape,repeats,dtype", [
    ((3,), [2], "float32"),
    ((2, 3), [1, 1], "int64"),
    ((2, 3), [3, 1], "float32"),
    ((2, 1, 3), [1, 4, 2], "int32"),
    ((2, 3), [0, 2], "float32"),
])
def test_tile(shape, repeats, dtype):
    x = data(shape, dtype)
    check_op("Tile", "tile", [x, i64(*repeats)], attrs={"repeats": repeats}, tessel_inputs=[x])


# depth_to_space / space_to_depth -------------------------------------------------------------------------
@pytest.mark.parametrize("shape,blocksize", [((1, 8, 2, 3), 2), ((2, 18, 1, 2), 3), ((1, 4, 2, 2), 1)])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(shape, blocksize, mode):
    x = data(shape)
    check_op("DepthToSpace", "depth_to_space", [x], onnx_attrs={"blocksize": blocksize, "mode": mode},
             attrs={"blocksize": blocksize, "mode": mode})


@pytest.mark.parametrize("shape,blocksize", [((1, 2, 4, 6), 2), ((2, 3, 3, 6), 3)])
def test_space_to_depth(shape, blocksize):
    x = data(shape)  # onnxruntime's CPU SpaceToDepth takes only floats
    check_op("SpaceToDepth", "space_to_depth", [x], onnx_attrs={"blocksize": blocksize},
             attrs={"blocksize": blocksize})


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_inverts_depth_to_space(mode):
    x = data((2, 12, 3, 4))
    attrs = {"blocksize": 2, "mode": mode}
    (y,) = run_tessel("depth_to_space", [x], attrs)
    (back,) = run_tessel("space_to_depth", [y], attrs)
    np.testing.assert_array_equal(back, x)


# cost ----------------------------------------------------------------------------------------------------


def test_costs():
    t = TensorType((2, 3, 4), "f32")
    assert op_cost("reshape", [t], {"shape": [6, 4]}).bytes == 0
    c = op_cost("transpose", [t], {"perm": [2, 1, 0]})
    assert (c.flops, c.bytes_read, c.bytes_written) == (0, 96, 96)
    c = op_cost("slice", [t], {"starts": [1], "ends": [2]})
    assert (c.bytes_read, c.bytes_written) == (48, 48)
    c = op_cost("gather", [t, TensorType((5,), "i32")], {"axis": 1})
    assert (c.bytes_read, c.bytes_written) == (2 * 5 * 4 * 4 + 20, 160)
    c = op_cost("pad", [t], {"pads": [-1, 0, 0, 0, 0, 1]})
    assert (c.bytes_read, c.bytes_written) == (48, 60)


# infer rejects -------------------------------------------------------------------------------------------
F = TensorType


@pytest.mark.parametrize("name,types,attrs,message", [
    ("reshape", [F((2, 3, 4), "f32")], {"shape": [5, -1]}, "cannot reshape 24 elements into [5, -1]"),
    ("reshape", [F((2, 3, 4), "f32")], {"shape": [5, 5]}, "cannot reshape 24 elements into [5, 5]"),
    ("reshape", [F((2, 3), "f32")], {"shape": [-1, -1]}, "at most one"),
    ("reshape", [F((2, 3), "f32")], {"shape": [-2, -3]}, "below -1"),
    ("reshape", [F((0, 3), "f32")], {"shape": [0, -1]}, "cannot infer the -1"),
    ("transpose", [F((2, 3, 4), "f32")], {"perm": [0, 0, 1]}, "perm [0, 0, 1] is not a permutation of 0..2"),
    ("transpose", [F((2, 3), "f32")], {"perm": [1, 0, 2]}, "not a permutation of 0..1"),
    ("concat", [F((2, 3), "f32"), F((2, 3), "i32")], {"axis": 0}, "operand 1 has element type i32"),
    ("concat", [F((2, 3), "f32"), F((3,), "f32")], {"axis": 0}, "operand 1 has rank 1"),
    ("concat", [F((2, 3), "f32"), F((2, 4), "f32")], {"axis": 0}, "operand 1 has shape [2, 4]"),
    ("concat", [F((2, 3), "f32")], {"axis": 2}, "axis 2 is out of range for rank 2"),
    ("concat", [F((), "f32")], {"axis": 0}, "rank-0"),
    ("concat", [], {"axis": 0}, "at least one operand"),
    ("split", [F((6,), "f32")], {"sizes": [2, 3]}, "sizes [2, 3] sum to 5, but dim 0 has size 6"),
    ("split", [F((6,), "f32")], {"sizes": [7, -1]}, "negative size"),
    ("split", [F((6,), "f32")], {"sizes": []}, "must not be empty"),
    ("split", [F((2, 6), "f32")], {"sizes": [6], "axis": -3}, "axis -3 is out of range"),
    ("slice", [F((4,), "f32")], {"starts": [0], "ends": [1, 2]}, "ends has 2"),
    ("slice", [F((4,), "f32")], {"starts": [0, 0], "ends": [1, 1]}, "2 starts for a rank-1 operand"),
    ("slice", [F((4, 4), "f32")], {"starts": [0], "ends": [1], "steps": [0]}, "a 0 step"),
    ("slice", [F((4, 4), "f32")], {"starts": [0, 0], "ends": [1, 1], "axes": [1, -1]}, "repeat an axis"),
    ("slice", [F((4, 4), "f32")], {"starts": [0], "ends": [1], "axes": [2]}, "axis 2 is out of range"),
    ("slice", [F((4, 4), "f32")], {"starts": [0], "ends": [1], "axes": [0, 1]}, "axes has 2"),
    ("gather", [F((4, 4), "f32"), F((2,), "f32")], {}, "indices must be i32 or i64"),
    ("gather", [F((), "f32"), F((2,), "i64")], {}, "rank-0"),
    ("gather", [F((4, 4), "f32"), F((2,), "i64")], {"axis": -3}, "axis -3 is out of range for rank 2"),
    ("gather_elements", [F((4, 4), "f32"), F((4,), "i64")], {}, "indices has rank 1, data has rank 2"),
    ("gather_elements", [F((4, 4), "f32"), F((2, 5), "i64")], {}, "indices dim 1 has size 5"),
    ("pad", [F((3, 4), "f32")], {"pads": [1, 1]}, "pads has 2 entries, a rank-2 operand needs 4"),
    ("pad", [F((3, 4), "f32")], {"pads": [-2, 0, -2, 0]}, "shrink dim 0 of size 3 below 0"),
    ("pad", [F((3, 4), "f32")], {"pads": [0, 4, 0, 0], "mode": "reflect"}, "reflect pad 4 on dim 1"),
    ("pad", [F((3, 4), "f32")], {"pads": [-3, 0, 1, 0], "mode": "edge"}, "non-empty"),
    ("pad", [F((3, 4), "f32")], {"pads": [0, 0, 0, 0], "mode": "wrap"}, "'mode' must be one of"),
    ("expand", [F((2, 3), "f32")], {"shape": [4]}, "cannot expand shape [2, 3] to [4]"),
    ("expand", [F((2, 3), "f32")], {"shape": [-1, 3]}, "negative dim"),
    ("tile", [F((2, 3), "f32")], {"repeats": [2]}, "repeats [2] has 1 entries, the operand has rank 2"),
    ("tile", [F((2, 3), "f32")], {"repeats": [2, -1]}, "negative entry"),
    ("depth_to_space", [F((1, 6, 2, 2), "f32")], {"blocksize": 2}, "channels 6 is not a multiple of 4"),
    ("depth_to_space", [F((6, 2, 2), "f32")], {"blocksize": 2}, "rank-4"),
    ("depth_to_space", [F((1, 4, 2, 2), "f32")], {"blocksize": 0}, "blocksize 0"),
    ("depth_to_space", [F((1, 4, 2, 2), "f32")], {"blocksize": 2, "mode": "XYZ"}, "'mode' must be one of"),
    ("space_to_depth", [F((1, 1, 4, 3), "f32")], {"blocksize": 2}, "width 3 is not a multiple of 2"),
])
def test_infer_rejects(name, types, attrs, message):
    opdef = get_op(name)
    with pytest.raises(OpError) as err:
        opdef.infer(opdef.sig(types, attrs))
    assert message in str(err.value)


# dynamic dims ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,shape,attrs,want", [
    ("reshape", (None, 4), {"shape": [-1, 2]}, (None, 2)),
    ("reshape", (None, 4), {"shape": [8, 3]}, (8, 3)),
    ("transpose", (None, 4), {"perm": [1, 0]}, (4, None)),
    ("split", (None, 4), {"sizes": [1, 2]}, (1, 4)),
    ("slice", (None, 4), {"starts": [0, 1], "ends": [2, 3]}, (None, 2)),
    ("pad", (None, 4), {"pads": [1, 1, 1, 1]}, (None, 6)),
    ("expand", (None, 1), {"shape": [3, 1, 5]}, (3, None, 5)),
    ("tile", (None, 4), {"repeats": [0, 2]}, (0, 8)),
    ("depth_to_space", (None, 8, None, 3), {"blocksize": 2}, (None, 2, None, 6)),
])
def test_infer_dynamic(name, shape, attrs, want):
    opdef = get_op(name)
    assert opdef.infer(opdef.sig([F(shape, "f32")], attrs))[0].shape == want


# slice, randomized: ONNX's resolve-and-clamp rules are easy to get subtly wrong ---------------------------
_BOUND = st.one_of(st.integers(-9, 9), st.sampled_from([I64_MAX, I64_MIN, I64_MAX - 1, I64_MIN + 1]))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(dims=st.lists(st.integers(0, 6), min_size=1, max_size=3), data_=st.data())
def test_slice_random(dims, data_):
    rank = len(dims)
    axes = data_.draw(st.permutations(range(rank)).map(lambda p: list(p)[:max(1, len(p) - 1)]))
    n = len(axes)
    starts = data_.draw(st.lists(_BOUND, min_size=n, max_size=n))
    ends = data_.draw(st.lists(_BOUND, min_size=n, max_size=n))
    steps = data_.draw(st.lists(st.sampled_from([-3, -2, -1, 1, 2, 3]), min_size=n, max_size=n))
    axes = [a - rank if data_.draw(st.booleans()) else a for a in axes]
    x = data(tuple(dims))
    check_op("Slice", "slice", [x, i64(*starts), i64(*ends), i64(*axes), i64(*steps)],
             attrs={"starts": starts, "ends": ends, "axes": axes, "steps": steps}, tessel_inputs=[x])
