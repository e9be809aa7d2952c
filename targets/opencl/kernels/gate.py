"""The `gate` kernel: a global pool and the FCs on its features, one work-group per image (a `kernel` region
of kind `gate`, made by `fuse`: squeeze-excitation's pool, reduce FC, activation, expand FC, sigmoid).

```
pool   a0[c] = mean (or max) of x[n, c, :, :]           c < C
fc k   a(k+1)[j] = chain_k(b_k[j] + sum_i W_k[j, i] * ak[i])   (the last FC writes out0[n, j])
```

The features stay in the work-group's arrays, so the gate costs one launch where the pool and each FC
(with its chain as an epilogue) took one each. Every row (a channel's pixels, an FC's weights) is read
with `vload16` into 16 partial sums folded pairwise. On a CPU a work-group is one work-item with private
arrays and no barrier; elsewhere `GPU_ITEMS` work-items share each loop and meet at a barrier between the
phases (`__local` arrays). The work of one image runs on one core: `fuse` keeps gates whose pool is
small (`gate-max-pool`).
"""

from __future__ import annotations

from ....ir.core import Op, Value
from ....ir.ops.reduce import reduced_axes
from .base import Ctx, Kernel, Lowered, NotLowerable
from .fused_chain import Chain, Region, Space, chain_spaces, check_types, finish
from .reducers import V, combine, fold_lanes

GPU_ITEMS = 64
LANES = 16
ACCUMULATORS = 4
POOL_KIND = {"reduce_mean": "add", "global_avg_pool": "add", "reduce_max": "max", "global_max_pool": "max"}


def stages(rg: Region) -> tuple[Op, list[tuple[Op, list[Op], Value]]]:
    """The pool and, per FC, (fc, its chain, the chain's result), checked against the region's shape."""
    pool = rg.ops[0]
    if pool.name not in POOL_KIND or id(pool.operands[0]) not in rg.arg:
        raise NotLowerable("a gate region starts with a global pool of a kernel operand")
    if pool.name.startswith("reduce_") and reduced_axes(rg.sig(pool)) != (2, 3):
        raise NotLowerable("a gate's pool reduces H and W")
    out: list[tuple[Op, list[Op]]] = []
    v = pool.results[0]
    for op in rg.ops[1:]:
        if op.name == "conv2d":
            if op.operands[0] is not v or any(id(w) not in rg.arg for w in op.operands[1:]):
                raise NotLowerable("a gate's FC reads the value before it and kernel operands")
            out.append((op, []))
        elif out:
            out[-1][1].append(op)
        else:
            raise NotLowerable(f"'{op.name}' before a gate's first FC")
        v = op.results[0]
    if not out or rg.yields != [v]:
        raise NotLowerable("a gate region yields its last FC's chain")
    return pool, [(fc, ops, (ops[-1] if ops else fc).results[0]) for fc, ops in out]


def row_reduce(kind: str, name: str, ptr: str, other: str | None, n: int, w: int = LANES) -> list[str]:
    """Statements setting float `name` to the sum (kind add) of ptr[0:n] (times other[0:n] when `other`),
    or their max: up to ACCUMULATORS independent `w`-lane partials (so the adds overlap), folded pairwise,
    then the tail."""
    v = V("float", w)
    init = "-INFINITY" if kind == "max" else "0.0f"
    k = max(1, min(ACCUMULATORS, n // w))
    unrolled, full = n // (w * k) * (w * k), n // w * w
    lines = []
    if full:
        accs = [f"{name}v{i}" for i in range(k)]
        lines += [f"float{w} {a} = (float{w})({init});" for a in accs]
        steps = []
        for i, a in enumerate(accs):
            term = f"vload{w}(0, {ptr} + i + {i * w})"
            steps.append(f"{a} = fma({term}, vload{w}(0, {other} + i + {i * w}), {a});" if other
                         else f"{a} = {combine(kind, v, a, term)};")
        lines.append(f"for (int i = 0; i < {unrolled}; i += {w * k}) {{ {' '.join(steps)} }}")
        if full > unrolled:  # the whole vectors left, into the first partial
            lines.append(f"for (int i = {unrolled}; i < {full}; i += {w}) {{ {steps[0]} }}")
        while len(accs) > 1:  # pairwise
            half = len(accs) // 2
            lines += [f"{accs[i]} = {combine(kind, v, accs[i], accs[i + half])};" for i in range(half)]
            accs = accs[:half] + accs[2 * half:] if len(accs) % 2 == 0 else accs[:half] + [accs[-1]]
        lines += fold_lanes(kind, v, accs[0])
        lines.append(f"float {name} = {accs[0]}_s;")
    else:
        lines.append(f"float {name} = {init};")
    if n > full:
        term = f"{ptr}[i] * {other}[i]" if other else f"{ptr}[i]"
        folded = f"{name} + {term}" if kind == "add" else combine(kind, V("float", 1), name, term)
        step = f"{name} = {folded};"
        lines.append(f"for (int i = {full}; i < {n}; ++i) {{ {step} }}")
    return lines


def lower_gate(ctx: Ctx, rg: Region) -> Lowered:
    pool, fcs = stages(rg)
    check_types(ctx, *(op for _, ops, _ in fcs for op in ops))
    if any(v.type.dtype != "f32" for op in rg.ops for v in (*op.operands, *op.results)):
        raise NotLowerable("a gate kernel computes f32")
    x = pool.operands[0].type
    n_img, channels, pixels = x.dims[0], x.dims[1], x.dims[2] * x.dims[3]
    items = 1 if ctx.device.is_cpu else min(GPU_ITEMS, ctx.device.max_work_group_size)
    space = "" if items == 1 else "__local "
    sync = "" if items == 1 else "barrier(CLK_LOCAL_MEM_FENCE);"
    lid = "0" if items == 1 else "get_local_id(0)"
    kind = POOL_KIND[pool.name]
    params = [f"__global const float* restrict in{rg.arg[id(pool.operands[0])]}"]
    chains: list[Chain] = []
    widths = [channels] + [fc.results[0].type.dims[1] for fc, _, _ in fcs]
    if items > 1 and 4 * sum(widths[:-1]) > ctx.device.local_mem_size:
        raise NotLowerable(f"a gate's {sum(widths[:-1])} features exceed the device's local memory")
    body = ["const int n = get_group_id(0);", f"const int l = {lid};"]
    body += [f"{space}float a{k}[{w}];" for k, w in enumerate(widths[:-1])]
    xin = f"in{rg.arg[id(pool.operands[0])]} + n * {channels * pixels}"
    red = row_reduce(kind, "r", f"(xn + c * {pixels})", None, pixels)
    finish_pool = f"r / {pixels}.0f" if kind == "add" else "r"
    body += [f"__global const float* xn = {xin};",
             f"for (int c = l; c < {channels}; c += {items}) {{",
             *(f"    {s}" for s in red), f"    a0[c] = {finish_pool};", "}"]
    for k, (fc, ops, result) in enumerate(fcs):
        sig = rg.sig(fc)
        if sig.attrs.get("groups", 1) != 1 or fc.operands[1].type.dims[1:] != (widths[k], 1, 1):
            raise NotLowerable("a gate's FC is a 1x1 conv2d of one group")
        w, *b = (f"in{rg.arg[id(v)]}" for v in fc.operands[1:3])
        params += [f"__global const float* restrict {p}" for p in (w, *b)]
        spaces = chain_spaces(rg, ops, fc.results[0], Space(fc.results[0].type.dims), None, None)
        chain = Chain(rg, f"g{k}_", ops, fc.results[0], result, spaces, "float", "int")
        chains.append(chain)
        out = widths[k + 1]
        dot = row_reduce("add", "s", f"({w} + j * {widths[k]})", f"a{k}", widths[k])
        bias = f" + {b[0]}[j]" if b else ""
        value = chain.call(f"(s{bias})", f"n * {out} + j", 1) if ops else f"s{bias}"
        store = f"out0[n * {out} + j]" if k == len(fcs) - 1 else f"a{k + 1}[j]"
        body += [sync, f"for (int j = l; j < {out}; j += {items}) {{", *(f"    {s}" for s in dot),
                 f"    {store} = {value};", "}"]
    seen: dict[str, None] = dict.fromkeys(params)
    source = (f"__kernel void KERNEL({', '.join(seen)}, __global float* restrict out0) {{\n"
              + "".join(f"    {s}\n" for s in body if s) + "}\n")
    args = tuple(p.rsplit(" ", 1)[1] for p in seen) + ("out0",)
    low = Lowered([Kernel(source, (n_img * items,), (items,), args)])
    low = finish(rg, low, chains, {f"ep{a}": f"in{a}" for ch in chains for a in ch.extras}, 0,
                 extra_params=True)
    low.schedule = {"fused": len(rg.ops), "items": items}
    return low
