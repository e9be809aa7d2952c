"""OpenCL template of `attention`: softmax(q @ k^T * scale + mask) @ v in one kernel, the scores never
leaving the work-item.

k is packed first (`PackSpec`: [..., Sk, D] -> [..., ceil(Sk/P), D, P], P the vector width, keys padded
with zeros), so P consecutive keys' elements at one head-dim index are one vector load. One work-item owns
R query rows of one (batch, head) and walks the keys in chunks of T (a multiple of P), flash-attention
style:
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
Batch (and head) dims broadcast between q, k, v and the mask with zero strides. The schedule keys `rows`
(R) and `chunk` (T) override the defaults (8 rows, keys up to 512 per chunk).
"""

from __future__ import annotations

import math

import numpy as np

from .base import Ctx, Kernel, Lowered, NotLowerable, PackSpec, launch_1d, require_static, template
from .reduce import V, elem_ctype, flit, fold_lanes, indent, is_float, kernel_source, vec_width

ROWS = 8  # query rows per work-item: R vector accumulators in the two products
MAX_CHUNK = 512  # keys per chunk: the private scores are R * T elements


def _batch_strides(shape: tuple[int, ...], batch: tuple[int, ...], inner: int) -> list[int]:
    """Element strides of an operand over the result's batch dims (0 where it broadcasts); `inner` is the
    number of elements per batch entry."""
    own = list(shape[: len(shape) - 2])
    own = [1] * (len(batch) - len(own)) + own
    strides, acc = [], inner
    for d in reversed(own):
        strides.append(acc if d > 1 else 0)
        acc *= d
    return strides[::-1]


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
    batch = tuple(out_t.dims[:-2])
    sq, d = q.dims[-2], q.dims[-1]
    sk, dv = k.dims[-2], v.dims[-1]
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
    vp, v1 = V(c, p), V(c, 1)
    scale = flit(float(np.dtype(q.np_dtype).type(ctx.attr("scale"))), c)

    # batch offsets of each operand ------------------------------------------------------------------
    strides = {
        "in0": _batch_strides(q.dims, batch, sq * d),
        "in1": _batch_strides(k.dims, batch, npanel * d * p),
        "in2": _batch_strides(v.dims, batch, sk * dv),
    }
    if has_mask:
        m = ctx.operands[3]
        mdims = (1,) * (len(batch) + 2 - m.rank) + tuple(m.dims)
        ms_row = mdims[-1] if mdims[-2] > 1 else 0
        ms_key = 1 if mdims[-1] > 1 else 0
        strides["in3"] = _batch_strides(mdims, batch, mdims[-2] * mdims[-1])
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
    body += [
        f"const __global {c}* qb = in0 + off_in0;",
        f"const __global {c}* kp = in1 + off_in1;",
        f"const __global {c}* vb = in2 + off_in2;",
        *([f"const __global {c}* mb = in3 + off_in3;"] if has_mask else []),
        f"__global {c}* ob = out0 + bh * {sq * dv};",
    ]
    body += [f"const __global {c}* q{r} = qb + min(i0 + {r}, {sq - 1}) * {d};" for r in range(rows)]
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
        lines = [f"const __global {c}* kk = kp + (j0 / {p} + pj) * {d * p};"]
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
        f"{vp.t} sv = {zero};",
        "t = 0;",
        f"for (; t + {p} <= tn; t += {p}) {{",
        f"    const {vp.t} e = exp(sv_r[t / {p}] - mnew);",
        f"    sv_r[t / {p}] = e;",
        "    sv += e;",
        "}",
        *fold_lanes("add", vp, "sv"),
        f"{c} sum = sv_s;",
        "for (; t < tn; ++t) {",
        f"    const {c} e = exp(sr[t] - mnew);",
        "    sr[t] = e;",
        "    sum += e;",
        "}",
    ]
    if single:
        row += ["lrow[r] = sum;"]
    else:
        row += [
            f"const {c} corr = exp(mrow[r] - mnew);",
            "crow[r] = corr;",
            "lrow[r] = lrow[r] * corr + sum;",
        ]
    row.append("mrow[r] = mnew;")
    loop += [f"for (int r = 0; r < {rows}; ++r) {{", *indent(row), "}"]

    # 3. probabilities times v, one column slice (or two) at a time
    if single:
        loop.append(f"{c} inv[{rows}];")
        loop.append(f"for (int r = 0; r < {rows}; ++r) inv[r] = {flit(1.0, c)} / lrow[r];")
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
            f"    const {vw.t} vv{i} = {vw.load('vb', f'(j0 + t) * {dv} + {c0}')};"
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
                    st = vw.store(f"{b} * {vw.splat(f'inv[{r}]')}", "ob", f"(i0 + {r}) * {dv} + {c0}")
                    done.append(f"if (i0 + {r} < {sq}) {st}")
                else:
                    done.append(vw.store(b, "o", str(r * dv + c0)))
        loop += ["{", *indent(init + acc + done), "}"]
    body += [f"for (int j0 = 0; j0 < {sk}; j0 += {chunk}) {{", *indent(loop), "}"]
    if not single:
        fin = [
            f"if (i0 + r >= {sq}) break;",
            f"const {c} inv = {flit(1.0, c)} / lrow[r];",
            f"for (int i = 0; i < {dv}; ++i) ob[(i0 + r) * {dv} + i] = o[r * {dv} + i] * inv;",
        ]
        body += [f"for (int r = 0; r < {rows}; ++r) {{", *indent(fin), "}"]

    params = [f"__global const {c}* restrict in{i}" for i in range(len(ctx.operands))]
    params.append(f"__global {c}* restrict out0")
    what = (
        f"attention q {q} k {k} v {v}{' with mask ' + str(ctx.operands[3]) if has_mask else ''}: "
        f"{rows} rows x {p}-key panels, {'one chunk' if single else f'chunks of {chunk} keys'}"
    )
    kern = launch_1d(bh * nrb)
    kern.source = kernel_source(what, params, body)
    pack = {1: PackSpec((k.rank - 2,), (p,), padding_value=0.0)}
    return Lowered([kern], pack=pack, schedule={"rows": rows, "chunk": chunk, "panel": p})
