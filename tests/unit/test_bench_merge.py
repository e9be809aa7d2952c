"""bench/bench.py's merging of several processes' rows (no timing: the speed goals live in `make bench`)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("tessel_bench", BENCH)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def row(cl: float, ort: float, correct: bool = True, err: float = 1e-6, rounds: int = 3) -> dict:
    return {"model": "m", "tessel_opencl_ms": cl, "onnxruntime_ms": ort, "ratio": cl / ort, "kernels": 7,
            "correct": correct, "max_abs_err": err, "compile_load_ms": 100.0 * cl,
            "rounds_opencl_ms": [cl] * rounds, "rounds_ort_ms": [ort] * rounds, "outlier_rounds": 0}


def test_merge_takes_each_runtimes_best_process(bench) -> None:
    """Each runtime's best over the processes (not the best ratio of one process); the first process's
    compile time; correct only if every process was; every process's best and round kept."""
    out = bench.merge_rows([row(12.0, 10.0), row(9.0, 11.0), row(10.0, 8.0, err=1e-5)])
    assert (out["tessel_opencl_ms"], out["onnxruntime_ms"], out["ratio"]) == (9.0, 8.0, 1.125)
    assert out["processes_opencl_ms"] == [12.0, 9.0, 10.0] and out["processes_ort_ms"] == [10.0, 11.0, 8.0]
    assert out["compile_load_ms"] == 1200.0 and out["max_abs_err"] == 1e-5 and out["correct"]
    assert len(out["rounds_opencl_ms"]) == 9 and out["outlier_rounds"] == 0
    assert not bench.merge_rows([row(1.0, 1.0), row(1.0, 1.0, correct=False)])["correct"]


def test_merge_flags_processes_over_twice_the_best(bench) -> None:
    out = bench.merge_rows([row(10.0, 5.0), row(25.0, 5.0)])  # a process stuck at one-thread speed
    assert out["outlier_rounds"] == 3 and out["tessel_opencl_ms"] == 10.0


def test_processes_must_be_positive() -> None:
    r = subprocess.run([sys.executable, str(BENCH), "--processes", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and "--processes must be at least 1" in r.stderr


def medians(r: dict, cl: float, ort: float, over: float = 0.1, execution: str = "pool") -> dict:
    r.update(median_opencl_ms=cl, median_ort_ms=ort, median_ratio=cl / ort, kernel_ms=cl - over,
             overhead_ms=over, overhead_share=over / cl, execution=execution, execution_note="", peak_bytes=0,
             tessel_numpy_ms=None)
    return r


def test_merge_reports_the_process_of_the_median_single_process_ratio(bench) -> None:
    """The single-process columns come from one process (the median of their ratios), not mixed."""
    rows = [medians(row(10.0, 10.0), 12.0, 10.0, 0.5), medians(row(9.0, 9.0), 9.0, 10.0, 0.2, "inline"),
            medians(row(11.0, 8.0), 20.0, 10.0)]
    out = bench.merge_rows(rows)
    assert out["median_ratio"] == 1.2 and out["overhead_ms"] == 0.5 and out["execution"] == "pool"
    assert out["overhead_share"] == 0.5 / 12.0
    assert out["processes_median_ratio"] == [1.2, 0.9, 2.0]


def test_render_has_a_table_and_geomean_per_suite(bench) -> None:
    light = medians(row(2.0, 1.0), 2.0, 1.0) | {"model": "resnet50"}
    zoo = [medians(row(1.0, 1.0), 1.0, 2.0) | {"model": m} for m in ("mlp", "gpt2")]
    text = bench.render([light, *zoo], None)
    assert "light models:" in text and "zoo models:" in text
    assert "over 1 models: 2.00x by single-process medians" in text
    assert "over 2 models: 0.50x by single-process medians" in text


def test_unknown_suite_and_model_are_usage_errors() -> None:
    for flag in (["--suite", "nope"], ["--models", "no_such_model"]):
        r = subprocess.run([sys.executable, str(BENCH), *flag], capture_output=True, text=True)
        assert r.returncode == 2, r.stderr
