"""dce: dead code elimination.

Erases pure ops whose results are never used, repeatedly (an op whose only users were dead becomes dead
in turn), and drops resources no op references any more. Ops with side effects or regions stay.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Block, Module
from ..ir.printer import referenced_resources
from .manager import Pass, PassContext
from .rewrite import is_pure


@dataclass
class DCE(Pass):
    """Erase pure ops whose results are unused, and resources nothing references."""

    NAME = "dce"
    STATISTICS = {
        "num-erased": "Number of ops erased",
        "num-resources-dropped": "Number of resources dropped",
    }

    def run(self, module: Module, ctx: PassContext) -> None:
        for f in module.funcs:
            self.block(f.block)
        used = referenced_resources(module)
        unused = [r.name for r in module.resources if r.name not in used]
        for name in unused:
            module.resources.remove(name)
        if unused:
            self.stat("num-resources-dropped", len(unused))

    def block(self, block: Block) -> None:
        for op in reversed(list(block.ops)):  # users come after producers: one backward sweep suffices
            for r in op.regions:
                for b in r.blocks:
                    self.block(b)
            if is_pure(op) and op.results and all(not r.uses for r in op.results):
                op.erase()
                self.stat("num-erased")


PASS = DCE
