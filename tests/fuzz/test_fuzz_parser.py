"""Mutated `.tsl` texts (mutate.py) never make the parser or verifier raise anything but a
DiagnosticError, never hang, and a mutant that parses and verifies prints back identically."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.mutate import corpus, mutate


def test_corpus_has_lit_chunks_and_printed_models() -> None:
    texts = corpus()
    assert len(texts) > 100
    assert any(b"resources:" in t for t in texts) and any(b"cl.program" in t for t in texts)


@settings(max_examples=2000, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6), st.randoms(use_true_random=False), st.integers(1, 5))
def test_mutated_tsl_gives_a_module_or_a_diagnostic(index: int, rnd: random.Random, count: int) -> None:
    from tests.fuzz.mutate import check_parse

    texts = corpus()
    data = mutate(texts[index % len(texts)], rnd, count)
    problem = check_parse(data)
    assert problem is None, f"{problem}\n--- input ---\n{data[:3000]!r}"
