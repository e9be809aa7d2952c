"""The buffer plan: liveness of every computed value over one block, with reuse of dead buffers and
in-place updates, shared by `--print-analysis=liveness` (graph and kernel level) and the OpenCL
lowering's memory plan (target level).

Values are visited in op order. A value that an op computes (`is_kernel(op)`) takes a buffer; a view
(`view_of(op)` returns the viewed value) shares its base's buffer and keeps it alive. A buffer is free
after the last use of every value living in it. An elementwise op (`in_place(op, i)` says operand i may be
overwritten) writes its result into the buffer of an operand that dies at it, if the sizes match: no new
buffer, and the op reads and writes each element at the same index.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..ir.core import Op, Value
from ..ir.ops.registry import get_op
from ..ir.types import TensorType


def nbytes(t: TensorType) -> int:
    return t.numel * t.np_dtype.itemsize if t.is_static else 0


@dataclass
class Plan:
    sizes: list[int] = field(default_factory=list)  # bytes of buffer b
    buffer: dict[int, int] = field(default_factory=dict)  # value id -> buffer
    scratch: dict[int, list[int]] = field(default_factory=dict)  # op id -> buffers of its scratch
    in_place: list[tuple[Op, int]] = field(default_factory=list)  # (op, operand index) written in place
    live: dict[int, tuple[int, int]] = field(default_factory=dict)  # root value id -> (def, last use)
    peak: int = 0  # the most bytes live at once

    @property
    def total(self) -> int:
        return sum(self.sizes)


def plan_buffers(ops: list[Op], is_kernel: Callable[[Op], bool], view_of: Callable[[Op], Value | None],
                 in_place: Callable[[Op, int], bool] = lambda op, i: False,
                 scratch: Callable[[Op], list[int]] = lambda op: []) -> Plan:
    plan = Plan()
    root: dict[int, int] = {}  # value id -> id of the value whose buffer it lives in
    size: dict[int, int] = {}  # root id -> bytes
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, op in enumerate(ops):
        for v in op.operands:
            r = root.get(id(v))
            if r is not None:
                last[r] = i
        base = view_of(op)
        if base is not None:
            if id(base) in root:
                root[id(op.results[0])] = root[id(base)]
        elif is_kernel(op):
            for v in op.results:
                root[id(v)] = id(v)
                size[id(v)] = nbytes(v.type)
                first[id(v)] = last[id(v)] = i
    dying: dict[int, list[int]] = {}
    for r, i in last.items():
        dying.setdefault(i, []).append(r)
    free: list[int] = []
    holder: dict[int, int] = {}  # root id -> buffer
    live_bytes = 0

    def take(n: int) -> int:
        n = max(n, 4)
        fits = [b for b in free if plan.sizes[b] >= n]
        if fits:
            b = min(fits, key=lambda b: (plan.sizes[b], b))
        elif free:
            b = max(free, key=lambda b: (plan.sizes[b], -b))
            plan.sizes[b] = n
        else:
            plan.sizes.append(n)
            return len(plan.sizes) - 1
        free.remove(b)
        return b

    for i, op in enumerate(ops):
        if view_of(op) is not None or not is_kernel(op):
            continue
        dies_here = [r for r in dying.get(i, []) if r in holder]
        reused: set[int] = set()
        for v in op.results:
            b = None
            for k, operand in enumerate(op.operands):
                r = root.get(id(operand))
                if (r in dies_here and r not in reused and in_place(op, k)
                        and plan.sizes[holder[r]] == max(size[id(v)], 4)):
                    b = holder[r]
                    reused.add(r)
                    plan.in_place.append((op, k))
                    live_bytes -= size[r]  # the result takes the operand's place
                    break
            if b is None:
                b = take(size[id(v)])
            holder[id(v)] = plan.buffer[id(v)] = b
            live_bytes += size[id(v)]
            plan.live[id(v)] = (first[id(v)], last[id(v)])
        extra = scratch(op)
        tmp = [take(n) for n in extra]
        plan.scratch[id(op)] = tmp
        plan.peak = max(plan.peak, live_bytes + sum(extra))
        free.extend(tmp)
        for r in sorted(dies_here, key=lambda r: holder[r]):
            if r not in reused:
                free.append(holder[r])
                live_bytes -= size[r]
    return plan


def may_write_in_place(op: Op, i: int) -> bool:
    """Whether graph/kernel-level `op` may write its one result over operand i: it is elementwise (an op
    with the trait, or an elementwise `kernel` region), reads operand i once, at the result's type."""
    d = get_op(op.name)
    elementwise = (d is not None and d.has("elementwise") and not op.regions) or (
        op.name == "kernel" and op.attrs.get("kind") == "elementwise")
    return (elementwise and len(op.results) == 1 and op.operands.count(op.operands[i]) == 1
            and op.operands[i].type == op.results[0].type)
