"""`matmul` and `gemm`: a register-blocked micro-kernel over packed panels (DESIGN §5).

Each work-item computes `rows` output rows x one `float<cols>` column (cols = 16 on AVX-512): per k it loads
one vector of the B panel and does `rows` FMAs with broadcast A scalars, everything fully unrolled, no
local memory, no barriers. B is packed to column panels [.., N/cols, K, cols] (a `pack` op: once at load
time when B is a constant). A is read in one of three ways (`Gemm.a_mode`):
- "panel": row panels [.., M/rows, K, rows] (zero-padded, so the loop never guards an M-tail): packed at
  load time when A is a constant, else by a first kernel into scratch `tmp0`, which pays when A is large
  (its rows then stream from one contiguous panel);
- "rows": A as it is, [.., M, K] row-major, each of the `rows` rows through its own pointer (clamped to
  row M-1 in the tail block, whose extra rows are never stored): no packing launch, which wins for small
  A (a transformer's 64-token activations, where the pack kernel costs as much as the product);
- "cols": A stored transposed ([.., K, M], gemm's trans_a), read the same way with stride M.
The schedule key `pack_a` (0 or 1) overrides the choice. Alpha, beta * C and an optional fused `epilogue`
are applied per stored vector. Two more fusion hooks (`Tail`): `split` stores column ranges of Y to
separate results (merged Q/K/V projections), and `rows` runs code on whole output rows after the product:
each work-item then computes every column block of its rows in turn (no barrier: a work-group version ran
7x slower on PoCL) and the hook's code runs on those rows (a fused layer_norm).
A prologue hook (`ANorm`) normalizes A's rows as they are read, a layer_norm over K fused in front (pre-LN
transformers, ConvNeXt): A is read as is ("rows"); each work-item first finds the mean and 1/sqrt(var +
eps) of its rows (two passes, as the reference computes them), then the main loop multiplies A by B
scaled by the norm's scale at k and sums that scaled B and bias[k] * B beside it (three vector ops per k
shared by all the rows, the rows' FMAs unchanged: subtracting the mean from each A scalar instead ran
2.6x slower); the stored value is (acc - mean * sum(scale * B)) * rstd + sum(bias * B). The subtraction
loses float32 precision only when a row's mean is ~1e3 times its deviation. The normalized A is never
written.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ....ir.types import TensorType
from ..space import Constraint, Knob, Point, Space, around, space
from .base import Ctx, Kernel, Lowered, NotLowerable, PackSpec, require_static, template
from .reducers import V, fold_lanes

# A fused epilogue: (value expression, flat output index of its first lane, lanes) -> new expression of
# the same type. `value` is a `float` (lanes == 1) or a `float<lanes>` whose lanes are consecutive output
# elements starting at `index`; e.g. ReLU is `lambda v, i, n: f"fmax({v}, 0.0f)"`.
Epilogue = Callable[[str, str, int], str]


@dataclass(frozen=True)
class AcrossChannels:
    """An epilogue (`each`, as Epilogue) that can also evaluate the lanes of one NCHW pixel's channel
    vector at once: `across(value, index, lanes)` with lane j at index + j * H * W (the chain's helper
    with a plane's lane step). A conv storing NCHW applies `across` to a pixel's whole vector and stores
    its lanes, where `each` would be called lane by lane: a GELU over 14 float16 accumulators was 224
    inlined scalar chains, 3.1 s of PoCL's compile of one conv kernel."""

    each: Epilogue
    across: Epilogue

    def __call__(self, value: str, index: str, lanes: int) -> str:
        return self.each(value, index, lanes)


def check_float32(op: str, *types: TensorType) -> None:
    require_static(*types)
    for t in types:
        if t.dtype != "f32":
            raise NotLowerable(f"'{op}' OpenCL template supports f32 only, got {t.dtype}")


def pick_rows(m: int, lo: int = 14, hi: int = 24, prefer: int = 16) -> int:
    """Micro-kernel rows for an M of m: all of it when small, else the size in [lo, hi] padding M least."""
    if m <= hi:
        return m
    return min(range(lo, hi + 1), key=lambda r: (math.ceil(m / r) * r, abs(r - prefer)))


def pick_cols(n: int, width: int = 16) -> int:
    """Vector width along N: `width`, or the smallest power of two covering a narrower N."""
    return width if n > width // 2 else 1 << max(0, (n - 1).bit_length())


def vtype(cols: int) -> str:
    return "float" if cols == 1 else f"float{cols}"


def vload(cols: int, ptr: str) -> str:
    return f"*({ptr})" if cols == 1 else f"vload{cols}(0, {ptr})"


B_STORAGE = {"f32": "float", "f16": "half", "bf16": "ushort"}
"""The C type B is stored as: half-precision weights are widened to float on load (vload_half is core
OpenCL, needing no cl_khr_fp16; bf16 is the high half of a float)."""


def load_b(dtype: str, cols: int, ptr: str) -> str:
    """`cols` floats of B at `ptr` (a pointer to its storage type)."""
    if dtype == "f16":
        return f"vload_half(0, {ptr})" if cols == 1 else f"vload_half{cols}(0, {ptr})"
    if dtype == "bf16":
        return (f"as_float((uint)(*({ptr})) << 16)" if cols == 1
                else f"as_float{cols}(convert_uint{cols}(vload{cols}(0, {ptr})) << 16)")
    return vload(cols, ptr)


def check_operands(op: str, ctx: Ctx, *types: TensorType) -> None:
    """f32 throughout, except B (operand 1) may be f16 / bf16 weights: a constant (packed at load time)."""
    b = ctx.operands[1]
    if b.dtype in ("f16", "bf16") and ctx.operands[0].dtype == "f32" and ctx.is_constant(1):
        types = tuple(t for t in types if t is not b)
    check_float32(op, *types)


def pick_local(groups_total: int, want: int = 4, min_groups: int = 16) -> int:
    local = want
    while local > 1 and (groups_total % local or groups_total // local < min_groups):
        local //= 2
    return local


def store_vector(cols: int, acc: str, out: str, index: str, limit: str | None,
                 value: Callable[[str, str, int], str], indent: str, at: str | None = None) -> list[str]:
    """Store `acc` (float<cols>) at out[index..] (out[at..] when given: `index` is then only the flat index
    `value` sees), lanes at or past `limit` (a C bound on the lane count, None when all lanes are in range)
    dropped; `value(expr, index, lanes)` gives what is stored."""
    if at is not None:
        assert limit is None, "a split store has whole vectors"
        where = at
    else:
        where = index
    if cols == 1:
        return [f"{indent}{out}[{where}] = {value(acc, index, 1)};"]
    full = f"{indent}vstore{cols}({value(acc, index, cols)}, 0, {out} + {where});"
    if limit is None:
        return [full]
    return [f"{indent}if ({limit} >= {cols}) {{", "    " + full,
            f"{indent}}} else {{",
            f"{indent}    float t[{cols}];",
            f"{indent}    vstore{cols}({acc}, 0, t);",
            f"{indent}    for (int j = 0; j < {limit}; ++j)",
            f"{indent}        {out}[{index} + j] = {value('t[j]', f'{index} + j', 1)};",
            f"{indent}}}"]


@dataclass
class Tail:
    """What happens after the micro-kernel's stores. `split`: Y's last axis cut into results `Y0..` of these
    sizes (each a multiple of cols). `rows(g)`: C lines run once the work-item has stored every column of
    its row block mb of batch b in Y; buffers they read besides Y are the caller's to append to the
    parameters (fused.finish)."""

    split: tuple[int, ...] = ()
    rows: Callable[[Gemm], list[str]] | None = None


NO_TAIL = Tail()


@dataclass(frozen=True)
class ANorm:
    """A layer_norm over K applied to A's rows as they are read: `scale` and `bias` are C expressions of
    the norm's scale and bias at k (`{k}` stands for the index; bias None: no bias), `eps` its epsilon."""

    scale: str
    bias: str | None
    eps: float


@dataclass
class Gemm:
    """One (batched) contraction Y[b, m, n] = epi(sum_k A[b, m, k] * B[b, k, n]) in the packed layouts."""

    batch: tuple[int, ...]  # the result's batch dims
    a_batch_strides: tuple[int, ...]  # A panels' element stride per result batch dim (0: broadcast)
    b_batch_strides: tuple[int, ...]
    m: int
    k: int
    n: int
    rows: int
    cols: int
    a_mode: str = "panel"  # how A is read: "panel" | "rows" | "cols" (see the module docstring)
    b_type: str = "f32"  # B's storage: f32, or f16 / bf16 weights widened to float as they are loaded
    a_norm: ANorm | None = None  # A's rows normalized as they are read (mode "rows" only)
    vcols: int = 1  # column vectors (B panels) a work-item: each A scalar loaded feeds vcols FMAs

    @property
    def nbw(self) -> int:
        """Work-items along N: the column panels, vcols a work-item."""
        return math.ceil(self.nb / self.vcols)

    @property
    def mb(self) -> int:
        return math.ceil(self.m / self.rows)

    @property
    def nb(self) -> int:
        return math.ceil(self.n / self.cols)


def batch_offset(var: str, batch: Sequence[int], strides: Sequence[int]) -> str:
    """C expression of the element offset of flat batch index `var` given per-dim strides."""
    terms, inner = [], 1
    for d, s in reversed(list(zip(batch, strides, strict=True))):
        if s and d > 1:
            terms.append(f"(({var} / {inner}) % {d}) * {s}" if inner > 1 else f"({var} % {d}) * {s}")
        inner *= d
    return " + ".join(reversed(terms)) or "0"


def pack_a_source(g: Gemm, trans: bool, a_batch: tuple[int, ...]) -> Kernel:
    """A [.., M, K] (or [.., K, M] when `trans`) -> row panels [.., M/rows, K, rows], zero-padded."""
    r, m, k = g.rows, g.m, g.k
    nbatch = math.prod(a_batch)
    src = f"""// pack A into row panels: [{nbatch}][{m}][{k}]{' (stored transposed)' if trans else ''} -> \
[{nbatch}][{g.mb}][{k}][{r}], rows >= {m} zero
__kernel void KERNEL(__global const float* restrict A, __global float* restrict P) {{
    const int k = get_global_id(0);
    const int mb = get_global_id(1);
    const int b = get_global_id(2);
    if (k >= {k}) return;
    const __global float* a = A + b * {m * k};
    __global float* p = P + ((b * {g.mb} + mb) * {k} + k) * {r};
    for (int r = 0; r < {r}; ++r) {{
        const int m = mb * {r} + r;
        p[r] = m < {m} ? a[{'k * ' + str(m) + ' + m' if trans else 'm * ' + str(k) + ' + k'}] : 0.0f;
    }}
}}
"""
    local = pick_local(math.ceil(k / 16) * 16, 16, 1)
    return Kernel(src, (math.ceil(k / local) * local, g.mb, nbatch), (local, 1, 1), ("in0", "tmp0"))


def a_pointers(g: Gemm) -> list[str]:
    """Declarations of the micro-kernel's A pointers (after `const int mb`, `b`)."""
    r, m, k = g.rows, g.m, g.k
    off = batch_offset("b", g.batch, g.a_batch_strides)
    if g.a_mode == "panel":
        return [f"    const __global float* a = A + {off} + mb * {k * r};"]
    lines = [f"    const __global float* a = A + {off};"]
    step = k if g.a_mode == "rows" else 1
    for i in range(r):
        # rows past M (in the tail block only) read row M-1; their results are never stored
        if g.mb == 1:
            row = str(min(i, m - 1))
        elif m % r and i >= m % r:
            row = f"min(mb * {r} + {i}, {m - 1})"
        else:
            row = f"mb * {r} + {i}"
        lines.append(f"    const __global float* a_{i} = a + ({row}) * {step};")
    return lines


def a_scalar(g: Gemm, s: int, i: int, kk: str) -> str:
    """The C expression of A[row i of the tile, k = kk] (`a{s}` is the panel row of step s)."""
    if g.a_mode == "panel":
        return f"a{s}[{i}]"
    return f"a_{i}[{kk}]" if g.a_mode == "rows" else f"a_{i}[({kk}) * {g.m}]"


def row_stats(g: Gemm) -> list[str]:
    """With `g.a_norm`: each tile row's mean and 1/sqrt(var + eps) over K (`mean_i`, `rstd_i`), two passes
    as the reference computes them, 16, 8 or 4 lanes at a time when K allows (lanes folded by halves, as
    the reduction templates fold)."""
    if g.a_norm is None:
        return []
    k = g.k
    v = V("float", 16 if k % 16 == 0 else 8 if k % 8 == 0 else 4 if k % 4 == 0 else 1)
    total = flit(float(k))
    out = [f"    // A's rows normalized as read: mean and 1/sqrt(var + {g.a_norm.eps:g}) over K = {k}"]
    for i in range(g.rows):
        ld = v.load(f"a_{i}", "j")
        out += [f"    float mean_{i}, rstd_{i};",
                "    {",
                f"        {v.t} s = 0.0f, q = 0.0f;",
                f"        for (int j = 0; j < {k}; j += {v.w}) s += {ld};",
                *(f"        {ln}" for ln in fold_lanes("add", v, "s")),
                f"        mean_{i} = s_s / {total};",
                f"        for (int j = 0; j < {k}; j += {v.w}) {{",
                f"            const {v.t} d = {ld} - mean_{i};",
                "            q += d * d;",
                "        }",
                *(f"        {ln}" for ln in fold_lanes("add", v, "q")),
                f"        rstd_{i} = 1.0f / sqrt(q_s / {total} + {flit(g.a_norm.eps)});",
                "    }"]
    return out


def gemm_source(g: Gemm, *, a_arg: str, bias: Callable[[str, int, str, str], str] | None = None,
                epilogue: Epilogue | None = None, n_inputs: int = 2, tail: Tail = NO_TAIL) -> str:
    """The micro-kernel. `bias(value, lanes, m, n0)` rewrites each stored value (alpha and beta * C of
    gemm), `epilogue` the fusion hook, `tail` the split / row hooks. Arguments: A (panels or as is), B
    panels, then `in2..`, then Y (or Y0.. for a split)."""
    r, c, m, k, n, v = g.rows, g.cols, g.m, g.k, g.n, g.vcols
    if v > 1 and (tail.split or tail.rows or g.a_norm is not None):
        raise NotLowerable("several column vectors a work-item with a split, row tail or normalized A")
    vt = vtype(c)
    # independent accumulator sets over k when few rows leave the FMA chain latency-bound (GEMV)
    ksplit = 4 if r == 1 else 2 if r <= 3 else 1
    bt = B_STORAGE[g.b_type]
    ins = ["__global const float* restrict A", f"__global const {bt}* restrict B"]
    ins += [f"__global const float* restrict in{i}" for i in range(2, n_inputs)]
    outs = ([f"__global float* restrict Y{j}" for j in range(len(tail.split))] if tail.split
            else ["__global float* restrict Y"])
    a_shape = {"panel": f"panels [.., {g.mb}, {k}, {r}]", "rows": f"[.., {m}, {k}]",
               "cols": f"[.., {k}, {m}] (transposed)"}[g.a_mode]
    lines = [f"// Y[{', '.join(map(str, g.batch + (m, n)))}] = A[.., {m}, {k}] @ B[.., {k}, {n}]: "
             f"{r} rows x {'one' if v == 1 else v} {vt} column{'s' if v > 1 else ''} per work-item",
             f"// A {a_shape} ({a_arg}), B panels [.., {g.nb}, {k}, {c}]",
             f"__kernel void KERNEL({', '.join(ins + outs)}) {{",
             "    const int mb = get_global_id(0);",
             *([] if tail.rows else ["    const int nb = get_global_id(1);"]),
             "    const int b = get_global_id(2);",
             f"    if (mb >= {g.mb}) return;",
             *a_pointers(g),
             *(row_stats(g) if tail.rows else [])]  # once for every column block the work-item does
    head = len(lines)
    b_off = batch_offset('b', g.batch, g.b_batch_strides)
    if v == 1:
        lines.append(f"    const __global {bt}* bp = B + {b_off} + nb * {k * c};")
    for j in range(v if v > 1 else 0):  # the last work-item's panels past B's re-read its last one
        panel = f"nb * {v} + {j}" if not g.nb % v or j < g.nb % v else f"min(nb * {v} + {j}, {g.nb - 1})"
        lines.append(f"    const __global {bt}* bp{j} = B + {b_off} + ({panel}) * {k * c};")
    # accs[s][i][j]: k-split set s, tile row i, column vector j
    accs = [[[f"acc{s}_{i}" if v == 1 else f"acc{s}_{i}_{j}" for j in range(v)] for i in range(r)]
            for s in range(ksplit)]
    for s in range(ksplit):
        lines.append(f"    {vt} {', '.join(f'{a} = 0.0f' for row in accs[s] for a in row)};")
    nm = g.a_norm
    if nm is not None:
        lines.append(f"    {vt} sg = 0.0f;  // sum_k scale[k] * B[k, n]")
        if nm.bias is not None:
            lines.append(f"    {vt} cb = 0.0f;  // sum_k bias[k] * B[k, n]")

    def step(s: int, kk: str) -> list[str]:
        if v == 1:
            out = [f"        const {vt} b{s} = {load_b(g.b_type, c, f'bp + ({kk}) * {c}')};"]
        else:
            out = [f"        const {vt} b{s}_{j} = {load_b(g.b_type, c, f'bp{j} + ({kk}) * {c}')};"
                   for j in range(v)]
        if g.a_mode == "panel":
            out.append(f"        const __global float* a{s} = a + ({kk}) * {r};")
        bv = f"b{s}"
        if nm is not None:  # A @ (scale * B), its column sums and bias @ B beside it: shared by the rows
            out.append(f"        const {vt} g{s} = b{s} * {nm.scale.format(k=kk)};")
            out.append(f"        sg += g{s};")
            if nm.bias is not None:
                out.append(f"        cb = fma(({vt})({nm.bias.format(k=kk)}), b{s}, cb);")
            bv = f"g{s}"
        if v == 1:
            out += [f"        {accs[s][i][0]} = fma({a_scalar(g, s, i, kk)}, {bv}, {accs[s][i][0]});"
                    for i in range(r)]
        else:  # one A scalar a row, loaded once for the row's v FMAs
            out += [f"        {{ const float x = {a_scalar(g, s, i, kk)}; "
                    + " ".join(f"{a} = fma(x, b{s}_{j}, {a});" for j, a in enumerate(accs[s][i])) + " }"
                    for i in range(r)]
        return out

    main = k - k % ksplit
    lines.append(f"    for (int k = 0; k < {main}; k += {ksplit}) {{")
    for s in range(ksplit):
        lines += step(s, f"k + {s}" if s else "k")
    lines.append("    }")
    if main < k:
        lines.append(f"    for (int k = {main}; k < {k}; ++k) {{")
        lines += step(0, "k")
        lines.append("    }")
    for s in range(1, ksplit):
        lines += [f"    {accs[0][i][j]} += {accs[s][i][j]};" for i in range(r) for j in range(v)]
    if nm is not None:  # ((A - mean) @ (scale * B)) * rstd + bias @ B
        if not tail.rows:  # after the product: nothing live across its loop but the accumulators
            lines += row_stats(g)
        cb = " + cb" if nm.bias is not None else ""
        lines += [f"    {row[0]} = ({row[0]} - mean_{i} * sg) * rstd_{i}{cb};"
                  for i, row in enumerate(accs[0])]
    # epilogue: row m of the tile goes to Y[b][m][n0 ..]
    for j in range(v):
        lines += store_rows(g, j, [row[j] for row in accs[0]], bias, epilogue, tail)
    if tail.rows:  # every column block of the row block in turn, then the rows
        body = ["    " + ln for ln in lines[head:]]
        lines[head:] = [f"    for (int nb = 0; nb < {g.nb}; ++nb) {{", *body, "    }"]
        lines += tail.rows(g)
    lines.append("}")
    return "\n".join(lines) + "\n"


def store_rows(g: Gemm, j: int, accs: list[str], bias: Callable[[str, int, str, str], str] | None,
               epilogue: Epilogue | None, tail: Tail) -> list[str]:
    """Stores of the tile's rows (`accs`, one per row) for its column vector j: bias, epilogue, split."""
    r, c, m, n, v = g.rows, g.cols, g.m, g.n, g.vcols
    lines: list[str] = []
    if v == 1:
        lines.append(f"    const int n0 = nb * {c};")
    else:  # a block of its own per column vector (n0 is its first column), skipped past B's last panel
        lines.append(f"    if (nb * {v} + {j} < {g.nb}) {{" if g.nb % v and j >= g.nb % v else "    {")
        lines.append(f"    const int n0 = (nb * {v} + {j}) * {c};")
    limit = None if n % c == 0 else f"{n} - n0"
    out, at = "Y", None
    if tail.split:  # the result holding column n0, and n0's column in it
        if any(s % c for s in tail.split):
            raise NotLowerable(f"split sizes {list(tail.split)} are not whole vectors of {c}")
        lines.append("    __global float* Ys;")
        lines.append("    int ns, ls;")
        start = 0
        for t, size in enumerate(tail.split):
            cond = f"if (n0 < {start + size}) " if t < len(tail.split) - 1 else ""
            lines.append(f"    {'else ' if t else ''}{cond}{{ Ys = Y{t}; ns = n0 - {start}; ls = {size}; }}")
            start += size
        out = "Ys"
    for i in range(r):
        row = f"mb * {r} + {i}"
        guard = m % r != 0 and i >= m % r and g.mb > 0

        def val(x: str, idx: str, lanes: int, row: str = row) -> str:
            if bias is not None:
                x = bias(x, lanes, row, "n0" if lanes > 1 else f"(({idx}) % {n})")
            return epilogue(x, idx, lanes) if epilogue else x

        ind = "        " if guard else "    "
        if guard:
            lines.append(f"    if ({row} < {m}) {{")
        if tail.split:
            at = f"(b * {m} + {row}) * ls + ns"
        lines += store_vector(c, accs[i], out, f"(b * {m} + {row}) * {n} + n0", limit, val, ind, at)
        if guard:
            lines.append("    }")
    if v > 1:
        lines.append("    }")
    return lines


def flit(x: float) -> str:
    """A float as an OpenCL C literal."""
    return f"{float(x)!r}f"


def row_strides(dims: Sequence[int], unit: int) -> list[int]:
    out, acc = [], unit
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return out[::-1]


def aligned_strides(batch: Sequence[int], own: Sequence[int], unit: int) -> tuple[int, ...]:
    """Per result batch dim, the stride of an operand's (right-aligned, broadcast) batch dims in `unit`s."""
    strides = row_strides(own, unit)
    lead = len(batch) - len(own)
    return tuple(0 if i < lead or own[i - lead] == 1 else strides[i - lead] for i in range(len(batch)))


def tile_params(ctx: Ctx, m: int, n: int, split: Sequence[int] = ()) -> tuple[int, int]:
    width = max(1, min(16, ctx.device.vector_width))
    if ctx.device.vector_registers < 32:  # few registers: a column of two (AVX2's 6x16 micro-kernel)
        width = min(16, 2 * width)
    if split:  # every piece whole vectors
        width = min(width, math.gcd(*split) & -math.gcd(*split) or 1)
    cols = int(ctx.schedule.get("cols", pick_cols(n, width)))
    hi = min(24, ctx.device.accumulators(cols))
    rows = int(ctx.schedule.get("rows", pick_rows(m, min(14, hi), hi, min(16, hi))))
    if not 1 <= rows <= 32:
        raise NotLowerable(f"'{ctx.op_name}' schedule rows={rows} is outside 1..32")
    if cols not in (1, 2, 4, 8, 16):
        raise NotLowerable(f"'{ctx.op_name}' schedule cols={cols} is not 1, 2, 4, 8 or 16")
    return rows, cols


FMA_PER_LOAD = 2.0
"""FMAs a micro-kernel step feeds from each load (a B vector or a broadcast A scalar) past which more
brings nothing: x86 cores load and FMA at about the same rate (two of each a cycle), and one column vector
of `rows` rows does rows FMAs for rows + 1 loads. Two columns share each broadcast: SGEMM 1024^3 on an
Intel Xeon (PoCL, AVX-512) 220 GFLOP/s with 16 rows x one float16, 305-320 with 12-14 rows x two, 303-331
with 8 x 3 or 6 x 4."""


ROW_BLOCKS_CACHED = 8
"""Row blocks of A past which B's panels, read once by each block, are mostly re-read from the caches: two
columns a work-item may then take fewer rows (more blocks). Below it B may be weights streamed from memory
by each block (a Winograd GEMM on 16 tiles, a 16-token matmul: one block of 16 rows, where two blocks of 12
read the 128 MiB of the weight-streaming calibration at 8.8 instead of 13.2 GB/s)."""


def block_cost(m: int, panels: int, rows: int, vcols: int, per: int) -> float:
    """Relative time of a contraction's micro-kernels: the padded work over how well each step's loads
    feed its FMAs (rows x vcols FMAs of `per` registers each, for vcols x per vector and `rows` scalar
    loads)."""
    work = math.ceil(m / rows) * rows * math.ceil(panels / vcols) * vcols
    return work / min(FMA_PER_LOAD, rows * vcols * per / (vcols * per + rows))


def pick_vcols(ctx: Ctx, g: Gemm, tail: Tail = NO_TAIL, batch: int = 1) -> None:
    """Set g.vcols (and g.rows to fit) from the schedule, else two column vectors a work-item where
    block_cost says they pay and the registers hold two columns of at least 8 rows; one with a split or row
    tail or a normalized A (their hooks store one column vector at a time), or when the schedule fixes the
    rows alone."""
    want = ctx.schedule.get("vcols")
    per = ctx.device.registers_per(g.cols)
    if want is not None:
        if int(want) not in (1, 2, 3, 4):
            raise NotLowerable(f"'{ctx.op_name}' schedule vcols={want} is not 1 to 4")
        if int(want) > 1 and (tail.split or tail.rows or g.a_norm is not None):
            raise NotLowerable(f"'{ctx.op_name}' schedule vcols={want}: a split, row tail or normalized A "
                               "stores one column vector a work-item")
        g.vcols = int(want)
        if "rows" not in ctx.schedule:
            g.rows = min(g.rows, max(1, ctx.device.accumulators(g.cols, g.vcols) // g.vcols))
        return
    if tail.split or tail.rows or g.a_norm is not None or "rows" in ctx.schedule or g.nb < 2:
        return
    hi = min(g.rows, ctx.device.accumulators(g.cols, 2) // 2)
    if hi < min(8, g.m):
        return
    rows = pick_rows(g.m, min(12, hi), hi, hi)
    blocks, before = math.ceil(g.m / rows), math.ceil(g.m / g.rows)
    if blocks > before and before < ROW_BLOCKS_CACHED:
        return  # each row block reads all of B: more blocks would read weights streamed a few times more
    if blocks * math.ceil(g.nb / 2) * batch < 2 * ctx.device.compute_units:
        return  # too few work-items to share out
    if block_cost(g.m, g.nb, rows, 2, per) < block_cost(g.m, g.nb, g.rows, 1, per):
        g.rows, g.vcols = rows, 2


DIRECT_A_MAX = 128 * 1024
"""A non-constant A of at most this many elements is always read as is: the pack launch would cost more
than the strided reads save (64x128 @ 128x128 on PoCL: 21 us as is, 32 us packed)."""
LONG_K = 2048
"""Past this K (or when the rows alias in the L1 cache) a larger A is packed: PoCL on a CPU loses up to
half its speed to `rows` read streams that thrash one L1 set or outrun the prefetchers (1024^3: 192 vs
280 GFLOP/s), while unaliased shapes gain from skipping the copy (3136x576 @ 576x64: 283 vs 114)."""


def set_loads(stride_bytes: int, count: int, line: int = 64, sets: int = 64) -> Counter[int]:
    """How many of `count` accesses `stride_bytes` apart fall in each L1 set (64-byte lines, a 4 KiB way)."""
    return Counter((i * stride_bytes // line) % sets for i in range(count))


def l1_sets(stride_bytes: int, count: int) -> int:
    """How many L1 sets `count` accesses `stride_bytes` apart fall in."""
    return len(set_loads(stride_bytes, count))


def streams_per_set(stride_bytes: int, count: int) -> int:
    """The most of `count` read streams `stride_bytes` apart that share one L1 set."""
    return max(set_loads(stride_bytes, count).values())


L1_STREAMS = 8
"""At most this many of A's row streams may share one L1 set when A is read as is. More thrash the set
(with B's stream beside them) and PoCL on this Zen 4 (48 KiB, 12-way L1) runs at a third of its speed:
32x1024 @ 1024x256 with 16 rows, all 4 KiB apart, 65-94 GFLOP/s, with 8 rows 166-180; 48x2048 @ 2048x256
39-78 against 102-189 (profiling events, bench/micro_gemm_conv.py's small-M cases)."""


def aliased(g: Gemm) -> bool:
    """Whether the micro-kernel's row streams over A, read as is by rows, thrash an L1 set (read by
    columns, a transposed A's rows share each line)."""
    return streams_per_set(4 * g.k, g.rows) > L1_STREAMS


def pack_pays(g: Gemm, trans_a: bool, a_elems: int) -> bool:
    """Whether a non-constant A is better packed into row panels by a first kernel than read as is."""
    if a_elems <= DIRECT_A_MAX:  # small: only a long product over thrashing rows repays the launch
        return g.k > LONG_K and not trans_a and aliased(g)
    return g.k > LONG_K or l1_sets(4 * (g.m if trans_a else g.k), g.rows) <= 1


def unaliased_rows(g: Gemm) -> int:
    """The most rows, at most g.rows, whose streams over A read as is by rows leave every L1 set at most
    L1_STREAMS deep (L1_STREAMS rows always qualify), evened over the blocks that many rows need (17 rows
    as 9 + 8, not 16 + 1)."""
    ok = [r for r in range(g.rows, 0, -1) if streams_per_set(4 * g.k, r) <= L1_STREAMS]
    if ok[0] == g.rows:
        return g.rows
    even = math.ceil(g.m / math.ceil(g.m / ok[0]))
    return even if even in ok else ok[0]


def choose_a_mode(ctx: Ctx, g: Gemm, trans_a: bool, a_elems: int) -> tuple[str, bool]:
    """How A is read ("panel" when packed, at load time if constant, else by a first kernel; "rows" or
    "cols" as is) and whether that was a choice (a non-constant A that is not already its own panels)."""
    as_is = "cols" if trans_a and g.m > 1 else "rows"
    if g.rows == 1 and as_is == "rows":
        return "rows", False  # one-row panels are A itself
    if ctx.is_constant(0):
        return "panel", False
    want = ctx.schedule.get("pack_a")
    if want is not None and want not in (0, 1):
        raise NotLowerable(f"'{ctx.op_name}' schedule pack_a={want} is not 0 or 1")
    pack = pack_pays(g, trans_a, a_elems) if want is None else bool(want)
    return ("panel" if pack else as_is), True


def lower_contraction(ctx: Ctx, g: Gemm, *, a_batch: tuple[int, ...], trans_a: bool, trans_b: bool,
                      b_rank: int, bias: Callable[[str, int, str, str], str] | None,
                      epilogue: Epilogue | None, tail: Tail = NO_TAIL) -> Lowered:
    """Kernels, packing and scratch of one contraction whose A and B are operands 0 and 1; `a_batch` are
    A's own batch dims (g.a_batch_strides is filled in here, once the way A is read is known)."""
    kernels: list[Kernel] = []
    pack: dict[int, PackSpec] = {}
    scratch: list[int] = []
    a_rank = ctx.operands[0].rank
    if g.a_norm is not None:  # the normalization reads A's rows as they are
        if trans_a:
            raise NotLowerable("A's rows are normalized over K, but A is stored transposed")
        g.a_mode, chosen = "rows", False
    else:
        g.a_mode, chosen = choose_a_mode(ctx, g, trans_a, math.prod(a_batch) * g.m * g.k)
    if g.a_mode == "rows" and "rows" not in ctx.schedule:
        g.rows = unaliased_rows(g)
    pick_vcols(ctx, g, tail, math.prod(g.batch))
    if g.a_mode != "panel":
        g.a_batch_strides = aligned_strides(g.batch, a_batch, g.m * g.k)
        a_arg = "A itself"
    else:
        g.a_batch_strides = aligned_strides(g.batch, a_batch, g.mb * g.k * g.rows)
        if ctx.is_constant(0):
            pack[0] = (PackSpec((a_rank - 1,), (g.rows,), (1, 0)) if trans_a
                       else PackSpec((a_rank - 2,), (g.rows,)))
            a_arg = "packed at load time"
        else:
            kernels.append(pack_a_source(g, trans_a, a_batch))
            scratch.append(4 * math.prod(a_batch) * g.mb * g.k * g.rows)
            a_arg = "packed by the first kernel into tmp0"
    # B column panels [.., N/cols, K, cols]
    if g.cols > 1 or g.n > 1:
        if trans_b:
            pack[1] = PackSpec((b_rank - 2,), (g.cols,))
        else:
            perm = tuple(range(b_rank - 2)) + (b_rank - 1, b_rank - 2)
            pack[1] = PackSpec((b_rank - 1,), (g.cols,), perm)
    n_in = len(ctx.operands)
    src = gemm_source(g, a_arg=a_arg, bias=bias, epilogue=epilogue, n_inputs=n_in, tail=tail)
    nbatch = math.prod(g.batch)
    outs = tuple(f"out{j}" for j in range(max(1, len(tail.split))))
    args = ("tmp0" if scratch else "in0", "in1", *(f"in{i}" for i in range(2, n_in)), *outs)
    nb = 1 if tail.rows else g.nbw  # a row tail's work-item computes every column block of its rows
    local = int(ctx.schedule.get("local", 4))
    while "local" not in ctx.schedule and local > 1 and math.ceil(g.mb / local) * nb * nbatch < 16:
        local //= 2
    if local < 1:
        raise NotLowerable(f"'{ctx.op_name}' schedule local={local} must be positive")
    kernels.append(Kernel(src, (math.ceil(g.mb / local) * local, nb, nbatch), (local, 1, 1), args))
    schedule = {"rows": g.rows, "cols": g.cols, **({"vcols": g.vcols} if g.vcols > 1 else {}),
                **({"local": local} if local != 4 else {}),
                **({"pack_a": int(g.a_mode == "panel")} if chosen else {})}
    return Lowered(kernels, scratch, pack, schedule)


@template("matmul")
def matmul(ctx: Ctx) -> Lowered:
    return lower_matmul(ctx)


def lower_matmul(ctx: Ctx, epilogue: Epilogue | None = None, tail: Tail = NO_TAIL,
                 a_norm: ANorm | None = None) -> Lowered:
    """numpy matmul: batch dims broadcast; a 1-D A is one row, a 1-D B one column."""
    a, b = ctx.operands
    check_operands("matmul", ctx, a, b, *ctx.results)
    ad = a.dims if a.rank >= 2 else (1, a.dims[0])
    bd = b.dims if b.rank >= 2 else (b.dims[0], 1)
    (m, k), n = ad[-2:], bd[-1]
    ab, bb = ad[:-2], bd[:-2]
    batch = tuple(ctx.results[0].dims[:len(ctx.results[0].dims) - (a.rank >= 2) - (b.rank >= 2)])
    if ab and not bb and b.rank >= 2:
        # one B for every batch: A's batch dims are more rows of one GEMM (A and Y are contiguous), so
        # each B panel serves up to `rows` of them (a recurrent layer's input projection, [T, 1, I] @
        # [I, 4H]: 32 GEMVs at 45 GFLOP/s before)
        m, ab, batch = m * math.prod(ab), (), ()
    rows, cols = tile_params(ctx, m, n, tail.split)
    g = Gemm(batch, (), (), m, k, n, rows, cols, a_norm=a_norm, b_type=b.dtype)
    g.b_batch_strides = aligned_strides(batch, bb, g.nb * k * cols)
    return lower_contraction(ctx, g, a_batch=ab, trans_a=False, trans_b=False, b_rank=max(2, b.rank),
                             bias=None, epilogue=epilogue, tail=tail)


@template("gemm")
def gemm(ctx: Ctx) -> Lowered:
    return lower_gemm(ctx)


def lower_gemm(ctx: Ctx, epilogue: Epilogue | None = None, tail: Tail = NO_TAIL,
               a_norm: ANorm | None = None) -> Lowered:
    """alpha * op(A) @ op(B) + beta * C, C broadcast to [M, N], applied in the epilogue."""
    a, b = ctx.operands[:2]
    check_operands("gemm", ctx, *ctx.operands, *ctx.results)
    ta, tb = bool(ctx.attr("trans_a")), bool(ctx.attr("trans_b"))
    m, k = reversed(a.dims) if ta else a.dims
    n = b.dims[0] if tb else b.dims[1]
    rows, cols = tile_params(ctx, m, n, tail.split)
    g = Gemm((), (), (), m, k, n, rows, cols, a_norm=a_norm, b_type=b.dtype)
    alpha, beta = float(ctx.attr("alpha")), float(ctx.attr("beta"))
    c = ctx.operands[2] if len(ctx.operands) > 2 else None

    def bias(v: str, lanes: int, row: str, col: str) -> str:
        v = v if alpha == 1 else f"{flit(alpha)} * {v}"
        if c is None or beta == 0:
            return v
        cm, cn = ((1, 1) + c.dims)[-2:]
        base = f"({row}) * {cn}" if cm > 1 else "0"
        if cn > 1:
            cv = vload(lanes, f"in2 + {base} + {col}") if lanes > 1 else f"in2[{base} + {col}]"
        else:
            cv = f"in2[{base}]"
        return f"{v} + {cv}" if beta == 1 else f"{v} + {flit(beta)} * {cv}"

    return lower_contraction(ctx, g, a_batch=(), trans_a=ta, trans_b=tb, b_rank=2,
                             bias=bias if (alpha != 1 or c is not None) else None, epilogue=epilogue,
                             tail=tail)


# the schedule space (space.py): what tessel-tune may try ------------------------------------------------
@space("matmul", "gemm")
def gemm_space(ctx: Ctx, default: Lowered) -> Space | None:
    """The rows of a work-item's block, its column width and its column vectors (their rows x vcols
    float<cols> accumulators must fit the registers), the work-group size, and, for a non-constant A,
    whether it is packed first."""
    chosen = default.schedule
    if "rows" not in chosen or not ctx.results or ctx.results[0].numel == 0:
        return None
    dims = ctx.results[0].dims
    m, n = (dims[-2] if len(dims) > 1 else 1), (dims[-1] if dims else 1)
    rows, cols, local = int(chosen["rows"]), int(chosen["cols"]), int(chosen.get("local", 4))
    knobs = [Knob("rows", around(rows, 1, max(1, min(m, 24)), (2, 4, 6, 8, 10, 12, 14, 16, 20, 24)),
                  "output rows a work-item"),
             Knob("cols", tuple(c for c in (4, 8, 16) if c <= max(cols, 4)), "output columns (lanes) a "
                  "work-item"),
             Knob("local", (1, 2, 4, 8), "work-items a work-group")]
    point: Point = {"rows": rows, "cols": cols, "local": local}
    if "vcols" in chosen or math.ceil(n / cols) > 1:  # a split or row tail keeps one (no vcols chosen)
        knobs.append(Knob("vcols", (1, 2, 3, 4), "column vectors a work-item"))
        point["vcols"] = int(chosen.get("vcols", 1))
    if "pack_a" in chosen:
        knobs.append(Knob("pack_a", (0, 1), "A packed into row panels by a first kernel"))
        point["pack_a"] = int(chosen["pack_a"])
    blocks = math.prod(dims[:-2]) if len(dims) > 2 else 1

    def registers(p: Point) -> bool:
        v = int(p.get("vcols", 1))
        return p["rows"] * v <= min(24 * v, ctx.device.accumulators_to_try(p["cols"], v))

    def no_idle_columns(p: Point) -> bool:
        return math.ceil(n / p["cols"]) * p["cols"] < 2 * n or p["cols"] == cols

    def enough_groups(p: Point) -> bool:
        panels = math.ceil(math.ceil(n / p["cols"]) / int(p.get("vcols", 1)))
        groups = math.ceil(math.ceil(m / p["rows"]) / p["local"]) * panels * blocks
        return groups >= 2 * ctx.device.compute_units or p["local"] == 1

    return Space("gemm/1", knobs, point, [
        Constraint("rows x float<cols> accumulators within the registers", registers),
        Constraint("columns under twice the output's", no_idle_columns),
        Constraint("two work-groups a compute unit at least", enough_groups),
    ])
