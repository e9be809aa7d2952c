"""Analyses printed by `tessel-opt --print-analysis=NAME`, at every level of the IR:

- `traffic`: bytes each kernel reads and writes (from the ops' `cost`; a `kernel` region counts only its
  boundary, which is what fusion saves) and the total; with a pipeline, the ledger of the total after each
  pass, so the data movement each pass saved is visible;
- `cost`: FLOPs, bytes and arithmetic intensity (FLOP/B) per kernel and in total;
- `liveness`: the buffer plan of computed values (passes/liveness.py): each value's size, live range and
  buffer, which elementwise kernels write in place, and the plan's total and peak bytes.

A *kernel* is a top-level op that will run on the device: not a `const`, not a view (`reshape`,
`identity`, `buf.view`), not an op computed from constants only (done once at load time), not `return`.
At target level it is each `cl.launch`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..ir.core import Func, Module, Op, Value
from ..ir.ops.registry import Cost, OpError, get_op, op_sig
from .liveness import may_write_in_place, plan_buffers

VIEWS = ("reshape", "identity", "buf.view")
HOST = ("const", "return", "cl.program", "buf.alloc")


@dataclass
class KernelInfo:
    index: int
    op: Op
    name: str  # 'conv2d' or, for a region, 'conv2d+add+relu'
    cost: Cost

    @property
    def where(self) -> str:
        return f" at {', '.join(self.op.loc)}" if self.op.loc else ""


def region_ops(op: Op) -> list[Op]:
    """The ops of a `kernel` (or `cl.launch`) body, without the terminator."""
    return [o for o in op.regions[0].blocks[0].ops if o.name != "yield"] if op.regions else []


def op_cost(op: Op, module: Module) -> Cost:
    """An op's cost; a region op's FLOPs are its body's, its bytes its boundary's."""
    opdef = get_op(op.name)
    if opdef is None:
        return Cost()
    try:
        c = opdef.cost(op_sig(op, module.resources))
    except (OpError, KeyError, TypeError, ValueError):
        c = Cost()
    if op.regions and op.name == "kernel":
        flops = sum(op_cost(o, module).flops for o in region_ops(op))
        c = Cost(flops, c.bytes_read, c.bytes_written)
    return c


def kernel_name(op: Op) -> str:
    if op.name == "kernel":
        return "+".join(o.name for o in region_ops(op) if o.name != "const")
    if op.name == "cl.launch":
        return "+".join(kernel_name(o) for o in region_ops(op) if o.name not in ("pack", "unpack", "reshape"))
    return op.name


def is_view(op: Op) -> bool:
    return op.name in VIEWS and bool(op.results) and op.results[0].type.is_static


def kernels(func: Func, module: Module) -> Iterator[KernelInfo]:
    target = any(op.name == "cl.launch" for op in func.block.ops)
    constant: set[int] = set()
    index = 0
    for op in func.block.ops:
        if op.name in HOST or is_view(op):
            if op.name == "const":
                constant.add(id(op.results[0]))
            continue
        if target and op.name != "cl.launch":
            if all(id(v) in constant for v in op.operands):
                constant.update(id(r) for r in op.results)
            continue
        if not target and op.operands and all(id(v) in constant for v in op.operands) and not op.regions:
            constant.update(id(r) for r in op.results)  # folded at load time
            continue
        yield KernelInfo(index, op, kernel_name(op), op_cost(op, module))
        index += 1


def total_traffic(module: Module) -> int:
    return sum(k.cost.bytes for f in module.funcs for k in kernels(f, module))


def kernel_count(module: Module) -> int:
    return sum(1 for f in module.funcs for _ in kernels(f, module))


def traffic(module: Module) -> str:
    out = []
    for f in module.funcs:
        ks = list(kernels(f, module))
        out.append(f"traffic @{f.name}")
        for k in ks:
            c = k.cost
            out.append(f"  kernel {k.index} '{k.name}' read {c.bytes_read} written {c.bytes_written}"
                       + k.where)
        r, w = sum(k.cost.bytes_read for k in ks), sum(k.cost.bytes_written for k in ks)
        out.append(f"  total kernels {len(ks)} read {r} written {w} bytes {r + w}")
    return "\n".join(out) + "\n"


def cost(module: Module) -> str:
    out = []
    for f in module.funcs:
        ks = list(kernels(f, module))
        out.append(f"cost @{f.name}")
        for k in ks:
            out.append(f"  kernel {k.index} '{k.name}' flops {k.cost.flops} bytes {k.cost.bytes} "
                       f"intensity {k.cost.intensity:.2f}{k.where}")
        fl, by = sum(k.cost.flops for k in ks), sum(k.cost.bytes for k in ks)
        out.append(f"  total kernels {len(ks)} flops {fl} bytes {by} intensity {fl / by if by else 0:.2f}")
    return "\n".join(out) + "\n"


def liveness(module: Module) -> str:
    out = []
    for f in module.funcs:
        ks = {id(k.op) for k in kernels(f, module)}
        ops = list(f.block.ops)

        def view_of(op: Op) -> Value | None:
            return op.operands[0] if is_view(op) and op.operands else None

        plan = plan_buffers(ops, _member(ks), view_of, may_write_in_place, _scratch)
        inplace = {id(op) for op, _ in plan.in_place}
        out.append(f"liveness @{f.name}")
        for op in ops:
            for v in op.results:
                if id(v) not in plan.buffer:
                    continue
                lo, hi = plan.live[id(v)]
                mark = " in-place" if id(op) in inplace else ""
                out.append(f"  %{v.name} '{kernel_name(op)}' bytes {v.type.nbytes} live [{lo}, {hi}] "
                           f"buffer {plan.buffer[id(v)]}{mark}")
        out.append(f"  buffers {len(plan.sizes)} total {plan.total} peak {plan.peak} in-place {len(inplace)}")
    return "\n".join(out) + "\n"


def _member(ids: set[int]) -> Callable[[Op], bool]:
    return lambda op: id(op) in ids


def _scratch(op: Op) -> list[int]:
    n = op.attrs.get("scratch", [])
    return [int(x) for x in n] if isinstance(n, list) else []


ANALYSES = {"traffic": traffic, "cost": cost, "liveness": liveness}


def render_analysis(name: str, module: Module) -> str:
    return ANALYSES[name](module)
