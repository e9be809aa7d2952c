"""The greedy rewrite driver (passes/rewrite.py): runs patterns to a fixed point, and a limit on op visits
ends a ping-pong between patterns with NotConverged naming the op it would have visited next."""

from __future__ import annotations

import pytest
from tessel.ir.core import Op
from tessel.ir.parser import parse_module
from tessel.passes.rewrite import NotConverged, Rewriter, apply_patterns_greedily

SRC = """module @m {
  func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = neg %x : (tensor<4xf32>) -> tensor<4xf32>
    %1 = relu %0 : (tensor<4xf32>) -> tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}"""


def flip(op: Op, rw: Rewriter) -> bool:
    """Toggles an attribute forever: a pattern that never reaches a fixed point."""
    op.attrs["flip"] = not op.attrs.get("flip", False)
    rw.changed(op)
    return True


def test_patterns_undoing_each_other_run_out_of_visits() -> None:
    m = parse_module(SRC, "<test>")
    with pytest.raises(NotConverged) as e:
        apply_patterns_greedily(m, {"relu": [flip]}, max_visits=50)
    assert e.value.visits == 50 and e.value.rewrites > 0
    assert e.value.op.name in ("relu", "return")  # the flipped op or its user, both requeued
    assert "did not converge within 50 op visits" in str(e.value)


def test_a_fixed_point_is_reached_within_the_limit() -> None:
    """The module's three ops are visited once each: a limit of 3 visits suffices, 2 does not."""
    seen: list[str] = []

    def once(op: Op, rw: Rewriter) -> bool:
        seen.append(op.name)
        return False

    assert apply_patterns_greedily(parse_module(SRC, "<test>"), {"*": [once]}, max_visits=3) == 0
    assert seen == ["neg", "relu", "return"]
    with pytest.raises(NotConverged) as e:
        apply_patterns_greedily(parse_module(SRC, "<test>"), {"*": [once]}, max_visits=2)
    assert e.value.op.name == "return" and e.value.rewrites == 0
