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
Ops computed from constants only are left alone (they run once, at load time). Each func body and each
block of its control ops' regions (an if's branches, a loop's body) is fused on its own.

The rules live in helper modules: fuse_rules.py (which ops anchor a region, the limits, the shape
predicates, the state of one func's fusion), fuse_inputs.py (what an anchor reads its input through),
fuse_anchor.py (gates and the regions around anchors) and fuse_elementwise.py (step 2); this module holds
the pass, the driver that forms the regions and the remarks explaining them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Block, Module, Op, Region, Value, fuse_locs
from .common import control_blocks
from .fuse_anchor import AnchorRules
from .fuse_elementwise import ElementwiseRules
from .fuse_rules import (
    GATE_MAX_POOL,
    global_pool,
    is_anchor,
    is_elementwise,
    is_table_lookup,
    known_shape,
    quoted,
)
from .manager import Pass, PassContext


@dataclass
class Fuse(Pass):
    """Form kernel regions: elementwise chains, conv/matmul epilogues, reductions with prologue/epilogue.

    Options: `max-ops` (ops per region), `max-args` (operands per region), `recompute` (clone cheap
    multi-use producers into each consumer's region instead of refusing), `norm-prologue-max-n` (the
    widest contraction, in output columns, that takes the layer_norm computing its A),
    `lookup-max-elements` (the largest result whose table lookup joins an integer conv's epilogue). See
    the module docstring.
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
    lookup_max_elements: int = 4096

    def run(self, module: Module, ctx: PassContext) -> None:
        for f in module.funcs:
            for block in control_blocks(f.block):
                _Fuser(self, module, ctx, block).run()


class _Fuser(AnchorRules, ElementwiseRules):
    """The fusion of one func body: the rules (its bases) gather regions, the driver forms them."""

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
                ops, kind = self.anchor_region(op)
                if len(ops) > 1:
                    self.form(ops, kind, op)
        for ops in self.elementwise_regions():
            self.form(ops, "elementwise", None)
        for op in self.block.ops:
            if is_elementwise(op) and id(op) not in self.explained:
                self.missed("no-partner", [op], self.why_alone(op))
        self.sort_block()

    # building a region ----------------------------------------------------------------------------
    def form(self, ops: list[Op], kind: str, anchor: Op | None) -> None:
        ops = sorted(ops, key=lambda o: self.pos[id(o)])
        inside = {id(o) for o in ops}
        args, literals = self.inputs(ops, anchor)
        yields = [r for o in ops for r in o.results if any(id(x) not in inside for x in r.users)]
        if not yields:
            return  # dead code: nothing to compute
        static = all(v.type.is_static for o in ops for v in (*o.operands, *o.results))
        saved = (  # bytes no longer moved; with dynamic dims, known once the func is specialized
            sum(self.cost(o).bytes for o in ops)
            - sum(a.type.nbytes for a in args)
            - sum(r.type.nbytes for r in yields)
        ) if static else None
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
            takes_literals = o is not anchor and (is_elementwise(o) or is_table_lookup(o))
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
        self.p.stat("bytes-saved", max(saved or 0, 0))
        self.ctx.remark_passed("fusion", "fused", ops, self.fused_message(ops, kind, anchor, saved, yields))

    @staticmethod
    def fused_message(ops: list[Op], kind: str, anchor: Op | None, saved: int | None,
                      yields: list[Value]) -> str:
        tail = (f" (saves {saved} bytes)" if saved is not None
                else " (the bytes it saves scale with the dynamic dims)")
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
        if not all(known_shape(r.type) for r in op.results):
            return f"'{op.name}' has an anonymous dynamic dim ('?'); fusion needs dims it can compare"
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


PASS = Fuse
