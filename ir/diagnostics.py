"""Diagnostics: the one error/warning/remark type. Library code raises or collects them; tools print them.

Rendered as `file:line:col: error: message`, the source line, a caret, then `note:` lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .core import Loc, Op, SourcePos


@dataclass
class Diagnostic:
    severity: str  # "error" | "warning" | "remark" | "note"
    message: str
    pos: SourcePos | None = None
    loc: Loc = ()
    notes: list[Diagnostic] = field(default_factory=list)

    def note(self, message: str, pos: SourcePos | None = None) -> Diagnostic:
        self.notes.append(Diagnostic("note", message, pos))
        return self


class DiagnosticError(Exception):
    """Raised by library code when the input is wrong; carries one or more diagnostics."""

    def __init__(self, diags: Diagnostic | list[Diagnostic]):
        self.diagnostics = diags if isinstance(diags, list) else [diags]
        super().__init__(self.diagnostics[0].message if self.diagnostics else "error")


def op_error(op: Op, message: str) -> Diagnostic:
    """An error about `op`: positioned at its source when it was parsed, with its IR location as a note."""
    d = Diagnostic("error", f"'{op.name}' op {message}", op.pos, op.loc)
    return d


class SourceManager:
    """Texts by file name, so a diagnostic can show its source line."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def add(self, name: str, text: str) -> None:
        self.texts[name] = text

    def line(self, name: str, line: int) -> str | None:
        text = self.texts.get(name)
        if text is None:
            return None
        lines = text.split("\n")
        return lines[line - 1] if 0 < line <= len(lines) else None


SOURCES = SourceManager()


def format_loc(loc: Loc) -> str:
    if not loc:
        return "loc(unknown)"
    if len(loc) == 1:
        return f'loc("{loc[0]}")'
    return "loc(fused[" + ", ".join(f'"{n}"' for n in loc) + "])"


def onnx_nodes(loc: Loc) -> list[str]:
    """The names in `loc` as a message gives them: an importer's `onnx:Conv_3` as `Conv_3`."""
    return [n.removeprefix("onnx:") for n in loc]


def node_clause(loc: Loc) -> str:
    """` (ONNX node Conv_3)`, ` (ONNX nodes Conv_3, Relu_4)` for a fused loc, or "" without one."""
    nodes = onnx_nodes(loc)
    return f" (ONNX node{'s' if len(nodes) > 1 else ''} {', '.join(nodes)})" if nodes else ""


def render(diag: Diagnostic, sources: SourceManager = SOURCES, default_file: str = "<unknown>") -> str:
    """The text of a diagnostic and its notes, ending with a newline."""
    out: list[str] = []
    _render(diag, sources, default_file, out)
    return "".join(out)


def _render(d: Diagnostic, sources: SourceManager, default_file: str, out: list[str]) -> None:
    if d.pos is not None:
        out.append(f"{d.pos.file}:{d.pos.line}:{d.pos.col}: {d.severity}: {d.message}\n")
        src = sources.line(d.pos.file, d.pos.line)
        if src is not None and not any(c < " " and c not in "\t\r" or c == "\x7f" for c in src):  # not binary
            out.append(f"{src}\n{' ' * (d.pos.col - 1)}^\n")
    elif d.loc:
        out.append(f"{format_loc(d.loc)}: {d.severity}: {d.message}\n")
    else:
        out.append(f"{default_file}: {d.severity}: {d.message}\n")
    if d.loc and d.pos is not None:
        out.append(f"{d.pos.file}:{d.pos.line}:{d.pos.col}: note: at {format_loc(d.loc)}\n")
    for n in d.notes:
        _render(n, sources, default_file, out)
