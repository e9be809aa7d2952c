"""Recurrent scans: one direction of ONNX's RNN, GRU or LSTM over a sequence whose input projection is
already done, what the ONNX importer makes of those layers.

    lstm_scan(xw [T, B, 4H], rt [H, 4H], h0 [B, H], c0 [B, H], p? [3H]) -> y [T, B, H], h [B, H], c [B, H]
    qlstm_scan(xw, rt (i8/ui8), h0, c0, r_scale [] or [4H], r_zero_point, p?) -> y, h, c
    gru_scan(xw [T, B, 3H], rt [H, 3H], h0 [B, H], rbh [H]) -> y [T, B, H], h [B, H]
    rnn_scan(xw [T, B, H], rt [H, H], h0 [B, H]) -> y [T, B, H], h [B, H]

`xw` is X_t W^T plus the biases that add before the recurrence (Wb + Rb; for GRU's gate h only Wbh), `rt`
the recurrence weights R^T, so step t's pre-activations are xw[t] + h_{t-1} @ rt. `qlstm_scan` is
onnxruntime's DynamicQuantizeLSTM recurrence: rt holds 8-bit integers, and each step quantizes h_{t-1}
dynamically (uint8, a scale and zero point per sequence of the batch, as DynamicQuantizeLinear computes
them), so its pre-activations are xw[t] + ((hq - h_zp) @ (rt - r_zero_point)) * (h_scale * r_scale), the
product summed in integers. Per sequence is what onnxruntime computes for a batch of one, and for a
batch it splits over its threads one row per thread (it quantizes each thread's rows together, so its
own results depend on its thread count beyond that); per sequence keeps each result independent of
the rest of the batch. The gates come in ONNX's
order (LSTM i, o, f, c; GRU z, r, h) with ONNX's default activations (sigmoid for the gates, tanh for the
cell and the output; RNN's `activation` is tanh, relu or sigmoid). `clip` > 0 clamps every pre-activation to
[-clip, clip]; `reverse` runs t from T-1 down to 0; `lengths` (empty: all T) gives each batch's sequence
length: steps at t >= lengths[b] keep that batch's state and write zeros to y. The result h (and c) is the
state after the last step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..types import TensorType
from .registry import Cost, OpDef, Sig, attr, check, io_bytes, may_equal, register

ACTIVATIONS = ("tanh", "relu", "sigmoid")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (1 / (1 + np.exp(-x))).astype(x.dtype, copy=False)


ACT: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh, "relu": lambda x: np.maximum(x, 0), "sigmoid": _sigmoid,
}


def gates(op_name: str) -> int:
    return {"rnn_scan": 1, "gru_scan": 3, "lstm_scan": 4, "qlstm_scan": 4}[op_name]


def _fits(shape: tuple[int | None, ...], want: tuple[int | None, ...]) -> bool:
    if len(shape) != len(want):
        return False
    return all(may_equal(a, b) for a, b in zip(shape, want, strict=True))


def _infer_for(op_name: str) -> Callable[[Sig], list[TensorType]]:
    g = gates(op_name)

    def infer(sig: Sig) -> list[TensorType]:
        xw, rt, h0 = sig.operands[:3]
        check(xw.is_float and xw.rank == 3, f"xw must be a rank-3 float tensor [T, B, {g}H], got {xw}")
        check(rt.rank == 2 and h0.rank == 2, f"rt must be [H, {g}H] and h0 [B, H], got {rt} and {h0}")
        for t, what in zip(sig.operands[1:], ("rt", "h0", "the fourth operand", "p"), strict=False):
            check(t.dtype == xw.dtype, f"{what} element type {t.dtype} differs from xw's {xw.dtype}")
        steps, batch, width = xw.shape
        hidden = rt.shape[0]
        check(hidden is None or rt.shape[1] is None or rt.shape[1] == g * hidden,
              f"rt {rt} is not [H, {g}H]")
        check(width is None or rt.shape[1] is None or width == rt.shape[1],
              f"xw {xw} and rt {rt} disagree on the gate width")
        check(_fits(h0.shape, (batch, hidden)), f"h0 {h0} is not [B, H] = [{batch}, {hidden}]")
        extra = sig.operands[3:]
        if op_name == "lstm_scan":
            check(_fits(extra[0].shape, (batch, hidden)), f"c0 {extra[0]} is not shaped like h0 {h0}")
            check(len(extra) < 2 or _fits(extra[1].shape, (3 * hidden if hidden else None,)),
                  f"p {extra[-1]} is not [3H]")
        if op_name == "gru_scan":
            check(_fits(extra[0].shape, (hidden,)), f"rbh {extra[0]} is not [H] = [{hidden}]")
        lengths = sig["lengths"]
        check(not lengths or batch is None or len(lengths) == batch,
              f"lengths lists {len(lengths)} sequences, the batch is {batch}")
        check(all(0 <= n <= (steps if steps is not None else n) for n in lengths),
              f"lengths {list(lengths)} must lie in [0, {steps}]")
        state = TensorType((batch, hidden), xw.dtype)
        outs = [TensorType((steps, batch, hidden), xw.dtype), state]
        return outs + [state] if op_name == "lstm_scan" else outs

    return infer


def _qlstm_infer(sig: Sig) -> list[TensorType]:
    xw, rt, h0, c0, rs, rz = sig.operands[:6]
    check(rt.dtype in ("i8", "ui8"), f"rt must hold 8-bit integers (i8 or ui8), got {rt}")
    check(rz.dtype == rt.dtype, f"r_zero_point {rz} must have rt's element type {rt.dtype}")
    check(rs.dtype == "f32" and rs.rank <= 1 and rz.shape == rs.shape,
          f"r_scale {rs} and r_zero_point {rz} must be one f32 and one zero point, or one per column")
    check(rs.rank == 0 or may_equal(rs.shape[0], rt.shape[1]) or rs.shape[0] == 1,
          f"r_scale {rs} is neither one scale nor one per column of rt {rt}")
    floats = Sig([xw, rt.with_dtype(xw.dtype), h0, c0, *sig.operands[6:]], sig.attrs, sig.results,
                 sig.resources)
    return _infer_for("lstm_scan")(floats)


def _verify(sig: Sig) -> None:
    check(sig["clip"] >= 0, f"clip must be >= 0 (0: none), got {sig['clip']}")


def _scan(sig: Sig, xw: np.ndarray, h0: np.ndarray, states: list[np.ndarray],
          cell: Callable[[np.ndarray, np.ndarray, list[np.ndarray]], tuple[np.ndarray, list[np.ndarray]]]
          ) -> list[np.ndarray]:
    """Runs `cell(xw[t], h, states) -> (h, states)` over the steps in order, masking by `lengths`."""
    steps, batch = xw.shape[:2]
    lengths = np.asarray(sig["lengths"] or [steps] * batch)
    h, y = h0.copy(), np.zeros((steps, batch, h0.shape[1]), xw.dtype)
    order = range(steps - 1, -1, -1) if sig["reverse"] else range(steps)
    for t in order:
        inside = (t < lengths)[:, None]
        new_h, new_states = cell(xw[t], h, states)
        y[t] = np.where(inside, new_h, 0)
        h = np.where(inside, new_h, h)
        states = [np.where(inside, n, s) for n, s in zip(new_states, states, strict=True)]
    return [y, h, *states]


def _clipper(sig: Sig) -> Callable[[np.ndarray], np.ndarray]:
    c = sig["clip"]
    return (lambda x: np.clip(x, -c, c)) if c > 0 else (lambda x: x)


def _lstm_ref(sig: Sig, xw: np.ndarray, rt: np.ndarray, h0: np.ndarray, c0: np.ndarray,
              p: np.ndarray | None = None,
              matmul: Callable[[np.ndarray, np.ndarray], np.ndarray] = np.matmul) -> list[np.ndarray]:
    hidden, clip, sig_ = rt.shape[0], _clipper(sig), _sigmoid
    pi, po, pf = (p[k * hidden:(k + 1) * hidden] for k in range(3)) if p is not None else (0, 0, 0)

    def cell(x: np.ndarray, h: np.ndarray, st: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        (c,) = st
        pre = x + matmul(h, rt)
        gi, go, gf, gc = (pre[:, k * hidden:(k + 1) * hidden] for k in range(4))
        i = sig_(clip(gi + pi * c))
        f = 1 - i if sig["input_forget"] else sig_(clip(gf + pf * c))
        c_new = f * c + i * np.tanh(clip(gc))
        o = sig_(clip(go + po * c_new))
        return o * np.tanh(c_new), [c_new]

    return _scan(sig, xw, h0, [c0], cell)


def dynamic_quantization(x: np.ndarray) -> tuple[np.float32, np.float32]:
    """(scale, zero point) of x's uint8 dynamic quantization, as DynamicQuantizeLinear and onnxruntime's
    dynamically quantized kernels compute them: the range [min(x, 0), max(x, 0)] over 255 steps (1 when it
    is empty), the zero point rounded half to even and clamped to [0, 255]. In f32."""
    f = np.float32
    lo, hi = min(f(x.min()) if x.size else f(0), f(0)), max(f(x.max()) if x.size else f(0), f(0))
    scale = f(1) if hi == lo else f((hi - lo) / f(255))
    zp = np.round(np.clip(f(0) - lo / scale, f(0), f(255)))
    return scale, f(zp)


def _qlstm_ref(sig: Sig, xw: np.ndarray, rt: np.ndarray, h0: np.ndarray, c0: np.ndarray, r_scale: np.ndarray,
               r_zero_point: np.ndarray, p: np.ndarray | None = None) -> list[np.ndarray]:
    r = rt.astype(np.int64) - np.asarray(r_zero_point).astype(np.int64)
    rs = np.asarray(r_scale, np.float32)

    def matmul(h: np.ndarray, _: np.ndarray) -> np.ndarray:
        out = np.empty((h.shape[0], r.shape[1]), np.float32)
        for b, row in enumerate(h):  # each sequence's state on its own
            scale, zp = dynamic_quantization(row)
            hq = np.clip(np.round(row / scale) + zp, 0, 255) - zp  # round: half to even, as onnxruntime
            out[b] = (hq.astype(np.int64) @ r).astype(np.float32) * (scale * rs)
        return out

    return _lstm_ref(sig, xw, rt, h0, c0, p, matmul)


def _gru_ref(sig: Sig, xw: np.ndarray, rt: np.ndarray, h0: np.ndarray, rbh: np.ndarray) -> list[np.ndarray]:
    hidden, clip, sig_ = rt.shape[0], _clipper(sig), _sigmoid
    lbr = sig["linear_before_reset"]

    def cell(x: np.ndarray, h: np.ndarray, st: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        hr = h @ (rt if lbr else rt[:, :2 * hidden])
        z = sig_(clip(x[:, :hidden] + hr[:, :hidden]))
        r = sig_(clip(x[:, hidden:2 * hidden] + hr[:, hidden:2 * hidden]))
        hh = r * (hr[:, 2 * hidden:] + rbh) if lbr else (r * h) @ rt[:, 2 * hidden:] + rbh
        cand = np.tanh(clip(x[:, 2 * hidden:] + hh))
        return (1 - z) * cand + z * h, []

    return _scan(sig, xw, h0, [], cell)


def _rnn_ref(sig: Sig, xw: np.ndarray, rt: np.ndarray, h0: np.ndarray) -> list[np.ndarray]:
    act, clip = ACT[sig["activation"]], _clipper(sig)
    return _scan(sig, xw, h0, [], lambda x, h, st: (act(clip(x + h @ rt)), []))


def _cost_for(op_name: str) -> Callable[[Sig], Cost]:
    # gate arithmetic per hidden unit
    per_unit = {"rnn_scan": 2, "gru_scan": 12, "lstm_scan": 16, "qlstm_scan": 20}[op_name]

    def cost(sig: Sig) -> Cost:
        r, w = io_bytes(sig)
        xw, rt = sig.operands[:2]
        steps, batch, width = xw.shape
        hidden = rt.shape[0]
        n = (steps or 0) * (batch or 0)
        return Cost(2 * n * (hidden or 0) * (width or 0) + per_unit * n * (hidden or 0), r, w)

    return cost


COMMON = {"reverse": attr("bool", False), "clip": attr("float", 0.0), "lengths": attr("ints", [])}
STEP_DOC = ("xw[t] + h @ rt are step t's pre-activations (xw: the input projection with the biases that add "
            "before the recurrence); clip > 0 clamps them; reverse runs t downwards; lengths (empty: all T) "
            "stops each batch's sequence early: its state holds and y is 0 past its length. Made by the ONNX "
            "importer, one per direction.")

register(OpDef(
    "lstm_scan", ("xw", "rt", "h0", "c0", "p?"), infer=_infer_for("lstm_scan"), verify=_verify,
    reference=_lstm_ref, results=3,
    attrs={**COMMON, "input_forget": attr("bool", False)}, cost=_cost_for("lstm_scan"),
    doc="One direction of an ONNX LSTM over T steps: xw [T, B, 4H] (gates i, o, f, c), rt [H, 4H], h0 and "
        "c0 [B, H], optional peepholes p [3H] (i, o, f) -> y [T, B, H], the last h and c [B, H]; sigmoid "
        "gates, tanh cell and output; input_forget couples f = 1 - i. " + STEP_DOC,
))

register(OpDef(
    "qlstm_scan", ("xw", "rt", "h0", "c0", "r_scale", "r_zero_point", "p?"), infer=_qlstm_infer,
    verify=_verify, reference=_qlstm_ref, results=3,
    attrs={**COMMON, "input_forget": attr("bool", False)}, cost=_cost_for("qlstm_scan"),
    doc="lstm_scan with onnxruntime's DynamicQuantizeLSTM recurrence: rt [H, 4H] of i8 or ui8 with "
        "r_scale and r_zero_point (one, or one per column); each step quantizes h to uint8 dynamically (a "
        "scale and zero point per sequence of the batch) and adds ((hq - h_zp) @ (rt - r_zero_point)) * "
        "(h_scale * r_scale), summed in integers, to xw[t]. " + STEP_DOC,
))

register(OpDef(
    "gru_scan", ("xw", "rt", "h0", "rbh"), infer=_infer_for("gru_scan"), verify=_verify, reference=_gru_ref,
    results=2, attrs={**COMMON, "linear_before_reset": attr("bool", False)}, cost=_cost_for("gru_scan"),
    doc="One direction of an ONNX GRU over T steps: xw [T, B, 3H] (gates z, r, h; Wb and the z, r part of Rb "
        "added), rt [H, 3H], h0 [B, H], rbh [H] (Rb of gate h) -> y [T, B, H], the last h [B, H]; sigmoid "
        "gates, tanh candidate; linear_before_reset applies r after the recurrence matmul. " + STEP_DOC,
))

register(OpDef(
    "rnn_scan", ("xw", "rt", "h0"), infer=_infer_for("rnn_scan"), verify=_verify, reference=_rnn_ref,
    results=2, attrs={**COMMON, "activation": attr("str", "tanh", allowed=ACTIVATIONS)},
    cost=_cost_for("rnn_scan"),
    doc="One direction of an ONNX RNN over T steps: xw [T, B, H] (both biases added), rt [H, H], h0 [B, H] "
        "-> y [T, B, H], the last h [B, H]; h = activation(xw[t] + h @ rt). " + STEP_DOC,
))
