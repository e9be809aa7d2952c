"""`--verify-diagnostics`: check produced diagnostics against `// expected-error {{...}}` comments.

    %0 = add %a, %b : ...  // expected-error {{operand element types differ}}
    // expected-error @+1 {{unknown op 'frob'}}
    // expected-note @-2 {{...}}          (also @above, @below)

Each expected diagnostic must be produced on its line with its severity, and its text must contain the
braced text; every produced error, warning or remark must be expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..ir.diagnostics import Diagnostic

_EXPECTED = re.compile(
    r"//\s*expected-(error|warning|remark|note)\s*(?:@([+-]\d+|above|below))?\s*\{\{(.*?)\}\}")


@dataclass
class Expected:
    severity: str
    line: int
    text: str
    comment_line: int
    matched: bool = False


def parse_expected(text: str, line_offset: int) -> list[Expected]:
    out = []
    for i, line in enumerate(text.split("\n")):
        for m in _EXPECTED.finditer(line):
            n = i + 1 + line_offset
            rel = m.group(2)
            target = n
            if rel == "above":
                target = n - 1
            elif rel == "below":
                target = n + 1
            elif rel:
                target = n + int(rel)
            out.append(Expected(m.group(1), target, m.group(3), n))
    return out


def _flatten(diags: list[Diagnostic]) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for d in diags:
        out.append(d)
        out.extend(n for n in d.notes if n.pos is not None)
    return out


def check(expected: list[Expected], produced: list[Diagnostic], filename: str) -> list[str]:
    """Problems, as printable lines (empty when everything matched)."""
    problems: list[str] = []
    for d in _flatten(produced):
        line = d.pos.line if d.pos is not None else None
        hit = next((e for e in expected if not e.matched and e.severity == d.severity and e.line == line
                    and e.text in d.message), None)
        if hit is not None:
            hit.matched = True
            continue
        if d.severity == "note":
            continue
        where = f"{d.pos.file}:{d.pos.line}:{d.pos.col}" if d.pos is not None else filename
        problems.append(f"{where}: error: unexpected {d.severity}: {d.message}")
    for e in expected:
        if not e.matched:
            problems.append(f"{filename}:{e.comment_line}: error: expected {e.severity} "
                            f"\"{e.text}\" on line {e.line} was not produced")
    return problems
