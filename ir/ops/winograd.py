"""Winograd filter transforms: `winograd_filter {tile = m}` turns a conv's [O, C, 3, 3] weights into the
(m+2)^2 matrices U[xi] = (G g G^T)[xi] a Winograd F(m x m, 3x3) conv multiplies its transformed input
tiles by, packed as GEMM B panels [(m+2)^2, ceil(O/16), ceil(C/16)*16, 16] (channels zero-padded);
`winograd_unfilter` recovers the weights (G has a left inverse), the way `unpack` undoes `pack`.

The OpenCL conv template asks for the first on constant weights (computed once at load time), and the
launch's reference body undoes it with the second (docs/opencl.md, "Winograd convolutions"). The matrices
are Lavin & Gray's: F(2, 3) on the points 0, 1, -1; F(4, 3) on 0, 1, -1, 2, -2 (both with the point at
infinity). TRANSFORMS[m] = (B^T, G, A^T).
"""

from __future__ import annotations

import math

import numpy as np

from ..types import TensorType
from .registry import Cost, OpDef, Sig, attr, check, register

PURE = frozenset({"pure"})
TRANSFORMS: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], float),
        np.array([[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]]),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], float)),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                  [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], float),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
                 float)),
}
BLOCK = 16


def filter_shape(o: int, c: int, tile: int) -> tuple[int, ...]:
    return ((tile + 2) ** 2, math.ceil(o / BLOCK), math.ceil(c / BLOCK) * BLOCK, BLOCK)


def transform_filter(w: np.ndarray, tile: int) -> np.ndarray:
    """[O, C, 3, 3] -> [a*a, O/16, Cp, 16] (a = tile + 2):
    U[i*a+j, o // 16, c, o % 16] = (G w[o, c] G^T)[i, j]."""
    g = TRANSFORMS[tile][1]
    o, c = w.shape[:2]
    shape = filter_shape(o, c, tile)
    padded = np.zeros((shape[1] * BLOCK, shape[2], 3, 3))
    padded[:o, :c] = w
    # G w G^T as one GEMM with kron(G, G) (its row p*a+q holds G[p, i] G[q, j] at i*3+j), then one
    # transposing copy: 0.1 s on 512x512x3x3, where an einsum took 0.6
    u = (padded.reshape(-1, 9) @ np.kron(g, g).T).astype(w.dtype)
    u = u.reshape(shape[1], BLOCK, shape[2], shape[0])  # [O/16, 16, Cp, a*a]
    return np.ascontiguousarray(u.transpose(3, 0, 2, 1))


def untransform_filter(u: np.ndarray, o: int, c: int, tile: int) -> np.ndarray:
    a = tile + 2
    inverse = np.linalg.pinv(TRANSFORMS[tile][1])  # [3, a]: inverse @ G == I
    full = u.astype(np.float64).transpose(0, 2, 1, 3).reshape(a, a, u.shape[2], -1)[:, :, :c, :o]
    return (inverse @ full.transpose(3, 2, 0, 1) @ inverse.T).astype(u.dtype)


def _tile(sig: Sig) -> int:
    tile = int(sig["tile"])
    check(tile in TRANSFORMS, f"tile {tile}: F(2x2, 3x3) or F(4x4, 3x3) only (tile 2 or 4)")
    return tile


def _weights(sig: Sig) -> tuple[int, int]:
    """(O, C) of an unfilter's `shape`."""
    return int(sig["shape"][0]), int(sig["shape"][1])


def _filter_infer(sig: Sig) -> list[TensorType]:
    w = sig.operands[0]
    check(w.rank == 4 and w.dims[2:] == (3, 3), f"operand {w} is not [O, C, 3, 3] conv weights")
    check(w.is_float, f"operand must be a float tensor, got {w}")
    return [TensorType(filter_shape(w.dims[0], w.dims[1], _tile(sig)), w.dtype)]


def _unfilter_infer(sig: Sig) -> list[TensorType]:
    u = sig.operands[0]
    shape = [int(s) for s in sig["shape"]]
    check(len(shape) == 4 and shape[2:] == [3, 3] and min(shape) > 0, f"shape {shape} is not [O, C, 3, 3]")
    want = filter_shape(shape[0], shape[1], _tile(sig))
    check(u.dims == want, f"operand {u} is not a winograd_filter of [{shape[0]}, {shape[1]}, 3, 3] "
          f"(that gives {list(want)})")
    return [TensorType(tuple(shape), u.dtype)]


def _cost(sig: Sig) -> Cost:
    return Cost(0, sum(t.nbytes for t in sig.operands), sum(t.nbytes for t in sig.results))


TILE = {"tile": attr("int", 2, allowed=(2, 4))}

register(
    OpDef(
        "winograd_filter",
        ("w",),
        infer=_filter_infer,
        reference=lambda sig, w: transform_filter(w, _tile(sig)),
        attrs=TILE,
        traits=PURE,
        cost=_cost,
        doc="Winograd F(m x m, 3x3) filter transform (m = `tile`, 2 or 4) of [O, C, 3, 3] conv weights: "
        "the (m+2)^2 matrices G w G^T as GEMM B panels [(m+2)^2, ceil(O/16), ceil(C/16)*16, 16], channels "
        "zero-padded.",
    )
)

register(
    OpDef(
        "winograd_unfilter",
        ("u",),
        infer=_unfilter_infer,
        reference=lambda sig, u: untransform_filter(u, *_weights(sig), _tile(sig)),
        attrs={**TILE, "shape": attr("ints")},
        traits=PURE,
        cost=_cost,
        doc="Inverse of `winograd_filter` (G's left inverse on both sides): `shape` is the weights' "
        "[O, C, 3, 3].",
    )
)
