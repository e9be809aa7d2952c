"""fuse's rules for what an anchor reads its input through (passes/fuse.py's docstring, step 1): the
layer_norm computing a matmul's or gemm's A, an NCHWc unpack, a channel shuffle, a nearest resize, a
channel scale, an inverted residual's expansion. Each joins the anchor's region, so the value between them
is never written; one that cannot is remarked.
"""

from __future__ import annotations

from ..ir.core import Op
from ..ir.ops.registry import op_sig
from ..ir.symbolic import format_dim
from .fuse_rules import (
    BLOCKED_ANCHORS,
    ROW_ANCHORS,
    FuserBase,
    blocked_on_channels,
    channel_factor,
    channel_shuffle_ops,
    is_elementwise,
    is_literal,
    keeps_rows,
    quoted,
    shape_text,
)


class InputRules(FuserBase):
    """What an anchor takes in before it: each rule returns the ops that join (or none) and remarks a
    refusal."""

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
        elif type(n := (reader.result.type.shape or (1,))[-1]) is not int:
            missed("dynamic-shape", [ln, reader], f"'{reader.name}' has {format_dim(n)} output columns, a "
                   f"dynamic dim: whether every column block would recompute the rows' statistics depends "
                   f"on it; {where}")
        elif n > self.p.norm_prologue_max_n:
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
        if anchor.attrs.get("groups", 1) != x.shape[1] or w.shape[0] != x.shape[1] or w.shape[1] != 1:
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
        elif x.rank != 4 or x.shape[:2] != y.shape[:2]:
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
            x is None or x.rank != 4 or type(x.shape[1]) is not int or not dw.operands[1].type.is_static
            or dw.attrs.get("groups", 1) != x.shape[1]
            or dw.operands[1].type.dims[:2] != (x.shape[1], 1) or u is None or u.name != "unpack"
            or not blocked_on_channels(u) or u.attrs.get("inner_tiles") != [16] or not self.fusible(u)
            or dw.operands[0].uses != [(dw, 0)] or x.shape[1] % 16 or x.dtype != "f32"
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
            or conv.result.uses != [(pk, 0)] or conv.operands[1].type.shape[2:] != (1, 1)
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
