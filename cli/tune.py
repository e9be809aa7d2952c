"""tessel-tune: choose kernel schedules by measuring them on the device, and write tuning records."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from .common import (
    atomic_output,
    debug_option,
    fail,
    handle_errors,
    lower_schedule,
    version_option,
    winograd_option,
)

EPILOG = """\b
Examples:
  tessel-tune model.opt.tsl --budget=60 -o model.tune.jsonl
  tessel-codegen --tuning-records=model.tune.jsonl model.opt.tsl -o model.cl.tsl
  tessel tune model.onnx -o model.tune.jsonl && tessel compile --tuning-records=model.tune.jsonl model.onnx
  tessel-tune --merge a.jsonl b.jsonl -o all.jsonl
  tessel-tune --ray 10.0.0.5:6379 model.opt.tsl --budget=300 -o model.tune.jsonl
"""


@click.command(
    epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@version_option
@click.argument("inputs", nargs=-1, metavar="[INPUT]...")
@click.option("-o", "--output", metavar="FILE",
              help="The record file (JSON lines). Tuning reads it first, skips the kernels it already "
              "holds for this device and adds the rest, rewriting it atomically after each kernel; "
              "required when tuning. With --merge: where the merged records go (default stdout).")
@click.option("--budget", type=click.FloatRange(min=1), default=60.0, show_default=True, metavar="SECONDS",
              help="About how long to tune: the kernels take three quarters, in order of their share of "
              "the model's time, the confirming whole-model run and the choice of execution the rest.")
@click.option("--device", default="auto", show_default=True, metavar="SPEC",
              help="The device to measure on (and whose fingerprint the records carry), as "
              "tessel-run --device.")
@click.option("-O", "opt_level", type=click.IntRange(0, 3), default=None, metavar="N",
              help="Run this -O pipeline first (default: -O2 for an ONNX input, none for a .tsl module, "
              "tuned as given: the IR tessel-codegen will lower).")
@click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=DxD...",
              help="Make a dynamic ONNX input static (as tessel-import).")
@click.option("--max-points", type=click.IntRange(1, 1000), default=24, show_default=True, metavar="N",
              help="Schedule points measured a kernel at most, beside the template's default.")
@click.option("--merge", is_flag=True,
              help="Merge the record files INPUT... into one: one record per (kind, key, device, space), the "
              "fastest kept, sorted; nothing is measured.")
@click.option("--ray", "ray_address", metavar="ADDRESS",
              help="Measure on a Ray cluster (pip install 'tessel[distributed]'): each kernel is a task "
              "holding one whole device through the custom resource 'tessel-device-<fingerprint>' (one "
              "unit per device; see --print-fingerprint). 'local' starts a one-node cluster here.")
@click.option("--list-kernels", is_flag=True,
              help="List the model's distinct kernels (signature key, uses, schedule space and its size, "
              "what it computes), most roofline time first, and exit; measures nothing (--device=generic "
              "lists them for the generic device, with no OpenCL).")
@click.option("--print-fingerprint", is_flag=True,
              help="Print the device's fingerprint (what records are keyed by) and its name, and exit.")
@click.option("--report-json", metavar="FILE",
              help="Write what the run did (kernels tuned, measurements, speed-up, per-kernel rows) as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="Print a row per kernel tuned at the end.")
@winograd_option
@debug_option
@handle_errors
def main(inputs: tuple[str, ...], output: str | None, budget: float, device: str, opt_level: int | None,
         input_shape: tuple[str, ...], max_points: int, merge: bool, ray_address: str | None,
         list_kernels: bool, print_fingerprint: bool, report_json: str | None, verbose: bool,
         no_winograd: bool, debug: bool) -> None:
    """Tune a model's kernels on a device and write tuning records.

    INPUT is a .tsl module at graph or kernel level (what tessel-codegen lowers) or an ONNX model
    (imported and optimized with -O2 first, as tessel compile does). Each distinct kernel (template,
    shapes, dtypes, fused prologue and epilogue) is measured with points of its template's schedule
    space, ranked by a cost model; a point is kept only when it beats the template's own choice by more
    than the measured noise. The records apply with tessel-codegen/tessel compile --tuning-records.
    Exit status: 0 ok, 1 bad input or records, 2 usage, 3 internal error.
    """
    from ..targets.opencl.records import RecordError, read_records
    from ..targets.opencl.records import merge as merged

    if merge:
        if not inputs:
            raise fail("--merge needs the record files to merge", 2)
        try:
            groups = [read_records(p) for p in inputs]
        except RecordError as e:
            raise fail(str(e)) from None
        with atomic_output(output) as f:
            for r in merged(*groups):
                f.write(r.line() + "\n")
        return
    if list_kernels:
        _list(_model(inputs[0] if inputs else "-", input_shape, opt_level), device,
              lower_schedule(no_winograd))
        return
    if print_fingerprint:
        from ..targets.opencl import device as dev

        d = _device(device)
        click.echo(f"{dev.fingerprint(d)}  {dev.describe(d)}")
        return
    if len(inputs) > 1:
        raise fail("tune one model at a time (several inputs only with --merge)", 2)
    if not output:
        raise fail("give the record file with -o FILE (a second run resumes from it)", 2)
    existing: list[Any] = []
    if os.path.exists(output):
        try:
            existing = read_records(output)
        except RecordError as e:
            raise fail(f"{e} (the output file holds records tuning resumes from)") from None
    d = _device(device)
    module = _model(inputs[0] if inputs else "-", input_shape, opt_level)
    from ..ir.printer import to_text
    from ..targets.opencl.records import write_records
    from ..targets.opencl.tuning.tuner import tune

    runner = None
    if ray_address:
        from ..targets.opencl.tuning.distributed import RayRunner

        try:
            runner = RayRunner(ray_address, d, max_points)
        except RuntimeError as e:
            raise fail(str(e)) from None
    with _progress() as progress:
        records, report = tune(to_text(module), d, budget, existing, lower_schedule(no_winograd),
                               lambda rs: write_records(output, rs), progress, runner,
                               max_points=max_points)
    write_records(output, records)
    _summary(report, output, verbose)
    if report_json:
        with atomic_output(report_json) as f:
            rep = dict(vars(report))
            rep["saved"] = report.saved
            json.dump(rep, f, indent=2, sort_keys=True)
            f.write("\n")


def _list(module: Any, spec: str, options: dict[str, Any]) -> None:
    """--list-kernels: each distinct kernel's key, uses, space and size, and label."""
    from ..ir.printer import to_text
    from ..targets.opencl.kernels.base import DeviceInfo
    from ..targets.opencl.profile import Peaks, load_peaks
    from ..targets.opencl.tuning.tuner import collect

    if spec == "generic":
        info, peaks = DeviceInfo.generic(), None
    else:
        from ..targets.opencl import device as dev

        d = _device(spec)
        info, peaks = dev.device_info(d), load_peaks(d)
    kernels, models = collect(to_text(module), info, options, info.fingerprint, peaks or Peaks(100, 20, 10))
    for k in kernels:
        space = f"{k.space} ({k.space_size} points)" if k.space else "no space"
        click.echo(f"{k.key}  {k.uses}x  {space:<22} {k.label}")
    for name, key in models.items():
        click.echo(f"{key}  model @{name}")


def _device(spec: str) -> Any:
    from ..targets.opencl import device as dev

    try:
        return dev.pick_device(None if spec == "auto" else spec)
    except dev.NoOpenCL as e:
        raise fail(f"tuning measures on an OpenCL device: {e}") from None
    except ValueError as e:
        raise fail(str(e), 2) from None


def _model(path: str, input_shape: tuple[str, ...], opt_level: int | None) -> Any:
    """The module to tune: ONNX imported and optimized (-O2 unless -O says), a .tsl as given (or -O)."""
    from ..targets.opencl.lower import is_lowered
    from .compile import load_model, optimize

    module, onnx = load_model(path, input_shape)
    if is_lowered(module):
        raise fail(f"'{path}' is already lowered to a target (it holds a cl.program): tune the IR "
                   "tessel-codegen takes")
    if opt_level is not None or onnx:
        optimize(module, 2 if opt_level is None else opt_level)
    return module


class _progress:
    """A rich progress bar over the budget on a TTY; nothing in a pipe."""

    def __init__(self) -> None:
        self.bar: Any = None

    def __enter__(self) -> Any:
        if not sys.stderr.isatty():
            return None
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=True)
        self.bar.start()
        task = self.bar.add_task("tuning", total=1.0)
        return lambda what, frac: self.bar.update(task, description=what[:70], completed=min(frac, 1.0))

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()


def _summary(report: Any, output: str, verbose: bool) -> None:
    say = sys.stderr
    say.write(f"tessel-tune: {report.kernels} kernels, {report.tunable} with a schedule space: "
              f"{report.tuned} tuned ({report.improved} faster than the default), {report.resumed} already "
              f"in the records; "
              f"{report.measured} points measured of {report.space_points} ({report.saved} left out by the "
              f"cost model) in {report.seconds:.1f} s\n")
    if report.confirm:
        say.write(f"tessel-tune: whole model: {report.confirm}; execution: {report.execution or 'auto'}\n")
    say.write(f"tessel-tune: records in {output}\n")
    if verbose:
        for row in report.rows:
            sched = ", ".join(f"{k}={v}" for k, v in sorted(row["schedule"].items())) or "default"
            say.write(f"  {row['default_us']:9.1f} -> {row['best_us']:9.1f} us  {sched:<28} "
                      f"{row['measured']:3d}/{row['space']:<5d} {row['label'][:70]}\n")


if __name__ == "__main__":
    main()
