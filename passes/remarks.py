"""Optimization remarks: one structured record per decision (`passed`) or refusal (`missed`) a pass makes,
like LLVM's -Rpass / -Rpass-missed and MLIR's remark engine.

A pass reports through its context:

    ctx.remark_passed("fusion", "fused", [conv, relu], "fused 'relu' into the epilogue of 'conv2d'")
    ctx.remark_missed("fusion", "multi-use", [add], "'add' has 2 users; fusing would recompute it")

`category` selects remarks on the command line (`--remarks=fusion,layout`), `reason` is a short kebab-case
code tools can group by (`multi-use`, `layout-mismatch`, `reduction-axis`, `too-large`, `would-recompute`),
and the ops give the position and the ONNX locations. `tessel-opt` prints them on stderr as
`file:line:col: remark: [pass] missed reason: message (at onnx:..)` or, with `--remarks-format=jsonl`,
one JSON object per line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..ir.core import Op

CATEGORIES = ("fusion", "layout", "algebraic", "pattern", "memory", "cleanup", "quantization", "precision")


@dataclass
class Remark:
    pass_name: str
    kind: str  # "passed" or "missed"
    category: str
    reason: str
    message: str
    ops: list[str] = field(default_factory=list)  # op names, in the order given
    locs: list[str] = field(default_factory=list)  # their locations, flattened, without duplicates
    pos: tuple[str, int, int] | None = None  # (file, line, col) of the first op, when it was parsed

    @staticmethod
    def make(pass_name: str, kind: str, category: str, reason: str, ops: Sequence[Op],
             message: str) -> Remark:
        locs: list[str] = []
        for op in ops:
            for loc in op.loc or ():
                if loc not in locs:
                    locs.append(loc)
        pos = next((op.pos for op in ops if op.pos is not None), None)
        return Remark(pass_name, kind, category, reason, message, [op.name for op in ops], locs,
                      _pos_tuple(pos))

    def text(self) -> str:
        where = f"{self.pos[0]}:{self.pos[1]}:{self.pos[2]}: " if self.pos else ""
        at = f" (at {', '.join(self.locs)})" if self.locs else ""
        return f"{where}remark: [{self.pass_name}] {self.kind} {self.reason}: {self.message}{at}"

    def json(self) -> str:
        d: dict[str, object] = {"pass": self.pass_name, "kind": self.kind, "category": self.category,
                                "reason": self.reason,
             "message": self.message, "ops": self.ops, "locs": self.locs}
        if self.pos:
            d.update(file=self.pos[0], line=self.pos[1], col=self.pos[2])
        return json.dumps(d, sort_keys=True)


def _pos_tuple(pos: object) -> tuple[str, int, int] | None:
    if pos is None:
        return None
    file = getattr(pos, "file", None) or getattr(pos, "filename", None)
    line, col = getattr(pos, "line", None), getattr(pos, "col", None)
    if file is None or line is None:
        return None
    return (str(file), int(line), int(col or 1))


@dataclass
class RemarkFilter:
    """Which remarks to print: `categories` (empty: none passed), `missed` (print refusals too)."""

    categories: frozenset[str] = frozenset()
    missed: bool = False
    fmt: str = "text"

    @property
    def active(self) -> bool:
        return bool(self.categories) or self.missed

    def wants(self, r: Remark) -> bool:
        in_cats = "all" in self.categories or r.category in self.categories
        if r.kind == "passed":
            return in_cats
        return self.missed and (in_cats or not self.categories)

    def render(self, r: Remark) -> str:
        return r.json() if self.fmt == "jsonl" else r.text()
