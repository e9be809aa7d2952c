"""The algebraic passes (fold-batchnorm, fold-pad, cancel-transposes, simplify-broadcasts,
merge-sibling-matmuls, unflatten-gemm; canonicalize's lit cases too) keep what a module computes: every
rewrite is checked on the numpy interpreter before and after the pass on random inputs, on the lit files'
cases, on small ONNX models, and (fold-batchnorm) on a random-weight resnet50."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tessel.frontends.onnx.importer import import_model
from tessel.ir.core import Module
from tessel.ir.interpreter import random_inputs, run_func
from tessel.ir.parser import parse_module
from tessel.passes.cancel_transposes import block_perm
from tessel.passes.manager import PassContext, PassManager, get_pass

ROOT = Path(__file__).resolve().parents[2]
LIT = ROOT / "lit_tests" / "passes"
PASSES = (
    "fold-batchnorm",
    "fold-pad",
    "cancel-transposes",
    "simplify-broadcasts",
    "merge-sibling-matmuls",
    "unflatten-gemm",
    "canonicalize",
)


def run(module: Module, seed: int = 0) -> list[list[np.ndarray]]:
    """Every func's results on seeded random inputs."""
    return [run_func(module, f, list(random_inputs(f, seed).values())) for f in module.funcs]


LIT_OPTIONS: dict[str, dict[str, int]] = {"merge-sibling-matmuls": {"column_align": 1}}
"""Options the lit files' main RUN lines give (their cases use matrices of a few columns)."""


def apply(module: Module, name: str) -> PassContext:
    pm = PassManager([get_pass(name)(**LIT_OPTIONS.get(name, {}))])  # verifies the IR after the pass
    pm.run(module)
    return pm.ctx


def op_names(module: Module) -> Counter[str]:
    return Counter(op.name for op in module.walk())


def check_same(
    before: list[list[np.ndarray]], after: list[list[np.ndarray]], rtol: float = 1e-4, atol: float = 1e-5
) -> None:
    assert len(before) == len(after)
    for fb, fa in zip(before, after, strict=True):
        for b, a in zip(fb, fa, strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def chunks(path: Path) -> list[str]:
    return [c for c in path.read_text().split("// -----") if "func @" in c]


LIT_CASES = [(name, i, text) for name in PASSES for i, text in enumerate(chunks(LIT / f"{name}.tsl"))]


@pytest.mark.parametrize(("name", "index", "text"), LIT_CASES, ids=[f"{n}-{i}" for n, i, _ in LIT_CASES])
def test_lit_cases_keep_results(name: str, index: int, text: str) -> None:
    """Each lit case computes the same on random inputs after its pass as before it."""
    if any(not a.type.is_static for f in parse_module(text, f"{name}.tsl").funcs for a in f.args):
        pytest.skip("a dynamic input: no random inputs to run it on")
    before = run(parse_module(text, f"{name}.tsl"), seed=index)
    module = parse_module(text, f"{name}.tsl")
    apply(module, name)
    check_same(before, run(module, seed=index))


# fold-batchnorm ------------------------------------------------------------------------------------------
Shapes = list[tuple[str, list[int]]]


def onnx_module(
    nodes: list[onnx.NodeProto], inputs: Shapes, outputs: Shapes, inits: dict[str, np.ndarray | TensorProto]
) -> Module:
    """Import a one-graph ONNX model (float32 inputs, outputs and initializers unless given as tensors)."""

    def infos(named: Shapes) -> list[onnx.ValueInfoProto]:
        return [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in named]

    graph = helper.make_graph(
        nodes,
        "test",
        infos(inputs),
        infos(outputs),
        [
            a if isinstance(a, TensorProto) else numpy_helper.from_array(np.asarray(a, np.float32), k)
            for k, a in inits.items()
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return import_model(model.SerializeToString(), "test.onnx")


def bn_params(rng: np.random.Generator, prefix: str, c: int) -> dict[str, np.ndarray]:
    return {
        f"{prefix}_s": rng.uniform(0.5, 2, c),
        f"{prefix}_b": rng.standard_normal(c),
        f"{prefix}_m": rng.standard_normal(c),
        f"{prefix}_v": rng.uniform(0.1, 3, c),
    }


def bn_node(x: str, prefix: str, y: str) -> onnx.NodeProto:
    return helper.make_node("BatchNormalization", [x, *(f"{prefix}_{k}" for k in "sbmv")], [y], epsilon=1e-3)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_conv_bn_onnx(groups: int) -> None:
    """Conv (grouped, with a bias), BatchNormalization, per-channel Mul and Add all fold into the conv."""
    rng = np.random.default_rng(groups)
    inits = {
        "w": rng.standard_normal((8, 4 // groups, 3, 3)),
        "cb": rng.standard_normal(8),
        "k": rng.standard_normal((1, 8, 1, 1)),
        "t": rng.standard_normal((8, 1, 1)),
        **bn_params(rng, "bn", 8),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1], group=groups),
        bn_node("c", "bn", "n"),
        helper.make_node("Mul", ["n", "k"], ["m"]),
        helper.make_node("Add", ["m", "t"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    module = onnx_module(nodes, [("x", [2, 4, 6, 6])], [("y", [2, 8, 6, 6])], inits)
    before = run(module)
    ctx = apply(module, "fold-batchnorm")
    assert op_names(module) == Counter({"const": 2, "conv2d": 1, "relu": 1, "return": 1})
    assert [r.reason for r in ctx.remarks] == ["folded"] * 3
    check_same(before, run(module))


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_and_matmul_bn_onnx(trans_b: int) -> None:
    """Gemm (alpha, beta, trans_b, a row-vector c) and MatMul, each followed by BatchNormalization."""
    rng = np.random.default_rng(trans_b)
    w = rng.standard_normal((6, 5))
    inits = {
        "w": w.T if trans_b else w,
        "c": rng.standard_normal((1, 5)),
        "w2": rng.standard_normal((5, 3)),
        **bn_params(rng, "g", 5),
        **bn_params(rng, "h", 3),
    }
    nodes = [
        helper.make_node("Gemm", ["x", "w", "c"], ["g"], alpha=0.5, beta=2.0, transB=trans_b),
        bn_node("g", "g", "gn"),
        helper.make_node("MatMul", ["gn", "w2"], ["mm"]),
        bn_node("mm", "h", "y"),
    ]
    module = onnx_module(nodes, [("x", [4, 6])], [("y", [4, 3])], inits)
    before = run(module)
    apply(module, "fold-batchnorm")
    names = op_names(module)
    assert "batch_norm" not in names and names["gemm"] == 1 and names["matmul"] == 1 and names["add"] == 1
    check_same(before, run(module))


def test_standalone_bn_becomes_mul_add() -> None:
    """A batch_norm after a multi-use conv becomes x * s + t by constants, with a multi-use remark; one after
    an argument (no-producer) too."""
    rng = np.random.default_rng(3)
    inits = {"w": rng.standard_normal((3, 3, 1, 1)), **bn_params(rng, "a", 3), **bn_params(rng, "b", 3)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        bn_node("c", "a", "y1"),
        helper.make_node("Relu", ["c"], ["y2"]),
        bn_node("x", "b", "y3"),
    ]
    module = onnx_module(nodes, [("x", [1, 3, 4, 4])], [(y, [1, 3, 4, 4]) for y in ("y1", "y2", "y3")], inits)
    before = run(module)
    ctx = apply(module, "fold-batchnorm")
    names = op_names(module)
    assert "batch_norm" not in names and names["mul"] == 2 and names["add"] == 2
    assert [(r.kind, r.category, r.reason) for r in ctx.remarks] == [
        ("missed", "algebraic", "multi-use"),
        ("missed", "algebraic", "no-producer"),
    ]
    check_same(before, run(module))


def test_decompose_standalone_off() -> None:
    """decompose-standalone=false leaves a batch_norm that cannot fold as it is."""
    text = next(c for c in chunks(LIT / "fold-batchnorm.tsl") if "func @no_producer" in c)
    module = parse_module(text, "t.tsl")
    pm = PassManager([get_pass("fold-batchnorm")(decompose_standalone=False)])
    pm.run(module)
    assert op_names(module)["batch_norm"] == 1
    assert [r.reason for r in pm.ctx.remarks] == ["no-producer"]


def test_resnet50_fold_batchnorm(tmp_path: Path) -> None:
    """Every batch_norm of a random-weight resnet50 folds into its conv; outputs and logits still match."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from prepare_demo import prepare
    finally:
        sys.path.pop(0)
    prepare("resnet50", str(tmp_path))
    module = import_model((tmp_path / "resnet50.onnx").read_bytes(), "resnet50.onnx")
    func = module.funcs[0]
    assert op_names(module)["batch_norm"] == 53
    softmax = next(op for op in module.walk() if op.name == "softmax")
    x = np.random.default_rng(1).standard_normal(func.args[0].type.dims).astype(np.float32)

    def outputs() -> list[np.ndarray]:  # the probabilities and the logits
        ret = func.return_op
        assert ret is not None
        ret.set_operands([*ret.operands, softmax.operands[0]])
        try:
            return run_func(module, func, [x])
        finally:
            ret.set_operands(ret.operands[:-1])

    before = outputs()
    ctx = apply(module, "fold-batchnorm")
    assert "batch_norm" not in op_names(module)
    assert len(ctx.remarks) == 53 and all(r.kind == "passed" for r in ctx.remarks)
    after = outputs()
    assert float(np.ptp(before[1])) > 1e-3
    for a, b in zip(after, before, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
    os.remove(tmp_path / "resnet50.onnx")


# fold-pad --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("consumer", ["Conv", "MaxPool", "AveragePool"])
def test_pad_into_consumer_onnx(consumer: str) -> None:
    """An ONNX Pad before Conv (0), MaxPool (-inf) or AveragePool (0, count_include_pad) folds away."""
    rng = np.random.default_rng(0)
    inits = {"w": rng.standard_normal((2, 3, 3, 3))}
    value = -np.inf if consumer == "MaxPool" else 0.0
    pad_inits = {"pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "v": np.array(value, np.float32)}
    nodes = [helper.make_node("Pad", ["x", "pads", "v"], ["p"], mode="constant")]
    if consumer == "Conv":
        nodes.append(helper.make_node("Conv", ["p", "w"], ["y"], strides=[2, 1]))
    elif consumer == "MaxPool":
        nodes.append(helper.make_node("MaxPool", ["p"], ["y"], kernel_shape=[3, 3], strides=[2, 2]))
    else:
        nodes.append(helper.make_node("AveragePool", ["p"], ["y"], kernel_shape=[3, 3], count_include_pad=0))
    out = {"Conv": [1, 2, 4, 8], "MaxPool": [1, 3, 4, 4], "AveragePool": [1, 3, 8, 8]}[consumer]
    module = onnx_module(
        nodes,
        [("x", [1, 3, 7, 7])],
        [("y", out)],
        {
            "w": inits["w"],
            "pads": numpy_helper.from_array(pad_inits["pads"], "pads"),
            "v": numpy_helper.from_array(pad_inits["v"], "v"),
        },
    )
    assert op_names(module)["pad"] == 1
    before = run(module)
    apply(module, "fold-pad")
    assert "pad" not in op_names(module)
    check_same(before, run(module))


# cancel-transposes ---------------------------------------------------------------------------------------
def test_nhwc_sandwich_onnx() -> None:
    """Transpose to NHWC, Relu, Add of an NHWC bias, Mul by a splat, Transpose back: no transposes left."""
    rng = np.random.default_rng(5)
    inits = {"b": rng.standard_normal(4), "h": np.array([0.5])}
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Relu", ["t"], ["r"]),
        helper.make_node("Add", ["r", "b"], ["a"]),
        helper.make_node("Mul", ["a", "h"], ["m"]),
        helper.make_node("Transpose", ["m"], ["y"], perm=[0, 3, 1, 2]),
    ]
    module = onnx_module(nodes, [("x", [2, 4, 3, 5])], [("y", [2, 4, 3, 5])], inits)
    before = run(module)
    ctx = apply(module, "cancel-transposes")
    assert "transpose" not in op_names(module)
    assert [r.reason for r in ctx.remarks] == ["sunk"]
    check_same(before, run(module))


def test_fan_out_sinking() -> None:
    """A transpose with two elementwise branches, each ending in the inverse transpose, and a third user
    that needs it: three transposes become one."""
    text = """
func @f(%x: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4x2x3xf32>) {
  %0 = transpose %x {perm = [2, 0, 1]} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %c = const {value = dense<[[[1.0, 2.0, 3.0]]]> : tensor<1x1x3xf32>} : () -> tensor<1x1x3xf32>
  %1 = sub %c, %0 : (tensor<1x1x3xf32>, tensor<4x2x3xf32>) -> tensor<4x2x3xf32>
  %2 = tanh %1 : (tensor<4x2x3xf32>) -> tensor<4x2x3xf32>
  %3 = transpose %2 {perm = [1, 2, 0]} : (tensor<4x2x3xf32>) -> tensor<2x3x4xf32>
  %4 = mul %0, %0 : (tensor<4x2x3xf32>, tensor<4x2x3xf32>) -> tensor<4x2x3xf32>
  %5 = transpose %4 {perm = [1, 2, 0]} : (tensor<4x2x3xf32>) -> tensor<2x3x4xf32>
  %6 = reduce_max %0 {axes = [0], keepdims = true} : (tensor<4x2x3xf32>) -> tensor<1x2x3xf32>
  %7 = add %0, %6 : (tensor<4x2x3xf32>, tensor<1x2x3xf32>) -> tensor<4x2x3xf32>
  return %3, %5, %7 : tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4x2x3xf32>
}
"""
    module = parse_module(text, "t.tsl")
    before = run(module)
    apply(module, "cancel-transposes")
    assert op_names(module)["transpose"] == 1
    check_same(before, run(module))


def _ty(shape: tuple[int, ...]) -> str:
    return f"tensor<{'x'.join(map(str, shape))}xf32>"


@pytest.mark.parametrize("seed", range(40))
def test_reshape_between_transposes_keeps_results(seed: int) -> None:
    """transpose -> reshape (merging a run of dims, or splitting one, or adding a unit dim) -> transpose,
    random shapes and permutations: the hoisted form computes the same, and when the second transpose moves
    the merged or split dims whole the two transposes become one."""
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(2, 5))
    x = tuple(int(d) for d in rng.integers(1, 5, rank))
    p = [int(i) for i in rng.permutation(rank)]
    t = tuple(x[i] for i in p)
    kind = ["merge", "split", "unit"][seed % 3]
    if kind == "merge":
        a = int(rng.integers(0, rank - 1))
        z = (*t[:a], t[a] * t[a + 1], *t[a + 2 :])
    elif kind == "split":
        a = int(rng.integers(0, rank))
        z = (*t[:a], 2, t[a] // 2, *t[a + 1 :]) if t[a] % 2 == 0 else (*t[:a], t[a], 1, *t[a + 1 :])
    else:
        z = (1, *t)
    q = [int(i) for i in rng.permutation(len(z))]
    w = tuple(z[i] for i in q)
    text = f"""
func @f(%x: {_ty(x)}) -> {_ty(w)} {{
  %0 = transpose %x {{perm = {p}}} : ({_ty(x)}) -> {_ty(t)}
  %1 = reshape %0 {{shape = {list(z)}}} : ({_ty(t)}) -> {_ty(z)}
  %2 = transpose %1 {{perm = {q}}} : ({_ty(z)}) -> {_ty(w)}
  return %2 : {_ty(w)}
}}
"""
    module = parse_module(text, "t.tsl")
    before = run(module, seed)
    apply(module, "cancel-transposes")
    check_same(before, run(module, seed))
    if block_perm(t, z, q) is not None:
        assert op_names(module)["transpose"] <= 1


# simplify-broadcasts -------------------------------------------------------------------------------------
def test_broadcast_constant_shrinks() -> None:
    """A 3x4x5 constant equal along dims 0 and 2 shrinks to 1x4x1 and the results stay the same."""
    rng = np.random.default_rng(2)
    col = rng.standard_normal((1, 4, 1))
    big = np.broadcast_to(col, (3, 4, 5))
    inits = {"c": big, "d": np.full((3, 4, 5), 0.25)}
    nodes = [helper.make_node("Add", ["x", "c"], ["a"]), helper.make_node("Div", ["a", "d"], ["y"])]
    module = onnx_module(nodes, [("x", [3, 4, 5])], [("y", [3, 4, 5])], inits)
    before = run(module)
    p = get_pass("simplify-broadcasts")()
    PassManager([p]).run(module)
    shapes = sorted(op.result.type.dims for op in module.walk() if op.name == "const")
    assert shapes == [(1, 1, 1), (1, 4, 1)]
    assert p.stats == {"num-constants-shrunk": 2, "elements-saved": 2 * 60 - 5}
    check_same(before, run(module))


# merge-sibling-matmuls -----------------------------------------------------------------------------------
def qkv_module(rng: np.random.Generator, with_bias: bool = True) -> Module:
    """An ONNX attention block's Q, K and V projections of one [1, 8, 16] input (V narrower, 8 columns),
    each with a bias Add unless `with_bias` is false, feeding Q K^T and a product with V."""
    inits = {f"w{p}": rng.standard_normal((16, 16 if p != "v" else 8)) for p in "qkv"}
    inits |= {f"b{p}": rng.standard_normal(16 if p != "v" else 8) for p in "qkv"} if with_bias else {}
    nodes = []
    for p in "qkv":
        nodes.append(helper.make_node("MatMul", ["x", f"w{p}"], [f"m{p}" if with_bias else p]))
        if with_bias:
            nodes.append(helper.make_node("Add", [f"m{p}", f"b{p}"], [p]))
    nodes += [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("MatMul", ["s", "v"], ["y"]),
    ]
    return onnx_module(nodes, [("x", [1, 8, 16])], [("y", [1, 8, 8]), ("q", [1, 8, 16])], inits)


@pytest.mark.parametrize("with_bias", [True, False])
def test_qkv_projections_merge(with_bias: bool) -> None:
    """Three projections of one input become one matmul (and one add) and a split, with the same results."""
    module = qkv_module(np.random.default_rng(7), with_bias)
    before = run(module)
    p = get_pass("merge-sibling-matmuls")(column_align=8)
    pm = PassManager([p])
    pm.run(module)
    names = op_names(module)
    assert names["matmul"] == 3 and names["split"] == 1 and names["add"] == (1 if with_bias else 0)
    split = next(op for op in module.walk() if op.name == "split")
    assert split.attrs == {"axis": 2, "sizes": [16, 16, 8]}
    assert p.stats == {"num-merged": 3, "num-groups": 1}
    assert [(r.kind, r.reason) for r in pm.ctx.remarks] == [("passed", "merged")]
    check_same(before, run(module))


def test_qkv_merge_too_large_and_O2() -> None:
    """max-columns below the merged width refuses the merge; -O2 (column-align 16) merges Q and K, leaves
    V's 8 columns out, and keeps -O0's results."""
    from tessel.passes.pipeline import O_LEVELS, parse_pipeline

    module = qkv_module(np.random.default_rng(8))
    before = run(module)
    pm = PassManager([get_pass("merge-sibling-matmuls")(max_columns=39, column_align=8)])
    pm.run(module)
    assert "split" not in op_names(module)
    assert [(r.kind, r.reason) for r in pm.ctx.remarks] == [("missed", "too-large")]
    pm = PassManager(parse_pipeline(O_LEVELS[2]))
    pm.run(module)
    assert ("missed", "misaligned") in [(r.kind, r.reason) for r in pm.ctx.remarks]
    merged = [op for op in module.walk() if op.name == "matmul" and op.operands[1].type.dims == (16, 32)]
    assert len(merged) == 1
    check_same(before, run(module))


def test_passes_are_idempotent_on_lit_cases() -> None:
    """A second run of each pass changes nothing."""
    from tessel.ir.printer import to_text

    for name in PASSES:
        for text in chunks(LIT / f"{name}.tsl"):
            module = parse_module(text, f"{name}.tsl")
            apply(module, name)
            once = to_text(module)
            apply(module, name)
            assert to_text(module) == once, name
