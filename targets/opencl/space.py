"""Schedule spaces: the knobs a kernel template can be tuned by, as data declared beside the template.

A template reads its schedule keys from `ctx.schedule` and chooses a value itself for every key it is not
given (its heuristic); `Lowered.schedule` prints what it chose. A space function, registered with
`@space("conv2d")` next to the template, returns the `Space` of one op instance: each knob with its legal
values, the constraints between knobs (register budget, local-memory size, divisibility), and `default`,
the heuristic's own point read from the template's `Lowered.schedule`. tessel-tune measures points of the
space; a tuning record holds the point that won, which the lowering passes to the template as its
`ctx.schedule` (overrides of the heuristic).

A point is a dict of knob values, usually partial: the knobs it leaves out keep the heuristic's choice,
so the empty point {} is the default itself and `Space.points()` lists only points that differ from it.
`Space.reject(point)` names the first constraint a point breaks; such points are never compiled. A point
can still be refused by the template (NotLowerable) for a reason the space does not model; the tuner
counts those with the rejected ones.

Each space has a `version` (`conv2d/2`): records name the version they were measured in, and a record of
another version is ignored, so changing what a knob means (or a template's code generation, when the
same point would now give another kernel) only needs the version bumped.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .kernels.base import Ctx, Lowered, registrar

Point = dict[str, Any]


@dataclass(frozen=True)
class Knob:
    name: str
    values: tuple[Any, ...]
    doc: str = ""


@dataclass(frozen=True)
class Constraint:
    doc: str  # says what must hold, for remarks and --help of the space
    holds: Callable[[Point], bool]  # given the full point (default values filled in)


@dataclass
class Space:
    """The tunable points of one op instance's kernel."""

    version: str  # "<template>/<n>": records of another version are ignored
    knobs: list[Knob]
    default: Point  # the heuristic's choice of every knob
    constraints: list[Constraint] = field(default_factory=list)
    extra: list[Point] = field(default_factory=list)  # points outside the product (another strategy)

    def full(self, point: Point) -> Point:
        return {**self.default, **point}

    def reject(self, point: Point) -> str | None:
        """Why `point` is not in the space (a knob or value it does not have, a constraint it breaks), or
        None when it is."""
        if any(_same(point, e) for e in self.extra):
            return None
        names = {k.name: k for k in self.knobs}
        for key, value in point.items():
            if key not in names:
                return f"no knob '{key}' in {self.version}"
            if value not in names[key].values and value != self.default.get(key):
                return f"{key}={value} is not one of {list(names[key].values)}"
        full = self.full(point)
        for c in self.constraints:
            if not c.holds(full):
                return f"breaks '{c.doc}'"
        return None

    def points(self) -> Iterator[Point]:
        """Every valid point other than the default, as the knobs that differ from it (product order,
        then the extra points)."""
        seen: set[tuple] = set()
        names = [k.name for k in self.knobs]
        for values in itertools.product(*(k.values for k in self.knobs)):
            full = {**self.default, **dict(zip(names, values, strict=True))}
            point = {k: v for k, v in zip(names, values, strict=True) if self.default.get(k) != v}
            key = tuple(sorted(point.items()))
            if not point or key in seen or not all(c.holds(full) for c in self.constraints):
                continue
            seen.add(key)
            yield point
        for e in self.extra:
            yield dict(e)

    def size(self) -> int:
        """Valid points including the default."""
        return 1 + sum(1 for _ in self.points())


def _same(a: Point, b: Point) -> bool:
    return sorted(a.items()) == sorted(b.items())


SpaceFn = Callable[[Ctx, Lowered], "Space | None"]
SPACES: dict[str, SpaceFn] = {}


def space(*op_names: str) -> Callable[[SpaceFn], SpaceFn]:
    """Register `fn(ctx, default_lowered) -> Space | None` as the schedule space of each op's template
    (None: this instance has nothing to tune)."""

    return registrar(SPACES, "schedule spaces", op_names)


def space_of(ctx: Ctx, default: Lowered) -> Space | None:
    """The space of the op `ctx` describes, whose template gave `default` with no overrides."""
    fn = SPACES.get(ctx.op_name)
    return fn(ctx, default) if fn else None


# helpers for space functions ----------------------------------------------------------------------------
def around(value: int, lo: int, hi: int, candidates: Sequence[int]) -> tuple[int, ...]:
    """`candidates` within [lo, hi], with `value` itself, sorted."""
    return tuple(sorted({v for v in (*candidates, value) if lo <= v <= hi}))
