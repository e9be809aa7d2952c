"""Small ONNX models with dynamic dims, as exporters write them (issue 35's mechanisms, built here).

- `cnn`: batch, height and width named (dim_param N, H, W); a stride-2 conv, a residual add, a global pool
  and a flatten written as PyTorch exports it (Shape -> Gather -> Unsqueeze -> Concat -> Reshape);
- `paddle`: paddle2onnx's way: `dim_value: -1` for the batch and unnamed height and width, an Unsqueeze
  of a constant and a Reshape through `0` (copy the input's dim);
- `encoder`: a batch and sequence length S: positions from Range(0, Shape(x)[1]) gathered from a table,
  single-head self-attention (MatMul, Softmax over S) and a layer norm;
- `lstm`: a bidirectional LSTM over a symbolic sequence length and batch;
- `if_on_input`, `loop_counted`, `scan_sequence`: control flow decided by the inputs (test_dynamic.py).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def _f32(rng: np.random.Generator, *shape: int, scale: float = 0.3) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes: list, inputs: list, outputs: list, inits: dict[str, np.ndarray], name: str) -> bytes:
    g = h.make_graph(nodes, name, inputs, outputs, [nh.from_array(v, k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], producer_name="tessel-tests")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


def cnn() -> bytes:
    rng = np.random.default_rng(0)
    nodes = [
        h.make_node("Conv", ["x", "w", "b"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1], name="conv"),
        h.make_node("Relu", ["c"], ["r"], name="relu"),
        h.make_node("Conv", ["r", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        h.make_node("Add", ["c2", "r"], ["s"], name="add"),
        h.make_node("GlobalAveragePool", ["s"], ["g"], name="gap"),
        h.make_node("Shape", ["g"], ["sh"], name="shape"),
        h.make_node("Gather", ["sh", "zero"], ["n"], axis=0, name="gather"),
        h.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="unsqueeze"),
        h.make_node("Concat", ["n1", "minus1"], ["target"], axis=0, name="concat"),
        h.make_node("Reshape", ["g", "target"], ["flat"], name="reshape"),
        h.make_node("Gemm", ["flat", "fw", "fb"], ["y"], transB=1, name="fc"),
    ]
    inits = {"w": _f32(rng, 8, 3, 3, 3), "b": _f32(rng, 8, scale=0.1), "w2": _f32(rng, 8, 8, 3, 3, scale=0.2),
             "b2": _f32(rng, 8, scale=0.1), "zero": np.array(0, np.int64), "ax0": np.array([0], np.int64),
             "minus1": np.array([-1], np.int64), "fw": _f32(rng, 10, 8), "fb": _f32(rng, 10, scale=0.1)}
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, "H", "W"])],
                  [h.make_tensor_value_info("y", T.FLOAT, ["N", 10])], inits, "cnn")


def paddle() -> bytes:
    rng = np.random.default_rng(1)
    x = h.make_tensor_value_info("x", T.FLOAT, [-1, 4, None, None])  # -1 and unnamed, as paddle2onnx writes
    nodes = [
        h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        h.make_node("Sigmoid", ["c"], ["s"], name="sigmoid"),
        h.make_node("Reshape", ["s", "target"], ["r"], name="reshape"),  # [0, 0, -1]: N, C, H*W
        h.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1], name="transpose"),
        h.make_node("MatMul", ["t", "m"], ["y"], name="matmul"),
    ]
    inits = {"w": _f32(rng, 6, 4, 3, 3), "target": np.array([0, 0, -1], np.int64), "m": _f32(rng, 6, 5)}
    y = h.make_tensor_value_info("y", T.FLOAT, [-1, -1, 5])
    return _model(nodes, [x], [y], inits, "paddle")


def encoder() -> bytes:
    rng = np.random.default_rng(2)
    d = 16
    nodes = [
        h.make_node("Shape", ["x"], ["sh"], name="shape"),
        h.make_node("Gather", ["sh", "one"], ["len"], axis=0, name="seq_len"),
        h.make_node("Range", ["zero", "len", "one"], ["pos"], name="range"),
        h.make_node("Gather", ["table", "pos"], ["pe"], axis=0, name="positions"),
        h.make_node("Add", ["x", "pe"], ["xp"], name="add_pos"),
        h.make_node("MatMul", ["xp", "wq"], ["q"], name="q"),
        h.make_node("MatMul", ["xp", "wk"], ["k"], name="k"),
        h.make_node("MatMul", ["xp", "wv"], ["v"], name="v"),
        h.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="kt"),
        h.make_node("MatMul", ["q", "kt"], ["scores"], name="scores"),
        h.make_node("Mul", ["scores", "scale"], ["scaled"], name="scale"),
        h.make_node("Softmax", ["scaled"], ["p"], axis=-1, name="softmax"),
        h.make_node("MatMul", ["p", "v"], ["a"], name="attend"),
        h.make_node("Add", ["a", "xp"], ["res"], name="residual"),
        h.make_node("LayerNormalization", ["res", "gamma", "beta"], ["y"], axis=-1, name="norm"),
    ]
    inits = {"one": np.array(1, np.int64), "zero": np.array(0, np.int64), "table": _f32(rng, 64, d),
             "wq": _f32(rng, d, d), "wk": _f32(rng, d, d), "wv": _f32(rng, d, d),
             "scale": np.array(d ** -0.5, np.float32), "gamma": 1 + _f32(rng, d, scale=0.1),
             "beta": _f32(rng, d, scale=0.1)}
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["B", "S", d])],
                  [h.make_tensor_value_info("y", T.FLOAT, ["B", "S", d])], inits, "encoder")




def if_on_input() -> bytes:
    """A model that switches sub-graphs on an input, as a VAD does on its sample rate: `sr == 16000`
    picks a scale-and-relu branch, anything else a tanh branch; both read the outer `x` and a weight."""
    rng = np.random.default_rng(3)
    then = h.make_graph([h.make_node("MatMul", ["x", "w"], ["a"]), h.make_node("Relu", ["a"], ["t_out"])],
                        "then", [], [h.make_tensor_value_info("t_out", T.FLOAT, ["N", 4])])
    other = h.make_graph([h.make_node("Tanh", ["x"], ["b"]), h.make_node("MatMul", ["b", "w"], ["e_out"])],
                         "else", [], [h.make_tensor_value_info("e_out", T.FLOAT, ["N", 4])])
    nodes = [h.make_node("Equal", ["sr", "k16"], ["is16"], name="is_16k"),
             h.make_node("If", ["is16"], ["y"], then_branch=then, else_branch=other, name="switch")]
    inits = {"k16": np.array(16000, np.int64), "w": _f32(rng, 8, 4)}
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["N", 8]),
                          h.make_tensor_value_info("sr", T.INT64, [])],
                  [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])], inits, "switch")


def _squeeze_if(tail: list, tail_inits: dict[str, np.ndarray], out_shape: list, name: str) -> bytes:
    """x [N, 8, T]; `if T == 1: squeeze(x, 2) else: x` (as TorchScript exports `if x.shape[-1] == 1`),
    then `tail` on the If's output `s`: the branches give values of different ranks."""
    then = h.make_graph([h.make_node("Squeeze", ["x", "ax2"], ["t_out"])], "then", [],
                        [h.make_tensor_value_info("t_out", T.FLOAT, None)])
    other = h.make_graph([h.make_node("Identity", ["x"], ["e_out"])], "else", [],
                         [h.make_tensor_value_info("e_out", T.FLOAT, None)])
    nodes = [h.make_node("Shape", ["x"], ["sh"], name="shape"),
             h.make_node("Gather", ["sh", "two"], ["t"], axis=0, name="time"),
             h.make_node("Equal", ["t", "one"], ["is1"], name="is_one"),
             h.make_node("If", ["is1"], ["s"], then_branch=then, else_branch=other, name="squeeze_if"),
             *tail]
    inits = {"ax2": np.array([2], np.int64), "two": np.array(2, np.int64), "one": np.array(1, np.int64),
             **tail_inits}
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["N", 8, "T"])],
                  [h.make_tensor_value_info("y", T.FLOAT, out_shape)], inits, name)


def squeeze_if() -> bytes:
    """The rest of the graph (a flatten and a relu) converts after either branch: each branch of an `if`
    holds its own copy of it."""
    return _squeeze_if([h.make_node("Flatten", ["s"], ["f"], axis=1, name="flatten"),
                        h.make_node("Relu", ["f"], ["y"], name="relu")], {}, ["N", None], "squeeze_if")


def squeeze_if_gemm() -> bytes:
    """A Gemm after the If takes the squeezed [N, 8] only (as silero-vad's LSTM does): the model runs where
    T is 1, and the import asserts it."""
    rng = np.random.default_rng(5)
    return _squeeze_if([h.make_node("Gemm", ["s", "w"], ["y"], name="fc")], {"w": _f32(rng, 8, 4)}, ["N", 4],
                       "squeeze_if_gemm")


def if_branch_for_other_shapes() -> bytes:
    """An If on an input whose else branch (a Gemm of the rank-3 x) only converts for shapes where the
    model would not run: at x [N, 8, 1] it is a branch the run cannot take."""
    rng = np.random.default_rng(6)
    then = h.make_graph([h.make_node("Squeeze", ["x", "ax2"], ["sq"]),
                         h.make_node("Gemm", ["sq", "w"], ["t_out"])],
                        "then", [], [h.make_tensor_value_info("t_out", T.FLOAT, ["N", 4])])
    other = h.make_graph([h.make_node("Gemm", ["x", "w"], ["e_out"])], "else", [],
                         [h.make_tensor_value_info("e_out", T.FLOAT, ["N", 4])])
    nodes = [h.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other, name="pick")]
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["N", 8, 1]),
                          h.make_tensor_value_info("flag", T.BOOL, [])],
                  [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])],
                  {"ax2": np.array([2], np.int64), "w": _f32(rng, 8, 4)}, "pick")


def loop_counted() -> bytes:
    """A Loop whose trip count is an input: the carried state goes through a small recurrence each time,
    and each iteration's state is a scan output (so that output's length is the trip count)."""
    rng = np.random.default_rng(4)
    body = h.make_graph(
        [h.make_node("MatMul", ["s_in", "w"], ["m"]), h.make_node("Tanh", ["m"], ["s_out"]),
         h.make_node("Identity", ["c_in"], ["c_out"]), h.make_node("Identity", ["s_out"], ["scan_out"])],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
                 h.make_tensor_value_info("s_in", T.FLOAT, [1, 6])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("s_out", T.FLOAT, [1, 6]),
         h.make_tensor_value_info("scan_out", T.FLOAT, [1, 6])])
    nodes = [h.make_node("Loop", ["steps", "", "s0"], ["s_final", "history"], body=body, name="recur")]
    inits = {"w": _f32(rng, 6, 6, scale=0.5)}
    return _model(nodes, [h.make_tensor_value_info("steps", T.INT64, []),
                          h.make_tensor_value_info("s0", T.FLOAT, [1, 6])],
                  [h.make_tensor_value_info("s_final", T.FLOAT, [1, 6]),
                   h.make_tensor_value_info("history", T.FLOAT, [None, 1, 6])], inits, "recur")


def scan_sequence() -> bytes:
    """A Scan over a sequence of symbolic length T: a running sum and a per-step output."""
    body = h.make_graph(
        [h.make_node("Add", ["acc_in", "x_t"], ["acc_out"]), h.make_node("Mul", ["acc_out", "x_t"], ["y_t"])],
        "body", [h.make_tensor_value_info("acc_in", T.FLOAT, [3]),
                 h.make_tensor_value_info("x_t", T.FLOAT, [3])],
        [h.make_tensor_value_info("acc_out", T.FLOAT, [3]), h.make_tensor_value_info("y_t", T.FLOAT, [3])])
    nodes = [h.make_node("Scan", ["acc0", "xs"], ["acc", "ys"], body=body, num_scan_inputs=1, name="scan")]
    return _model(nodes, [h.make_tensor_value_info("acc0", T.FLOAT, [3]),
                          h.make_tensor_value_info("xs", T.FLOAT, ["T", 3])],
                  [h.make_tensor_value_info("acc", T.FLOAT, [3]),
                   h.make_tensor_value_info("ys", T.FLOAT, ["T", 3])],
                  {}, "scan")


def lstm() -> bytes:
    """An LSTM over a sequence of symbolic length S and batch B (a CRNN's recurrent head), both
    directions, its hidden states as the output."""
    rng = np.random.default_rng(5)
    hidden, inp = 8, 6
    nodes = [h.make_node("LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=hidden, direction="bidirectional",
                         name="lstm")]
    inits = {"W": _f32(rng, 2, 4 * hidden, inp), "R": _f32(rng, 2, 4 * hidden, hidden),
             "B": _f32(rng, 2, 8 * hidden, scale=0.1)}
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["S", "B", inp])],
                  [h.make_tensor_value_info("y", T.FLOAT, ["S", 2, "B", hidden])], inits, "lstm")


MODELS = {"cnn": (cnn, [(1, 3, 16, 16), (2, 3, 13, 9)]),
          "paddle": (paddle, [(1, 4, 8, 8), (3, 4, 5, 7)]),
          "encoder": (encoder, [(1, 7, 16), (2, 12, 16)]),
          "lstm": (lstm, [(5, 1, 6), (11, 3, 6)]),
          "squeeze_if": (squeeze_if, [(2, 8, 1), (3, 8, 5)]),
          "squeeze_if_gemm": (squeeze_if_gemm, [(2, 8, 1), (5, 8, 1)])}
"""Each model and the two input shapes it is checked at."""
