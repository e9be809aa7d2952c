"""The cost model: where a model's time is, and which points of a space to measure first.

Two questions, two answers:
- Which kernels matter: each kernel signature's roofline time (its FLOPs at the device's measured peak
  GFLOP/s, or its bytes at the measured bandwidth, whichever is longer, plus one launch) times its uses in
  the model, from `tessel-run --calibrate`'s peaks (`profile.Peaks`; measured once and stored). The tuner
  spends its budget on kernels in that order.
- Which points of one kernel's space: a ridge regression of log(point time / default time) on features
  of the point relative to the default (each knob's log2 change, the change in work-items, in work-groups
  per compute unit and in the share of the last wave left idle), fitted to every trial in the records
  already measured for the same template, so each tuning run learns from the ones before. With fewer than
  MIN_SAMPLES trials the prior ranks instead: points close to the default first (one knob changed before
  two), fewer idle compute units first.
The features are read from the candidate's `Lowered` (the template run with the point, no compile), so
ranking a space of thousands of points costs milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..kernels.base import Ctx, Lowered
from ..records import Record
from ..space import Point, Space

MIN_SAMPLES = 12
"""Trials of a template's family the regression needs before it replaces the prior."""
RIDGE = 1.0


def roofline_us(flops: float, nbytes: float, peaks: Any) -> float:
    """A kernel's time on the roofline of `peaks` (profile.Peaks), launch included, in microseconds."""
    return max(flops / (peaks.gflops * 1e3), nbytes / (peaks.gbps * 1e3)) + peaks.launch_us


def _items(low: Lowered) -> tuple[float, float]:
    """(work-items, work-groups) of the kernel doing the arithmetic."""
    k = low.kernels[low.flops_kernel] if low.kernels else None
    if k is None:
        return 1.0, 1.0
    items = float(math.prod(k.global_size)) or 1.0
    local = float(math.prod(k.local_size)) if k.local_size else 1.0
    return items, max(1.0, items / max(local, 1.0))


def _knob(v: Any) -> float:
    return math.log2(1.0 + float(v)) if isinstance(v, int | float) else 0.0


def features(space: Space, point: Point, low: Lowered, default: Lowered, compute_units: int) -> list[float]:
    """The point's features relative to the default's (see the module's docstring)."""
    full = space.full(point)
    names = sorted(k.name for k in space.knobs)
    f = [_knob(full[n]) - _knob(space.default[n]) for n in names]
    f += [float(len(point))]
    items, groups = _items(low)
    d_items, d_groups = _items(default)
    f.append(math.log2(items / d_items))
    waves = math.ceil(groups / compute_units) / (groups / compute_units)
    d_waves = math.ceil(d_groups / compute_units) / (d_groups / compute_units)
    f.append(waves - d_waves)
    f.append(float(len(low.kernels) - len(default.kernels)))
    f.append(1.0 if "winograd" in point else 0.0)
    return f


def prior(f: Sequence[float]) -> float:
    """The prior's predicted log time ratio: distance from the default, then idle compute units."""
    return 0.05 * f[-5] + 0.01 * sum(abs(x) for x in f[:-5]) + 0.5 * max(0.0, f[-3])


@dataclass
class CostModel:
    """Ridge regressions per template family (the space version's prefix), fitted to record trials."""

    weights: dict[str, list[float]] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)

    def predict(self, family: str, f: Sequence[float]) -> float:
        w = self.weights.get(family)
        if w is None or len(w) != len(f) + 1:
            return prior(f)
        return float(np.dot(w[:-1], f) + w[-1])

    def fit(self, family: str, xs: Sequence[Sequence[float]], ys: Sequence[float]) -> None:
        """Fit one family; with under MIN_SAMPLES samples (or features of different lengths) keep the
        prior."""
        rows = [list(x) for x in xs]
        if len(rows) < MIN_SAMPLES or len({len(r) for r in rows}) != 1:
            return
        a = np.hstack([np.asarray(rows, dtype=np.float64), np.ones((len(rows), 1))])
        y = np.asarray(ys, dtype=np.float64)
        reg = RIDGE * np.eye(a.shape[1])
        reg[-1, -1] = 0.0
        w = np.linalg.solve(a.T @ a + reg, a.T @ y)
        self.weights[family] = [float(v) for v in w]
        self.samples[family] = len(rows)


def family(space: Space) -> str:
    """What one regression covers: a template's spaces with the same knobs (their features line up)."""
    return f"{space.version.split('/')[0]}:{','.join(sorted(k.name for k in space.knobs))}"


def train(records: Sequence[Record]) -> CostModel:
    """A model fitted to the trials of `records` (each trial: [point, us, family, features])."""
    model = CostModel()
    xs: dict[str, list[list[float]]] = {}
    ys: dict[str, list[float]] = {}
    for r in records:
        if r.kind != "kernel" or r.default_us <= 0:
            continue
        for t in r.trials:
            if len(t) < 4 or not t[1] or t[1] <= 0:
                continue
            xs.setdefault(str(t[2]), []).append([float(x) for x in t[3]])
            ys.setdefault(str(t[2]), []).append(math.log(float(t[1]) / r.default_us))
    for fam in xs:
        model.fit(fam, xs[fam], ys[fam])
    return model


SHORTLIST = 300
"""Points of a space the ranking lowers and scores (the nearest to the default first): lowering one takes
about a millisecond, and a space can hold tens of thousands."""


def distance(space: Space, point: Point) -> tuple[int, float]:
    """How far a point is from the default: knobs changed, then the sum of their log2 changes."""
    return len(point), sum(abs(_knob(v) - _knob(space.default.get(k, v))) for k, v in point.items())


def rank(model: CostModel, space: Space, ctx: Ctx, default: Lowered, lower: Any,
         limit: int = SHORTLIST) -> list[tuple[float, Point, Lowered]]:
    """The space's points the template accepts, as (predicted log ratio, point, lowered), best first:
    the `limit` nearest the default are lowered and scored (points whose kernels are the default's are
    dropped)."""
    base = _source(default)
    out: list[tuple[float, Point, Lowered]] = []
    seen = {base}
    near = sorted(space.points(), key=lambda p: (distance(space, p), sorted(p.items())))
    for point in near[:limit]:
        low = lower(point)
        if low is None:
            continue
        src = _source(low)
        if src in seen:
            continue
        seen.add(src)
        f = features(space, point, low, default, ctx.device.compute_units)
        out.append((model.predict(family(space), f), point, low))
    out.sort(key=lambda t: (t[0], sorted(t[1].items())))
    return out


def _source(low: Lowered) -> str:
    return "\n".join(f"{k.source}{k.global_size}{k.local_size}" for k in low.kernels) + repr(
        sorted((i, repr(p)) for i, p in low.pack.items()))
