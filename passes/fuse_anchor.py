"""fuse's rules for the regions around an anchor (passes/fuse.py's docstring, steps 0 and 1): gates, and
each conv2d, matmul, gemm or reduction with its prologue, the chain of elementwise consumers after it (or
the elementwise DAG reconverging on it) and, after a matmul or gemm, a layer_norm and a split.
"""

from __future__ import annotations

from itertools import islice
from math import prod

from ..ir.core import Op, Value
from .fuse_inputs import InputRules
from .fuse_rules import (
    BLOCKED_ANCHORS,
    CHEAP_EPILOGUE_ANCHORS,
    EPILOGUE_ANCHORS,
    GATE_MAX_CHANNELS,
    GATE_MAX_WEIGHTS,
    POOL_ANCHORS,
    REQUANTIZED_ANCHORS,
    ROW_ANCHORS,
    blocked_on_channels,
    is_anchor,
    is_elementwise,
    is_table_lookup,
    known_shape,
    one_pixel,
    pixel_fc,
    quoted,
    shape_text,
)


class AnchorRules(InputRules):
    """The region an anchor (or a gate's pool) gathers: the ops the driver forms into one kernel."""

    def anchor_region(self, anchor: Op) -> tuple[list[Op], str]:
        """The ops of the region around `anchor`, in order, and its kind (epilogue or reduction); the
        driver forms it when more than the anchor joined."""
        kind = "epilogue" if anchor.name in EPILOGUE_ANCHORS else "reduction"
        if anchor.name == "layer_norm" and self.normalized_by_reader(anchor):
            return [], kind  # the matmul or gemm reading it normalizes its A rows itself
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
        return ops, kind

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
        channels = [x.shape[1], *(fc.result.type.shape[1] for fc in fcs)]
        widest = max(c for c in channels if type(c) is int) if all(type(c) is int for c in channels) else None
        per_image = prod(x.shape[1:]) if all(type(d) is int for d in x.shape[1:]) else None
        weights = sum(fc.operands[1].type.numel for fc in fcs) if all(
            fc.operands[1].type.is_static for fc in fcs) else None
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
        elif widest is None or per_image is None or weights is None:
            self.missed("dynamic-shape", ops,
                        f"{what}, but whether one core may read its pool and its FCs' weights depends on the "
                        f"dynamic dims of {x}")
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
            and all(known_shape(r.type) for r in u.results)
        ):
            ops.append(u)

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
        """Extend the region with elementwise consumers of `v`, one after another; after an anchor of
        REQUANTIZED_ANCHORS, back to the last one of the anchor's type (the float ops after it are left to
        the elementwise rules, with a remark)."""
        start = len(ops)
        self.consumers(v, anchor, kind, ops)
        if anchor.name not in REQUANTIZED_ANCHORS:
            return
        dtype = anchor.result.type.dtype
        end = next((i + 1 for i in range(len(ops) - 1, start - 1, -1) if ops[i].result.type.dtype == dtype),
                   start)
        if end < len(ops):
            self.missed("dtype", [ops[end], ops[end - 1]],
                        f"{quoted(ops[end:])} compute{'s' if len(ops) - end == 1 else ''} in "
                        f"{ops[-1].result.type.dtype} after the epilogue of '{anchor.name}', which ends at "
                        f"its last {dtype} value")
            del ops[end:]

    def consumers(self, v: Value, anchor: Op, kind: str, ops: list[Op]) -> None:
        """Extend the region with elementwise consumers of `v`, one after another."""
        where = f"the {'epilogue of' if kind == 'epilogue' else 'kernel of'} '{anchor.name}'"
        last = ops[-1]
        while True:
            users = v.users
            dag = self.reconverging(v, anchor, ops) if len(v.uses) > 1 else None
            dear = [o for o in dag or () if self.dear(o)]
            if dag and anchor.name in CHEAP_EPILOGUE_ANCHORS and dear and not one_pixel(anchor):
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
            table = is_table_lookup(u, anchor) and u.operands[0] is v
            limit = self.p.lookup_max_elements
            if table and self.elements(u) > limit:
                self.missed("lookup-size", [u, last],
                            f"'{u.name}' of {self.elements(u)} elements stays a kernel of its own: {where} "
                            f"takes a table lookup of at most lookup-max-elements={limit} (a load an "
                            "element, where its own kernel permutes 64 bytes at once)")
                return
            if not is_elementwise(u) and not table:
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
            if u.result.type.dtype != anchor.result.type.dtype and not (
                    anchor.name in REQUANTIZED_ANCHORS and u.result.type.dtype == "f32"):
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
