"""tessel.compile's optimizer: the -O pipeline without per-pass verifying and snapshots (tessel-opt keeps
them), the result verified once; invalid IR is still an internal error, and a crash still names its pass."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tessel import api
from tessel.ir.parser import parse_module
from tessel.passes import pipeline
from tessel.passes.manager import CompilerCrash, Pass, PassContext

TEXT = """module @m {
  func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = relu %x : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"""


@dataclass
class Breaks(Pass):
    """Gives relu a second operand (invalid IR), or raises."""

    NAME = "breaks"
    crash: bool = False

    def run(self, module, ctx: PassContext) -> None:  # noqa: ANN001
        if self.crash:
            raise RuntimeError("boom")
        op = next(o for o in module.funcs[0].block.ops if o.name == "relu")
        op.set_operands([*op.operands, op.operands[0]])


@pytest.mark.parametrize("crash", [False, True])
def test_invalid_ir_and_crashes_are_internal_errors(monkeypatch: pytest.MonkeyPatch, crash: bool) -> None:
    monkeypatch.setattr(pipeline, "parse_pipeline", lambda text: [Breaks(crash=crash)])
    with pytest.raises(CompilerCrash) as caught:
        api.optimize(parse_module(TEXT.encode(), "m.tsl"), 2)
    if crash:
        assert caught.value.pass_name == "breaks" and "boom" in caught.value.message
    else:
        assert caught.value.pass_name == "-O2" and "produced invalid IR" in caught.value.message
    assert caught.value.reproducer is None  # tessel-opt writes those


def test_the_pipeline_keeps_no_snapshots_and_verifies_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from tessel.passes import manager

    ran: list[str] = []

    class Spy(Pass):
        NAME = "spy"

        def run(self, module, ctx: PassContext) -> None:  # noqa: ANN001
            ran.append(self.NAME)

    def no_snapshot(self, module):  # noqa: ANN001, ANN202
        raise AssertionError("a snapshot of the IR before a pass")

    verified: list[object] = []
    real_verify = manager.verify
    monkeypatch.setattr(pipeline, "parse_pipeline", lambda text: [Spy(), Spy()])
    monkeypatch.setattr(manager.PassManager, "_snapshot", no_snapshot)
    monkeypatch.setattr(manager, "verify", lambda m: verified.append(m) or real_verify(m))
    module = parse_module(TEXT.encode(), "m.tsl")
    assert api.optimize(module, 2) is module and ran == ["spy", "spy"]
    assert verified == []  # not after each pass (the one verify at the end is api's own)
