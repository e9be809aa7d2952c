"""The fuzz batch driver (batch.py): finds a new failure, shrinks it with the property narrowed to that
failure, stops checking at the deadline, and counts the generator's own errors."""

from __future__ import annotations

import collections
import time

from hypothesis import strategies as st

from tests.fuzz.batch import find_and_shrink

LISTS = st.lists(st.integers(0, 1000), min_size=1, max_size=20)


def test_a_failure_is_found_then_shrunk_against_the_same_failure() -> None:
    checked: list[list[int]] = []

    def first(case: list[int]) -> tuple[str, int] | None:
        checked.append(case)
        return ("big", sum(case)) if sum(case) > 500 else None

    def again(case: list[int], focus: str) -> int | None:
        assert focus == "big"
        return sum(case) if sum(case) > 500 else None

    found = find_and_shrink(LISTS, 200, 1, time.monotonic() + 60, 30, first, again, collections.Counter())
    assert found is not None and found.focus == "big"
    assert found.case == [501] and found.kept == 501  # hypothesis shrank it to the smallest failing list
    assert all(sum(c) <= 500 for c in checked[:-1])  # `first` stopped at the first failure


def test_nothing_failing_gives_none_and_the_deadline_stops_checking() -> None:
    calls = collections.Counter()

    def first(case: list[int]) -> None:
        calls["first"] += 1

    assert find_and_shrink(LISTS, 20, 2, time.monotonic() + 60, 5, first, lambda c, f: None,
                           collections.Counter()) is None
    assert calls["first"] == 20
    calls.clear()
    assert find_and_shrink(LISTS, 20, 2, time.monotonic() - 1, 5, first, lambda c, f: None,
                           collections.Counter()) is None
    assert calls["first"] == 0


def test_a_generator_error_is_counted_not_raised() -> None:
    @st.composite
    def broken(draw: st.DrawFn) -> int:
        n = draw(st.integers(0, 10))
        raise ValueError(f"bad builder {n}\nsecond line")

    errors: collections.Counter = collections.Counter()
    assert find_and_shrink(broken(), 5, 3, time.monotonic() + 60, 5, lambda c: None, lambda c, f: None,
                           errors) is None
    assert sum(errors.values()) == 1 and next(iter(errors)).startswith("ValueError: bad builder ")
    assert "second line" not in next(iter(errors))
