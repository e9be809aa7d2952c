"""Attribute values and their textual form.

Plain Python values stand for the simple attributes: `int`, `float` (printed so it parses back to the same
bits), `bool`, `str`, `list` (an array), `dict` (printed with sorted keys). `TensorType` is a type
attribute. Tensors are `DenseAttr` (small literals, splats, hex blobs) or `ResourceAttr` (a named blob in
the module's resources section).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from .symbolic import Sym
from .types import FLOAT_TYPES, TensorType

Attr = Union[int, float, bool, str, list, dict, TensorType, "DenseAttr", "ResourceAttr"]

BARE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.$\-]*\Z")
LITERAL_LIMIT = 32  # dense tensors with more elements print as a hex blob


def format_float(x: float) -> str:
    """A Python float in the shortest form that parses back to the same bits."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(float(x))


def format_element(x: Any, dtype: str) -> str:
    """One dense element: f16 and f32 in the shortest form of their own precision; bf16, float8 and
    float4 through f32 (exact, as every value they hold is an f32); integers as integers."""
    if dtype == "i1":
        return "true" if bool(x) else "false"
    if dtype in FLOAT_TYPES and dtype != "f64":
        v = np.float16(x) if dtype == "f16" else np.float32(x)
        if np.isnan(v):
            return "nan"
        if np.isinf(v):
            return "inf" if v > 0 else "-inf"
        s = str(v)
        return s if ("." in s or "e" in s) else s + ".0"
    if dtype == "f64":
        return format_float(float(x))
    return str(int(x))


def quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


_LONG_OK = re.compile(r"[^\x00-\x08\x0b-\x1f\x7f]*")


def is_long_string(s: str) -> bool:
    """Multi-line text (an OpenCL program: lines ending in newlines, no quote or backslash) prints raw
    between triple quotes, so it stays readable; other strings keep their escapes."""
    return (s.endswith("\n") and s.count("\n") > 1 and '"' not in s and "\\" not in s
            and _LONG_OK.fullmatch(s) is not None)


def long_quote(s: str) -> str:
    return '"""' + s + '"""'


def format_name(s: str) -> str:
    return s if BARE_NAME.match(s) else quote(s)


def is_splat_array(a: np.ndarray) -> bool:
    """Every element has the same bits (so -0.0 and 0.0 differ, and a NaN splat is a splat)."""
    if a.size <= 1 or (a.strides and all(s == 0 for s in a.strides)):
        return True
    flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(a.size, -1)
    probe = flat[[a.size // 2, a.size - 1]]  # most weights differ at once: no full pass over 100s of MB
    if not (probe == flat[0]).all():
        return False
    return bool((flat == flat[0]).all())


@dataclass(eq=False, slots=True)
class DenseAttr:
    """A tensor literal. Splats print as `dense<0.5> : tensor<...>`, small tensors as nested lists,
    larger ones as `dense<"0x...">` (raw little-endian bytes)."""

    type: TensorType
    data: np.ndarray
    _key: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        want = self.type.np_dtype
        arr = np.asarray(self.data)
        if arr.dtype != want:
            arr = arr.astype(want)
        if arr.shape != self.type.shape:
            if arr.size == 1:
                arr = np.broadcast_to(arr.reshape(()), self.type.dims)
            else:
                raise ValueError(f"dense literal of shape {arr.shape} does not match {self.type}")
        self.data = arr

    @staticmethod
    def splat(value: Any, type: TensorType) -> DenseAttr:
        return DenseAttr(type, np.broadcast_to(np.asarray(value, dtype=type.np_dtype), type.dims))

    @staticmethod
    def of(array: np.ndarray) -> DenseAttr:
        array = np.asarray(array)
        return DenseAttr(TensorType.of(array), array)

    @property
    def is_splat(self) -> bool:
        return is_splat_array(self.data)

    def splat_value(self) -> Any:
        return self.data.reshape(-1)[0] if self.data.size else None

    def key(self) -> bytes:
        if self._key is None:
            h = hashlib.sha256(str(self.type).encode())
            h.update(np.ascontiguousarray(self.data).tobytes())
            self._key = h.digest()
        return self._key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DenseAttr) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def array(self) -> np.ndarray:
        return self.data

    def body(self) -> str:
        dt = self.type.dtype
        if self.data.size == 0:
            # no elements: `[]` says the shape only at rank 1; otherwise an empty blob
            return "[]" if self.data.ndim == 1 else '"0x"'
        if self.is_splat:
            return format_element(self.splat_value(), dt)
        if self.data.size > LITERAL_LIMIT:
            return '"0x' + np.ascontiguousarray(self.data).astype(self.data.dtype.newbyteorder("<")) \
                .tobytes().hex().upper() + '"'

        def rec(a: np.ndarray) -> str:
            if a.ndim == 1:
                return "[" + ", ".join(format_element(x, dt) for x in a) + "]"
            return "[" + ", ".join(rec(x) for x in a) + "]"

        return rec(self.data)

    def __str__(self) -> str:
        return f"dense<{self.body()}> : {self.type}"


@dataclass(frozen=True, slots=True)
class ResourceAttr:
    """`dense_resource<name> : tensor<...>`: a tensor whose bytes live in the module's resources."""

    name: str
    type: TensorType

    def __str__(self) -> str:
        return f"dense_resource<{format_name(self.name)}> : {self.type}"


def format_attr(value: Attr) -> str:
    """The textual form of an attribute value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return long_quote(value) if is_long_string(value) else quote(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    if isinstance(value, dict):
        return format_attr_dict(value)
    if isinstance(value, TensorType | DenseAttr | ResourceAttr):
        return str(value)
    if isinstance(value, Sym):
        return f"[{value}]"
    raise TypeError(f"cannot print attribute of type {type(value).__name__}")


def format_attr_dict(attrs: dict[str, Attr]) -> str:
    return "{" + ", ".join(f"{format_name(k)} = {format_attr(attrs[k])}" for k in sorted(attrs)) + "}"


def attr_equal(a: Attr, b: Attr) -> bool:
    """Structural equality that tells 1 from 1.0 and True from 1 (Python's == does not)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list):
        return len(a) == len(b) and all(attr_equal(x, y) for x, y in zip(a, b, strict=True))  # type: ignore
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(attr_equal(a[k], b[k]) for k in a)  # type: ignore
    return a == b


def attr_key(value: Attr) -> Any:
    """A hashable key such that attr_key(a) == attr_key(b) iff attr_equal(a, b)."""
    if isinstance(value, list):
        return ("list", tuple(attr_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, attr_key(value[k])) for k in sorted(value)))
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)
