"""fuse's vocabulary (the pass is passes/fuse.py): which ops anchor a region, the limits its rules keep to,
the shape predicates they test (a global pool, an FC on pooled features, a channel shuffle, a channel
scale, an NCHWc pack or unpack), and `FuserBase`: the state of one func body's fusion and the checks every
rule makes (fusible, cheap, too large), which the rule classes of fuse_inputs.py, fuse_anchor.py and
fuse_elementwise.py build on. The OpenCL `kernel` template reads the same predicates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..ir.attributes import DenseAttr
from ..ir.core import Block, Module, Op, Value
from ..ir.ops.registry import Cost, OpError, get_op, op_sig
from ..ir.specialize import evaluate_attr, evaluate_type
from ..ir.types import TensorType
from .manager import PassContext

if TYPE_CHECKING:
    from .fuse import Fuse

EPILOGUE_ANCHORS = frozenset({"conv2d", "matmul", "gemm", "qconv2d"})
REQUANTIZED_ANCHORS = frozenset({"qconv2d"})
"""Epilogue anchors with an 8-bit result that their chain may dequantize, compute on in float and quantize
back (a QDQ model's batch norm or scale between two convs, which fold-qdq leaves in float): the chain's
values may be f32, and it ends at its last value of the anchor's type. The template stores the 8-bit
value the chain computes from its own, so the arithmetic is the unfused one's to the bit, without the
8-bit tensor's round trip through memory and its launch (int8 ShuffleNet: 36 launches of
dequantize-mul-add-quantize, 1.3 of its 4.6 ms)."""
REDUCTION_ANCHORS = frozenset(
    {"softmax", "log_softmax", "layer_norm", "batch_norm", "global_avg_pool", "max_pool2d", "avg_pool2d"}
)
ROW_ANCHORS = frozenset({"matmul", "gemm"})
"""Epilogue anchors whose template can normalize whole output rows (a layer_norm) and split the columns."""
POOL_ANCHORS = frozenset({"max_pool2d", "avg_pool2d", "global_avg_pool"})
"""Reduction anchors whose template (the conv's tiling) takes an epilogue but no prologue."""
BLOCKED_ANCHORS = frozenset({"conv2d", *POOL_ANCHORS})
"""Anchors whose template reads an NCHWc input (an unpack in the region) or writes one (a pack)."""
REPRESENTATIVE_SIZE = 64
"""The size every symbol takes where a rule asks a per-element quantity (FLOPs per element) of an op with
dynamic dims: the answer is the same at any size; this one keeps dims like `(H - 1) / 32 + 1` above 0."""
CHEAP_FLOPS = 4
"""A producer of at most this many FLOPs per element is cheap enough to recompute in each consumer."""
GATE_POOLS = frozenset({"reduce_mean", "reduce_max", "global_avg_pool", "global_max_pool"})
GATE_MAX_CHANNELS = 4096
"""The widest feature vector a gate kernel keeps (per work-item, in private memory on a CPU)."""
GATE_MAX_WEIGHTS = 1 << 18
"""Weights a gate's FCs may read: one core reads them all. Two squeeze-excitation FCs of 1152 <-> 48
channels are 110K; a 1024 -> 1000 classifier written as a 1x1 conv (1M) is better split over the cores."""
GATE_MAX_POOL = 1 << 16
"""Elements per image a gate's pool may read: the gate kernel runs one work-group per image, so on a CPU
one core reads the whole pool where the pool's own kernel splits it over the cores."""
CHEAP_EPILOGUE_ANCHORS = frozenset({"conv2d"})
"""Anchors whose epilogue takes a multi-use (reconverging) elementwise DAG only of ops under CHEAP_FLOPS
per element, unless their output map is one pixel (squeeze-excitation's FCs on pooled features): a conv's
template applies its epilogue once per stored vector, unrolled beside a tile of live accumulators, and
on PoCL's CPU device a SiLU there (x * sigmoid(x)) cost more than its own kernel: efficientnet_b0 took
8.4 ms of kernel time with its 48 SiLUs in conv epilogues, 6.2 with them apart; a 1x1 conv to
[1, 96, 96, 96] + SiLU 3.3 ms against 1.0 + 0.2."""


def op_symbols(op: Op) -> set[str]:
    return {s for t in (*op.operand_types, *op.result_types) for s in t.symbols}


def is_anchor(op: Op) -> bool:
    return op.name in EPILOGUE_ANCHORS or op.name in REDUCTION_ANCHORS or op.name.startswith("reduce_")


def is_elementwise(op: Op) -> bool:
    opdef = get_op(op.name)
    return opdef is not None and opdef.has("elementwise") and len(op.results) == 1


def is_table_lookup(op: Op, anchor: Op | None = None) -> bool:
    """A `lookup` of an 8-bit value in a literal table of at most 256 entries, which an epilogue of
    `anchor` (one of REQUANTIZED_ANCHORS: its stored values are 8-bit) takes like an elementwise op: the
    table becomes a constant array of the kernel (a QDQ model's SiLU, hard-swish or GELU after a conv,
    which fold-lookup made a table, is otherwise a launch of its own)."""
    table = op.operands[1] if op.name == "lookup" else None
    return (table is not None and (anchor is None or anchor.name in REQUANTIZED_ANCHORS)
            and table.op is not None and table.op.name == "const" and table.type.is_static
            and table.type.numel <= 256)


def is_literal(v: Value) -> bool:
    return v.op is not None and v.op.name == "const" and isinstance(v.op.attrs.get("value"), DenseAttr)


def quoted(ops: Sequence[Op]) -> str:
    return ", ".join(f"'{o.name}'" for o in ops)


def shape_text(v: Value) -> str:
    return "x".join("?" if d is None else str(d) for d in v.type.shape) or "scalar"


def channel_shuffle_ops(v: Value) -> list[Op] | None:
    """[reshape, transpose, reshape] when `v` shuffles the channels of a 4-D NCHW x:
    [N, C, H, W] -> [N, G, C/G, H, W] -> perm [0, 2, 1, 3, 4] -> [N, C, H, W]; else None."""
    back = v.op
    if back is None or back.name != "reshape" or v.type.rank != 4:
        return None
    tr = back.operands[0].op
    if tr is None or tr.name != "transpose" or tr.attrs.get("perm") != [0, 2, 1, 3, 4]:
        return None
    split = tr.operands[0].op
    if split is None or split.name != "reshape" or split.operands[0].type.rank != 4:
        return None
    shapes = (split.operands[0].type.shape, split.result.type.shape, v.type.shape)
    if any(d is None for s in shapes for d in s):  # symbolic dims compare by construction; `?` cannot
        return None
    (n, c, h, w), s5 = shapes[0], shapes[1]
    split_ok = len(s5) == 5 and s5[:1] + s5[3:] == (n, h, w) and s5[1] * s5[2] == c
    return [split, tr, back] if split_ok and v.type.shape == (n, c, h, w) else None


def known_shape(t: TensorType) -> bool:
    """Every dim an int or a symbolic expression (no anonymous `?`): shapes that compare by construction,
    so the rules decide on them as on static ones wherever the decision does not need a size."""
    return all(d is not None for d in t.shape)


def keeps_rows(reshape: Op) -> bool:
    """A reshape that keeps the last axis (it merges or splits the rows only)."""
    x, y = reshape.operands[0].type, reshape.result.type
    return known_shape(x) and known_shape(y) and x.rank >= 1 and y.rank >= 1 and x.shape[-1] == y.shape[-1]


def is_channel_shuffle(v: Value) -> bool:
    return channel_shuffle_ops(v) is not None


def one_pixel(conv: Op) -> bool:
    """A conv2d whose output map is one pixel (an FC on pooled features, squeeze-excitation's)."""
    y = conv.result.type
    return y.rank == 4 and y.shape[2:] == (1, 1)


def channel_factor(m: Op) -> tuple[Value, Value] | None:
    """(x, s) when `m` is a mul of a rank-4 x by an s that broadcasts along H and W only ([N or 1, C, 1,
    1], or [C, 1, 1]: one factor per image and channel), else None."""
    y = m.result.type
    if y.rank != 4 or not known_shape(y):
        return None
    for x, s in (m.operands, m.operands[::-1]):
        if s.type.rank > 4 or not known_shape(s.type):
            continue
        dims = (1,) * (4 - s.type.rank) + tuple(s.type.shape)
        if x.type.shape == y.shape and dims[1] == y.shape[1] and dims[2:] == (1, 1) \
                and dims[0] in (1, y.shape[0]):
            return x, s
    return None


def global_pool(op: Op) -> bool:
    """A mean or max of a rank-4 NCHW tensor over H and W to [N, C, 1, 1]."""
    if op.name not in GATE_POOLS or len(op.results) != 1:
        return False
    x, y = op.operands[0].type, op.result.type
    if x.rank != 4 or not known_shape(x) or y.rank != 4 or not known_shape(y) or y.shape[2:] != (1, 1):
        return False
    if not op.name.startswith("reduce_"):
        return True
    axes = {int(a) % 4 for a in op.attrs.get("axes", [])}  # type: ignore[union-attr]
    return axes == {2, 3} and bool(op.attrs.get("keepdims", True))


def pixel_fc(op: Op, index: int) -> bool:
    """Whether `op` reads operand `index` as an FC layer on pooled features: a conv2d of a one-pixel map
    with a 1x1 kernel, one group and no padding (its output is one pixel too)."""
    if op.name != "conv2d" or index != 0 or len(op.operands) < 2:
        return False
    x, w = op.operands[0].type, op.operands[1].type
    return (
        x.rank == 4 and x.shape[2:] == (1, 1) and w.rank == 4 and w.shape[2:] == (1, 1)
        and op.attrs.get("groups", 1) == 1
        and not any(op.attrs.get("pads", []))  # type: ignore[arg-type]
        and one_pixel(op)
    )


def blocked_on_channels(op: Op) -> bool:
    """A pack/unpack to or from NCHWc: one tile on dim 1, no outer permutation."""
    perm = op.attrs.get("outer_dims_perm", [])
    rank = op.operands[0].type.rank if op.name == "pack" else op.result.type.rank
    return op.attrs.get("inner_dims_pos") == [1] and rank == 4 and perm in ([], list(range(rank)))


class FuserBase:
    """The fusion of one func body: its state, and the helpers every rule uses."""

    def __init__(self, p: Fuse, module: Module, ctx: PassContext, block: Block):
        self.p, self.module, self.ctx, self.block = p, module, ctx, block
        self.explained: set[int] = set()  # ops a missed remark names
        self.anchor_of: dict[int, Op] = {}  # kernel op -> the anchor (or first op) it was formed around
        self.constant: set[int] = set()  # values computed from constants only
        for op in block.ops:
            if op.name == "const" or (op.operands and all(id(v) in self.constant for v in op.operands)):
                self.constant.update(id(r) for r in op.results)
        self.pos: dict[int, int] = {}
        self.expansions: dict[int, list[Op]] = {}  # depthwise conv -> the expansion its kernel takes in
        self.erased: list[Op] = []
        self.renumber()

    # helpers --------------------------------------------------------------------------------------
    def renumber(self) -> None:
        self.pos = {id(op): i for i, op in enumerate(self.block.ops)}

    def fusible(self, op: Op) -> bool:
        """An op this pass may move into a region: in the func body, of known shape (static or symbolic),
        not computed from constants."""
        return (
            op.parent is self.block
            and op.name != "kernel"
            and len(op.results) == 1
            and all(known_shape(r.type) for r in op.results)
            and not all(id(r) in self.constant for r in op.results)
        )

    def cost(self, op: Op) -> Cost:
        """The op's cost; with dynamic dims, its cost at every symbol bound to REPRESENTATIVE_SIZE (what
        the rules ask of it, FLOPs per element, does not depend on the size)."""
        opdef = get_op(op.name)
        try:
            if opdef is None:
                return Cost()
            if all(t.is_static for t in (*op.operand_types, *op.result_types)):
                return opdef.cost(op_sig(op, self.module.resources))
            binding = dict.fromkeys(op_symbols(op), REPRESENTATIVE_SIZE)
            return opdef.cost(opdef.sig([evaluate_type(t, binding) for t in op.operand_types],
                                        evaluate_attr(op.attrs, binding),
                                        [evaluate_type(t, binding) for t in op.result_types],
                                        self.module.resources))
        except (OpError, ValueError, KeyError, TypeError, ZeroDivisionError):
            return Cost()

    def elements(self, op: Op) -> int:
        """Elements of the op's result (at REPRESENTATIVE_SIZE where dynamic, as `cost`; 0 if unknown)."""
        t = op.result.type
        if not t.is_static and known_shape(t):
            t = evaluate_type(t, dict.fromkeys(t.symbols, REPRESENTATIVE_SIZE))
        return t.numel if t.is_static else 0

    def dear(self, op: Op) -> bool:
        """At least CHEAP_FLOPS per result element."""
        return self.cost(op).flops >= CHEAP_FLOPS * self.elements(op)

    def cheap(self, op: Op) -> bool:
        n = self.elements(op)
        return n > 0 and self.cost(op).flops <= CHEAP_FLOPS * n

    def flops_text(self, op: Op) -> str:
        n = self.cost(op).flops // max(self.elements(op), 1)
        return f"{n} FLOP{'' if n == 1 else 's'} per element"

    def missed(self, reason: str, ops: Sequence[Op], message: str) -> None:
        self.explained.update(id(o) for o in ops if is_elementwise(o))
        self.ctx.remark_missed("fusion", reason, ops, message)

    def inputs(self, ops: Sequence[Op], anchor: Op | None) -> tuple[list[Value], list[Value]]:
        """The region's operands (distinct values from outside, in first-use order) and the dense<>
        literals its elementwise ops read (cloned inside; an anchor or layout op takes an operand)."""
        inside = {id(r) for o in ops for r in o.results}
        args: dict[int, Value] = {}
        literals: dict[int, Value] = {}
        for o in ops:
            for v in o.operands:
                if id(v) in inside:
                    continue
                table = is_table_lookup(o) and v is o.operands[1]
                if (is_literal(v) or table) and o is not anchor and (is_elementwise(o) or table):
                    literals.setdefault(id(v), v)
                else:
                    args.setdefault(id(v), v)
        return list(args.values()), list(literals.values())

    def too_large(self, ops: Sequence[Op], anchor: Op | None) -> str | None:
        if len(ops) > self.p.max_ops:
            return f"the region would have {len(ops)} ops (max-ops={self.p.max_ops})"
        n = len(self.inputs(ops, anchor)[0])
        if n > self.p.max_args:
            return f"the region would take {n} operands (max-args={self.p.max_args})"
        return None

    def erase(self, op: Op) -> None:
        op.erase()
        self.erased.append(op)  # kept alive: the id-keyed tables must not see its id reused
        self.renumber()

    def clone_before(self, op: Op, consumer: Op) -> Op:
        """A copy of `op` (same operands) placed right before `consumer`, which now reads the copy."""
        c = Op(
            op.name,
            op.operands,
            op.result_types,
            dict(op.attrs),
            loc=op.loc,
            result_names=[r.name for r in op.results],
            pos=op.pos,
        )
        self.block.insert_before(consumer, c)
        for user, i in list(op.result.uses):
            if user is consumer:
                user.set_operand(i, c.result)
        self.renumber()
        return c
