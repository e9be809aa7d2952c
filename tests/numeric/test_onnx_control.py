"""The If, Loop and Scan converters (frontends/onnx/ops/control.py), which inline their subgraphs at import,
against onnxruntime: bodies that read outer-scope values, loop-carried state, scan outputs, early exit,
nesting, Scan's axes and directions, and opset 8's batched Scan. Then what they refuse, and why.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from tessel.frontends.onnx.backend import TesselBackend
from tessel.ir.diagnostics import DiagnosticError

from tests.numeric.model_util import check_model, make_model

F32 = TensorProto.FLOAT


def vi(name: str, elem: int = F32, shape: list | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(value)))


X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5


# If ------------------------------------------------------------------------------------------------------
def if_model(cond: bool | None) -> onnx.ModelProto:
    """y = x + 1 if cond else x * x, both branches reading the outer x; cond an initializer, or an input."""
    then = helper.make_graph([const("one", np.float32(1)), helper.make_node("Add", ["x", "one"], ["t"])],
                             "then", [], [vi("t", shape=[2, 3])])
    other = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["e"])], "else", [],
                              [vi("e", shape=[2, 3])])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)
    inputs = {"x": X} if cond is not None else {"x": X, "cond": np.array(True)}
    inits = {"cond": np.array(cond)} if cond is not None else {}
    return make_model([node], inputs, ["y"], inits, opset=16)


@pytest.mark.parametrize("cond", [True, False])
def test_if_inlines_the_taken_branch(cond):
    (y,) = check_model(if_model(cond), {"x": X})
    np.testing.assert_array_equal(y, X + 1 if cond else X * X)


def test_if_on_an_input_is_specialized_or_runs_as_an_if():
    """The If is an `if` op that picks its branch at run time: one compile for both values, nothing baked
    in, with or without the backend's specializing."""
    for specialize in (True, False):
        rep = TesselBackend.prepare(if_model(None), specialize=specialize)
        for c in (True, False, True):
            np.testing.assert_array_equal(rep.run({"x": X, "cond": np.array(c)})[0], X + 1 if c else X * X)
        assert not rep.specialized_inputs


# Loop ----------------------------------------------------------------------------------------------------
def loop_body(stop_after: int | None = None, nested_if: bool = False) -> onnx.GraphProto:
    """(i, cond, acc) -> (cond', acc + x * i, acc + x * i as a scan output); cond' = i < stop_after."""
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=F32), helper.make_node("Mul", ["x", "fi"], ["xi"])]
    if nested_if:  # on iteration 1, add 100 more: an If whose condition is constant per iteration
        plus = helper.make_graph([const("hundred", np.float32(100)),
                                  helper.make_node("Add", ["xi", "hundred"], ["p"])],
                                 "plus", [], [vi("p", shape=[2, 3])])
        same = helper.make_graph([helper.make_node("Identity", ["xi"], ["s"])], "same", [],
                                 [vi("s", shape=[2, 3])])
        nodes += [const("one_i", np.int64(1)), helper.make_node("Equal", ["i", "one_i"], ["is_one"]),
                  helper.make_node("If", ["is_one"], ["xi2"], then_branch=plus, else_branch=same)]
    nodes.append(helper.make_node("Add", ["acc", "xi2" if nested_if else "xi"], ["acc_out"]))
    nodes.append(helper.make_node("Identity", ["acc_out"], ["scan_out"]))
    if stop_after is None:
        nodes.append(helper.make_node("Identity", ["cond"], ["cond_out"]))
    else:
        nodes += [const("limit", np.int64(stop_after)),
                  helper.make_node("Less", ["i", "limit"], ["cond_out"])]
    return helper.make_graph(nodes, "body", [vi("i", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, []),
                                             vi("acc", shape=[2, 3])],
                             [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", shape=[2, 3]),
                              vi("scan_out", shape=[2, 3])])


@pytest.mark.parametrize("trips,stop_after,nested_if", [
    (4, None, False),  # runs M times
    (10, 2, False),  # the body's condition ends it after 3 iterations
    (None, 2, False),  # no trip count: the condition alone
    (3, None, True),  # an If inside the body, on the iteration number
])
def test_loop_unrolls(trips, stop_after, nested_if):
    inits = {"cond": np.array(True), "acc0": np.zeros((2, 3), np.float32)}
    if trips is not None:
        inits["M"] = np.array(trips, np.int64)
    node = helper.make_node("Loop", ["M" if trips is not None else "", "cond", "acc0"], ["acc", "scan"],
                            body=loop_body(stop_after, nested_if))
    model = make_model([node], {"x": X}, [vi("acc", shape=[2, 3]), "scan"], inits, opset=16)
    acc, scan = check_model(model, {"x": X})
    assert scan.shape[0] == (trips if stop_after is None else stop_after + 1)


def test_loop_condition_from_the_inputs_runs_as_a_loop():
    """A body whose condition is computed from the data cannot unroll: the Loop becomes a `loop` op, whose
    scan output has as many rows as iterations ran."""
    body = loop_body()
    body.node[-1].CopyFrom(helper.make_node("ReduceMin", ["acc_out"], ["m"], keepdims=0))
    body.node.extend([const("zero", np.float32(0)), helper.make_node("Greater", ["m", "zero"], ["cond_out"])])
    node = helper.make_node("Loop", ["M", "cond", "acc0"], ["acc", "scan"], body=body)
    model = make_model([node], {"x": X}, [vi("acc", shape=[2, 3]), "scan"],
                       {"M": np.array(3, np.int64), "cond": np.array(True),
                        "acc0": np.zeros((2, 3), np.float32)}, opset=16)
    ort = pytest.importorskip("onnxruntime")
    got = TesselBackend.prepare(model, specialize=False).run({"x": X})
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": X})  # scan slices stacked
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_a_body_op_without_converter_is_unsupported():
    body = loop_body()
    body.node[1].CopyFrom(helper.make_node("Bernoulli", ["x"], ["xi"]))
    node = helper.make_node("Loop", ["M", "cond", "acc0"], ["acc", "scan"], body=body)
    graph = helper.make_graph([node], "g", [vi("x", shape=[2, 3])], [vi("acc", shape=[2, 3]),
                                                                      vi("scan", shape=[2, 2, 3])],
                              [onnx.numpy_helper.from_array(np.array(2, np.int64), "M"),
                               onnx.numpy_helper.from_array(np.array(True), "cond"),
                               onnx.numpy_helper.from_array(np.zeros((2, 3), np.float32), "acc0")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    with pytest.raises(DiagnosticError, match="subgraph 'body' uses Bernoulli .* not supported"):
        TesselBackend.prepare(model)


# Scan ----------------------------------------------------------------------------------------------------
def scan_body() -> onnx.GraphProto:
    """(state, a, b) -> (state + a * b, state + a * b and a - b as scan outputs)."""
    return helper.make_graph(
        [helper.make_node("Mul", ["a", "b"], ["ab"]), helper.make_node("Add", ["s", "ab"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["y1"]), helper.make_node("Sub", ["a", "b"], ["y2"])],
        "scan_body", [vi("s", shape=[3]), vi("a", shape=[3]), vi("b", shape=[3])],
        [vi("s_out", shape=[3]), vi("y1", shape=[3]), vi("y2", shape=[3])])


@pytest.mark.parametrize("attrs", [
    {},
    {"scan_input_axes": [0, 1], "scan_input_directions": [1, 0]},
    {"scan_input_axes": [0, -1], "scan_output_axes": [1, -2], "scan_output_directions": [1, 0]},
])
def test_scan(attrs):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b_shape = (4, 3) if attrs.get("scan_input_axes", [0, 0])[1] == 0 else (3, 4)
    b = rng.standard_normal(b_shape).astype(np.float32)
    s0 = rng.standard_normal(3).astype(np.float32)
    node = helper.make_node("Scan", ["s0", "a", "b"], ["s", "y1", "y2"], body=scan_body(), num_scan_inputs=2,
                            **attrs)
    check_model(make_model([node], {"s0": s0, "a": a, "b": b}, ["s", "y1", "y2"], opset=16),
                {"s0": s0, "a": a, "b": b})


def test_scan8_is_batched():
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((2, 5, 3)).astype(np.float32) for _ in range(2))
    s0 = rng.standard_normal((2, 3)).astype(np.float32)
    node = helper.make_node("Scan", ["", "s0", "a", "b"], ["s", "y1", "y2"], body=scan_body(),
                            num_scan_inputs=2, directions=[0, 1])
    check_model(make_model([node], {"s0": s0, "a": a, "b": b}, ["s", "y1", "y2"], opset=8),
                {"s0": s0, "a": a, "b": b})
