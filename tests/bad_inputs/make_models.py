"""Writes the ONNX and .npz files of the bad-input corpus (tests/bad_inputs/onnx/, npz/).

    .venv/bin/python tests/bad_inputs/make_models.py     # rewrite them after changing a case

The files are committed (each is a few hundred bytes) so the corpus is a folder of plain files a user can
feed to the tools by hand; this script records how each was made. Every model is tiny and broken in
exactly one way, so the message the tool prints is the one the manifest (cases.toml) expects.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def _t(name: str, elem: int = TensorProto.FLOAT, shape: list | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [2, 3] if shape is None else shape)


def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None, opset: int = 17,
           domains: tuple[str, ...] = ()) -> onnx.ModelProto:
    """A model built without onnx.checker, so it can be broken on purpose."""
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def valid() -> onnx.ModelProto:
    """A small valid model (add a weight, relu): the base the truncated file cuts."""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    nodes = [helper.make_node("Add", ["x", "w"], ["a"], name="add0"),
             helper.make_node("Relu", ["a"], ["y"], name="relu0")]
    return _model(nodes, [_t("x")], [_t("y")], [w])


def truncated() -> bytes:
    data = valid().SerializeToString()
    return data[: len(data) * 2 // 3]


def bad_opset() -> onnx.ModelProto:
    m = valid()
    m.opset_import[0].version = 999
    return m


def missing_input() -> onnx.ModelProto:
    """A node reads a tensor nothing defines."""
    return _model([helper.make_node("Relu", ["nowhere"], ["y"], name="relu0")], [_t("x")], [_t("y")])


def duplicate_names() -> onnx.ModelProto:
    """Two nodes write the same tensor name (SSA broken)."""
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu0"),
             helper.make_node("Neg", ["x"], ["y"], name="neg0")]
    return _model(nodes, [_t("x")], [_t("y")])


def cycle() -> onnx.ModelProto:
    """a = relu(b), b = neg(a): a cycle (and so not topologically sorted)."""
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="relu0"),
             helper.make_node("Neg", ["a"], ["b"], name="neg0"),
             helper.make_node("Add", ["x", "a"], ["y"], name="add0")]
    return _model(nodes, [_t("x")], [_t("y")])


def bad_initializer_dims() -> onnx.ModelProto:
    """An initializer whose dims say 2x3 but whose data holds 4 floats."""
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    w.ClearField("dims")
    w.dims.extend([2, 3])
    return _model([helper.make_node("Add", ["x", "w"], ["y"], name="add0")], [_t("x")], [_t("y")], [w])


def unsupported_ops() -> onnx.ModelProto:
    """Three op types without a converter (two custom, one sequence op) in five nodes."""
    nodes = [
        helper.make_node("FooOp", ["x"], ["a"], name="foo_first", domain="com.example"),
        helper.make_node("FooOp", ["a"], ["b"], name="foo_second", domain="com.example"),
        helper.make_node("BarOp", ["b"], ["c"], name="bar_only", domain="com.example"),
        helper.make_node("SequenceEmpty", [], ["s"], name="seq_empty"),
        helper.make_node("Relu", ["c"], ["y"], name="relu_ok"),
    ]
    return _model(nodes, [_t("x")], [_t("y")], opset=18, domains=("com.example",))


def string_input() -> onnx.ModelProto:
    return _model([helper.make_node("Identity", ["s"], ["y"], name="id0")],
                  [_t("s", TensorProto.STRING, [2])], [_t("y", TensorProto.STRING, [2])])


def complex_initializer() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((2, 3), np.complex128), "cw")
    return _model([helper.make_node("Identity", ["cw"], ["y"], name="id_cw")], [],
                  [_t("y", TensorProto.COMPLEX128)], [w])


def string_cast() -> onnx.ModelProto:
    """A node whose result type tessel cannot represent: the error names the node."""
    nodes = [helper.make_node("Cast", ["x"], ["c"], name="to_str", to=TensorProto.STRING),
             helper.make_node("Cast", ["c"], ["y"], name="back", to=TensorProto.FLOAT)]
    return _model(nodes, [_t("x")], [_t("y")])


def dynamic_input() -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["y"], name="relu0")], [_t("x", shape=["batch", 3])],
                  [_t("y", shape=["batch", 3])])


ONNX: dict[str, Callable[[], onnx.ModelProto | bytes]] = {
    "valid": valid,
    "truncated": truncated,
    "bad-opset": bad_opset,
    "missing-input": missing_input,
    "duplicate-names": duplicate_names,
    "cycle": cycle,
    "bad-initializer-dims": bad_initializer_dims,
    "unsupported-ops": unsupported_ops,
    "string-input": string_input,
    "complex-initializer": complex_initializer,
    "string-cast": string_cast,
    "dynamic-input": dynamic_input,
}

# Inputs for npz/model.tsl's @main(%x: tensor<2x3xf32>, %y: tensor<3xf32>).
X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.ones(3, np.float32)
NPZ: dict[str, dict[str, np.ndarray]] = {
    "good": {"x": X, "y": Y},
    "missing": {"x": X},
    "extra": {"x": X, "y": Y, "z": Y},
    "wrong-shape": {"x": X.reshape(3, 2), "y": Y},
    "wrong-dtype": {"x": X.astype(np.float64), "y": Y},
}


def write_all() -> None:
    os.makedirs(os.path.join(HERE, "onnx"), exist_ok=True)
    for name, make in ONNX.items():
        model = make()
        data = model if isinstance(model, bytes) else model.SerializeToString()
        with open(os.path.join(HERE, "onnx", f"{name}.onnx"), "wb") as f:
            f.write(data)
    for name, arrays in NPZ.items():
        np.savez(os.path.join(HERE, "npz", f"{name}.npz"), **arrays)
    np.save(os.path.join(HERE, "npz", "array.npy"), X)
    with open(os.path.join(HERE, "npz", "good.npz"), "rb") as f:
        whole = f.read()
    with open(os.path.join(HERE, "npz", "truncated.npz"), "wb") as f:
        f.write(whole[: len(whole) // 2])
    with zipfile.ZipFile(os.path.join(HERE, "npz", "object.npz"), "w") as z:  # a pickled object array
        with z.open("x.npy", "w") as f:
            np.lib.format.write_array(f, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(os.path.join(HERE, "npz", "garbage-member.npz"), "w") as z:  # a zip, not arrays
        z.writestr("x.npy", b"this is not an array\n")


if __name__ == "__main__":
    write_all()
