"""A test-only pass that miscompiles on purpose, loaded with `--load-pass-plugin` (never registered by the
package): it proves that `tessel-opt --validate-each` and `--bisect` catch a pass that changes numbers.

`test-miscompile{scale=0.01}` multiplies the bias (else the constant weights) of the first `conv2d`,
`gemm` or `matmul` by `1 + scale`. The change is inside a constant's payload: the printed IR differs
only in a resource name, which no one reading a dump would notice. A module without such an op is left
alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessel.ir.core import Module, Op
from tessel.passes.common import const_array, make_const_attr
from tessel.passes.manager import Pass, PassContext, register_pass

CONTRACTIONS = ("conv2d", "gemm", "matmul")


def _target(op: Op, module: Module) -> Op | None:
    """The const op feeding `op`'s bias (operand 2), else its weights (operand 1), if it is a constant."""
    for i in (2, 1):
        if i < len(op.operands):
            v = op.operands[i]
            if v.op is not None and v.op.name == "const" and const_array(v, module) is not None:
                return v.op
    return None


@register_pass
@dataclass
class TestMiscompile(Pass):
    """Test only: scale the first conv2d/gemm/matmul's constant bias (else weights) by 1 + scale."""

    NAME = "test-miscompile"
    STATISTICS = {"num-changed": "Number of constants changed (0 or 1)"}
    scale: float = 0.01

    def run(self, module: Module, ctx: PassContext) -> None:
        for op in module.walk():
            if op.name not in CONTRACTIONS:
                continue
            const = _target(op, module)
            if const is None:
                continue
            value = const.results[0]
            array = const_array(value, module)
            assert array is not None
            # named like the constant folder's results, so nothing in a dump gives it away
            const.attrs["value"] = make_const_attr(array * (1 + self.scale), value.type, module, "folded")
            self.stat("num-changed")
            return
