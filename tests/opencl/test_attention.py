"""The OpenCL attention template against the op's numpy reference.

The cases cover each branch of the generated kernel once: one key chunk (the result written straight from
the accumulators) and several (running max and sum corrected between chunks, the output kept in private
memory), a tail panel of keys (Sk not a multiple of the vector width), a tail row block (Sq not a multiple
of the rows per work-item), value slices narrower than a vector, masks broadcast in every way (per key, per
query and key, along the keys, none), -inf in the mask, batch dims broadcast between q, k and v, head dims
up to 128, f64, and an empty query axis.
"""

from __future__ import annotations

import numpy as np
import pytest
from tessel.ir.types import TensorType
from tessel.targets.opencl.kernels.testing import check_op, lower_op

rng = np.random.default_rng(11)


def randn(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def key_mask(batch: int, seq: int, hidden: int) -> np.ndarray:
    """BERT's extended mask [B, 1, 1, S]: 0 for visible keys, -10000 for the last `hidden` ones."""
    m = np.zeros((batch, 1, 1, seq), np.float32)
    m[..., seq - hidden :] = -10000.0
    return m


CASES = [
    # id, q, k, v, mask, scale, schedule
    (
        "bert",
        randn(2, 4, 64, 32),
        randn(2, 4, 64, 32),
        randn(2, 4, 64, 32),
        key_mask(2, 64, 16),
        32**-0.5,
        None,
    ),
    (
        "chunks-tails",
        randn(1, 2, 37, 20),
        randn(1, 2, 45, 20),
        randn(1, 2, 45, 29),
        randn(37, 45),
        0.3,
        {"rows": 3, "chunk": 16},
    ),
    ("no-mask-shared-kv", randn(3, 4, 10, 8), randn(3, 1, 24, 8), randn(1, 1, 24, 16), None, 0.5, None),
    ("mask-along-queries", randn(2, 12, 16), randn(2, 20, 16), randn(2, 20, 16), randn(2, 12, 1), 0.25, None),
    (
        "head-dim-128",
        randn(1, 2, 200, 128),
        randn(1, 2, 200, 128),
        randn(1, 2, 200, 128),
        None,
        128**-0.5,
        None,
    ),
    ("large-scores", 8 * randn(1, 9, 33), 8 * randn(1, 70, 33), randn(1, 70, 3), None, 1.0, {"chunk": 32}),
    (
        "f64",
        randn(2, 7, 5, dtype=np.float64),
        randn(2, 19, 5, dtype=np.float64),
        randn(2, 19, 6, dtype=np.float64),
        randn(2, 1, 19, dtype=np.float64),
        0.7,
        {"chunk": 8},
    ),
    ("empty-queries", randn(1, 0, 8), randn(1, 5, 8), randn(1, 5, 4), None, 1.0, None),
]


@pytest.mark.parametrize("name,q,k,v,mask,scale,schedule", CASES, ids=[c[0] for c in CASES])
def test_attention_matches_reference(
    name: str,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None,
    scale: float,
    schedule: dict | None,
) -> None:
    inputs = [q, k, v] + ([mask] if mask is not None else [])
    tol = {"rtol": 1e-9, "atol": 1e-11} if q.dtype == np.float64 else {"rtol": 2e-5, "atol": 2e-6}
    check_op("attention", inputs, {"scale": scale}, schedule=schedule, **tol)


def test_masked_out_keys_get_no_weight() -> None:
    """A causal mask of -inf: row i attends to keys 0..i only, the first row to its own value exactly."""
    s, d = 21, 16
    q, k, v = randn(1, s, d), randn(1, s, d), randn(1, s, d)
    causal = np.triu(np.full((s, s), -np.inf, np.float32), 1)
    check_op(
        "attention",
        [q, k, v, causal],
        {"scale": 0.25},
        schedule={"rows": 4, "chunk": 16},
        rtol=2e-5,
        atol=2e-6,
    )


def test_keys_are_packed_into_panels() -> None:
    """k is packed [.., Sk, D] -> [.., ceil(Sk/P), D, P] before the launch, and the schedule is reported."""
    types = [TensorType.of(a) for a in (randn(1, 4, 50, 32), randn(1, 4, 50, 32), randn(1, 4, 50, 32))]
    _, low = lower_op("attention", types, {"scale": 1.0})
    (spec,) = low.pack.values()
    p = low.schedule["panel"]
    assert list(low.pack) == [1] and spec.inner_dims_pos == (2,) and spec.inner_tiles == (p,)
    assert low.schedule["chunk"] >= 50 and len(low.kernels) == 1
    assert "one chunk" in low.kernels[0].source
