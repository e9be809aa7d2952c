"""Writes DIR/dql.onnx: DynamicQuantizeLinear of X [64, 300] feeding a MatMulInteger with int8 weights,
scaled back to float (what onnxruntime's quantize_dynamic makes of a MatMul). Used by
lit_tests/frontends/onnx/import-dynamic-quantize.test."""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(0)
inits = [numpy_helper.from_array(rng.integers(-100, 100, (300, 16)).astype(np.int8), "W"),
         numpy_helper.from_array(np.array(0, np.int8), "W_zero_point"),
         numpy_helper.from_array(np.array(0.01, np.float32), "W_scale")]
nodes = [
    helper.make_node("DynamicQuantizeLinear", ["X"], ["Xq", "X_scale", "X_zero_point"], name="/fc/quant"),
    helper.make_node("MatMulInteger", ["Xq", "W", "X_zero_point", "W_zero_point"], ["acc"], name="/fc/matmul"),
    helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
    helper.make_node("Mul", ["X_scale", "W_scale"], ["s"]),
    helper.make_node("Mul", ["accf", "s"], ["Y"]),
]
graph = helper.make_graph(nodes, "dql", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [64, 300])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [64, 16])], inits)
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(out, "dql.onnx"))
