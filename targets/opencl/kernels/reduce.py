"""The OpenCL template of `reduce_*` over any set of axes (the line scans argmax / argmin, cumsum / cumprod
and top_k are scan.py; the reducers and the helpers reduction-like templates share, reducers.py).

Kernel shapes (DESIGN.md §5: on PoCL's CPU device one work-item per output looping over the reduced extent
beats barrier trees). The operand's dims are first simplified: size-1 dims dropped, neighbours that are both
reduced or both kept merged. Then
- innermost group reduced ("row" kernel): one work-item per output; it loops over the outer reduced groups
  and reads the contiguous innermost run with `vloadN` into an N-lane accumulator, folded to a scalar at
  the end (global average pooling, softmax-style rows);
- innermost group kept ("column" kernel): one work-item per N consecutive outputs, each lane its own
  accumulator, every reduced position one `vloadN` (reducing the batch or channel dim of NCHW);
- few outputs with a long reduction: the work is split over the outermost reduced group (and the
  contiguous run) into partial results in `tmp0`, which a second kernel combines and finishes.
Float sums are blocked for accuracy: vector partial sums flushed into an outer accumulator every 256 adds,
so the error of a 1M-element f32 sum stays near numpy's pairwise sum. Integer sums and products wrap (they
accumulate in the unsigned type of the same width), as the references do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ....ir.ops.reduce import reduced_axes
from ....ir.types import TensorType
from .base import Ctx, DeviceInfo, Kernel, Lowered, NotLowerable, launch_1d, require_static, template
from .reducers import (
    REDUCERS,
    SIZES,
    Blocked,
    Reducer,
    V,
    acc_ctype,
    combine,
    counted,
    elem_ctype,
    element,
    finish_expr,
    flit,
    fold_lanes,
    indent,
    is_float,
    kernel_source,
    vec_width,
)

SPLIT_MIN = 16384  # reduced elements per output from which a reduction with few outputs is split
SPLIT_CHUNK = 4096  # fewest reduced elements per split
TARGET_ITEMS = 64  # work-items a split reduction aims for


def simplify(shape: tuple[int, ...], reduced: set[int]) -> list[list[int]]:
    """[size, stride, is_reduced] groups after dropping size-1 dims and merging same-kind neighbours."""
    groups: list[list[int]] = []
    for i, d in enumerate(shape):
        if d == 1:
            continue
        r = int(i in reduced)
        if groups and groups[-1][2] == r:
            groups[-1][0] *= d
        else:
            groups.append([d, 0, r])
    acc = 1
    for g in reversed(groups):
        g[1] = acc
        acc *= g[0]
    return groups


def offset_code(idx: str, groups: list[list[int]], out: str, it: str) -> list[str]:
    """Statements setting `out` to the element offset of flat index `idx` over `groups` (outer first)."""
    if not groups:
        return [f"const {it} {out} = 0;"]
    if len(groups) == 1:
        stride = groups[0][1]
        return [f"const {it} {out} = {idx} * {stride};" if stride != 1 else f"const {it} {out} = {idx};"]
    lines = [f"{it} {out}_t = {idx};", f"{it} {out} = 0;"]
    for size, stride, _ in reversed(groups[1:]):
        lines.append(f"{out} += ({out}_t % {size}) * {stride}; {out}_t /= {size};")
    lines.append(f"{out} += {out}_t * {groups[0][1]};")
    return lines


# reduce_* -------------------------------------------------------------------------------------------------
class Epilogue(Protocol):
    """A fused elementwise epilogue on each stored output (norm.Hook is one): `apply(value, v, pos)` gives
    the C expression stored for `value` (v.w consecutive outputs from flat index `pos`); the buffers in
    `args` become kernel parameters before out0."""

    @property
    def args(self) -> tuple[str, ...]: ...

    def apply(self, x: str, v: V, pos: str) -> str: ...


Store = Callable[[str, V, str], str]  # (value, lanes, flat output index) -> the stored expression


def _plain(x: str, v: V, pos: str) -> str:
    return x


@dataclass
class Plan:
    """One reduce_* lowering: the simplified groups, the kernel shape and the split."""

    row: bool  # innermost group reduced
    kept: list[list[int]]  # kept groups outside the vectorized one (row: all kept groups)
    rows: list[list[int]]  # reduced groups looped over (row: all but the innermost)
    inner: int  # row: the contiguous reduced run; column: the contiguous kept run
    n_out: int
    n_red: int
    split_rows: int = 1  # parts of rows[0]
    split_inner: int = 1  # row kernels: parts of the contiguous run
    chunk: int = 0  # elements of the contiguous run per part

    @property
    def splits(self) -> int:
        return self.split_rows * self.split_inner


def make_plan(x: TensorType, axes: tuple[int, ...], vw: int, splittable: bool) -> Plan:
    groups = simplify(x.dims, set(axes))
    n_red = int(np.prod([x.dims[a] for a in axes], dtype=np.int64))
    n_out = x.numel // max(n_red, 1)
    if not any(g[2] for g in groups):  # every reduced dim has size 1: reduce one element per output
        groups.append([1, 1, 1])
    if groups[-1][2]:
        kept = [g for g in groups if not g[2]]
        plan = Plan(True, kept, [g for g in groups[:-1] if g[2]], groups[-1][0], n_out, n_red)
        items = n_out
    else:
        plan = Plan(False, [g for g in groups[:-1] if not g[2]], [g for g in groups if g[2]],
                    groups[-1][0], n_out, n_red)
        items = (n_out // plan.inner) * -(-plan.inner // vw)
    if splittable and items < TARGET_ITEMS // 2 and n_red >= SPLIT_MIN:
        want = min(-(-TARGET_ITEMS // items), n_red // SPLIT_CHUNK)
        if plan.rows:
            plan.split_rows = min(want, plan.rows[0][0])
        if plan.row and plan.split_rows < want:
            parts = min(-(-want // plan.split_rows), max(1, plan.inner // SPLIT_CHUNK))
            plan.chunk = -(-plan.inner // parts)
            plan.chunk = -(-plan.chunk // vw) * vw
            plan.split_inner = -(-plan.inner // plan.chunk)
        if plan.split_rows > 1:
            plan.split_rows = -(-plan.rows[0][0] // -(-plan.rows[0][0] // plan.split_rows))
    return plan


def row_loops(plan: Plan, it: str, body: list[str]) -> list[str]:
    """The loop nest over the reduced groups outside the vectorized run; `p` points at the current one."""
    if not plan.rows:
        return ["{", *indent(["const __global SRC* p = x;", *body]), "}"]
    lines: list[str] = []
    terms = []
    for j, (size, stride, _) in enumerate(plan.rows):
        lo, hi = ("r0_lo", "r0_hi") if j == 0 and plan.split_rows > 1 else ("0", str(size))
        lines.append("    " * j + f"for ({it} r{j} = {lo}; r{j} < {hi}; ++r{j}) {{")
        terms.append(f"r{j} * {stride}" if stride != 1 else f"r{j}")
    d = len(plan.rows)
    inner = [f"const __global SRC* p = x + {' + '.join(terms)};", *body]
    lines += indent(inner, d)
    lines += ["    " * j + "}" for j in reversed(range(d))]
    return lines


def reduce_kernels(op: str, x: TensorType, y: TensorType, axes: tuple[int, ...],
                   device: DeviceInfo, epilogue: Epilogue | None = None,
                   prologue: Epilogue | None = None, source: str = "") -> Lowered:
    """Kernels computing `op` (a REDUCERS key) of `x` over `axes` into `y` (same element type), with an
    optional fused `epilogue` on every stored output and `prologue` on every loaded input element (its
    position: the element's flat index in x, of the first lane for a vector). `source`: the C type of the
    buffer the prologue reads, where it is not x's (a dequantize's 8-bit values: loaded and converted to
    x's type before the prologue)."""
    require_static(x, y)
    c = elem_ctype(x, device)
    src = source or c
    if src != c and prologue is None:
        raise NotLowerable(f"{op}: a {src} source needs the prologue that makes it {c}")
    epi: Store = epilogue.apply if epilogue is not None else _plain
    pre: Store = prologue.apply if prologue is not None else _plain
    extra = tuple(sorted(epilogue.args)) if epilogue is not None else ()
    pro_args = tuple(sorted(prologue.args)) if prologue is not None else ()
    if (epilogue is not None or prologue is not None) and (x.numel == 0 or y.numel == 0 or not is_float(c)):
        raise NotLowerable(f"{op}: a fused prologue or epilogue needs a non-empty float reduction")
    r = REDUCERS[op]
    if op in ("reduce_mean", "reduce_l2", "reduce_log_sum_exp") and not is_float(c):
        raise NotLowerable(f"{op} of {x.dtype}")
    lse = op == "reduce_log_sum_exp"
    a = acc_ctype(r, c)
    vw = vec_width(c, device)
    it = "int" if x.numel < 2**31 else "long"
    what = f"{op} over axes {list(axes)} of {x} -> {y}"
    if y.numel == 0:
        src = kernel_source(what + " (empty)", [f"__global {c}* out0"], [])
        return Lowered([Kernel(src, (0,), None, ("out0",))])
    if x.numel == 0:  # an empty reduction: every output is the finished identity
        val = "-INFINITY" if lse else finish_expr(r, V(a, 1), r.identity(a), 0, c)
        k = launch_1d(y.numel)
        body = [f"const {it} o = get_global_id(0);", f"if (o < {y.numel}) out0[o] = {val};"]
        k.source = kernel_source(what + ": an empty reduction, the identity", [f"__global {c}* out0"], body)
        k.args = ("out0",)
        return Lowered([k], schedule={"kernel": "fill"})
    plan = make_plan(x, axes, vw, splittable=not lse)
    S = plan.splits
    dst_t = a if S > 1 else c
    dst = "tmp0" if S > 1 else "out0"
    # the first kernel's extra buffers: the prologue's, and the epilogue's when it stores the outputs
    first = tuple(dict.fromkeys((*extra, *pro_args))) if S == 1 else pro_args
    extra_params = [f"__global const {c}* restrict {n}" for n in first]
    params = [f"__global const {src}* restrict in0", *extra_params, f"__global {dst_t}* restrict {dst}"]
    gen = row_kernel if plan.row else column_kernel
    body, items = gen(plan, r, c, a, vw, it, lse, epi, pre, src)
    body = [ln.replace("SRC", src).replace("TYPE", c) for ln in body]
    shape = "row" if plan.row else "column"
    k = launch_1d(items)
    k.source = kernel_source(f"{what}: {shape} kernel, {vw}-wide, split in {S}" if S > 1 else
                             f"{what}: {shape} kernel, {vw}-wide", params, body)
    sched = {"kernel": shape, "vector": vw, "split": S}
    if S == 1:
        if first:
            k.args = ("in0", *first, "out0")
        return Lowered([k], schedule=sched)
    k.args = ("in0", *first, "tmp0")
    k2 = launch_1d(plan.n_out)
    va = V(a, 1)
    body2 = [f"const {it} o = get_global_id(0);", f"if (o >= {plan.n_out}) return;",
             f"{a} acc = tmp0[o];",
             f"for (int s = 1; s < {S}; ++s) {{",
             f"    acc = {combine(r.kind, va, 'acc', f'tmp0[s * {plan.n_out} + o]')};", "}",
             f"out0[o] = {epi(finish_expr(r, va, 'acc', plan.n_red, c), V(c, 1), 'o')};"]
    k2.source = kernel_source(f"{op}: combine {S} partial results per output",
                              [f"__global const {a}* restrict tmp0",
                               *[f"__global const {c}* restrict {n}" for n in extra],
                               f"__global {c}* restrict out0"], body2)
    k2.args = ("tmp0", *extra, "out0")
    return Lowered([k, k2], scratch=[S * plan.n_out * SIZES[a]], schedule=sched)


def _load(v: V, src: str, ptr: str, off: str) -> str:
    """`v`'s lanes from `ptr` (of `src` elements) at `off`, converted to v's type where src is another."""
    if src == v.c:
        return v.load(ptr, off)
    raw = V(src, v.w).load(ptr, off)
    return f"({v.t}){raw}" if v.w == 1 else f"convert_{v.t}({raw})"


def row_kernel(plan: Plan, r: Reducer, c: str, a: str, vw: int, it: str, lse: bool,
               epi: Store = _plain, pre: Store = _plain, src: str = "") -> tuple[list[str], int]:
    """One work-item per output (per split part): vector loop over the contiguous reduced run; `epi`
    rewrites each stored output, `pre` each loaded input."""
    S, n_out = plan.splits, plan.n_out
    items = n_out * S
    lines = [f"const {it} g = get_global_id(0);", f"if (g >= {items}) return;"]
    if S > 1:
        lines += [f"const {it} o = g % {n_out};", f"const int sp = g / {n_out};"]
    else:
        lines.append(f"const {it} o = g;")
    lines += offset_code("o", plan.kept, "base", it)
    lines.append("const __global SRC* x = in0 + base;")
    if plan.split_rows > 1:
        n0 = plan.rows[0][0]
        per = -(-n0 // plan.split_rows)
        lines += [f"const {it} r0_lo = (sp / {plan.split_inner}) * {per};",
                  f"const {it} r0_hi = min(r0_lo + {per}, ({it}){n0});"]
    if plan.split_inner > 1:
        lines += [f"const {it} i_lo = (sp % {plan.split_inner}) * {plan.chunk};",
                  f"const {it} i_hi = min(i_lo + {plan.chunk}, ({it}){plan.inner});"]
        lo, hi = "i_lo", "i_hi"
    else:
        lo, hi = "0", str(plan.inner)
    vv, vs = V(a, vw), V(a, 1)

    def sweep(kind: str, blocked: bool, vec_val: str, sc_val: str, name: str) -> list[str]:
        """Accumulate every reduced element into the scalar `{name}_t`: a `vw`-lane accumulator over the
        contiguous run (when it is that long) and a scalar one, `{name}1`, over the tails."""
        ident = "-INFINITY" if lse and kind == "max" else r.identity(a) if kind == r.kind else flit(0.0, a)
        wide = plan.inner >= vw
        accs = ([Blocked(name, vv, kind, ident, blocked)] if wide else []) + \
            [Blocked(name + "1", vs, kind, ident, blocked)]
        count = counted(accs, f"n_{name}")
        out = [s for acc in accs for s in acc.decl()] + ([f"int n_{name} = 0;"] if blocked else [])
        body = [f"{it} i = {lo};"]
        if wide:
            body += [f"for (; i + {vw} <= {hi}; i += {vw}) {{",
                     *indent([f"const {vv.t} v = {vec_val};", *accs[0].add("v"), *count]), "}"]
        body += [f"for (; i < {hi}; ++i) {{",
                 *indent([f"const {vs.t} v = {sc_val};", *accs[-1].add("v"), *count]), "}"]
        out += row_loops(plan, it, body)
        out += [s for acc in accs for s in acc.flush()]
        if wide:
            out += fold_lanes(kind, vv, name)
            out.append(f"const {a} {name}_t = {combine(kind, vs, name + '_s', name + '1')};")
        else:
            out.append(f"const {a} {name}_t = {name}1;")
        return out

    vload = pre(_load(V(c, vw), src or c, "p", "i"), V(c, vw), "(p - in0) + i")
    sload = pre(_load(V(c, 1), src or c, "p", "i"), V(c, 1), "(p - in0) + i")
    if lse:  # the max, a shift by it when finite (as the reference), the sum of exp, its log
        lines += sweep("max", False, vload, sload, "m")
        lines.append(f"const {a} sh = isfinite(m_t) ? m_t : {flit(0.0, a)};")
        lines += sweep("add", True, f"exp({vload} - sh)", f"exp({sload} - sh)", "s")
        lines.append(f"out0[o] = {epi('log(s_t) + sh', V(c, 1), 'o')};")
        return lines, items
    blocked = r.kind == "add" and is_float(a)
    lines += sweep(r.kind, blocked, element(r, c, a, vv, vload), element(r, c, a, vs, sload), "acc")
    if S > 1:
        lines.append("tmp0[g] = acc_t;")
    else:
        lines.append(f"out0[o] = {epi(finish_expr(r, vs, 'acc_t', plan.n_red, c), V(c, 1), 'o')};")
    return lines, items


def column_kernel(plan: Plan, r: Reducer, c: str, a: str, vw: int, it: str, lse: bool,
                  epi: Store = _plain, pre: Store = _plain, src: str = "") -> tuple[list[str], int]:
    """One work-item per `unroll` vectors of consecutive outputs along the contiguous kept run (lanes are
    outputs): each reduced position reads `unroll` neighbouring vectors, a few whole cache lines."""
    K = plan.inner
    vw = min(vw, 1 << (K.bit_length() - 1))  # a power of two no wider than the run
    unroll = 4 if K >= 4 * vw and not lse else 1
    chunk = vw * unroll
    nc = -(-K // chunk)
    q_n = plan.n_out // K
    S = plan.splits
    items = q_n * nc * S
    lines = [f"const {it} g = get_global_id(0);", f"if (g >= {items}) return;",
             f"const {it} k0 = (g % {nc}) * {chunk};", f"const {it} q = (g / {nc}) % {q_n};"]
    if S > 1:
        n0 = plan.rows[0][0]
        per = -(-n0 // plan.split_rows)
        lines += [f"const {it} r0_lo = (g / {nc * q_n}) * {per};",
                  f"const {it} r0_hi = min(r0_lo + {per}, ({it}){n0});",
                  f"__global {a}* dst = tmp0 + (g / {nc * q_n}) * {plan.n_out} + q * {K};"]
    else:
        lines.append(f"__global TYPE* dst = out0 + q * {K};")
    lines += offset_code("q", plan.kept, "base", it)

    def path(w: int, off: str, u: int = 1) -> list[str]:
        v, vc = V(a, w), V(c, w)
        load = pre(_load(vc, src or c, "p", "0"), vc, "(p - in0)")
        out = [f"const __global SRC* x = in0 + base + {off};"]
        if lse:  # the max, a shift by it when finite (as the reference), the sum of exp, its log
            m, s = Blocked("m", v, "max", "-INFINITY", False), Blocked("s", v, "add", flit(0.0, a), True)
            out += m.decl() + row_loops(plan, it, [f"m = {combine('max', v, 'm', load)};"])
            zero = v.splat(flit(0.0, a))
            out.append(f"const {v.t} sh = {v.pick(zero, 'm', 'isfinite(m)', 'isfinite(m)')};")
            out += s.decl() + ["int nadd = 0;"]
            out += row_loops(plan, it, s.add(f"exp({load} - sh)") + counted([s])) + s.flush()
            out.append(v.store(epi("log(s) + sh", V(c, w), f"q * {K} + {off}"), "dst", off))
            return out
        names = [f"acc{j}" for j in range(u)] if u > 1 else ["acc"]
        accs = [Blocked(n, v, r.kind, r.identity(a), r.kind == "add" and is_float(a)) for n in names]
        out += [s for acc in accs for s in acc.decl()] + (["int nadd = 0;"] if accs[0].blocked else [])
        step = []
        for j, acc in enumerate(accs):
            vj = f"v{j}" if u > 1 else "v"
            loaded = pre(_load(vc, src or c, "p", str(j * w)), vc, f"(p - in0) + {j * w}")
            step += [f"const {v.t} {vj} = {element(r, c, a, v, loaded)};", *acc.add(vj)]
        out += row_loops(plan, it, step + counted(accs)) + [s for acc in accs for s in acc.flush()]
        for j, acc in enumerate(accs):
            at = f"{off} + {j * w}" if j else off
            val = acc.name if S > 1 else epi(finish_expr(r, v, acc.name, plan.n_red, c), V(c, w),
                                                  f"q * {K} + {at}")
            out.append(v.store(val, "dst", at))
        return out

    if K % chunk == 0:
        lines += path(vw, "k0", unroll)
    else:
        tail = [f"{it} k = k0;"]
        if vw > 1:
            tail += [f"for (; k + {vw} <= {K}; k += {vw}) {{", *indent(path(vw, "k")), "}"]
        tail += [f"for (; k < {K}; ++k) {{", *indent(path(1, "k")), "}"]
        lines += [f"if (k0 + {chunk} <= {K}) {{", *indent(path(vw, "k0", unroll)), "} else {", *indent(tail),
                  "}"]
    return lines, items


@template(*REDUCERS)
def reduce_template(ctx: Ctx) -> Lowered:
    return reduce_kernels(ctx.op_name, ctx.operands[0], ctx.results[0], reduced_axes(ctx.sig), ctx.device)
