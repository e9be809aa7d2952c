"""OpenCL templates of the reduction and normalization ops against their numpy references.

Each case builds its own kernel (a PoCL build, ~0.5 s cold), so the cases are picked to cover each kernel
shape once: row kernels (innermost dim reduced), column kernels (innermost dim kept, with a lane tail),
split reductions (few outputs, long reductions), empty and size-1 dims, integer wrap-around and NaN.
"""

from __future__ import annotations

import numpy as np
import pytest
from tessel.ir.types import TensorType
from tessel.targets.opencl import device as dev
from tessel.targets.opencl.kernels.base import NotLowerable
from tessel.targets.opencl.kernels.norm import Hook, layer_norm_kernels, softmax_kernels
from tessel.targets.opencl.kernels.testing import build, check_op, lower_op

rng = np.random.default_rng(7)


def randn(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def ints(*shape: int, dtype: type = np.int32, lo: int = -100, hi: int = 100) -> np.ndarray:
    return rng.integers(lo, hi, shape).astype(dtype)


def with_nans(x: np.ndarray, every: int) -> np.ndarray:
    x = x.copy()
    x.reshape(-1)[::every] = np.nan
    return x


# reduce_* -------------------------------------------------------------------------------------------------
FLOAT_CASES = [
    ("reduce_sum", randn(2, 3, 4, 5), [1, 3], True),  # non-contiguous axes, innermost reduced
    ("reduce_sum", randn(3, 4, 37), [0, -2], False),  # innermost kept: column kernel with a lane tail
    ("reduce_mean", randn(2, 64, 7, 7), [2, 3], True),  # global average pooling
    ("reduce_mean", randn(3, 5, 2), [], False),  # every axis
    ("reduce_max", with_nans(randn(4, 6, 33), 29), [1], True),  # NaN propagates, column kernel
    ("reduce_min", with_nans(randn(5, 40), 37), [-1], False),  # NaN propagates, row kernel
    ("reduce_prod", (1 + 0.1 * randn(6, 7)), [0], True),
    ("reduce_l1", randn(2, 3, 1, 4, 18), [1, 4], False),  # rank 5 with a size-1 dim
    ("reduce_l2", randn(9, 21, dtype=np.float64), [0], True),
    ("reduce_sum_square", randn(3, 2, 5, 17), [2, 3], True),
    ("reduce_log_sum_exp", 30 * randn(4, 50), [-1], True),
    ("reduce_log_sum_exp", np.array([[-np.inf, 1, np.inf], [-np.inf, -np.inf, 2], [np.nan, 0, 0]], np.float32)
     .T.copy(), [0], False),  # infinities, NaN; column kernel
    ("reduce_sum", randn(1, 5, 1), [0, 2], True),  # only size-1 axes reduced
    ("reduce_sum", np.array(3.5, np.float32), [], True),  # rank 0
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("op,x,axes,keepdims", FLOAT_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(FLOAT_CASES)])
def test_reduce_float(op: str, x: np.ndarray, axes: list[int], keepdims: bool) -> None:
    check_op(op, [x], {"axes": axes, "keepdims": keepdims})


INT_CASES = [
    ("reduce_sum", ints(3, 1000, lo=2**28, hi=2**30), [1], True),  # wraps like the reference
    ("reduce_sum", ints(50, 24, dtype=np.int64), [0], False),
    ("reduce_max", ints(7, 33, dtype=np.int8, lo=-128, hi=127), [-1], True),
    ("reduce_min", ints(7, 33, 3), [1], True),
    ("reduce_prod", ints(4, 40, lo=-9, hi=9), [1], False),  # wraps
    ("reduce_l1", np.array([[-128, 5, -3], [127, -128, 0]], np.int8), [1], True),
    ("reduce_sum_square", ints(5, 20, dtype=np.int16), [0], True),
    ("reduce_sum", ints(4, 19, dtype=np.uint8, lo=0, hi=255), [1], True),
]


@pytest.mark.parametrize("op,x,axes,keepdims", INT_CASES, ids=[f"{c[0]}-{c[1].dtype}" for c in INT_CASES])
def test_reduce_int(op: str, x: np.ndarray, axes: list[int], keepdims: bool) -> None:
    check_op(op, [x], {"axes": axes, "keepdims": keepdims})


def test_reduce_large_sum_accuracy() -> None:
    """A 1M-element f32 sum (split over work-items, blocked partial sums) stays within rtol 1e-5 of numpy's
    pairwise sum; positive values, so no cancellation hides the error."""
    check_op("reduce_sum", [rng.random(1 << 20, dtype=np.float32)], {"axes": [], "keepdims": False})


def test_reduce_large_column_mean() -> None:
    """Few outputs over a long non-contiguous reduction: the column kernel split over the reduced dim."""
    check_op("reduce_mean", [rng.random((65536, 16), dtype=np.float32)], {"axes": [0]})


def test_reduce_large_max_nan() -> None:
    x = randn(1 << 18)
    x[200_000] = np.nan
    check_op("reduce_max", [x], {"axes": [0]})


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("op,shape,axes", [("reduce_sum", (3, 0), [1]), ("reduce_mean", (3, 0), [1]),
                                           ("reduce_max", (0, 4), [0]), ("reduce_log_sum_exp", (2, 0), [-1]),
                                           ("reduce_sum", (0, 4), [1])])
def test_reduce_empty(op: str, shape: tuple[int, ...], axes: list[int]) -> None:
    check_op(op, [np.zeros(shape, np.float32)], {"axes": axes})


def test_reduce_source_is_deterministic_and_split() -> None:
    t = [TensorType((1 << 20,), "f32")]
    _, a = lower_op("reduce_sum", t, {"axes": []}, info=dev.DeviceInfo.generic())
    _, b = lower_op("reduce_sum", t, {"axes": []}, info=dev.DeviceInfo.generic())
    assert [k.source for k in a.kernels] == [k.source for k in b.kernels]
    assert len(a.kernels) == 2 and a.scratch and a.schedule["split"] > 1
    assert a.kernels[0].source.startswith("// reduce_sum over axes [0] of tensor<1048576xf32>")


def test_reduce_refuses_f16() -> None:
    with pytest.raises(NotLowerable):
        lower_op("reduce_sum", [TensorType((4, 4), "f16")], {"axes": [1]})


# argmax / argmin ------------------------------------------------------------------------------------------
TIES = np.array([[[1, 3, 3, 0], [2, 2, 1, 1]], [[np.nan, 5, np.nan, 5], [-1, -1, -1, -1]]], np.float32)


@pytest.mark.parametrize("op,x,axis,last,keepdims", [
    ("argmax", TIES, -1, False, True), ("argmax", TIES, 2, True, False),
    ("argmin", TIES, 1, False, False), ("argmin", ints(3, 17, 5, lo=-3, hi=3), 1, True, True),
])
def test_arg(op: str, x: np.ndarray, axis: int, last: bool, keepdims: bool) -> None:
    check_op(op, [x], {"axis": axis, "keepdims": keepdims, "select_last_index": last})


# cumsum / cumprod -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("op,x,axis,exclusive,reverse", [
    ("cumsum", randn(3, 50, 4), 1, False, False), ("cumsum", randn(5, 33), -1, True, True),
    ("cumsum", ints(4, 30, lo=2**29, hi=2**30), 1, False, True),
    ("cumprod", 1 + 0.1 * randn(6, 9), 0, True, False),
    ("cumprod", ints(2, 40, dtype=np.int64, lo=-5, hi=5), -1, False, False),
])
def test_scan(op: str, x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> None:
    check_op(op, [x], {"axis": axis, "exclusive": exclusive, "reverse": reverse})


# top_k ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("x,k,axis,largest", [
    (np.round(randn(4, 40)), 5, -1, True),  # ties: lower index first
    (with_nans(np.round(randn(3, 30, 2)), 7), 4, 1, False), (ints(6, 25), 6, 1, True),
])
def test_top_k(x: np.ndarray, k: int, axis: int, largest: bool) -> None:
    check_op("top_k", [x], {"k": k, "axis": axis, "largest": largest})


def test_top_k_refuses_large_k() -> None:
    with pytest.raises(NotLowerable):
        lower_op("top_k", [TensorType((1000,), "f32")], {"k": 500})


# softmax / log_softmax ------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("op,x,axis", [
    ("softmax", 5 * randn(4, 1000), -1), ("softmax", randn(2, 5, 7), 1), ("softmax", randn(3, 2, 16), 0),
    ("log_softmax", 5 * randn(6, 77), -1), ("log_softmax", randn(4, 3, 19), -2),
    ("softmax", randn(3, 10, dtype=np.float64), 1),
    ("softmax", np.array([[-np.inf, 0, 1], [np.nan, 1, 2], [-np.inf] * 3], np.float32), -1),
])
def test_softmax(op: str, x: np.ndarray, axis: int) -> None:
    check_op(op, [x], {"axis": axis})


# layer_norm / instance_norm / batch_norm / lrn ------------------------------------------------------------
@pytest.mark.parametrize("shape,axis,bias,pshape", [
    ((2, 3, 768), -1, True, (768,)), ((3, 4, 5), 1, False, (4, 5)), ((6, 130), 1, True, (1,)),
])
def test_layer_norm(shape: tuple[int, ...], axis: int, bias: bool, pshape: tuple[int, ...]) -> None:
    ops = [randn(*shape), randn(*pshape)] + ([randn(*pshape)] if bias else [])
    check_op("layer_norm", ops, {"axis": axis, "epsilon": 1e-5}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pshape,bshape", [((4,), None), ((3, 1), (4,)), ((1, 4), (3, 4)), ((1,), (3, 1))])
def test_layer_norm_scale_broadcast_over_part_of_the_line(pshape: tuple[int, ...],
                                                          bshape: tuple[int, ...] | None) -> None:
    """A scale or bias that broadcasts over some normalized dims is read at its broadcast offsets (found
    by tests/fuzz: recognize-layernorm over two axes with a [C] gamma had no kernel)."""
    ops = [randn(2, 3, 4), randn(*pshape)] + ([randn(*bshape)] if bshape else [])
    check_op("layer_norm", ops, {"axis": 1, "epsilon": 1e-5}, rtol=1e-4, atol=1e-5)


def test_instance_norm() -> None:
    ops = [randn(2, 3, 5, 5), randn(3), randn(3)]
    check_op("instance_norm", ops, {"epsilon": 1e-3}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape,dtype", [((2, 16, 7, 7), np.float32), ((4, 8), np.float32),
                                         ((1, 3, 300), np.float64)])
def test_batch_norm(shape: tuple[int, ...], dtype: type) -> None:
    c = shape[1]
    ops = [randn(*shape, dtype=dtype), randn(c, dtype=dtype), randn(c, dtype=dtype), randn(c, dtype=dtype),
           rng.random(c).astype(dtype) + 0.5]
    check_op("batch_norm", ops, {"epsilon": 1e-5})


@pytest.mark.parametrize("size,shape", [(3, (2, 10, 4, 5)), (4, (1, 7, 33))])
def test_lrn(size: int, shape: tuple[int, ...]) -> None:
    check_op("lrn", [randn(*shape)], {"size": size, "alpha": 1e-2, "beta": 0.75, "bias": 2.0})


# fusion hooks ---------------------------------------------------------------------------------------------
def run_lowered(lowered, inputs: dict[str, np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray:
    cl = dev.cl()
    device = dev.pick_device()
    context, info = dev.context_for(device), dev.device_info(device)
    queue = cl.CommandQueue(context)
    mf = cl.mem_flags
    bufs = {n: cl.Buffer(context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a) for n, a in inputs.items()}
    out = np.empty(out_shape, np.float32)
    bufs["out0"] = cl.Buffer(context, mf.READ_WRITE, out.nbytes)
    (kern,) = build(lowered, context, info)
    k = lowered.kernels[0]
    kern(queue, k.global_size, k.local_size, *[bufs[n] for n in k.args])
    cl.enqueue_copy(queue, out, bufs["out0"])
    return out


def test_softmax_hooks() -> None:
    """softmax(0.5 * x) + residual, as a fusion pass would splice it."""
    x, r = randn(3, 40), randn(3, 40)
    ctx, _ = lower_op("softmax", [TensorType.of(x)], {"axis": -1})
    low = softmax_kernels(ctx, prologue=Hook("{x} * 0.5f"), epilogue=Hook("{x} + {ld.in1}", ("in1",)))
    assert low.kernels[0].args == ("in0", "in1", "out0")
    e = np.exp(0.5 * x - (0.5 * x).max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True) + r
    np.testing.assert_allclose(run_lowered(low, {"in0": x, "in1": r}, x.shape), want, rtol=1e-5, atol=1e-6)


def test_layer_norm_epilogue() -> None:
    x, s = randn(5, 24), randn(24)
    ctx, _ = lower_op("layer_norm", [TensorType.of(x), TensorType.of(s)], {"axis": -1})
    low = layer_norm_kernels(ctx, epilogue=Hook("fmax({x}, 0.0f)"))
    m = x.mean(-1, keepdims=True)
    want = np.maximum((x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5) * s, 0)
    got = run_lowered(low, {"in0": x, "in1": s}, x.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
