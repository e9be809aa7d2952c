"""Writes the small broken or unsupported ONNX models tessel-import must refuse with a clear message.

    python error_models.py DIR     # writes DIR/<name>.onnx for every name in MODELS

Used by lit_tests/frontends/onnx/import-errors.test and tests/unit/test_import_errors.py.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None, opset: int = 17,
           domains: tuple[str, ...] = ()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=opsets)


def _t(name: str, elem: int = TensorProto.FLOAT, shape: list | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [2, 3] if shape is None else shape)


def relu() -> onnx.ModelProto:
    """A valid model (the others break it)."""
    return _model([helper.make_node("Relu", ["x"], ["y"], name="relu0")], [_t("x")], [_t("y")])


def write_empty(path: str) -> None:
    open(path, "wb").close()


def write_truncated(path: str) -> None:
    data = relu().SerializeToString()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])


def write_not_onnx(path: str) -> None:
    with open(path, "w") as f:
        f.write("this is a text file, not an ONNX model\n")


def write_checker(path: str) -> None:
    """A node reads a value nothing defines (a missing initializer): onnx.checker refuses it."""
    onnx.save(_model([helper.make_node("Relu", ["missing_weight"], ["y"], name="relu0")], [_t("x")],
                     [_t("y")]), path)


def write_external_missing(path: str) -> None:
    """Weights in an external data file that is then deleted."""
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    m = _model([helper.make_node("Add", ["x", "w"], ["y"], name="add0")], [_t("x")], [_t("y")], [w])
    data = os.path.basename(path) + ".data"
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True, location=data,
                    size_threshold=0)
    os.remove(os.path.join(os.path.dirname(path), data))


def write_unsupported(path: str) -> None:
    """Three op types tessel has no converter for: two in a custom domain, one sequence op."""
    nodes = [
        helper.make_node("FooOp", ["x"], ["a"], name="foo_1", domain="com.example"),
        helper.make_node("FooOp", ["a"], ["b"], name="foo_2", domain="com.example"),
        helper.make_node("BarOp", ["b"], ["c"], name="bar_1", domain="com.example"),
        helper.make_node("SequenceEmpty", [], ["s"], name="seq_1"),
        helper.make_node("Relu", ["c"], ["y"], name="relu_1"),
    ]
    onnx.save(_model(nodes, [_t("x")], [_t("y")], opset=18, domains=("com.example",)), path)


def write_complex_input(path: str) -> None:
    onnx.save(_model([helper.make_node("Identity", ["u"], ["y"], name="id0")],
                     [_t("u", TensorProto.COMPLEX64)], [_t("y", TensorProto.COMPLEX64)]), path)


def write_string_input(path: str) -> None:
    onnx.save(_model([helper.make_node("Identity", ["s"], ["y"], name="id0")],
                     [_t("s", TensorProto.STRING, [2])], [_t("y", TensorProto.STRING, [2])]), path)


def write_string_cast(path: str) -> None:
    """A node whose result type tessel cannot represent: the error names the node."""
    nodes = [helper.make_node("Cast", ["x"], ["c"], name="to_str", to=TensorProto.STRING),
             helper.make_node("Cast", ["c"], ["y"], name="back", to=TensorProto.FLOAT)]
    onnx.save(_model(nodes, [_t("x")], [_t("y")]), path)


def write_dynamic(path: str) -> None:
    """Two inputs with dynamic dims (a named one and an unnamed one)."""
    a = _t("a", shape=["batch", 3])
    b = _t("b", shape=["batch", None])
    onnx.save(_model([helper.make_node("Add", ["a", "b"], ["y"], name="add0")], [a, b],
                     [_t("y", shape=["batch", 3])]), path)


MODELS: dict[str, Callable[[str], None]] = {
    "empty": write_empty,
    "truncated": write_truncated,
    "not-onnx": write_not_onnx,
    "checker": write_checker,
    "external-missing": write_external_missing,
    "unsupported": write_unsupported,
    "complex-input": write_complex_input,
    "string-input": write_string_input,
    "string-cast": write_string_cast,
    "dynamic": write_dynamic,
}


def write_all(directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    for name, write in MODELS.items():
        write(os.path.join(directory, f"{name}.onnx"))


if __name__ == "__main__":
    write_all(sys.argv[1])
