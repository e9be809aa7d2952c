"""The test-case reducer (tessel.debug): strategies, the delta-debugging driver, the interestingness
tests and their isolation, on small hand-written modules and on the imported ResNet-50 (444 ops)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import onnx
import pytest
from tessel.debug.edit import clone, number
from tessel.debug.isolate import CAN_FORK, run_isolated
from tessel.debug.oracles import CrashTest, MismatchTest
from tessel.debug.reduce import NotInteresting, reduce_module
from tessel.debug.strategies import (
    DropAttrs,
    RemoveRegionInputs,
    RemoveResults,
    ShrinkShapes,
    SplatConstants,
    ValuesToReturn,
    Work,
)
from tessel.ir.parser import parse_module
from tessel.ir.printer import to_text
from tessel.ir.verifier import verify

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "tests" / "plugins"
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"

SMALL = """\
module @small {
  func @main(%x: tensor<1x4x8x8xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x4x1x1xf32>) {
    %w = const {value = dense<0.5> : tensor<4x4x3x3xf32>} : () -> tensor<4x4x3x3xf32>
    %b = const {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>} : () -> tensor<4xf32>
    %0 = conv2d %x, %w, %b {groups = 1, pads = [1, 1, 1, 1]}
        : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32> loc("onnx:conv")
    %1 = relu %0 : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32> loc("onnx:relu")
    %2 = sigmoid %1 : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32> loc("onnx:sigmoid")
    %3 = global_avg_pool %2 : (tensor<1x4x8x8xf32>) -> tensor<1x4x1x1xf32> loc("onnx:pool")
    return %2, %3 : tensor<1x4x8x8xf32>, tensor<1x4x1x1xf32>
  }
}
"""


def work(text: str) -> Work:
    m = parse_module(text)
    return Work(m, number(m))


def applied(text: str, strategy: object, pick: slice = slice(None)) -> str:
    """The module after applying `strategy` to the chosen slice of its sites (in a copy)."""
    w = work(text)
    m, ids = clone(w.module, w.ids)
    c = Work(m, ids)
    sites = strategy.sites(c)  # type: ignore[attr-defined]
    assert strategy.apply(c, sites[pick])  # type: ignore[attr-defined]
    assert not verify(c.module), verify(c.module)
    return to_text(c.module)


# strategies ------------------------------------------------------------------------------------------
def test_clone_prints_the_same_and_shares_no_structure() -> None:
    w = work(SMALL)
    m, ids = clone(w.module, w.ids)
    assert to_text(m) == to_text(w.module)
    assert [ids(op) for op in m.walk()] == [w.ids(op) for op in w.module.walk()]
    assert not {id(op) for op in m.walk()} & {id(op) for op in w.module.walk()}


def test_remove_results_rewrites_return_and_signature() -> None:
    out = applied(SMALL, RemoveResults(), slice(1, 2))
    assert "-> tensor<1x4x8x8xf32> {" in out and "return %2 : tensor<1x4x8x8xf32>" in out


def test_values_to_return_returns_the_last_chosen_op() -> None:
    out = applied(SMALL, ValuesToReturn(), slice(0, 2))  # conv, relu: relu is returned
    assert "return %1 : tensor<1x4x8x8xf32>" in out and "-> tensor<1x4x8x8xf32> {" in out


def test_splat_constants_keeps_the_first_element() -> None:
    out = applied(SMALL, SplatConstants())
    assert "dense<1.0> : tensor<4xf32>" in out and "[1.0, 2.0" not in out


def test_drop_attrs_reinfers_result_types() -> None:
    w = work(SMALL)
    sites = [s for s in DropAttrs().sites(w) if s[-1] == "pads"]
    out = applied(SMALL, DropAttrs(), slice(None))  # every optional attribute: pads included
    assert sites and "pads" not in out
    assert "-> tensor<1x4x6x6xf32> loc(\"onnx:conv\")" in out  # no padding: 8 - 3 + 1


def test_shrink_shapes_halves_consistently() -> None:
    splat_bias = SMALL.replace("dense<[1.0, 2.0, 3.0, 4.0]>", "dense<1.0>")
    out = applied(splat_bias, ShrinkShapes())  # every dim of %x and of the splat constants at once
    assert "%x: tensor<1x2x4x4xf32>" in out and "tensor<2x2x1x1xf32>" in out and "tensor<2xf32>" in out
    assert "global_avg_pool %2 : (tensor<1x2x6x6xf32>) -> tensor<1x2x1x1xf32>" in out  # still padded by 1
    with pytest.raises(AssertionError):  # a dense bias cannot follow its conv's channels
        applied(SMALL, ShrinkShapes())


def test_shrink_shapes_is_refused_when_types_disagree() -> None:
    w = work(SMALL)
    m, ids = clone(w.module, w.ids)
    c = Work(m, ids)
    channel = [s for s in ShrinkShapes().sites(c) if s[0] == "arg" and s[2] == 1]
    ShrinkShapes().apply(c, channel)  # the input's channels alone: the weights disagree
    assert verify(c.module)


KERNEL = """\
func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kernel %x, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> ({
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>):
    %1 = relu %a : (tensor<4xf32>) -> tensor<4xf32>
    yield %1 : tensor<4xf32>
  })
  return %0 : tensor<4xf32>
}
"""


def test_remove_region_inputs_drops_unused_kernel_operands() -> None:
    out = applied(KERNEL, RemoveRegionInputs())
    assert "kernel %x : (tensor<4xf32>) -> tensor<4xf32>" in out and "^bb0(%a: tensor<4xf32>):" in out


def test_shrink_shapes_reinfers_inside_kernel_regions() -> None:
    out = applied(KERNEL, ShrinkShapes(), slice(0, 2))  # both arguments: 4 -> 2
    assert "^bb0(%a: tensor<2xf32>, %b: tensor<2xf32>):" in out and "return %0 : tensor<2xf32>" in out


# the driver ------------------------------------------------------------------------------------------
def test_reduces_to_the_interesting_op_deterministically() -> None:
    def interesting(text: str) -> bool:
        return "= sigmoid" in text

    first = reduce_module(SMALL, interesting)
    again = reduce_module(SMALL, interesting)
    assert first.text == again.text
    assert first.ops == 2 and first.lines == 6, first.text
    sigmoid_of_arg = r"func @main\((%\w+): tensor<1x1x1x1xf32>\) .*\n.* = sigmoid \1 :"
    assert re.search(sigmoid_of_arg, first.text), first.text
    assert [e.strategy for e in first.accepted][:1] == ["remove-results"]


def test_uninteresting_input_raises() -> None:
    with pytest.raises(NotInteresting):
        reduce_module(SMALL, lambda text: "= softmax" in text)


def test_every_candidate_is_valid_and_tested_once() -> None:
    seen: list[str] = []

    def interesting(text: str) -> bool:
        assert text not in seen, "a candidate was tested twice"
        seen.append(text)
        assert not verify(parse_module(text))
        return "relu" in text and "conv2d" in text

    result = reduce_module(SMALL, interesting)
    assert result.tests == len(seen)


CONV_THEN_RELU = re.compile(r"= conv2d [^\n]*groups = 1[,}][\s\S]*= relu ")


@pytest.fixture(scope="module")
def resnet50() -> str:
    from tessel.frontends.onnx.importer import import_model

    path = LIGHT / "light_resnet50.onnx"
    return to_text(import_model(path.read_bytes(), path.name))


def test_resnet50_reduces_below_30_lines(resnet50: str) -> None:
    assert resnet50.count("\n") > 400
    result = reduce_module(resnet50, lambda text: CONV_THEN_RELU.search(text) is not None)
    assert result.initial_ops == 444
    assert result.lines < 30, result.text
    assert CONV_THEN_RELU.search(result.text) and not verify(parse_module(result.text))
    # the work, counted rather than timed: chunked deletion asks the test a few dozen times (43 measured),
    # where one op at a time would ask it hundreds of times
    assert result.tests <= 100 and result.rounds <= 3


@pytest.mark.slow
def test_random_weight_resnet50_miscompile_reduces_below_30_lines() -> None:
    """A miscompiled residual add in a ResNet-50 with random weights (every weight dense, 136 MB of text):
    the reproducer keeps the add, what feeds it, and splat weights (measured: 16 lines, ~40 s)."""
    from tessel.frontends.onnx.importer import import_model
    from tessel.frontends.onnx.randomize import randomize_weights

    model = randomize_weights(onnx.load(str(LIGHT / "light_resnet50.onnx")), seed=0)
    text = to_text(import_model(model.SerializeToString(), "resnet50.onnx"))
    test = MismatchTest("test-mismatch-on-add", plugins=(str(PLUGINS / "mismatch_on_add.py"),))
    result = reduce_module(text, test)
    assert result.initial_ops == 444 and result.lines < 30, result.text
    assert " = add " in result.text and "dense_resource" not in result.text
    assert test(result.text), test.last


# interestingness tests -------------------------------------------------------------------------------
def test_crash_test_keeps_the_input_crash(tmp_path: Path) -> None:
    plugin = str(PLUGINS / "crash_on_sigmoid.py")
    test = CrashTest("test-crash-on-sigmoid", str(tmp_path), (plugin,))
    assert test(SMALL) and test.signature == "pass 'test-crash-on-sigmoid' crashed: RuntimeError"
    assert not test(SMALL.replace("= sigmoid %1", "= tanh %1"))
    assert test.last == "tessel-opt does not crash"
    assert os.listdir(tmp_path) in ([], ["reproducer.tsl"])  # reproducers stay in the work dir


def test_crash_test_in_a_fresh_tessel_opt(tmp_path: Path) -> None:
    plugin = str(PLUGINS / "crash_on_sigmoid.py")
    test = CrashTest("test-crash-on-sigmoid", str(tmp_path), (plugin,), fresh_process=True)
    assert test(SMALL) and test.signature == "pass 'test-crash-on-sigmoid' crashed: RuntimeError"
    assert not test(SMALL.replace("= sigmoid %1", "= tanh %1"))
    assert "exits with status 0, not 3" in test.last


def test_mismatch_test_with_the_miscompile_plugin() -> None:
    test = MismatchTest("test-miscompile", plugins=(str(PLUGINS / "miscompile.py"),))
    assert test(SMALL), test.last  # the conv's bias grows by 1%
    assert "differs from the input" in test.last
    assert not MismatchTest("canonicalize,cse")(SMALL)
    loose = MismatchTest("test-miscompile", rtol=0.1, atol=0.1)
    assert not loose(SMALL) and "no output changes beyond rtol 0.1" in loose.last


def test_mismatch_reduction_with_the_miscompile_plugin() -> None:
    test = MismatchTest("test-miscompile", plugins=(str(PLUGINS / "miscompile.py"),))
    result = reduce_module(SMALL, test)
    assert "conv2d" in result.text and "sigmoid" not in result.text, result.text
    assert result.lines <= 8


@pytest.mark.skipif(not CAN_FORK, reason="needs fork")
def test_isolation_survives_hangs_deaths_and_exceptions(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"

    def hang() -> tuple[bool, str]:
        pid_file.write_text(str(os.getpid()))
        time.sleep(600)
        return True, ""

    def die() -> tuple[bool, str]:
        os.kill(os.getpid(), 9)
        return True, ""

    def boom() -> tuple[bool, str]:
        raise RecursionError("deep")

    assert run_isolated(hang, timeout=0.5) == (False, "it ran past the 0.5 s timeout")
    if pid_file.exists():  # (a child not yet scheduled when killed wrote nothing)
        with pytest.raises(ProcessLookupError):  # the hung child was killed and reaped, not left sleeping
            os.kill(int(pid_file.read_text()), 0)
    assert run_isolated(die) == (False, "the check died with signal 9")
    assert run_isolated(boom) == (False, "the check failed: RecursionError: deep")
    assert run_isolated(lambda: (True, "yes")) == (True, "yes")


# the docs --------------------------------------------------------------------------------------------
def test_every_long_option_is_documented() -> None:
    import click
    from tessel.cli import reduce

    text = (ROOT / "docs" / "tools" / "tessel-reduce.md").read_text(encoding="utf-8")
    options = sorted({o for p in reduce.main.params if isinstance(p, click.Option)
                      for o in (*p.opts, *p.secondary_opts) if o.startswith("--")})
    missing = [o for o in options if not re.search(rf"{re.escape(o)}(?![\w-])", text)]
    assert options and not missing, f"docs/tools/tessel-reduce.md does not mention {', '.join(missing)}"
