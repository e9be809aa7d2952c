"""Specializing a dynamic func to the sizes of a call (ir/specialize.py): the binding's checks, each naming
the input and the dim, and the re-inference that makes a failed assumption a loud error at those sizes."""

from __future__ import annotations

import numpy as np
import pytest
from tessel.ir.diagnostics import DiagnosticError
from tessel.ir.parser import parse_module
from tessel.ir.specialize import bind, specialize

TWO_INPUTS = """
func @main(%x: tensor<[N]x3xf32>, %y: tensor<[N]x[2 * N]xf32>) -> tensor<[N]x3xf32> {
  return %x : tensor<[N]x3xf32>
}
"""

BROADCAST = """
func @main(%a: tensor<[A]x4xf32>, %b: tensor<[B]x4xf32>) -> tensor<[A]x4xf32> {
  %0 = add %a, %b : (tensor<[A]x4xf32>, tensor<[B]x4xf32>) -> tensor<[A]x4xf32>
  return %0 : tensor<[A]x4xf32>
}
"""


def _func(text: str):  # noqa: ANN202
    m = parse_module(text, "t.tsl")
    return m, m.funcs[0]


def test_bind_reads_the_symbols() -> None:
    _, f = _func(TWO_INPUTS)
    assert bind(f, [(5, 3), (5, 10)]) == {"N": 5}


@pytest.mark.parametrize("shapes,message", [
    ([(5, 3, 1), (5, 10)], "input 'x' has rank 3 (shape [5, 3, 1]), expected rank 2"),
    ([(5, 4), (5, 10)], "input 'x' dim 1 is 4, expected 3"),
    ([(5, 3), (6, 12)], "input 'y' dim 0 is 6, but [N] is 5 (input 'x' dim 0)"),
    ([(5, 3), (5, 9)], "input 'y' dim 1 is 9, but [2 * N] gives 10 here"),
], ids=["rank", "static-dim", "symbol-conflict", "derived-dim"])
def test_bind_names_the_input_and_the_dim(shapes: list, message: str) -> None:
    _, f = _func(TWO_INPUTS)
    with pytest.raises(DiagnosticError) as e:
        bind(f, shapes)
    text = str(e.value)
    assert "the inputs do not fit func @main" in text and message in text, text


def test_a_failed_assumption_fails_at_those_sizes() -> None:
    """[A] against [B] broadcasts to the simpler name; sizes where they differ (and neither is 1) make the
    op's inference on ints refuse, naming the op and the sizes."""
    m, f = _func(BROADCAST)
    _, s = specialize(m, f, [(3, 4), (3, 4)])
    assert str(s.args[0].type) == "tensor<3x4xf32>" and str(s.result_types[0]) == "tensor<3x4xf32>"
    unequal = r"'add' op operand shapes .* do not broadcast \(with A = 2, B = 3\)"
    with pytest.raises(DiagnosticError, match=unequal):
        specialize(m, f, [(2, 4), (3, 4)])
    # B = 1 broadcasts, but then the result is A, as the IR says; A = 1 gives B rows, which the IR did not say
    specialize(m, f, [(2, 4), (1, 4)])
    wider = r"'add' op result #0 is tensor<3x4xf32> at these sizes, but the IR says tensor<\[A\]x4xf32>"
    with pytest.raises(DiagnosticError, match=wider + " = tensor<1x4xf32>"):
        specialize(m, f, [(1, 4), (3, 4)])


def test_the_specialization_runs_as_the_static_func() -> None:
    from tessel.ir.interpreter import run_func

    m, f = _func(BROADCAST)
    a, b = np.ones((2, 4), np.float32), np.full((1, 4), 2.0, np.float32)
    (out,) = run_func(m, f, [a, b])
    assert out.shape == (2, 4) and np.all(out == 3.0)
