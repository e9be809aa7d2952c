"""Writes the models and arrays of lit_tests/cli/import-constant-inputs.test.

    python constant_inputs.py DIR

- reshape.onnx: y = Reshape(data: f32[2, 3], shape: i64[2]), the shape fed as a graph input (as the ONNX
  node tests do), so tessel-import needs --constant-input shape=...;
- concat.onnx: the same Reshape, its shape Concat(rows: i64[1], cols: i64[1]) of two graph inputs;
- arrays: shape.npy ([3, 2]), shape-i32.npy (int32), shape-3.npy ([3, 2, 1]), shape.npz ({shape}),
  typo.npz ({shap}), rows.npy, cols.npy, data.npz ({data}: 0..5), and text.txt (not numpy at all).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper


def _model(nodes: list, inputs: list) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    data = helper.make_tensor_value_info("data", TensorProto.FLOAT, [2, 3])
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    onnx.save(_model([helper.make_node("Reshape", ["data", "shape"], ["y"], name="reshape")], [data, shape]),
              os.path.join(out, "reshape.onnx"))
    rows = helper.make_tensor_value_info("rows", TensorProto.INT64, [1])
    cols = helper.make_tensor_value_info("cols", TensorProto.INT64, [1])
    onnx.save(_model([helper.make_node("Concat", ["rows", "cols"], ["s"], name="concat", axis=0),
                      helper.make_node("Reshape", ["data", "s"], ["y"], name="reshape")], [data, rows, cols]),
              os.path.join(out, "concat.onnx"))
    np.save(os.path.join(out, "shape.npy"), np.array([3, 2], np.int64))
    np.save(os.path.join(out, "shape-i32.npy"), np.array([3, 2], np.int32))
    np.save(os.path.join(out, "shape-3.npy"), np.array([3, 2, 1], np.int64))
    np.savez(os.path.join(out, "shape.npz"), shape=np.array([3, 2], np.int64))
    np.savez(os.path.join(out, "typo.npz"), shap=np.array([3, 2], np.int64))
    np.save(os.path.join(out, "rows.npy"), np.array([3], np.int64))
    np.save(os.path.join(out, "cols.npy"), np.array([2], np.int64))
    np.savez(os.path.join(out, "data.npz"), data=np.arange(6, dtype=np.float32).reshape(2, 3))
    with open(os.path.join(out, "text.txt"), "w") as f:
        f.write("3 2\n")


if __name__ == "__main__":
    main(sys.argv[1])
