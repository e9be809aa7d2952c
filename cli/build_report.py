"""--time-build and --build, shared by tessel compile, tessel-codegen and tessel-run.

--time-build prints the OpenCL programs this process built or loaded (targets/opencl/cache.py's BUILD_LOG)
as a table on stderr, in the layout of tessel-opt --time-passes. A build alone understates a cold start: on
PoCL most of the cost is paid at each kernel's first launch (PoCL compiles the work-group function for the
launch's local size then), so the table also gives the first run's seconds.

--build loads a compiled module as tessel.load and tessel-run do and runs it once on zero-filled inputs:
its programs are built and every kernel is compiled for its work-group size, which fills tessel's program
cache and the driver's (PoCL: POCL_CACHE_DIR), so the user's first run loads instead of compiling.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import click
import numpy as np

from .common import fail, tool_name

TIME_BUILD_HELP = ("Print on stderr, after the work, a table of the OpenCL programs this process built or "
                   "loaded: per program its name, kernels, source KB, seconds and how (binary: loaded from "
                   "tessel's program cache; source: built from source, then cached; driver: handed to a "
                   "driver that keeps its own cache, as PoCL does), their total, and the seconds of the "
                   "module's first run, which on PoCL includes compiling each kernel at its first launch.")
BUILD_HELP = ("After writing the output, load it as tessel-run does (on --device when it names a device, "
              "else on tessel-run's default) and run it once on zero-filled inputs: its OpenCL programs are "
              "built and every kernel compiled for its work-group size, which fills tessel's program cache "
              "and the driver's (PoCL: POCL_CACHE_DIR), so the first run of the output loads instead of "
              "compiling. A func with dynamic dims builds its --shape-hint sizes only. Prints one line "
              "saying what it built; needs an OpenCL device.")

HOW = {
    "binary": "loaded from tessel's program cache (a hit)",
    "source": "built from source, then stored in tessel's program cache (a miss)",
    "driver": "handed to the driver, which keeps its own cache (PoCL: POCL_CACHE_DIR; a hit or a miss there)",
}
"""What each `how` of a Build means: the table's legend."""
FIRST_RUN = "includes each kernel's first launch (PoCL compiles the kernel then, or loads it from its cache)"


def time_build_option(when: str = "") -> Callable[[Callable], Callable]:
    """--time-build: the table of `build_table` on stderr after the tool's work (`when`: a sentence on
    when the tool builds programs at all)."""
    return click.option("--time-build", "time_build", is_flag=True,
                        help=TIME_BUILD_HELP + (f" {when}" if when else ""))


BUILD_ALL_HELP = ("--build, and also run the module once inline and once cooperatively (PoCL's CPU "
                  "device): their programs are built and their kernels compiled too, so that `auto` compares "
                  "the ways from cached programs from its 8th run on instead of weighing their build.")


def build_option(f: Callable) -> Callable:
    """--build and --build-all: build the output's programs ahead of time (`build_ahead`); --build-all also
    the programs of the other ways `auto` compares. The tool's `build` parameter: None, "model" or
    "all"."""
    f = click.option("--build-all", "build", flag_value="all", help=BUILD_ALL_HELP)(f)
    return click.option("--build", "build", flag_value="model", help=BUILD_HELP)(f)


def build_mark() -> int:
    """Where this tool's work starts in BUILD_LOG (earlier builds of this process are not its)."""
    from ..targets.opencl.cache import BUILD_LOG

    return BUILD_LOG.mark()


def builds_since(mark: int) -> list[Any]:
    from ..targets.opencl.cache import BUILD_LOG

    return BUILD_LOG.since(mark)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


SLOWEST = 10
"""First launches --time-build lists, the slowest first."""


def build_table(builds: Sequence[Any], first_run: float | None = None, note: str = "",
                launches: Sequence[tuple[str, float]] = ()) -> str:
    """The --time-build report: a header, one line per program (name, kernels, source KB, seconds, how),
    a total line, the first run's seconds when given (a run that compiled each kernel at its first launch
    on PoCL), `note` when given, and a legend of the hows that appear. One line each, for FileCheck."""
    bar = "===" + "-" * 73 + "==="
    out = [bar, "                         ... Program build report ...", bar,
           f"  {'program':<12} {'kernels':>8} {'source KB':>10} {'seconds':>10}  how"]
    for b in builds:
        kb = b.source_bytes / 1024
        out.append(f"  {b.name:<12} {b.kernels:>8} {kb:>10.1f} {b.seconds:>10.4f}  {b.how}")
    hows = {h: sum(b.how == h for b in builds) for h in (*HOW, *(b.how for b in builds))}
    counts = ", ".join(f"{h} {n}" for h, n in hows.items() if n)
    total = (f"  {'total':<12} {sum(b.kernels for b in builds):>8} "
             f"{sum(b.source_bytes for b in builds) / 1024:>10.1f} {sum(b.seconds for b in builds):>10.4f}  "
             f"{_plural(len(builds), 'program')}{f' ({counts})' if counts else ''}")
    out.append(total)
    if first_run is not None:
        out.append(f"  {'first run':<12} {'':>8} {'':>10} {first_run:>10.4f}  {FIRST_RUN}")
    if launches:  # the first run launch by launch (tessel-run): where the kernels' compiling went
        slowest = sorted(launches, key=lambda kv: -kv[1])[:SLOWEST]
        out.append(f"  slowest first launches ({len(slowest)} of {len(launches)}; compile and run):")
        out += [f"    {name:<40} {seconds:>10.4f}" for name, seconds in slowest]
    if note:
        out.append(f"  note: {note}")
    out += [f"  {h}: {HOW[h]}" for h, n in hows.items() if n and h in HOW]
    return "\n".join(out) + "\n"


def print_build_table(builds: Sequence[Any], first_run: float | None = None, note: str = "",
                      launches: Sequence[tuple[str, float]] = ()) -> None:
    sys.stderr.write(build_table(builds, first_run, note, launches))
    sys.stderr.flush()


def build_device(spec: str | None) -> Any:
    """The pyopencl device --build runs on: --device's when it names one, else tessel-run's default
    ('generic' names none). Called before compiling, so a machine without OpenCL fails at once."""
    from ..targets.opencl import device as dev

    try:
        return dev.pick_device(None if spec in (None, "generic") else spec)
    except dev.NoOpenCL as e:
        raise fail(f"--build runs the compiled module on an OpenCL device: {e}") from None
    except ValueError as e:
        raise fail(str(e), 2) from None


def buildable_funcs(module: Any) -> tuple[list[Any], str]:
    """The static lowered funcs a first run of `module` would build: its entry func (@main, else the first,
    as tessel.load and tessel-run pick it), or for a dynamic one the sizes --shape-hint embedded; with a
    note instead when there are none."""
    from ..ir.specialize import is_dynamic
    from ..targets.opencl.dynamic import SPECIALIZES

    if not module.funcs:
        return [], "nothing to build: the module holds no func"
    entry = module.func("main") or module.funcs[0]
    if not is_dynamic(entry):
        return [entry], ""
    sizes = [g for g in module.funcs if g.attrs.get(SPECIALIZES) == entry.name]
    if not sizes:
        return [], (f"nothing to build ahead of time: @{entry.name} has dynamic dims and no --shape-hint "
                    "size (each size is compiled when it first runs)")
    return sizes, ""


@dataclass
class AheadBuild:
    """What `build_ahead` did."""

    seconds: float = 0.0
    """Wall time of loading and running once, programs built and kernels first launched."""
    first_run: float = 0.0
    """Of which the runs (on PoCL: each kernel's compile at its first launch)."""
    runs: int = 0
    notes: list[str] = field(default_factory=list)


def build_ahead(modules: Sequence[Any], device: Any, ways: bool = False) -> AheadBuild:
    """Load each of `modules` on `device` as tessel-run does and run it once on zero-filled inputs; `ways`:
    once more on each other way `auto` compares (inline, cooperative)."""
    from ..targets.opencl.dynamic import executable
    from ..targets.opencl.prepare import prepare_ways

    done = AheadBuild()
    t0 = time.perf_counter()
    for module in modules:
        funcs, note = buildable_funcs(module)
        if note:
            done.notes.append(note)
        for func in funcs:
            exe = executable(module, func, device)
            arrays = [np.zeros(v.type.dims, v.type.np_dtype) for v in func.args]
            t1 = time.perf_counter()
            exe.run(arrays)
            done.first_run += time.perf_counter() - t1
            done.runs += 1
            if ways and hasattr(exe, "companion"):  # a plain Executable (no control flow, static)
                prepare_ways(exe, arrays)
    done.seconds = time.perf_counter() - t0
    return done


def build_and_report(modules: Sequence[Any], device: Any, time_build: bool, mark: int,
                     ways: bool = False) -> None:
    """--build after the output is written: build, then say what was built in one line (and the table
    with --time-build)."""
    sys.stdout.flush()  # an output on stdout is complete before the build starts
    done = build_ahead(modules, device, ways)
    builds = builds_since(mark)
    tool = tool_name()
    for note in done.notes:
        sys.stderr.write(f"{tool}: note: {note}\n")
    if done.runs:
        kernels = sum(b.kernels for b in builds)
        it = "it" if len(builds) == 1 else "them"
        sys.stderr.write(f"{tool}: built {_plural(len(builds), 'program')} ({_plural(kernels, 'kernel')}) "
                         f"in {done.seconds:.1f} s; the first run of this module will load {it} from the "
                         "caches\n")
    if time_build:
        print_build_table(builds, done.first_run if done.runs else None)
