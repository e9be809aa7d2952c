"""The printer: one generic syntax for every op, deterministic, and parseable back to the same text.

    %0 = conv2d %x, %w {groups = 1} : (tensor<...>, tensor<...>) -> tensor<...> loc("onnx:Conv_0")

Value names come from their hints (the parsed name, an ONNX name) made unique per func; values without a
hint are numbered, skipping every hinted name, so print -> parse -> print is byte-identical.
"""

from __future__ import annotations

import io
import re
from typing import IO

from .attributes import format_attr_dict, format_name, quote
from .core import Block, Func, Loc, Module, Op, Value
from .resources import write_section
from .types import TensorType

_VALID = re.compile(r"[A-Za-z0-9_.$\-]+\Z")
_INVALID_CHAR = re.compile(r"[^A-Za-z0-9_.$\-]")
TERMINATORS = ("return", "yield")


def sanitize(name: str) -> str:
    return name if _VALID.match(name) else (_INVALID_CHAR.sub("_", name) or "v")


def format_loc(loc: Loc) -> str:
    if not loc:
        return ""
    if len(loc) == 1:
        return f" loc({quote(loc[0])})"
    return " loc(fused[" + ", ".join(quote(n) for n in loc) + "])"


def format_types(types: list[TensorType]) -> str:
    return ", ".join(str(t) for t in types)


def format_result_types(types: list[TensorType], attrs: list[dict] | None = None) -> str:
    has_attrs = attrs is not None and any(attrs)
    if len(types) == 1 and not has_attrs:
        return str(types[0])
    parts = []
    for i, t in enumerate(types):
        a = attrs[i] if attrs is not None else {}
        parts.append(f"{t} {format_attr_dict(a)}" if a else str(t))
    return "(" + ", ".join(parts) + ")"


class Namer:
    """Unique printed names for the values of one func."""

    def __init__(self, func: Func):
        values: list[Value] = list(func.args)
        for op in func.walk():
            for r in op.regions:
                for b in r.blocks:
                    values.extend(b.args)
            values.extend(op.results)
        hinted = {sanitize(v.name) for v in values if v.name}
        self.names: dict[int, str] = {}
        used: set[str] = set()
        counter = 0
        for v in values:
            if v.name:
                base = sanitize(v.name)
                name, n = base, 0
                while name in used:  # a repeated hint: take a suffix no other hint claims
                    n += 1
                    name = f"{base}_{n}"
                    if name in hinted:
                        name = base
            else:
                while str(counter) in hinted or str(counter) in used:
                    counter += 1
                name = str(counter)
                counter += 1
            used.add(name)
            self.names[id(v)] = name

    def __call__(self, v: Value) -> str:
        name = self.names.get(id(v))
        if name is None:
            raise ValueError(f"value {v!r} is not defined in this func (an op uses a value from elsewhere)")
        return "%" + name


class Printer:
    def __init__(self, out: IO[str]):
        self.out = out

    def module(self, m: Module) -> None:
        w = self.out.write
        head = "module"
        if m.name:
            head += f" @{format_name(m.name)}"
        if m.attrs:
            head += f" attributes {format_attr_dict(m.attrs)}"
        w(head + " {\n")
        for i, f in enumerate(m.funcs):
            if i:
                w("\n")
            self.func(f, "  ")
        w("}\n")

    def func(self, f: Func, indent: str) -> None:
        name = Namer(f)
        args = []
        for v, a in zip(f.args, f.arg_attrs, strict=True):
            args.append(f"{name(v)}: {v.type}" + (f" {format_attr_dict(a)}" if a else ""))
        line = f"{indent}func @{format_name(f.name)}({', '.join(args)}) -> "
        line += format_result_types(f.result_types, f.result_attrs)
        if f.attrs:
            line += f" attributes {format_attr_dict(f.attrs)}"
        self.out.write(line + " {\n")
        self.block_ops(f.block, name, indent + "  ")
        self.out.write(indent + "}\n")

    def block_ops(self, b: Block, name: Namer, indent: str) -> None:
        for op in b.ops:
            self.op(op, name, indent)

    def op(self, op: Op, name: Namer, indent: str) -> None:
        w = self.out.write
        if op.name in TERMINATORS and not op.results and not op.regions and not op.attrs:
            line = indent + op.name
            if op.operands:
                line += " " + ", ".join(name(v) for v in op.operands) + " : " + format_types(op.operand_types)
            w(line + format_loc(op.loc) + "\n")
            return
        line = indent
        if op.results:
            line += ", ".join(name(r) for r in op.results) + " = "
        line += op.name
        if op.operands:
            line += " " + ", ".join(name(v) for v in op.operands)
        if op.attrs:
            line += " " + format_attr_dict(op.attrs)
        line += f" : ({format_types(op.operand_types)}) -> "
        rt = op.result_types
        line += str(rt[0]) if len(rt) == 1 else f"({format_types(rt)})"
        if not op.regions:
            w(line + format_loc(op.loc) + "\n")
            return
        w(line + " (")
        for i, r in enumerate(op.regions):
            if i:
                w(", ")
            w("{\n")
            for b in r.blocks:
                if b.args:
                    args = ", ".join(f"{name(a)}: {a.type}" for a in b.args)
                    w(f"{indent}^bb0({args}):\n")
                self.block_ops(b, name, indent + "  ")
            w(indent + "}")
        w(")" + format_loc(op.loc) + "\n")


def print_module(m: Module, out: IO[str], *, elide_resources: bool = False,
                 external: tuple[IO[bytes], str] | None = None) -> None:
    """Write `m` and, after it, its resources section (payloads base64-encoded in chunks, elided, or
    written to the `external` side file)."""
    Printer(out).module(m)
    used = referenced_resources(m)
    if used:
        from .resources import ResourceTable

        table = ResourceTable()
        for r in m.resources:
            if r.name in used:
                table.put(r)
        write_section(table, out, elide=elide_resources, external=external, format_name=format_name)


def referenced_resources(m: Module) -> set[str]:
    from .attributes import ResourceAttr

    names: set[str] = set()

    def visit(a: object) -> None:
        if isinstance(a, ResourceAttr):
            names.add(a.name)
        elif isinstance(a, list):
            for x in a:
                visit(x)
        elif isinstance(a, dict):
            for x in a.values():
                visit(x)

    for op in m.walk():
        for a in op.attrs.values():
            visit(a)
    return names


def to_text(m: Module, *, elide_resources: bool = False) -> str:
    buf = io.StringIO()
    print_module(m, buf, elide_resources=elide_resources)
    return buf.getvalue()


def op_to_text(op: Op) -> str:
    """One op on one line, values named as in its func (for diagnostics and debugging)."""
    f = op.func
    buf = io.StringIO()
    if f is not None:
        Printer(buf).op(op, Namer(f), "")
    else:
        buf.write(op.name)
    return buf.getvalue().split("\n", 1)[0]
