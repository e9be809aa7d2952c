"""unflatten-gemm: a `gemm` on flattened rows whose result is reshaped back to a batch becomes a `matmul` on
the batch, so nothing stands between the contraction and the ops that read its result.

torch exports a linear layer on a [B, S, K] tensor as reshape to [B*S, K], Gemm (or addmm), reshape to
[B, S, N] (nn.Linear on 2-D views, GPT-2's Conv1D, nn.MultiheadAttention's output projection). The reshape
after the gemm is a view, but it is not elementwise, so `fuse` stops there: the residual add after it, or
the split of a fused QKV projection, each ran as a kernel of its own. The rewrite

    reshape(gemm(a, b, c) {alpha = 1, trans_a = false, trans_b, beta}, [..., N])
        -> add(matmul(reshape(a, [..., K]), b | transpose(b)), beta * c)

applies when the reshape is the gemm's only user and keeps its last axis (it only splits the rows), and b
is either used as is (no trans_b) or a constant (its transpose folds). The add is left out without c or
with beta = 0; c of shape [M, N] is reshaped to the batch too, a bias ([N], [1, N] or a scalar) broadcasts
as it is. The reshape of a usually meets the reshape that flattened it, and both fold away.

It refuses, with a missed remark (category `algebraic`), a gemm reshaped back to a batch whose alpha is
not 1 or that reads A transposed (`gemm-attrs`), or whose B is transposed and not a constant
(`not-constant`: a transpose kernel would cost more than the reshape). A gemm with another user, with an
operand of dynamic shape, or whose reshape changes the last axis, is left alone silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ir.core import Module, Op
from ..ir.types import TensorType
from .common import const_attr, const_op, make_const_attr, producer
from .manager import Pass, PassContext
from .rewrite import Pattern, Rewriter, apply_patterns_greedily


def splits_rows(reshape: Op) -> bool:
    """A reshape of static shapes [M, N] -> [..., N] (the rows split into batch dims, the last axis kept)."""
    x, y = reshape.operands[0].type, reshape.result.type
    return (
        x.is_static
        and y.is_static
        and x.rank == 2
        and y.rank >= 2
        and x.dims[-1] == y.dims[-1]
        and math.prod(y.dims[:-1]) == x.dims[0]
    )


@dataclass
class UnflattenGemm(Pass):
    """Turn reshape(gemm(a, b, c)) splitting the rows back into a batch into add(matmul(a', b), c)."""

    NAME = "unflatten-gemm"
    STATISTICS = {"num-unflattened": "Number of gemms on flattened rows turned into batched matmuls"}

    def run(self, module: Module, ctx: PassContext) -> None:
        def unflatten(op: Op, rw: Rewriter) -> bool:
            g = producer(op.operands[0], "gemm")
            if g is None or len(g.result.uses) != 1 or not splits_rows(op):
                return False
            if not all(v.type.is_static for v in g.operands):
                return False  # shapes to reshape and transpose must be known
            a, b = g.operands[:2]
            c = g.operands[2] if len(g.operands) > 2 else None
            alpha = float(g.attrs.get("alpha", 1.0))  # type: ignore[arg-type]
            beta = float(g.attrs.get("beta", 1.0))  # type: ignore[arg-type]
            trans_b = bool(g.attrs.get("trans_b", False))
            if alpha != 1.0 or g.attrs.get("trans_a"):
                ctx.remark_missed(
                    "algebraic",
                    "gemm-attrs",
                    [g, op],
                    f"'gemm' reshaped back to a batch has alpha {alpha} or reads A transposed; it stays a "
                    "gemm",
                )
                return False
            if trans_b and const_attr(b) is None:
                ctx.remark_missed(
                    "algebraic",
                    "not-constant",
                    [g, op],
                    "'gemm' reads a B it transposes that is not a constant: a batched matmul would need a "
                    "transpose kernel; it stays a gemm",
                )
                return False
            batch = op.result.type.dims[:-1]
            k = a.type.dims[1]
            a3 = rw.create(g, "reshape", [a], [a.type.with_shape((*batch, k))], {"shape": [*batch, k]})
            if trans_b:
                bt = TensorType((b.type.dims[1], b.type.dims[0]), b.type.dtype)
                b = rw.create(g, "transpose", [b], [bt], {"perm": [1, 0]}).result
            mm = rw.create(g, "matmul", [a3.result, b], [op.result.type])
            out = mm.result
            if c is not None and beta != 0.0:
                if c.type.rank == 2 and c.type.dims[0] != 1:  # [M, N] (or [M, 1]): to the batch too
                    shape = [*batch, c.type.dims[1]]
                    c2 = rw.create(g, "reshape", [c], [c.type.with_shape(tuple(shape))], {"shape": shape})
                    c = c2.result
                if beta != 1.0:
                    t = TensorType((), c.type.dtype)
                    assert g.parent is not None
                    s = g.parent.insert_before(g, const_op(g.loc, make_const_attr(np.array(beta), t, module)))
                    c = rw.create(g, "mul", [c, s.result], [c.type]).result
                out = rw.create(g, "add", [out, c], [op.result.type]).result
            out.name = op.result.name
            rw.replace_op(op, [out])
            rw.erase_op(g)
            self.stat("num-unflattened")
            ctx.remark_passed(
                "algebraic",
                "unflattened",
                [g, op],
                f"'gemm' on {a.type.dims[0]} flattened rows became a batched 'matmul' {list(batch)}: the "
                f"reshape after it is gone",
            )
            return True

        patterns: dict[str, list[Pattern]] = {"reshape": [unflatten]}
        apply_patterns_greedily(module, patterns)


PASS = UnflattenGemm
