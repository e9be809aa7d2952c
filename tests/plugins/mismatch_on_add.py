"""A test-only pass that miscompiles on purpose, loaded with `--load-pass-plugin` (never registered by the
package): it gives `tessel-reduce --mismatch` wrong numbers to keep while it shrinks a module.

`test-mismatch-on-add` turns every `add` whose operands are both computed (neither a func argument nor a
constant) into a `sub`: the result types stay, the numbers change.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessel.ir.core import Module
from tessel.passes.manager import Pass, PassContext, register_pass


@register_pass
@dataclass
class TestMismatchOnAdd(Pass):
    """Test only: rewrite add(computed, computed) into sub."""

    NAME = "test-mismatch-on-add"
    STATISTICS = {"num-changed": "Number of adds turned into subs"}

    def run(self, module: Module, ctx: PassContext) -> None:
        for op in module.walk():
            if op.name == "add" and all(v.op is not None and v.op.name != "const" for v in op.operands):
                op.name = "sub"
                self.stat("num-changed")
