"""The RNN, GRU and LSTM converters (frontends/onnx/ops/recurrent.py), unrolled by tessel, against
onnxruntime: directions, layouts, biases, initial states, sequence_lens, clip, activations with their
alpha/beta, GRU's linear_before_reset and LSTM's peepholes and input_forget.

onnxruntime has no batch-first (layout 1) kernels, so a layout 1 case is compared with onnxruntime's
layout 0 result on the transposed inputs, transposed back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from tests.numeric.model_util import assert_close, make_model, run_onnxruntime, run_tessel

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
INPUTS = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]


def _arrays(op: str, T: int, batch: int, size: int, hidden: int, directions: int, bias: bool, initial: bool,
            peepholes: bool, seed: int) -> dict[str, np.ndarray | None]:
    rng = np.random.default_rng(seed)
    g = GATES[op]

    def f(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    arrays: dict[str, np.ndarray | None] = {
        "X": f(T, batch, size), "W": f(directions, g * hidden, size, scale=0.5),
        "R": f(directions, g * hidden, hidden, scale=0.5),
        "B": f(directions, 2 * g * hidden) if bias else None,
        "sequence_lens": None, "initial_h": f(directions, batch, hidden) if initial else None,
    }
    if op == "LSTM":
        arrays["initial_c"] = f(directions, batch, hidden) if initial else None
        arrays["P"] = f(directions, 3 * hidden) if peepholes else None
    return arrays


def _run(op: str, arrays: dict[str, np.ndarray | None], attrs: dict[str, Any], onnxruntime: bool
         ) -> list[np.ndarray]:
    names = INPUTS[: (8 if op == "LSTM" else 6)]
    while arrays.get(names[-1]) is None:
        names.pop()
    outputs = ["Y", "Y_h", "Y_c"][: (3 if op == "LSTM" else 2)]
    node = helper.make_node(op, [n if arrays.get(n) is not None else "" for n in names], outputs, **attrs)
    feeds = {n: a for n, a in arrays.items() if a is not None and n != "sequence_lens"}
    consts = {"sequence_lens": arrays["sequence_lens"]} if arrays.get("sequence_lens") is not None else {}
    model = make_model([node], feeds, outputs, consts)
    return run_onnxruntime(model, feeds) if onnxruntime else run_tessel(model, feeds)


def check(op: str, *, T: int = 3, batch: int = 2, size: int = 4, hidden: int = 5, direction: str = "forward",
          layout: int = 0, bias: bool = True, initial: bool = True, peepholes: bool = False,
          lens: list[int] | None = None, seed: int = 0, **attrs: Any) -> None:
    directions = 2 if direction == "bidirectional" else 1
    arrays = _arrays(op, T, batch, size, hidden, directions, bias, initial, peepholes, seed)
    if lens is not None:
        arrays["sequence_lens"] = np.array(lens, np.int32)
    attrs = {"direction": direction, "hidden_size": hidden, **attrs}
    expected = _run(op, arrays, attrs, onnxruntime=True)
    if layout:  # batch first: X [B, T, I], states [B, D, H]; Y [B, T, D, H], Y_h / Y_c [B, D, H]
        for n in ("X", "initial_h", "initial_c"):
            if arrays.get(n) is not None:
                arrays[n] = np.ascontiguousarray(arrays[n].transpose(1, 0, 2))
        expected = [expected[0].transpose(2, 0, 1, 3)] + [e.transpose(1, 0, 2) for e in expected[1:]]
        attrs["layout"] = 1
    got = _run(op, arrays, attrs, onnxruntime=False)
    assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_directions_and_layouts(op, direction, layout):
    check(op, direction=direction, layout=layout)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_no_bias_no_initial_state(op):
    check(op, bias=False, initial=False, direction="bidirectional")


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_constant_sequence_lens(op, direction):
    """Steps past a batch's length keep its state and write zeros to Y."""
    check(op, direction=direction, T=4, batch=3, lens=[4, 1, 2])


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_clip(op):
    check(op, clip=0.5, direction="bidirectional")


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_gru_linear_before_reset(direction):
    check("GRU", linear_before_reset=1, direction=direction, lens=[1, 3])


def test_lstm_peepholes():
    check("LSTM", peepholes=True, direction="bidirectional")
    check("LSTM", peepholes=True, lens=[2, 1], clip=0.7)


def test_lstm_input_forget():
    check("LSTM", input_forget=1, peepholes=True)


@pytest.mark.parametrize("op,acts,alpha,beta", [
    ("RNN", ["Relu"], None, None),
    ("RNN", ["Softplus"], None, None),
    ("RNN", ["ThresholdedRelu"], [0.2], None),
    ("RNN", ["LeakyRelu", "HardSigmoid"], [0.3, 0.1], [0.6]),  # alpha and beta read in order, by need
    ("GRU", ["HardSigmoid", "LeakyRelu", "Sigmoid", "Affine"], [0.3, 0.1, 2.0], [0.6, 0.2]),
    ("LSTM", ["HardSigmoid", "Tanh", "Elu"], [0.3, 0.7], [0.4]),
    ("LSTM", ["Sigmoid", "ScaledTanh", "Softsign"], [0.3], [0.4]),
    ("LSTM", ["HardSigmoid", "Tanh", "Tanh"], None, None),  # HardSigmoid's own defaults
])
def test_activations(op, acts, alpha, beta):
    attrs: dict[str, Any] = {"activations": acts}
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    per_direction = {"RNN": 1, "GRU": 2, "LSTM": 3}[op]
    check(op, direction="bidirectional" if len(acts) == 2 * per_direction else "forward", **attrs)


def test_only_y_h_is_used():
    """An omitted Y output costs nothing: tessel returns just Y_h."""
    arrays = _arrays("GRU", 2, 3, 3, 5, 1, True, False, False, seed=1)
    node = helper.make_node("GRU", ["X", "W", "R", "B"], ["", "Y_h"], hidden_size=5)
    feeds = {n: a for n, a in arrays.items() if a is not None}
    model = make_model([node], feeds, ["Y_h"])
    assert_close(run_tessel(model, feeds), run_onnxruntime(model, feeds), rtol=1e-5, atol=1e-5)
