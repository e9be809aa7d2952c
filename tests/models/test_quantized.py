"""int8 models from onnxruntime's quantization tool against onnxruntime running the same model.

A small CNN and a MobileNetV2 block quantized by quantize_static (QDQ and QOperator formats, per-channel
int8 weights, uint8 activations) and a small MLP by quantize_dynamic, run by tessel at -O2 on numpy and
on OpenCL. The int8 outputs dequantized at the end must equal onnxruntime's: the integer convs and gemms
requantize, and the residual adds (qadd) compute, as onnxruntime does, in float32 to the bit. -O2 must
have turned every quantized conv and gemm into integer ops.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from .quantized import (
    BLOCK_INPUT,
    CNN_INPUT,
    LSTM_INPUT,
    MLP_INPUT,
    float_cnn,
    float_inverted_residual,
    float_lstm,
    float_mlp,
    float_pooled_cnn,
    quantize,
)

onnxruntime = pytest.importorskip("onnxruntime")


def _opencl() -> bool:
    from tessel.targets.opencl import device

    return device.opencl_available() is None


def _output_step(model: onnx.ModelProto) -> float:
    """The scale of the final DequantizeLinear (the output's quantization step)."""
    last = model.graph.node[-1]
    assert last.op_type == "DequantizeLinear", last.op_type
    scale = {i.name: i for i in model.graph.initializer}[last.input[1]]
    return float(onnx.numpy_helper.to_array(scale).reshape(-1)[0])


def _run(model: onnx.ModelProto, x: np.ndarray, target: str) -> np.ndarray:
    from tessel.frontends.onnx.backend import TesselBackend

    rep = TesselBackend.prepare(model, "CPU", target=target, pipeline="-O2", filename="int8.onnx")
    return np.asarray(rep.run([x])[0])


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {model.graph.input[0].name: x})[0]


@pytest.mark.parametrize("how", ["qdq", "qoperator"])
@pytest.mark.parametrize("target", ["numpy", "opencl"])
def test_quantized_cnn_matches_onnxruntime(how: str, target: str, tmp_path: Path) -> None:
    if target == "opencl" and not _opencl():
        pytest.skip("no OpenCL device")
    model = quantize(float_cnn(), how, tmp_path, CNN_INPUT)
    for seed in range(3):
        x = np.random.default_rng(10 + seed).standard_normal(CNN_INPUT).astype(np.float32)
        want, got = _ort(model, x), _run(model, x, target)
        np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}")


@pytest.mark.parametrize("how", ["qdq", "qoperator"])
@pytest.mark.parametrize("target", ["numpy", "opencl"])
def test_quantized_pools_and_softmax_compute_as_onnxruntime(how: str, target: str, tmp_path: Path) -> None:
    """onnxruntime runs a quantized AveragePool as QLinearAveragePool, which adds the zero point before
    rounding (averages of 2x2 windows land on .5 often, where the ONNX float chain rounds them one step
    apart), and a quantized Softmax as QLinearSoftmax (an exp table, floor(1 / y_scale)). tessel computes
    both as onnxruntime does, from QDQ models and from QOperator ones (its com.microsoft ops), so the
    output equals onnxruntime's (it was 2 steps off)."""
    if target == "opencl" and not _opencl():
        pytest.skip("no OpenCL device")
    model = quantize(float_pooled_cnn(), how, tmp_path, CNN_INPUT)
    ops = [n.op_type for n in model.graph.node]
    pools = ops.count("AveragePool" if how == "qdq" else "QLinearAveragePool")
    assert pools == 2 and ops.count("Softmax" if how == "qdq" else "QLinearSoftmax") == 1, ops
    for seed in range(2):
        x = np.random.default_rng(30 + seed).standard_normal(CNN_INPUT).astype(np.float32)
        np.testing.assert_array_equal(_run(model, x, target), _ort(model, x), err_msg=f"seed {seed}")


def test_quantized_cnn_runs_integer_contractions(tmp_path: Path) -> None:
    from tessel.frontends.onnx.importer import import_model
    from tessel.passes.manager import PassManager
    from tessel.passes.pipeline import O_LEVELS, parse_pipeline

    for how in ("qdq", "qoperator"):
        module = import_model(quantize(float_cnn(), how, tmp_path, CNN_INPUT).SerializeToString(), "cnn.onnx")
        PassManager(parse_pipeline(O_LEVELS[2])).run(module)
        names = [op.name for op in module.walk()]
        assert names.count("qconv2d") == 3 and names.count("qmatmul") == 1, how
        assert "conv2d" not in names and "gemm" not in names, how


@pytest.mark.parametrize("how", ["qdq", "qoperator"])
def test_quantized_inverted_residual_compiles_and_matches_onnxruntime(how: str, tmp_path: Path) -> None:
    """A MobileNetV2 block quantized (QDQ, or QOperator's QLinearConv / QLinearAdd): its stride-1 1x1
    qconv2d read x as it lies (one kernel, no repack), which once named a profile kernel past its one
    kernel and failed the lowered module's verifier; its residual add becomes a qadd. Compiled the way
    `tessel compile` does (verified after lowering) and run: onnxruntime's outputs exactly."""
    from tessel.frontends.onnx.importer import import_model
    from tessel.ir.verifier import verify_or_raise
    from tessel.passes.manager import PassManager
    from tessel.passes.pipeline import O_LEVELS, parse_pipeline
    from tessel.targets.opencl.kernels.base import DeviceInfo
    from tessel.targets.opencl.lower import lower_module

    model = quantize(float_inverted_residual(), how, tmp_path, BLOCK_INPUT)
    module = import_model(model.SerializeToString(), "block.onnx")
    PassManager(parse_pipeline(O_LEVELS[2])).run(module)
    names = [op.name for op in module.walk()]
    assert names.count("qconv2d") == 4 and names.count("qadd") == 1 and "add" not in names
    lower_module(module, DeviceInfo.generic())
    verify_or_raise(module)
    for target in ("numpy", "opencl") if _opencl() else ("numpy",):
        for seed in range(2):
            x = np.random.default_rng(20 + seed).standard_normal(BLOCK_INPUT).astype(np.float32)
            want, got = _ort(model, x), _run(model, x, target)
            np.testing.assert_array_equal(got, want, err_msg=f"{target}, seed {seed}")


@pytest.mark.parametrize("target", ["numpy", "opencl"])
def test_dynamically_quantized_mlp_matches_onnxruntime(target: str, tmp_path: Path) -> None:
    if target == "opencl" and not _opencl():
        pytest.skip("no OpenCL device")
    model = quantize(float_mlp(), "dynamic", tmp_path, MLP_INPUT)
    x = np.random.default_rng(3).standard_normal(MLP_INPUT).astype(np.float32)
    want, got = _ort(model, x), _run(model, x, target)
    # float outputs of integer matmuls scaled in float: onnxruntime fuses the scales differently
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def ort_optimized(model: onnx.ModelProto, tmp: Path) -> onnx.ModelProto:
    """The model as onnxruntime's graph optimizer saves it (extended level): what a user gets from
    `SessionOptions.optimized_model_filepath`, with its com.microsoft fusions (DynamicQuantizeMatMul,
    MatMulIntegerToFloat, SkipLayerNormalization, FusedMatMul, FastGelu)."""
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp / "ort-optimized.onnx")
    onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return onnx.load(options.optimized_model_filepath)


@pytest.mark.parametrize("target", ["numpy", "opencl"])
def test_onnxruntime_optimized_dynamic_mlp_matches_onnxruntime(target: str, tmp_path: Path) -> None:
    """The dynamically quantized MLP as onnxruntime's optimizer saves it: its matmuls are
    com.microsoft.DynamicQuantizeMatMul, which tessel imports as dynamic_quantize and an integer matmul."""
    if target == "opencl" and not _opencl():
        pytest.skip("no OpenCL device")
    model = quantize(float_mlp(), "dynamic", tmp_path, MLP_INPUT)
    fused = ort_optimized(model, tmp_path)
    assert "DynamicQuantizeMatMul" in {n.op_type for n in fused.graph.node}
    x = np.random.default_rng(3).standard_normal(MLP_INPUT).astype(np.float32)
    np.testing.assert_allclose(_run(fused, x, target), _ort(model, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["numpy", "opencl"])
def test_dynamically_quantized_lstm_matches_onnxruntime(target: str, tmp_path: Path) -> None:
    """quantize_dynamic turns the LSTM into com.microsoft's DynamicQuantizeLSTM (int8 W and R): tessel
    quantizes X and each step's h as onnxruntime does (qlstm_scan), one compile for two sequence lengths."""
    import tessel

    if target == "opencl" and not _opencl():
        pytest.skip("no OpenCL device")
    model = quantize(float_lstm(), "dynamic", tmp_path, LSTM_INPUT)
    assert [n.op_type for n in model.graph.node] == ["DynamicQuantizeLSTM"]
    sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tessel.compile(model, target=target)
    assert any(op.name == "qlstm_scan" for op in compiled.modules["imported"].walk())
    rng = np.random.default_rng(5)
    for steps in (7, 3):
        feed = {"x": rng.standard_normal((steps, 2, 24)).astype(np.float32),
                "h0": (rng.standard_normal((2, 2, 32)) * 0.5).astype(np.float32),
                "c0": (rng.standard_normal((2, 2, 32)) * 0.5).astype(np.float32)}
        for got, want in zip(compiled.run(None, feed), sess.run(None, feed), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)



def test_dynamically_quantized_lstm_without_its_scales_is_an_import_error() -> None:
    """A DynamicQuantizeLSTM missing its R scale and zero point names them, at the node."""
    from onnx import TensorProto, helper
    from tessel.frontends.onnx.importer import import_model
    from tessel.ir.diagnostics import DiagnosticError

    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(rng.integers(-8, 8, (1, 4, 16)).astype(np.int8), "W"),
             onnx.numpy_helper.from_array(rng.integers(-8, 8, (1, 4, 16)).astype(np.int8), "R"),
             onnx.numpy_helper.from_array(np.array([0.01], np.float32), "ws"),
             onnx.numpy_helper.from_array(np.array([0], np.int8), "wz")]
    node = helper.make_node("DynamicQuantizeLSTM", ["x", "W", "R", "", "", "", "", "", "ws", "wz"], ["y"],
                            domain="com.microsoft", hidden_size=4, name="qlstm")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 1, 1, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(DiagnosticError, match="ONNX node 'qlstm' \\(DynamicQuantizeLSTM\\): "
                                              "DynamicQuantizeLSTM needs R_scale, R_zero_point"):
        import_model(model.SerializeToString(), "qlstm.onnx")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
                                  "shufflenet", "squeezenet", "vgg19", "zfnet512"])
def test_quantized_light_model_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    """Each light model (seeded random weights) through quantize_static (QDQ, per-channel), compiled at -O2
    for OpenCL: every quantized conv and gemm integer, and the output within one step of onnxruntime's
    int8 run (convs, gemms, residual adds, average pools and softmaxes compute as onnxruntime does:
    squeezenet, shufflenet, resnet50 and inception_v1 equal it on every quantized tensor; a global average
    pool or a concat of differently scaled inputs has arithmetic of its own). A lowering that fails on a
    shape class of these networks fails here."""
    from tessel.frontends.onnx.randomize import randomize_weights

    from .test_models import LIGHT

    if not _opencl():
        pytest.skip("no OpenCL device")
    (path,) = [p for p in LIGHT if p.stem == f"light_{name}"]
    model = randomize_weights(onnx.load(path), seed=0)
    if next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) < 13:
        from onnx import version_converter

        model = version_converter.convert_version(model, 13)  # per-channel DequantizeLinear needs 13
        model.ir_version = max(model.ir_version, 7)
    inits = {i.name for i in model.graph.initializer}
    data = next(i for i in model.graph.input if i.name not in inits)  # IR v3 lists the weights as inputs
    shape = tuple(d.dim_value for d in data.type.tensor_type.shape.dim)
    qmodel = quantize(model, "qdq", tmp_path, shape, data.name)
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    sess = onnxruntime.InferenceSession(qmodel.SerializeToString(), providers=["CPUExecutionProvider"])
    want, got = sess.run(None, {data.name: x})[0], _run(qmodel, x, "opencl")
    assert np.abs(got - want).max() <= _output_step(qmodel) * 1.001
    assert np.argmax(got) == np.argmax(want)


STATIC_FAMILIES = ("resnet", "mobilenet", "efficientnet", "convnext", "unet", "audio")  # quantize_static


def _zoo_int8() -> list:
    from . import test_python_api as api  # (a module: pytest collects its tests there only)

    return api._zoo()


@pytest.mark.parametrize("name", _zoo_int8())
def test_quantized_zoo_model_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    """Every zoo model (bench/zoo, skipped when not built) quantized as users do: the CNNs by
    quant_pre_process and quantize_static (QDQ, per channel), the transformers, recurrent nets and the
    MLP by quantize_dynamic; compiled at -O2 for OpenCL on this device (on a CPU with VNNI, through the
    dot-product kernels). A QDQ model's output is within 2 output steps of onnxruntime's int8 run and
    keeps its top-1; a dynamically quantized one is within 1% of its output's range. A lowering that
    fails on a shape class of these networks fails here."""
    import zoo
    from tessel.frontends.onnx.backend import TesselBackend

    if not _opencl():
        pytest.skip("no OpenCL device")
    try:
        path, feeds = zoo.load(name)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    spec = zoo.get(name)
    model = onnx.load(path)
    static = spec.family in STATIC_FAMILIES
    if static and next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) < 13:
        from onnx import version_converter

        model = version_converter.convert_version(model, 13)
    first = spec.inputs[0]
    qmodel = quantize(model, "qdq" if static else "dynamic", tmp_path, first.shape, first.name,
                      preprocess=static)
    sess = onnxruntime.InferenceSession(qmodel.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)[0]
    rep = TesselBackend.prepare(qmodel, "CPU", target="opencl", pipeline="-O2", filename=f"{name}.int8.onnx")
    names = [i.name for i in qmodel.graph.input if i.name in feeds]
    # as quantized, and as onnxruntime's optimizer saves it (its com.microsoft fusions: QLinearAdd, QGemm,
    # QLinearSigmoid for the QDQ CNNs, DynamicQuantizeMatMul, SkipLayerNormalization for the others)
    fused = ort_optimized(qmodel, tmp_path)
    for form, m in (("quantized", qmodel), ("optimized by onnxruntime", fused)):
        if m is not qmodel:
            rep = TesselBackend.prepare(m, "CPU", target="opencl", pipeline="-O2",
                                        filename=f"{name}.ort.onnx")
        got = np.asarray(rep.run([feeds[n] for n in names])[0])
        assert got.shape == want.shape, form
        if static and qmodel.graph.node[-1].op_type == "DequantizeLinear":
            assert np.abs(got - want).max() <= 2 * _output_step(qmodel) * 1.001, form
            assert np.argmax(got.reshape(len(got), -1)[0]) == np.argmax(want.reshape(len(want), -1)[0]), form
        else:
            spread = float(np.abs(want).max()) or 1.0
            assert np.abs(got.astype(np.float64) - want).max() <= 0.01 * spread, form
