"""Converters for the rest of ONNX: attention and rotary embeddings, losses, quantization, trig and bitwise
ops, windows, sampling (GridSample, AffineGrid, RoiAlign, Col2Im, MaxUnpool), crop/pad and the training
optimizers.

Most are compositions of graph ops, so the passes and the targets see matmuls, softmaxes and elementwise
chains they already know; the ops that cannot be composed without losing precision or meaning (asin,
bit shifts, det, grid sampling) live in ir/ops/misc.py. Masks and index patterns that depend only on
shapes are computed here in numpy and enter the graph as constants.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ....ir.types import TensorType, int_range
from ..builder import Builder, ConversionError, Tensor
from ..registry import converter
from ..types import onnx_element_type

NEG_INF = -math.inf


def _np(dtype: str) -> np.dtype:
    return TensorType((), dtype).np_dtype


def _scalar(b: Builder, value: float | int | bool, dtype: str) -> Tensor:
    return b.const(np.array(value, _np(dtype)))


def _slice(b: Builder, x: Tensor, axis: int, start: int, end: int, step: int = 1) -> Tensor:
    return b.op("slice", [x], {"starts": [start], "ends": [end], "axes": [axis % x.rank], "steps": [step]})


def _float_only(x: Tensor, what: str) -> None:
    if not x.type.is_float:
        raise ConversionError(f"{what} must be a float tensor, got {x.type}")


# elementwise: trig, NaN/Inf tests, bitwise ------------------------------------------------------------
# ONNX op -> (tessel op, the opset that introduced the ONNX op)
UNARY = {"Tan": ("tan", 7), "Asin": ("asin", 7), "Acos": ("acos", 7), "Atan": ("atan", 7),
         "Sinh": ("sinh", 9), "Cosh": ("cosh", 9), "Asinh": ("asinh", 9), "Acosh": ("acosh", 9),
         "Atanh": ("atanh", 9), "IsNaN": ("is_nan", 9), "BitwiseNot": ("bitwise_not", 18)}
BINARY = {"BitwiseAnd": ("bitwise_and", 18), "BitwiseOr": ("bitwise_or", 18),
          "BitwiseXor": ("bitwise_xor", 18)}


def _unary(onnx_op: str, tessel_op: str, since: int) -> None:
    def convert(b: Builder, x: Tensor) -> Tensor:
        return b.op(tessel_op, [x])

    convert.__name__ = onnx_op
    converter(onnx_op, since)(convert)


def _binary(onnx_op: str, tessel_op: str, since: int) -> None:
    def convert(b: Builder, x: Tensor, y: Tensor) -> Tensor:
        return b.op(tessel_op, [x, y])

    convert.__name__ = onnx_op
    converter(onnx_op, since)(convert)


for _o, (_t, _since) in UNARY.items():
    _unary(_o, _t, _since)
for _o, (_t, _since) in BINARY.items():
    _binary(_o, _t, _since)


@converter("IsInf", since=10)
def IsInf(b: Builder, x: Tensor, *, detect_negative: int = 1, detect_positive: int = 1) -> Tensor:
    _float_only(x, "IsInf's input")
    tests = [b.op("equal", [x, _scalar(b, sign * math.inf, x.dtype)])
             for sign, on in ((1, detect_positive), (-1, detect_negative)) if on]
    if not tests:
        return b.const(np.zeros(x.shape, bool))
    return tests[0] if len(tests) == 1 else b.op("or", tests)


@converter("BitShift", since=11)
def BitShift(b: Builder, x: Tensor, y: Tensor, *, direction: str) -> Tensor:
    if direction not in ("LEFT", "RIGHT"):
        raise ConversionError(f"direction must be LEFT or RIGHT, got '{direction}'")
    return b.op("bit_shift", [x, y], {"direction": direction.lower()})


@converter("Det", since=11)
def Det(b: Builder, x: Tensor) -> Tensor:
    return b.op("det", [x])


@converter("SwiGLU", since=28)
def SwiGLU(b: Builder, a: Tensor, c: Tensor, *, alpha: float = 1.0) -> Tensor:
    scaled = a if alpha == 1.0 else b.op("mul", [a, _scalar(b, alpha, a.dtype)])
    return b.op("mul", [b.op("mul", [a, b.op("sigmoid", [scaled])]), c])


# windows ---------------------------------------------------------------------------------------------
def _window(b: Builder, size: Tensor, output_datatype: int, periodic: int, kind: str) -> Tensor:
    n = size.ints("the window size")[0]
    dtype = onnx_element_type(output_datatype, "output_datatype")
    denom = n if periodic else n - 1
    want = _np(dtype)
    # computed as onnx's reference does: Hann and Hamming in the output type, Blackman in float64
    work = want if want.kind == "f" and want.name != "bfloat16" else np.dtype(np.float32)
    i = np.arange(n, dtype=work)
    with np.errstate(all="ignore"):
        if kind == "hann":
            w = np.sin(i * np.pi / denom) ** 2
        elif kind == "hamming":
            alpha = 25.0 / 46.0
            w = alpha - np.cos(i * np.pi * 2 / denom) * (1 - alpha)
        else:
            j = np.arange(n)
            w = np.cos((j * (np.pi * 2)) / denom) * -0.5 + np.cos((j * (np.pi * 4)) / denom) * 0.08 + 0.42
    return b.const(np.asarray(w).astype(want))


@converter("HannWindow", since=17)
def HannWindow(b: Builder, size: Tensor, *, output_datatype: int = 1, periodic: int = 1) -> Tensor:
    return _window(b, size, output_datatype, periodic, "hann")


@converter("HammingWindow", since=17)
def HammingWindow(b: Builder, size: Tensor, *, output_datatype: int = 1, periodic: int = 1) -> Tensor:
    return _window(b, size, output_datatype, periodic, "hamming")


@converter("BlackmanWindow", since=17)
def BlackmanWindow(b: Builder, size: Tensor, *, output_datatype: int = 1, periodic: int = 1) -> Tensor:
    return _window(b, size, output_datatype, periodic, "blackman")


# attention -------------------------------------------------------------------------------------------
def _heads_first(b: Builder, x: Tensor, heads: int | None, what: str) -> Tensor:
    """(B, S, H*D) -> (B, H, S, D)."""
    if heads is None or heads <= 0:
        raise ConversionError(f"3-D {what} needs the q_num_heads and kv_num_heads attributes")
    bs, s, hd = x.shape
    if hd % heads:
        raise ConversionError(f"{what} hidden size {hd} is not divisible by {heads} heads")
    return b.op("transpose", [b.reshape(x, [bs, s, heads, hd // heads])], {"perm": [0, 2, 1, 3]})


def _attention_bias(b: Builder, q: Tensor, skv: int, mask: Tensor | None, past: int, nonpad: Tensor | None,
                    causal: bool, left: int, right: int) -> Tensor | None:
    """The additive bias (0 or -inf, plus a float mask) broadcasting to (B, H, Sq, Skv): attn_mask padded
    to Skv, the causal and sliding-window frontiers aligned bottom-right (offset by the past length, or per
    batch by nonpad_kv_seqlen - Sq), and the key padding of nonpad_kv_seqlen."""
    sq, dtype = q.shape[2], q.dtype
    zero, ninf = _scalar(b, 0, dtype), _scalar(b, NEG_INF, dtype)
    bias = None
    if mask is not None:
        bias = b.op("where", [mask, zero, ninf]) if mask.dtype == "i1" else b.cast(mask, dtype)
        if bias.shape[-1] < skv:
            pads = [0] * (2 * bias.rank)
            pads[-1] = skv - bias.shape[-1]
            bias = b.op("pad", [bias], {"pads": pads, "value": NEG_INF})
    i = np.arange(sq)[:, None]
    j = np.arange(skv)[None, :]
    windowed = causal or left >= 0 or right >= 0
    allowed: Tensor | None = None
    if windowed and nonpad is None:  # one frontier for every batch: a constant
        diff = i + past - j
        ok = np.ones((sq, skv), bool)
        if causal:
            ok &= diff >= 0
        if left >= 0:
            ok &= diff <= left
        if right >= 0:
            ok &= -diff <= right
        allowed = b.const(ok)
    elif nonpad is not None:  # per batch: diff = i - j - Sq + nonpad[b]
        n = b.reshape(b.cast(nonpad, "i64"), [nonpad.shape[0], 1, 1, 1])
        e = i - j - sq
        tests = [b.op("less", [b.const(np.arange(skv).reshape(1, 1, 1, skv)), n])]  # key padding
        if causal:
            tests.append(b.op("greater_equal", [n, b.const(-e)]))
        if left >= 0:
            tests.append(b.op("less_equal", [n, b.const(left - e)]))
        if right >= 0:
            tests.append(b.op("greater_equal", [n, b.const(-right - e)]))
        allowed = tests[0]
        for t in tests[1:]:
            allowed = b.op("and", [allowed, t])
    if allowed is not None:
        extra = b.op("where", [allowed, zero, ninf])
        bias = extra if bias is None else b.op("add", [bias, extra])
    return bias


@converter("Attention", since=23)
def Attention(b: Builder, Q: Tensor, K: Tensor, V: Tensor, attn_mask: Tensor | None = None,
              past_key: Tensor | None = None, past_value: Tensor | None = None,
              nonpad_kv_seqlen: Tensor | None = None, *, is_causal: int = 0, kv_num_heads: int | None = None,
              q_num_heads: int | None = None, qk_matmul_output_mode: int = 0, scale: float | None = None,
              softcap: float = 0.0, softmax_precision: int | None = None, left_window_size: int = -1,
              right_window_size: int = -1) -> list[Tensor | None]:
    _float_only(Q, "Attention's Q")
    if Q.rank not in (3, 4) or K.rank != Q.rank or V.rank != Q.rank:
        raise ConversionError(f"Q, K and V must all be 3-D or all 4-D, got {Q.type}, {K.type}, {V.type}")
    if (past_key is None) != (past_value is None):
        raise ConversionError("past_key and past_value must be given together")
    if nonpad_kv_seqlen is not None and past_key is not None:
        raise ConversionError("nonpad_kv_seqlen cannot be combined with past_key / past_value")
    if qk_matmul_output_mode not in (0, 1, 2, 3):
        raise ConversionError(f"qk_matmul_output_mode must be 0..3, got {qk_matmul_output_mode}")
    three_d = Q.rank == 3
    if three_d:
        Q = _heads_first(b, Q, q_num_heads, "Q")
        K = _heads_first(b, K, kv_num_heads, "K")
        V = _heads_first(b, V, kv_num_heads, "V")
    out_dtype = Q.dtype
    if past_key is not None and past_value is not None:
        K = b.op("concat", [past_key, K], {"axis": 2})
        V = b.op("concat", [past_value, V], {"axis": 2})
    present_key, present_value = K, V
    # f16 / bf16 attention computes in f32, as fused attention kernels accumulate: rounding every step
    # to 8 or 11 bits costs more accuracy than the casts cost time
    dtype = "f32" if out_dtype in ("f16", "bf16") else out_dtype
    Q, K, V = b.cast(Q, dtype), b.cast(K, dtype), b.cast(V, dtype)
    if attn_mask is not None and attn_mask.dtype != "i1":
        attn_mask = b.cast(attn_mask, dtype)
    bsz, hq, sq, d = Q.shape
    hkv, skv = K.shape[1], K.shape[2]
    if hq % hkv:
        raise ConversionError(f"{hq} query heads are not a multiple of {hkv} key/value heads")
    groups = hq // hkv

    # scores: (Q * s) @ K^T (the ONNX function scales Q and K by sqrt(s) each; Q alone is cheaper)
    s = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    q = b.op("mul", [Q, _scalar(b, s, dtype)])
    kt = b.op("transpose", [K], {"perm": [0, 1, 3, 2]})
    if groups > 1:  # grouped-query attention: query head h reads kv head h // groups, by broadcasting
        q = b.reshape(q, [bsz, hkv, groups, sq, d])
        kt = b.reshape(kt, [bsz, hkv, 1, d, skv])
    scores = b.reshape(b.op("matmul", [q, kt]), [bsz, hq, sq, skv])
    if softcap > 0:
        cap = _scalar(b, softcap, dtype)
        scores = b.op("mul", [b.op("tanh", [b.op("div", [scores, cap])]), cap])
    qk_out = scores
    past = past_key.shape[2] if past_key is not None else 0
    bias = _attention_bias(b, Q, skv, attn_mask, past, nonpad_kv_seqlen, bool(is_causal),
                           left_window_size, right_window_size)
    if bias is not None:
        scores = b.op("add", [scores, bias])
    if qk_matmul_output_mode == 2:
        qk_out = scores

    work = onnx_element_type(softmax_precision, "softmax_precision") if softmax_precision else dtype
    probs = b.op("softmax", [b.cast(scores, work)], {"axis": -1})
    if bias is not None:  # a row with no attendable key gives zeros, not NaN
        row_max = b.op("reduce_max", [bias], {"axes": [-1], "keepdims": True})
        empty = b.op("equal", [row_max, _scalar(b, NEG_INF, dtype)])
        if not empty.is_const or empty.const().any():
            probs = b.op("where", [empty, _scalar(b, 0, work), probs])
    probs = b.cast(probs, dtype)
    if qk_matmul_output_mode == 3:
        qk_out = probs

    if groups > 1:
        y = b.op("matmul", [b.reshape(probs, [bsz, hkv, groups, sq, skv]),
                            b.reshape(V, [bsz, hkv, 1, skv, V.shape[3]])])
        y = b.reshape(y, [bsz, hq, sq, V.shape[3]])
    else:
        y = b.op("matmul", [probs, V])
    if three_d:
        y = b.reshape(b.op("transpose", [y], {"perm": [0, 2, 1, 3]}), [bsz, sq, hq * V.shape[3]])
    qk = b.cast(qk_out, out_dtype) if b.n_outputs > 3 else None  # no dead cast when the output is unused
    return [b.cast(y, out_dtype), present_key, present_value, qk]


@converter("RotaryEmbedding", since=23)
def RotaryEmbedding(b: Builder, X: Tensor, cos_cache: Tensor, sin_cache: Tensor,
                    position_ids: Tensor | None = None, *, interleaved: int = 0, num_heads: int = 0,
                    rotary_embedding_dim: int = 0) -> Tensor:
    # work in (B, S, H, D)
    if X.rank == 4:
        x = b.op("transpose", [X], {"perm": [0, 2, 1, 3]})
    elif X.rank == 3:
        if num_heads <= 0:
            raise ConversionError("a 3-D input needs the num_heads attribute")
        bs, s, hd = X.shape
        x = b.reshape(X, [bs, s, num_heads, hd // num_heads])
    else:
        raise ConversionError(f"input must be 3-D or 4-D, got {X.type}")
    bs, s, h, d = x.shape
    rd = rotary_embedding_dim or d
    half = rd // 2
    if position_ids is not None:
        cos_cache = b.op("gather", [cos_cache, position_ids], {"axis": 0})
        sin_cache = b.op("gather", [sin_cache, position_ids], {"axis": 0})
    if cos_cache.shape[-1] != half or sin_cache.shape[-1] != half:
        raise ConversionError(f"cos/sin caches must have {half} values per position, got {cos_cache.type}")
    cos = b.reshape(cos_cache, [bs, s, 1, half])
    sin = b.reshape(sin_cache, [bs, s, 1, half])
    rot = x if rd == d else _slice(b, x, 3, 0, rd)
    if interleaved:
        pairs = b.reshape(rot, [bs, s, h, half, 2])
        x1 = b.reshape(_slice(b, pairs, 4, 0, 1), [bs, s, h, half])
        x2 = b.reshape(_slice(b, pairs, 4, 1, 2), [bs, s, h, half])
    else:
        x1, x2 = _slice(b, rot, 3, 0, half), _slice(b, rot, 3, half, rd)
    real = b.op("sub", [b.op("mul", [cos, x1]), b.op("mul", [sin, x2])])
    imag = b.op("add", [b.op("mul", [sin, x1]), b.op("mul", [cos, x2])])
    if interleaved:
        out = b.op("concat", [b.reshape(real, [bs, s, h, half, 1]), b.reshape(imag, [bs, s, h, half, 1])],
                   {"axis": 4})
        out = b.reshape(out, [bs, s, h, rd])
    else:
        out = b.op("concat", [real, imag], {"axis": 3})
    if rd < d:
        out = b.op("concat", [out, _slice(b, x, 3, rd, d)], {"axis": 3})
    if X.rank == 4:
        return b.op("transpose", [out], {"perm": [0, 2, 1, 3]})
    return b.reshape(out, list(X.shape))


# losses ----------------------------------------------------------------------------------------------
def _nll(b: Builder, x: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int | None,
         reduction: str) -> Tensor:
    """-x[n, target[n, d...], d...], weighted by weight[target] (0 where target == ignore_index), reduced."""
    if reduction not in ("none", "sum", "mean"):
        raise ConversionError(f"reduction must be none, sum or mean, got '{reduction}'")
    if x.rank < 2 or target.rank != x.rank - 1:
        raise ConversionError(f"input (N, C, d...) and target (N, d...) do not fit: {x.type}, {target.type}")
    keep = None
    t = target
    if ignore_index is not None:
        ii = _scalar(b, ignore_index, target.dtype)
        keep = b.op("not", [b.op("equal", [target, ii])])
        t = b.op("where", [keep, target, _scalar(b, 0, target.dtype)])  # ignored targets may be out of range
    idx = b.reshape(t, [t.shape[0], 1, *t.shape[1:]])
    picked = b.reshape(b.op("gather_elements", [x, idx], {"axis": 1}), list(t.shape))
    loss = b.op("neg", [picked])
    w = None
    if weight is not None:
        w = b.op("gather", [weight, t], {"axis": 0})
        if keep is not None:
            w = b.op("where", [keep, w, _scalar(b, 0, x.dtype)])
    elif keep is not None:
        w = b.op("where", [keep, _scalar(b, 1, x.dtype), _scalar(b, 0, x.dtype)])
    if w is not None:
        loss = b.op("mul", [loss, w])
    if reduction == "none":
        return loss
    total = b.op("reduce_sum", [loss], {"keepdims": False})
    if reduction == "sum":
        return total
    if w is None:
        return b.op("reduce_mean", [loss], {"keepdims": False})
    return b.op("div", [total, b.op("reduce_sum", [w], {"keepdims": False})])


@converter("NegativeLogLikelihoodLoss", since=12)
def NegativeLogLikelihoodLoss(b: Builder, input: Tensor, target: Tensor, weight: Tensor | None = None, *,
                              ignore_index: int | None = None, reduction: str = "mean") -> Tensor:
    return _nll(b, input, target, weight, ignore_index, reduction)


@converter("SoftmaxCrossEntropyLoss", since=12)
def SoftmaxCrossEntropyLoss(b: Builder, scores: Tensor, labels: Tensor, weights: Tensor | None = None, *,
                            ignore_index: int | None = None, reduction: str = "mean") -> list[Tensor]:
    log_prob = b.op("log_softmax", [scores], {"axis": 1})
    return [_nll(b, log_prob, labels, weights, ignore_index, reduction), log_prob]


# quantization ----------------------------------------------------------------------------------------
QUANT_RANGES = {t: int_range(t) for t in ("ui8", "i8", "ui16", "i16", "ui4", "i4", "ui2", "i2")}
QUANT_FLOATS = frozenset({"f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ", "f4E2M1FN"})
"""Float types QuantizeLinear rounds to by a cast (saturating for float8 unless saturate=0); their zero
point must be 0, and only f4E2M1FN adds it, as onnx's reference does."""


def _quant_param(b: Builder, p: Tensor, x: Tensor, axis: int, block_size: int) -> Tensor:
    """A scale or zero point made to broadcast against x: per tensor, per axis, or repeated per block."""
    if p.rank == 0 or p.type.numel == 1:
        return b.reshape(p, [])
    axis = axis % x.rank
    if not block_size:
        if p.rank != 1 or p.shape[0] != x.shape[axis]:
            raise ConversionError(f"a per-axis scale / zero point must be [{x.shape[axis]}], got {p.type}")
        return b.reshape(p, [x.shape[axis] if i == axis else 1 for i in range(x.rank)])
    if p.rank != x.rank or any(p.shape[i] != x.shape[i] for i in range(x.rank) if i != axis) or \
            p.shape[axis] != -(-x.shape[axis] // block_size):
        raise ConversionError(f"blocked scale / zero point {p.type} does not fit input {x.type} with "
                              f"block_size {block_size} on axis {axis}")
    return b.op("gather", [p, b.const(np.arange(x.shape[axis]) // block_size)], {"axis": axis})


def _zero_float_zero_point(zero_point: Tensor | None, dtype: str) -> None:
    """A float zero point must be 0, as ONNX says (and onnx's reference checks for float8); checked where
    it is a constant."""
    if zero_point is not None and zero_point.is_const and \
            np.any(zero_point.const().astype(np.float32) != 0):
        raise ConversionError(f"a {dtype} zero point must be 0")


@converter("QuantizeLinear", since=10)
def QuantizeLinear(b: Builder, x: Tensor, y_scale: Tensor, y_zero_point: Tensor | None = None, *,
                   axis: int = 1, block_size: int = 0, output_dtype: int = 0, precision: int = 0,
                   saturate: int = 1) -> Tensor:
    if y_zero_point is not None:
        out = y_zero_point.dtype
    else:
        out = onnx_element_type(output_dtype, "output_dtype") if output_dtype else "ui8"
    if out not in QUANT_RANGES and out not in QUANT_FLOATS:
        raise ConversionError(f"quantizing to {out} is unsupported (8-, 16-, 4- and 2-bit integers, float8 "
                              f"and float4 are)")
    scale = _quant_param(b, y_scale, x, axis, block_size)
    work = onnx_element_type(precision, "precision") if precision else x.dtype
    if not precision and scale.dtype != x.dtype:
        work = "f32"
    q = b.op("div", [b.cast(x, work), b.cast(scale, work)])
    if out in QUANT_FLOATS:
        if out != "f4E2M1FN":
            _zero_float_zero_point(y_zero_point, out)
        elif y_zero_point is not None:  # onnx's reference adds a float4 zero point
            q = b.op("add", [q, b.cast(_quant_param(b, y_zero_point, x, axis, block_size), work)])
        return b.op("cast", [q], {"to": out} if saturate else {"to": out, "saturate": False})
    q = b.cast(b.op("round", [q]), "i32")
    if y_zero_point is not None:
        q = b.op("add", [q, b.cast(_quant_param(b, y_zero_point, x, axis, block_size), "i32")])
    lo, hi = QUANT_RANGES[out]
    return b.cast(b.op("clip", [q], {"min": float(lo), "max": float(hi)}), out)


@converter("DequantizeLinear", since=10)
def DequantizeLinear(b: Builder, x: Tensor, x_scale: Tensor, x_zero_point: Tensor | None = None, *,
                     axis: int = 1, block_size: int = 0, output_dtype: int = 0) -> Tensor:
    if x.dtype not in QUANT_RANGES and x.dtype not in QUANT_FLOATS and x.dtype != "i32":
        raise ConversionError(f"dequantizing {x.dtype} is unsupported (8-, 16-, 32-, 4- and 2-bit integers, "
                              f"float8 and float4 are)")
    y = b.cast(x, "f32")
    if x.dtype in QUANT_FLOATS:
        _zero_float_zero_point(x_zero_point, x.dtype)
    elif x_zero_point is not None:
        y = b.op("sub", [y, b.cast(_quant_param(b, x_zero_point, x, axis, block_size), "f32")])
    y = b.op("mul", [y, b.cast(_quant_param(b, x_scale, x, axis, block_size), "f32")])
    return b.cast(y, onnx_element_type(output_dtype, "output_dtype") if output_dtype else x_scale.dtype)


@converter("DynamicQuantizeLinear", since=11)
def DynamicQuantizeLinear(b: Builder, x: Tensor) -> list[Tensor]:
    _float_only(x, "DynamicQuantizeLinear's input")
    x = b.cast(x, "f32")
    zero = _scalar(b, 0, "f32")
    hi = b.op("max", [b.op("reduce_max", [x], {"keepdims": False}), zero])
    lo = b.op("min", [b.op("reduce_min", [x], {"keepdims": False}), zero])
    span = b.op("where", [b.op("equal", [hi, lo]), _scalar(b, 1.0, "f32"), b.op("sub", [hi, lo])])
    scale = b.op("div", [span, _scalar(b, 255.0, "f32")])
    zp = b.op("round", [b.op("clip", [b.op("neg", [b.op("div", [lo, scale])])], {"min": 0.0, "max": 255.0})])
    y = b.op("add", [b.op("round", [b.op("div", [x, scale])]), zp])
    y = b.cast(b.op("clip", [y], {"min": 0.0, "max": 255.0}), "ui8")
    return [y, scale, b.cast(zp, "ui8")]


# sampling --------------------------------------------------------------------------------------------
GRID_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic",
              "nearest": "nearest"}


@converter("GridSample", since=16)
def GridSample(b: Builder, X: Tensor, grid: Tensor, *, align_corners: int = 0, mode: str = "linear",
               padding_mode: str = "zeros") -> Tensor:
    if mode not in GRID_MODES:
        raise ConversionError(f"mode must be one of {', '.join(GRID_MODES)}, got '{mode}'")
    if b.opset < 20 and X.rank != 4:
        raise ConversionError(f"GridSample before opset 20 takes a 4-D input, got {X.type}")
    attrs = {"mode": GRID_MODES[mode], "padding_mode": padding_mode, "align_corners": bool(align_corners)}
    return b.op("grid_sample", [X, b.cast(grid, X.dtype)], attrs)


def _base_grid(dims: Sequence[int], align_corners: int) -> np.ndarray:
    """The homogeneous sampling positions (prod(dims), k + 1) in [-1, 1], x (innermost dim) first."""
    axes = []
    for n in dims:
        if align_corners:
            axes.append(np.linspace(-1.0, 1.0, n) if n > 1 else np.array([-1.0]))
        else:
            axes.append((np.arange(n) * 2.0 + 1.0) / n - 1.0)
    mesh = np.meshgrid(*axes, indexing="ij")
    cols = [m.reshape(-1) for m in reversed(mesh)] + [np.ones(math.prod(dims))]
    return np.stack(cols, axis=1)


@converter("AffineGrid", since=20)
def AffineGrid(b: Builder, theta: Tensor, size: Tensor, *, align_corners: int = 0) -> Tensor:
    _float_only(theta, "AffineGrid's theta")
    shape = size.ints("AffineGrid's size")
    if len(shape) not in (4, 5) or theta.rank != 3 or theta.shape[1:] != (len(shape) - 2, len(shape) - 1):
        raise ConversionError(f"theta {theta.type} and size {shape} do not describe a 2-D or 3-D grid")
    n, dims, k = shape[0], shape[2:], len(shape) - 2
    base = b.const(_base_grid(dims, align_corners).T.copy())  # (k + 1, P), float64 as onnx computes it
    grid = b.op("matmul", [b.cast(theta, "f64"), base])  # (N, k, P)
    grid = b.op("transpose", [grid], {"perm": [0, 2, 1]})
    return b.cast(b.reshape(grid, [n, *dims, k]), theta.dtype)


@converter("RoiAlign", since=10)
def RoiAlign(b: Builder, X: Tensor, rois: Tensor, batch_indices: Tensor, *,
             coordinate_transformation_mode: str = "half_pixel", mode: str = "avg", output_height: int = 1,
             output_width: int = 1, sampling_ratio: int = 0, spatial_scale: float = 1.0) -> Tensor:
    if b.opset < 16:  # opset 10 had no such attribute and behaved as output_half_pixel
        coordinate_transformation_mode = "output_half_pixel"
    return b.op("roi_align", [X, b.cast(rois, X.dtype), batch_indices],
                {"coordinate_transformation_mode": coordinate_transformation_mode, "mode": mode.lower(),
                 "output_height": int(output_height), "output_width": int(output_width),
                 "sampling_ratio": int(sampling_ratio), "spatial_scale": float(spatial_scale)})


@converter("Col2Im", since=18)
def Col2Im(b: Builder, input: Tensor, image_shape: Tensor, block_shape: Tensor, *,
           dilations: list[int] | None = None, pads: list[int] | None = None,
           strides: list[int] | None = None) -> Tensor:
    return b.op("col2im", [input], {"image_shape": image_shape.ints("Col2Im's image_shape"),
                                    "block_shape": block_shape.ints("Col2Im's block_shape"),
                                    "dilations": list(dilations or []), "pads": list(pads or []),
                                    "strides": list(strides or [])})


@converter("MaxUnpool", since=9)
def MaxUnpool(b: Builder, X: Tensor, I: Tensor, output_shape: Tensor | None = None, *,  # noqa: E741
              kernel_shape: list[int], pads: list[int] | None = None,
              strides: list[int] | None = None) -> Tensor:
    k = len(kernel_shape)
    strides = list(strides or [1] * k)
    pads = list(pads or [0] * (2 * k))
    pooled = [*X.shape[:2], *((X.shape[2 + i] - 1) * strides[i] - pads[i] - pads[k + i] + kernel_shape[i]
                              for i in range(k))]
    shape = output_shape.ints("MaxUnpool's output_shape") if output_shape is not None else pooled
    return b.op("max_unpool", [X, b.cast(I, "i64")], {"shape": shape, "pooled_shape": pooled})


@converter("CenterCropPad", since=18)
def CenterCropPad(b: Builder, input_data: Tensor, shape: Tensor, *, axes: list[int] | None = None) -> Tensor:
    want = shape.ints("CenterCropPad's shape")
    rank = input_data.rank
    axes = [a % rank for a in (axes if axes is not None else range(rank))]
    if len(axes) != len(want):
        raise ConversionError(f"shape has {len(want)} values for {len(axes)} axes")
    x = input_data
    pads = [0] * (2 * rank)
    for a, n in zip(axes, want, strict=True):
        d = x.shape[a]
        if n < d:  # crop: the extra element of an odd difference comes off the end
            start = (d - n) // 2
            x = _slice(b, x, a, start, start + n)
        elif n > d:  # pad: the extra element goes on the end
            pads[a], pads[rank + a] = (n - d) // 2, n - d - (n - d) // 2
    return b.op("pad", [x], {"pads": pads}) if any(pads) else x


# caches and recurrent attention ------------------------------------------------------------------------
@converter("TensorScatter", since=24)
def TensorScatter(b: Builder, past_cache: Tensor, update: Tensor, write_indices: Tensor | None = None, *,
                  axis: int = -2, mode: str = "linear") -> Tensor:
    """present[b, .., write_indices[b] + s (mod the cache length if circular), ..] = update[b, .., s, ..]:
    each cache position finds the update row it takes with a gather, or keeps its value."""
    if mode not in ("linear", "circular"):
        raise ConversionError(f"mode must be linear or circular, got '{mode}'")
    rank = past_cache.rank
    a = axis % rank
    if a == 0:
        raise ConversionError("axis must not be the batch axis")
    size, n = past_cache.shape[a], update.shape[a]
    pos = np.arange(size).reshape([size if i == a else 1 for i in range(rank)])
    if write_indices is None:
        rel = b.const(np.broadcast_to(pos, [past_cache.shape[0], *pos.shape[1:]]))
    else:
        w = b.reshape(b.cast(write_indices, "i64"), [past_cache.shape[0]] + [1] * (rank - 1))
        rel = b.op("sub", [b.const(pos), w])
    if mode == "circular":
        length = _scalar(b, size, "i64")
        r = b.op("mod", [rel, length])  # C remainder, then moved to [0, size)
        rel = b.op("where", [b.op("less", [r, _scalar(b, 0, "i64")]), b.op("add", [r, length]), r])
    valid = b.op("and", [b.op("greater_equal", [rel, _scalar(b, 0, "i64")]),
                         b.op("less", [rel, _scalar(b, n, "i64")])])
    idx = b.op("clip", [rel], {"min": 0.0, "max": float(n - 1)})
    idx = b.op("expand", [idx], {"shape": list(past_cache.shape)})
    taken = b.op("gather_elements", [update, idx], {"axis": a})
    return b.op("where", [valid, taken, past_cache])


@converter("CausalConvWithState", since=27)
def CausalConvWithState(b: Builder, input: Tensor, weight: Tensor, bias: Tensor | None = None,
                        past_state: Tensor | None = None, *, activation: str = "none") -> list[Tensor]:
    """Depthwise causal conv1d over [past_state, input] (zeros when no state), an optional SiLU, and the
    last k - 1 positions of that padded input as the next state."""
    if activation not in ("none", "silu", "swish"):
        raise ConversionError(f"activation must be none, silu or swish, got '{activation}'")
    if input.rank != 3 or weight.rank != 3 or weight.shape[1] != 1:
        raise ConversionError(f"input (B, C, L) and weight (C, 1, k) expected, got {input.type}, "
                              f"{weight.type}")
    bsz, c, length = input.shape
    k = weight.shape[2]
    if past_state is None:
        past_state = b.const(np.zeros((bsz, c, k - 1), _np(input.dtype)))
    padded = b.op("concat", [past_state, input], {"axis": 2}) if k > 1 else input
    full = length + k - 1
    y = b.op("conv2d", [b.reshape(padded, [bsz, c, 1, full]), b.reshape(weight, [c, 1, 1, k]),
                        *([bias] if bias is not None else [])], {"groups": c})
    y = b.reshape(y, [bsz, c, length])
    if activation != "none":
        y = b.op("mul", [y, b.op("sigmoid", [y])])
    if k == 1:
        return [y, b.const(np.zeros((bsz, c, 0), _np(input.dtype)))]
    return [y, _slice(b, padded, 2, full - (k - 1), full)]


@converter("LinearAttention", since=27)
def LinearAttention(b: Builder, query: Tensor, key: Tensor, value: Tensor, past_state: Tensor | None = None,
                    decay: Tensor | None = None, beta: Tensor | None = None, *, chunk_size: int = 64,
                    kv_num_heads: int, q_num_heads: int, scale: float = 0.0,
                    update_rule: str = "gated_delta") -> list[Tensor]:
    """The recurrence runs in the `linear_attention` op; this unpacks (B, T, H*D) to (B, H, T, D) and
    decay / beta to (B, H, T, 1 or D). chunk_size is a tuning hint with no effect on the result."""
    rules = {"linear": (False, False), "gated": (True, False), "delta": (False, True),
             "gated_delta": (True, True)}
    if update_rule not in rules:
        raise ConversionError(f"update_rule must be one of {', '.join(rules)}, got '{update_rule}'")
    gated, delta = rules[update_rule]
    if gated != (decay is not None) or delta != (beta is not None):
        raise ConversionError(f"update_rule '{update_rule}' {'needs' if gated else 'forbids'} decay and "
                              f"{'needs' if delta else 'forbids'} beta")
    if query.rank != 3 or key.rank != 3 or value.rank != 3:
        raise ConversionError("query, key and value must be 3-D (B, T, H*D)")
    if q_num_heads <= 0 or kv_num_heads <= 0 or q_num_heads % kv_num_heads:
        raise ConversionError(f"q_num_heads {q_num_heads} must be a positive multiple of kv_num_heads "
                              f"{kv_num_heads}")
    bsz, t, _ = query.shape
    q = _heads_first(b, query, q_num_heads, "query")
    k = _heads_first(b, key, kv_num_heads, "key")
    v = _heads_first(b, value, kv_num_heads, "value")
    dk, dv = q.shape[3], v.shape[3]
    f32 = "f32"
    if past_state is None:
        state = b.const(np.zeros((bsz, kv_num_heads, dk, dv), np.float32))
        state_dtype = query.dtype
    else:
        state, state_dtype = b.cast(past_state, f32), past_state.dtype
    if decay is not None:
        last = decay.shape[-1]
        if last not in (kv_num_heads, kv_num_heads * dk):
            raise ConversionError(f"decay's last dim {last} must be kv_num_heads or kv_num_heads * d_k")
        g = b.op("transpose", [b.reshape(decay, [bsz, t, kv_num_heads, last // kv_num_heads])],
                 {"perm": [0, 2, 1, 3]})
    else:
        g = b.const(np.zeros((1, 1, 1, 1), np.float32))
    if beta is not None:
        last = beta.shape[-1]
        bt = b.op("transpose", [b.reshape(beta, [bsz, t, last, 1])], {"perm": [0, 2, 1, 3]})
    else:
        bt = b.const(np.ones((1, 1, 1, 1), np.float32))
    s = float(scale) if scale else 1.0 / math.sqrt(dk)
    y, present = b.ops("linear_attention", [b.cast(x, f32) for x in (q, k, v, state, g, bt)],
                       {"update_rule": update_rule, "scale": s})
    y = b.reshape(b.op("transpose", [y], {"perm": [0, 2, 1, 3]}), [bsz, t, q_num_heads * dv])
    return [b.cast(y, query.dtype), b.cast(present, state_dtype)]


# training optimizers (ai.onnx.preview.training) ------------------------------------------------------
# The importer refuses nodes outside the default domain, so these run only once it accepts this domain.
def _optimizer_groups(inputs: Sequence[Tensor], per: int, op: str) -> list[list[Tensor]]:
    if len(inputs) % per:
        raise ConversionError(f"{op} takes R, T and {per} equal groups of tensors, got {len(inputs) + 2} "
                              "inputs")
    n = len(inputs) // per
    return [[inputs[j * n + i] for j in range(per)] for i in range(n)]


def _s(b: Builder, v: float, like: Tensor) -> Tensor:
    return _scalar(b, v, like.dtype)


@converter("Momentum")
def Momentum(b: Builder, R: Tensor, T: Tensor, *inputs: Tensor, alpha: float, beta: float, mode: str,
             norm_coefficient: float) -> list[Tensor]:
    if mode not in ("standard", "nesterov"):
        raise ConversionError(f"mode must be standard or nesterov, got '{mode}'")
    xs, vs = [], []
    first = b.op("greater", [T, _scalar(b, 0, T.dtype)])
    for x, g, v in _optimizer_groups(inputs, 3, "Momentum"):
        r = b.cast(R, x.dtype)
        g = b.op("add", [b.op("mul", [_s(b, norm_coefficient, x), x]), g])
        beta_t = b.op("where", [first, _s(b, beta, x), _s(b, 1.0, x)])
        v_new = b.op("add", [b.op("mul", [_s(b, alpha, x), v]), b.op("mul", [beta_t, g])])
        step = v_new if mode == "standard" else b.op("add", [g, b.op("mul", [_s(b, alpha, x), v_new])])
        xs.append(b.op("sub", [x, b.op("mul", [r, step])]))
        vs.append(v_new)
    return xs + vs


@converter("Adagrad")
def Adagrad(b: Builder, R: Tensor, T: Tensor, *inputs: Tensor, decay_factor: float = 0.0,
            epsilon: float = 1e-6, norm_coefficient: float = 0.0) -> list[Tensor]:
    xs, hs = [], []
    for x, g, h in _optimizer_groups(inputs, 3, "Adagrad"):
        t = b.cast(T, x.dtype)
        r = b.op("div", [b.cast(R, x.dtype),
                         b.op("add", [_s(b, 1.0, x), b.op("mul", [t, _s(b, decay_factor, x)])])])
        g = b.op("add", [b.op("mul", [_s(b, norm_coefficient, x), x]), g])
        h_new = b.op("add", [h, b.op("mul", [g, g])])
        root = b.op("add", [b.op("sqrt", [h_new]), _s(b, epsilon, x)])
        xs.append(b.op("sub", [x, b.op("div", [b.op("mul", [r, g]), root])]))
        hs.append(h_new)
    return xs + hs


@converter("Adam")
def Adam(b: Builder, R: Tensor, T: Tensor, *inputs: Tensor, alpha: float = 0.9, beta: float = 0.999,
         epsilon: float = 1e-6, norm_coefficient: float = 0.0,
         norm_coefficient_post: float = 0.0) -> list[Tensor]:
    xs, vs, hs = [], [], []
    for x, g, v, h in _optimizer_groups(inputs, 4, "Adam"):
        r, t = b.cast(R, x.dtype), b.cast(T, x.dtype)
        g = b.op("add", [b.op("mul", [_s(b, norm_coefficient, x), x]), g])
        v_new = b.op("add", [b.op("mul", [_s(b, alpha, x), v]), b.op("mul", [_s(b, 1 - alpha, x), g])])
        h_new = b.op("add", [b.op("mul", [_s(b, beta, x), h]),
                             b.op("mul", [_s(b, 1 - beta, x), b.op("mul", [g, g])])])
        root = b.op("add", [b.op("sqrt", [h_new]), _s(b, epsilon, x)])
        # bias correction sqrt(1 - beta^t) / (1 - alpha^t) from the second step on
        corr = b.op("div", [b.op("sqrt", [b.op("sub", [_s(b, 1.0, x), b.op("pow", [_s(b, beta, x), t])])]),
                            b.op("sub", [_s(b, 1.0, x), b.op("pow", [_s(b, alpha, x), t])])])
        r = b.op("where", [b.op("greater", [T, _scalar(b, 0, T.dtype)]), b.op("mul", [r, corr]), r])
        x_new = b.op("sub", [x, b.op("mul", [r, b.op("div", [v_new, root])])])
        xs.append(b.op("mul", [_s(b, 1 - norm_coefficient_post, x), x_new]))
        vs.append(v_new)
        hs.append(h_new)
    return xs + vs + hs
