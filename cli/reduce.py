"""tessel-reduce: shrink a module while it stays interesting, like llvm-reduce and mlir-reduce."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from .common import EXIT_USAGE, atomic_output, debug_option, fail, handle_errors, read_input, version_option

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from ..debug.reduce import Event, Result

EPILOG = """\b
Examples:
  tessel-reduce crash.tsl --crash -o small.tsl
  tessel-reduce model.tsl --crash='canonicalize,fuse' --load-pass-plugin=my_pass.py
  tessel-reduce model.tsl --mismatch=-O2 --rtol=1e-4 -o small.tsl
  tessel-reduce model.tsl --test=./still-fails.sh -o small.tsl
"""


@click.command(
    epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@version_option
@click.argument("input", required=False, default="-", metavar="[INPUT]")
@click.option("-o", "--output", metavar="FILE",
              help="Write the reduced module here (atomically) instead of stdout.")
@click.option("--test", "script", metavar="SCRIPT",
              help="Interesting when SCRIPT, run with the candidate .tsl file's path as its argument, "
                   "exits 0.")
@click.option("--crash", is_flag=False, flag_value="-O2", metavar="PIPELINE",
              help="Interesting when tessel-opt with PIPELINE (--crash=-ON or --crash='a,b{opt=v}'; -O2 "
                   "when given alone) exits 3 with the same internal error (pass and exception type) as on "
                   "the input.")
@click.option("--mismatch", metavar="PIPELINE",
              help="Interesting when PIPELINE (-ON or a --pass-pipeline string) changes the numpy reference "
                   "results beyond --rtol/--atol on seeded random inputs.")
@click.option("--rtol", type=float, default=1e-3, show_default=True,
              help="Relative tolerance for --mismatch.")
@click.option("--atol", type=float, default=1e-4, show_default=True,
              help="Absolute tolerance for --mismatch.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the --mismatch random inputs.")
@click.option("--load-pass-plugin", multiple=True, metavar="FILE.py",
              help="Load a Python file that registers passes, for the --crash and --mismatch pipelines.")
@click.option("--fresh-process", is_flag=True,
              help="Run each --crash candidate through a new tessel-opt process instead of a forked child "
                   "of this one (slower: a Python start-up per candidate).")
@click.option("--drop-locs", is_flag=True, help="Also try to drop op locations (kept by default).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Count a test that runs longer than this on a candidate as not interesting.")
@click.option("--max-rounds", type=click.IntRange(min=1), default=100, show_default=True,
              help="Stop after this many rounds even if the last one still made progress.")
@debug_option
@handle_errors
def main(input: str, output: str | None, script: str | None, crash: str | None, mismatch: str | None,
         rtol: float, atol: float, seed: int, load_pass_plugin: tuple[str, ...], fresh_process: bool,
         drop_locs: bool, timeout: float | None, max_rounds: int, debug: bool) -> None:
    """Shrink a tessel IR module while it stays interesting.

    Reads INPUT (a .tsl file, or stdin when '-' or missing) and, round after round, deletes ops,
    returns earlier values, replaces results by arguments, operands or zeros, drops unused results and
    arguments, turns weights into splats, drops attributes and halves shapes, keeping each change for
    which the chosen test (exactly one of --test, --crash, --mismatch) still says yes. Each kept step
    is reported on stderr. Exit status: 0 reduced, 1 bad input or input not interesting, 2 usage.
    """
    from ..debug.oracles import OracleError

    if crash is not None and input == "-" and os.path.isfile(crash):  # `--crash in.tsl`: that is INPUT
        input, crash = crash, "-O2"
    chosen = [name for name, v in (("--test", script), ("--crash", crash), ("--mismatch", mismatch)) if v]
    if len(chosen) != 1:
        raise fail("give exactly one of --test=SCRIPT, --crash[=PIPELINE], --mismatch=PIPELINE"
                   + (f" (got {', '.join(chosen)})" if chosen else ""), EXIT_USAGE)
    if script is not None:
        found = shutil.which(script) if os.sep not in script else script
        if found is None or not os.path.isfile(found):
            raise fail(f"--test: '{script}' does not exist", EXIT_USAGE)
        if not os.access(found, os.X_OK):
            raise fail(f"--test: '{script}' is not executable (chmod +x it)", EXIT_USAGE)
        script = found
    data, filename = read_input(input)
    with _workdir() as work:
        interesting = _oracle(script, crash, mismatch, rtol, atol, seed, load_pass_plugin, timeout, work,
                              fresh_process)
        try:
            result = _reduce(data, filename, interesting, drop_locs, max_rounds)
        except OracleError as e:
            raise fail(str(e)) from None
    header = data.split(b"\n", 1)[0].decode("utf-8", "replace")
    with atomic_output(output) as out:
        if header.startswith("// tessel-reproducer:"):  # a reduced reproducer still replays
            out.write(header + "\n")
        out.write(result.text)


def _oracle(script: str | None, crash: str | None, mismatch: str | None, rtol: float, atol: float, seed: int,
            plugins: tuple[str, ...], timeout: float | None, work: str, fresh_process: bool
            ) -> Callable[[str], bool]:
    from ..debug.oracles import CrashTest, MismatchTest, ScriptTest

    if script is not None:
        return ScriptTest(script, work, timeout)
    if crash is not None:
        return CrashTest(crash, work, plugins, timeout, fresh_process)
    assert mismatch is not None
    return MismatchTest(mismatch, rtol, atol, seed, plugins, timeout)


def _reduce(data: bytes, filename: str, interesting: Callable[[str], bool], drop_locs: bool,
            max_rounds: int) -> Result:
    from ..debug.reduce import NotInteresting, reduce_module

    report = _Report(interesting)
    try:
        with report:
            result = reduce_module(data, interesting, drop_locs=drop_locs, on_event=report.event,
                                   filename=filename, max_rounds=max_rounds)
    except NotInteresting:
        why = getattr(interesting, "last", "")
        raise fail(f"the input is not interesting{': ' + why if why else ''}; nothing to reduce") from None
    report.line(f"done: {result.initial_ops} -> {result.ops} ops, {result.initial_lines} -> {result.lines} "
                f"lines after {result.tests} tests in {result.rounds} rounds")
    return result


class _Report:
    """Progress on stderr: a rich status line on a terminal, one plain line per kept step otherwise."""

    def __init__(self, interesting: Callable[[str], bool]) -> None:
        self.interesting = interesting
        self.tty = sys.stderr.isatty()
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        self.prog = click.get_current_context().find_root().info_name or "tessel-reduce"

    def __enter__(self) -> _Report:
        if self.tty:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            # no refresh thread: the tests fork, and a forked thread-holding process can deadlock
            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                     console=Console(stderr=True), transient=True, auto_refresh=False)
            self.progress.__enter__()
            self.task = self.progress.add_task("reducing", total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.__exit__(None, None, None)
            self.progress = None

    def line(self, text: str) -> None:
        if self.progress is not None:
            self.progress.console.print(f"{self.prog}: {text}", highlight=False, markup=False)
        else:
            sys.stderr.write(f"{self.prog}: {text}\n")
            sys.stderr.flush()

    def event(self, e: Event) -> None:
        if e.kind == "start":
            why = getattr(self.interesting, "last", "")
            self.line(f"input: {e.ops} ops, {e.lines} lines; interesting{': ' + why if why else ''}")
        elif e.kind == "accept":
            self.line(f"round {e.round}, {e.strategy}: {e.ops} ops, {e.lines} lines ({e.tests} tests)")
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, description=(
                f"round {e.round} {e.strategy}: {e.ops} ops, {e.lines} lines, {e.tests} tests"))
            self.progress.refresh()


@contextmanager
def _workdir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="tessel-reduce-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
