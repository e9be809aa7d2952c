"""IR editing the reducer needs and the IR library does not offer: a cloner that keeps a stable identity
for every op, value and func (so a reduction site named in one copy can be found in the next), dead-code
erasure that ignores purity, argument removal, and re-inference of result types after a shape change.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from ..ir.core import Block, Func, Module, Op, Region, Value
from ..ir.ops.registry import get_op
from ..ir.types import TensorType


class Ids:
    """Stable integer ids for the ops, values and funcs of one module copy, keyed by `id(obj)`.

    A copy made by `clone` maps each new object to the id of the object it copies; new objects get fresh
    ids from the shared counter. Ids are handed out in walk order, so they are the same on every run."""

    def __init__(self, counter: Iterator[int] | None = None):
        self.of: dict[int, int] = {}
        self.counter = counter if counter is not None else itertools.count()
        self._keep: list[object] = []  # keeps the objects alive so their id() is not reused

    def new(self, obj: object) -> int:
        uid = next(self.counter)
        self.of[id(obj)] = uid
        self._keep.append(obj)
        return uid

    def set(self, obj: object, uid: int) -> None:
        self.of[id(obj)] = uid
        self._keep.append(obj)

    def __call__(self, obj: object) -> int:
        uid = self.of.get(id(obj))
        return uid if uid is not None else self.new(obj)


def number(module: Module) -> Ids:
    """Ids for a freshly parsed module, in walk order."""
    ids = Ids()
    for f in module.funcs:
        ids(f)
        for a in f.args:
            ids(a)
        for op in f.walk():
            ids(op)
            for r in op.results:
                ids(r)
            for region in op.regions:
                for b in region.blocks:
                    for a in b.args:
                        ids(a)
    return ids


def clone(module: Module, ids: Ids) -> tuple[Module, Ids]:
    """A deep copy of the module's structure (attributes and resources are shared: the reducer replaces
    them, never mutates them) and the ids of the copy."""
    new_ids = Ids(ids.counter)
    out = Module(module.name, [], dict(module.attrs), module.resources)
    for f in module.funcs:
        vmap: dict[int, Value] = {}
        block = _clone_block(f.block, vmap, ids, new_ids)
        g = Func(f.name, Region([block]), list(f.result_types), [dict(a) for a in f.arg_attrs],
                 [dict(a) for a in f.result_attrs], dict(f.attrs), f.pos)
        new_ids.set(g, ids(f))
        out.funcs.append(g)
    return out, new_ids


def _clone_block(b: Block, vmap: dict[int, Value], ids: Ids, new_ids: Ids) -> Block:
    nb = Block([a.type for a in b.args], [a.name for a in b.args])
    for a, na in zip(b.args, nb.args, strict=True):
        vmap[id(a)] = na
        new_ids.set(na, ids(a))
    for op in b.ops:
        regions = [Region([_clone_block(rb, vmap, ids, new_ids) for rb in r.blocks]) for r in op.regions]
        nop = Op(op.name, [vmap[id(v)] for v in op.operands], op.result_types, dict(op.attrs), regions,
                 op.loc, [r.name for r in op.results], op.pos)
        new_ids.set(nop, ids(op))
        for r, nr in zip(op.results, nop.results, strict=True):
            vmap[id(r)] = nr
            new_ids.set(nr, ids(r))
        nb.append(nop)
    return nb


def erase_dead(module: Module) -> int:
    """Erase every non-terminator op whose results are all unused (pure or not: the reducer only keeps
    what the interestingness test needs), repeatedly. Returns how many it erased."""
    n = 0
    for f in module.funcs:
        n += _erase_dead_block(f.block)
    return n


def _erase_dead_block(block: Block) -> int:
    n = 0
    for op in reversed(list(block.ops)):  # users come after producers: one backward sweep suffices
        for r in op.regions:
            for b in r.blocks:
                n += _erase_dead_block(b)
        if op.results and all(not r.uses for r in op.results):
            op.erase()
            n += 1
    return n


def remove_args(f: Func, drop: set[int]) -> None:
    """Remove the unused arguments at the positions in `drop` from `f` (and their attributes)."""
    keep = [i for i in range(len(f.args)) if i not in drop]
    f.block.args = [f.block.args[i] for i in keep]
    f.arg_attrs = [f.arg_attrs[i] for i in keep]
    for i, a in enumerate(f.block.args):
        a.index = i


def add_arg(f: Func, type: TensorType, name: str | None) -> Value:
    v = Value(type, f.block, len(f.block.args), name)
    f.block.args.append(v)
    f.arg_attrs.append({})
    return v


def set_results(f: Func, values: list[Value], attrs: list[dict] | None = None) -> None:
    """Make `f` return `values` (its signature follows)."""
    ret = f.return_op
    assert ret is not None
    ret.set_operands(values)
    f.result_types = [v.type for v in values]
    f.result_attrs = attrs if attrs is not None else [{} for _ in values]


def reinfer(module: Module, f: Func) -> bool:
    """Recompute every result type in `f`'s body from its operands (after a shape change), region bodies
    included (a kernel's block arguments take its operands' types, its results its yield's), and the
    func's result types from its return. False when an op refuses its new operands."""
    if not _reinfer_block(module, f.block):
        return False
    ret = f.return_op
    if ret is None:
        return False
    f.result_types = list(ret.operand_types)
    return True


def _reinfer_block(module: Module, block: Block) -> bool:
    for op in block.ops:
        if op.name in ("return", "yield"):
            continue
        opdef = get_op(op.name)
        if opdef is None:
            return False
        if opdef.has("region-body"):  # isolated: arguments are the operands, results what it yields
            for region in op.regions:
                for b in region.blocks:
                    if len(b.args) != len(op.operands):
                        return False
                    for a, v in zip(b.args, op.operands, strict=True):
                        a.type = v.type
                    if not _reinfer_block(module, b):
                        return False
            body = op.regions[0].blocks[0] if op.regions and op.regions[0].blocks else None
            if body is None or not body.ops or len(body.ops[-1].operands) != len(op.results):
                return False
            for r, v in zip(op.results, body.ops[-1].operands, strict=True):
                r.type = v.type
            continue
        try:
            types = opdef.infer(opdef.sig(op.operand_types, op.attrs, [], module.resources))
        except Exception:  # an op that cannot take the new shapes: not a candidate
            return False
        if len(types) != len(op.results):
            return False
        for r, t in zip(op.results, types, strict=True):
            r.type = t
    return True
