"""Attention: scaled dot-product attention as one op, what `recognize-attention` turns the exporters'
matmul-scale-mask-softmax-matmul chain into.

    attention(q, k, v, mask?) {scale} = softmax(q @ k^T * scale + mask, last axis) @ v

With `layout = "bhsd"` (the default) q is [..., Sq, D], k [..., Sk, D] (not transposed: the op contracts
the last dims of q and k), v [..., Sk, Dv]; the leading (batch, head) dims broadcast as in `matmul`. The
optional mask is additive (0 where a key is visible, a large negative number or -inf where it is not) and
broadcasts to the scores [..., Sq, Sk]; the result is [..., Sq, Dv].

With `layout = "bshd"` q, k, v and the result keep the sequence dim before the head dim, as a linear layer
reshaped to heads gives them ([B, S, H, D], before the transposes exporters insert): q [..., Sq, H, D], k
[..., Sk, H, D], v [..., Sk, H, Dv] -> [..., Sq, H, Dv]. It is the bhsd op on q, k, v with dims -3 and -2
swapped, the result swapped back; the mask still broadcasts to the scores [..., H, Sq, Sk].

With `safe = true` probabilities that come out NaN are 0, as torch's `_safe_softmax` (which exporters write
as `where(isnan(p), 0, p)` after the softmax) has them: a query whose every key is masked with -inf gets
zeros, not NaN. The OpenCL kernel zeroes such rows; it lets a NaN score propagate as any float kernel does
(the reference, following the guard, zeroes that row too).

The reference computes in the operands' type (f16/bf16 through f32) with the row max subtracted before the
exponential, as `softmax` does.
"""

from __future__ import annotations

import math

import numpy as np

from ..types import TensorType
from .registry import Cost, OpDef, Sig, attr, broadcast_shapes, check, io_bytes, register

Dim = int | None


def _fmt(shape: tuple[Dim, ...]) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _agree(a: Dim, b: Dim) -> bool:
    return a is None or b is None or a == b


LAYOUTS = ("bhsd", "bshd")


def heads_first(shape: tuple[Dim, ...], layout: str) -> tuple[Dim, ...]:
    """An operand's (or the result's) shape as the bhsd form sees it: dims -3 and -2 swapped for bshd."""
    if layout == "bhsd":
        return shape
    return (*shape[:-3], shape[-2], shape[-3], shape[-1])


def _parts(sig: Sig) -> tuple[tuple[Dim, ...], Dim, Dim, Dim, Dim]:
    """(batch shape, Sq, Sk, D, Dv) of the bhsd form, checking the operands fit together."""
    layout = sig["layout"]
    low = 2 if layout == "bhsd" else 3
    form = "[..., seq, dim]" if layout == "bhsd" else "[..., seq, heads, dim]"
    for t, what in zip(sig.operands[:3], ("q", "k", "v"), strict=True):
        check(t.is_float, f"{what} must be a float tensor, got {t}")
        check(t.rank >= low, f"{what} must have rank >= {low} ({form} in layout {layout}), got {t}")
    for t, what in zip(sig.operands[1:], ("k", "v", "mask"), strict=False):
        check(
            t.dtype == sig.operands[0].dtype,
            f"{what} element type {t.dtype} differs from q's {sig.operands[0].dtype}",
        )
    q, k, v = (heads_first(t.shape, layout) for t in sig.operands[:3])
    check(_agree(q[-1], k[-1]), f"q and k head dims differ: {_fmt(q)} vs {_fmt(k)}")
    check(_agree(k[-2], v[-2]), f"k and v sequence lengths differ: {_fmt(k)} vs {_fmt(v)}")
    batch = broadcast_shapes(q[:-2], k[:-2], v[:-2])
    sq, sk, d, dv = q[-2], k[-2], q[-1], v[-1]
    if len(sig.operands) > 3:
        m = sig.operands[3]
        scores = (*batch, sq, sk)
        fits = len(m.shape) <= len(scores) and all(
            a in (1, None) or _agree(a, b) for a, b in zip(m.shape[::-1], scores[::-1], strict=False)
        )
        check(fits, f"mask {_fmt(m.shape)} does not broadcast to the scores {_fmt(scores)}")
    return batch, sq, sk, d, dv


def _infer(sig: Sig) -> list[TensorType]:
    batch, sq, _, _, dv = _parts(sig)
    return [TensorType(heads_first((*batch, sq, dv), sig["layout"]), sig.operands[0].dtype)]


def _verify(sig: Sig) -> None:
    check(math.isfinite(sig["scale"]), f"scale must be finite, got {sig['scale']}")


def _reference(
    sig: Sig, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None
) -> np.ndarray:
    want = sig.results[0].np_dtype if sig.results else q.dtype
    narrow = q.dtype.name in ("float16", "bfloat16")
    bshd = sig["layout"] == "bshd"
    q, k, v = ((x.astype(np.float32) if narrow else x) for x in (q, k, v))
    if bshd:
        q, k, v = (np.swapaxes(x, -3, -2) for x in (q, k, v))
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * s_type(q)(sig["scale"])
    if mask is not None:
        s = s + (mask.astype(np.float32) if narrow else mask)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
    if sig["safe"]:
        p = np.where(np.isnan(p), p.dtype.type(0), p)
    y = np.matmul(p, v)
    return np.ascontiguousarray(np.swapaxes(y, -3, -2) if bshd else y).astype(want, copy=False)


def s_type(x: np.ndarray) -> type:
    return x.dtype.type


def _cost(sig: Sig) -> Cost:
    r, w = io_bytes(sig)
    batch, sq, sk, d, dv = _parts(sig)
    n = math.prod(batch) * sq * sk  # type: ignore[arg-type,operator]
    # 2 FLOPs per multiply-add in both products; scale, mask, max, exp (4), sum and divide per score
    return Cost(2 * n * d + 2 * n * dv + 9 * n, r, w)  # type: ignore[operator]


register(
    OpDef(
        "attention",
        ("q", "k", "v", "mask?"),
        infer=_infer,
        verify=_verify,
        reference=_reference,
        attrs={"scale": attr("float", 1.0), "layout": attr("str", "bhsd", allowed=LAYOUTS),
               "safe": attr("bool", False)},
        traits=frozenset({"pure"}),
        cost=_cost,
        doc="Scaled dot-product attention softmax(q @ k^T * scale + mask) @ v over the last two dims: q "
        "[..., Sq, D], k [..., Sk, D] (not transposed), v [..., Sk, Dv], an optional additive mask "
        'broadcast to [..., Sq, Sk]; leading dims broadcast. `layout = "bshd"`: q, k, v and the result '
        "are [..., S, H, D] (sequence before heads, as a linear layer reshaped to heads gives them), the "
        "mask still broadcasts to [..., H, Sq, Sk]. `safe = true`: probabilities that come out NaN (a row "
        "whose every score is -inf) are 0, as torch's _safe_softmax. Made by recognize-attention.",
    )
)
