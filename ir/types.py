"""Tensor types: `tensor<1x3x224x224xf32>`, rank-0 `tensor<f32>`, `?` for a dynamic dim."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .symbolic import Sym, format_dim, symbols_of

# element type -> the numpy dtype's name; the types after f64 that numpy lacks come from ml_dtypes
_NUMPY_NAMES = {
    "f32": "float32", "f16": "float16", "bf16": "bfloat16", "f64": "float64",
    "f8E4M3FN": "float8_e4m3fn", "f8E4M3FNUZ": "float8_e4m3fnuz", "f8E5M2": "float8_e5m2",
    "f8E5M2FNUZ": "float8_e5m2fnuz", "f8E8M0FNU": "float8_e8m0fnu", "f4E2M1FN": "float4_e2m1fn",
    "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "i4": "int4", "i2": "int2",
    "ui64": "uint64", "ui32": "uint32", "ui16": "uint16", "ui8": "uint8", "ui4": "uint4", "ui2": "uint2",
    "i1": "bool",
}
_ML_DTYPES = frozenset({"bf16", "f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ", "f8E8M0FNU", "f4E2M1FN",
                        "i4", "i2", "ui4", "ui2"})
_BY_NUMPY_NAME = {v: k for k, v in _NUMPY_NAMES.items()}

FLOAT_TYPES = frozenset({"f32", "f16", "bf16", "f64", "f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ",
                         "f8E8M0FNU", "f4E2M1FN"})
INT_TYPES = frozenset({"i64", "i32", "i16", "i8", "i4", "i2", "ui64", "ui32", "ui16", "ui8", "ui4", "ui2"})
UNSIGNED_TYPES = frozenset({"ui64", "ui32", "ui16", "ui8", "ui4", "ui2"})
NATIVE_INT_TYPES = frozenset({"i64", "i32", "i16", "i8", "ui64", "ui32", "ui16", "ui8"})
"""The integer types numpy computes in (no sub-byte ones): what the bitwise ops take."""
NARROW_FLOAT_TYPES = frozenset(FLOAT_TYPES - {"f32", "f16", "f64"})
"""Float types numpy has no math for (ml_dtypes' bf16, float8, float4): references compute in f32."""
SUB_BYTE_BITS = {"i4": 4, "ui4": 4, "i2": 2, "ui2": 2, "f4E2M1FN": 4}
"""Types narrower than a byte, and their width; in memory each element still takes one byte (low bits)."""

NARROW_FLOAT_MAX = {"bf16": 3.3895313892515355e38, "f8E4M3FN": 448.0, "f8E4M3FNUZ": 240.0, "f8E5M2": 57344.0,
                    "f8E5M2FNUZ": 57344.0, "f8E8M0FNU": 2.0**127, "f4E2M1FN": 6.0}
"""The largest finite value of each ml_dtypes float type (known without importing ml_dtypes)."""

_ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i64": 8, "i32": 4, "i16": 2, "ui64": 8, "ui32": 4,
             "ui16": 2}  # every other type: one byte per element


def int_range(dtype: str) -> tuple[int, int]:
    """The smallest and largest value of an integer element type (i1 included)."""
    if dtype == "i1":
        return 0, 1
    bits = SUB_BYTE_BITS.get(dtype) or 8 * _ITEMSIZE.get(dtype, 1)
    if dtype in UNSIGNED_TYPES:
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def float_max(dtype: str) -> float:
    """The largest finite value of a float element type."""
    return NARROW_FLOAT_MAX.get(dtype) or float(np.finfo(_NUMPY_NAMES[dtype]).max)


# what the references compute a narrow type in: numpy has little or no math for ml_dtypes' types
_WIDE_NAMES = {"bfloat16": np.float32, "float8_e4m3fn": np.float32, "float8_e4m3fnuz": np.float32,
               "float8_e5m2": np.float32, "float8_e5m2fnuz": np.float32, "float8_e8m0fnu": np.float32,
               "float4_e2m1fn": np.float32, "int4": np.int8, "int2": np.int8, "uint4": np.uint8,
               "uint2": np.uint8}


def widen(x: np.ndarray) -> np.ndarray:
    """`x` as an array numpy computes with: ml_dtypes floats as f32, sub-byte integers as (u)int8
    (exact in both cases); any other array unchanged."""
    wide = _WIDE_NAMES.get(x.dtype.name)
    return x if wide is None else x.astype(wide)


class _ElementTypes(Mapping[str, np.dtype]):
    """Element type name -> numpy dtype. The types numpy lacks (bf16, the float8 and float4 variants,
    the 4- and 2-bit integers) come from ml_dtypes (an onnx dependency), imported only when one is first
    asked for: it costs most of a second, and most runs never see such a type."""

    _names = tuple(_NUMPY_NAMES)

    def __init__(self) -> None:
        self._dtypes: dict[str, np.dtype] = {
            k: np.dtype(v) for k, v in _NUMPY_NAMES.items() if k not in _ML_DTYPES
        }

    def __getitem__(self, name: str) -> np.dtype:
        if name in _ML_DTYPES and name not in self._dtypes:
            import ml_dtypes

            self._dtypes[name] = np.dtype(getattr(ml_dtypes, _NUMPY_NAMES[name]))
        return self._dtypes[name]

    def __contains__(self, name: object) -> bool:
        return name in _NUMPY_NAMES

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


ELEMENT_TYPES = _ElementTypes()


def element_type_of(dtype: np.dtype) -> str:
    """The tessel element type name of a numpy dtype (raises ValueError when there is none)."""
    dtype = np.dtype(dtype)
    name = _BY_NUMPY_NAME.get(dtype.name)
    if name is None or ELEMENT_TYPES[name] != dtype:
        raise ValueError(f"numpy dtype {dtype} has no tessel element type")
    return name


class DynamicDimError(ValueError):
    """A static size asked of a type with a dynamic dim (`dims`, `numel`, `nbytes`): what needs static sizes
    does not apply to it (a rewrite pattern that raises it simply does not match)."""


@dataclass(frozen=True, slots=True)
class TensorType:
    """A ranked tensor type. `shape` holds ints, symbolic dims (`Sym`, printed `[expr]`: a size named by a
    symbol, or computed from named sizes), or None for an anonymous dynamic dim printed as `?`."""

    shape: tuple[Any, ...]
    dtype: str

    def __post_init__(self) -> None:
        if self.dtype not in ELEMENT_TYPES:
            raise ValueError(f"unknown element type '{self.dtype}'")
        if not all(type(d) is int or d is None or type(d) is Sym for d in self.shape):
            object.__setattr__(self, "shape", tuple(
                d if d is None or isinstance(d, Sym) else int(d) for d in self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(type(d) is int for d in self.shape)

    @property
    def symbols(self) -> set[str]:
        """The names of the symbols its dims use."""
        return symbols_of(self.shape)

    @property
    def dims(self) -> tuple[int, ...]:
        """The shape of a static type (raises ValueError on a dynamic dim)."""
        if not self.is_static:
            raise DynamicDimError(f"{self} has a dynamic dim")
        return self.shape  # type: ignore[return-value]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            if type(d) is not int:
                raise DynamicDimError(f"{self} has a dynamic dim")
            n *= d
        return n

    @property
    def np_dtype(self) -> np.dtype:
        return ELEMENT_TYPES[self.dtype]

    @property
    def itemsize(self) -> int:
        """Bytes per element in memory: one for i1 and the sub-byte types (as numpy and ml_dtypes hold
        them)."""
        return _ITEMSIZE.get(self.dtype, 1)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_TYPES

    def with_shape(self, shape: tuple[Any, ...] | list[Any]) -> TensorType:
        return TensorType(tuple(shape), self.dtype)

    def with_dtype(self, dtype: str) -> TensorType:
        return TensorType(self.shape, dtype)

    def __str__(self) -> str:
        dims = "".join(format_dim(d) + "x" for d in self.shape)
        return f"tensor<{dims}{self.dtype}>"

    __repr__ = __str__

    @staticmethod
    def of(array: np.ndarray) -> TensorType:
        return TensorType(tuple(int(d) for d in array.shape), element_type_of(array.dtype))
