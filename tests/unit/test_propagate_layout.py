"""propagate-layout on whole CNNs: the numpy results are unchanged and the layout changes left are only
those next to a conv or pool (which their kernels absorb), on random-weight copies of the onnx package's
light resnet50 and squeezenet (as examples/prepare_demo.py makes them)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from tessel.frontends.onnx.importer import import_model
from tessel.frontends.onnx.randomize import randomize_weights
from tessel.ir.core import Module, Op
from tessel.ir.diagnostics import DiagnosticError
from tessel.ir.interpreter import random_inputs, run_func
from tessel.ir.parser import parse_module
from tessel.ir.verifier import verify
from tessel.passes.manager import PassContext
from tessel.passes.pipeline import parse_pipeline

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
ANCHORS = ("conv2d", "max_pool2d", "avg_pool2d", "global_avg_pool", "global_max_pool")
LAYOUT_OPS = ("pack", "unpack", "transpose")


def load(model: str) -> Module:
    m = randomize_weights(onnx.load(os.path.join(LIGHT, f"light_{model}.onnx")), seed=0)
    return import_model(m.SerializeToString(), f"{model}.onnx")


def run_pipeline(module: Module, pipeline: str) -> tuple[PassContext, dict[str, int]]:
    ctx = PassContext()
    stats: dict[str, int] = {}
    for p in parse_pipeline(pipeline):
        ctx.pass_name = p.NAME
        p.run(module, ctx)
        assert not verify(module), f"{p.NAME} left invalid IR"
        stats.update(p.stats)
    return ctx, stats


def layout_changes(module: Module) -> tuple[int, int]:
    """(layout ops, those not next to an anchor): an unpack/back-transpose whose users are all anchors
    reading it as their input, or a pack/transpose whose operand is an anchor's only use, is next to one."""
    total = away = 0
    for op in module.walk():
        if op.name not in LAYOUT_OPS:
            continue
        total += 1
        src = op.operands[0].op
        after_anchor = src is not None and src.name in ANCHORS and len(src.result.uses) == 1
        users = op.result.users
        before_anchor = bool(users) and all(u.name in ANCHORS and u.operands[0] is op.result for u in users)
        away += not (after_anchor or before_anchor)
    return total, away


def ops_named(module: Module, name: str) -> list[Op]:
    return [op for op in module.walk() if op.name == name]


@pytest.mark.parametrize(
    "model, first, convs",
    [
        ("resnet50", "fold-batchnorm", 53),  # batch_norm becomes conv bias: nothing stops the layout
        ("squeezenet", "", 26),
    ],
)
def test_model_blocked(model: str, first: str, convs: int) -> None:
    module = load(model)
    func = module.funcs[0]
    inputs = list(random_inputs(func, seed=0).values())
    run_pipeline(module, first)
    before = run_func(module, func, inputs)
    ctx, stats = run_pipeline(module, "propagate-layout")
    after = run_func(module, module.funcs[0], inputs)
    for b, a in zip(before, after, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    total, away = layout_changes(module)
    assert away == 0 and stats["num-layout-changes"] == 0, f"{away} layout changes away from anchors"
    assert total > convs, "convs hand blocked results to each other"
    assert ops_named(module, "relu")[0].result.type.rank == 5, "the activations run blocked"
    regions = [r for r in ctx.remarks if r.kind == "passed" and r.reason == "region"]
    assert len(regions) == 1 and f"NCHW16c region of {convs} convs" in regions[0].message
    # the stem (3 input channels) reads the network input as it is
    stem = ops_named(module, "conv2d")[0]
    assert stem.operands[0] is module.funcs[0].args[0]


def test_squeezenet_nhwc() -> None:
    module = load("squeezenet")
    func = module.funcs[0]
    inputs = list(random_inputs(func, seed=1).values())
    before = run_func(module, func, inputs)
    _, stats = run_pipeline(module, "propagate-layout{layout=nhwc}")
    after = run_func(module, module.funcs[0], inputs)
    np.testing.assert_allclose(after[0], before[0], rtol=1e-5, atol=1e-6)
    assert stats["num-layout-changes"] == 0 and layout_changes(module)[1] == 0
    assert not ops_named(module, "pack")
    assert ops_named(module, "concat")[0].attrs["axis"] == 3


def test_resnet50_without_batchnorm_folding() -> None:
    """batch_norm is not layout-agnostic: every conv then writes NCHW, each one says why."""
    module = load("resnet50")
    func = module.funcs[0]
    inputs = list(random_inputs(func, seed=2).values())
    before = run_func(module, func, inputs)
    ctx, stats = run_pipeline(module, "propagate-layout")
    np.testing.assert_allclose(run_func(module, module.funcs[0], inputs)[0], before[0], rtol=1e-5, atol=1e-6)
    missed = [r for r in ctx.remarks if r.kind == "missed"]
    assert len(missed) == 53 and all(
        r.reason == "not-layout-agnostic" and "'batch_norm'" in r.message for r in missed
    )
    assert stats["num-layout-changes"] == 0


ELIDED = """
func @elided(%x: tensor<1x16x4x4xf32>, %w: tensor<32x16x1x1xf32>, %w2: tensor<32x32x1x1xf32>)
    -> tensor<1x32x4x4xf32> {
  %s = const {value = dense_resource<scale> : tensor<32x1x1xf32>} : () -> tensor<32x1x1xf32>
  %0 = conv2d %x, %w : (tensor<1x16x4x4xf32>, tensor<32x16x1x1xf32>) -> tensor<1x32x4x4xf32>
  %1 = mul %0, %s : (tensor<1x32x4x4xf32>, tensor<32x1x1xf32>) -> tensor<1x32x4x4xf32>
  %2 = conv2d %1, %w2 : (tensor<1x32x4x4xf32>, tensor<32x32x1x1xf32>) -> tensor<1x32x4x4xf32>
  return %2 : tensor<1x32x4x4xf32>
}
{-#
  resources: {
    scale: "sha256:DIGEST:elided"
  }
#-}
""".replace("DIGEST", "0" * 64)


def test_constant_without_data_is_converted_by_ops() -> None:
    """A per-channel constant whose data is not at hand (elided) is converted by a reshape and a pack
    that fold-constants folds once the data is there."""
    module = parse_module(ELIDED, "elided.tsl")
    run_pipeline(module, "propagate-layout")
    (mul,) = ops_named(module, "mul")
    scale = mul.operands[1].op
    assert scale is not None and scale.name == "pack" and scale.result.type.dims == (1, 2, 1, 1, 16)
    assert scale.operands[0].op.name == "reshape"  # type: ignore[union-attr]
    assert mul.result.type.dims == (1, 2, 4, 4, 16)


def test_bad_options() -> None:
    with pytest.raises(DiagnosticError, match="layout must be nchwc or nhwc"):
        run_pipeline(parse_module(ELIDED, "x.tsl"), "propagate-layout{layout=nhcw}")


LIT = os.path.join(os.path.dirname(__file__), "..", "..", "lit_tests", "passes", "propagate-layout.tsl")


@pytest.mark.parametrize("layout", ["nchwc", "nhwc"])
def test_lit_cases_compute_the_same(layout: str) -> None:
    """Every case of the lit file computes the same before and after the pass, in both layouts."""
    with open(LIT) as f:
        cases = f.read().split("// -----")
    for text in cases:
        module = parse_module(text, "propagate-layout.tsl")
        func = module.funcs[0]
        inputs = list(random_inputs(func, seed=3, sizes={"H": 6, "W": 5, "C": 4}).values())  # @dynamic*
        before = run_func(module, func, inputs)
        run_pipeline(module, f"propagate-layout{{layout={layout}}}")
        after = run_func(module, module.funcs[0], inputs)
        for b, a in zip(before, after, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=func.name)
