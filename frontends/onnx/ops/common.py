"""Helpers the converter families share: scalars like a tensor, axes, slices, per-channel
broadcasting, and the window geometry (kernel, strides, pads, dilations) of convolutions and pools."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..builder import Builder, ConversionError, Tensor

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
AxisParams = tuple[int, int, int, int, int]
"""One spatial axis of a window: (kernel, stride, pad begin, pad end, dilation)."""


# shared helpers ---------------------------------------------------------------------------------------
def _scalar(b: Builder, value: float | int | bool, like: Tensor) -> Tensor:
    """A rank-0 constant of `like`'s element type."""
    return b.const(np.array(value).astype(like.type.np_dtype))


def _wants(b: Builder, i: int) -> bool:
    """Whether the node being converted uses its output `i`."""
    return i < len(b.outputs) and bool(b.outputs[i])


def _float_input(x: Tensor, op: str) -> None:
    if not x.type.is_float:
        raise ConversionError(f"{op} needs a float input, got {x.type}")


def _axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ConversionError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def _slice(b: Builder, x: Tensor, axis: int, start: int, end: int, step: int = 1) -> Tensor:
    return b.op("slice", [x], {"starts": [start], "ends": [end], "axes": [axis], "steps": [step]})


def _transpose(b: Builder, x: Tensor, perm: Sequence[int]) -> Tensor:
    perm = [int(p) for p in perm]
    return x if perm == list(range(x.rank)) else b.op("transpose", [x], {"perm": perm})


def _per_channel(b: Builder, v: Tensor, rank: int) -> Tensor:
    """A [C] vector shaped (1, C, 1, ...) to broadcast over an (N, C, ...) tensor."""
    return b.reshape(v, [1, v.shape[0]] + [1] * (rank - 2))


class Window:
    """The spatial parameters of a conv or pool node, with ONNX's defaults filled in and auto_pad resolved
    to explicit pads (all begins, then all ends, as ONNX and tessel order them)."""

    def __init__(self, op: str, sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int] | None,
                 pads: Sequence[int] | None, dilations: Sequence[int] | None, auto_pad: str):
        n = len(sizes)
        self.kernel = [int(k) for k in kernel]
        self.strides = [int(s) for s in strides] if strides else [1] * n
        self.dilations = [int(d) for d in dilations] if dilations else [1] * n
        self.pads = [int(p) for p in pads] if pads else [0] * (2 * n)
        for name, v, want in (("kernel_shape", self.kernel, n), ("strides", self.strides, n),
                              ("dilations", self.dilations, n), ("pads", self.pads, 2 * n)):
            if len(v) != want:
                raise ConversionError(f"{op}: '{name}' has {len(v)} values, the input has {n} spatial dims "
                                      f"(expected {want})")
        if auto_pad not in AUTO_PADS:
            raise ConversionError(f"{op}: auto_pad '{auto_pad}' is not one of {', '.join(AUTO_PADS)}")
        if auto_pad == "VALID":
            self.pads = [0] * (2 * n)
        elif auto_pad.startswith("SAME"):  # output ceil(size / stride); the odd pad goes last for UPPER
            begins, ends = [], []
            for size, k, s, d in zip(sizes, self.kernel, self.strides, self.dilations, strict=True):
                total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
                small, big = total // 2, total - total // 2
                begins.append(small if auto_pad == "SAME_UPPER" else big)
                ends.append(big if auto_pad == "SAME_UPPER" else small)
            self.pads = begins + ends
        self.n = n

    def axis(self, i: int) -> AxisParams:
        """(kernel, stride, pad begin, pad end, dilation) of spatial axis i."""
        return self.kernel[i], self.strides[i], self.pads[i], self.pads[self.n + i], self.dilations[i]


def _out_len(size: int, k: int, s: int, pb: int, pe: int, d: int, ceil: bool) -> int:
    """Windows along one axis; in ceil mode a last window starting inside the end padding is dropped."""
    ext = (k - 1) * d + 1
    n = (size + pb + pe - ext + (s - 1 if ceil else 0)) // s + 1
    if ceil and (n - 1) * s >= size + pb:
        n -= 1
    if n < 1:
        raise ConversionError(f"kernel extent {ext} exceeds the padded input {size + pb + pe}")
    return n
