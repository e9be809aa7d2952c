"""OpenCL template of `attention`: softmax(q @ k^T * scale + mask) @ v in one kernel, the scores never
leaving the work-item.

k is needed in panels [..., ceil(Sk/P), D, P], P the vector width, keys padded with zeros, so P consecutive
keys' elements at one head-dim index are one vector load. When one head's panels fit in LOCAL_K_BYTES of
local memory and the keys are one chunk (BERT-sized heads), the work-group, some row blocks of one head,
makes them itself: its work-items share the (panel, head-dim index) vectors, each gathered from P key rows
and stored whole into `__local` panels, then one barrier. That saves the separate pack launch, worth more
than the copy each work-group repeats (~0.5 us for a 64x32 head on PoCL). Otherwise (long
sequences, a constant k) k is packed before the launch (`PackSpec`). One work-item owns R query rows of
one (batch, head) and walks the keys in chunks of T (a multiple of P), flash-attention style:
1. scores: for each panel of P keys (two panels at once for R <= 8: 2R accumulators hide the FMA
   latency and halve q's broadcast loads), R vector accumulators (one per row, lanes = keys) gather
   q[row, d] * k[keys, d] over d, the GEMM micro-kernel of gemm.py with q's scalars broadcast; scaled and
   stored in a private [R, T] array, a union of P-wide vectors and scalars: whole vectors are stored and
   reloaded as such (PoCL splits vstoreN into 16-byte pieces, and a wide load of pieces stalls on store
   forwarding);
2. softmax: per row, the mask is added (a vector load when it varies along the keys), the chunk max taken,
   exp(s - max) written back and summed, all P lanes wide with a scalar tail; with several chunks the
   running max and sum are corrected by exp(old max - new max), as are the output accumulators;
3. output: for each P-wide (then 8-, 4-, 2-, 1-wide) column slice of v (two P-wide slices at once for
   R <= 8), R accumulators gather p[row, key] * v[key, slice] over the chunk's keys; with one chunk they are
   scaled by the reciprocal of the row sum and written straight to the result, otherwise kept in a private
   [R, Dv] array until the last chunk.
Batch (and head) dims broadcast between q, k, v and the mask with zero strides. With `layout = "bshd"` q, k,
v and the result are read and written in place with a row stride of H * D (the head a batch dim of stride
D); a pack of k moves its head dim before the key panels ([..., Sk, H, D] -> [..., H, ceil(Sk/P), D, P]),
so the kernel body is the same for both layouts. The schedule keys `rows` (R), `chunk` (T), `k_local` (0
or 1) and `groups` (work-groups per head with k_local) override the defaults (8 rows, keys up to 512 per
chunk, k_local when it fits, enough groups for 4 per compute unit). A row whose scores are all -inf so far
subtracts 0 instead of its max (its exponentials are 0, and a later chunk with visible keys takes over);
at the end its zero sum gives NaN as softmax does, or zeros with `safe` (torch's safe softmax).
"""

from __future__ import annotations

import math

import numpy as np

from ....ir.ops.attention import heads_first
from ..space import Constraint, Knob, Point, Space, around, space
from .base import (
    Ctx,
    Kernel,
    Lowered,
    NotLowerable,
    PackSpec,
    launch_1d,
    require_static,
    row_major_strides,
    template,
)
from .reducers import V, elem_ctype, flit, fold_lanes, indent, is_float, kernel_source, vec_width

ROWS = 8  # query rows per work-item: R vector accumulators in the two products
MAX_CHUNK = 512  # keys per chunk: the private scores are R * T elements
MAX_GROUP = 64  # row blocks per work-group at most with k_local (each group copies k once)
LOCAL_K_BYTES = 32 * 1024  # k panels made in local memory up to this size (OpenCL's minimum local memory)


def _view(shape: tuple[int, ...], layout: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """An operand's bhsd view: its dims and element strides with dims -3 and -2 swapped for bshd."""
    strides = row_major_strides(shape)
    if layout == "bshd":
        return heads_first(shape, layout), tuple(heads_first(tuple(strides), layout))
    return shape, tuple(strides)


def _batch_strides(dims: tuple[int, ...], strides: tuple[int, ...], batch: tuple[int, ...]) -> list[int]:
    """Element strides of an operand (its bhsd view `dims`, `strides`) over the result's batch dims: the
    view's leading dims right-aligned with `batch`, 0 where they broadcast."""
    own = [(d, s) for d, s in zip(dims[:-2], strides[:-2], strict=True)]
    own = [(1, 0)] * (len(batch) - len(own)) + own
    return [s if d > 1 else 0 for d, s in own]


def _slices(n: int, p: int) -> list[tuple[int, int]]:
    """(offset, width) column slices covering n: width-p slices, then halves down to 1."""
    out, c = [], 0
    while c + p <= n:
        out.append((c, p))
        c += p
    w = p // 2
    while c < n:
        while w > n - c:
            w //= 2
        out.append((c, w))
        c += w
    return out


def _slice_groups(n: int, p: int, pair: int) -> list[list[tuple[int, int]]]:
    """`_slices(n, p)` grouped for one pass over the keys: up to `pair` full-width slices together, the
    narrower tail slices alone."""
    out: list[list[tuple[int, int]]] = []
    for sl in _slices(n, p):
        if out and sl[1] == p and out[-1][0][1] == p and len(out[-1]) < pair:
            out[-1].append(sl)
        else:
            out.append([sl])
    return out


@template("attention")
def attention_template(ctx: Ctx) -> Lowered:
    q, k, v = ctx.operands[:3]
    has_mask = len(ctx.operands) > 3
    require_static(*ctx.operands, *ctx.results)
    c = elem_ctype(q, ctx.device)
    if not is_float(c):
        raise NotLowerable(f"attention of {q.dtype}")
    out_t = ctx.results[0]
    layout = str(ctx.sig.attrs.get("layout", "bhsd"))
    (qd, qs), (kd, _), (vd, vs), (od, os_) = (_view(t.dims, layout) for t in (q, k, v, out_t))
    batch = tuple(od[:-2])
    sq, d = qd[-2], qd[-1]
    sk, dv = kd[-2], vd[-1]
    bh = int(np.prod(batch, dtype=np.int64))
    if out_t.numel == 0:
        src = kernel_source(f"attention (empty) {out_t}", [f"__global {c}* out0"], [])
        return Lowered([Kernel(src, (0,), None, ("out0",))])
    if sk == 0 or d == 0:
        raise NotLowerable("attention over no keys or an empty head dim")
    p = vec_width(c, ctx.device)
    rows = int(ctx.schedule.get("rows", ROWS))
    while rows > 1 and bh * math.ceil(sq / rows) < 4 * ctx.device.compute_units:
        rows //= 2  # enough work-items for every core
    rows = max(1, min(rows, sq))
    chunk = int(ctx.schedule.get("chunk", min(MAX_CHUNK, math.ceil(sk / p) * p)))
    chunk = max(p, chunk // p * p)
    single = chunk >= sk
    npanel = math.ceil(sk / p)
    nrb = math.ceil(sq / rows)
    it = "int" if max(t.numel for t in (*ctx.operands, out_t)) + npanel * p * d < 2**31 else "long"
    # k's panels: in local memory, made by the work-group (one head's row blocks), or packed beforehand
    esize = np.dtype(q.np_dtype).itemsize
    fits = single and npanel * p * d * esize <= LOCAL_K_BYTES and not ctx.is_constant(1)
    k_local = bool(ctx.schedule.get("k_local", fits))
    if k_local and not (single and npanel * p * d * esize <= LOCAL_K_BYTES):
        raise NotLowerable(
            f"attention schedule k_local=1 needs one key chunk of at most {LOCAL_K_BYTES} bytes"
        )
    groups = 1  # work-groups per head, each making its own copy of the panels
    if k_local:
        while groups < nrb and bh * groups < 4 * ctx.device.compute_units:
            groups *= 2  # enough work-groups for every core
        groups = max(groups, math.ceil(nrb / min(MAX_GROUP, ctx.device.max_work_group_size)))
        groups = max(1, min(int(ctx.schedule.get("groups", groups)), nrb))
        if math.ceil(nrb / groups) > ctx.device.max_work_group_size:
            raise NotLowerable(f"attention schedule groups={groups} exceeds the work-group size limit")
    wg = math.ceil(nrb / groups)  # row blocks per work-group (with k_local)
    vp, v1 = V(c, p), V(c, 1)
    scale = flit(float(np.dtype(q.np_dtype).type(ctx.attr("scale"))), c)
    safe = bool(ctx.attr("safe"))

    def reciprocal(x: str) -> str:
        """1 / x, the row sum; safe: 0 for a row whose every score was -inf (its sum is 0)."""
        inv = f"{flit(1.0, c)} / {x}"
        return f"({x} > {flit(0.0, c)} ? {inv} : {flit(0.0, c)})" if safe else inv

    # batch offsets of each operand ------------------------------------------------------------------
    # packed, k is [..., H, ceil(Sk/P), D, P] whatever its layout: its bhsd view's batch dims, P-panels
    kp_dims = (*kd[:-2], npanel, d * p)
    kv_dims, kv_strides = _view(k.dims, layout)
    strides = {
        "in0": _batch_strides(qd, qs, batch),
        "in1": _batch_strides(kv_dims, kv_strides, batch)
        if k_local
        else _batch_strides(kp_dims, tuple(row_major_strides(kp_dims)), batch),
        "in2": _batch_strides(vd, vs, batch),
        "out0": _batch_strides(od, os_, batch),
    }
    if has_mask:
        m = ctx.operands[3]
        mdims = (1,) * (len(batch) + 2 - m.rank) + tuple(m.dims)
        ms_row = mdims[-1] if mdims[-2] > 1 else 0
        ms_key = 1 if mdims[-1] > 1 else 0
        strides["in3"] = _batch_strides(mdims, tuple(row_major_strides(mdims)), batch)
    q_row, v_row, o_row = qs[-2], vs[-2], os_[-2]  # element strides between sequence positions
    if k_local:  # work-group = `wg` row blocks of one head; no early return before the barrier
        body = [
            f"__local {c} kl[{npanel * d * p}];",
            "const int lid = get_local_id(0);",
            f"const {it} bh = get_group_id(0) / {groups};",
            f"const int i0 = (int)((get_group_id(0) % {groups}) * {wg} + lid) * {rows};",
        ]
    else:
        body = [
            f"const {it} g = get_global_id(0);",
            f"if (g >= {bh * nrb}) return;",
            f"const {it} bh = g / {nrb};",
            f"const int i0 = (int)(g % {nrb}) * {rows};",
        ]
    names = list(strides)
    body += [f"{it} off_{n} = 0;" for n in names]
    if any(any(s) for s in strides.values()):
        body.append(f"{it} bt = bh;")
        for i in reversed(range(len(batch))):
            terms = [f"off_{n} += ix * {strides[n][i]};" for n in names if strides[n][i]]
            if terms:
                body.append(f"{{ const {it} ix = bt % {batch[i]}; {' '.join(terms)} }}")
            body.append(f"bt /= {batch[i]};")
    if k_local:  # k [Sk, D] rows (stride k_row) -> panels kl[Sk/P][D][P], keys past Sk zero
        k_row = kv_strides[-2]
        full = sk // p  # panels whose P keys all exist: one vector gathered down the key rows each
        body.append(f"const __global {c}* kb = in1 + off_in1;")
        if full:
            lanes = ", ".join(f"kr[{i * k_row}]" for i in range(p))
            body += [
                f"for (int t = lid; t < {full * d}; t += {wg}) {{",
                f"    const __global {c}* kr = kb + (t / {d}) * {p * k_row} + t % {d};",
                f"    {vp.store(f'({vp.t})({lanes})' if p > 1 else lanes, 'kl', f't * {p}')}",
                "}",
            ]
        if full < npanel:  # the tail panel, keys past Sk zero
            body += [
                f"for (int t = lid; t < {d * p}; t += {wg}) {{",
                f"    const int j = {full * p} + t % {p}, dd = t / {p};",
                f"    kl[{full * d * p} + t] = j < {sk} ? kb[j * {k_row} + dd] : {flit(0.0, c)};",
                "}",
            ]
        body += ["barrier(CLK_LOCAL_MEM_FENCE);", f"if (i0 >= {sq}) return;"]
    kspace = "__local" if k_local else "__global"
    body += [
        f"const __global {c}* qb = in0 + off_in0;",
        f"const {kspace} {c}* kp = {'kl' if k_local else 'in1 + off_in1'};",
        f"const __global {c}* vb = in2 + off_in2;",
        *([f"const __global {c}* mb = in3 + off_in3;"] if has_mask else []),
        f"__global {c}* ob = out0 + off_out0;",
    ]
    body += [f"const __global {c}* q{r} = qb + min(i0 + {r}, {sq - 1}) * {q_row};" for r in range(rows)]
    cv = chunk // p  # vectors per row of the private scores
    body += [
        f"union {{ {vp.t} v[{rows * cv}]; {c} f[{rows * chunk}]; }} s;",
        f"{c} mrow[{rows}];",
        f"{c} lrow[{rows}];",
    ]
    if not single:
        body += [
            f"{c} crow[{rows}];",
            f"{c} o[{rows * dv}];",
            f"for (int i = 0; i < {rows * dv}; ++i) o[i] = {flit(0.0, c)};",
        ]
    body.append(f"for (int r = 0; r < {rows}; ++r) {{ mrow[r] = -INFINITY; lrow[r] = {flit(0.0, c)}; }}")

    # the chunk loop ---------------------------------------------------------------------------------
    loop: list[str] = [f"const int tn = min({chunk}, {sk} - j0);"]
    # 1. scores, P keys per panel
    zero = vp.splat(flit(0.0, c))

    def panels(n: int) -> list[str]:
        """n (1 or 2) adjacent panels: R accumulators each, q's scalars loaded once for all."""
        acc = [[f"a{r}" if i == 0 else f"a{r}_{i}" for i in range(n)] for r in range(rows)]
        lines = [f"const {kspace} {c}* kk = kp + (j0 / {p} + pj) * {d * p};"]
        lines += [f"{vp.t} {a} = {zero};" for row in acc for a in row]
        lines.append(f"for (int dd = 0; dd < {d}; ++dd) {{")
        lines += [f"    const {vp.t} kv{i} = {vload(f'dd + {i * d}', 'kk')};" for i in range(n)]
        for r in range(rows):
            lines.append(
                f"    {{ const {vp.t} qv = ({vp.t})(q{r}[dd]); "
                + " ".join(f"{a} = fma(qv, kv{i}, {a});" for i, a in enumerate(acc[r]))
                + " }"
            )
        lines.append("}")
        lines += [
            f"s.v[{r * cv} + pj + {i}] = {a} * {scale};" for r in range(rows) for i, a in enumerate(acc[r])
        ]
        return lines

    def vload(off: str, ptr: str) -> str:
        return f"{ptr}[{off}]" if p == 1 else f"vload{p}({off}, {ptr})"

    npj = f"(tn + {p - 1}) / {p}"
    loop.append("int pj = 0;")
    if rows <= 8:
        loop += [f"for (; pj + 1 < {npj}; pj += 2) {{", *indent(panels(2)), "}"]
    loop += [f"for (; pj < {npj}; ++pj) {{", *indent(panels(1)), "}"]

    # 2. mask, max, exp and sum per row
    def mask_add(w: V, t: str) -> str:
        if not has_mask:
            return ""
        if ms_key:
            return f" + {w.load('mr', t)}"
        return f" + {w.splat('mr[0]')}"

    row = [f"__private {c}* sr = s.f + r * {chunk};", f"__private {vp.t}* sv_r = s.v + r * {cv};"]
    if has_mask:
        row.append(f"const __global {c}* mr = mb + min(i0 + r, {sq - 1}) * {ms_row} + j0 * {ms_key};")
    row += [
        f"{vp.t} mxv = {vp.splat('-INFINITY')};",
        "int t = 0;",
        f"for (; t + {p} <= tn; t += {p}) {{",
        f"    const {vp.t} x = sv_r[t / {p}]{mask_add(vp, 't')};",
        f"    sv_r[t / {p}] = x;",
        "    mxv = fmax(mxv, x);",
        "}",
        *fold_lanes("max", vp, "mxv"),
        f"{c} mx = mxv_s;",
        "for (; t < tn; ++t) {",
        f"    const {c} x = sr[t]{mask_add(v1, 't')};",
        "    sr[t] = x;",
        "    mx = fmax(mx, x);",
        "}",
        f"const {c} mnew = fmax(mrow[r], mx);",
        # a row masked with -inf so far subtracts 0: its exponentials are 0, not NaN, for the next chunks
        f"const {c} msub = mnew == -INFINITY ? {flit(0.0, c)} : mnew;",
        f"{vp.t} sv = {zero};",
        "t = 0;",
        f"for (; t + {p} <= tn; t += {p}) {{",
        f"    const {vp.t} e = exp(sv_r[t / {p}] - msub);",
        f"    sv_r[t / {p}] = e;",
        "    sv += e;",
        "}",
        *fold_lanes("add", vp, "sv"),
        f"{c} sum = sv_s;",
        "for (; t < tn; ++t) {",
        f"    const {c} e = exp(sr[t] - msub);",
        "    sr[t] = e;",
        "    sum += e;",
        "}",
    ]
    if single:
        row += ["lrow[r] = sum;"]
    else:
        row += [
            f"const {c} corr = mrow[r] == -INFINITY ? {flit(0.0, c)} : exp(mrow[r] - mnew);",
            "crow[r] = corr;",
            "lrow[r] = lrow[r] * corr + sum;",
        ]
    row.append("mrow[r] = mnew;")
    loop += [f"for (int r = 0; r < {rows}; ++r) {{", *indent(row), "}"]

    # 3. probabilities times v, one column slice (or two) at a time
    if single:
        loop.append(f"{c} inv[{rows}];")
        loop.append(f"for (int r = 0; r < {rows}; ++r) inv[r] = {reciprocal('lrow[r]')};")
    for group in _slice_groups(dv, p, 2 if rows <= 8 else 1):
        vw = V(c, group[0][1])
        names = [[f"b{r}" if i == 0 else f"b{r}_{i}" for i in range(len(group))] for r in range(rows)]
        if single:
            init = [f"{vw.t} {b} = {vw.splat(flit(0.0, c))};" for row in names for b in row]
        else:
            init = [
                f"{vw.t} {b} = {vw.load('o', str(r * dv + c0))} * {vw.splat(f'crow[{r}]')};"
                for r, row in enumerate(names)
                for b, (c0, _) in zip(row, group, strict=True)
            ]
        acc = ["for (int t = 0; t < tn; ++t) {"]
        acc += [
            f"    const {vw.t} vv{i} = {vw.load('vb', f'(j0 + t) * {v_row} + {c0}')};"
            for i, (c0, _) in enumerate(group)
        ]
        for r, row in enumerate(names):
            acc.append(
                f"    {{ const {vw.t} pr = {vw.splat(f's.f[{r * chunk} + t]')}; "
                + " ".join(f"{b} = fma(pr, vv{i}, {b});" for i, b in enumerate(row))
                + " }"
            )
        acc.append("}")
        done = []
        for r, row in enumerate(names):
            for b, (c0, _) in zip(row, group, strict=True):
                if single:
                    st = vw.store(f"{b} * {vw.splat(f'inv[{r}]')}", "ob", f"(i0 + {r}) * {o_row} + {c0}")
                    done.append(f"if (i0 + {r} < {sq}) {st}")
                else:
                    done.append(vw.store(b, "o", str(r * dv + c0)))
        loop += ["{", *indent(init + acc + done), "}"]
    body += [f"for (int j0 = 0; j0 < {sk}; j0 += {chunk}) {{", *indent(loop), "}"]
    if not single:
        fin = [
            f"if (i0 + r >= {sq}) break;",
            f"const {c} inv = {reciprocal('lrow[r]')};",
            f"for (int i = 0; i < {dv}; ++i) ob[(i0 + r) * {o_row} + i] = o[r * {dv} + i] * inv;",
        ]
        body += [f"for (int r = 0; r < {rows}; ++r) {{", *indent(fin), "}"]

    params = [f"__global const {c}* restrict in{i}" for i in range(len(ctx.operands))]
    params.append(f"__global {c}* restrict out0")
    what = (
        f"{'safe ' if safe else ''}attention ({layout}) q {q} k {k} v {v}"
        f"{' with mask ' + str(ctx.operands[3]) if has_mask else ''}: "
        f"{rows} rows x {p}-key panels, {'one chunk' if single else f'chunks of {chunk} keys'}"
    )
    if k_local:
        kern = Kernel("", (bh * groups * wg,), (wg,))
        what += f", k panels in local memory ({groups} work-group{'s' if groups > 1 else ''} a head)"
    else:
        kern = launch_1d(bh * nrb)
    kern.source = kernel_source(what, params, body)
    schedule = {"rows": rows, "chunk": chunk, "panel": p, "k_local": int(k_local)}
    if k_local:
        return Lowered([kern], schedule={**schedule, "groups": groups})
    if layout == "bshd":  # [..., Sk, H, D] -> [..., ceil(Sk/P), H, D, P], outer dims to [..., H, Sk/P, D]
        perm = (*range(k.rank - 3), k.rank - 2, k.rank - 3, k.rank - 1)
        pack = {1: PackSpec((k.rank - 3,), (p,), perm, padding_value=0.0)}
    else:
        pack = {1: PackSpec((k.rank - 2,), (p,), padding_value=0.0)}
    return Lowered([kern], pack=pack, schedule=schedule)


# the schedule space (space.py): what tessel-tune may try ------------------------------------------------
@space("attention")
def attention_space(ctx: Ctx, default: Lowered) -> Space | None:
    """Query rows a work-item, keys a chunk (several chunks rescale the accumulators; one keeps them in
    registers) and, with one chunk, whether a work-group stages the key panels in local memory."""
    chosen = default.schedule
    if "rows" not in chosen:
        return None
    q, k = ctx.operands[:2]
    layout = str(ctx.sig.attrs.get("layout", "bhsd"))
    sq, sk = _view(q.dims, layout)[0][-2], _view(k.dims, layout)[0][-2]
    p = int(chosen["panel"])
    whole = math.ceil(sk / p) * p
    knobs = [Knob("rows", around(int(chosen["rows"]), 1, max(1, sq), (2, 4, 8, 16)),
                  "query rows a work-item"),
             Knob("chunk", around(int(chosen["chunk"]), p, whole, (64, 128, 256, 512, whole)),
                  "keys a chunk")]
    point: Point = {"rows": chosen["rows"], "chunk": chosen["chunk"]}
    constraints = [Constraint("rows x chunk private scores of at most 8192 floats",
                              lambda pt: pt["rows"] * pt["chunk"] <= 8192)]
    if not ctx.is_constant(1):
        knobs.append(Knob("k_local", (0, 1), "key panels staged in local memory (one chunk only)"))
        point["k_local"] = chosen["k_local"]
        limit = LOCAL_K_BYTES // (np.dtype(q.np_dtype).itemsize * p * _view(q.dims, layout)[0][-1])
        constraints.append(Constraint(
            "k_local with one chunk whose panels fit the local memory",
            lambda pt: not pt["k_local"] or (pt["chunk"] >= sk and sk <= limit * p)))
    return Space("attention/1", knobs, point, constraints)
