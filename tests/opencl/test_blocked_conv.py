"""The conv2d and pool templates with blocked (NCHWc) operands, `lower_conv2d(ctx, in_block=, out_block=)`
and `lower_pool(...)`, against numpy: the input is packed with `pack_array` before the launch when
in_block > 0, the output unpacked (and its channel padding checked to be zero) when out_block > 0. An
epilogue that adds its flat index checks the index the template passes is the one in out0's layout."""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np
import pytest
from tessel.ir.ops.layout import pack_array, unpack_array
from tessel.ir.ops.registry import get_op
from tessel.ir.types import TensorType
from tessel.targets.opencl import device as dev
from tessel.targets.opencl.kernels.base import Ctx, DeviceInfo, Lowered, NotLowerable
from tessel.targets.opencl.kernels.conv import lower_conv2d
from tessel.targets.opencl.kernels.pool import lower_pool
from tessel.targets.opencl.kernels.testing import build

RNG = np.random.default_rng(11)
SCALE = 1e-4  # the index epilogue adds SCALE * flat index
GUARD = 1 << 16  # floats after out0 that no kernel may write


def arr(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def index_epilogue(v: str, i: str, lanes: int) -> str:
    if lanes == 1:
        return f"({v} + (float)({i}) * {SCALE}f)"
    iota = ", ".join(str(j) for j in range(lanes))
    return f"({v} + convert_float{lanes}((int{lanes})({i}) + (int{lanes})({iota})) * {SCALE}f)"


def make_ctx(
    op_name: str, inputs: list[np.ndarray], attrs: dict[str, Any], schedule: dict[str, Any] | None = None,
    constant: tuple[bool, ...] = (),
) -> Ctx:
    opdef = get_op(op_name)
    assert opdef is not None
    sig = opdef.sig([TensorType.of(a) for a in inputs], attrs)
    sig.results = opdef.infer(sig)
    info = DeviceInfo.generic()  # the AVX-512 tiles these tests pin (test_gemm_conv pins AVX2's)
    return Ctx(op_name, sig, info, constant or (False,) * len(inputs), dict(schedule or {}))


def run_lowered(
    ctx: Ctx, low: Lowered, inputs: list[np.ndarray], in_block: int, out_shape: tuple[int, ...]
) -> np.ndarray:
    """Run the kernels of `low` with in0 packed to NCHWc `in_block` (when > 0); out0 of `out_shape`,
    filled with NaN first so any element the kernels leave unwritten shows, and followed in its buffer by
    GUARD NaNs that must stay so (a write past the end shows)."""
    cl = dev.cl()
    device = dev.pick_device()
    context = dev.context_for(device)
    queue = cl.CommandQueue(context)
    arrays = [np.ascontiguousarray(a) for a in inputs]
    if in_block:
        arrays[0] = pack_array(arrays[0], [1], [in_block], [])
    for i, spec in low.pack.items():
        arrays[i] = spec.apply(arrays[i])
    mf = cl.mem_flags
    ins = [cl.Buffer(context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a) for a in arrays]
    size = int(np.prod(out_shape))
    out = np.full(size + GUARD, np.nan, np.float32)
    out_buf = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=out)
    tmps = [cl.Buffer(context, mf.READ_WRITE, max(n, 4)) for n in low.scratch]
    table = {f"in{i}": b for i, b in enumerate(ins)} | {"out0": out_buf}
    table |= {f"tmp{i}": b for i, b in enumerate(tmps)}
    kernels = build(low, context, ctx.device)
    for kobj, k in zip(kernels, low.kernels, strict=True):
        names = k.args or tuple(f"in{i}" for i in range(len(ins))) + ("out0",)
        kobj.set_args(*[table[n] for n in names])
        cl.enqueue_nd_range_kernel(queue, kobj, k.global_size, k.local_size)
    cl.enqueue_copy(queue, out, out_buf)
    queue.finish()
    assert np.isnan(out[size:]).all(), "a kernel wrote past the end of out0"
    return out[:size].reshape(out_shape)


def check_blocked(
    op_name: str,
    inputs: list[np.ndarray],
    attrs: dict[str, Any],
    in_block: int,
    out_block: int,
    *,
    epilogue: bool = False,
    schedule: dict[str, Any] | None = None,
    lower: Any = None,
    constant: tuple[bool, ...] = (),
    atol: float = 1e-4,
) -> Lowered:
    ctx = make_ctx(op_name, inputs, attrs, schedule, constant)
    opdef = get_op(op_name)
    assert opdef is not None
    want = np.asarray(opdef.reference(ctx.sig, *inputs), np.float32)
    low = (lower or lower_conv2d)(
        ctx, index_epilogue if epilogue else None, in_block=in_block, out_block=out_block
    )
    shape = want.shape if not out_block else pack_array(want, [1], [out_block], []).shape
    got = run_lowered(ctx, low, inputs, in_block, shape)
    if epilogue:  # the epilogue adds the flat index of each element in out0's layout
        flat = np.arange(got.size, dtype=np.float64).reshape(got.shape)
        if out_block:
            want = pack_array(want, [1], [out_block], []) + flat * SCALE
            want = unpack_array(want, list(ctx.results[0].dims), [1], [out_block], [])
        else:
            want = want + flat * SCALE
    if out_block:
        c = ctx.results[0].dims[1]
        tail = got[:, -1, ..., c % out_block :] if c % out_block else got[:, :0]
        assert (tail == 0).all(), "the channel padding of a blocked output must be zeros"
        got = unpack_array(got, list(ctx.results[0].dims), [1], [out_block], [])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol, err_msg=f"{op_name} {attrs}")
    return low


def conv_case(n, c, o, hw, k, *, s=1, p=0, g=1, bias=True):
    h, w = hw if isinstance(hw, tuple) else (hw, hw)
    attrs = {"strides": [s, s], "pads": [p] * 4, "dilations": [1, 1], "groups": g}
    return [arr(n, c, h, w), arr(o, c // g, k, k)] + ([arr(o)] if bias else []), attrs


BLOCKS = list(itertools.product((0, 16), (0, 16)))[1:]  # (in_block, out_block), at least one blocked


@pytest.mark.parametrize("blocks", BLOCKS, ids=lambda b: f"in{b[0]}-out{b[1]}")
@pytest.mark.parametrize(
    "name, case",
    [
        ("1x1", conv_case(1, 32, 48, 8, 1)),  # exact tiles: a blocked input is read in place
        ("3x3-pad1", conv_case(1, 32, 32, 9, 3, p=1)),
        ("3x3-stride2", conv_case(1, 16, 32, 11, 3, s=2, p=1, bias=False)),
        ("1x1-stride2", conv_case(2, 16, 16, (10, 8), 1, s=2)),  # batch 2, downsample
        ("depthwise", conv_case(1, 32, 32, 10, 3, p=1, g=32)),
        ("depthwise-tail", conv_case(1, 24, 24, 7, 3, p=1, g=24)),  # a partial block: its padding zeroed
        ("grouped", conv_case(1, 32, 64, 7, 3, p=1, g=2)),
        ("stem", conv_case(1, 3, 32, 12, 7, s=2, p=3)),  # RGB input: blocked it is padded 3 -> 16
        ("stem-unpadded", conv_case(1, 3, 32, 15, 3, s=2)),  # NCHW input read in place
        ("channel-tails", conv_case(1, 20, 24, 6, 3, p=1)),  # C and O not multiples of 16
    ],
)
def test_conv2d_blocked(name, case, blocks) -> None:
    check_blocked("conv2d", *case, *blocks, epilogue=name in ("1x1", "3x3-pad1", "channel-tails"))


def test_conv2d_blocked_input_read_in_place() -> None:
    """1x1 and pad-0 convs whose tiles divide the output read the blocked input with no repack."""
    for case in (
        conv_case(1, 32, 16, 8, 1),
        conv_case(1, 16, 16, (16, 16), 1, s=2),
        conv_case(1, 32, 32, 10, 3, g=32),
        conv_case(1, 16, 16, (14, 14), 1, s=2),  # 7x7 output: 1x7 tiles
        conv_case(1, 32, 48, 13, 1),  # two columns of 13 pixels
    ):
        low = check_blocked("conv2d", *case, 16, 16)
        assert low.schedule["in_place"] and low.scratch == [] and len(low.kernels) == 1
        assert "tmp0" not in low.kernels[0].args
    for case in (
        conv_case(1, 16, 16, 8, 3, p=1),  # pads: repacked
        conv_case(1, 16, 16, (10, 10), 1, s=2),
    ):  # 5x5 output: no tile of 7..24 pixels divides it, 1x16 tiles over-read
        low = check_blocked("conv2d", *case, 16, 16)
        assert not low.schedule["in_place"] and re.search(r"repack blocked x", low.kernels[0].source)


@pytest.mark.parametrize("case", [
    conv_case(1, 32, 32, 10, 3, p=1, g=32),
    conv_case(2, 24, 24, 9, 5, s=2, p=2, g=24),  # batch 2, 5x5 stride 2, a partial block
    conv_case(1, 16, 16, (7, 12), 3, p=1, g=16, bias=False),
], ids=["3x3", "5x5-stride2-batch2", "rectangular"])
def test_depthwise_blocked_input_with_pads_fills_local_memory(case) -> None:
    """A padded depthwise conv reading NCHW16c copies its work-group's block into local memory itself:
    one launch, no repack kernel, no scratch."""
    for out_block in (0, 16):
        low = check_blocked("conv2d", *case, 16, out_block, epilogue=True)
        assert low.schedule.get("local_repack") == 1 and low.scratch == [], low.schedule
        assert len(low.kernels) == 1  # the padding lanes of a partial block zeroed by the stores
        assert "repack blocked x" not in low.kernels[0].source and "__local float L[" in low.kernels[0].source


def test_dense_conv_partial_block_zeroes_its_padding_in_the_stores() -> None:
    """A 16-wide column storing a partial output block (24 channels) writes the padding lanes' zeros
    itself: whole columns one vector store a pixel, the last one lane by lane; no zeroing kernel."""
    ins, attrs = conv_case(1, 16, 24, 9, 3, p=1)
    low = check_blocked("conv2d", ins, attrs, 16, 16, epilogue=True, schedule={"cols": 16, "vcols": 1})
    assert len(low.kernels) == 2 and "zero channels" not in low.kernels[-1].source  # repack + conv
    ins, attrs = conv_case(1, 16, 40, 8, 1)  # two whole columns and a partial one
    low = check_blocked("conv2d", ins, attrs, 16, 16, epilogue=True, schedule={"cols": 16, "vcols": 1})
    assert not any("zero channels" in k.source for k in low.kernels)
    # several columns a work-item, each a block: the partial one stores its zeros, none computes past
    # the blocks (an RGB stem of 24 channels: two 16-wide columns, not three, and no zeroing kernel)
    for ins, attrs in (conv_case(1, 3, 24, 12, 3, s=2, p=1), conv_case(1, 16, 40, 8, 1)):
        for schedule in (None, {"vcols": 3}):
            low = check_blocked("conv2d", ins, attrs, 0, 16, epilogue=True, schedule=schedule)
            assert low.schedule["cols"] == 16 and not any("zero channels" in k.source for k in low.kernels)
    low = check_blocked("conv2d", *conv_case(1, 3, 24, 12, 3, s=2, p=1), 0, 16)
    assert low.schedule["vcols"] == 2, low.schedule


def test_conv2d_blocked_schedule_and_refusals() -> None:
    ins, attrs = conv_case(1, 32, 16, 10, 3, p=1)
    check_blocked(
        "conv2d", ins, attrs, 16, 16, schedule={"tile_h": 2, "tile_w": 5, "cols": 8, "cin_block": 8}
    )
    # two 16-wide columns a work-item: 48 channels = 1.5 blocks of 32, the last block's 2nd column unused
    ins, attrs = conv_case(1, 32, 48, 7, 1)
    for blocks in BLOCKS:
        low = check_blocked(
            "conv2d", ins, attrs, *blocks, epilogue=True, schedule={"tile_h": 7, "tile_w": 1, "vcols": 2}
        )
        assert low.schedule["vcols"] == 2 and low.pack[1].inner_tiles == (16, 32)
    # columns along global dimension 0: 3 columns in work-groups of 4 (and 2), the extra ones return
    for local in (4, 2):
        check_blocked("conv2d", ins, attrs, 16, 16, schedule={"cols_first": True, "local": local, "vcols": 1})
    with pytest.raises(NotLowerable, match="channel block 3"):
        lower_conv2d(make_ctx("conv2d", ins, attrs), in_block=3)


def pool_attrs(k, s=1, p=0, **kw):
    return {"kernel": [k, k], "strides": [s, s], "pads": [p] * 4, **kw}


@pytest.mark.parametrize("blocks", BLOCKS, ids=lambda b: f"in{b[0]}-out{b[1]}")
@pytest.mark.parametrize(
    "op, shape, attrs",
    [
        ("max_pool2d", (1, 32, 11, 11), pool_attrs(3, 2, 1)),  # resnet's stem pool
        ("max_pool2d", (2, 16, 8, 8), pool_attrs(2, 2, dilations=[1, 1])),
        ("avg_pool2d", (1, 32, 9, 9), pool_attrs(3, 1, 1)),
        ("avg_pool2d", (1, 20, 7, 7), pool_attrs(3, 2, 1, count_include_pad=True)),  # channel tail
        ("global_avg_pool", (1, 48, 7, 7), {}),
        ("global_avg_pool", (2, 20, 5, 3), {}),
        ("global_max_pool", (1, 32, 6, 6), {}),
    ],
)
def test_pool_blocked(op, shape, attrs, blocks) -> None:
    if blocks[0] == 0 and blocks[1] and not op.startswith("global"):
        # NCHW in, NCHWc out: pooled in NCHW and packed after (the region falls back to its ops)
        with pytest.raises(NotLowerable, match="pooled in NCHW, packed after"):
            lower_pool(make_ctx(op, [arr(*shape)], attrs), in_block=0, out_block=blocks[1])
        return
    check_blocked(op, [arr(*shape)], attrs, *blocks, epilogue=True, lower=lower_pool)


def test_pool_epilogue_nchw() -> None:
    """The NCHW pool kernels take an epilogue too (vector and scalar stores)."""
    check_blocked(
        "max_pool2d", [arr(1, 4, 20, 37)], pool_attrs(3, 2, 1), 0, 0, epilogue=True, lower=lower_pool
    )
    check_blocked("avg_pool2d", [arr(1, 3, 9, 40)], pool_attrs(2, 1), 0, 0, epilogue=True, lower=lower_pool)
    check_blocked("global_avg_pool", [arr(2, 3, 7, 7)], {}, 0, 0, epilogue=True, lower=lower_pool)


def test_pool_nan_propagates_blocked() -> None:
    x = arr(1, 16, 6, 6)
    x[0, 3, 2, 2] = np.nan
    check_blocked("max_pool2d", [x], pool_attrs(2, 2), 16, 16, lower=lower_pool)


@pytest.mark.parametrize("op, attrs", [
    ("max_pool2d", {"kernel": [3, 3], "strides": [2, 2], "pads": [0, 1, 1, 0], "dilations": [2, 1]}),
    ("avg_pool2d", {"kernel": [3, 2], "strides": [1, 2], "pads": [1, 0, 1, 1], "count_include_pad": True}),
])
def test_pool_interior_taps_and_border_loop(op, attrs) -> None:
    """A blocked pool unrolls the taps of windows inside the image and keeps the checked loop for the
    border: asymmetric pads, dilation, a NaN inside and one on the border, NCHWc and NCHW outputs."""
    x = arr(1, 16, 11, 12)
    x[0, 5, 5, 6] = np.nan
    x[0, 9, 0, 11] = np.nan
    for out_block in (16, 0):
        check_blocked(op, [x], attrs, 16, out_block, lower=lower_pool)
    assert "if (hs >= 0" in lower_pool(make_ctx(op, [x], attrs), in_block=16).kernels[0].source
