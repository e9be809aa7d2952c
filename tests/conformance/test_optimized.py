"""-O2 and -O3 against -O0 on the node test cases: every case that passes on the reference gives the same
outputs after the optimizing pipelines, within rtol 1e-3 / atol 1e-4 (issue 6); half-precision outputs
within a few of their ulps (4e-3 for f16, 3e-2 for bf16): -O2 computes f16 / bf16 in f32 between ops
(emulate-f16{intermediates=f32}) where -O0 rounds after every op. All ~1800 cases at both levels take
about a minute of one core."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from . import conformance
from .test_conformance import PASSING


def _outputs(case: Any, pipeline: str | None) -> list[list[np.ndarray]]:
    from tessel.frontends.onnx.backend import TesselBackend

    rep = TesselBackend.prepare(case.model, "CPU", target="numpy", pipeline=pipeline,
                                filename=f"{case.name}.onnx")
    return [[conformance._as_array(x) for x in rep.run([conformance._as_array(i) for i in inputs])]
            for inputs, _ in case.data_sets]


@pytest.mark.parametrize("level", [2, 3])
@pytest.mark.parametrize("name", PASSING)
def test_optimized_matches_unoptimized(name: str, level: int) -> None:
    cases = conformance.load_cases()
    if name not in cases:
        pytest.skip(f"{name} is not a node test case in this onnx version")
    case = cases[name]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        base = _outputs(case, None)
        opt = _outputs(case, f"-O{level}")
    for i, (b, o) in enumerate(zip(base, opt, strict=True)):
        dtypes = {str(np.asarray(x).dtype) for x in b}
        half = "bfloat16" in dtypes or "float16" in dtypes
        rtol, atol = ((3e-2, 1e-2) if "bfloat16" in dtypes else (4e-3, 1e-3)) if half else (1e-3, 1e-4)
        why = conformance.compare(b, o, rtol, atol)
        assert why is None, f"data set {i}: -O{level} differs from -O0: {why}"
