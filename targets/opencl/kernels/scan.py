"""OpenCL templates of the line scans: `argmax` / `argmin`, `cumsum` / `cumprod` and `top_k`, each one
work-item per line along the axis, a sequential loop over it (DESIGN.md §5: on PoCL's CPU device one
work-item per output looping over its line beats barrier trees).
"""

from __future__ import annotations

from ....ir.ops.registry import norm_axis
from .base import Ctx, Kernel, Lowered, NotLowerable, launch_1d, require_static, template
from .reducers import axis_split, elem_ctype, flit, indent, is_float, kernel_source


def line_start(idx: str, n: int, inner: int) -> str:
    """Offset of the first element of line `idx` of a (outer, n, inner) tensor, lines running along n."""
    return f"{idx} * {n}" if inner == 1 else f"({idx} / {inner}) * {n * inner} + {idx} % {inner}"


@template("argmax", "argmin")
def arg_template(ctx: Ctx) -> Lowered:
    """One work-item per output scanning its line; NaN counts as the extreme (numpy's argmax/argmin)."""
    x, y = ctx.operands[0], ctx.results[0]
    require_static(x, y)
    c = elem_ctype(x, ctx.device)
    axis = norm_axis(ctx.attr("axis"), x.rank)
    outer, n, inner = axis_split(x, axis)
    if n == 0:
        raise NotLowerable(f"{ctx.op_name} over an empty axis")
    last = ctx.attr("select_last_index")
    rel = (">" if ctx.op_name == "argmax" else "<") + ("=" if last else "")
    better = f"v {rel} best"
    if is_float(c):
        better += " || isnan(v)" if last else " || (isnan(v) && !isnan(best))"
    it = "int" if x.numel < 2**31 else "long"
    body = [f"const {it} o = get_global_id(0);", f"if (o >= {y.numel}) return;",
            f"const __global {c}* p = in0 + {line_start('o', n, inner)};",
            f"{c} best = p[0];", "long idx = 0;",
            f"for ({it} i = 1; i < {n}; ++i) {{",
            f"    const {c} v = p[{'i' if inner == 1 else f'i * {inner}'}];",
            f"    if ({better}) {{ best = v; idx = i; }}", "}", "out0[o] = idx;"]
    k = launch_1d(y.numel)
    what = f"{ctx.op_name} along axis {axis} of {x} ({'last' if last else 'first'} index of the extreme)"
    params = [f"__global const {c}* restrict in0", "__global long* restrict out0"]
    k.source = kernel_source(what, params, body)
    return Lowered([k])


# cumsum / cumprod -----------------------------------------------------------------------------------------
@template("cumsum", "cumprod")
def scan_template(ctx: Ctx) -> Lowered:
    """One work-item per line along `axis`, a sequential running sum/product (numpy's accumulate order);
    neighbouring work-items read neighbouring elements when the axis is not the innermost."""
    x = ctx.operands[0]
    require_static(x)
    c = elem_ctype(x, ctx.device)
    axis = norm_axis(ctx.attr("axis"), x.rank)
    outer, n, inner = axis_split(x, axis)
    a = c if is_float(c) or c.startswith("u") else "u" + c
    op = "+" if ctx.op_name == "cumsum" else "*"
    ident = (flit(0.0, c) if op == "+" else flit(1.0, c)) if is_float(c) else ("0" if op == "+" else "1")
    rev, exc = ctx.attr("reverse"), ctx.attr("exclusive")
    it = "int" if x.numel < 2**31 else "long"
    lines = outer * inner
    loop = f"for ({it} i = {n - 1}; i >= 0; --i)" if rev else f"for ({it} i = 0; i < {n}; ++i)"
    at = "i" if inner == 1 else f"i * {inner}"
    conv = f"({a})" if a != c else ""
    back = f"({c})" if a != c else ""
    step = ([f"out0[o + {at}] = {back}acc;", f"acc = acc {op} {conv}in0[o + {at}];"] if exc else
            [f"acc = acc {op} {conv}in0[o + {at}];", f"out0[o + {at}] = {back}acc;"])
    body = [f"const {it} l = get_global_id(0);", f"if (l >= {lines}) return;",
            f"const {it} o = {line_start('l', n, inner)};",
            f"{a} acc = {ident};", f"{loop} {{", *indent(step), "}"]
    k = launch_1d(lines) if x.numel else Kernel("", (0,))
    what = (f"{ctx.op_name} along axis {axis} of {x}" + (", reversed" if rev else "")
            + (", exclusive" if exc else ""))
    params = [f"__global const {c}* restrict in0", f"__global {c}* restrict out0"]
    k.source = kernel_source(what, params, body)
    return Lowered([k])


# top_k ----------------------------------------------------------------------------------------------------
TOP_K_MAX = 64


@template("top_k")
def top_k_template(ctx: Ctx) -> Lowered:
    """One work-item per line keeps the best k (value, index) pairs sorted in private memory, inserting each
    element (O(n·k), so k is capped). Order: NaN above everything, ties by lower index, as the reference."""
    x = ctx.operands[0]
    require_static(x)
    c = elem_ctype(x, ctx.device)
    k_ = ctx.attr("k")
    if k_ > TOP_K_MAX:
        raise NotLowerable(f"top_k with k = {k_} > {TOP_K_MAX}")
    axis = norm_axis(ctx.attr("axis"), x.rank)
    outer, n, inner = axis_split(x, axis)
    largest = ctx.attr("largest")
    rel = ">" if largest else "<"
    # strictly better than the kept value `bv` (elements arrive in index order, so ties keep the earlier)
    if is_float(c):
        nan_rule = "(isnan(v) && !isnan(bv))" if largest else "(!isnan(v) && isnan(bv))"
        better = f"(v {rel} bv || {nan_rule})"
    else:
        better = f"(v {rel} bv)"
    it = "int" if x.numel < 2**31 else "long"
    lines = outer * inner
    at = f" * {inner}" if inner > 1 else ""
    body = [f"const {it} l = get_global_id(0);", f"if (l >= {lines}) return;",
            f"const {it} o = {line_start('l', n, inner)};",
            f"const {it} ob = {line_start('l', k_, inner)};",
            f"{c} val[{max(k_, 1)}];", f"long idx[{max(k_, 1)}];", "int cnt = 0;",
            f"for ({it} i = 0; i < {n}; ++i) {{",
            f"    const {c} v = in0[o + i{at}];",
            "    int j = cnt;",
            "    while (j > 0) {",
            f"        const {c} bv = val[j - 1];",
            f"        if (!{better}) break;",
            f"        if (j < {k_}) {{ val[j] = bv; idx[j] = idx[j - 1]; }}",
            "        --j;",
            "    }",
            f"    if (j < {k_}) {{ val[j] = v; idx[j] = i; if (cnt < {k_}) ++cnt; }}",
            "}",
            f"for (int j = 0; j < {k_}; ++j) {{ out0[ob + j{at}] = val[j]; out1[ob + j{at}] = idx[j]; }}"]
    kern = launch_1d(lines) if lines and k_ else Kernel("", (0,))
    what = f"top_k k={k_} {'largest' if largest else 'smallest'} along axis {axis} of {x}"
    kern.source = kernel_source(what, [f"__global const {c}* restrict in0", f"__global {c}* restrict out0",
                                       "__global long* restrict out1"], body)
    return Lowered([kern])
