"""propagate-layout's layout algebra (the pass is passes/propagate_layout.py): `Layout`, one layout change
(NCHWc blocks or NHWC) and its inverse on 4-D NCHW tensors: recognizing its ops, creating them, the types,
shapes and constant data it converts, and which channel counts it takes (whole or padded blocks); the ops
that anchor it, and ZERO_SAFE, the elementwise ops a padded block's zero channels may go through.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.attributes import Attr
from ..ir.core import Op, Value
from ..ir.ops.layout import packed_shape
from ..ir.types import TensorType
from .rewrite import Rewriter

POOLS = ("max_pool2d", "avg_pool2d", "global_avg_pool", "global_max_pool")
ANCHORS = ("conv2d", *POOLS)
# elementwise ops that are finite wherever their operands are, so the padding channels of a padded block
# (zeros after a conv, then whatever these make of them) stay finite: a conv reading them multiplies them
# by its zero-padded weights. Not div, log, reciprocal, rsqrt, pow, ...: 1/0 in a padding channel times a
# zero weight is NaN in a real one.
ZERO_SAFE = frozenset({
    "add", "sub", "mul", "neg", "abs", "relu", "clip", "leaky_relu", "elu", "selu", "celu", "sigmoid",
    "hard_sigmoid", "hard_swish", "tanh", "gelu", "erf", "silu", "mish", "softplus", "softsign", "max",
    "min", "prelu", "identity", "floor", "ceil", "round", "sign",
})
TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


@dataclass(frozen=True)
class Layout:
    """One layout change and its inverse: `to` (pack / transpose to NHWC) and `back` (unpack / transpose
    to NCHW), on 4-D NCHW tensors."""

    kind: str  # "nchwc" or "nhwc"
    block: int

    @property
    def name(self) -> str:
        return f"NCHW{self.block}c" if self.kind == "nchwc" else "NHWC"

    @property
    def channel_axis(self) -> int:
        """The axis of the converted tensor that concatenating along channels joins."""
        return 1 if self.kind == "nchwc" else 3

    def accepts(self, channels: int) -> bool:
        """Whole blocks: what a concat along channels and a grouped conv's groups need."""
        return self.kind == "nhwc" or channels % self.block == 0

    def pads(self, channels: int) -> bool:
        """Channels an anchor takes blocked with the last block zero-padded: at least half a block, and
        at most a third more than there are (72 -> 80, 24 -> 32, 40 -> 48; not 3 -> 16)."""
        padded = -(-channels // self.block) * self.block
        return self.kind == "nchwc" and 2 * channels >= self.block and 3 * padded <= 4 * channels

    def takes(self, channels: int) -> bool:
        return self.accepts(channels) or self.pads(channels)

    def _tiles(self, op: Op) -> bool:
        return (
            ints(op, "inner_dims_pos") == [1]
            and ints(op, "inner_tiles") == [self.block]
            and not ints(op, "outer_dims_perm")
        )

    def is_to(self, op: Op | None) -> bool:
        if op is None:
            return False
        if self.kind == "nhwc":
            return op.name == "transpose" and ints(op, "perm") == TO_NHWC
        return op.name == "pack" and self._tiles(op) and op.operands[0].type.rank == 4

    def is_back(self, op: Op | None) -> bool:
        if op is None:
            return False
        if self.kind == "nhwc":
            return op.name == "transpose" and ints(op, "perm") == TO_NCHW
        return op.name == "unpack" and self._tiles(op) and op.result.type.rank == 4

    def to_type(self, t: TensorType) -> TensorType:
        if self.kind == "nhwc":
            return TensorType(tuple(t.shape[p] for p in TO_NHWC), t.dtype)
        return TensorType(packed_shape(t.shape, [1], [self.block], list(range(4))), t.dtype)

    def to(self, rw: Rewriter, anchor: Op, v: Value, after: bool = False) -> Value:
        """The converted `v`, made by an op inserted before `anchor` (after it when `after`)."""
        if self.kind == "nhwc":
            return _create(rw, anchor, "transpose", v, self.to_type(v.type), {"perm": TO_NHWC}, after)
        return _create(
            rw,
            anchor,
            "pack",
            v,
            self.to_type(v.type),
            {"inner_dims_pos": [1], "inner_tiles": [self.block]},
            after,
        )

    def back(self, rw: Rewriter, anchor: Op, v: Value, like: TensorType, after: bool = False) -> Value:
        """`v` converted back to NCHW type `like`."""
        if self.kind == "nhwc":
            return _create(rw, anchor, "transpose", v, like, {"perm": TO_NCHW}, after)
        return _create(
            rw,
            anchor,
            "unpack",
            v,
            like,
            {"inner_dims_pos": [1], "inner_tiles": [self.block], "shape": list(like.shape)},
            after,
        )

    def convert_shape(self, dims: tuple[int, ...], channels: int) -> tuple[int, ...] | None:
        """The shape a constant broadcasting to an NCHW tensor of `channels` channels takes in this layout
        (None when it cannot be converted): left-padded to rank 4, then converted."""
        if len(dims) > 4:
            return None
        d = (1,) * (4 - len(dims)) + tuple(dims)
        if self.kind == "nhwc":
            return tuple(d[p] for p in TO_NHWC)
        if d[1] == 1:
            return (*d, 1)  # broadcasts along both channel axes
        if d[1] != channels or not self.takes(channels):
            return None
        return packed_shape(d, [1], [self.block], list(range(4)))

    def convert_array(self, a: np.ndarray) -> np.ndarray:
        a = a.reshape((1,) * (4 - a.ndim) + a.shape)
        if self.kind == "nhwc":
            return np.ascontiguousarray(a.transpose(TO_NHWC))
        if a.shape[1] == 1:
            return a.reshape(*a.shape, 1)
        n, c, h, w = a.shape
        if c % self.block:  # the last block's padding channels are zeros
            a = np.pad(a, [(0, 0), (0, -c % self.block), (0, 0), (0, 0)])
        cb = a.shape[1] // self.block
        return np.ascontiguousarray(a.reshape(n, cb, self.block, h, w).transpose(0, 1, 3, 4, 2))


def channels(t: TensorType) -> int | None:
    """The channel count of a rank-4 NCHW type whose channels are static and whose other dims are known
    (static or symbolic: a layout decision depends on the channels only); else None."""
    if t.rank != 4 or type(t.shape[1]) is not int or any(d is None for d in t.shape):
        return None
    return t.shape[1]


def ints(op: Op, name: str) -> list[int]:
    """Attribute `name` of `op` as a list of ints ([] when it is no list)."""
    v = op.attrs.get(name, [])
    return [int(x) for x in v] if isinstance(v, list) else []


def _create(
    rw: Rewriter, anchor: Op, name: str, v: Value, t: TensorType, attrs: dict[str, Attr], after: bool
) -> Value:
    if not after:
        return rw.create(anchor, name, [v], [t], attrs).result
    op = Op(name, [v], [t], attrs, loc=anchor.loc, pos=anchor.pos)
    assert anchor.parent is not None
    anchor.parent.insert_after(anchor, op)
    rw.push(op)
    return op.result
