"""A `layer_norm` around a matmul or gemm in an epilogue region (fused_epilogue.py): the norm computing A,
whose rows the contraction normalizes as it reads them (`norm_prologue`), and the norm of the
contraction's output rows, which its template normalizes in place once computed (`lower_row_norm`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ....ir.core import Op, Value
from ....ir.ops.registry import norm_axis
from ....passes.fuse_rules import ROW_ANCHORS
from .base import Ctx, Lowered, NotLowerable, index_type
from .fused_chain import (
    Anchor,
    Chain,
    Region,
    Space,
    chain_spaces,
    check_types,
    finish,
    packed_operands,
    remap,
)
from .gemm import ANorm, Tail
from .reducers import V, flit, fold_lanes


@dataclass(frozen=True)
class NormPrologue:
    """A layer_norm a matmul's or gemm's template applies to A's rows as it reads them."""

    arg: int  # the kernel operand of the norm's input
    hook: ANorm | None  # the template's hook (None: no norm, NO_NORM)
    ops: tuple[Op, ...] = ()  # the layer_norm, and the reshape after it if any
    reads: tuple[int, ...] = ()  # the kernel operands the hook reads (scale, bias)

    @property
    def kwargs(self) -> dict[str, ANorm]:
        """The keyword the contraction templates take the hook by (none without a norm)."""
        return {"a_norm": self.hook} if self.hook else {}


NO_NORM = NormPrologue(-1, None)


def norm_prologue(rg: Region, anchor: Op) -> NormPrologue | None:
    """A `layer_norm` over the last axis computing a matmul's or gemm's A from a kernel operand, maybe
    through a reshape keeping the last axis (a view: the rows are the same memory): the contraction
    normalizes A's rows as it reads them (gemm.ANorm). None when operand 0 is no such norm."""
    ln = rg.producer(anchor.operands[0])
    view = ln if ln is not None and ln.name == "reshape" else None
    if view is not None:
        ln = rg.producer(view.operands[0])
    if anchor.name not in ROW_ANCHORS or ln is None or ln.name != "layer_norm":
        return None
    x = ln.operands[0]
    k = x.type.dims[-1] if x.type.rank else 1
    if view is not None and view.results[0].type.dims[-1:] != (k,):
        raise NotLowerable("a reshape between a layer_norm and a contraction changes the last axis")
    if id(x) not in rg.arg:
        raise NotLowerable("a layer_norm before a contraction must read a kernel operand")
    if norm_axis(rg.sig(ln)["axis"], x.type.rank) != x.type.rank - 1:
        raise NotLowerable("a layer_norm before a contraction normalizes the last axis only")
    params = list(ln.operands[1:])
    if any(id(v) not in rg.arg for v in params) or any(v.type.numel not in (1, k) for v in params):
        raise NotLowerable(f"a layer_norm before a contraction has its scale and bias (1 or {k} elements) "
                           "as kernel operands")
    if x.type.dtype != "f32" or ln.results[0].type.dtype != "f32":
        raise NotLowerable("a layer_norm before a contraction of f32 only")
    names = [f"ep{rg.arg[id(v)]}" for v in params]
    exprs = [f"{nm}[0]" if v.type.numel == 1 else f"{nm}[{{k}}]" for nm, v in zip(names, params, strict=True)]
    eps = float(np.float32(rg.sig(ln)["epsilon"]))
    hook = ANorm(exprs[0], exprs[1] if len(exprs) > 1 else None, eps)
    ops = (ln, view) if view else (ln,)
    return NormPrologue(rg.arg[id(x)], hook, ops, tuple(rg.arg[id(v)] for v in params))


def lower_row_norm(ctx: Ctx, rg: Region, anchor: Op, where: list[int], ops: list[Op], norms: list[Op],
                   result: Value, table: dict[str, Anchor], norm: NormPrologue = NO_NORM) -> Lowered:
    """A matmul/gemm whose epilogue ends in a `layer_norm` over its last axis (then an elementwise chain):
    each work-item of the contraction's template computes every column block of its rows, storing the
    pre-norm values (`epi` chain applied), then normalizes those rows in place (`post` chain applied): one
    launch where there were two, and the rows are normalized while still in cache."""
    ln = norms[0]
    if len(norms) > 1 or anchor.name not in ROW_ANCHORS or len(rg.yields) != 1:
        raise NotLowerable("one layer_norm after a matmul or gemm, yielding one value")
    main = anchor.results[0]
    n = main.type.dims[-1]
    if norm_axis(rg.sig(ln)["axis"], ln.results[0].type.rank) != main.type.rank - 1:
        raise NotLowerable("a fused layer_norm normalizes the contraction's last axis only")
    params = list(ln.operands[1:])
    if any(id(v) not in rg.arg for v in params):
        raise NotLowerable("the layer_norm's scale and bias are kernel operands")
    if any(v.type.numel not in (1, n) for v in params):
        raise NotLowerable(f"a fused layer_norm's scale and bias have 1 or {n} elements")
    before = {id(anchor), *(id(o) for o in norm.ops)}  # the anchor and the norm of its A
    pre = [op for op in rg.ancestors(ln.operands[0]) if id(op) not in before]
    post = [op for op in ops if op is not ln and op not in pre]
    check_types(ctx, *ops)
    if result.type.dtype != "f32" or main.type.dtype != "f32":
        raise NotLowerable("a fused layer_norm of f32 only")
    it = index_type(*ctx.operands, *ctx.results, main.type)
    base = Space(main.type.dims)
    spaces = chain_spaces(rg, pre, main, base, None, None)
    epi = Chain(rg, "epi", pre, main, ln.operands[0], spaces, "float", it)
    tail = Chain(rg, "post", post, ln.results[0], result,
                 chain_spaces(rg, post, ln.results[0], base, None, None), "float", it)
    eps = float(np.float32(rg.sig(ln)["epsilon"]))
    names = [f"ep{rg.arg[id(v)]}" for v in params]

    def rows(g: Any) -> list[str]:
        v = V("float", g.cols if n % g.cols == 0 else 1)

        def affine(k: int) -> str:
            return f"{names[k]}[0]" if params[k].type.numel == 1 else v.load(names[k], "j")

        y = f"(x - mean) / den * {affine(0)}" + (f" + {affine(1)}" if len(params) > 1 else "")
        if post:
            y = tail.call(y, "o + j", v.w)
        guard = [f"        if (row >= {g.m}) break;"] if g.m % g.rows else []
        loop = f"for (int j = 0; j < {n}; j += {v.w})"
        total = flit(float(n), "float")
        return [
            f"    for (int i = 0; i < {g.rows}; ++i) {{  // normalize the rows just computed",
            f"        const int row = mb * {g.rows} + i;",
            *guard,
            f"        const {it} o = ((({it})b) * {g.m} + row) * {n};",
            "        __global float* yr = Y + o;",
            f"        {v.t} s = 0.0f, q = 0.0f;",
            f"        {loop} s += {v.load('yr', 'j')};",
            *(f"        {ln}" for ln in fold_lanes("add", v, "s")),
            f"        const float mean = s_s / {total};",
            f"        {loop} {{ const {v.t} d = {v.load('yr', 'j')} - mean; q += d * d; }}",
            *(f"        {ln}" for ln in fold_lanes("add", v, "q")),
            f"        const float den = sqrt(q_s / {total} + {flit(eps, 'float')});",
            f"        {loop} {{",
            f"            const {v.t} x = {v.load('yr', 'j')};",
            f"            {v.store(y, 'yr', 'j')}",
            "        }",
            "    }",
        ]

    sub = Ctx(anchor.name, rg.sig(anchor), ctx.device, tuple(ctx.is_constant(a) for a in where),
              dict(ctx.schedule))
    low = table[anchor.name](sub, epi.call if pre else None, tail=Tail(rows=rows), **norm.kwargs)
    low.pack = packed_operands(rg, low, where, anchor)
    reads = tuple(rg.arg[id(v)] for v in params) + norm.reads
    extras = sorted({*epi.extras, *tail.extras, *reads})
    low = finish(rg, low, [epi, tail], remap(where, extras), len(anchor.operands), extra_params=True,
                 reads=reads)
    low.schedule = {**low.schedule, "fused": len(ops) + 1 + len(norm.ops), "row_norm": 1}
    return low
