"""Half precision on whole models: f16 / bf16 weights (`--weight-precision`, convert-precision) and float16
models (emulate-f16 on OpenCL).

The MLP of tests/models/quantized.py and the light models' fully connected nets at -O2 with f16 and bf16
matmul / gemm weights: OpenCL must match the numpy reference running the same converted module (the
gemm template widens the weights exactly as the reference does), and the results stay within 1e-2
relative of float32 with the same top-1 class. alexnet, vgg19 and zfnet512 carry 60-140 M weights: slow.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from .quantized import MLP_INPUT, float_mlp
from .test_models import LIGHT


def _opencl() -> bool:
    from tessel.targets.opencl import device

    return device.opencl_available() is None


def _run(model: onnx.ModelProto, x: np.ndarray, target: str, weights: str) -> np.ndarray:
    from tessel.frontends.onnx.backend import TesselBackend
    from tessel.passes.pipeline import level_pipeline

    rep = TesselBackend.prepare(model, "CPU", target=target, pipeline=level_pipeline(2, weights),
                                filename="model.onnx")
    return np.asarray(rep.run([x])[0])


def _check(model: onnx.ModelProto, x: np.ndarray, weights: str) -> None:
    full = _run(model, x, "numpy", "f32")
    ref = _run(model, x, "numpy", weights)
    scale = np.abs(full).max()
    assert np.abs(ref - full).max() <= 1e-2 * scale, f"{weights} weights moved the result too far"
    assert np.abs(ref - full).max() > 0, f"{weights} weights changed nothing: not converted?"
    if _opencl():
        got = _run(model, x, "opencl", weights)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * scale)
    assert np.argmax(ref.reshape(ref.shape[0], -1)[0]) == np.argmax(full.reshape(full.shape[0], -1)[0])


@pytest.mark.parametrize("weights", ["f16", "bf16"])
def test_mlp_with_half_weights(weights: str) -> None:
    x = np.random.default_rng(0).standard_normal(MLP_INPUT).astype(np.float32)
    _check(float_mlp(), x, weights)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bvlc_alexnet", "zfnet512", "vgg19"])
def test_fc_heavy_light_model_with_f16_weights(name: str) -> None:
    from tessel.frontends.onnx.randomize import randomize_weights

    (path,) = [p for p in LIGHT if p.stem == f"light_{name}"]
    model = randomize_weights(onnx.load(path), seed=0)
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    _check(model, x, "f16")


@pytest.mark.parametrize("target", ["numpy", "opencl"])
def test_float16_model_matches_onnxruntime(target: str) -> None:
    """The CNN of quantized.py converted to float16 (onnxruntime's converter: f16 weights, activations,
    inputs and outputs) within f16 tolerance of onnxruntime running it; on OpenCL without cl_khr_fp16 it
    computes in f32 between half-precision tensors (emulate-f16)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from .quantized import CNN_INPUT, float_cnn
    from .test_quantized import _ort

    if target == "opencl" and not _opencl():
        pytest.skip("no OpenCL device")
    model = convert_float_to_float16(float_cnn(), keep_io_types=False)
    x = np.random.default_rng(2).standard_normal(CNN_INPUT).astype(np.float16)
    want = _ort(model, x)
    got = _run(model, x, target, "f32")
    assert got.dtype == np.float16
    assert np.abs(got.astype(np.float32) - want).max() <= 1e-2 * np.abs(want).max()
    assert np.argmax(got) == np.argmax(want)


def _launches(model: onnx.ModelProto) -> int:
    """cl.launch ops of `model` imported, optimized at -O2 and lowered for the generic OpenCL device."""
    from tessel.frontends.onnx.importer import import_model
    from tessel.passes.manager import PassManager
    from tessel.passes.pipeline import level_pipeline, parse_pipeline
    from tessel.targets.opencl.kernels.base import DeviceInfo
    from tessel.targets.opencl.lower import lower_module

    module = import_model(model.SerializeToString(), "model.onnx")
    PassManager(parse_pipeline(level_pipeline(2))).run(module)
    lower_module(module, DeviceInfo.generic())
    return sum(op.name == "cl.launch" for op in module.walk())


@pytest.mark.parametrize("keep_io_types", [True, False])
@pytest.mark.parametrize("which", ["cnn", "block"])
def test_float16_model_compiles_to_its_float32_kernels(which: str, keep_io_types: bool) -> None:
    """-O2 computes an f16 model in f32 between its half edges (emulate-f16{intermediates=f32}, before
    fusion), so it fuses as its f32 original does: the same launches, plus the casts at half inputs and
    outputs when the model's own edges are half and no region absorbs them; its outputs within f16
    tolerance of onnxruntime's run of the f16 model."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from .quantized import BLOCK_INPUT, CNN_INPUT, float_cnn, float_inverted_residual
    from .test_quantized import _ort

    f32, shape = (float_cnn(), CNN_INPUT) if which == "cnn" else (float_inverted_residual(), BLOCK_INPUT)
    half = convert_float_to_float16(f32, keep_io_types=keep_io_types)
    edges = 0 if keep_io_types else 2  # the f16 input's cast in, the f16 output's cast out
    assert _launches(half) <= _launches(f32) + edges
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32 if keep_io_types else np.float16)
    want = _ort(half, x).astype(np.float32)
    for target in ("numpy", "opencl") if _opencl() else ("numpy",):
        got = _run(half, x, target, "f32").astype(np.float32)
        assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max(), target
