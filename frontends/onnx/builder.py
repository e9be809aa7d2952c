"""The builder ONNX converters emit IR through.

A converter sees each ONNX value as a `Tensor`: either a constant known at import (`.array`) or an IR
value (`.value`). `Builder.op` infers the result types from the op registry and, when every operand is a
constant, evaluates the op with its registry reference instead of emitting it. That is how the int64
shape subgraphs exporters write (Shape -> Gather -> Unsqueeze -> Concat -> Reshape) fold away at import:
the graph that reaches tessel-opt holds only real compute. Constants become `const` ops only when a
runtime op uses them: splats and small tensors inline, larger ones as resources named after the ONNX
initializer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...ir.attributes import LITERAL_LIMIT, DenseAttr, ResourceAttr, is_splat_array
from ...ir.core import Block, Module, Op, Value
from ...ir.ops.registry import OpError, get_op
from ...ir.symbolic import Sym
from ...ir.types import TensorType, element_type_of
from . import fold_sizes

FOLD_LIMIT = 1 << 22
"""Largest non-splat result (elements) folded at import; bigger constant work is left to run time."""


class ConversionError(Exception):
    """A node cannot be converted; the importer adds the node's name and type."""


class Tensor:
    """One ONNX value during import: a known constant, or an IR value."""

    __slots__ = ("type", "array", "value", "name")

    def __init__(self, type: TensorType, array: np.ndarray | None = None, value: Value | None = None,
                 name: str | None = None):
        self.type = type
        self.array = array
        self.value = value
        self.name = name

    @property
    def is_const(self) -> bool:
        return self.array is not None

    @property
    def shape(self) -> tuple[Any, ...]:
        """The dims: ints, symbolic dims (`Sym`, which compute like ints) and None for an anonymous one."""
        return self.type.shape

    @property
    def is_symbolic(self) -> bool:
        """A constant whose items are sizes, some of them symbolic (a numpy object array)."""
        return self.array is not None and self.array.dtype == object

    @property
    def rank(self) -> int:
        return self.type.rank

    @property
    def dtype(self) -> str:
        return self.type.dtype

    def const(self, what: str = "this input") -> np.ndarray:
        """The constant's array; a ConversionError when it is only known at run time."""
        if self.array is None:
            raise ConversionError(f"{what} must be a constant (computed from initializers and shapes), "
                                  "but it depends on the model's inputs")
        return self.array

    def ints(self, what: str = "this input") -> list[Any]:
        """The constant's items as ints, or symbolic dims where they are sizes known only by name."""
        return [v if isinstance(v, Sym) else int(v) for v in np.asarray(self.const(what)).reshape(-1)]

    def floats(self, what: str = "this input") -> list[float]:
        return [float(v) for v in np.asarray(self.const(what)).reshape(-1)]

    def __repr__(self) -> str:
        return f"<Tensor {self.name or ''} {self.type}{' const' if self.is_const else ''}>"



class Builder:
    def __init__(self, module: Module, block: Block, opset: int):
        self.module = module
        self.block = block
        self.opset = opset
        self.loc: tuple[str, ...] = ()
        self.node_name = ""
        self.outputs: tuple[str, ...] = ()  # the current node's output names, "" for an omitted optional one
        self._materialized: dict[int, Value] = {}
        self._keep: list[Tensor] = []  # keeps materialized tensors alive so their ids stay unique

    @property
    def n_outputs(self) -> int:
        """The current node's output count (Split without sizes divides by it)."""
        return len(self.outputs) or 1

    # constants -------------------------------------------------------------------------------------
    def const(self, array: Any, dtype: str | None = None, name: str | None = None) -> Tensor:
        """A constant Tensor (emitted as a `const` op only if a runtime op uses it)."""
        arr = np.asarray(array)
        if arr.dtype == object:  # sizes: ints and symbolic dims
            arr = fold_sizes.normalize(arr)
            if arr.dtype == object:
                return Tensor(TensorType(tuple(int(d) for d in arr.shape), dtype or "i64"), arr, name=name)
        if dtype is not None:
            arr = arr.astype(TensorType((), dtype).np_dtype, copy=False)
        try:
            t = TensorType(tuple(int(d) for d in arr.shape), element_type_of(arr.dtype))
        except ValueError as e:
            raise ConversionError(str(e)) from None
        return Tensor(t, arr, name=name)

    def value(self, t: Tensor) -> Value:
        """The IR value of `t`, emitting its `const` op on first use."""
        if t.value is not None:
            return t.value
        key = id(t)
        v = self._materialized.get(key)
        if v is not None:
            return v
        arr = t.const()
        if arr.dtype == object:  # symbolic sizes: a `dims` op, a constant once the func is specialized
            values = [v if isinstance(v, Sym) else int(v) for v in arr.reshape(-1)]
            op = Op("dims", [], [t.type], {"values": values, "shape": list(t.type.dims), "dtype": t.dtype},
                    loc=self.loc, result_names=[t.name])
            self.block.append(op)
            self._materialized[id(t)] = op.results[0]
            self._keep.append(t)
            return op.results[0]
        attr: DenseAttr | ResourceAttr
        if is_splat_array(arr) or arr.size <= LITERAL_LIMIT:
            attr = DenseAttr(t.type, arr) if arr.size <= LITERAL_LIMIT else DenseAttr.splat(
                arr.reshape(-1)[0], t.type)
        else:
            name = t.name or f"{self.node_name or 'const'}.{hashlib.sha256(arr.tobytes()).hexdigest()[:8]}"
            data = arr if arr.dtype.byteorder != ">" else arr.astype(arr.dtype.newbyteorder("<"))
            name = self.module.resources.add(name, np.ascontiguousarray(data).reshape(-1).view(np.uint8).data)
            attr = ResourceAttr(name, t.type)
        op = Op("const", [], [t.type], {"value": attr}, loc=self.loc if not t.name else (t.name,),
                result_names=[t.name])
        self.block.append(op)
        v = op.results[0]
        self._materialized[key] = v
        self._keep.append(t)
        return v

    # ops -------------------------------------------------------------------------------------------
    def op(self, name: str, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None) -> Tensor:
        """Apply a single-result op."""
        outs = self.ops(name, inputs, attrs)
        if len(outs) != 1:
            raise ConversionError(f"'{name}' gives {len(outs)} results, expected one")
        return outs[0]

    def ops(self, name: str, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None) -> list[Tensor]:
        """Apply an op: fold it when every operand is a constant, else emit it."""
        opdef = get_op(name)
        assert opdef is not None, f"no op '{name}' in the registry"
        attrs = {k: v for k, v in (attrs or {}).items() if v is not None}
        sig = opdef.sig([t.type for t in inputs], attrs)
        try:
            types = opdef.infer_verified(sig)
        except OpError as e:
            raise ConversionError(f"'{name}' {e}") from None
        # a dequantize of constants stays: fold-qdq turns it and its consumer into integer arithmetic
        # (fold-constants folds the rest)
        if all(t.is_const for t in inputs) and any(t.is_symbolic for t in inputs) and opdef.has("pure") and \
                all(t.is_static for t in types):
            try:
                folded = fold_sizes.fold(opdef, sig, [t.array for t in inputs])  # type: ignore[misc]
            except fold_sizes.NotFoldable:
                pass
            else:
                return [Tensor(rt, o if o.dtype == object
                               else o.astype(rt.np_dtype, copy=False).reshape(rt.dims))
                        for o, rt in zip(folded, types, strict=True)]
        elif all(t.is_const for t in inputs) and opdef.has("pure") and name != "dequantize" and \
                self._foldable(inputs, types):
            with np.errstate(all="ignore"):
                out = opdef.reference(sig, *[t.array for t in inputs])
            outs = list(out) if isinstance(out, list | tuple) else [out]
            return [Tensor(rt, np.asarray(o).astype(rt.np_dtype, copy=False).reshape(rt.dims))
                    for o, rt in zip(outs, types, strict=True)]
        op = Op(name, [self.value(t) for t in inputs], types, attrs, loc=self.loc)
        self.block.append(op)
        return [Tensor(rt, value=r) for rt, r in zip(types, op.results, strict=True)]

    def _foldable(self, inputs: Sequence[Tensor], types: list[TensorType]) -> bool:
        if not all(t.is_static for t in types):
            return False
        n_out = sum(t.numel for t in types)
        if n_out <= FOLD_LIMIT:
            return True
        return all(t.dtype in ("i64", "i32", "i1") for t in types)

    # helpers converters share ------------------------------------------------------------------
    def cast(self, t: Tensor, dtype: str) -> Tensor:
        return t if t.dtype == dtype else self.op("cast", [t], {"to": dtype})

    def reshape(self, t: Tensor, shape: Sequence[Any]) -> Tensor:
        shape = [d if isinstance(d, Sym) else int(d) for d in shape]
        return t if list(t.shape) == shape else self.op("reshape", [t], {"shape": shape})
