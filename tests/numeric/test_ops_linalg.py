"""matmul and gemm against onnxruntime's MatMul and Gemm, plus the shapes and dtypes infer must reject."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from tessel.ir.ops.registry import OpError, get_op
from tessel.ir.types import TensorType

from tests.numeric.ort_util import check_op, rand, run_tessel

MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((1, 1), (1, 1)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 6)),  # batch dims broadcast both ways
    ((1, 3, 4), (2, 4, 5)),
    ((3, 4), (2, 4, 5)),  # rank 2 against rank 3
    ((2, 3, 4), (4, 5)),
    ((4,), (4, 5)),  # 1-D on the left: promoted to (1, 4), the 1 dropped again
    ((3, 4), (4,)),  # 1-D on the right
    ((4,), (4,)),  # dot product: a rank-0 result
    ((2, 3, 4), (4,)),
    ((4,), (2, 4, 5)),
    ((2, 0, 4), (4, 5)),  # an empty batch of rows
    ((3, 0), (0, 5)),  # an empty contraction gives zeros
]


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_SHAPES, ids=lambda s: "x".join(map(str, s)) or "s")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_float(a_shape: tuple, b_shape: tuple, dtype: type) -> None:
    a, b = rand(*a_shape, dtype=dtype), rand(*b_shape, seed=1, dtype=dtype)
    check_op("MatMul", "matmul", [a, b], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_SHAPES[:12], ids=lambda s: "x".join(map(str, s)) or "s")
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_matmul_int(a_shape: tuple, b_shape: tuple, dtype: type) -> None:
    a = rand(*a_shape, dtype=dtype, low=-50, high=50)
    b = rand(*b_shape, seed=1, dtype=dtype, low=-50, high=50)
    check_op("MatMul", "matmul", [a, b])


def test_matmul_f16() -> None:
    a, b = rand(2, 8, 16, dtype=np.float16), rand(16, 4, seed=1, dtype=np.float16)
    check_op("MatMul", "matmul", [a, b], rtol=1e-2, atol=1e-2)


def test_matmul_large_k() -> None:
    a, b = rand(17, 300), rand(300, 9, seed=1)
    check_op("MatMul", "matmul", [a, b], rtol=1e-4, atol=1e-4)


GEMM_C_SHAPES = {"absent": None, "n": lambda m, n: (n,), "1n": lambda m, n: (1, n), "m1": lambda m, n: (m, 1),
                 "mn": lambda m, n: (m, n), "scalar": lambda m, n: (), "one": lambda m, n: (1,),
                 "11": lambda m, n: (1, 1)}


@pytest.mark.parametrize("trans_a,trans_b", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("c_kind", list(GEMM_C_SHAPES))
def test_gemm(trans_a: bool, trans_b: bool, c_kind: str) -> None:
    m, k, n = 3, 5, 4
    a = rand(*((k, m) if trans_a else (m, k)))
    b = rand(*((n, k) if trans_b else (k, n)), seed=1)
    make_c = GEMM_C_SHAPES[c_kind]
    c = rand(*make_c(m, n), seed=2) if make_c is not None else None
    check_op("Gemm", "gemm", [a, b, c], onnx_attrs={"transA": int(trans_a), "transB": int(trans_b)},
             attrs={"trans_a": trans_a, "trans_b": trans_b})


@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, 2.0), (-1.25, 0.0), (0.0, 3.0)])
@pytest.mark.parametrize("with_c", [True, False])
def test_gemm_alpha_beta(alpha: float, beta: float, with_c: bool) -> None:
    a, b = rand(6, 7), rand(8, 7, seed=1)
    c = rand(6, 8, seed=2) if with_c else None
    check_op("Gemm", "gemm", [a, b, c], onnx_attrs={"alpha": alpha, "beta": beta, "transB": 1},
             attrs={"alpha": alpha, "beta": beta, "trans_b": True})


def test_gemm_f64() -> None:
    a, b = rand(4, 6, dtype=np.float64), rand(6, 3, seed=1, dtype=np.float64)
    c = rand(3, seed=2, dtype=np.float64)
    check_op("Gemm", "gemm", [a, b, c], onnx_attrs={"alpha": 0.75}, attrs={"alpha": 0.75})


# cost ---------------------------------------------------------------------------------------------------
def _sig(op: str, types: list[TensorType], attrs: dict | None = None):
    opdef = get_op(op)
    sig = opdef.sig(types, attrs or {})
    sig.results = opdef.infer(sig)
    return opdef, sig


def test_matmul_cost_counts_two_flops_per_mac() -> None:
    opdef, sig = _sig("matmul", [TensorType((2, 1, 3, 4), "f32"), TensorType((5, 4, 6), "f32")])
    cost = opdef.cost(sig)
    assert cost.flops == 2 * (2 * 5) * 3 * 4 * 6
    assert cost.bytes_read == 4 * (2 * 3 * 4 + 5 * 4 * 6)
    assert cost.bytes_written == 4 * 2 * 5 * 3 * 6


def test_gemm_cost() -> None:
    types = [TensorType((5, 3), "f32"), TensorType((5, 4), "f32"), TensorType((4,), "f32")]
    opdef, sig = _sig("gemm", types, {"trans_a": True})
    assert sig.results == [TensorType((3, 4), "f32")]
    assert opdef.cost(sig).flops == 2 * 3 * 4 * 5 + 3 * 4
    assert opdef.cost(sig).bytes_read == 4 * (15 + 20 + 4)


def test_matmul_dynamic_dims_infer() -> None:
    opdef, sig = _sig("matmul", [TensorType((None, 3, None), "f32"), TensorType((7, 5), "f32")])
    assert sig.results == [TensorType((None, 3, 5), "f32")]


# infer rejects ------------------------------------------------------------------------------------------
def _infer(op: str, types: list[TensorType], attrs: dict | None = None) -> list[TensorType]:
    opdef = get_op(op)
    return opdef.infer(opdef.sig(types, attrs or {}))


def f32(*shape: int) -> TensorType:
    return TensorType(shape, "f32")


@pytest.mark.parametrize("types,match", [
    ([f32(3, 4), f32(5, 6)], "contracting dims differ: 4 vs 5"),
    ([f32(4), f32(3)], "contracting dims differ: 4 vs 3"),
    ([f32(3, 4), f32(5)], "contracting dims differ: 4 vs 5"),
    ([f32(2, 3, 4), f32(3, 4, 5)], "do not broadcast"),
    ([f32(), f32(3, 4)], "rank >= 1"),
    ([TensorType((3, 4), "f16"), f32(4, 5)], "element types differ: f16 vs f32"),  # f32 x f16: half weights
    ([TensorType((3, 4), "i32"), TensorType((4, 5), "i64")], "element types differ: i32 vs i64"),
    ([TensorType((3, 4), "i1"), TensorType((4, 5), "i1")], "numeric"),
])
def test_matmul_rejects(types: list[TensorType], match: str) -> None:
    with pytest.raises(OpError, match=match):
        _infer("matmul", types)


@pytest.mark.parametrize("types,attrs,match", [
    ([f32(3, 4), f32(5, 6)], {}, "contracting dims differ: 4 vs 5"),
    ([f32(3, 4), f32(3, 5)], {"trans_a": True, "trans_b": True}, "contracting dims differ: 3 vs 5"),
    ([f32(2, 3, 4), f32(4, 5)], {}, "rank 2"),
    ([f32(4), f32(4, 5)], {}, "rank 2"),
    ([f32(3, 4), TensorType((4, 5), "f64")], {}, "element types differ"),
    ([f32(3, 4), f32(4, 5), TensorType((5,), "f64")], {}, "c element type differs"),
    ([f32(3, 4), f32(4, 5), f32(6)], {}, r"c of shape \[6\] does not broadcast to \[3,5\]"),
    ([f32(3, 4), f32(4, 5), f32(5, 3)], {}, "does not broadcast"),
    ([f32(3, 4), f32(4, 5), f32(3, 1, 1)], {}, "c must have rank <= 2"),
    ([f32(3, 4), f32(4, 5), f32(4, 5)], {"trans_a": True, "trans_b": False}, "contracting"),
])
def test_gemm_rejects(types: list[TensorType], attrs: dict, match: str) -> None:
    with pytest.raises(OpError, match=match):
        _infer("gemm", types, attrs)


def test_matmul_bf16_runs_through_f32() -> None:
    bf16 = TensorType((), "bf16").np_dtype
    a, b = rand(3, 8).astype(bf16), rand(8, 2, seed=1).astype(bf16)
    (got,) = run_tessel("matmul", [a, b])
    assert got.dtype == bf16
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)


def test_gemm_int_scales_like_the_onnx_reference() -> None:
    a, b, c = (np.arange(6, dtype=np.int32).reshape(2, 3), np.ones((3, 2), np.int32),
               np.array([1, 2], np.int32))
    (got,) = run_tessel("gemm", [a, b, c], {"alpha": 0.5, "beta": 3.0})
    want = ((a @ b) * 0.5 + c * 3.0).astype(np.int32)  # float64, truncated once
    np.testing.assert_array_equal(got, want)
