"""The misc family (ir/ops/misc.py) against onnxruntime: inverse and hyperbolic trig, is_nan, bitwise ops,
bit shifts, det, grid_sample, col2im, max_unpool, roi_align; and against onnx's reference implementation
where onnxruntime has no kernel (signed and out-of-range bit shifts, linear_attention).

`test_every_op_is_covered` keeps every op misc.py registers checked here.
"""

from __future__ import annotations

import ast
import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented
from tessel.ir.ops.registry import OpError, get_op
from tessel.ir.types import TensorType

from tests.numeric.ort_util import check_op as _check_op
from tests.numeric.ort_util import rand, run_ort, run_tessel

NAN, INF = math.nan, math.inf


def check_op(*args: Any, **kwargs: Any) -> None:
    """`check_op`, skipping where onnxruntime's CPU provider has no kernel for the dtype."""
    try:
        _check_op(*args, **kwargs)
    except OrtNotImplemented as e:
        pytest.skip(f"onnxruntime has no CPU kernel: {str(e).splitlines()[0][:160]}")


def run_onnx_reference(op_type: str, inputs: list[np.ndarray | None], attrs: dict[str, Any] | None = None,
                       n_outputs: int = 1, opset: int = 28) -> list[np.ndarray]:
    """One node through onnx's reference evaluator, for ops onnxruntime lacks."""
    names, vis, feeds = [], [], {}
    for i, a in enumerate(inputs):
        if a is None:
            names.append("")
            continue
        names.append(f"in{i}")
        vis.append(helper.make_tensor_value_info(f"in{i}", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
        feeds[f"in{i}"] = a
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, **(attrs or {}))
    graph = helper.make_graph([node], "g", vis, [helper.make_empty_tensor_value_info(o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return [np.asarray(x) for x in ReferenceEvaluator(model).run(None, feeds)]


def assert_same(got: list[np.ndarray], want: list[np.ndarray], rtol: float = 1e-5,
                atol: float = 1e-6) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)


# trig ------------------------------------------------------------------------------------------------
TRIG = [  # onnx op, tessel op, values inside the domain (edges included)
    ("Tan", "tan", [-1.5, -0.5, 0.0, 0.3, 1.2, 1e-4]),
    ("Asin", "asin", [-1.0, -0.5, 0.0, 1e-4, 0.7, 1.0]),
    ("Acos", "acos", [-1.0, -0.5, 0.0, 1e-4, 0.7, 1.0]),
    ("Atan", "atan", [-50.0, -1.0, 0.0, 1e-4, 2.0, INF]),
    ("Sinh", "sinh", [-5.0, -1.0, 0.0, 1e-4, 2.0, 80.0]),
    ("Cosh", "cosh", [-5.0, -1.0, 0.0, 1e-4, 2.0, 80.0]),
    ("Asinh", "asinh", [-50.0, -1.0, 0.0, 1e-4, 2.0, 1e6]),
    ("Acosh", "acosh", [1.0, 1.0001, 1.5, 3.0, 100.0, 1e6]),
    ("Atanh", "atanh", [-0.999, -0.5, 0.0, 1e-4, 0.9, 0.99]),
]


@pytest.mark.parametrize("onnx_op, op, edges", TRIG, ids=[t[1] for t in TRIG])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_trig(onnx_op: str, op: str, edges: list[float], dtype: type) -> None:
    lo, hi = min(v for v in edges if math.isfinite(v)), max(v for v in edges if math.isfinite(v))
    x = np.concatenate([np.array(edges), np.random.default_rng(len(op)).uniform(lo, hi, 30)]).astype(dtype)
    check_op(onnx_op, op, [x.reshape(4, 9)], rtol=2e-6 if dtype == np.float32 else 1e-12, atol=0)


@pytest.mark.parametrize("op, outside", [("asin", 3.0), ("acos", -3.0), ("atanh", 3.0), ("acosh", 0.5)])
def test_trig_outside_domain_is_nan(op: str, outside: float) -> None:
    (y,) = run_tessel(op, [np.array([outside, -outside if op != "acosh" else -1.0, NAN], np.float32)])
    assert np.isnan(y).all()


# is_nan ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_is_nan(dtype: type) -> None:
    x = np.array([[0.0, NAN, INF], [-INF, -NAN, 1.5]], dtype)
    check_op("IsNaN", "is_nan", [x])


# bitwise ---------------------------------------------------------------------------------------------
INT_DTYPES = [np.int8, np.uint8, np.int32, np.int64]


def _ints(shape: tuple[int, ...], dtype: type, seed: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max, shape, endpoint=True).astype(dtype)


@pytest.mark.parametrize("onnx_op, op", [("BitwiseAnd", "bitwise_and"), ("BitwiseOr", "bitwise_or"),
                                         ("BitwiseXor", "bitwise_xor")])
@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((), (5,))])
def test_bitwise_binary(onnx_op: str, op: str, dtype: type, shapes: tuple) -> None:
    check_op(onnx_op, op, [_ints(shapes[0], dtype, 1), _ints(shapes[1], dtype, 2)])


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bitwise_not(dtype: type) -> None:
    check_op("BitwiseNot", "bitwise_not", [_ints((3, 5), dtype, 3)])


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bit_shift_uint8_against_onnxruntime(direction: str) -> None:
    x = _ints((4, 6), np.uint8, 4)
    y = np.random.default_rng(5).integers(0, 8, (4, 6)).astype(np.uint8)
    check_op("BitShift", "bit_shift", [x, y], onnx_attrs={"direction": direction},
             attrs={"direction": direction.lower()}, opset=11)
    check_op("BitShift", "bit_shift", [x, y[:1]], onnx_attrs={"direction": direction},
             attrs={"direction": direction.lower()}, opset=11)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bit_shift_edges_against_onnx_reference(direction: str, dtype: type) -> None:
    """Signed operands, overflow, negative shifts and shifts by the bit width or more (BitShift-28)."""
    bits = np.dtype(dtype).itemsize * 8
    x = np.concatenate([_ints((12,), dtype, 6), np.array([0, 1, np.iinfo(dtype).max, np.iinfo(dtype).min])])
    x = x.astype(dtype)
    shifts = np.array([0, 1, 3, bits - 1, bits, bits + 5, 255 if dtype != np.int8 else 127,
                       -1 if np.dtype(dtype).kind == "i" else 200] * 2, dtype)
    want = run_onnx_reference("BitShift", [x, shifts], {"direction": direction})
    assert_same(run_tessel("bit_shift", [x, shifts], {"direction": direction.lower()}), want)


# det -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 3, 2, 2), (1, 1)])
def test_det(shape: tuple[int, ...]) -> None:
    check_op("Det", "det", [rand(*shape)], rtol=1e-4, atol=1e-5)


def test_det_singular() -> None:
    x = np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)
    check_op("Det", "det", [x], atol=1e-6)


# grid_sample -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode, padding, align", list(itertools.product(
    ["linear", "nearest", "cubic"], ["zeros", "border", "reflection"], [0, 1])))
def test_grid_sample_2d(mode: str, padding: str, align: int) -> None:
    x = rand(2, 3, 5, 6)
    grid = rand(2, 4, 7, 2, seed=1, low=-1.6, high=1.6)  # some positions fall outside
    onnx_mode = {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode)
    check_op("GridSample", "grid_sample", [x, grid], rtol=1e-4, atol=1e-5, opset=16,
             onnx_attrs={"mode": onnx_mode, "padding_mode": padding, "align_corners": align},
             attrs={"mode": mode, "padding_mode": padding, "align_corners": bool(align)})


@pytest.mark.parametrize("mode, padding, align", [("linear", "zeros", 0), ("nearest", "border", 1),
                                                  ("linear", "reflection", 1)])
def test_grid_sample_3d(mode: str, padding: str, align: int) -> None:
    x = rand(1, 2, 4, 5, 3)
    grid = rand(1, 3, 2, 4, 3, seed=2, low=-1.4, high=1.4)
    check_op("GridSample", "grid_sample", [x, grid], rtol=1e-4, atol=1e-5, opset=20,
             onnx_attrs={"mode": mode, "padding_mode": padding, "align_corners": align},
             attrs={"mode": mode, "padding_mode": padding, "align_corners": bool(align)})


# col2im ----------------------------------------------------------------------------------------------
COL2IM_CASES = [  # image, block, strides, pads, dilations
    ([5, 5], [2, 2], [1, 1], [0, 0, 0, 0], [1, 1]),
    ([6, 7], [3, 2], [2, 1], [1, 0, 1, 2], [1, 1]),
    ([7, 6], [2, 3], [1, 2], [0, 1, 2, 0], [2, 1]),
]


@pytest.mark.parametrize("image, block, strides, pads, dil", COL2IM_CASES)
def test_col2im(image, block, strides, pads, dil) -> None:
    blocks = [(image[i] + pads[i] + pads[i + 2] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
              for i in range(2)]
    x = rand(2, 3 * math.prod(block), math.prod(blocks))
    shapes = [np.array(image, np.int64), np.array(block, np.int64)]
    check_op("Col2Im", "col2im", [x, *shapes], tessel_inputs=[x],
             onnx_attrs={"strides": strides, "pads": pads, "dilations": dil},
             attrs={"image_shape": image, "block_shape": block, "strides": strides, "pads": pads,
                    "dilations": dil})


# max_unpool ------------------------------------------------------------------------------------------
def _pool(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y, i = run_ort("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]}, n_outputs=2)
    return y, i


def test_max_unpool() -> None:
    pooled, idx = _pool(rand(2, 3, 6, 6))
    check_op("MaxUnpool", "max_unpool", [pooled, idx], onnx_attrs={"kernel_shape": [2, 2], "strides": [2, 2]},
             attrs={"shape": [2, 3, 6, 6]})


def test_max_unpool_output_shape_against_onnx_reference() -> None:
    """With output_shape, onnx's reference and node tests place the unpooled (N, C, 6, 6) tensor, indexed as
    such, at the origin of the larger result; onnxruntime instead reads the indices in the result's layout.
    tessel follows the node tests."""
    pooled, idx = _pool(rand(2, 3, 6, 6))
    want = run_onnx_reference("MaxUnpool", [pooled, idx, np.array([2, 3, 7, 8], np.int64)],
                              {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=22)
    got = run_tessel("max_unpool", [pooled, idx], {"shape": [2, 3, 7, 8], "pooled_shape": [2, 3, 6, 6]})
    assert_same(got, want)


# roi_align -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode, ctm, ratio", [("avg", "half_pixel", 0), ("avg", "output_half_pixel", 2),
                                              ("max", "half_pixel", 0), ("max", "output_half_pixel", 1)])
def test_roi_align(mode: str, ctm: str, ratio: int) -> None:
    x = rand(2, 3, 10, 9)
    rois = np.array([[0.0, 0.0, 8.0, 8.0], [1.5, 2.0, 6.2, 9.7], [-1.0, 3.0, 4.0, 4.5],
                     [7.0, 7.0, 12.0, 14.0]], np.float32)
    batch = np.array([0, 1, 1, 0], np.int64)
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, "output_height": 3, "output_width": 2,
             "sampling_ratio": ratio, "spatial_scale": 0.8}
    check_op("RoiAlign", "roi_align", [x, rois, batch], onnx_attrs=attrs, attrs=attrs, opset=16, atol=1e-5)


# linear_attention ------------------------------------------------------------------------------------
@pytest.mark.parametrize("rule, hq, hkv, per_dim_decay", [("linear", 2, 2, False), ("gated", 4, 2, True),
                                                           ("delta", 2, 2, False),
                                                           ("gated_delta", 4, 1, False)])
def test_linear_attention(rule: str, hq: int, hkv: int, per_dim_decay: bool) -> None:
    b, t, dk, dv = 2, 5, 3, 4
    q, k, v = rand(b, t, hq * dk), rand(b, t, hkv * dk, seed=1), rand(b, t, hkv * dv, seed=2)
    state = rand(b, hkv, dk, dv, seed=3)
    decay = -np.abs(rand(b, t, hkv * dk if per_dim_decay else hkv, seed=4)) if "gated" in rule else None
    beta = np.abs(rand(b, t, hkv, seed=5, high=1.0)) if "delta" in rule else None
    attrs = {"q_num_heads": hq, "kv_num_heads": hkv, "update_rule": rule, "scale": 0.7}
    want = run_onnx_reference("LinearAttention", [q, k, v, state, decay, beta], attrs, n_outputs=2, opset=27)

    def heads(x: np.ndarray, h: int) -> np.ndarray:
        return x.reshape(b, t, h, -1).transpose(0, 2, 1, 3)

    g = heads(decay, hkv) if decay is not None else np.zeros((1, 1, 1, 1), np.float32)
    bt = heads(beta, hkv) if beta is not None else np.ones((1, 1, 1, 1), np.float32)
    y, present = run_tessel("linear_attention",
                            [heads(q, hq), heads(k, hkv), heads(v, hkv), state, np.ascontiguousarray(g), bt],
                            {"update_rule": rule, "scale": 0.7})
    assert_same([y.transpose(0, 2, 1, 3).reshape(b, t, -1), present], want, rtol=1e-5, atol=1e-5)


# coverage and rejections -----------------------------------------------------------------------------
def _registered_names(path: Path) -> set[str]:
    """Op names registered in a file: register(OpDef("name", ...)) and the factory calls unary("name")."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            fn = node.func.id if isinstance(node.func, ast.Name) else ""
            if fn in ("OpDef", "unary", "_bitwise") and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
    return names


def test_every_op_is_covered() -> None:
    registered = _registered_names(Path(__file__).resolve().parents[2] / "ir" / "ops" / "misc.py")
    covered = {op for _, op, _ in TRIG} | {
        "is_nan", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bit_shift", "det",
        "grid_sample", "col2im", "max_unpool", "roi_align", "linear_attention"}
    assert registered - covered == set(), "ops without a numeric check"
    assert covered - registered == set(), "checks for ops that are not registered"


def _infer(name: str, types: list[TensorType], attrs: dict | None = None) -> list[TensorType]:
    opdef = get_op(name)
    assert opdef is not None, name
    return opdef.infer(opdef.sig(types, attrs or {}))


@pytest.mark.parametrize("name, types, attrs, message", [
    ("asin", [TensorType((3,), "i32")], {}, "float"),
    ("is_nan", [TensorType((3,), "i64")], {}, "float"),
    ("bitwise_and", [TensorType((3,), "f32"), TensorType((3,), "f32")], {}, "integer"),
    ("bitwise_or", [TensorType((3,), "i32"), TensorType((3,), "i64")], {}, "differ"),
    ("bit_shift", [TensorType((3,), "i8"), TensorType((4,), "i8")], {"direction": "left"}, "broadcast"),
    ("det", [TensorType((2, 3), "f32")], {}, "square"),
    ("grid_sample", [TensorType((1, 2, 4, 4), "f32"), TensorType((1, 3, 3, 3), "f32")], {}, "grid"),
    ("col2im", [TensorType((1, 6, 4), "f32")], {"image_shape": [3, 3], "block_shape": [2, 2]}, "divisible"),
    ("max_unpool", [TensorType((1, 1, 2, 2), "f32"), TensorType((1, 1, 2, 2), "i32")],
     {"shape": [1, 1, 4, 4]}, "i64"),
])
def test_infer_rejects(name: str, types: list[TensorType], attrs: dict, message: str) -> None:
    with pytest.raises(OpError, match=message):
        _infer(name, types, attrs)
