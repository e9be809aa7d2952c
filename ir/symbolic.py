"""Symbolic dims: integer expressions over named sizes, as tensor types and int attributes hold them.

A dynamic dim that the model names (ONNX's `dim_param`, or a name the importer makes up) is a symbol, and
the dims computed from it (a conv's output height, a flattened `N * 3 * H`) are expressions over symbols,
kept in one canonical form so that dims equal by construction compare equal:

    tensor<[N]x3x[H]x[W]xf32>          conv 3x3 stride 2 pad 1 ->   tensor<[N]x64x[(H - 1) / 2 + 1]x...>

An expression is a sum of terms `coefficient * atom * atom ...` plus a constant. An atom is a symbol or one
of the operations the sum cannot absorb: `e / c` (division rounding down, by a positive constant or a
symbolic divisor that does not divide `e` exactly), `e % c`, `max(a, b)`, `min(a, b)`. Simplification
takes every symbol to stand for a size of at least 1 (comparisons decide what that bound proves and
raise `Undecidable` otherwise); a func specialized to a size of 0 has every op's result type inferred
again on ints and checked against its expression, so an expression that assumed 1 or more fails there,
loudly. An expression that reduces to a constant is a plain `int`: `Sym` values never hold a constant alone.

The textual form (types print each symbolic dim in brackets; int attributes hold `[expr]` items):
    expr   := term (('+' | '-') term)*
    term   := factor (('*' | '/' | '%') factor)*
    factor := INT | NAME | '(' expr ')' | ('max' | 'min') '(' expr ',' expr ')' | '-' factor
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Union

from .errors import OpError

Atom = tuple  # ("s", name) | ("div", Sym|int, Sym|int) | ("mod", Sym, int) | ("max"|"min", Sym|int, Sym|int)
Monomial = tuple  # sorted atoms; () is the constant term
DimLike = Union[int, "Sym"]

RESERVED = frozenset({"max", "min", "true", "false", "inf", "nan", "dense", "dense_resource", "tensor"})
"""Words a symbol may not be called (they are keywords where symbolic dims are written)."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class Undecidable(OpError, ValueError):
    """A comparison between symbolic dims that the symbols' bounds (each at least 1) cannot decide."""


def _key(x: Any) -> str:
    """A total order on atoms and monomials (for the canonical form): their printed text."""
    return x if isinstance(x, str) else repr(x)


class Sym:
    """A canonical integer expression over named symbols (immutable, hashable)."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: Mapping[Monomial, int]):
        self.terms: tuple[tuple[Monomial, int], ...] = tuple(
            sorted(((m, c) for m, c in terms.items() if c),
                   key=lambda mc: (len(mc[0]) == 0, _atoms_key(mc[0]))))
        self._hash = hash(self.terms)

    # construction --------------------------------------------------------------------------------
    @staticmethod
    def symbol(name: str) -> Sym:
        if not _NAME.match(name) or name in RESERVED:
            raise ValueError(f"'{name}' cannot name a symbolic dim")
        return Sym({((("s", name),)): 1})

    @staticmethod
    def make(terms: Mapping[Monomial, int]) -> DimLike:
        """The expression of `terms`, or an int when only a constant is left."""
        terms = {m: c for m, c in terms.items() if c}
        if not terms:
            return 0
        if set(terms) == {()}:
            return terms[()]
        return Sym(terms)

    @staticmethod
    def atom(a: Atom) -> Sym:
        return Sym({(a,): 1})

    # structure -----------------------------------------------------------------------------------
    @property
    def const(self) -> int:
        return dict(self.terms).get((), 0)

    def symbols(self) -> set[str]:
        out: set[str] = set()
        for m, _ in self.terms:
            for a in m:
                out |= _atom_symbols(a)
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sym) and self.terms == other.terms

    def __hash__(self) -> int:
        return self._hash

    # arithmetic ----------------------------------------------------------------------------------
    def __add__(self, other: Any) -> DimLike:
        o = _terms(other)
        if o is None:
            return NotImplemented
        out = dict(self.terms)
        for m, c in o.items():
            out[m] = out.get(m, 0) + c
        return Sym.make(out)

    __radd__ = __add__

    def __neg__(self) -> DimLike:
        return Sym.make({m: -c for m, c in self.terms})

    def __sub__(self, other: Any) -> DimLike:
        o = _terms(other)
        if o is None:
            return NotImplemented
        return self + Sym.make({m: -c for m, c in o.items()})

    def __rsub__(self, other: Any) -> DimLike:
        return (-self) + other

    def __mul__(self, other: Any) -> DimLike:
        o = _terms(other)
        if o is None:
            return NotImplemented
        out: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in o.items():
                m = tuple(sorted(m1 + m2, key=_key))
                out[m] = out.get(m, 0) + c1 * c2
        return Sym.make(out)

    __rmul__ = __mul__

    def __floordiv__(self, other: Any) -> DimLike:
        return floordiv(self, other)

    def __rfloordiv__(self, other: Any) -> DimLike:
        return floordiv(other, self)

    def __mod__(self, other: Any) -> DimLike:
        return mod(self, other)

    def __rmod__(self, other: Any) -> DimLike:
        return mod(other, self)

    # comparisons: decided by bounds (symbols >= 1), else Undecidable ------------------------------
    def __lt__(self, other: Any) -> bool:
        return _decide(other - self, strict=True)  # type: ignore[operator]

    def __le__(self, other: Any) -> bool:
        return _decide(other - self, strict=False)  # type: ignore[operator]

    def __gt__(self, other: Any) -> bool:
        return _decide(self - other, strict=True)

    def __ge__(self, other: Any) -> bool:
        return _decide(self - other, strict=False)

    def __int__(self) -> int:
        raise TypeError(f"symbolic dim [{self}] has no value until its symbols are bound")

    __index__ = __int__

    def __bool__(self) -> bool:
        return True  # a sum of terms that is never the constant 0

    # evaluation and printing ---------------------------------------------------------------------
    def evaluate(self, binding: Mapping[str, int]) -> int:
        total = 0
        for m, c in self.terms:
            v = c
            for a in m:
                v *= _eval_atom(a, binding)
            total += v
        return total

    def __str__(self) -> str:
        out = ""
        for i, (m, c) in enumerate(self.terms):
            mag = abs(c)
            if not m:
                body = str(mag)
            else:
                body = " * ".join(_atom_str(a) for a in m)
                if mag != 1:
                    body = f"{mag} * {body}"
            if i == 0:
                out = ("-" if c < 0 else "") + body
            else:
                out += (" - " if c < 0 else " + ") + body
        return out

    def __repr__(self) -> str:
        return f"Sym({self})"


def _atoms_key(m: Monomial) -> tuple:
    return (-len(m), tuple(_key(a) for a in m))


def _terms(x: Any) -> dict[Monomial, int] | None:
    if isinstance(x, Sym):
        return dict(x.terms)
    if isinstance(x, bool):
        return {(): int(x)}
    if isinstance(x, int):
        return {(): x}
    try:
        import numpy as np

        if isinstance(x, np.integer):
            return {(): int(x)}
    except ImportError:  # pragma: no cover
        pass
    return None


def _atom_symbols(a: Atom) -> set[str]:
    if a[0] == "s":
        return {a[1]}
    out: set[str] = set()
    for x in a[1:]:
        if isinstance(x, Sym):
            out |= x.symbols()
    return out


def _eval_atom(a: Atom, binding: Mapping[str, int]) -> int:
    if a[0] == "s":
        if a[1] not in binding:
            raise KeyError(a[1])
        return int(binding[a[1]])
    x, y = (evaluate(v, binding) for v in a[1:])
    if a[0] == "div":
        return x // y
    if a[0] == "mod":
        return x % y
    return max(x, y) if a[0] == "max" else min(x, y)


def _wrap(x: DimLike) -> str:
    s = str(x)
    single = isinstance(x, Sym) and len(x.terms) == 1 and x.terms[0][1] == 1 and len(x.terms[0][0]) == 1
    bare = isinstance(x, int) and x >= 0 or _NAME.match(s) or (single and s.startswith("("))
    return s if bare else f"({s})"


def _atom_str(a: Atom) -> str:
    if a[0] == "s":
        return a[1]
    if a[0] in ("max", "min"):
        return f"{a[0]}({a[1]}, {a[2]})"
    return f"({_wrap(a[1])} {'/' if a[0] == 'div' else '%'} {_wrap(a[2])})"


# operations on dims (ints or Syms) ----------------------------------------------------------------
def is_sym(d: Any) -> bool:
    return isinstance(d, Sym)


def evaluate(d: DimLike, binding: Mapping[str, int]) -> int:
    return d.evaluate(binding) if isinstance(d, Sym) else int(d)


def floordiv(a: DimLike, b: DimLike) -> DimLike:
    """a / b rounding down: exact where b divides every term of a, else a `div` atom."""
    if not isinstance(a, Sym) and not isinstance(b, Sym):
        return int(a) // int(b)
    if not isinstance(b, Sym):
        b = int(b)
        if b == 1:
            return a
        if b <= 0:
            raise ValueError(f"symbolic division by {b}")
        assert isinstance(a, Sym)
        if all(c % b == 0 for _, c in a.terms):
            return Sym.make({m: c // b for m, c in a.terms})
        # (k*b*X + r) / b = k*X + r / b for the terms b divides
        exact = {m: c // b for m, c in a.terms if m and c % b == 0}
        rest = Sym.make({m: c for m, c in a.terms if not (m and c % b == 0)})
        if exact:
            return Sym.make(exact) + floordiv(rest, b)
        return Sym.atom(("div", a, b))
    # a symbolic divisor: exact when b is one term dividing each term of a
    q = _divide_exactly(a, b)
    return q if q is not None else Sym.atom(("div", a, b))


def _divide_exactly(a: DimLike, b: Sym) -> DimLike | None:
    if len(b.terms) != 1:
        return _divide_polynomial(a, b)
    bm, bc = b.terms[0]
    if isinstance(a, int):
        return None
    out: dict[Monomial, int] = {}
    for m, c in a.terms:
        q = _term_quotient(m, c, bm, bc)
        if q is None:
            return None
        out[q[0]] = out.get(q[0], 0) + q[1]
    return Sym.make(out)


def _term_quotient(m: Monomial, c: int, bm: Monomial, bc: int) -> tuple[Monomial, int] | None:
    """(c * m) / (bc * bm) as one term, when bm's atoms are among m's and bc divides c."""
    rest = list(m)
    for x in bm:
        if x not in rest:
            return None
        rest.remove(x)
    return None if c % bc else (tuple(rest), c // bc)


def _divide_polynomial(a: DimLike, b: Sym) -> DimLike | None:
    """q with q * b == a, by long division on the terms (each step removes the remainder's first term
    with a multiple of b's first term); None when b does not divide a. Verified by multiplying back."""
    if a == b:
        return 1
    if not isinstance(a, Sym):
        return None
    bm, bc = b.terms[0]
    q: DimLike = 0
    r: DimLike = a
    for _ in range(2 * len(a.terms) + 2):
        if not isinstance(r, Sym):
            break
        step = _term_quotient(*r.terms[0], bm, bc)
        if step is None:
            return None
        t = Sym.make({step[0]: step[1]})
        q, r = q + t, r - t * b
    return q if r == 0 and q * b == a else None


def mod(a: DimLike, b: DimLike) -> DimLike:
    if not isinstance(a, Sym) and not isinstance(b, Sym):
        return int(a) % int(b)
    if isinstance(b, int) and b == 1:
        return 0
    q = floordiv(a, b)
    if not (isinstance(q, Sym) and any(x[0] == "div" for m, _ in q.terms for x in m)):
        return a - q * b  # exact division: 0; else what the exact part leaves
    return Sym.atom(("mod", a, b))


def scale_dim(n: DimLike | None, scale: float) -> DimLike | None:
    """floor(n * scale), as ONNX sizes a Resize by scales: for a symbolic `n`, through the fraction the
    float `scale` is exactly (2.0 -> n * 2, 0.5 -> n / 2, 1.5 -> 3 * n / 2)."""
    if n is None:
        return None
    if not isinstance(n, Sym):
        return int(scale * n)
    from fractions import Fraction

    f = Fraction(scale).limit_denominator(1 << 16)
    if float(f) != scale or f <= 0:
        raise Undecidable(f"cannot size [{n}] * {scale} for every size (the scale is no simple fraction)")
    return floordiv(n * f.numerator, f.denominator)


def smax(a: DimLike, b: DimLike) -> DimLike:
    """max(a, b), decided by bounds where they can, else a `max` atom."""
    for x, y in ((a, b), (b, a)):
        try:
            if x >= y:  # type: ignore[operator]
                return x
        except Undecidable:
            pass
    x, y = sorted((a, b), key=lambda v: str(v))
    return Sym.atom(("max", x, y))


def smin(a: DimLike, b: DimLike) -> DimLike:
    for x, y in ((a, b), (b, a)):
        try:
            if x <= y:  # type: ignore[operator]
                return x
        except Undecidable:
            pass
    x, y = sorted((a, b), key=lambda v: str(v))
    return Sym.atom(("min", x, y))


def bounds(d: DimLike) -> tuple[float, float]:
    """(lowest, highest) value `d` can take when every symbol is at least 1."""
    if not isinstance(d, Sym):
        return float(d), float(d)
    lo = hi = 0.0
    for m, c in d.terms:
        if not m:
            lo += c
            hi += c
            continue
        alo, ahi = 1.0, 1.0
        for a in m:
            l2, h2 = _atom_bounds(a)
            cands = (alo * l2, alo * h2, ahi * l2, ahi * h2)
            alo, ahi = min(cands, key=_nan0), max(cands, key=_nan0)
        t = (c * alo, c * ahi)
        lo += min(t, key=_nan0)
        hi += max(t, key=_nan0)
    return lo, hi


def _nan0(x: float) -> float:
    return 0.0 if x != x else x


def _atom_bounds(a: Atom) -> tuple[float, float]:
    inf = float("inf")
    if a[0] == "s":
        return 1.0, inf
    if a[0] == "div":
        lo, hi = bounds(a[1])
        blo, _ = bounds(a[2])
        if blo > 0 and lo >= 0:
            return (lo // blo if lo != inf else inf), hi
        return -inf, inf
    if a[0] == "mod":
        _, bhi = bounds(a[2])
        return 0.0, max(bhi - 1, 0.0)
    l1, h1 = bounds(a[1])
    l2, h2 = bounds(a[2])
    return (max(l1, l2), max(h1, h2)) if a[0] == "max" else (min(l1, l2), min(h1, h2))


def _decide(diff: DimLike, strict: bool) -> bool:
    """Whether diff > 0 (strict) or diff >= 0, by bounds; Undecidable when they do not settle it."""
    lo, hi = bounds(diff)
    if (lo > 0) if strict else (lo >= 0):
        return True
    if (hi <= 0) if strict else (hi < 0):
        return False
    raise Undecidable(f"cannot decide whether {diff} {'>' if strict else '>='} 0 for every size")


def symbols_of(dims: Iterable[Any]) -> set[str]:
    out: set[str] = set()
    for d in dims:
        if isinstance(d, Sym):
            out |= d.symbols()
    return out


def format_dim(d: Any) -> str:
    """A dim as types print it: 3, ?, or [expr]."""
    if d is None:
        return "?"
    if isinstance(d, Sym):
        return f"[{d}]"
    return str(d)


# parsing ---------------------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")


class ParseError(ValueError):
    """A symbolic expression that does not parse; `offset` is where, in the text given."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset


def parse_expr(text: str) -> DimLike:
    """The expression in `text` (the inside of a `[...]`)."""
    p = _ExprParser(text)
    e = p.expr()
    p.skip()
    if p.pos != len(text):
        raise ParseError(f"unexpected '{text[p.pos]}' in symbolic dim '{text}'", p.pos)
    return e


class _ExprParser:
    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def take(self, ch: str) -> None:
        if self.peek() != ch:
            raise ParseError(f"expected '{ch}' in symbolic dim '{self.text}'", self.pos)
        self.pos += 1

    def expr(self) -> DimLike:
        v = self.term()
        while self.peek() in ("+", "-"):
            op = self.text[self.pos]
            self.pos += 1
            w = self.term()
            v = v + w if op == "+" else v - w
        return v

    def term(self) -> DimLike:
        v = self.factor()
        while self.peek() in ("*", "/", "%"):
            op = self.text[self.pos]
            self.pos += 1
            at = self.pos
            w = self.factor()
            if op != "*" and not isinstance(w, Sym) and int(w) <= 0:
                raise ParseError(f"'{op}' by {w} in symbolic dim '{self.text}': the divisor must be positive",
                                 at)
            v = v * w if op == "*" else floordiv(v, w) if op == "/" else mod(v, w)
        return v

    def factor(self) -> DimLike:
        c = self.peek()
        if c == "-":
            self.pos += 1
            return -self.factor()
        if c == "(":
            self.pos += 1
            v = self.expr()
            self.take(")")
            return v
        m = _TOKEN.match(self.text, self.pos)
        if not m or m.group(3) is not None:
            raise ParseError(f"expected a number or a name in symbolic dim '{self.text}'", self.pos)
        self.pos = m.end()
        if m.group(1):
            return int(m.group(1))
        name = m.group(2)
        if name in ("max", "min"):
            self.take("(")
            a = self.expr()
            self.take(",")
            b = self.expr()
            self.take(")")
            return smax(a, b) if name == "max" else smin(a, b)
        if name in RESERVED:
            raise ParseError(f"'{name}' cannot name a symbolic dim", m.start(2))
        return Sym.symbol(name)
