"""reduce_* and argmax/argmin against onnxruntime (opset 18: axes is an int64 input there, an attr here)."""

from __future__ import annotations

import numpy as np
import pytest
from tessel.ir.ops.registry import OpError, get_op
from tessel.ir.types import TensorType

from tests.numeric.ort_util import check_op, rand, run_tessel

REDUCE_OPS = {  # tessel name: (ONNX op, accepts ints)
    "reduce_sum": ("ReduceSum", True),
    "reduce_mean": ("ReduceMean", False),
    "reduce_max": ("ReduceMax", True),
    "reduce_min": ("ReduceMin", True),
    "reduce_prod": ("ReduceProd", True),
    "reduce_l1": ("ReduceL1", True),
    "reduce_l2": ("ReduceL2", False),
    "reduce_sum_square": ("ReduceSumSquare", True),
    "reduce_log_sum_exp": ("ReduceLogSumExp", False),
}

AXES_CASES = [  # (shape, axes)
    ((2, 3, 4), [1]),
    ((2, 3, 4), [0]),
    ((2, 3, 4), [-1]),
    ((2, 3, 4), [0, 2]),
    ((2, 3, 4), [-1, 0]),
    ((2, 3, 4), [2, -2, 0]),  # every axis, named
    ((2, 3, 4), []),  # empty: every axis
    ((5,), [0]),
    ((5,), []),
    ((2, 3, 1, 4), [2]),
    ((3, 2, 2, 5), [1, 3]),
]


def _reduce(op: str, x: np.ndarray, axes: list[int], keepdims: bool, **tol: float) -> None:
    onnx_op = REDUCE_OPS[op][0]
    inputs = [x] + ([np.array(axes, dtype=np.int64)] if axes else [])
    check_op(onnx_op, op, inputs, onnx_attrs={"keepdims": int(keepdims)},
             attrs={"axes": axes, "keepdims": keepdims}, tessel_inputs=[x], **tol)


@pytest.mark.parametrize("keepdims", [True, False], ids=["keep", "drop"])
@pytest.mark.parametrize("shape,axes", AXES_CASES,
                         ids=[f"{'x'.join(map(str, s))}-{a}" for s, a in AXES_CASES])
@pytest.mark.parametrize("op", list(REDUCE_OPS))
def test_reduce_f32(op: str, shape: tuple, axes: list[int], keepdims: bool) -> None:
    # a positive range keeps products and logs well-conditioned, so a tight tolerance holds
    x = rand(*shape, low=0.5, high=1.5) if op == "reduce_prod" else rand(*shape)
    _reduce(op, x, axes, keepdims, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("keepdims", [True, False], ids=["keep", "drop"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", [op for op, (_, ints) in REDUCE_OPS.items() if ints])
def test_reduce_int(op: str, dtype: type, keepdims: bool) -> None:
    x = rand(3, 4, 5, dtype=dtype, low=-4, high=4)
    for axes in ([1], [0, -1], []):
        _reduce(op, x, axes, keepdims)


@pytest.mark.parametrize("op", list(REDUCE_OPS))
def test_reduce_f64(op: str) -> None:
    x = rand(4, 6, dtype=np.float64, low=0.5, high=1.5)
    _reduce(op, x, [1], False, rtol=1e-12, atol=1e-12)


def test_reduce_log_sum_exp_is_stable() -> None:
    x = np.array([[1000.0, 999.0, -np.inf], [-1000.0, -1001.0, -1002.0]], dtype=np.float32)
    _reduce("reduce_log_sum_exp", x, [1], True)


@pytest.mark.parametrize("op", ["reduce_max", "reduce_min"])
def test_reduce_max_min_propagate_nan(op: str) -> None:
    """NaN propagates, like elementwise max/min and the ONNX reference implementation. onnxruntime (1.32)
    agrees when reducing an outer axis but drops NaN on its innermost-axis and all-axes paths, so those
    are checked against numpy instead."""
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
    _reduce(op, x, [0], False)
    fn = np.max if op == "reduce_max" else np.min
    for axes in ([1], []):
        (got,) = run_tessel(op, [x], {"axes": axes, "keepdims": False})
        np.testing.assert_array_equal(got, fn(x, axis=tuple(axes) or None))


def test_reduce_rank0() -> None:
    x = np.array(3.5, dtype=np.float32)
    for op in ("reduce_sum", "reduce_max", "reduce_l2"):
        _reduce(op, x, [], True)


def test_reduce_bf16_runs_through_f32() -> None:
    x = rand(4, 8).astype(TensorType((), "bf16").np_dtype)
    (got,) = run_tessel("reduce_sum", [x], {"axes": [1]})
    want = x.astype(np.float32).sum(axis=1, keepdims=True)
    assert got.dtype == x.dtype
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)


# argmax / argmin ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("select_last", [False, True], ids=["first", "last"])
@pytest.mark.parametrize("keepdims", [True, False], ids=["keep", "drop"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("op,onnx_op", [("argmax", "ArgMax"), ("argmin", "ArgMin")])
def test_arg_reduce(op: str, onnx_op: str, axis: int, keepdims: bool, select_last: bool) -> None:
    onnx_attrs = {"axis": axis, "keepdims": int(keepdims), "select_last_index": int(select_last)}
    attrs = {"axis": axis, "keepdims": keepdims, "select_last_index": select_last}
    # small ints tie often, so select_last_index matters; floats exercise the float path
    for x in (rand(3, 4, 5, dtype=np.int32, low=-2, high=2), rand(3, 4, 5), rand(3, 4, 5, dtype=np.int64)):
        check_op(onnx_op, op, [x], onnx_attrs=onnx_attrs, attrs=attrs)


def test_argmax_defaults_and_rank1() -> None:
    x = np.array([1, 7, 7, 0], dtype=np.int64)
    check_op("ArgMax", "argmax", [x])
    check_op("ArgMax", "argmax", [x], onnx_attrs={"select_last_index": 1, "keepdims": 0},
             attrs={"select_last_index": True, "keepdims": False})


# cost ---------------------------------------------------------------------------------------------------
def test_reduce_cost() -> None:
    opdef = get_op("reduce_mean")
    sig = opdef.sig([TensorType((4, 6), "f32")], {"axes": [1]})
    sig.results = opdef.infer(sig)
    cost = opdef.cost(sig)
    assert cost.flops == 24 + 4
    assert (cost.bytes_read, cost.bytes_written) == (96, 16)
    assert opdef.has("reduction") and get_op("reduce_sum").has("pure")


def test_reduce_dynamic_dims_infer() -> None:
    opdef = get_op("reduce_sum")
    sig = opdef.sig([TensorType((None, 3, None), "f32")], {"axes": [-1], "keepdims": False})
    assert opdef.infer(sig) == [TensorType((None, 3), "f32")]


# infer rejects ------------------------------------------------------------------------------------------
def _infer(op: str, t: TensorType, attrs: dict) -> list[TensorType]:
    opdef = get_op(op)
    return opdef.infer(opdef.sig([t], attrs))


@pytest.mark.parametrize("op,t,attrs,match", [
    ("reduce_sum", TensorType((2, 3), "f32"), {"axes": [2]}, "axis 2 is out of range for rank 2"),
    ("reduce_sum", TensorType((2, 3), "f32"), {"axes": [-3]}, "axis -3 is out of range for rank 2"),
    ("reduce_sum", TensorType((2, 3), "f32"), {"axes": [1, 1]}, r"duplicate axis 1 in axes \[1, 1\]"),
    ("reduce_max", TensorType((2, 3), "f32"), {"axes": [-1, 1]}, r"duplicate axis 1 in axes \[-1, 1\]"),
    ("reduce_sum", TensorType((), "f32"), {"axes": [0]}, "rank-0"),
    ("reduce_sum", TensorType((2, 3), "i1"), {}, "must be numeric"),
    ("reduce_mean", TensorType((2, 3), "i32"), {}, "must be a float tensor"),
    ("reduce_l2", TensorType((2, 3), "i64"), {}, "must be a float tensor"),
    ("reduce_log_sum_exp", TensorType((2, 3), "i32"), {}, "must be a float tensor"),
    ("argmax", TensorType((2, 3), "f32"), {"axis": 2}, "axis 2 is out of range for rank 2"),
    ("argmin", TensorType((2, 3), "f32"), {"axis": -3}, "axis -3 is out of range for rank 2"),
    ("argmax", TensorType((), "f32"), {}, "rank >= 1"),
    ("argmax", TensorType((4,), "i1"), {}, "must be numeric"),
])
def test_infer_rejects(op: str, t: TensorType, attrs: dict, match: str) -> None:
    with pytest.raises(OpError, match=match):
        _infer(op, t, attrs)
