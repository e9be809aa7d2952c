"""The batch driver `make fuzz` runs graphs and modules with: hypothesis draws up to `size` cases, `first`
checks each until one fails in a way not seen before, then hypothesis shrinks that case with the property
narrowed to the same failure (`again`), for at most `shrink_seconds`."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hseed
from hypothesis import strategies as st


class _Failed(Exception):
    pass


@dataclass
class Found:
    focus: Any  # the new failure `first` returned: what `again` must reproduce
    since: float  # when it was found (the shrinking's clock)
    case: Any  # the smallest case that still fails so far
    kept: Any  # what `first` or `again` returned for that case


def find_and_shrink(strategy: st.SearchStrategy[Any], size: int, batch_seed: int, deadline: float,
                    shrink_seconds: float, first: Callable[[Any], tuple[Any, Any] | None],
                    again: Callable[[Any, Any], Any | None], errors: collections.Counter) -> Found | None:
    """Up to `size` cases of `strategy`; None when none failed anew. `first(case)` gives (focus, kept) for
    a new failure, else None; `again(case, focus)` gives what to keep when `case` still fails the same way,
    else None. Past `deadline` the rest of the batch passes unchecked (rejecting would make hypothesis draw
    more). An exception out of the generator itself (or hypothesis giving up) is counted in `errors`."""
    found: Found | None = None

    @hseed(batch_seed)
    @settings(max_examples=size, database=None, deadline=None, derandomize=False,
              phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck),
              report_multiple_bugs=False, verbosity=Verbosity.quiet, print_blob=False)
    @given(strategy)
    def prop(case: Any) -> None:
        if fails(case):
            raise _Failed  # from one line: hypothesis shrinks towards failures raised where the first was

    def fails(case: Any) -> bool:
        nonlocal found
        if found is None:
            if time.monotonic() > deadline:
                return False
            hit = first(case)
            if hit is not None:
                found = Found(hit[0], time.monotonic(), case, hit[1])
            return hit is not None
        now = time.monotonic()
        if now - found.since > shrink_seconds or now > deadline + 15:
            return False  # stop shrinking: the smallest failure so far is kept
        kept = again(case, found.focus)
        if kept is not None:
            found.case, found.kept = case, kept
        return kept is not None

    try:
        prop()
    except _Failed:
        pass
    except Exception as e:  # a generator bug (the builders check what they built) or hypothesis giving up
        if found is None:
            name = type(e).__name__
            if name not in ("Unsatisfiable", "Flaky", "FlakyFailure"):
                errors[f"{name}: {str(e).splitlines()[0][:150] if str(e) else ''}"] += 1
    return found
