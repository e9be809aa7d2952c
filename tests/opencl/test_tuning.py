"""tessel-tune: schedule spaces, kernel signatures, tuning records, the lowering that applies them, the cost
model and the tuner (targets/opencl/space.py, records.py, tuning/)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from tessel.ir.parser import parse_module
from tessel.ir.printer import to_text
from tessel.ir.types import TensorType
from tessel.targets.opencl import device as dev
from tessel.targets.opencl.kernels.base import DeviceInfo, NotLowerable
from tessel.targets.opencl.kernels.testing import lower_op
from tessel.targets.opencl.lower import lower_module
from tessel.targets.opencl.records import (
    Record,
    RecordError,
    Tuning,
    merge,
    parse_records,
    read_records,
    signature,
    write_records,
)
from tessel.targets.opencl.space import space_of
from tessel.targets.opencl.tuning import cost, measure, tuner

ROOT = Path(__file__).resolve().parents[2]
GENERIC = DeviceInfo.generic()
BLOCK = (ROOT / "examples" / "block.tsl").read_text()

CONV = """module @m {
  func @main(%x: tensor<1x16x20x20xf32>) -> tensor<1x16xf32> {
    %w = const {value = dense<0.05> : tensor<32x16x3x3xf32>} : () -> tensor<32x16x3x3xf32>
    %0 = conv2d %x, %w {pads = [1, 1, 1, 1]} : (tensor<1x16x20x20xf32>, tensor<32x16x3x3xf32>)
      -> tensor<1x32x20x20xf32>
    %1 = relu %0 : (tensor<1x32x20x20xf32>) -> tensor<1x32x20x20xf32>
    %a = reshape %1 {shape = [1, 12800]} : (tensor<1x32x20x20xf32>) -> tensor<1x12800xf32>
    %b = const {value = dense<0.01> : tensor<12800x16xf32>} : () -> tensor<12800x16xf32>
    %2 = matmul %a, %b : (tensor<1x12800xf32>, tensor<12800x16xf32>) -> tensor<1x16xf32>
    return %2 : tensor<1x16xf32>
  }
}
"""


def T(*dims: int) -> TensorType:
    return TensorType(dims, "f32")


def _space(op: str, types: list, attrs: dict, constant: tuple = (), info: DeviceInfo = GENERIC):  # noqa: ANN202
    ctx, low = lower_op(op, types, attrs, constant=constant, info=info)
    return ctx, low, space_of(ctx, low)


# spaces ------------------------------------------------------------------------------------------------
SPACE_CASES = [
    ("conv2d", [T(1, 32, 28, 28), T(64, 32, 3, 3)], {"pads": [1, 1, 1, 1]}, (False, True)),  # Winograd
    ("conv2d", [T(1, 32, 28, 28), T(64, 32, 3, 3)], {"pads": [1, 1, 1, 1]}, (False, False)),  # direct
    ("conv2d", [T(1, 3, 64, 64), T(16, 3, 7, 7)], {"strides": [2, 2], "pads": [3, 3, 3, 3]}, (False, True)),
    ("conv2d", [T(1, 32, 20, 20), T(32, 1, 3, 3)], {"pads": [1, 1, 1, 1], "groups": 32}, (False, True)),
    ("conv2d", [T(1, 64, 14, 14), T(64, 16, 1, 1)], {"groups": 4}, (False, True)),  # pointwise: a pixel GEMM
    ("matmul", [T(2, 64, 128), T(128, 384)], {}, (False, True)),
    ("matmul", [T(2, 64, 128), T(2, 128, 64)], {}, (False, False)),
    ("gemm", [T(8, 256), T(128, 256)], {"trans_b": 1}, (False, True)),
    ("attention", [T(2, 4, 64, 32), T(2, 4, 64, 32), T(2, 4, 64, 32)], {}, (False, False, False)),
]


@pytest.mark.parametrize("op, types, attrs, constant", SPACE_CASES, ids=lambda v: str(v)[:30])
def test_every_point_of_a_space_is_valid_and_lowers(op, types, attrs, constant) -> None:
    """The default is in its space, every listed point passes `reject`, and the template takes (nearly)
    every point: the space models the template's own limits."""
    ctx, low, sp = _space(op, types, attrs, constant)
    assert sp is not None and sp.version.startswith(("conv2d/", "gemm/", "attention/"))
    assert sp.reject({}) is None
    assert sp.reject(sp.default) is None
    points = list(sp.points())
    assert points and len(points) == sp.size() - 1
    assert all(sp.reject(p) is None for p in points)
    assert all(p for p in points), "the default is not listed among the points"
    refused = 0
    import dataclasses

    for p in points[:300]:
        try:
            ctx2 = dataclasses.replace(ctx, schedule=dict(p))
            from tessel.targets.opencl.kernels.base import TEMPLATES

            TEMPLATES[op](ctx2)
        except NotLowerable:
            refused += 1
    assert refused <= len(points[:300]) // 10, f"{refused} of {len(points[:300])} points refused"


def test_spaces_reach_past_a_small_register_model() -> None:
    """On a device modelled as AVX2 (16 registers of 8 floats), the templates' defaults keep within 6
    float16 accumulators, but the conv and gemm spaces offer the tiles AVX-512's 32 registers hold: a
    register model read off a misleading report, or another device's defaults, can be tuned away."""
    avx2 = DeviceInfo(vector_width=8, vector_registers=16)
    assert avx2.accumulators(16) == 6 and avx2.accumulators_to_try(16) == 30
    assert GENERIC.accumulators_to_try(16) == GENERIC.accumulators(16) == 30
    _, low, sp = _space("conv2d", [T(1, 64, 28, 28), T(64, 64, 1, 1)], {"strides": [2, 2]}, (False, True),
                        avx2)  # strided: the direct kernel (unstrided 1x1 convs are pixel GEMMs)
    assert sp is not None and low.schedule["tile_h"] * low.schedule["tile_w"] <= 6
    assert max(sp.full(p)["tile_h"] * sp.full(p)["tile_w"] for p in sp.points()) > 12
    assert sp.reject({"tile_h": 4, "tile_w": 4}) is None
    _, low, sp = _space("matmul", [T(2, 64, 128), T(128, 384)], {}, (False, True), avx2)
    assert sp is not None and max(sp.full(p)["rows"] for p in sp.points() if sp.full(p)["cols"] == 16) > 6


def test_a_depthwise_space_offers_the_separate_repack() -> None:
    """A depthwise conv whose default repacks its input band in local memory may also be tuned to the
    separate repack launch (local_repack=0): which is faster depends on the device."""
    _, low, sp = _space("conv2d", [T(1, 32, 20, 20), T(32, 1, 3, 3)], {"pads": [1, 1, 1, 1], "groups": 32},
                        (False, True))
    assert low.schedule["local_repack"] == 1 and sp is not None
    assert sp.default["local_repack"] == 1 and any(p.get("local_repack") == 0 for p in sp.points())
    ctx, _, _ = _space("conv2d", [T(1, 32, 20, 20), T(32, 1, 3, 3)], {"pads": [1, 1, 1, 1], "groups": 32},
                       (False, True))
    import dataclasses

    from tessel.targets.opencl.kernels.base import TEMPLATES

    separate = TEMPLATES["conv2d"](dataclasses.replace(ctx, schedule={"local_repack": 0}))
    assert "local_repack" not in separate.schedule and len(separate.kernels) == 2  # repack, then the conv


def test_spaces_offer_column_vectors_and_keep_the_default_kernel() -> None:
    """The gemm space tries 1-4 column vectors a work-item; the Winograd space's default point names the
    default's columns, so the point measured as the default lowers to the default's kernel."""
    import dataclasses

    from tessel.targets.opencl.kernels.base import TEMPLATES

    _, low, sp = _space("matmul", [T(1024, 256), T(256, 256)], {}, (False, True))
    assert sp is not None and low.schedule["vcols"] == 2 and sp.default["vcols"] == 2
    assert {sp.full(p)["vcols"] for p in sp.points()} >= {1, 3, 4}
    ctx, low, sp = _space("conv2d", [T(1, 64, 56, 56), T(64, 64, 3, 3)], {"pads": [1, 1, 1, 1]},
                          (False, True))
    assert sp is not None and low.schedule["winograd"] == 1 and sp.default["vcols"] == low.schedule["vcols"]
    again = TEMPLATES["conv2d"](dataclasses.replace(ctx, schedule=dict(sp.default)))
    assert [k.source for k in again.kernels] == [k.source for k in low.kernels]


def test_reject_names_the_broken_constraint() -> None:
    _, _, sp = _space("conv2d", [T(1, 32, 28, 28), T(64, 32, 3, 3)], {"pads": [1, 1, 1, 1]}, (False, False))
    assert sp is not None
    assert "no knob 'rows'" in sp.reject({"rows": 4})
    assert "is not one of" in sp.reject({"cols": 5})
    assert "accumulator registers" in sp.reject({"tile_h": 16, "tile_w": 16})
    _, _, wino = _space("conv2d", [T(1, 32, 28, 28), T(64, 32, 3, 3)], {"pads": [1, 1, 1, 1]}, (False, True))
    assert wino is not None and wino.default["tile"] in (2, 4)
    assert wino.reject({"winograd": 0}) is None  # the direct kernel is a point of the Winograd space
    assert "tile=3" in wino.reject({"tile": 3})


def test_ops_without_a_space() -> None:
    assert _space("relu", [T(4, 16)], {})[2] is None


# signatures ----------------------------------------------------------------------------------------------
def _ops(text: str) -> list:
    m = parse_module(text)
    return [o for o in m.funcs[0].block.ops if o.name in ("conv2d", "matmul")]


def test_signature_is_stable_and_depends_on_what_makes_the_kernel() -> None:
    conv, mm = _ops(CONV)
    key, text = signature(conv, (False, True), {})
    assert key == signature(_ops(CONV)[0], (False, True), {})[0]  # another parse: the same key
    assert len(key) == 16 and "conv2d" in text
    assert signature(conv, (False, False), {})[0] != key  # constant weights or not
    assert signature(conv, (False, True), {"winograd": 0})[0] != key  # the lowering's options
    assert signature(mm, (False, True), {})[0] != key
    other = CONV.replace("dense<0.05>", "dense<0.07>")
    assert signature(_ops(other)[0], (False, True), {})[0] == key  # the weights' values do not count


# records -------------------------------------------------------------------------------------------------
def _rec(key: str = "k1", best: float = 9.0, device: str = "generic", space: str = "conv2d/1",
         schedule: dict | None = None, kind: str = "kernel") -> Record:
    return Record(kind, key, device, space, dict(schedule or {"tile": 2}), 10.0, best, 10, date="2026-12-05")


def test_records_round_trip_and_merge_deterministically(tmp_path: Path) -> None:
    a = [_rec("k1", 9.0), _rec("k2", 5.0, schedule={"rows": 4}), _rec("k1", 9.0, device="other")]
    b = [_rec("k1", 8.0, schedule={"tile": 4}), _rec("k0", 1.0)]
    merged = merge(a, b)
    assert [r.key for r in merged] == ["k0", "k1", "k1", "k2"]
    assert next(r for r in merged if r.key == "k1" and r.device == "generic").schedule == {"tile": 4}
    shuffled = a + b
    random.Random(3).shuffle(shuffled)
    assert [r.line() for r in merge(shuffled)] == [r.line() for r in merged]
    path = tmp_path / "r.jsonl"
    write_records(str(path), merged)
    assert [r.line() for r in read_records(str(path))] == [r.line() for r in merged]
    assert not list(tmp_path.glob("*.tmp*")), "the temporary file was left behind"


@pytest.mark.parametrize("text, message", [
    ('{"kind": "kernel"', "r.jsonl:2: not a JSON object"),
    ("[1, 2]", "r.jsonl:2: a record is a JSON object, not list"),
    ('{"format": 1}', "r.jsonl:2: the record has no 'kind'"),
    (json.dumps({**json.loads(_rec().line()), "best_us": "fast"}), "r.jsonl:2: 'best_us' is \"fast\""),
    (json.dumps({**json.loads(_rec().line()), "format": 9}), "r.jsonl:2: record format 9"),
    (json.dumps({**json.loads(_rec().line()), "kind": "op"}), "r.jsonl:2: kind 'op'"),
])
def test_bad_record_files_name_the_line(text: str, message: str) -> None:
    with pytest.raises(RecordError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_records(_rec().line() + "\n" + text + "\n", "r.jsonl")


def test_tuning_find_says_why_no_record_applies() -> None:
    t = Tuning([_rec("k1"), _rec("k2", device="gpu"), _rec("k3", space="conv2d/0")], "generic")
    assert t.find("kernel", "k1", "conv2d/1")[0] is not None
    assert t.find("kernel", "k9", "conv2d/1")[1] == "no-record"
    assert t.find("kernel", "k2", "conv2d/1")[1] == "other-device"
    assert t.find("kernel", "k3", "conv2d/1")[1] == "other-space"


# the lowering ----------------------------------------------------------------------------------------------
def _keys(text: str, options: dict | None = None) -> list[str]:
    found: list[str] = []
    t = Tuning([], "generic", collect=lambda key, *rest: found.append(key))
    lower_module(parse_module(text), GENERIC, None, options or {}, t)
    return found


def test_records_apply_to_their_kernel_only_and_are_byte_identical() -> None:
    conv_key = _keys(CONV)[0]
    recs = [_rec(conv_key, schedule={"tile_h": 1, "tile_w": 4})]
    remarks: list = []
    tuned = to_text(lower_module(parse_module(CONV), GENERIC, remarks, {}, Tuning(recs, "generic")))
    plain = to_text(lower_module(parse_module(CONV), GENERIC))
    again = to_text(lower_module(parse_module(CONV), GENERIC, None, {}, Tuning(recs[::-1], "generic")))
    assert tuned == again != plain
    assert "tile_h = 1, tile_w = 4" in tuned and "tile_h = 1, tile_w = 4" not in plain
    reasons = [r.reason for r in remarks if r.category == "tuning"]
    assert reasons == ["record-applied", "no-space", "no-record", "no-execution-record"]
    # another device's records change nothing
    other = to_text(lower_module(parse_module(CONV), GENERIC, None, {}, Tuning(recs, "0123456789abcdef")))
    assert other == plain


def test_a_record_the_template_refuses_keeps_the_default() -> None:
    conv_key = _keys(CONV)[0]
    remarks: list = []
    recs = [_rec(conv_key, schedule={"tile_h": 99})]  # outside the knob's values
    out = to_text(lower_module(parse_module(CONV), GENERIC, remarks, {}, Tuning(recs, "generic")))
    assert out == to_text(lower_module(parse_module(CONV), GENERIC))
    assert any(r.reason == "record-rejected" and "tile_h=99" in r.message for r in remarks)


def test_tools_give_byte_identical_output_in_fresh_processes(tmp_path: Path) -> None:
    src = tmp_path / "m.tsl"
    src.write_text(CONV)
    key = _keys(CONV)[0]
    rec = tmp_path / "r.jsonl"
    write_records(str(rec), [_rec(key, schedule={"tile_w": 5})])
    outs = []
    for i in range(2):
        out = tmp_path / f"out{i}.tsl"
        subprocess.run([sys.executable, "-m", "tessel.cli.codegen", "--device=generic",
                        f"--tuning-records={rec}", str(src), "-o", str(out)], check=True,
                       env={**os.environ, "PYTHONHASHSEED": str(i)})
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] and b"tile_h = 2, tile_w = 5" in outs[0]


# the cost model --------------------------------------------------------------------------------------------
def test_cost_model_learns_a_trend_and_ranks_by_it() -> None:
    model = cost.CostModel()
    xs = [[float(i % 5), float(i % 3)] for i in range(30)]
    ys = [0.2 * x[0] - 0.1 * x[1] for x in xs]
    model.fit("conv2d", xs[:5], ys[:5])
    assert "conv2d" not in model.weights  # too few samples: the prior stays
    model.fit("conv2d", xs, ys)
    assert model.predict("conv2d", [4.0, 0.0]) > model.predict("conv2d", [0.0, 2.0])
    ctx, low, sp = _space("conv2d", [T(1, 32, 28, 28), T(64, 32, 3, 3)], {"pads": [1, 1, 1, 1]},
                          (False, False))
    import dataclasses

    from tessel.targets.opencl.kernels.base import TEMPLATES

    def lower(p):  # noqa: ANN001, ANN202
        try:
            return TEMPLATES["conv2d"](dataclasses.replace(ctx, schedule=dict(p)))
        except NotLowerable:
            return None

    ranked = cost.rank(cost.CostModel(), sp, ctx, low, lower)
    assert ranked and len(ranked) < sp.size()  # points giving the default's kernels are dropped
    assert len(ranked[0][1]) == 1  # the prior tries one knob changed before two


def test_train_model_reads_the_trials_of_records() -> None:
    trials = [[{"tile": 2}, 10.0 * (1 + 0.1 * i), "conv2d:rows,tile", [float(i), 1.0]] for i in range(15)]
    rec = Record("kernel", "k", "d", "conv2d/1", {}, 10.0, 10.0, 10, trials=trials)
    model = cost.train([rec])
    assert model.samples["conv2d:rows,tile"] == 15
    assert model.predict("conv2d:rows,tile", [10.0, 1.0]) > model.predict("conv2d:rows,tile", [0.0, 1.0])


# measuring and the tuner (OpenCL) ---------------------------------------------------------------------------
def test_standalone_keeps_constants_constant() -> None:
    m = parse_module(CONV)
    conv = next(o for o in m.funcs[0].block.ops if o.name == "conv2d")
    alone = measure.standalone(conv, m, (False, True))
    ops = [o.name for o in alone.funcs[0].block.ops]
    assert ops == ["const", "conv2d", "return"] and len(alone.funcs[0].args) == 1
    assert "dense<" in to_text(alone)


def test_the_reserve_for_the_tuned_build_is_this_devices_rate(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The untuned program built from source gives the device's own build rate (seconds a KiB), which
    sizes the time kept for building the tuned program; from the cache it gives none and the prior
    COMPILE_SECONDS_PER_KB stands."""
    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path))
    device = dev.pick_device()
    info = dev.device_info(device)
    cold = tuner.baseline(CONV, device, info, info.fingerprint, {})
    assert cold.build_rate > 0 and cold.source_kb > 0
    assert cold.cold_build_seconds() == pytest.approx(cold.source_kb * cold.build_rate)
    warm = tuner.baseline(CONV, device, info, info.fingerprint, {})
    assert warm.build_rate == 0.0
    assert warm.cold_build_seconds() == pytest.approx(warm.source_kb * tuner.COMPILE_SECONDS_PER_KB)


def test_tune_writes_records_that_resume_and_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget is spent by an injected clock that stands still, so how far the search goes depends on
    its point limit alone, not on how loaded the machine is."""
    monkeypatch.setattr(tuner, "budget_clock", lambda: 0.0)
    device = dev.pick_device()
    info = dev.device_info(device)
    saved: list[list[Record]] = []
    records, report = tuner.tune(CONV, device, 12.0, [], {}, saved.append, max_points=3)
    assert report.kernels == 3 and report.tunable == 2 and report.tuned == 2
    assert len(saved) == 3 and report.measured <= 3 * report.tuned  # after each kernel, after the confirm
    assert report.saved == report.space_points - report.measured
    assert {r.device for r in records} == {info.fingerprint}
    kernels = [r for r in records if r.kind == "kernel"]
    assert all(r.trials and r.trials[0][0] == {} and r.repeats >= 6 for r in kernels)
    assert report.confirm, "no confirming whole-model run"
    # a run interrupted after its first kernel resumes: it skips what was measured and tunes the rest
    first = [r for r in records if r.kind != "kernel"] + kernels[:1]
    again, rep2 = tuner.tune(CONV, device, 12.0, first, {}, lambda rs: None, max_points=3)
    assert (rep2.resumed, rep2.tuned) == (1, 1)
    again, rep3 = tuner.tune(CONV, device, 12.0, again, {}, lambda rs: None, max_points=3)
    assert (rep3.resumed, rep3.tuned) == (2, 0)
    # the records apply, and the tuned module still computes the same
    tuned = lower_module(parse_module(CONV), info, None, {}, Tuning(again, info.fingerprint))
    from tessel.targets.opencl.runtime import Executable

    x = measure.random_inputs(tuned.funcs[0])
    plain = lower_module(parse_module(CONV), info)
    got = Executable(tuned, tuned.funcs[0], device).run(x)[0]
    want = Executable(plain, plain.funcs[0], device).run(x)[0]
    assert abs(got - want).max() <= 1e-4 * max(1.0, abs(want).max())


def test_tessel_tune_cli(tmp_path: Path) -> None:
    src = tmp_path / "m.tsl"
    src.write_text(CONV)
    out = tmp_path / "r.jsonl"
    report = tmp_path / "rep.json"
    p = subprocess.run([sys.executable, "-m", "tessel.cli.tune", str(src), "--budget=8", "--max-points=2",
                        "-o", str(out), "--report-json", str(report), "-v"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "tessel-tune: 3 kernels, 2 with a schedule space" in p.stderr
    assert read_records(str(out)) and json.loads(report.read_text())["kernels"] == 3
    # a corrupt output file is refused before anything is measured, and left as it was
    out.write_text(out.read_text()[:-20])
    p = subprocess.run([sys.executable, "-m", "tessel.cli.tune", str(src), "-o", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "r.jsonl:" in p.stderr and "not a JSON object" in p.stderr
    p = subprocess.run([sys.executable, "-m", "tessel.cli.tune", "--print-fingerprint"], capture_output=True,
                       text=True)
    assert p.returncode == 0 and p.stdout.split()[0] == dev.fingerprint(dev.pick_device())


@pytest.mark.slow
def test_tune_on_a_local_ray_cluster(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    src = tmp_path / "m.tsl"
    src.write_text(BLOCK)
    out = tmp_path / "r.jsonl"
    p = subprocess.run([sys.executable, "-m", "tessel.cli.tune", "--ray", "local", "-O2", str(src),
                        "--budget=20", "--max-points=3", "-o", str(out)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    records = read_records(str(out))
    kinds = {r.kind for r in records}
    assert "kernel" in kinds and "model" in kinds
    assert all(r.device == dev.fingerprint(dev.pick_device()) for r in records)


def test_a_recorded_execution_is_where_auto_starts() -> None:
    """A func's `execution` attribute (a model record) is the way `auto` runs from the first run, with the
    rechecks still armed; an explicit execution wins."""
    from tessel.targets.opencl.runtime import Executable

    device = dev.pick_device()
    info = dev.device_info(device)
    module = lower_module(parse_module(CONV), info)
    func = module.funcs[0]
    func.attrs["execution"] = "inline"
    x = measure.random_inputs(func)
    exe = Executable(module, func, device)
    want = Executable(module, func, device, execution="pool").run(x)[0]
    got = exe.run(x)[0]
    assert abs(got - want).max() <= 1e-5 * max(1.0, abs(want).max())
    if exe.companion is None:
        pytest.skip("no inline companion device here")
    assert exe.running_on == "inline" and "tuning record" in exe.adapt_note
    assert exe._choice is not None and exe._choice.others[-1] == "pool"  # rechecked against the others
    assert Executable(module, func, device, execution="pool").running_on == "pool"


def test_a_slower_tuned_model_keeps_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the confirming run finds the tuned model slower beyond its noise, this run's kernel records
    are rewritten to keep the templates' defaults (the model record still says how to run it)."""
    device = dev.pick_device()

    def faster(found, device, info, fp, options, model, seconds, max_points=24, loads=None):  # noqa: ANN001, ANN202
        return Record("kernel", found.key, fp, found.space, {"tile_h": 1}, 10.0, 5.0, 6, op=found.op)

    slower = tuner.Confirmed(100.0, 150.0, 1.5, 0.01, "pool", "stub")
    monkeypatch.setattr(tuner, "tune_kernel", faster)
    monkeypatch.setattr(tuner, "confirm", lambda *a, **k: slower)
    records, report = tuner.tune(CONV, device, 30.0, [], {}, lambda rs: None)
    kernels = [r for r in records if r.kind == "kernel"]
    assert kernels and all(r.schedule == {} and r.best_us == r.default_us for r in kernels)
    assert "slower, this run's kernels keep their defaults" in report.confirm and report.improved == 0
    assert [r.schedule for r in records if r.kind == "model"] == [{"execution": "pool"}]


@pytest.mark.parametrize("hw, kind", [(7, 3), (20, 2)])
def test_the_integer_depthwise_space_offers_the_other_kernel(hw: int, kind: int) -> None:
    """qconv2d's depthwise space: the default kernel's own knob (columns in the lanes kernel, rows in the
    band kernel) and the other kernel as extra points; every point lowers; other integer convs have none."""
    import dataclasses

    from tessel.targets.opencl.kernels.base import TEMPLATES

    def q(*dims: int, dtype: str = "ui8") -> TensorType:
        return TensorType(dims, dtype)

    types = [q(1, 32, hw, hw), q(32, 1, 3, 3, dtype="i8"), q(), q(dtype="i8"), TensorType((32,), "f32"), q()]
    attrs = {"pads": [1, 1, 1, 1], "groups": 32}
    ctx, low, sp = _space("qconv2d", types, attrs, (False, True, True, True, True, True))
    assert low.schedule["depthwise"] == kind and sp is not None and sp.version == "qconv2d-depthwise/1"
    assert {p.get("depthwise") for p in sp.extra} == {5 - kind}
    for p in [*sp.points(), *sp.extra]:
        assert TEMPLATES["qconv2d"](dataclasses.replace(ctx, schedule=dict(p))).schedule["depthwise"] == \
            p.get("depthwise", kind)
    dense = [q(1, 32, hw, hw), q(32, 32, 3, 3, dtype="i8"), q(), q(dtype="i8"), TensorType((32,), "f32"), q()]
    assert _space("qconv2d", dense, {"pads": [1, 1, 1, 1]}, (False, True, True, True, True, True))[2] \
        is None
