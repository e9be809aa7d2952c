"""`make soak`: each model run many times in one process, then loaded and unloaded many times, per way of
running (issue 19), watching the resident memory and the live OpenCL objects (debug/soak.py).

    .venv/bin/python bench/soak.py [--runs 10000] [--loads 200] [--models squeezenet,transformer]
                                   [--executions pool,cooperative,auto] [--json FILE]

Models: the onnx package's light squeezenet (its bundled weights: ~5 ms a run on 2 cores) and the
BERT-style encoder of tests/models/transformer.py (~1 ms), compiled once at -O2 for the default device.
For each model and way: RSS after the warm-up runs (a tenth) and after all, the live OpenCL objects
then, and the same over the loads (each an Executable loaded, run once, dropped and collected; a quarter
of them warm up); RSS read after glibc's malloc_trim (debug/soak.py says why). Exit
status 1 when an OpenCL object outlives either loop, or RSS grows by MAX_GROWTH or more over a loop after
its warm-up and by half that over the loop's second half (a steady leak does; a one-time step of native
memory, ~1 MiB at a random load of squeezenet under cooperative execution, then flat for 1000 loads, does
not, and is shown as a step); every soak runs in this one process, one after another.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import LIGHT, TRANSFORMER, transformer_model  # noqa: E402

MODELS = ("squeezenet", TRANSFORMER)
EXECUTIONS = ("pool", "cooperative", "auto")


def model_source(name: str) -> tuple[Any, dict[str, np.ndarray] | None]:
    """(ONNX model or path, inputs or None for seeded random ones) of a soaked model."""
    if name == TRANSFORMER:
        return transformer_model()
    path = LIGHT / f"light_{name}.onnx"
    if not path.exists():
        light = ", ".join(p.stem.removeprefix("light_") for p in sorted(LIGHT.glob("light_*.onnx")))
        raise SystemExit(f"soak: no model '{name}' (light models: {light}, or transformer)")
    return str(path), None


def compiled(name: str, device: Any) -> tuple[Any, Any, list[np.ndarray]]:
    """(lowered module, func, inputs) of `name` for `device`."""
    from tessel.api import import_model_source, optimize
    from tessel.ir.interpreter import check_inputs, random_inputs
    from tessel.targets.opencl import device as dev
    from tessel.targets.opencl.lower import lower_module

    source, feeds = model_source(name)
    module = import_model_source(source)
    optimize(module, 2)
    lower_module(module, dev.device_info(device))
    func = module.func("main") or module.funcs[0]
    return module, func, check_inputs(func, feeds if feeds is not None else random_inputs(func, 0))


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def _kib(n: int) -> str:
    return f"{n / 1024:+.0f}"


def _objects(counts: dict[str, int]) -> str:
    return str(sum(counts.values()))


def table(reports: list[Any]) -> str:
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table

    t = Table(box=box.SIMPLE_HEAD, caption="RSS in MiB after the warm-up and at the end, growth in KiB (in "
              "the second half); CL objects: live OpenCL objects after the warm-up -> at the end (runs), "
              "before -> after (loads)")
    for col in ("model", "execution", "runs", "ms/run", "RSS warm", "RSS end", "growth", "CL objects",
                "loads", "ms/load", "RSS warm", "RSS end", "growth", "CL objects", "verdict"):
        t.add_column(col, justify="left" if col in ("model", "execution", "verdict") else "right")
    for r in reports:
        runs = r.runs - r.warmup_runs
        loads = r.loads - r.warmup_loads
        leaks = r.leaks()
        bad = [f"{k} +{n}" for k, n in leaks.items()]
        leaks_rss, steps = r.rss_verdicts()
        bad += [f"RSS {what}" for what in leaks_rss]
        way = r.execution if r.running_on in (r.execution, "device") else f"{r.execution} ({r.running_on})"
        t.add_row(r.model, way, str(r.runs), f"{1e3 * r.run_seconds / max(runs, 1):.2f}", _mib(r.rss_warm),
                  _mib(r.rss_runs), f"{_kib(r.run_growth)} ({_kib(r.late_growth[0])})",
                  f"{_objects(r.objects_warm)} -> {_objects(r.objects_runs)}",
                  str(r.loads), f"{1e3 * r.load_seconds / max(loads, 1):.0f}", _mib(r.rss_loads_warm),
                  _mib(r.rss_loads), f"{_kib(r.load_growth)} ({_kib(r.late_growth[1])})",
                  f"{_objects(r.objects_unloaded)} -> {_objects(r.objects_loads)}",
                  ("LEAK: " + ", ".join(bad)) if bad else "ok" + "".join(f" (a step in the {w})"
                                                                          for w in steps))
    buf = io.StringIO()
    Console(file=buf, width=200, force_terminal=sys.stdout.isatty(), highlight=False).print(t)
    return buf.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10000, help="runs of one executable per model and way")
    ap.add_argument("--loads", type=int, default=200, help="executables loaded, run once and dropped")
    ap.add_argument("--models", default=",".join(MODELS),
                    help="comma-separated: light model names, transformer")
    ap.add_argument("--executions", default=",".join(EXECUTIONS),
                    help="comma-separated ways to run (pool, inline, cooperative, auto); those the device "
                    "cannot run are skipped")
    ap.add_argument("--device", default="auto", help="OpenCL device (as tessel-run --device)")
    ap.add_argument("--json", help="also write the reports here")
    args = ap.parse_args()
    if args.runs < 1 or args.loads < 1:
        ap.error("--runs and --loads must be at least 1")
    from rich.progress import Progress
    from tessel.debug.soak import soak
    from tessel.ir.diagnostics import DiagnosticError
    from tessel.targets.opencl import device as dev
    from tessel.targets.opencl.runtime import EXECUTIONS as KNOWN

    ways = [w for w in args.executions.split(",") if w]
    if any(w not in KNOWN for w in ways):
        ap.error(f"--executions takes {', '.join(KNOWN)}")
    device = dev.pick_device(args.device)
    sys.stderr.write(f"soak: {dev.describe(device)}; {args.runs} runs and {args.loads} loads per model and "
                     "way\n")
    reports = []
    with Progress(disable=not sys.stderr.isatty(), transient=True) as bar:
        for name in [m for m in args.models.split(",") if m]:
            task = bar.add_task(f"{name}: compiling", total=None)
            module, func, inputs = compiled(name, device)
            for way in ways:

                def tick(phase: str, done: int, total: int, name: str = name, way: str = way,
                         task: Any = task) -> None:
                    bar.update(task, description=f"{name} {way}: {phase}", completed=done, total=total)

                t0 = time.perf_counter()
                try:
                    report = soak(module, func, inputs, args.runs, args.loads, way, device, name,
                                  on_progress=tick)
                except DiagnosticError as e:  # a way this device cannot run (cooperative without SVM)
                    sys.stderr.write(f"soak: {name}: skipping '{way}': {e}\n")
                    continue
                sys.stderr.write(f"soak: {name} {way}: {time.perf_counter() - t0:.0f} s\n")
                reports.append(report)
            bar.remove_task(task)
    sys.stdout.write(table(reports))
    for r in reports:
        for note in r.notes:
            sys.stdout.write(f"{r.model} {r.execution}: {note}\n")
    if args.json:
        rows = [dict(vars(r), run_growth=r.run_growth, load_growth=r.load_growth, late_growth=r.late_growth,
                     leaks=r.leaks())
                for r in reports]
        Path(args.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M:%S"),
                                               "device": dev.describe(device), "args": vars(args),
                                               "reports": rows}, indent=2) + "\n")
    failed = [r for r in reports if r.leaks() or r.rss_verdicts()[0]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
