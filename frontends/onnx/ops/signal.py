"""Converters for ONNX's signal processing (DFT, STFT, MelWeightMatrix) and the two ops that lower to
ir/ops/signal.py: CumProd (`cumprod`) and BitCast (`bitcast`).

A DFT of static length is a matmul with a constant matrix of cosines and sines, so DFT and STFT compose
from transposes, a gather of the frames, a matmul and reshapes: no FFT op. The product runs in f64, as
onnx's reference (numpy's FFT) computes it, so bins that cancel to zero come out near zero in f32 too.
MelWeightMatrix depends only on its (constant) inputs and is computed here, as the windows are in misc.py.
"""

from __future__ import annotations

import numpy as np

from ..builder import Builder, ConversionError, Tensor
from ..registry import converter
from ..types import onnx_element_type
from .common import _transpose


@converter("CumProd", since=26)
def CumProd(b: Builder, x: Tensor, axis: Tensor, *, exclusive: int = 0, reverse: int = 0) -> Tensor:
    return b.op("cumprod", [x], {"axis": axis.ints("CumProd's axis")[0], "exclusive": bool(exclusive),
                                 "reverse": bool(reverse)})


@converter("BitCast", since=26)
def BitCast(b: Builder, input: Tensor, *, to: int) -> Tensor:
    return b.op("bitcast", [input], {"to": onnx_element_type(to, "BitCast's 'to'")})


# DFT -------------------------------------------------------------------------------------------------
def _dft_matrix(n_in: int, channels: int, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """The [n_in * channels, bins * channels_out] f64 matrix taking a signal, its (re, im) pairs
    interleaved, to its DFT: samples past `length` get zero rows (truncation), missing ones no row (zero
    padding). An inverse one-sided DFT (irfft) takes bins to real samples through Hermitian symmetry."""
    if inverse and onesided:  # x[n] = 1/L sum_k w_k (re_k cos - im_k sin), w = 2 but for DC and Nyquist
        k = np.arange(n_in)[:, None]
        n = np.arange(length)[None, :]
        theta = 2 * np.pi * ((k * n) % length) / length
        w = np.where((k == 0) | (2 * k == length), 1.0, 2.0) * (k <= length // 2) / length
        rows = [w * np.cos(theta), -w * np.sin(theta)][:channels]
        return np.stack(rows, axis=1).reshape(n_in * channels, length)
    bins = length // 2 + 1 if onesided else length
    n = np.arange(n_in)[:, None]
    k = np.arange(bins)[None, :]
    theta = 2 * np.pi * ((n * k) % length) / length
    scale = (n < length) / (length if inverse else 1)
    cos, sin = scale * np.cos(theta), scale * np.sin(theta) * (1 if inverse else -1)
    # (re + i im)(cos + i sin) = (re cos - im sin) + i (re sin + im cos)
    from_re = np.stack([cos, sin], axis=2)  # [n, bins, 2]
    from_im = np.stack([-sin, cos], axis=2)
    m = np.stack([from_re, from_im][:channels], axis=1)  # [n, channels, bins, 2]
    return m.reshape(n_in * channels, bins * 2)


def dft(b: Builder, x: Tensor, axis: int, length: int | None, inverse: bool, onesided: bool) -> Tensor:
    """ONNX DFT of x [..., N, ..., 1 or 2] along `axis`: [..., bins, ..., 2] (or [..., L, ..., 1] for an
    inverse one-sided transform)."""
    if not x.type.is_float or x.rank < 2 or x.shape[-1] not in (1, 2):
        raise ConversionError(f"the signal must be a float tensor whose last dim (real, imaginary) is 1 or "
                              f"2, got {x.type}")
    r, channels = x.rank, x.shape[-1]
    if not -r <= axis < r or axis % r == r - 1:
        raise ConversionError(f"axis {axis} must name a signal dim of {x.type}, not the last one")
    axis %= r
    n_in = x.shape[axis]
    if length is None:
        length = 2 * (n_in - 1) if inverse and onesided else n_in
    if length < 1:
        raise ConversionError(f"dft_length must be positive, got {length}")
    m = _dft_matrix(n_in, channels, length, inverse, onesided)
    perm = [i for i in range(r - 1) if i != axis] + [axis, r - 1]
    xt = _transpose(b, x, perm)
    lead = list(xt.shape[:-2])
    flat = b.reshape(b.cast(xt, "f64"), lead + [n_in * channels])
    out_channels = 1 if inverse and onesided else 2
    y = b.reshape(b.op("matmul", [flat, b.const(m)]), lead + [m.shape[1] // out_channels, out_channels])
    return b.cast(_transpose(b, y, [perm.index(i) for i in range(r)]), x.dtype)


@converter("DFT", since=17)
def DFT(b: Builder, input: Tensor, dft_length: Tensor | None = None, axis_input: Tensor | None = None, *,
        axis: int = 1, inverse: int = 0, onesided: int = 0) -> Tensor:
    """Opset 17 takes the axis as an attribute (default 1), opset 20 as the third input (default -2)."""
    if b.opset >= 20:
        axis = axis_input.ints("DFT's axis")[0] if axis_input is not None else -2
    length = dft_length.ints("DFT's dft_length")[0] if dft_length is not None else None
    return dft(b, input, axis, length, bool(inverse), bool(onesided))


@converter("STFT", since=17)
def STFT(b: Builder, signal: Tensor, frame_step: Tensor, window: Tensor | None = None,
         frame_length: Tensor | None = None, *, onesided: int = 1) -> Tensor:
    """Frames [batch, frames, frame_length, 1 or 2] gathered with constant indices, windowed, then a DFT
    along the frame: [batch, frames, bins, 2]."""
    if signal.rank != 3:
        raise ConversionError(f"signal must be [batch, length, 1 or 2], got {signal.type}")
    step = frame_step.ints("STFT's frame_step")[0]
    n = signal.shape[1]
    if frame_length is not None:
        size = frame_length.ints("STFT's frame_length")[0]
    else:
        size = window.shape[0] if window is not None else n
    if window is not None and (window.rank != 1 or window.shape[0] != size):
        raise ConversionError(f"window {window.type} must be 1-D of the frame length {size}")
    if step < 1 or not 1 <= size <= n:
        raise ConversionError(f"frame_step {step} and frame_length {size} do not fit a signal of length {n}")
    frames = 1 + (n - size) // step
    idx = np.arange(frames)[:, None] * step + np.arange(size)[None, :]
    x = b.op("gather", [signal, b.const(idx.astype(np.int64))], {"axis": 1})
    if window is not None:
        x = b.op("mul", [x, b.reshape(b.cast(window, signal.dtype), [1, 1, size, 1])])
    return dft(b, x, 2, size, False, bool(onesided))


# MelWeightMatrix -----------------------------------------------------------------------------------------
@converter("MelWeightMatrix", since=17)
def MelWeightMatrix(b: Builder, num_mel_bins: Tensor, dft_length: Tensor, sample_rate: Tensor,
                    lower_edge_hertz: Tensor, upper_edge_hertz: Tensor, *,
                    output_datatype: int = 1) -> Tensor:
    """Triangular filters on the mel scale, computed here in numpy as onnx's reference does (in the inputs'
    own types, so its rounding of the bin edges matches)."""
    mels = num_mel_bins.ints("num_mel_bins")[0]
    length = np.asarray(dft_length.const("dft_length")).reshape(())
    rate = np.asarray(sample_rate.const("sample_rate")).reshape(())
    low = np.asarray(lower_edge_hertz.const("lower_edge_hertz")).reshape(())
    high = np.asarray(upper_edge_hertz.const("upper_edge_hertz")).reshape(())
    dtype = onnx_element_type(output_datatype, "output_datatype")
    if mels < 1 or int(length) < 1 or int(rate) < 1:
        raise ConversionError(f"num_mel_bins {mels}, dft_length {int(length)} and sample_rate {int(rate)} "
                              "must be positive")
    edges = np.arange(0, mels + 2)
    low_mel = 2595 * np.log1p(low / 700) / np.log(10)
    high_mel = 2595 * np.log1p(high / 700) / np.log(10)
    step = (high_mel - low_mel) / edges.shape[0]
    hz = 700 * np.expm1((edges * step + low_mel) / 2595 * np.log(10))
    bins = (((length + 1) * hz) // rate).astype(int)
    out = np.zeros((int(length) // 2 + 1, mels))
    for i in range(mels):
        left, center, right = (int(v) for v in bins[i:i + 3])
        if not 0 <= left <= center <= right or center >= out.shape[0] or right > out.shape[0]:
            raise ConversionError(f"mel bin {i} spans spectrogram bins {left}..{right}, outside "
                                  f"0..{out.shape[0] - 1}: check the edge frequencies against sample_rate")
        if center == left:
            out[center, i] = 1
        else:
            out[left:center + 1, i] = (np.arange(left, center + 1) - left) / (center - left)
        if right > center:
            out[center:right, i] = (right - np.arange(center, right)) / (right - center)
    return b.const(out, dtype)
