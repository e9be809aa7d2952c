"""Runs every lit file under lit_tests/ as one pytest item, so `make test` ends with pytest's summary."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIT_DIR = ROOT / "lit_tests"
FILES = sorted(p for p in LIT_DIR.rglob("*") if p.suffix in (".tsl", ".test") and "Inputs" not in p.parts
               and "Output" not in p.parts)


def test_lit_files_exist():
    assert len(FILES) >= 10, "the lit suite went missing"


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(LIT_DIR)) for p in FILES])
def test_lit(path: Path) -> None:
    lit = Path(sys.executable).parent / "lit"
    env = dict(os.environ, COLUMNS="120")
    r = subprocess.run([str(lit), "-v", str(path)], capture_output=True, text=True, env=env, cwd=ROOT)
    if r.returncode != 0:
        pytest.fail(r.stdout[-8000:] + r.stderr[-2000:], pytrace=False)
