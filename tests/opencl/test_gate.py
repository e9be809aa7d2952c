"""The `gate` kernel: a global pool and the FCs on its features (squeeze-excitation) as one launch, on a CPU
(one work-item per image, private arrays) and as a GPU runs it (work-items sharing each phase, barriers
between), checked against the numpy interpreter."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tessel.ir.interpreter import run_func
from tessel.ir.parser import parse_module
from tessel.passes.manager import PassManager
from tessel.passes.pipeline import parse_pipeline
from tessel.targets.opencl.lower import lower_module
from tessel.targets.opencl.runtime import Executable

from .conftest import here


def T(*dims: int) -> str:
    return f"tensor<{'x'.join(map(str, dims))}xf32>"


def gate_func(n: int, c: int, hw: int, s: int, pool: str, act: str, out: str, bias: bool) -> str:
    """x -> pool -> FC c->s (+ bias) -> act -> FC s->c (+ bias) -> out, as a func of x and the weights."""
    x, p, h, g = T(n, c, hw, hw), T(n, c, 1, 1), T(n, s, 1, 1), T(n, c, 1, 1)
    pool_op = (f"%p = {pool} %x : ({x}) -> {p}" if pool.startswith("global") else
               f"%p = {pool} %x {{axes = [-1, -2], keepdims = true}} : ({x}) -> {p}")
    b1, b2 = (", %b1", ", %b2") if bias else ("", "")
    t1, t2 = (f", {T(s)}", f", {T(c)}") if bias else ("", "")
    acts = {"relu": [f"%a = relu %h : ({h}) -> {h}"],
            "silu": [f"%sg = sigmoid %h : ({h}) -> {h}", f"%a = mul %h, %sg : ({h}, {h}) -> {h}"]}
    outs = {"sigmoid": f"%y = sigmoid %e : ({g}) -> {g}",
            "hard_sigmoid": f"%y = hard_sigmoid %e {{alpha = 0.2, beta = 0.5}} : ({g}) -> {g}"}
    lines = [pool_op,
             f"%h = conv2d %p, %w1{b1} : ({p}, {T(s, c, 1, 1)}{t1}) -> {h}", *acts[act],
             f"%e = conv2d %a, %w2{b2} : ({h}, {T(c, s, 1, 1)}{t2}) -> {g}", outs[out],
             f"return %y : {g}"]
    params = [f"%x: {x}", f"%w1: {T(s, c, 1, 1)}", f"%w2: {T(c, s, 1, 1)}"]
    params += [f"%b1: {T(s)}", f"%b2: {T(c)}"] if bias else []
    body = "\n".join(f"    {ln}" for ln in lines)
    return f"module @m {{\n  func @main({', '.join(params)}) -> {g} {{\n{body}\n  }}\n}}\n"


CASES = [
    # n, c, hw, s, pool, act, out, bias
    (1, 96, 14, 24, "reduce_mean", "relu", "hard_sigmoid", True),  # MobileNetV3's
    (2, 40, 7, 10, "global_avg_pool", "silu", "sigmoid", False),  # EfficientNet's, two images, tails
    (1, 20, 3, 4, "global_max_pool", "relu", "sigmoid", True),  # rows shorter than a vector
    (3, 72, 5, 18, "reduce_max", "silu", "hard_sigmoid", True),
]


@pytest.mark.parametrize("cpu", [True, False], ids=["cpu", "gpu-shaped"])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[4]}-n{c[0]}c{c[1]}" for c in CASES])
def test_a_gate_is_one_launch_matching_the_interpreter(case: tuple, cpu: bool) -> None:
    n, c, hw, s = case[:4]
    m = parse_module(gate_func(*case).encode(), "gate.tsl")
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(a.type.dims).astype(np.float32) * (0.5 if i else 1.0)
              for i, a in enumerate(m.funcs[0].args)]
    want = run_func(m, m.funcs[0], inputs)
    PassManager(parse_pipeline("fuse")).run(m)
    ops = list(m.funcs[0].block.ops)
    assert [op.name for op in ops] == ["kernel", "return"] and ops[0].attrs["kind"] == "gate"
    lower_module(m, dataclasses.replace(here(), is_cpu=cpu))
    launches = [op for op in m.funcs[0].block.ops if op.name == "cl.launch"]
    assert len(launches) == 1 and len(launches[0].attrs["kernels"]) == 1
    source = next(op.attrs["source"] for op in m.funcs[0].block.ops if op.name == "cl.program")
    assert ("barrier(" in source) is not cpu
    got = Executable(m, m.funcs[0], execution="pool").run(inputs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_a_gate_runs_cooperatively() -> None:
    """On a CPU the gate has no barrier, so cooperative execution (PoCL's CPU device) takes it as a step."""
    m = parse_module(gate_func(*CASES[1]).encode(), "gate.tsl")
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(a.type.dims).astype(np.float32) for a in m.funcs[0].args]
    want = run_func(m, m.funcs[0], inputs)
    PassManager(parse_pipeline("fuse")).run(m)
    lower_module(m, here())
    exe = Executable(m, m.funcs[0], execution="cooperative")
    for _ in range(3):
        np.testing.assert_allclose(exe.run(inputs)[0], want[0], rtol=1e-5, atol=1e-6)
