"""fold-constants: evaluate pure ops whose operands are all constants, with the ops' numpy references.

The result becomes a `const`: a splat stays a splat (`dense<6.0>`), a small result an inline literal, a
larger one a content-hashed resource. It refuses, with a remark, to fold
- a result of more than `size-limit` elements that is not a splat (reason `too-large`), and
- a result that is not a splat and has more elements than all its constant operands together, above the
  inline-literal size (reason `would-bloat`): broadcasting a bias to a whole activation would bloat the
  module; such ops stay and run at run time.
Ops with regions, side effects or no reference are never folded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.attributes import LITERAL_LIMIT, DenseAttr, ResourceAttr
from ..ir.core import Module, Op, Value
from ..ir.diagnostics import Diagnostic, DiagnosticError
from ..ir.ops.registry import get_op
from ..ir.resources import ResourceError
from ..ir.specialize import is_symbolic_attr
from ..ir.types import TensorType
from .common import const_array, const_attr, const_op, evaluate, make_const_attr
from .manager import Pass, PassContext
from .rewrite import is_pure


@dataclass
class FoldConstants(Pass):
    """Evaluate ops whose operands are all constants; never bloats the module (size-limit elements)."""

    NAME = "fold-constants"
    STATISTICS = {
        "num-folded": "Number of ops folded to constants",
        "num-refused": "Number of foldable ops left alone because the result would be too large",
    }
    size_limit: int = 1 << 22

    def run(self, module: Module, ctx: PassContext) -> None:
        for op in list(module.walk()):
            if (
                op.parent is None
                or op.name == "const"
                or not is_pure(op)
                or not op.results
                or (not op.operands and (op.regions or any(is_symbolic_attr(a) for a in op.attrs.values())))
            ):
                continue  # an op without operands folds when its attributes are sizes known (dims, range)
            if any(const_attr(v) is None for v in op.operands):
                continue
            opdef = get_op(op.name)
            if opdef is None:
                continue
            splat = self.fold_splat(op, module)
            if splat is not None:
                self.replace(op, [splat])
                continue
            reason = self.refusal(op)
            if reason:
                self.stat("num-refused")
                ctx.remark(op, f"not folded [{reason[0]}]: {reason[1]}")
                continue
            try:
                inputs = [const_array(v, module) for v in op.operands]
            except ResourceError as e:
                raise DiagnosticError(Diagnostic("error", str(e), op.pos, op.loc)) from None
            if any(x is None for x in inputs):
                continue  # an elided resource: nothing to compute with
            with np.errstate(all="ignore"):
                outs = evaluate(op, inputs, module)  # type: ignore[arg-type]
            self.replace(
                op, [make_const_attr(a, r.type, module) for a, r in zip(outs, op.results, strict=True)]
            )

    def replace(self, op: Op, attrs: list[DenseAttr | ResourceAttr]) -> None:
        assert op.parent is not None
        producers = [v.op for v in op.operands]
        for a, r in zip(attrs, op.results, strict=True):
            c = op.parent.insert_before(op, const_op(op.loc, a))
            c.results[0].name = r.name
            r.replace_all_uses_with(c.results[0])
        op.erase()
        self.stat("num-folded")
        for p in producers:  # constants only this op used are dead now
            if p is not None and p.parent is not None and all(not r.uses for r in p.results):
                p.erase()

    def fold_splat(self, op: Op, module: Module) -> DenseAttr | None:
        """Splats in, splat out, computed on one element: elementwise ops, and ops that only move data."""
        if len(op.results) != 1 or not op.result.type.is_static or not op.operands:
            return None
        d = get_op(op.name)
        first = const_attr(op.operands[0])
        if op.name in SPLAT_MOVERS and isinstance(first, DenseAttr) and first.is_splat:
            return DenseAttr.splat(first.splat_value(), op.result.type)
        if d is None or not d.has("elementwise"):
            return None
        attrs = [const_attr(v) for v in op.operands]
        if not all(isinstance(a, DenseAttr) and a.is_splat for a in attrs):
            return None
        small = [np.full((1,) * v.type.rank, a.splat_value(), dtype=v.type.np_dtype)  # type: ignore[union-attr]
                 for v, a in zip(op.operands, attrs, strict=True)]
        sig = d.sig([TensorType.of(x) for x in small], op.attrs,
                    [op.result.type.with_shape((1,) * op.result.type.rank)])
        with np.errstate(all="ignore"):
            out = np.asarray(d.reference(sig, *small))
        return DenseAttr.splat(out.reshape(-1)[0], op.result.type)

    def refusal(self, op: Op) -> tuple[str, str] | None:
        """(reason code, explanation) when folding would bloat the module, else None."""
        if not all(t.is_static for t in op.result_types):
            return ("dynamic-shape", "result shape is not static")
        n_out = sum(t.numel for t in op.result_types)
        if n_out <= LITERAL_LIMIT:
            return None
        if n_out > self.size_limit:
            return ("too-large", f"result has {n_out} elements, above size-limit {self.size_limit}")
        n_in = sum(1 if _is_splat(v) else v.type.numel for v in op.operands)
        if n_out > n_in:
            return ("would-bloat", f"result has {n_out} elements, more than its constant operands' {n_in}")
        return None


SPLAT_MOVERS = frozenset({"reshape", "transpose", "expand", "tile", "slice", "gather", "identity"})
"""Ops whose result holds only elements of their first operand: a splat stays the same splat."""


def _is_splat(v: Value) -> bool:
    a = const_attr(v)
    return isinstance(a, DenseAttr) and a.is_splat


PASS = FoldConstants
