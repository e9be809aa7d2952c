"""The OpenCL attention template against the op's numpy reference.

The cases cover each branch of the generated kernel once: one key chunk (the result written straight from
the accumulators) and several (running max and sum corrected between chunks, the output kept in private
memory), k's panels made in local memory by the work-group (the default for one chunk) and packed before
the launch, a tail panel of keys (Sk not a multiple of the vector width), a tail row block (Sq not a
multiple of the rows per work-item), value slices narrower than a vector, masks broadcast in every way
(per key, per query and key, along the keys, none), -inf in the mask, batch dims broadcast between q, k
and v, head dims up to 128, f64, an empty query axis, and the bshd layout (q, k, v and the result [..., S,
H, D], read and written with strides) with each of those k paths.
"""

from __future__ import annotations

import numpy as np
import pytest
from tessel.ir.types import TensorType
from tessel.targets.opencl.kernels.base import NotLowerable
from tessel.targets.opencl.kernels.testing import check_op, lower_op, run_op

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
    (
        "bert-k-packed",
        randn(1, 4, 64, 32),
        randn(1, 4, 64, 32),
        randn(1, 4, 64, 32),
        None,
        0.2,
        {"k_local": 0},
    ),
    (
        "local-k-groups-tails",
        randn(2, 3, 37, 20),
        randn(2, 1, 45, 20),
        randn(2, 3, 45, 9),
        randn(37, 45),
        0.3,
        {"rows": 3, "groups": 4},
    ),
    # 88 row blocks: more than one work-group's worth, so each head gets two, each copying k
    ("long-queries-short-keys", randn(1, 700, 16), randn(1, 24, 16), randn(1, 24, 16), None, 0.5, None),
]

# layout bshd: q [..., Sq, H, D], k [..., Sk, H, D], v [..., Sk, H, Dv] -> [..., Sq, H, Dv]
BSHD_CASES = [
    # id, q, k, v, mask, scale, schedule
    ("bert", randn(2, 64, 4, 32), randn(2, 64, 4, 32), randn(2, 64, 4, 32), key_mask(2, 64, 16), 0.18, None),
    (
        "bert-k-packed",
        randn(1, 64, 4, 32),
        randn(1, 64, 4, 32),
        randn(1, 64, 4, 32),
        key_mask(1, 64, 10),
        0.18,
        {"k_local": 0},
    ),
    (
        "chunks-tails-shared-kv-head",
        randn(1, 37, 3, 20),
        randn(1, 45, 1, 20),
        randn(1, 45, 3, 29),
        randn(3, 37, 45),
        0.3,
        {"rows": 3, "chunk": 16},
    ),
    ("rank-3", randn(12, 2, 16), randn(20, 2, 16), randn(20, 2, 8), randn(2, 1, 20), 0.25, None),
]


def check_attention(q, k, v, mask, scale, schedule, layout: str = "bhsd") -> None:  # noqa: ANN001
    inputs = [q, k, v] + ([mask] if mask is not None else [])
    tol = {"rtol": 1e-9, "atol": 1e-11} if q.dtype == np.float64 else {"rtol": 2e-5, "atol": 2e-6}
    attrs = {"scale": scale, **({"layout": layout} if layout != "bhsd" else {})}
    check_op("attention", inputs, attrs, schedule=schedule, **tol)


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
    check_attention(q, k, v, mask, scale, schedule)


@pytest.mark.parametrize("name,q,k,v,mask,scale,schedule", BSHD_CASES, ids=[c[0] for c in BSHD_CASES])
def test_bshd_attention_matches_reference(
    name: str,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None,
    scale: float,
    schedule: dict | None,
) -> None:
    check_attention(q, k, v, mask, scale, schedule, layout="bshd")


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
    """One head's keys in one chunk: the work-group makes k's panels in local memory (no pack); several
    chunks (or k_local=0): k is packed [.., Sk, D] -> [.., ceil(Sk/P), D, P] before the launch."""
    types = [TensorType.of(a) for a in (randn(1, 4, 50, 32), randn(1, 4, 50, 32), randn(1, 4, 50, 32))]
    _, low = lower_op("attention", types, {"scale": 1.0})
    assert low.pack == {} and low.schedule["k_local"] == 1 and low.schedule["chunk"] >= 50
    (kern,) = low.kernels
    assert "__local" in kern.source and "barrier(" in kern.source and "one chunk" in kern.source
    # each work-group is some row blocks of one head: the local size divides the launch
    assert kern.global_size[0] % kern.local_size[0] == 0
    assert kern.global_size[0] // kern.local_size[0] == 4 * low.schedule["groups"]
    for schedule in ({"k_local": 0}, {"chunk": 16}):
        _, low = lower_op("attention", types, {"scale": 1.0}, schedule=schedule)
        (spec,) = low.pack.values()
        p = low.schedule["panel"]
        assert list(low.pack) == [1] and spec.inner_dims_pos == (2,) and spec.inner_tiles == (p,)
        assert low.schedule["k_local"] == 0 and "__local" not in low.kernels[0].source


def test_bshd_keys_pack_moves_heads_before_panels() -> None:
    """bshd k [B, Sk, H, D] packs along Sk with the outer dims permuted to [B, H, Sk/P, D]."""
    types = [TensorType((1, 300, 4, 32), "f32")] * 3
    _, low = lower_op("attention", types, {"scale": 1.0, "layout": "bshd"}, schedule={"chunk": 128})
    (spec,) = low.pack.values()
    assert spec.inner_dims_pos == (1,) and spec.outer_dims_perm == (0, 2, 1, 3)
    assert "(bshd)" in low.kernels[0].source


def test_k_local_refused_when_it_does_not_fit() -> None:
    types = [TensorType((1, 2, 700, 64), "f32")] * 3
    _, low = lower_op("attention", types, {"scale": 1.0})
    assert low.schedule["k_local"] == 0 and list(low.pack) == [1]
    with pytest.raises(NotLowerable, match="k_local=1 needs one key chunk"):
        lower_op("attention", types, {"scale": 1.0}, schedule={"k_local": 1})


@pytest.mark.parametrize(
    "schedule", [None, {"k_local": 0}, {"rows": 4, "chunk": 16}], ids=["k-local", "packed", "chunks"]
)
def test_safe_attention_zeroes_fully_masked_rows(schedule: dict | None) -> None:
    """`safe`: a query whose every key is masked with -inf gives zeros (torch's safe softmax), not NaN;
    one whose first chunk of keys is hidden and later keys visible is an ordinary row (the running max
    starts at -inf and the chunk correction must not turn it into NaN)."""
    s, d = 40, 16
    q, k, v = randn(1, 2, s, d), randn(1, 2, s, d), randn(1, 2, s, d)
    mask = np.zeros((1, 1, s, s), np.float32)
    mask[0, 0, 3] = -np.inf  # row 3 sees nothing
    mask[0, 0, 5, :20] = -np.inf  # row 5 sees only keys 20.. (past the first chunk of 16)
    mask[0, 0, s - 1] = -np.inf  # the last row too (a tail row block)
    attrs = {"scale": 0.25, "safe": True}
    check_op("attention", [q, k, v, mask], attrs, schedule=schedule, rtol=2e-5, atol=2e-6)
    (out,), _ = run_op("attention", [q, k, v, mask], attrs, schedule=schedule)
    assert np.all(out[0, :, 3] == 0) and np.all(out[0, :, s - 1] == 0) and np.isfinite(out).all()


def test_unsafe_attention_keeps_nan_rows() -> None:
    """Without `safe` a fully masked row is NaN, as softmax over all -inf is, and a row whose first chunk
    of keys is hidden is finite (it was NaN once: exp(-inf - -inf) in the first chunk)."""
    s, d = 40, 4
    q, k, v = randn(1, s, d), randn(1, s, d), randn(1, s, d)
    mask = np.zeros((s, s), np.float32)
    mask[2] = -np.inf
    mask[5, :20] = -np.inf
    schedule = {"rows": 4, "chunk": 16}
    check_op("attention", [q, k, v, mask], {"scale": 1.0}, schedule=schedule, rtol=2e-5, atol=2e-6)
    (out,), _ = run_op("attention", [q, k, v, mask], {"scale": 1.0}, schedule=schedule)
    assert np.isnan(out[0, 2]).all() and np.isfinite(out[0, 5]).all()
    _, low = lower_op("attention", [TensorType.of(a) for a in (q, k, v, mask)], {"scale": 1.0})
    assert "safe" not in low.kernels[0].source
    _, low = lower_op("attention", [TensorType.of(a) for a in (q, k, v, mask)], {"scale": 1.0, "safe": True})
    assert "safe attention" in low.kernels[0].source
