"""Tuning on a Ray cluster (`tessel-tune --ray ADDRESS`, the optional `distributed` extra).

Each kernel is one Ray task running `tuner.tune_kernel` on a worker; the confirming whole-model run is one
more. A task asks for one unit of the custom resource `tessel-device-<fingerprint>`: a node offers one unit
per OpenCL device of that fingerprint (`ray start --resources='{"tessel-device-365a2b667efdc4e0": 1}'`;
`tessel-tune --print-fingerprint` prints it), so a task holds a whole device, and two measurements never
share one (they would spoil each other's times). The driver ranks nothing itself: it sends each task the
kernel's standalone module as text (its constants are splats, so it is small), the lowering options and
the cost model's weights, and merges the records that come back (records.merge: the same records whatever
order the tasks finish in). `--ray local` starts a one-node cluster in this process with this machine's
device as its one unit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from ....ir.parser import parse_module
from ....ir.printer import to_text
from ..records import Record, parse_records
from .cost import CostModel
from .tuner import Confirmed, Found, confirm, tune_kernel

RESOURCE = "tessel-device-{}"


def _device_by_fingerprint(fingerprint: str) -> Any:
    from .. import device as dev

    for d in dev.all_devices():
        if dev.fingerprint(d) == fingerprint:
            return d
    raise RuntimeError(f"this worker has no OpenCL device of fingerprint {fingerprint}")


def kernel_task(text: str, key: str, label: str, op: str, space_size: int, fingerprint: str,
                options: dict[str, Any], weights: dict[str, list[float]], seconds: float,
                max_points: int) -> str | None:
    """On a worker: tune one kernel (its standalone module as text); its record as a JSON line."""
    from .. import device as dev

    d = _device_by_fingerprint(fingerprint)
    found = Found(key, label, op, parse_module(text, f"<kernel {key}>"), space_size)
    rec = tune_kernel(found, d, dev.device_info(d), fingerprint, options, CostModel(dict(weights)), seconds,
                      max_points)
    return rec.line() if rec else None


def confirm_task(text: str, fingerprint: str, options: dict[str, Any], lines: Sequence[str],
                 seconds: float) -> dict[str, Any]:
    from .. import device as dev

    d = _device_by_fingerprint(fingerprint)
    records = parse_records("\n".join(lines), "<driver>")
    return asdict(confirm(text, d, dev.device_info(d), fingerprint, options, records, seconds))


class RayRunner:
    """Sends tessel-tune's measurements to a Ray cluster."""

    def __init__(self, address: str, device: Any, max_points: int):
        try:
            import ray
        except ImportError:
            raise RuntimeError("--ray needs Ray: pip install 'tessel[distributed]'") from None
        from .. import device as dev

        self.ray = ray
        self.max_points = max_points
        self.fingerprint = dev.fingerprint(device)
        self.resource = RESOURCE.format(self.fingerprint)
        if not ray.is_initialized():
            if address == "local":
                ray.init(resources={self.resource: 1}, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
            else:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
        self.devices = int(ray.cluster_resources().get(self.resource, 0))
        if self.devices < 1:
            raise RuntimeError(f"the Ray cluster at {address} offers no '{self.resource}' resource: start "
                               f"its nodes with --resources='{{\"{self.resource}\": 1}}' (a unit a device)")
        self._kernel = ray.remote(kernel_task).options(resources={self.resource: 1}, num_cpus=0,
                                                       max_retries=0)
        self._confirm = ray.remote(confirm_task).options(resources={self.resource: 1}, num_cpus=0,
                                                         max_retries=0)

    def tune_kernels(self, todo: Sequence[Found], fingerprint: str, options: dict[str, Any],
                     model: CostModel, seconds: float, say: Callable[[str, float], None]) -> list[Record]:
        """Tune `todo` (most time first) in about `seconds` on the cluster's devices of this fingerprint;
        the records back, in no particular order (the caller merges)."""
        t0 = time.perf_counter()
        ray = self.ray
        weights = dict(model.weights)
        per = max(2.0, min(12.0, seconds * self.devices / max(len(todo), 1)))
        pending: dict[Any, Found] = {}
        out: list[Record] = []
        queue = list(todo)
        done = 0
        while queue or pending:
            left = seconds - (time.perf_counter() - t0)
            while queue and len(pending) < 2 * self.devices and left > per * 0.5:
                k = queue.pop(0)
                ref = self._kernel.remote(to_text(k.module), k.key, k.label, k.op, k.space_size,
                                          fingerprint, options, weights, min(per, left), self.max_points)
                pending[ref] = k
            if not pending:
                break
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(1.0, left + per))
            if not ready:
                for ref in pending:
                    ray.cancel(ref, force=True)
                break
            for ref in ready:
                k = pending.pop(ref)
                done += 1
                line = ray.get(ref)
                if line:
                    out.extend(parse_records(line, f"<task {k.key}>"))
                say(f"kernel {done}/{len(todo)} on the cluster: {k.label[:50]}", 0.0)
        return out

    def confirm(self, text: str, fingerprint: str, options: dict[str, Any], records: Sequence[Record],
                seconds: float) -> Confirmed:
        ref = self._confirm.remote(text, fingerprint, options, [r.line() for r in records], seconds)
        return Confirmed(**self.ray.get(ref))
