"""Reduction `kernel` regions (fused.py): softmax, log_softmax and layer_norm through norm.py's hooks,
reduce_* through `reduce_kernels`, each with the prologue computing its input and the epilogue on its
result; pools take an epilogue the way a conv does (fused_epilogue.py), and a batch_norm region is
elementwise.
"""

from __future__ import annotations

from ....ir.ops.reduce import reduced_axes
from .base import Ctx, Lowered, NotLowerable, ctype, index_type
from .fused_chain import Chain, Region, Space, chain_spaces, check_types, finish, packed_operands, remap
from .fused_elementwise import lower_elementwise
from .fused_epilogue import POOLS, lower_epilogue, pool_anchors
from .norm import layer_norm_kernels, softmax_kernels
from .reduce import reduce_kernels
from .reducers import REDUCERS

NORMS = {"softmax": softmax_kernels, "log_softmax": softmax_kernels, "layer_norm": layer_norm_kernels}


def lower_reduction(ctx: Ctx, rg: Region) -> Lowered:
    anchors = [op for op in rg.ops if op.name in (*NORMS, *REDUCERS, *POOLS, "batch_norm")]
    if len(anchors) != 1:
        raise NotLowerable("a reduction region needs exactly one reduction or normalization")
    anchor = anchors[0]
    if anchor.name == "batch_norm":  # a per-channel affine map: the whole region is elementwise
        return lower_elementwise(ctx, rg)
    if anchor.name in POOLS:  # pools take an epilogue (and NCHWc layouts) the way conv2d does
        return lower_epilogue(ctx, rg, pool_anchors())
    if len(rg.yields) != 1:
        raise NotLowerable("a reduction region yields one value")
    x, main, result = anchor.operands[0], anchor.results[0], rg.yields[0]
    pro = rg.ancestors(x)
    ops = [op for op in rg.ancestors(result) if op is not anchor and op not in pro]
    derived = result is main or any(op.results[0] is result for op in ops)
    if not derived or result.type.dims != main.type.dims:
        raise NotLowerable("the yield is not the anchor's epilogue")
    check_types(ctx, *pro, *ops)
    c = ctype(main.type)
    if c not in ("float", "double") or result.type.dtype != main.type.dtype:
        raise NotLowerable(f"a fused '{anchor.name}' of {main.type.dtype} giving {result.type.dtype}")
    # the prologue runs on the anchor's input: its main operand is the one the anchor's kernel reads
    source = ""  # the C type of the buffer the kernel reads, where the prologue converts it
    if pro:
        full = [v for op in pro for v in op.operands if id(v) in rg.arg and v.type == x.type]
        if not full and anchor.name in REDUCERS:  # the 8-bit values a dequantize reads (a QDQ model's
            # squeeze-excitation pool): reduce_kernels loads them as bytes; the norms' kernels cannot
            full = [v for op in pro if op.name == "dequantize" for v in op.operands[:1]
                    if id(v) in rg.arg and v.type.dims == x.type.dims]
            source = ctype(full[0].type) if full else ""
        if not full:
            raise NotLowerable("no kernel operand of the prologue has the anchor input's shape")
        first, x_arg = full[0], rg.arg[id(full[0])]
        spaces = chain_spaces(rg, pro, first, Space(x.type.dims), None, None)
        pro_chain = Chain(rg, "pro", pro, first, x, spaces, c, index_type(x.type))
    elif id(x) in rg.arg:
        x_arg = rg.arg[id(x)]
        pro_chain = Chain(rg, "pro", [], x, x, {}, c, "int")
    else:
        raise NotLowerable(f"'{anchor.name}' operand 0 is not a kernel operand")
    spaces = chain_spaces(rg, ops, main, Space(main.type.dims), None, None)
    epi_chain = Chain(rg, "epi", ops, main, result, spaces, c, index_type(main.type))
    chains = [pro_chain, epi_chain]
    for a in {a for ch in chains for a in ch.extras}:
        if rg.args[a].type.dtype != main.type.dtype:
            raise NotLowerable(f"operand {a} of the chain is {rg.args[a].type.dtype}, not {main.type.dtype}")
    where = [x_arg]
    for k, v in enumerate(anchor.operands[1:], 1):
        if id(v) not in rg.arg:
            raise NotLowerable(f"'{anchor.name}' operand {k} is not a kernel operand")
        where.append(rg.arg[id(v)])
    sub = Ctx(anchor.name, rg.sig(anchor), ctx.device, tuple(ctx.is_constant(a) for a in where),
              dict(ctx.schedule))
    if anchor.name in NORMS:
        low = NORMS[anchor.name](sub, pro_chain.hook(), epi_chain.hook())
    else:
        low = reduce_kernels(
            anchor.name,
            x.type,
            main.type,
            reduced_axes(rg.sig(anchor)),
            ctx.device,
            epi_chain.hook() if ops else None,  # type: ignore[arg-type]
            pro_chain.hook() if pro else None,  # type: ignore[arg-type]
            source,
        )
    low.pack = packed_operands(rg, low, where, anchor)
    extras = sorted({a for ch in chains for a in ch.extras})
    low = finish(rg, low, chains, remap(where, extras), len(anchor.operands), extra_params=False)
    low.schedule = {**low.schedule, "fused": len(pro) + len(ops) + 1}
    return low

