"""A test-only pass that crashes on purpose, loaded with `--load-pass-plugin` (never registered by the
package): it gives `tessel-reduce --crash` an internal compiler error to keep while it shrinks a module.

`test-crash-on-sigmoid` raises RuntimeError when the module holds a `sigmoid` op whose operand is computed
(not a func argument), so the reduced module must keep a sigmoid and one op feeding it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessel.ir.core import Module
from tessel.passes.manager import Pass, PassContext, register_pass


@register_pass
@dataclass
class TestCrashOnSigmoid(Pass):
    """Test only: crash at a sigmoid of a computed value."""

    NAME = "test-crash-on-sigmoid"

    def run(self, module: Module, ctx: PassContext) -> None:
        for op in module.walk():
            if op.name == "sigmoid" and op.operands[0].op is not None:
                raise RuntimeError(f"sigmoid of '{op.operands[0].op.name}'")
