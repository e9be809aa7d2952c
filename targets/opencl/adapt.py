"""How `auto` execution chooses where a model's kernels run (docs/opencl.md "Execution"): from the
ADAPT_AFTER-th run, once building them pays for itself, a child process builds the inline and cooperative
programs (prepare.py); then the pool, the inline companion and cooperative execution are timed side by side
over the runs (a Trial: one way a run, no run waits), the fastest is kept, and the choice is rechecked now
and then the same way. `settle` compares at once (with a hybrid plan of pool and inline), for benchmarks.
The Adaptive mixin is Executable's (runtime.py): it runs the executable's own `enqueue` under each
`place`ment."""

from __future__ import annotations

import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

ADAPT_AFTER = 8
"""Runs before `auto` considers the other ways to run: a model run once or twice (a test, a one-shot
tessel-run) never builds them; a service considers them from its 8th run (`_worth_preparing`)."""
ADAPT_MAX_SECONDS = 0.05
"""When a run on the pool takes longer, `auto` compares it with cooperative execution only: the inline
device would give up a core, and dispatch is a few percent (a launch costs the pool 5-40 us), unless the
model has more kernels than PoCL keeps loaded (docs/opencl.md "Execution")."""
ADAPT_SECONDS = 0.5
"""About how long `auto` spends comparing the ways to run (within ADAPT_CYCLES)."""
ADAPT_CYCLES = (3, 25)
"""The fewest and most interleaved cycles `auto` compares in (a cycle runs each way once or twice)."""
ADAPT_MARGIN = 0.97
"""Another way must take under this fraction of the pool's time (by the median ratio) to replace it."""
RECHECK_SECONDS = 0.5
"""After choosing, `auto` compares its choice with the runner-up again, side by side, at the first `run`
once this long has passed (longer when a recheck takes over RECHECK_SHARE of it): a choice made while this
VM ran at one core's speed (where inline wins) would otherwise stay for the whole process once both cores
are back (measured: mobilenet_v2 kept hybrid at 1.37 ms a run, cooperative takes 0.78)."""
RECHECK_CYCLES = 4
"""Interleaved cycles of a recheck (each runs both ways twice in a row, the faster counts)."""
RECHECK_SHARE = 0.02
"""The most of a process's time rechecks may take: the next one waits until its runs would be this share of
the time since the last, and of the time the runs since took (a model run in bursts with pauses between
them would otherwise recheck at the start of every burst: 16 runs switching ways, which for a 20 µs model
tripled the median of its bursts)."""
SLOW_FACTOR = 1.3
"""A run of `auto`'s choice is slow when it takes over this many times the choice's median when compared."""
SLOW_RUNS = (6, 8)
"""`auto` compares every way again, at once, when this many of the choice's last runs (6 of 8) were slow:
another process came to need a core. Cooperative execution then loses most (a work-group claimed by a
worker that the scheduler took off its core holds up every step after it: a squeezenet went from 3.0 to
7-10 ms a run beside a busy process, while inline kept 5.7), and waiting for the next recheck (a pair of
ways, RECHECK_SHARE apart) took seconds and chose the pool."""


@dataclass
class Choice:
    """What `auto` chose, kept for its rechecks."""

    way: str  # the way runs go now
    others: list[str]  # the other ways, the one the next recheck tries first
    plans: dict[str, list[str]]  # each way's placement of the steps
    recheck_at: float  # perf_counter() time of the next recheck
    expected: float = 0.0  # seconds a run of `way` took when last compared (0: not measured)
    busy_at: float = 0.0  # the seconds of runs (Adaptive._busy) before the next recheck may start


LAUNCH_US = 10.0
"""What the pool's dispatch of a launch costs (µs) where the device was never calibrated: the saving per
launch and run `auto` weighs the alternatives' build against (the calibration's `launch_us` otherwise)."""


LOADING_SWITCH_SECONDS = 1e-4
"""The interpreter's thread switch interval while a loading thread runs (`_switching`): at the default 5 ms,
a run that wanted the GIL back after a launch waited up to 5 ms while the thread ran Python (a tiny model's
runs: 50x their median)."""
_LOADING: list[float] = []  # the switch interval to restore, while any loading thread runs
_LOADING_LOCK = threading.Lock()


def _switching(delta: int) -> None:
    """Count a loading thread in (+1) or out (-1): while any runs, the interpreter switches threads every
    LOADING_SWITCH_SECONDS; the interval it had is restored when the last one ends."""
    with _LOADING_LOCK:
        if delta > 0:
            if not _LOADING:
                _LOADING.append(sys.getswitchinterval())
                sys.setswitchinterval(min(LOADING_SWITCH_SECONDS, _LOADING[0]))
            _LOADING.append(0.0)
        else:
            _LOADING.pop()
            if len(_LOADING) == 1:
                sys.setswitchinterval(_LOADING.pop())


def _lowest_priority() -> None:
    """Run the calling thread only on a core nothing else wants (Linux: SCHED_IDLE applies to the one
    thread): beside the pool's threads, a loading thread at normal priority took a core from a run's
    kernels (a tiny model's runs: 8-80x their median while it loaded)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):
            pass


_LOADER: list[ThreadPoolExecutor] = []


def _loading_thread() -> ThreadPoolExecutor:
    """The process's one thread loading `auto`'s other ways (`_start_loading`), at the lowest priority;
    started at the first load that may need it, since starting a thread in a run took 0.5 ms (waiting for
    it to be scheduled beside the pool's). Its executor's exit hook lets a load in progress finish before
    the interpreter ends (stopped inside the driver's build, the process aborted in its C++ destructors)."""
    if not _LOADER:
        _LOADER.append(ThreadPoolExecutor(1, thread_name_prefix="tessel-load", initializer=_lowest_priority))
        _LOADER[0].submit(lambda: None)  # its thread starts now
    return _LOADER[0]


if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads: it starts its own
    os.register_at_fork(after_in_child=_LOADER.clear)


@dataclass
class Trial:
    """A comparison of ways to run spread over the user's runs: each run goes to the next way in turn,
    `block` runs in a row (the fastest counts: the first may pay for the switch), for `cycles` cycles
    whose order rotates; the ways are judged as `_interleaved`'s are. No run waits for the others."""

    kind: str
    """'adapt' (the first comparison), 'recheck' (the choice and its rival) or 'again' (every way, the
    choice's runs having slowed: `why`)."""
    plans: dict[str, list[str]]
    cycles: int
    block: int
    order: list[tuple[int, str]]
    times: dict[str, list[float]]
    at: int = 0
    spent: float = 0.0  # seconds its runs took, all told
    why: str = ""

    @classmethod
    def of(cls, kind: str, plans: dict[str, list[str]], cycles: int, block: int, why: str = "") -> Trial:
        names = list(plans)
        order = [(c, name) for c in range(cycles)
                 for name in names[c % len(names):] + names[: c % len(names)] for _ in range(block)]
        return cls(kind, plans, cycles, block, order, {k: [math.inf] * cycles for k in names}, why=why)

    def next(self) -> str:
        return self.order[self.at][1]

    def record(self, seconds: float) -> bool:
        """Count this run's `seconds` for the way `next()` named; True once every cycle is done."""
        c, name = self.order[self.at]
        self.times[name][c] = min(self.times[name][c], seconds)
        self.spent += seconds
        self.at += 1
        return self.at == len(self.order)


class SlowRuns:
    """Notices a run of slow runs: `observe(seconds, expected)` is True once SLOW_RUNS[0] of the last
    SLOW_RUNS[1] runs took over SLOW_FACTOR x `expected` (then it starts counting afresh)."""

    __slots__ = ("bits",)

    def __init__(self) -> None:
        self.bits = 0  # bit i: the i-th last run was slow

    def observe(self, seconds: float, expected: float) -> bool:
        if expected <= 0.0:
            return False
        self.bits = ((self.bits << 1) | (seconds > SLOW_FACTOR * expected)) & ((1 << SLOW_RUNS[1]) - 1)
        if self.bits.bit_count() >= SLOW_RUNS[0]:
            self.bits = 0
            return True
        return False


def workers_pinned() -> bool:
    """Whether PoCL pins its worker threads one a core (POCL_AFFINITY set, and not 0)."""
    return os.environ.get("POCL_AFFINITY", "0").strip() not in ("", "0")


class Adaptive:
    """`auto`'s choosing, for runtime.Executable (whose attributes and methods these use)."""

    execution: str
    preferred: str
    adapt_note: str
    companion: Any
    _runs: int
    _choice: Choice | None
    _slow: SlowRuns
    _slowed: str
    _compare_again_at: float
    _live: list[int]
    _trial: Trial | None
    _preparing: str  # "", "running" (the child), "ready", "loading" (the thread), "loaded" or "failed: why"
    _loader: Any  # the loading thread (_start_loading)
    _loaded: str  # what it ended with: "loaded" or the error
    _preparer: Any
    _estimate: tuple[float, float] | None
    _pool_seconds: float
    _busy: float
    _inline: Any
    _cooperative: Any
    placement: list[str]
    _source: str
    device: Any
    module: Any
    func: Any

    def _cooperative_ok(self) -> bool:
        """Whether `auto` may run cooperatively here: the device can, and PoCL's workers are not pinned
        (POCL_AFFINITY set and not 0): pinned one a core, the worker that takes the pool's work-group is
        half the time the one on the calling thread's core, and both spin on one core until the scheduler
        moves the calling thread (a squeezenet's median 3.0 ms unpinned, 6.5-7.9 pinned); `auto` measured
        that once and kept cooperative from a lucky phase."""
        if workers_pinned():
            return False
        return self._cooperative_runner() is not None

    def _step_us(self, device: Any, kernels: Sequence[Any], repeat: int = 3) -> list[float]:
        """Median µs of each step with work, run alone on `device` (a profiling queue of its own, over the
        buffers as the last run left them)."""
        cl = self.cl
        q = cl.CommandQueue(self.context, device, properties=cl.command_queue_properties.PROFILING_ENABLE)
        runs = []
        for _ in range(repeat):
            events = [cl.enqueue_nd_range_kernel(q, kernels[i], self.steps[i].global_size,
                                                 self.steps[i].local_size) for i in self._live]
            q.finish()
            runs.append([(e.profile.end - e.profile.start) / 1e3 for e in events])
        return [sorted(r[j] for r in runs)[repeat // 2] for j in range(len(self._live))]

    def _adapt(self, inputs: Sequence[np.ndarray], hybrid: bool = True) -> None:
        """`auto`, after ADAPT_AFTER runs: compare the pool, the inline device and cooperative execution on
        these inputs, each compiled by a first run, then timed in interleaved cycles (`_interleaved`), and
        judged by the median over cycles of its time over the pool's in the same cycle: this VM's noise
        comes in phases of 0.1-1 s that slow every way of running, so only times taken side by side
        compare. From each step's time on the pool and inline (profiling events) and the overheads the
        walls imply, `hybrid_plan` places each step; a plan using both is compared with the pool the same
        way. The fastest is kept when it beats the pool by ADAPT_MARGIN. A run over ADAPT_MAX_SECONDS on
        the pool compares the pool with cooperative only. `hybrid=False` leaves the hybrid plan out (its
        step timings and second comparison are half the time)."""
        started = time.perf_counter()
        n = len(self._live)
        walls = []
        for _ in range(3):
            t0 = time.perf_counter()
            self.enqueue(inputs)
            walls.append(time.perf_counter() - t0)
        pool = sorted(walls)[1]
        long = pool > ADAPT_MAX_SECONDS
        plans = {"pool": ["pool"] * n}
        if not long:
            plans["inline"] = ["inline"] * n
        if self._cooperative_ok():
            plans["cooperative"] = ["cooperative"] * n
        if len(plans) == 1:
            self.adapt_note = f"pool: a run takes {pool * 1e3:.1f} ms, dispatch cannot matter"
            return
        for name, where in plans.items():
            if name != "pool":
                self.place(where)
                self.enqueue(inputs)  # each device compiles its kernels at their first launch
        block = 1 if long else 2  # a long run pays nothing to notice for a switch
        cycles = min(ADAPT_CYCLES[1], max(ADAPT_CYCLES[0], int(ADAPT_SECONDS / (block * pool * len(plans)))))
        times = self._interleaved(inputs, plans, cycles, block)
        ratio = {k: _median_ratio(v, times["pool"]) for k, v in times.items()}
        if hybrid and "inline" in times and n > 1:
            pool_us = self._step_us(self.device, [s.kernel for s in self.steps])
            inline_us = self._step_us(self.companion, self._inline_kernels()[1])
            pool_wall, inline_wall = statistics.median(times["pool"]), statistics.median(times["inline"])
            where = hybrid_plan(pool_us, inline_us, max(pool_wall * 1e6 - sum(pool_us), 0.0) / (n + 2),
                                max(inline_wall * 1e6 - sum(inline_us), 0.0) / n)
            if len(set(where)) > 1:
                self._set_plan(where)
                self.enqueue(inputs)
                pair = self._interleaved(inputs, {"pool": plans["pool"], "hybrid": where}, cycles, block)
                plans["hybrid"] = where
                ratio["hybrid"] = _median_ratio(pair["hybrid"], pair["pool"])
        self._choose(plans, ratio, statistics.median(times["pool"]), time.perf_counter() - started)

    def _choose(self, plans: dict[str, list[str]], ratio: dict[str, float], pool: float,
                spent: float = 0.0) -> None:
        """Run the way of the least `ratio` (its time over the pool's, `pool` seconds a run) from now on,
        unless it beats the pool by less than ADAPT_MARGIN; recheck it after RECHECK_SECONDS, once the
        runs since took `spent` (the comparison's seconds) / RECHECK_SHARE: rechecks then stay a small
        share of the time spent running, however the runs are spread (a process running a model in
        bursts would otherwise recheck at the start of every burst)."""
        best = min(ratio, key=lambda k: ratio[k])
        if ratio[best] >= ADAPT_MARGIN:
            best = "pool"
        self.place(plans[best])
        self.adapt_note = f"{best}: " + ", ".join(
            f"{k} {r * pool * 1e3:.3f} ms" for k, r in sorted(ratio.items(), key=lambda kv: kv[1])) + " a run"
        others = [k for k in sorted(ratio, key=lambda k: ratio[k]) if k != best]
        self._choice = Choice(best, others, plans, time.perf_counter() + RECHECK_SECONDS, ratio[best] * pool,
                              self._busy + spent / RECHECK_SHARE)

    def _recheck_trial(self) -> Trial | None:
        """A recheck: `auto`'s choice and another way timed side by side again over the coming runs
        (RECHECK_CYCLES cycles), the runner-up of the last comparison first, the next way at each
        following recheck; `_rechecked` judges it. None when the rival cannot run here (then the next
        recheck tries the next way)."""
        assert self._choice is not None
        best, others, plans = self._choice.way, self._choice.others, self._choice.plans
        rival = others[0]
        if rival == "cooperative" and not self._cooperative_ok():  # a record's rivals: not here
            self._choice = Choice(best, others[1:], plans, self._choice.recheck_at, self._choice.expected,
                                  self._choice.busy_at)
            return None
        return Trial.of("recheck", {best: plans[best], rival: plans[rival]}, RECHECK_CYCLES, 2)

    def _rechecked(self, times: dict[str, list[float]], spent: float) -> None:
        """The recheck's verdict on `times` (the choice's and its rival's, `spent` seconds all told):
        switch when the rival now takes under ADAPT_MARGIN of the choice's time (by the median ratio). When
        the choice itself now runs over SLOW_FACTOR x its time when chosen, every way is compared again,
        as `_observe` has it: a pair of ways chosen between beside a busy process went to the pool, and the
        rechecks reached inline, the fastest then, only seconds later."""
        assert self._choice is not None
        best, others, plans = self._choice.way, self._choice.others, self._choice.plans
        rival = others[0]
        ratio = _median_ratio(times[rival], times[best])
        now = statistics.median(times[best])
        expected = now
        if ratio >= ADAPT_MARGIN:
            others = [*others[1:], rival]  # the next recheck tries the next way
        else:
            expected = statistics.median(times[rival])
            best, others = rival, [best, *others[1:]]
            self.adapt_note = (f"{best}: {best} {ratio * now * 1e3:.3f} ms, {others[0]} {now * 1e3:.3f} ms a "
                               f"run (rechecked: {others[0]} had been chosen)")
        self.place(plans[best])
        done = time.perf_counter()
        if self._choice.expected and now > SLOW_FACTOR * self._choice.expected:
            self._mark_slowed(self._choice, now)  # the choice itself slowed
        # the next recheck waits long enough that rechecks stay under RECHECK_SHARE of the time
        self._choice = Choice(best, others, plans, done + max(RECHECK_SECONDS, spent / RECHECK_SHARE),
                              expected, self._busy + spent / RECHECK_SHARE)

    def _observe(self, seconds: float) -> None:
        """After a run of `auto`'s choice that took `seconds`: when SlowRuns says the choice's runs have
        slowed (another process needs a core), the next runs compare every way again (`_again_trial`; not
        this one: its results may be on the device, and the comparing runs would overwrite them), at most
        RECHECK_SHARE of the time since the last such comparison. The rechecks bring the choice back once
        the machine is free: the ways that lost come first in their turn."""
        choice = self._choice
        if choice is not None and choice.others and self._slow.observe(seconds, choice.expected):
            self._mark_slowed(choice, seconds)

    def _mark_slowed(self, choice: Choice, seconds: float) -> None:
        """Have the next runs compare every way (`_again_trial`), unless the last such comparison was
        too recent (RECHECK_SHARE)."""
        if time.perf_counter() >= self._compare_again_at:
            self._slowed = (f"{choice.way}'s runs had slowed from {choice.expected * 1e3:.3f} to "
                            f"{seconds * 1e3:.3f} ms")

    def _again_trial(self) -> Trial:
        """Every way compared again (over the coming runs), because the choice's runs slowed (`_observe`),
        without the hybrid plan: with a core taken, the plans that use both (pool, hybrid) lose."""
        why, self._slowed = self._slowed, ""
        trial = self._new_trial()
        return Trial.of("again", trial.plans, trial.cycles, trial.block, why)

    def _interleaved(self, inputs: Sequence[np.ndarray], plans: dict[str, list[str]], cycles: int,
                     block: int) -> dict[str, list[float]]:
        """Seconds a run of each plan takes, one entry a cycle: each cycle runs every plan `block` times in
        a row (the fastest counts: the first may pay for the switch), in an order that rotates."""
        names = list(plans)
        times: dict[str, list[float]] = {k: [] for k in names}
        for c in range(cycles):
            for name in names[c % len(names):] + names[: c % len(names)]:
                self.place(plans[name])
                best = math.inf
                for _ in range(block):
                    t0 = time.perf_counter()
                    self.enqueue(inputs)
                    best = min(best, time.perf_counter() - t0)
                times[name].append(best)
        return times

    def _count(self, inputs: Sequence[np.ndarray]) -> None:
        """Count a run; under `auto`, from the ADAPT_AFTER-th run on: have the other ways prepared in the
        background once that is worth it (`_worth_preparing`), and once they are, compare them over the
        next runs (a Trial). A run never waits for a build."""
        self._runs += 1
        if self._runs == 1 and self.preferred:
            self.settle(inputs)
        elif (self._runs >= ADAPT_AFTER and self.execution == "auto" and self.companion is not None
              and not self.adapt_note and self._trial is None):
            if self._preparing == "running":
                self._poll_preparing()
            elif not self._preparing and self._worth_preparing():
                if self._estimate is not None and self._estimate[0] == 0.0:
                    # every way was built on this machine before: the caches hold their programs and
                    # compiled kernels, so no child is needed (starting one stalled a tiny model's runs
                    # 25-60x its median: its interpreter's start beside the pool's threads)
                    self._preparing = "ready"
                else:
                    self._start_preparing()
            if self._preparing == "ready":
                self._start_loading()
            if self._preparing == "loading" and self._loader.done():
                self._preparing = self._loaded
                if self._preparing != "loaded":
                    self.adapt_note = f"pool: loading the other ways failed ({self._preparing})"
            if self._preparing == "loaded":
                self._trial = self._new_trial()

    def waiting_note(self) -> str:
        """Why `auto` runs on the pool and has not chosen yet ("" once it has, or where it never chooses):
        what tessel-run prints in place of the choice."""
        if self.adapt_note or self.execution != "auto" or self.companion is None:
            return ""
        if self._trial is not None:
            return (f"auto: comparing the ways over the runs, {self._trial.at} of {len(self._trial.order)} "
                    "runs done")
        if self._runs < ADAPT_AFTER:
            return f"auto: on the pool for its first {ADAPT_AFTER} runs"
        if self._preparing == "running":
            return "auto: the other ways are being built in the background"
        if self._preparing in ("ready", "loading"):
            return "auto: the other ways are being loaded in the background"
        if self._estimate is not None:
            cost, saving = self._estimate
            return (f"auto: building the other ways (~{cost:.1f} s) does not pay yet: {self._runs} runs, "
                    f"{saving * 1e3:.3f} ms a run saved at most")
        return f"auto: on the pool for its first {ADAPT_AFTER} runs"

    # the other ways, prepared in the background ----------------------------------------------------------
    def _prepare_estimate(self) -> tuple[float, float]:
        """(seconds building the inline and cooperative programs would take here, seconds a run might save
        on them). A program built on this machine before costs a load (the driver's or tessel's cache has
        it); one never built, its source's size at this device's measured cold rate. The saving: the
        pool's dispatch, the calibrated launch cost (LAUNCH_US where none was measured) for each launch."""
        from . import cache

        folder, fingerprint = self._records_folder(), self._fingerprint()
        cost = 0.0
        for way, devices in (("inline", [self.companion]), ("cooperative", [self.device, self.companion])):
            if not cache.was_built(folder, cache.built_key(self._source, way, devices)):
                cost += len(self._source) / 1024 * cache.cold_rate(folder, fingerprint)
        launch_us = LAUNCH_US
        try:
            from .profile import load_peaks

            peaks = load_peaks(self.device)
            if peaks is not None and peaks.launch_us > 0:
                launch_us = peaks.launch_us
        except Exception:  # noqa: BLE001 - a missing or odd store: the default
            pass
        return cost, len(self._live) * launch_us * 1e-6

    def _ready_to_prepare(self) -> None:
        """At load, what starting the preparing child at the ADAPT_AFTER-th run would otherwise do in that
        run: the estimate (it reads the build records and the calibration store), the import of prepare.py
        and the temporary folder's lookup. A tiny model's 8th run took 3-5 ms (40-60x its median) doing
        them; what is left there is writing the module and starting the child."""
        import tempfile

        from . import prepare  # noqa: F401 - imported here, not in a run

        self._estimate = self._prepare_estimate()
        tempfile.gettempdir()
        _loading_thread()

    def _worth_preparing(self) -> bool:
        """Whether preparing the other ways pays for itself over this process's expected life: as many
        runs again as it has made so far (a process that ran a model 8 times is as likely to stop soon as
        one that ran it 10 000 times is to go on), each saving at most the pool's dispatch. A cold build of
        a large model (20 s) starts only in a process that has run it long enough; a cached one at once."""
        if self._estimate is None:
            self._estimate = self._prepare_estimate()
        cost, saving = self._estimate
        return self._runs * saving >= cost

    def _start_preparing(self) -> None:
        """Have a child process build the inline and cooperative programs and compile their kernels
        (prepare.py: PoCL compiles a kernel at its first launch, under a lock the pool's launches take,
        so compiling in this process stalls its runs); `_count` polls it at each run."""
        from .prepare import Preparer

        if not any(f is self.func for f in self.module.funcs):
            self._preparing = "failed: the func is not its module's (a specialized size)"
            return
        try:
            self._preparer = Preparer(self.module, self.func.name)
        except OSError as e:
            self._preparing = f"failed: {e}"
            return
        self._preparing = "running"

    def _poll_preparing(self) -> None:
        state = self._preparer.poll() if self._preparer is not None else "failed: no preparing process"
        if state is not None:
            self._preparing, self._preparer = state, None
            if state != "ready":
                self.adapt_note = f"pool: preparing the other ways failed ({state[len('failed: '):]})"

    def _start_loading(self) -> None:
        """Load the other ways' programs from the caches (built there by the child, or by an earlier
        process) and make their kernels and the cooperative runner, in a thread: done in a run, this
        stalled it 120 ms for a 3-kernel model (builds from the caches, the cycle counter's rate). The
        thread touches none of what the pool's runs use; the Trial starts at the first run after it is
        done ("loaded"), and its first run on each way loads that way's compiled kernels."""
        def load() -> None:
            try:
                self._inline_kernels()
                self._cooperative_ok()
                self._loaded = "loaded"
            except Exception as e:  # noqa: BLE001 - the runs stay on the pool, and say why
                self._loaded = f"{type(e).__name__}: {e}"
            finally:
                _switching(-1)

        self._loaded = "the loading thread ended without a word"
        self._preparing = "loading"
        _switching(+1)
        self._loader = _loading_thread().submit(load)

    def _new_trial(self) -> Trial:
        """The comparison `_adapt` makes in one call, spread over the coming runs (no hybrid plan: its
        step timings would stall a run)."""
        n = len(self._live)
        plans = {"pool": ["pool"] * n, "inline": ["inline"] * n}
        if self._cooperative_ok():
            plans["cooperative"] = ["cooperative"] * n
        pool = self._pool_seconds or 1e-3
        long = pool > ADAPT_MAX_SECONDS
        if long:
            del plans["inline"]
        block = 1 if long else 2
        cycles = min(ADAPT_CYCLES[1], max(ADAPT_CYCLES[0], int(ADAPT_SECONDS / (block * pool * len(plans)))))
        return Trial.of("adapt", plans, cycles, block)

    def _trial_run(self, trial: Trial, inputs: Sequence[np.ndarray], on_device: bool) -> list[Any]:
        """One run of a Trial: on its next way, timed; the last one chooses. A block's second run stays
        where the first ran (placing anew parks the cooperative pool's work-group: tens of µs)."""
        plan = trial.plans[trial.next()]
        if list(getattr(self, "placement", ())) != plan:
            self.place(plan)
        t0 = time.perf_counter()
        results = self.enqueue(inputs, on_device)[0]
        seconds = time.perf_counter() - t0
        self._busy += seconds
        if trial.record(seconds):
            self._trial = None
            if trial.kind == "recheck":
                self._rechecked(trial.times, trial.spent)
                return results
            ratio = {k: _median_ratio(v, trial.times["pool"]) for k, v in trial.times.items()}
            self._choose(trial.plans, ratio, statistics.median(trial.times["pool"]), trial.spent)
            if trial.kind == "again":
                self._compare_again_at = time.perf_counter() + trial.spent / RECHECK_SHARE
                self.adapt_note += f" (compared again: {trial.why})"
            else:
                self.adapt_note += " (compared over the runs)"
        return results

    def _prefer(self) -> None:
        """`auto` with a tuning record's way: run that way from now on (the pool when it is not possible
        here), and let the rechecks compare it with the other ways in turn, as after `_adapt` (the
        cooperative program is built only when a recheck tries it)."""
        n = len(self._live)
        plans = {"cooperative": ["cooperative"] * n, "pool": ["pool"] * n, "inline": ["inline"] * n}
        if not self._cooperative_ok():
            del plans["cooperative"]
        way = self.preferred if self.preferred in plans else "pool"
        self.place(plans[way])
        others = [k for k in plans if k != way]  # cooperative first: on PoCL's CPU device it usually wins
        self.adapt_note = f"{way}: the tuning record's way (rechecked against {' and '.join(others)})"
        self._choice = Choice(way, others, plans, time.perf_counter() + RECHECK_SECONDS)  # not timed yet

    def settle(self, inputs: Sequence[np.ndarray]) -> None:
        """Under `auto`, choose among the pool, the inline device and a hybrid of both now (once), on these
        inputs, building what that needs (it may take as long as the model's first build); a no-op
        otherwise. Benchmarks call it before timing; `run` never does (but with a tuning record's way,
        at the first run): it prepares the other ways in the background and compares them over its runs."""
        if self.execution == "auto" and self.companion is not None and not self.adapt_note:
            if self._preparer is not None:  # it fills the caches this will build from: wait for it
                self._preparer.proc.wait()
                self._poll_preparing()
            self._trial = None
            if self.preferred:
                self._prefer()
            else:
                self._adapt(inputs)
            self._note_prepared()

    def _note_prepared(self) -> None:
        """Record the other ways' programs this executable built (a later process's `auto` then counts
        them as cached)."""
        from . import cache

        folder, fingerprint = self._records_folder(), self._fingerprint()
        built = [("inline", [self.companion], self._inline is not None),
                 ("cooperative", [self.device, self.companion], self._cooperative is not None)]
        for way, devices, done in built:
            key = cache.built_key(self._source, way, devices)
            if done and not cache.was_built(folder, key):
                cache.note_built(folder, key, 0.0, len(self._source.encode()), fingerprint, cold=False)


def _median_ratio(times: Sequence[float], pool: Sequence[float]) -> float:
    """The median over cycles of a plan's time over the pool's in the same cycle."""
    return statistics.median(t / p for t, p in zip(times, pool, strict=True))


def hybrid_plan(pool_us: Sequence[float], inline_us: Sequence[float], launch_pool: float,
                launch_inline: float) -> list[str]:
    """Where each step runs ('pool' or 'inline') for the least predicted time: a step costs its own time
    on that side plus that side's launch cost, and every change from the pool to the inline device, and a
    run ending on the pool, costs a finish (the host waits for the pool's workers: taken as two pool
    launches, as a pool run's overhead divided by launches + 2 implies). By dynamic programming over the
    steps in order (their order is the data dependence). Small kernels between large ones go inline when
    the pool's launch and wake-up cost more than the second core gains them."""
    finish = 2 * launch_pool
    best = {"pool": (0.0, []), "inline": (0.0, [])}  # side of the last step -> (cost, plan)
    for tp, ti in zip(pool_us, inline_us, strict=True):
        step = {"pool": tp + launch_pool, "inline": ti + launch_inline}
        nxt = {}
        for side in ("pool", "inline"):
            options = []
            for prev in ("pool", "inline"):
                cost, plan = best[prev]
                switch = finish if plan and prev == "pool" and side == "inline" else 0.0
                options.append((cost + step[side] + switch, plan))
            cost, plan = min(options, key=lambda o: o[0])
            nxt[side] = (cost, [*plan, side])
        best = nxt
    ends = {side: cost + (finish if side == "pool" else 0.0) for side, (cost, _) in best.items()}
    return best[min(ends, key=lambda k: ends[k])][1]

