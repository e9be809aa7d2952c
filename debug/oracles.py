"""Interestingness tests for the reducer: each is a callable `test(text) -> bool` over a candidate module's
text, and keeps in `last` a one-line account of its latest verdict (for the "not interesting" message).

- `ScriptTest`: a user's script, given the candidate's path, says yes by exiting 0 (llvm-reduce's rule).
- `CrashTest`: `tessel-opt` with a pipeline crashes (exit 3) the same way as on the input.
- `MismatchTest`: a pipeline changes the numpy reference results beyond tolerance on seeded random
  inputs.

The last two run each candidate in a forked child (isolate.py): a crash may be a hang, a recursion
error or worse, and a pass may leave global state behind; none of that reaches the reducer.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from ..ir.diagnostics import DiagnosticError
from ..ir.interpreter import output_names, random_inputs, run_func
from ..ir.parser import parse_module
from ..ir.printer import to_text
from ..ir.verifier import verify_or_raise
from ..passes.manager import CompilerCrash, Instrumentation, PassManager, load_plugin
from ..passes.pipeline import O_LEVELS, parse_pipeline
from .isolate import CAN_FORK, Verdict, run_isolated
from .validate import Tolerance, compare

_O_LEVEL = re.compile(r"^-O([0-3])$")
_ICE = re.compile(r"internal compiler error: (.*)")


class OracleError(Exception):
    """The test itself cannot run (a script that does not exist or cannot be executed)."""


def tool_command(tool: str, module: str) -> list[str]:
    """How to start a tessel tool in a fresh process with this interpreter and this tessel package."""
    code = f"import sys; sys.argv[0] = {tool!r}; from tessel.cli.{module} import main; main()"
    return [sys.executable, "-c", code]


def pipeline_args(pipeline: str) -> list[str]:
    """`-O2` stays a level; anything else is a --pass-pipeline."""
    return [pipeline] if _O_LEVEL.match(pipeline) else [f"--pass-pipeline={pipeline}"]


def pipeline_text(pipeline: str) -> str:
    m = _O_LEVEL.match(pipeline)
    return O_LEVELS[int(m.group(1))] if m else pipeline


class ScriptTest:
    """Interesting when `script CANDIDATE.tsl` exits with status 0."""

    def __init__(self, script: str, workdir: str, timeout: float | None = None):
        self.script = os.path.abspath(script) if os.sep in script else script
        self.path = os.path.join(workdir, "candidate.tsl")
        self.timeout = timeout
        self.last = ""

    def __call__(self, text: str) -> bool:
        with open(self.path, "w") as f:
            f.write(text)
        try:
            rc = subprocess.run([self.script, self.path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, timeout=self.timeout).returncode
        except subprocess.TimeoutExpired:
            self.last = f"{self.script} ran past the {self.timeout:g} s timeout"
            return False
        except OSError as e:
            raise OracleError(f"cannot run '{self.script}': {e.strerror}") from None
        self.last = f"{self.script} exits with status {rc}"
        return rc == 0


class CrashTest:
    """Interesting when tessel-opt with the pipeline has an internal compiler error (exit status 3) with
    the same crash signature as on the first text tested (the input).

    Each candidate goes through what `tessel-opt` does (parse, verify, run the pipeline verifying after
    each pass, print) in a forked child; `fresh_process=True` (or a system without fork) starts the real
    `tessel-opt` instead, which costs a Python start-up per candidate."""

    def __init__(self, pipeline: str, workdir: str, plugins: tuple[str, ...] = (),
                 timeout: float | None = None, fresh_process: bool = False):
        for p in plugins:
            load_plugin(p)
        self.pipeline = pipeline_text(pipeline)
        parse_pipeline(self.pipeline)  # a bad pipeline is the user's error, raised now
        self.path = os.path.join(workdir, "candidate.tsl")
        self.reproducer = os.path.join(workdir, "reproducer.tsl")
        self.cmd = tool_command("tessel-opt", "opt") + pipeline_args(pipeline) + [
            f"--load-pass-plugin={os.path.abspath(p)}" for p in plugins] + [
            f"--crash-reproducer={self.reproducer}", "-o", os.devnull, self.path]
        self.fresh_process = fresh_process or not CAN_FORK
        self.timeout = timeout
        self.signature: str | None = None
        self.last = ""

    def __call__(self, text: str) -> bool:
        if self.fresh_process:
            sig, why = self._subprocess(text)
        else:
            crashed, why = run_isolated(lambda: self._opt(text), self.timeout)
            sig = why if crashed else None
        if sig is None:
            self.last = why
            return False
        if self.signature is None:
            self.signature = sig
        self.last = f"tessel-opt crashes: {sig}"
        return sig == self.signature

    def _opt(self, text: str) -> Verdict:
        """tessel-opt's steps in this process: (True, crash signature) or (False, why not)."""
        try:
            module = parse_module(text, "<candidate>", register_source=False)
            verify_or_raise(module)
            pm = PassManager(parse_pipeline(self.pipeline), Instrumentation(crash_reproducer=self.reproducer))
            pm.run(module)
            to_text(module)
        except DiagnosticError as e:
            return False, f"tessel-opt reports an error, not a crash: {e}"
        except CompilerCrash as e:
            return True, _signature(str(e))
        except Exception as e:  # an internal error outside any pass
            return True, _signature(f"{type(e).__name__}: {e}")
        return False, "tessel-opt does not crash"

    def _subprocess(self, text: str) -> tuple[str | None, str]:
        with open(self.path, "w") as f:
            f.write(text)
        try:
            p = subprocess.run(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, timeout=self.timeout, text=True, errors="replace")
        except subprocess.TimeoutExpired:
            return None, f"tessel-opt ran past the {self.timeout:g} s timeout"
        m = _ICE.search(p.stderr)
        if p.returncode != 3 or m is None:
            return None, f"tessel-opt exits with status {p.returncode}, not 3 (an internal compiler error)"
        return _signature(m.group(1)), ""


def _signature(message: str) -> str:
    """What identifies a crash, from the internal error's message: the pass and the exception type
    (`pass 'fuse' crashed: KeyError`), the pass that produced invalid IR, or the exception type of an
    error outside any pass."""
    parts = message.split(":")
    keep = 2 if parts[0].startswith("pass '") and parts[0].endswith("crashed") else 1
    return ":".join(parts[:keep]).strip()


class MismatchTest:
    """Interesting when running the pipeline changes a func's numpy reference results beyond rtol/atol
    on seeded random inputs. A candidate the interpreter cannot run, or the pipeline crashes on, is not
    interesting (that is a different bug)."""

    def __init__(self, pipeline: str, rtol: float = 1e-3, atol: float = 1e-4, seed: int = 0,
                 plugins: tuple[str, ...] = (), timeout: float | None = None):
        for p in plugins:
            load_plugin(p)
        self.pipeline = pipeline_text(pipeline)
        parse_pipeline(self.pipeline)  # a bad pipeline is the user's error, raised now
        self.tol = Tolerance(rtol, atol)  # compared as translation validation (debug/validate.py) does
        self.seed = seed
        self.timeout = timeout
        self.last = ""

    def __call__(self, text: str) -> bool:
        ok, self.last = run_isolated(lambda: self._check(text), self.timeout)
        return ok

    def _check(self, text: str) -> Verdict:
        try:
            m = parse_module(text, "<candidate>", register_source=False)
            inputs = {f.name: list(random_inputs(f, self.seed).values()) for f in m.funcs}
            before = {f.name: run_func(m, f, inputs[f.name]) for f in m.funcs}
            PassManager(parse_pipeline(self.pipeline)).run(m)
            after = {f.name: run_func(m, f, inputs[f.name]) for f in m.funcs if f.name in before}
        except (DiagnosticError, CompilerCrash) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            return False, f"it cannot be run or compiled: {first}"
        except Exception as e:  # the interpreter failed on a strange candidate: not this bug
            return False, f"running it fails: {type(e).__name__}: {e}"
        for f in m.funcs:
            ref, got = before[f.name], after.get(f.name)
            if got is None:
                continue
            if len(got) != len(ref):
                return True, f"func @{f.name} has {len(ref)} results before the pipeline, {len(got)} after"
            diffs = compare(output_names(f), got, ref, self.tol, "the input")
            if diffs:
                return True, f"func @{f.name}: {diffs[0].describe(self.tol, 'the input')}"
        return False, f"no output changes beyond {self.tol.describe()}"
