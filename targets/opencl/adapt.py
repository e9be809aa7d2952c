"""How `auto` execution chooses where a model's kernels run (docs/opencl.md "Execution"): after
ADAPT_AFTER runs it times the pool, the inline companion, cooperative execution and a hybrid plan of pool
and inline side by side, keeps the fastest, and rechecks the choice now and then. The Adaptive mixin is
Executable's (runtime.py): it runs the executable's own `enqueue` under each `place`ment."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

ADAPT_AFTER = 8
"""Runs before `auto` compares the ways to run: a model run once or twice (a test, a one-shot
tessel-run) never builds the inline program; a service or a benchmark settles after its first runs."""
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
the time since the last."""
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
        best = min(ratio, key=lambda k: ratio[k])
        if ratio[best] >= ADAPT_MARGIN:
            best = "pool"
        self.place(plans[best])
        pool = statistics.median(times["pool"])
        self.adapt_note = f"{best}: " + ", ".join(
            f"{k} {r * pool * 1e3:.3f} ms" for k, r in sorted(ratio.items(), key=lambda kv: kv[1])) + " a run"
        others = [k for k in sorted(ratio, key=lambda k: ratio[k]) if k != best]
        self._choice = Choice(best, others, plans, time.perf_counter() + RECHECK_SECONDS, ratio[best] * pool)

    def _recheck(self, inputs: Sequence[np.ndarray]) -> None:
        """Time `auto`'s choice and another way side by side again (RECHECK_CYCLES cycles): the runner-up
        of the last comparison first, the next way at each following recheck. Switch when it now takes
        under ADAPT_MARGIN of the choice's time (by the median ratio). When the choice itself now runs over
        SLOW_FACTOR x its time when chosen, the next run compares every way, as `_observe` has it: a pair
        of ways chosen between beside a busy process went to the pool, and the rechecks reached inline,
        the fastest then, only seconds later."""
        assert self._choice is not None
        best, others, plans = self._choice.way, self._choice.others, self._choice.plans
        rival = others[0]
        if rival == "cooperative" and not self._cooperative_ok():  # a record's rivals: not here
            self._choice = Choice(best, others[1:], plans, self._choice.recheck_at, self._choice.expected)
            return
        t0 = time.perf_counter()
        times = self._interleaved(inputs, {best: plans[best], rival: plans[rival]}, RECHECK_CYCLES, 2)
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
        self._choice = Choice(best, others, plans, done + max(RECHECK_SECONDS, (done - t0) / RECHECK_SHARE),
                              expected)

    def _observe(self, seconds: float) -> None:
        """After a run of `auto`'s choice that took `seconds`: when SlowRuns says the choice's runs have
        slowed (another process needs a core), the next run compares every way again first (`_adapt`; not
        this one: its results may be on the device, and the comparing runs would overwrite them), at most
        RECHECK_SHARE of the time since the last such comparison. The rechecks bring the choice back once
        the machine is free: the ways that lost come first in their turn."""
        choice = self._choice
        if choice is not None and choice.others and self._slow.observe(seconds, choice.expected):
            self._mark_slowed(choice, seconds)

    def _mark_slowed(self, choice: Choice, seconds: float) -> None:
        """Have the next run compare every way (`_compare_again`), unless the last such comparison was
        too recent (RECHECK_SHARE)."""
        if time.perf_counter() >= self._compare_again_at:
            self._slowed = (f"{choice.way}'s runs had slowed from {choice.expected * 1e3:.3f} to "
                            f"{seconds * 1e3:.3f} ms")

    def _compare_again(self, inputs: Sequence[np.ndarray]) -> None:
        """`_adapt` again, because the choice's runs slowed (`_observe`), without the hybrid plan: the
        comparison stalls the run that makes it (0.8-1.2 s with the hybrid's step timings beside a busy
        process, for a squeezenet), and with a core taken the plans that use both (pool, hybrid) lose."""
        why, self._slowed = self._slowed, ""
        t0 = time.perf_counter()
        self._adapt(inputs, hybrid=False)
        done = time.perf_counter()
        self._compare_again_at = done + (done - t0) / RECHECK_SHARE
        self.adapt_note += f" (compared again: {why})"

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
        self._runs += 1
        if self._runs == ADAPT_AFTER or (self._runs == 1 and self.preferred):
            self.settle(inputs)

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
        inputs; a no-op otherwise. `run` calls it at its ADAPT_AFTER-th run; benchmarks call it before
        timing."""
        if self.execution == "auto" and self.companion is not None and not self.adapt_note:
            if self.preferred:
                self._prefer()
            else:
                self._adapt(inputs)


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
