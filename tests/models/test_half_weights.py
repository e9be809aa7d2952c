"""Half-precision weights (`--weight-precision`, the convert-precision pass) on whole models.

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
