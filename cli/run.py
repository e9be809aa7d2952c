"""tessel-run: execute a .tsl module on a target and report or save its outputs."""

from __future__ import annotations

import io
import sys
import time
import zipfile

import click
import numpy as np

from ..ir.diagnostics import Diagnostic, DiagnosticError
from ..ir.parser import parse_module
from ..ir.verifier import verify_or_raise
from .build_report import build_mark, builds_since, print_build_table, time_build_option
from .common import (
    atomic_output,
    check_bounds_option,
    debug_option,
    fail,
    handle_errors,
    lower_schedule,
    read_input,
    version_option,
    winograd_option,
)

EPILOG = """\b
Examples:
  tessel-run model.tsl --random-inputs --seed 1
  tessel-run model.tsl --inputs in.npz --outputs out.npz
  tessel-opt -O1 model.tsl | tessel-run --random-inputs
  tessel-codegen --target=opencl m.tsl | tessel-run --random-inputs --profile --repeat 20
  tessel-run --target=opencl m.tsl --random-inputs --repeat 50 --report-json times.json
  tessel-run m.cl.tsl --random-inputs --time-build
  tessel-run --list-devices
  tessel-run --calibrate
"""


def load_npz(path: str) -> dict[str, np.ndarray]:
    try:
        with open(path, "rb") as f:
            is_zip = zipfile.is_zipfile(f)
    except IsADirectoryError:
        raise fail(f"cannot read inputs '{path}': it is a directory") from None
    except OSError as e:
        raise fail(f"cannot read inputs '{path}': {e.strerror}") from None
    if not is_zip:  # np.load would return a .npy's array, or try to unpickle a text file
        raise fail(f"cannot read inputs '{path}': not a .npz file (write one with numpy.savez)")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except ValueError as e:
        if "descr" not in str(e):
            raise fail(f"cannot read inputs '{path}': not a valid .npz file ({e})") from None
        arrays = _raw_npz(path)  # numpy cannot name the dtype (float8e5m2 writes '<f1'): raw bytes
    except (OSError, zipfile.BadZipFile, EOFError) as e:
        raise fail(f"cannot read inputs '{path}': not a valid .npz file ({e})") from None
    for k, v in arrays.items():  # np.load hands back a member without the .npy header as raw bytes
        if not isinstance(v, np.ndarray):
            raise fail(f"cannot read inputs '{path}': its member '{k}' is not a .npy array")
    return arrays


def _raw_npz(path: str) -> dict[str, np.ndarray]:
    """The members of a .npz as raw-byte arrays (dtype V<itemsize>) of their shapes, for element types
    numpy's header parser rejects (ml_dtypes' float8e5m2 saves as '<f1'); the inputs check views them as
    the argument's type."""
    import ast

    arrays = {}
    try:
        with zipfile.ZipFile(path) as z:
            for member in z.namelist():
                data = z.read(member)
                if not data.startswith(b"\x93NUMPY"):
                    raise ValueError(f"member '{member}' is not a .npy array")
                size = 2 if data[6] == 1 else 4
                length = int.from_bytes(data[8:8 + size], "little")
                header = ast.literal_eval(data[8 + size:8 + size + length].decode("latin1"))
                if header.get("fortran_order"):
                    raise ValueError(f"member '{member}' is in Fortran order")
                itemsize = int("".join(c for c in str(header["descr"]) if c.isdigit()) or 0)
                body = data[8 + size + length:]
                arr = np.frombuffer(body, f"V{itemsize}").reshape(tuple(header["shape"]))
                arrays[member.removesuffix(".npy")] = arr
    except (ValueError, KeyError, SyntaxError, zipfile.BadZipFile) as e:
        raise fail(f"cannot read inputs '{path}': not a valid .npz file ({e})") from None
    return arrays


def summary_table(names: list[str], arrays: list[np.ndarray]) -> str:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, title=None)
    for col in ("output", "type", "min", "max", "mean", "checksum"):
        table.add_column(col, justify="left" if col in ("output", "type") else "right")
    from ..ir.types import TensorType

    for name, a in zip(names, arrays, strict=True):
        t = str(TensorType.of(a))
        if a.size == 0:
            table.add_row(name, t, "-", "-", "-", "-")
            continue
        f = a.astype(np.float64)
        table.add_row(name, t, f"{f.min():.6g}", f"{f.max():.6g}", f"{f.mean():.6g}", f"{f.sum():.6g}")
    buf = io.StringIO()
    Console(file=buf, width=120, force_terminal=sys.stdout.isatty(), highlight=False).print(table)
    return buf.getvalue()


@click.command(
    epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@version_option
@click.argument("input", required=False, default="-", metavar="[INPUT]")
@click.option(
    "--target",
    type=click.Choice(["auto", "numpy", "opencl"]),
    default="auto",
    show_default=True,
    help="Where to run: numpy (the reference interpreter; runs any level, a launch by its reference "
    "body) or opencl (lowering graph-level input first). auto: opencl for lowered input, else "
    "numpy.",
)
@click.option(
    "--device",
    metavar="SPEC",
    default="auto",
    show_default=True,
    help="OpenCL device: 'auto' (the first GPU, else the first device of the most compute units), an "
    "index from --list-devices, or part of a device name.",
)
@click.option(
    "--execution",
    type=click.Choice(["auto", "pool", "inline", "cooperative"]),
    default=None,
    help="OpenCL on PoCL's CPU device: 'pool' runs kernels on PoCL's worker threads, 'inline' on this "
    "thread (PoCL's basic device: no wake-ups, one core), 'cooperative' runs each run as one persistent "
    "kernel whose work-groups this thread and the pool's workers share (both cores, no wake-up per "
    "launch), 'auto' starts on the pool and, from the 8th run, once building them pays for itself, has "
    "the inline and cooperative ways built in the background and compares them over the runs, keeping "
    "the fastest; the summary's execution: line says what it chose or why it is still on the pool. "
    "Default: $TESSEL_EXECUTION, else auto. Other devices have one way to run.",
)
@click.option("--list-devices", is_flag=True, help="List the OpenCL devices and exit.")
@click.option(
    "--calibrate",
    is_flag=True,
    help="Measure the device's peaks (SGEMM GFLOP/s, elementwise GB/s, launch overhead) again, store them "
    "for --profile's roofline (which calibrates on a device's first use), and exit.",
)
@click.option("--func", "func_name", metavar="NAME", help="The func to run (default: @main, else the first).")
@click.option("--inputs", metavar="FILE.npz", help="Input arrays keyed by argument name.")
@click.option("--random-inputs", is_flag=True, help="Use seeded random inputs (floats in [-1, 1)).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for --random-inputs.")
@click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=DxD...",
              help="With --random-inputs, the shape of an input with dynamic dims (a func with dims like "
              "[N] runs at any size: this picks one).")
@click.option(
    "--outputs", metavar="FILE.npz", help="Write the results here, keyed by result name (atomically)."
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="Time N runs (after one warm-up run when N > 1) and report the median and the minimum.",
)
@click.option(
    "--profile",
    is_flag=True,
    help="OpenCL: print per kernel its launches, time (profiling events), GFLOP/s, GB/s, arithmetic "
    "intensity and fraction of the device's peak, with the ONNX nodes it came from; then the kernel time "
    "per run, the wall time and the overhead (wall minus kernel time: launches, wake-ups, copies); and on "
    "stderr the table of --time-build.",
)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="With --profile, show only the N slowest kernels.",
)
@click.option(
    "--report-json",
    metavar="FILE",
    help="Write the timings as JSON: median_ms, min_ms, load times, peak memory and (OpenCL) a "
    "per-kernel list.",
)
@click.option(
    "--check-against",
    type=click.Choice(["numpy"]),
    default=None,
    help="Also run the numpy reference and fail when the results differ beyond --rtol/--atol.",
)
@click.option(
    "--rtol", type=float, default=1e-3, show_default=True, help="Relative tolerance of --check-against."
)
@click.option(
    "--atol", type=float, default=1e-4, show_default=True, help="Absolute tolerance of --check-against."
)
@click.option(
    "--poison",
    is_flag=True,
    help="OpenCL: fill every buffer of the memory plan (results and scratch) with signalling NaNs (a "
    "buffer of integers: the byte 0xA5) before every run, so a kernel that reads memory no earlier "
    "kernel wrote carries the pattern into the results; with --check-against the error names the "
    "first kernel whose output went wrong ($TESSEL_POISON=1 does the same).",
)
@check_bounds_option
@time_build_option()
@click.option("--quiet", "-q", is_flag=True, help="Print no summary table.")
@winograd_option
@debug_option
@handle_errors
def main(
    input: str,
    target: str,
    device: str,
    execution: str | None,
    list_devices: bool,
    calibrate: bool,
    func_name: str | None,
    inputs: str | None,
    random_inputs: bool,
    seed: int,
    input_shape: tuple[str, ...],
    outputs: str | None,
    repeat: int,
    profile: bool,
    top: int | None,
    report_json: str | None,
    check_against: str | None,
    rtol: float,
    atol: float,
    poison: bool,
    check_bounds: bool,
    time_build: bool,
    quiet: bool,
    no_winograd: bool,
    debug: bool,
) -> None:
    """Run a tessel IR module and print a summary of its outputs.

    Reads INPUT (stdin when '-' or missing), verifies it, feeds the func its inputs (--inputs or
    --random-inputs), and prints one row per output (type, min, max, mean, checksum), then the time.
    On OpenCL, loading (program build, weight upload) is timed apart from running. A module lowered
    with --check-bounds stops at a kernel's first out-of-bounds access (exit status 3).
    """
    from ..ir.interpreter import check_inputs, output_names
    from ..ir.interpreter import random_inputs as make_random
    from ..targets.numpy.interpreter import run_func  # the numpy target (and --check-against's reference)

    if list_devices or calibrate:
        _device_command(list_devices, device)
        return
    if inputs and random_inputs:
        raise fail("give either --inputs or --random-inputs, not both", 2)
    data, filename = read_input(input)
    module = parse_module(data, filename)
    verify_or_raise(module)
    if not module.funcs:
        raise fail(f"'{filename}' holds no func to run")
    func = module.func(func_name or "main") or (None if func_name else module.funcs[0])
    if func is None:
        raise fail(
            f"no func @{func_name} in '{filename}' (it has: "
            + ", ".join("@" + f.name for f in module.funcs)
            + ")"
        )
    if inputs:
        arrays = check_inputs(func, load_npz(inputs), f"inputs in '{inputs}'")
    elif random_inputs or not func.args:
        from .import_ import parse_input_shapes

        arrays = check_inputs(func, make_random(func, seed, shapes=parse_input_shapes(input_shape)))
    else:
        raise DiagnosticError(
            Diagnostic(
                "error",
                f"func @{func.name} takes {len(func.args)} inputs: give --inputs FILE.npz or --random-inputs",
            )
        )
    from ..targets.opencl.lower import is_lowered

    lowered = is_lowered(module)
    if target == "auto":
        target = "opencl" if lowered else "numpy"
    if profile and target != "opencl":
        raise fail("--profile needs --target=opencl (the numpy target has no kernels to time)", 2)
    reference = None
    if check_against:
        reference = run_func(module, func, arrays)
    report: dict = {"target": target, "func": func.name, "repeat": repeat}
    if target == "numpy":
        results, times = [], []
        for _ in range(repeat + (1 if repeat > 1 else 0)):
            t0 = time.perf_counter()
            results = run_func(module, func, arrays)
            times.append(time.perf_counter() - t0)
        times = times[1:] if repeat > 1 else times
        rows, exe, built = None, None, ([], None, [])
    else:
        results, times, rows, exe, built = _run_opencl(
            module, func, arrays, device, lowered, repeat, profile or bool(report_json), report, execution,
            lower_schedule(no_winograd), poison or None, check_bounds or None, time_build,
        )
    names = output_names(func)
    if reference is not None:
        _compare(names, results, reference, rtol, atol, (module, func, arrays, exe))
    if outputs:
        with atomic_output(outputs, "wb") as f:
            np.savez(f, **dict(zip(names, results, strict=True)))
    median, best = float(np.median(times)) * 1000, min(times) * 1000
    report.update(median_ms=round(median, 4), min_ms=round(best, 4))
    if not quiet:
        sys.stdout.write(summary_table(names, results))
    if profile and rows is not None:
        cores = int(getattr(getattr(exe, "device", None), "max_compute_units", 1) or 1)
        sys.stdout.write(profile_table(rows, report["peaks"], top, median, cores))
        report["overhead_ms"] = round(median - sum(r.ms for r in rows), 4)
    if not quiet or profile:
        where = target if exe is None else f"{target} ({report['device']})"
        timing = (
            f"{median:.3f} ms"
            if repeat == 1
            else f"median {median:.3f} ms, min {best:.3f} ms over {repeat} runs"
        )
        sys.stdout.write(f"ran @{func.name} on {where} in {timing}\n")
        if exe is not None:
            sys.stdout.write(
                f"loaded in {report['load_ms']:.1f} ms (program build {report['build_ms']:.1f} ms); "
                f"{len(exe.steps)} kernel launches; peak device memory "
                f"{_mib(report['peak_bytes'])} for activations + {_mib(report['weight_bytes'])} "
                "weights\n"
            )
            if exe.running_on != "device":
                why = exe.adapt_note or getattr(exe, "waiting_note", lambda: "")()
                note = f" ({why})" if why else ""
                sys.stdout.write(f"execution: {exe.running_on}{note}\n")
        if reference is not None:
            sys.stdout.write(f"matches numpy within rtol {rtol:g}, atol {atol:g}\n")
    if report_json:
        import json

        with atomic_output(report_json) as f:
            json.dump(report, f, indent=2, sort_keys=True)
            f.write("\n")
    if time_build or (profile and exe is not None):
        builds, first, launches = built
        print_build_table(builds, first, "" if exe is not None else "the numpy target builds no program",
                          launches=launches)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _opencl():  # noqa: ANN202
    from ..targets.opencl import device as dev

    try:
        dev.all_devices()
    except dev.NoOpenCL as e:
        raise fail(str(e)) from None
    return dev


def _pick(dev, spec: str):  # noqa: ANN001, ANN202
    try:
        return dev.pick_device(spec)
    except ValueError as e:
        raise fail(str(e), 2) from None


def _device_command(list_devices: bool, spec: str) -> None:
    dev = _opencl()
    if list_devices:
        for i, d in enumerate(dev.all_devices()):
            sys.stdout.write(f"{i}: {dev.describe(d)}  [fingerprint {dev.fingerprint(d)}]\n")
        return
    from ..targets.opencl.profile import calibrate, save_peaks

    d = _pick(dev, spec)
    sys.stderr.write(f"calibrating {dev.describe(d)} ...\n")
    peaks = calibrate(d)
    path = save_peaks(d, peaks)
    sys.stdout.write(
        f"{dev.describe(d)}: SGEMM {peaks.gflops:.1f} GFLOP/s, elementwise {peaks.gbps:.1f} GB/s, "
        f"weights streamed {peaks.stream_gbps:.1f} GB/s, launch + finish {peaks.launch_us:.1f} us "
        f"(saved to {path})\n"
    )


def _run_opencl(module, func, arrays, spec, lowered, repeat, profile, report, execution, schedule,  # noqa: ANN001, ANN202
                poison, check_bounds, time_build=False):
    from ..targets.opencl.checks import bounds_checked
    from ..targets.opencl.dynamic import executable
    from ..targets.opencl.lower import lower_module
    from ..targets.opencl.profile import compile_info, kernel_rows, peaks_for

    dev = _opencl()
    d = _pick(dev, spec)
    if not lowered:  # the lowering's cost model reads the device's peaks (calibrated on its first use)
        info = compile_info(d, lambda text: sys.stderr.write(f"tessel-run: {text}\n"))
    mark = build_mark()  # the builds of loading and running (not the calibration's, before or after)
    t0 = time.perf_counter()
    if not lowered:
        lower_module(module, info, None, schedule, check_bounds=check_bounds)
    elif check_bounds and not bounds_checked(func):
        raise fail("--check-bounds: this module is lowered without checks (lower it with "
                   "tessel-codegen --check-bounds)", 2)
    exe = executable(module, func, d, profile=profile, execution=execution, poison=poison)
    if hasattr(exe, "for_shapes"):  # a dynamic func: its executable for these inputs' sizes
        exe = exe.for_shapes([a.shape for a in arrays])
    load = time.perf_counter() - t0
    launches: list[tuple[str, float]] = []
    if (time_build and hasattr(exe, "first_launches") and exe.running_on in ("pool", "device")
            and exe.checks is None):
        t1 = time.perf_counter()  # the first run launch by launch: where its compiling goes
        launches = exe.first_launches(arrays)
        first = time.perf_counter() - t1
        results, stats = exe.measure(arrays, repeat, warmup=0)
    elif repeat > 1:  # the warm-up run of measure(warmup=1), timed: the first run (--time-build's line)
        t1 = time.perf_counter()
        exe.run(arrays)
        first = time.perf_counter() - t1
        results, stats = exe.measure(arrays, repeat, warmup=0)
    else:
        results, stats = exe.measure(arrays, repeat, warmup=0)
        first = stats.seconds[0]
    builds = builds_since(mark)
    report.update(execution=exe.running_on,
                  execution_note=exe.adapt_note or getattr(exe, "waiting_note", lambda: "")())
    report.update(
        device=dev.describe(d),
        load_ms=round(load * 1000, 3),
        build_ms=round(exe.build_seconds * 1000, 3),
        peak_bytes=exe.peak_bytes,
        weight_bytes=exe.weight_bytes,
        launches=len(exe.steps),
    )
    rows = None
    if profile:
        rows = kernel_rows(exe, stats)
        peaks = peaks_for(d, lambda text: sys.stderr.write(f"tessel-run: {text}\n"))
        report["peaks"] = peaks.__dict__
        report["kernels"] = [r.as_dict(peaks) for r in rows]
    return results, stats.seconds, rows, exe, (builds, first, launches)


def _compare(names, results, reference, rtol, atol, run) -> None:  # noqa: ANN001
    from ..debug.validate import Tolerance, mismatch_error

    tol = Tolerance(rtol, atol)
    error = mismatch_error(names, results, reference, tol, "results do not match the numpy reference")
    if error is not None:
        module, func, arrays, exe = run
        if exe is not None:  # OpenCL: name the first launch whose results went wrong
            from ..debug.localize import first_wrong_launch

            note = first_wrong_launch(module, func, arrays, exe, tol)
            if note:
                error.diagnostics[0].note(note)
        raise error


def profile_table(  # noqa: ANN001
    rows, peaks: dict, top: int | None, wall_ms: float | None = None, compute_units: int = 1
) -> str:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from ..targets.opencl.profile import Peaks

    p = Peaks(**peaks)
    total = sum(r.ms for r in rows) or 1.0
    table = Table(box=box.SIMPLE_HEAD, title=None)
    for col in (
        "kernel",
        "launches",
        "ms",
        "%",
        "GFLOP/s",
        "GB/s",
        "FLOP/B",
        "bound",
        "% peak",
        "onnx nodes",
    ):
        table.add_column(col, justify="left" if col in ("kernel", "bound", "onnx nodes") else "right")
    for r in rows[:top] if top else rows:
        bound, frac = r.bound(p)
        nodes = ", ".join(r.locs[:3]) + (f" (+{len(r.locs) - 3})" if len(r.locs) > 3 else "")
        table.add_row(
            r.name,
            str(r.launches),
            f"{r.ms:.3f}",
            f"{100 * r.ms / total:.1f}",
            f"{r.gflops:.1f}",
            f"{r.gbps:.1f}",
            f"{r.intensity:.2f}",
            bound,
            "-" if frac is None else f"{100 * frac:.0f}",
            nodes,
        )
    buf = io.StringIO()
    Console(file=buf, width=160, force_terminal=sys.stdout.isatty(), highlight=False).print(table)
    note = f"kernel time {total:.3f} ms per run"
    if wall_ms is not None:  # what the kernels' own times do not account for: launches, waits, copies
        over = wall_ms - total
        note += f"; wall {wall_ms:.3f} ms, overhead {over:.3f} ms ({100 * over / wall_ms:.0f}% of wall)"
    note += f"; peaks {p.gflops:.0f} GFLOP/s, {p.gbps:.0f} GB/s (calibrated {p.measured})"
    from ..targets.opencl.profile import LOW_PEAK, why_low

    low = [(r, why_low(r, p, compute_units)) for r in (rows[:top] if top else rows)]
    low = [(r, why) for r, why in low if why]
    if low:
        note += f"\nunder {100 * LOW_PEAK:.0f}% of the roofline:"
        note += "".join(f"\n  {r.name}: {why}" for r, why in low)
    return buf.getvalue() + note + "\n"
