"""Random valid modules built from the op registry (modules.py) keep their numbers through every pass and
-O pipeline, checked after each pass as `tessel-opt --validate-each` does (module_check.py). Bounded and
derandomized for `make test`; `make fuzz` (run.py, run_modules.py) runs the same property for minutes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings

from tests.fuzz.module_check import check_module, pass_specs
from tests.fuzz.module_ops import NO_MAKER, all_makers
from tests.fuzz.module_patterns import PATTERN_OPS
from tests.fuzz.modules import ModuleCase, modules

BASE = settings(derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.data_too_large])


@settings(BASE, max_examples=10)
@given(modules(max_steps=10))
def test_random_modules_keep_their_results_through_every_pass(case: ModuleCase) -> None:
    out = check_module(case.text)
    assert not out.findings, f"{case!r}\n" + "\n".join(f"{f}\n{f.reproducer}" for f in out.findings)


def test_every_registered_op_has_a_maker_or_a_reason() -> None:
    """A new op in the registry gets a maker in module_ops.py / module_shape_ops.py, or a NO_MAKER entry."""
    from tessel.ir.ops.registry import load_all

    registry = set(load_all())
    makers = set(all_makers()) - set(PATTERN_OPS)
    assert not makers - registry, f"makers of unknown ops: {sorted(makers - registry)}"
    both, neither = makers & set(NO_MAKER), registry - makers - set(NO_MAKER)
    assert not both, f"ops with a maker and a NO_MAKER reason: {sorted(both)}"
    assert not neither and set(NO_MAKER) <= registry, f"ops with neither: {sorted(neither)}"


@pytest.mark.parametrize("name", sorted(all_makers()))
def test_every_maker_makes_its_op(name: str) -> None:
    """Each maker is reachable and makes its op (a pattern: one of its ops) in a valid module."""
    want = PATTERN_OPS.get(name, frozenset({name}))
    case = find(modules(max_steps=3, ops=[name]), lambda c: bool(want & set(c.ops)),
                settings=settings(BASE, max_examples=100, phases=[Phase.generate]))
    assert want & set(case.ops)


def _broken_pass(monkeypatch: pytest.MonkeyPatch, name: str, body: object) -> None:
    from tessel.passes import manager
    from tessel.passes.manager import Pass

    @dataclasses.dataclass
    class Broken(Pass):
        """A deliberately wrong pass (tests/fuzz/test_fuzz_modules.py)."""

        NAME = name

        def run(self, module: object, ctx: object) -> None:
            body(module)  # type: ignore[operator]

    monkeypatch.setitem(manager._LOADED, name, Broken)


RELU = """func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = relu %x : (tensor<2x3xf32>) -> tensor<2x3xf32> loc("fuzz:relu_0")
  %1 = add %0, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32> loc("fuzz:add_1")
  return %1 : tensor<2x3xf32>
}
"""


def test_property_catches_a_miscompile_and_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass that turns relu into abs is a miscompile, with a reproducer `tessel-opt --run-reproducer`
    replays; a pass that raises is a crash; a correct pass next to them runs clean."""

    def relu_to_abs(module: object) -> None:
        for op in module.walk():  # type: ignore[attr-defined]
            if op.name == "relu":
                op.name = "abs"

    def boom(module: object) -> None:
        raise KeyError("boom")

    _broken_pass(monkeypatch, "fuzz-test-relu-to-abs", relu_to_abs)
    _broken_pass(monkeypatch, "fuzz-test-boom", boom)
    out = check_module(RELU, ["fuzz-test-relu-to-abs", "fuzz-test-boom", "cse"])
    stages = {f.spec: f.stage for f in out.findings}
    assert stages == {"fuzz-test-relu-to-abs": "miscompile", "fuzz-test-boom": "crash"}, out.findings
    assert out.ran == ["cse"]
    miscompile = out.findings[0]
    assert "changed the results" in miscompile.message
    assert miscompile.reproducer.startswith(
        "// tessel-reproducer: --pass-pipeline='fuzz-test-relu-to-abs' --validate-each=0.001,0.0001 --seed=7")
    assert "KeyError: 'boom'" in out.findings[1].message


def test_builtin_passes_only() -> None:
    """Test-only plugins (lit_tests/cli/Inputs/*.py register through register_pass) are never fuzzed."""
    from tessel.passes.manager import BUILTIN_PASSES

    assert {s.split("{")[0] for s in pass_specs()} == set(BUILTIN_PASSES)


@settings(BASE, max_examples=60, phases=[Phase.generate])
@given(modules(max_steps=3, ops=["quantize"]))
def test_the_requantized_product_is_never_a_result(case: ModuleCase) -> None:
    """fold-qdq's integer product may round one step from the float one (module_check.QDQ_TOLERANCE): only
    its dequantized value may be a result (compared within a step), never the i8/u8 one (compared exactly)."""
    from tessel.ir.parser import parse_module

    func = parse_module(case.text, "fuzz.tsl", register_source=False).funcs[0]
    for v in func.return_op.operands:
        producer = v.op.operands[0].op if v.op is not None and v.op.name == "quantize" else None
        assert producer is None or producer.name not in ("matmul", "conv2d"), case.text


def test_a_reproducer_replays_as_its_header_says(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """--replay of a module reproducer checks its pipeline with the tolerance and seed it failed under."""
    from tests.fuzz import run_modules
    from tests.fuzz.module_check import ModuleOutcome

    seen: dict = {}

    def check(text: str, names: object = None, first_only: bool = False, seed: int = 0,
              tol: object = None) -> ModuleOutcome:
        seen.update(names=names, seed=seed, tol=tol)
        return ModuleOutcome(ran=list(names or []))

    monkeypatch.setattr(run_modules, "check_module", check)
    path = tmp_path / "module-1.tsl"
    path.write_text("// tessel-reproducer: --pass-pipeline='fold-qdq' --validate-each=0.001,0.051 --seed=3\n"
                    + RELU)
    assert run_modules.replay_module(path) == 0
    assert seen == {"names": ["fold-qdq"], "seed": 3, "tol": (0.001, 0.051)}
    path.write_text(RELU)  # a whole module: every pass and pipeline, as the fuzzer checked it
    assert run_modules.replay_module(path) == 0
    assert seen["names"] is None and seen["tol"] is None


@settings(BASE, max_examples=60, phases=[Phase.generate])
@given(modules(max_steps=2, ops=["layernorm_expanded"]))
def test_an_f16_layer_norm_has_an_eps_that_bounds_its_gain(case: ModuleCase) -> None:
    """With eps 1e-5, an f16 layer norm over two near-equal values amplifies the f16 reference's own
    rounding past the f16 tolerance, and a pass computing in f32 (emulate-f16, recognize-layernorm) was
    flagged for being more accurate; the maker uses eps 1e-2 in f16."""
    assert "dense<1e-05> : tensor<f16>" not in case.text, case.text


def test_the_f16_layer_norm_that_was_flagged_passes_with_the_makers_eps() -> None:
    """The fuzzer's module (run seed 3642347520) with eps 1e-2: emulate-f16 stays within tolerance."""
    text = """module @fuzz {
  func @main(%x0: tensor<1x2x3x2xf16>) -> tensor<1x2x3x2xf16> {
    %0 = abs %x0 : (tensor<1x2x3x2xf16>) -> tensor<1x2x3x2xf16> loc("fuzz:abs_0")
    %1 = abs %0 : (tensor<1x2x3x2xf16>) -> tensor<1x2x3x2xf16> loc("fuzz:abs_1")
    %2 = sigmoid %1 : (tensor<1x2x3x2xf16>) -> tensor<1x2x3x2xf16> loc("fuzz:sigmoid_2")
    %3 = reduce_mean %2 {axes = [-1]} : (tensor<1x2x3x2xf16>) -> tensor<1x2x3x1xf16> loc("fuzz:reduce_mean_3")
    %4 = sub %2, %3 : (tensor<1x2x3x2xf16>, tensor<1x2x3x1xf16>) -> tensor<1x2x3x2xf16> loc("fuzz:sub_4")
    %5 = const {value = dense<2.0> : tensor<f16>} : () -> tensor<f16> loc("fuzz:const_5")
    %6 = pow %4, %5 : (tensor<1x2x3x2xf16>, tensor<f16>) -> tensor<1x2x3x2xf16> loc("fuzz:pow_6")
    %7 = reduce_mean %6 {axes = [-1]} : (tensor<1x2x3x2xf16>) -> tensor<1x2x3x1xf16> loc("fuzz:reduce_mean_7")
    %8 = const {value = dense<EPS> : tensor<f16>} : () -> tensor<f16> loc("fuzz:const_8")
    %9 = add %7, %8 : (tensor<1x2x3x1xf16>, tensor<f16>) -> tensor<1x2x3x1xf16> loc("fuzz:add_9")
    %10 = sqrt %9 : (tensor<1x2x3x1xf16>) -> tensor<1x2x3x1xf16> loc("fuzz:sqrt_10")
    %11 = div %4, %10 : (tensor<1x2x3x2xf16>, tensor<1x2x3x1xf16>) -> tensor<1x2x3x2xf16> loc("fuzz:div_11")
    return %11 : tensor<1x2x3x2xf16>
  }
}"""
    assert check_module(text.replace("EPS", "1e-05"), ["emulate-f16"]).findings  # the old eps: flagged
    out = check_module(text.replace("EPS", "0.01"), ["emulate-f16", "recognize-layernorm", "-O2"])
    assert not out.findings, "\n".join(map(str, out.findings))
