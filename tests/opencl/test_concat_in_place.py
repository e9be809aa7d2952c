"""Concatenations assembled in place (passes/liveness.py placements, targets/opencl/lower.plan_memory):
the lit cases of lit_tests/targets/opencl/codegen-concat-in-place.tsl run on OpenCL to the numpy
interpreter's results, and on densenet121 (-O2) every concat is assembled with no copy kernel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from tessel.cli.common import SPLIT_MARKER
from tessel.frontends.onnx.importer import import_model
from tessel.ir.interpreter import run_func
from tessel.ir.parser import parse_module
from tessel.passes.manager import PassManager
from tessel.passes.pipeline import O_LEVELS, parse_pipeline
from tessel.targets.opencl.lower import lower_module
from tessel.targets.opencl.runtime import Executable

from .conftest import here

LIT = Path(__file__).resolve().parents[2] / "lit_tests" / "targets" / "opencl" / "codegen-concat-in-place.tsl"
CHUNKS = SPLIT_MARKER.split(LIT.read_text())


def random_inputs(func, seed: int = 0) -> list[np.ndarray]:  # noqa: ANN001
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, a.type.dims).astype(np.float32) for a in func.args]


@pytest.mark.parametrize("svm", [True, False], ids=["svm", "buffers"])
@pytest.mark.parametrize("chunk", range(len(CHUNKS)))
def test_lit_cases_run(chunk: int, svm: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each case twice: with the slots and inputs in fine-grained SVM where the device has it (results in
    sub-regions of a slot are read on the host), and with plain buffers and enqueued copies; two runs
    each, so the second run's inputs overwrite the first's."""
    if not svm:
        monkeypatch.setenv("TESSEL_NO_SVM", "1")
    want_module = parse_module(CHUNKS[chunk].encode(), "concat.tsl")
    func = want_module.funcs[0]
    m = parse_module(CHUNKS[chunk].encode(), "concat.tsl")
    lower_module(m, here())
    exe = Executable(m, m.funcs[0])
    if func.args:
        shared = isinstance(exe.args[0], exe.cl.SVM)
        caps = getattr(exe.device, "svm_capabilities", 0) & exe.cl.device_svm_capabilities.FINE_GRAIN_BUFFER
        assert shared == (svm and bool(caps))
    for seed in (0, 1):
        inputs = random_inputs(func, seed)
        want = run_func(want_module, func, inputs)
        got = exe.run(inputs)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_densenet_concats_assembled() -> None:
    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_densenet121.onnx"
    m = import_model(path.read_bytes(), path.name)
    PassManager(parse_pipeline(O_LEVELS[2])).run(m)
    concats = sum(1 for op in m.funcs[0].block.ops if op.name == "concat")
    lower_module(m)
    launches = [op for op in m.funcs[0].block.ops if op.name == "cl.launch"]
    assembled = [op for op in launches if op.attrs.get("assembled")]
    assert concats == 58 and len(assembled) == concats
    assert all(not op.attrs["kernels"] for op in assembled)


def test_unaligned_offset_is_a_clear_error() -> None:
    """A result at an offset the device cannot make a sub-buffer of (a module lowered for a device with a
    smaller alignment) is a diagnostic naming the offset, not a driver error."""
    from tessel.ir.diagnostics import DiagnosticError

    m = parse_module(CHUNKS[0].encode(), "concat.tsl")
    lower_module(m)
    placed = next(op for op in m.funcs[0].block.ops if op.attrs.get("offsets"))
    placed.attrs["offsets"] = [4]
    with pytest.raises(DiagnosticError, match="byte offset 4 .* aligned to"):
        Executable(m, m.funcs[0])


def test_verifier_checks_offsets() -> None:
    from tessel.ir.verifier import verify

    m = parse_module(CHUNKS[0].encode(), "concat.tsl")
    lower_module(m)
    placed = next(op for op in m.funcs[0].block.ops if op.attrs.get("offsets"))
    placed.attrs["offsets"] = [-128]
    assert any("'offsets' needs one non-negative byte offset" in d.message for d in verify(m))
    assembled = next(op for op in m.funcs[0].block.ops if op.attrs.get("assembled"))
    assembled.attrs["assembled"] = False
    assert any("empty only for an `assembled` launch" in d.message for d in verify(m))
