"""Every region `fuse` forms on a real model lowers as one kernel: a region the OpenCL templates cannot
take falls back, silently, to one launch per op (targets/opencl/lower.py `_inline_region`), which is how
reductions with a prologue ran for a while (RMSNorm, a global mean after an activation: 5 launches where
1 was meant). Each model is lowered (no OpenCL build) at -O2 and -O3 with lowering remarks on."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from tessel.frontends.onnx.importer import import_model
from tessel.passes.manager import PassManager
from tessel.passes.pipeline import O_LEVELS, parse_pipeline
from tessel.targets.opencl.lower import lower_module

from tests.models.test_models import LIGHT
from tests.models.transformer import build_encoder

from .conftest import here

KNOWN = ("pooled in NCHW, packed after",)
"""Fallbacks that cost nothing: a pool from an NCHW input to a packed NCHWc result pools in NCHW and packs
after, two launches either way (the region only keeps the pack next to its pool)."""


def unlowered(model: onnx.ModelProto, name: str, level: int) -> list[str]:
    """The `unfused-region` remarks of lowering `model` at -O`level`: each kernel region that does not lower
    as one kernel (tessel-codegen --remarks-missed prints them)."""
    module = import_model(model.SerializeToString(), f"{name}.onnx")
    PassManager(parse_pipeline(O_LEVELS[level])).run(module)
    remarks: list = []
    lower_module(module, here(), remarks)
    assert all(r.reason == "unfused-region" for r in remarks)
    return [r.message for r in remarks]


@pytest.mark.parametrize("level", [2, 3])
@pytest.mark.parametrize("path", LIGHT, ids=[p.stem.removeprefix("light_") for p in LIGHT])
def test_light_model_regions_lower_as_one_kernel(path: Path, level: int) -> None:
    model = onnx.load(str(path), load_external_data=False)
    bad = [b for b in unlowered(model, path.stem, level) if not any(k in b for k in KNOWN)]
    assert not bad, bad


def test_transformer_regions_lower_as_one_kernel() -> None:
    model = build_encoder(layers=2, hidden=64, heads=4, seq=16, ffn=128, seed=0)
    assert not unlowered(model, "encoder", 2)


def rms_norm_block() -> onnx.ModelProto:
    """x.pow(2).mean(-1) as LLaMA-style exports give RMSNorm, then a matmul; and a global mean of an
    activation (a CNN head's ReduceMean after ReLU)."""
    import numpy as np
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    inits = [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
             helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-6]),
             helper.make_tensor("w", TensorProto.FLOAT, [32, 16], rng.standard_normal(512).tolist()),
             helper.make_tensor("axes", TensorProto.INT64, [1], [-1])]
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq", "axes"], ["ms"]),
             helper.make_node("Add", ["ms", "eps"], ["mse"]),
             helper.make_node("Sqrt", ["mse"], ["rms"]),
             helper.make_node("Reciprocal", ["rms"], ["inv"]),
             helper.make_node("Mul", ["x", "inv"], ["n"]),
             helper.make_node("MatMul", ["n", "w"], ["y"]),
             helper.make_node("Relu", ["y"], ["r"]),
             helper.make_node("ReduceMean", ["r", "axes"], ["z"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8, 1])
    graph = helper.make_graph(nodes, "rms", [x], [z], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("level", [2, 3])
def test_reductions_with_a_prologue_lower_as_one_kernel(level: int) -> None:
    assert not unlowered(rms_norm_block(), "rms", level)
