"""onnxruntime's com.microsoft quantized ops (QOperator format) against onnxruntime's own kernels.

Each is imported as its dequantize -> float op -> quantize form. onnxruntime computes several of them
with lookup tables or fixed-point arithmetic (QLinearSigmoid, QLinearLeakyRelu build a 256-entry table;
QLinearAdd / QLinearMul scale in float), so a result may round the other way: every element must be
within one quantization step and almost all equal. QGemm and the whole model of tests/models run on
OpenCL too (test_quantized.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from .model_util import run_onnxruntime, run_tessel

MS = "com.microsoft"
rng = np.random.default_rng(0)


def _u8(*shape: int) -> np.ndarray:
    return rng.integers(0, 256, shape, dtype=np.uint8)


def _model(node: object, inputs: dict[str, np.ndarray], inits: dict[str, np.ndarray], out_shape: list[int],
           out_type: int = TensorProto.UINT8) -> object:
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
         for n, a in inputs.items()],
        [helper.make_tensor_value_info("y", out_type, out_shape)],
        initializer=[helper.make_tensor(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape),
                                        a.reshape(-1).tolist()) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def _check(model: object, feeds: dict[str, np.ndarray], equal_share: float = 0.98) -> None:
    (want,) = run_onnxruntime(model, feeds)
    (got,) = run_tessel(model, feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= 1, f"{int(diff.max())} steps apart"
    assert np.mean(diff == 0) >= equal_share, f"only {np.mean(diff == 0):.3f} equal"


SCALES = {"as": np.array(0.0213, np.float32), "az": np.array(120, np.uint8),
          "bs": np.array(0.0297, np.float32), "bz": np.array(130, np.uint8),
          "ys": np.array(0.0411, np.float32), "yz": np.array(125, np.uint8)}
"""Scales whose ratios are not simple fractions: with 0.02 / 0.04 half the sums are exact .5 ties, which
ONNX rounds to even and onnxruntime's QLinearAdd does not."""


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary(op: str) -> None:
    node = helper.make_node(op, ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"], domain=MS)
    feeds = {"a": _u8(2, 3, 8, 8), "b": _u8(1, 3, 1, 8)}  # b broadcasts
    inits = dict(SCALES, ys=np.array(0.3 if op == "QLinearMul" else 0.04, np.float32))
    _check(_model(node, feeds, inits, [2, 3, 8, 8]), feeds)


def test_qlinear_concat() -> None:
    node = helper.make_node("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs", "bz"], ["y"], axis=1,
                            domain=MS)
    feeds = {"a": _u8(1, 2, 4, 4), "b": _u8(1, 3, 4, 4)}
    _check(_model(node, feeds, SCALES, [1, 5, 4, 4]), feeds)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool(channels_last: int) -> None:
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "as", "az", "ys", "yz"], ["y"],
                            channels_last=channels_last, domain=MS)
    shape, out = ([1, 6, 6, 4], [1, 1, 1, 4]) if channels_last else ([1, 4, 6, 6], [1, 4, 1, 1])
    feeds = {"x": _u8(*shape)}
    _check(_model(node, feeds, SCALES, out), feeds)


@pytest.mark.parametrize("channels_last, attrs", [
    (0, {"kernel_shape": [2, 2], "strides": [2, 2]}),
    (0, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    (1, {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [1, 0, 1, 0]})])
def test_qlinear_average_pool(channels_last: int, attrs: dict) -> None:
    node = helper.make_node("QLinearAveragePool", ["x", "as", "az", "ys", "yz"], ["y"],
                            channels_last=channels_last, domain=MS, **attrs)
    k, s = attrs["kernel_shape"], attrs.get("strides", [1, 1])
    p = attrs.get("pads", [0, 0, 0, 0])
    oh, ow = ((6 + p[0] + p[2] - k[0]) // s[0] + 1, (8 + p[1] + p[3] - k[1]) // s[1] + 1)
    shape, out = ([1, 6, 8, 4], [1, oh, ow, 4]) if channels_last else ([1, 4, 6, 8], [1, 4, oh, ow])
    feeds = {"x": _u8(*shape)}
    _check(_model(node, feeds, SCALES, out), feeds)


@pytest.mark.parametrize("opset, axis, shape", [(13, -1, [2, 3, 16]), (13, 1, [1, 4, 3, 5]),
                                                (12, 1, [2, 3, 4])])
def test_qlinear_softmax(opset: int, axis: int, shape: list[int]) -> None:
    """Opset 12's softmax works on rows of the input flattened at axis."""
    node = helper.make_node("QLinearSoftmax", ["x", "as", "az", "ys", "yz"], ["y"], axis=axis, opset=opset,
                            domain=MS)
    feeds = {"x": _u8(*shape)}
    inits = dict(SCALES, ys=np.array(1 / 256, np.float32), yz=np.array(0, np.uint8))
    _check(_model(node, feeds, inits, shape), feeds)


@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})])
def test_qlinear_unary(op: str, attrs: dict) -> None:
    node = helper.make_node(op, ["x", "as", "az", "ys", "yz"], ["y"], domain=MS, **attrs)
    inits = dict(SCALES, ys=np.array(0.004 if op == "QLinearSigmoid" else 0.02, np.float32))
    feeds = {"x": np.arange(256, dtype=np.uint8).reshape(1, 4, 8, 8)}  # every input value
    _check(_model(node, feeds, inits, [1, 4, 8, 8]), feeds)


@pytest.mark.parametrize("trans_b,quantized_out", [(0, True), (1, True), (1, False)])
def test_qgemm(trans_b: int, quantized_out: bool) -> None:
    k, n = 16, 10
    w = rng.integers(-100, 100, (n, k) if trans_b else (k, n), dtype=np.int8)
    inits = {"as": SCALES["as"], "az": SCALES["az"], "w": w,
             "ws": np.linspace(0.01, 0.02, n, dtype=np.float32), "wz": np.zeros(n, np.int8),
             "c": rng.integers(-500, 500, n, dtype=np.int32),
             "ys": np.array(0.5, np.float32), "yz": SCALES["yz"]}
    outs = ["ys", "yz"] if quantized_out else []
    node = helper.make_node("QGemm", ["a", "as", "az", "w", "ws", "wz", "c", *outs], ["y"], transB=trans_b,
                            domain=MS)
    feeds = {"a": _u8(3, k)}
    used = inits if quantized_out else {k2: v for k2, v in inits.items() if k2 not in ("ys", "yz")}
    model = _model(node, feeds, used, [3, n], TensorProto.UINT8 if quantized_out else TensorProto.FLOAT)
    if quantized_out:
        _check(model, feeds)
    else:
        (want,) = run_onnxruntime(model, feeds)
        (got,) = run_tessel(model, feeds)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def _float_check(model: object, feeds: dict[str, np.ndarray]) -> None:
    """Float results as onnxruntime's, from the numpy reference and (with a device) compiled for OpenCL."""
    import tessel
    from tessel.targets.opencl.device import opencl_available

    (want,) = run_onnxruntime(model, feeds)
    runs = [run_tessel(model, feeds)[0]]
    if opencl_available() is None:
        runs.append(tessel.compile(model.SerializeToString()).run(None, feeds)[0])  # type: ignore[attr-defined]
    for got in runs:
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize("per_column, bias, b_type", [
    (False, False, np.int8), (True, True, np.int8), (False, True, np.uint8)])
def test_matmul_integer_to_float(per_column: bool, bias: bool, b_type: type) -> None:
    """onnxruntime's MatMulIntegerToFloat: the integer matmul times a_scale * b_scale (per tensor or per
    column), plus the bias."""
    n = 12
    inits = {"B": rng.integers(-100, 100, (32, n)).astype(b_type) if b_type is np.int8
             else rng.integers(0, 256, (32, n)).astype(np.uint8),
             "as": np.array(0.0213, np.float32), "az": np.array(120, np.uint8),
             "bs": (rng.uniform(0.01, 0.03, n) if per_column else np.array(0.0297)).astype(np.float32),
             "bz": np.array(0 if b_type is np.int8 else 131, b_type)}
    names = ["A", "B", "as", "bs", "az", "bz"]
    if bias:
        inits["bias"] = rng.standard_normal(n).astype(np.float32)
        names.append("bias")
    node = helper.make_node("MatMulIntegerToFloat", names, ["y"], domain=MS)
    feeds = {"A": _u8(2, 5, 32)}
    _float_check(_model(node, feeds, inits, [2, 5, n], TensorProto.FLOAT), feeds)


@pytest.mark.parametrize("bias", [False, True])
def test_dynamic_quantize_matmul(bias: bool) -> None:
    """onnxruntime's DynamicQuantizeMatMul: A quantized over its own range, then the integer matmul scaled
    back to float."""
    n = 16
    inits = {"B": rng.integers(-100, 100, (48, n)).astype(np.int8), "bs": np.array(0.0117, np.float32),
             "bz": np.array(0, np.int8)}
    names = ["A", "B", "bs", "bz"]
    if bias:
        inits["bias"] = rng.standard_normal(n).astype(np.float32)
        names.append("bias")
    node = helper.make_node("DynamicQuantizeMatMul", names, ["y"], domain=MS)
    feeds = {"A": rng.standard_normal((3, 7, 48)).astype(np.float32)}
    _float_check(_model(node, feeds, inits, [3, 7, n], TensorProto.FLOAT), feeds)
