"""Random valid ONNX graphs (graphs.py) compiled at -O0..-O3 and run on numpy and OpenCL give
onnxruntime's numbers (property.py). Bounded and derandomized, so `make test` is reproducible and takes
a few seconds; `make fuzz` (run.py) runs the same property for minutes with fresh seeds."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, Phase, assume, find, given, settings
from onnx import TensorProto, helper

from tests.fuzz.graphs import GraphCase, all_generators, graphs
from tests.fuzz.property import check_graph, opencl_device

BASE = settings(derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.data_too_large])


def _explain(case: GraphCase, findings: list) -> str:
    return f"{case!r}\n" + "\n".join(str(f) for f in findings) + "\n" + onnx.printer.to_text(case.model.graph)


@settings(BASE, max_examples=200)
@given(graphs())
def test_random_graphs_match_onnxruntime_on_numpy(case: GraphCase) -> None:
    out = check_graph(case, targets=["numpy"], first_only=True)
    assume(out.status != "discarded")
    assert not out.findings, _explain(case, out.findings)


@pytest.mark.skipif(isinstance(opencl_device(), str), reason=str(opencl_device()))
@settings(BASE, max_examples=25)
@given(graphs(max_steps=8))
def test_random_graphs_match_onnxruntime_on_opencl(case: GraphCase) -> None:
    out = check_graph(case, levels=[0, 2], targets=["opencl"], first_only=True)
    assume(out.status != "discarded")
    assert not out.findings, _explain(case, out.findings)


@pytest.mark.parametrize("name", sorted({n for n, _ in all_generators()}))
def test_every_generator_makes_its_op(name: str) -> None:
    """Each op generator is reachable and its first graph with the op is valid and passes on numpy: a
    generator that silently fell back to Relu would lose coverage."""
    expected = {"unary": {"Abs"}, "binary": {"Mul"}, "binary2": {"Add"}, "matmul": {"MatMul"},
                "gemm": {"Gemm"}, "conv": {"Conv"}, "pool": {"MaxPool"}, "reduce": {"ReduceSum"},
                "softmax": {"Softmax"}, "reshape": {"Reshape"}, "transpose": {"Transpose"},
                "flatten": {"Flatten"}, "concat": {"Concat"}, "slice": {"Slice"}, "squeeze": {"Squeeze"},
                "unsqueeze": {"Unsqueeze"}, "batchnorm": {"BatchNormalization"}, "pad": {"Pad"},
                "clip": {"Clip"}, "cast": {"Cast"}, "expand": {"Expand"}, "cnn_block": {"Conv", "Relu"},
                "squeeze_excite": {"Conv", "Sigmoid", "Mul"}, "inverted_residual": {"Conv"},
                "layernorm": {"ReduceMean", "Sqrt"}, "gelu": {"Erf"}, "softmax_parts": {"Exp", "ReduceSum"},
                "attention": {"Softmax", "Transpose"}, "mlp": {"MatMul", "Add"}, "transposes": {"Transpose"},
                "broadcasts": {"Expand"}, "compare": {"Equal"}, "where": {"Where"}, "argmax": {"ArgMax"},
                "int_arith": {"Sub"}, "int_cast": {"Cast"}, "bool_logic": {"Xor"}, "typed_move": {"Tile"},
                "gather": {"Gather"}, "slice_neg": {"Slice"}, "resize": {"Resize"},
                "pad_modes": {"Pad"}}[name]
    case = find(graphs(ops=[name]), lambda c: expected <= set(c.ops),
                settings=settings(BASE, max_examples=200, phases=[Phase.generate]))
    out = check_graph(case, targets=["numpy"])
    assert out.status == "ok" and len(out.compared) == 4, _explain(case, out.findings) + out.reason


def test_property_catches_a_wrong_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """The property can fail: a relu whose numpy reference is off by 1e-2 is reported as a mismatch on
    numpy at every level, while OpenCL (its own kernel) still matches."""
    from tessel.ir.ops.registry import get_op

    relu = get_op("relu")
    assert relu is not None
    good = relu.reference
    monkeypatch.setattr(relu, "reference", lambda sig, x: good(sig, x) + np.float32(1e-2))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": np.random.default_rng(0).uniform(-2, 2, (2, 3)).astype(np.float32)}
    out = check_graph(GraphCase(model, feeds, ["Relu"]), targets=["numpy"])
    assert out.status == "failed"
    where = [(f.stage, f.level, f.target) for f in out.findings]
    assert where == [("mismatch", lv, "numpy") for lv in range(4)]
    assert "values differ" in out.findings[0].message
