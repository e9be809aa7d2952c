"""A test-only kernel plugin with an off-by-one, loaded with `tessel-codegen --load-plugin` (never
registered by the package): `--check-bounds` must catch it and name the kernel and its ONNX node.

It wraps the `max_pool2d` template: the kernel's guard `if (q >= N) return;` becomes `if (q > N)
return;`, and the launch gets one more work-item when it had none to spare, so item N runs and reads and
writes one row past the end of its buffers.
"""

from __future__ import annotations

import dataclasses
import re

from tessel.targets.opencl.kernels import load_all
from tessel.targets.opencl.kernels.base import TEMPLATES, Ctx, Lowered

load_all()
_original = TEMPLATES["max_pool2d"]
GUARD = re.compile(r"if \((\w+) >= (\d+)\) return;")


def off_by_one(ctx: Ctx) -> Lowered:
    low = _original(ctx)
    kernels = []
    for k in low.kernels:
        m = GUARD.search(k.source)
        if m is None:
            kernels.append(k)
            continue
        n = int(m.group(2))
        size = list(k.global_size)
        if size[0] <= n:  # give item n a slot (a whole work-group more where the local size is fixed)
            size[0] = n + (k.local_size[0] if k.local_size else 1)
        source = k.source[: m.start()] + f"if ({m.group(1)} > {n}) return;" + k.source[m.end():]
        kernels.append(dataclasses.replace(k, source=source, global_size=tuple(size)))
    return dataclasses.replace(low, kernels=kernels)


TEMPLATES["max_pool2d"] = off_by_one
