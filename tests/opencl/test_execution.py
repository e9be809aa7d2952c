"""Where a lowered model runs on PoCL's CPU device (runtime.EXECUTIONS): on the worker pool, inline on the
calling thread (PoCL's basic device, the pool device's inline companion), cooperatively, or `auto`, which
starts on the pool and, from its ADAPT_AFTER-th run, has the other ways built by a child process once that
pays for itself (none where they were built here before), loads them in a thread, then compares them over
its runs (no run waits for a build, a load or a comparison). The devices
run the same kernels on the same buffers, so results are bit-identical whichever runs them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tessel.ir.diagnostics import DiagnosticError
from tessel.ir.parser import parse_module
from tessel.passes.manager import PassManager
from tessel.passes.pipeline import O_LEVELS, parse_pipeline
from tessel.targets.opencl import device as dev
from tessel.targets.opencl.adapt import ADAPT_AFTER
from tessel.targets.opencl.lower import lower_module
from tessel.targets.opencl.runtime import Executable

from .conftest import here

BLOCK = Path(__file__).resolve().parents[2] / "examples" / "block.tsl"


def lowered():  # noqa: ANN201
    m = parse_module(BLOCK.read_bytes(), BLOCK.name)
    PassManager(parse_pipeline(O_LEVELS[2])).run(m)
    lower_module(m, here())
    return m


def inputs(func, seed: int) -> list[np.ndarray]:  # noqa: ANN001
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(a.type.dims).astype(np.float32) for a in func.args]


def needs_companion() -> None:
    if dev.inline_companion(dev.pick_device()) is None:
        pytest.skip("the default device has no inline companion (not PoCL's pthread device, or "
                    "POCL_DEVICES was set without 'basic')")


def auto_after(monkeypatch: pytest.MonkeyPatch, estimate: tuple[float, float], runs: int):  # noqa: ANN201
    """An `auto` executable of the block whose other ways cost `estimate` (build seconds, saving a run),
    after `runs` runs: (it, its inputs, the first run's results)."""
    from tessel.targets.opencl import adapt

    monkeypatch.setattr(adapt.Adaptive, "_prepare_estimate", lambda self: estimate)
    m = lowered()
    exe = Executable(m, m.funcs[0], execution="auto")
    x = inputs(m.funcs[0], 0)
    first = exe.run(x)
    for _ in range(runs - 1):
        exe.run(x)
    return exe, x, first


def test_auto_device_has_the_most_compute_units() -> None:
    d = dev.pick_device()
    assert all(int(o.max_compute_units) <= int(d.max_compute_units) for o in dev.all_devices()
               if not o.type & dev.cl().device_type.GPU)


def test_companion_shares_the_context() -> None:
    needs_companion()
    d = dev.pick_device()
    companion = dev.inline_companion(d)
    assert companion is not None and companion.name.startswith("basic")
    assert {x.int_ptr for x in dev.context_for(d).devices} == {d.int_ptr, companion.int_ptr}
    assert dev.inline_companion(companion) is None


def test_pool_and_inline_agree_bit_for_bit() -> None:
    needs_companion()
    m = lowered()
    pool = Executable(m, m.funcs[0], execution="pool")
    inline = Executable(m, m.funcs[0], execution="inline")
    assert (pool.running_on, inline.running_on) == ("pool", "inline")
    for seed in range(3):
        x = inputs(m.funcs[0], seed)
        for a, b in zip(pool.run(x), inline.run(x), strict=True):
            assert a.tobytes() == b.tobytes()


def test_auto_builds_nothing_that_does_not_pay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building the other ways would cost more than the runs so far could save (a cold cache, a short
    process): `auto` stays on the pool, starts no build and says why; `measure` never settles either."""
    needs_companion()
    exe, x, first = auto_after(monkeypatch, (100.0, 1e-3), ADAPT_AFTER - 1)
    assert exe.waiting_note() == f"auto: on the pool for its first {ADAPT_AFTER} runs"
    _, stats = exe.measure(x, 3 * ADAPT_AFTER, warmup=0)
    assert len(stats.seconds) == 3 * ADAPT_AFTER
    assert exe.running_on == "pool" and not exe.adapt_note and not exe._preparing
    assert exe._inline is None and exe._cooperative is None  # nothing built
    assert exe.waiting_note() == (f"auto: building the other ways (~100.0 s) does not pay yet: "
                                  f"{4 * ADAPT_AFTER - 1} runs, 1.000 ms a run saved at most")
    for a, b in zip(first, exe.run(x), strict=True):
        assert a.tobytes() == b.tobytes()


def test_worth_preparing_weighs_the_runs_so_far_against_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other ways are built once the runs so far, each saving at most the estimate, add up to the
    build's cost (the process is expected to run as long again)."""
    from tessel.targets.opencl import adapt

    monkeypatch.setattr(adapt.Adaptive, "_prepare_estimate", lambda self: (2.0, 1e-3))
    probe = adapt.Adaptive()
    probe._estimate = None
    for runs, worth in ((8, False), (1999, False), (2000, True), (5000, True)):
        probe._runs = runs
        assert probe._worth_preparing() is worth, runs


def test_prepare_estimate_counts_cold_builds_and_not_cached_ones(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A way never built here costs its source's size at the device's cold rate; one the build records
    say was built here costs nothing (the caches hold it). The saving: a calibrated launch per step."""
    needs_companion()
    from tessel.targets.opencl import cache

    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path))
    m = lowered()
    exe = Executable(m, m.funcs[0], execution="auto")
    kb = len(exe._source) / 1024
    cost, saving = exe._prepare_estimate()
    assert cost == pytest.approx(2 * kb * cache.COLD_SECONDS_PER_KB)
    assert saving > 0
    folder, fp = exe._records_folder(), exe._fingerprint()
    inline = cache.built_key(exe._source, "inline", [exe.companion])
    cache.note_built(folder, inline, 1.0, 8192, fp, cold=True)
    assert cache.cold_rate(folder, fp) == pytest.approx(1.0 / 8)  # measured: 1 s for 8 KiB
    assert exe._prepare_estimate()[0] == pytest.approx(kb / 8)  # the cooperative way, at that rate
    cache.note_built(folder, cache.built_key(exe._source, "cooperative", [exe.device, exe.companion]), 0.0,
                     8192, fp, cold=False)
    assert exe._prepare_estimate()[0] == 0.0


def test_trial_rotates_the_ways_and_keeps_each_cycles_fastest() -> None:
    from tessel.targets.opencl.adapt import Trial

    t = Trial.of("adapt", {"pool": [], "inline": []}, cycles=2, block=2)
    assert [name for _, name in t.order] == ["pool", "pool", "inline", "inline",
                                             "inline", "inline", "pool", "pool"]
    done = [t.record(s) for s in (3.0, 2.0, 5.0, 4.0, 6.0, 7.0, 1.0, 9.0)]
    assert done == [False] * 7 + [True]
    assert t.times == {"pool": [2.0, 1.0], "inline": [4.0, 6.0]} and t.spent == 37.0


def test_auto_prepares_in_a_child_process_then_compares_over_the_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once worth it (here: at once), `auto` has a child process build the inline and cooperative
    programs and compile their kernels; this process then loads them from the caches (tessel's binaries
    here, so a load shows as one) and compares the ways one run at a time; results stay bit-identical."""
    needs_companion()
    from tessel.targets.opencl import runtime

    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TESSEL_PROGRAM_BINARIES", "always")
    monkeypatch.setattr(runtime, "_PROGRAMS", {})  # as in a new process
    # a build worth it at once (a cost of 0 would say the ways were built here before: no child then)
    exe, x, first = auto_after(monkeypatch, (1e-9, 1e-3), ADAPT_AFTER)
    assert exe._preparing == "running" and exe.waiting_note() == (
        "auto: the other ways are being built in the background")
    handed = Path(exe._preparer.path).read_text()  # the module without its weights: the child uses zeros
    assert ":elided" in handed and ":base64:" not in handed
    mark = runtime.BUILD_LOG.mark()
    exe._preparer.proc.wait(timeout=300)
    runs = 0
    while not exe.adapt_note:
        for a, b in zip(first, exe.run(x), strict=True):
            assert a.tobytes() == b.tobytes()
        if exe._preparing == "loading":  # the loading thread runs at the lowest priority: let it finish
            exe._loader.result(timeout=300)
        runs += 1
        assert runs < 1000, exe.waiting_note()
    assert exe._preparing == "loaded" and exe.adapt_note.endswith(" (compared over the runs)"), exe.adapt_note
    assert exe.adapt_note.startswith(exe.running_on + ": ") and "inline " in exe.adapt_note
    built = {b.name: b.how for b in runtime.BUILD_LOG.since(mark)}
    assert built.get("inline") == "binary", built  # the child built it; this process loaded it
    if exe._cooperative is not None:
        assert built.get("cooperative") == "binary", built


def test_auto_loads_ways_built_before_in_a_thread_without_a_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the build records say every way was built here before (cost 0), `auto` starts no child: the
    ADAPT_AFTER-th run hands the loading (programs from the caches, the cooperative runner) to the loading
    thread and returns; the runs stay on the pool, bit-identical, until it is done, then compare the ways.
    The interpreter's switch interval is as it was once the thread is done."""
    needs_companion()
    import sys

    interval = sys.getswitchinterval()
    exe, x, first = auto_after(monkeypatch, (0.0, 1e-3), ADAPT_AFTER)
    assert exe._preparer is None and exe._preparing in ("loading", "loaded")
    if exe._preparing == "loading":
        assert exe.waiting_note() == "auto: the other ways are being loaded in the background"
    exe._loader.result(timeout=300)
    assert exe._inline is not None  # loaded by the thread, not by a run
    runs = 0
    while not exe.adapt_note:
        for a, b in zip(first, exe.run(x), strict=True):
            assert a.tobytes() == b.tobytes()
        runs += 1
        assert runs < 1000, exe.waiting_note()
    assert exe.adapt_note.endswith(" (compared over the runs)")
    assert sys.getswitchinterval() == pytest.approx(interval)


def test_a_failed_load_keeps_the_pool_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    needs_companion()

    def broken(self):  # noqa: ANN001, ANN202
        raise RuntimeError("no program")

    monkeypatch.setattr(Executable, "_inline_kernels", broken)
    exe, x, _ = auto_after(monkeypatch, (0.0, 1e-3), ADAPT_AFTER)
    exe._loader.result(timeout=300)
    exe.run(x)
    assert exe.running_on == "pool" and exe._trial is None
    assert exe.adapt_note == "pool: loading the other ways failed (RuntimeError: no program)"


def test_switching_restores_the_interval_after_the_last_loader() -> None:
    import sys

    from tessel.targets.opencl import adapt

    before = sys.getswitchinterval()
    adapt._switching(+1)
    adapt._switching(+1)
    short = pytest.approx(min(adapt.LOADING_SWITCH_SECONDS, before))
    assert sys.getswitchinterval() == short
    adapt._switching(-1)
    assert sys.getswitchinterval() == short
    adapt._switching(-1)
    assert sys.getswitchinterval() == pytest.approx(before)


def test_pool_never_adapts(monkeypatch: pytest.MonkeyPatch) -> None:
    needs_companion()
    monkeypatch.setenv("TESSEL_EXECUTION", "pool")
    m = lowered()
    exe = Executable(m, m.funcs[0])
    x = inputs(m.funcs[0], 0)
    _, stats = exe.measure(x, ADAPT_AFTER + 2)
    assert exe.running_on == "pool" and not exe.adapt_note and len(stats.seconds) == ADAPT_AFTER + 2


def test_settle_chooses_now_and_profiles_every_step() -> None:
    """`settle` (what benchmarks call before timing) compares the ways at once, building what it needs."""
    needs_companion()
    m = lowered()
    exe = Executable(m, m.funcs[0], profile=True)
    x = inputs(m.funcs[0], 0)
    exe.settle(x)
    assert exe.adapt_note and not exe.waiting_note()
    _, stats = exe.measure(x, ADAPT_AFTER)
    assert sorted(stats.kernel_ns) == [i for i, s in enumerate(exe.steps) if all(s.global_size)]


def test_unknown_execution_is_an_error() -> None:
    m = lowered()
    with pytest.raises(DiagnosticError, match="unknown execution 'sideways'"):
        Executable(m, m.funcs[0], execution="sideways")


def test_hybrid_plan_places_small_steps_inline() -> None:
    """Two big kernels that the pool runs twice as fast, small ones between: the small ones go inline
    when the pool's launch costs more than the second core saves, and a lone small step between pool
    steps stays on the pool when a finish (two pool launches) costs more than it saves."""
    from tessel.targets.opencl.adapt import hybrid_plan

    assert hybrid_plan([100, 2, 2, 2, 100], [200, 3, 3, 3, 200], 10, 1) == [
        "pool", "inline", "inline", "inline", "pool"]
    assert hybrid_plan([100, 2, 100], [200, 3, 200], 10, 1) == ["pool", "pool", "pool"]
    assert hybrid_plan([5, 5, 5], [6, 6, 6], 10, 1) == ["inline"] * 3  # all small: inline, no finish
    assert hybrid_plan([500], [1000], 10, 1) == ["pool"]
    assert hybrid_plan([], [], 10, 1) == []


def test_a_hybrid_plan_runs_bit_for_bit() -> None:
    """Alternating segments (each finished before the other device reads its results) give the pool's
    results exactly."""
    needs_companion()
    m = lowered()
    exe = Executable(m, m.funcs[0], execution="pool")
    x = inputs(m.funcs[0], 1)
    want = exe.run(x)
    n = len(exe._live)
    exe._set_plan(["inline" if j % 2 else "pool" for j in range(n)])
    assert exe.running_on == "hybrid" and len(exe._segments) == n
    for a, b in zip(want, exe.run(x), strict=True):
        assert a.tobytes() == b.tobytes()


def test_place_copies_a_placement() -> None:
    needs_companion()
    m = lowered()
    exe = Executable(m, m.funcs[0], execution="pool")
    n = len(exe.placement)
    where = ["inline"] * (n - 1) + ["pool"]
    exe.place(where)
    assert exe.placement == where and exe.running_on == ("hybrid" if n > 1 else "pool")
    with pytest.raises(ValueError, match="placement of"):
        exe.place(["pool"] * (n + 1))


@pytest.mark.parametrize("env,basic", [({"TESSEL_POCL_INLINE": "0"}, False), ({}, True),
                                       ({"POCL_DEVICES": "pthread"}, False)])
def test_pocl_companion_is_asked_for_unless_told_not_to(env: dict[str, str], basic: bool) -> None:
    """tessel asks PoCL for its basic device beside pthread, unless TESSEL_POCL_INLINE=0 or the user set
    POCL_DEVICES (read once when PoCL starts, so each case is a fresh process)."""
    import os
    import subprocess
    import sys

    needs_companion()
    clean = {k: v for k, v in os.environ.items() if k not in ("POCL_DEVICES", "TESSEL_POCL_INLINE")}
    code = ("from tessel.targets.opencl import device as d; "
            "print(sorted(x.name.split('-')[0] for x in d.all_devices()))")
    out = subprocess.run([sys.executable, "-c", code], env=clean | env, capture_output=True, text=True,
                         check=True).stdout
    assert ("'basic'" in out) == basic, out


def test_auto_compares_side_by_side_through_drifting_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """`auto` judges each way by its time over the pool's in the same cycle: here every run of a cycle is
    slower than the one before (the VM's noise phases), and cooperative is 10% faster than the pool run
    beside it. Comparing each way's best time, or a cycle whose order never rotates (the pool always ahead
    of cooperative), would choose the pool."""
    needs_companion()
    from tessel.targets.opencl import adapt

    m = lowered()
    exe = Executable(m, m.funcs[0], execution="auto")
    if exe._cooperative_runner() is None:
        pytest.skip("this device cannot run cooperatively")
    order: list[str] = []
    clock = {"now": 0.0, "phase": 1.0}
    cost = {"pool": 1.0, "inline": 1.5, "cooperative": 0.9}
    monkeypatch.setattr(adapt.time, "perf_counter", lambda: clock["now"])

    def enqueue(_inputs, _on_device=False):  # noqa: ANN001, ANN202
        way = "hybrid" if len(set(exe.placement)) > 1 else exe.placement[0]
        order.append(way)
        clock["now"] += cost.get(way, 1.2) * clock["phase"] * 1e-3
        return [], []

    def place(where):  # noqa: ANN001, ANN202
        if order and order[-1] != "switch":
            clock["phase"] *= 1.3  # each block runs in a slower phase than the one before
        order.append("switch")
        exe.placement = list(where)

    monkeypatch.setattr(exe, "enqueue", enqueue)
    monkeypatch.setattr(exe, "place", place)
    monkeypatch.setattr(exe, "_step_us", lambda device, kernels: [1.0] * len(exe._live))
    exe._adapt(inputs(m.funcs[0], 0))
    assert exe.adapt_note.startswith("cooperative: "), exe.adapt_note
    assert exe.placement == ["cooperative"] * len(exe._live)


def on_fake_clock(monkeypatch: pytest.MonkeyPatch, cost: dict[str, float]):  # noqa: ANN201
    """An `auto` Executable of the block whose runs take cost[way] ms on a fake perf_counter (each run's
    way appended to `ran`; `place` just records the placement), for tests of `auto`'s choosing."""
    needs_companion()
    from tessel.targets.opencl import adapt

    m = lowered()
    exe = Executable(m, m.funcs[0], execution="auto")
    if exe._cooperative_runner() is None:
        pytest.skip("this device cannot run cooperatively")
    clock = {"now": 0.0}
    ran: list[str] = []
    monkeypatch.setattr(adapt.time, "perf_counter", lambda: clock["now"])

    def enqueue(_inputs, _on_device=False):  # noqa: ANN001, ANN202
        way = "hybrid" if len(set(exe.placement)) > 1 else exe.placement[0]
        ran.append(way)
        clock["now"] += cost[way] * 1e-3
        return [[]], []

    monkeypatch.setattr(exe, "enqueue", enqueue)
    monkeypatch.setattr(exe, "place", lambda where: setattr(exe, "placement", list(where)))
    monkeypatch.setattr(exe, "_step_us", lambda device, kernels: [1.0] * len(exe._live))
    return exe, inputs(m.funcs[0], 0), clock, ran


def test_auto_rechecks_a_choice_made_in_a_slow_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    """`auto` chose inline while the VM ran at one core's speed; once both cores are back, the first run
    after RECHECK_SECONDS times the choice beside the runner-up (cooperative) and switches. Later rechecks
    wait longer when a recheck is a large share of the time, and a recheck that finds nothing faster keeps
    the choice and tries the next way the time after."""
    from tessel.targets.opencl import adapt

    one_core = {"pool": 1.6, "inline": 1.0, "cooperative": 1.3, "hybrid": 1.5}
    both = {"pool": 0.9, "inline": 1.0, "cooperative": 0.6, "hybrid": 0.95}
    cost = dict(one_core)
    exe, x, clock, ran = on_fake_clock(monkeypatch, cost)
    exe._adapt(x)
    assert exe.adapt_note.startswith("inline: ") and exe.placement[0] == "inline"
    cost.update(both)
    exe.run(x)  # too soon: no recheck
    assert exe.placement[0] == "inline" and ran[-1] == "inline"
    clock["now"] += adapt.RECHECK_SECONDS
    exe.run(x)  # runs that took too little time since the comparison: no recheck yet
    assert ran[-1] == "inline" and exe._trial is None
    ran_long(exe)
    del ran[:]
    through_trial(exe, x)  # one run at a time
    assert ran.count("cooperative") == ran.count("inline") == 2 * adapt.RECHECK_CYCLES
    exe.run(x)
    assert exe.placement[0] == "cooperative" and ran[-1] == "cooperative"
    assert exe.adapt_note.startswith("cooperative: ")
    assert "rechecked: inline had been chosen" in exe.adapt_note
    # that recheck took 16 runs (~13 ms): the next waits until rechecks are RECHECK_SHARE of the time
    assert exe._choice is not None
    wait = exe._choice.recheck_at - clock["now"]
    assert wait > adapt.RECHECK_SECONDS
    clock["now"] += adapt.RECHECK_SECONDS
    ran_long(exe)
    exe.run(x)
    assert exe._choice.others[0] == "inline"  # not yet
    # nothing beats cooperative now: the next recheck keeps it and moves on to the next way
    clock["now"] += wait
    through_trial(exe, x)
    assert exe.placement[0] == "cooperative" and exe._choice is not None
    assert exe._choice.way == "cooperative" and exe._choice.others[-1] == "inline"


def test_auto_leaves_cooperative_out_when_pocl_pins_its_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """With POCL_AFFINITY set (workers pinned one a core), cooperative runs share a core half the time:
    `auto` compares the pool and inline only, and a tuning record's cooperative falls back to the pool."""
    needs_companion()
    from tessel.targets.opencl import adapt

    m = lowered()
    exe = Executable(m, m.funcs[0], execution="auto")
    if exe._cooperative_runner() is None:
        pytest.skip("this device cannot run cooperatively")
    compared: list[set[str]] = []
    monkeypatch.setattr(exe, "_interleaved", lambda _x, plans, *_a: compared.append(set(plans)) or
                        {k: [1.0] * 3 for k in plans})
    monkeypatch.setenv("POCL_AFFINITY", "1")
    assert adapt.workers_pinned()
    exe._adapt(inputs(m.funcs[0], 0))
    assert compared and "cooperative" not in compared[0] and "pool" in compared[0]
    exe.preferred, exe._choice = "cooperative", None
    exe._prefer()
    assert exe._choice is not None and exe._choice.way == "pool" and "cooperative" not in exe._choice.plans
    monkeypatch.setenv("POCL_AFFINITY", "0")
    assert not adapt.workers_pinned()


def ran_long(exe) -> None:  # noqa: ANN001
    """As if `exe` had run long enough since its last comparison for the next recheck (RECHECK_SHARE of
    its runs' time)."""
    exe._busy = max(exe._busy, exe._choice.busy_at)


def through_trial(exe, x) -> None:  # noqa: ANN001
    """Run `exe` until the comparison its next run starts (a recheck, or every way again) is done."""
    exe.run(x)
    while exe._trial is not None:
        exe.run(x)


def test_slow_runs_counts_six_slow_of_the_last_eight() -> None:
    """SlowRuns fires when 6 of the last 8 runs took over SLOW_FACTOR x the expected time, then counts
    afresh; nothing is expected of a choice never timed (expected 0)."""
    from tessel.targets.opencl.adapt import SLOW_FACTOR, SlowRuns

    slow, fast = SLOW_FACTOR * 1.01, SLOW_FACTOR * 0.99
    s = SlowRuns()
    assert [s.observe(t, 1.0) for t in (slow, fast, slow, slow, fast, slow, slow)] == [False] * 7
    assert s.observe(slow, 1.0)  # 6 of these 8
    assert not any(s.observe(slow, 1.0) for _ in range(5))  # afresh: 5 so far
    assert not any(s.observe(100.0, 0.0) for _ in range(10))
    s = SlowRuns()
    assert not any(s.observe(t, 1.0) for t in [slow, fast] * 20)  # half slow: the VM's noise, no more


def test_auto_compares_again_when_another_process_slows_its_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """`auto` chose cooperative on a free machine; a busy process then takes a core, and cooperative runs
    (a step waits for a worker the scheduler took off its core) become slower than inline. After SLOW_RUNS
    slow runs the next run compares every way again and switches to inline, without waiting for a recheck;
    a later slowing within RECHECK_SHARE of that comparison's time is not acted on."""
    from tessel.targets.opencl import adapt

    cost = {"pool": 0.9, "inline": 1.0, "cooperative": 0.6, "hybrid": 0.95}
    exe, x, _clock, ran = on_fake_clock(monkeypatch, cost)
    exe._runs = ADAPT_AFTER  # past the adapt run
    exe._adapt(x)
    assert exe._choice is not None and exe._choice.way == "cooperative"
    assert exe._choice.expected == pytest.approx(0.6e-3)
    cost.update({"pool": 1.6, "inline": 1.05, "cooperative": 2.0, "hybrid": 1.5})  # a busy process
    timed_steps: list[object] = []  # the hybrid plan's step timings: left out of the quick comparison
    monkeypatch.setattr(exe, "_step_us", lambda device, kernels: timed_steps.append(device) or [1.0] * len(
        exe._live))
    del ran[:]
    for _ in range(adapt.SLOW_RUNS[0]):
        exe.run(x)
    assert ran == ["cooperative"] * adapt.SLOW_RUNS[0]  # noticed, acted on from the next run
    through_trial(exe, x)
    exe.run(x)
    assert exe._choice.way == "inline" and ran[-1] == "inline" and len(ran) > adapt.SLOW_RUNS[0] + 1
    assert not timed_steps and "hybrid" not in exe._choice.plans  # the quick comparison
    assert "compared again: cooperative's runs had slowed from 0.600 to 2.000 ms" in exe.adapt_note
    assert exe._choice.expected == pytest.approx(1.05e-3)
    cost["inline"] = 3.0  # slower still, too soon after that comparison
    del ran[:]
    for _ in range(2 * adapt.SLOW_RUNS[1]):
        exe.run(x)
    assert ran == ["inline"] * 2 * adapt.SLOW_RUNS[1]


def test_a_recheck_that_finds_its_choice_slowed_compares_every_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy process came just before a recheck: the pair it times (cooperative, the runner-up pool)
    both slowed, and the pool wins the pair; since cooperative ran over SLOW_FACTOR x its time when
    chosen, the next run compares every way and settles on inline."""
    from tessel.targets.opencl import adapt

    cost = {"pool": 0.9, "inline": 1.0, "cooperative": 0.6, "hybrid": 0.95}
    exe, x, clock, ran = on_fake_clock(monkeypatch, cost)
    exe._runs = ADAPT_AFTER
    exe._adapt(x)
    assert exe._choice is not None and exe._choice.way == "cooperative" and exe._choice.others[0] == "pool"
    cost.update({"pool": 1.6, "inline": 1.05, "cooperative": 2.0, "hybrid": 1.5})
    clock["now"] += adapt.RECHECK_SECONDS
    ran_long(exe)
    through_trial(exe, x)
    assert exe._choice.way == "pool" and "rechecked: cooperative had been chosen" in exe.adapt_note
    del ran[:]
    through_trial(exe, x)
    assert exe._choice.way == "inline" and set(ran) >= {"pool", "inline", "cooperative"}
    assert "compared again: pool's runs had slowed" not in exe.adapt_note  # it was cooperative's time
    assert "compared again: cooperative's runs had slowed from 0.600 to 2.000 ms" in exe.adapt_note
