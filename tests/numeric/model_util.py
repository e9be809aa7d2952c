"""Run a small ONNX model through tessel (import, then the numpy target) and through onnxruntime.

    model = make_model([node], {"x": x}, ["y"], initializers={"axes": axes}, opset=22)
    check_model(model, {"x": x})

Unlike ort_util.check_op, which checks one registry op, this checks converters: whole ONNX nodes (with
subgraphs, several outputs, constant inputs given as initializers) against onnxruntime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
from tessel.frontends.onnx.backend import TesselBackend

_ORT_OPTIONS = ort.SessionOptions()
_ORT_OPTIONS.intra_op_num_threads = 1


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Mapping[str, np.ndarray],
               outputs: Sequence[str | onnx.ValueInfoProto],
               initializers: Mapping[str, np.ndarray] | None = None, opset: int = 22) -> onnx.ModelProto:
    """A model of `nodes` whose graph inputs have the arrays' types and shapes; the types of outputs given
    by name are inferred (the checker wants a shape: give a ValueInfoProto where inference finds none)."""
    graph = helper.make_graph(
        list(nodes), "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
         for n, a in inputs.items()],
        [helper.make_empty_tensor_value_info(o) if isinstance(o, str) else o for o in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in (initializers or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


def run_onnxruntime(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), _ORT_OPTIONS, providers=["CPUExecutionProvider"])
    return [np.asarray(x) for x in sess.run(None, dict(feeds))]


def run_tessel(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    rep = TesselBackend.prepare(model)
    return [np.asarray(x) for x in rep.run(dict(feeds))]


def assert_close(got: Sequence[np.ndarray], expected: Sequence[np.ndarray], rtol: float = 1e-5,
                 atol: float = 1e-6) -> None:
    assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g.shape == e.shape, f"output {i}: shape {g.shape} != {e.shape}"
        assert g.dtype == e.dtype, f"output {i}: dtype {g.dtype} != {e.dtype}"
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"output {i}")


def check_model(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], rtol: float = 1e-5,
                atol: float = 1e-6) -> list[np.ndarray]:
    """tessel's outputs match onnxruntime's; returns tessel's."""
    got = run_tessel(model, feeds)
    assert_close(got, run_onnxruntime(model, feeds), rtol, atol)
    return got
