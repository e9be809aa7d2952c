"""The op registry: one declarative `OpDef` per op, the single source of truth for its meaning.

An entry states the signature (operands, results, attributes with defaults and allowed values), traits,
and four functions of a `Sig` (operand types, attributes with defaults applied, result types):
- `infer(sig) -> list[TensorType]`: result types; raises `OpError` on operands it cannot accept.
- `verify(sig)`: checks beyond what infer sees (optional; infer's checks run anyway).
- `reference(sig, *arrays) -> array | list[array]`: the semantics in numpy. This is the numpy target, the
  constant folder and the oracle for translation validation.
- `cost(sig) -> Cost`: FLOPs and bytes, for fusion decisions, the traffic analysis and roofline reports.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..symbolic import Sym, format_dim
from ..types import TensorType

REQUIRED = object()

ATTR_KINDS = ("int", "dim", "float", "bool", "str", "ints", "dims", "floats", "strs", "type", "dense", "any")
"""`dim`, `dims`: like `int`, `ints`, but items may be symbolic dims (`[N * 3]`): sizes an op computes from
the func's symbols (a reshape's shape, a slice's end)."""


from ..errors import OpError  # noqa: E402,F401 - re-exported: ops and passes import it from here


def at_least(a: Any, b: Any) -> bool:
    """a >= b for dims; taken as true where symbolic dims leave it open (the func specialized to sizes
    infers every type again on ints, and checks it there)."""
    try:
        return bool(a >= b)
    except OpError:
        return True


def check(cond: Any, message: str) -> None:
    if not cond:
        raise OpError(message)


@dataclass(frozen=True)
class AttrSpec:
    kind: str
    default: Any = REQUIRED
    allowed: tuple | None = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def attr(kind: str, default: Any = REQUIRED, allowed: Sequence | None = None) -> AttrSpec:
    assert kind in ATTR_KINDS, kind
    return AttrSpec(kind, default, tuple(allowed) if allowed is not None else None)


@dataclass(frozen=True)
class Cost:
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.flops + other.flops, self.bytes_read + other.bytes_read,
                    self.bytes_written + other.bytes_written)


@dataclass
class Sig:
    """What the op functions see: operand types, attributes (defaults filled in), result types."""

    operands: list[TensorType]
    attrs: dict[str, Any]
    results: list[TensorType] = field(default_factory=list)
    resources: Any = None  # the module's ResourceTable, for `const` of a dense_resource

    def __getitem__(self, name: str) -> Any:
        return self.attrs[name]


def io_bytes(sig: Sig) -> tuple[int, int]:
    return sum(t.nbytes for t in sig.operands), sum(t.nbytes for t in sig.results)


def elementwise_cost(flops_per_element: int = 1) -> Callable[[Sig], Cost]:
    def cost(sig: Sig) -> Cost:
        r, w = io_bytes(sig)
        return Cost(flops_per_element * sum(t.numel for t in sig.results), r, w)

    return cost


def default_cost(sig: Sig) -> Cost:
    r, w = io_bytes(sig)
    return Cost(0, r, w)


@dataclass
class OpDef:
    name: str
    operands: tuple[str, ...]
    infer: Callable[[Sig], list[TensorType]]
    reference: Callable[..., Any]
    attrs: dict[str, AttrSpec] = field(default_factory=dict)
    traits: frozenset[str] = frozenset({"pure"})
    results: int | str = 1  # a count, or "*" for as many as infer returns
    verify: Callable[[Sig], None] | None = None
    cost: Callable[[Sig], Cost] = default_cost
    doc: str = ""
    regions: int = 0

    def has(self, trait: str) -> bool:
        return trait in self.traits

    def operand_range(self) -> tuple[int, int | None]:
        """(min, max) operand count; max None for variadic."""
        lo = sum(1 for o in self.operands if not o.endswith(("?", "*")))
        hi: int | None = None if any(o.endswith("*") for o in self.operands) else len(self.operands)
        return lo, hi

    def with_defaults(self, attrs: dict[str, Any]) -> dict[str, Any]:
        out = dict(attrs)
        for k, spec in self.attrs.items():
            if k not in out and not spec.required:
                out[k] = spec.default
        return out

    def infer_verified(self, sig: Sig) -> list[TensorType]:
        """The result types `infer` gives, with `sig.results` set to them and `verify` run; OpError."""
        sig.results = self.infer(sig)
        if self.verify is not None:
            self.verify(sig)
        return sig.results

    def sig(self, operand_types: list[TensorType], attrs: dict[str, Any],
            result_types: list[TensorType] | None = None, resources: Any = None) -> Sig:
        return Sig(list(operand_types), self.with_defaults(attrs), list(result_types or []), resources)


REGISTRY: dict[str, OpDef] = {}
FAMILIES = ("core", "elementwise", "compare", "linalg", "nn", "norm", "resize", "reduce", "shape", "dims",
            "tensor_extra", "misc", "signal", "layout", "winograd", "kernel", "attention", "recurrent",
            "target", "quant", "control")
_loaded = False


def register(opdef: OpDef) -> OpDef:
    if opdef.name in REGISTRY:
        raise ValueError(f"op '{opdef.name}' registered twice")
    REGISTRY[opdef.name] = opdef
    return opdef


def load_all() -> dict[str, OpDef]:
    global _loaded
    if not _loaded:
        _loaded = True
        for fam in FAMILIES:
            importlib.import_module(f"tessel.ir.ops.{fam}")
    return REGISTRY


def get_op(name: str) -> OpDef | None:
    load_all()
    return REGISTRY.get(name)


# helpers shared by the op families -------------------------------------------------------------------
def broadcast_shapes(*shapes: tuple[Any, ...]) -> tuple[Any, ...]:
    """Numpy/ONNX multidirectional broadcasting; raises OpError when the shapes don't broadcast. A symbolic
    dim against a static one (other than 1) takes the static size; symbolic dims against each other give the
    simplest of them (the model has them equal); a `?` against a symbolic dim gives `?`. Specializing to
    sizes checks what this assumes."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Any] = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        known = {d for d in dims if type(d) is int and d != 1}
        syms = {d for d in dims if isinstance(d, Sym)}
        if len(known) > 1:
            raise OpError(
                "operand shapes " + " and ".join(_fmt_shape(s) for s in shapes) + " do not broadcast"
            )
        if known:
            out.append(known.pop())
        elif syms and all(d is not None for d in dims):
            # distinct symbolic dims (an FPN's upsampled [2 * ((H + 31) / 32)] against [(H + 15) / 16]):
            # the model has them equal; the simplest names the result, and a func specialized to sizes
            # where they differ (or where one is 1) fails there, loudly
            out.append(min(syms, key=lambda d: (len(str(d)), str(d))))
        elif syms or any(d is None for d in dims):
            out.append(None)
        else:
            out.append(1)
    return tuple(out)


def may_equal(a: Any, b: Any) -> bool:
    """Dims that may be the same size: equal, or either one dynamic (`?` or symbolic: the model has them
    equal, as broadcasting assumes; a func specialized to sizes where they differ fails there)."""
    return a is None or b is None or a == b or isinstance(a, Sym) or isinstance(b, Sym)


def _fmt_shape(s: tuple[Any, ...]) -> str:
    return "[" + ",".join(format_dim(d) for d in s) + "]"


def check_element_kind(t: TensorType, float_only: bool) -> None:
    """Float-only ops take f16/bf16/f32/f64; numeric ops anything but i1."""
    if float_only:
        check(t.is_float, f"operand must be a float tensor, got {t}")
    else:
        check(t.dtype != "i1", f"operand must be numeric, got {t}")


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    check(-rank <= axis < max(rank, 1), f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def numel(shape: Sequence[int | None]) -> int:
    return math.prod(d for d in shape if d is not None)


def as_dtype(array: np.ndarray, t: TensorType) -> np.ndarray:
    return np.asarray(array).astype(t.np_dtype, copy=False)


def has_trait(name: str, trait: str) -> bool:
    """Whether op `name` is registered with `trait` (False for an unknown op)."""
    opdef = get_op(name)
    return opdef is not None and opdef.has(trait)


def op_sig(op: Any, resources: Any = None) -> Sig:
    """The Sig of an op in the IR (its types and attributes with defaults)."""
    opdef = get_op(op.name)
    if opdef is None:
        raise OpError(f"unknown op '{op.name}'")
    return opdef.sig(op.operand_types, op.attrs, op.result_types, resources)
