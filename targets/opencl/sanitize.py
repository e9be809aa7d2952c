"""Bounds-checked kernels: `tessel-codegen --check-bounds` rewrites each generated kernel so that every
global and `__local` load and store is checked against its buffer's extent before it happens.

The lowering knows every buffer a launch binds (its operands, results and scratch, in bytes), so each
kernel's extents are compile-time constants. The rewrite works on the kernel's tokens:

- every pointer gets the root it derives from: a kernel's buffer parameter, a `__local` array, or (in a
  helper function) a pointer parameter whose root travels in hidden parameters `tsl_b_X` (the root's
  base), `tsl_n_X` (its bytes) and `tsl_a_X` (its kernel argument index), appended at every call;
- `p[i]`, `*(p + i)`, `vloadN(o, p)`, `vstoreN(v, o, p)` and the `_half` forms become a `TSL_G` / `TSL_L`
  macro that checks the bytes `[p + i, p + i + width)` against the root and, when they fall outside,
  records the run's first violation in the error buffer (the step, the argument, the byte offset, the
  extent, the source line) through an out-of-line call and redirects the access to a sink (a load reads
  garbage, a store writes nowhere);
- each kernel takes two more arguments, the error buffer `tsl_err` and its launch's step index
  `tsl_step`, which the runtime binds (runtime.Executable reports a violation as a KernelFault); a
  helper function takes them too.

The checks cost: on PoCL a checked model runs about 2-3x slower and builds 2-3x slower (measured: a
branch-free variant that kept the violation in private state compiled several times slower still).

A pointer whose root cannot be told from the text (two candidate roots, a cast from an integer) is not
guessed at: instrumenting fails with a SanitizeError naming the kernel and the declaration.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

TOKEN = re.compile(
    r"(?P<ws>\s+|//[^\n]*|/\*.*?\*/)"
    r"|(?P<pp>\#[^\n]*)"
    r"|(?P<num>0[xX][0-9a-fA-F]+[uUlL]*|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFuUlLhH]*)"
    r"|(?P<id>[A-Za-z_]\w*)"
    r"|(?P<str>\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*')"
    r"|(?P<op><<=|>>=|->|\+\+|--|[-+*/%&|^!=<>]=|&&|\|\||<<|>>|[-+*/%&|^!=<>~?:;,.(){}\[\]])",
    re.S,
)
SCALARS = {"bool": 1, "char": 1, "uchar": 1, "short": 2, "ushort": 2, "half": 2, "int": 4, "uint": 4,
           "float": 4, "long": 8, "ulong": 8, "double": 8, "size_t": 8, "void": 1}
TYPE = re.compile(r"(bool|char|uchar|short|ushort|int|uint|long|ulong|float|double|half|size_t|void)"
                  r"(2|3|4|8|16)?$")
QUALIFIERS = {"const", "restrict", "__restrict", "volatile", "static", "inline", "unsigned", "signed"}
SPACES = {"__global": "global", "global": "global", "__local": "local", "local": "local",
          "__constant": "constant", "constant": "constant", "__private": "private", "private": "private"}
DECLARATOR = ("const", "restrict", "__restrict", "volatile")
ASSIGN = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="}
VALUE_END = {")", "]"}
VECTOR = re.compile(r"v(load|store)(a?)(_half)?(2|3|4|8|16)?(_rte|_rtz|_rtp|_rtn)?$")
SINK_OFFSET = 128
"""Bytes of the error buffer's record; the sink that suppressed accesses go to follows it."""
ERROR_BUFFER_BYTES = SINK_OFFSET + 256
RECORD = ("count", "step", "arg", "kind", "line", "esize", "off_lo", "off_hi", "extent_lo", "extent_hi",
          "width")
"""The error buffer's ints, in order (kind: 1 = store, 2 = __local; arg: a kernel argument index, or
-1 - j for the kernel's j-th __local array)."""

PREAMBLE = """\
// tessel --check-bounds: TSL_G/TSL_L check one access against its root buffer; tsl_fail records the first
// violation in tsl_err, and the access goes to the sink after the record instead
__attribute__((noinline)) static void tsl_fail(__global int* e, int step, long off, long width, long extent,
                                               int arg, int kind, int line, int esize) {
    if (atomic_inc(e) == 0) {
        e[1] = step; e[2] = arg; e[3] = kind; e[4] = line; e[5] = esize;
        e[6] = (int)off; e[7] = (int)(off >> 32); e[8] = (int)extent; e[9] = (int)(extent >> 32);
        e[10] = (int)width;
    }
}
#define TSL_IN(off, W, N) ((off) >= 0 && (off) + (long)(W) <= (long)(N))
{macros}
"""
_MACRO = ("#define TSL_{L}(T, P, R, K, W) (TSL_IN(({S} const char*)(P) - tsl_b_##R, W, tsl_n_##R) ? (P) : "
          "(tsl_fail(tsl_err, tsl_step, ({S} const char*)(P) - tsl_b_##R, W, tsl_n_##R, tsl_a_##R, {K}, "
          "__LINE__, sizeof(T)), {SINK}))\n")
PREAMBLE = PREAMBLE.replace("{macros}\n", "".join(  # one line each (the printer keeps a program raw)
    _MACRO.format(L=L, S=S, K=K, SINK=SINK) for L, S, K, SINK in (
        ("G", "__global", "K", f"(__global T*)((__global char*)tsl_err + {SINK_OFFSET})"),
        ("L", "__local", "(K) | 2", "(__local T*)tsl_lsink"))))


class SanitizeError(Exception):
    """A kernel the rewrite cannot check soundly."""


@dataclass
class Ptr:
    space: str  # global, local, constant, private
    elem: str  # the scalar type it points to
    root: str | None  # the name whose tsl_b_/tsl_n_/tsl_a_ describe its buffer (None: not checked)


@dataclass
class Func:
    name: str
    kernel: bool
    head: tuple[int, int]  # token range of the parameter list, without the parentheses
    body: tuple[int, int]  # token range inside the braces
    params: list[tuple[str, Ptr | None]] = field(default_factory=list)


def tokenize(source: str) -> list[tuple[str, str]]:
    out, at = [], 0
    while at < len(source):
        m = TOKEN.match(source, at)
        if m is None:
            raise SanitizeError(f"unexpected character {source[at]!r} in the kernel source")
        out.append((m.lastgroup or "op", m.group()))
        at = m.end()
    return out


def size_of(t: str) -> int:
    """Bytes of an OpenCL scalar or vector type (a 3-vector takes 4 slots)."""
    m = TYPE.match(t)
    assert m is not None
    n = int(m.group(2) or 1)
    return SCALARS[m.group(1)] * (4 if n == 3 else n)


class Kernels:
    """One template's source (one or more functions), rewritten with checks."""

    def __init__(self, source: str, extents: Sequence[int]):
        self.toks = tokenize(source)
        self.sig = [i for i, (k, _) in enumerate(self.toks) if k not in ("ws", "pp")]
        self.next_sig = {}
        for a, b in zip(self.sig, self.sig[1:], strict=False):
            self.next_sig[a] = b
        self.prev_sig = {b: a for a, b in self.next_sig.items()}
        self.extents = list(extents)
        self.funcs = self._functions()
        self.helpers = {f.name: f for f in self.funcs if not f.kernel}
        self.locals: list[str] = []  # the current kernel's __local arrays, in order
        self.kernel = ""

    # structure ----------------------------------------------------------------------------------------
    def text(self, i: int) -> str:
        return self.toks[i][1]

    def nxt(self, i: int) -> int:
        return self.next_sig.get(i, len(self.toks))

    def prv(self, i: int) -> int:
        return self.prev_sig.get(i, -1)

    def match(self, i: int) -> int:
        """The index of the bracket closing the one at i."""
        pairs = {"(": ")", "[": "]", "{": "}"}
        want, depth = pairs[self.text(i)], 0
        j = i
        while j < len(self.toks):
            t = self.text(j)
            if self.toks[j][0] == "op":
                if t in pairs:
                    depth += 1
                elif t in (")", "]", "}"):
                    depth -= 1
                    if depth == 0:
                        if t != want:
                            raise SanitizeError("unbalanced brackets in the kernel source")
                        return j
            j += 1
        raise SanitizeError("unbalanced brackets in the kernel source")

    def _functions(self) -> list[Func]:
        funcs, depth, start = [], 0, 0
        i = 0
        while i < len(self.toks):
            kind, t = self.toks[i]
            if kind == "op" and t == "(" and depth == 0:
                close = self.match(i)
                after = self.nxt(close)
                if after < len(self.toks) and self.text(after) == "{":
                    head = [self.text(j) for j in range(start, i) if self.toks[j][0] == "id"]
                    end = self.match(after)
                    kernel = "__kernel" in head or "kernel" in head
                    f = Func(head[-1], kernel, (i + 1, close), (after + 1, end))
                    f.params = self._params(i + 1, close)
                    funcs.append(f)
                    i, start = end + 1, end + 1
                    continue
                i = close + 1
                continue
            if kind == "op" and t in (";", "}") and depth == 0:
                start = i + 1
            if kind == "op" and t == "{":
                i = self.match(i) + 1
                continue
            i += 1
        return funcs

    def _split(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Token ranges of the comma-separated items in [lo, hi) (commas at bracket depth 0)."""
        parts, depth, start = [], 0, lo
        for j in range(lo, hi):
            if self.toks[j][0] != "op":
                continue
            t = self.text(j)
            if t in "([{":
                depth += 1
            elif t in ")]}":
                depth -= 1
            elif t == "," and depth == 0:
                parts.append((start, j))
                start = j + 1
        if any(self.toks[j][0] not in ("ws", "pp") for j in range(start, hi)):
            parts.append((start, hi))
        return parts

    def _params(self, lo: int, hi: int) -> list[tuple[str, Ptr | None]]:
        out: list[tuple[str, Ptr | None]] = []
        for a, b in self._split(lo, hi):
            words = [self.text(j) for j in range(a, b) if self.toks[j][0] != "ws"]
            if words == ["void"]:
                continue
            name = words[-1]
            if "*" not in words:
                out.append((name, None))
                continue
            space = next((SPACES[w] for w in words if w in SPACES), "private")
            elem = next((w for w in words if TYPE.match(w) and w != "void"), None)
            if elem is None:
                raise SanitizeError(f"pointer parameter '{name}' of a type the checks do not know")
            out.append((name, Ptr(space, elem, name if space in ("global", "local") else None)))
        return out

    # rewriting ----------------------------------------------------------------------------------------
    def rewrite(self) -> str:
        out: list[str] = []
        at = 0
        for f in self.funcs:
            self.kernel = f.name
            self.locals = []
            out.append("".join(t for _, t in self.toks[at : f.head[1]]))
            out.append(self._hidden_params(f))
            out.append("".join(t for _, t in self.toks[f.head[1] : f.body[0]]))
            scope: dict[str, Ptr | None] = dict(f.params)
            prologue = self._prologue(f)
            body = self.walk(f.body[0], f.body[1], [scope], statements=True)
            if "TSL_L(" in body:
                if not f.kernel:
                    raise SanitizeError(f"helper function '{f.name}' accesses __local memory")
                prologue = " __local ulong tsl_lsink[32];" + prologue
            out.append(prologue + body)
            at = f.body[1]
        out.append("".join(t for _, t in self.toks[at:]))
        return "".join(out)

    def _hidden_params(self, f: Func) -> str:
        extra = []
        if not f.kernel:
            for name, p in f.params:
                if p is not None and p.root is not None:
                    if p.space != "global":
                        raise SanitizeError(f"helper function '{f.name}' takes a __local pointer '{name}'")
                    extra += [f"__global const char* tsl_b_{name}", f"const ulong tsl_n_{name}",
                              f"const int tsl_a_{name}"]
        extra += ["__global int* restrict tsl_err", "const int tsl_step"]
        empty = not self._split(*f.head) or [self.text(j) for j in range(*f.head)
                                             if self.toks[j][0] != "ws"] == ["void"]
        return ("" if empty else ", ") + ", ".join(extra)

    def _prologue(self, f: Func) -> str:
        if not f.kernel:
            return ""
        decls = []
        for i, (name, p) in enumerate(f.params):
            if p is None or p.root is None:
                continue
            if p.space != "global":
                raise SanitizeError(f"kernel '{f.name}' takes a __local pointer '{name}'")
            if i >= len(self.extents):
                raise SanitizeError(f"kernel '{f.name}' has no extent for its argument '{name}'")
            decls.append(f" __global const char* tsl_b_{name} = (__global const char*){name};"
                         f" const ulong tsl_n_{name} = {int(self.extents[i])}UL;"
                         f" const int tsl_a_{name} = {i};")
        return "".join(decls)

    def walk(self, lo: int, hi: int, scopes: list[dict[str, Ptr | None]], statements: bool = False) -> str:
        """The text of tokens [lo, hi) with every access checked; `statements`: [lo, hi) is a block
        (declarations and braces open scopes), else an expression."""
        out: list[str] = []
        i = lo
        start = statements
        while i < hi:
            kind, t = self.toks[i]
            if kind in ("ws", "pp"):
                out.append(t)
                i += 1
                continue
            if statements and start and self._is_decl(i, scopes):
                end, text = self._declaration(i, hi, scopes)
                out.append(text)
                i, start = end, True
                continue
            start = False
            if kind == "op" and statements:
                if t == "{":
                    scopes = [*scopes, {}]
                    start = True
                elif t == "}":
                    scopes = scopes[:-1]
                    start = True
                elif t == ";":
                    start = True
            if kind == "id" and t == "for" and statements:
                op = self.nxt(i)
                close = self.match(op)
                inner = [*scopes, {}]
                out.append(t + "".join(tt for _, tt in self.toks[i + 1 : op]) + "(")
                out.append(self.walk(op + 1, close, inner, statements=True) + ")")
                body_start = self.nxt(close)
                out.append("".join(tt for _, tt in self.toks[close + 1 : body_start]))
                if self.text(body_start) == "{":  # the loop's variables are in the body's scope
                    end = self.match(body_start)
                    out.append("{" + self.walk(body_start + 1, end, [*inner, {}], statements=True) + "}")
                    i = end + 1
                else:
                    i = self._statement_end(body_start, hi)
                    out.append(self.walk(body_start, i, inner, statements=True))
                start = True
                continue
            if kind == "id":
                done = self._access(i, hi, scopes, out)
                if done is not None:
                    i = done
                    continue
            if kind == "op" and t == "*" and self._unary(i):
                done = self._deref(i, hi, scopes, out)
                if done is not None:
                    i = done
                    continue
            out.append(t)
            i += 1
        return "".join(out)

    def _statement_end(self, i: int, hi: int) -> int:
        """The index after the statement starting at i (a braced block or up to its `;`)."""
        if self.text(i) == "{":
            return self.match(i) + 1
        if self.text(i) in ("for", "while", "if"):
            close = self.match(self.nxt(i))
            end = self._statement_end(self.nxt(close), hi)
            if self.text(i) == "if" and end < hi and self.text(self.nxt(end - 1)) == "else":
                end = self._statement_end(self.nxt(self.nxt(end - 1)), hi)
            return end
        j, depth = i, 0
        while j < hi:
            t = self.text(j)
            if self.toks[j][0] == "op":
                if t in "([{":
                    depth += 1
                elif t in ")]}":
                    depth -= 1
                elif t == ";" and depth == 0:
                    return j + 1
            j += 1
        return hi

    def _lookup(self, name: str, scopes: list[dict[str, Ptr | None]]) -> Ptr | None:
        for s in reversed(scopes):
            if name in s:
                return s[name]
        return None

    def _is_decl(self, i: int, scopes: list[dict[str, Ptr | None]]) -> bool:
        j, typed = i, False
        while j < len(self.toks):
            t = self.text(j)
            if self.toks[j][0] != "id":
                return False
            if t in QUALIFIERS or t in SPACES:
                j = self.nxt(j)
                continue
            if TYPE.match(t):
                typed = True
                j = self.nxt(j)
                break
            return False
        if not typed:
            return False
        while self.text(j) in ("*", "const", "restrict", "__restrict", "volatile"):
            j = self.nxt(j)
        return self.toks[j][0] == "id" and self.text(self.nxt(j)) != "("

    def _declaration(self, i: int, hi: int, scopes: list[dict[str, Ptr | None]]) -> tuple[int, str]:
        """Register the names a declaration at i declares (pointers with their roots); its text with
        the initializers checked, and the index after it."""
        words, j = [], i
        while self.text(j) in QUALIFIERS or self.text(j) in SPACES or TYPE.match(self.text(j)):
            words.append(self.text(j))
            j = self.nxt(j)
        space = next((SPACES[w] for w in words if w in SPACES), "private")
        base = next(w for w in words if TYPE.match(w))
        end = self._statement_end(i, hi) - 1  # the `;`
        out = ["".join(t for _, t in self.toks[i:j])]
        extras: list[str] = []
        for n, (a, b) in enumerate(self._split(j, end)):
            if n:
                out.append(",")
            k, stars = a, 0
            while self.text(k) in ("*", *DECLARATOR) or self.toks[k][0] == "ws":
                stars += self.text(k) == "*"
                k += 1
            name = self.text(k)
            eq = next((m for m in range(k, b) if self.text(m) == "=" and self.toks[m][0] == "op"), None)
            dims = self._dims(k + 1, eq if eq is not None else b)
            out.append("".join(t for _, t in self.toks[a:k]) + name)
            rest_to = eq if eq is not None else b
            out.append("".join(t for _, t in self.toks[k + 1 : rest_to]))
            ptr: Ptr | None = None
            if stars and base != "void":
                elem = base
                root = self._root(eq + 1, b, scopes, f"'{name}'") if eq is not None else None
                if space in ("global", "local") and root is None:
                    if eq is not None:
                        raise SanitizeError(
                            f"kernel '{self.kernel}': pointer '{name}' has no buffer it derives from")
                    # assigned later (perhaps one of several buffers): its root travels with it
                    root = name
                    extras.append(f" __{space} const char* tsl_b_{name} = 0; ulong tsl_n_{name} = 0; "
                                  f"int tsl_a_{name} = 0;")
                ptr = Ptr(space, elem, root)
            elif dims is not None and space == "local":
                elem, size = base, dims * size_of(base)
                extras.append(f" __local const char* tsl_b_{name} = (__local const char*){name}; "
                              f"const ulong tsl_n_{name} = {size}UL; const int tsl_a_{name} = "
                              f"{-1 - len(self.locals)};")
                self.locals.append(name)
                ptr = Ptr("local", elem, name)
            if eq is not None:
                out.append("=" + self.walk(eq + 1, b, scopes))
            scopes[-1][name] = ptr
        out.append(";" + "".join(extras))
        return end + 1, "".join(out)

    def _dims(self, lo: int, hi: int) -> int | None:
        """The element count of an array declarator's `[N][M]...` in [lo, hi), None when not an array."""
        text = "".join(t for k, t in self.toks[lo:hi] if k != "ws")
        if not text.startswith("["):
            return None
        n = 1
        for d in re.findall(r"\[([^\]]*)\]", text):
            if not re.fullmatch(r"[\d\s+*()-]+", d):
                raise SanitizeError(f"kernel '{self.kernel}': array size '{d}' is not a constant")
            n *= int(eval(d, {"__builtins__": {}}))  # digits and + - * ( ) only
        return n

    def _root(self, lo: int, hi: int, scopes: list[dict[str, Ptr | None]], what: str) -> str | None:
        """The root of the pointer expression [lo, hi): the root of its one pointer name (a name indexed
        with [] is a value, unless its address is taken)."""
        roots = set()
        for k in range(lo, hi):
            if self.toks[k][0] != "id":
                continue
            p = self._lookup(self.text(k), scopes)
            if p is None or p.root is None:
                continue
            if self.text(self.nxt(k)) == "[" and self.text(self.prv(k)) != "&":
                continue
            roots.add(p.root)
        if len(roots) > 1:
            raise SanitizeError(f"kernel '{self.kernel}': {what} derives from more than one buffer "
                                f"({', '.join(sorted(roots))})")
        return next(iter(roots), None)

    def _pure(self, lo: int, hi: int) -> None:
        for k in range(lo, hi):
            if self.toks[k][0] == "op" and (self.text(k) in ASSIGN or self.text(k) in ("++", "--")):
                raise SanitizeError(f"kernel '{self.kernel}': an index with a side effect "
                                    f"('{''.join(t for _, t in self.toks[lo:hi]).strip()}')")

    def _unary(self, i: int) -> bool:
        p = self.prv(i)
        if p < 0:
            return True
        k, t = self.toks[p]
        return not (k in ("id", "num") and t != "return") and t not in VALUE_END

    def _macro(self, ptr: Ptr, expr: str, kind: int, width: str) -> str:
        m = "TSL_G" if ptr.space == "global" else "TSL_L"
        return f"{m}({ptr.elem}, {expr}, {ptr.root}, {kind}, {width})"

    def _store(self, close: int, start: int) -> int:
        after, before = self.text(self.nxt(close)), self.text(self.prv(start))
        return int(after in ASSIGN or after in ("++", "--") or before in ("++", "--"))

    def _access(self, i: int, hi: int, scopes: list[dict[str, Ptr | None]], out: list[str]) -> int | None:
        name = self.text(i)
        after = self.nxt(i)
        if after >= hi:
            return None
        if self.text(after) == "(":
            if VECTOR.match(name):
                return self._vector(i, after, scopes, out)
            if name in self.helpers:
                return self._call(i, after, scopes, out)
            return None
        ptr = self._lookup(name, scopes)
        if ptr is None or ptr.root is None:
            return None
        if self.text(after) == "=" and self.toks[after][0] == "op":
            end = self._statement_end(after, hi) - 1
            root = self._root(self.nxt(after), end, scopes, f"'{name}'")
            if ptr.root != name:
                if root not in (ptr.root, None):
                    raise SanitizeError(
                        f"kernel '{self.kernel}': pointer '{name}' is pointed at another buffer")
                return None
            if root is None:
                raise SanitizeError(f"kernel '{self.kernel}': pointer '{name}' is assigned no buffer")
            value = self.walk(after + 1, end, scopes)
            out.append(f"{name} ={value}, tsl_b_{name} = tsl_b_{root}, tsl_n_{name} = tsl_n_{root}, "
                       f"tsl_a_{name} = tsl_a_{root}")
            return end
        if self.text(after) != "[":
            return None
        close = self.match(after)
        if self.text(self.prv(i)) == "&" and self._unary(self.prv(i)):
            out.append(name + "[" + self.walk(after + 1, close, scopes) + "]")
            return close + 1
        self._pure(after + 1, close)
        index = self.walk(after + 1, close, scopes)
        at = self._macro(ptr, f"{name} + ({index.strip()})", self._store(close, i), f"sizeof({ptr.elem})")
        out.append(f"(*{at})")
        return close + 1

    def _deref(self, i: int, hi: int, scopes: list[dict[str, Ptr | None]], out: list[str]) -> int | None:
        j = self.nxt(i)
        if self.text(j) == "(":
            end = self.match(j)
            lo, hi2 = j + 1, end
        elif self.toks[j][0] == "id" and self.text(self.nxt(j)) not in ("[", "("):
            lo, hi2, end = j, j + 1, j
        else:
            return None
        root = self._root(lo, hi2, scopes, "a dereferenced pointer")
        if root is None:
            return None
        ptr = next(p for k in range(lo, hi2) if self.toks[k][0] == "id"
                   and (p := self._lookup(self.text(k), scopes)) is not None and p.root == root
                   and not (self.text(self.nxt(k)) == "[" and self.text(self.prv(k)) != "&"))
        self._pure(lo, hi2)
        expr = self.walk(lo, hi2, scopes).strip()
        out.append(f"(*{self._macro(ptr, f'({expr})', self._store(end, i), f'sizeof({ptr.elem})')})")
        return end + 1

    def _vector(self, i: int, op: int, scopes: list[dict[str, Ptr | None]], out: list[str]) -> int | None:
        m = VECTOR.match(self.text(i))
        assert m is not None
        close = self.match(op)
        args = self._split(op + 1, close)
        store = m.group(1) == "store"
        if len(args) != (3 if store else 2):
            return None
        (plo, phi), (olo, ohi) = args[-1], args[-2]
        root = self._root(plo, phi, scopes, f"the pointer of {self.text(i)}")
        if root is None:
            return None
        ptr = next(p for k in range(plo, phi) if self.toks[k][0] == "id"
                   and (p := self._lookup(self.text(k), scopes)) is not None and p.root == root)
        n = int(m.group(4) or 1)
        stride = 4 if (m.group(2) and n == 3) else n  # vloada_half3 steps by 4
        elem = "half" if m.group(3) else ptr.elem
        esize = size_of(elem)
        self._pure(olo, ohi)
        self._pure(plo, phi)
        offset = self.walk(olo, ohi, scopes).strip()
        pointer = self.walk(plo, phi, scopes).strip()
        checked = Ptr(ptr.space, elem, root)
        at = self._macro(checked, f"({pointer}) + ({offset}) * {stride}", int(store), str(n * esize))
        value = (self.walk(*args[0], scopes).strip() + ", ") if store else ""
        out.append(f"{self.text(i)}({value}0, {at})")
        return close + 1

    def _call(self, i: int, op: int, scopes: list[dict[str, Ptr | None]], out: list[str]) -> int:
        f = self.helpers[self.text(i)]
        close = self.match(op)
        args = self._split(op + 1, close)
        texts = [self.walk(a, b, scopes) for a, b in args]
        extra = []
        for (name, p), (a, b) in zip(f.params, args, strict=False):
            if p is None or p.root is None:
                continue
            root = self._root(a, b, scopes, f"argument '{name}' of {f.name}")
            if root is None:
                raise SanitizeError(f"kernel '{self.kernel}': argument '{name}' of {f.name} has no buffer")
            extra += [f"tsl_b_{root}", f"tsl_n_{root}", f"tsl_a_{root}"]
        extra += ["tsl_err", "tsl_step"]
        joined = ",".join(texts)
        out.append(f"{self.text(i)}({joined}{', ' if args else ''}{', '.join(extra)})")
        return close + 1


def instrument(source: str, extents: Sequence[int]) -> str:
    """`source` (one template's kernels and helpers, kernel parameters bound to buffers of `extents`
    bytes in order) with every global and __local access checked; raises SanitizeError."""
    return Kernels(source, extents).rewrite()


@dataclass
class Violation:
    """The first out-of-bounds access of a run, as the error buffer recorded it."""

    count: int
    step: int
    arg: int
    store: bool
    local: bool
    line: int
    esize: int
    offset: int  # bytes from the root's start
    extent: int  # the root's bytes
    width: int  # bytes the access reads or writes

    @staticmethod
    def read(record: Sequence[int]) -> Violation | None:
        r = [int(x) for x in record[: len(RECORD)]]
        if r[0] == 0:
            return None
        offset = (r[6] & 0xFFFFFFFF) | (r[7] << 32)
        extent = (r[8] & 0xFFFFFFFF) | (r[9] << 32)
        return Violation(r[0], r[1], r[2], bool(r[3] & 1), bool(r[3] & 2), r[4], max(r[5], 1), offset, extent,
                         r[10])


def kernel_names(source: str, kernel: str) -> tuple[list[str], list[str]]:
    """The parameter names and the __local arrays (in declaration order, as the checks number them) of
    `kernel` in an instrumented program; empty lists where the program has no such kernel."""
    try:
        k = Kernels(source, [])
    except SanitizeError:
        return [], []
    f = next((f for f in k.funcs if f.kernel and f.name == kernel), None)
    if f is None:
        return [], []
    arrays = []
    for i in range(*f.body):
        if SPACES.get(k.text(i)) != "local" or k.toks[i][0] != "id":
            continue
        j = k.nxt(i)
        while k.text(j) in QUALIFIERS or TYPE.match(k.text(j)):
            j = k.nxt(j)
        for a, b in k._split(j, k._statement_end(j, f.body[1]) - 1):  # each declarator: `name[N]` is one
            while a < b and k.toks[a][0] in ("ws", "pp"):
                a += 1
            if a < b and k.toks[a][0] == "id" and k.text(k.nxt(a)) == "[" and k.text(a) != "tsl_lsink":
                arrays.append(k.text(a))
    return [name for name, _ in f.params], arrays
