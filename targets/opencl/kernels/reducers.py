"""The pieces every reduction-like OpenCL template is built from (reduce.py, scan.py, norm.py, gemm.py,
attention.py, recurrent.py, gate.py, the fused regions): element types and literals, `V` (C spellings for
values handled N lanes at a time), combining and folding lanes, accumulators flushed every BLOCK adds, and
the `Reducer` of each reduce_* op (identity, per-element map, finish).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....ir.types import TensorType
from .base import DeviceInfo, NotLowerable, ctype

BLOCK = 256  # float adds into a partial accumulator before it is flushed into the outer one
SIZES = {"float": 4, "double": 8, "char": 1, "uchar": 1, "short": 2, "ushort": 2, "int": 4, "uint": 4,
         "long": 8, "ulong": 8}
LIMITS = {"char": ("CHAR_MIN", "CHAR_MAX"), "uchar": ("0", "UCHAR_MAX"), "short": ("SHRT_MIN", "SHRT_MAX"),
          "ushort": ("0", "USHRT_MAX"), "int": ("INT_MIN", "INT_MAX"), "uint": ("0", "UINT_MAX"),
          "long": ("LONG_MIN", "LONG_MAX"), "ulong": ("0", "ULONG_MAX"),
          "float": ("-INFINITY", "INFINITY"), "double": ("-INFINITY", "INFINITY")}


def elem_ctype(t: TensorType, device: DeviceInfo) -> str:
    """The OpenCL type of `t`'s elements, refusing what the templates cannot compute with."""
    c = ctype(t)
    if c not in SIZES:
        raise NotLowerable(f"element type {t.dtype} is not supported by this template")
    if c == "double" and not device.fp64:
        raise NotLowerable("f64 needs cl_khr_fp64")
    return c


def is_float(c: str) -> bool:
    return c in ("float", "double")


def vec_width(c: str, device: DeviceInfo) -> int:
    """Lanes of one SIMD register (the device's float width, scaled by element size), at most 16."""
    return max(1, min(16, device.vector_width * 4 // SIZES[c]))


def flit(v: float, c: str) -> str:
    """A C literal of value `v` in float type `c`, exact for that type."""
    if np.isnan(v):
        return "NAN"
    if np.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    x = np.float32(v) if c == "float" else np.float64(v)
    if x == int(x) and abs(x) < 2**24:
        text = f"{int(x)}.0"
    elif 1e-4 <= abs(x) < 1e6:
        text = np.format_float_positional(x, unique=True, trim="0")
    else:
        text = np.format_float_scientific(x, unique=True, trim="0")
    return text + ("f" if c == "float" else "")


@dataclass(frozen=True)
class V:
    """C spellings for values of `c` handled `w` lanes at a time (w == 1: scalars)."""

    c: str
    w: int

    @property
    def t(self) -> str:
        return self.c if self.w == 1 else f"{self.c}{self.w}"

    def load(self, ptr: str, off: str) -> str:
        return f"{ptr}[{off}]" if self.w == 1 else f"vload{self.w}(0, {ptr} + {off})"

    def store(self, val: str, ptr: str, off: str) -> str:
        return f"{ptr}[{off}] = {val};" if self.w == 1 else f"vstore{self.w}({val}, 0, {ptr} + {off});"

    def splat(self, scalar: str) -> str:
        return scalar if self.w == 1 else f"({self.t})({scalar})"

    def to(self, val: str, c: str) -> str:
        """`val` reinterpreted as type `c` of the same size (a modular conversion for integers)."""
        if c == self.c:
            return val
        return f"({c})({val})" if self.w == 1 else f"as_{c}{self.w}({val})"

    def pick(self, a: str, b: str, cond_vec: str, cond_scalar: str) -> str:
        """`b` where the condition holds, else `a`."""
        if self.w == 1:
            return f"({cond_scalar}) ? {b} : {a}"
        return f"select({a}, {b}, {cond_vec})"


def combine(kind: str, v: V, a: str, b: str) -> str:
    """The C expression combining accumulator `a` with value `b`; max/min propagate NaN as numpy does."""
    if kind == "add":
        return f"{a} + {b}"
    if kind == "mul":
        return f"{a} * {b}"
    if not is_float(v.c):
        return f"{kind}({a}, {b})"
    rel, srel = ("isgreater", ">") if kind == "max" else ("isless", "<")
    return v.pick(a, b, f"{rel}({b}, {a}) | isnan({b})", f"{b} {srel} {a} || isnan({b})")


def fold_lanes(kind: str, v: V, acc: str) -> list[str]:
    """Statements folding vector `acc` into the scalar `{acc}_s` by halves (a pairwise order)."""
    lines, w, name = [], v.w, acc
    while w > 1:
        half = V(v.c, w // 2)
        lo, hi = (f"{name}.s0", f"{name}.s1") if w == 2 else (f"{name}.lo", f"{name}.hi")
        new = f"{acc}_{w // 2}" if w > 2 else f"{acc}_s"
        lines.append(f"{half.t} {new} = {combine(kind, half, lo, hi)};")
        name, w = new, w // 2
    if v.w == 1:
        lines.append(f"{v.t} {acc}_s = {acc};")
    return lines


def indent(lines: list[str], n: int = 1) -> list[str]:
    return ["    " * n + ln if ln else ln for ln in lines]


def kernel_source(comment: str, params: list[str], body: list[str]) -> str:
    head = f"// {comment}\n__kernel void KERNEL({', '.join(params)}) {{\n"
    return head + "\n".join(indent(body)) + "\n}\n"


class Blocked:
    """An accumulator `name` of type `v`; when `blocked`, adds go to `{name}_p`, flushed every BLOCK adds."""

    def __init__(self, name: str, v: V, kind: str, init: str, blocked: bool) -> None:
        self.name, self.v, self.kind, self.init, self.blocked = name, v, kind, init, blocked

    def decl(self) -> list[str]:
        lines = [f"{self.v.t} {self.name} = {self.v.splat(self.init)};"]
        if self.blocked:
            lines.append(f"{self.v.t} {self.name}_p = {self.v.splat(self.init)};")
        return lines

    def add(self, val: str) -> list[str]:
        tgt = f"{self.name}_p" if self.blocked else self.name
        return [f"{tgt} = {combine(self.kind, self.v, tgt, val)};"]

    def flush(self) -> list[str]:
        if not self.blocked:
            return []
        return [f"{self.name} += {self.name}_p; {self.name}_p = {self.v.splat(self.init)};"]


def counted(accs: list[Blocked], counter: str = "nadd") -> list[str]:
    """After one add: flush the blocked accumulators every BLOCK adds (counted in int `counter`)."""
    flush = [s for a in accs for s in a.flush()]
    if not flush:
        return []
    return [f"if (++{counter} == {BLOCK}) {{", *indent(flush), f"    {counter} = 0;", "}"]



# the reducers of reduce_* --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reducer:
    kind: str  # combine: add | mul | max | min
    pre: str = "{}"  # applied to each element in its own type (|x| must see the sign)
    post: str = "{}"  # applied after the conversion to the accumulator type
    finish: str = "{}"  # on the accumulated value; {n} is the reduced count as a literal

    def identity(self, c: str) -> str:
        if self.kind == "add":
            return flit(0.0, c) if is_float(c) else "0"
        if self.kind == "mul":
            return flit(1.0, c) if is_float(c) else "1"
        return LIMITS[c][0 if self.kind == "max" else 1]


REDUCERS = {
    "reduce_sum": Reducer("add"),
    "reduce_mean": Reducer("add", finish="{} / {n}"),
    "reduce_max": Reducer("max"),
    "reduce_min": Reducer("min"),
    "reduce_prod": Reducer("mul"),
    "reduce_l1": Reducer("add", pre="abs"),
    "reduce_l2": Reducer("add", post="{0} * {0}", finish="sqrt({})"),
    "reduce_sum_square": Reducer("add", post="{0} * {0}"),
    "reduce_log_sum_exp": Reducer("add"),  # special-cased: a max pass, then a sum of exp(x - max)
}


def acc_ctype(r: Reducer, c: str) -> str:
    """Integer sums and products accumulate unsigned, so they wrap like the reference without UB."""
    if r.kind in ("add", "mul") and not is_float(c):
        return "u" + c if not c.startswith("u") else c
    return c


def apply_pre(r: Reducer, c: str, val: str) -> str:
    if r.pre == "abs":
        return f"fabs({val})" if is_float(c) else f"abs({val})"
    return r.pre.format(val)


def finish_expr(r: Reducer, v: V, val: str, n: int, c: str) -> str:
    out = r.finish.format(val, n=flit(float(n), c) if is_float(c) else n)
    return V(v.c, v.w).to(out, c) if v.c != c else out


def element(r: Reducer, c: str, a: str, v: V, load: str) -> str:
    """One loaded element as the accumulator sees it: pre, conversion, post."""
    val = apply_pre(r, c, load)
    val = V(c, v.w).to(val, a) if a != c else val
    return r.post.format(val)


def axis_split(x: TensorType, axis: int) -> tuple[int, int, int]:
    """(outer, n, inner): the sizes before, at and after `axis`."""
    d = x.dims
    return int(np.prod(d[:axis], dtype=np.int64)), d[axis], int(np.prod(d[axis + 1:], dtype=np.int64))
