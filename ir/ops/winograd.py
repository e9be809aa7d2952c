"""Winograd F(2x2, 3x3) filter transform: `winograd_filter` turns a conv's [O, C, 3, 3] weights into the
16 matrices U[xi] = (G g G^T)[xi] a Winograd conv multiplies its transformed input tiles by, packed as
GEMM B panels [16, ceil(O/16), ceil(C/16)*16, 16] (channels zero-padded); `winograd_unfilter` recovers
the weights (G has a left inverse), the way `unpack` undoes `pack`.

The OpenCL conv template asks for the first on constant weights (computed once at load time), and the
launch's reference body undoes it with the second (docs/opencl.md, "Winograd convolutions"). G is
Lavin & Gray's F(2, 3) matrix [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]].
"""

from __future__ import annotations

import math

import numpy as np

from ..types import TensorType
from .registry import Cost, OpDef, Sig, attr, check, register

PURE = frozenset({"pure"})
G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
G_LEFT_INVERSE = np.linalg.pinv(G)  # [3, 4]: G_LEFT_INVERSE @ G == I
BLOCK = 16


def filter_shape(o: int, c: int) -> tuple[int, ...]:
    return (16, math.ceil(o / BLOCK), math.ceil(c / BLOCK) * BLOCK, BLOCK)


def transform_filter(w: np.ndarray) -> np.ndarray:
    """[O, C, 3, 3] -> [16, O/16, Cp, 16]: U[a*4+b, o // 16, c, o % 16] = (G w[o, c] G^T)[a, b]."""
    o, c = w.shape[:2]
    u = np.einsum("ai,ocij,bj->abco", G, w.astype(np.float64), G).reshape(16, c, o)
    out = np.zeros((16, filter_shape(o, c)[2], math.ceil(o / BLOCK) * BLOCK))
    out[:, :c, :o] = u
    panels = out.reshape(16, out.shape[1], -1, BLOCK).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(panels.astype(w.dtype))


def untransform_filter(u: np.ndarray, o: int, c: int) -> np.ndarray:
    full = u.astype(np.float64).transpose(0, 2, 1, 3).reshape(4, 4, u.shape[2], -1)[:, :, :c, :o]
    return np.einsum("ia,abco,jb->ocij", G_LEFT_INVERSE, full, G_LEFT_INVERSE).astype(u.dtype)


def _filter_infer(sig: Sig) -> list[TensorType]:
    w = sig.operands[0]
    check(w.rank == 4 and w.dims[2:] == (3, 3), f"operand {w} is not [O, C, 3, 3] conv weights")
    check(w.is_float, f"operand must be a float tensor, got {w}")
    return [TensorType(filter_shape(w.dims[0], w.dims[1]), w.dtype)]


def _unfilter_infer(sig: Sig) -> list[TensorType]:
    u = sig.operands[0]
    shape = [int(s) for s in sig["shape"]]
    check(len(shape) == 4 and shape[2:] == [3, 3] and min(shape) > 0, f"shape {shape} is not [O, C, 3, 3]")
    want = filter_shape(shape[0], shape[1])
    check(u.dims == want, f"operand {u} is not a winograd_filter of [{shape[0]}, {shape[1]}, 3, 3] "
          f"(that gives {list(want)})")
    return [TensorType(tuple(shape), u.dtype)]


def _cost(sig: Sig) -> Cost:
    return Cost(0, sum(t.nbytes for t in sig.operands), sum(t.nbytes for t in sig.results))


register(
    OpDef(
        "winograd_filter",
        ("w",),
        infer=_filter_infer,
        reference=lambda sig, w: transform_filter(w),
        traits=PURE,
        cost=_cost,
        doc="Winograd F(2x2, 3x3) filter transform of [O, C, 3, 3] conv weights: the 16 matrices "
        "G w G^T as GEMM B panels [16, ceil(O/16), ceil(C/16)*16, 16], channels zero-padded.",
    )
)

register(
    OpDef(
        "winograd_unfilter",
        ("u",),
        infer=_unfilter_infer,
        reference=lambda sig, u: untransform_filter(u, *[int(s) for s in sig["shape"][:2]]),
        attrs={"shape": attr("ints")},
        traits=PURE,
        cost=_cost,
        doc="Inverse of `winograd_filter` (G's left inverse on both sides): `shape` is the weights' "
        "[O, C, 3, 3].",
    )
)
