"""Writes DIR/shape_chain.onnx: the int64 shape subgraph a PyTorch export emits around a flatten
(Shape -> Gather -> Unsqueeze -> Concat -> Reshape), a weight initializer, an unnamed node and an input
whose name the IR has to respell. Used by lit_tests/frontends/onnx/import.test."""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
w = numpy_helper.from_array(np.arange(12 * 4, dtype=np.float32).reshape(12, 4) / 48, "fc.weight")
zero = numpy_helper.from_array(np.array(0, np.int64), "zero")
minus1 = numpy_helper.from_array(np.array([-1], np.int64), "minus1")
nodes = [
    helper.make_node("Relu", ["input:0"], ["r"], name="/features/relu"),
    helper.make_node("Shape", ["r"], ["s"], name="/Shape"),
    helper.make_node("Gather", ["s", "zero"], ["n"], name="/Gather", axis=0),
    helper.make_node("Unsqueeze", ["n"], ["n1"], name="/Unsqueeze", axes=[0]),
    helper.make_node("Concat", ["n1", "minus1"], ["shape"], name="/Concat", axis=0),
    helper.make_node("Reshape", ["r", "shape"], ["flat"], name="/Reshape"),
    helper.make_node("MatMul", ["flat", "fc.weight"], ["logits"]),
]
graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("input:0", TensorProto.FLOAT, [2, 3, 4])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 4])], [w, zero, minus1])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], producer_name="pytorch",
                          producer_version="2.1")
onnx.save(model, os.path.join(out, "shape_chain.onnx"))
