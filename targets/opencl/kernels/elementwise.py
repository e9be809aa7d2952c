"""Elementwise kernels: unary math and activations, broadcasting arithmetic, comparisons and logic, where,
clip, cast, is_nan, the bitwise ops and identity — one generator driven by `RULES`, a table of C expression
templates, one entry per op.

A template names its operands `{a}`, `{b}`, `{c}`, the computing type `{T}` (the last operand's C type),
the result type `{R}`, attribute-derived values by name (`{alpha}`) and numeric literals as `{0.5}`, which
become literals of `{T}` (`0.5f`, `(char)1`); literals are typed because OpenCL refuses `int` scalars
next to `char16` vectors. `expr()` fills a template for one element (or one vector): the fusion pass
builds a chained kernel from the same strings.

The generated kernel coalesces the output dims where every operand's broadcast pattern agrees, so after
it each operand is contiguous (stride 1) or broadcast (stride 0) along the innermost dim. A work-item
handles one chunk of one row of that dim: its operands' row offsets are computed once per chunk (no index
decomposition per element, which is the per-channel bias fast path), then a vector of 16 (8 for 64-bit
types) is loaded with `vloadN` (a broadcast operand splats a scalar) and stored with `vstoreN`, with a
scalar tail; ops whose vector form differs (masks of -1 from comparisons, casts, where) run a scalar loop
over the chunk instead.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ....ir.ops.quant import qadd_constants, qmul_ratio
from ....ir.ops.registry import Sig
from ....ir.types import UNSIGNED_TYPES, float_max, int_range
from .base import (
    Ctx,
    DeviceInfo,
    Kernel,
    Lowered,
    NotLowerable,
    ctype,
    index_type,
    launch_1d,
    require_static,
    template,
)

Params = Callable[[Sig], dict[str, str | float]]  # attribute-derived placeholders: templates or numbers


@dataclass(frozen=True)
class Rule:
    """The C expression templates of one op, by the kind of its (last) operand: `f` float, `i` signed,
    `u` unsigned (default: `i`), `b` i1 (default: `u`); None where the op does not take that kind."""

    f: str | None = None
    i: str | None = None
    u: str | None = None
    b: str | None = None
    vec: str = "fiu"  # kinds whose template is also valid on OpenCL vector types
    params: Params | None = None  # attribute-derived placeholder values

    def text(self, kind: str) -> str | None:
        chain = {"f": (self.f,), "i": (self.i,), "u": (self.u, self.i), "b": (self.b, self.u, self.i)}[kind]
        return next((t for t in chain if t is not None), None)


def _clamp(x: str, lo: str, hi: str) -> str:
    """min(max(x, lo), hi) with NaN propagating (as numpy's minimum/maximum); `x` may repeat."""
    low = f"({x} < {lo} ? {lo} : {x})"
    return f"({low} > {hi} ? {hi} : {low})"


def _same(template: str, vec: str = "fiu", params: Params | None = None) -> Rule:
    """One template for float and integer operands."""
    return Rule(f=template, i=template, vec=vec, params=params)


def _softplus(x: str) -> str:  # log(1 + e^x) without overflow, as numpy's logaddexp(x, 0)
    return f"(fmax({x}, {{0}}) + log1p(exp(-fabs({x}))))"


def _attr_params(*names: str) -> Callable[[Sig], dict[str, str | float]]:
    return lambda sig: {n: float(sig[n]) for n in names}


def _clip_params(sig: Sig) -> dict[str, str | float]:
    """An infinite bound is the type's finite limit (see the reference); integer bounds truncate."""
    dtype = sig.operands[0].dtype
    lo, hi = sig["min"], sig["max"]
    if sig.operands[0].is_float:
        big = float_max(dtype)
        return {"lo": max(float(lo), -big), "hi": min(float(hi), big)}
    tlo, thi = int_range(dtype)
    return {"lo": tlo if math.isinf(lo) else min(max(int(lo), tlo), thi),
            "hi": thi if math.isinf(hi) else min(max(int(hi), tlo), thi)}


def _shift_params(sig: Sig) -> dict[str, str | float]:
    """ONNX BitShift-28: amounts outside [0, bits) give 0 (-1 for a right shift of a negative value)."""
    t = sig.operands[0]
    bits = 8 * t.np_dtype.itemsize
    out = f"(({{b}} < {{0}}) | ({{b}} >= {{{bits}}}))"
    if sig["direction"] == "left":  # through the unsigned type: signed overflow wraps
        return {"shift": f"({out} ? {{0}} : ({{T}})(({{U}}){{a}} << {{b}}))"}
    fill = "{0}" if t.dtype in UNSIGNED_TYPES else "({a} < {0} ? {-1} : {0})"
    return {"shift": f"({out} ? {fill} : {{a}} >> {{b}})"}


def _cast_params(sig: Sig) -> dict[str, str | float]:
    """Float to int truncates toward zero; to the narrow ints through int (as numpy on x86: 300.0 -> 44 as
    i8, -1.0 -> 255 as ui8), to ui32 through long; to i1 is `!= 0` (NaN is true)."""
    src, dst = sig.operands[0], sig.results[0]
    r = ctype(dst)
    if src.dtype == dst.dtype:
        return {"cast": "{a}"}
    if dst.dtype == "i1":
        return {"cast": "({a} != {0})"}
    if src.is_float and not dst.is_float:
        if r == "ulong":
            return {"cast": "({a} < {0} ? (ulong)(long){a} : (ulong){a})"}
        via = {"uint": "long", "long": ""}.get(r, "int")
        return {"cast": f"({r})({via}){{a}}" if via else f"({r}){{a}}"}
    return {"cast": f"({r}){{a}}"}


# erf and exact GELU in f32 --------------------------------------------------------------------------------
# PoCL's erf and erfc are scalar library calls (~80 us per 32k floats against ~8 for exp), so the f32 forms
# are rational approximations, vectorizable and branch-free; f64 keeps the built-ins. The coefficients are
# minimax in relative error, fitted by Lawson-weighted least squares against math.erf / math.erfc
# (tests/opencl/test_elementwise.py checks each bound in f64 and the kernels in f32).
def _horner(coefs: Sequence[float], x: str) -> str:
    """c0 + x * (c1 + x * (...)) as a template fragment of `{c}` literals; `x` is repeated (pass a name or
    a side-effect-free expression: the C compiler merges the copies)."""
    out = f"{{{coefs[-1]!r}}}"
    for c in reversed(coefs[:-1]):
        out = f"({{{c!r}}} + {x} * {out})"
    return out


# Phi(-t) = erfc(t / sqrt 2) / 2 = exp(-t^2 / 2) * P(t) / Q(t), t in [0, 9]: relative error 1.7e-7 (about
# 5e-7 evaluated in f32). Past 9 the rational is held at t = 9 (Phi(-9) ~ 1e-19; the exp carries the decay).
PHI_TAIL_P = (0.4999999138, 0.3489219343, 0.1121851632, 0.01534216965)
PHI_TAIL_Q = (1.0, 1.495719225, 0.9178603942, 0.2808658576, 0.03846759466)
PHI_TAIL_MAX = 9.0
# erf(z) = z * P(z^2) / Q(z^2), z clamped to [-4, 4]: relative error 2.5e-8 (about 4e-7, 6 ulp, in f32);
# 1 - erf(4) = 1.5e-8 is under half an f32 ulp of 1.
ERF_P = (1.128379139, 0.1935452133, 0.05310176978, 0.00388335199, 0.0002845663428, 1.986784424e-06)
ERF_Q = (1.0, 0.504857535, 0.1153500662, 0.01520726637, 0.001185573602, 3.742021995e-05)
ERF_MAX = 4.0


def _phi_tail(x: str) -> str:
    """Phi(-|x|) as a template fragment: never cancels, so it keeps its relative accuracy for large |x|."""
    t = f"fmin(fabs({x}), {{{PHI_TAIL_MAX!r}}})"
    return f"(exp({{-0.5}} * {x} * {x}) * {_horner(PHI_TAIL_P, t)} / {_horner(PHI_TAIL_Q, t)})"


# gelu(x) = x * Phi(x) with Phi(x) = 1 - Phi(-x) for x > 0: only Phi(-|x|) <= 1/2 is evaluated, so x << 0
# (a tiny product) is accurate, and +inf gives inf, -inf gives -inf * 0 = NaN (as the reference), NaN NaN.
_GELU_ERF_F32 = f"{{a}} * ({{a}} > {{0}} ? {{1}} - {_phi_tail('{a}')} : {_phi_tail('{a}')})"
_ERF_Z = f"clamp({{a}}, {{{-ERF_MAX!r}}}, {{{ERF_MAX!r}}})"  # clamp drops NaN: the select puts it back
_ERF_F32 = f"(isnan({{a}}) ? {{a}} : {_ERF_Z} * {_horner(ERF_P, f'{_ERF_Z} * {_ERF_Z}')} / " \
           f"{_horner(ERF_Q, f'{_ERF_Z} * {_ERF_Z}')})"


def _gelu_params(sig: Sig) -> dict[str, str | float]:
    if sig["approximate"] == "tanh":
        return {"gelu": "{a} / ({1} + exp({-1.5957691216057308} * ({a} + {0.044715} * {a} * {a} * {a})))"}
    if sig.operands[0].dtype == "f32":
        return {"gelu": _GELU_ERF_F32}
    return {"gelu": "{0.5} * {a} * erfc(-{a} * {0.7071067811865476})"}  # erfc: no cancellation for x << 0


def _erf_params(sig: Sig) -> dict[str, str | float]:
    return {"erf": _ERF_F32 if sig.operands[0].dtype == "f32" else "erf({a})"}


def _quantize_params(sig: Sig) -> dict[str, str | float]:
    """clamp(i32(rint(x / scale)) + zero_point) as the reference: the quotient converted to int as x86
    does (NaN, infinities and values past int's range give INT_MIN; a comparison that is false for NaN
    guards it), the zero point added with int wrap-around (through uint), then clamped."""
    w = ctype(sig.operands[0])
    lo, hi = int_range(sig.operands[2].dtype)
    big = "2147483648.0" + ("f" if w == "float" else "")
    r = "rint({a} / {b})"
    i = f"(({r} >= -{big} && {r} < {big}) ? (int){r} : INT_MIN)"
    return {"q": f"clamp((int)((uint){i} + (uint)(int){{c}}), {lo}, {hi})"}


def _qadd_params(sig: Sig) -> dict[str, str | float]:
    """qadd as its reference (onnxruntime's QLinearAdd): two float32 fmas from the integers, rounded half
    to even and clamped to the type; the constants exact (hexadecimal float32 literals)."""
    rac, rbc, fixed = (f"{float(v).hex()}f" for v in qadd_constants(sig))
    lo, hi = int_range(sig.operands[0].dtype)
    v = f"fma((float){{a}}, {rac}, fma((float){{b}}, {rbc}, {fixed}))"
    return {"q": f"(int)clamp(rint({v}), {float(lo)!r}f, {float(hi)!r}f)"}


def _qmul_params(sig: Sig) -> dict[str, str | float]:
    """qmul as its reference (onnxruntime's QLinearMul): the integer product in float times the ratio,
    then plus the zero point, each rounded (the bitcast between them keeps OpenCL C's default
    FP_CONTRACT from fusing them into an fma), rounded half to even and clamped to the type."""
    ratio, zc = f"{float(qmul_ratio(sig)).hex()}f", f"{float(sig['zero_point'])!r}f"
    lo, hi = int_range(sig.operands[0].dtype)
    prod = (f"(float)(((int){{a}} - {int(sig['a_zero_point'])}) * ((int){{b}} - {int(sig['b_zero_point'])}))"
            f" * {ratio}")
    v = f"as_float(as_uint({prod})) + {zc}"
    return {"q": f"(int)clamp(rint({v}), {float(lo)!r}f, {float(hi)!r}f)"}


_INT_DIV = "(({b} == {0} | {b} == {-1}) ? {1} : {b})"  # a divisor that cannot trap; the guarded cases:

RULES: dict[str, Rule] = {
    # unary arithmetic (integers too) and math built-ins
    "identity": Rule(f="{a}", i="{a}", vec="fiub"),
    "neg": _same("-{a}"),
    "abs": Rule(f="fabs({a})", i="({a} < {0} ? -{a} : {a})", u="{a}"),
    "sign": _same("({a} > {0} ? {1} : {a} < {0} ? {-1} : {a})"),  # NaN and +-0 pass through
    "relu": Rule(f="({a} < {0} ? {0} : {a})", i="({a} < {0} ? {0} : {a})", u="{a}"),
    **{name: Rule(f=f"{name}({{a}})") for name in (
        "sqrt", "exp", "log", "tanh", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
        "acosh", "atanh", "floor", "ceil")},
    "erf": Rule(f="{erf}", params=_erf_params),
    "round": Rule(f="rint({a})"),  # half to even: the default rounding mode
    "reciprocal": Rule(f="{1} / {a}"),
    "sigmoid": Rule(f="{1} / ({1} + exp(-{a}))"),
    "leaky_relu": Rule(f="({a} >= {0} ? {a} : {a} * {alpha})", params=_attr_params("alpha")),
    "elu": Rule(f="({a} > {0} ? {a} : {alpha} * expm1({a}))", params=_attr_params("alpha")),
    "selu": Rule(f="{gamma} * ({a} > {0} ? {a} : {alpha} * expm1({a}))",
                 params=_attr_params("alpha", "gamma")),
    "softplus": Rule(f=_softplus("{a}")),
    "softsign": Rule(f="{a} / ({1} + fabs({a}))"),
    "hard_sigmoid": Rule(f=_clamp("({alpha} * {a} + {beta})", "{0}", "{1}"),
                         params=_attr_params("alpha", "beta")),
    "hard_swish": Rule(f="{a} * " + _clamp("({a} / {6} + {0.5})", "{0}", "{1}")),
    "mish": Rule(f=f"{{a}} * tanh({_softplus('{a}')})"),
    "gelu": Rule(f="{gelu}", params=_gelu_params),
    "clip": _same(_clamp("{a}", "{lo}", "{hi}"), params=_clip_params),
    "cast": Rule(f="{cast}", i="{cast}", vec="", params=_cast_params),
    # binary arithmetic; integer div and mod keep the reference's answers for b == 0 and b == -1
    "add": _same("{a} + {b}"),
    "sub": _same("{a} - {b}"),
    "mul": _same("{a} * {b}"),
    "div": Rule(f="{a} / {b}",
                i=f"({{b}} == {{0}} ? ({{a}} < {{0}} ? {{a}} + {{1}} : {{a}}) : {{b}} == {{-1}} ? -{{a}} "
                  f": {{a}} / {_INT_DIV})",
                u="({b} == {0} ? {a} : {a} / ({b} == {0} ? {1} : {b}))"),
    "mod": Rule(f="fmod({a}, {b})",  # the sign of a, like C's %
                i=f"(({{b}} == {{0}} | {{b}} == {{-1}}) ? {{0}} : {{a}} % {_INT_DIV})",
                u="({b} == {0} ? {0} : {a} % ({b} == {0} ? {1} : {b}))",
                vec="iu"),  # PoCL 3.1's double8 fmod returns wrong lanes when another lane is inf or NaN
    # integer pow in double, rounded: a correctly rounded pow is exact there, NVIDIA's is within 2 ulp
    # (3 ** 1 came out 2.9999999999999996, truncated to 2); no vector form (double8 pow: as mod)
    "pow": Rule(f="pow({a}, {b})", i="({T})rint(pow((double){a}, (double){b}))", vec=""),
    "max": Rule(f="(({a} > {b} | {a} != {a}) ? {a} : {b})", i="({a} > {b} ? {a} : {b})"),
    "min": Rule(f="(({a} < {b} | {a} != {a}) ? {a} : {b})", i="({a} < {b} ? {a} : {b})"),
    "prelu": _same("({a} < {0} ? {a} * {b} : {a})"),
    # comparisons and logic: scalar 0/1 results (vector comparisons give -1)
    **{name: Rule(f=f"({{a}} {op} {{b}})", i=f"({{a}} {op} {{b}})", vec="") for name, op in (
        ("equal", "=="), ("less", "<"), ("less_equal", "<="), ("greater", ">"), ("greater_equal", ">="))},
    "and": Rule(b="({a} && {b})", vec=""),
    "or": Rule(b="({a} || {b})", vec=""),
    "xor": Rule(b="(!{a} != !{b})", vec=""),
    "not": Rule(b="(!{a})", vec=""),
    "where": Rule(f="({a} ? {b} : {c})", i="({a} ? {b} : {c})", vec=""),
    "is_nan": Rule(f="isnan({a})", vec=""),
    # quantization: the zero point (last operand) picks the kind; dequantize computes in float
    "quantize": Rule(i="{q}", vec="", params=_quantize_params),
    "dequantize": Rule(i="(((float){a} - (float){c}) * (float){b})", vec=""),
    "qadd": Rule(i="{q}", vec="", params=_qadd_params),
    "qmul": Rule(i="{q}", vec="", params=_qmul_params),
    # integer bit operations
    "bitwise_and": Rule(i="{a} & {b}"),
    "bitwise_or": Rule(i="{a} | {b}"),
    "bitwise_xor": Rule(i="{a} ^ {b}"),
    "bitwise_not": Rule(i="~{a}"),
    "bit_shift": Rule(i="{shift}", vec="", params=_shift_params),
}


# filling a template ----------------------------------------------------------------------------------------
_PLACEHOLDER = re.compile(r"\{(-?\d[\d.]*(?:e[-+]?\d+)?|\w+)\}")
_UNSIGNED = {"char": "uchar", "short": "ushort", "int": "uint", "long": "ulong"}
_INT_SUFFIX = {"long": "L", "ulong": "UL", "uint": "U"}


def literal(value: float, c: str) -> str:
    """`value` as a C literal of type `c` (float, double or an integer type), exactly as numpy's
    `dtype.type(value)` rounds it."""
    if c in ("float", "double"):
        v = float(value)
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        text = f"{np.float32(v)}f" if c == "float" else repr(v)
        return text if v >= 0 else f"({text})"
    v = int(value)
    if c == "long" and v == -(2**63):
        return "(long)(-9223372036854775807L - 1)"
    text = f"{v}{_INT_SUFFIX.get(c, '')}"
    return f"({c}){text}" if v >= 0 else f"({c})({text})"


def kind(dtype: str) -> str:
    """The template column of an element type: f(loat), i(nt), u(nsigned) or b(ool, i1)."""
    if dtype == "i1":
        return "b"
    if dtype in UNSIGNED_TYPES:
        return "u"
    return "f" if dtype.startswith("f") or dtype == "bf16" else "i"


def _rule(op_name: str, sig: Sig) -> tuple[Rule, str, str]:
    rule = RULES.get(op_name)
    if rule is None:
        raise NotLowerable(f"'{op_name}' is not an elementwise op")
    t = sig.operands[-1]
    text = rule.text(kind(t.dtype))
    if text is None:
        raise NotLowerable(f"'{op_name}' has no OpenCL form for {t.dtype} operands")
    return rule, kind(t.dtype), text


def vectorizable(op_name: str, sig: Sig) -> bool:
    """Whether `expr(..., width=N)` is valid: the op's template works on vectors and every operand and the
    result have one C type."""
    rule, k, _ = _rule(op_name, sig)
    return k in rule.vec and len({ctype(t) for t in [*sig.operands, *sig.results]}) == 1


QUANT_INTS = ("i8", "ui8", "i16", "ui16", "i32")


def converts(op_name: str, sig: Sig) -> bool:
    """Whether op `op_name` has a vector form that converts between types (`converting_expr`): dequantize
    of an integer to f32, quantize of f32 to an integer, with an f32 scale; qadd and qmul (their 8-bit
    operands to float and back)."""
    ops = sig.operands
    if op_name == "dequantize":
        return ops[0].dtype in QUANT_INTS and ops[1].dtype == "f32" and sig.results[0].dtype == "f32"
    if op_name == "quantize":
        return ops[0].dtype == "f32" and ops[1].dtype == "f32" and ops[2].dtype in QUANT_INTS
    return op_name in ("qadd", "qmul")  # 8-bit in and out, float32 between


def converting_expr(op_name: str, sig: Sig, operands: Sequence[str], width: int) -> str:
    """`width` lanes of quantize / dequantize (`converts`), each operand a vector of its own type: the
    scalar rules' arithmetic lane by lane (a comparison's -1 lanes choose), the result converted to its
    element type exactly (the quantized value is clamped within it first)."""
    a, b, c = (o if re.fullmatch(r"[\w.]+", o) else f"({o})" for o in [*operands, ""][:3])
    f, i, u = (f"{t}{width}" for t in ("float", "int", "uint"))
    if op_name in ("qadd", "qmul"):  # the scalar rules' float32 arithmetic, lane by lane
        lo, hi = int_range(sig.operands[0].dtype)
        if op_name == "qadd":
            rac, rbc, fixed = (f"{float(v).hex()}f" for v in qadd_constants(sig))
            v = f"fma(convert_{f}({a}), {rac}, fma(convert_{f}({b}), {rbc}, ({f})({fixed})))"
        else:
            za, zb = int(sig["a_zero_point"]), int(sig["b_zero_point"])
            prod = (f"convert_{f}((convert_{i}({a}) - {za}) * (convert_{i}({b}) - {zb})) * "
                    f"{float(qmul_ratio(sig)).hex()}f")
            v = f"as_{f}(as_{u}({prod})) + {float(sig['zero_point'])!r}f"
        q = f"convert_{i}(clamp(rint({v}), {float(lo)!r}f, {float(hi)!r}f))"
        return f"convert_{ctype(sig.results[0])}{width}({q})"
    if op_name == "dequantize":
        return f"((convert_{f}({a}) - convert_{f}({c})) * {b})"
    lo, hi = int_range(sig.operands[2].dtype)
    r = f"rint({a} / {b})"
    big = "2147483648.0f"
    q = f"select(({i})(INT_MIN), convert_{i}({r}), ({r} >= -{big}) & ({r} < {big}))"
    wrapped = f"as_{i}(as_{u}({q}) + as_{u}(convert_{i}({c})))"
    return f"convert_{ctype(sig.results[0])}{width}(clamp({wrapped}, {lo}, {hi}))"


def expr(op_name: str, sig: Sig, operands: Sequence[str], width: int = 1) -> str:
    """The C expression of one element of `op_name`'s result (of `width`-wide vectors when width > 1, which
    needs `vectorizable`). `operands` are C expressions of the operand element types; pass variable names,
    since a template may use an operand several times. The value converts to `ctype(result)` on
    assignment (comparisons, logic and is_nan give int 0/1). `sig.results` must be inferred (cast)."""
    rule, _, text = _rule(op_name, sig)
    if width > 1 and not vectorizable(op_name, sig):
        if converts(op_name, sig):
            return converting_expr(op_name, sig, operands, width)
        raise ValueError(f"'{op_name}' on {sig.operands[-1].dtype} has no vector form")
    t = ctype(sig.operands[-1])
    env = {"T": t, "U": _UNSIGNED.get(t, t), "R": ctype(sig.results[0]) if sig.results else t}
    for name, o in zip("abc", operands, strict=False):
        env[name] = o if re.fullmatch(r"[\w.]+", o) else f"({o})"
    params = rule.params(sig) if rule.params else {}

    def fill(m: re.Match[str]) -> str:
        key = m.group(1)
        if key in params:
            v = params[key]
            return _PLACEHOLDER.sub(fill, v) if isinstance(v, str) else literal(v, t)
        if key in env:
            return env[key]
        if key[0].isdigit() or key[0] == "-":
            return literal(float(key) if t in ("float", "double") else int(key), t)
        raise KeyError(f"'{op_name}' template names unknown '{key}'")

    return _group(_PLACEHOLDER.sub(fill, text))


def _group(s: str) -> str:
    """`s` in parentheses unless it is one name, one call or already one parenthesised group."""
    head = re.match(r"[\w.]*", s)
    rest = s[head.end():] if head else s
    if not rest:
        return s
    depth = 0
    for i, ch in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and (i < len(rest) - 1 or ch != ")"):
            return f"({s})"
    return s


# the kernel ------------------------------------------------------------------------------------------------
def vector_lanes(device: DeviceInfo, itemsize: int) -> int:
    """Lanes of one SIMD register for elements of `itemsize` bytes (the device's preferred float vector
    width, as the driver reports it, times 4 bytes: AVX-512 float16 / double8, AVX2 float8), at most 16
    (OpenCL's widest vector)."""
    return max(1, min(16, device.vector_width * 4 // itemsize))


LOOP_CHUNK = 16  # elements per work-item when the op runs a scalar loop


def coalesce(out: Sequence[int], operands: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """Output dims with unit dims dropped and neighbours merged wherever every operand is contiguous
    across them, and each operand's element strides over those dims (0 where it broadcasts)."""
    rank = len(out)
    per_operand = []
    for shape in operands:
        full = (1,) * (rank - len(shape)) + tuple(shape)
        rm = [int(np.prod(full[k + 1:], dtype=np.int64)) for k in range(rank)]
        per_operand.append([0 if full[k] == 1 else rm[k] for k in range(rank)])
    dims: list[int] = []
    strides: list[list[int]] = [[] for _ in operands]
    for k in range(rank):
        if out[k] == 1:
            continue
        if dims and all(s[-1] == p[k] * out[k] for s, p in zip(strides, per_operand, strict=True)):
            dims[-1] *= out[k]
            for s, p in zip(strides, per_operand, strict=True):
                s[-1] = p[k]
            continue
        dims.append(out[k])
        for s, p in zip(strides, per_operand, strict=True):
            s.append(p[k])
    if not dims:
        return [1], [[0] for _ in operands]
    return dims, strides


def offset(dims: Sequence[int], strides: Sequence[int], q: str) -> str:
    """The element offset, over coalesced `dims` with an operand's `strides`, of flat position `q`."""
    terms = []
    for k, (d, s) in enumerate(zip(dims, strides, strict=True)):
        if s == 0:
            continue
        inner = math.prod(dims[k + 1 :])
        t = f"({q})" if inner == 1 else f"(({q}) / {inner})"
        t = t if k == 0 else f"({t} % {d})"
        terms.append(t if s == 1 else f"{t} * {s}")
    return " + ".join(terms) or "0"


def _check_types(ctx: Ctx) -> None:
    require_static(*ctx.operands, *ctx.results)
    for t in [*ctx.operands, *ctx.results]:
        if t.dtype == "f16":
            raise NotLowerable("f16 arithmetic needs cl_khr_fp16 (not covered)")
        if t.dtype == "f64" and not ctx.device.fp64:
            raise NotLowerable("f64 needs cl_khr_fp64, which the device lacks")
        ctype(t)
    if ctx.op_name == "pow" and not ctx.operands[0].is_float and not ctx.device.fp64:
        raise NotLowerable("integer pow computes in double, which the device lacks")


def _row_offset(dims: list[int], strides: list[int]) -> str:
    """The element offset of an operand at the start of chunk `j` of output row `row`."""
    terms = []
    for k, (d, s) in enumerate(zip(dims[:-1], strides[:-1], strict=True)):
        if s == 0:
            continue
        inner = int(np.prod(dims[k + 1:-1], dtype=np.int64))
        term = "row" if inner == 1 else f"row / {inner}"
        term = term if k == 0 else f"{term} % {d}"
        terms.append(term if s == 1 else f"({term}) * {s}")
    if strides[-1]:
        terms.append("j")
    return " + ".join(terms) or "0"


def kernel(ctx: Ctx) -> tuple[Kernel, dict[str, int]]:
    """The kernel (source and launch sizes) and the schedule it chose."""
    out, sig = ctx.results[0], ctx.sig
    ins = ctx.operands
    dims, strides = coalesce(out.dims, [t.dims for t in ins])
    idx, L = index_type(*ins, out), dims[-1]
    rows = out.numel // L if out.numel else 0
    vec = vectorizable(ctx.op_name, sig) or converts(ctx.op_name, sig)
    width = vector_lanes(ctx.device, max(t.np_dtype.itemsize for t in (*ins, out))) if vec else 1
    width = int(ctx.schedule.get("vector", width)) if vec else 1
    if width not in (1, 2, 4, 8, 16):
        raise NotLowerable(f"schedule vector={width}: OpenCL vectors are 2, 4, 8 or 16 wide")
    if L < width:
        width = 1
    chunk = width if width > 1 else min(L, int(ctx.schedule.get("chunk", LOOP_CHUNK)))
    cpr = -(-L // chunk)
    items = rows * cpr
    t_out = ctype(out)
    args = [f"__global const {ctype(t)}* in{i}" for i, t in enumerate(ins)] + [f"__global {t_out}* out0"]
    what = expr(ctx.op_name, sig, [f"in{i}" for i in range(len(ins))])
    how = f"{t_out}{width} vectors" if width > 1 else f"a loop of {chunk}"
    lines = [f"// {ctx.op_name}: out0 = {what} -> {out} ({how} per work-item, rows of {L})",
             f"__kernel void KERNEL({', '.join(args)}) {{"]
    schedule = {"vector": width, "chunk": chunk, "rows": rows, "row_length": L}
    if items == 0:
        return Kernel("\n".join([*lines, "}"]), (0,), None), schedule
    launch = launch_1d(items, local=int(ctx.schedule.get("local", 64)))
    schedule["local"] = launch.local_size[0] if launch.local_size else 0
    body = [f"const {idx} g = get_global_id(0);"]
    if launch.global_size[0] > items:
        body.append(f"if (g >= {items}) return;")
    if rows == 1:  # one row: the chunk is the work-item
        body.append(f"const {idx} j = g * {chunk}, o = j;" if chunk > 1 else f"const {idx} j = g, o = j;")
    elif cpr == 1:  # one chunk per row
        body.append(f"const {idx} row = g, j = 0, o = row * {L};")
    else:
        body.append(f"const {idx} row = g / {cpr}, j = (g - row * {cpr}) * {chunk}, o = row * {L} + j;")
    full = [int(np.prod(dims[k + 1:], dtype=np.int64)) for k in range(len(dims))]
    offs = []
    for i, s in enumerate(strides):
        if s == full:
            offs.append("o")
        elif not any(s):
            offs.append("0")
        else:
            body.append(f"const {idx} o{i} = {_row_offset(dims, s)};")
            offs.append(f"o{i}")
    names = [f"x{i}" for i in range(len(ins))]

    def scalar_loop(count: str) -> list[str]:
        loads = [f"const {ctype(t)} {n} = in{i}[{offs[i]}{' + k' if strides[i][-1] else ''}];"
                 for i, (t, n) in enumerate(zip(ins, names, strict=True))]
        return [f"for (int k = 0; k < {count}; ++k) {{", *[f"    {ln}" for ln in loads],
                f"    out0[o + k] = ({t_out}){_group(expr(ctx.op_name, sig, names))};", "}"]

    if width > 1:
        tv = [f"{ctype(t)}{width}" for t in ins]
        loads = [f"const {tv[i]} {n} = vload{width}(0, in{i} + {offs[i]});" if strides[i][-1]
                 else f"const {tv[i]} {n} = ({tv[i]})(in{i}[{offs[i]}]);" for i, n in enumerate(names)]
        value = expr(ctx.op_name, sig, names, width)
        value = value[1:-1] if _group(value) == value and value.startswith("(") else value
        vector = [*loads, f"vstore{width}({value}, 0, out0 + o);"]
        if L % width == 0:
            body += vector
        else:
            body += [f"if (j + {width} <= {L}) {{", *[f"    {ln}" for ln in vector], "} else {",
                     *[f"    {ln}" for ln in scalar_loop(f"{L} - j")], "}"]
    elif L % chunk == 0:
        body += scalar_loop(str(chunk))
    else:
        body += [f"const int n = {L} - j < {chunk} ? {L} - j : {chunk};", *scalar_loop("n")]
    launch.source = "\n".join([*lines, *[f"    {ln}" for ln in body], "}"])
    return launch, schedule


@template(*RULES)
def elementwise(ctx: Ctx) -> Lowered:
    """Every op of `RULES`: one kernel over the (broadcast) output."""
    src, dst = (ctx.operands[0].dtype, ctx.results[0].dtype) if ctx.op_name == "cast" else ("", "")
    if "bf16" in (src, dst) or ("f16" in (src, dst) and not ctx.device.fp16):
        return half_cast(ctx)
    _check_types(ctx)
    _rule(ctx.op_name, ctx.sig)
    launch, schedule = kernel(ctx)
    return Lowered([launch], schedule=dict(schedule))


def half_cast(ctx: Ctx) -> Lowered:
    """A cast between a half type and f32 where OpenCL C cannot compute in it: f16 without cl_khr_fp16
    (read with vload_half, written with vstore_half_rte: round to nearest even, as numpy) and bf16 (the
    high half of a float: widened by a shift, narrowed rounding to nearest even, NaN kept quiet), 16
    elements a work-item."""
    src, dst = ctx.operands[0], ctx.results[0]
    require_static(src, dst)
    half = dst.dtype if dst.dtype in ("f16", "bf16") else src.dtype
    if {src.dtype, dst.dtype} - {half, "f32"}:
        raise NotLowerable(f"a cast from {src.dtype} to {dst.dtype} here goes through f32 (no OpenCL {half})")
    n = dst.numel
    it = index_type(src, dst)
    if src.dtype == dst.dtype:
        body, types = "out0[i] = in0[i];", ("ushort", "ushort")
    elif src.dtype == "f16":
        body, types = "out0[i] = vload_half(i, in0);", ("half", "float")
    elif dst.dtype == "f16":
        body, types = "vstore_half_rte(in0[i], i, out0);", ("float", "half")
    elif src.dtype == "bf16":
        body, types = "out0[i] = as_float((uint)in0[i] << 16);", ("ushort", "float")
    else:
        body = ("{ const uint u = as_uint(in0[i]); out0[i] = (u & 0x7fffffffu) > 0x7f800000u ? "
                "(ushort)((u >> 16) | 0x40u) : (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }")
        types = ("float", "ushort")
    k = launch_1d(n, 16)
    k.source = f"""// cast {src} -> {dst}
__kernel void KERNEL(__global const {types[0]}* restrict in0, __global {types[1]}* restrict out0) {{
    const {it} first = ({it})get_global_id(0) * 16;
    for ({it} i = first; i < first + 16 && i < {n}; ++i) {body}
}}
"""
    return Lowered([k])
