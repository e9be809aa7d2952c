"""tessel-tune's driver: find a model's kernels, spend the budget where its time is, keep what measures
faster, confirm it on the whole model, and choose the way the runtime runs it.

1. `collect` lowers a copy of the module once with an empty `Tuning` whose hook sees every kernel: its
   signature (records.signature), a standalone copy of its op (measure.standalone), its space, its uses
   and its roofline time (cost.roofline_us with the device's calibrated peaks).
2. Kernels are tuned in order of roofline time x uses, skipping those the records already hold for this
   device and space version (a second run resumes), each within a share of the budget left: the space's
   points ranked by the cost model (cost.rank), the default and as many of the best-ranked points as the
   share allows compiled and timed in interleaved rounds (measure.compare); the default stays unless a
   point beats it by more than the noise (measure.winner). Each kernel's record is written at once, so an
   interrupted run keeps what it measured.
3. The confirming run lowers the whole model with and without the new records and times both in
   interleaved cycles; when the tuned model is not faster, this run's records are rewritten to keep the
   defaults. Then the runtime's own comparison of its ways to run (pool, inline, cooperative: runtime.py
   `auto`) is made on the chosen program, and the way it settles on becomes the model record.
`tune_kernel` (step 2 for one kernel) and `confirm` (step 3) take and return plain data, so a Ray worker
can run them (distributed.py).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ....ir.core import Module, Op
from ....ir.parser import parse_module
from ....passes.analysis import op_cost
from ..cache import COLD_SECONDS_PER_KB
from ..kernels import load_all
from ..kernels.base import TEMPLATES, Ctx, DeviceInfo, Lowered, NotLowerable
from ..records import EXECUTION_SPACE, Record, Tuning, label, merge
from ..space import Space, space_of
from . import measure
from .cost import CostModel, family, features, rank, roofline_us, train

MAX_POINTS = 24
"""Points measured a kernel at most, beside the default."""
KERNEL_SHARE = 0.75
"""Of the budget, what the kernels may take; the rest is the confirming run's and the execution choice's."""
MIN_NOISE = 0.01
"""The confirming run reverts this run's records only when the tuned model is slower by more than this
and more than the spread of its cycles' ratios."""
COMPILE_SECONDS_PER_KB = COLD_SECONDS_PER_KB
"""A cold build and first run of a program, per KiB of its OpenCL C (cache.py), where the untuned program
was built on this machine before (the build records) and this device's own rate is unknown: the confirming
run builds the tuned program anew, since a changed source recompiles every kernel. When the untuned
program is built cold, its own rate is used instead (Intel's CPU runtime: efficientnet_b0's program 38 s,
where this prior reserved 29)."""
RESERVE_PER_KERNEL = 0.3
"""Seconds a distinct kernel adds to a whole-program build when the untuned program was not loaded here
(Ray)."""
CONFIRM_SECONDS = 2.0
"""The confirming run's timed cycles, at most (beside building the tuned program)."""
MIN_KERNEL_SECONDS = 1.5
"""A kernel is tuned only with at least this long left for it (compiling a point takes 0.1-0.5 s)."""
MAX_KERNEL_SECONDS = 12.0


def budget_clock() -> float:
    """The clock the budget is spent by (seconds). Timings are taken with time.perf_counter itself; tests
    replace this one to make the search's extent independent of the machine's load."""
    return time.perf_counter()


@dataclass
class Found:
    """One distinct kernel of the model."""

    key: str
    label: str
    op: str
    module: Module  # the op alone (measure.standalone)
    space_size: int
    space: str = ""  # the space's version ('' without one)
    uses: int = 1
    est_us: float = 0.0  # roofline time of one use


@dataclass
class Report:
    """What one tessel-tune run did, for its summary and for the bench."""

    kernels: int = 0  # distinct kernel signatures in the model
    tunable: int = 0  # of those, with a schedule space
    tuned: int = 0  # measured in this run
    resumed: int = 0  # skipped: already in the records
    improved: int = 0  # a point other than the default won
    measured: int = 0  # points compiled and timed (defaults excluded)
    space_points: int = 0  # valid points of the tuned kernels' spaces, defaults excluded
    confirm: str = ""  # the confirming run's verdict
    speedup: float = 1.0  # untuned / tuned whole-model time in the confirming run
    execution: str = ""
    seconds: float = 0.0
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def saved(self) -> int:
        return max(0, self.space_points - self.measured)


# 1. the model's kernels ------------------------------------------------------------------------------
def collect(text: str, info: DeviceInfo, options: dict[str, Any], fingerprint: str,
            peaks: Any) -> tuple[list[Found], dict[str, str]]:
    """The distinct kernels of the module `text` (most roofline time first) and its model signatures."""
    from ..lower import lower_module

    found: dict[str, Found] = {}

    def hook(key: str, op: Op, ctx: Ctx, low: Lowered, sp: Space | None, module: Module) -> None:
        cost = op_cost(op, module)
        est = roofline_us(cost.flops, cost.bytes, peaks)
        if key in found:
            found[key].uses += 1
            return
        size = 0 if sp is None else sp.size()
        copy = measure.standalone(op, module, ctx.constant) if sp is not None else Module()
        found[key] = Found(key, label(op), op.name, copy, size, sp.version if sp else "", 1, est)

    tuning = Tuning([], fingerprint, collect=hook)
    lower_module(parse_module(text, "<tune>"), info, None, dict(options), tuning)
    order = sorted(found.values(), key=lambda f: (-f.est_us * f.uses, f.key))
    return order, dict(tuning.models)


# 2. one kernel ---------------------------------------------------------------------------------------
def _the_op(module: Module) -> tuple[Op, tuple[bool, ...]]:
    func = module.funcs[0]
    consts = {id(o.results[0]) for o in func.block.ops if o.name == "const"}
    op = next(o for o in func.block.ops if o.name not in ("const", "return"))
    return op, tuple(id(v) in consts for v in op.operands)


def tune_kernel(found: Found, device: Any, info: DeviceInfo, fingerprint: str, options: dict[str, Any],
                model: CostModel, seconds: float, max_points: int = MAX_POINTS,
                loads: list[float] | None = None) -> Record | None:
    """Measure `found`'s default and its best-ranked points within about `seconds`; its record (None when
    it has no space, or its default cannot be measured). `loads` receives the seconds each candidate took
    to lower, build and load (what a kernel costs a whole-program build, about)."""
    loads = loads if loads is not None else []
    from ....ir.ops.registry import op_sig

    t0 = budget_clock()
    load_all()
    op, constant = _the_op(found.module)
    fn = TEMPLATES[op.name]
    ctx = Ctx(op.name, op_sig(op, found.module.resources), info, constant, dict(options),
              body=op.regions[0].blocks[0] if op.regions else None, resources=found.module.resources)
    default = fn(ctx)
    sp = space_of(ctx, default)
    if sp is None:
        return None

    def lower(point: dict[str, Any]) -> Lowered | None:
        try:
            return fn(replace(ctx, schedule={**options, **point}))
        except NotLowerable:
            return None

    ranked = rank(model, sp, ctx, default, lower)
    t1 = time.perf_counter()
    trials = [measure.load(measure.lower_point(op, found.module, constant, info, options, {}), device, {})]
    load_s = time.perf_counter() - t1
    loads.append(load_s)
    feats: list[list[float]] = [features(sp, {}, default, default, info.compute_units)]
    for _, point, low in ranked:
        spent = budget_clock() - t0
        if len(trials) > max_points or spent + load_s + 0.3 * seconds > seconds:
            break
        t1 = time.perf_counter()
        try:
            module = measure.lower_point(op, found.module, constant, info, options, point)
            trial = measure.load(module, device, point)
        except Exception:  # noqa: BLE001 - a point that does not build or run is not a candidate
            continue
        loads.append(time.perf_counter() - t1)
        load_s = max(load_s * 0.5, loads[-1])
        if trial.source == trials[0].source:
            continue
        trials.append(trial)
        feats.append(features(sp, point, low, default, info.compute_units))
    left = seconds - (budget_clock() - t0)
    c = measure.compare(trials, rounds=9, block=2, max_seconds=max(0.5, left))
    w = measure.winner(c) if len(trials) > 1 else 0
    fam = family(sp)
    return Record(
        "kernel", found.key, fingerprint, sp.version, dict(trials[w].point), round(c.us[0], 3),
        round(c.us[w], 3), c.rounds * 2, op=found.op, label=found.label,
        device_name=info.name, measured=len(trials) - 1, space_size=found.space_size or sp.size(),
        trials=[[dict(t.point), round(us, 3), fam, [round(x, 4) for x in f]]
                for t, us, f in zip(trials, c.us, feats, strict=True)])


# 3. the whole model ----------------------------------------------------------------------------------
@dataclass
class Confirmed:
    untuned_us: float
    tuned_us: float
    ratio: float  # median over cycles of tuned / untuned
    spread: float
    execution: str
    note: str


def _lowered(text: str, info: DeviceInfo, options: dict[str, Any], records: Sequence[Record],
             fingerprint: str) -> Module:
    from ..lower import lower_module

    return lower_module(parse_module(text, "<tune>"), info, None, dict(options), Tuning(records, fingerprint))


@dataclass
class Baseline:
    """The untuned model, loaded and settled: what the confirming run compares against."""

    exe: Any  # runtime.Executable, run the way `auto` chose
    inputs: list[Any]
    way: str  # pool, inline or cooperative ('' for a hybrid plan or a device without a companion)
    build_seconds: float  # lowering, loading and the first run
    source_kb: float  # the program's OpenCL C: what a cold build of a changed program costs
    build_rate: float = 0.0  # seconds a KiB took to build here from source (0: it came from the cache)

    def cold_build_seconds(self) -> float:
        """What building a changed program of this size from source costs on this device: its measured
        rate, else COMPILE_SECONDS_PER_KB."""
        return self.source_kb * (self.build_rate or COMPILE_SECONDS_PER_KB)


def baseline(text: str, device: Any, info: DeviceInfo, fingerprint: str, options: dict[str, Any]) -> Baseline:
    """Lower and load the untuned module and let the runtime choose its way to run it (`auto`: pool, inline
    or cooperative; a hybrid plan is not recorded, its placement depends on the moment's kernel times)."""
    from ..runtime import Executable
    from .measure import random_inputs

    t0 = time.perf_counter()
    module = _lowered(text, info, options, [], fingerprint)
    inputs = list(random_inputs(module.funcs[0], 0))
    exe = Executable(module, module.funcs[0], device, execution="pool")
    cold = exe._cold  # never built on this machine (cache.py's build records)
    t1 = time.perf_counter()
    exe.run(inputs)  # on PoCL this compiles each kernel (at its first launch)
    first = time.perf_counter() - t1
    build = time.perf_counter() - t0
    way = ""
    if exe.companion is not None:
        auto = Executable(module, module.funcs[0], device, execution="auto")  # the program is built
        auto.settle(inputs)
        way = auto.running_on if auto.running_on in ("pool", "inline", "cooperative") else ""
        del auto
    source = next(str(o.attrs["source"]) for o in module.funcs[0].block.ops if o.name == "cl.program")
    kb = len(source) / 1024
    return Baseline(exe, inputs, way, build, kb, (exe.build_seconds + first) / kb if cold and kb else 0.0)


def confirm(text: str, device: Any, info: DeviceInfo, fingerprint: str, options: dict[str, Any],
            records: Sequence[Record], seconds: float, base: Baseline | None = None) -> Confirmed:
    """Time the module lowered with `records` and the untuned one (`base`, made here when not given) side
    by side in interleaved cycles, both on the pool (the kernels' time: the tuned program's inline and
    cooperative builds would cost more than the comparison on a large model)."""
    from ..runtime import Executable

    base = base or baseline(text, device, info, fingerprint, options)
    way = base.way
    tuned = _lowered(text, info, options, records, fingerprint)
    exes = [base.exe, Executable(tuned, tuned.funcs[0], device, execution="pool")]
    inputs = [base.inputs, base.inputs]
    for e, x in zip(exes, inputs, strict=True):
        e.enqueue(x)
    t0 = budget_clock()  # `seconds` is for the timed cycles
    times: list[list[float]] = [[], []]
    cycles = 0
    while cycles < 40:
        for k in range(2):
            i = (k + cycles) % 2
            best = math.inf
            for _ in range(2):
                t1 = time.perf_counter()
                exes[i].enqueue(inputs[i])
                best = min(best, time.perf_counter() - t1)
            times[i].append(best)
        cycles += 1
        spent = budget_clock() - t0
        if cycles >= 5 and spent / cycles * (cycles + 1) > seconds:
            break
    ratios = [t / u for t, u in zip(times[1], times[0], strict=True)]
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    return Confirmed(statistics.median(times[0]) * 1e6, statistics.median(times[1]) * 1e6,
                     statistics.median(ratios), (q[2] - q[0]) / 2, way, f"{cycles} cycles on the pool")


# the run -----------------------------------------------------------------------------------------------
Progress = Callable[[str, float], None]  # (what is being done, fraction of the budget spent)


def tune(text: str, device: Any, budget: float, records: list[Record], options: dict[str, Any],
         save: Callable[[list[Record]], None], progress: Progress | None = None,
         runner: Any = None, max_points: int = MAX_POINTS,
         info: DeviceInfo | None = None) -> tuple[list[Record], Report]:
    """Tune the module `text` on `device` for about `budget` seconds, starting from `records` (any
    device's: only this device's count as measured). `save(all records)` is called after each kernel.
    `runner`: a distributed.RayRunner to measure on (default: here, in this process). `info`: the device
    facts to lower for, when not the device's own (tuning from another device's defaults)."""
    from .. import device as dev
    from ..profile import peaks_for

    t0 = budget_clock()
    info = info or dev.device_info(device)
    fp = dev.fingerprint(device)
    report = Report()
    say = progress or (lambda what, frac: None)
    peaks = peaks_for(device, lambda text: say(text, 0.0))
    say("finding the model's kernels", 0.0)
    kernels, models = collect(text, info, options, fp, peaks)
    report.kernels = len(kernels)
    tunable = [k for k in kernels if k.space_size > 1]
    report.tunable = len(tunable)
    known = Tuning(records, fp)
    model = train(records)
    new: list[Record] = []

    def elapsed() -> float:
        return budget_clock() - t0

    # the confirming run compiles the whole program twice (about RESERVE_PER_KERNEL a kernel each time)
    base = None
    if runner is None:  # the untuned model first, and the way `auto` runs it
        say("loading the untuned model", elapsed() / budget)
        base = baseline(text, device, info, fp, options)
    loads: list[float] = []

    def reserve() -> float:
        """Seconds the confirming run needs: building the tuned program (PoCL compiles every kernel of a
        changed program again: COMPILE_SECONDS_PER_KB of its source) and its timed cycles."""
        build = base.cold_build_seconds() if base else RESERVE_PER_KERNEL * len(kernels)
        return min(budget / 2, max(budget * (1 - KERNEL_SHARE), build + CONFIRM_SECONDS))
    todo = []
    for k in tunable:
        if known.find("kernel", k.key, k.space)[0] is not None:
            report.resumed += 1
        else:
            todo.append(k)
    total_est = sum(k.est_us * k.uses for k in todo) or 1.0
    if runner is not None:
        new = runner.tune_kernels(todo, fp, options, model, budget - reserve() - elapsed(), say)
        save(merge(records, new))
    else:
        for i, k in enumerate(todo):
            left = budget - reserve() - elapsed()
            if left < MIN_KERNEL_SECONDS:
                break
            rest = sum(x.est_us * x.uses for x in todo[i:]) or total_est
            share = min(MAX_KERNEL_SECONDS, max(MIN_KERNEL_SECONDS, left * (k.est_us * k.uses) / rest * 2))
            say(f"kernel {i + 1}/{len(todo)}: {k.label[:60]}", elapsed() / budget)
            rec = tune_kernel(k, device, info, fp, options, model, min(share, left), max_points, loads)
            if rec is not None:
                new.append(rec)
                save(merge(records, new))
                model = train([*records, *new])  # what this kernel's trials teach the next ranking
    for rec in new:
        report.tuned += 1
        report.improved += bool(rec.schedule)
        report.measured += rec.measured
        report.space_points += max(0, rec.space_size - 1)
        report.rows.append({"label": rec.label, "key": rec.key, "default_us": rec.default_us,
                            "best_us": rec.best_us, "schedule": rec.schedule, "measured": rec.measured,
                            "space": rec.space_size})
    everything = merge(records, new)
    model_key = next(iter(models.values()), "")
    if model_key and (new or known.find("model", model_key, EXECUTION_SPACE)[0] is None):
        say("confirming on the whole model", elapsed() / budget)
        left = max(1.0, budget - elapsed() - (reserve() - CONFIRM_SECONDS))
        if runner is not None:
            c = runner.confirm(text, fp, options, everything, left)
        else:
            c = confirm(text, device, info, fp, options, everything, left, base)
        report.speedup = 1.0 / c.ratio if c.ratio > 0 else 1.0
        if c.ratio > 1.0 + max(MIN_NOISE, c.spread) and any(r.schedule for r in new):
            report.confirm = (f"tuned {c.tuned_us:.1f} us against {c.untuned_us:.1f} us untuned (ratio "
                              f"{c.ratio:.3f} +- {c.spread:.3f}): slower, this run's kernels keep their "
                              "defaults")
            new = [replace(r, schedule={}, best_us=r.default_us) for r in new]
            report.improved = 0
            report.speedup = 1.0
        else:
            report.confirm = (f"tuned {c.tuned_us:.1f} us, untuned {c.untuned_us:.1f} us "
                              f"(ratio {c.ratio:.3f} +- {c.spread:.3f}, {c.note})")
        report.execution = c.execution
        if c.execution:
            func_name = next(iter(models))
            new.append(Record("model", model_key, fp, EXECUTION_SPACE, {"execution": c.execution},
                              round(c.untuned_us, 3), round(min(c.tuned_us, c.untuned_us), 3), 0,
                              op=func_name, label=f"func @{func_name}, {len(kernels)} kernels",
                              device_name=info.name))
        everything = merge(records, new)
        save(everything)
    report.seconds = elapsed()
    return everything, report
