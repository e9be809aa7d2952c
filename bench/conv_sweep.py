"""Time the OpenCL conv2d template on the conv shapes of the light models, over a grid of schedules.

    POCL_AFFINITY=1 .venv/bin/python bench/conv_sweep.py shapes [--models resnet50,squeezenet]
    POCL_AFFINITY=1 .venv/bin/python bench/conv_sweep.py default [--filter 3x3] [--json out.json]
    POCL_AFFINITY=1 .venv/bin/python bench/conv_sweep.py sweep [--filter ...] [--grid tile,cols,...]
    git show HEAD:targets/opencl/kernels/conv.py > /tmp/conv_old.py
    POCL_AFFINITY=1 .venv/bin/python bench/conv_sweep.py compare --baseline /tmp/conv_old.py --cold

`shapes` imports each model, runs -O2 and lists every distinct conv2d (input/weight shapes, attributes and
the NCHWc blocks of its fused region: in_block when the region unpacks the conv's input, out_block when it
packs its output), how often each model uses it and its MFLOP; the list is cached in
~/.cache/tessel/conv_shapes.json (--refresh re-imports). `default` times each shape with the template's
own choices (what a compiled model gets), `sweep` over a grid of `schedule` overrides, printing the best
few per shape, `compare` the defaults of another version of conv.py against the installed one's
(interleaved rounds, totals weighted by the shapes' uses). --cold: the weights come from DRAM, as in a
model whose weights exceed the L3.

Timing: the kernels of one conv (repack and main, plus a ReLU epilogue as fused regions have) are
enqueued on a profiling queue; one iteration's time is the sum of its kernels' profiling events, and the
figure reported is the best of --rounds rounds, each the median of --repeat iterations (this VM is shared
and sometimes runs at one-thread speed; compare figures taken in one session).
"""

from __future__ import annotations

import os

os.environ.setdefault("POCL_AFFINITY", "1")  # before pyopencl loads PoCL

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

MODELS = (
    "resnet50",
    "squeezenet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "shufflenet",
    "vgg19",
    "bvlc_alexnet",
    "zfnet512",
)
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tessel" / "conv_shapes.json"


@dataclass
class Shape:
    x: list[int]
    w: list[int]
    bias: bool
    strides: list[int]
    pads: list[int]
    dilations: list[int]
    groups: int
    in_block: int
    out_block: int
    uses: dict[str, int] = field(default_factory=dict)

    @property
    def key(self) -> str:
        n, c, h, w = self.x
        o, _, kh, kw = self.w
        s = f"{kh}x{kw} {c}->{o} {h}x{w}"
        if self.strides != [1, 1]:
            s += f" s{self.strides[0]}"
        if any(self.pads):
            s += f" p{self.pads[0]}" if len(set(self.pads)) == 1 else f" p{self.pads}"
        if self.dilations != [1, 1]:
            s += f" d{self.dilations[0]}"
        if self.groups > 1:
            s += f" g{self.groups}"
        if n > 1:
            s += f" n{n}"
        return s + f" b{self.in_block}/{self.out_block}"

    def attrs(self) -> dict[str, Any]:
        return {
            "strides": self.strides,
            "pads": self.pads,
            "dilations": self.dilations,
            "groups": self.groups,
        }

    def out_hw(self) -> tuple[int, int]:
        _, _, h, w = self.x
        _, _, kh, kw = self.w
        ho = (h + self.pads[0] + self.pads[2] - (kh - 1) * self.dilations[0] - 1) // self.strides[0] + 1
        wo = (w + self.pads[1] + self.pads[3] - (kw - 1) * self.dilations[1] - 1) // self.strides[1] + 1
        return ho, wo

    @property
    def flops(self) -> int:
        ho, wo = self.out_hw()
        o, cg, kh, kw = self.w
        return 2 * self.x[0] * o * ho * wo * cg * kh * kw


# collecting the shapes ---------------------------------------------------------------------------------
def model_shapes(model: str) -> list[Shape]:
    """Every conv2d of `model` after -O2, with the NCHWc blocks its fused region reads and writes."""
    import onnx
    from tessel.frontends.onnx.importer import import_model
    from tessel.passes.manager import PassManager
    from tessel.passes.pipeline import O_LEVELS, parse_pipeline

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{model}.onnx"
    module = import_model(path.read_bytes(), str(path))
    PassManager(parse_pipeline(O_LEVELS[2])).run(module)
    out = []
    for op in module.walk():
        if op.name != "conv2d":
            continue
        in_block = out_block = 0
        src = op.operands[0].op
        if src is not None and src.name == "unpack":
            in_block = int(src.attrs["inner_tiles"][0])
        for user in op.results[0].users:
            if user.name == "pack":
                out_block = int(user.attrs["inner_tiles"][0])
        a = op.attrs
        out.append(
            Shape(
                list(op.operands[0].type.dims),
                list(op.operands[1].type.dims),
                len(op.operands) > 2,
                [int(v) for v in a.get("strides", [1, 1])],
                [int(v) for v in a.get("pads", [0] * 4)],
                [int(v) for v in a.get("dilations", [1, 1])],
                int(a.get("groups", 1)),
                in_block,
                out_block,
                {model: 1},
            )
        )
    return out


def collect(models: list[str], refresh: bool = False) -> list[Shape]:
    if CACHE.exists() and not refresh:
        cached = [Shape(**d) for d in json.loads(CACHE.read_text())]
        if all(any(m in s.uses for s in cached) for m in models):
            return [s for s in cached if any(m in s.uses for m in models)]
    shapes: dict[str, Shape] = {}
    for m in MODELS:
        print(f"importing {m} ...", file=sys.stderr)
        for s in model_shapes(m):
            if s.key in shapes:
                shapes[s.key].uses[m] = shapes[s.key].uses.get(m, 0) + 1
            else:
                shapes[s.key] = s
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    CACHE.write_text(json.dumps([asdict(s) for s in shapes.values()], indent=0) + "\n")
    return [s for s in shapes.values() if any(m in s.uses for m in models)]


# timing ------------------------------------------------------------------------------------------------
def relu(v: str, i: str, lanes: int) -> str:
    return f"fmax({v}, 0.0f)"


class Prepared:
    """One conv lowered with one schedule, built, its buffers allocated and arguments ready."""

    def __init__(
        self, timer: Timer, shape: Shape, schedule: dict[str, Any], cold: bool, baseline: Any = None
    ) -> None:
        from tessel.ir.ops.layout import pack_array
        from tessel.targets.opencl.kernels.testing import build

        cl = timer.cl
        self.timer, self.shape = timer, shape
        self.ctx, self.low = timer.lower(shape, schedule, baseline)
        self.schedule = self.low.schedule
        self.host = timer.inputs(shape)
        arrays = list(self.host)
        if shape.in_block:
            arrays[0] = pack_array(arrays[0], [1], [shape.in_block], [])
        for i, spec in self.low.pack.items():
            arrays[i] = spec.apply(arrays[i])
        self.bufs = {f"in{i}": timer.buffer(a) for i, a in enumerate(arrays) if i != 1}
        self.copies = timer.weights(shape, self.low.pack.get(1), arrays[1], cold)
        dims = tuple(self.ctx.results[0].dims)
        if shape.out_block:
            dims = (dims[0], math.ceil(dims[1] / shape.out_block), *dims[2:], shape.out_block)
        self.out = np.zeros(dims, np.float32)
        mf = cl.mem_flags
        self.bufs["out0"] = cl.Buffer(timer.context, mf.READ_WRITE, self.out.nbytes)
        for i, n in enumerate(self.low.scratch):
            self.bufs[f"tmp{i}"] = cl.Buffer(timer.context, mf.READ_WRITE, max(n, 4))
        self.kernels = build(self.low, timer.context, self.ctx.device)
        self.turn = 0

    def once(self) -> list[Any]:
        self.bufs["in1"] = self.copies[self.turn % len(self.copies)]
        self.turn += 1
        for kobj, k in zip(self.kernels, self.low.kernels, strict=True):
            kobj.set_args(*[self.bufs[n] for n in (k.args or ())])
        return [
            self.timer.cl.enqueue_nd_range_kernel(self.timer.queue, kobj, k.global_size, k.local_size)
            for kobj, k in zip(self.kernels, self.low.kernels, strict=True)
        ]

    def median(self, repeat: int) -> float:
        """The median over `repeat` iterations of the summed kernel times (seconds)."""
        totals = []
        for _ in range(repeat):
            events = self.once()
            self.timer.queue.finish()
            totals.append(sum(e.profile.end - e.profile.start for e in events) * 1e-9)
        return statistics.median(totals)

    def check(self) -> None:
        from tessel.ir.ops.layout import unpack_array
        from tessel.ir.ops.registry import get_op

        self.once()
        self.timer.cl.enqueue_copy(self.timer.queue, self.out, self.bufs["out0"])
        self.timer.queue.finish()
        y = self.ctx.results[0]
        got = self.out
        if self.shape.out_block:
            got = unpack_array(got, list(y.dims), [1], [self.shape.out_block], [])
        opdef = get_op("conv2d")
        assert opdef is not None
        want = np.maximum(np.asarray(opdef.reference(self.ctx.sig, *self.host)), 0)
        np.testing.assert_allclose(
            got, want, rtol=1e-3, atol=1e-3, err_msg=f"{self.shape.key} {self.schedule}"
        )


class Timer:
    """One OpenCL context and profiling queue for all the timings of a run; inputs and weight copies are
    made once per shape (and per weight packing)."""

    def __init__(self) -> None:
        from tessel.targets.opencl import device as dev

        self.cl = dev.cl()
        self.device = dev.pick_device()
        self.context = dev.context_for(self.device)
        self.queue = self.cl.CommandQueue(
            self.context, properties=self.cl.command_queue_properties.PROFILING_ENABLE
        )
        self._inputs: dict[str, list[np.ndarray]] = {}
        self._weights: dict[tuple[str, str, bool], list[Any]] = {}

    def lower(self, shape: Shape, schedule: dict[str, Any], baseline: Any = None) -> tuple[Any, Any]:
        from tessel.ir.ops.registry import get_op
        from tessel.ir.types import TensorType
        from tessel.targets.opencl.kernels import load_all
        from tessel.targets.opencl.kernels.base import Ctx, DeviceInfo
        from tessel.targets.opencl.kernels.conv import lower_conv2d

        load_all()
        types = [TensorType(tuple(shape.x), "f32"), TensorType(tuple(shape.w), "f32")]
        if shape.bias:
            types.append(TensorType((shape.w[0],), "f32"))
        opdef = get_op("conv2d")
        assert opdef is not None
        sig = opdef.sig(types, shape.attrs())
        sig.results = opdef.infer(sig)
        ctx = Ctx("conv2d", sig, DeviceInfo.generic(), (False, True, True), dict(schedule))
        fn = baseline or lower_conv2d
        return ctx, fn(ctx, relu, in_block=shape.in_block, out_block=shape.out_block)

    def inputs(self, shape: Shape) -> list[np.ndarray]:
        if shape.key not in self._inputs:
            rng = np.random.default_rng(0)
            x = rng.standard_normal(shape.x).astype(np.float32)
            w = (rng.standard_normal(shape.w) / math.sqrt(np.prod(shape.w[1:]))).astype(np.float32)
            b = [rng.standard_normal(shape.w[0]).astype(np.float32)] if shape.bias else []
            self._inputs = {shape.key: [x, w, *b]}  # one shape at a time
            self._weights = {}
        return self._inputs[shape.key]

    def buffer(self, a: np.ndarray) -> Any:
        mf = self.cl.mem_flags
        return self.cl.Buffer(self.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(a))

    def weights(self, shape: Shape, spec: Any, packed: np.ndarray, cold: bool) -> list[Any]:
        """Buffers holding the packed weights: one, or (`cold`) copies adding up to 64 MiB, more than the
        L3, each iteration reading the next, as in a model whose weights do not stay cached."""
        key = (shape.key, repr(spec), cold)
        if key not in self._weights:
            n = min(64, (64 << 20) // packed.nbytes) if cold else 1
            self._weights[key] = [self.buffer(packed) for _ in range(max(n, 2 if cold else 1))]
        return self._weights[key]

    def time(
        self,
        shape: Shape,
        schedule: dict[str, Any],
        rounds: int,
        repeat: int,
        check: bool = False,
        cold: bool = False,
    ) -> tuple[float, dict[str, Any]]:
        """(best of `rounds` medians, the schedule the template reports) of one conv."""
        prep = Prepared(self, shape, schedule, cold)
        prep.once()
        self.queue.finish()
        if check:
            prep.check()
        return min(prep.median(repeat) for _ in range(rounds)), prep.schedule

    def sweep(
        self, shape: Shape, schedules: list[dict[str, Any]], rounds: int, repeat: int, check: bool, cold: bool
    ) -> list[tuple[float, dict[str, Any], dict[str, Any]]]:
        """(best seconds, schedule asked, schedule reported) for each schedule the template accepts,
        timed in interleaved rounds so that a slow spell of the machine hits them all alike."""
        from tessel.targets.opencl.kernels.base import NotLowerable

        preps = []
        for s in schedules:
            try:
                prep = Prepared(self, shape, s, cold)
            except NotLowerable:
                continue
            prep.once()
            if check:
                prep.check()
            preps.append((s, prep))
        self.queue.finish()
        best = [math.inf] * len(preps)
        for _ in range(rounds):
            for i, (_, prep) in enumerate(preps):
                best[i] = min(best[i], prep.median(repeat))
        return sorted(((t, s, p.schedule) for t, (s, p) in zip(best, preps, strict=True)), key=lambda r: r[0])


def load_baseline(path: str) -> Any:
    """`lower_conv2d` of another version of conv.py (e.g. `git show HEAD:targets/opencl/kernels/conv.py`),
    imported beside the installed one, for before/after timings in one session."""
    import importlib.util

    from tessel.targets.opencl.kernels import base, load_all

    load_all()
    spec = importlib.util.spec_from_file_location("tessel.targets.opencl.kernels._conv_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    saved = base.TEMPLATES.pop("conv2d")
    try:
        spec.loader.exec_module(module)
    finally:
        base.TEMPLATES["conv2d"] = saved
    return module.lower_conv2d


# the grid ----------------------------------------------------------------------------------------------
def tiles(ho: int, wo: int, lo: int = 8, hi: int = 24, keep: int = 3) -> list[tuple[int, int]]:
    """The `keep` tiles of lo..hi pixels padding the output least (ties: nearest the middle pixel count,
    then widest), each also transposed when that fits."""
    cands = []
    for tw in range(1, min(wo, hi) + 1):
        for th in range(1, min(ho, hi // tw) + 1):
            r = th * tw
            if r >= min(lo, ho * wo):
                padded = math.ceil(ho / th) * th * math.ceil(wo / tw) * tw
                cands.append((padded, abs(r - (lo + hi) / 2), -tw, th, tw))
    best = [(th, tw) for *_, th, tw in sorted(cands)[:keep]]
    return sorted({*best, *((tw, th) for th, tw in best if tw <= ho and th <= wo)})


# (columns a work-item, fewest and most pixels a tile, unroll factors) the `tile` grid tries
TILE_GRID = ((1, 12, 20, (0, 4)), (2, 6, 14, (1, 2, 4)), (3, 4, 8, (1, 2)))


def grid(shape: Shape, knobs: list[str]) -> list[dict[str, Any]]:
    """The schedules to try: the template's defaults, then every combination of the knobs' values; `tile`
    tries tiles of TILE_GRID's sizes for each count of columns and unroll factor (dense convs; others
    only 1 column, fully unrolled)."""
    ho, wo = shape.out_hw()
    dense = shape.groups == 1
    axes: list[list[dict[str, Any]]] = []
    if "tile" in knobs:
        axes.append(
            [
                {"tile_h": th, "tile_w": tw, **({"vcols": nc, "unroll": u} if dense else {})}
                for nc, lo, hi, unrolls in TILE_GRID[: 3 if dense else 1]
                for th, tw in tiles(ho, wo, lo, hi)
                for u in (unrolls if dense else (0,))
            ]
        )
    if "cols" in knobs:
        axes.append([{"cols": 8}, {"cols": 16}])
    if "cin_block" in knobs and shape.w[1] > 8:
        axes.append([{"cin_block": 8}, {"cin_block": 16}])
    if "local" in knobs:
        axes.append([{"local": v} for v in (1, 2, 4, 8)])
    if "cols_first" in knobs:
        axes.append([{}, {"cols_first": True}])
    out: list[dict[str, Any]] = [{}]
    for combo in itertools.product(*axes):
        s: dict[str, Any] = {}
        for part in combo:
            s.update(part)
        if s and s not in out:
            out.append(s)
    return out


def compare(timer: Timer, shapes: list[Shape], models: list[str], args: argparse.Namespace) -> None:
    """Each shape with the baseline conv.py and with the installed one, in interleaved rounds; totals
    weigh each shape by its uses in `models`."""
    baseline = load_baseline(args.baseline)
    before = after = 0.0
    rows = []
    for s in shapes:
        uses = sum(s.uses.get(m, 0) for m in models)
        preps = [Prepared(timer, s, {}, args.cold, baseline), Prepared(timer, s, {}, args.cold)]
        for p in preps:
            p.once()
            if args.check:
                p.check()
        timer.queue.finish()
        best = [math.inf, math.inf]
        for _ in range(args.rounds):
            for i, p in enumerate(preps):
                best[i] = min(best[i], p.median(args.repeat))
        before, after = before + best[0] * uses, after + best[1] * uses
        g0, g1 = (s.flops / t / 1e9 for t in best)
        sched = {k: v for k, v in preps[1].schedule.items() if k not in ("in_block", "out_block", "in_place")}
        print(
            f"{s.key:36} x{uses:<3} {best[0] * 1e3:7.3f} -> {best[1] * 1e3:7.3f} ms"
            f" {g0:6.1f} -> {g1:6.1f} GFLOP/s  {sched}",
            flush=True,
        )
        rows.append(
            {
                "shape": s.key,
                "uses": uses,
                "before_ms": best[0] * 1e3,
                "after_ms": best[1] * 1e3,
                "before_gflops": g0,
                "after_gflops": g1,
            }
        )
    print(f"total (each shape x its uses): {before * 1e3:.2f} -> {after * 1e3:.2f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("shapes", "default", "sweep", "compare"))
    ap.add_argument("--baseline", help="compare: the conv.py to compare the installed one with")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--filter", default="", help="only shapes whose key contains this")
    ap.add_argument(
        "--grid", default="tile", help="knobs to sweep: tile,vcols,cols,cin_block,local,cols_first"
    )
    ap.add_argument("--set", default="", help="fixed overrides for every run, e.g. vcols=2,local=2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--limit", type=int, default=0, help="only the N shapes of most FLOPs (times uses)")
    ap.add_argument("--check", action="store_true", help="compare each result with numpy")
    ap.add_argument("--cold", action="store_true", help="weights not cached (a copy per iteration)")
    ap.add_argument("--refresh", action="store_true", help="re-import the models")
    ap.add_argument("--json", help="write {shape key: seconds} here")
    args = ap.parse_args()
    models = args.models.split(",")
    shapes = [s for s in collect(models, args.refresh) if args.filter in s.key]
    fixed = {k: int(v) for k, v in (kv.split("=") for kv in args.set.split(",") if kv)}
    shapes.sort(key=lambda s: -s.flops * sum(s.uses.get(m, 0) for m in models))
    shapes = shapes[: args.limit or None]
    if args.mode == "shapes":
        for s in shapes:
            uses = ", ".join(f"{m} {n}" for m, n in s.uses.items() if m in models)
            print(f"{s.key:40} {s.flops / 1e6:9.1f} MFLOP  {uses}")
        return
    timer = Timer()
    results: dict[str, float] = {}
    total = 0.0
    if args.mode == "compare":
        compare(timer, shapes, models, args)
        return
    for s in shapes:
        uses = sum(s.uses.get(m, 0) for m in models)
        if args.mode == "default":
            t, sched = timer.time(s, fixed, args.rounds, args.repeat, args.check, args.cold)
            results[s.key] = t
            total += t * uses
            print(
                f"{s.key:40} x{uses:<3} {t * 1e3:8.3f} ms {s.flops / t / 1e9:7.1f} GFLOP/s  {sched}",
                flush=True,
            )
            continue
        rows = timer.sweep(
            s,
            [{**g, **fixed} for g in grid(s, args.grid.split(","))],
            args.rounds,
            args.repeat,
            args.check,
            args.cold,
        )
        d = next(t for t, asked, _ in rows if asked == fixed)
        results[s.key] = rows[0][0]
        print(f"{s.key:40} x{uses:<3} default {d * 1e3:7.3f} ms {s.flops / d / 1e9:6.1f} GFLOP/s", flush=True)
        for t, asked, got in rows[: args.top]:
            shown = {
                k: v for k, v in {**got, **asked}.items() if k not in ("in_block", "out_block", "in_place")
            }
            print(f"    {t * 1e3:8.3f} ms {s.flops / t / 1e9:6.1f} GFLOP/s  {shown}", flush=True)
    if args.mode == "default":
        print(f"total (each shape x its uses): {total * 1e3:.2f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
