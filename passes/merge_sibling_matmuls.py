"""merge-sibling-matmuls: merge matmuls that read the same input into one wider matmul and a split.

Transformers project one activation `x` three times, `matmul(x, W_q)`, `matmul(x, W_k)` and
`matmul(x, W_v)`, each usually followed by an `add` of a constant bias vector. Several launches of a narrow
product cost more than one launch of the wide one, so matmuls in one func body whose operand 0 is the same
value and whose operand 1 is a constant matrix (`KxN_i`) become one `matmul(x, W)` by the weights
concatenated along their columns (`Kx(N_1+...+N_n)`), followed by a `split` of its last axis into the old
results. When every sibling's only user is an `add` of a constant bias (`[N_i]`, or a shape that
broadcasts only along the last axis) giving the matmul's own type, the biases are concatenated too and
one `add` comes before the split, whose results then replace the adds; otherwise only the matmuls merge
and each sibling's own add stays after the split. The new constants are built here (content-hashed
resources `merged.<hash>` when larger than a literal), so no later fold is needed; they and the merged ops
carry the fused locations of the ops they replace.

Everything new goes right before the first sibling in block order: `x` is defined before every sibling,
the constants are created there, and every user of an old result comes after its own sibling, so after
the split. The block stays def-before-use, so no placement is refused. Matmuls inside kernel regions are
not candidates.

It refuses, with a missed remark (category `algebraic`), a sibling whose weights are not a constant
(`not-constant`), not a matrix (`weight-rank`), or whose column count is not a multiple of
`column-align` (`misaligned`, default 16: the OpenCL template stores each vector of the merged product
straight to its piece, so the pieces must be whole vectors, or the product runs at a narrower vector
width): it is left out and the others merge if at least two
remain (such a sibling gets a remark only when it had a mergeable partner). It refuses the whole group
when the shared input has an anonymous `?` dim (`dynamic-shape`; symbolic dims are merged over, as only the
weights' columns are concatenated), or when the merged matmul would have more than
`max-columns` columns (`too-large`). A matmul that shares its input with no other matmul is not a
candidate and gets no remark. All siblings have `x`'s element type (matmul requires it), so types agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..ir.attributes import Attr
from ..ir.core import Func, Module, Op, Value, fuse_locs
from ..ir.types import TensorType
from .common import Refusal, const_array, make_const_attr
from .manager import Pass, PassContext
from .rewrite import Pattern, Rewriter, apply_patterns_greedily


class BiasAdd(NamedTuple):
    """The `add` of a constant bias that is a matmul's only user: the add, its constant operand, and the
    bias as a vector over the matmul's last axis."""

    op: Op
    const: Value
    vector: np.ndarray


@dataclass
class Sibling:
    """A matmul that can merge: its constant weights [K, N] and its bias add, if it has one."""

    op: Op
    weight: np.ndarray
    bias: BiasAdd | None = None

    @property
    def columns(self) -> int:
        return int(self.weight.shape[1])


def last_axis_vector(c: np.ndarray, out: TensorType) -> np.ndarray | None:
    """`c` as a vector over `out`'s last axis when it broadcasts to `out` along that axis only, else None."""
    if c.ndim > out.rank or out.rank == 0 or type(out.shape[-1]) is not int:
        return None
    shape = (1,) * (out.rank - c.ndim) + c.shape
    n = out.shape[-1]
    if any(d != 1 for d in shape[:-1]) or shape[-1] not in (1, n):
        return None
    return np.broadcast_to(np.asarray(c).reshape(-1), (n,)).copy()


class Merger:
    """The pattern of one run, sharing the module, the context and what was already reported."""

    def __init__(self, owner: MergeSiblingMatmuls, module: Module, ctx: PassContext):
        self.owner, self.module, self.ctx = owner, module, ctx
        self.reported: set[tuple[Op, str]] = set()  # (first op, reason): the driver revisits ops

    # finding siblings -----------------------------------------------------------------------------
    def group(self, op: Op) -> list[Op]:
        """The matmuls of `op`'s block whose operand 0 is `op`'s, in block order (`op` among them)."""
        x, block = op.operands[0], op.parent
        assert block is not None
        found = [u for u in x.users if u.name == "matmul" and u.operands[0] is x and u.parent is block]
        return sorted(found, key=block.ops.index)

    def sibling(self, m: Op) -> Sibling | Refusal:
        w_t = m.operands[1].type
        if w_t.rank != 2 or not w_t.is_static:
            return Refusal("weight-rank", f"its weights are {w_t}, not a matrix of static shape", [m])
        align = self.owner.column_align
        if w_t.dims[1] is None or w_t.dims[1] % align:
            what = f"its {w_t.dims[1]} columns are not a multiple of column-align={align}"
            return Refusal("misaligned", what, [m])
        w = const_array(m.operands[1], self.module)
        if w is None:
            return Refusal("not-constant", "its weights are not a constant", [m])
        return Sibling(m, w, self.bias_add(m))

    def bias_add(self, m: Op) -> BiasAdd | None:
        """`m`'s only user when it adds a constant vector over `m`'s last axis (either operand order)."""
        if len(m.result.uses) != 1:
            return None
        add, i = m.result.uses[0]
        if add.name != "add" or add.parent is not m.parent or add.result.type != m.result.type:
            return None
        c = add.operands[1 - i]
        array = const_array(c, self.module)
        vector = None if array is None else last_axis_vector(array, m.result.type)
        return None if vector is None else BiasAdd(add, c, vector)

    # rewriting ------------------------------------------------------------------------------------
    def new_const(self, anchor: Op, array: np.ndarray, like: list[Value], rw: Rewriter) -> Value:
        """A constant of `array` (in `anchor`'s element type) before `anchor`, located where the constants
        it replaces (`like`) were."""
        t = TensorType(array.shape, anchor.result.type.dtype)
        loc = fuse_locs(*(v.op.loc for v in like if v.op is not None))
        attrs: dict[str, Attr] = {"value": make_const_attr(array, t, self.module, "merged")}
        return rw.create(anchor, "const", [], [t], attrs, loc).result

    def rewrite(self, sibs: list[Sibling], rw: Rewriter) -> None:
        first, out_t = sibs[0].op, sibs[0].op.result.type
        sizes = [s.columns for s in sibs]
        n = sum(sizes)
        wide = out_t.with_shape((*out_t.shape[:-1], n))
        weights = np.concatenate([s.weight for s in sibs], axis=1)
        w = self.new_const(first, weights, [s.op.operands[1] for s in sibs], rw)
        loc = fuse_locs(*(s.op.loc for s in sibs))
        mm = rw.create(first, "matmul", [first.operands[0], w], [wide], {}, loc)
        merged, olds = mm.result, [s.op.result for s in sibs]
        adds = [s.bias for s in sibs if s.bias is not None]
        if len(adds) == len(sibs):  # ... + concat(b_1, ..., b_n) before the split
            bias = np.concatenate([a.vector for a in adds])
            b = self.new_const(first, bias, [a.const for a in adds], rw)
            add = rw.create(first, "add", [mm.result, b], [wide], {}, fuse_locs(*(a.op.loc for a in adds)))
            merged, olds, loc = add.result, [a.op.result for a in adds], fuse_locs(loc, add.loc)
        else:
            adds = []  # each sibling keeps its own add, after the split
        split_attrs: dict[str, Attr] = {"axis": out_t.rank - 1, "sizes": sizes}
        split = rw.create(first, "split", [merged], [v.type for v in olds], split_attrs, loc)
        for old, new in zip(olds, split.results, strict=True):
            new.name = old.name
        self.ctx.remark_passed(
            "algebraic",
            "merged",
            [s.op for s in sibs] + [a.op for a in adds],
            f"merged {len(sibs)} matmuls of one input into one of {n} columns"
            + (", their bias adds into one add" if adds else ""),
        )
        for s, new in zip(sibs, split.results, strict=True):
            if adds and s.bias is not None:
                rw.replace_op(s.bias.op, [new])
                rw.erase_op(s.op)
            else:
                rw.replace_op(s.op, [new])
        self.owner.stat("num-merged", len(sibs))
        self.owner.stat("num-groups")

    def missed(self, r: Refusal, message: str) -> None:
        key = (r.ops[0], r.reason)
        if key in self.reported:
            return
        self.reported.add(key)
        self.ctx.remark_missed("algebraic", r.reason, r.ops, f"{message}: {r.message}")

    # the pattern ----------------------------------------------------------------------------------
    def merge(self, op: Op, rw: Rewriter) -> bool:
        # matmul(x, W_1), ..., matmul(x, W_n) -> split(matmul(x, concat(W_1, ..., W_n)), last axis)
        block = op.parent
        if block is None or block.parent is None or not isinstance(block.parent.parent, Func):
            return False
        group = self.group(op)
        if len(group) < 2:
            return False
        x = op.operands[0]
        if any(d is None for d in x.type.shape):  # symbolic rows are fine: only the columns are merged
            r = Refusal("dynamic-shape", f"their shared input {x.type} has an anonymous dynamic dim", group)
            self.missed(r, f"{len(group)} matmuls of one input not merged")
            return False
        found = [self.sibling(m) for m in group]
        sibs = [s for s in found if isinstance(s, Sibling)]
        for s in found:
            if isinstance(s, Refusal) and sibs:  # only a matmul that had a partner gets a remark
                self.missed(s, "'matmul' left out of the merge of the matmuls of its input")
        if len(sibs) < 2:
            return False
        n = sum(s.columns for s in sibs)
        if n > self.owner.max_columns:
            limit = f"{n} columns exceed max-columns={self.owner.max_columns}"
            self.missed(Refusal("too-large", limit, [s.op for s in sibs]),
                        f"{len(sibs)} matmuls of one input not merged")
            return False
        self.rewrite(sibs, rw)
        return True

    def patterns(self) -> dict[str, list[Pattern]]:
        return {"matmul": [self.merge]}


@dataclass
class MergeSiblingMatmuls(Pass):
    """Merge matmuls that share their input and have constant weights into one wider matmul and a split."""

    NAME = "merge-sibling-matmuls"
    STATISTICS = {
        "num-merged": "Number of matmuls merged into a wider one",
        "num-groups": "Number of wider matmuls (each with a split) that replaced a group of siblings",
    }
    max_columns: int = 16384
    column_align: int = field(default=16, metadata={"min": 1})

    def run(self, module: Module, ctx: PassContext) -> None:
        apply_patterns_greedily(module, Merger(self, module, ctx).patterns())


PASS = MergeSiblingMatmuls
