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


def gated_block() -> onnx.ModelProto:
    """silu(x @ Wg) * u @ Wd with SiLU as x * sigmoid(x), the way exporters write it: the gate's value is
    read twice (by Sigmoid and Mul), and the product reconverges in the Mul by the gate input u (a GLU; in
    a LLaMA MLP u is the up projection, which merge-sibling-matmuls computes beside the gate)."""
    import numpy as np
    from onnx import TensorProto, helper

    rng = np.random.default_rng(1)

    def weight(name: str, shape: list[int]) -> onnx.TensorProto:
        return helper.make_tensor(name, TensorProto.FLOAT, shape, (0.2 * rng.standard_normal(shape)).ravel())

    inits = [weight("wg", [32, 48]), weight("wd", [48, 32])]
    nodes = [helper.make_node("MatMul", ["x", "wg"], ["gate"]),
             helper.make_node("Sigmoid", ["gate"], ["sg"]),
             helper.make_node("Mul", ["gate", "sg"], ["silu"]),
             helper.make_node("Mul", ["silu", "u"], ["h"]),
             helper.make_node("MatMul", ["h", "wd"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32])
    u = helper.make_tensor_value_info("u", TensorProto.FLOAT, [1, 8, 48])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32])
    graph = helper.make_graph(nodes, "glu", [x, u], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("level", [2, 3])
def test_a_reconverging_epilogue_lowers_as_one_kernel(level: int) -> None:
    model = gated_block()
    assert not unlowered(model, "glu", level)
    module = import_model(model.SerializeToString(), "glu.onnx")
    PassManager(parse_pipeline(O_LEVELS[level])).run(module)
    kernels = [op for op in module.funcs[0].block.ops if op.name == "kernel"]
    assert [[o.name for o in k.regions[0].blocks[0].ops][:-1] for k in kernels] == [
        ["matmul", "sigmoid", "mul", "mul"]
    ]


def test_a_reconverging_epilogue_matches_onnxruntime() -> None:
    import numpy as np

    from tests.models.test_models import assert_outputs_close, run_onnxruntime, run_tessel

    model = gated_block()
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 8, 32)).astype(np.float32)
    u = rng.standard_normal((1, 8, 48)).astype(np.float32)
    got = run_tessel(model, [x, u], "glu.onnx", target="opencl")
    assert_outputs_close(got, run_onnxruntime(model, {"x": x, "u": u}), rtol=1e-4, atol=1e-5)


def se_block(n: int, c: int, hw: int, o: int, k: int, groups: int) -> onnx.ModelProto:
    """Squeeze-excitation before a conv: global mean, two 1x1 convs, sigmoid, then the channel scale
    x * s ([N, C, 1, 1]) that the next conv (k x k, `groups`) reads."""
    import numpy as np
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)

    def weight(name: str, shape: list[int]) -> onnx.TensorProto:
        return helper.make_tensor(name, TensorProto.FLOAT, shape, (0.3 * rng.standard_normal(shape)).ravel())

    inits = [weight("w1", [c, c, 1, 1]), weight("f1", [4, c, 1, 1]), weight("f2", [c, 4, 1, 1]),
             weight("wp", [o, c // groups, k, k]), weight("bp", [o])]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Conv", ["g", "f1"], ["h"]), helper.make_node("Relu", ["h"], ["hr"]),
             helper.make_node("Conv", ["hr", "f2"], ["e"]), helper.make_node("Sigmoid", ["e"], ["s"]),
             helper.make_node("Mul", ["r", "s"], ["m"]),
             helper.make_node("Conv", ["m", "wp", "bp"], ["y"], pads=[k // 2] * 4, group=groups)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, o, hw, hw])
    graph = helper.make_graph(nodes, "se", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


SE_CASES = [
    (1, 32, 12, 16, 1, 1),  # the block's 1x1 projection
    (2, 24, 10, 40, 1, 1),  # a factor per image; 24 input channels: a padded block
    (2, 40, 9, 40, 3, 40),  # depthwise: the factors of a channel vector
    (1, 20, 8, 24, 3, 1),  # 3x3 dense, a channel tail
    (2, 48, 7, 48, 3, 3),  # grouped: each group's own channels
]


@pytest.mark.parametrize("case", SE_CASES, ids=[f"n{c[0]}c{c[1]}k{c[4]}g{c[5]}" for c in SE_CASES])
def test_a_channel_scale_folds_into_the_next_conv(case: tuple[int, ...]) -> None:
    import numpy as np

    from tests.models.test_models import assert_outputs_close, run_onnxruntime, run_tessel

    model = se_block(*case)
    assert not [r for r in unlowered(model, "se", 2) if "conv2d" in r]
    module = import_model(model.SerializeToString(), "se.onnx")
    PassManager(parse_pipeline(O_LEVELS[2])).run(module)
    regions = [[o.name for o in k.regions[0].blocks[0].ops] for k in module.funcs[0].block.ops
               if k.name == "kernel"]
    assert any(r[:2] == ["mul", "conv2d"] for r in regions), regions
    n, c, hw = case[:3]
    x = np.random.default_rng(1).standard_normal((n, c, hw, hw)).astype(np.float32)
    got = run_tessel(model, [x], "se.onnx", target="opencl")
    assert_outputs_close(got, run_onnxruntime(model, {"x": x}), rtol=1e-4, atol=1e-5)
