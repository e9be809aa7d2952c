"""Per-kernel profiles against the roofline, and the device calibration they are measured against.

`calibrate(device)` measures the device's peaks with tessel's own kernels — SGEMM 1024^3 (GFLOP/s), a 64 MiB
f32 add (GB/s, counting its three streams), the rate at which the GEMM micro-kernel streams constant weights
it uses few times from memory (`stream_gbps`: 16 rows against 128 MiB of weights; the lowering's cost model
reads it, see kernels/winograd.py) and an empty launch + finish (launch overhead) — and `save_peaks`
keeps them in `<cache>/calibration.json` under the device's fingerprint (a cache.py entry: checked by its
hash, written atomically). `kernel_rows` turns a profiled run into one row per kernel: launches, time from
OpenCL profiling events, GFLOP/s, GB/s, arithmetic intensity, and the fraction of the peak (compute or
bandwidth) that bounds it by the roofline. `peaks_for(device)` is what the tools call: the stored peaks, or
a calibration made and stored on the device's first use (a few seconds; the fingerprint names the
platform, device, driver version and compute units, so a new driver is calibrated anew); `compile_info`
leaves that calibration to the first lowering that needs the peaks (OnFirstNeed).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ...ir.parser import parse_module
from . import device as dev
from .cache import discard, locked, read_entry, write_entry
from .lower import lower_module
from .runtime import Executable, RunStats, cache_dir


@dataclass(frozen=True)
class Peaks:
    gflops: float
    gbps: float
    launch_us: float
    device: str = ""
    measured: str = ""
    stream_gbps: float = 0.0  # 0: stored by a tessel that did not measure it (calibrated anew when needed)

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the roofline turns from bandwidth- to compute-bound."""
        return self.gflops / self.gbps if self.gbps else 0.0


def _store() -> str:
    return os.path.join(cache_dir(), "calibration.json")


RECALIBRATE = "re-measured by tessel-tune or tessel-run --calibrate"


def _table(path: str) -> dict[str, Any]:
    """The store's {fingerprint: peaks}; {} when it is missing or bad (a bad one warns and is removed). A
    store of plain JSON (tessel before the hash) is read, and the next save adds the header."""
    payload = read_entry(path, RECALIBRATE, legacy=b"{")
    try:
        table = json.loads(payload) if payload is not None else {}
    except ValueError:  # a plain store that does not parse, or a sound entry written by something else
        discard(path, "not a JSON object", RECALIBRATE)
        return {}
    return table if isinstance(table, dict) else {}


def load_peaks(device: Any) -> Peaks | None:
    entry = _table(_store()).get(dev.fingerprint(device))
    try:
        return Peaks(**entry) if entry else None
    except TypeError:
        return None


def save_peaks(device: Any, peaks: Peaks) -> str:
    """Add the device's peaks to the store. Two processes saving at once take turns (a lock file beside
    the store), so neither loses the other's device; each write is atomic (cache.write_entry)."""
    path = _store()
    with locked(path):
        table = _table(path)
        table[dev.fingerprint(device)] = asdict(peaks)
        if not write_entry(path, json.dumps(table, indent=2, sort_keys=True).encode() + b"\n"):
            raise OSError(f"cannot write the calibration store {path}")
    return path


def peaks_for(device: Any, say: Any = None) -> Peaks:
    """The device's stored peaks, else calibrate it now and store them (first use of a device, or of a new
    driver). `say(text)` is told before a calibration starts. A store that cannot be written leaves the
    peaks for this process only."""
    peaks = load_peaks(device)
    if peaks is not None and peaks.stream_gbps:
        return peaks
    if say is not None:
        say(f"calibrating {dev.describe(device)} (first use: SGEMM, stream and launch peaks; stored in "
            f"{_store()})")
    peaks = calibrate(device)
    try:
        save_peaks(device, peaks)
    except OSError:
        pass
    return peaks


class OnFirstNeed:
    """A device's peaks, calibrated (and stored, `say` told) the first time they are asked for: the hook a
    DeviceInfo without stored peaks carries (DeviceInfo.measured). `peaks` is None until then."""

    def __init__(self, device: Any, say: Any = None):
        self.device, self.say = device, say
        self.peaks: Peaks | None = None

    def __call__(self) -> Peaks:
        if self.peaks is None:
            self.peaks = peaks_for(self.device, self.say)
        return self.peaks


def compile_info(device: Any, say: Any = None) -> Any:
    """The DeviceInfo to compile for `device`: what it reports, with its stored peaks, which the lowering's
    cost model reads (kernels/winograd.py). A device never calibrated (or calibrated by a tessel that did
    not measure every peak) gets them on its first need instead: the info carries an OnFirstNeed hook, and
    the first lowering whose choice depends on the peaks calibrates it then (a few seconds, `say` told). A
    model without such a choice (no conv the Winograd rule would consider: transformers, recurrent and
    mobile networks) compiles without one: its lowering is the same with or without the peaks."""
    peaks = load_peaks(device)
    if peaks is not None and peaks.stream_gbps:
        return dev.device_info(device, peaks)
    return dataclasses.replace(dev.device_info(device, NO_PEAKS), calibrate=OnFirstNeed(device, say))


NO_PEAKS = Peaks(0.0, 0.0, 0.0)
"""What device_info is given for a device whose peaks are still to be measured."""


def _module(body: str, args: str, result: str) -> Any:
    return parse_module(
        f"module @calibrate {{\n  func @main({args}) -> {result} {{\n{body}\n  }}\n}}\n", "<calibrate>"
    )


def _best(exe: Executable, inputs: list[np.ndarray], repeat: int) -> float:
    """Best seconds of a whole run (copies in and out, launches, finish)."""
    exe.run(inputs)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        exe.run(inputs)
        best = min(best, time.perf_counter() - t0)
    return best


def best_kernel_seconds(exe: Executable, inputs: list[np.ndarray], repeat: int) -> float:
    """Best over runs of the summed kernel times from profiling events (no host copies)."""
    _, stats = exe.measure(inputs, repeat)
    per_run = [sum(ts[r] for ts in stats.kernel_ns.values()) for r in range(len(stats.seconds))]
    return min(per_run) / 1e9


def _pooled(module: Any, device: Any, profile: bool = False) -> Executable:
    """A calibration kernel's executable, on PoCL's pool only: `auto` would build its inline and
    cooperative programs at the 8th run (half of a first use's calibration time) and time the pool's
    launches against those ways; the peaks are the pool's."""
    return Executable(module, module.funcs[0], device, profile=profile, execution="pool")


BIG_REPEAT = 3
"""Timed runs of the two kernels over 64-128 MiB (the add, the weight stream): the host's copies of each
run are most of a calibration's time (a first use of a device pays it), and a kernel that long varies
little between runs."""


def _filled(shape: tuple[int, ...]) -> np.ndarray:
    """A calibration operand: a normal float, the same everywhere (the kernels' speed does not depend on
    the values; drawing 32M random numbers took a fifth of a calibration)."""
    return np.full(shape, 0.5, np.float32)


def calibrate(device: Any, repeat: int = 5) -> Peaks:
    info = dev.device_info(device)
    n = 1024
    t = f"tensor<{n}x{n}xf32>"
    gemm = _module(f"    %0 = matmul %a, %b : ({t}, {t}) -> {t}\n    return %0 : {t}", f"%a: {t}, %b: {t}", t)
    lower_module(gemm, info)
    a, b = (_filled((n, n)) for _ in range(2))
    gflops = 2 * n**3 / best_kernel_seconds(_pooled(gemm, device, profile=True), [a, b], repeat) / 1e9
    m = 16 << 20
    v = f"tensor<{m}xf32>"
    add = _module(f"    %0 = add %a, %b : ({v}, {v}) -> {v}\n    return %0 : {v}", f"%a: {v}, %b: {v}", v)
    lower_module(add, info)
    x, y = (_filled((m,)) for _ in range(2))
    exe = _pooled(add, device, profile=True)
    # two streams read, one written; each run also copies 192 MiB in and out, so fewer runs
    gbps = 3 * 4 * m / best_kernel_seconds(exe, [x, y], BIG_REPEAT) / 1e9
    stream = stream_gbps(device, info, BIG_REPEAT)
    s = "tensor<1xf32>"
    tiny = _module(f"    %0 = relu %a : ({s}) -> {s}\n    return %0 : {s}", f"%a: {s}", s)
    lower_module(tiny, info)
    one = _pooled(tiny, device)
    launch = _best(one, [np.ones(1, np.float32)], 50)
    return Peaks(
        round(gflops, 1),
        round(gbps, 1),
        round(launch * 1e6, 1),
        dev.describe(device),
        time.strftime("%Y-%m-%d"),
        round(stream, 1),
    )


STREAM_ROWS, STREAM_K, STREAM_N = 16, 4096, 8192
"""The weight-streaming calibration: [16 x 4096] @ a constant [4096 x 8192] (128 MiB, past the caches a
process gets), each weight used by 16 rows, as a Winograd GEMM on 16 tiles or a matmul on 16 tokens uses
it: its time is the weights' bytes over the rate one micro-kernel a core streams them at, which on some
CPUs is well under the copy bandwidth `gbps` measures with three streams a core (an Intel Xeon VM: 12.5
against 28 GB/s)."""


def stream_gbps(device: Any, info: Any, repeat: int) -> float:
    """GB/s of constant weights read by the GEMM micro-kernel over STREAM_ROWS rows (profiling events)."""
    a, b, y = (f"tensor<{STREAM_ROWS}x{STREAM_K}xf32>", f"tensor<{STREAM_K}x{STREAM_N}xf32>",
               f"tensor<{STREAM_ROWS}x{STREAM_N}xf32>")
    body = (f"    %w = const {{value = dense<0.01> : {b}}} : () -> {b}\n"
            f"    %0 = matmul %a, %w : ({a}, {b}) -> {y}\n    return %0 : {y}")
    module = _module(body, f"%a: {a}", y)
    lower_module(module, info)
    seconds = best_kernel_seconds(_pooled(module, device, profile=True), [_filled((STREAM_ROWS, STREAM_K))],
                                  repeat)
    return 4 * STREAM_K * STREAM_N / seconds / 1e9


@dataclass
class KernelRow:
    name: str
    launches: int
    ms: float  # per run, summed over its launches (median of runs)
    flops: int
    bytes: int
    ops: list[str]
    locs: list[str]
    helper: bool = True  # every launch is a helper kernel of its op (moves data; its op's FLOPs are not its)
    groups: int = 0  # the fewest work-groups a launch of it has
    local: tuple[int, ...] = ()

    @property
    def gflops(self) -> float:
        return self.flops / self.ms / 1e6 if self.ms else 0.0

    @property
    def gbps(self) -> float:
        return self.bytes / self.ms / 1e6 if self.ms else 0.0

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0

    def bound(self, peaks: Peaks | None) -> tuple[str, float | None]:
        """'compute' or 'memory' by the roofline, and the fraction of that peak reached."""
        if peaks is None or not self.ms:
            return ("compute" if self.intensity > 10 else "memory"), None
        if self.intensity >= peaks.ridge:
            return "compute", self.gflops / peaks.gflops
        return "memory", self.gbps / peaks.gbps

    def as_dict(self, peaks: Peaks | None) -> dict[str, Any]:
        bound, frac = self.bound(peaks)
        return {
            "kernel": self.name,
            "launches": self.launches,
            "ms": round(self.ms, 4),
            "gflops": round(self.gflops, 2),
            "gbps": round(self.gbps, 2),
            "intensity": round(self.intensity, 3),
            "bound": bound,
            "peak_fraction": None if frac is None else round(frac, 3),
            "ops": self.ops,
            "onnx": self.locs,
        }


LOW_PEAK = 0.2
"""A kernel under this fraction of its roofline bound gets a note in --profile saying why it may be."""


def why_low(row: KernelRow, peaks: Peaks, compute_units: int) -> str:
    """Why `row` runs under LOW_PEAK of its roofline bound, as far as its launches tell ("" when it does
    not): a helper kernel moving data for its op, a kernel so short that the pool's dispatch is its time,
    too few work-groups for the compute units, else its shape."""
    bound, frac = row.bound(peaks)
    if frac is None or frac >= LOW_PEAK:
        return ""
    us = 1e3 * row.ms / max(row.launches, 1)
    ops = "/".join(o for o in row.ops if o != "kernel") or re.sub(r"^k\d+_", "", row.name)
    if row.helper:
        return (f"moves data for its {ops} (a repack or a transform: the {ops}'s FLOPs count on its main "
                f"kernel), {row.gbps:.1f} GB/s")
    if us < 3 * peaks.launch_us:
        return f"{us:.1f} us a launch, where the pool's dispatch costs ~{peaks.launch_us:.0f} us"
    if row.groups < compute_units:
        plural = "s" if row.groups != 1 else ""
        return f"{row.groups} work-group{plural} of {row.local} for {compute_units} cores"
    return (f"{bound}-bound {ops} at {100 * frac:.0f}% of the roofline with {row.groups} work-groups of "
            f"{row.local}: no kernel fitted to its shape (tessel tune may find a better schedule)")


def kernel_rows(exe: Executable, stats: RunStats) -> list[KernelRow]:
    """One row per kernel, slowest first (a kernel shared by identical ops is one row with its launches)."""
    rows: dict[str, KernelRow] = {}
    for i, step in enumerate(exe.steps):
        times = stats.kernel_ns.get(i)
        if not times:
            continue
        row = rows.setdefault(step.name, KernelRow(step.name, 0, 0.0, 0, 0, [], []))
        row.helper = row.helper and step.helper
        local = tuple(step.local_size or (1,) * len(step.global_size))
        groups = math.prod(-(-g // lo) for g, lo in zip(step.global_size, local, strict=False))
        row.groups = groups if not row.launches else min(row.groups, groups)
        row.local = row.local or local
        row.launches += 1
        row.ms += float(np.median(times)) / 1e6
        row.flops += step.flops
        row.bytes += step.bytes
        if step.op not in row.ops:
            row.ops.append(step.op)
        for loc in step.loc:
            name = loc.removeprefix("onnx:")
            if name not in row.locs:
                row.locs.append(name)
    return sorted(rows.values(), key=lambda r: (-r.ms, r.name))
