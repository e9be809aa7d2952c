"""The model suites under `--check-bounds --poison`: every kernel checks its accesses and the memory plan
starts as signalling NaNs each run, and the models still match onnxruntime / their shipped outputs (an
out-of-bounds access would raise a KernelFault; a read of unwritten memory would carry NaNs out).

`make test` runs a fast cross-section of the pytorch models (checked kernels build 2-3x slower on PoCL);
`make test-all` runs every pytorch-converted and pytorch-operator model and the light models with random
weights. `make bench-checked` runs the light models, the zoo and the pytorch-converted models checked and
plain side by side and reports the slowdown."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.models.test_models import PYTORCH, _light_params, check_random_weight_copy

from . import test_models_opencl as plain  # (a module: pytest collects its tests there only)

FAST = {"test_Conv2d_depthwise_padded", "test_Conv2d_groups", "test_AvgPool2d_stride",
        "test_BatchNorm2d_eval", "test_ConvTranspose2d", "test_MaxPool2d", "test_PixelShuffle",
        "test_Embedding", "test_GLU_dim",
        "test_operator_maxpool", "test_operator_concat2", "test_operator_pad", "test_operator_index",
        "test_operator_reduced_mean_keepdim", "test_operator_mm", "test_operator_chunk"}
"""The pytorch models `make test` runs checked: convs (depthwise, grouped, transposed: padded channel
blocks), pools, norms, gathers, concat, pad, reductions, matmul."""


@pytest.fixture(autouse=True)
def checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSEL_CHECK_BOUNDS", "1")
    monkeypatch.setenv("TESSEL_POISON", "1")


@pytest.mark.parametrize("case", [
    pytest.param(p, id=f"{p.parent.name.removeprefix('pytorch-')}/{p.name}",
                 marks=[] if p.name in FAST else [pytest.mark.slow]) for p in PYTORCH])
def test_pytorch_model_checked(case: Path) -> None:
    plain.test_pytorch_model_on_opencl(case)


@pytest.mark.slow  # every one: squeezenet, the fastest, takes 1.5-9 minutes to build checked on a cold
@pytest.mark.parametrize("path", _light_params())  # PoCL cache here (make test-all runs them)
def test_light_model_checked(path: Path) -> None:
    check_random_weight_copy(path, "opencl")


def test_the_environment_turns_the_checks_on() -> None:
    """The suites above really run checked: a lowering and an Executable given no flags take them from
    $TESSEL_CHECK_BOUNDS and $TESSEL_POISON, as the backend's do."""
    from tessel.ir.parser import parse_module
    from tessel.targets.opencl.lower import lower_module
    from tessel.targets.opencl.runtime import Executable

    m = parse_module("""module @m {
  func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
    %0 = relu %x : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}""", "<test>")
    lower_module(m)
    prog = m.funcs[0].block.ops[0]
    assert prog.attrs["checks"] == ["bounds"] and "TSL_G(" in prog.attrs["source"]
    exe = Executable(m, m.funcs[0])
    assert exe.checks is not None and exe.checks.bounds and exe.checks.poison
