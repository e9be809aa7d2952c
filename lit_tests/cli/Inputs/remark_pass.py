"""A test-only pass for lit_tests/cli/opt-verify-diagnostics.tsl, loaded with `--load-pass-plugin`.

`test-remark` emits, for every op with a `test.remark = "text"` attribute, a remark with that text at the
op and a note "operand #i defined here" at each operand's defining op: diagnostics with notes on other
lines, for `expected-note` to match.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessel.ir.core import Module
from tessel.ir.diagnostics import Diagnostic
from tessel.passes.manager import Pass, PassContext, register_pass


@register_pass
@dataclass
class TestRemark(Pass):
    """Test only: a remark (with notes at the operands' definitions) at each op with `test.remark`."""

    NAME = "test-remark"

    def run(self, module: Module, ctx: PassContext) -> None:
        for op in module.walk():
            text = op.attrs.get("test.remark")
            if not isinstance(text, str):
                continue
            d = Diagnostic("remark", f"'{op.name}' op {text}", op.pos, op.loc)
            for i, v in enumerate(op.operands):
                if v.op is not None:
                    d.note(f"operand #{i} defined here", v.op.pos)
            ctx.diagnostics.append(d)
