"""Writes DIR/lstm.onnx (a bidirectional LSTM with biases, batch 2, hidden 8, 5 steps, sequence_lens
[5, 3]) and DIR/gru_relu.onnx (a GRU whose activations are Relu and Tanh, which no scan op runs). Used by
lit_tests/frontends/onnx/import-recurrent.test."""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(0)
T, B, I, H = 5, 2, 4, 8


def weights(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def save(name: str, op: str, gates: int, dirs: int, extra: dict, lens: bool) -> None:
    inits = [weights("W", dirs, gates * H, I), weights("R", dirs, gates * H, H), weights("B", dirs, 2 * gates * H)]
    inputs = ["X", "W", "R", "B"]
    if lens:
        inits.append(numpy_helper.from_array(np.array([T, 3], np.int32), "lens"))
        inputs.append("lens")
    node = helper.make_node(op, inputs, ["Y", "Y_h"], name=f"/rnn/{op}", hidden_size=H, **extra)
    graph = helper.make_graph(
        [node], name, [helper.make_tensor_value_info("X", TensorProto.FLOAT, [T, B, I])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [T, dirs, B, H]),
         helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [dirs, B, H])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), os.path.join(out, name + ".onnx"))


save("lstm", "LSTM", 4, 2, {"direction": "bidirectional"}, lens=True)
save("gru_relu", "GRU", 3, 1, {"activations": ["Relu", "Tanh"]}, lens=False)
