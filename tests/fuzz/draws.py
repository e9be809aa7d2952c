"""The draw helpers both fuzz builders (graphs.GraphBuilder, modules.ModuleBuilder) make their choices with:
each is one hypothesis draw, so a failing case shrinks towards small integers, the first choice and False."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st


class Draws:
    draw: Callable[[st.SearchStrategy[Any]], Any]

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
