"""The reducer's strategies: each names the places (sites) where it can shrink a module and applies itself
to a chosen subset of them. The driver (reduce.py) picks the subsets delta-debugging style.

A site is a hashable key built from the stable ids of `edit.Ids`, so it names the same op, value or
attribute in every copy of the module. Applying a strategy to a site makes that site go away (except for
`shrink-shapes`, which may halve the same dim again), so each strategy runs out of sites.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar

from ..ir.attributes import DenseAttr
from ..ir.core import Block, Func, Module, Op, Value
from ..ir.ops.registry import get_op, op_sig
from ..ir.types import TensorType
from .edit import Ids, add_arg, reinfer, remove_args, set_results

Site = Hashable


@dataclass
class Work:
    """The module under reduction and the stable ids of its ops, values and funcs."""

    module: Module
    ids: Ids


class Strategy:
    NAME: ClassVar[str] = ""
    REPEATABLE: ClassVar[bool] = False  # an applied site may stay a site (and be applied again)

    def sites(self, w: Work) -> list[Site]:
        raise NotImplementedError

    def apply(self, w: Work, chosen: list[Site]) -> bool:
        """Apply to the chosen sites (in site order); False when that changes nothing."""
        raise NotImplementedError


def _body_ops(f: Func) -> list[Op]:
    """The func's top-level ops without its return."""
    return [op for op in f.block.ops if op.name != "return"]


def _computes(op: Op) -> bool:
    """An op worth replacing: not a terminator, not a constant, with a result someone uses."""
    return op.name not in ("return", "yield", "const") and any(r.uses for r in op.results)


class RemoveFuncs(Strategy):
    """Delete whole funcs (there is no call op, so nothing refers to them)."""

    NAME = "remove-funcs"

    def sites(self, w: Work) -> list[Site]:
        return [w.ids(f) for f in w.module.funcs] if len(w.module.funcs) > 1 else []

    def apply(self, w: Work, chosen: list[Site]) -> bool:
        keep = [f for f in w.module.funcs if w.ids(f) not in set(chosen)]
        if not keep or len(keep) == len(w.module.funcs):
            return False
        w.module.funcs = keep
        return True


class RemoveResults(Strategy):
    """Drop func results (the return operand and the signature's type); what only fed them dies."""

    NAME = "remove-results"

    def sites(self, w: Work) -> list[Site]:
        out: list[Site] = []
        for f in w.module.funcs:
            ret = f.return_op
            seen: dict[int, int] = {}
            for v in ret.operands if ret is not None else ():
                k = seen[id(v)] = seen.get(id(v), -1) + 1
                out.append((w.ids(f), w.ids(v), k))
        return out

    def apply(self, w: Work, chosen: list[Site]) -> bool:
        drop, changed = set(chosen), False
        for f in w.module.funcs:
            ret = f.return_op
            if ret is None:
                continue
            seen: dict[int, int] = {}
            keep = []
            for i, v in enumerate(ret.operands):
                k = seen[id(v)] = seen.get(id(v), -1) + 1
                if (w.ids(f), w.ids(v), k) not in drop:
                    keep.append(i)
            if len(keep) < len(ret.operands):
                set_results(f, [ret.operands[i] for i in keep], [f.result_attrs[i] for i in keep])
                changed = True
        return changed


class ValuesToReturn(Strategy):
    """Return an earlier op's results instead of the func's results, so everything after it dies
    (llvm-reduce's values-to-return). Of a chosen chunk, the last op is the one returned."""

    NAME = "values-to-return"

    def sites(self, w: Work) -> list[Site]:
        out: list[Site] = []
        for f in w.module.funcs:
            returned = list(f.return_op.operands) if f.return_op is not None else []
            for op in _body_ops(f):
                if op.name != "const" and op.results and list(op.results) != returned:
                    out.append(w.ids(op))
        return out

    def apply(self, w: Work, chosen: list[Site]) -> bool:
        want, changed = set(chosen), False
        for f in w.module.funcs:
            picked = [op for op in _body_ops(f) if w.ids(op) in want]
            if picked and f.return_op is not None:
                set_results(f, list(picked[-1].results))
                changed = True
        return changed


class EraseDead(Strategy):
    """Erase ops whose results nobody uses."""

    NAME = "erase-dead"

    def sites(self, w: Work) -> list[Site]:
        return [w.ids(op) for op in w.module.walk()
                if op.name not in ("return", "yield") and all(not r.uses for r in op.results)]

    def apply(self, w: Work, chosen: list[Site]) -> bool:
        want = set(chosen)
        ops = [op for op in w.module.walk() if w.ids(op) in want]
        for op in reversed(ops):
            if all(not r.uses for r in op.results):
                op.erase()
        return bool(ops)


class ReplaceWithArg(Strategy):
    """Replace an op's used results by new func arguments; the op and what only fed it die."""

    NAME = "replace-with-arg"

    def sites(self, w: Work) -> list[Site]:
        return [w.ids(op) for f in w.module.funcs for op in _body_ops(f) if _computes(op)]

    def apply(self, w: Work, chosen: list[Site]) -> bool:
        want, changed = set(chosen), False
        for f in w.module.funcs:
            for op in _body_ops(f):
                if w.ids(op) in want and _computes(op):
                    for r in op.results:
                        if r.uses:
                            r.replace_all_uses_with(add_arg(f, r.type, r.name))
                            changed = True
        return changed


class ReplaceWithOperand(Strategy):
    """Replace an op's results by one of its operands of the same type (an identity short-cut)."""

    NAME = "replace-with-operand"

    @staticmethod
    def _pairs(op: Op) -> list[tuple[Value, Value]]:
        out = []
        for r in op.results:
            same = [v for v in op.operands if v.type == r.type]
            if r.uses and same:
                out.append((r, same[0]))
        return out

    def sites(self, w: Work) -> list[Site]:
        return [w.ids(op) for op in w.module.walk() if _computes(op) and self._pairs(op)]

    def apply(self, w: Work, chosen: list[Site]) -> bool:
        want, changed = set(chosen), False
        for op in list(w.module.walk()):
            if w.ids(op) in want and _computes(op):
                for r, v in self._pairs(op):
                    r.replace_all_uses_with(v)
                    changed = True
        return changed


class ReplaceWithZero(Strategy):
    """Replace an op's results by zero splat constants of their types."""

    NAME = "replace-with-zero"

    def sites(self, w: Work) -> list[Site]:
        return [w.ids(op) for op in w.module.walk()
                if _computes(op) and all(r.type.is_static for r in op.results)]

    def apply(self, w: Work, chosen: list[Site]) -> bool:
        want, changed = set(chosen), False
        for op in list(w.module.walk()):
            if w.ids(op) not in want or not _computes(op) or op.parent is None:
                continue
            for r in op.results:
                if r.uses and r.type.is_static:
                    try:
                        value = DenseAttr.splat(0, r.type)
                    except (TypeError, ValueError, OverflowError):  # an element type without a zero
                        continue
                    zero = Op("const", (), [r.type], {"value": value})
                    op.parent.insert_before(op, zero)
                    r.replace_all_uses_with(zero.result)
                    changed = True
        return changed


class RemoveArgs(Strategy):
    """Drop func arguments nothing uses."""

    NAME = "remove-args"

    def sites(self, w: Work) -> list[Site]:
        return [w.ids(a) for f in w.module.funcs for a in f.args if not a.uses]

    def apply(self, w: Work, chosen: list[Site]) -> bool:
        want, changed = set(chosen), False
        for f in w.module.funcs:
            drop = {i for i, a in enumerate(f.args) if w.ids(a) in want and not a.uses}
            if drop:
                remove_args(f, drop)
                changed = True
        return changed


class RemoveRegionInputs(Strategy):
    """Drop operands of a region-body op (a kernel, a cl.launch) whose block argument nothing uses."""

    NAME = "remove-region-inputs"

    @staticmethod
    def _body(op: Op) -> Block | None:
        opdef = get_op(op.name)
        if opdef is None or not opdef.has("region-body") or not op.regions or not op.regions[0].blocks:
            return None
        b = op.regions[0].blocks[0]
        return b if len(b.args) == len(op.operands) else None

    def sites(self, w: Work) -> list[Site]:
        out: list[Site] = []
        for op in w.module.walk():
            b = self._body(op)
            if b is not None:
                out += [w.ids(a) for a in b.args if not a.uses]
        return out

    def apply(self, w: Work, chosen: list[Site]) -> bool:
        want, changed = set(chosen), False
        for op in list(w.module.walk()):
            b = self._body(op)
            if b is None:
                continue
            keep = [i for i, a in enumerate(b.args) if a.uses or w.ids(a) not in want]
            if len(keep) < len(b.args):
                op.set_operands([op.operands[i] for i in keep])
                b.args = [b.args[i] for i in keep]
                for i, a in enumerate(b.args):
                    a.index = i
                changed = True
        return changed


class SplatConstants(Strategy):
    """Replace a dense or resource constant by a splat of its first element (no weights to print)."""

    NAME = "splat-constants"

    def sites(self, w: Work) -> list[Site]:
        out: list[Site] = []
        for op in w.module.walk():
            v = op.attrs.get("value")
            if op.name == "const" and op.result.type.is_static and op.result.type.numel > 0 and not (
                    isinstance(v, DenseAttr) and v.is_splat):
                out.append(w.ids(op))
        return out

    def apply(self, w: Work, chosen: list[Site]) -> bool:
        want, changed = set(chosen), False
        for op in w.module.walk():
            if op.name == "const" and w.ids(op) in want:
                t = op.result.type
                try:
                    first = get_op("const").reference(op_sig(op, w.module.resources)).reshape(-1)[0]  # type: ignore
                except Exception:  # an elided or broken resource: zero will do
                    first = 0
                op.attrs["value"] = DenseAttr.splat(first, t)
                changed = True
        return changed


class DropAttrs(Strategy):
    """Drop optional op attributes (back to their defaults), discardable ones, and the attributes of
    the module, funcs, arguments and results."""

    NAME = "drop-attrs"

    def sites(self, w: Work) -> list[Site]:
        m = w.module
        out: list[Site] = [("module", k) for k in sorted(m.attrs)]
        for f in m.funcs:
            out += [("func", w.ids(f), k) for k in sorted(f.attrs)]
            for a, attrs in zip(f.args, f.arg_attrs, strict=True):
                out += [("arg", w.ids(a), k) for k in sorted(attrs)]
            for i, attrs in enumerate(f.result_attrs):
                out += [("result", w.ids(f), i, k) for k in sorted(attrs)]
        for op in m.walk():
            opdef = get_op(op.name)
            for k in sorted(op.attrs):
                spec = opdef.attrs.get(k) if opdef is not None else None
                if spec is None or not spec.required:
                    out.append(("op", w.ids(op), k))
        return out

    def apply(self, w: Work, chosen: list[Site]) -> bool:
        want = set(chosen)
        m = w.module
        m.attrs = {k: v for k, v in m.attrs.items() if ("module", k) not in want}
        for f in m.funcs:
            f.attrs = {k: v for k, v in f.attrs.items() if ("func", w.ids(f), k) not in want}
            f.arg_attrs = [{k: v for k, v in attrs.items() if ("arg", w.ids(a), k) not in want}
                           for a, attrs in zip(f.args, f.arg_attrs, strict=True)]
            f.result_attrs = [{k: v for k, v in attrs.items() if ("result", w.ids(f), i, k) not in want}
                              for i, attrs in enumerate(f.result_attrs)]
        for op in m.walk():
            op.attrs = {k: v for k, v in op.attrs.items() if ("op", w.ids(op), k) not in want}
        for f in m.funcs:  # an attribute back at its default may change result types (pads, strides)
            reinfer(m, f)
        return bool(want)


class DropLocs(Strategy):
    """Drop op locations (only with --drop-locs: by default they stay, as they name the ONNX nodes)."""

    NAME = "drop-locs"

    def sites(self, w: Work) -> list[Site]:
        return [w.ids(op) for op in w.module.walk() if op.loc]

    def apply(self, w: Work, chosen: list[Site]) -> bool:
        want = set(chosen)
        for op in w.module.walk():
            if w.ids(op) in want:
                op.loc = ()
        return bool(want)


class ShrinkShapes(Strategy):
    """Halve dims of func arguments and splat constants, then re-infer every result type; the candidate
    counts only if the whole module still verifies (an attribute such as a reshape's target shape does
    not follow, so such a change is refused)."""

    NAME = "shrink-shapes"
    REPEATABLE = True

    def sites(self, w: Work) -> list[Site]:
        out: list[Site] = []
        for f in w.module.funcs:
            for a in f.args:
                out += [("arg", w.ids(a), i) for i, d in enumerate(a.type.shape) if d is not None and d > 1]
            for op in _body_ops(f):
                v = op.attrs.get("value")
                if op.name == "const" and isinstance(v, DenseAttr) and v.is_splat:
                    out += [("const", w.ids(op), i) for i, d in enumerate(v.type.shape)
                            if d is not None and d > 1]
        return out

    def apply(self, w: Work, chosen: list[Site]) -> bool:
        want = set(chosen)
        for f in w.module.funcs:
            touched = False
            for a in f.args:
                dims = [i for i in range(a.type.rank) if ("arg", w.ids(a), i) in want]
                if dims:
                    a.type = _halve(a.type, dims)
                    touched = True
            for op in _body_ops(f):
                dims = [i for i in range(op.results[0].type.rank if op.results else 0)
                        if ("const", w.ids(op), i) in want]
                v = op.attrs.get("value")
                if dims and isinstance(v, DenseAttr):
                    t = _halve(v.type, dims)
                    op.attrs["value"] = DenseAttr.splat(v.splat_value(), t)
                    touched = True
            if touched and not reinfer(w.module, f):
                return False
        return bool(want)


def _halve(t: TensorType, dims: list[int]) -> TensorType:
    return t.with_shape(tuple(max(1, d // 2) if i in dims and d is not None else d
                              for i, d in enumerate(t.shape)))


STRATEGIES: list[type[Strategy]] = [
    RemoveFuncs, RemoveResults, ValuesToReturn, EraseDead, ReplaceWithArg, ReplaceWithOperand,
    ReplaceWithZero, RemoveArgs, RemoveRegionInputs, SplatConstants, DropAttrs, DropLocs, ShrinkShapes,
]


def default_strategies(drop_locs: bool = False) -> list[Strategy]:
    """The strategies in the order one round runs them: first those that remove the most."""
    return [cls() for cls in STRATEGIES if drop_locs or cls is not DropLocs]
