"""recognize-attention: turn scaled dot-product attention written as matmul-scale-mask-softmax-matmul into
one `attention` op.

    s = matmul(q, kt)                         kt = transpose(k) swapping the last two dims
    s = s * c   |   s / c                     optional, c a splat constant
    s = s + mask                              optional, mask broadcast to s's shape
    y = matmul(softmax(s, last axis), v)      -> attention(q, k, v, mask?) {scale = c | 1 / c}

torch's scaled_dot_product_attention, as `torch.onnx` (dynamo) decomposes it, also matches: the scale
split as c**0.5 on q and on kt before the product (`mul`s by finite splat literals of one use, on q, on kt
or on k behind kt's transpose, whose factors multiply into the scale), and the safe softmax
`where(isnan(p), 0, p)` between the softmax and the second matmul, which becomes `safe = true`.

The transpose of k is absorbed: when kt is `transpose(x, p)`, k is x transposed by p with its last two
entries swapped (x itself when that is the identity); otherwise k is `transpose(kt)` made here. q, kt and v
must have rank >= 2 (matmul's 1-D promotion is not attention).

Then the operand layout is chosen. Exporters reshape each linear layer's [B, S, H*D] output to heads
[B, S, H, D] and transpose it to [B, H, S, D] (k straight to [B, H, D, S]), and transpose the result back;
`attention {layout = "bshd"}` reads and writes the [B, S, H, D] tensors in place, so those transposes
(kernel launches that only move data) go. The pass counts, for each layout, the transposes the op's
operands and result still need (an existing single-use transpose giving exactly the operand, or one it
would have to make) and takes bshd when it needs fewer: "bhsd" (q, k, v already [B, H, S, D]) stays as is.
bshd needs q, k and v of rank >= 3.

It refuses, with a remark,
- `reduction-axis` (pattern): the softmax is not along the last axis;
- `not-constant` (pattern): the scale is not a splat constant (or the divisor is zero);
- `multi-use` (pattern): the scores, the scaled or masked scores or the probabilities have users outside
  the pattern (e.g. a model that also returns its attention weights), so replacing it would recompute them;
- `shape-mismatch` (pattern): the mask broadcasts the scores to a larger shape;
- `layout-mismatch` (layout, the op is still made, in bhsd): some operands or the result come in or go out
  as [B, S, H, D] but the others would need more new transposes than bshd would absorb.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.attributes import Attr
from ..ir.core import Module, Op, Value, fuse_locs
from ..ir.ops.registry import OpError, get_op
from ..ir.types import TensorType
from .common import Refuser, producer, splat_value
from .manager import Pass, PassContext
from .rewrite import Pattern, Rewriter, apply_patterns_greedily


@dataclass
class RecognizeAttention(Pass):
    """Replace matmul(softmax(matmul(q, k^T) * scale + mask), v) by one `attention` op."""

    NAME = "recognize-attention"
    STATISTICS = {
        "num-recognized": "Number of attention chains replaced by one attention op",
        "num-refused": "Number of attention chains left alone (axis, scale, multi-use, shapes)",
        "num-bshd": "Number of attention ops made in the bshd layout",
        "num-transposes-absorbed": "Number of transposes of q, k, v or the result the bshd layout removed",
    }

    def run(self, module: Module, ctx: PassContext) -> None:
        refuse = Refuser(self, ctx)

        def attention(op: Op, rw: Rewriter) -> bool:
            # matmul(softmax(matmul(q, transpose(k)) * c + mask), v) -> attention(q, k, v, mask) {scale = c}
            p_v, v = op.operands
            guard = _safe_guard(p_v)  # where(isnan(p), 0, p): torch's safe softmax
            sm = producer(guard[-1].operands[2] if guard else p_v, "softmax")
            if sm is None:
                return False
            chain = [sm]  # softmax back to the scores matmul
            s = sm.operands[0]
            mask = None
            add = producer(s, "add")
            if add is not None:
                chain.append(add)
                a, b = add.operands
                # the scores side is the one that leads (through an optional scale) to a matmul
                s, mask = (a, b) if _leads_to_scores(a) else (b, a)
            scale, scale_op = 1.0, producer(s, "mul", "div")
            if scale_op is not None:
                chain.append(scale_op)
                a, b = scale_op.operands
                if scale_op.name == "mul" and producer(a, "matmul") is None and producer(b, "matmul"):
                    a, b = b, a
                s = a
                c = splat_value(b, module)
                ops = [*chain[::-1], *guard, op]
                if c is None or isinstance(c, bool) or (scale_op.name == "div" and float(c) == 0.0):
                    if producer(s, "matmul") is not None:
                        refuse(
                            op,
                            "not-constant",
                            ops,
                            f"the scale ('{scale_op.name}' operand) is not a splat constant",
                        )
                    return False
                scale = float(c) if scale_op.name == "mul" else 1.0 / float(c)
            qk = producer(s, "matmul")
            if qk is None:
                return False
            chain.append(qk)
            q, kt = qk.operands
            # scalar factors on q or k (exporters split 1/sqrt(D) as 1/D**0.25 on each) join the scale
            q, q_mul, cq = _unscaled(q, module)
            kt, k_mul, ck = _unscaled(kt, module)
            k_src, k_perm, k_t = _k_view(kt)
            k_src, k_mul2, ck2 = _unscaled(k_src, module)
            peeled = [m for m in (q_mul, k_mul, k_mul2) if m is not None]
            if peeled and math.isfinite(scale * cq * ck * ck2):
                scale *= cq * ck * ck2
            elif peeled:  # the product overflows: keep the muls
                q, kt = qk.operands
                k_src, k_perm, k_t = _k_view(kt)
                peeled = []
            ops = [*peeled, *chain[::-1], *guard, op]
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
            for inner in [*chain, *guard]:
                if inner is sm:
                    allowed = guard[:2] if guard else [op]
                elif inner in guard:
                    allowed = [guard[1] if inner is guard[0] else op]
                else:
                    allowed = [_next(chain, inner)]
                extra = [u for u in inner.result.users if all(u is not a for a in allowed)]
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
            plan = _plan_layout(q, (k_src, k_perm, k_t), v, op)
            if plan.missed:
                ctx.remark_missed("layout", "layout-mismatch", ops, plan.missed)
            srcs = [_materialize(need, op, rw) for need in plan.needs]
            operands = [*srcs, *([mask] if mask is not None else [])]
            attrs: dict[str, Attr] = {"scale": scale}
            if guard:
                attrs["safe"] = True
            want = op.result.type
            if plan.layout == "bshd":
                attrs["layout"] = "bshd"
                want = TensorType(_permuted(want.shape, _swap_seq_heads(want.rank)), want.dtype)
            opdef = get_op("attention")
            assert opdef is not None
            try:
                types = opdef.infer(opdef.sig([x.type for x in operands], attrs))
            except OpError as e:
                refuse(op, "shape-mismatch", ops, str(e))
                return False
            if types != [want]:
                refuse(op, "shape-mismatch", ops, f"attention would give {types[0]}, not {want}")
                return False
            absorbed = [*plan.absorbed, *([plan.out] if plan.out is not None else [])]
            fused = [*plan.absorbed, *ops, *([plan.out] if plan.out is not None else [])]
            new = rw.create(op, "attention", operands, types, attrs, loc=fuse_locs(*(o.loc for o in fused)))
            if plan.layout == "bhsd":
                rw.replace_op(op, [new.result])
            elif plan.out is not None:
                rw.replace_op(plan.out, [new.result])
                rw.erase_op(op)
            else:  # the users want [B, H, S, D]: transpose the result back
                back = rw.create(
                    op, "transpose", [new.result], [op.result.type], {"perm": _swap_seq_heads(want.rank)}
                )
                rw.replace_op(op, [back.result])
            self.stat("num-recognized")
            if plan.layout == "bshd":
                self.stat("num-bshd")
                self.stat("num-transposes-absorbed", len(absorbed))
            how = f", layout bshd ({len(absorbed)} transposes absorbed)" if plan.layout == "bshd" else ""
            ctx.remark_passed(
                "pattern",
                "recognized",
                fused,
                f"{len(ops)} ops -> {'safe ' if guard else ''}'attention'"
                f"{' with a mask' if mask is not None else ''}{how}",
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
    return op.name in ("mul", "div") and any(producer(x, "matmul") is not None for x in op.operands)


def _safe_guard(p: Value) -> list[Op]:
    """[isnan, where] when p = where(isnan(x), 0, x) (torch's safe softmax of x), else []."""
    where = producer(p, "where")
    if where is None:
        return []
    cond, zero, x = where.operands
    isnan = producer(cond, "is_nan")
    if isnan is None or isnan.operands[0] is not x or splat_value(zero) != 0 or where.result.type != x.type:
        return []
    return [isnan, where]


def _unscaled(x: Value, module: Module) -> tuple[Value, Op | None, float]:
    """(y, mul, c) when x = mul(y, c) with c a finite float splat literal, x of y's type and the mul's one
    use; else (x, None, 1.0)."""
    m = producer(x, "mul")
    if m is None or len(m.result.uses) != 1:
        return x, None, 1.0
    for y, lit in (m.operands, m.operands[::-1]):
        c = splat_value(lit, module)
        if (
            isinstance(c, float)
            and math.isfinite(c)
            and c != 0.0
            and y.type == x.type
            and lit.type.numel == 1
        ):
            return y, m, c
    return x, None, 1.0


def _k_view(kt: Value) -> tuple[Value, list[int], Op | None]:
    """k (bhsd) as (src, perm, t): src transposed by perm, composing kt's own transpose t (if any) with the
    swap of the last two dims."""
    k_src, k_perm, k_t = _as_transpose(kt)
    rank = kt.type.rank
    last2 = [*range(rank - 2), rank - 1, rank - 2]
    return k_src, [k_perm[i] for i in last2], k_t


def _next(chain: list[Op], op: Op) -> Op:
    """The op after `op` in the data flow (chain runs from the softmax back to the scores matmul)."""
    return chain[chain.index(op) - 1]


def _swap_seq_heads(rank: int) -> list[int]:
    """The permutation swapping dims -3 and -2 (sequence and heads)."""
    return [*range(rank - 3), rank - 2, rank - 3, rank - 1]


def _permuted(shape: tuple[int | None, ...], perm: list[int]) -> tuple[int | None, ...]:
    return tuple(shape[i] for i in perm)


def _perm(t: Op) -> list[int]:
    return [int(i) for i in t.attrs["perm"]]  # type: ignore[union-attr]


def _as_transpose(x: Value) -> tuple[Value, list[int], Op | None]:
    """(src, perm, t) with x = transpose(src, perm) made by op t, or (x, identity, None)."""
    t = producer(x, "transpose")
    if t is None:
        return x, list(range(x.type.rank)), None
    return t.operands[0], _perm(t), t


@dataclass
class _Need:
    """An operand as the op will read it: src transposed by perm (identity: src itself), reusing `reuse`
    (an existing transpose giving exactly that) when set."""

    src: Value
    perm: list[int]
    reuse: Op | None
    loc_of: Op | None  # the transpose whose location a new one takes


@dataclass
class _Plan:
    layout: str
    needs: list[_Need]  # q, k, v
    absorbed: list[Op]  # single-use transposes of the operands that the chosen layout makes dead
    out: Op | None  # the result's transpose replaced by the op (bshd)
    missed: str = ""  # the layout-mismatch remark, when bshd was possible in part but not chosen


def _plan_layout(
    q: Value, k_view: tuple[Value, list[int], Op | None], v: Value, anchor: Op
) -> _Plan:
    """Pick bhsd or bshd by the transposes each needs (see the module docstring); k as `_k_view` gives it."""
    rank = len(k_view[1])
    views = [_as_transpose(q), k_view, _as_transpose(v)]
    is_k = [False, True, False]

    def needs(layout: str) -> tuple[list[_Need], int, list[Op]]:
        """Each operand's need in `layout`, the transposes still run for them, those that die."""
        out: list[_Need] = []
        cost, dead = 0, []
        for (src, perm, t), k in zip(views, is_k, strict=True):
            if layout == "bshd":
                perm = [perm[i] for i in _swap_seq_heads(len(perm))]
            single = t is not None and len(t.result.uses) == 1
            if perm == list(range(len(perm))):  # the operand is src itself: its transpose dies
                out.append(_Need(src, perm, None, None))
                dead += [t] if t is not None and single else []
            elif t is not None and not k and _perm(t) == perm:  # q or v as they come
                out.append(_Need(src, perm, t, t))
                cost += single
            else:  # a new transpose (k's replaces kt's, which dies)
                out.append(_Need(src, perm, None, t if k else anchor))
                cost += 1
                dead += [t] if t is not None and k and single else []
        return out, cost, dead

    bhsd, cost_bhsd, _ = needs("bhsd")
    users = [u for u, _ in anchor.result.uses]
    out_t = users[0] if len(users) == 1 and users[0].name == "transpose" else None
    r = anchor.result.type.rank
    if out_t is not None and _perm(out_t) != _swap_seq_heads(r):
        out_t = None
    plan = _Plan("bhsd", bhsd, [], None)
    if min(q.type.rank, rank, v.type.rank, r) < 3:
        return plan
    bshd, cost_bshd, dead = needs("bshd")
    cost_bhsd += out_t is not None
    cost_bshd += out_t is None
    if cost_bshd < cost_bhsd:
        return _Plan("bshd", bshd, dead, out_t)
    free = sum(
        n.perm == list(range(len(n.perm))) and b.perm != n.perm for n, b in zip(bshd, bhsd, strict=True)
    )
    free += out_t is not None
    if free:
        plan.missed = (
            f"kept layout bhsd: bshd would absorb {free} transpose{'s' if free > 1 else ''} of the operands "
            f"or result but need {cost_bshd} (bhsd needs {cost_bhsd})"
        )
    return plan


def _materialize(need: _Need, anchor: Op, rw: Rewriter) -> Value:
    """The value an operand plan asks for: src, an existing transpose, or a new transpose of src."""
    if need.perm == list(range(len(need.perm))):
        return need.src
    if need.reuse is not None:
        return need.reuse.result
    src = need.src
    dims = _permuted(src.type.shape, need.perm)
    loc = need.loc_of.loc if need.loc_of is not None else anchor.loc
    new = rw.create(
        anchor, "transpose", [src], [TensorType(dims, src.type.dtype)], {"perm": need.perm}, loc=loc
    )
    return new.result


PASS = RecognizeAttention
