"""Attention: scaled dot-product attention as one op, what `recognize-attention` turns the exporters'
matmul-scale-mask-softmax-matmul chain into.

    attention(q, k, v, mask?) {scale} = softmax(q @ k^T * scale + mask, last axis) @ v

q is [..., Sq, D], k [..., Sk, D] (not transposed: the op contracts the last dims of q and k), v
[..., Sk, Dv]; the leading (batch, head) dims broadcast as in `matmul`. The optional mask is additive (0
where a key is visible, a large negative number or -inf where it is not) and broadcasts to the scores
[..., Sq, Sk]; the result is [..., Sq, Dv]. The reference computes in the operands' type (f16/bf16 through
f32) with the row max subtracted before the exponential, as `softmax` does.
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


def _parts(sig: Sig) -> tuple[tuple[Dim, ...], Dim, Dim, Dim, Dim]:
    """(batch shape, Sq, Sk, D, Dv), checking the operands fit together."""
    q, k, v = sig.operands[:3]
    for t, what in ((q, "q"), (k, "k"), (v, "v")):
        check(t.is_float, f"{what} must be a float tensor, got {t}")
        check(t.rank >= 2, f"{what} must have rank >= 2 ([..., seq, dim]), got {t}")
    for t, what in zip(sig.operands[1:], ("k", "v", "mask"), strict=False):
        check(t.dtype == q.dtype, f"{what} element type {t.dtype} differs from q's {q.dtype}")
    check(_agree(q.shape[-1], k.shape[-1]), f"q and k head dims differ: {_fmt(q.shape)} vs {_fmt(k.shape)}")
    check(
        _agree(k.shape[-2], v.shape[-2]),
        f"k and v sequence lengths differ: {_fmt(k.shape)} vs {_fmt(v.shape)}",
    )
    batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    sq, sk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
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
    return [TensorType((*batch, sq, dv), sig.operands[0].dtype)]


def _verify(sig: Sig) -> None:
    check(math.isfinite(sig["scale"]), f"scale must be finite, got {sig['scale']}")


def _reference(
    sig: Sig, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None
) -> np.ndarray:
    want = sig.results[0].np_dtype if sig.results else q.dtype
    narrow = q.dtype.name in ("float16", "bfloat16")
    q, k, v = ((x.astype(np.float32) if narrow else x) for x in (q, k, v))
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * s_type(q)(sig["scale"])
    if mask is not None:
        s = s + (mask.astype(np.float32) if narrow else mask)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
    return np.ascontiguousarray(np.matmul(p, v)).astype(want, copy=False)


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
        attrs={"scale": attr("float", 1.0)},
        traits=frozenset({"pure"}),
        cost=_cost,
        doc="Scaled dot-product attention softmax(q @ k^T * scale + mask) @ v over the last two dims: q "
        "[..., Sq, D], k [..., Sk, D] (not transposed), v [..., Sk, Dv], an optional additive mask "
        "broadcast to [..., Sq, Sk]; leading dims broadcast. Made by recognize-attention.",
    )
)
