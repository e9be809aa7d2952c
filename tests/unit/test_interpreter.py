"""The reference interpreter's (ir/interpreter.py) input handling and execution through the library API."""

import numpy as np
import pytest
from tessel.ir.diagnostics import DiagnosticError
from tessel.ir.interpreter import check_inputs, input_names, output_names, random_inputs, run_func
from tessel.ir.parser import parse_module

TEXT = """
func @main(%x: tensor<2x3xf32>, %n: tensor<i64> {name = "count:0"})
    -> (tensor<2x3xf32> {name = "y"}, tensor<i64>) {
  %0 = relu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0, %n : tensor<2x3xf32>, tensor<i64>
}
"""


@pytest.fixture
def module():
    return parse_module(TEXT, "<test>")


def test_names_come_from_name_attributes_or_value_names(module) -> None:
    f = module.funcs[0]
    assert input_names(f) == ["x", "count:0"]
    assert output_names(f) == ["y", "result1"]


def test_run_with_checked_inputs(module) -> None:
    f = module.funcs[0]
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    args = check_inputs(f, {"x": x, "count:0": np.array(3, np.int64)})
    y, n = run_func(module, f, args)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert n == 3


@pytest.mark.parametrize(
    "inputs,message",
    [
        ({"x": np.zeros((2, 3), np.float32)}, "missing input 'count:0'"),
        (
            {"x": np.zeros((2, 3), np.float32), "count:0": np.array(1), "z": np.zeros(1)},
            "unexpected input 'z'",
        ),
        (
            {"x": np.zeros((3, 2), np.float32), "count:0": np.array(1)},
            "has shape [3, 2], expected tensor<2x3xf32>",
        ),
        ({"x": np.zeros((2, 3), np.float64), "count:0": np.array(1)}, "has dtype float64, expected float32"),
    ],
)
def test_bad_inputs_are_named(module, inputs, message) -> None:
    with pytest.raises(DiagnosticError) as e:
        check_inputs(module.funcs[0], inputs)
    d = e.value.diagnostics[0]
    assert message in d.message + "".join(n.message for n in d.notes)


def test_random_inputs_are_seeded(module) -> None:
    f = module.funcs[0]
    a, b = random_inputs(f, seed=5), random_inputs(f, seed=5)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(random_inputs(f, seed=6)["x"], a["x"])


def test_random_inputs_of_an_exponent_only_type_are_finite() -> None:
    m = parse_module("func @f(%x: tensor<8xf8E8M0FNU>) -> tensor<8xf8E8M0FNU> {\n"
                     "  return %x : tensor<8xf8E8M0FNU>\n}\n", "<test>")
    x = random_inputs(m.funcs[0], seed=1)["x"].astype(np.float32)
    assert np.isfinite(x).all() and (x > 0).all()


def test_npz_raw_bytes_of_ml_dtypes_are_read_as_their_type() -> None:
    """np.savez stores bf16/float8/int4 arrays as raw bytes ('V2'); the inputs check views them back."""
    import io

    import ml_dtypes

    text = "func @f(%x: tensor<3xbf16>) -> tensor<3xbf16> {\n  return %x : tensor<3xbf16>\n}\n"
    m = parse_module(text, "<t>")
    buf = io.BytesIO()
    np.savez(buf, x=np.array([1.0, -2.0, 0.5], ml_dtypes.bfloat16))
    buf.seek(0)
    raw = dict(np.load(buf))
    assert raw["x"].dtype.kind == "V"
    (x,) = check_inputs(m.funcs[0], raw)
    assert x.dtype == np.dtype(ml_dtypes.bfloat16) and x.astype(np.float32).tolist() == [1.0, -2.0, 0.5]
