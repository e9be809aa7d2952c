"""A test-only pass whose output depends on the string hash seed, loaded with `--load-pass-plugin` (never
registered by the package): it proves that `--check-determinism` catches output that changes between
processes.

`test-nondeterministic` records, on every func, the names of the ops it holds in the iteration order of
a Python set of strings: that order follows PYTHONHASHSEED, the classic way to lose byte-identical output.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessel.ir.core import Module
from tessel.passes.manager import Pass, PassContext, register_pass


@register_pass
@dataclass
class TestNondeterministic(Pass):
    """Test only: store a set of strings, in hash order, as a func attribute."""

    NAME = "test-nondeterministic"

    def run(self, module: Module, ctx: PassContext) -> None:
        for f in module.funcs:
            names = {f"{op.name}.{i}" for i, op in enumerate(f.walk())} | {f"tag{i}" for i in range(8)}
            f.attrs["test.hash_order"] = list(names)  # unordered: the bug this plugin stands for
