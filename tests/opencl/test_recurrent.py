"""The OpenCL scan template (lstm_scan, gru_scan, rnn_scan) against the ops' numpy references.

The cases cover each branch of the generated kernel: hidden sizes that take a full vector of units per
work-item, a narrower one (H = 12: 4 units) and scalars (H = 5), more chunks than one work-group holds
(each work-item then loops), batch > 1, reverse, clip, lengths (steps past a batch's length keep the
state and write zeros), LSTM's peepholes and input_forget, both GRU forms (linear_before_reset or the
two-phase step), every RNN activation, f64, and a scan with no steps.
"""

from __future__ import annotations

import numpy as np
import pytest
from tessel.targets.opencl.kernels.base import DeviceInfo
from tessel.targets.opencl.kernels.recurrent import unit_width
from tessel.targets.opencl.kernels.testing import check_op, lower_op

rng = np.random.default_rng(5)
GATES = {"lstm_scan": 4, "gru_scan": 3, "rnn_scan": 1}


def operands(op: str, T: int, B: int, H: int, dtype: type = np.float32,
             peep: bool = False) -> list[np.ndarray]:
    g = GATES[op]

    def f(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(dtype)

    ops = [f(T, B, g * H), f(H, g * H, scale=1 / np.sqrt(max(H, 1))), f(B, H)]
    if op == "lstm_scan":
        ops.append(f(B, H))
        if peep:
            ops.append(f(3 * H))
    if op == "gru_scan":
        ops.append(f(H))
    return ops


CASES = [
    # id, op, (T, B, H), attrs(, schedule)
    ("lstm", "lstm_scan", (6, 1, 16), {}),
    ("lstm-batch-reverse", "lstm_scan", (5, 3, 8), {"reverse": True}),
    ("lstm-narrow-units", "lstm_scan", (4, 2, 12), {}),
    ("lstm-scalar-units", "lstm_scan", (4, 2, 5), {"clip": 0.7}),
    ("lstm-lengths", "lstm_scan", (6, 3, 8), {"lengths": [6, 2, 0]}),
    ("lstm-lengths-reverse", "lstm_scan", (6, 3, 8), {"lengths": [3, 6, 1], "reverse": True}),
    ("lstm-input-forget", "lstm_scan", (4, 2, 8), {"input_forget": True}),
    ("gru-lbr", "gru_scan", (6, 2, 16), {"linear_before_reset": True}),
    ("gru", "gru_scan", (6, 2, 16), {}),
    ("gru-clip-lengths", "gru_scan", (5, 2, 5), {"clip": 0.5, "lengths": [2, 5]}),
    ("gru-reverse", "gru_scan", (5, 1, 8), {"reverse": True, "linear_before_reset": True}),
    ("rnn-tanh", "rnn_scan", (7, 2, 16), {}),
    ("rnn-relu", "rnn_scan", (5, 2, 8), {"activation": "relu"}),
    ("rnn-sigmoid-reverse", "rnn_scan", (5, 2, 6), {"activation": "sigmoid", "reverse": True}),
    ("rnn-many-chunks", "rnn_scan", (3, 1, 2 * 256 * 4 + 4), {}),
    ("lstm-schedule-units", "lstm_scan", (3, 2, 16), {}, {"units": 4}),
    # a work-group of several work-items meeting at barriers (schedule work_items; the default is one)
    ("lstm-work-group", "lstm_scan", (5, 2, 32), {"reverse": True}, {"work_items": 2}),
    ("gru-two-phase-work-group", "gru_scan", (5, 2, 48), {}, {"work_items": 3}),
    ("rnn-many-chunks-work-group", "rnn_scan", (3, 1, 2 * 256 * 4 + 4), {}, {"work_items": 256}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_scan_matches_reference(case):
    _, op, dims, attrs, *schedule = case
    check_op(op, operands(op, *dims), attrs, rtol=2e-5, atol=1e-5, schedule=schedule[0] if schedule else None)


def test_lstm_peepholes():
    check_op("lstm_scan", operands("lstm_scan", 5, 2, 8, peep=True), {"clip": 2.0}, rtol=2e-5, atol=2e-6)


def test_f64():
    check_op("gru_scan", operands("gru_scan", 4, 2, 8, np.float64), {}, rtol=1e-12, atol=1e-12)


def test_no_steps_returns_initial_state():
    check_op("lstm_scan", operands("lstm_scan", 0, 2, 8), {})


def test_one_work_item_of_vector_units():
    """H = 128 on AVX2 (8 lanes): one work-item runs all 8 chunks of 16 units (two registers per gate) in
    order, rt packed [H/16, H, 4, 16]; no barrier and no required work-group size, so that cooperative
    execution runs the scan as a step of its own (a bidirectional layer's directions on two cores).
    `work_items` spreads the chunks over a work-group that meets at barriers."""
    xw, rt, h0, c0 = operands("lstm_scan", 3, 1, 128)
    from tessel.ir.types import TensorType
    from tessel.targets.opencl.cooperative import cooperative, phased

    info = DeviceInfo(vector_width=8, vector_registers=16)
    types = [TensorType.of(a) for a in (xw, rt, h0, c0)]
    low = lower_op("lstm_scan", types, {}, info=info)[1]
    (k,) = low.kernels
    assert k.global_size == k.local_size == (1,)
    assert low.schedule == {"units": 16, "work_items": 1}
    assert low.pack[1].attrs() == {"inner_dims_pos": [2], "inner_tiles": [16], "outer_dims_perm": [2, 0, 1],
                                   "padding_value": 0.0}
    assert "float16" in k.source and "barrier" not in k.source and cooperative(k.source)
    (g,) = lower_op("lstm_scan", types, {}, info=info, schedule={"work_items": 8})[1].kernels
    assert g.global_size == g.local_size == (8,)
    assert "barrier(CLK_GLOBAL_MEM_FENCE)" in g.source and not cooperative(g.source)
    assert phased(g.source[g.source.index("{", g.source.index("__kernel")):]) is None


@pytest.mark.parametrize("hidden,lanes,want", [(128, 16, 16), (12, 16, 4), (5, 8, 1), (24, 8, 8)])
def test_unit_width(hidden, lanes, want):
    assert unit_width(hidden, lanes) == want


def test_bidirectional_directions_share_no_buffer():
    """A bidirectional LSTM's two scans, one work-group each: the memory plan holds what the first frees
    through the second (lower.one_core), so the two share no buffer, and each is a kernel cooperative
    execution runs as a step (no barrier): the two cores run the directions at once."""
    import sys
    from pathlib import Path

    from tessel.frontends.onnx.importer import import_model
    from tessel.passes.manager import PassManager
    from tessel.passes.pipeline import O_LEVELS, parse_pipeline
    from tessel.targets.opencl.cooperative import cooperative, kernel_extents
    from tessel.targets.opencl.lower import lower_module

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from models.quantized import float_lstm

    model = float_lstm()
    for d in model.graph.input[0].type.tensor_type.shape.dim[:1]:
        d.ClearField("dim_param")
        d.dim_value = 6
    m = import_model(model.SerializeToString(), "lstm.onnx")
    PassManager(parse_pipeline(O_LEVELS[2])).run(m)
    lower_module(m, DeviceInfo())
    ops = list(m.funcs[0].block.ops)
    scans = [op for op in ops if op.name == "cl.launch"
             and any("lstm_scan" in k["name"] for k in op.attrs["kernels"])]
    assert len(scans) == 2
    assert not set(scans[0].attrs["buffers"]) & set(scans[1].attrs["buffers"])
    source = next(op for op in ops if op.name == "cl.program").attrs["source"]
    for op in scans:
        start, _, end = kernel_extents(source)[op.attrs["kernels"][0]["name"]]
        assert cooperative(source[start:end]) and "barrier" not in source[start:end]
