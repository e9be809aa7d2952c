"""Specializing a func with dynamic dims to the sizes of one call.

A func whose argument types hold symbolic dims (`tensor<[N]x3x[H]x[W]xf32>`) or anonymous ones (`?`) is a
family of static funcs, one for each size of its inputs. `bind` reads the symbols' values off the input
shapes (checking every static dim, every repeated symbol and every derived dim against them), and
`specialize` makes the static func of that binding: a copy whose attributes have their symbolic dims
evaluated and whose types are inferred again, op by op, from the static argument types, with each
result checked against what the dynamic IR said of it. Whatever the dynamic IR assumed (that two dims
broadcast, that a slice stays in range) is checked here, on ints, by the ops' own `infer` and `verify`.

The interpreter runs a dynamic func through its specialization to the inputs' sizes (made anew each call:
passes change funcs in place, so a kept one could be stale), and the OpenCL target lowers each
specialization it meets (targets/opencl/dynamic.py), keeping the executables it loads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .core import Block, Func, Module, Op, Region, Value
from .diagnostics import Diagnostic, DiagnosticError
from .errors import OpError
from .ops.control import block_arg_types, failing_region, result_types
from .ops.registry import get_op, has_trait, op_sig
from .resources import ResourceTable
from .symbolic import Sym, evaluate, format_dim
from .types import TensorType

Binding = dict[str, int]


def is_dynamic(func: Func) -> bool:
    """Whether some argument of `func` has a dim that is not a static int."""
    return any(not a.type.is_static for a in func.args)


def bind(func: Func, shapes: Sequence[Sequence[int]], names: Sequence[str] | None = None) -> Binding:
    """The value of each symbol of `func`'s argument types, read off the input `shapes` (argument order);
    raises one DiagnosticError naming every input and dim that does not fit."""
    if names is None:
        from .interpreter import input_names

        names = input_names(func)
    binding: Binding = {}
    where: dict[str, str] = {}
    problems: list[str] = []
    for name, v, shape in zip(names, func.args, shapes, strict=True):
        t: TensorType = v.type
        shape = tuple(int(s) for s in shape)
        if len(shape) != t.rank:
            problems.append(f"input '{name}' has rank {len(shape)} (shape {list(shape)}), expected rank "
                            f"{t.rank}: {t}")
            continue
        for k, (d, s) in enumerate(zip(t.shape, shape, strict=True)):
            if type(d) is int:
                if d != s:
                    problems.append(f"input '{name}' dim {k} is {s}, expected {d} ({t})")
            elif isinstance(d, Sym) and len(d.terms) == 1 and d.terms[0][1] == 1 and len(d.terms[0][0]) == 1 \
                    and d.terms[0][0][0][0] == "s":
                sym = d.terms[0][0][0][1]
                if s < 0:
                    problems.append(f"input '{name}' dim {k} is {s}")
                elif sym in binding and binding[sym] != s:
                    problems.append(f"input '{name}' dim {k} is {s}, but [{sym}] is {binding[sym]} "
                                    f"({where[sym]})")
                else:
                    binding.setdefault(sym, s)
                    where.setdefault(sym, f"input '{name}' dim {k}")
    if not problems:  # dims computed from symbols (a [2 * N]) must agree with what the symbols give
        for name, v, shape in zip(names, func.args, shapes, strict=True):
            for k, (d, s) in enumerate(zip(v.type.shape, shape, strict=True)):
                if isinstance(d, Sym) and d.symbols() <= binding.keys() and d.evaluate(binding) != s:
                    problems.append(f"input '{name}' dim {k} is {s}, but {format_dim(d)} gives "
                                    f"{d.evaluate(binding)} here")
                elif isinstance(d, Sym) and not d.symbols() <= binding.keys():
                    missing = sorted(d.symbols() - binding.keys())
                    problems.append(f"input '{name}' dim {k} is {format_dim(d)}, whose symbol "
                                    f"{', '.join(missing)} no input dim gives")
    if problems:
        d0 = Diagnostic("error", f"the inputs do not fit func @{func.name}: {problems[0]}")
        for p in problems[1:]:
            d0.note(p)
        raise DiagnosticError(d0)
    return binding


def evaluate_type(t: TensorType, binding: Mapping[str, int]) -> TensorType:
    if t.is_static:
        return t
    return TensorType(tuple(evaluate(d, binding) if isinstance(d, Sym) else d for d in t.shape), t.dtype)


def evaluate_attr(value: Any, binding: Mapping[str, int]) -> Any:
    """An attribute with its symbolic dims evaluated (nested lists and dicts, and types, included)."""
    if isinstance(value, Sym):
        return value.evaluate(binding)
    if isinstance(value, list):
        return [evaluate_attr(v, binding) for v in value]
    if isinstance(value, dict):
        return {k: evaluate_attr(v, binding) for k, v in value.items()}
    if isinstance(value, TensorType):
        return evaluate_type(value, binding)
    return value


def specialize(module: Module, func: Func, shapes: Sequence[Sequence[int]],
               names: Sequence[str] | None = None) -> tuple[Module, Func]:
    """The static func of `func` for inputs of `shapes`, in a module of its own whose resource table holds
    `module`'s weights (shared, not copied). Raises DiagnosticError when the sizes do not fit (an input, or
    an op whose operands the sizes make incompatible)."""
    binding = bind(func, shapes, names)
    arg_types = []
    for v, shape in zip(func.args, shapes, strict=True):
        arg_types.append(TensorType(tuple(int(s) for s in shape), v.type.dtype))
    table = ResourceTable()  # the same weights, in a table of its own: passes may add and drop entries
    for r in module.resources:
        table.put(r)
    out = Module(module.name, [], dict(module.attrs), table)
    new = Func(func.name, Region([Block(arg_types, [a.name for a in func.args])]), [],
               [dict(a) for a in func.arg_attrs], [dict(a) for a in func.result_attrs],
               evaluate_attr(dict(func.attrs), binding), func.pos)
    new.attrs["specialized"] = _sizes_text(binding, shapes)
    out.funcs.append(new)
    mapping: dict[int, Value] = {id(a): b for a, b in zip(func.args, new.args, strict=True)}
    _Specializer(module, binding).block(func.block, new.block, mapping)
    ret = new.return_op
    new.result_types = list(ret.operand_types) if ret is not None else []
    new.result_attrs = [dict(a) for a in func.result_attrs]
    return out, new


def _sizes_text(binding: Mapping[str, int], shapes: Sequence[Sequence[int]]) -> str:
    if binding:
        return ", ".join(f"{k} = {v}" for k, v in sorted(binding.items()))
    return "; ".join("x".join(map(str, s)) for s in shapes)


class _Specializer:
    def __init__(self, module: Module, binding: Binding):
        self.module, self.binding = module, binding

    def block(self, old: Block, new: Block, mapping: dict[int, Value]) -> None:
        for op in old.ops:
            try:
                new.append(self.op(op, mapping))
            except DiagnosticError:
                # an op that does not fit these sizes after an `assert` that fails at them: the assert's
                # message says why (the model cannot run at these sizes)
                for a in new.ops:
                    if a.name == "assert" and self.known_false(a.operands[0]):
                        raise self.error(a, str(a.attrs.get("message", "assertion failed")), sizes=False) \
                            from None
                raise

    def known_false(self, v: Value) -> bool:
        """Whether `v` (one i1) is false at these sizes, computed from constants and sizes only."""
        x = self.constant_value(v, 0)
        return x is not None and x.size == 1 and not bool(x.reshape(-1)[0])

    def constant_value(self, v: Value, depth: int) -> np.ndarray | None:
        op = v.op
        opdef = get_op(op.name) if op is not None else None
        if op is None or opdef is None or op.regions or not opdef.has("pure") or depth > 32:
            return None
        args = [self.constant_value(x, depth + 1) for x in op.operands]
        if any(a is None for a in args):
            return None
        try:
            out = opdef.reference(op_sig(op, self.module.resources), *args)
        except Exception:  # noqa: BLE001 - not computable here is all this needs to know
            return None
        outs = list(out) if isinstance(out, list | tuple) else [out]
        return np.asarray(outs[op.results.index(v)])

    def op(self, op: Op, mapping: dict[int, Value]) -> Op:
        operands = [mapping[id(v)] for v in op.operands]
        attrs = evaluate_attr(op.attrs, self.binding) if any(is_symbolic_attr(a) for a in op.attrs.values()) \
            else dict(op.attrs)
        regions = []
        control = (block_arg_types(op.name, [v.type for v in operands], attrs)
                   if has_trait(op.name, "control") else None)
        failed: dict[int, DiagnosticError] = {}
        for k, r in enumerate(op.regions):
            region = Region()
            for b in r.blocks:
                isolated = len(b.args) == len(operands) and has_trait(op.name, "region-body")
                types = ([v.type for v in operands] if isolated else control[k] if control is not None
                         else [self.static(a.type, op) for a in b.args])
                nb = Block(types, [a.name for a in b.args])
                mapping.update({id(a): x for a, x in zip(b.args, nb.args, strict=True)})
                try:
                    self.block(b, nb, mapping)
                except DiagnosticError as e:
                    if op.name != "if":
                        raise
                    failed[k] = e
                region.add_block(nb)
            regions.append(region)
        if failed:
            self.unreachable(op, regions, failed)
        types = self.result_types(op, operands, attrs, regions)
        new = Op(op.name, operands, types, attrs, regions, op.loc, [r.name for r in op.results], op.pos)
        mapping.update({id(r): x for r, x in zip(op.results, new.results, strict=True)})
        return new

    def result_types(self, op: Op, operands: list[Value], attrs: dict[str, Any],
                     regions: list[Region]) -> list[TensorType]:
        if not op.results:
            return []
        opdef = get_op(op.name)
        if opdef is None:
            raise self.error(op, f"'{op.name}' is not a registered op")
        if opdef.has("region-body") and regions and regions[0].blocks:
            term = regions[0].blocks[0].terminator
            if term is not None and term.name == "yield":
                return list(term.operand_types)
        if opdef.has("control"):  # data-dependent sizes (a loop's trip count) stay `?` here
            try:
                return result_types(op.name, [v.type for v in operands], attrs,
                                    [r.blocks[0].ops[-1].operand_types for r in regions])
            except OpError as e:
                raise self.error(op, f"'{op.name}' op {e}") from None
        sig = opdef.sig([v.type for v in operands], attrs, [self.static(r.type, op) if not _anonymous(r.type)
                                                              else r.type for r in op.results],
                        self.module.resources)
        try:
            types = opdef.infer_verified(sig)
        except OpError as e:
            raise self.error(op, f"'{op.name}' op {e}") from None
        for k, (t, old) in enumerate(zip(types, op.result_types, strict=True)):
            if any(isinstance(d, Sym) for d in t.shape):
                raise self.error(op, f"'{op.name}' op result #{k} is {t} even at these sizes")
            want = evaluate_type(old, self.binding)  # (a `?` left is a size only a run tells: a loop's)
            if want.rank != t.rank or any(type(w) is int and w != s for w, s in zip(want.shape, t.shape,
                                                                                   strict=True)):
                raise self.error(op, f"'{op.name}' op result #{k} is {t} at these sizes, but the IR says "
                                     f"{old} = {want}")
        return types

    def static(self, t: TensorType, op: Op) -> TensorType:
        s = evaluate_type(t, self.binding)
        if not s.is_static:
            raise self.error(op, f"'{op.name}' op has a region argument {t} whose dims no input gives")
        return s

    def unreachable(self, op: Op, regions: list[Region], failed: dict[int, DiagnosticError]) -> None:
        """The branches of `if` `op` that do not fit these sizes (the squeeze of a dim that is not 1 here)
        become a region that fails the run with the reason, as the model cannot run down that branch at
        these sizes; it yields zeros of the other branch's types. Raises when no branch fits."""
        if len(failed) == len(regions):
            raise failed[0]
        fits = next(k for k in range(len(regions)) if k not in failed)
        want = regions[fits].block.ops[-1].operand_types
        for k, e in failed.items():
            for inner in list(regions[k].block.ops):
                for x in list(inner.walk()):
                    x.drop_operands()
            message = (f"the model cannot run at these input sizes: its branch #{k} of 'if' does not fit "
                       f"them: {e.diagnostics[0].message}")
            regions[k] = failing_region(want, message, op.loc)

    def error(self, op: Op, message: str, sizes: bool = True) -> DiagnosticError:
        text = ", ".join(f"{k} = {v}" for k, v in sorted(self.binding.items())) if sizes else ""
        d = Diagnostic("error", message + (f" (with {text})" if text else ""), op.pos, op.loc)
        return DiagnosticError(d)


def is_symbolic_attr(value: Any) -> bool:
    """Whether an attribute value holds a symbolic dim (or a type with one)."""
    if isinstance(value, Sym):
        return True
    if isinstance(value, list):
        return any(is_symbolic_attr(v) for v in value)
    if isinstance(value, dict):
        return any(is_symbolic_attr(v) for v in value.values())
    return isinstance(value, TensorType) and not value.is_static


def _anonymous(t: TensorType) -> bool:
    return any(d is None for d in t.shape)
