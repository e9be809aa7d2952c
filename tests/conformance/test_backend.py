"""The onnx.backend Backend (frontends/onnx/backend.py) the conformance suite runs through."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from tessel.frontends.onnx.backend import TesselBackend, register_target
from tessel.ir.diagnostics import DiagnosticError


def _model(nodes: list, inputs: list, outputs: list, opset: int = 17) -> onnx.ModelProto:
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                             opset_imports=[helper.make_opsetid("", opset)])


def relu_model() -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])


def reshape_model() -> onnx.ModelProto:
    """Reshape whose target shape is a graph input, as the ONNX node tests write it."""
    return _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
                   helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])])


def test_static_model_runs_and_names_its_outputs() -> None:
    m = _model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["z"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]),
                helper.make_tensor_value_info("z", TensorProto.FLOAT, [3])])
    rep = TesselBackend.prepare(m)
    assert rep.module is not None, "a static model is compiled by prepare"
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    out = rep.run([x])
    np.testing.assert_array_equal(out[0], np.maximum(x, 0))
    np.testing.assert_array_equal(out["z"], -x)
    np.testing.assert_array_equal(rep.run({"x": x}).y, np.maximum(x, 0))
    with pytest.raises(DiagnosticError, match="takes 1 inputs"):
        rep.run([x, x])
    with pytest.raises(DiagnosticError, match="missing"):
        rep.run({"w": x})


def test_dynamic_dims_are_fixed_by_the_first_inputs_and_recompiled_for_new_ones() -> None:
    m = _model([helper.make_node("Add", ["a", "b"], ["y"])],
               [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 3]),
                helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 3])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    rep = TesselBackend.prepare(m)
    for n in (2, 5, 2):
        a = np.ones((n, 3), np.float32)
        np.testing.assert_array_equal(rep.run([a, a])[0], 2 * a)


def test_shape_inputs_are_baked_in_and_recompiled_when_their_values_change() -> None:
    rep = TesselBackend.prepare(reshape_model())
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for shape in ([4, 6], [6, 4], [4, 6]):
        got = rep.run([x, np.array(shape, np.int64)])[0]
        np.testing.assert_array_equal(got, x.reshape(shape))
    assert rep.specialized_inputs == ["shape"]


def test_specialize_false_refuses_shape_inputs() -> None:
    with pytest.raises(DiagnosticError, match="must be a constant"):
        TesselBackend.prepare(reshape_model(), specialize=False)


def test_the_target_is_a_parameter() -> None:
    calls = []

    def doubling(module: object, func: object):  # noqa: ANN202
        from tessel.ir.interpreter import run_func

        def run(args: list) -> list:
            calls.append(len(args))
            return [2 * o for o in run_func(module, func, args)]  # type: ignore[arg-type]

        return run

    register_target("test-doubling", doubling)
    m = relu_model()
    out = TesselBackend.prepare(m, target="test-doubling").run([np.array([1.0, -1.0], np.float32)])[0]
    np.testing.assert_array_equal(out, [2.0, 0.0])
    assert calls == [1]
    with pytest.raises(DiagnosticError, match="unknown target 'nope'"):
        TesselBackend.prepare(m, target="nope")


def test_devices_pipeline_and_run_node() -> None:
    assert TesselBackend.supports_device("CPU") and not TesselBackend.supports_device("CUDA")
    node = helper.make_node("Add", ["a", "b"], ["c"])
    a = np.array([1.0, 2.0], np.float32)
    np.testing.assert_array_equal(TesselBackend.run_node(node, [a, a])[0], 2 * a)
    m = relu_model()
    rep = TesselBackend.prepare(m, pipeline="-O1", roundtrip=True)
    np.testing.assert_array_equal(rep.run([a])[0], a)
