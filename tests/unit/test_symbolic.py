"""Symbolic dims (ir/symbolic.py): one canonical form, exact arithmetic, bounds, printing and parsing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tessel.ir.symbolic import Sym, Undecidable, floordiv, mod, parse_expr, smax, smin

N, H, W = Sym.symbol("N"), Sym.symbol("H"), Sym.symbol("W")


def conv_out(size, k, s, p):
    return (size + 2 * p - k) // s + 1


def test_equal_by_construction():
    # two convs computing the same size from H by different routes give the same dim
    assert conv_out(H, 3, 2, 1) == conv_out(H, 1, 2, 0)
    assert conv_out(H, 3, 1, 1) == H  # a 'same' conv keeps the size
    assert hash(conv_out(H, 3, 2, 1)) == hash(conv_out(H, 1, 2, 0))
    assert N * 3 * H == H * N * 3 == 3 * (N * H)


def test_constants_are_ints():
    assert (H - H) == 0 and type(H - H) is int
    assert (N * 3) // N == 3 and type((N * 3) // N) is int
    assert (2 * H + 1) // 2 == H  # the exact part leaves 1 // 2 = 0
    assert mod(4 * H, 2) == 0


def test_exact_division_by_a_symbolic_divisor():
    assert (N * 3 * H * W) // (N * 3) == H * W  # reshape [N, -1] of [N, 3, H, W] / 3
    assert isinstance((H + 1) // N, Sym) and "/" in str((H + 1) // N)


def test_bounds_decide_comparisons():
    assert H >= 1 and H - 1 >= 0 and not (H < 1)
    assert smax(H - 1, 0) == H - 1 and smin(H, H + 2) == H
    with pytest.raises(Undecidable):
        bool(H - 3 >= 0)
    assert str(smax(H - 5, 0)) == "max(0, H - 5)"


def test_no_value_before_binding():
    with pytest.raises(TypeError, match="no value until its symbols are bound"):
        int(H)
    with pytest.raises(TypeError):
        np.empty((H, 3))


@pytest.mark.parametrize("text", ["N", "H - 1", "((H - 1) / 2) + 1", "3 * H * W", "max(0, H - 5) + 1",
                                  "(H % 2)", "-N + 3", "2 * N * N + H"])
def test_print_parse_round_trip(text):
    e = parse_expr(text)
    assert parse_expr(str(e)) == e
    assert str(parse_expr(str(e))) == str(e)


@given(st.integers(1, 500), st.integers(1, 500), st.integers(1, 5), st.integers(1, 4), st.integers(0, 3))
def test_evaluation_matches_ints(h, w, k, s, p):
    """An expression evaluated at sizes equals the same arithmetic done on those ints."""
    if h + 2 * p < k:
        return
    e = conv_out(H, k, s, p) * conv_out(W, k, s, p) + smax(H - k, 0) - mod(W, s)
    want = conv_out(h, k, s, p) * conv_out(w, k, s, p) + max(h - k, 0) - w % s
    assert e.evaluate({"H": h, "W": w}) == want if isinstance(e, Sym) else e == want
    assert floordiv(H * h, h) == H


def test_reserved_names():
    with pytest.raises(ValueError):
        Sym.symbol("max")
    with pytest.raises(ValueError):
        Sym.symbol("2x")
