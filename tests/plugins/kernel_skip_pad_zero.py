"""A test-only kernel plugin that skips zeroing a padded channel block, loaded with `tessel-codegen
--load-plugin` (never registered by the package): `tessel-run --poison --check-against=numpy` must catch
it and name the conv's kernel and ONNX node.

A conv whose input channels are not a multiple of its channel block copies its input into padded
blocks first, writing zeros into the channels past the last real one (`p[..] = cin + ci < C ? x[..] :
0.0f`). This plugin writes only the real channels (`if (cin + ci < C) p[..] = x[..]`), so the padding
keeps whatever the buffer held: zeros by luck on a fresh allocation, signalling NaNs under --poison.
"""

from __future__ import annotations

import dataclasses
import re

from tessel.targets.opencl.kernels import load_all
from tessel.targets.opencl.kernels.base import TEMPLATES, Ctx, Lowered

load_all()
_original = TEMPLATES["conv2d"]
ZEROING = re.compile(r"p\[([^\]]+)\] = (inside && )?cin \+ ci < (\d+) \? (x\[[^\]]+\]) : 0\.0f;")


def skip_pad_zero(ctx: Ctx) -> Lowered:
    low = _original(ctx)

    def unzeroed(m: re.Match[str]) -> str:
        inside = "inside ? " if m.group(2) else ""
        value = f"{inside}{m.group(4)}{' : 0.0f' if inside else ''}"
        return f"if (cin + ci < {m.group(3)}) p[{m.group(1)}] = {value};"

    kernels = [dataclasses.replace(k, source=ZEROING.sub(unzeroed, k.source)) for k in low.kernels]
    return dataclasses.replace(low, kernels=kernels)


TEMPLATES["conv2d"] = skip_pad_zero
