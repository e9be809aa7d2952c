"""An inverted residual's expansion computed in the depthwise conv's fill (fuse's expansion prologue,
conv_depthwise.py `depthwise_expand_source`): blocks as PyTorch exports them, at -O2 against onnxruntime,
on a CPU (work-item 0 fills) and as a GPU runs the fill (every work-item a share of the rows)."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from tessel.frontends.onnx.importer import import_model
from tessel.passes.manager import PassManager
from tessel.passes.pipeline import O_LEVELS, parse_pipeline
from tessel.targets.opencl.lower import lower_module
from tessel.targets.opencl.runtime import Executable

from .conftest import here


def block(n: int, k: int, c: int, hw: int, stride: int, act: str, residual: bool) -> onnx.ModelProto:
    """x -> 1x1 conv k->c + act -> depthwise 3x3 (stride) + act -> 1x1 conv c->k [+ x]."""
    rng = np.random.default_rng(0)

    def weight(name: str, shape: list[int]) -> onnx.TensorProto:
        data = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        return helper.make_tensor(name, TensorProto.FLOAT, shape, data.ravel())

    def activation(x: str, y: str) -> list[onnx.NodeProto]:
        if act == "relu6":
            return [helper.make_node("Clip", [x, "lo", "hi"], [y])]
        if act == "hardswish":
            return [helper.make_node("HardSwish", [x], [y])]
        return [helper.make_node("Sigmoid", [x], [y + "_s"]), helper.make_node("Mul", [x, y + "_s"], [y])]

    inits = [weight("w0", [k, k, 1, 1]), weight("we", [c, k, 1, 1]), weight("be", [c]),
             weight("wd", [c, 1, 3, 3]), weight("bd", [c]), weight("wp", [k, c, 1, 1]),
             helper.make_tensor("lo", TensorProto.FLOAT, [], [0.0]),
             helper.make_tensor("hi", TensorProto.FLOAT, [], [6.0])]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "we", "be"], ["e"]), *activation("e", "ea"),
             helper.make_node("Conv", ["ea", "wd", "bd"], ["d"], group=c, pads=[1] * 4, strides=[stride] * 2),
             *activation("d", "da"), helper.make_node("Conv", ["da", "wp"], ["p"])]
    if residual:
        nodes.append(helper.make_node("Add", ["p", "r"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", ["p"], ["y"]))
    ho = (hw - 1) // stride + 1
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, k, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, k, ho, ho])
    graph = helper.make_graph(nodes, "ir", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


CASES = [
    # n, k, c, hw, stride, act, residual
    (1, 16, 96, 20, 1, "relu6", True),  # MobileNetV2's
    (1, 24, 144, 15, 2, "relu6", False),  # a padded 24-channel input block, stride 2, odd size
    (2, 16, 64, 9, 1, "hardswish", True),  # MobileNetV3's, two images
    (1, 40, 240, 7, 1, "silu", False),  # EfficientNet's: a SiLU the fill computes
]


@pytest.mark.parametrize("cpu", [True, False], ids=["cpu", "gpu-shaped"])
@pytest.mark.parametrize("case", CASES, ids=[f"k{c[1]}c{c[2]}s{c[4]}-{c[5]}" for c in CASES])
def test_an_expansion_joins_the_depthwise_kernel(case: tuple, cpu: bool) -> None:
    import onnxruntime as ort

    model = block(*case)
    n, k, _, hw = case[:4]
    x = np.random.default_rng(1).standard_normal((n, k, hw, hw)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})
    m = import_model(model.SerializeToString(), "ir.onnx")
    PassManager(parse_pipeline(O_LEVELS[2])).run(m)
    regions = [[o.name for o in op.regions[0].blocks[0].ops]
               for op in m.funcs[0].block.ops if op.name == "kernel"]
    assert any(r.count("conv2d") == 2 for r in regions), regions
    lower_module(m, dataclasses.replace(here(), is_cpu=cpu))
    source = next(op.attrs["source"] for op in m.funcs[0].block.ops if op.name == "cl.program")
    assert "fused 1x1 expansion" in source
    assert ("if (get_local_id(0) == 0) for (int hl" in source) is cpu
    got = Executable(m, m.funcs[0], execution="pool").run([x])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
