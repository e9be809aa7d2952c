"""recognize-softmax: turn softmax written out of pieces into one `softmax` op.

    e = exp(x - reduce_max(x, [a], keepdims))   or   e = exp(x)
    y = e / reduce_sum(e, [a], keepdims)                            -> softmax(x) {axis = a}

Both reductions must reduce the same single axis and keep it (keepdims); the form without the max
subtraction is the same function (the `softmax` op subtracts the max itself, which only avoids overflow).
It refuses, with a `pattern` remark,
- `reduction-axis`: the max and the sum reduce different axes, several axes, or drop the reduced dim;
- `multi-use`: the exponentials, the shifted values, the max or the sum have users outside the pattern,
  so replacing the chain would still compute them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Module, Op, fuse_locs
from .common import Refuser, producer
from .manager import Pass, PassContext
from .rewrite import Pattern, Rewriter, apply_patterns_greedily


def _axes(op: Op) -> tuple[list[int], bool]:
    """(sorted non-negative axes, keepdims) of a reduce_* op; no axes means every dim."""
    rank = op.operands[0].type.rank
    axes = [int(a) for a in op.attrs.get("axes", [])] or list(range(rank))  # type: ignore[union-attr]
    return sorted(a % max(rank, 1) for a in axes), bool(op.attrs.get("keepdims", True))


@dataclass
class RecognizeSoftmax(Pass):
    """Replace exp(x - max(x)) / sum(exp(x - max(x))) (with or without the max) by one `softmax` op."""

    NAME = "recognize-softmax"
    STATISTICS = {
        "num-recognized": "Number of softmax expansions replaced by one softmax op",
        "num-refused": "Number of softmax expansions left alone (axes, multi-use intermediates)",
    }

    def run(self, module: Module, ctx: PassContext) -> None:
        refuse = Refuser(self, ctx)

        def softmax(op: Op, rw: Rewriter) -> bool:
            # exp(x - max(x, a)) / sum(exp(x - max(x, a)), a) -> softmax(x) {axis = a}
            e_v, s_v = op.operands
            exp, total = producer(e_v, "exp"), producer(s_v, "reduce_sum")
            if exp is None or total is None or total.operands[0] is not e_v:
                return False
            x = exp.operands[0]
            sub = producer(x, "sub")
            mx = producer(sub.operands[1], "reduce_max") if sub is not None else None
            if sub is not None and mx is not None and mx.operands[0] is sub.operands[0]:
                x = sub.operands[0]
                ops = [mx, sub, exp, total, op]
                inner = [(mx, {id(sub)}), (sub, {id(exp)}), (exp, {id(total), id(op)}), (total, {id(op)})]
            else:
                mx = None
                ops = [exp, total, op]
                inner = [(exp, {id(total), id(op)}), (total, {id(op)})]
            rank = x.type.rank
            reductions = [total, *([mx] if mx is not None else [])]
            got = [_axes(r) for r in reductions]
            if any(len(a) != 1 or not keep for a, keep in got) or len({a[0] for a, _ in got}) != 1:
                desc = " and ".join(
                    f"{r.name} over {a}{'' if k else ' without keepdims'}"
                    for r, (a, k) in zip(reductions, got, strict=True)
                )
                both = ", the same for both" if len(reductions) > 1 else ""
                refuse(op, "reduction-axis", ops, f"{desc}: softmax needs one kept axis{both}")
                return False
            for inner_op, allowed in inner:
                extra = [u for u in inner_op.result.users if id(u) not in allowed]
                if extra:
                    n = len(extra)
                    refuse(
                        op,
                        "multi-use",
                        ops,
                        f"'{inner_op.name}' inside the softmax pattern has {n} other "
                        f"user{'s' if n > 1 else ''}",
                    )
                    return False
            if op.result.type != x.type:
                return False
            axis = got[0][0][0] - rank
            new = rw.create(
                op, "softmax", [x], [op.result.type], {"axis": axis}, loc=fuse_locs(*(o.loc for o in ops))
            )
            rw.replace_op(op, [new.result])
            self.stat("num-recognized")
            ctx.remark_passed("pattern", "recognized", ops, f"{len(ops)} ops -> 'softmax' along axis {axis}")
            return True

        patterns: dict[str, list[Pattern]] = {"div": [softmax]}
        apply_patterns_greedily(module, patterns)


PASS = RecognizeSoftmax
