"""recognize-attention: turn scaled dot-product attention written as matmul-scale-mask-softmax-matmul into
one `attention` op.

    s = matmul(q, kt)                         kt = transpose(k) swapping the last two dims
    s = s * c   |   s / c                     optional, c a splat constant
    s = s + mask                              optional, mask broadcast to s's shape
    y = matmul(softmax(s, last axis), v)      -> attention(q, k, v, mask?) {scale = c | 1 / c}

The transpose of k is absorbed: when kt is `transpose(x, p)`, k is x transposed by p with its last two
entries swapped (x itself when that is the identity, as for the transpose BERT-style exports apply to
[B, S, H, D] keys); otherwise k is `transpose(kt)` made here. q, kt and v must have rank >= 2 (matmul's
1-D promotion is not attention). It refuses, with a `pattern` remark,
- `reduction-axis`: the softmax is not along the last axis;
- `not-constant`: the scale is not a splat constant (or the divisor is zero);
- `multi-use`: the scores, the scaled or masked scores or the probabilities have users outside the
  pattern (e.g. a model that also returns its attention weights), so replacing it would recompute them;
- `shape-mismatch`: the mask broadcasts the scores to a larger shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.attributes import Attr
from ..ir.core import Module, Op, Value, fuse_locs
from ..ir.ops.registry import OpError, get_op
from ..ir.types import TensorType
from .common import splat_value
from .manager import Pass, PassContext
from .rewrite import Pattern, Rewriter, apply_patterns_greedily


def _producer(v: Value, *names: str) -> Op | None:
    op = v.op
    return op if op is not None and op.name in names else None


@dataclass
class RecognizeAttention(Pass):
    """Replace matmul(softmax(matmul(q, k^T) * scale + mask), v) by one `attention` op."""

    NAME = "recognize-attention"
    STATISTICS = {
        "num-recognized": "Number of attention chains replaced by one attention op",
        "num-refused": "Number of attention chains left alone (axis, scale, multi-use, shapes)",
    }

    def run(self, module: Module, ctx: PassContext) -> None:
        seen: set[tuple[int, str]] = set()

        def refuse(root: Op, reason: str, ops: list[Op], message: str) -> None:
            if (id(root), reason) not in seen:
                seen.add((id(root), reason))
                self.stat("num-refused")
                ctx.remark_missed("pattern", reason, ops, message)

        def attention(op: Op, rw: Rewriter) -> bool:
            # matmul(softmax(matmul(q, transpose(k)) * c + mask), v) -> attention(q, k, v, mask) {scale = c}
            p_v, v = op.operands
            sm = _producer(p_v, "softmax")
            if sm is None:
                return False
            chain = [sm]  # softmax back to the scores matmul
            s = sm.operands[0]
            mask = None
            add = _producer(s, "add")
            if add is not None:
                chain.append(add)
                a, b = add.operands
                # the scores side is the one that leads (through an optional scale) to a matmul
                s, mask = (a, b) if _leads_to_scores(a) else (b, a)
            scale, scale_op = 1.0, _producer(s, "mul", "div")
            if scale_op is not None:
                chain.append(scale_op)
                a, b = scale_op.operands
                if scale_op.name == "mul" and _producer(a, "matmul") is None and _producer(b, "matmul"):
                    a, b = b, a
                s = a
                c = splat_value(b, module)
                ops = [*chain[::-1], op]
                if c is None or isinstance(c, bool) or (scale_op.name == "div" and float(c) == 0.0):
                    if _producer(s, "matmul") is not None:
                        refuse(
                            op,
                            "not-constant",
                            ops,
                            f"the scale ('{scale_op.name}' operand) is not a splat constant",
                        )
                    return False
                scale = float(c) if scale_op.name == "mul" else 1.0 / float(c)
            qk = _producer(s, "matmul")
            if qk is None:
                return False
            chain.append(qk)
            ops = [*chain[::-1], op]
            q, kt = qk.operands
            if min(q.type.rank, kt.type.rank, v.type.rank) < 2:
                return False
            rank = sm.result.type.rank
            if int(sm.attrs.get("axis", -1)) % rank != rank - 1:  # type: ignore[arg-type]
                refuse(
                    op,
                    "reduction-axis",
                    ops,
                    f"the softmax is along axis {sm.attrs.get('axis')}, not the last (key) axis",
                )
                return False
            for inner in chain:
                extra = [
                    u for u in inner.result.users if u is not (op if inner is sm else _next(chain, inner))
                ]
                if extra:
                    n = len(extra)
                    refuse(
                        op,
                        "multi-use",
                        ops,
                        f"'{inner.name}' inside the attention pattern has {n} other "
                        f"user{'s' if n > 1 else ''}",
                    )
                    return False
            grown = next((o for o in chain[::-1] if o.result.type != qk.result.type), None)
            if grown is not None:
                what = "mask" if grown is add else "scale"
                refuse(
                    op,
                    "shape-mismatch",
                    ops,
                    f"the {what} broadcasts the scores {qk.result.type} to {grown.result.type}",
                )
                return False
            operands = [q, _untransposed(kt, op, rw), v, *([mask] if mask is not None else [])]
            attrs: dict[str, Attr] = {"scale": scale}
            opdef = get_op("attention")
            assert opdef is not None
            try:
                types = opdef.infer(opdef.sig([x.type for x in operands], attrs))
            except OpError as e:
                refuse(op, "shape-mismatch", ops, str(e))
                return False
            if types != [op.result.type]:
                refuse(op, "shape-mismatch", ops, f"attention would give {types[0]}, not {op.result.type}")
                return False
            new = rw.create(
                op, "attention", operands, [op.result.type], attrs, loc=fuse_locs(*(o.loc for o in ops))
            )
            rw.replace_op(op, [new.result])
            self.stat("num-recognized")
            ctx.remark_passed(
                "pattern",
                "recognized",
                ops,
                f"{len(ops)} ops -> 'attention'{' with a mask' if mask is not None else ''}",
            )
            return True

        patterns: dict[str, list[Pattern]] = {"matmul": [attention]}
        apply_patterns_greedily(module, patterns)


def _leads_to_scores(v: Value) -> bool:
    """Whether v is a matmul's result, or a mul/div of one (the scores side of the mask add)."""
    op = v.op
    if op is None:
        return False
    if op.name == "matmul":
        return True
    return op.name in ("mul", "div") and any(_producer(x, "matmul") is not None for x in op.operands)


def _next(chain: list[Op], op: Op) -> Op:
    """The op after `op` in the data flow (chain runs from the softmax back to the scores matmul)."""
    return chain[chain.index(op) - 1]


def _untransposed(kt: Value, anchor: Op, rw: Rewriter) -> Value:
    """k such that kt = k with its last two dims swapped, reusing the transpose that made kt if any."""
    rank = kt.type.rank
    swap = [*range(rank - 2), rank - 1, rank - 2]
    src, perm = kt, swap
    t = _producer(kt, "transpose")
    if t is not None:
        p = [int(i) for i in t.attrs["perm"]]  # type: ignore[union-attr]
        src, perm = t.operands[0], [p[i] for i in swap]
    if perm == list(range(rank)):
        return src
    dims = tuple(src.type.shape[i] for i in perm)
    new = rw.create(
        anchor,
        "transpose",
        [src],
        [TensorType(dims, src.type.dtype)],
        {"perm": perm},
        loc=t.loc if t is not None else anchor.loc,
    )
    return new.result


PASS = RecognizeAttention
