"""The IR data structures: Module, Func, Region, Block, Op and Value, with use-lists.

One structure serves every level (graph, kernel, target); the level shows in the op names. An op's
meaning lives in the op registry (tessel.ir.ops); this module only knows structure.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .attributes import Attr
from .resources import ResourceTable
from .types import TensorType

Loc = tuple[str, ...]
"""A location: () is unknown, ("onnx:Conv_0",) a name, more than one name a fused location."""


def fuse_locs(*locs: Loc) -> Loc:
    """The fused location of several ops, names in first-seen order without repeats."""
    seen: dict[str, None] = {}
    for loc in locs:
        for name in loc:
            seen.setdefault(name, None)
    return tuple(seen)


@dataclass(frozen=True, slots=True)
class SourcePos:
    """Where in a text something was parsed from (for diagnostics; never printed)."""

    file: str
    line: int
    col: int


class Value:
    """An SSA value: an op result or a block argument."""

    __slots__ = ("type", "name", "owner", "index", "uses")

    def __init__(self, type: TensorType, owner: Op | Block | None, index: int, name: str | None = None):
        self.type = type
        self.name = name  # a hint; the printer makes names unique
        self.owner = owner
        self.index = index
        self.uses: list[tuple[Op, int]] = []

    @property
    def op(self) -> Op | None:
        """The defining op, or None for a block argument."""
        return self.owner if isinstance(self.owner, Op) else None

    @property
    def users(self) -> list[Op]:
        out: dict[int, Op] = {}
        for op, _ in self.uses:
            out.setdefault(id(op), op)
        return list(out.values())

    def replace_all_uses_with(self, new: Value) -> None:
        for op, i in list(self.uses):
            op.set_operand(i, new)

    def __repr__(self) -> str:
        return f"<Value %{self.name} : {self.type}>"


class Op:
    """An operation: name, operands, results, attributes, optional regions and a location."""

    __slots__ = ("name", "_operands", "results", "attrs", "regions", "loc", "parent", "pos")

    def __init__(
        self,
        name: str,
        operands: Iterable[Value] = (),
        result_types: Iterable[TensorType] = (),
        attrs: dict[str, Attr] | None = None,
        regions: Iterable[Region] = (),
        loc: Loc = (),
        result_names: Iterable[str | None] | None = None,
        pos: SourcePos | None = None,
    ):
        self.name = name
        self._operands: list[Value] = []
        names = list(result_names) if result_names is not None else []
        self.results = [
            Value(t, self, i, names[i] if i < len(names) else None) for i, t in enumerate(result_types)
        ]
        self.attrs: dict[str, Attr] = dict(attrs or {})
        self.regions: list[Region] = []
        for r in regions:
            self.add_region(r)
        self.loc: Loc = tuple(loc)
        self.parent: Block | None = None
        self.pos = pos
        self.set_operands(operands)

    # operands ---------------------------------------------------------------------------------------
    @property
    def operands(self) -> tuple[Value, ...]:
        return tuple(self._operands)

    def set_operand(self, i: int, value: Value) -> None:
        old = self._operands[i]
        old.uses.remove((self, i))
        self._operands[i] = value
        value.uses.append((self, i))

    def set_operands(self, values: Iterable[Value]) -> None:
        for i, v in enumerate(self._operands):
            v.uses.remove((self, i))
        self._operands = list(values)
        for i, v in enumerate(self._operands):
            v.uses.append((self, i))

    def drop_operands(self) -> None:
        self.set_operands(())

    # results ----------------------------------------------------------------------------------------
    @property
    def result(self) -> Value:
        if len(self.results) != 1:
            raise ValueError(f"'{self.name}' has {len(self.results)} results, not one")
        return self.results[0]

    @property
    def result_types(self) -> list[TensorType]:
        return [r.type for r in self.results]

    @property
    def operand_types(self) -> list[TensorType]:
        return [v.type for v in self._operands]

    def add_region(self, region: Region) -> None:
        region.parent = self
        self.regions.append(region)

    # structure --------------------------------------------------------------------------------------
    def walk(self) -> Iterator[Op]:
        """This op, then every op nested in its regions, in order."""
        yield self
        for r in self.regions:
            for b in r.blocks:
                for op in list(b.ops):
                    yield from op.walk()

    def erase(self) -> None:
        """Remove this op (its results must be unused) and drop its operand uses."""
        for r in self.results:
            if r.uses:
                raise ValueError(f"erasing '{self.name}' whose result %{r.name} still has uses")
        for op in list(self.walk())[::-1]:
            op.drop_operands()
        if self.parent is not None:
            self.parent.remove(self)

    @property
    def func(self) -> Func | None:
        b = self.parent
        while b is not None:
            owner = b.parent.parent if b.parent is not None else None
            if isinstance(owner, Func):
                return owner
            b = owner.parent if isinstance(owner, Op) else None
        return None

    def __repr__(self) -> str:
        return f"<Op {self.name} {self.loc}>"


class Block:
    """A list of ops with block arguments. Func bodies and kernel regions hold one block each."""

    __slots__ = ("args", "ops", "parent")

    def __init__(self, arg_types: Iterable[TensorType] = (), arg_names: Iterable[str | None] | None = None):
        names = list(arg_names) if arg_names is not None else []
        self.args = [Value(t, self, i, names[i] if i < len(names) else None) for i, t in enumerate(arg_types)]
        self.ops: list[Op] = []
        self.parent: Region | None = None

    def append(self, op: Op) -> Op:
        op.parent = self
        self.ops.append(op)
        return op

    def insert_before(self, anchor: Op, op: Op) -> Op:
        op.parent = self
        self.ops.insert(self.ops.index(anchor), op)
        return op

    def insert_after(self, anchor: Op, op: Op) -> Op:
        op.parent = self
        self.ops.insert(self.ops.index(anchor) + 1, op)
        return op

    def remove(self, op: Op) -> None:
        self.ops.remove(op)
        op.parent = None

    @property
    def terminator(self) -> Op | None:
        return self.ops[-1] if self.ops else None


class Region:
    """A list of blocks owned by an op or a func."""

    __slots__ = ("blocks", "parent")

    def __init__(self, blocks: Iterable[Block] = ()):
        self.blocks: list[Block] = []
        self.parent: Op | Func | None = None
        for b in blocks:
            self.add_block(b)

    def add_block(self, block: Block) -> Block:
        block.parent = self
        self.blocks.append(block)
        return block

    @property
    def block(self) -> Block:
        return self.blocks[0]


@dataclass(eq=False)
class Func:
    """`func @name(%arg: type {attrs}, ...) -> (types) attributes {...} { body }`."""

    name: str
    body: Region
    result_types: list[TensorType]
    arg_attrs: list[dict[str, Attr]] = field(default_factory=list)
    result_attrs: list[dict[str, Attr]] = field(default_factory=list)
    attrs: dict[str, Attr] = field(default_factory=dict)
    pos: SourcePos | None = None

    def __post_init__(self) -> None:
        self.body.parent = self
        n = len(self.block.args)
        self.arg_attrs = (list(self.arg_attrs) + [{} for _ in range(n)])[:n]
        m = len(self.result_types)
        self.result_attrs = (list(self.result_attrs) + [{} for _ in range(m)])[:m]

    @staticmethod
    def new(
        name: str, arg_types: list[TensorType], arg_names: list[str], result_types: list[TensorType]
    ) -> Func:
        return Func(name, Region([Block(arg_types, arg_names)]), list(result_types))

    @property
    def block(self) -> Block:
        return self.body.blocks[0]

    @property
    def args(self) -> list[Value]:
        return self.block.args

    @property
    def return_op(self) -> Op | None:
        t = self.block.terminator
        return t if t is not None and t.name == "return" else None

    def walk(self) -> Iterator[Op]:
        for op in list(self.block.ops):
            yield from op.walk()


@dataclass(eq=False)
class Module:
    """The top level: funcs, module attributes and the resources (weights) they reference."""

    name: str | None = None
    funcs: list[Func] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    resources: ResourceTable = field(default_factory=ResourceTable)
    notes: list[str] = field(default_factory=list)
    """What a tool should tell its user about the module and is not IR (the importer's hints); never
    printed."""

    def walk(self) -> Iterator[Op]:
        for f in self.funcs:
            yield from f.walk()

    def func(self, name: str) -> Func | None:
        for f in self.funcs:
            if f.name == name:
                return f
        return None
