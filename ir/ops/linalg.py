"""Contractions: `matmul` (numpy/ONNX MatMul semantics) and `gemm` (ONNX Gemm).

These are where nearly all of a network's FLOPs go, so their cost functions are exact (2 FLOPs per
multiply-accumulate) and the references call BLAS through np.matmul rather than looping. References compute
in the operand dtype, as onnxruntime does: integer products wrap, f16 rounds per BLAS call.
"""

from __future__ import annotations

import math

import numpy as np

from ..types import TensorType, widen
from .registry import Cost, OpDef, Sig, attr, broadcast_shapes, check, io_bytes, register

LINALG_TRAITS = frozenset({"pure"})

Dim = int | None


def _dims_agree(x: Dim, y: Dim) -> bool:
    """Static dims must be equal; a dynamic dim (None) is checked at run time, not here."""
    return x is None or y is None or x == y


def _fmt(d: Dim) -> str:
    return "?" if d is None else str(d)


HALF_WEIGHTS = ("f16", "bf16")
"""B's types beside an f32 A: weights stored in half precision (convert-precision), widened to f32."""


def _numeric_pair(a: TensorType, b: TensorType) -> None:
    check(a.dtype == b.dtype or (a.dtype == "f32" and b.dtype in HALF_WEIGHTS),
          f"operand element types differ: {a.dtype} vs {b.dtype}")
    check(a.dtype != "i1", f"operands must be numeric, got {a}")



# matmul ------------------------------------------------------------------------------------------------
def _matmul_parts(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[tuple[Dim, ...], Dim, Dim, Dim]:
    """(batch shape, M, K, N) of a matmul, rejecting what numpy would; a 1-D operand counts M or N as 1."""
    check(len(a) >= 1 and len(b) >= 1, f"operands must have rank >= 1, got ranks {len(a)} and {len(b)}")
    m, ka = (a[-2] if len(a) >= 2 else 1), a[-1]
    kb, n = (b[-2], b[-1]) if len(b) >= 2 else (b[0], 1)
    check(_dims_agree(ka, kb), f"contracting dims differ: {_fmt(ka)} vs {_fmt(kb)}")
    batch = broadcast_shapes(a[:-2], b[:-2])
    return batch, m, (ka if ka is not None else kb), n


def _matmul_infer(sig: Sig) -> list[TensorType]:
    a, b = sig.operands
    _numeric_pair(a, b)
    batch, m, _, n = _matmul_parts(a.shape, b.shape)
    # a 1-D operand is promoted to a matrix and the added dim is dropped from the result again
    shape = batch + ((m,) if a.rank >= 2 else ()) + ((n,) if b.rank >= 2 else ())
    return [TensorType(shape, a.dtype)]


def _matmul_ref(sig: Sig, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    want = sig.results[0].np_dtype if sig.results else a.dtype
    return np.asarray(np.matmul(widen(a), widen(b))).astype(want, copy=False)


def _matmul_cost(sig: Sig) -> Cost:
    r, w = io_bytes(sig)  # first, so a dynamic shape fails here as in every other cost function
    a, b = sig.operands
    batch, m, k, n = _matmul_parts(a.shape, b.shape)
    return Cost(2 * math.prod(batch) * m * k * n, r, w)  # type: ignore[operator,arg-type]


register(OpDef(
    "matmul", ("a", "b"),
    infer=_matmul_infer,
    reference=_matmul_ref,
    traits=LINALG_TRAITS,
    cost=_matmul_cost,
    doc="Matrix product with numpy semantics: batch dims broadcast, a 1-D operand is promoted to a "
        "matrix and the added dim removed.",
))


# gemm --------------------------------------------------------------------------------------------------
def _gemm_mkn(sig: Sig) -> tuple[Dim, Dim, Dim]:
    a, b = sig.operands[:2]
    check(a.rank == 2 and b.rank == 2, f"a and b must have rank 2, got ranks {a.rank} and {b.rank}")
    m, ka = reversed(a.shape) if sig["trans_a"] else a.shape
    kb, n = reversed(b.shape) if sig["trans_b"] else b.shape
    check(_dims_agree(ka, kb), f"contracting dims differ: {_fmt(ka)} vs {_fmt(kb)}")
    return m, (ka if ka is not None else kb), n


def _gemm_infer(sig: Sig) -> list[TensorType]:
    a, b = sig.operands[:2]
    _numeric_pair(a, b)
    m, _, n = _gemm_mkn(sig)
    if len(sig.operands) > 2:
        c = sig.operands[2]
        check(c.dtype == a.dtype, f"c element type differs from a's: {c.dtype} vs {a.dtype}")
        check(c.rank <= 2, f"c must have rank <= 2, got rank {c.rank}")
        # unidirectional: c stretches to (M, N), never the other way
        target = (m, n)[2 - c.rank:]
        ok = all(dc == 1 or _dims_agree(dc, dt) for dc, dt in zip(c.shape, target, strict=True))
        check(ok, f"c of shape [{','.join(map(_fmt, c.shape))}] does not broadcast to [{_fmt(m)},{_fmt(n)}]")
    return [TensorType((m, n), a.dtype)]


def _gemm_ref(sig: Sig, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    want = sig.results[0].np_dtype if sig.results else a.dtype
    a, b = widen(a), widen(b)
    if sig["trans_a"]:
        a = a.T
    if sig["trans_b"]:
        b = b.T
    y = np.matmul(a, b)
    alpha, beta = sig["alpha"], sig["beta"]
    if np.issubdtype(y.dtype, np.integer):
        if alpha == 1 and beta == 1:  # exact integer arithmetic, wrapping like the matmul
            return (y + c if c is not None else y).astype(want, copy=False)
        # scaled integer gemm: float64, truncated once at the end, as the ONNX reference implementation does
        f = y * alpha + (c * beta if c is not None else 0)
        return f.astype(want)
    if alpha != 1:
        y = y * y.dtype.type(alpha)
    if c is not None:
        c = widen(c)
        y = y + (c * c.dtype.type(beta) if beta != 1 else c)
    return np.asarray(y).astype(want, copy=False)


def _gemm_cost(sig: Sig) -> Cost:
    r, w = io_bytes(sig)
    m, k, n = _gemm_mkn(sig)
    mn = m * n  # type: ignore[operator]
    flops = 2 * mn * k + (mn if sig["alpha"] != 1 else 0)  # type: ignore[operator]
    if len(sig.operands) > 2:
        flops += mn + (mn if sig["beta"] != 1 else 0)
    return Cost(flops, r, w)


register(OpDef(
    "gemm", ("a", "b", "c?"),
    infer=_gemm_infer,
    reference=_gemm_ref,
    attrs={
        "alpha": attr("float", 1.0),
        "beta": attr("float", 1.0),
        "trans_a": attr("bool", False),
        "trans_b": attr("bool", False),
    },
    traits=LINALG_TRAITS,
    cost=_gemm_cost,
    doc="alpha * op(a) @ op(b) + beta * c, op transposing when trans_a / trans_b; a and b are matrices "
        "and c (optional) broadcasts to (M, N).",
))
