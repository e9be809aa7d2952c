"""The converters of frontends/onnx/ops/signal.py (DFT, STFT, MelWeightMatrix, CumProd, BitCast) and
detection.py (NonMaxSuppression, folded at import) against onnxruntime.

Parameters tessel needs at import (DFT's axis and dft_length, STFT's frame_step and frame_length, the
MelWeightMatrix sizes, every NonMaxSuppression input) are initializers here.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from tessel.frontends.onnx.backend import TesselBackend
from tessel.ir.diagnostics import DiagnosticError

from tests.numeric.model_util import check_model, make_model

RNG = np.random.default_rng(0)


# DFT -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,axis,length,onesided", [
    ((2, 8, 1), 1, None, 0),  # real in, complex out
    ((2, 8, 2), 1, None, 0),  # complex
    ((3, 5, 4, 1), 1, None, 1),  # one-sided, odd length
    ((3, 5, 4, 2), 2, None, 0),  # an inner axis
    ((2, 6, 1), -2, 9, 0),  # zero-padded to dft_length
    ((2, 6, 1), 1, 4, 1),  # truncated to dft_length, one-sided
    ((2, 6, 2), 1, 4, 0),  # complex, truncated
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dft(shape, axis, length, onesided, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    inits = {"axis": np.array(axis, np.int64)}
    if length is not None:
        inits["length"] = np.array(length, np.int64)
    node = helper.make_node("DFT", ["x", "length" if length is not None else "", "axis"], ["y"],
                            onesided=onesided)
    check_model(make_model([node], {"x": x}, ["y"], inits, opset=20), {"x": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,axis", [((2, 8, 2), 1), ((4, 3, 2), 1), ((3, 4, 6, 2), 2)])
def test_inverse_dft(shape, axis):
    x = RNG.standard_normal(shape).astype(np.float32)
    node = helper.make_node("DFT", ["x", "", "axis"], ["y"], inverse=1)
    check_model(make_model([node], {"x": x}, ["y"], {"axis": np.array(axis, np.int64)}, opset=20), {"x": x},
                rtol=1e-4, atol=1e-5)


def test_dft_opset17_takes_the_axis_as_an_attribute():
    x = RNG.standard_normal((3, 4, 5, 1)).astype(np.float32)
    node = helper.make_node("DFT", ["x"], ["y"], axis=2)
    check_model(make_model([node], {"x": x}, ["y"], opset=17), {"x": x}, rtol=1e-4, atol=1e-4)


def test_inverse_of_a_one_sided_dft_is_real():
    """irfft: one-sided bins in, real samples out (last dim 1); onnxruntime has no such kernel."""
    signal = RNG.standard_normal((2, 10)).astype(np.float32)
    bins = np.fft.rfft(signal, axis=1)
    x = np.stack([bins.real, bins.imag], axis=-1).astype(np.float32)
    for length in (10, 11):
        node = helper.make_node("DFT", ["x", "length", "axis"], ["y"], inverse=1, onesided=1)
        model = make_model([node], {"x": x}, ["y"], {"axis": np.array(1, np.int64),
                                                     "length": np.array(length, np.int64)}, opset=20)
        (y,) = TesselBackend.prepare(model).run({"x": x})
        np.testing.assert_allclose(y[..., 0], np.fft.irfft(bins, n=length, axis=1), rtol=1e-5, atol=1e-5)


def test_dft_refuses_the_complex_axis():
    x = np.zeros((2, 4, 1), np.float32)
    node = helper.make_node("DFT", ["x", "", "axis"], ["y"])
    y = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype), [2, 4, 2])
    model = make_model([node], {"x": x}, [y], {"axis": np.array(-1, np.int64)}, opset=20)
    with pytest.raises(DiagnosticError, match="axis -1 must name a signal dim"):
        TesselBackend.prepare(model)


# STFT ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("channels,step,length,window,onesided", [
    (1, 4, 8, False, 1),
    (1, 3, 8, True, 1),
    (1, 5, 6, True, 0),
    (2, 4, 8, False, 0),
])
def test_stft(channels, step, length, window, onesided):
    x = RNG.standard_normal((2, 32, channels)).astype(np.float32)
    inits = {"step": np.array(step, np.int64), "length": np.array(length, np.int64)}
    feeds = {"x": x}
    if window:
        feeds["w"] = np.hanning(length).astype(np.float32)
    node = helper.make_node("STFT", ["x", "step", "w" if window else "", "length"], ["y"], onesided=onesided)
    check_model(make_model([node], feeds, ["y"], inits, opset=17), feeds, rtol=1e-4, atol=1e-4)


# MelWeightMatrix ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("bins,length,rate,low,high", [
    (8, 16, 8192, 0.0, 4096.0), (10, 64, 16000, 20.0, 7600.0), (4, 32, 8000, 100.0, 3000.0)])
def test_mel_weight_matrix(bins, length, rate, low, high):
    inits = {"n": np.array(bins, np.int32), "len": np.array(length, np.int32),
             "rate": np.array(rate, np.int32), "low": np.array(low, np.float32),
             "high": np.array(high, np.float32)}
    node = helper.make_node("MelWeightMatrix", list(inits), ["y"])
    check_model(make_model([node], {}, ["y"], inits, opset=17), {})


# CumProd, BitCast -----------------------------------------------------------------------------------------
def test_cumprod_and_bitcast():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    nodes = [helper.make_node("CumProd", ["x", "axis"], ["p"], exclusive=1, reverse=1),
             helper.make_node("BitCast", ["x"], ["bits"], to=6)]
    model = make_model(nodes, {"x": x}, ["p", "bits"], {"axis": np.array(-1, np.int64)}, opset=26)
    check_model(model, {"x": x})


# NonMaxSuppression ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("center_point_box", [0, 1])
@pytest.mark.parametrize("max_out,iou,score", [(3, 0.5, None), (10, 0.3, 0.2), (2, 0.0, 0.5), (0, 0.5, None)])
def test_non_max_suppression_folds(center_point_box, max_out, iou, score):
    boxes = np.abs(RNG.standard_normal((2, 12, 4))).astype(np.float32)
    if not center_point_box:
        boxes[..., 2:] += boxes[..., :2]
    scores = RNG.uniform(0, 1, (2, 3, 12)).astype(np.float32)
    scores[0, 0, 3] = scores[0, 0, 5]  # a tie: the lower index first
    inits = {"boxes": boxes, "scores": scores, "max": np.array([max_out], np.int64),
             "iou": np.array([iou], np.float32)}
    names = ["boxes", "scores", "max", "iou"]
    if score is not None:
        inits["score"] = np.array([score], np.float32)
        names.append("score")
    node = helper.make_node("NonMaxSuppression", names, ["selected"], center_point_box=center_point_box)
    check_model(make_model([node], {}, ["selected"], inits, opset=11), {})


def test_non_max_suppression_needs_constant_boxes():
    boxes = np.zeros((1, 2, 4), np.float32)
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["selected"])
    model = make_model([node], {"boxes": boxes}, ["selected"], {"scores": np.zeros((1, 1, 2), np.float32)},
                       opset=11)
    with pytest.raises(DiagnosticError, match="boxes .* must be a constant"):
        TesselBackend.prepare(model, specialize=False)
