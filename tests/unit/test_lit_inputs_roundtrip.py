"""Every module in every lit input (each `// -----` chunk that parses) prints, re-parses and prints again
byte-identically: the round-trip contract checked over the whole lit corpus, not only where a file
remembers its %roundtrip line."""

from pathlib import Path

import pytest
from tessel.cli.common import split_chunks
from tessel.ir.diagnostics import DiagnosticError
from tessel.ir.parser import parse_module
from tessel.ir.printer import to_text

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(p for p in (ROOT / "lit_tests").rglob("*.tsl") if "Output" not in p.parts) + sorted(
    (ROOT / "examples").glob("*.tsl"))


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_round_trip(path: Path) -> None:
    text = path.read_text()
    parsed = 0
    for chunk, offset in split_chunks(text):
        try:
            first = to_text(parse_module(chunk, str(path), line_offset=offset, base_dir=str(path.parent)))
        except DiagnosticError:
            continue  # a negative case
        parsed += 1
        assert to_text(parse_module(first, "<printed>")) == first, f"chunk at line {offset + 1}"
