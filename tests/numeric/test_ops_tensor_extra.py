"""The ops of ir/ops/tensor_extra.py (cumsum, top_k, scatter_elements) against onnxruntime, their costs, and
infer's rejection of bad operands.

ONNX passes CumSum's axis and TopK's k as inputs; tessel takes them as attributes, so each case feeds ONNX
the arrays and tessel the same values via `attrs`.
"""

from __future__ import annotations

import numpy as np
import pytest
from tessel.ir.ops.registry import OpError, get_op
from tessel.ir.types import TensorType

from tests.numeric.ort_util import check_op, op_cost, rand, run_tessel


def data(shape: tuple[int, ...], dtype: str = "float32", seed: int = 0) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rand(*shape, seed=seed, dtype=dt)
    return np.random.default_rng(seed).integers(-50, 50, shape).astype(dt)


# cumsum, cumprod ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,axis,dtype", [
    ((5,), 0, "float32"),
    ((2, 3, 4), 1, "float32"),
    ((2, 3, 4), -1, "float64"),
    ((3, 4), 0, "int32"),
    ((3, 4), 1, "int64"),
    ((0, 3), 0, "float32"),
])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("onnx_op,op,opset", [("CumSum", "cumsum", 18), ("CumProd", "cumprod", 26)])
def test_running(shape, axis, dtype, exclusive, reverse, onnx_op, op, opset):
    x = data(shape, dtype) if op == "cumsum" else small(shape, dtype)
    check_op(onnx_op, op, [x, np.array(axis, np.int64)],
             onnx_attrs={"exclusive": exclusive, "reverse": reverse},
             attrs={"axis": axis, "exclusive": bool(exclusive), "reverse": bool(reverse)}, tessel_inputs=[x],
             opset=opset, rtol=1e-5, atol=1e-5)


def small(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Values whose running products stay small (and include zeros and negatives)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rand(*shape, seed=3, dtype=dt)
    return np.random.default_rng(3).integers(-4, 5, shape).astype(dt)


# top_k ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,k,axis,dtype", [
    ((6,), 3, 0, "float32"),
    ((3, 5), 2, 1, "float32"),
    ((3, 5), 3, 0, "float64"),
    ((2, 3, 4), 4, -1, "int64"),
    ((2, 3, 4), 0, 1, "float32"),
    ((4, 4), 4, 1, "int32"),
])
@pytest.mark.parametrize("largest", [0, 1])
def test_top_k(shape, k, axis, dtype, largest):
    x = data(shape, dtype)
    check_op("TopK", "top_k", [x, np.array([k], np.int64)], onnx_attrs={"axis": axis, "largest": largest},
             attrs={"k": k, "axis": axis, "largest": bool(largest)}, tessel_inputs=[x], n_outputs=2)


@pytest.mark.parametrize("largest", [0, 1])
def test_top_k_ties_keep_the_lower_index_first(largest):
    x = np.array([[1, 3, 3, 1, 2, 3], [0, 0, 0, 0, 0, 0]], np.float32)
    check_op("TopK", "top_k", [x, np.array([4], np.int64)], onnx_attrs={"largest": largest},
             attrs={"k": 4, "largest": bool(largest)}, tessel_inputs=[x], n_outputs=2)


# scatter_elements ----------------------------------------------------------------------------------------
def _unique_indices(shape: tuple[int, ...], n: int, axis: int, seed: int = 0) -> np.ndarray:
    """Indices into a dim of size n, distinct along `axis` (duplicates make reduction 'none' ambiguous)."""
    rng = np.random.default_rng(seed)
    axis %= len(shape)
    k = shape[axis]
    picks = np.stack([rng.permutation(n)[:k] for _ in range(int(np.prod(shape)) // k)])
    return np.moveaxis(picks.reshape(*[s for i, s in enumerate(shape) if i != axis], k), -1, axis)


@pytest.mark.parametrize("shape,upd_shape,axis,dtype", [
    ((5,), (3,), 0, "float32"),
    ((4, 5), (2, 5), 0, "float32"),
    ((4, 5), (4, 3), 1, "int64"),
    ((3, 4, 5), (3, 2, 5), -2, "float64"),
    ((3, 4), (2, 2), 1, "int32"),
])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(shape, upd_shape, axis, dtype, reduction):
    x, upd = data(shape, dtype), data(upd_shape, dtype, seed=1)
    idx = _unique_indices(upd_shape, shape[axis], axis).astype(np.int64)
    idx = np.where(idx % 2 == 1, idx - shape[axis], idx)  # some negative indices
    check_op("ScatterElements", "scatter_elements", [x, idx, upd],
             onnx_attrs={"axis": axis, "reduction": reduction}, attrs={"axis": axis, "reduction": reduction})


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_elements_duplicate_indices_reduce(reduction):
    x = data((3, 4))
    idx = np.array([[0, 1, 0, 2], [0, 1, 0, 2]], np.int64)
    upd = data((2, 4), seed=2)
    check_op("ScatterElements", "scatter_elements", [x, idx, upd], onnx_attrs={"reduction": reduction},
             attrs={"reduction": reduction})


def test_scatter_elements_i32_indices():
    x, upd = data((4, 3)), data((2, 3), seed=3)
    idx = np.array([[3, 0, 1], [1, 2, 0]], np.int32)
    check_op("ScatterElements", "scatter_elements", [x, idx, upd], attrs={})


def test_scatter_out_of_range_index():
    with pytest.raises(OpError, match="index 4 is out of range"):
        run_tessel("scatter_elements", [data((4,)), np.array([4], np.int64), data((1,))])


# cost ----------------------------------------------------------------------------------------------------


def test_costs():
    t = TensorType((2, 3, 4), "f32")
    c = op_cost("cumsum", [t], {"axis": 1})
    assert (c.flops, c.bytes_read, c.bytes_written) == (24, 96, 96)
    c = op_cost("top_k", [t], {"k": 2})
    assert (c.bytes_read, c.bytes_written) == (96, 2 * 3 * 2 * 4 + 2 * 3 * 2 * 8)
    i, u = TensorType((1, 3, 4), "i64"), TensorType((1, 3, 4), "f32")
    assert op_cost("scatter_elements", [t, i, u], {}).flops == 0
    c = op_cost("scatter_elements", [t, i, u], {"reduction": "add"})
    assert (c.flops, c.bytes_read, c.bytes_written) == (12, 96 + 96 + 48, 96)


# infer rejects -------------------------------------------------------------------------------------------
F = TensorType


@pytest.mark.parametrize("name,types,attrs,message", [
    ("cumsum", [F((), "f32")], {"axis": 0}, "rank >= 1"),
    ("cumsum", [F((2, 3), "f32")], {"axis": 2}, "axis 2 is out of range for rank 2"),
    ("cumsum", [F((2, 3), "i1")], {"axis": 0}, "must be numeric"),
    ("top_k", [F((2, 3), "f32")], {"k": 4, "axis": 1}, "k 4 is larger than dim 1 of size 3"),
    ("top_k", [F((2, 3), "f32")], {"k": -1}, "k -1 is negative"),
    ("top_k", [F((), "f32")], {"k": 1}, "rank >= 1"),
    ("scatter_elements", [F((4,), "f32"), F((2,), "f32"), F((2,), "f32")], {}, "indices must be i32 or i64"),
    ("scatter_elements", [F((4,), "f32"), F((2,), "i64"), F((2,), "i32")], {}, "updates element type i32"),
    ("scatter_elements", [F((4, 4), "f32"), F((2,), "i64"), F((2,), "f32")], {}, "indices has rank 1"),
    ("scatter_elements", [F((4,), "f32"), F((2,), "i64"), F((3,), "f32")], {}, "differ in shape"),
    ("scatter_elements", [F((4,), "f32"), F((2,), "i64"), F((2,), "f32")], {"axis": 1}, "axis 1 is out of"),
    ("scatter_elements", [F((4,), "f32"), F((2,), "i64"), F((2,), "f32")], {"reduction": "sub"},
     "'reduction' must be one of"),
])
def test_infer_rejects(name, types, attrs, message):
    opdef = get_op(name)
    with pytest.raises(OpError) as err:
        opdef.infer(opdef.sig(types, attrs))
    assert message in str(err.value)


def test_dynamic_dims_flow_through():
    t = TensorType((None, 5), "f32")
    assert get_op("cumsum").infer(get_op("cumsum").sig([t], {"axis": 0})) == [t]
    v, i = get_op("top_k").infer(get_op("top_k").sig([t], {"k": 2}))
    assert v == TensorType((None, 2), "f32") and i == TensorType((None, 2), "i64")
