"""The gemm and conv templates against the registry references, on small shapes that still exercise every
path: M/N/K tails, packed and unpacked A, batch broadcasting, gemm's transposes and C broadcasts, conv
strides/pads/dilations, grouped, depthwise and channel counts off the 16-blocking. Each case is one PoCL
build, so the list is kept short."""

from __future__ import annotations

import numpy as np
import pytest
from tessel.ir.types import TensorType
from tessel.targets.opencl.kernels.base import DeviceInfo, NotLowerable
from tessel.targets.opencl.kernels.conv_geometry import pick_tile
from tessel.targets.opencl.kernels.testing import check_op
from tessel.targets.opencl.kernels.testing import lower_op as lower_for

AVX512 = DeviceInfo.generic()
"""The choices these tests pin are the templates' on an AVX-512 CPU (the generic device, where their tiles
were tuned); test_avx2_* pin how a device with 16 vector registers shrinks them."""
AVX2 = DeviceInfo(vector_width=8, vector_registers=16)


def lower_op(*args, info=AVX512, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
    return lower_for(*args, info=info, **kwargs)

TOL = {"rtol": 1e-4, "atol": 1e-4}
rng = np.random.default_rng(7)


def arr(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("a, b", [
    ((33, 20), (20, 40)),  # M tail (rows 16 -> 33 = 2 x 17) and N tail (40 = 2.5 x 16)
    ((1, 100), (100, 37)),  # GEMV: one row, split accumulators, A unpacked
    ((7,), (7, 5)),  # 1-D A
    ((4, 7), (7,)),  # 1-D B: one column
    ((2, 3, 17, 9), (3, 9, 18)),  # batched, B broadcast over the leading batch dim
    ((2, 1, 5, 4), (3, 4, 6)),  # both operands broadcast
    ((64, 48), (48, 64)),  # no tails
])
def test_matmul(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    check_op("matmul", [arr(*a), arr(*b)], **TOL)


@pytest.mark.parametrize("a, b, rows", [
    ((32, 1, 64), (64, 40), 32),  # a recurrent layer's input projection: 32 steps of one row
    ((2, 3, 5, 8), (8, 24), 30),  # two batch dims, a row tail
])
def test_matmul_with_one_b_folds_batches_into_rows(a, b, rows: int) -> None:
    """With one B for every batch, A's batch dims are rows of one GEMM: each B panel is read for up to
    `rows` rows instead of once a batch."""
    check_op("matmul", [arr(*a), arr(*b)], **TOL)
    _, low = lower_op("matmul", [TensorType(a, "f32"), TensorType(b, "f32")], {})
    assert f"// Y[{rows}, {b[1]}] = A[.., {rows}, {b[0]}]" in low.kernels[-1].source


def test_matmul_schedule_override() -> None:
    check_op("matmul", [arr(30, 10), arr(10, 24)], schedule={"rows": 7, "cols": 8}, **TOL)
    _, low = lower_op("matmul", [TensorType((30, 10), "f32"), TensorType((10, 24), "f32")], {},
                      schedule={"rows": 7, "cols": 8})
    assert {k: low.schedule[k] for k in ("rows", "cols")} == {"rows": 7, "cols": 8}


@pytest.mark.parametrize("a, b, schedule", [
    ((256, 64), (64, 40), {}),  # the default: 2 of the 3 panels a work-item, the last one's second skipped
    ((37, 20), (20, 100), {"vcols": 3}),  # M tail, 7 panels (the last partial) by threes
    ((2, 30, 12), (2, 12, 64), {"vcols": 4, "rows": 5}),  # batched
    ((64, 48), (48, 64), {"vcols": 2, "pack_a": 1}),  # A in panels
    ((1, 100), (100, 200), {}),  # GEMV: four k-split accumulator sets of two columns each
])
def test_matmul_several_columns_a_work_item(a, b, schedule) -> None:
    """`vcols` column panels a work-item: each A scalar loaded feeds vcols FMAs."""
    check_op("matmul", [arr(*a), arr(*b)], schedule=schedule, **TOL)
    _, low = lower_op("matmul", [TensorType(a, "f32"), TensorType(b, "f32")], {}, schedule=schedule)
    assert low.schedule["vcols"] == schedule.get("vcols", 2)


def test_gemm_several_columns_with_bias_and_epilogue() -> None:
    check_op("gemm", [arr(40, 9), arr(20, 9), arr(20)], {"trans_b": True, "alpha": 0.5, "beta": 2.0},
             schedule={"vcols": 2}, **TOL)


def test_two_columns_where_they_pay() -> None:
    """Two column vectors where the registers hold two columns of at least 8 rows, B has two panels, and
    the rows are not cut into more blocks while few (B would be read from memory more often)."""
    def vcols(m: int, k: int, n: int, info: DeviceInfo = AVX512) -> int:
        _, low = lower_op("matmul", [TensorType((m, k), "f32"), TensorType((k, n), "f32")], {}, info=info)
        return int(low.schedule.get("vcols", 1))

    assert vcols(1024, 1024, 1024) == vcols(256, 64, 40) == 2
    assert vcols(16, 4096, 8192) == 1  # one block of 16 rows: two of 12 would read B twice
    assert vcols(64, 768, 768) == 1  # 4 blocks of 16 against 5 of 13
    assert vcols(1024, 64, 16) == 1  # one panel
    assert vcols(1024, 1024, 1024, AVX2) == 1  # 16 registers: two float16 columns leave 2 rows
    with pytest.raises(NotLowerable, match="vcols=5"):
        lower_op("matmul", [TensorType((8, 8), "f32"), TensorType((8, 64), "f32")], {}, schedule={"vcols": 5})


@pytest.mark.parametrize("a, b, c, attrs", [
    ((9, 33), (20, 9), (20,), {"trans_a": True, "trans_b": True, "alpha": 0.5, "beta": 2.0}),
    ((33, 9), (9, 20), (33, 1), {}),  # C broadcast along N
    ((1, 9), (20, 9), None, {"trans_b": True}),  # an FC layer at batch 1
    ((5, 9), (9, 3), (), {"alpha": -1.0, "beta": 0.25}),  # scalar C, narrow N
])
def test_gemm(a, b, c, attrs) -> None:
    ins = [arr(*a), arr(*b)] + ([] if c is None else [arr(*c)])
    check_op("gemm", ins, attrs, **TOL)


def conv_case(n, c, o, hw, k, *, s=1, p=0, d=1, g=1, bias=True):
    h, w = hw if isinstance(hw, tuple) else (hw, hw)
    attrs = {"strides": [s, s] if isinstance(s, int) else s, "pads": [p] * 4 if isinstance(p, int) else p,
             "dilations": [d, d], "groups": g}
    return [arr(n, c, h, w), arr(o, c // g, k, k)] + ([arr(o)] if bias else []), attrs


@pytest.mark.parametrize("case", [
    conv_case(1, 16, 16, 8, 3, p=1),  # 3x3 same, blocks exact
    conv_case(1, 3, 20, (17, 19), 3, s=2, p=1),  # RGB stem-like: 3 input channels, O tail
    conv_case(2, 5, 7, 9, 1, bias=False),  # batch 2, 1x1, no bias, narrow O
    conv_case(1, 12, 6, 10, 3, p=[1, 0, 2, 1], d=2, g=3),  # asymmetric pads, dilation, groups 3
    conv_case(1, 3, 8, 23, 11, s=4, p=2),  # alexnet-like 11x11 stride 4
    conv_case(1, 40, 48, 7, 3, p=1, g=2),  # grouped, 20 channels a group (blocks of 10), 7x7 (2-row tiles)
    conv_case(1, 24, 48, 6, 1, g=8),  # shufflenet-like grouped 1x1, 6 outputs a group
    conv_case(1, 96, 32, 9, 3, p=1),  # densenet-like 3x3 with 96 channels
    conv_case(1, 32, 32, 12, 3, s=2, p=1, g=32),  # depthwise stride 2
    conv_case(2, 20, 20, (9, 11), 5, p=2, g=20),  # depthwise 5x5, channel tail, batch 2
    conv_case(1, 8, 16, 9, 3, p=1, g=8),  # channel multiplier 2: the grouped path
])
def test_conv2d(case) -> None:
    check_op("conv2d", *case, **TOL)


def test_conv2d_schedule_override() -> None:
    ins, attrs = conv_case(1, 16, 16, 10, 3, p=1)
    check_op("conv2d", ins, attrs, schedule={"tile_h": 2, "tile_w": 5, "cols": 8}, **TOL)


@pytest.mark.parametrize("case, schedule", [
    (conv_case(1, 24, 24, 7, 3, p=1, g=24), {}),  # a partial last block, rows under 16 columns
    (conv_case(1, 40, 40, 28, 3, p=1, g=40), {}),  # a 12-column tail chunk over-reading the next row
    (conv_case(1, 16, 16, 33, 3, s=2, p=1, g=16), {}),  # stride 2: the right pad column is never read
    (conv_case(2, 32, 32, (5, 18), 3, p=[2, 1, 0, 3], g=32), {}),  # batch 2, asymmetric pads
    (conv_case(1, 48, 32, 10, 3, p=1, g=2), {"cin_block": 16}),  # grouped: 24 channels a group, 2 blocks
])
@pytest.mark.parametrize("local", [1, 0], ids=["local-repack", "scratch-repack"])
def test_conv2d_repacks_16_channel_blocks(case, schedule, local: int) -> None:
    """The repack of an NCHW input into 16-channel blocks (repack_input_transposed): 16 columns of 16
    planes a step, transposed in registers; pads, channel tails, tail chunks and the input's last row. A
    depthwise conv does it in local memory, in its own kernel (depthwise_local_source) unless told not to
    (schedule local_repack = 0, or a device with too little local memory): then a first kernel fills
    scratch."""
    schedule = {**schedule, "local_repack": local}
    check_op("conv2d", *case, schedule=schedule, **TOL)
    types = [TensorType.of(a) for a in case[0]]
    low = lower_op("conv2d", types, case[1], schedule=schedule)[1]
    depthwise = case[1].get("groups", 1) == types[0].dims[1]
    if local and depthwise:
        assert len(low.kernels) == 1 and "__local float L[" in low.kernels[0].source
        assert "barrier(CLK_LOCAL_MEM_FENCE)" in low.kernels[0].source
    else:
        assert len(low.kernels) == 2 and "transposed in registers" in low.kernels[0].source


@pytest.mark.parametrize("case, band_rows, groups", [
    (conv_case(1, 16, 16, 20, 3, p=1, g=16), 0, 3),  # one 16-channel block: 5 rows of 4x4 tiles, bands of 2
    (conv_case(1, 16, 16, 20, 3, p=1, g=16), 3, 2),  # bands of 3 tile rows: a short last band
    (conv_case(1, 48, 48, 21, 3, s=2, p=1, g=48), 0, 3),  # 3 blocks, stride 2: 3 bands each
    (conv_case(1, 16, 16, (13, 9), 5, p=2, g=16), 1, 7),  # 5x5, one tile row (2 rows) a band: 4 halo rows
    (conv_case(4, 64, 64, 8, 3, p=1, g=64), 0, 1),  # 16 (image, block) pairs: the whole plane a group
])
def test_depthwise_bands_share_a_plane(case, band_rows: int, groups: int) -> None:
    """A local-repack depthwise conv splits its output rows into bands, one work-group each, when its
    (image, channel block) pairs alone would leave cores idle (mobilenet_v2's first depthwise conv: one
    block of 80x80); each band fills its rows and the halo into local memory."""
    schedule = {"band_rows": band_rows} if band_rows else {}
    check_op("conv2d", *case, schedule=schedule, **TOL)
    types = [TensorType.of(a) for a in case[0]]
    kernel = lower_op("conv2d", types, case[1], schedule=schedule)[1].kernels[0]
    assert "__local float L[" in kernel.source
    assert kernel.global_size[0] // kernel.local_size[0] == groups


@pytest.mark.parametrize("case, schedule", [
    (conv_case(1, 16, 40, 9, 3, p=1), {"tile_h": 3, "tile_w": 3, "vcols": 2}),  # 2nd column: lanes 32..39
    (conv_case(1, 20, 20, (7, 5), 1), {"tile_h": 2, "tile_w": 3, "vcols": 2}),  # 2nd column past O, tails
    (conv_case(1, 32, 96, 7, 3, s=2, p=1), {"tile_h": 1, "tile_w": 4, "vcols": 3, "cols_first": True}),
    (conv_case(2, 8, 24, 6, 3, p=1, bias=False), {"vcols": 2, "cols": 8, "local": 3}),  # 8-wide columns
    (conv_case(1, 16, 16, 8, 3, p=1, g=16), {"cols_first": True, "local": 1}),  # depthwise
    (conv_case(1, 32, 32, 9, 3, p=1), {"tile_h": 1, "tile_w": 7, "vcols": 2, "unroll": 2}),  # rolled loop
    (conv_case(1, 24, 20, 5, 1), {"unroll": 3, "cin_block": 12}),  # one column, 3 channels an iteration
])
def test_conv2d_schedule_knobs(case, schedule) -> None:
    """Several vector columns a work-item (`vcols`), columns along global dimension 0 (`cols_first`), an
    explicit work-group size (`local`) and a rolled loop over a block's channels (`unroll` a trip), with
    channel tails."""
    check_op("conv2d", *case, schedule=schedule, **TOL)
    types = [TensorType.of(a) for a in case[0]]
    low = lower_op("conv2d", types, case[1], schedule=schedule)[1]
    assert low.kernels[-1].local_size == (schedule.get("local", low.kernels[-1].local_size[0]), 1, 1)
    assert {k: v for k, v in low.schedule.items() if k in schedule} == schedule  # an explicit local too


def test_conv2d_planar_stem() -> None:
    """An unpadded conv of at most 16 input channels whose tiles divide the output reads the NCHW input in
    place (no repack kernel, no scratch); 20 output channels: the second column is 4 lanes wide."""
    case = conv_case(1, 3, 20, 15, 3, s=2)
    check_op("conv2d", *case, **TOL)
    low = lower_op("conv2d", [TensorType.of(a) for a in case[0]], case[1])[1]
    assert low.schedule["in_place"] and len(low.kernels) == 1 and not low.scratch
    assert low.kernels[0].args == ("in0", "in1", "in2", "out0")
    padded = conv_case(1, 3, 20, 15, 3, s=2, p=1)  # pads: repacked
    assert len(lower_op("conv2d", [TensorType.of(a) for a in padded[0]], padded[1])[1].kernels) == 2


@pytest.mark.parametrize("c, o, g, hw, schedule, planar", [
    (68, 68, 4, (7, 8), {"pointwise": 0}, True),  # shufflenet-like: 17 channels a group, 17 planes a block
    (48, 96, 4, (6, 14), {"pointwise": 0}, True),  # 12 channels a group
    (48, 96, 4, (6, 14), {"cin_block": 8}, False),  # 8 does not divide 12: a block would cross groups
    (58, 58, 2, (7, 7), {"pointwise": 0}, False),  # 29 channels a group: no divisor of 4..24, repacked
])
def test_grouped_conv_reads_planes_in_place(c, o, g, hw, schedule, planar) -> None:
    """Unpadded grouped convs on an NCHW input read it plane by plane, blocks of channels dividing a
    group, when their tiles divide the output (the direct kernel: 1x1 convs default to the pixel GEMM)."""
    ins, attrs = conv_case(1, c, o, hw, 1, g=g)
    check_op("conv2d", ins, attrs, schedule=schedule, **TOL)
    low = lower_op("conv2d", [TensorType.of(a) for a in ins], attrs, schedule=schedule)[1]
    assert bool(low.schedule.get("in_place")) == planar and len(low.kernels) == (1 if planar else 2)


def test_conv2d_schedule_refusals() -> None:
    ins, attrs = conv_case(1, 16, 16, 10, 3, p=1)
    types = [TensorType.of(a) for a in ins]
    with pytest.raises(NotLowerable, match="vcols=3"):
        lower_op("conv2d", types, attrs, schedule={"tile_h": 2, "tile_w": 7, "vcols": 3})
    grouped = [types[0], TensorType((16, 8, 3, 3), "f32"), types[2]]
    with pytest.raises(NotLowerable, match="vcols=2"):
        lower_op("conv2d", grouped, {**attrs, "groups": 2}, schedule={"vcols": 2})
    with pytest.raises(NotLowerable, match="unroll=3"):
        lower_op("conv2d", types, attrs, schedule={"unroll": 3})
    with pytest.raises(NotLowerable, match="local=0"):
        lower_op("conv2d", types, attrs, schedule={"local": 0})


def test_source_is_deterministic() -> None:
    types = [TensorType((1, 64, 14, 14), "f32"), TensorType((64, 64, 3, 3), "f32"), TensorType((64,), "f32")]
    attrs = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "groups": 1}
    one = lower_op("conv2d", types, attrs)[1]
    two = lower_op("conv2d", types, attrs)[1]
    assert [k.source for k in one.kernels] == [k.source for k in two.kernels]
    # two 16-wide columns a work-item, 2x7 pixels (28 accumulators), the channel loop rolled 4 a trip
    assert one.schedule == {"tile_h": 2, "tile_w": 7, "cols": 16, "cin_block": 16, "vcols": 2, "unroll": 4}
    assert one.pack[1].inner_tiles == (16, 32)


def test_epilogue_hook() -> None:
    from tessel.targets.opencl.kernels.conv import lower_conv2d
    from tessel.targets.opencl.kernels.gemm import lower_matmul

    relu = lambda v, i, n: f"fmax({v}, 0.0f)"  # noqa: E731
    types = [TensorType((1, 16, 8, 8), "f32"), TensorType((16, 16, 3, 3), "f32")]
    ctx, _ = lower_op("conv2d", types, {"pads": [1, 1, 1, 1]})
    assert "fmax(" in lower_conv2d(ctx, relu).kernels[-1].source
    ctx, _ = lower_op("matmul", [TensorType((8, 8), "f32"), TensorType((8, 8), "f32")], {})
    assert "fmax(" in lower_matmul(ctx, relu).kernels[-1].source


@pytest.mark.parametrize("op, types, attrs, reason", [
    ("matmul", [TensorType((4, 4), "f16"), TensorType((4, 4), "f16")], {}, "f32 only"),
    ("matmul", [TensorType((None, 4), "f32"), TensorType((4, 4), "f32")], {}, "dynamic shape"),
    ("gemm", [TensorType((4, 4), "f64"), TensorType((4, 4), "f64")], {}, "f32 only"),
    ("conv2d", [TensorType((1, 4, 8, 8), "f16"), TensorType((4, 4, 3, 3), "f16")], {}, "f32 only"),
    ("conv2d", [TensorType((None, 4, 8, 8), "f32"), TensorType((4, 4, 3, 3), "f32")], {}, "dynamic shape"),
    ("matmul", [TensorType((4, 4), "f32"), TensorType((4, 4), "f32")], {"schedule": {"cols": 3}}, "cols=3"),
])
def test_not_lowerable(op, types, attrs, reason) -> None:
    schedule = attrs.pop("schedule", None)
    with pytest.raises(NotLowerable, match=reason):
        lower_op(op, types, attrs, schedule=schedule)


@pytest.mark.parametrize("attrs,xs,ws", [
    ({}, (1, 3, 5, 5), (3, 4, 3, 3)),
    ({"strides": [2, 2], "pads": [1, 0, 1, 1], "output_padding": [1, 0], "bias": True},
     (2, 4, 4, 3), (4, 2, 3, 2)),
    ({"strides": [2, 1], "dilations": [2, 2], "groups": 2}, (1, 4, 3, 4), (4, 3, 2, 3)),
])
def test_conv_transpose2d(attrs: dict, xs: tuple, ws: tuple) -> None:
    rng = np.random.default_rng(3)
    attrs = dict(attrs)
    ins = [rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)]
    if attrs.pop("bias", False):
        ins.append(rng.standard_normal(ws[1] * attrs.get("groups", 1)).astype(np.float32))
    check_op("conv_transpose2d", ins, attrs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,o,g,k", [(136, 136, 4, 1), (60, 40, 4, 3), (24, 30, 3, 1)])
def test_grouped_conv_with_padded_group_columns(c: int, o: int, g: int, k: int) -> None:
    """Groups of 34, 10 or 10 output channels get 16- or 8-wide columns padded per group."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, c, 9, 11)).astype(np.float32)
    w = rng.standard_normal((o, c // g, k, k)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    check_op("conv2d", [x, w, b], {"groups": g, "pads": [k // 2] * 4}, rtol=1e-4, atol=1e-4)


# A read as is or packed -----------------------------------------------------------------------------------
@pytest.mark.parametrize("a, b, schedule", [
    ((33, 20), (20, 40), {"pack_a": 0}),  # rows: the tail block's pointers clamp to row 32
    ((33, 20), (20, 40), {"pack_a": 1}),  # panels packed by a first kernel
    ((2, 3, 17, 9), (3, 9, 18), {"pack_a": 0}),  # batch strides of A itself, B broadcast
    ((2, 1, 5, 4), (3, 4, 6), {"pack_a": 1}),  # batch strides of A's panels, A broadcast
    ((3, 40), (40, 8), {"pack_a": 0, "rows": 2}),  # 2 rows: split accumulators over k, M tail of 1
])
def test_matmul_a_modes(a, b, schedule) -> None:
    check_op("matmul", [arr(*a), arr(*b)], schedule=schedule, **TOL)


@pytest.mark.parametrize("schedule", [{"pack_a": 0}, {"pack_a": 1}, {"pack_a": 0, "rows": 5}])
def test_gemm_trans_a_modes(schedule) -> None:
    """trans_a: A [K, M] read as is with stride M ("cols") or packed; M = 23 leaves a tail block."""
    ins = [arr(30, 23), arr(30, 19), arr(19)]
    check_op("gemm", ins, {"trans_a": True}, schedule=schedule, **TOL)


@pytest.mark.parametrize("m, k, n, packed", [
    (64, 128, 128, False),  # a transformer's activations: the pack launch would cost more than it saves
    (64, 2048, 64, False),  # small enough A, however long its rows
    (3136, 576, 64, False),  # large, rows 2304 bytes apart: 16 rows spread over the L1 sets
    (1024, 1024, 1024, True),  # rows 4 KiB apart all fall in one L1 set
    (49, 4608, 512, True),  # long rows outrun the prefetchers
    (24, 4096, 1024, True),  # small, but a long product over rows that share one L1 set
])
def test_matmul_packs_a_only_when_it_pays(m, k, n, packed) -> None:
    _, low = lower_op("matmul", [TensorType((m, k), "f32"), TensorType((k, n), "f32")], {})
    assert low.schedule["pack_a"] == int(packed)
    assert len(low.kernels) == 1 + packed and bool(low.scratch) == packed
    assert low.kernels[-1].args[0] == ("tmp0" if packed else "in0")
    assert ("panels [.., " if packed else f"A [.., {m}, {k}]") in low.kernels[-1].source


@pytest.mark.parametrize("m, k, rows", [
    (32, 1024, 8),  # 4 KiB apart: 16 rows in one L1 set ran at a third of the speed of 8
    (48, 2048, 8),
    (24, 1536, 12),  # 6 KiB apart: two sets; 16 rows (8 a set) qualify, evened to 2 blocks of 12
    (17, 512, 9),  # 2 KiB apart: 17 rows put 9 in a set; 16 would qualify, evened to 9 + 8
    (32, 512, 16),  # 2 KiB apart: two sets
    (32, 200, 16),  # 800 bytes apart: spread over the sets
])
def test_rows_read_as_is_do_not_thrash_an_l1_set(m, k, rows) -> None:
    _, low = lower_op("matmul", [TensorType((m, k), "f32"), TensorType((k, 64), "f32")], {})
    assert low.schedule["pack_a"] == 0
    one_column = low.schedule.get("vcols", 1) == 1  # two columns a work-item fit fewer rows
    assert low.schedule["rows"] == rows if one_column else low.schedule["rows"] <= rows


def test_rows_capped_for_the_l1_keep_their_tail() -> None:
    """20 rows 4 KiB apart run as 7-row blocks (8 qualify, evened over 3 blocks), the last one a tail of
    6, with gemm's bias fused."""
    check_op("gemm", [arr(20, 1024), arr(1024, 40), arr(40)], **TOL)
    _, low = lower_op("gemm", [TensorType((20, 1024), "f32"), TensorType((1024, 40), "f32"),
                               TensorType((40,), "f32")], {})
    assert low.schedule["rows"] == 7


def test_constant_a_is_packed_at_load_time() -> None:
    types = [TensorType((40, 30), "f32"), TensorType((30, 20), "f32")]
    _, low = lower_op("matmul", types, {}, constant=(True, True))
    assert list(low.pack) == [0, 1] and len(low.kernels) == 1 and "pack_a" not in low.schedule
    with pytest.raises(NotLowerable, match="pack_a=2"):
        lower_op("matmul", types, {}, schedule={"pack_a": 2})


def test_epilogue_with_a_as_is() -> None:
    """The fused epilogue hook sees the same stores whichever way A is read."""
    from tessel.targets.opencl.kernels.gemm import lower_matmul

    relu = lambda v, i, n: f"fmax({v}, 0.0f)"  # noqa: E731
    ctx, _ = lower_op("matmul", [TensorType((64, 128), "f32"), TensorType((128, 96), "f32")], {})
    low = lower_matmul(ctx, relu)
    assert len(low.kernels) == 1 and "fmax(" in low.kernels[0].source
    assert low.kernels[0].args == ("in0", "in1", "out0")


@pytest.mark.parametrize("c, o, g, hw, k, p, vcols", [
    (272, 272, 4, 14, 1, 0, 5),  # shufflenet: 68 outputs a group, 5 16-wide columns (the last 4 lanes)
    (64, 128, 4, 8, 1, 0, 2),  # 32 a group: 2 whole columns, nothing padded
    (48, 96, 2, 9, 3, 1, 3),  # 3x3 with pads: repacked input, 3 columns of 16
    (272, 272, 4, 7, 1, 0, 1),  # 7x7: no tile of 2..5 pixels divides it; one column, read in place
])
def test_grouped_conv_computes_whole_groups(c, o, g, hw, k, p, vcols) -> None:
    """A grouped conv of 2..6 columns a group gives each work-item all of its group's columns (each input
    value loaded once for all of them), unless no such tile divides an output it could read in place (the
    direct kernel)."""
    ins, attrs = conv_case(1, c, o, hw, k, p=p, g=g)
    direct = {"pointwise": 0} if k == 1 else {}
    check_op("conv2d", ins, attrs, schedule=direct, **TOL)
    low = lower_op("conv2d", [TensorType.of(a) for a in ins], attrs, schedule=direct)[1]
    assert low.schedule.get("vcols", 1) == vcols


@pytest.mark.parametrize("case, cols, vcols", [
    (conv_case(1, 3, 24, 17, 3, s=2, p=1), 8, 3),  # shufflenet's stem: three 8-wide columns, none padded
    (conv_case(1, 16, 48, 13, 5, p=2), 16, 3),  # 48 channels: three 16-wide columns instead of 64 lanes
    (conv_case(1, 32, 48, 13, 1), 16, 2),  # unpadded, 13x13: two columns keep a tile dividing the output
    (conv_case(1, 16, 64, 9, 3, p=1), 16, 2),
])
def test_dense_conv_columns(case, cols, vcols) -> None:
    """Dense convs take two 16-wide output-channel columns a work-item, or three when that pads less (the
    direct kernel)."""
    check_op("conv2d", *case, schedule={"pointwise": 0}, **TOL)
    low = lower_op("conv2d", [TensorType.of(a) for a in case[0]], case[1], schedule={"pointwise": 0})[1]
    assert (low.schedule["cols"], low.schedule["vcols"]) == (cols, vcols)


def test_accumulator_budget() -> None:
    """float16 accumulators beside one loaded vector and a broadcast: 30 with AVX-512, 6 with AVX2 (two
    registers each), 14 float8 with AVX2."""
    assert (AVX512.accumulators(16), AVX2.accumulators(16), AVX2.accumulators(8)) == (30, 6, 14)


@pytest.mark.parametrize("m,k,n,rows", [(1024, 64, 256, 6), (5, 32, 64, 5), (32, 128, 2048, 6)])
def test_avx2_gemm_takes_the_6x16_tile(m: int, k: int, n: int, rows: int) -> None:
    """With 16 registers a column is two of them (float16) and a block 6 rows (SGEMM 1024^3 on an AVX2
    Zen 3: 40 GFLOP/s at 16 rows x float8, 145 at 6 x float16); AVX-512 keeps 14..24 rows."""
    a = np.random.default_rng(0).standard_normal((m, k)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((k, n)).astype(np.float32)
    types = [TensorType.of(a), TensorType.of(b)]
    low = lower_op("matmul", types, {}, info=AVX2)[1]
    assert (low.schedule["rows"], low.schedule["cols"]) == (rows, 16)
    check_op("matmul", [a, b], info=AVX2, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", [conv_case(1, 64, 64, 14, 3), conv_case(1, 32, 48, 13, 1),
                                  conv_case(1, 16, 16, (16, 16), 1, s=2)])
def test_avx2_dense_conv_tiles_fit_the_registers(case) -> None:  # noqa: ANN001
    """Dense convs on AVX2 (the direct kernel): one 16-wide column, at most 6 pixels (12 of the 16
    registers); correct."""
    types = [TensorType.of(a) for a in case[0]]
    low = lower_op("conv2d", types, case[1], info=AVX2, schedule={"pointwise": 0})[1]
    assert low.schedule.get("vcols", 1) == 1
    assert low.schedule["tile_h"] * low.schedule["tile_w"] <= 6
    check_op("conv2d", *case, info=AVX2, schedule={"pointwise": 0}, **TOL)


@pytest.mark.parametrize("case", [conv_case(1, 32, 32, 20, 3, p=1, g=32),
                                  conv_case(1, 16, 16, 15, 7, p=3, g=16)])
def test_avx2_depthwise_tiles(case) -> None:  # noqa: ANN001
    """Depthwise convs on AVX2 take tiles of at most 8 pixels (conv.DEPTHWISE_FEW_REGISTERS); AVX-512
    keeps 14..24."""
    types = [TensorType.of(a) for a in case[0]]
    low = lower_op("conv2d", types, case[1], info=AVX2)[1]
    assert low.schedule["tile_h"] * low.schedule["tile_w"] <= 8
    wide = lower_op("conv2d", types, case[1])[1]
    assert wide.schedule["tile_h"] * wide.schedule["tile_w"] > 8
    check_op("conv2d", *case, info=AVX2, **TOL)


@pytest.mark.parametrize("hw", [40, 20, 10, 80])
def test_avx2_exact_tiles_of_fewer_pixels(hw: int) -> None:
    """On AVX2 (6 accumulators) a 1x1 conv whose output no 6-pixel tile divides (40x40, 20x20, 10x10)
    takes a 4- or 5-pixel tile that does, so it reads its blocked input in place: no repack launch."""
    tile = pick_tile(hw, hw, exact=True, cap=6)
    assert tile != (0, 0) and hw % tile[0] == 0 and hw % tile[1] == 0 and 4 <= tile[0] * tile[1] <= 6
    assert pick_tile(hw, hw, exact=True, cap=30)[0] * pick_tile(hw, hw, exact=True, cap=30)[1] >= 7


def test_avx2_grouped_conv_tiles_count_eight_lane_columns() -> None:
    """A grouped conv whose groups hold 136 channels (shufflenet) stores 8-lane columns: one AVX2 register
    each, so its tile holds up to 14 pixels (accumulators(8)), not the 6 of 16-lane columns; correct."""
    case = conv_case(1, 544, 544, 14, 1, g=4)
    types = [TensorType.of(a) for a in case[0]]
    low = lower_for("conv2d", types, case[1], info=AVX2, schedule={"pointwise": 0})[1]
    assert low.schedule["cols"] == 8 and 7 <= low.schedule["tile_h"] * low.schedule["tile_w"] <= 14
    check_op("conv2d", *case, info=AVX2, schedule={"pointwise": 0}, **TOL)


@pytest.mark.parametrize(("local_kib", "most_rows"), [(1024, 20), (256, 10)])
def test_depthwise_bands_fit_the_local_memory(local_kib: int, most_rows: int) -> None:
    """A depthwise conv's input band in local memory is cut to fit half the device's local memory: with
    Intel's CPU runtime's 256 KiB, a 16-channel 160x160 plane takes bands of 10 rows (12 padded input rows
    of 10 KiB) instead of losing the local-memory kernel; PoCL's 1 MiB keeps 20. Correct either way."""
    case = conv_case(1, 16, 16, 160, 3, p=1, g=16)
    types = [TensorType.of(a) for a in case[0]]
    info = DeviceInfo(local_mem_size=local_kib << 10)
    low = lower_for("conv2d", types, case[1], info=info)[1]
    assert low.schedule["local_repack"] == 1 and low.schedule["band_rows"] == most_rows
    assert "__local float L[" in low.kernels[0].source
    rows = int(low.kernels[0].source.split("__local float L[")[1].split("]")[0]) // (162 * 16)
    assert 4 * rows * 162 * 16 <= (local_kib << 10) // 2
    check_op("conv2d", *case, info=info, **TOL)
