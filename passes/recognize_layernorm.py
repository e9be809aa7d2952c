"""recognize-layernorm: turn the expanded LayerNorm exporters emit into one `layer_norm` op.

    mean = reduce_mean(x, axes, keepdims)       d = x - mean
    var  = reduce_mean(d^2 | d * d, axes, keepdims)
    y    = d / sqrt(var + eps)   |   d * reciprocal(sqrt(var + eps))
    [y * gamma] [+ beta]                         -> layer_norm(x, gamma | 1, beta?) {axis, epsilon = eps}

The reduced axes must be the trailing dims [axis, rank) and the same for both means; `eps` a splat
constant; gamma and beta (optional, in either operand order) must broadcast to the normalized dims without
changing the result's type, otherwise the affine part stays as it is and only the standardization is
replaced (a scale of ones is made when there is no gamma). It refuses, with a `pattern` remark,
- `reduction-axis`: the means reduce different axes, or axes that are not the trailing ones;
- `multi-use`: an intermediate (the mean, the centred values, the variance, ...) has users outside the
  pattern, so replacing the chain would still compute it;
- `not-constant`: epsilon is not a splat constant.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.attributes import Attr, DenseAttr
from ..ir.core import Module, Op, Value, fuse_locs
from ..ir.ops.registry import OpError, get_op
from ..ir.types import TensorType
from .common import Refuser, producer, splat_value
from .manager import Pass, PassContext
from .rewrite import Pattern, Rewriter, apply_patterns_greedily


def _axes(op: Op) -> list[int] | None:
    """The sorted non-negative axes a keepdims reduce_mean reduces, or None when it drops dims."""
    if not op.attrs.get("keepdims", True):
        return None
    rank = op.operands[0].type.rank
    axes = [int(a) for a in op.attrs.get("axes", [])] or list(range(rank))  # type: ignore[union-attr]
    return sorted(a % rank for a in axes)


@dataclass
class _Match:
    x: Value
    axis: int
    eps: float
    ops: list[Op]  # every op of the standardization; the normalizing div/mul last
    inner: list[tuple[Op, set[int]]]  # (op, ids of the pattern ops allowed to use its result)


class _Matcher:
    def __init__(self, module: Module, ctx: PassContext, refuse: Refuser) -> None:
        self.module, self.ctx, self.refuse = module, ctx, refuse

    def splat(self, v: Value) -> float | None:
        s = splat_value(v, self.module)
        return None if s is None or isinstance(s, bool) else float(s)

    def standardize(self, y: Op) -> _Match | None:
        # y = d / sqrt(var + eps) or d * reciprocal(sqrt(var + eps))
        if y.name == "div":
            d, den = y.operands
            sq = producer(den, "sqrt")
            recip = None
        else:
            a, b = y.operands
            recip = producer(b, "reciprocal") or producer(a, "reciprocal")
            if recip is None:
                return None
            d = a if recip is b.op else b
            sq = producer(recip.operands[0], "sqrt")
        if sq is None:
            return None
        add = producer(sq.operands[0], "add")
        sub = producer(d, "sub")
        if add is None or sub is None:
            return None
        var_v = next((v for v in add.operands if producer(v, "reduce_mean") is not None), None)
        if var_v is None:
            return None
        eps_v = add.operands[1] if var_v is add.operands[0] else add.operands[0]
        var = var_v.op
        x, mean_v = sub.operands
        mean = producer(mean_v, "reduce_mean")
        if var is None or mean is None or mean.operands[0] is not x:
            return None
        square = self.square_of(var.operands[0], d)
        if square is None:
            return None
        ops = [mean, sub, square, var, add, sq, *([recip] if recip else []), y]
        ax_mean, ax_var = _axes(mean), _axes(var)
        rank = x.type.rank
        why = None
        if ax_mean is None or ax_var is None:
            why = "a mean drops the reduced dims (keepdims = false)"
        elif ax_mean != ax_var:
            why = f"the means reduce different axes, {ax_mean} and {ax_var}"
        elif ax_mean != list(range(ax_mean[0], rank)):
            why = f"the means reduce axes {ax_mean}, not trailing dims [axis, {rank}) as layer_norm does"
        if why is not None or ax_mean is None:
            self.refuse(y, "reduction-axis", ops, why or "")
            return None
        eps = self.splat(eps_v)
        if eps is not None:  # the shortest decimal of the constant's own type: 1e-12, not 9.99999996e-13
            eps = float(str(eps_v.type.np_dtype.type(eps)))
        if eps is None:
            self.refuse(y, "not-constant", ops, "epsilon is not a splat constant")
            return None
        inner = [
            (mean, {id(sub)}),
            (sub, {id(square), id(y)}),
            (square, {id(var)}),
            (var, {id(add)}),
            (add, {id(sq)}),
            (sq, {id(recip) if recip else id(y)}),
        ]
        if recip:
            inner.append((recip, {id(y)}))
        return _Match(x, ax_mean[0], eps, ops, inner)

    def square_of(self, v: Value, d: Value) -> Op | None:
        # pow(d, 2) or d * d
        op = v.op
        if op is None:
            return None
        if op.name == "pow" and op.operands[0] is d and self.splat(op.operands[1]) == 2.0:
            return op
        if op.name == "mul" and op.operands[0] is d and op.operands[1] is d:
            return op
        return None


def _affine(y: Op, x: Value, axis: int, kind: str) -> tuple[Op, Value] | None:
    """The single user of y's result that is `y * gamma` (kind "mul") or `y + beta` ("add") with the other
    operand broadcasting to the normalized dims without changing the type: (that op, gamma or beta)."""
    users = y.result.users
    if len(users) != 1 or len(y.result.uses) != 1 or users[0].name != kind:
        return None
    op = users[0]
    other = op.operands[1] if op.operands[0] is y.result else op.operands[0]
    if other is y.result or op.result.type != x.type:
        return None
    norm = x.type.shape[axis:]
    shape = other.type.shape
    fits = len(shape) <= len(norm) and all(
        a == 1 or a == b for a, b in zip(shape[::-1], norm[::-1], strict=False)
    )
    return (op, other) if fits and other.type.dtype == x.type.dtype else None


@dataclass
class RecognizeLayerNorm(Pass):
    """Replace the mean/sub/pow/mean/add/sqrt/div expansion of LayerNorm (and its affine) by `layer_norm`."""

    NAME = "recognize-layernorm"
    STATISTICS = {
        "num-recognized": "Number of LayerNorm expansions replaced by one layer_norm op",
        "num-refused": "Number of LayerNorm expansions left alone (axes, multi-use, non-constant epsilon)",
    }

    def run(self, module: Module, ctx: PassContext) -> None:
        refuse = Refuser(self, ctx)
        matcher = _Matcher(module, ctx, refuse)

        def layer_norm(op: Op, rw: Rewriter) -> bool:
            # (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) [* gamma] [+ beta] -> layer_norm
            m = matcher.standardize(op)
            if m is None:
                return False
            for inner, allowed in m.inner:
                extra = [u for u in inner.result.users if id(u) not in allowed]
                if extra:
                    n = len(extra)
                    refuse(
                        op,
                        "multi-use",
                        m.ops,
                        f"'{inner.name}' inside the LayerNorm pattern has {n} other "
                        f"user{'s' if n > 1 else ''}",
                    )
                    return False
            if op.result.type != m.x.type:
                return False
            ops, last = list(m.ops), op
            gamma = beta = None
            g = _affine(last, m.x, m.axis, "mul")
            if g is not None:
                last, gamma = g
                ops.append(last)
            b = _affine(last, m.x, m.axis, "add")
            if b is not None:
                last, beta = b
                ops.append(last)
            if gamma is None:
                norm = m.x.type.dims[m.axis :]
                # ones over the last dim; over several dims a single one (kernels read a per-element
                # scale or one value, not one broadcast over part of the line)
                t = TensorType((norm[-1],) if len(norm) == 1 else (1,), m.x.type.dtype)
                ones = DenseAttr.splat(np.ones((), t.np_dtype).item(), t)
                gamma = rw.create(op, "const", [], [t], {"value": ones}, loc=op.loc).result
            operands = [m.x, gamma, *([beta] if beta is not None else [])]
            attrs: dict[str, Attr] = {"axis": m.axis - m.x.type.rank, "epsilon": m.eps}
            opdef = get_op("layer_norm")
            assert opdef is not None
            try:
                opdef.infer(opdef.sig([v.type for v in operands], attrs))
            except OpError:
                return False
            new = rw.create(
                last, "layer_norm", operands, [last.result.type], attrs, loc=fuse_locs(*(o.loc for o in ops))
            )
            rw.replace_op(last, [new.result])
            self.stat("num-recognized")
            ctx.remark_passed("pattern", "recognized", ops, f"{len(ops)} ops -> 'layer_norm'")
            return True

        patterns: dict[str, list[Pattern]] = {"div": [layer_norm], "mul": [layer_norm]}
        apply_patterns_greedily(module, patterns)


PASS = RecognizeLayerNorm
