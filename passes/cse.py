"""cse: common subexpression elimination of pure ops.

Two pure ops with the same name, operands, attributes and result types compute the same values; the
later one is replaced by the earlier. Scoped: an op inside a region may reuse one from an enclosing
block, never the other way, and none from outside a region isolated from above (a `kernel` or
`cl.launch` body sees only its block arguments). Ops with regions are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..ir.attributes import attr_key
from ..ir.core import Block, Module, Op
from ..ir.ops.registry import get_op
from .manager import Pass, PassContext
from .rewrite import is_pure


def _key(op: Op) -> tuple[Any, ...]:
    return (op.name, tuple(id(v) for v in op.operands),
            tuple((k, attr_key(op.attrs[k])) for k in sorted(op.attrs)), tuple(op.result_types))


@dataclass
class CSE(Pass):
    """Eliminate common subexpressions: a pure op identical to an earlier one reuses its results."""

    NAME = "cse"
    STATISTICS = {"num-eliminated": "Number of ops eliminated"}

    def run(self, module: Module, ctx: PassContext) -> None:
        for f in module.funcs:
            self.block(f.block, {})

    def block(self, block: Block, known: dict[tuple[Any, ...], Op]) -> None:
        scope = dict(known)
        for op in list(block.ops):
            opdef = get_op(op.name)
            isolated = opdef is not None and opdef.has("region-body")
            for r in op.regions:
                for b in r.blocks:
                    self.block(b, {} if isolated else scope)
            if not is_pure(op) or not op.results:
                continue
            key = _key(op)
            prev = scope.get(key)
            if prev is None:
                scope[key] = op
                continue
            for old, new in zip(op.results, prev.results, strict=True):
                old.replace_all_uses_with(new)
            op.erase()
            self.stat("num-eliminated")


PASS = CSE
