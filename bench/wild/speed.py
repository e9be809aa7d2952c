"""Dynamic against static compiles of the wild models, in one process (issue 35's speed check).

    .venv/bin/python bench/wild/speed.py [--models a,b] [--rounds 20]

For each model: one dynamic compile with size A as its `shape_hints` (lowered ahead of time), and one
static compile per size (`input_shapes=` the size's shapes); then at each size the dynamic and the static
model run in interleaved rounds after a warm-up (the dynamic one compiles size B at its first call, outside
the timing), and the table gives both medians, their ratio, and the kernels each launches.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from models import select  # noqa: E402

DEFAULT = "doc_orientation,magika,ppocr_cls,oww_embedding,whisper_vad,ddddocr_ocr_beta,nudenet,ppocr4_rec"


def _feeds(model_id: str, size: str, names: list[str]) -> dict[str, np.ndarray]:
    data = np.load(HERE / "models" / f"{model_id}.{size}.npz")
    arrays = [data[k] for k in sorted(data.files) if k.startswith("in_")]
    return dict(zip(names, arrays, strict=True))


def _launches(model: Any, feed: dict[str, np.ndarray]) -> int:
    exe = model._exe
    if hasattr(exe, "for_shapes"):
        exe = exe.for_shapes([a.shape for a in feed.values()])
    return len(getattr(exe, "steps", []))


def main() -> int:
    import tessel

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    print(f"{'model':<17} {'size':<8} {'dynamic ms':>10} {'static ms':>10} {'ratio':>6} {'kernels d/s':>11}")
    for m in select(args.models.split(",")):
        path = str(HERE / "models" / f"{m.id}.onnx")
        dyn0 = tessel.compile(path, target="numpy")
        names = [i.name for i in dyn0.get_inputs()]
        feeds = {s: _feeds(m.id, s, names) for s in "AB"}
        hint = {n: list(a.shape) for n, a in feeds["A"].items()}
        dyn = tessel.compile(path, shape_hints=hint)
        for size, feed in feeds.items():
            static = tessel.compile(path, input_shapes={n: list(a.shape) for n, a in feed.items()})
            times: dict[str, list[float]] = {"d": [], "s": []}
            for model in (dyn, static):
                for _ in range(3):
                    model.run(None, feed)
            for _ in range(args.rounds):
                for key, model in (("d", dyn), ("s", static)):
                    t0 = time.perf_counter()
                    model.run(None, feed)
                    times[key].append(time.perf_counter() - t0)
            d, s = (1000 * statistics.median(times[k]) for k in "ds")
            label = size + (" (hint)" if size == "A" else "")
            print(f"{m.id:<17} {label:<8} {d:10.2f} {s:10.2f} {d / s:6.2f} "
                  f"{_launches(dyn, feed):5d}/{_launches(static, feed):<5d}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
