"""Check an op's numpy reference against onnxruntime on a one-node ONNX model.

    check_op("Conv", "conv2d", [x, w], onnx_attrs={...}, attrs={...})

builds the ONNX node with onnx.helper (every array a graph input), runs it in onnxruntime, runs tessel's
registry entry (infer, verify, reference), and compares: shapes and dtypes exactly, values within tolerance.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper
from tessel.ir.ops.registry import Cost, get_op
from tessel.ir.types import TensorType

_ORT_OPTIONS = ort.SessionOptions()
_ORT_OPTIONS.intra_op_num_threads = 1
_ORT_OPTIONS.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL


def run_ort(op_type: str, inputs: list[np.ndarray | None], onnx_attrs: dict[str, Any] | None = None,
            n_outputs: int = 1, opset: int = 18, domain: str = "") -> list[np.ndarray]:
    """Run one ONNX node; `None` inputs are left out (an empty name, as ONNX writes optional inputs)."""
    names, graph_inputs, feeds = [], [], {}
    for i, a in enumerate(inputs):
        if a is None:
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        graph_inputs.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)))
        feeds[name] = a
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, domain=domain, **(onnx_attrs or {}))
    graph = helper.make_graph([node], "g", graph_inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outs])
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), _ORT_OPTIONS, providers=["CPUExecutionProvider"])
    return [np.asarray(x) for x in sess.run(outs, feeds)]


def run_tessel(
    op_name: str, inputs: list[np.ndarray], attrs: dict[str, Any] | None = None
) -> list[np.ndarray]:
    """Infer result types, verify, run the reference, and check the arrays match the inferred types."""
    opdef = get_op(op_name)
    assert opdef is not None, f"no op '{op_name}'"
    types = [TensorType.of(a) for a in inputs]
    sig = opdef.sig(types, attrs or {})
    result_types = opdef.infer(sig)
    sig.results = result_types
    if opdef.verify is not None:
        opdef.verify(sig)
    out = opdef.reference(sig, *inputs)
    outs = list(out) if isinstance(out, list | tuple) else [out]
    assert len(outs) == len(result_types)
    for o, t in zip(outs, result_types, strict=True):
        assert TensorType.of(np.asarray(o)) == t, (
            f"reference gave {TensorType.of(np.asarray(o))}, infer said {t}"
        )
    cost = opdef.cost(sig)
    assert cost.flops >= 0 and cost.bytes_read >= 0 and cost.bytes_written >= 0
    return [np.asarray(o) for o in outs]


def check_op(op_type: str, op_name: str, inputs: list[np.ndarray | None], *,
             onnx_attrs: dict[str, Any] | None = None, attrs: dict[str, Any] | None = None,
             tessel_inputs: list[np.ndarray] | None = None, n_outputs: int = 1, opset: int = 18,
             rtol: float = 1e-5, atol: float = 1e-6, domain: str = "") -> None:
    """Compare tessel's `op_name` on `tessel_inputs` (default: the non-None `inputs`) with ONNX `op_type`."""
    expected = run_ort(op_type, inputs, onnx_attrs, n_outputs, opset, domain)
    got = run_tessel(
        op_name, tessel_inputs if tessel_inputs is not None else [a for a in inputs if a is not None], attrs
    )
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape, f"shape {g.shape} != onnxruntime's {e.shape}"
        assert g.dtype == e.dtype, f"dtype {g.dtype} != onnxruntime's {e.dtype}"
        if g.dtype.kind in "fc":
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, e)


def op_cost(name: str, types: list[TensorType], attrs: dict[str, Any]) -> Cost:
    """The registry's cost of `name` on operands of `types` (result types inferred)."""
    opdef = get_op(name)
    assert opdef is not None, f"no op '{name}'"
    sig = opdef.sig(types, attrs)
    sig.results = opdef.infer(sig)
    return opdef.cost(sig)


def rand(
    *shape: int, seed: int = 0, dtype: Any = np.float32, low: float = -2.0, high: float = 2.0
) -> np.ndarray:
    return np.random.default_rng(seed + 7 * len(shape) + sum(shape)).uniform(low, high, shape).astype(dtype)


__all__ = ["check_op", "op_cost", "run_ort", "run_tessel", "rand", "onnx"]
