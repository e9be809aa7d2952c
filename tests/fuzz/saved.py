"""What `make fuzz` keeps of a failure it saved (graphs, modules, parser texts), and the key that tells a new
failure from a repeat of a saved one."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path


@dataclasses.dataclass
class Saved:
    kind: str  # "graph" | "module" | "parser"
    path: Path
    stage: str
    target: str | None
    key: str  # a normalized first line (non-mismatch) or the op set (mismatch)
    ops: frozenset[str]
    summary: str
    repeats: int = 0


def normalize(message: str) -> str:
    """The first line of `message` without its location, its quoted names, numbers and %values: two failures
    with the same key are the same bug."""
    first = message.strip().split("\n")[0]
    first = first.split(" error: ", 1)[-1]  # drop the location (a file position or a fused loc list)
    return re.sub(r"'[^']*'|\"[^\"]*\"|[-+]?\d[\d.e+-]*|%\w+", "#", first)[:200]
