"""Converters for ONNX's recurrent layers: RNN, GRU and LSTM.

Each direction projects the whole input sequence at once (one matmul of X [T, B, I] with W^T, plus the
biases that add before the recurrence). With ONNX's default activations (RNN: tanh, relu or sigmoid) the
recurrence is then one `lstm_scan`, `gru_scan` or `rnn_scan` op per direction, which the OpenCL target
runs as one kernel over all steps. Other activations are unrolled over the static sequence length: T steps
of a matmul of the hidden state with R^T, the gate slices and their activations, in ops the passes and
targets already know. Weights that are initializers fold their transposes at import.

Supported: directions forward, reverse and bidirectional; the activations and their alpha/beta; clip;
layout 0 and 1; initial_h / initial_c; LSTM peepholes and input_forget; GRU linear_before_reset; and
sequence_lens when it is a constant (steps past a batch's length keep its state and write zeros to Y).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ....ir.ops.recurrent import ACTIVATIONS
from ....ir.symbolic import Sym
from ..builder import Builder, ConversionError, Tensor
from ..registry import converter
from .common import _scalar, _slice, _transpose, _wants

Activation = Callable[[Builder, Tensor], Tensor]

# name (lower case) -> (how many alphas, how many betas it takes, their defaults)
ACTIVATION_PARAMS: dict[str, tuple[int, int, float, float]] = {
    "relu": (0, 0, 0.0, 0.0), "tanh": (0, 0, 0.0, 0.0), "sigmoid": (0, 0, 0.0, 0.0),
    "softsign": (0, 0, 0.0, 0.0), "softplus": (0, 0, 0.0, 0.0), "affine": (1, 1, 1.0, 0.0),
    "leakyrelu": (1, 0, 0.01, 0.0), "thresholdedrelu": (1, 0, 1.0, 0.0), "scaledtanh": (1, 1, 1.0, 1.0),
    "hardsigmoid": (1, 1, 0.2, 0.5), "elu": (1, 0, 1.0, 0.0),
}


def _activation(name: str, alpha: float, beta: float) -> Activation:
    def apply(b: Builder, x: Tensor) -> Tensor:
        if name in ("relu", "tanh", "sigmoid", "softsign", "softplus"):
            return b.op(name, [x])
        if name == "affine":
            return b.op("add", [b.op("mul", [x, _scalar(b, alpha, x)]), _scalar(b, beta, x)])
        if name == "leakyrelu":
            return b.op("leaky_relu", [x], {"alpha": alpha})
        if name == "thresholdedrelu":
            return b.op("where", [b.op("greater", [x, _scalar(b, alpha, x)]), x, _scalar(b, 0.0, x)])
        if name == "scaledtanh":
            return b.op("mul", [b.op("tanh", [b.op("mul", [x, _scalar(b, beta, x)])]), _scalar(b, alpha, x)])
        if name == "hardsigmoid":
            return b.op("hard_sigmoid", [x], {"alpha": alpha, "beta": beta})
        return b.op("elu", [x], {"alpha": alpha})

    return apply


def _activations(names: Sequence[str] | None, alphas: Sequence[float] | None, betas: Sequence[float] | None,
                 defaults: Sequence[str], directions: int) -> list[list[Activation]]:
    """One list of activations per direction. alpha and beta values are consumed in order by the functions
    that take them (as onnxruntime reads them); a function left without one uses its ONNX default."""
    n = len(defaults)
    given = list(names) if names else list(defaults) * directions
    if len(given) == n and directions == 2:
        given = given * 2
    if len(given) != n * directions:
        raise ConversionError(f"activations lists {len(given)} functions, expected {n} per direction "
                              f"({n * directions})")
    alpha_it, beta_it = iter(alphas or ()), iter(betas or ())
    funcs = []
    for name in given:
        key = name.lower()
        if key not in ACTIVATION_PARAMS:
            raise ConversionError(f"activation '{name}' is not supported (supported: "
                                  f"{', '.join(sorted(ACTIVATION_PARAMS))})")
        n_alpha, n_beta, alpha, beta = ACTIVATION_PARAMS[key]
        alpha = float(next(alpha_it, alpha)) if n_alpha else alpha
        beta = float(next(beta_it, beta)) if n_beta else beta
        funcs.append(_activation(key, alpha, beta))
    return [funcs[d * n:(d + 1) * n] for d in range(directions)]


def _scan_activations(names: Sequence[str] | None, defaults: Sequence[str], directions: int) -> str | None:
    """The activation the scan ops run, when every direction uses the defaults (RNN: one of
    ACTIVATIONS, the same for both directions); None when the layer must be unrolled."""
    given = [n.lower() for n in (names or defaults)]
    if not given or len(given) % len(defaults):
        return None
    if len(defaults) == 1:
        return given[0] if given[0] in ACTIVATIONS and len(set(given)) == 1 else None
    per = len(defaults)
    want = [d.lower() for d in defaults]
    ok = all(given[k * per:(k + 1) * per] == want for k in range(len(given) // per))
    return want[-1] if ok and len(given) // per in (1, directions) else None


def _take(b: Builder, x: Tensor, axis: int, i: int) -> Tensor:
    """x[..., i, ...] along `axis`, the axis dropped."""
    shape = [d for k, d in enumerate(x.shape) if k != axis]
    return b.reshape(_slice(b, x, axis, i, i + 1), shape)


def _gate(b: Builder, x: Tensor, k: int, hidden: int) -> Tensor:
    """Gate k of a [B, G*H] pre-activation."""
    return _slice(b, x, 1, k * hidden, (k + 1) * hidden)


class Layer:
    """What RNN, GRU and LSTM share: the inputs per direction, the steps' masks, and the outputs."""

    def __init__(self, b: Builder, op: str, gates: int, X: Tensor, W: Tensor, R: Tensor, B: Tensor | None,
                 sequence_lens: Tensor | None, initial: Sequence[Tensor | None], direction: str, layout: int,
                 hidden_size: int | None, clip: float | None):
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ConversionError(f"direction must be forward, reverse or bidirectional, got '{direction}'")
        if layout not in (0, 1):
            raise ConversionError(f"layout must be 0 or 1, got {layout}")
        if not X.type.is_float or X.rank != 3 or W.rank != 3 or R.rank != 3:
            raise ConversionError(f"{op} needs float X, W and R of rank 3, got {X.type}, {W.type}, {R.type}")
        self.b, self.gates, self.layout = b, gates, layout
        self.directions = 2 if direction == "bidirectional" else 1
        self.reverse = [direction == "reverse", True][: self.directions]
        if W.shape[0] != self.directions:
            raise ConversionError(f"direction {direction} needs W with {self.directions} directions, "
                                  f"got {W.type}")
        self.hidden = int(hidden_size) if hidden_size else R.shape[-1]
        if R.shape[-1] != self.hidden or W.shape[1] != gates * self.hidden:
            raise ConversionError(f"W {W.type} and R {R.type} do not fit {gates} gates of hidden size "
                                  f"{self.hidden}")
        self.X = _transpose(b, X, [1, 0, 2]) if layout else X
        self.T, self.batch = self.X.shape[0], self.X.shape[1]
        self.W, self.R, self.B = W, R, B
        self.clip = clip
        self.initial = [self._state(t) for t in initial]
        self.lengths: list[int] = []
        self.masks = self._masks(sequence_lens)

    def _state(self, t: Tensor | None) -> Tensor:
        """initial_h / initial_c as [D, B, H] (zeros when absent)."""
        if t is None:
            shape = [self.directions, self.batch, self.hidden]
            if isinstance(self.batch, Sym):  # zeros of a symbolic batch: broadcast at run time
                zero = self.b.const(np.zeros((), self.X.type.np_dtype))
                return self.b.op("expand", [zero], {"shape": shape})
            return self.b.const(np.zeros(shape, self.X.type.np_dtype))
        return _transpose(self.b, t, [1, 0, 2]) if self.layout else t

    def _masks(self, lens: Tensor | None) -> list[Tensor] | None:
        """Per step, a [B, 1] constant: whether the step is inside each batch's sequence."""
        if lens is None:
            return None
        n = np.asarray(lens.const("sequence_lens")).reshape(-1).astype(np.int64)
        if n.shape != (self.batch,) or (n < 0).any() or (n > self.T).any():
            raise ConversionError(f"sequence_lens {n.tolist()} must be {self.batch} lengths in [0, {self.T}]")
        if (n == self.T).all():
            return None
        self.lengths = [int(v) for v in n]
        return [self.b.const((t < n).reshape(self.batch, 1)) for t in range(self.T)]

    def weights(self, d: int, t: Tensor) -> Tensor:
        """W or R of direction d, transposed to [in, G*H]."""
        return _transpose(self.b, _take(self.b, t, 0, d), [1, 0])

    def bias(self, d: int) -> tuple[Tensor, Tensor] | None:
        """(Wb, Rb) of direction d, each [G*H]."""
        if self.B is None:
            return None
        bd = _take(self.b, self.B, 0, d)
        n = self.gates * self.hidden
        return _slice(self.b, bd, 0, 0, n), _slice(self.b, bd, 0, n, 2 * n)

    def projection(self, d: int, bias: Tensor | None) -> Tensor:
        """X W^T + bias over the whole sequence: [T, B, G*H]."""
        xw = self.b.op("matmul", [self.X, self.weights(d, self.W)])
        return xw if bias is None else self.b.op("add", [xw, bias])

    def projected(self, d: int, bias: Tensor | None) -> list[Tensor]:
        """X_t W^T + bias for every step t, each [B, G*H]."""
        xw = self.projection(d, bias)
        return [_take(self.b, xw, 0, t) for t in range(self.T)]

    def clipped(self, x: Tensor) -> Tensor:
        if self.clip is None:
            return x
        return self.b.op("clip", [x], {"min": -float(self.clip), "max": float(self.clip)})

    def steps(self, d: int) -> list[int]:
        return list(range(self.T - 1, -1, -1)) if self.reverse[d] else list(range(self.T))

    def keep(self, t: int, new: Tensor, old: Tensor) -> Tensor:
        """The new state inside the sequence, the old one past its end."""
        return new if self.masks is None else self.b.op("where", [self.masks[t], new, old])

    def output(self, t: int, h: Tensor) -> Tensor:
        if self.masks is None:
            return h
        return self.b.op("where", [self.masks[t], h, _scalar(self.b, 0.0, h)])

    def stacked(self, y: dict[int, Tensor]) -> Tensor | None:
        """The unrolled steps' outputs as one [T, B, H] (None when Y is unused)."""
        b, H, B = self.b, self.hidden, self.batch
        if not _wants(b, 0) or not self.T:
            return None
        steps = [b.reshape(y[t], [1, B, H]) for t in range(self.T)]
        return steps[0] if self.T == 1 else b.op("concat", steps, {"axis": 0})

    def scan(self, op: str, operands: list[Tensor], attrs: dict[str, Any]) -> list[Tensor]:
        """One direction's recurrence as a scan op over the projected sequence: [y, h(, c)]."""
        attrs = {"clip": float(self.clip or 0.0), "lengths": self.lengths, **attrs}
        return self.b.ops(op, operands, attrs)

    def finish(self, ys: list[Tensor | None], finals: list[list[Tensor]]) -> list[Tensor | None]:
        """Y [T, D, B, H] (None when unused), from each direction's [T, B, H], then each final state
        [D, B, H], in the node's layout."""
        b, H, B = self.b, self.hidden, self.batch
        y = None
        if _wants(b, 0) and self.T:
            per_dir = [b.reshape(yd, [self.T, 1, B, H]) for yd in ys if yd is not None]
            y = per_dir[0] if self.directions == 1 else b.op("concat", per_dir, {"axis": 1})
            if self.layout:
                y = _transpose(b, y, [2, 0, 1, 3])
        outs: list[Tensor | None] = [y]
        for states in finals:
            s = [b.reshape(h, [1, B, H]) for h in states]
            st = s[0] if len(s) == 1 else b.op("concat", s, {"axis": 0})
            outs.append(_transpose(b, st, [1, 0, 2]) if self.layout else st)
        return outs


@converter("RNN", since=7)
def RNN(b: Builder, X: Tensor, W: Tensor, R: Tensor, B: Tensor | None = None,
        sequence_lens: Tensor | None = None, initial_h: Tensor | None = None, *,
        activation_alpha: list[float] | None = None, activation_beta: list[float] | None = None,
        activations: list[str] | None = None, clip: float | None = None, direction: str = "forward",
        hidden_size: int | None = None, layout: int = 0) -> list[Tensor | None]:
    """H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)."""
    L = Layer(b, "RNN", 1, X, W, R, B, sequence_lens, [initial_h], direction, layout, hidden_size, clip)
    acts = _activations(activations, activation_alpha, activation_beta, ["Tanh"], L.directions)
    scan = _scan_activations(activations, ["Tanh"], L.directions)
    ys: list[Tensor | None] = []
    finals: list[Tensor] = []
    for d in range(L.directions):
        (f,) = acts[d]
        wr = L.bias(d)
        bias = b.op("add", list(wr)) if wr else None
        rt = L.weights(d, L.R)
        h = _take(b, L.initial[0], 0, d)
        if scan:
            y_d, h = L.scan("rnn_scan", [L.projection(d, bias), rt, h],
                            {"reverse": L.reverse[d], "activation": scan})
            ys.append(y_d)
            finals.append(h)
            continue
        xw = L.projected(d, bias)
        y: dict[int, Tensor] = {}
        for t in L.steps(d):
            new = f(b, L.clipped(b.op("add", [xw[t], b.op("matmul", [h, rt])])))
            y[t] = L.output(t, new)
            h = L.keep(t, new, h)
        ys.append(L.stacked(y))
        finals.append(h)
    return L.finish(ys, [finals])


@converter("GRU", since=7)
def GRU(b: Builder, X: Tensor, W: Tensor, R: Tensor, B: Tensor | None = None,
        sequence_lens: Tensor | None = None, initial_h: Tensor | None = None, *,
        activation_alpha: list[float] | None = None, activation_beta: list[float] | None = None,
        activations: list[str] | None = None, clip: float | None = None, direction: str = "forward",
        hidden_size: int | None = None, layout: int = 0, linear_before_reset: int = 0) -> list[Tensor | None]:
    """Gates z, r, h: z = f(.z), r = f(.r), h~ = g(X Wh^T + (r * H) Rh^T + Rbh + Wbh) (or, with
    linear_before_reset, g(X Wh^T + r * (H Rh^T + Rbh) + Wbh)), H = (1 - z) * h~ + z * H."""
    L = Layer(b, "GRU", 3, X, W, R, B, sequence_lens, [initial_h], direction, layout, hidden_size, clip)
    acts = _activations(activations, activation_alpha, activation_beta, ["Sigmoid", "Tanh"], L.directions)
    scan = _scan_activations(activations, ["Sigmoid", "Tanh"], L.directions)
    Hs = L.hidden
    zeros = b.const(np.zeros(Hs, X.type.np_dtype))
    ys: list[Tensor | None] = []
    finals: list[Tensor] = []
    for d in range(L.directions):
        f, g = acts[d]
        wr = L.bias(d)
        rb_h = _slice(b, wr[1], 0, 2 * Hs, 3 * Hs) if wr else None
        bias = None
        if wr:  # Rb of z and r joins Wb; Rb of h stays apart, inside the reset (or after it)
            rb_zr = b.op("concat", [_slice(b, wr[1], 0, 0, 2 * Hs), zeros], {"axis": 0})
            bias = b.op("add", [wr[0], rb_zr])
        rt = L.weights(d, L.R)  # [H, 3H]
        h = _take(b, L.initial[0], 0, d)
        if scan:
            y_d, h = L.scan("gru_scan", [L.projection(d, bias), rt, h, zeros if rb_h is None else rb_h],
                            {"reverse": L.reverse[d], "linear_before_reset": bool(linear_before_reset)})
            ys.append(y_d)
            finals.append(h)
            continue
        xw = L.projected(d, bias)
        rt_zr, rt_h = _slice(b, rt, 1, 0, 2 * Hs), _slice(b, rt, 1, 2 * Hs, 3 * Hs)
        y: dict[int, Tensor] = {}
        one = _scalar(b, 1.0, X)
        for t in L.steps(d):
            hr = b.op("matmul", [h, rt if linear_before_reset else rt_zr])
            z = f(b, L.clipped(b.op("add", [_gate(b, xw[t], 0, Hs), _gate(b, hr, 0, Hs)])))
            r = f(b, L.clipped(b.op("add", [_gate(b, xw[t], 1, Hs), _gate(b, hr, 1, Hs)])))
            if linear_before_reset:
                hh = _gate(b, hr, 2, Hs)
                if rb_h is not None:
                    hh = b.op("add", [hh, rb_h])
                hh = b.op("mul", [r, hh])
            else:
                hh = b.op("matmul", [b.op("mul", [r, h]), rt_h])
                if rb_h is not None:
                    hh = b.op("add", [hh, rb_h])
            cand = g(b, L.clipped(b.op("add", [_gate(b, xw[t], 2, Hs), hh])))
            new = b.op("add", [b.op("mul", [b.op("sub", [one, z]), cand]), b.op("mul", [z, h])])
            y[t] = L.output(t, new)
            h = L.keep(t, new, h)
        ys.append(L.stacked(y))
        finals.append(h)
    return L.finish(ys, [finals])


@converter("LSTM", since=7)
def LSTM(b: Builder, X: Tensor, W: Tensor, R: Tensor, B: Tensor | None = None,
         sequence_lens: Tensor | None = None, initial_h: Tensor | None = None,
         initial_c: Tensor | None = None, P: Tensor | None = None, *,
         activation_alpha: list[float] | None = None, activation_beta: list[float] | None = None,
         activations: list[str] | None = None, clip: float | None = None, direction: str = "forward",
         hidden_size: int | None = None, input_forget: int = 0, layout: int = 0) -> list[Tensor | None]:
    """Gates i, o, f, c: i = f(.i + Pi * C), f = f(.f + Pf * C) (1 - i with input_forget), c~ = g(.c),
    C = f * C + i * c~, o = f(.o + Po * C_new), H = o * h(C)."""
    L = Layer(b, "LSTM", 4, X, W, R, B, sequence_lens, [initial_h, initial_c], direction, layout,
              hidden_size, clip)
    defaults = ["Sigmoid", "Tanh", "Tanh"]
    acts = _activations(activations, activation_alpha, activation_beta, defaults, L.directions)
    scan = _scan_activations(activations, defaults, L.directions)
    Hs = L.hidden
    ys: list[Tensor | None] = []
    finals_h: list[Tensor] = []
    finals_c: list[Tensor] = []
    one = _scalar(b, 1.0, X)
    for d in range(L.directions):
        f, g, hf = acts[d]
        wr = L.bias(d)
        bias = b.op("add", list(wr)) if wr else None
        rt = L.weights(d, L.R)
        h = _take(b, L.initial[0], 0, d)
        c = _take(b, L.initial[1], 0, d)
        if scan:
            operands = [L.projection(d, bias), rt, h, c] + ([_take(b, P, 0, d)] if P is not None else [])
            y_d, h, c = L.scan("lstm_scan", operands,
                               {"reverse": L.reverse[d], "input_forget": bool(input_forget)})
            ys.append(y_d)
            finals_h.append(h)
            finals_c.append(c)
            continue
        xw = L.projected(d, bias)
        peep = None
        if P is not None:
            pd = _take(b, P, 0, d)
            peep = [_slice(b, pd, 0, k * Hs, (k + 1) * Hs) for k in range(3)]  # i, o, f
        y: dict[int, Tensor] = {}
        for t in L.steps(d):
            pre = b.op("add", [xw[t], b.op("matmul", [h, rt])])
            gi, go, gf, gc = (_gate(b, pre, k, Hs) for k in range(4))
            if peep is not None:
                gi = b.op("add", [gi, b.op("mul", [peep[0], c])])
                gf = b.op("add", [gf, b.op("mul", [peep[2], c])])
            i = f(b, L.clipped(gi))
            fg = b.op("sub", [one, i]) if input_forget else f(b, L.clipped(gf))
            cand = g(b, L.clipped(gc))
            c_new = b.op("add", [b.op("mul", [fg, c]), b.op("mul", [i, cand])])
            if peep is not None:
                go = b.op("add", [go, b.op("mul", [peep[1], c_new])])
            o = f(b, L.clipped(go))
            h_new = b.op("mul", [o, hf(b, c_new)])
            y[t] = L.output(t, h_new)
            h = L.keep(t, h_new, h)
            c = L.keep(t, c_new, c)
        ys.append(L.stacked(y))
        finals_h.append(h)
        finals_c.append(c)
    return L.finish(ys, [finals_h, finals_c])
