"""pack/unpack: the layouts they make, and unpack(pack(x)) == x for any tiling."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tessel.ir.ops.layout import pack_array, unpack_array
from tessel.ir.ops.registry import get_op
from tessel.ir.types import TensorType


def _infer(name: str, shape: tuple[int, ...], attrs: dict) -> TensorType:
    opdef = get_op(name)
    assert opdef is not None
    return opdef.infer(opdef.sig([TensorType(shape, "f32")], attrs))[0]


def test_nchw_to_nchw16c() -> None:
    x = np.arange(2 * 20 * 3 * 3, dtype=np.float32).reshape(2, 20, 3, 3)
    y = pack_array(x, [1], [16], [])
    assert y.shape == (2, 2, 3, 3, 16)
    assert y[1, 0, 2, 1, 5] == x[1, 5, 2, 1]
    assert y[0, 1, 0, 0, 3] == x[0, 19, 0, 0]
    assert (y[:, 1, :, :, 4:] == 0).all(), "the channel tail is padded with zeros"
    assert _infer("pack", (2, 20, 3, 3), {"inner_dims_pos": [1], "inner_tiles": [16]}).dims == (
        2,
        2,
        3,
        3,
        16,
    )


def test_gemm_b_panels() -> None:
    b = np.arange(5 * 40, dtype=np.float32).reshape(5, 40)
    p = pack_array(b, [1], [16], [1, 0])
    assert p.shape == (3, 5, 16)
    assert p[2, 4, 7] == b[4, 39]
    attrs = {"inner_dims_pos": [1], "inner_tiles": [16], "outer_dims_perm": [1, 0]}
    assert _infer("pack", (5, 40), attrs).dims == (3, 5, 16)
    assert _infer("unpack", (3, 5, 16), {**attrs, "shape": [5, 40]}).dims == (5, 40)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_unpack_inverts_pack(data: st.DataObject) -> None:
    rank = data.draw(st.integers(1, 4))
    shape = tuple(data.draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank)))
    dims = data.draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank))
    tiles = data.draw(st.lists(st.integers(1, 5), min_size=len(dims), max_size=len(dims)))
    perm = data.draw(st.one_of(st.just([]), st.permutations(list(range(rank)))))
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    y = pack_array(x, dims, tiles, list(perm))
    attrs = {"inner_dims_pos": dims, "inner_tiles": tiles, "outer_dims_perm": list(perm)}
    assert y.shape == _infer("pack", shape, attrs).dims
    np.testing.assert_array_equal(unpack_array(y, list(shape), dims, tiles, list(perm)), x)
