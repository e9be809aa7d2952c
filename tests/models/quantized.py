"""Quantized test models made the way users make them: a small float CNN and a small MLP with seeded
weights, then onnxruntime's quantization tool (quantize_static in QDQ and QOperator format with
per-channel weights and seeded calibration data; quantize_dynamic for the MLP)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CNN_INPUT = (1, 3, 32, 32)
MLP_INPUT = (2, 16, 64)


def _init(rng: np.random.Generator, name: str, shape: list[int], scale: float) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def float_cnn(seed: int = 0) -> onnx.ModelProto:
    """conv + relu, strided conv + relu, depthwise conv + a residual add, max pool, flatten, FC."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", [16, 3, 3, 3], 0.2), _init(rng, "b1", [16], 0.1),
             _init(rng, "w2", [32, 16, 3, 3], 0.1), _init(rng, "b2", [32], 0.1),
             _init(rng, "w3", [32, 1, 3, 3], 0.2), _init(rng, "b3", [32], 0.1),
             _init(rng, "fc", [10, 32 * 8 * 8], 0.02), _init(rng, "fcb", [10], 0.1)]
    node = helper.make_node
    nodes = [node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), node("Relu", ["c1"], ["r1"]),
             node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             node("Relu", ["c2"], ["r2"]),
             node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], group=32),
             node("Add", ["c3", "r2"], ["a3"]),
             node("MaxPool", ["a3"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             node("Flatten", ["p"], ["f"]), node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1)]
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, CNN_INPUT)],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])])
    graph = helper.make_graph(nodes, "cnn", *io, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def float_pooled_cnn(seed: int = 0) -> onnx.ModelProto:
    """conv, a 2x2 average pool (averages of 4 steps: ties, at the conv's zero point), conv + relu, a 3x2
    average pool with padding, conv, and a softmax over its 4 channels: what a PP-OCR recognizer's stem
    does before its transformer, and a YOLO head's DFL."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", [8, 3, 3, 3], 0.3), _init(rng, "b1", [8], 0.1),
             _init(rng, "w2", [16, 8, 3, 3], 0.2), _init(rng, "b2", [16], 0.1),
             _init(rng, "w3", [4, 16, 1, 1], 0.2)]
    node = helper.make_node
    nodes = [node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             node("AveragePool", ["c1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]), node("Relu", ["c2"], ["r2"]),
             node("AveragePool", ["r2"], ["p2"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 0]),
             node("Conv", ["p2", "w3"], ["c3"]), node("Softmax", ["c3"], ["y"], axis=1)]
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, CNN_INPUT)],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])])
    graph = helper.make_graph(nodes, "pooled", *io, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


BLOCK_INPUT = (1, 16, 14, 14)


def float_inverted_residual(seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2's inverted residual: 1x1 expansion + ReLU6, depthwise 3x3 + ReLU6, 1x1 projection, the
    residual add; then a strided 1x1 conv. Its unpadded stride-1 1x1 convs read the input as it lies."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "we", [64, 16, 1, 1], 0.3), _init(rng, "be", [64], 0.1),
             _init(rng, "wd", [64, 1, 3, 3], 0.3), _init(rng, "bd", [64], 0.1),
             _init(rng, "wp", [16, 64, 1, 1], 0.15), _init(rng, "bp", [16], 0.1),
             _init(rng, "ws", [24, 16, 1, 1], 0.3), _init(rng, "bs", [24], 0.1),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    node = helper.make_node
    nodes = [node("Conv", ["x", "we", "be"], ["e"]), node("Clip", ["e", "lo", "hi"], ["e6"]),
             node("Conv", ["e6", "wd", "bd"], ["d"], pads=[1, 1, 1, 1], group=64),
             node("Clip", ["d", "lo", "hi"], ["d6"]), node("Conv", ["d6", "wp", "bp"], ["p"]),
             node("Add", ["p", "x"], ["r"]), node("Conv", ["r", "ws", "bs"], ["y"], strides=[2, 2])]
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, BLOCK_INPUT)],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, 7, 7])])
    model = helper.make_model(helper.make_graph(nodes, "block", *io, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def float_mlp(seed: int = 0) -> onnx.ModelProto:
    """Two MatMul + Add layers with a Relu between, on [batch, tokens, features]."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", [64, 128], 0.1), _init(rng, "b1", [128], 0.1),
             _init(rng, "w2", [128, 32], 0.1), _init(rng, "b2", [32], 0.1)]
    node = helper.make_node
    nodes = [node("MatMul", ["x", "w1"], ["m1"]), node("Add", ["m1", "b1"], ["a1"]),
             node("Relu", ["a1"], ["r1"]), node("MatMul", ["r1", "w2"], ["m2"]),
             node("Add", ["m2", "b2"], ["y"])]
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, MLP_INPUT)],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, 32])])
    graph = helper.make_graph(nodes, "mlp", *io, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


LSTM_INPUT = ("T", 2, 24)
"""The float LSTM's input [T, B, I]: the sequence length is a dim_param."""


def float_lstm(seed: int = 0) -> onnx.ModelProto:
    """A bidirectional LSTM (hidden 32, biases, initial states) over a dynamic sequence length, as a CRNN's
    head has it; onnxruntime's quantize_dynamic makes a DynamicQuantizeLSTM of it."""
    rng = np.random.default_rng(seed)
    t, b, i = LSTM_INPUT
    h = 32
    inits = [_init(rng, "W", [2, 4 * h, i], 0.3), _init(rng, "R", [2, 4 * h, h], 0.3),
             _init(rng, "B", [2, 8 * h], 0.1)]
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["y", "hn", "cn"], hidden_size=h,
                              direction="bidirectional", name="lstm")]
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, [t, b, i]),
           helper.make_tensor_value_info("h0", TensorProto.FLOAT, [2, b, h]),
           helper.make_tensor_value_info("c0", TensorProto.FLOAT, [2, b, h])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [t, 2, b, h]),
           helper.make_tensor_value_info("hn", TensorProto.FLOAT, [2, b, h]),
           helper.make_tensor_value_info("cn", TensorProto.FLOAT, [2, b, h])])
    graph = helper.make_graph(nodes, "lstm", *io, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def quantize(model: onnx.ModelProto, how: str, tmp: Path, shape: tuple[int, ...],
             input_name: str | None = None, seed: int = 0, preprocess: bool = False) -> onnx.ModelProto:
    """`model` through onnxruntime's quantization tool: how = 'qdq' or 'qoperator' (quantize_static, per
    channel, uint8 activations, int8 weights, 8 seeded calibration inputs for `input_name`, default the
    first graph input) or 'dynamic'; `preprocess`: its quant_pre_process first (shape inference, BatchNorm
    folded into the convs), as its documentation asks."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    src, dst = tmp / f"{how}.f32.onnx", tmp / f"{how}.int8.onnx"
    onnx.save(model, src)
    if preprocess:
        from onnxruntime.quantization.shape_inference import quant_pre_process

        pre = tmp / f"{how}.pre.onnx"
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        src = pre
    if how == "dynamic":
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
        return onnx.load(dst)
    rng = np.random.default_rng(seed)
    name = input_name or model.graph.input[0].name

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.data = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(8)])

        def get_next(self) -> dict | None:
            return next(self.data, None)

    fmt = QuantFormat.QDQ if how == "qdq" else QuantFormat.QOperator
    quantize_static(str(src), str(dst), Reader(), quant_format=fmt, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return onnx.load(dst)
