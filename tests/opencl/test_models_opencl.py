"""End to end on OpenCL: the bundled models, lowered by tessel-codegen and run by the pyopencl runtime,
match onnxruntime (random-weight light models) and their shipped outputs (pytorch models); and the
issue's one-pipe workflow works through the tools."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import onnx
import pytest

from tests.models.test_models import (
    BIG_WEIGHTS,
    BIN,
    DATA,
    PYTORCH,
    _light_params,
    _load_data_sets,
    assert_outputs_close,
    check_random_weight_copy,
    run_tessel,
)

OPENCL_SLOW = BIG_WEIGHTS | {"light_densenet121", "light_inception_v1", "light_inception_v2"}
"""Each builds 100-200 distinct kernels, 20-120 s on a cold PoCL cache: run by `make test-all`."""


@pytest.mark.parametrize("path", _light_params(slow=OPENCL_SLOW))
def test_light_model_with_random_weights_on_opencl(path: Path) -> None:
    check_random_weight_copy(path, "opencl")


@pytest.mark.parametrize(
    "case", PYTORCH, ids=[f"{p.parent.name.removeprefix('pytorch-')}/{p.name}" for p in PYTORCH]
)
def test_pytorch_model_on_opencl(case: Path) -> None:
    model = onnx.load(case / "model.onnx")
    for inputs, expected in _load_data_sets(case):
        got = run_tessel(model, inputs, f"{case.name}.onnx", target="opencl")
        assert_outputs_close(got, expected, rtol=1e-3, atol=1e-5)


def test_resnet50_one_pipe_with_profile(tmp_path: Path) -> None:
    """The issue's pipe: tessel-import | tessel-opt -O1 | tessel-codegen | tessel-run --profile."""
    path = DATA / "light" / "light_resnet50.onnx"
    pipe = (
        f"{BIN}/tessel-import {path} | {BIN}/tessel-opt -O1 | {BIN}/tessel-codegen --target=opencl | "
        f"{BIN}/tessel-run --random-inputs --profile --top 5 --report-json {tmp_path}/r.json"
    )
    r = subprocess.run(
        ["bash", "-o", "pipefail", "-c", pipe],
        capture_output=True,
        text=True,
        env=dict(os.environ, COLUMNS="120"),
    )
    assert r.returncode == 0, r.stderr[-4000:]
    assert "conv2d" in r.stdout and "GFLOP/s" in r.stdout and "ran @main on opencl" in r.stdout
    import json

    report = json.loads((tmp_path / "r.json").read_text())
    assert report["target"] == "opencl" and report["launches"] > 100
    assert {"median_ms", "min_ms", "kernels", "peak_bytes"} <= set(report)
    assert any("conv2d" in k["ops"] for k in report["kernels"])
