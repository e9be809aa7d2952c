"""The verifier: structure, SSA dominance, attributes against the registry, result types against `infer`,
and each op's own `verify`. Runs after parsing and (by default) after every pass."""

from __future__ import annotations

from typing import Any

from .attributes import DenseAttr, ResourceAttr
from .core import Block, Func, Module, Op
from .diagnostics import Diagnostic, DiagnosticError, op_error
from .ops.registry import AttrSpec, OpDef, OpError, get_op
from .symbolic import Sym
from .types import TensorType


def _kind_ok(kind: str, v: Any) -> bool:
    is_int = isinstance(v, int) and not isinstance(v, bool)
    if kind == "int":
        return is_int
    if kind == "float":
        return is_int or isinstance(v, float)
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "str":
        return isinstance(v, str)
    if kind == "ints":
        return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
    if kind == "dim":
        return is_int or isinstance(v, Sym)
    if kind == "dims":
        return isinstance(v, list) and all(isinstance(x, int | Sym) and not isinstance(x, bool) for x in v)
    if kind == "floats":
        return isinstance(v, list) and all(isinstance(x, int | float) and not isinstance(x, bool) for x in v)
    if kind == "strs":
        return isinstance(v, list) and all(isinstance(x, str) for x in v)
    if kind == "type":
        return isinstance(v, TensorType)
    if kind == "dense":
        return isinstance(v, DenseAttr | ResourceAttr)
    return True


_KIND_WORDS = {"int": "an integer", "dim": "an integer or a symbolic dim", "float": "a float",
               "bool": "true or false", "str": "a string", "ints": "an array of integers",
               "dims": "an array of integers or symbolic dims", "floats": "an array of floats",
               "strs": "an array of strings",
               "type": "a tensor type", "dense": "a dense<> or dense_resource<> tensor"}


def check_attrs(opdef: OpDef, attrs: dict[str, Any]) -> str | None:
    """The first problem with an op's attributes, or None."""
    for name, spec in opdef.attrs.items():
        if name not in attrs:
            if spec.required:
                return f"requires attribute '{name}'"
            continue
        problem = _check_attr(name, spec, attrs[name])
        if problem:
            return problem
    for name in attrs:
        if name not in opdef.attrs and "." not in name:
            known = ", ".join(sorted(opdef.attrs)) or "none"
            return (
                f"has unknown attribute '{name}' (known: {known}; discardable attributes need a dotted name)"
            )
    return None


def _check_attr(name: str, spec: AttrSpec, value: Any) -> str | None:
    if not _kind_ok(spec.kind, value):
        return f"attribute '{name}' must be {_KIND_WORDS.get(spec.kind, spec.kind)}"
    if spec.allowed is not None and value not in spec.allowed:
        return f"attribute '{name}' must be one of {', '.join(map(repr, spec.allowed))}, got {value!r}"
    return None


class Verifier:
    def __init__(self, module: Module):
        self.module = module
        self.diags: list[Diagnostic] = []

    def run(self) -> list[Diagnostic]:
        names: set[str] = set()
        for f in self.module.funcs:
            if f.name in names:
                self.diags.append(Diagnostic("error", f"func @{f.name} is defined twice", f.pos))
            names.add(f.name)
            self.func(f)
        return self.diags

    def func(self, f: Func) -> None:
        defined: set[int] = {id(a) for a in f.args}
        self.block(f.block, defined)
        ret = f.block.terminator
        if ret is None or ret.name != "return":
            self.diags.append(Diagnostic("error", f"func @{f.name} must end with 'return'", f.pos))
            return
        if ret.operand_types != f.result_types:
            got = ", ".join(map(str, ret.operand_types)) or "nothing"
            want = ", ".join(map(str, f.result_types)) or "nothing"
            self.diags.append(op_error(ret, f"returns {got} but func @{f.name} declares {want}"))

    def block(self, b: Block, defined: set[int]) -> None:
        for i, op in enumerate(b.ops):
            self.op(op, defined, is_last=i == len(b.ops) - 1)
            for r in op.results:
                defined.add(id(r))

    def op(self, op: Op, defined: set[int], is_last: bool) -> None:
        opdef = get_op(op.name)
        if opdef is None:
            self.diags.append(op_error(op, "is not a registered op"))
            return
        for i, v in enumerate(op.operands):
            if id(v) not in defined:
                self.diags.append(op_error(op, f"operand #{i} (%{v.name}) does not dominate this use"))
                return
        problem = self.signature(op, opdef, is_last)
        if problem:
            self.diags.append(op_error(op, problem))
            return
        if opdef.has("control"):
            problem = self.control(op)
            if problem:
                self.diags.append(op_error(op, problem))
                return
        if opdef.has("region-body"):
            problem = self.region_body(op)
            if problem:
                self.diags.append(op_error(op, problem))
                return
        for r in op.regions:
            for b in r.blocks:
                # a region-body op (kernel, cl.launch) is isolated from above: only its block arguments
                isolated = opdef.has("region-body")
                inner = ({id(a) for a in b.args} if isolated else set(defined) | {id(a) for a in b.args})
                self.block(b, inner)

    def control(self, op: Op) -> str | None:
        """`if`, `loop`, `scan`: each region one block with the arguments the op gives it, ending in a
        `yield`, and the results what the yields make (ir/ops/control.py)."""
        from .ops.control import block_arg_types, result_types

        try:
            wanted = block_arg_types(op.name, op.operand_types, op.attrs)
            yields = []
            for k, (r, args) in enumerate(zip(op.regions, wanted, strict=True)):
                if len(r.blocks) != 1:
                    return f"needs one block in region #{k}, got {len(r.blocks)}"
                b = r.blocks[0]
                if [a.type for a in b.args] != args:
                    return (f"region #{k} takes ({', '.join(str(a.type) for a in b.args)}), expected "
                            f"({', '.join(map(str, args))})")
                if not b.ops or b.ops[-1].name != "yield":
                    return f"region #{k} must end with 'yield'"
                yields.append(b.ops[-1].operand_types)
            want = result_types(op.name, op.operand_types, op.attrs, yields)
        except OpError as e:
            return str(e)
        if want != op.result_types:
            return ("has results (" + ", ".join(map(str, op.result_types)) + ") but its regions make ("
                    + ", ".join(map(str, want)) + ")")
        return None

    def region_body(self, op: Op) -> str | None:
        """A body's arguments match the operands and its `yield` the results, type for type."""
        blocks = op.regions[0].blocks if op.regions else []
        if len(blocks) != 1:
            return f"needs one block in its region, got {len(blocks)}"
        b = blocks[0]
        if [a.type for a in b.args] != list(op.operand_types):
            args = ", ".join(str(a.type) for a in b.args)
            return f"region arguments ({args}) do not match the operands"
        if not b.ops or b.ops[-1].name != "yield":
            return "region must end with 'yield'"
        got = [v.type for v in b.ops[-1].operands]
        if got != list(op.result_types):
            return "yields (" + ", ".join(map(str, got)) + ") but has results (" + ", ".join(
                map(str, op.result_types)) + ")"
        return None

    def signature(self, op: Op, opdef: OpDef, is_last: bool) -> str | None:
        if opdef.has("terminator") and not is_last:
            return "must be the last op of its block"
        lo, hi = opdef.operand_range()
        n = len(op.operands)
        if n < lo or (hi is not None and n > hi):
            want = f"{lo}" if lo == hi else f"{lo} to {hi}" if hi is not None else f"at least {lo}"
            return f"takes {want} operands, got {n}"
        if isinstance(opdef.results, int) and len(op.results) != opdef.results:
            return f"has {opdef.results} results, got {len(op.results)}"
        if len(op.regions) != opdef.regions:
            return f"has {opdef.regions} regions, got {len(op.regions)}"
        problem = check_attrs(opdef, op.attrs)
        if problem:
            return problem
        value = op.attrs.get("value")
        if isinstance(value, ResourceAttr):
            res = self.module.resources.get(value.name)
            if res is None:
                return f"refers to unknown resource '{value.name}'"
            need = value.type.numel * value.type.np_dtype.itemsize if value.type.is_static else None
            if res.has_data and need is not None and len(res.data) != need:
                return f"resource '{value.name}' holds {len(res.data)} bytes but {value.type} needs {need}"
        if opdef.has("terminator"):
            return None
        sig = opdef.sig(op.operand_types, op.attrs, op.result_types, self.module.resources)
        try:
            inferred = opdef.infer(sig)
            if len(inferred) != len(op.results):
                return f"has {len(inferred)} results by its operands and attributes, got {len(op.results)}"
            for i, (actual, expected) in enumerate(zip(op.result_types, inferred, strict=True)):
                if actual != expected:
                    which = "result type" if len(inferred) == 1 else f"result #{i} type"
                    return f"{which} {actual} does not match the inferred type {expected}"
            if opdef.verify is not None:
                opdef.verify(sig)
        except OpError as e:
            return str(e)
        return None


def verify(module: Module) -> list[Diagnostic]:
    """All verifier errors in the module (empty when it is valid)."""
    return Verifier(module).run()


def verify_or_raise(module: Module) -> None:
    diags = verify(module)
    if diags:
        raise DiagnosticError(diags)
