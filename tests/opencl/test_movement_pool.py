"""The movement (shape ops, pack/unpack, scatter_elements) and pool (pooling, resize) OpenCL templates
against the registry's numpy references, one PoCL build per case."""

from __future__ import annotations

import numpy as np
import pytest
from tessel.ir.ops.layout import pack_array
from tessel.ir.types import TensorType
from tessel.targets.opencl.kernels.base import NotLowerable
from tessel.targets.opencl.kernels.testing import check_op, lower_op

RNG = np.random.default_rng(7)


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(-50 if np.dtype(dtype).kind == "i" else 0, 50, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


# shape ops -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, perm, dtype", [
    ((2, 3, 4, 5), [0, 2, 3, 1], "float32"),  # NCHW -> NHWC, generic
    ((2, 16, 24), [0, 2, 1], "float32"),  # last two dims: 8x8 tiles
    ((1, 16, 4, 8), [0, 2, 3, 1], "int32"),  # NCHW -> NHWC merged to a tiled [16, 32] transpose
    ((3, 1, 4, 2, 5), [4, 1, 0, 3, 2], "int8"),
    ((6, 7), [1, 0], "bool"),
    ((1, 4, 34, 28, 28), [0, 2, 1, 3, 4], "float32"),  # channel shuffle: whole planes, a run a work-item
    ((1, 4, 17, 7, 7), [0, 2, 1, 3, 4], "float32"),  # runs of 49: scalar copies
    ((2, 3, 20), [1, 0, 2], "int8"),
])
def test_transpose(shape, perm, dtype):
    check_op("transpose", [rand(*shape, dtype=dtype)], {"perm": perm})


@pytest.mark.parametrize("shape, perm, runs", [
    ((1, 4, 34, 28, 28), [0, 2, 1, 3, 4], "136 runs of 784"),
    ((1, 4, 17, 7, 7), [0, 2, 1, 3, 4], "68 runs of 49"),
])
def test_transpose_copies_whole_runs(shape, perm, runs):
    """A transpose that keeps the innermost dims (shufflenet's channel shuffle) copies each contiguous run
    in one work-item instead of decoding coordinates per vector."""
    x = rand(*shape)
    _, lowered = lower_op("transpose", [TensorType.of(x)], {"perm": perm})
    assert runs in lowered.kernels[0].source


def test_reshape():
    check_op("reshape", [rand(2, 3, 4)], {"shape": [4, -1]})


@pytest.mark.parametrize("shapes, axis, dtype", [
    ([(2, 3, 4), (2, 5, 4), (2, 1, 4)], 1, "float32"),
    ([(3, 16), (3, 32)], -1, "float32"),  # vectorized pieces
    ([(2, 2), (0, 2), (1, 2)], 0, "int64"),  # an empty operand
    ([(2, 3), (2, 4)], -1, "bool"),
])
def test_concat(shapes, axis, dtype):
    check_op("concat", [rand(*s, dtype=dtype) for s in shapes], {"axis": axis})


@pytest.mark.parametrize("shape, axis, sizes", [((4, 6, 3), 1, [1, 2, 3]), ((5, 32), -1, [16, 0, 16])])
def test_split(shape, axis, sizes):
    check_op("split", [rand(*shape)], {"axis": axis, "sizes": sizes})


@pytest.mark.parametrize("shape, attrs, dtype", [
    ((4, 6, 32), {"starts": [1, 0], "ends": [3, 16], "axes": [0, 2]}, "float32"),  # block copy, vectorized
    ((5, 7), {"starts": [-1, 1], "ends": [-100, 7], "steps": [-2, 3]}, "float32"),  # negative and large steps
    ((2, 3, 8), {"starts": [3], "ends": [2**63 - 1], "axes": [-1], "steps": [-1]}, "int32"),  # INT max end
    ((4, 5), {"starts": [2], "ends": [2], "axes": [0]}, "float32"),  # empty result
])
def test_slice(shape, attrs, dtype):
    check_op("slice", [rand(*shape, dtype=dtype)], attrs)


@pytest.mark.parametrize("data, ind, axis", [
    ((5, 4, 16), [[0, -1], [4, 2]], 0),  # negative indices wrap, rows are vectors
    ((3, 5, 2), [1, -5, 4], -2),
])
def test_gather(data, ind, axis):
    check_op("gather", [rand(*data), np.asarray(ind, np.int64)], {"axis": axis})


def test_gather_i32_indices_ints():
    check_op("gather", [rand(4, 3, dtype="int16"), np.asarray([3, -4, 0], np.int32)], {"axis": 0})


def test_gather_elements():
    data = rand(3, 4, 5)
    check_op("gather_elements", [data, RNG.integers(-4, 4, (3, 2, 5)).astype(np.int64)], {"axis": -2})
    check_op("gather_elements", [rand(4, 3, dtype="bool"), RNG.integers(-4, 4, (2, 3)).astype(np.int32)],
             {"axis": 0})


def test_gather_clamps_out_of_range():
    from tessel.targets.opencl.kernels.testing import run_op

    data, ind = np.arange(5, dtype=np.float32), np.asarray([7, -9, 2], np.int64)
    (got,), _ = run_op("gather", [data, ind], {"axis": 0})
    np.testing.assert_array_equal(got, [4, 0, 2])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_modes(mode):
    check_op("pad", [rand(2, 3, 5, 6)], {"pads": [0, 1, 2, -1, 1, 0, -1, 3], "mode": mode, "value": 2.5})


@pytest.mark.parametrize("x, pads, value", [
    (rand(2, 4, 16), [0, 1, 0, 0, 2, 0], 0.0),  # innermost dim unpadded: whole vectors in or out
    (rand(3, 30, dtype="int32"), [1, 1, 0, 2], 7),  # innermost padded: vectors with a lane-by-lane tail
    (rand(3, 4, dtype="bool"), [1, 0, 0, 1], 1),
])
def test_pad_constant(x, pads, value):
    check_op("pad", [x], {"pads": pads, "mode": "constant", "value": value})


@pytest.mark.parametrize("shape, target", [((3, 1), (2, 3, 4)), ((2, 1, 16), (2, 0, 16))])
def test_expand(shape, target):
    check_op("expand", [rand(*shape)], {"shape": list(target)})


def test_tile():
    check_op("tile", [rand(2, 3, 16, dtype="uint8")], {"repeats": [2, 1, 3]})


@pytest.mark.parametrize("op, shape, b, mode", [
    ("depth_to_space", (1, 8, 3, 4), 2, "DCR"), ("depth_to_space", (2, 18, 2, 3), 3, "CRD"),
    ("space_to_depth", (1, 2, 4, 6), 2, "DCR"),
])
def test_depth_space(op, shape, b, mode):
    check_op(op, [rand(*shape)], {"blocksize": b, "mode": mode})


# pack / unpack ---------------------------------------------------------------------------------------------
LAYOUTS = [
    ((64, 40), [1], [16], [1, 0]),  # a GEMM B panel [N/16, K, 16], N tail padded
    ((1, 20, 5, 3), [1], [16], []),  # NCHW -> NCHW16c with a channel tail
    ((5, 37), [1, 0], [16, 4], [1, 0]),  # two tiled dims, inner order reversed
    ((3, 4, 6), [2, 0], [3, 2], [2, 0, 1]),
]


@pytest.mark.parametrize("shape, dims, tiles, perm", LAYOUTS)
def test_pack(shape, dims, tiles, perm):
    attrs = {"inner_dims_pos": dims, "inner_tiles": tiles, "outer_dims_perm": perm, "padding_value": -1.5}
    check_op("pack", [rand(*shape)], attrs)


@pytest.mark.parametrize("shape, dims, tiles, perm", LAYOUTS)
def test_unpack(shape, dims, tiles, perm):
    packed = pack_array(rand(*shape), dims, tiles, perm)
    attrs = {"inner_dims_pos": dims, "inner_tiles": tiles, "outer_dims_perm": perm, "shape": list(shape)}
    check_op("unpack", [packed], attrs)


def test_pack_int():
    check_op("pack", [rand(6, 10, dtype="int64")],
             {"inner_dims_pos": [0], "inner_tiles": [4], "padding_value": 3})


# scatter_elements ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_elements(reduction):
    data, ind, upd = rand(3, 4, 5), RNG.integers(-4, 4, (3, 3, 5)).astype(np.int64), rand(3, 3, 5)
    check_op("scatter_elements", [data, ind, upd], {"axis": 1, "reduction": reduction})


def test_scatter_elements_int_mul():
    data, ind, upd = rand(6, dtype="int32"), np.asarray([0, -1, 0], np.int32), rand(3, dtype="int32")
    check_op("scatter_elements", [data, ind, upd], {"axis": 0, "reduction": "mul"})


# pooling ---------------------------------------------------------------------------------------------------
POOLS = [
    {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},  # the ResNet stem
    {"kernel": [3, 2], "strides": [1, 1], "pads": [0, 1, 2, 0], "ceil_mode": True},  # asymmetric pads
    {"kernel": [2, 2], "strides": [3, 3], "ceil_mode": True},  # stride 3: scalar, ceil overhang
    {"kernel": [2, 4], "strides": [2, 2], "pads": [1, 0, 0, 3]},
]


@pytest.mark.parametrize("attrs", POOLS)
def test_max_pool2d(attrs):
    check_op("max_pool2d", [rand(1, 3, 17, 40)], attrs)


def test_max_pool2d_dilations_f64():
    check_op("max_pool2d", [rand(2, 2, 19, 21, dtype="float64")],
             {"kernel": [3, 2], "strides": [2, 1], "pads": [2, 1, 0, 1], "dilations": [2, 3],
              "ceil_mode": True})


@pytest.mark.parametrize("attrs, include", list(zip(POOLS, [False, True, True, False], strict=True)))
def test_avg_pool2d(attrs, include):
    check_op("avg_pool2d", [rand(1, 3, 17, 40)], {**attrs, "count_include_pad": include})


def test_max_pool2d_propagates_nan():
    x = rand(1, 1, 8, 40)
    x[0, 0, 3, 20] = np.nan
    x[0, 0, 5, 0] = np.nan
    check_op("max_pool2d", [x], {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})


@pytest.mark.parametrize("op, shape, dtype", [
    ("global_avg_pool", (1, 64, 7, 7), "float32"), ("global_max_pool", (2, 3, 5, 4, 3), "float32"),
    ("global_avg_pool", (2, 3, 5), "float64"), ("global_max_pool", (1, 4, 1, 1), "float32"),
])
def test_global_pool(op, shape, dtype):
    check_op(op, [rand(*shape, dtype=dtype)])


# resize ----------------------------------------------------------------------------------------------------
CTMS = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"]


@pytest.mark.parametrize("ctm", CTMS)
def test_resize_linear(ctm):
    check_op("resize", [rand(1, 2, 7, 9)], {"sizes": [1, 2, 14, 5], "mode": "linear",
                                            "coordinate_transformation_mode": ctm})


NEAREST = [("half_pixel", "round_prefer_floor"), ("align_corners", "round_prefer_ceil"),
           ("tf_half_pixel_for_nn", "ceil")]


@pytest.mark.parametrize("ctm, nearest", NEAREST)
def test_resize_nearest(ctm, nearest):
    check_op("resize", [rand(1, 2, 7, 9)], {"sizes": [1, 2, 14, 5], "mode": "nearest",
                                            "coordinate_transformation_mode": ctm, "nearest_mode": nearest})


@pytest.mark.parametrize("ctm", CTMS)
@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("sizes", [[1, 2, 10, 74], [1, 2, 5, 34], [2, 1, 8, 32]])
def test_resize_2x_columns(ctm, mode, sizes):
    """A 2x upsampling of 16 or more columns takes the interleaved vector path (with and without a row
    resize, widths not a multiple of 16, the run ending where the edge clamps)."""
    x = rand(sizes[0], sizes[1], 5 if sizes[2] == 10 else sizes[2], sizes[3] // 2)
    check_op("resize", [x], {"sizes": sizes, "mode": mode, "coordinate_transformation_mode": ctm})


@pytest.mark.parametrize("shape, sizes", [((1, 2, 7, 9), [1, 2, 14, 5]), ((1, 3, 5, 37), [1, 3, 10, 74]),
                                          ((2, 20, 33), [2, 40, 66]), ((1, 2, 6, 40), [1, 2, 6, 80])])
def test_resize_bilinear_bit_exact(shape, sizes):
    """The bilinear kernel (table loop and 2x vector path) gives the reference's onnxruntime sums to the
    bit: no FMA contraction, the same weight products and order."""
    check_op("resize", [rand(*shape)], {"sizes": sizes, "mode": "linear"}, rtol=0, atol=0)


def test_resize_2x_columns_path_taken():
    """The 2x path is what the previous test exercises, not the table loop."""
    src = lower_op("resize", [TensorType((1, 2, 5, 37), "f32")],
                   {"sizes": [1, 2, 10, 74], "mode": "linear"})[1].kernels[0].source
    assert "shuffle2" in src and "32 at a time" in src


def test_resize_scales_int_and_3d_linear():
    check_op("resize", [rand(1, 3, 5, 4, dtype="int32")],
             {"sizes": [1, 3, 15, 8], "scales": [1, 1, 3, 2], "mode": "nearest",
              "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"})
    check_op("resize", [rand(2, 3, 4, 5, dtype="float64")], {"sizes": [2, 5, 8, 3], "mode": "linear"})


# refused ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op, types, attrs", [
    ("transpose", [TensorType((2, 3), "f16")], {"perm": [1, 0]}),
    ("transpose", [TensorType((2, 3), "bf16")], {"perm": [1, 0]}),
    ("slice", [TensorType((None, 3), "f32")], {"starts": [0], "ends": [1]}),
    ("max_pool2d", [TensorType((1, 1, 4, 4), "f16")], {"kernel": [2, 2]}),
    ("global_avg_pool", [TensorType((1, 2, 4, 4), "bf16")], {}),
    ("resize", [TensorType((1, 1, 2, 2), "f16")], {"sizes": [1, 1, 4, 4], "mode": "linear"}),
    ("scatter_elements", [TensorType((4,), "i1"), TensorType((2,), "i64"), TensorType((2,), "i1")],
     {"axis": 0, "reduction": "add"}),
])
def test_not_lowerable(op, types, attrs):
    with pytest.raises(NotLowerable):
        lower_op(op, types, attrs)


def test_source_is_deterministic():
    types = [TensorType((1, 64, 112, 112), "f32")]
    attrs = {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    a = lower_op("max_pool2d", types, attrs)[1].kernels[0].source
    assert a == lower_op("max_pool2d", types, attrs)[1].kernels[0].source
    assert a.startswith("// max_pool2d") and "vload16" in a  # stride 2: even/odd lanes of 16-wide loads
