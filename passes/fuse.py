"""fuse: form `kernel` regions (elementwise chains, contraction epilogues, reductions with prologue and
epilogue), each becoming one device kernel, with a remark for every decision and refusal.

Greedy, producer to consumer, in program order:
0. gates: a global pool over H and W (reduce_mean / reduce_max over [2, 3] keeping dims, global_avg_pool,
   global_max_pool) whose one reader is an FC on its features (`pixel_fc`: conv2d 1x1 of one pixel), with
   that FC's elementwise chain and the FCs and chains after it, is one `gate` region: squeeze-excitation
   as one kernel per image. Refused, remarked: `would-serialize` (a pool of over `gate-max-pool` elements
   per image, which one core would read), `dtype` (not f32), `too-large`.
1. anchors: each `conv2d`, `matmul`, `gemm` (kind `epilogue`) and each `softmax`, `log_softmax`,
   `layer_norm`, `batch_norm`, `reduce_*`, `global_avg_pool`, `max_pool2d`, `avg_pool2d` (kind
   `reduction`) takes, as the fused-region contract of ir/ops/kernel.py and the OpenCL `kernel` template
   expect: an `unpack` (inner_dims_pos=[1]) of its input when that is its only user (conv2d and pools;
   an unpack read only by such anchors is cloned into each, so the NCHW value is never written); for a
   reduction other than a pool, the elementwise ops that compute its input (its prologue, each with the
   input's shape: the template applies them to each element it loads);
   a `pack` (inner_dims_pos=[1]) when that is its only user (conv2d and pools); then the chain of
   elementwise consumers, each the only user of the value before it, whose other operands broadcast to
   the chain's shape without changing it (they become block arguments; `dense<>` literals are cloned in),
   or, where a chain value has several readers, all the elementwise ops up to the one value where they
   meet again (x * sigmoid(x); after a conv2d only ops under CHEAP_FLOPS per element: `epilogue-cost`);
   after a `matmul` or `gemm`, the chain may go on through a `layer_norm` over the last axis (the
   template normalizes each output row once the row is computed) and its own elementwise consumers, and
   end in a `split` along the last axis (a multi-result region: merged Q/K/V projections, made by
   merge-sibling-matmuls, store each column range straight to its own result), unless a layer_norm
   joined (its template writes whole rows). Before a `matmul` or `gemm`, the `layer_norm` over the last
   axis computing its A (directly or through a reshape keeping the last axis) joins when that is its only
   user (pre-LN transformers: the template normalizes A's rows as it reads them, and the normalized A is
   never written); the norm then forms no region of its own. Only up to `norm-prologue-max-n` output
   columns (16: one column block of the widest vectors): the template's work-items each compute a column
   block of some rows and recompute those rows' statistics, which on PoCL's CPU device cost more than
   the norm's own launch once there are several blocks (GPT-2's 32x128 @ 128x2048 head: 0.15 -> 0.26 ms
   for the 1.5 us kernel it saves). A norm read by a contraction that cannot take it is remarked:
   `multi-use`, `reduction-axis`, `layout-mismatch` (gemm's trans_a), `dtype` (not f32),
   `would-recompute` (too many columns). Before a `conv2d`, a nearest `resize` of H and W (any
   coordinate or rounding mode, any scale) whose only user is the conv joins: the conv's input repack
   reads each pixel from its source pixel through the reference's index tables, so the upsampled tensor
   is never written (a decoder's Upsample -> Conv); refused, remarked: `interpolates` (mode linear),
   `multi-use`, `shape-change` (it resizes N or C), `dtype`. Before a `conv2d`, a `mul` of its input by a
   per-channel factor ([N or 1, C, 1, 1]: squeeze-excitation's scale) whose only user is the conv joins:
   the conv folds the factor into its weights; refused, remarked: `multi-use`, `dtype`. Before a
   depthwise `conv2d` reading 16-channel blocks, an inverted residual's expansion (`expansion`: a 1x1
   conv2d, its NCHW16c pack, the elementwise chain on literals after it, the unpack the depthwise conv
   reads, and the 1x1 conv's own input unpack when that is its only reader) joins: the depthwise kernel
   computes each expanded pixel as it fills its local memory, so the expanded tensor is never written;
   the 1x1 conv then forms no region of its own. Only for windows up to `expand-max-window` taps
   (3x3): with 5x5 windows the fused kernel ran slower than the two (mobilenet_v3_small 3% slower);
   refused, remarked: `prologue-cost`, `multi-use` (the expanded value has another reader),
   `too-large`.
2. the elementwise ops left form `elementwise` regions: a producer and its consumer of the same shape
   share a region; a value used outside its region is yielded (several results rather than
   recomputation), unless that would make a cycle through an outside op (then a producer whose only
   user is the consumer moves to the consumer's region, and a cheap multi-use one is recomputed there
   with recompute=true).
A region is formed only with two ops or more: a lone op already lowers to its own kernel.

Fusing removes the intermediate's write and re-read; `bytes-saved` sums, per region, the traffic of its
ops (their `cost`) minus the region's boundary traffic. Refusals, each a `missed` remark (category
`fusion`) with its reason code: `multi-use` (a chain value with several users ends the region),
`would-recompute` (a cheap multi-use producer, at most 4 FLOPs per element by its `cost`, that
`recompute=true` would clone into the consumer's region, as -O3 does: remark `recomputed`),
`layout-mismatch` (a pack/unpack not adjacent to an anchor), `reduction-axis` (a consumer broadcasting a
reduction's result back, or a prologue op whose shape differs from the reduction's input),
`shape-change` (a consumer broadcasting the chain to a larger shape), `dtype` (a consumer changing the
element type of a contraction's or reduction's result), `too-large` (over `max-ops` ops or `max-args`
operands), `not-elementwise` (a consumer no template fuses), `interpolates` (a linear resize before a
conv), `epilogue-cost` (a reconverging chain after a conv2d with an op of CHEAP_FLOPS or more per
element), `would-serialize` (a gate's pool over `gate-max-pool`), `prologue-cost` (an expansion before a
depthwise conv of more than `expand-max-window` taps); and `no-partner` for each elementwise op
left on its own that no other remark names, so `--remarks-missed` explains every unfused elementwise op.
Ops computed from constants only are left alone (they run once, at load time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice

from ..ir.attributes import DenseAttr
from ..ir.core import Block, Module, Op, Region, Value, fuse_locs
from ..ir.ops.registry import Cost, OpError, get_op, op_sig
from .manager import Pass, PassContext

EPILOGUE_ANCHORS = frozenset({"conv2d", "matmul", "gemm"})
REDUCTION_ANCHORS = frozenset(
    {"softmax", "log_softmax", "layer_norm", "batch_norm", "global_avg_pool", "max_pool2d", "avg_pool2d"}
)
ROW_ANCHORS = frozenset({"matmul", "gemm"})
"""Epilogue anchors whose template can normalize whole output rows (a layer_norm) and split the columns."""
POOL_ANCHORS = frozenset({"max_pool2d", "avg_pool2d", "global_avg_pool"})
"""Reduction anchors whose template (the conv's tiling) takes an epilogue but no prologue."""
BLOCKED_ANCHORS = frozenset({"conv2d", *POOL_ANCHORS})
"""Anchors whose template reads an NCHWc input (an unpack in the region) or writes one (a pack)."""
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


def is_anchor(op: Op) -> bool:
    return op.name in EPILOGUE_ANCHORS or op.name in REDUCTION_ANCHORS or op.name.startswith("reduce_")


def is_elementwise(op: Op) -> bool:
    opdef = get_op(op.name)
    return opdef is not None and opdef.has("elementwise") and len(op.results) == 1


def is_literal(v: Value) -> bool:
    return v.op is not None and v.op.name == "const" and isinstance(v.op.attrs.get("value"), DenseAttr)


def quoted(ops: Sequence[Op]) -> str:
    return ", ".join(f"'{o.name}'" for o in ops)


def shape_text(v: Value) -> str:
    return "x".join("?" if d is None else str(d) for d in v.type.shape) or "scalar"


@dataclass
class Fuse(Pass):
    """Form kernel regions: elementwise chains, conv/matmul epilogues, reductions with prologue/epilogue.

    Options: `max-ops` (ops per region), `max-args` (operands per region), `recompute` (clone cheap
    multi-use producers into each consumer's region instead of refusing), `norm-prologue-max-n` (the
    widest contraction, in output columns, that takes the layer_norm computing its A). See the module
    docstring.
    """

    NAME = "fuse"
    STATISTICS = {
        "num-kernels": "Number of kernel regions formed",
        "num-fused": "Number of ops moved into kernel regions",
        "num-recomputed": "Number of cheap producers cloned into a consumer's region",
        "bytes-saved": "Bytes of memory traffic the regions save (by the ops' cost)",
    }
    max_ops: int = 16
    max_args: int = 8
    recompute: bool = False
    norm_prologue_max_n: int = 16
    gate_max_pool: int = GATE_MAX_POOL
    expand_max_window: int = 9

    def run(self, module: Module, ctx: PassContext) -> None:
        for f in module.funcs:
            _Fuser(self, module, ctx, f.block).run()


class _Fuser:
    """The fusion of one func body."""

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
        """An op this pass may move into a region: in the func body, static, not computed from constants."""
        return (
            op.parent is self.block
            and op.name != "kernel"
            and len(op.results) == 1
            and all(r.type.is_static for r in op.results)
            and not all(id(r) in self.constant for r in op.results)
        )

    def cost(self, op: Op) -> Cost:
        opdef = get_op(op.name)
        try:
            return opdef.cost(op_sig(op, self.module.resources)) if opdef else Cost()
        except (OpError, ValueError, KeyError, TypeError):
            return Cost()

    def cheap(self, op: Op) -> bool:
        n = op.result.type.numel
        return n > 0 and self.cost(op).flops <= CHEAP_FLOPS * n

    def flops_text(self, op: Op) -> str:
        n = self.cost(op).flops // max(op.result.type.numel, 1)
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
                if is_literal(v) and o is not anchor and is_elementwise(o):
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

    # driver ---------------------------------------------------------------------------------------
    def run(self) -> None:
        for op in list(self.block.ops):
            if op.parent is self.block and global_pool(op) and self.fusible(op):
                gate = self.gate(op)
                if gate:
                    self.form(gate, "gate", op)
        for op in list(self.block.ops):
            if op.parent is self.block and is_anchor(op) and self.fusible(op):
                if self.expanded_by(op) is not None:
                    continue  # the depthwise conv reading its result takes it in
                self.anchor_region(op)
        self.elementwise_regions()
        for op in self.block.ops:
            if is_elementwise(op) and id(op) not in self.explained:
                self.missed("no-partner", [op], self.why_alone(op))
        self.sort_block()

    # anchored regions -----------------------------------------------------------------------------
    def anchor_region(self, anchor: Op) -> None:
        kind = "epilogue" if anchor.name in EPILOGUE_ANCHORS else "reduction"
        if anchor.name == "layer_norm" and self.normalized_by_reader(anchor):
            return  # the matmul or gemm reading it normalizes its A rows itself
        ops = [anchor]
        if anchor.name in ROW_ANCHORS:
            pro = self.norm_before(anchor)
            if pro and self.normalized_by_reader(pro[0], remark=False):
                problem = self.too_large([*pro, anchor], anchor)
                if problem:
                    self.missed("too-large", [pro[0], anchor], f"'layer_norm' stays out of the kernel of "
                                f"'{anchor.name}': {problem}")
                else:
                    ops[:0] = pro
        expansion = self.expansions.pop(id(anchor), [])
        unpack = self.absorbable_unpack(anchor) if anchor.name in BLOCKED_ANCHORS and not expansion else None
        shuffle = self.absorbable_shuffle(anchor) if unpack is None and not expansion else []
        resize = self.absorbable_resize(anchor) if unpack is None and not shuffle and not expansion else []
        plain = unpack is None and not shuffle and not resize and not expansion
        scale = self.absorbable_scale(anchor) if plain else []
        if expansion:
            ops[:0] = expansion
        elif unpack is not None:
            ops.insert(0, unpack)
        elif shuffle or resize or scale:
            ops[:0] = shuffle or resize or scale
        elif kind == "reduction" and anchor.name not in POOL_ANCHORS:  # a pool's template reads its input
            self.prologue(anchor, 0, anchor, ops)
        v = anchor.result
        pack = v.users[0] if len(v.uses) == 1 else None
        if (
            anchor.name in BLOCKED_ANCHORS
            and pack is not None
            and pack.name == "pack"
            and blocked_on_channels(pack)
            and self.fusible(pack)
        ):
            ops.append(pack)
            v = pack.result
        self.chain(v, anchor, kind, ops)
        if anchor.name in ROW_ANCHORS:
            self.row_tail(anchor, ops)
        if len(ops) > 1:
            self.form(ops, kind, anchor)

    def gate(self, pool: Op) -> list[Op]:
        """[pool, fc, chain..., fc, chain...]: a global pool over H and W followed by FCs on the pooled
        features (conv2d 1x1 on one pixel, as squeeze-excitation's reduce and expand), each with the
        elementwise chain on its result (ReLU, SiLU, a sigmoid or hard sigmoid); one kernel computes them per
        image. Refused, remarked: `dtype` (not f32), `too-large` (over max-ops, max-args or GATE_MAX_CHANNELS
        features), `would-serialize` (a pool of more than `gate-max-pool` elements per image, or FCs of more
        than GATE_MAX_WEIGHTS weights: one core would read them), `layout-mismatch` (the pool reads NCHWc
        data through an unpack, which its own kernel reads in place)."""
        ops, v = [pool], pool.result
        while len(v.uses) == 1 and pixel_fc(*v.uses[0]) and self.fusible(v.users[0]):
            ops.append(v.users[0])
            v = self.gate_chain(ops)
        fcs = [o for o in ops if o.name == "conv2d"]
        if not fcs:
            return []
        x = pool.operands[0].type
        widest = max(x.dims[1], *(fc.result.type.dims[1] for fc in fcs))
        per_image = x.numel // x.dims[0]
        weights = sum(fc.operands[1].type.numel for fc in fcs)
        what = f"{quoted(ops)} stay apart: one kernel per image would compute them"
        source = pool.operands[0].op
        if any(o.result.type.dtype != "f32" for o in ops) or x.dtype != "f32":
            self.missed("dtype", ops, f"{what} in f32 only")
        elif source is not None and source.name == "unpack":
            self.missed("layout-mismatch", [source, *ops],
                        f"{what}, but the pool reads NCHWc data through an 'unpack' (its own kernel reads it "
                        f"in place) and the gate kernel reads NCHW")
        elif (problem := self.too_large(ops, pool)) is not None:
            self.missed("too-large", ops, f"{what}, but {problem}")
        elif widest > GATE_MAX_CHANNELS:
            self.missed("too-large", ops,
                        f"{what} in arrays of {widest} features (at most {GATE_MAX_CHANNELS})")
        elif per_image > self.p.gate_max_pool:
            self.missed("would-serialize", ops,
                        f"{what}, but its pool of {per_image} elements per image would run on one core, "
                        f"which costs more than the launches it saves (gate-max-pool={self.p.gate_max_pool})")
        elif weights > GATE_MAX_WEIGHTS:
            self.missed("would-serialize", ops,
                        f"{what}, but its FCs' {weights} weights would be read by one core, which costs more "
                        f"than the launches it saves (at most {GATE_MAX_WEIGHTS})")
        else:
            return ops
        return []

    def gate_chain(self, ops: list[Op]) -> Value:
        """Extend `ops` with the elementwise ops on the result of its last FC (each of that shape and dtype;
        a value read several times over only where those reads meet again: x * sigmoid(x)) and return the
        chain's last value. No remark: what stops the chain is the next FC, or what reads the gate."""
        fc = ops[-1]
        v = fc.result
        while True:
            dag = self.reconverging(v, fc, ops) if len(v.uses) > 1 else None
            if dag:
                ops += dag
                v = dag[-1].result
                continue
            if len(v.uses) != 1:
                return v
            u = v.users[0]
            if (
                not is_elementwise(u)
                or not self.fusible(u)
                or u.result.type.shape != v.type.shape
                or u.result.type.dtype != v.type.dtype
                or len(ops) >= self.p.max_ops
            ):
                return v
            ops.append(u)
            v = u.result

    def normalized_by_reader(self, ln: Op, remark: bool = True) -> bool:
        """Whether `ln`'s only reader is a matmul or gemm, as its A, that normalizes A's rows as it reads
        them (the layer_norm then joins that kernel, not a region of its own); a reader that cannot is
        remarked when `remark` (`multi-use`, `reduction-axis`, `layout-mismatch`, `dtype`,
        `would-recompute`)."""
        v = ln.result
        readers = [r for r in (self.row_reader(u, i) for u, i in v.uses) if r is not None]
        if not readers:
            return False
        reader = readers[0]
        where = f"the kernel of '{reader.name}' cannot normalize its A rows as it reads them"
        missed = self.missed if remark else lambda *_: None
        axis = int(ln.attrs.get("axis", -1))  # type: ignore[arg-type]
        rank = v.type.rank
        if len(v.uses) != 1:
            missed("multi-use", [ln, *readers],
                   f"the result of 'layer_norm' has {len(v.uses)} users; {where}, each would normalize again")
        elif (axis + rank if axis < 0 else axis) != rank - 1:
            missed("reduction-axis", [ln, reader],
                   f"'layer_norm' normalizes from axis {axis}, not the last axis only; {where}")
        elif reader.name == "gemm" and reader.attrs.get("trans_a"):
            missed("layout-mismatch", [ln, reader],
                   f"'gemm' reads A transposed (trans_a), so the normalized axis is not its rows; {where}")
        elif v.type.dtype != "f32" or ln.operands[0].type.dtype != "f32":
            missed("dtype", [ln, reader], f"'layer_norm' of {v.type.dtype}: {where} (f32 only)")
        elif (n := (reader.result.type.dims or (1,))[-1]) > self.p.norm_prologue_max_n:
            missed("would-recompute", [ln, reader], f"'{reader.name}' has {n} output columns: every column "
                   f"block of its kernel would recompute the rows' statistics, which costs more than the "
                   f"launch it saves (norm-prologue-max-n={self.p.norm_prologue_max_n})")
        else:
            return True
        return False

    def row_reader(self, user: Op, index: int) -> Op | None:
        """The matmul or gemm reading a value as its A, directly (`user`, operand `index`) or through one
        reshape that keeps the last axis (a view: rows stay rows), else None."""
        if user.name == "reshape" and keeps_rows(user) and len(user.result.uses) == 1 and self.fusible(user):
            user, index = user.result.uses[0]
        return user if user.name in ROW_ANCHORS and index == 0 and self.fusible(user) else None

    def norm_before(self, anchor: Op) -> list[Op]:
        """[layer_norm] or [layer_norm, reshape]: the norm computing `anchor`'s A, maybe through a view."""
        p = anchor.operands[0].op
        chain = []
        if p is not None and p.name == "reshape" and keeps_rows(p) and self.fusible(p):
            chain, p = [p], p.operands[0].op
        if p is None or p.name != "layer_norm" or not self.fusible(p):
            return []
        return [p, *chain]

    def row_tail(self, anchor: Op, ops: list[Op]) -> None:
        """After a matmul/gemm epilogue: a `layer_norm` over the last axis (then its own elementwise
        chain), then a `split` along the last axis, each when it is the only user of the value before."""
        last = ops[-1]
        v = last.result
        normed = False
        u = v.users[0] if len(v.uses) == 1 else None
        if u is not None and u.name == "layer_norm" and v.uses[0][1] == 0 and self.fusible(u):
            axis = u.attrs.get("axis", -1)
            problem = self.too_large([*ops, u], anchor)
            if axis not in (-1, v.type.rank - 1):
                self.missed(
                    "reduction-axis",
                    [u, last],
                    f"'layer_norm' normalizes from axis {axis}, not over the last axis only; the "
                    f"epilogue of '{anchor.name}' normalizes its own output rows only",
                )
            elif problem:
                self.missed("too-large", [u, last], f"'layer_norm' cannot join the epilogue of "
                            f"'{anchor.name}': {problem}")
            else:
                ops.append(u)
                self.chain(u.result, anchor, "epilogue", ops)
                v, normed = ops[-1].result, True
        u = v.users[0] if len(v.uses) == 1 else None
        if (
            u is not None
            and not normed  # the row-norm template writes whole rows of one result
            and u.name == "split"
            and u.parent is self.block
            and v.type.rank >= 1
            and u.attrs.get("axis", 0) in (-1, v.type.rank - 1)
            and all(r.type.is_static for r in u.results)
        ):
            ops.append(u)

    def absorbable_unpack(self, anchor: Op) -> Op | None:
        x = anchor.operands[0]
        u = x.op
        if u is None or u.name != "unpack" or not self.fusible(u):
            return None
        if not blocked_on_channels(u):
            self.missed(
                "layout-mismatch",
                [u, anchor],
                f"'{anchor.name}' reads an unpack that is not "
                "NCHWc (inner_dims_pos=[1]); the region cannot read it blocked",
            )
            return None
        if x.uses == [(anchor, 0)]:
            return u
        if not self.feeds_blocked_anchors(u):
            self.missed(
                "multi-use",
                [u, anchor],
                f"the unpack before '{anchor.name}' has {len(x.uses)} uses, not all of them "
                "blocked-layout anchors; it stays a kernel of its own",
            )
            return None
        # every reader takes a copy, so no NCHW copy of the value is ever written: free, unlike
        # recomputing arithmetic (the last reader takes the original)
        c = self.clone_before(u, anchor)
        self.p.stat("num-recomputed")
        self.ctx.remark_passed(
            "fusion",
            "recomputed",
            [c, anchor],
            f"cloned the unpack into the kernel of '{anchor.name}', which reads the blocked value itself",
        )
        return c

    def absorbable_shuffle(self, anchor: Op) -> list[Op]:
        """A channel shuffle (reshape [N, C, H, W] -> [N, G, C/G, H, W], transpose [0, 2, 1, 3, 4], reshape
        back: shufflenet) read only by a depthwise conv: the conv's kernel reads the shuffled channels
        where they are (its input repack reads channel c from (c % G) * C/G + c / G), so the shuffle
        costs no launch and no copy. Returns [reshape, transpose, reshape] or []."""
        chain = channel_shuffle_ops(anchor.operands[0]) if anchor.name == "conv2d" else None
        if chain is None:
            return []
        x, w = anchor.operands[0].type, anchor.operands[1].type
        if anchor.attrs.get("groups", 1) != x.dims[1] or w.dims[0] != x.dims[1] or w.dims[1] != 1:
            return []  # not depthwise: only that template reads through a channel map
        if not all(self.fusible(o) and len(o.result.uses) == 1 for o in chain):
            return []
        return chain

    def absorbable_resize(self, anchor: Op) -> list[Op]:
        """A nearest-neighbour resize of H and W (any coordinate and rounding mode) read only by a conv2d:
        the conv's input repack reads each pixel from the resize's source pixel (the reference's index
        tables, baked into the kernel), so the upsampled tensor is never written and the resize costs no
        launch (a decoder's Upsample -> Conv). Returns [resize] or []; one that cannot join is remarked:
        `interpolates` (mode linear), `multi-use`, `shape-change` (it resizes N or C), `dtype` (not f32)."""
        r = anchor.operands[0].op if anchor.name == "conv2d" else None
        if r is None or r.name != "resize" or not self.fusible(r):
            return []
        x, y = r.operands[0].type, r.result.type
        what = f"the input repack of '{anchor.name}'"
        mode = op_sig(r, self.module.resources).attrs["mode"]  # the registry's default when not given
        if mode != "nearest":
            self.missed("interpolates", [r, anchor], f"'resize' interpolates (mode {mode}); "
                        f"{what} only copies pixels, so the resize stays a kernel of its own")
        elif len(r.result.uses) != 1:
            self.missed("multi-use", [r, anchor], f"'resize' has {len(r.result.uses)} uses; {what} can "
                        "stand in for it only when the conv is its one reader")
        elif x.rank != 4 or x.dims[:2] != y.dims[:2]:
            self.missed("shape-change", [r, anchor], "'resize' resizes more than H and W "
                        f"({shape_text(r.operands[0])} -> {shape_text(r.result)}); {what} maps pixels, "
                        "not channels")
        elif x.dtype != "f32":
            self.missed("dtype", [r, anchor], f"'resize' of {x.dtype}; {what} reads f32")
        else:
            return [r]
        return []

    def expanded_by(self, conv: Op) -> Op | None:
        """The depthwise conv2d whose kernel computes `conv`'s result as its input (`expansion`), if any;
        the expansion is kept for that conv's region (a 1x1 conv comes first in program order, so its
        refusal is remarked here, once)."""
        v = conv.result
        if conv.name != "conv2d" or len(v.uses) != 1 or v.users[0].name != "pack":
            return None
        seen, todo = {id(v.users[0])}, [v.users[0]]
        while todo:  # the pack's chain, to the unpack a conv reads
            for u in todo.pop().result.users:
                if u.name == "unpack" and len(u.result.uses) == 1 and u.result.users[0].name == "conv2d":
                    dw = u.result.users[0]
                    found = self.expansion(dw)
                    if not found or conv not in found:
                        return None
                    self.expansions[id(dw)] = found
                    return dw
                if is_elementwise(u) and id(u) not in seen and len(seen) <= self.p.max_ops:
                    seen.add(id(u))
                    todo.append(u)
        return None

    def expansion(self, dw: Op) -> list[Op]:
        """[unpack?, conv 1x1, pack, chain..., unpack]: an inverted residual's expansion computing a
        depthwise conv2d's input in 16-channel blocks (the 1x1 conv, its pack and the elementwise chain on
        literals after it, ReLU6, hard swish, SiLU, each value read only inside), which the depthwise
        conv's kernel computes as it fills its local memory: the expanded tensor is never written. The 1x1
        conv's input joins through its NCHWc unpack when that is its only reader. Refused, remarked:
        `prologue-cost` (a window over `expand-max-window` taps), `multi-use` (the expanded value is read
        elsewhere too), `too-large`."""
        x = dw.operands[0].type if dw.name == "conv2d" else None
        u = dw.operands[0].op
        if (
            x is None or x.rank != 4 or not x.is_static or dw.attrs.get("groups", 1) != x.dims[1]
            or dw.operands[1].type.dims[:2] != (x.dims[1], 1) or u is None or u.name != "unpack"
            or not blocked_on_channels(u) or u.attrs.get("inner_tiles") != [16] or not self.fusible(u)
            or dw.operands[0].uses != [(dw, 0)] or x.dims[1] % 16 or x.dtype != "f32"
        ):
            return []
        chain: list[Op] = []
        todo = [u.operands[0]]
        while todo:  # back through elementwise ops to the pack
            p = todo.pop().op
            if p is None or p in chain:
                continue
            if p.name == "pack":
                continue
            if not is_elementwise(p) or not self.fusible(p) or len(chain) >= self.p.max_ops:
                return []
            if any(is_literal(v) and not v.op.attrs["value"].is_splat for v in p.operands):  # type: ignore
                return []  # the kernel evaluates the chain on 16 channels at once, with splats only
            chain.append(p)
            todo += [v for v in p.operands if not is_literal(v)]
        pk = next((v.op for o in [u, *chain] for v in o.operands if v.op is not None and v.op.name == "pack"),
                  None)
        conv = pk.operands[0].op if pk is not None else None
        if (
            pk is None or conv is None or conv.name != "conv2d" or not self.fusible(conv)
            or not self.fusible(pk) or pk.attrs.get("inner_tiles") != [16] or not blocked_on_channels(pk)
            or conv.result.uses != [(pk, 0)] or conv.operands[1].type.dims[2:] != (1, 1)
            or conv.attrs.get("groups", 1) != 1 or any(conv.attrs.get("pads", []))  # type: ignore[arg-type]
            or any(int(s) != 1 for s in conv.attrs.get("strides", [1, 1]))  # type: ignore[union-attr]
            or any(o.result.type != pk.result.type for o in chain)
        ):
            return []
        chain.sort(key=lambda o: self.pos[id(o)])
        inside = {id(o) for o in (pk, *chain, u)}
        outside = [o for o in (pk, *chain) for r in o.result.users if id(r) not in inside]
        ops = [conv, pk, *chain, u]
        xu = conv.operands[0].op
        if (xu is not None and xu.name == "unpack" and blocked_on_channels(xu) and self.fusible(xu)
                and conv.operands[0].uses == [(conv, 0)]):
            ops.insert(0, xu)
        what = "the kernel of the depthwise 'conv2d' cannot compute its input from the 1x1 'conv2d' before it"
        window = dw.operands[1].type.dims[2] * dw.operands[1].type.dims[3]
        if window > self.p.expand_max_window:
            self.missed("prologue-cost", [conv, dw],
                        f"the depthwise 'conv2d' has a {window}-tap window; its kernel computing the "
                        f"expansion as well ran slower than the two kernels "
                        f"(expand-max-window={self.p.expand_max_window})")
        elif outside:
            self.missed("multi-use", [conv, *outside, dw],
                        f"the expanded value of {quoted(outside[:1])} is read elsewhere too; {what}")
        elif (problem := self.too_large([*ops, dw], dw)) is not None:
            self.missed("too-large", [conv, dw], f"{what}: {problem}")
        else:
            return ops
        return []

    def absorbable_scale(self, anchor: Op) -> list[Op]:
        """A `mul` of a conv2d's input by a per-channel factor ([N or 1, C, 1, 1]: squeeze-excitation's
        channel scale, as MobileNetV3, EfficientNet and RegNet-Y apply it before the block's projection)
        whose one reader is the conv: the conv multiplies its weights by the factor as it loads them
        (conv(x * s) is conv(x) with W[:, c] * s[c]), so the scaled activations are never written.
        Returns [mul] or []; a channel scale the conv cannot take is remarked (`multi-use`, `dtype`)."""
        v = anchor.operands[0]
        m = v.op
        if anchor.name != "conv2d" or m is None or m.name != "mul" or not self.fusible(m):
            return []
        found = channel_factor(m)
        if found is None or is_literal(found[1]):
            return []  # not a per-channel scale, or a literal one (an input normalization's 1 / std,
            # which joins the elementwise ops before it; the kernel reads a factor as an operand)
        what = f"the kernel of '{anchor.name}'"
        if v.uses != [(anchor, 0)]:
            self.missed("multi-use", [m, anchor], f"the channel scale 'mul' has {len(v.uses)} uses; {what} "
                        "folds it into its weights only when the conv is its one reader")
        elif v.type.dtype != "f32":
            self.missed("dtype", [m, anchor], f"a channel scale of {v.type.dtype}; {what} scales f32 weights")
        else:
            return [m]
        return []

    def feeds_blocked_anchors(self, unpack: Op) -> bool:
        """Whether only conv2d or pool anchors read `unpack`, as their input (each takes it along)."""
        uses = unpack.result.uses
        return (
            bool(uses)
            and all(i == 0 and o.name in BLOCKED_ANCHORS and self.fusible(o) for o, i in uses)
            and blocked_on_channels(unpack)
        )

    def prologue(self, consumer: Op, index: int, anchor: Op, ops: list[Op]) -> None:
        """Take the elementwise producer of `consumer`'s operand `index` (and, recursively, its
        producers) into the region of reduction `anchor` when the region is its only user."""
        v = consumer.operands[index]
        p = v.op
        if p is None or not is_elementwise(p) or not self.fusible(p) or p in ops:
            return
        want = anchor.operands[0]
        if v.type.shape != want.type.shape:
            self.missed(
                "reduction-axis",
                [p, anchor],
                f"'{p.name}' has shape {shape_text(v)}, not the "
                f"{shape_text(want)} of the input of '{anchor.name}'; it cannot be its prologue",
            )
            return
        single = v.users == [consumer] and (consumer is not anchor or v.uses == [(anchor, 0)])
        n = len(v.uses)
        if not single and not self.cheap(p):
            self.missed(
                "multi-use",
                [p, anchor],
                f"'{p.name}' has {n} uses; computing it once is cheaper "
                f"than in the kernel of '{anchor.name}' too",
            )
            return
        if not single and not self.p.recompute:
            self.missed(
                "would-recompute",
                [p, anchor],
                f"'{p.name}' has {n} uses; the kernel of "
                f"'{anchor.name}' would recompute it (recompute=true does)",
            )
            return
        problem = self.too_large([p, *ops], anchor)
        if problem:
            self.missed(
                "too-large", [p, anchor], f"'{p.name}' stays out of the kernel of '{anchor.name}': " + problem
            )
            return
        if not single:
            p = self.clone_before(p, consumer)
            ops.insert(0, p)
            self.p.stat("num-recomputed")
            self.ctx.remark_passed(
                "fusion",
                "recomputed",
                [p, anchor],
                f"recomputed '{p.name}' "
                f"({self.flops_text(p)}) in the kernel of '{anchor.name}' instead of "
                "reading it",
            )
            return  # a clone reads what the original read; its producers stay where they are
        ops.insert(0, p)
        for i in range(len(p.operands)):
            self.prologue(p, i, anchor, ops)

    def chain(self, v: Value, anchor: Op, kind: str, ops: list[Op]) -> None:
        """Extend the region with elementwise consumers of `v`, one after another."""
        where = f"the {'epilogue of' if kind == 'epilogue' else 'kernel of'} '{anchor.name}'"
        last = ops[-1]
        while True:
            users = v.users
            dag = self.reconverging(v, anchor, ops) if len(v.uses) > 1 else None
            dear = [o for o in dag or () if self.cost(o).flops >= CHEAP_FLOPS * o.result.type.numel]
            if dag and anchor.name in CHEAP_EPILOGUE_ANCHORS and dear and map_pixels(anchor) > 1:
                many = len(dear) > 1
                self.missed("epilogue-cost", [*dag, last], f"{quoted(dear)} cost{'' if many else 's'} "
                            f"{self.flops_text(dear[0])}; "
                            f"{where} would run {'them' if many else 'it'} once per stored vector, "
                            f"unrolled beside its accumulators, so {quoted(dag)} stay a kernel of their own")
                return
            if dag:
                problem = self.too_large([*ops, *dag], anchor)
                if problem:
                    self.missed("too-large", [*dag, last], f"{quoted(dag)} cannot join {where}: {problem}")
                    return
                ops += dag
                v, last = dag[-1].result, dag[-1]
                continue
            if len(users) != 1:
                ew = [u for u in users if is_elementwise(u) and u.parent is self.block]
                if ew:
                    verb = "reads" if len(ew) == 1 else "read"
                    self.missed(
                        "multi-use",
                        [last, *ew],
                        f"the result of '{last.name}' has {len(users)} "
                        f"users; {where} ends there and {quoted(ew)} {verb} it from memory",
                    )
                return
            u = users[0]
            if u.name in ("return", "kernel") or u.parent is not self.block:
                return
            if u.name == "unpack" and self.feeds_blocked_anchors(u):
                return  # it joins the kernel of the conv or pool that reads it
            if u.name in ("pack", "unpack"):
                self.missed(
                    "layout-mismatch",
                    [u, last],
                    f"'{u.name}' changes the layout after "
                    f"'{last.name}'; only a pack right after a conv2d or pool joins its kernel",
                )
                return
            if not is_elementwise(u):
                if not is_anchor(u):
                    self.missed(
                        "not-elementwise",
                        [u, last],
                        f"'{u.name}' is not elementwise; no fused template takes it into {where}",
                    )
                return
            if not self.fusible(u):
                return
            if len(v.uses) > 1:
                self.missed(
                    "multi-use",
                    [u, last],
                    f"'{u.name}' reads the result of '{last.name}' "
                    f"{len(v.uses)} times; {where} takes each value once",
                )
                return
            if u.result.type.shape != v.type.shape:
                reason = "reduction-axis" if kind == "reduction" else "shape-change"
                what = "back " if kind == "reduction" else ""
                self.missed(
                    reason,
                    [u, last],
                    f"'{u.name}' broadcasts the result of '{last.name}' {what}"
                    f"from {shape_text(v)} to {shape_text(u.result)}; it cannot join {where}",
                )
                return
            if u.result.type.dtype != anchor.result.type.dtype:
                self.missed(
                    "dtype",
                    [u, last],
                    f"'{u.name}' changes the element type from "
                    f"{anchor.result.type.dtype} to {u.result.type.dtype}; it cannot join {where}",
                )
                return
            problem = self.too_large([*ops, u], anchor)
            if problem:
                self.missed("too-large", [u, last], f"'{u.name}' cannot join {where}: {problem}")
                return
            ops.append(u)
            v, last = u.result, u

    def reconverging(self, v: Value, anchor: Op, ops: list[Op]) -> list[Op] | None:
        """The elementwise ops, in program order, that read `v` several times over and meet again in one
        value read outside them (x * sigmoid(x): SiLU and Swish; x * Phi(x); a GLU's silu(gate) * u), each
        of `v`'s shape and the anchor's dtype; None when a reader of one of their values cannot join, or they
        do not meet within `max-ops`. Their other operands cannot depend on the region: every value in it
        but the last is read only inside it."""
        dtype = anchor.result.type.dtype
        members: list[Op] = []
        values = [v]  # v and the members' results
        mine = {id(v)}
        assert v.op is not None
        for op in islice(self.block.ops, self.pos[id(v.op)] + 1, None):
            if not any(id(x) in mine for x in op.operands):
                continue
            if (
                not is_elementwise(op)
                or not self.fusible(op)
                or op.result.type.shape != v.type.shape
                or op.result.type.dtype != dtype
                or len(ops) + len(members) >= self.p.max_ops
            ):
                return None
            members.append(op)
            values.append(op.result)
            mine.add(id(op.result))
            inside = {id(m) for m in members}
            if all(id(u) in inside for x in values[:-1] for u in x.users):
                return members  # only the last value is read outside
        return None

    # elementwise regions --------------------------------------------------------------------------
    def elementwise_regions(self) -> None:
        group: dict[int, list[Op]] = {}
        for u in list(self.block.ops):
            if not is_elementwise(u) or not self.fusible(u):
                continue
            mine = [u]
            group[id(u)] = mine
            for v in u.operands:
                p = v.op
                if p is None or id(p) not in group or group[id(p)] is mine or u not in v.users:
                    continue  # (u may read a clone of p by now)
                if p.result.type.shape != u.result.type.shape:
                    self.missed(
                        "shape-change",
                        [u, p],
                        f"'{u.name}' broadcasts the result of '{p.name}' "
                        f"from {shape_text(v)} to {shape_text(u.result)}; they stay apart",
                    )
                    continue
                merged = sorted(group[id(p)] + mine, key=lambda o: self.pos[id(o)])
                problem = self.too_large(merged, None)
                if problem:
                    self.missed("too-large", [u, p], f"'{u.name}' and '{p.name}' stay apart: {problem}")
                    continue
                if self.makes_cycle(merged, group) is not None:
                    mine = self.recompute_or_refuse(p, u, mine, group)
                    continue
                mine = merged
                for o in mine:
                    group[id(o)] = mine
        done: set[int] = set()
        for ops in list(group.values()):
            if id(ops) not in done and len(ops) > 1:
                done.add(id(ops))
                self.form(ops, "elementwise", None)

    def recompute_or_refuse(self, p: Op, u: Op, mine: list[Op], group: dict[int, list[Op]]) -> list[Op]:
        """The regions of `p` and `u` cannot merge (a path leaves them and comes back). When `u` is the
        only user of `p`, `p` moves to `u`'s region; otherwise a cheap `p` is cloned into it with
        recompute=true; else the refusal is remarked. Returns `u`'s region."""
        through = self.makes_cycle(sorted(group[id(p)] + mine, key=lambda o: self.pos[id(o)]), group)
        via = f"through '{through.name}' " if through is not None else ""
        n = len(p.result.users)
        single = n == 1
        if not single and not self.cheap(p):
            self.missed(
                "multi-use",
                [u, p],
                f"'{p.name}' has {n} users and its region leads {via}back to "
                f"'{u.name}'; they cannot share a region",
            )
            return mine
        if not single and not self.p.recompute:
            self.missed(
                "would-recompute",
                [u, p],
                f"'{p.name}' has {n} users and its region leads {via}"
                f"back to '{u.name}'; the region of '{u.name}' would recompute it (recompute=true "
                "does)",
            )
            return mine
        old = group[id(p)]
        if single:  # a move: its old region loses a sink, which keeps that region convex
            old.remove(p)
            group[id(p)] = [p]
        c = p if single else self.clone_before(p, u)
        merged = sorted([c, *mine], key=lambda o: self.pos[id(o)])
        problem = self.too_large(merged, None)
        if problem or self.makes_cycle(merged, group) is not None:
            if single:
                old.append(p)
                group[id(p)] = old
            else:
                u.set_operands([p.result if x is c.result else x for x in u.operands])
                self.erase(c)
            reason = "too-large" if problem else "multi-use"
            self.missed(
                reason,
                [u, p],
                f"'{u.name}' cannot fuse '{p.name}': "
                + (problem or f"its region leads {via}back to '{u.name}'"),
            )
            return mine
        if not single:
            self.p.stat("num-recomputed")
            self.ctx.remark_passed(
                "fusion",
                "recomputed",
                [c, u],
                f"recomputed '{p.name}' ("
                f"{self.flops_text(p)}) in the region of '{u.name}' instead of reading it",
            )
        for o in merged:
            group[id(o)] = merged
        return merged

    def makes_cycle(self, ops: list[Op], group: dict[int, list[Op]]) -> Op | None:
        """An op outside `ops` on a path that leaves them and comes back, counting each other region as
        one node (the regions could not be ordered); None when there is none."""
        inside = {id(o) for o in ops}
        stack = [x for o in ops for x in o.result.users if id(x) not in inside]
        seen: set[int] = set()
        while stack:
            w = stack.pop()
            if id(w) in seen or id(w) in inside:
                continue
            seen.add(id(w))
            members = group.get(id(w), [w])
            stack.extend(m for m in members if id(m) not in seen)
            for r in w.results:
                for x in r.users:
                    if id(x) in inside:
                        return w
                    stack.append(x)
        return None

    # building a region ----------------------------------------------------------------------------
    def form(self, ops: list[Op], kind: str, anchor: Op | None) -> None:
        ops = sorted(ops, key=lambda o: self.pos[id(o)])
        inside = {id(o) for o in ops}
        args, literals = self.inputs(ops, anchor)
        yields = [r for o in ops for r in o.results if any(id(x) not in inside for x in r.users)]
        if not yields:
            return  # dead code: nothing to compute
        saved = (
            sum(self.cost(o).bytes for o in ops)
            - sum(a.type.nbytes for a in args)
            - sum(r.type.nbytes for r in yields)
        )
        kernel = Op(
            "kernel",
            args,
            [r.type for r in yields],
            {"kind": kind},
            loc=fuse_locs(*(o.loc for o in ops)),
            result_names=[r.name for r in yields],
        )
        self.block.insert_after(ops[-1], kernel)
        for i, r in enumerate(yields):
            for user, j in list(r.uses):
                if id(user) not in inside:
                    user.set_operand(j, kernel.results[i])
        body = Block([a.type for a in args], [a.name for a in args])
        kernel.add_region(Region([body]))
        mapping = {id(a): b for a, b in zip(args, body.args, strict=True)}
        clones: dict[int, Value] = {}
        for lit in literals:
            assert lit.op is not None
            c = body.append(
                Op("const", (), [lit.type], dict(lit.op.attrs), loc=lit.op.loc, result_names=[lit.name])
            )
            clones[id(lit)] = c.result
        values_inside = {id(r) for o in ops for r in o.results}
        for o in ops:
            self.block.remove(o)
            body.append(o)
            takes_literals = o is not anchor and is_elementwise(o)
            for j, v in enumerate(o.operands):
                if id(v) in values_inside:
                    continue
                o.set_operand(j, clones[id(v)] if takes_literals and id(v) in clones else mapping[id(v)])
        body.append(Op("yield", yields))
        for lit in literals:
            if not lit.uses and lit.op is not None:
                self.erase(lit.op)
        self.renumber()
        self.anchor_of[id(kernel)] = anchor or ops[0]
        self.p.stat("num-kernels")
        self.p.stat("num-fused", len(ops))
        self.p.stat("bytes-saved", max(saved, 0))
        self.ctx.remark_passed("fusion", "fused", ops, self.fused_message(ops, kind, anchor, saved, yields))

    @staticmethod
    def fused_message(ops: list[Op], kind: str, anchor: Op | None, saved: int, yields: list[Value]) -> str:
        tail = f" (saves {saved} bytes)"
        if kind == "gate":
            return f"fused {quoted(ops)} into one kernel per image (a pool and FCs on its features){tail}"
        if anchor is None:
            extra = f", yielding {len(yields)} results" if len(yields) > 1 else ""
            return f"fused {quoted(ops)} into one elementwise kernel{extra}{tail}"
        i = ops.index(anchor)
        before, after = ops[:i], ops[i + 1 :]
        if kind == "epilogue" and not before:
            return f"fused {quoted(after)} into the epilogue of '{anchor.name}'{tail}"
        parts = ([f"{quoted(before)} as the prologue"] if before else []) + (
            [f"{quoted(after)} as the epilogue"] if after else []
        )
        return f"fused {' and '.join(parts)} of '{anchor.name}'{tail}"

    # explaining lone ops --------------------------------------------------------------------------
    def why_alone(self, op: Op) -> str:
        if all(id(r) in self.constant for r in op.results):
            return f"'{op.name}' is computed from constants only; it runs once, at load time"
        if not all(r.type.is_static for r in op.results):
            return f"'{op.name}' has a dynamic shape; fusion needs static shapes"
        producers: list[str] = []
        for v in dict.fromkeys(op.operands):
            p = v.op
            if p is None:
                producers.append("a function argument")
            elif p.name != "const":
                producers.append(self.describe(p))
        users = [self.describe(u) for u in op.result.users]
        text = f"'{op.name}' has nothing to fuse with"
        if producers:
            text += f": it reads {', '.join(dict.fromkeys(producers))}"
        if users:
            text += (" and" if producers else ":") + f" feeds {', '.join(dict.fromkeys(users))}"
        return text + "; it stays a kernel of its own"

    def describe(self, op: Op) -> str:
        if op.name == "return":
            return "the return"
        if op.name == "kernel":
            return f"the kernel of '{self.anchor_of.get(id(op), op).name}'"
        return f"'{op.name}'"

    # order ----------------------------------------------------------------------------------------
    def sort_block(self) -> None:
        """Restore def-before-use (a region yielding several values may come after one of their users)
        with the least movement: a stable topological sort by current position."""
        import heapq

        ops = self.block.ops
        index = {id(o): i for i, o in enumerate(ops)}
        deps: dict[int, int] = {}
        users: dict[int, list[Op]] = {id(o): [] for o in ops}
        for o in ops:
            producers = {id(v.op) for v in o.operands if v.op is not None and id(v.op) in index}
            deps[id(o)] = len(producers)
            for pid in producers:
                users[pid].append(o)
        ready = [(index[id(o)], o) for o in ops if deps[id(o)] == 0]
        heapq.heapify(ready)
        order: list[Op] = []
        while ready:
            _, o = heapq.heappop(ready)
            order.append(o)
            for x in users[id(o)]:
                deps[id(x)] -= 1
                if deps[id(x)] == 0:
                    heapq.heappush(ready, (index[id(x)], x))
        assert len(order) == len(ops), "fuse made a cycle"
        self.block.ops[:] = order


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
    n, c, h, w = split.operands[0].type.dims
    s5 = split.result.type.dims
    split_ok = len(s5) == 5 and s5[:1] + s5[3:] == (n, h, w) and s5[1] * s5[2] == c
    return [split, tr, back] if split_ok and v.type.dims == (n, c, h, w) else None


def keeps_rows(reshape: Op) -> bool:
    """A reshape of static shapes that keeps the last axis (it merges or splits the rows only)."""
    x, y = reshape.operands[0].type, reshape.result.type
    return x.is_static and y.is_static and x.rank >= 1 and y.rank >= 1 and x.dims[-1] == y.dims[-1]


def is_channel_shuffle(v: Value) -> bool:
    return channel_shuffle_ops(v) is not None


def map_pixels(conv: Op) -> int:
    """Output pixels per channel of a conv2d (1: an FC on pooled features, squeeze-excitation's)."""
    y = conv.result.type
    return y.dims[2] * y.dims[3] if y.is_static and y.rank == 4 else 0


def channel_factor(m: Op) -> tuple[Value, Value] | None:
    """(x, s) when `m` is a mul of a rank-4 x by an s that broadcasts along H and W only ([N or 1, C, 1,
    1], or [C, 1, 1]: one factor per image and channel), else None."""
    y = m.result.type
    if y.rank != 4 or not y.is_static:
        return None
    for x, s in (m.operands, m.operands[::-1]):
        dims = (1,) * (4 - s.type.rank) + tuple(s.type.dims)
        if x.type.shape == y.shape and s.type.rank <= 4 and dims[1] == y.dims[1] and dims[2:] == (1, 1) \
                and dims[0] in (1, y.dims[0]):
            return x, s
    return None


def global_pool(op: Op) -> bool:
    """A mean or max of a static rank-4 NCHW tensor over H and W to [N, C, 1, 1]."""
    if op.name not in GATE_POOLS or len(op.results) != 1:
        return False
    x, y = op.operands[0].type, op.result.type
    if x.rank != 4 or not x.is_static or y.rank != 4 or not y.is_static or y.dims[2:] != (1, 1):
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
        x.rank == 4 and x.is_static and x.dims[2:] == (1, 1) and w.rank == 4 and w.is_static
        and w.dims[2:] == (1, 1) and op.attrs.get("groups", 1) == 1
        and not any(op.attrs.get("pads", []))  # type: ignore[arg-type]
        and map_pixels(op) == 1
    )


def blocked_on_channels(op: Op) -> bool:
    """A pack/unpack to or from NCHWc: one tile on dim 1, no outer permutation."""
    perm = op.attrs.get("outer_dims_perm", [])
    rank = op.operands[0].type.rank if op.name == "pack" else op.result.type.rank
    return op.attrs.get("inner_dims_pos") == [1] and rank == 4 and perm in ([], list(range(rank)))


PASS = Fuse
