"""Tensor types: `tensor<1x3x224x224xf32>`, rank-0 `tensor<f32>`, `?` for a dynamic dim."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np


class _ElementTypes(Mapping[str, np.dtype]):
    """Element type name -> numpy dtype. bf16 comes from ml_dtypes (an onnx dependency), imported only
    when first asked for: it costs most of a second, and most runs never see bf16."""

    _names = ("f32", "f16", "bf16", "f64", "i64", "i32", "i8", "ui8", "i1")

    def __init__(self) -> None:
        self._dtypes: dict[str, np.dtype] = {
            "f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "f64": np.dtype(np.float64),
            "i64": np.dtype(np.int64), "i32": np.dtype(np.int32), "i8": np.dtype(np.int8),
            "ui8": np.dtype(np.uint8), "i1": np.dtype(np.bool_),
        }

    def __getitem__(self, name: str) -> np.dtype:
        if name == "bf16" and name not in self._dtypes:
            import ml_dtypes

            self._dtypes["bf16"] = np.dtype(ml_dtypes.bfloat16)
        return self._dtypes[name]

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


ELEMENT_TYPES = _ElementTypes()
FLOAT_TYPES = frozenset({"f32", "f16", "bf16", "f64"})
INT_TYPES = frozenset({"i64", "i32", "i8", "ui8"})


def element_type_of(dtype: np.dtype) -> str:
    """The tessel element type name of a numpy dtype (raises ValueError when there is none)."""
    dtype = np.dtype(dtype)
    for name in ELEMENT_TYPES:
        if (name != "bf16" or dtype.name == "bfloat16") and ELEMENT_TYPES[name] == dtype:
            return name
    raise ValueError(f"numpy dtype {dtype} has no tessel element type")


@dataclass(frozen=True, slots=True)
class TensorType:
    """A ranked tensor type. `shape` holds ints, or None for a dynamic dim printed as `?`."""

    shape: tuple[int | None, ...]
    dtype: str

    def __post_init__(self) -> None:
        if self.dtype not in ELEMENT_TYPES:
            raise ValueError(f"unknown element type '{self.dtype}'")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(d is not None for d in self.shape)

    @property
    def dims(self) -> tuple[int, ...]:
        """The shape of a static type (raises ValueError on a dynamic dim)."""
        if not self.is_static:
            raise ValueError(f"{self} has a dynamic dim")
        return self.shape  # type: ignore[return-value]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            if d is None:
                raise ValueError(f"{self} has a dynamic dim")
            n *= d
        return n

    @property
    def np_dtype(self) -> np.dtype:
        return ELEMENT_TYPES[self.dtype]

    @property
    def itemsize(self) -> int:
        return 1 if self.dtype == "i1" else self.np_dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_TYPES

    def with_shape(self, shape: tuple[int | None, ...] | list[int]) -> TensorType:
        return TensorType(tuple(shape), self.dtype)

    def with_dtype(self, dtype: str) -> TensorType:
        return TensorType(self.shape, dtype)

    def __str__(self) -> str:
        dims = "".join(("?" if d is None else str(d)) + "x" for d in self.shape)
        return f"tensor<{dims}{self.dtype}>"

    __repr__ = __str__

    @staticmethod
    def of(array: np.ndarray) -> TensorType:
        return TensorType(tuple(int(d) for d in array.shape), element_type_of(array.dtype))
