"""The bad-input corpus (tests/bad_inputs/cases.toml): every broken input gets its exit status and message.

Each case runs the installed tool as a subprocess (so "no traceback" is checked on what a user sees,
exit path included) from tests/bad_inputs/, and checks:
- the exit status (1 bad input, 2 usage; DESIGN §1) and each expected substring of stderr;
- that stderr holds no Python traceback, no exception line (`KeyError: ...` at a line start), no
  "internal compiler error" and no "Exception ignored" (an error at interpreter exit);
- that nothing went to stdout (a failed run prints only diagnostics);
- with `existing`: that the file is byte for byte what it was, alone in its folder (no temp file left).
The manifest itself is checked too: enough cases, unique names, no exit status 3, every corpus file used.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser as the tomli package
    tomllib = pytest.importorskip("tomli", reason="reading cases.toml needs Python 3.11 or tomli")

CORPUS = Path(__file__).resolve().parents[1] / "bad_inputs"
BIN = Path(sys.executable).parent
TOOLS = {"tessel-import", "tessel-opt", "tessel-codegen", "tessel-run", "tessel"}
OLD_BYTES = b"// an earlier good output: a failed run must leave these bytes alone\n"
EXCEPTION_LINE = re.compile(r"^[ \t]*(\w+\.)*\w+(Error|Exception|Interrupt|Exit)\b(:|$)", re.M)


def load_cases() -> list[dict[str, Any]]:
    with open(CORPUS / "cases.toml", "rb") as f:
        return tomllib.load(f)["case"]


CASES = load_cases()


def _subst(text: str, tmp: Path) -> str:
    return text.replace("{tmp}", str(tmp))


def _messages(case: dict[str, Any]) -> list[str]:
    m = case["message"]
    return [m] if isinstance(m, str) else list(m)


def check_clean_stderr(stderr: str) -> None:
    """No traceback or raw Python exception on stderr (shared with test_interrupted_writes)."""
    assert "Traceback" not in stderr, stderr
    assert "Exception ignored" not in stderr, stderr
    assert "internal compiler error" not in stderr, stderr
    m = EXCEPTION_LINE.search(stderr)
    assert m is None, f"a Python exception line on stderr: {m.group(0)!r}\n{stderr}"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_bad_input(case: dict[str, Any], tmp_path: Path) -> None:
    for special in ("/dev/full", "/proc/version"):
        if special in case["args"] + [case.get("stdout", "")] and not os.path.exists(special):
            pytest.skip(f"{special} does not exist here")
    args = [_subst(a, tmp_path) for a in case["args"]]
    existing = Path(_subst(case["existing"], tmp_path)) if "existing" in case else None
    if existing is not None:
        existing.write_bytes(OLD_BYTES)
    stdout_path = case.get("stdout")
    with open(CORPUS / case["stdin"], "rb") if "stdin" in case else open(os.devnull, "rb") as stdin, \
            open(stdout_path, "w") if stdout_path else open(os.devnull, "rb") as out:
        r = subprocess.run([str(BIN / case["tool"]), *args], cwd=CORPUS, stdin=stdin,
                           stdout=out if stdout_path else subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    shown = f"$ {case['tool']} {' '.join(args)}\nexit {r.returncode}\n--- stderr:\n{r.stderr}"
    assert r.returncode == case["exit"], f"expected exit {case['exit']}\n{shown}"
    for message in _messages(case):
        assert _subst(message, tmp_path) in r.stderr, f"expected {message!r} on stderr\n{shown}"
    check_clean_stderr(r.stderr)
    if not stdout_path:
        assert r.stdout == "", f"a failed run printed to stdout:\n{r.stdout}"
    if existing is not None:
        assert existing.read_bytes() == OLD_BYTES, "the existing output file was overwritten"
        assert sorted(os.listdir(existing.parent)) == [existing.name], "a temp file was left behind"


def test_manifest_is_well_formed() -> None:
    names = [c["name"] for c in CASES]
    assert len(CASES) >= 40, f"the corpus shrank to {len(CASES)} cases"
    assert len(set(names)) == len(names), "case names must be unique"
    for c in CASES:
        assert set(c) <= {"name", "tool", "args", "exit", "message", "existing", "stdout", "stdin"}, c
        assert c["tool"] in TOOLS, c
        assert c["exit"] in (1, 2), f"{c['name']}: a user's mistake exits 1 or 2, never 3 (an internal error)"
        assert _messages(c) and all(_messages(c)), f"{c['name']}: give the expected message"


def test_every_corpus_file_is_used() -> None:
    """A corpus file no case reads is a case someone forgot to list."""
    used = {a for c in CASES for a in c["args"]} | {c.get("stdin") for c in CASES}
    used |= {part for c in CASES for a in c["args"] for part in a.split("=")[1:]}
    helpers = {"cases.toml", "make_models.py", "onnx/valid.onnx", "npz/good.npz"}  # valid.onnx: the base
    for path in sorted(CORPUS.rglob("*")):
        rel = path.relative_to(CORPUS).as_posix()
        if path.is_file() and "__pycache__" not in rel and rel not in helpers:
            assert rel in used or any(u and u.startswith(rel + "/") for u in used), f"{rel} is in no case"


def test_corpus_is_small() -> None:
    total = sum(p.stat().st_size for p in CORPUS.rglob("*") if p.is_file())
    assert total < 1 << 20, f"the corpus holds {total} bytes; keep it under 1 MB"


def _light_model(name: str) -> bytes:
    import onnx

    return (Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{name}.onnx").read_bytes()


def _cuts(n: int) -> list[int]:
    """Cut points: the first few bytes, then 48 evenly spread (protobuf and .tsl break differently at
    each: inside a field, at a field boundary, inside a string)."""
    return sorted({1, 2, 3, 5, 8, 13} | {n * k // 48 for k in range(1, 48)})


def test_truncated_real_model_at_many_points(tmp_path: Path) -> None:
    """The light squeezenet cut at 53 points: each import fails with a message naming the file, exit 1
    (in process, for speed: the cases above already run the real entry point)."""
    from click.testing import CliRunner
    from tessel.cli import import_ as import_cli

    data = _light_model("light_squeezenet")
    model = tmp_path / "cut.onnx"
    for cut in _cuts(len(data)):
        model.write_bytes(data[:cut])
        r = CliRunner().invoke(import_cli.main, [str(model), "-o", str(tmp_path / "out.tsl")],
                               prog_name="tessel-import")
        assert r.exit_code == 1 and isinstance(r.exception, SystemExit), f"cut at {cut}: {r.stderr}"
        assert f"'{model}'" in r.stderr, f"cut at {cut}: the message should name the file:\n{r.stderr}"
        check_clean_stderr(r.stderr)
    assert sorted(os.listdir(tmp_path)) == ["cut.onnx"]


def test_truncated_real_ir_at_many_points(tmp_path: Path) -> None:
    """The imported light squeezenet's IR cut at 53 points: tessel-opt parses each prefix and fails with a
    positioned diagnostic (or, for a prefix that is a whole module, succeeds), never an internal error."""
    from click.testing import CliRunner
    from tessel.cli import import_ as import_cli
    from tessel.cli import opt as opt_cli

    (tmp_path / "m.onnx").write_bytes(_light_model("light_squeezenet"))
    whole = tmp_path / "m.tsl"
    r = CliRunner().invoke(import_cli.main, [str(tmp_path / "m.onnx"), "-o", str(whole)])
    assert r.exit_code == 0, r.stderr
    text = whole.read_bytes()
    cut_file = tmp_path / "cut.tsl"
    for cut in _cuts(len(text)):
        cut_file.write_bytes(text[:cut])
        r = CliRunner().invoke(opt_cli.main, [str(cut_file), "-O1"], prog_name="tessel-opt")
        assert r.exit_code in (0, 1) and isinstance(r.exception, (SystemExit, type(None))), \
            f"cut at {cut}: exit {r.exit_code}\n{r.stderr}"
        if r.exit_code == 1:
            assert re.search(rf"^{re.escape(str(cut_file))}:\d+:\d+: error: ", r.stderr, re.M), r.stderr
        check_clean_stderr(r.stderr)
