"""Converters for attention and its relatives: Attention (masks, causal, GQA, softcap, KV cache),
RotaryEmbedding, TensorScatter, CausalConvWithState and LinearAttention, composed from matmul,
softmax, where and shape ops."""

from __future__ import annotations

import math

import numpy as np

from ..builder import Builder, ConversionError, Tensor
from ..registry import converter
from ..types import onnx_element_type
from .misc import NEG_INF, _float_only, _np, _scalar, _slice


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
