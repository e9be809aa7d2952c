"""Passes and the pass manager: registration by kebab-case name, typed options, instrumentation.

A pass is a dataclass whose fields are its options (`size_limit: int = 1024` is `{size-limit=1024}`),
with a `NAME`, a docstring whose first line `--list-passes` shows, `STATISTICS` it may bump, and
`run(module, ctx)`. The registry is lazy: a name maps to the module that defines it, imported on use.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import io
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..ir.attributes import format_name
from ..ir.core import Module, Op
from ..ir.diagnostics import Diagnostic, DiagnosticError
from ..ir.printer import Printer, print_module
from ..ir.resources import ResourceTable, write_section
from ..ir.verifier import verify
from .remarks import Remark

BUILTIN_PASSES: dict[str, str] = {
    "canonicalize": "tessel.passes.canonicalize",
    "cse": "tessel.passes.cse",
    "dce": "tessel.passes.dce",
    "fold-constants": "tessel.passes.fold_constants",
    "fold-batchnorm": "tessel.passes.fold_batchnorm",
    "fold-qdq": "tessel.passes.fold_qdq",
    "fold-lookup": "tessel.passes.fold_lookup",
    "convert-precision": "tessel.passes.convert_precision",
    "emulate-f16": "tessel.passes.emulate_f16",
    "fold-pad": "tessel.passes.fold_pad",
    "decompose-conv-transpose": "tessel.passes.decompose_conv_transpose",
    "cancel-transposes": "tessel.passes.cancel_transposes",
    "simplify-broadcasts": "tessel.passes.simplify_broadcasts",
    "merge-sibling-matmuls": "tessel.passes.merge_sibling_matmuls",
    "unflatten-gemm": "tessel.passes.unflatten_gemm",
    "recognize-gelu": "tessel.passes.recognize_gelu",
    "recognize-layernorm": "tessel.passes.recognize_layernorm",
    "recognize-softmax": "tessel.passes.recognize_softmax",
    "recognize-attention": "tessel.passes.recognize_attention",
    "propagate-layout": "tessel.passes.propagate_layout",
    "fuse": "tessel.passes.fuse",
}
_LOADED: dict[str, type[Pass]] = {}


class PassContext:
    """What a pass may use besides the module: diagnostics (errors, remarks) and optimization remarks."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []
        self.remarks: list[Remark] = []
        self.pass_name = ""  # set by the pass manager around each pass
        self.on_remark: Callable[[Remark], None] | None = None  # a tool streams remarks as they come
        self.remarks_as_diagnostics = False  # --verify-diagnostics: `expected-remark {{missed ..}}`

    def remark_passed(self, category: str, reason: str, ops: Sequence[Op], message: str) -> None:
        """Record a transformation the pass made (`--remarks=CATEGORY`)."""
        self._structured("passed", category, reason, ops, message)

    def remark_missed(self, category: str, reason: str, ops: Sequence[Op], message: str) -> None:
        """Record a transformation the pass refused, with a reason code (`--remarks-missed`)."""
        self._structured("missed", category, reason, ops, message)

    def _structured(self, kind: str, category: str, reason: str, ops: Sequence[Op], message: str) -> None:
        r = Remark.make(self.pass_name, kind, category, reason, ops, message)
        self.remarks.append(r)
        if self.remarks_as_diagnostics and ops:
            d = Diagnostic("remark", f"{kind} {reason}: {message}", ops[0].pos, ops[0].loc)
            self.diagnostics.append(d)
        if self.on_remark is not None:
            self.on_remark(r)

    def remark(self, op: Op, message: str) -> None:
        self.diagnostics.append(Diagnostic("remark", f"'{op.name}' op {message}", op.pos, op.loc))

    def warning(self, op: Op, message: str) -> None:
        self.diagnostics.append(Diagnostic("warning", f"'{op.name}' op {message}", op.pos, op.loc))


@dataclass
class Pass:
    """Base of all passes."""

    NAME: ClassVar[str] = ""
    STATISTICS: ClassVar[dict[str, str]] = {}
    stats: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def run(self, module: Module, ctx: PassContext) -> None:
        raise NotImplementedError

    def stat(self, name: str, n: int = 1) -> None:
        assert name in self.STATISTICS, f"{self.NAME}: undeclared statistic {name}"
        self.stats[name] = self.stats.get(name, 0) + n

    @classmethod
    def options(cls) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(cls) if f.init]

    @classmethod
    def summary(cls) -> str:
        return (cls.__doc__ or "").strip().split("\n")[0]

    def spec(self) -> str:
        """This pass with its non-default options as a pipeline element: `fold-constants{size-limit=8}`."""
        opts = [f"{f.name.replace('_', '-')}={_fmt_option(getattr(self, f.name))}" for f in self.options()
                if getattr(self, f.name) != f.default]
        return self.NAME + ("{" + ",".join(opts) + "}" if opts else "")


def _fmt_option(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Register a pass class (used by plugins: `--load-pass-plugin=FILE.py`)."""
    _LOADED[cls.NAME] = cls
    return cls


def pass_names() -> list[str]:
    return sorted(set(BUILTIN_PASSES) | set(_LOADED))


def get_pass(name: str) -> type[Pass] | None:
    cls = _LOADED.get(name)
    if cls is None and name in BUILTIN_PASSES:
        mod = importlib.import_module(BUILTIN_PASSES[name])
        cls = mod.PASS
        _LOADED[name] = cls
    return cls


def load_plugin(path: str) -> None:
    """Run a Python file that registers passes with `register_pass`."""
    spec = importlib.util.spec_from_file_location(f"tessel_plugin_{abs(hash(path))}", path)
    if spec is None or spec.loader is None:
        raise DiagnosticError(Diagnostic("error", f"cannot load pass plugin '{path}'"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses (and pickling) look their module up there
    try:
        spec.loader.exec_module(mod)
    except FileNotFoundError:
        del sys.modules[spec.name]
        raise DiagnosticError(Diagnostic("error", f"pass plugin '{path}' does not exist")) from None


# the pass manager ------------------------------------------------------------------------------------
class CompilerCrash(Exception):
    """A pass raised an unexpected exception or produced invalid IR: an internal compiler error."""

    def __init__(self, pass_name: str, message: str, reproducer: str | None, tb: str):
        self.pass_name = pass_name
        self.message = message
        self.reproducer = reproducer
        self.traceback = tb
        super().__init__(f"pass '{pass_name}' {message}")


class PassCheckFailed(Exception):
    """Raised by an `after_pass` hook (`--validate-each`) when a pass ran cleanly but got the module
    wrong. The manager fills in which application it was and writes a reproducer, as for a crash: the IR
    before the pass, headed by the one-pass pipeline and `replay_flags` (the check that shows it again)."""

    def __init__(self, message: str, replay_flags: str = ""):
        super().__init__(message)
        self.replay_flags = replay_flags
        self.pass_index = 0
        self.pass_spec = ""
        self.reproducer: str | None = None


@dataclass
class Instrumentation:
    verify_each: bool = True
    snapshots: bool = True
    """Keep the IR before each pass (printed) for a crash reproducer. The printing and the verifying
    after each pass were two thirds of -O2's time on densenet121 (1.5 s); `tessel.compile` and `tessel
    compile` turn both off and verify once at the end (a pass that crashes is still named), tessel-opt
    keeps them."""
    print_before: set[str] = field(default_factory=set)
    print_after: set[str] = field(default_factory=set)
    print_after_all: bool = False
    print_after_change: bool = False
    print_before_all: bool = False
    tree_dir: str | None = None
    time_passes: bool = False
    statistics: bool = False
    bisect_limit: int | None = None
    crash_reproducer: str | None = None


def module_text(module: Module, elide: bool = True) -> str:
    buf = io.StringIO()
    print_module(module, buf, elide_resources=elide)
    return buf.getvalue()


class PassManager:
    def __init__(self, passes: list[Pass], inst: Instrumentation | None = None,
                 emit: Callable[[str], None] | None = None):
        self.passes = passes
        self.inst = inst or Instrumentation()
        self.emit = emit or (lambda s: None)  # where dumps and reports go (stderr in the tools)
        self.timings: list[tuple[str, float]] = []
        self.ctx = PassContext()
        self.applications = 0
        self.after_pass: Callable[[Pass, Module], None] | None = None  # e.g. the traffic ledger

    def run(self, module: Module) -> None:
        inst = self.inst
        for index, p in enumerate(self.passes):
            n = index + 1
            if inst.bisect_limit is not None:
                if n > inst.bisect_limit:
                    self.emit(f"BISECT: NOT running pass ({n}) {p.NAME}\n")
                    continue
                self.emit(f"BISECT: running pass ({n}) {p.NAME}\n")
            before = self._snapshot(module) if inst.snapshots or inst.print_after_change else None
            if inst.print_before_all or p.NAME in inst.print_before:
                self._dump(module, f"IR Dump Before {p.NAME}", n, p.NAME, "before")
            t0 = time.perf_counter()
            self.ctx.pass_name = p.NAME
            try:
                p.run(module, self.ctx)
            except DiagnosticError:
                raise
            except MemoryError as e:  # the module is too big for this machine: not a bug, no reproducer
                e.pass_name = p.NAME  # type: ignore[attr-defined]  # for the tools' message
                raise
            except Exception as e:  # an internal compiler error
                raise CompilerCrash(p.NAME, f"crashed: {type(e).__name__}: {e}",
                                    self._reproducer(before, p), traceback.format_exc()) from None
            self.timings.append((p.NAME, time.perf_counter() - t0))
            self.applications += 1
            if inst.verify_each:
                t1 = time.perf_counter()
                errors = verify(module)
                self.timings.append(("(verify)", time.perf_counter() - t1))
                if errors:
                    from ..ir.diagnostics import render

                    msg = "".join(render(d) for d in errors[:5])
                    raise CompilerCrash(
                        p.NAME, f"produced invalid IR:\n{msg}", self._reproducer(before, p), ""
                    )
            after_all = inst.print_after_all or p.NAME in inst.print_after
            if after_all or inst.print_after_change:
                changed = before is None or module_text(module) != before[0]
                if after_all or changed:
                    self._dump(module, f"IR Dump After {p.NAME}" + ("" if changed else " (no change)"),
                               n, p.NAME, "after")
            if self.after_pass is not None:
                try:
                    self.after_pass(p, module)
                except PassCheckFailed as e:  # e.g. --validate-each: the pass changed the numbers
                    e.pass_index, e.pass_spec = n, p.spec()
                    e.reproducer = self._reproducer(before, p, e.replay_flags)
                    raise

    # helpers --------------------------------------------------------------------------------------
    def _snapshot(self, module: Module) -> tuple[str, ResourceTable]:
        table = ResourceTable()
        for r in module.resources:
            table.put(r)
        return module_text(module), table

    def _reproducer(self, before: tuple[str, ResourceTable] | None, p: Pass, flags: str = "") -> str | None:
        if before is None:  # no snapshots kept (Instrumentation.snapshots): tessel-opt makes one
            return None
        path = self.inst.crash_reproducer
        if path is None:
            import tempfile

            fd, path = tempfile.mkstemp(prefix=f"tessel-reproducer-{p.NAME}-", suffix=".tsl")
            os.close(fd)
        text, table = before
        body = text.split("\n{-#\n", 1)[0]
        try:
            with open(path, "w") as f:
                f.write(f"// tessel-reproducer: --pass-pipeline='{p.spec()}'{' ' + flags if flags else ''}\n")
                f.write(body if body.endswith("\n") else body + "\n")
                write_section(table, f, format_name=format_name)
        except OSError:
            return None
        return path

    def _dump(self, module: Module, title: str, n: int, name: str, when: str) -> None:
        if self.inst.tree_dir:
            d = os.path.join(self.inst.tree_dir, module.name or "module")
            path = os.path.join(d, f"{n:02d}_{name}_{when}.tsl")
            try:
                os.makedirs(d, exist_ok=True)
                with open(path, "w") as f:
                    Printer(f).module(module)
            except OSError as e:  # a user's path (--print-ir-tree-dir), not a compiler bug
                message = f"cannot write IR dump '{path}': {e.strerror}"
                raise DiagnosticError(Diagnostic("error", message)) from None
            return
        buf = io.StringIO()
        Printer(buf).module(module)
        self.emit(f"// -----// {title} //----- //\n{buf.getvalue()}\n")

    def timing_report(self, total: float) -> str:
        rows: dict[str, float] = {}
        for name, t in self.timings:
            rows[name] = rows.get(name, 0.0) + t
        total = max(total, sum(rows.values()), 1e-9)
        bar = "===" + "-" * 73 + "==="
        out = [bar, "                         ... Execution time report ...", bar,
               f"  Total Execution Time: {total:.4f} seconds", "", "  ----Wall Time----  ----Name----"]
        for name, t in rows.items():
            out.append(f"  {t:8.4f} ({100 * t / total:5.1f}%)  {name}")
        out.append(f"  {total:8.4f} (100.0%)  Total")
        return "\n".join(out) + "\n"

    def statistics_report(self) -> str:
        bar = "===" + "-" * 73 + "==="
        out = [bar, "                         ... Pass statistics report ...", bar]
        for p in self.passes:
            out.append(f"'{p.NAME}'")
            for stat, desc in p.STATISTICS.items():
                out.append(f"  (S) {p.stats.get(stat, 0)} {stat} - {desc}")
        return "\n".join(out) + "\n"
