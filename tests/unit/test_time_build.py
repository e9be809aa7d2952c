"""--time-build and --build (cli/build_report.py): the table of the OpenCL programs a tool built, and
building a compiled module ahead of time so that its first run loads from the caches.

Each tool runs in a process of its own (BUILD_LOG and the in-process program table are per process), with
its own TESSEL_CACHE_DIR and POCL_CACHE_DIR. Nothing here reads a clock: the tables' seconds are matched as
numbers, never compared. The OpenCL cases skip without a platform; the no-platform case makes one by
pointing the ICD loader at an empty folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner
from tessel.cli import compile as compile_tool
from tessel.cli.build_report import build_table
from tessel.targets.opencl.device import opencl_available

NO_OPENCL = opencl_available()
needs_opencl = pytest.mark.skipif(NO_OPENCL is not None, reason=str(NO_OPENCL))
ROOT = Path(__file__).resolve().parents[2]
ADD = ROOT / "lit_tests" / "cli" / "Inputs" / "add.tsl"  # sum = x + y (broadcast), relu of it
TOOL = [sys.executable, "-m", "tessel"]

NUM = r"[0-9]+\.[0-9]"
SECS = r"[0-9]+\.[0-9]{4}"
HEADER = "  program       kernels  source KB    seconds  how"


def _row(name: str, how: str) -> re.Pattern[str]:
    return re.compile(rf"(?m)^  {name} +[0-9]+ +{NUM} +{SECS}  {how}$")


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    """Caches of this test's own; TESSEL_PROGRAM_BINARIES=always keeps binaries in tessel's cache on PoCL
    too (by default PoCL keeps them: 'driver'), so a load from it shows as 'binary'."""
    return {**os.environ, "TESSEL_CACHE_DIR": str(tmp_path / "tessel-cache"),
            "POCL_CACHE_DIR": str(tmp_path / "pocl-cache"), "TESSEL_PROGRAM_BINARIES": "always", **more}


def _tool(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TOOL, *args], capture_output=True, text=True, env=env)


def test_the_table_has_a_line_per_program_a_total_and_a_legend() -> None:
    builds = [SimpleNamespace(name="model", source_bytes=3 * 1024, kernels=36, seconds=1.25, how="source"),
              SimpleNamespace(name="inline", source_bytes=512, kernels=2, seconds=0.5, how="binary")]
    lines = build_table(builds, first_run=9.5).splitlines()
    assert lines[1].strip() == "... Program build report ..." and lines[3] == HEADER
    assert lines[4] == "  model              36        3.0     1.2500  source"
    assert lines[5] == "  inline              2        0.5     0.5000  binary"
    assert lines[6] == "  total              38        3.5     1.7500  2 programs (binary 1, source 1)"
    assert re.fullmatch(r"  first run  +9\.5000  includes each kernel's first launch \(PoCL .*\)", lines[7])
    assert lines[8].startswith("  binary: loaded from tessel's program cache")
    assert lines[9].startswith("  source: built from source") and len(lines) == 10
    empty = build_table([], note="nothing was built").splitlines()
    assert empty[4:] == ["  total               0        0.0     0.0000  0 programs",
                         "  note: nothing was built"]


def test_compile_time_build_without_build_says_nothing_was_built(tmp_path: Path) -> None:
    out = tmp_path / "add.cl.tsl"
    r = CliRunner().invoke(compile_tool.main, [str(ADD), "-o", str(out), "--time-build"],
                           prog_name="tessel compile")
    assert r.exit_code == 0, r.output
    assert HEADER in r.stderr and "  total               0        0.0     0.0000  0 programs" in r.stderr
    assert "note: tessel compile builds no program without --build" in r.stderr
    assert "cl.program" in out.read_text()


@needs_opencl
def test_compile_build_fills_the_cache_the_first_run_loads_from(tmp_path: Path) -> None:
    """--build runs the written module once: the model program is built from source (and stored), so a
    second process's tessel-run loads it from the cache ('binary'), with the right results."""
    env = _env(tmp_path)
    out = tmp_path / "add.cl.tsl"
    r = _tool(env, "compile", str(ADD), "-o", str(out), "--build", "--time-build")
    assert r.returncode == 0, r.stderr
    assert re.search(rf"(?m)^tessel: built 1 program \([0-9]+ kernels?\) in {NUM} s; the first run of this "
                     r"module will load it from the caches$", r.stderr), r.stderr
    assert HEADER in r.stderr and _row("model", "source").search(r.stderr), r.stderr
    assert re.search(rf"(?m)^  total +[0-9]+ +{NUM} +{SECS}  1 program \(source 1\)$", r.stderr)
    assert re.search(rf"(?m)^  first run +{SECS}  includes each kernel's first launch", r.stderr)
    assert "cl.program" in out.read_text() and "Traceback" not in r.stderr
    assert len(list((tmp_path / "tessel-cache" / "opencl").glob("*.bin"))) == 1

    x = np.array([[-1, 0, 1], [2, 3, 4]], np.float32)
    y = np.array([1, 1, -5], np.float32)
    np.savez(tmp_path / "in.npz", x=x, y=y)
    run = _tool(env, "run", str(out), "--inputs", str(tmp_path / "in.npz"), "--outputs",
                str(tmp_path / "out.npz"), "-q", "--time-build")
    assert run.returncode == 0, run.stderr
    assert _row("model", "binary").search(run.stderr), run.stderr
    assert not _row("model", "source").search(run.stderr)
    assert re.search(rf"(?m)^  first run +{SECS}  ", run.stderr)
    with np.load(tmp_path / "out.npz") as got:
        np.testing.assert_array_equal(got["sum"], x + y)
        np.testing.assert_array_equal(got["result1"], np.maximum(x + y, 0))


@needs_opencl
def test_compile_build_all_builds_the_ways_auto_compares(tmp_path: Path) -> None:
    """--build-all also runs the module inline and cooperatively: their programs are built (and stored,
    TESSEL_PROGRAM_BINARIES=always) and the build records say so, so `auto` in a later process counts
    them as cached. Where the device has no inline companion there is nothing more to build."""
    from tessel.targets.opencl import cache
    from tessel.targets.opencl import device as dev

    env = _env(tmp_path)
    out = tmp_path / "add.cl.tsl"
    r = _tool(env, "compile", str(ADD), "-o", str(out), "--build-all", "--time-build")
    assert r.returncode == 0, r.stderr
    assert _row("model", "source").search(r.stderr), r.stderr
    d = dev.pick_device()
    companion = dev.inline_companion(d)
    if companion is None:
        return
    assert _row("inline", "source").search(r.stderr), r.stderr
    from tessel.ir.parser import parse_module

    module = parse_module(out.read_bytes(), out.name)
    source = next(str(o.attrs["source"]) for o in module.funcs[0].block.ops if o.name == "cl.program")
    folder = str(tmp_path / "tessel-cache" / "opencl")
    assert cache.was_built(folder, cache.built_key(source, "inline", [companion]))
    if _row("cooperative", "source").search(r.stderr):
        assert cache.was_built(folder, cache.built_key(source, "cooperative", [d, companion]))


@needs_opencl
def test_run_profile_prints_the_build_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tessel.targets.opencl import device as dev
    from tessel.targets.opencl.profile import Peaks, save_peaks

    env = _env(tmp_path)
    monkeypatch.setenv("TESSEL_CACHE_DIR", env["TESSEL_CACHE_DIR"])  # stored peaks: no calibration
    save_peaks(dev.pick_device(), Peaks(100.0, 10.0, 5.0, "test", "2026-01-01", stream_gbps=8.0))
    r = _tool(env, "run", str(ADD), "--target=opencl", "--random-inputs", "--profile", "--repeat", "2")
    assert r.returncode == 0, r.stderr
    assert "kernel time" in r.stdout and "calibrating" not in r.stderr
    assert HEADER in r.stderr and _row("model", "(source|binary)").search(r.stderr), r.stderr
    assert re.search(rf"(?m)^  first run +{SECS}  ", r.stderr)


@needs_opencl
def test_build_of_a_dynamic_module_builds_its_hinted_sizes_only(tmp_path: Path) -> None:
    src = tmp_path / "dyn.tsl"
    src.write_text("func @main(%x: tensor<[N]x4xf32>) -> tensor<[N]x4xf32> {\n"
                   "  %0 = relu %x : (tensor<[N]x4xf32>) -> tensor<[N]x4xf32>\n"
                   "  return %0 : tensor<[N]x4xf32>\n}\n")
    env = _env(tmp_path)
    none = _tool(env, "compile", str(src), "-o", str(tmp_path / "dyn.cl.tsl"), "--build")
    assert none.returncode == 0, none.stderr
    assert none.stderr == ("tessel: note: nothing to build ahead of time: @main has dynamic dims and no "
                           "--shape-hint size (each size is compiled when it first runs)\n")
    hinted = _tool(env, "codegen", str(src), "--shape-hint", "x=2x4", "-o", str(tmp_path / "dyn2.cl.tsl"),
                   "--build")
    assert hinted.returncode == 0, hinted.stderr
    assert re.fullmatch(rf"tessel: built 1 program \(1 kernel\) in {NUM} s; .*\n", hinted.stderr)


def test_build_without_opencl_is_one_error_and_writes_nothing(tmp_path: Path) -> None:
    vendors = tmp_path / "no-vendors"
    vendors.mkdir()
    out = tmp_path / "add.cl.tsl"
    r = _tool(_env(tmp_path, OCL_ICD_VENDORS=str(vendors)), "compile", str(ADD), "-o", str(out), "--build")
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("tessel: error: --build runs the compiled module on an OpenCL device: ")
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not out.exists()
    none = _tool(_env(tmp_path), "compile", "--target=none", str(ADD), "--build")
    assert none.returncode == 2
    assert none.stderr == ("tessel: error: --build needs --target=opencl (--target=none leaves no program "
                           "to build)\n")
