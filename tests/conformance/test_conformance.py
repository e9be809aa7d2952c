"""Every ONNX node test case in passing_numpy.txt still passes on the numpy target.

The pass list is written by `make conformance` (tests/conformance/conformance.py --update). Tests are
parametrized by the names in the file, so collection costs nothing; the cases themselves are collected
once per worker process on first use (from conformance.py's disk cache when it is warm, ~7 s otherwise).
A case that stops passing fails here; a case that starts passing is recorded by the next
`make conformance`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

import numpy as np
import pytest

from tests.conformance import conformance, report

PASSING = conformance.read_pass_list("numpy")


def test_pass_list_is_sorted_and_unique() -> None:
    path = conformance.pass_list_path("numpy")
    lines = path.read_text().splitlines()
    assert lines == sorted(set(lines)), f"{path.name} must be sorted, one unique case name per line"
    assert all(re.fullmatch(r"test_\w+", n) for n in lines), "every line must be a node test case name"


def test_pass_count_is_reported_in_the_docs() -> None:
    """docs/op-support.md was generated from the same run as the pass list."""
    text = conformance.docs_path("numpy").read_text(encoding="utf-8")
    m = re.search(r"\*\*(\d+) of (\d+) cases pass\*\*", text)
    assert m, "docs/op-support.md has no '**N of M cases pass**' line: run make conformance"
    assert int(m.group(1)) == len(PASSING), (
        f"docs/op-support.md reports {m.group(1)} passing cases, {conformance.pass_list_path('numpy').name} "
        f"lists {len(PASSING)}: run make conformance")


def test_pass_list_names_existing_cases() -> None:
    cases = conformance.load_cases()
    unknown = [n for n in PASSING if n not in cases]
    assert not unknown, f"not node test cases in this onnx version: {unknown[:10]}"


def replay(name: str, target: str) -> None:
    """Fail unless the listed case `name` still passes on `target`."""
    cases = conformance.load_cases()
    if name not in cases:
        pytest.skip(f"{name} is not a node test case in this onnx version")
    r = conformance.run_case(cases[name], target)
    if r.status != "pass":
        pytest.fail(f"{name} no longer passes on {target} ({r.status}): {r.message}", pytrace=False)


@pytest.mark.parametrize("name", PASSING)
def test_node_case(name: str) -> None:
    replay(name, "numpy")


# --- the OpenCL target's pass list ----------------------------------------------------------------------

PASSING_OPENCL = conformance.read_pass_list("opencl")


def _opencl_reason() -> str | None:
    from tessel.targets.opencl.device import opencl_available

    return opencl_available()


def test_opencl_pass_list_is_reported_in_the_docs() -> None:
    text = conformance.docs_path("opencl").read_text(encoding="utf-8")
    m = re.search(r"\*\*(\d+) of (\d+) cases pass\*\*", text)
    assert m and int(m.group(1)) == len(PASSING_OPENCL), "run make conformance TARGET=opencl"
    assert set(PASSING_OPENCL) <= set(PASSING), "a case passes on OpenCL but not on the reference"


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if i % 8 == 0 else [pytest.mark.slow])
                                  for i, n in enumerate(PASSING_OPENCL)])
def test_opencl_node_case(name: str) -> None:
    """Every 8th case of passing_opencl.txt runs in `make test` (each builds its kernels); all in test-all."""
    reason = _opencl_reason()
    if reason:
        pytest.skip(reason)
    replay(name, "opencl")


# --- the runner itself ----------------------------------------------------------------------------------

def _dying_executor(module: object, func: object) -> Callable[[list], list]:
    """A target whose every run ends its process."""
    def run(args: list) -> list:
        os._exit(7)

    return run


def _hanging_executor(module: object, func: object) -> Callable[[list], list]:
    def run(args: list) -> list:
        time.sleep(60)
        return []

    return run


def test_a_dying_or_hanging_case_does_not_stop_the_run() -> None:
    from tessel.frontends.onnx.backend import register_target

    register_target("test-dies", _dying_executor)
    register_target("test-hangs", _hanging_executor)
    names = ["test_abs", "test_relu", "test_neg"]
    died = conformance.run_cases(names, conformance.Options(target="test-dies"), jobs=2)
    assert sorted(r.name for r in died) == sorted(names)
    assert all(r.status == "error" and "worker died (exit code 7)" in r.message for r in died), died
    hung = conformance.run_cases(names[:2], conformance.Options(target="test-hangs", timeout=0.5), jobs=2)
    assert all(r.status == "error" and "timed out" in r.message for r in hung), hung
    ok = conformance.run_cases(names, conformance.Options(), jobs=2)
    assert [r.status for r in ok] == ["pass"] * 3


def test_failures_are_classified_by_message() -> None:
    from tessel.ir.diagnostics import Diagnostic, DiagnosticError

    def diag(msg: str, *notes: str) -> DiagnosticError:
        d = Diagnostic("error", msg)
        for n in notes:
            d.note(n)
        return DiagnosticError(d)

    assert conformance.classify(diag("'m.onnx' uses 1 unsupported op type (1 node)", "Foo (opset 9): 1 node: "
                                     "n0"))[0] == "unsupported"
    assert conformance.classify(diag("input 'x' has element type UINT16, which tessel cannot represent"))[0] \
        == "unsupported"
    assert conformance.classify(diag("'add' op operand shapes [2] and [3] do not broadcast"))[0] == "error"
    assert conformance.classify(ValueError("unsupported"))[0] == "error", "only diagnostics are limitations"


def test_compare_follows_the_onnx_runner() -> None:
    f = np.array([1.0, 2.0], np.float32)
    assert conformance.compare([f], [f.copy()], 1e-3, 1e-7) is None
    assert "dtype" in conformance.compare([f], [f.astype(np.float64)], 1e-3, 1e-7)
    assert "shape" in conformance.compare([f], [f[:1]], 1e-3, 1e-7)
    assert "1/2 values differ" in conformance.compare([f], [np.array([1.0, 2.1], np.float32)], 1e-3, 1e-7)
    assert conformance.compare([np.array([np.nan])], [np.array([np.nan])], 1e-3, 1e-7) is None
    assert "outputs" in conformance.compare([f, f], [f], 1e-3, 1e-7)


def test_main_op_of_an_expanded_case_is_the_op_it_expands() -> None:
    cases = conformance.load_cases()
    assert report.main_op("test_softmax_axis_0_expanded", cases) == "Softmax"
    assert report.main_op("test_abs", cases) == "Abs"
