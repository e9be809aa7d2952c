"""Layout ops: `pack` tiles dims of a tensor into trailing blocks, `unpack` undoes it.

Their semantics follow MLIR's `tensor.pack`/`tensor.unpack`: `pack` splits each dim named in
`inner_dims_pos` into (ceil(d / tile), tile), pads the tail with `padding_value`, orders the outer dims by
`outer_dims_perm` (identity when empty) and puts the tiles last, in `inner_dims_pos` order. So NCHW -> NCHW16c
is `pack {inner_dims_pos = [1], inner_tiles = [16]}` and a GEMM's B[K, N] -> panels [N/16, K, 16] is
`pack {inner_dims_pos = [1], inner_tiles = [16], outer_dims_perm = [1, 0]}`. `unpack` takes the unpacked
shape as its `shape` attribute and drops the padding.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..symbolic import Sym
from ..types import TensorType
from .registry import Cost, OpDef, Sig, attr, check, register

PURE = frozenset({"pure"})


def _layout(sig: Sig, rank: int) -> tuple[list[int], list[int], list[int]]:
    dims = [int(d) for d in sig["inner_dims_pos"]]
    tiles = [int(t) for t in sig["inner_tiles"]]
    perm = [int(p) for p in sig["outer_dims_perm"]] or list(range(rank))
    check(len(dims) == len(tiles), f"inner_dims_pos {dims} and inner_tiles {tiles} differ in length")
    check(
        len(set(dims)) == len(dims) and all(0 <= d < rank for d in dims),
        f"inner_dims_pos {dims} must be distinct dims of a rank-{rank} tensor",
    )
    check(all(t >= 1 for t in tiles), f"inner_tiles {tiles} must be positive")
    check(sorted(perm) == list(range(rank)), f"outer_dims_perm {perm} is not a permutation of {rank} dims")
    return dims, tiles, perm


def packed_shape(
    shape: tuple[Any, ...], dims: list[int], tiles: list[int], perm: list[int]
) -> tuple[Any, ...]:
    """The packed shape; a symbolic dim packs to its ceiling quotient ([(H + 15) / 16])."""
    tile_of = dict(zip(dims, tiles, strict=True))
    outer = [-(-s // tile_of[i]) if i in tile_of else s for i, s in enumerate(shape)]
    return tuple([outer[p] for p in perm] + tiles)


def _pack_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    check(all(d is not None for d in x.shape), f"pack needs known dims (static or symbolic), got {x}")
    dims, tiles, perm = _layout(sig, x.rank)
    return [TensorType(packed_shape(x.shape, dims, tiles, perm), x.dtype)]


def _split_order(padded: list[int], dims: list[int], tiles: list[int],
                 perm: list[int]) -> tuple[list[int], list[int]]:
    """The padded shape with each tiled dim split in (outer, tile), and the transpose from that to the
    packed layout (outer dims in `perm` order, then the tiles in `dims` order)."""
    tile_of = dict(zip(dims, tiles, strict=True))
    split: list[int] = []
    where: dict[int, int] = {}  # dim -> axis of its outer part in the split array
    inner_axis: dict[int, int] = {}
    for i, s in enumerate(padded):
        where[i] = len(split)
        if i in tile_of:
            split += [s // tile_of[i], tile_of[i]]
            inner_axis[i] = len(split) - 1
        else:
            split.append(s)
    return split, [where[p] for p in perm] + [inner_axis[d] for d in dims]


def pack_array(
    x: np.ndarray, dims: list[int], tiles: list[int], perm: list[int], pad: float = 0.0
) -> np.ndarray:
    rank = x.ndim
    perm = perm or list(range(rank))
    tile_of = dict(zip(dims, tiles, strict=True))
    widths = [(0, -s % tile_of[i]) if i in tile_of else (0, 0) for i, s in enumerate(x.shape)]
    if any(w for _, w in widths):
        x = np.pad(x, widths, constant_values=np.asarray(pad).astype(x.dtype))
    split, order = _split_order(list(x.shape), dims, tiles, perm)
    return np.ascontiguousarray(x.reshape(split).transpose(order))


def unpack_array(
    y: np.ndarray, shape: list[int], dims: list[int], tiles: list[int], perm: list[int]
) -> np.ndarray:
    rank = len(shape)
    perm = perm or list(range(rank))
    tile_of = dict(zip(dims, tiles, strict=True))
    padded = [math.ceil(s / tile_of[i]) * tile_of[i] if i in tile_of else s for i, s in enumerate(shape)]
    split, order = _split_order(padded, dims, tiles, perm)
    inverse = np.argsort(order)
    x = y.transpose(inverse).reshape(padded)
    return np.ascontiguousarray(x[tuple(slice(0, s) for s in shape)])


def _pack_ref(sig: Sig, x: np.ndarray) -> np.ndarray:
    dims, tiles, perm = _layout(sig, x.ndim)
    return pack_array(x, dims, tiles, perm, sig["padding_value"])


def _unpack_infer(sig: Sig) -> list[TensorType]:
    y = sig.operands[0]
    shape = [s if isinstance(s, Sym) else int(s) for s in sig["shape"]]
    check(all(isinstance(s, Sym) or s >= 0 for s in shape), f"shape {shape} has a negative dim")
    dims, tiles, perm = _layout(sig, len(shape))
    want = packed_shape(tuple(shape), dims, tiles, perm)
    check(y.shape == want, f"operand {y} is not a packing of shape {shape} (that packs to {list(want)})")
    return [TensorType(tuple(shape), y.dtype)]


def _unpack_ref(sig: Sig, y: np.ndarray) -> np.ndarray:
    shape = [int(s) for s in sig["shape"]]
    dims, tiles, perm = _layout(sig, len(shape))
    return unpack_array(y, shape, dims, tiles, perm)


def _copy_cost(sig: Sig) -> Cost:
    return Cost(0, sum(t.nbytes for t in sig.operands), sum(t.nbytes for t in sig.results))


LAYOUT_ATTRS = {
    "inner_dims_pos": attr("ints"),
    "inner_tiles": attr("ints"),
    "outer_dims_perm": attr("ints", []),
}

register(
    OpDef(
        "pack",
        ("x",),
        infer=_pack_infer,
        reference=_pack_ref,
        attrs={**LAYOUT_ATTRS, "padding_value": attr("float", 0.0)},
        traits=PURE,
        cost=_copy_cost,
        doc="Tiles the dims `inner_dims_pos` by `inner_tiles` into trailing blocks (padding the tails with "
        "`padding_value`), outer dims ordered by `outer_dims_perm`: NCHW -> NCHW16c, B[K,N] -> [N/16,K,16].",
    )
)

register(
    OpDef(
        "unpack",
        ("x",),
        infer=_unpack_infer,
        reference=_unpack_ref,
        attrs={**LAYOUT_ATTRS, "shape": attr("dims")},
        traits=PURE,
        cost=_copy_cost,
        doc="Inverse of `pack` with the same layout attributes; `shape` is the unpacked shape "
        "(tails dropped).",
    )
)
