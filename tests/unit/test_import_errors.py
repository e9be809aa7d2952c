"""tessel-import refuses broken and unsupported models with one clear message and exit status 1.

Each case runs the installed `tessel-import` on a small model written by
lit_tests/frontends/onnx/Inputs/error_models.py (shared with the lit test import-errors.test, which pins
the full messages) and checks the exit status, that the message names the file (and the node or input
at fault), and that no Python traceback leaks out.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = Path(sys.executable).parent / "tessel-import"


def _error_models() -> ModuleType:
    path = ROOT / "lit_tests" / "frontends" / "onnx" / "Inputs" / "error_models.py"
    spec = importlib.util.spec_from_file_location("tessel_error_models", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MODELS = _error_models()


def tessel_import(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(TOOL), *map(str, args)], capture_output=True, text=True)


def refused(tmp_path: Path, name: str, *extra: str) -> str:
    """Write model `name`, import it, check exit 1 with a traceback-free message naming the file."""
    path = tmp_path / f"{name}.onnx"
    MODELS.MODELS[name](str(path))
    r = tessel_import(path, *extra)
    assert r.returncode == 1, f"exit {r.returncode}, expected 1:\n{r.stderr}"
    assert r.stdout == "", "nothing goes to stdout on an error"
    assert "Traceback" not in r.stderr and "internal compiler error" not in r.stderr, r.stderr
    assert r.stderr.startswith("tessel-import: error: "), r.stderr
    assert f"{name}.onnx" in r.stderr.splitlines()[0], f"the first line should name the file:\n{r.stderr}"
    return r.stderr


@pytest.mark.parametrize("name,phrases", [
    ("empty", ["is empty, not an ONNX model"]),
    ("truncated", ["is not a valid ONNX model", "truncated"]),
    ("not-onnx", ["not", "ONNX model"]),
    ("checker", ["fails onnx.checker", "missing_weight"]),
    ("external-missing", ["external-missing.onnx.data"]),
    ("complex-input", ["input 'u'", "COMPLEX64", "cannot represent"]),
    ("string-input", ["input 's'", "STRING", "cannot represent"]),
    ("string-cast", ["ONNX node 'to_str' (Cast)", "STRING", "cannot represent"]),
])
def test_bad_model_is_refused_with_a_clear_message(tmp_path: Path, name: str, phrases: list[str]) -> None:
    err = refused(tmp_path, name)
    for p in phrases:
        assert p in err, f"{p!r} not in:\n{err}"


def test_every_unsupported_op_is_listed_in_one_error(tmp_path: Path) -> None:
    err = refused(tmp_path, "unsupported")
    assert err.count("error:") == 1, err
    assert "uses 3 unsupported op types (4 nodes)" in err
    assert "FooOp (domain 'com.example'): 2 nodes: foo_1, foo_2" in err
    assert "BarOp (domain 'com.example'): 1 node: bar_1" in err
    assert "SequenceEmpty (opset 18): 1 node: seq_1" in err


def test_dynamic_inputs_stay_symbolic(tmp_path: Path) -> None:
    """A dim_param names a symbol that both inputs share; an unnamed dim gets one of its own."""
    path = tmp_path / "dynamic.onnx"
    MODELS.write_dynamic(str(path))
    r = tessel_import(path)
    assert r.returncode == 0, r.stderr
    assert "func @main(%a: tensor<[batch]x3xf32>, %b: tensor<[batch]x[b_1]xf32>)" in r.stdout


def test_input_shape_fixes_dynamic_inputs(tmp_path: Path) -> None:
    path = tmp_path / "dynamic.onnx"
    MODELS.write_dynamic(str(path))
    r = tessel_import(path, "--input-shape", "a=2x3", "--input-shape", "b=2x3")
    assert r.returncode == 0, r.stderr
    assert "func @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>)" in r.stdout


@pytest.mark.parametrize("shapes,phrases", [
    (["a=2x3", "c=2x3"], ["--input-shape names 'c'", "not an input", "inputs: a, b"]),
    (["a=2x4", "b=2x3"], ["--input-shape a=2x4 does not fit", "batchx3"]),
], ids=["unknown-name", "wrong-dims"])
def test_bad_input_shape_is_refused(tmp_path: Path, shapes: list[str], phrases: list[str]) -> None:
    args = [a for s in shapes for a in ("--input-shape", s)]
    err = refused(tmp_path, "dynamic", *args)
    for p in phrases:
        assert p in err, f"{p!r} not in:\n{err}"


def test_malformed_input_shape_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "dynamic.onnx"
    MODELS.write_dynamic(str(path))
    r = tessel_import(path, "--input-shape", "a:2x3")
    assert r.returncode == 2 and "NAME=DxDx" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_missing_file(tmp_path: Path) -> None:
    r = tessel_import(tmp_path / "nope.onnx")
    assert r.returncode == 1 and "cannot read" in r.stderr and "nope.onnx" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_unsorted_nodes_are_sorted_before_the_checker() -> None:
    """onnxruntime's convert_float_to_float16(keep_io_types=True) appends the input casts after the nodes
    that read them; onnxruntime runs such graphs and the importer sorts them (stably: a sorted graph keeps
    its order) instead of failing onnx.checker. A real cycle still fails, naming the node."""
    from onnx import TensorProto, helper
    from tessel.frontends.onnx.importer import import_model
    from tessel.ir.diagnostics import DiagnosticError

    nodes = [helper.make_node("Relu", ["c"], ["y"], name="relu"),
             helper.make_node("Neg", ["x"], ["c"], name="neg")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    module = import_model(model.SerializeToString(), "unsorted.onnx")
    assert [op.name for op in module.funcs[0].block.ops][:2] == ["neg", "relu"]
    cycle = helper.make_graph([helper.make_node("Neg", ["b"], ["a"], name="n1"),
                               helper.make_node("Neg", ["a"], ["b"], name="n2")], "g", [],
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])])
    cyclic = helper.make_model(cycle, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(DiagnosticError, match="topologically sorted"):
        import_model(cyclic.SerializeToString(), "cycle.onnx")
