"""propagate-layout: give convolutions a blocked (NCHWc) or NHWC layout and propagate it, so a CNN pays for
at most a couple of layout changes.

1. Anchors: each 4-D f32 `conv2d` whose input (output) channels are a multiple of `block` reads (writes)
   the layout: `x -> conv -> users` becomes `pack(x) -> unpack -> conv -> pack -> unpack -> users`. A conv
   with only one side's channels a multiple (the 3-channel stem) gets that side; one with neither is
   refused (`channels-not-multiple`), as are dynamic channel counts (`dynamic-shape`; symbolic N, H and W
   are not: the decisions depend on the channels only) and other element types. A grouped conv takes
   a side only when its groups' channels are whole blocks (`group-not-multiple`); a side a conv refused
   is no anchor there (the cleanup folds the pairs around it). A conv whose input and output maps are
   one pixel (an FC on pooled features: squeeze-excitation's) is refused (`one-pixel`): its channels are
   contiguous already, and padded blocks would only split its chain from the FC after it.
2. Propagation, by greedy patterns: `pack(unpack(a))` -> `a`; an `unpack` sinks through elementwise ops
   whose other operands are unpacks of the same layout or constants (a splat or all-ones shape stays; a
   per-channel [1, C, 1, 1] / [C, 1, 1], a per-pixel [1, 1, H, W] or a full constant is converted, its
   conversion folded here when its data is at hand, else left as an op for fold-constants), through
   `concat` along channels and through `pad` of spatial dims. Pools (max/avg, global) whose input is
   unpacked become anchors too: `unpack -> pool -> pack -> unpack`, their kernels read and write blocked
   (a pool reading NCHW whose result a conv reads gets the `pack` after it only).
3. Cleanup: `unpack(pack(x))` -> `x`, unless `x` is an anchor's only result use, handed blocked to
   anchors (conv to conv: one writes blocked, the next reads it in place) or to other blocked users;
   blocked elementwise chains that only end in unpacks for NCHW consumers are hoisted back to NCHW (no
   layout change for nothing).

What is left are layout changes at anchors (fused into their kernels) and the boundaries the layout could
not cross: each is a missed remark (`not-layout-agnostic`: an op such as batch_norm, lrn or reshape;
`layout-mismatch`: an elementwise op with an NCHW operand, a function result; `channels-not-multiple`;
`one-pixel`;
`padding-channels`: an elementwise op outside ZERO_SAFE on a padded block).

Padded blocks: channels that are no multiple of the block but fill at least half of one and pad by at most
a third (72 -> 80, 24 -> 32, 40 -> 48) are blocked too, the last block's padding channels zero (mobilenet_v3's
72-, 88-, 40- and 120-channel convs ran NCHW at a third of the blocked speed). Their padding never reaches a
real channel: convs read it through zero-padded weights, pools and elementwise ops keep to their lane, an
unpack crops it, and a concat along channels (whose offsets it would shift) and grouped convs take whole
blocks only. What the padding holds must stay finite (0 times inf is NaN), so an elementwise op sinks into a
padded block only when it is in ZERO_SAFE (no div, log, reciprocal, ...). Kernels may store zeros in the
padding where the IR's ops would compute f(0): nothing reads it.
Each connected blocked region gets a passed remark ("NCHW16c region of 53 convs ..."). For
`layout=nhwc` the layout changes are transposes ([0, 2, 3, 1] and back) and every conv is an anchor.

The layout algebra (`Layout`, ZERO_SAFE) is passes/propagate_layout_algebra.py; this module holds the pass:
anchoring, the propagation and cleanup patterns, and the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.attributes import DenseAttr
from ..ir.core import Func, Module, Op, Value
from ..ir.diagnostics import Diagnostic, DiagnosticError
from ..ir.ops.registry import get_op, has_trait, load_all
from ..ir.types import TensorType
from .common import const_array, const_attr, const_op, control_blocks, make_const_attr
from .manager import Pass, PassContext
from .propagate_layout_algebra import ANCHORS, POOLS, TO_NHWC, ZERO_SAFE, Layout, channels, ints
from .rewrite import Pattern, Rewriter, apply_patterns_greedily


def _top_level(op: Op) -> bool:
    """Ops of a func body or of a control op's region (an if's branch, a loop's body): the pass leaves
    kernel regions (already fused) alone."""
    block = op.parent
    if block is None or block.parent is None:
        return False
    owner = block.parent.parent
    return isinstance(owner, Func) or (isinstance(owner, Op) and has_trait(owner.name, "control"))


@dataclass
class PropagateLayout(Pass):
    """Give convs a blocked NCHWc (or NHWC) layout, propagate it through layout-agnostic ops, fold pairs."""

    NAME = "propagate-layout"
    STATISTICS = {
        "num-anchored": "Convs and pools given the layout",
        "num-refused": "Convs left in NCHW",
        "num-sunk": "Layout changes moved through layout-agnostic ops",
        "num-folded": "Pairs of opposite layout changes folded away",
        "num-hoisted": "Blocked ops moved back to NCHW because nothing blocked used them",
        "num-layout-changes": "Layout changes left away from a conv or pool",
    }
    layout: str = "nchwc"
    block: int = 16
    # converted constant -> (it, the original), so hoisting can go back to the original
    _orig: dict[int, tuple[Value, Value]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _ctx: PassContext = field(default_factory=PassContext, init=False, repr=False, compare=False)
    # ids of the convs refused the layout on their input (output) side: no anchors on that side
    _nchw_in: set[int] = field(default_factory=set, init=False, repr=False, compare=False)
    _nchw_out: set[int] = field(default_factory=set, init=False, repr=False, compare=False)

    def run(self, module: Module, ctx: PassContext) -> None:
        if self.layout not in ("nchwc", "nhwc") or self.block < 1:
            raise DiagnosticError(
                Diagnostic(
                    "error",
                    f"propagate-layout: layout must be nchwc or nhwc and block positive, got "
                    f"layout={self.layout} block={self.block}",
                )
            )
        load_all()
        lay = Layout(self.layout, self.block)
        self._orig = {}
        self._nchw_in, self._nchw_out = set(), set()
        self._ctx = ctx
        rw = Rewriter()
        for func in module.funcs:
            for block in control_blocks(func.block):  # the func body and its if / loop regions
                for op in list(block.ops):
                    if op.name == "conv2d":
                        self.anchor_conv(op, lay, rw, ctx)
        propagate: dict[str, list[Pattern]] = {
            "pack": [self.fold_pair(lay)],
            "unpack": [],
            "transpose": [self.fold_pair(lay)],
            "concat": [self.sink_concat(lay)],
            "pad": [self.sink_pad(lay)],
            "*": [self.sink_elementwise(lay, module)],
        }
        for name in POOLS:
            propagate[name] = [self.anchor_pool(lay)]
        apply_patterns_greedily(module, propagate)
        cleanup: dict[str, list[Pattern]] = {
            "pack": [self.fold_pair(lay)],
            "unpack": [self.fold_back(lay)],
            "transpose": [self.fold_pair(lay), self.fold_back(lay)],
            "*": [self.hoist(lay)],
        }
        apply_patterns_greedily(module, cleanup)
        self.report(module, lay, ctx)

    def _is_anchor_input(self, op: Op, v: Value) -> bool:
        """Whether anchor `op` reads `v` as its input (operand 0) and nowhere else; a conv whose input side
        was refused the layout (a grouped conv with groups of 68 channels) is no anchor for its input."""
        return (op.name in ANCHORS and op.operands[0] is v and v not in op.operands[1:]
                and id(op) not in self._nchw_in)

    # 1. anchors -------------------------------------------------------------------------------------------
    def anchor_conv(self, conv: Op, lay: Layout, rw: Rewriter, ctx: PassContext) -> None:
        x, y = conv.operands[0].type, conv.result.type
        self._nchw_in.add(id(conv))  # until a side is given the layout
        self._nchw_out.add(id(conv))
        if channels(x) is None or channels(y) is None:
            self.stat("num-refused")
            ctx.remark_missed("layout", "dynamic-shape", [conv],
                              f"conv2d {x} -> {y}: its channel count is dynamic (or a dim is '?')")
            return
        if x.rank != 4 or x.dtype != "f32":
            self.stat("num-refused")
            ctx.remark_missed("layout", "unsupported-type", [conv], f"conv2d on {x}: 4-D f32 only")
            return
        if x.shape[2:] == (1, 1) and y.shape[2:] == (1, 1):
            self.stat("num-refused")
            ctx.remark_missed("layout", "one-pixel", [conv], f"conv2d on a one-pixel map {x} (an FC on "
                              "pooled features): its channels are contiguous in NCHW already")
            return
        c_in, c_out = x.shape[1], y.shape[1]
        side_in, side_out = lay.takes(c_in), lay.takes(c_out)
        g = conv.attrs.get("groups", 1)
        groups = g if isinstance(g, int) else 1
        if 1 < groups < c_in and lay.kind == "nchwc":
            # a grouped (not depthwise) conv reads and writes whole blocks only when its groups do
            side_in = lay.accepts(c_in) and lay.accepts(c_in // groups)
            side_out = lay.accepts(c_out) and lay.accepts(c_out // groups)
            if not (side_in or side_out):
                self.stat("num-refused")
                ctx.remark_missed(
                    "layout",
                    "group-not-multiple",
                    [conv],
                    f"conv2d {c_in} -> {c_out} channels in {groups} groups: no group's channels are a "
                    f"multiple of {lay.block}",
                )
                return
        if not (side_in or side_out):
            self.stat("num-refused")
            ctx.remark_missed(
                "layout",
                "channels-not-multiple",
                [conv],
                f"conv2d {c_in} -> {c_out} channels: neither is a multiple of {lay.block} or pads to one "
                f"with less than a third more",
            )
            return
        self.stat("num-anchored")
        if side_in:
            self._nchw_in.discard(id(conv))
            conv.set_operand(0, lay.back(rw, conv, lay.to(rw, conv, conv.operands[0]), x))
        if side_out:
            self._nchw_out.discard(id(conv))
            packed = lay.to(rw, conv, conv.result, after=True)
            assert packed.op is not None
            back = lay.back(rw, packed.op, packed, y, after=True)
            for user, i in list(conv.result.uses):
                if user is not packed.op:
                    user.set_operand(i, back)

    def anchor_pool(self, lay: Layout) -> Pattern:
        def pattern(op: Op, rw: Rewriter) -> bool:
            # pool(back(a)) -> back(to(pool(back(a)))): the pool reads and writes the layout; also a pool
            # reading NCHW whose result a conv reads blocked (writing the layout is free)
            if not _top_level(op):
                return False
            if len(op.results) != 1 or (c := channels(op.result.type)) is None or not lay.takes(c):
                return False
            users = op.result.users
            if len(users) == 1 and lay.is_to(users[0]):
                return False
            if not (lay.is_back(op.operands[0].op) or any(lay.is_to(u) for u in users)):
                return False
            packed = lay.to(rw, op, op.result, after=True)
            assert packed.op is not None
            back = lay.back(rw, packed.op, packed, op.result.type, after=True)
            for user, i in list(op.result.uses):
                if user is not packed.op:
                    user.set_operand(i, back)
                    rw.push(user)
            self.stat("num-anchored")
            return True

        return pattern

    # 2. propagation ---------------------------------------------------------------------------------------
    def fold_pair(self, lay: Layout) -> Pattern:
        def pattern(op: Op, rw: Rewriter) -> bool:
            # to(back(a)) -> a
            if not _top_level(op):
                return False
            inner = op.operands[0].op
            if not (lay.is_to(op) and lay.is_back(inner)) or (c := channels(op.operands[0].type)) is None \
                    or not lay.takes(c):
                return False
            assert inner is not None
            if inner.operands[0].type != op.result.type:
                return False
            rw.replace_op(op, [inner.operands[0]])
            self.stat("num-folded")
            return True

        return pattern

    def convert(
        self, v: Value, out: TensorType, lay: Layout, anchor: Op, rw: Rewriter, module: Module
    ) -> Value | None:
        """Operand `v` of an elementwise op with NCHW result `out`, in the layout; None if it is not."""
        if lay.is_back(v.op) and v.type == out:
            assert v.op is not None
            return v.op.operands[0]
        a = const_attr(v)
        if a is None:
            return None
        if all(d == 1 for d in v.type.dims) and v.type.rank <= 4:
            return v  # broadcasts the same in any layout
        shape = lay.convert_shape(v.type.dims, out.shape[1])
        if shape is None:
            return None
        t = TensorType(shape, v.type.dtype)
        arr = const_array(v, module)
        if isinstance(a, DenseAttr) and a.is_splat:
            new = rw.create(anchor, "const", [], [t], {"value": DenseAttr.splat(a.splat_value(), t)}).result
        elif arr is not None:
            c = const_op(
                v.op.loc if v.op is not None else anchor.loc,
                make_const_attr(lay.convert_array(arr), t, module, hint="layout"),
            )
            assert anchor.parent is not None
            anchor.parent.insert_before(anchor, c)
            new = c.result
        else:  # data not at hand (elided): convert with ops, for fold-constants
            four = TensorType((1,) * (4 - v.type.rank) + v.type.dims, v.type.dtype)
            src = (
                v
                if v.type.rank == 4
                else rw.create(anchor, "reshape", [v], [four], {"shape": list(four.dims)}).result
            )
            if lay.kind == "nchwc" and four.dims[1] == 1:
                new = rw.create(anchor, "reshape", [src], [t], {"shape": list(shape)}).result
            else:
                new = lay.to(rw, anchor, src)
        self._orig[id(new)] = (new, v)
        return new

    def sink_elementwise(self, lay: Layout, module: Module) -> Pattern:
        def pattern(op: Op, rw: Rewriter) -> bool:
            # f(back(a), back(b), c) -> back(f(a, b, to(c))) for elementwise f, constant c
            if not _top_level(op):
                return False
            d = get_op(op.name)
            if d is None or not d.has("elementwise") or len(op.results) != 1 or op.regions:
                return False
            out = op.result.type
            if (c := channels(out)) is None or not any(lay.is_back(v.op) for v in op.operands):
                return False
            if not lay.accepts(c) and op.name not in ZERO_SAFE:
                return False  # padding channels would hold f(0, ...): only ops keeping them finite
            if not all(lay.is_back(v.op) and v.type == out or const_attr(v) is not None for v in op.operands):
                return False
            if any(
                const_attr(v) is not None
                and lay.convert_shape(v.type.dims, c) is None
                and not all(s == 1 for s in v.type.dims)
                for v in op.operands
            ):
                return False
            operands = [self.convert(v, out, lay, op, rw, module) for v in op.operands]
            assert all(v is not None for v in operands)
            new = rw.create(op, op.name, operands, [lay.to_type(out)], dict(op.attrs))  # type: ignore[arg-type]
            rw.replace_op(op, [lay.back(rw, op, new.result, out)])
            self.stat("num-sunk")
            return True

        return pattern

    def sink_concat(self, lay: Layout) -> Pattern:
        def pattern(op: Op, rw: Rewriter) -> bool:
            # concat(back(a), back(b), axis=1) -> back(concat(a, b, axis=channels))
            if not _top_level(op):
                return False
            out = op.result.type
            axis = op.attrs["axis"]
            if out.rank != 4 or not isinstance(axis, int) or axis % 4 != 1:
                return False
            if not all(lay.is_back(v.op) and (c := channels(v.type)) is not None and lay.accepts(c)
                       for v in op.operands):
                return False
            srcs = [v.op.operands[0] for v in op.operands]  # type: ignore[union-attr]
            new = rw.create(op, "concat", srcs, [lay.to_type(out)], {"axis": lay.channel_axis})
            rw.replace_op(op, [lay.back(rw, op, new.result, out)])
            self.stat("num-sunk")
            return True

        return pattern

    def sink_pad(self, lay: Layout) -> Pattern:
        def pattern(op: Op, rw: Rewriter) -> bool:
            # pad(back(a)) -> back(pad(a)) when only H and W are padded
            if not _top_level(op):
                return False
            pads = ints(op, "pads")
            out = op.result.type
            if not lay.is_back(op.operands[0].op) or out.rank != 4 or any(pads[i] for i in (0, 1, 4, 5)):
                return False
            begin, end = pads[:4], pads[4:]
            if lay.kind == "nhwc":
                new_pads = [begin[p] for p in TO_NHWC] + [end[p] for p in TO_NHWC]
            else:
                new_pads = begin + [0] + end + [0]
            src = op.operands[0].op.operands[0]  # type: ignore[union-attr]
            new = rw.create(op, "pad", [src], [lay.to_type(out)], {**op.attrs, "pads": new_pads})
            rw.replace_op(op, [lay.back(rw, op, new.result, out)])
            self.stat("num-sunk")
            return True

        return pattern

    # 3. cleanup -------------------------------------------------------------------------------------------
    def fold_back(self, lay: Layout) -> Pattern:
        def pattern(op: Op, rw: Rewriter) -> bool:
            # back(to(x)) -> x, unless x is an anchor's result handed on to anchors or needed blocked too
            if not _top_level(op):
                return False
            to = op.operands[0].op
            if not (lay.is_back(op) and lay.is_to(to)):
                return False
            assert to is not None
            x = to.operands[0]
            if (x.op is not None and x.op.name in ANCHORS and id(x.op) not in self._nchw_out
                    and len(x.uses) == 1):  # the anchor writes blocked
                handed_on = all(self._is_anchor_input(u, op.result) for u in op.result.users)
                if handed_on or len(to.result.uses) > 1:
                    return False
                _, reason, message, ops = self.why_back(op, lay)
                self._ctx.remark_missed(
                    "layout", reason, [x.op, *ops], f"the result of '{x.op.name}' stays in NCHW: {message}"
                )
            rw.replace_op(op, [x])
            self.stat("num-folded")
            return True

        return pattern

    def hoist(self, lay: Layout) -> Pattern:
        def pattern(op: Op, rw: Rewriter) -> bool:
            # back(f(a, to(x), c')) -> f(back(a), x, c) when every user of f unpacks it for an NCHW consumer
            if not _top_level(op):
                return False
            d = get_op(op.name)
            if d is None or not d.has("elementwise") or len(op.results) != 1 or op.result.type.rank < 4:
                return False
            users = op.result.users
            if not users or not all(lay.is_back(u) for u in users):
                return False
            if any(self._is_anchor_input(a, u.result) for u in users for a in u.result.users):
                return False  # an anchor reads it blocked
            like = users[0].result.type
            if lay.to_type(like) != op.result.type:
                return False
            plan: list[tuple[str, Value]] = []  # how each operand goes back to NCHW
            for v in op.operands:
                if self._orig.get(id(v), (None,))[0] is v:
                    plan.append(("orig", v))
                elif v.op is not None and v.op.name == "const" and all(s == 1 for s in v.type.dims):
                    plan.append(("keep", v))
                elif lay.is_to(v.op):
                    plan.append(("source", v))
                elif (
                    v.op is not None
                    and len(v.uses) == 1
                    and (get_op(v.op.name) or d).has("elementwise")
                    and v.type == lay.to_type(like.with_dtype(v.type.dtype))
                ):
                    plan.append(("back", v))
                else:
                    return False
            operands = []
            for how, v in plan:
                if how == "orig":
                    src = self._orig[id(v)][1]
                    if src.op is not None and src.op.parent is None:
                        # the greedy driver erased the original constant once sinking left it unused
                        # (found by tests/fuzz: conv -> relu -> add(constant, .))
                        old = src.op
                        src = rw.create(op, old.name, [], [src.type], dict(old.attrs), old.loc).result
                    operands.append(src)
                elif how == "source":
                    operands.append(v.op.operands[0])  # type: ignore[union-attr]
                elif how == "back":
                    operands.append(lay.back(rw, op, v, like.with_dtype(v.type.dtype)))
                else:
                    operands.append(v)
            new = rw.create(op, op.name, operands, [like], dict(op.attrs))
            for u in users:
                rw.replace_op(u, [new.result])
            self.stat("num-hoisted")
            return True

        return pattern

    # report ---------------------------------------------------------------------------------------------
    def report(self, module: Module, lay: Layout, ctx: PassContext) -> None:
        parent: dict[int, int] = {}

        def find(i: int) -> int:
            while parent.setdefault(i, i) != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        def union(a: Op, b: Op) -> None:
            parent[find(id(a))] = find(id(b))

        changes: list[tuple[Op, str, str, list[Op]]] = []
        blocked: set[int] = set()  # ops whose results are in the layout
        for op in module.walk():
            if not _top_level(op):
                continue
            if lay.is_to(op):
                blocked.add(id(op))
                src = op.operands[0].op
                if src is not None and src.name in ANCHORS and len(src.result.uses) == 1:
                    union(op, src)
                else:
                    changes.append(self.why_to(op, src))
            elif lay.is_back(op):
                if op.operands[0].op is not None:
                    union(op, op.operands[0].op)
                users = op.result.users
                if users and all(self._is_anchor_input(u, op.result) for u in users):
                    for u in users:
                        union(op, u)
                else:
                    changes.append(self.why_back(op, lay))
            elif op.name not in ANCHORS and any(id(v.op) in blocked for v in op.operands if v.op is not None):
                blocked.add(id(op))  # a blocked op: joins its operands' regions
                for v in op.operands:
                    if v.op is not None and id(v.op) in blocked:
                        union(op, v.op)
        self.stat("num-layout-changes", len(changes))
        for op, reason, message, ops in changes:
            ctx.remark_missed("layout", reason, [op, *ops], message)
        regions: dict[int, list[Op]] = {}
        for op in module.walk():
            if id(op) in parent:
                regions.setdefault(find(id(op)), []).append(op)
        for ops in regions.values():
            convs = [o for o in ops if o.name == "conv2d"]
            pools = [o for o in ops if o.name in POOLS]
            other = [o for o in ops if o.name not in ANCHORS and not (lay.is_to(o) or lay.is_back(o))]
            if not convs and not pools:
                continue
            left = sum(1 for o, *_ in changes if id(o) in {id(x) for x in ops})
            ctx.remark_passed(
                "layout",
                "region",
                convs[:1] or pools[:1],
                f"{lay.name} region of {len(convs)} convs, {len(pools)} pools and {len(other)} "
                f"other ops; {left} layout changes at its boundary",
            )

    def why_to(self, op: Op, src: Op | None) -> tuple[Op, str, str, list[Op]]:
        what = f"'{src.name}'" if src is not None else "a function argument"
        if src is not None and src.name in ANCHORS:
            return (op, "layout-mismatch", f"the result of {what} is needed both in NCHW and blocked", [src])
        return (
            op,
            "not-layout-agnostic",
            f"{what} produces NCHW for {len(op.result.users)} blocked users",
            [src] if src is not None else [],
        )

    def why_back(self, op: Op, lay: Layout) -> tuple[Op, str, str, list[Op]]:
        for u in op.result.users:
            if u.name in ANCHORS and self._is_anchor_input(u, op.result):
                continue
            d = get_op(u.name)
            if u.name == "return":
                return (op, "layout-mismatch", "the function returns NCHW", [])
            if u.name == "conv2d":
                return (
                    op,
                    "channels-not-multiple",
                    f"'conv2d' reads NCHW: its channels are not a multiple of {lay.block}",
                    [u],
                )
            if u.name == "concat" and not all((c := channels(v.type)) is not None and lay.accepts(c)
                                              for v in u.operands):
                return (
                    op,
                    "channels-not-multiple",
                    f"'concat' has inputs with channels not a multiple of {lay.block}",
                    [u],
                )
            c = channels(op.result.type) or 0
            if d is not None and d.has("elementwise") and not lay.accepts(c) and u.name not in ZERO_SAFE:
                return (
                    op,
                    "padding-channels",
                    f"'{u.name}' stays in NCHW: {c} channels pad the last block of {lay.block}, and "
                    f"'{u.name}' may make its zero padding non-finite",
                    [u],
                )
            if (
                d is not None
                and d.has("elementwise")
                and all(lay.is_back(v.op) or const_attr(v) is not None for v in u.operands)
            ):
                return (
                    op,
                    "layout-mismatch",
                    f"'{u.name}' stays in NCHW: its result is only used in NCHW",
                    [u],
                )
            if d is not None and (d.has("elementwise") or u.name in ("concat", "pad")):
                return (
                    op,
                    "layout-mismatch",
                    f"'{u.name}' has an operand in NCHW that is not a constant of a convertible shape",
                    [u],
                )
            return (op, "not-layout-agnostic", f"'{u.name}' is not layout-agnostic: needs NCHW", [u])
        return (op, "layout-mismatch", "an anchor reads this value together with other users", [])


PASS = PropagateLayout
