"""The buffer plan: liveness of every computed value over one block, with reuse of dead buffers, in-place
updates and concatenations assembled in place, shared by `--print-analysis=liveness` (graph and kernel
level) and the OpenCL lowering's memory plan (target level).

Values are visited in op order. A value that an op computes (`is_kernel(op)`) takes a buffer; a view
(`view_of(op)` returns the viewed value) shares its base's buffer and keeps it alive. A buffer is free
after the last use of every value living in it. An elementwise op (`in_place(op, i)` says operand i may be
overwritten) writes its result into the buffer of an operand that dies at it, if the sizes match: no new
buffer, and the op reads and writes each element at the same index.

Concatenation in place: `placements(op)` gives, for an op that only assembles its operands into its result
(a concat along an axis with nothing but size-1 dims before it), each operand's byte offset in the result.
When every operand is the result of an earlier kernel (not an argument, a constant or a view) and not yet
placed elsewhere, the producers write straight into their slices of the concatenation's buffer: the
operands become members of one group at fixed offsets, the group's buffer lives from its first member's
definition to its last use, and the op itself has nothing left to do (`Plan.assembled`). Nested
concatenations (densenet's growing feature maps) fold into one buffer. Members are never written in place.
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
    offset: dict[int, int] = field(default_factory=dict)  # value id -> byte offset in its buffer
    scratch: dict[int, list[int]] = field(default_factory=dict)  # op id -> buffers of its scratch
    in_place: list[tuple[Op, int]] = field(default_factory=list)  # (op, operand index) written in place
    assembled: list[Op] = field(default_factory=list)  # ops whose operands were placed in their result
    live: dict[int, tuple[int, int]] = field(default_factory=dict)  # root value id -> (def, last use)
    peak: int = 0  # the most bytes live at once

    @property
    def total(self) -> int:
        return sum(self.sizes)


def plan_buffers(ops: list[Op], is_kernel: Callable[[Op], bool], view_of: Callable[[Op], Value | None],
                 in_place: Callable[[Op, int], bool] = lambda op, i: False,
                 scratch: Callable[[Op], list[int]] = lambda op: [],
                 placements: Callable[[Op], list[int] | None] = lambda op: None,
                 hold: Callable[[Op], bool] = lambda op: False) -> Plan:
    """`hold(op)`: the buffers freed at op (its scratch, its operands dying there) stay taken until the next
    kernel that holds too has taken its own, so that the two share no buffer unless one reads the other's
    results, and may run side by side (a bidirectional layer's two scans)."""
    plan = Plan()
    root: dict[int, int] = {}  # value id -> id of the value whose buffer it lives in
    off: dict[int, int] = {}  # value id -> byte offset in its root's buffer
    members: dict[int, list[int]] = {}  # root id -> value ids living in its buffer
    size: dict[int, int] = {}  # root id -> bytes
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    grouped: set[int] = set()  # roots holding placed members: never written in place
    for i, op in enumerate(ops):
        for v in op.operands:
            r = root.get(id(v))
            if r is not None:
                last[r] = i
        base = view_of(op)
        if base is not None:
            if id(base) in root:
                vid = id(op.results[0])
                root[vid], off[vid] = root[id(base)], off[id(base)]
                members[root[vid]].append(vid)
            continue
        if not is_kernel(op):
            continue
        for v in op.results:
            root[id(v)], off[id(v)], members[id(v)] = id(v), 0, [id(v)]
            size[id(v)] = nbytes(v.type)
            first[id(v)] = last[id(v)] = i
        offsets = placements(op)
        if offsets is None or not _placeable(op, root):
            continue
        r = id(op.results[0])
        for operand, at in zip(op.operands, offsets, strict=True):
            o = id(operand)
            for m in members.pop(o):
                root[m], off[m] = r, off[m] + at
                members[r].append(m)
            first[r], last[r] = min(first[r], first.pop(o)), max(last[r], last.pop(o))
            del size[o]
            grouped.discard(o)
        grouped.add(r)
        plan.assembled.append(op)
    dying: dict[int, list[int]] = {}
    for r, i in last.items():
        dying.setdefault(i, []).append(r)
    free: list[int] = []
    holders = [i for i, op in enumerate(ops) if view_of(op) is None and is_kernel(op) and hold(op)]
    next_holder = dict(zip(holders, holders[1:], strict=False))
    pending: dict[int, list[int]] = {}  # kernel index -> buffers held for it, free once it took its own
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
            r = root[id(v)]
            if r in holder:  # a member of a group whose buffer is already taken
                plan.buffer[id(v)], plan.offset[id(v)] = holder[r], off[id(v)]
                continue
            b = None
            for k, operand in enumerate(op.operands):
                ro = root.get(id(operand))
                if (r == id(v) and r not in grouped and ro in dies_here and ro not in reused
                        and ro not in grouped and in_place(op, k)
                        and plan.sizes[holder[ro]] == max(size[r], 4)):
                    b = holder[ro]
                    reused.add(ro)
                    plan.in_place.append((op, k))
                    live_bytes -= size[ro]  # the result takes the operand's place
                    break
            if b is None:
                b = take(size[r])
            holder[r] = plan.buffer[id(v)] = b
            plan.offset[id(v)] = off[id(v)]
            live_bytes += size[r]
            plan.live[r] = (first[r], last[r])
        extra = scratch(op)
        tmp = [take(n) for n in extra]
        plan.scratch[id(op)] = tmp
        plan.peak = max(plan.peak, live_bytes + sum(extra))
        free.extend(pending.pop(i, []))
        released = list(tmp)
        for r in sorted(dies_here, key=lambda r: holder[r]):
            if r not in reused:
                released.append(holder[r])
                live_bytes -= size[r]
        if i in next_holder:
            pending.setdefault(next_holder[i], []).extend(released)
        else:
            free.extend(released)
    return plan


def _placeable(op: Op, root: dict[int, int]) -> bool:
    """Whether every operand of `op` can be placed in its result: each computed by an earlier kernel (its
    own root: not an argument, constant or view, and not placed elsewhere yet), each used once here."""
    ids = [id(v) for v in op.operands]
    return len(op.results) == 1 and len(set(ids)) == len(ids) and all(root.get(o) == o for o in ids)


def may_write_in_place(op: Op, i: int) -> bool:
    """Whether graph/kernel-level `op` may write its one result over operand i: it is elementwise (an op
    with the trait, or an elementwise `kernel` region), reads operand i once, at the result's type."""
    d = get_op(op.name)
    elementwise = (d is not None and d.has("elementwise") and not op.regions) or (
        op.name == "kernel" and op.attrs.get("kind") == "elementwise")
    return (elementwise and len(op.results) == 1 and op.operands.count(op.operands[i]) == 1
            and op.operands[i].type == op.results[0].type)
