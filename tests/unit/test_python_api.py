"""docs/python-api.md's snippets, run in order in one namespace (in a temporary directory), on OpenCL
when there is a device; and the API's errors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"


def _opencl() -> bool:
    from tessel.targets.opencl import device

    return device.opencl_available() is None


def test_every_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not _opencl():
        pytest.skip("no OpenCL device")
    pytest.importorskip("onnxruntime")
    monkeypatch.chdir(tmp_path)
    snippets = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(snippets) >= 6
    scope: dict = {}
    for i, code in enumerate(snippets):
        try:
            exec(compile(code, f"{DOC.name} snippet {i + 1}", "exec"), scope)  # noqa: S102
        except Exception as e:
            raise AssertionError(f"snippet {i + 1} of docs/python-api.md failed: {e!r}\n{code}") from e


def test_errors_name_the_problem(tmp_path: Path) -> None:
    import tessel

    with pytest.raises(tessel.InvalidArgument, match="unknown target 'tpu'"):
        tessel.compile("x.onnx", target="tpu")
    with pytest.raises(TypeError, match="not int"):
        tessel.compile(3, target="numpy")
    from tessel.ir.diagnostics import DiagnosticError

    with pytest.raises(DiagnosticError, match="cannot read"):
        tessel.compile(tmp_path / "missing.onnx", target="numpy")
    m = tessel.compile("func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
                       "  %0 = relu %x : (tensor<2xf32>) -> tensor<2xf32>\n  return %0 : tensor<2xf32>\n}\n",
                       target="numpy")
    assert m.run(None, {"x": np.array([-1.0, 2.0], np.float32)})[0].tolist() == [0.0, 2.0]
    with pytest.raises(tessel.InvalidArgument, match="dtype float64"):
        m.run(None, {"x": np.array([1.0, 2.0])})
    with pytest.raises(tessel.InvalidArgument, match="unexpected input 'z'"):
        m.run(None, {"x": np.zeros(2, np.float32), "z": np.zeros(1)})
    with pytest.raises(tessel.InvalidArgument, match="needs the opencl target"):
        m.profile({"x": np.zeros(2, np.float32)})
    with pytest.raises(tessel.InvalidArgument, match="compiled"):
        tessel.load(m.module)


def test_levels_are_copies_sharing_the_weights() -> None:
    """`modules['imported']` is the module as imported (a copy: -O2 changed the other), its weights the
    same resources, not encoded and decoded again."""
    import onnx
    import tessel
    from onnx import TensorProto, helper, numpy_helper
    from tessel.api import import_model_source
    from tessel.ir.printer import to_text

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m = tessel.compile(model, target="numpy")
    imported = m.modules["imported"]
    assert to_text(imported) == to_text(import_model_source(onnx.load_from_string(model.SerializeToString())))
    assert "dense_resource" in to_text(imported) and "kernel" in to_text(m.module)
    (res,) = list(imported.resources)
    assert any(r is res for r in m.module.resources)


def test_compile_ages_its_objects_before_the_first_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """`tessel.compile` for OpenCL ends with a full collection (dynamic.settle_heap), and a dynamic model's
    first run of a size does too: the objects the compile and load made are old before the runs, so no
    generation-1 collection scans them inside a run (whisper_vad's 33rd call had taken 3-3.7x its
    median in every process)."""
    if not _opencl():
        pytest.skip("no OpenCL device")
    import gc

    import onnx
    import tessel
    from onnx import TensorProto, helper
    from tessel.targets.opencl import dynamic

    calls = []
    real = dynamic.settle_heap
    monkeypatch.setattr(dynamic, "settle_heap", lambda: (calls.append(1), real()))
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    m = tessel.compile(model, cache=False)
    assert calls == [1] and gc.get_count()[1:] == (0, 0)
    m.run(None, {"x": np.ones((3, 4), np.float32)})
    assert calls == [1, 1]  # the size the run compiled
    m.run(None, {"x": np.ones((3, 4), np.float32)})
    assert calls == [1, 1]  # none for a size loaded before
