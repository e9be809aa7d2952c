"""Packing an array as a `pack` op would (for the runtime and tests, which hold arrays, not ops)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .ops.layout import pack_array


def pack_operand(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    return pack_array(np.asarray(x), list(attrs["inner_dims_pos"]), list(attrs["inner_tiles"]),
                      list(attrs.get("outer_dims_perm", [])), attrs.get("padding_value", 0.0))
