"""Epilogue `kernel` regions (fused.py): one anchor (conv2d, matmul, gemm, or a pool) by its own template,
the region's chain applied to its values in registers before the store, and what the anchor reads its
input through: an NCHWc unpack, a channel shuffle, a nearest resize, a channel scale, an inverted
residual's expansion, a layer_norm (fused_norm.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ....ir.core import Op, Value
from ....ir.ops.registry import norm_axis
from ....passes.fuse_rules import REQUANTIZED_ANCHORS, ROW_ANCHORS, channel_factor, channel_shuffle_ops
from .base import Ctx, Lowered, NotLowerable, PackSpec, ctype, index_type
from .conv import lower_conv2d
from .conv_depthwise import Expand
from .conv_geometry import InScale, Upsample
from .fused_chain import (
    CHAIN_OPS,
    Anchor,
    Chain,
    Region,
    Space,
    chain_spaces,
    channel_block,
    check_types,
    finish,
    packed_operands,
    remap,
    unblock,
)
from .fused_norm import NO_NORM, lower_row_norm, norm_prologue
from .gemm import AcrossChannels, Tail, lower_gemm, lower_matmul
from .qlinear import lower_integer_conv
from .resize import upsample_tables

CONTRACTIONS: dict[str, Anchor] = {"conv2d": lower_conv2d, "matmul": lower_matmul, "gemm": lower_gemm,
                                   "qconv2d": lower_integer_conv}
POOLS = ("max_pool2d", "avg_pool2d", "global_avg_pool", "global_max_pool")
BLOCKED = ("conv2d", *POOLS)  # anchors whose templates read / write NCHWc for an unpack / pack


def _few_stores(anchor: Op) -> bool:
    """An integer depthwise conv (one input channel a group): its row kernels store at most 8 vectors an
    item, so its chain is inlined there, where the other integer convs call it (their 16 unrolled stores
    inlined had cost 0.3 s of PoCL build a kernel). Called, each store's chain (a division and its
    rounding) ran serialized between calls: a 136-channel 28x28 depthwise conv with a QDQ batch norm took
    1.8x its time without the chain; inlined 1.6x (the models: 0.98-0.99x)."""
    x, w = anchor.operands[:2]
    return w.type.rank == 4 and w.type.dims[1] == 1 and anchor.attrs.get("groups") == x.type.dims[1]


def pool_anchors() -> dict[str, Anchor]:
    from . import pool

    fn = getattr(pool, "lower_pool", None)  # pools with an epilogue and blocked layouts
    if fn is None:
        raise NotLowerable("the pool templates take no fused epilogue")
    return dict.fromkeys(POOLS, fn)


def channel_chain(rg: Region, ops: list[Op], main: Value, result: Value, it: str, outlined: bool) -> Chain:
    """The chain on consecutive channels of one NCHW pixel (`epc<w>`: lane j a plane, H * W positions,
    after lane 0)."""
    across = Space(main.type.dims, "p", channel_lanes=True)
    return Chain(rg, "epc", ops, main, result, chain_spaces(rg, ops, main, across, None, None),
                 ctype(main.type), it, lane_step=math.prod(main.type.dims[2:]), outlined=outlined)


def lower_epilogue(ctx: Ctx, rg: Region, table: dict[str, Anchor] = CONTRACTIONS) -> Lowered:
    """One anchor of `table` (its operands kernel operands, operand 0 maybe through an NCHWc `unpack`)
    and the elementwise chain on its result (maybe through one `pack`), by the anchor's template."""
    anchors = [op for op in rg.ops if op.name in table]
    ex = expansion(rg, anchors[1].operands[0]) if len(anchors) == 2 and anchors[1].name == "conv2d" else None
    if ex:
        anchors = [op for op in anchors if op not in ex.ops]  # the expansion is the depthwise conv's fill
    if len(anchors) != 1:
        raise NotLowerable(f"an {ctx.sig.attrs.get('kind')} region needs exactly one of {', '.join(table)}")
    anchor = anchors[0]
    where, unpack, in_block, shuffle, norm, up, scale = [], None, 0, None, NO_NORM, None, None
    for k, v in enumerate(anchor.operands):
        u = rg.producer(v)
        if id(v) in rg.arg:
            where.append(rg.arg[id(v)])
        elif k == 0 and ex is not None:
            where.append(ex.arg)
            in_block = 16
        elif k == 0 and (found := norm_prologue(rg, anchor)) is not None:
            norm = found
            where.append(norm.arg)
        elif k == 0 and anchor.name == "conv2d" and (shuffle := channel_shuffle(rg, v)) is not None:
            where.append(shuffle[0])
        elif k == 0 and anchor.name == "conv2d" and (up := nearest_upsample(rg, v)) is not None:
            where.append(up[0])
        elif k == 0 and anchor.name == "conv2d" and (scale := channel_scale(rg, v)) is not None:
            where.append(scale[0])
        elif (
            k == 0
            and anchor.name in BLOCKED
            and u is not None
            and u.name == "unpack"
            and id(u.operands[0]) in rg.arg
        ):
            unpack, in_block = u, channel_block(u, rg.sig(u))
            where.append(rg.arg[id(u.operands[0])])
        else:
            raise NotLowerable(f"'{anchor.name}' operand {k} is not a kernel operand")
    split = split_yields(rg, anchor)
    main = anchor.results[0]
    result = split.operands[0] if split else rg.yields[0]
    skip = {id(anchor), id(unpack), *(id(o) for o in (shuffle[2] if shuffle else [])),
            *(id(o) for o in norm.ops), *((id(up[2]),) if up else ()), *((id(scale[2]),) if scale else ()),
            *(id(o) for o in (ex.ops if ex else ()))}
    ops = [op for op in rg.ancestors(result) if id(op) not in skip]
    norms = [op for op in ops if op.name == "layer_norm"]
    if norms:
        return lower_row_norm(ctx, rg, anchor, where, ops, norms, result, table, norm)
    packs = [op for op in ops if op.name == "pack"]
    if len(packs) > 1 or (packs and anchor.name not in BLOCKED):
        raise NotLowerable(f"one pack, after {', '.join(BLOCKED)} only")
    pack = packs[0] if packs else None
    out_block = channel_block(pack, rg.sig(pack)) if pack else 0
    if out_block and main.type.dims[1] % out_block and anchor.name != "conv2d":
        # a pool's epilogue runs on whole vectors, padding lanes too, where an NCHW operand of the chain
        # would be read past its end; the conv evaluates it on real channels only
        raise NotLowerable(f"{main.type.dims[1]} channels are not whole blocks of {out_block}")
    if result is not main and not any(op.results[0] is result for op in ops):
        raise NotLowerable("the yield is not the anchor's chain")
    check_types(ctx, *ops)
    if result.type.dtype != main.type.dtype:
        raise NotLowerable(f"the chain gives {result.type.dtype}, the anchor {main.type.dtype}")
    it = index_type(*ctx.operands, *ctx.results, main.type)
    base = Space(main.type.dims, "pu" if out_block else "p", channel_lanes=bool(out_block),
                 row_lanes=anchor.name in REQUANTIZED_ANCHORS)  # its templates' vectors: within a row
    blocked = Space(pack.results[0].type.dims) if pack else None
    spaces = chain_spaces(rg, ops, main, base, blocked, pack)
    if result.type.dims != (blocked or base).dims:
        raise NotLowerable(f"the region yields {result.type}, the anchor writes {(blocked or base).dims}")
    unb = unblock(pack.results[0].type.dims, main.type.dims, "p") if pack else ""
    has_chain = any(op.name != "pack" for op in ops)
    chain = Chain(rg, "epi", ops if has_chain else [], main, result, spaces, ctype(main.type), it, unb,
                  outlined=anchor.name in REQUANTIZED_ANCHORS and not _few_stores(anchor))
    epi = chain.call if has_chain else None
    # the chain on 16 consecutive channels of one pixel (lanes a plane apart): the integer conv's channel
    # lanes, and a float conv storing NCHW, which runs it on each pixel's channel vector
    channels = None
    if has_chain and anchor.name in REQUANTIZED_ANCHORS:
        channels = channel_chain(rg, ops, main, result, it, outlined=True)
    elif has_chain and anchor.name == "conv2d" and not out_block:
        try:
            channels = channel_chain(rg, ops, main, result, it, outlined=False)
            channels.definitions("KERNEL_epc16(")  # (its helper made now: one it cannot make refuses here)
        except NotLowerable:  # a chain that runs only lane by lane: the conv stores it so
            channels = None
    lanes = channels if anchor.name in REQUANTIZED_ANCHORS else None
    if channels is not None and anchor.name == "conv2d":
        epi = AcrossChannels(chain.call, channels.call)
    # the anchor's constant operands' values where the kernel op's are at hand (the integer conv's
    # templates read its zero points: the 8-bit dot products need them constant)
    values = ctx.values
    sub = Ctx(anchor.name, rg.sig(anchor), ctx.device, tuple(ctx.is_constant(a) for a in where),
              dict(ctx.schedule), values=None if values is None else (lambda i: values(where[i])))
    fn = table[anchor.name]
    if in_block or out_block or up or scale or ex:
        import inspect

        if "in_block" not in inspect.signature(fn).parameters:
            raise NotLowerable(f"the {anchor.name} template takes no blocked layouts")
        low = fn(sub, epi, in_block=in_block, out_block=out_block,  # type: ignore[call-arg]
                 **({"upsample": up[1]} if up else {}), **({"in_scale": scale[1]} if scale else {}),
                 **({"expand": ex.hook} if ex else {}))
    elif shuffle:
        low = fn(sub, epi, channel_map=shuffle[1])  # type: ignore[call-arg]
    elif split:
        low = fn(sub, epi, tail=Tail(split=tuple(t.dims[-1] for t in split.result_types)), **norm.kwargs)
    elif lanes is not None:
        low = fn(sub, epi, channel_epilogue=lanes.call)  # type: ignore[call-arg]
    else:
        low = fn(sub, epi, **norm.kwargs)
    low.pack = packed_operands(rg, low, where, anchor)
    reads = (*norm.reads, *((scale[3],) if scale else ()), *(ex.reads if ex else ()))
    if ex:  # the expansion's [C, K, 1, 1] weights as 16-wide vectors per input channel and output block
        low.pack[ex.reads[0]] = PackSpec((1, 0), (16, 16))
    chains = [chain, *((ex.chain,) if ex else ()), *((channels,) if channels else ())]
    low = finish(rg, low, chains, remap(where, sorted({*chain.extras, *reads})), len(anchor.operands),
                 extra_params=True, reads=reads)
    fused_ops = (len(ops) + 1 + (unpack is not None) + 3 * bool(shuffle) + (split is not None)
                 + len(norm.ops) + (up is not None) + (scale is not None) + len(ex.ops if ex else ()))
    low.schedule = {**low.schedule, "fused": fused_ops}
    return low


def channel_scale(rg: Region, v: Value) -> tuple[int, InScale, Op, int] | None:
    """A `mul` of a kernel operand x by a per-channel factor s ([N or 1, C, 1, 1], a kernel operand:
    squeeze-excitation's scale) computing a conv2d's input `v`: (x's operand, the template's hook, the
    mul, s's operand); the conv folds s into its weights. None when `v` is no such product."""
    m = rg.producer(v)
    if m is None or m.name != "mul":
        return None
    found = channel_factor(m)
    if found is None:
        return None
    x, s = found
    if id(x) not in rg.arg or id(s) not in rg.arg:
        raise NotLowerable("a channel scale before a conv multiplies two kernel operands")
    if x.type.dtype != "f32" or s.type.dtype != "f32":
        raise NotLowerable("a channel scale before a conv of f32 only")
    per_image = s.type.rank == 4 and s.type.dims[0] > 1
    return rg.arg[id(x)], InScale(f"ep{rg.arg[id(s)]}", per_image), m, rg.arg[id(s)]


@dataclass(frozen=True)
class Expansion:
    """A 1x1 conv and its chain computing a depthwise conv's blocked input from a narrower x (an inverted
    residual's expansion), which the conv's local-memory fill computes (conv.py `Expand`)."""

    arg: int  # x's kernel operand
    hook: Expand
    ops: tuple[Op, ...]  # x's unpack if any, the 1x1 conv, its pack and chain, the unpack the conv reads
    chain: Chain
    reads: tuple[int, ...]  # the weights' and (if any) the bias's kernel operands


def expansion(rg: Region, v: Value) -> Expansion | None:
    """`v` (a depthwise conv's input) as unpack(chain(pack(conv2d 1x1 (x)))) with x a kernel operand,
    maybe through an NCHWc unpack, and a chain of ops on literals only; None when it is not one."""
    u = rg.producer(v)
    if u is None or u.name != "unpack" or channel_block(u, rg.sig(u)) != 16:
        return None
    t = u.operands[0]
    pk = next((o for o in rg.ancestors(t) if o.name == "pack"), None)
    conv = rg.producer(pk.operands[0]) if pk is not None else None
    if pk is None or conv is None or conv.name != "conv2d" or channel_block(pk, rg.sig(pk)) != 16:
        return None
    before = {id(o) for o in rg.ancestors(pk.results[0])}
    chain_ops = [o for o in rg.ancestors(t) if id(o) not in before]
    for o in chain_ops:
        if o.name not in CHAIN_OPS or any(
                rg.producer(w) is None and id(w) not in rg.splat for w in o.operands):
            raise NotLowerable(f"'{o.name}' in a fused expansion reads more than the chain and literals")
    x, xu = conv.operands[0], rg.producer(conv.operands[0])
    block = 0
    if xu is not None and xu.name == "unpack" and id(xu.operands[0]) in rg.arg:
        block = channel_block(xu, rg.sig(xu))
        x = xu.operands[0]
    elif xu is not None or id(x) not in rg.arg:
        raise NotLowerable("a fused expansion reads a kernel operand, maybe through an unpack")
    if any(id(w) not in rg.arg for w in conv.operands[1:]):
        raise NotLowerable("a fused expansion's weights and bias are kernel operands")
    main = conv.results[0]
    ops = [pk, *chain_ops] if chain_ops else []  # a pack alone passes its value through
    spaces = chain_spaces(rg, ops, main, Space(main.type.dims), Space(pk.results[0].type.dims), pk)
    chain = Chain(rg, "exp", ops, main, t if ops else main, spaces, "float", "int")
    w, *b = (rg.arg[id(o)] for o in conv.operands[1:3])
    hook = Expand("X", conv.operands[0].type.dims[1], block, f"ep{w}", f"ep{b[0]}" if b else "",
                  chain.call("{}", "0", 16) if ops else "")
    prologue = (*((xu,) if block else ()), conv, pk, *chain_ops, u)
    return Expansion(rg.arg[id(x)], hook, prologue, chain, (w, *b))


def split_yields(rg: Region, anchor: Op) -> Op | None:
    """The `split` along the last axis whose pieces are the region's yields (a matmul or gemm epilogue
    storing column ranges to separate results), None when the region yields one value that is not one."""
    first = rg.producer(rg.yields[0]) if rg.yields else None
    if first is None or first.name != "split":
        if len(rg.yields) != 1:
            raise NotLowerable("an epilogue region yields one value, or every piece of one split")
        return None
    x = first.operands[0]
    if (
        anchor.name not in ROW_ANCHORS
        or list(rg.yields) != list(first.results)
        or norm_axis(rg.sig(first)["axis"], x.type.rank) != x.type.rank - 1
    ):
        raise NotLowerable("a split ending an epilogue yields every piece, in order, of the last axis "
                           "of a matmul or gemm")
    return first


def channel_shuffle(rg: Region, v: Value) -> tuple[int, str, list[Op]] | None:
    """`v` = a channel shuffle of kernel operand `arg` (passes/fuse_rules.channel_shuffle_ops): (the operand's
    index, the C expression of the source channel of channel `c`, the three ops); None for anything else."""
    ops = channel_shuffle_ops(v)
    if ops is None or id(ops[0].operands[0]) not in rg.arg:
        return None
    g, per = ops[0].results[0].type.dims[1:3]
    return rg.arg[id(ops[0].operands[0])], f"(c % {g}) * {per} + c / {g}", ops


def nearest_upsample(rg: Region, v: Value) -> tuple[int, Upsample, Op] | None:
    """`v` = a nearest resize of H and W of kernel operand `arg` (passes/fuse_inputs.absorbable_resize): (the
    operand's index, the conv's Upsample, the resize); None for anything else."""
    r = rg.producer(v)
    if r is None or r.name != "resize" or id(r.operands[0]) not in rg.arg:
        return None
    sig = rg.sig(r)
    x, y = r.operands[0].type, r.result.type
    if sig.attrs["mode"] != "nearest" or x.rank != 4 or x.dims[:2] != y.dims[:2]:
        return None
    rows, cols = upsample_tables(sig.attrs, x, y)
    return rg.arg[id(r.operands[0])], Upsample(x.dims[2], x.dims[3], tuple(map(int, rows)),
                                               tuple(map(int, cols))), r
