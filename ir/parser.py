"""The parser: recursive descent over the generic syntax, with `file:line:col` diagnostics.

It knows no op beyond its name being registered; operand and result types come from the op's
function type, and each use is checked against the type its value was defined with. The resources
section is decoded straight from the input bytes (no copy of the base64 text), so large models parse at
the speed of base64 decoding.
"""

from __future__ import annotations

import bisect
import math
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from .attributes import DenseAttr, ResourceAttr, format_attr
from .core import Block, Func, Loc, Module, Op, Region, SourcePos, Value
from .diagnostics import SOURCES, Diagnostic, DiagnosticError
from .ops.registry import get_op
from .resources import ResourceError, ResourceTable, decode_entry
from .symbolic import ParseError, parse_expr
from .types import ELEMENT_TYPES, NARROW_FLOAT_TYPES, SUB_BYTE_BITS, TensorType, float_max, int_range, widen

T = TypeVar("T")
_NOT_SCALAR = object()
_WS = re.compile(r"(?:\s+|//[^\n]*)*")
_VALUE_ID = re.compile(r"%([A-Za-z0-9_.$\-]+)")
_SYMBOL = re.compile(r"@([A-Za-z_][A-Za-z0-9_.$\-]*)")
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_.$\-]*")
_OPNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_FLOAT = re.compile(r"-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)")
_INT = re.compile(r"-?\d+")
_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_LONG_STRING = re.compile(r'"""(.*?)"""', re.S)
_TENSOR = re.compile(r"tensor<((?:(?:\d+|\?|\[[^\]\n]*\])x)*)([A-Za-z0-9]+)>")
_DIM = re.compile(r"(\d+|\?|\[[^\]\n]*\])x")
_SYMBOLIC_ITEM = re.compile(
    r"\[\s*(?:-?\s*(?:\(|(?!(?:true|false|inf|nan|dense|dense_resource|tensor)\b)[A-Za-z_])|-?\d+\s*[-+*/%])")
"""An int attribute's symbolic item `[N * 2]`, `[2 * S]` (not a nested array such as `[2, 3]` or `[x]`)."""
_SECTION = re.compile(rb"(?m)^\{-#")
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), s)


def _check_dense_elements(body: Any, t: TensorType) -> None:
    """Each element of a dense literal must fit its element type: true/false (or 0/1) for i1, an integer
    in range for the integer types; for the float types, a finite number stays finite (and, for types
    without infinities, is at most their largest value), and inf or nan only where the type has them.
    Nothing is truncated, saturated or overflowed silently."""
    if isinstance(body, list):
        for x in body:
            _check_dense_elements(x, t)
        return
    if t.dtype == "i1":
        ok = isinstance(body, bool) or (type(body) is int and body in (0, 1))
    elif t.is_float:
        ok = not isinstance(body, bool)
        if ok:
            _check_float_element(float(body), t)
    else:
        ok = type(body) is int
        lo, hi = int_range(t.dtype)
        if ok and not lo <= body <= hi:
            raise ValueError(f"{body} is out of range for {t.dtype}")
    if not ok:
        raise ValueError(f"{format_attr(body)} is not a valid {t.dtype} element")


def _check_float_element(x: float, t: TensorType) -> None:
    with np.errstate(all="ignore"):
        y = float(widen(np.asarray(x).astype(t.np_dtype)))
    if math.isfinite(x):
        too_big = t.dtype in NARROW_FLOAT_TYPES and not _has_inf(t) and abs(x) > float_max(t.dtype)
        if not math.isfinite(y) or too_big:
            raise ValueError(f"{format_attr(x)} is out of range for {t.dtype}")
    elif math.isnan(x) != math.isnan(y) or math.isinf(x) != math.isinf(y):
        raise ValueError(f"{format_attr(x)} is not a valid {t.dtype} element (it has no {format_attr(x)})")


def _has_inf(t: TensorType) -> bool:
    with np.errstate(all="ignore"):
        return bool(np.isinf(widen(np.asarray(np.inf).astype(t.np_dtype))))


def _check_hex_elements(arr: np.ndarray, t: TensorType) -> None:
    """A sub-byte type's byte must hold its value in the low bits, the rest zero (as ml_dtypes stores it),
    so that equal tensors have equal bytes."""
    bits = SUB_BYTE_BITS.get(t.dtype)
    if bits is not None:
        raw = arr.reshape(-1).view(np.uint8)
        bad = np.flatnonzero(raw >> bits)
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"byte 0x{int(raw[i]):02X} at element {i} is not a valid {t.dtype} element "
                             f"(only the low {bits} bits may be set)")


class Parser:
    def __init__(self, text: str, filename: str, line_offset: int = 0):
        self.text = text
        self.file = filename
        self.pos = 0
        self.line_offset = line_offset
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.scopes: list[dict[str, Value]] = []
        self.resource_refs: list[tuple[str, int]] = []

    # low level --------------------------------------------------------------------------------------
    def where(self, pos: int | None = None) -> SourcePos:
        p = self.pos if pos is None else pos
        line = bisect.bisect_right(self._line_starts, p) - 1
        return SourcePos(self.file, line + 1 + self.line_offset, p - self._line_starts[line] + 1)

    def error(self, message: str, pos: int | None = None) -> DiagnosticError:
        return DiagnosticError(Diagnostic("error", message, self.where(pos)))

    def ws(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def peek(self, s: str) -> bool:
        self.ws()
        return self.text.startswith(s, self.pos)

    def peek_word(self, word: str) -> bool:
        self.ws()
        m = _BARE.match(self.text, self.pos)
        return m is not None and m.group(0) == word

    def accept(self, s: str) -> bool:
        if self.peek(s):
            self.pos += len(s)
            return True
        return False

    def expect(self, s: str, what: str | None = None) -> None:
        if not self.accept(s):
            raise self.error(f"expected {what or repr(s)}{self._found()}")

    def _found(self) -> str:
        self.ws()
        if self.pos >= len(self.text):
            return " but reached the end of the input"
        if self.text.startswith('"', self.pos) and not _STRING.match(self.text, self.pos):
            return ", found an unterminated string (no closing '\"' on its line)"
        tok = re.match(r"\S{1,20}", self.text[self.pos:])
        return f", found '{tok.group(0)}'" if tok else ""

    def match(self, regex: re.Pattern[str]) -> re.Match[str] | None:
        self.ws()
        m = regex.match(self.text, self.pos)
        if m:
            self.pos = m.end()
        return m

    def name_or_string(self, what: str) -> str:
        m = self.match(_STRING)
        if m:
            return _unescape(m.group(1))
        m = self.match(_BARE)
        if m:
            return m.group(0)
        raise self.error(f"expected {what}{self._found()}")

    def at_end(self) -> bool:
        self.ws()
        return self.pos >= len(self.text)

    # types -------------------------------------------------------------------------------------------
    def type(self) -> TensorType:
        self.ws()
        start = self.pos
        m = _TENSOR.match(self.text, self.pos)
        if not m:
            raise self.error(f"expected a tensor type like tensor<2x3xf32>{self._found()}")
        if m.group(2) not in ELEMENT_TYPES:
            raise self.error(
                f"unknown element type '{m.group(2)}' (expected one of {', '.join(ELEMENT_TYPES)})", start)
        dims: list[Any] = []
        at = m.start(1)
        for d in _DIM.finditer(m.group(1)):
            text = d.group(1)
            if text == "?":
                dims.append(None)
            elif text.startswith("["):
                dims.append(self.symbolic(text[1:-1], at + d.start(1) + 1))
            else:
                dims.append(int(text))
        self.pos = m.end()
        return TensorType(tuple(dims), m.group(2))

    def symbolic(self, text: str, at: int) -> Any:
        """The symbolic dim `text` (the inside of `[...]`, starting at offset `at`)."""
        try:
            return parse_expr(text)
        except ParseError as e:
            raise self.error(str(e), at + e.offset) from None
        except ValueError as e:
            raise self.error(str(e), at) from None

    def symbolic_item(self) -> Any:
        """An int attribute's symbolic item `[expr]`."""
        self.expect("[")
        start = self.pos
        end = self.text.find("]", start)
        if end < 0 or "\n" in self.text[start:end]:
            raise self.error("expected ']' closing the symbolic dim", start)
        self.pos = end + 1
        return self.symbolic(self.text[start:end], start)

    def delimited(self, open_: str, close: str, item: Callable[[], T]) -> list[T]:
        """`open_ item, item, ... close`, possibly empty."""
        self.expect(open_)
        items: list[T] = []
        if self.accept(close):
            return items
        while True:
            items.append(item())
            if not self.accept(","):
                break
        self.expect(close, f"'{close}' or ','")
        return items

    def type_list(self) -> list[TensorType]:
        return self.delimited("(", ")", self.type)

    def result_types(self, with_attrs: bool = False) -> tuple[list[TensorType], list[dict]]:
        if not self.peek("("):
            return [self.type()], [{}]
        pairs = self.delimited("(", ")", lambda: (self.type(), self.attr_dict()
                                                  if with_attrs and self.peek("{") else {}))
        return [t for t, _ in pairs], [a for _, a in pairs]

    # attributes --------------------------------------------------------------------------------------
    def attr_dict(self) -> dict[str, Any]:
        self.expect("{")
        out: dict[str, Any] = {}
        if self.accept("}"):
            return out
        while True:
            start = self.pos
            key = self.name_or_string("an attribute name")
            if key in out:
                raise self.error(f"attribute '{key}' given twice", start)
            self.expect("=", "'=' after the attribute name")
            out[key] = self.attr()
            if not self.accept(","):
                break
        self.expect("}", "'}' or ',' in the attribute dictionary")
        return out

    def attr(self) -> Any:
        self.ws()
        start = self.pos
        if self.peek("["):
            if _SYMBOLIC_ITEM.match(self.text, self.pos):
                return self.symbolic_item()
            return self.delimited("[", "]", self.attr)
        if self.peek("{"):
            return self.attr_dict()
        m = self.match(_LONG_STRING)
        if m:
            return m.group(1)
        m = self.match(_STRING)
        if m:
            return _unescape(m.group(1))
        if self.peek("tensor<"):
            return self.type()
        value = self.scalar()
        if value is not _NOT_SCALAR:
            return value
        m = self.match(_BARE)
        if m:
            word = m.group(0)
            if word == "dense":
                return self.dense(start)
            if word == "dense_resource":
                self.expect("<")
                name_pos = self.pos
                name = self.name_or_string("a resource name")
                self.expect(">")
                self.expect(":", "':' and the tensor type after dense_resource<...>")
                self.resource_refs.append((name, name_pos))
                return ResourceAttr(name, self.type())
            raise self.error(f"bad attribute value '{word}'", start)
        raise self.error(f"expected an attribute value{self._found()}", start)

    def scalar(self) -> Any:
        """A number, true/false, inf, -inf or nan; _NOT_SCALAR (nothing consumed) for anything else."""
        m = self.match(_FLOAT)
        if m:
            return float(m.group(0))
        m = self.match(_INT)
        if m:
            return int(m.group(0))
        if self.accept("-inf"):
            return float("-inf")
        start = self.pos
        m = self.match(_BARE)
        if m and m.group(0) in ("true", "false", "inf", "nan"):
            w = m.group(0)
            return w == "true" if w in ("true", "false") else float(w)
        self.pos = start
        return _NOT_SCALAR

    def dense_element(self) -> Any:
        value = self.scalar()
        if value is _NOT_SCALAR:  # report the word itself, not what follows it
            raise self.error(f"expected a number in the dense literal{self._found()}")
        return value

    def dense_body(self) -> Any:
        if self.peek("["):
            return self.delimited("[", "]", self.dense_body)
        return self.dense_element()

    def dense(self, start: int) -> DenseAttr:
        self.expect("<")
        hexdata: str | None = None
        m = self.match(_STRING)
        if m:
            hexdata = m.group(1)
            body: Any = None
        else:
            body = self.dense_body()
        self.expect(">")
        self.expect(":", "':' and the tensor type after dense<...>")
        t = self.type()
        if not t.is_static:
            raise self.error(f"a dense literal needs a static type, got {t}", start)
        try:
            if hexdata is not None:
                if not hexdata.startswith("0x"):
                    raise ValueError("a string dense literal must be hex bytes \"0x...\"")
                raw = bytes.fromhex(hexdata[2:])
                want = t.numel * t.np_dtype.itemsize
                if len(raw) != want:
                    raise ValueError(f"hex literal holds {len(raw)} bytes but {t} needs {want}")
                arr = (
                    np.frombuffer(raw, dtype=t.np_dtype.newbyteorder("<")).astype(t.np_dtype).reshape(t.dims)
                )
                _check_hex_elements(arr, t)
                return DenseAttr(t, arr)
            _check_dense_elements(body, t)
            if isinstance(body, list):
                arr = np.array(body, dtype=np.float64 if t.is_float else object)
                if arr.shape != t.shape:
                    raise ValueError(f"literal of shape {list(arr.shape)} does not match {t}")
                return DenseAttr(
                    t, arr.astype(t.np_dtype) if t.is_float else np.array(body, dtype=t.np_dtype)
                )
            return DenseAttr.splat(body, t)
        except (ValueError, TypeError, OverflowError) as e:
            raise self.error(f"bad dense literal: {e}", start) from None

    # locations ---------------------------------------------------------------------------------------
    def loc(self) -> Loc:
        if not self.peek_word("loc"):
            return ()
        self.pos += 3
        self.expect("(")
        if self.peek_word("fused"):
            self.pos += 5
            self.expect("[")
            names = [self.string("a location name")]
            while self.accept(","):
                names.append(self.string("a location name"))
            self.expect("]")
            self.expect(")")
            return tuple(names)
        if self.peek_word("unknown"):
            self.pos += 7
            self.expect(")")
            return ()
        name = self.string("a location string")
        self.expect(")")
        return (name,)

    def string(self, what: str) -> str:
        m = self.match(_STRING)
        if not m:
            raise self.error(f"expected {what}{self._found()}")
        return _unescape(m.group(1))

    # values ------------------------------------------------------------------------------------------
    def define(self, name: str, value: Value, pos: int) -> None:
        for scope in self.scopes:
            if name in scope:
                raise self.error(f"redefinition of value '%{name}'", pos)
        self.scopes[-1][name] = value
        value.name = name

    def lookup(self, name: str, pos: int) -> Value:
        for scope in reversed(self.scopes):
            v = scope.get(name)
            if v is not None:
                return v
        raise self.error(f"use of undefined value '%{name}'", pos)

    def value_use(self) -> tuple[Value, int]:
        self.ws()
        pos = self.pos
        m = self.match(_VALUE_ID)
        if not m:
            raise self.error(f"expected a value like %x{self._found()}")
        return self.lookup(m.group(1), pos), pos

    def typed_args(self, what: str, with_attrs: bool) -> list[tuple[str, TensorType, dict, int]]:
        """`(%a: type {attrs}, ...)`: (name, type, attributes, position) of each argument."""

        def arg() -> tuple[str, TensorType, dict, int]:
            self.ws()
            apos = self.pos
            m = self.match(_VALUE_ID)
            if not m:
                raise self.error(f"expected {what} like %x: tensor<...>{self._found()}")
            self.expect(":", f"':' and the type of {what}")
            t = self.type()
            return m.group(1), t, self.attr_dict() if with_attrs and self.peek("{") else {}, apos

        return self.delimited("(", ")", arg)

    # structure ---------------------------------------------------------------------------------------
    def module(self) -> Module:
        self.ws()
        if self.at_end():  # an empty input (or one of only comments) is an empty module, as in mlir-opt
            return Module()
        if self.peek_word("func"):  # bare funcs: an implicit module
            m = Module()
            while self.peek_word("func"):
                m.funcs.append(self.func())
            return m
        if not self.peek_word("module"):
            raise self.error(f"expected 'module' or 'func'{self._found()}")
        self.pos += 6
        m = Module()
        if self.accept("@"):
            m.name = self.name_or_string("a module name")
        if self.peek_word("attributes"):
            self.pos += 10
            m.attrs = self.attr_dict()
        self.expect("{", "'{' to open the module body")
        open_pos = self.pos - 1
        while not self.accept("}"):
            if self.at_end():
                raise self.error("unterminated module body: the '{' here is never closed", open_pos)
            if not self.peek_word("func"):
                raise self.error(f"expected 'func' or '}}' in the module body{self._found()}")
            m.funcs.append(self.func())
        return m

    def func(self) -> Func:
        start = self.pos
        self.pos += 4
        self.expect("@", "'@' and the func name")
        name = self.name_or_string("a func name")
        self.scopes = [{}]
        args = self.typed_args("an argument", with_attrs=True)
        results: list[TensorType] = []
        result_attrs: list[dict] = []
        if self.accept("->"):
            results, result_attrs = self.result_types(with_attrs=True)
        attrs = {}
        if self.peek_word("attributes"):
            self.pos += 10
            attrs = self.attr_dict()
        block = Block([a[1] for a in args])
        for v, (n, _, _, apos) in zip(block.args, args, strict=True):
            self.define(n, v, apos)
        f = Func(name, Region([block]), results, [a[2] for a in args], result_attrs, attrs, self.where(start))
        self.expect("{", "'{' to open the func body")
        self.block_body(block, "func")
        return f

    def block_body(self, block: Block, what: str, open_pos: int | None = None) -> None:
        open_pos = self.pos - 1 if open_pos is None else open_pos
        while not self.accept("}"):
            if self.at_end():
                raise self.error(f"unterminated {what} body: the '{{' here is never closed", open_pos)
            block.append(self.op())

    def op(self) -> Op:
        self.ws()
        result_names: list[tuple[str, int]] = []
        if self.peek("%"):
            while True:
                self.ws()
                rpos = self.pos
                m = self.match(_VALUE_ID)
                if not m:
                    raise self.error(f"expected a result name{self._found()}")
                result_names.append((m.group(1), rpos))
                if not self.accept(","):
                    break
            self.expect("=", "'=' after the result names")
        self.ws()
        name_pos = self.pos
        m = self.match(_OPNAME)
        if not m:
            raise self.error(f"expected an op name{self._found()}")
        name = m.group(0)
        opdef = get_op(name)
        if opdef is None:
            raise self.error(f"unknown op '{name}'", name_pos)
        if name in ("return", "yield") and not result_names:
            return self.terminator(name, name_pos)
        operands: list[tuple[Value, int]] = []
        if self.peek("%"):
            operands.append(self.value_use())
            while self.accept(","):
                operands.append(self.value_use())
        attrs = self.attr_dict() if self.peek("{") else {}
        self.expect(":", "':' and the op's function type")
        type_pos = self.pos
        in_types = self.type_list()
        self.expect("->", "'->' in the op's function type")
        out_types, _ = self.result_types()
        if len(in_types) != len(operands):
            raise self.error(
                f"'{name}' has {len(operands)} operands but its type lists {len(in_types)}", type_pos
            )
        for (v, vpos), t in zip(operands, in_types, strict=True):
            if v.type != t:
                raise self.error(
                    f"use of value '%{v.name}' expects type {t} but it was defined as {v.type}", vpos)
        if len(out_types) != len(result_names):
            raise self.error(
                f"'{name}' defines {len(result_names)} results but its type lists {len(out_types)}", type_pos
            )
        op = Op(name, [v for v, _ in operands], out_types, attrs, pos=self.where(name_pos))
        if self.accept("("):
            while True:
                op.add_region(self.region())
                if not self.accept(","):
                    break
            self.expect(")", "')' after the regions")
        op.loc = self.loc()
        for r, (n, rpos) in zip(op.results, result_names, strict=True):
            self.define(n, r, rpos)
        return op

    def terminator(self, name: str, name_pos: int) -> Op:
        operands: list[tuple[Value, int]] = []
        types: list[TensorType] = []
        if self.peek("%"):
            operands.append(self.value_use())
            while self.accept(","):
                operands.append(self.value_use())
            self.expect(":", f"':' and the types of the {name}ed values")
            types.append(self.type())
            while self.accept(","):
                types.append(self.type())
        if len(types) != len(operands):
            raise self.error(f"'{name}' has {len(operands)} operands but lists {len(types)} types", name_pos)
        for (v, vpos), t in zip(operands, types, strict=True):
            if v.type != t:
                raise self.error(
                    f"use of value '%{v.name}' expects type {t} but it was defined as {v.type}", vpos)
        op = Op(name, [v for v, _ in operands], pos=self.where(name_pos))
        op.loc = self.loc()
        return op

    def region(self) -> Region:
        self.expect("{", "'{' to open a region")
        open_pos = self.pos - 1
        self.scopes.append({})
        block = Block()
        if self.accept("^"):
            self.match(_BARE)
            args = self.typed_args("a block argument", with_attrs=False) if self.peek("(") else []
            self.expect(":", "':' after the block label")
            block = Block([a[1] for a in args])
            for v, (n, _, _, apos) in zip(block.args, args, strict=True):
                self.define(n, v, apos)
        self.block_body(block, "region", open_pos)
        self.scopes.pop()
        return Region([block])


def split_resources(data: bytes) -> tuple[bytes, memoryview | None]:
    """The module text and the resources section (from `{-#` at a line start), without copying the
    section."""
    m = _SECTION.search(data)
    if not m:
        return data, None
    return data[:m.start()], memoryview(data)[m.start():]


def parse_resources(section: memoryview, filename: str, base_dir: str, line_offset: int,
                    verify_hash: bool = True) -> ResourceTable:
    table = ResourceTable()
    raw = section.obj if isinstance(section.obj, bytes) else bytes(section)  # type: ignore[union-attr]
    base = len(raw) - len(section)

    def fail(msg: str, at: int) -> DiagnosticError:
        line = raw.count(b"\n", base, at) + 1 + line_offset
        col = at - (raw.rfind(b"\n", 0, at) + 1) + 1
        return DiagnosticError(Diagnostic("error", msg, SourcePos(filename, line, col)))

    i = base + 3
    sp = rb"(?:\s|//[^\n]*(?:\n|\Z))*"  # whitespace and `//` comments (each to its line end: no backtracking)
    head = re.compile(sp + rb"resources\s*:\s*\{")
    m = head.match(raw, i)
    if not m:
        raise fail("expected 'resources: {' after '{-#'", i)
    i = m.end()
    entry = re.compile(sp + rb'(?:"((?:[^"\\\n]|\\.)*)"|([A-Za-z_][A-Za-z0-9_.$\-]*))\s*:\s*"')
    close = re.compile(sp + rb"\}" + sp + rb"#-\}" + sp)
    while True:
        m = close.match(raw, i)
        if m:
            if m.end() != len(raw):
                raise fail("unexpected text after the resources section", m.end())
            return table
        m = entry.match(raw, i)
        if not m:
            raise fail("expected a resource entry 'name: \"sha256:...\"' or '} #-}'", i)
        try:
            name = _unescape(m.group(1).decode()) if m.group(1) is not None else m.group(2).decode()
        except UnicodeDecodeError as e:  # found by tests/fuzz: was an internal compiler error
            raise fail("resource name is not UTF-8 text", m.start(1) + e.start) from None
        start = m.end()
        end = raw.find(b'"', start)
        if end < 0:
            raise fail(f"unterminated value of resource '{name}'", start)
        try:
            table.put(decode_entry(name, memoryview(raw)[start:end], base_dir, verify_hash))
        except ResourceError as e:
            raise fail(str(e), m.start(1) if m.group(1) is not None else m.start(2)) from None
        i = end + 1
        m2 = re.compile(sp + rb",").match(raw, i)
        if m2:
            i = m2.end()


def parse_module(
    data: bytes | str,
    filename: str = "<stdin>",
    *,
    line_offset: int = 0,
    base_dir: str | None = None,
    verify_hash: bool = True,
    register_source: bool = True,
    resources: ResourceTable | None = None,
) -> Module:
    """Parse one module (text plus optional resources section). Raises DiagnosticError. `resources`:
    the table of a text without a section (a copy of a module printed ops only, sharing its weights)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    text_part, section = split_resources(data)
    try:
        text = text_part.decode("utf-8")
    except UnicodeDecodeError as e:
        line = text_part.count(b"\n", 0, e.start) + 1 + line_offset  # point at the bad byte
        col = e.start - (text_part.rfind(b"\n", 0, e.start) + 1) + 1
        hint = "; import ONNX models with tessel-import first" if filename.endswith(".onnx") else ""
        raise DiagnosticError(Diagnostic(
            "error", f"input is not UTF-8 text: byte 0x{text_part[e.start]:02x} at offset {e.start}{hint}",
            SourcePos(filename, line, col))) from None
    if register_source:
        SOURCES.add(filename, text)
    p = Parser(text, filename, line_offset)
    try:
        module = p.module()
    except RecursionError:  # found by tests/fuzz: `[[[[...` a thousand deep exhausts the Python stack
        raise p.error("brackets nest too deeply here (the parser takes several hundred levels)") from None
    if not p.at_end():
        raise p.error(f"unexpected text after the module{p._found()}")
    if base_dir is None:
        base_dir = os.path.dirname(filename) if filename not in ("<stdin>", "-") else "."
    if section is not None:
        sec_line = text.count("\n") + line_offset
        module.resources = parse_resources(section, filename, base_dir, sec_line, verify_hash)
    elif resources is not None:
        module.resources = resources
    for name, pos in p.resource_refs:
        if name not in module.resources:
            raise p.error(f"unknown resource '{name}': not in the module's resources section", pos)
    return module
