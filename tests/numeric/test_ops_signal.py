"""The ops of ir/ops/signal.py (cumprod, bitcast) against onnxruntime (CumProd and BitCast, opset 26), their
costs, and infer's rejection of bad operands.

ONNX passes CumProd's axis as an input; tessel takes it as an attribute, so each case feeds ONNX the array
and tessel the same value via `attrs`.
"""

from __future__ import annotations

import numpy as np
import pytest
from tessel.ir.ops.registry import OpError, get_op
from tessel.ir.types import TensorType

from tests.numeric.ort_util import check_op, rand, run_tessel

F = TensorType


def data(shape: tuple[int, ...], dtype: str = "float32", seed: int = 0) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rand(*shape, seed=seed, dtype=dt)
    return np.random.default_rng(seed).integers(-4, 5, shape).astype(dt)


# bitcast -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("src,to,onnx_to", [
    ("float32", "i32", 6), ("int32", "f32", 1), ("float64", "i64", 7), ("int64", "f64", 11),
    ("int8", "ui8", 2), ("uint8", "i8", 3), ("uint16", "i16", 5), ("uint32", "i32", 6), ("float16", "i16", 5),
])
def test_bitcast(src, to, onnx_to):
    x = np.random.default_rng(0).integers(0, 255, (2, 3 * 8)).astype(np.uint8).view(src)
    if x.dtype.kind == "f":
        x = np.where(np.isnan(x), 0, x).astype(src)  # NaN payloads need not survive onnxruntime's copy
    check_op("BitCast", "bitcast", [x], onnx_attrs={"to": onnx_to}, attrs={"to": to}, opset=26)


def test_bitcast_scalar_and_bools():
    """onnxruntime has no bool BitCast kernel: bools are checked by value."""
    (y,) = run_tessel("bitcast", [np.array(1.0, np.float32)], {"to": "i32"})
    assert y.shape == () and int(y) == 0x3F800000
    (y,) = run_tessel("bitcast", [np.array([0, 1, 2], np.uint8)], {"to": "i1"})
    np.testing.assert_array_equal(y, [False, True, True])
    (y,) = run_tessel("bitcast", [np.array([True, False], bool)], {"to": "ui8"})
    np.testing.assert_array_equal(y, np.array([1, 0], np.uint8))


# cost and infer ------------------------------------------------------------------------------------------
def test_costs():
    t = F((2, 3, 4), "f32")
    c = get_op("cumprod").cost(get_op("cumprod").sig([t], {"axis": 1}, [t]))
    assert (c.flops, c.bytes_read, c.bytes_written) == (24, 96, 96)
    u = F((2, 3, 4), "i32")
    c = get_op("bitcast").cost(get_op("bitcast").sig([t], {"to": "i32"}, [u]))
    assert (c.flops, c.bytes_read, c.bytes_written) == (0, 96, 96)


@pytest.mark.parametrize("name,types,attrs,message", [
    ("cumprod", [F((), "f32")], {"axis": 0}, "rank >= 1"),
    ("cumprod", [F((2, 3), "f32")], {"axis": 2}, "axis 2 is out of range for rank 2"),
    ("cumprod", [F((2, 3), "i1")], {"axis": 0}, "must be numeric"),
    ("bitcast", [F((2,), "f32")], {"to": "f64"}, "cannot reinterpret f32 (32 bits) as f64 (64 bits)"),
    ("bitcast", [F((2,), "i8")], {"to": "i4"}, "(8 bits) as i4 (4 bits)"),
    ("bitcast", [F((2,), "f32")], {"to": "f7"}, "'to' must be an element type"),
])
def test_infer_rejects(name, types, attrs, message):
    opdef = get_op(name)
    with pytest.raises(OpError) as err:
        opdef.infer(opdef.sig(types, attrs))
    assert message in str(err.value)
