"""The rewriter and the one greedy pattern driver.

Patterns are small functions `pattern(op, rw) -> bool` that change the IR only through `rw` and return
whether they did. `apply_patterns_greedily` runs them to a fixpoint over a worklist: an op that changed,
was created, or whose operand producer changed is visited again; ops left without uses are erased when
they are pure.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from ..ir.attributes import Attr
from ..ir.core import Loc, Module, Op, Value
from ..ir.ops.registry import get_op
from ..ir.types import DynamicDimError, TensorType

Pattern = Callable[[Op, "Rewriter"], bool]


def is_pure(op: Op) -> bool:
    d = get_op(op.name)
    return d is not None and d.has("pure") and not op.regions


class Rewriter:
    """Every IR change a pattern makes goes through here, so the driver can track its worklist."""

    def __init__(self) -> None:
        self.worklist: deque[Op] = deque()
        self.queued: set[int] = set()
        # erased ops by id, kept alive: a freed op's id would be reused by a new op, which push() would
        # then take for erased and never visit
        self.erased: dict[int, Op] = {}
        self.rewrites = 0
        self.edits = 0  # every change made through the rewriter (a pattern that made none can be undone)

    def push(self, op: Op | None) -> None:
        if op is not None and id(op) not in self.queued and id(op) not in self.erased:
            self.queued.add(id(op))
            self.worklist.append(op)

    def push_users(self, value: Value) -> None:
        for user in value.users:
            self.push(user)

    def create(self, anchor: Op, name: str, operands: Iterable[Value], result_types: list[TensorType],
               attrs: dict[str, Attr] | None = None, loc: Loc | None = None) -> Op:
        """A new op inserted before `anchor`, with `anchor`'s location unless one is given (and its source
        position, so diagnostics and remarks about the new op point at the line it came from)."""
        op = Op(name, operands, result_types, attrs, loc=anchor.loc if loc is None else loc, pos=anchor.pos)
        self.edits += 1
        assert anchor.parent is not None
        anchor.parent.insert_before(anchor, op)
        self.push(op)
        return op

    def replace_value(self, old: Value, new: Value) -> None:
        self.edits += 1
        self.push_users(old)
        old.replace_all_uses_with(new)
        if new.op is not None:
            self.push(new.op)

    def replace_op(self, op: Op, new_values: list[Value]) -> None:
        """Replace each result of `op` by the given value and erase `op`."""
        assert len(new_values) == len(op.results)
        for old, new in zip(op.results, new_values, strict=True):
            if old is not new:
                self.replace_value(old, new)
        self.erase_op(op)

    def erase_op(self, op: Op) -> None:
        self.edits += 1
        producers = [v.op for v in op.operands]
        op.erase()
        self.erased[id(op)] = op
        for p in producers:
            self.push(p)

    def changed(self, op: Op) -> None:
        """Call after changing an op in place (attributes, operands)."""
        self.edits += 1
        self.push(op)
        for r in op.results:
            self.push_users(r)


class NotConverged(RuntimeError):
    """The greedy driver ran out of op visits with work left: the module is valid (every rewrite completed)
    but not yet a fixed point. Under the default limit, patterns that undo each other (a bug)."""

    def __init__(self, visits: int, rewrites: int, op: Op):
        super().__init__(f"greedy rewrite driver did not converge within {visits} op visits "
                         f"(patterns undo each other?)")
        self.visits, self.rewrites, self.op = visits, rewrites, op  # op: the next one it would have visited


def apply_patterns_greedily(module: Module, patterns: dict[str, list[Pattern]],
                            max_visits: int = 1_000_000) -> int:
    """Apply `patterns` (by op name; key "*" for every op) until none applies. Returns rewrites made;
    raises NotConverged after `max_visits` op visits with ops still on the worklist."""
    rw = Rewriter()
    for op in module.walk():
        rw.push(op)
    generic = patterns.get("*", [])
    visits = 0
    while rw.worklist:
        op = rw.worklist.popleft()
        rw.queued.discard(id(op))
        if id(op) in rw.erased or op.parent is None:
            continue
        visits += 1
        if visits > max_visits:
            raise NotConverged(max_visits, rw.rewrites, op)
        if is_pure(op) and op.results and all(not r.uses for r in op.results):
            rw.erase_op(op)
            rw.rewrites += 1
            continue
        for pattern in patterns.get(op.name, []) + generic:
            if _applies(pattern, op, rw):
                rw.rewrites += 1
                break
    return rw.rewrites


def _applies(pattern: Pattern, op: Op, rw: Rewriter) -> bool:
    """pattern(op, rw); a pattern that meets a dynamic dim where it needs a static size before it changed
    anything does not apply (symbolic dims: the rewrite waits for the func specialized to sizes)."""
    edits = rw.edits
    try:
        return pattern(op, rw)
    except DynamicDimError:
        if rw.edits != edits:
            raise  # it changed the IR first: not a refusal but a bug
        return False
