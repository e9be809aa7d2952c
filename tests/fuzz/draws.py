"""What both fuzz builders (graphs.GraphBuilder, modules.ModuleBuilder) share: the draw helpers they make
their choices with (each one hypothesis draw, so a failing case shrinks towards small integers, the first
choice and False), and the broadcast check against their size limit."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st


class Draws:
    draw: Callable[[st.SearchStrategy[Any]], Any]
    max_elements: int  # the most elements a value the builder makes may have

    def integer(self, lo: int, hi: int) -> int:
        return int(self.draw(st.integers(lo, hi)))

    def choice(self, seq: Sequence[Any]) -> Any:
        return self.draw(st.sampled_from(list(seq)))

    def chance(self, percent: int) -> bool:
        """True with about `percent`% probability; shrinks towards False."""
        return bool(self.draw(st.integers(0, 99)) >= 100 - percent)

    def subset(self, items: Sequence[int], min_size: int = 0) -> list[int]:
        chosen = [i for i in items if self.chance(50)]
        while len(chosen) < min_size:
            chosen = sorted(set(chosen) | {self.choice(items)})
        return chosen

    def broadcast(self, *shapes: Sequence[int]) -> tuple[int, ...] | None:
        """The shape `shapes` broadcast to, or None when they do not or it has over max_elements."""
        try:
            out = tuple(int(d) for d in np.broadcast_shapes(*(tuple(s) for s in shapes)))
        except ValueError:
            return None
        return out if math.prod(out) <= self.max_elements else None
