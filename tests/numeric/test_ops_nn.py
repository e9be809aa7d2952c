"""The nn family against onnxruntime: conv, conv transpose, pools, norms, softmax, LRN, resize.

Each case builds a one-node ONNX model and compares tessel's reference with it; the shapes are small so
the file runs in seconds, but they cover the geometry edge cases (asymmetric pads, dilation, groups,
ceil mode, odd sizes, batch > 1) where hand-written window arithmetic goes wrong.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from tessel.ir.ops.registry import OpError, get_op
from tessel.ir.types import TensorType

from tests.numeric.ort_util import check_op, rand, run_tessel

CONV_ATOL = 1e-4


# conv2d ---------------------------------------------------------------------------------------------------
CONV_CASES = [  # x shape, w shape, strides, pads, dilations, groups, bias
    ((1, 3, 8, 8), (4, 3, 3, 3), [1, 1], [0, 0, 0, 0], [1, 1], 1, False),
    ((2, 3, 9, 7), (5, 3, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 1, True),
    ((1, 4, 11, 10), (6, 4, 3, 2), [2, 3], [0, 1, 2, 0], [1, 1], 1, True),
    ((2, 2, 12, 12), (3, 2, 3, 3), [1, 2], [2, 1, 0, 2], [2, 3], 1, False),
    ((1, 6, 7, 7), (4, 3, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 2, True),
    ((2, 8, 9, 9), (8, 2, 3, 3), [2, 2], [1, 0, 1, 2], [1, 1], 4, False),
    ((2, 5, 9, 8), (5, 1, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 5, True),  # depthwise
    ((1, 4, 10, 10), (8, 1, 5, 3), [2, 1], [2, 0, 1, 1], [1, 2], 4, True),  # depthwise, multiplier 2
    ((1, 3, 5, 5), (2, 3, 5, 5), [1, 1], [0, 0, 0, 0], [1, 1], 1, True),  # kernel covers the input
    ((1, 3, 13, 13), (4, 3, 7, 7), [2, 2], [3, 3, 3, 3], [1, 1], 1, False),  # resnet stem shape
    ((3, 16, 6, 6), (8, 16, 1, 1), [1, 1], [0, 0, 0, 0], [1, 1], 1, True),  # pointwise
]


@pytest.mark.parametrize("xs, ws, strides, pads, dil, groups, bias", CONV_CASES)
def test_conv2d(xs, ws, strides, pads, dil, groups, bias) -> None:
    x, w = rand(*xs), rand(*ws, seed=1)
    inputs = [x, w] + ([rand(ws[0], seed=2)] if bias else [])
    check_op("Conv", "conv2d", inputs, atol=CONV_ATOL,
             onnx_attrs={"strides": strides, "pads": pads, "dilations": dil, "group": groups},
             attrs={"strides": strides, "pads": pads, "dilations": dil, "groups": groups})


CONVT_CASES = [  # x shape, w shape, strides, pads, dilations, groups, output_padding, bias
    ((1, 3, 5, 5), (3, 4, 3, 3), [1, 1], [0, 0, 0, 0], [1, 1], 1, [0, 0], False),
    ((2, 4, 4, 5), (4, 2, 3, 3), [2, 2], [1, 1, 1, 1], [1, 1], 1, [1, 1], True),
    ((1, 2, 5, 4), (2, 3, 4, 3), [3, 2], [1, 0, 2, 1], [1, 1], 1, [0, 1], True),
    ((1, 2, 4, 4), (2, 2, 3, 2), [1, 2], [0, 1, 1, 0], [2, 3], 1, [0, 0], False),
    ((2, 6, 3, 4), (6, 2, 3, 3), [2, 1], [1, 1, 0, 0], [1, 1], 3, [1, 0], True),
    ((1, 4, 5, 5), (4, 1, 4, 4), [2, 2], [1, 1, 1, 1], [1, 1], 4, [0, 0], False),  # depthwise
]


@pytest.mark.parametrize("xs, ws, strides, pads, dil, groups, opad, bias", CONVT_CASES)
def test_conv_transpose2d(xs, ws, strides, pads, dil, groups, opad, bias) -> None:
    x, w = rand(*xs), rand(*ws, seed=1)
    inputs = [x, w] + ([rand(ws[1] * groups, seed=2)] if bias else [])
    attrs = {"strides": strides, "pads": pads, "dilations": dil, "output_padding": opad}
    check_op("ConvTranspose", "conv_transpose2d", inputs, atol=CONV_ATOL,
             onnx_attrs={**attrs, "group": groups}, attrs={**attrs, "groups": groups})


# pooling --------------------------------------------------------------------------------------------------
POOL_CASES = [  # x shape, kernel, strides, pads, ceil_mode
    ((1, 2, 8, 8), [2, 2], [2, 2], [0, 0, 0, 0], False),
    ((2, 3, 9, 7), [3, 3], [2, 2], [1, 1, 1, 1], False),
    ((1, 2, 9, 7), [3, 3], [2, 2], [1, 1, 1, 1], True),
    ((1, 1, 5, 5), [2, 2], [2, 2], [0, 0, 0, 0], True),
    ((1, 2, 4, 6), [2, 3], [3, 2], [1, 0, 1, 2], True),  # ceil mode drops a window starting in the pad
    ((2, 2, 10, 11), [3, 2], [1, 3], [2, 0, 0, 1], False),
    ((1, 3, 7, 7), [3, 3], [3, 3], [1, 2, 0, 1], True),
    ((1, 1, 6, 6), [3, 3], [3, 3], [2, 2, 2, 2], True),
]


@pytest.mark.parametrize("xs, kernel, strides, pads, ceil", POOL_CASES)
@pytest.mark.parametrize("dilations", [[1, 1], [2, 1]])
def test_max_pool2d(xs, kernel, strides, pads, ceil, dilations) -> None:
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "ceil_mode": ceil}
    check_op("MaxPool", "max_pool2d", [rand(*xs)], attrs={**attrs, "kernel": kernel},
             onnx_attrs={**attrs, "kernel_shape": kernel, "ceil_mode": int(ceil)})


@pytest.mark.parametrize("xs, kernel, strides, pads, ceil", POOL_CASES)
@pytest.mark.parametrize("include_pad", [False, True])
def test_avg_pool2d(xs, kernel, strides, pads, ceil, include_pad) -> None:
    attrs = {"strides": strides, "pads": pads}
    check_op("AveragePool", "avg_pool2d", [rand(*xs)],
             onnx_attrs={**attrs, "kernel_shape": kernel, "ceil_mode": int(ceil),
                         "count_include_pad": int(include_pad)},
             attrs={**attrs, "kernel": kernel, "ceil_mode": ceil, "count_include_pad": include_pad})


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 7, 6), (2, 2, 3, 4, 5)])
@pytest.mark.parametrize("onnx_op, op", [("GlobalAveragePool", "global_avg_pool"),
                                         ("GlobalMaxPool", "global_max_pool")])
def test_global_pool(shape, onnx_op, op) -> None:
    check_op(onnx_op, op, [rand(*shape)])


# normalization ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5, 4), (1, 5, 7)])
def test_batch_norm(shape) -> None:
    c = shape[1]
    params = [rand(c, seed=1), rand(c, seed=2), rand(c, seed=3), rand(c, seed=4, low=0.1, high=2.0)]
    check_op("BatchNormalization", "batch_norm", [rand(*shape), *params], onnx_attrs={"epsilon": 1e-3},
             attrs={"epsilon": 1e-3}, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 4, 5, 6), (1, 2, 3, 4, 5)])
def test_instance_norm(shape) -> None:
    c = shape[1]
    check_op("InstanceNormalization", "instance_norm", [rand(*shape), rand(c, seed=1), rand(c, seed=2)],
             atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("shape, axis, bias", [((2, 3, 8), -1, True), ((4, 16), 1, False),
                                               ((2, 3, 4, 5), 1, True), ((2, 3, 4, 5), -2, False)])
def test_layer_norm(shape, axis, bias) -> None:
    norm = shape[axis % len(shape):]
    inputs = [rand(*shape), rand(*norm, seed=1)] + ([rand(*norm, seed=2)] if bias else [])
    check_op("LayerNormalization", "layer_norm", inputs, onnx_attrs={"axis": axis, "epsilon": 1e-4},
             attrs={"axis": axis, "epsilon": 1e-4}, atol=1e-5, rtol=1e-4)


def test_layer_norm_broadcast_scale() -> None:
    x, scale = rand(2, 3, 4), rand(4, seed=1)
    got = run_tessel("layer_norm", [x, scale], {"axis": 1})[0]
    mean, var = x.mean(axis=(1, 2), keepdims=True), x.var(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(got, (x - mean) / np.sqrt(var + 1e-5) * scale, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, axis", [((3, 7), -1), ((2, 3, 4), 1), ((2, 3, 4), 0), ((5,), 0)])
@pytest.mark.parametrize("onnx_op, op", [("Softmax", "softmax"), ("LogSoftmax", "log_softmax")])
def test_softmax(shape, axis, onnx_op, op) -> None:
    x = rand(*shape, low=-30, high=30)  # large logits: only a max-subtracting softmax stays finite
    check_op(onnx_op, op, [x], onnx_attrs={"axis": axis}, attrs={"axis": axis}, atol=1e-5)


@pytest.mark.parametrize("shape, size", [((2, 5, 4, 4), 1), ((1, 6, 3, 3), 3), ((2, 7, 3, 2), 7),
                                         ((1, 8, 5, 5), 5)])
def test_lrn(shape, size) -> None:
    attrs = {"size": size, "alpha": 1e-2, "beta": 0.6, "bias": 1.5}
    check_op("LRN", "lrn", [rand(*shape)], onnx_attrs=attrs, attrs=attrs)


def test_lrn_even_size() -> None:
    """onnxruntime only takes odd sizes; the ONNX spec's window is [c - 1, c + 2] for size 4."""
    x = rand(2, 6, 3, 2)
    got = run_tessel("lrn", [x], {"size": 4, "alpha": 0.1})[0]
    sq = np.pad(x * x, [(0, 0), (1, 2), (0, 0), (0, 0)])
    want = x / (1.0 + 0.1 / 4 * sum(sq[:, t:t + 6] for t in range(4))) ** 0.75
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# resize -----------------------------------------------------------------------------------------------------
CTMS = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"]
RESIZE_SIZES = [((1, 2, 4, 5), (1, 2, 8, 10)), ((2, 1, 7, 6), (2, 1, 3, 4)), ((1, 1, 5, 4), (1, 1, 9, 1)),
                ((1, 2, 3, 3), (1, 2, 7, 5))]


def _resize(x, sizes=None, scales=None, exact=False, **attrs) -> None:
    onnx_in = [x, None, None if scales is None else np.array(scales, np.float32),
               None if sizes is None else np.array(sizes, np.int64)]
    if sizes is None:
        sizes = [int(np.floor(n * s)) for n, s in zip(x.shape, scales, strict=True)]
    check_op("Resize", "resize", onnx_in, tessel_inputs=[x], onnx_attrs=attrs,
             rtol=0 if exact else 1e-5, atol=0 if exact else 1e-5,
             attrs={**attrs, "sizes": sizes, "scales": list(scales) if scales is not None else []})


@pytest.mark.parametrize("shapes", RESIZE_SIZES)
@pytest.mark.parametrize("ctm, nearest_mode", list(itertools.product(
    CTMS, ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])))
def test_resize_nearest(shapes, ctm, nearest_mode) -> None:
    _resize(rand(*shapes[0]), sizes=shapes[1], mode="nearest", coordinate_transformation_mode=ctm,
            nearest_mode=nearest_mode)


@pytest.mark.parametrize("shapes", RESIZE_SIZES)
@pytest.mark.parametrize("ctm", CTMS[:4])
def test_resize_linear(shapes, ctm) -> None:
    _resize(rand(*shapes[0]), sizes=shapes[1], mode="linear", coordinate_transformation_mode=ctm)


@pytest.mark.parametrize("scales", [[1, 1, 2.0, 2.0], [1, 1, 0.5, 0.75], [1, 1, 1.7, 0.6], [1, 1, 3.0, 1.0]])
@pytest.mark.parametrize("mode, ctm", [("nearest", "asymmetric"), ("nearest", "half_pixel"),
                                       ("linear", "half_pixel"), ("linear", "asymmetric"),
                                       ("linear", "pytorch_half_pixel")])
def test_resize_scales(scales, mode, ctm) -> None:
    _resize(rand(2, 2, 6, 8), scales=scales, mode=mode, coordinate_transformation_mode=ctm)


@pytest.mark.parametrize("scales, sizes", [([1, 1, 2.0, 2.0], None), ([1, 1, 1.7, 0.6], None),
                                           ([1, 1, 1.0, 2.0], None), ([1, 1, 3.0, 1.0], None),
                                           (None, [2, 3, 9, 13]), (None, [2, 3, 1, 5])])
@pytest.mark.parametrize("ctm", CTMS[:4])
def test_resize_bilinear_is_onnxruntimes_to_the_bit(scales, sizes, ctm) -> None:
    """A linear resize of H and W computes onnxruntime's bilinear sums (f32 weight products, four terms
    left to right, 0.5 / 0.5 where the edge clamps): QDQ models quantize its many results that land on
    a rounding tie as onnxruntime does only with the same last bit."""
    _resize(rand(2, 3, 6, 8), sizes=sizes, scales=scales, exact=True, mode="linear",
            coordinate_transformation_mode=ctm)


def test_resize_nearest_int() -> None:
    x = np.arange(24, dtype=np.int32).reshape(1, 2, 3, 4)  # onnxruntime has no i64 Resize
    _resize(x, sizes=[1, 2, 6, 6], mode="nearest", coordinate_transformation_mode="asymmetric",
            nearest_mode="floor")


# infer: types, dynamic dims, rejections ---------------------------------------------------------------------
def _infer(op: str, shapes: list[tuple], attrs: dict | None = None, dtype: str = "f32") -> list[TensorType]:
    opdef = get_op(op)
    assert opdef is not None
    return opdef.infer(opdef.sig([TensorType(tuple(s), dtype) for s in shapes], attrs or {}))


def test_infer_dynamic_dims() -> None:
    assert _infer("conv2d", [(None, 3, 32, None), (8, 3, 3, 3)], {"pads": [1, 1, 1, 1]}) == [
        TensorType((None, 8, 32, None), "f32")]
    pool = {"kernel": [3, 3], "strides": [2, 2], "ceil_mode": True}
    assert _infer("max_pool2d", [(None, 4, 7, 7)], pool) == [TensorType((None, 4, 3, 3), "f32")]
    assert _infer("resize", [(None, 3, 4, 4)], {"sizes": [1, 3, 8, 8]}) == [TensorType((1, 3, 8, 8), "f32")]


REJECTS = [  # op, operand shapes, attrs, the exact message
    ("conv2d", [(1, 3, 8, 8), (4, 4, 3, 3)], {},
     "input channels 3 do not match weight channels 4 * groups 1"),
    ("conv2d", [(1, 4, 8, 8), (6, 1, 3, 3)], {"groups": 4},
     "output channels 6 are not divisible by groups 4"),
    ("conv2d", [(1, 3, 8), (4, 3, 3, 3)], {}, "input must have rank 4, got tensor<1x3x8xf32>"),
    ("conv2d", [(1, 3, 8, 8), (4, 3, 3, 3)], {"strides": [1]}, "'strides' must have 2 values, got 1"),
    ("conv2d", [(1, 3, 8, 8), (4, 3, 3, 3)], {"strides": [0, 1]},
     "'strides' values must be >= 1, got [0, 1]"),
    ("conv2d", [(1, 3, 4, 4), (4, 3, 5, 5)], {}, "kernel extent 5 exceeds padded input 4 in spatial dim 0"),
    ("conv2d", [(1, 3, 8, 8), (4, 3, 3, 3), (5,)], {}, "bias must have shape [4], got tensor<5xf32>"),
    ("conv_transpose2d", [(1, 3, 4, 4), (2, 4, 3, 3)], {},
     "input channels 3 do not match weight input channels 2"),
    ("conv_transpose2d", [(1, 2, 4, 4), (2, 4, 3, 3)], {"strides": [2, 2], "output_padding": [2, 0]},
     "output_padding 2 must be smaller than stride 2 or dilation 1"),
    ("conv_transpose2d", [(1, 2, 2, 2), (2, 4, 2, 2)], {"pads": [2, 0, 1, 0]},
     "output size 0 in spatial dim 0 is not positive (pads 2, 1)"),
    ("max_pool2d", [(1, 3, 8, 8)], {"kernel": [3, 3], "pads": [3, 0, 0, 0]},
     "pads 3, 0 must be smaller than kernel extent 3 in spatial dim 0"),
    ("max_pool2d", [(1, 3, 8, 8)], {"kernel": [3]}, "'kernel' must have 2 values, got 1"),
    ("avg_pool2d", [(1, 3, 2, 2)], {"kernel": [3, 3]},
     "kernel extent 3 exceeds padded input 2 in spatial dim 0"),
    ("global_avg_pool", [(3, 4)], {}, "input must have rank >= 3, got tensor<3x4xf32>"),
    ("batch_norm", [(2, 3, 4, 4), (3,), (3,), (4,), (3,)], {}, "mean must have shape [3], got tensor<4xf32>"),
    ("instance_norm", [(2, 3, 4), (3,), (2,)], {}, "bias must have shape [3], got tensor<2xf32>"),
    ("layer_norm", [(2, 3, 4), (3,)], {},
     "scale tensor<3xf32> does not broadcast to the normalized shape [4]"),
    ("softmax", [(2, 3)], {"axis": 2}, "axis 2 is out of range for rank 2"),
    ("lrn", [(2, 3, 4, 4)], {"size": 0}, "size must be positive, got 0"),
    ("resize", [(1, 3, 4, 4)], {"sizes": [8, 8]}, "'sizes' must have 4 values (the input rank), got 2"),
    ("resize", [(1, 3, 4, 4)], {"sizes": [1, 3, 8, 8], "scales": [1.0, 2.0]},
     "'scales' must be empty or have 4 values, got 2"),
]


@pytest.mark.parametrize("op, shapes, attrs, message", REJECTS)
def test_infer_rejects(op, shapes, attrs, message) -> None:
    with pytest.raises(OpError, match=re.escape(message) + "$"):
        _infer(op, shapes, attrs)


def test_resize_verify_rejects_sizes_that_disagree_with_scales() -> None:
    opdef = get_op("resize")
    assert opdef is not None
    sig = opdef.sig([TensorType((1, 3, 5, 5), "f32")], {"sizes": [1, 3, 10, 11], "scales": [1, 1, 2.0, 2.0]})
    sig.results = opdef.infer(sig)
    message = "'sizes' value 11 in dim 3 is not floor(5 * scale 2.0) = 10"
    with pytest.raises(OpError, match=re.escape(message)):
        opdef.verify(sig)


@pytest.mark.parametrize("op, shapes, attrs", [
    ("conv2d", [(1, 3, 8, 8), (4, 3, 3, 3)], {}), ("max_pool2d", [(1, 3, 8, 8)], {"kernel": [2, 2]}),
    ("softmax", [(2, 3)], {}), ("resize", [(1, 3, 4, 4)], {"sizes": [1, 3, 8, 8], "mode": "linear"})])
def test_infer_rejects_int(op, shapes, attrs) -> None:
    """i32 is refused; max_pool2d takes 8-bit integers too (ONNX MaxPool's i8 / ui8)."""
    with pytest.raises(OpError, match="must be a float (or 8-bit )?tensor"):
        _infer(op, shapes, attrs, dtype="i32")
    if op == "max_pool2d":
        assert _infer(op, shapes, attrs, dtype="ui8")


def test_conv_mixed_dtypes_rejected() -> None:
    opdef = get_op("conv2d")
    assert opdef is not None
    sig = opdef.sig([TensorType((1, 3, 8, 8), "f32"), TensorType((4, 3, 3, 3), "f16")], {})
    with pytest.raises(OpError, match="operand 1 element type f16 differs from the input's f32"):
        opdef.infer(sig)


# cost and reduced precision ---------------------------------------------------------------------------------
def test_conv_cost_counts_two_flops_per_mac() -> None:
    opdef = get_op("conv2d")
    assert opdef is not None
    types = [TensorType((1, 3, 8, 8), "f32"), TensorType((4, 3, 3, 3), "f32")]
    sig = opdef.sig(types, {"pads": [1, 1, 1, 1]})
    sig.results = opdef.infer(sig)
    cost = opdef.cost(sig)
    assert cost.flops == 2 * (4 * 8 * 8) * (3 * 3 * 3)
    assert (cost.bytes_read, cost.bytes_written) == (4 * (3 * 64 + 4 * 27), 4 * 4 * 64)


@pytest.mark.parametrize("op, attrs, shapes", [
    ("conv2d", {"pads": [1, 1, 1, 1]}, [(1, 4, 6, 6), (2, 4, 3, 3)]),
    ("avg_pool2d", {"kernel": [2, 2]}, [(1, 2, 5, 5)]),
    ("softmax", {}, [(3, 9)]),
    ("resize", {"sizes": [1, 2, 7, 9], "mode": "linear"}, [(1, 2, 4, 4)]),
])
def test_f16_matches_f32(op, attrs, shapes) -> None:
    xs = [rand(*s, seed=i) for i, s in enumerate(shapes)]
    want = run_tessel(op, xs, attrs)[0]
    got = run_tessel(op, [x.astype(np.float16) for x in xs], attrs)[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=2e-2)
