"""onnxruntime's com.microsoft fused float ops (what its graph optimizer writes into a saved model) against
onnxruntime's own kernels: FusedMatMul (every transpose flag), SkipLayerNormalization, FastGelu, BiasGelu
and Gelu."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from .model_util import run_onnxruntime, run_tessel

MS = "com.microsoft"
rng = np.random.default_rng(0)


def _model(nodes: list, inputs: dict[str, np.ndarray], outputs: dict[str, list | None]) -> object:
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape)) for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n, shape in outputs.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def _check(nodes: list, inputs: dict[str, np.ndarray], outputs: list[str], **tol: float) -> None:
    """tessel's results as onnxruntime's (the output shapes onnx.checker wants are onnxruntime's)."""
    want = run_onnxruntime(_model(nodes, inputs, dict.fromkeys(outputs)), inputs)
    model = _model(nodes, inputs, {n: list(w.shape) for n, w in zip(outputs, want, strict=True)})
    got = run_tessel(model, inputs)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, **({"rtol": 1e-5, "atol": 1e-5} | tol))


@pytest.mark.parametrize("rank", [2, 3, 4])
@pytest.mark.parametrize("flags", [(0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1),
                                   (1, 1, 1, 1), (1, 0, 1, 0)])
def test_fused_matmul(rank: int, flags: tuple[int, int, int, int]) -> None:
    trans_a, trans_b, batch_a, batch_b = flags
    if rank == 2 and (batch_a or batch_b):  # onnxruntime refuses these at run time; tessel at import
        from tessel.ir.diagnostics import DiagnosticError

        node = helper.make_node("FusedMatMul", ["A", "B"], ["Y"], domain=MS, transBatchA=batch_a,
                                transBatchB=batch_b)
        feeds = {"A": np.ones((4, 5), np.float32), "B": np.ones((5, 6), np.float32)}
        with pytest.raises(DiagnosticError, match="one rank of at least 3"):
            run_tessel(_model([node], feeds, {"Y": [4, 6]}), feeds)
        return
    batch, m, k, n = (2, 3)[:rank - 2], 4, 5, 6

    def layout(rows: int, cols: int, trans: int, tbatch: int) -> tuple[int, ...]:
        """The stored shape of an operand the matmul sees as [batch.., rows, cols]."""
        if tbatch:  # [x0, batch.., x1] read as [batch.., x0, x1], then trans swaps x0, x1
            return (cols, *batch, rows) if trans else (rows, *batch, cols)
        return (*batch, cols, rows) if trans else (*batch, rows, cols)

    a = rng.standard_normal(layout(m, k, trans_a, batch_a)).astype(np.float32)
    b = rng.standard_normal(layout(k, n, trans_b, batch_b)).astype(np.float32)
    node = helper.make_node("FusedMatMul", ["A", "B"], ["Y"], domain=MS, alpha=0.5, transA=trans_a,
                            transB=trans_b, transBatchA=batch_a, transBatchB=batch_b)
    _check([node], {"A": a, "B": b}, ["Y"])


@pytest.mark.parametrize("extra", [[], ["beta"], ["beta", "bias"]])
def test_skip_layer_normalization(extra: list[str]) -> None:
    h = 32
    inputs = {"x": rng.standard_normal((2, 5, h)).astype(np.float32),
              "skip": rng.standard_normal((2, 5, h)).astype(np.float32),
              "gamma": rng.uniform(0.5, 1.5, h).astype(np.float32)}
    for name in extra:
        inputs[name] = rng.standard_normal(h).astype(np.float32)
    names = ["x", "skip", "gamma", *(["beta"] if "beta" in extra else [""] if "bias" in extra else []),
             *(["bias"] if "bias" in extra else [])]
    node = helper.make_node("SkipLayerNormalization", names, ["y", "", "", "sum"], domain=MS, epsilon=1e-6)
    _check([node], inputs, ["y", "sum"])


@pytest.mark.parametrize("op, operands", [("FastGelu", ["x"]), ("FastGelu", ["x", "b"]),
                                          ("BiasGelu", ["x", "b"]), ("Gelu", ["x"])])
def test_gelus(op: str, operands: list[str]) -> None:
    inputs = {"x": rng.standard_normal((3, 16)).astype(np.float32) * 3,
              "b": rng.standard_normal(16).astype(np.float32)}
    inputs = {k: v for k, v in inputs.items() if k in operands}
    _check([helper.make_node(op, operands, ["y"], domain=MS)], inputs, ["y"], atol=1e-5)
