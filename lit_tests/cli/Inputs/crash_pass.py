"""Test-only passes for lit_tests/cli/opt-crash.tsl, loaded with `--load-pass-plugin`.

- `test-crash-on{op=NAME}` raises an exception when it meets an op named NAME: an internal compiler error.
- `test-break-ir{op=NAME}` renames every op named NAME to an op no registry knows: invalid IR that
  `--verify-each` must catch.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessel.ir.core import Module
from tessel.passes.manager import Pass, PassContext, register_pass


@register_pass
@dataclass
class TestCrashOn(Pass):
    """Test only: raise an exception at the first op named `op`."""

    NAME = "test-crash-on"
    op: str = "relu"

    def run(self, module: Module, ctx: PassContext) -> None:
        for op in module.walk():
            if op.name == self.op:
                raise RuntimeError(f"boom at '{op.name}'")


@register_pass
@dataclass
class TestBreakIR(Pass):
    """Test only: rename every op named `op` to an unregistered op, leaving invalid IR."""

    NAME = "test-break-ir"
    op: str = "relu"

    def run(self, module: Module, ctx: PassContext) -> None:
        for op in module.walk():
            if op.name == self.op:
                op.name = "test.unregistered"
