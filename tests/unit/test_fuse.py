"""The `fuse` pass on whole models and on the fused-region contract the OpenCL `kernel` template relies on.

Random-weight copies of the light resnet50 and squeezenet (examples/prepare_demo.py, then tessel-import)
run on the numpy target before and after `canonicalize,fold-constants,cse,dce,fuse` with the same
results; every region keeps to the contract of its kind; and every elementwise op left outside a region
is named, with its ONNX location, by a `missed` remark (`tessel-opt --remarks-missed`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tessel.ir.core import Module, Op
from tessel.ir.interpreter import random_inputs, run_func
from tessel.ir.ops.registry import broadcast_shapes, get_op, norm_axis
from tessel.ir.parser import parse_module
from tessel.ir.printer import print_module
from tessel.passes.fuse_rules import (
    EPILOGUE_ANCHORS,
    REQUANTIZED_ANCHORS,
    ROW_ANCHORS,
    channel_factor,
    global_pool,
    is_anchor,
    is_channel_shuffle,
    is_table_lookup,
    pixel_fc,
)
from tessel.passes.manager import PassManager
from tessel.passes.pipeline import parse_pipeline
from tessel.passes.remarks import Remark

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CLEANUP = "canonicalize,fold-constants,cse,dce"
KERNELS = {"resnet50": 49, "squeezenet": 26}
"""Regions formed after cleanup alone (batch_norm unfolded): resnet50 53 batch_norm+relu(+add) regions
less 4 projection-shortcut batch_norms whose add joined the other branch; squeezenet 26 conv+relu."""


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("fuse-models")
    paths = {}
    for name in KERNELS:
        subprocess.run(
            [sys.executable, str(ROOT / "examples" / "prepare_demo.py"), name, str(out)],
            check=True,
            capture_output=True,
        )
        tsl = out / f"{name}.tsl"
        subprocess.run([str(BIN / "tessel-import"), str(out / f"{name}.onnx"), "-o", str(tsl)], check=True)
        paths[name] = tsl
    return paths


def load(path: Path) -> Module:
    """The module, returning the logits (the softmax's input) so the comparison is not a saturated
    one-hot vector."""
    m = parse_module(path.read_bytes(), str(path))
    f = m.funcs[0]
    ret = f.return_op
    assert ret is not None
    for i, v in enumerate(ret.operands):
        if v.op is not None and v.op.name == "softmax":
            ret.set_operand(i, v.op.operands[0])
            f.result_types[i] = v.op.operands[0].type
    return m


def run_pipeline(m: Module, pipeline: str) -> PassManager:
    pm = PassManager(parse_pipeline(pipeline))
    pm.run(m)  # verifies after each pass
    return pm


def kernels(m: Module) -> list[Op]:
    return [op for op in m.funcs[0].block.ops if op.name == "kernel"]


def unexplained(m: Module, remarks: list[Remark]) -> list[Op]:
    """Elementwise ops outside every region that no `missed` remark names with their location."""
    named: set[str] = set()
    for r in remarks:
        if r.kind == "missed" and r.category == "fusion":
            named.update(r.locs)
    out = []
    for op in m.funcs[0].block.ops:
        opdef = get_op(op.name)
        if opdef is not None and opdef.has("elementwise") and not set(op.loc) <= named:
            out.append(op)
    return out


def check_contract(k: Op) -> None:
    """The fused-region contract of ir/ops/kernel.py for the region of `k`."""
    body = k.regions[0].block
    ops = [o for o in body.ops if o.name not in ("yield", "const")]
    for o in body.ops:
        if o.name == "const":
            assert o.attrs["value"].__class__.__name__ == "DenseAttr", "only dense<> literals live inside"
    ew = [o for o in ops if get_op(o.name).has("elementwise")]  # type: ignore[union-attr]
    kind = k.attrs["kind"]
    if kind == "elementwise":
        assert ew == ops
        shape = ops[-1].result.type.shape
        for o in ops:
            assert o.result.type.shape == shape
            for v in o.operands:
                assert broadcast_shapes(v.type.shape, shape) == shape
        return
    if kind == "gate":  # a global pool, then FCs on its features, each with a chain on its result
        assert global_pool(ops[0]) and ops[0].operands[0] in body.args and ops[1].name == "conv2d"
        last = fc = ops[0]
        for o in ops[1:]:
            if o.name == "conv2d":  # reads the end of the chain before it
                assert pixel_fc(o, 0) and o.operands[0] is last.result
                assert all(v in body.args for v in o.operands[1:])
                fc = o
            else:  # of its FC's shape and type, reading the chain, args or literals
                assert o in ew and o.result.type == fc.result.type
            last = o
        assert list(body.ops[-1].operands) == [last.result]
        return
    if kind == "epilogue" and ops[0].name == "layer_norm":  # the norm of a matmul's or gemm's A
        ln, reads = ops[0], ops[1]
        if reads.name == "reshape":
            assert reads.operands[0] is ln.result
            assert reads.result.type.dims[-1] == ln.result.type.dims[-1]
            reads = ops[2]
        assert reads.name in ROW_ANCHORS and reads.operands[0] is ops[ops.index(reads) - 1].result
        assert ln.operands[0] in body.args and len(ln.result.uses) == 1
        assert norm_axis(ln.attrs.get("axis", -1), ln.result.type.rank) == ln.result.type.rank - 1
        ops = ops[ops.index(reads):]
    if kind == "epilogue" and [o.name for o in ops].count("conv2d") == 2:  # an expansion, then a depthwise
        first = next(i for i, o in enumerate(ops) if o.name == "conv2d")
        conv, pk = ops[first], ops[first + 1]
        u = next(i for i, o in enumerate(ops) if o.name == "unpack" and i > first)
        dw = ops[u + 1]
        assert first == 0 or first == 1 and ops[0].name == "unpack" and ops[0].result is conv.operands[0]
        assert conv.operands[1].type.dims[2:] == (1, 1)
        assert pk.name == "pack" and pk.operands[0] is conv.result
        assert all(o in ew and o.result.type == pk.result.type for o in ops[first + 2:u])
        assert dw.name == "conv2d" and dw.operands[0] is ops[u].result
        assert dw.attrs["groups"] == dw.operands[0].type.dims[1]
        ops = ops[u + 1:]  # the depthwise conv's own contract from here
    anchors = [o for o in ops if is_anchor(o)]
    norms = [o for o in anchors[1:] if o.name == "layer_norm"]
    row_norm = kind == "epilogue" and anchors[0].name in ROW_ANCHORS
    if row_norm and norms and norms == anchors[1:2] == anchors[1:]:
        anchors = anchors[:1]  # a matmul/gemm epilogue may go through one layer_norm over the last axis
        last = anchors[0].result.type.rank - 1
        assert norm_axis(norms[0].attrs.get("axis", -1), norms[0].result.type.rank) == last
    assert len(anchors) == 1, f"{kind} region with anchors {anchors}"
    (anchor,) = anchors
    assert kind == ("epilogue" if anchor.name in EPILOGUE_ANCHORS else "reduction")
    i = ops.index(anchor)
    before, after = ops[:i], ops[i + 1 :]
    if kind == "epilogue":
        readers = ("unpack", "reshape", "layer_norm", "resize", "mul")  # what an anchor operand comes through
        assert all(v in body.args or (v.op is not None and v.op.name in readers) for v in anchor.operands)
        assert [o.name for o in before] in (
            [], ["unpack"], ["reshape", "transpose", "reshape"], ["resize"], ["mul"])
        if before and before[0].name == "mul":  # a per-channel scale the conv folds into its weights
            assert anchor.name == "conv2d" and anchor.operands[0] is before[0].result
            assert channel_factor(before[0]) is not None and all(v in body.args for v in before[0].operands)
        elif before:  # an NCHWc unpack, a channel shuffle before a depthwise conv, a nearest resize of H, W
            assert before[0].operands[0] is body.args[0] and anchor.operands[0] is before[-1].result
            assert len(before) == 1 or is_channel_shuffle(anchor.operands[0])
            if before[0].name == "resize":
                r = before[0]
                assert anchor.name == "conv2d" and r.attrs.get("mode", "nearest") == "nearest"
                assert r.operands[0].type.dims[:2] == r.result.type.dims[:2] and len(r.result.uses) == 1
    else:
        for o in before:
            assert o.name == "unpack" or o.result.type.shape == anchor.operands[0].type.shape
    prev = anchor
    if after and after[0].name == "pack":
        assert after[0].operands[0] is anchor.result and after[0].attrs["inner_dims_pos"] == [1]
        prev, after = after[0], after[1:]
    split = after[-1] if after and after[-1].name == "split" else None
    if split is not None:  # a split along the last axis ends a matmul/gemm epilogue: its pieces the yields
        assert anchor.name in ROW_ANCHORS and split.attrs["axis"] in (-1, split.operands[0].type.rank - 1)
        after = after[:-1]
    chain = {id(prev.result)}  # the values computed from the anchor's: a chain, or a DAG that reconverges
    for o in after:
        assert o in ew or (o in norms and o.operands[0] is prev.result) or is_table_lookup(o, anchor)
        assert any(id(v) in chain for v in o.operands), "each op reads the chain"
        if anchor.name in REQUANTIZED_ANCHORS:  # 8-bit values and f32 between them (dequantize, quantize)
            assert o.result.type.shape == prev.result.type.shape, "the chain keeps its shape"
            assert o.result.type.dtype in (anchor.result.type.dtype, "f32"), "8-bit or f32 values"
        else:
            assert o.result.type == prev.result.type, "the chain keeps its shape and element type"
        for v in o.operands:
            assert id(v) in chain or v in body.args or (v.op is not None and v.op.name == "const")
        chain.add(id(o.result))
        prev = o
    if split is not None:
        assert split.operands[0] is prev.result and list(body.ops[-1].operands) == list(split.results)
        return
    (y,) = body.ops[-1].operands
    assert y is prev.result, "a chain region yields its last value only"
    assert y.type.dtype == anchor.result.type.dtype, "an epilogue ends in its anchor's element type"


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_model_results_unchanged_and_regions_keep_the_contract(models: dict[str, Path], name: str) -> None:
    m = load(models[name])
    run_pipeline(m, CLEANUP)
    f = m.funcs[0]
    args = list(random_inputs(f, seed=3).values())
    before = run_func(m, f, args)
    pm = run_pipeline(m, "fuse")
    after = run_func(m, m.funcs[0], args)
    for b, a in zip(before, after, strict=True):
        assert float(np.ptp(b)) > 0, "the logits should differ between classes"
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    ks = kernels(m)
    assert len(ks) == KERNELS[name]
    stats = pm.passes[0].stats
    assert stats["num-kernels"] == len(ks)
    assert stats["num-fused"] == sum(len(k.regions[0].block.ops) - 1 for k in ks)
    assert stats["bytes-saved"] > 0
    for k in ks:
        check_contract(k)
        names = [o.loc for o in k.regions[0].block.ops if o.name != "const"]
        assert list(k.loc) == list(dict.fromkeys(n for loc in names for n in loc)), "fused location"
    assert not unexplained(m, pm.ctx.remarks)
    passed = [r for r in pm.ctx.remarks if r.kind == "passed" and r.reason == "fused"]
    assert len(passed) == len(ks)


def tool_remarks(args: list[str], out: Path) -> tuple[Module, list[Remark]]:
    """Run tessel-opt with --remarks-missed in JSON lines; the module it wrote and its remarks."""
    cmd = [str(BIN / "tessel-opt"), *args, "--remarks-missed", "--remarks-format=jsonl", "--elide-resources"]
    proc = subprocess.run([*cmd, "-o", str(out)], check=True, capture_output=True, text=True)
    remarks = [
        Remark(d["pass"], d["kind"], d["category"], d["reason"], d["message"], d["ops"], d["locs"])
        for d in map(json.loads, proc.stderr.splitlines())
    ]
    return parse_module(out.read_bytes(), str(out)), [r for r in remarks if r.pass_name == "fuse"]


def test_remarks_missed_explain_every_unfused_elementwise_op(models: dict[str, Path], tmp_path: Path) -> None:
    """With the batch_norms left unfolded and fusion stopped early (max-ops=2), many adds and relus stay
    outside; each is named by a missed remark with its location."""
    path = str(models["resnet50"])
    m, remarks = tool_remarks([f"--pass-pipeline={CLEANUP},fuse{{max-ops=2}}", path], tmp_path / "r.tsl")
    assert {r.kind for r in remarks} == {"missed"}
    assert [op for op in m.funcs[0].block.ops if op.name in ("relu", "add")], "some should stay outside"
    assert not unexplained(m, remarks)
    assert "too-large" in {r.reason for r in remarks}


def test_resnet50_at_O2(models: dict[str, Path], tmp_path: Path) -> None:
    """`tessel-opt -O2 --remarks-missed` on resnet50 explains every elementwise op that did not fuse, and
    leaves no more kernels than onnxruntime's optimized graph has nodes (59)."""
    from tessel.passes.analysis import kernel_count

    m, remarks = tool_remarks(["-O2", str(models["resnet50"])], tmp_path / "r.tsl")
    assert not unexplained(m, remarks)
    assert kernel_count(m) <= 59
    for k in kernels(m):
        check_contract(k)


SYNTHETIC = """
func @f(%x: tensor<2x8xf32>, %y: tensor<8xf32>, %a: tensor<2x4xf32>, %b: tensor<2x4xf32>)
    -> (tensor<2x8xf32>, tensor<8x2xf32>, tensor<2x8xf32>) {
  %n = neg %y : (tensor<8xf32>) -> tensor<8xf32> loc("onnx:n0")
  %s = add %x, %n : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32> loc("onnx:n1")
  %m = reduce_max %s {axes = [1], keepdims = true} : (tensor<2x8xf32>) -> tensor<2x1xf32> loc("onnx:n2")
  %d = sub %s, %m : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32> loc("onnx:n3")
  %e = exp %d : (tensor<2x8xf32>) -> tensor<2x8xf32> loc("onnx:n4")
  %c = concat %a, %b {axis = 1} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32> loc("onnx:n5")
  %r = relu %c : (tensor<2x8xf32>) -> tensor<2x8xf32> loc("onnx:n6")
  %t = transpose %r {perm = [1, 0]} : (tensor<2x8xf32>) -> tensor<8x2xf32> loc("onnx:n7")
  %g = sigmoid %s : (tensor<2x8xf32>) -> tensor<2x8xf32> loc("onnx:n8")
  %h = mul %g, %e : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32> loc("onnx:n9")
  return %h, %t, %s : tensor<2x8xf32>, tensor<8x2xf32>, tensor<2x8xf32>
}
"""


@pytest.mark.parametrize("recompute", [False, True])
def test_elementwise_dag_with_reduction_cycle(recompute: bool) -> None:
    """`add` feeds both a reduction and, around it, the `sub` after it: one region cannot hold both ends
    of that path, so the add is yielded or (recompute=true) cloned; results stay the same either way."""
    m = parse_module(SYNTHETIC, "synthetic.tsl")
    f = m.funcs[0]
    args = list(random_inputs(f, seed=1).values())
    before = run_func(m, f, args)
    pm = run_pipeline(m, f"fuse{{recompute={'true' if recompute else 'false'}}}")
    after = run_func(m, m.funcs[0], args)
    for b, a in zip(before, after, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    for k in kernels(m):
        check_contract(k)
    assert not unexplained(m, pm.ctx.remarks)
    reasons = {(r.kind, r.reason) for r in pm.ctx.remarks}
    assert ("missed", "no-partner") in reasons  # the relu between concat and transpose
    assert ("missed", "reduction-axis") in reasons  # neg's 8 is not the reduction input's 2x8
    if recompute:
        assert ("passed", "recomputed") in reasons
    else:
        assert ("missed", "would-recompute") in reasons


def test_fuse_is_deterministic_and_idempotent() -> None:
    texts = []
    for _ in range(2):
        m = parse_module(SYNTHETIC, "synthetic.tsl")
        run_pipeline(m, "fuse")
        texts.append(module_text(m))
    assert texts[0] == texts[1]
    m = parse_module(texts[0], "again.tsl")
    pm = run_pipeline(m, "fuse")
    assert module_text(m) == texts[0]
    assert pm.passes[0].stats.get("num-kernels", 0) == 0


def module_text(m: Module) -> str:
    import io

    buf = io.StringIO()
    print_module(m, buf)
    return buf.getvalue()


LIT = [ROOT / "lit_tests" / "passes" / name for name in ("fuse.tsl", "fuse-remarks.tsl")]
CASES = [(path, i, chunk) for path in LIT for i, chunk in enumerate(path.read_text().split("// -----\n"))]


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize(("path", "index", "chunk"), CASES, ids=[f"{p.stem}-{i}" for p, i, _ in CASES])
def test_lit_cases_run_the_same_and_keep_the_contract(
    path: Path, index: int, chunk: str, recompute: bool
) -> None:
    m = parse_module(chunk, path.name)
    f = m.funcs[0]
    args = list(random_inputs(f, seed=index, sizes={"N": 3, "H": 5, "W": 6, "M": 4}).values())  # @dynamic*
    before = run_func(m, f, args)
    pm = run_pipeline(m, f"fuse{{recompute={'true' if recompute else 'false'}}}")
    after = run_func(m, m.funcs[0], args)
    for b, a in zip(before, after, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for k in kernels(m):
        check_contract(k)
    assert not unexplained(m, pm.ctx.remarks)
