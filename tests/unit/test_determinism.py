"""Byte-identical output across processes (DESIGN §1): every bundled light model imported, optimized at
-O0..-O3 and lowered to OpenCL in two fresh processes with different PYTHONHASHSEED values gives the same
bytes; and `--check-determinism` runs that comparison itself, catching a pass whose output follows the
hash seed.

`make test` runs the full matrix (9 models x 4 levels, each lowered): 88 s with `-n 2` on an idle 2-core
machine, vgg19 the longest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from tessel.debug.determinism import child_args, first_difference

LIGHT = sorted((Path(onnx.__file__).parent / "backend" / "test" / "data" / "light").glob("light_*.onnx"))
ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "tests" / "plugins" / "nondeterministic.py"
SEEDS = ("1", "2")


def tool(name: str, module: str, *args: str | Path, seed: str = "0") -> subprocess.CompletedProcess:
    """Run a tessel tool in a fresh process with the given hash seed."""
    code = f"import sys; sys.argv[0] = {name!r}; from tessel.cli.{module} import main; main()"
    env = dict(os.environ, PYTHONHASHSEED=seed)
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, env=env)


def same_in_two_processes(tmp: Path, label: str, name: str, module: str, *args: str | Path) -> Path:
    """Run the command once per seed, writing to files; assert identical bytes; return the first file."""
    outs = []
    for seed in SEEDS:
        out = tmp / f"{label}.{seed}.tsl"
        p = tool(name, module, *args, "-o", out, seed=seed)
        assert p.returncode == 0, p.stderr.decode()
        outs.append(out)
    diff = first_difference(str(outs[0]), str(outs[1]))
    assert diff is None, (f"{label}: PYTHONHASHSEED={SEEDS[0]} and {SEEDS[1]} differ at line {diff.line}:\n"
                          f"  {diff.first}\n  {diff.second}")
    return outs[0]


def check_model(path: Path, levels: tuple[int, ...], tmp: Path) -> None:
    imported = same_in_two_processes(tmp, "import", "tessel-import", "import_", path)
    for level in levels:
        optimized = same_in_two_processes(tmp, f"O{level}", "tessel-opt", "opt", f"-O{level}", imported)
        lowered = same_in_two_processes(tmp, f"O{level}.cl", "tessel-codegen", "codegen", "--target=opencl",
                                        optimized)
        assert b"cl.program" in lowered.read_bytes()


@pytest.mark.parametrize("path", LIGHT, ids=lambda p: p.stem)
def test_every_light_model_is_deterministic_at_every_level(path: Path, tmp_path: Path) -> None:
    check_model(path, (0, 1, 2, 3), tmp_path)


def test_there_are_nine_light_models() -> None:
    assert len(LIGHT) == 9, [p.name for p in LIGHT]


# --check-determinism ---------------------------------------------------------------------------------
MODULE = """\
func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = relu %x : (tensor<4xf32>) -> tensor<4xf32>
  %1 = exp %0 : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
"""


def test_check_determinism_writes_the_output_when_runs_agree(tmp_path: Path) -> None:
    src = tmp_path / "m.tsl"
    src.write_text(MODULE)
    out = tmp_path / "out.tsl"
    p = tool("tessel-opt", "opt", "--check-determinism", "-O1", src, "-o", out)
    assert p.returncode == 0, p.stderr.decode()
    assert out.read_text().startswith("module {\n  func @main(%x: tensor<4xf32>)") and p.stdout == b""


def test_check_determinism_reads_stdin_and_writes_stdout(tmp_path: Path) -> None:
    code = "import sys; sys.argv[0] = 'tessel-opt'; from tessel.cli.opt import main; main()"
    p = subprocess.run([sys.executable, "-c", code, "--check-determinism", "-O1"], input=MODULE.encode(),
                       capture_output=True)
    assert p.returncode == 0, p.stderr.decode()
    assert b"exp %0" in p.stdout


def test_check_determinism_catches_a_hash_seed_dependent_pass(tmp_path: Path) -> None:
    src = tmp_path / "m.tsl"
    src.write_text(MODULE)
    out = tmp_path / "out.tsl"
    p = tool("tessel-opt", "opt", "--check-determinism", f"--load-pass-plugin={PLUGIN}",
             "--pass-pipeline=test-nondeterministic", src, "-o", out)
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert "tessel-opt: error: the output is not deterministic: two runs differ at line 2:" in err
    assert "PYTHONHASHSEED=1: " in err and "PYTHONHASHSEED=2: " in err and "test.hash_order" in err
    assert not out.exists(), "a failed check must not write the output"


def test_check_determinism_fails_like_the_tool_on_bad_input(tmp_path: Path) -> None:
    src = tmp_path / "bad.tsl"
    src.write_text("func @main( {\n")
    p = tool("tessel-opt", "opt", "--check-determinism", src)
    assert p.returncode == 1
    err = p.stderr.decode()
    assert "error:" in err and "not deterministic" not in err and "Traceback" not in err


def test_child_args_drop_the_flag_and_the_output() -> None:
    argv = ["-O2", "--check-determinism", "m.tsl", "-o", "out.tsl", "--time-passes"]
    assert child_args(argv, "out.tsl") == ["-O2", "m.tsl", "--time-passes"]
    assert child_args(["--output=o.tsl", "m.tsl", "--check-determinism"], "o.tsl") == ["m.tsl"]
    assert child_args(["-oo.tsl", "m.tsl"], "o.tsl") == ["m.tsl"]
    assert child_args(["m.tsl", "--check-determinism"], None) == ["m.tsl"]


def test_first_difference_names_the_line(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    a.write_bytes(b"one\ntwo\nthree\n")
    b.write_bytes(b"one\ntwo\nthree\n")
    c.write_bytes(b"one\ntwo\n")
    assert first_difference(str(a), str(b)) is None
    d = first_difference(str(a), str(c))
    assert d is not None and (d.line, d.first, d.second) == (3, "three", "(end of output)")
    long_a = tmp_path / "la"
    long_b = tmp_path / "lb"
    long_a.write_bytes(b"x" * 500 + b"A" + b"y" * 500 + b"\n")
    long_b.write_bytes(b"x" * 500 + b"B" + b"y" * 500 + b"\n")
    d = first_difference(str(long_a), str(long_b))
    assert d is not None and d.line == 1 and "A" in d.first and "B" in d.second and len(d.first) < 200
