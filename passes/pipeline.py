"""Pipeline strings (`canonicalize,fold-constants{size-limit=1024},cse`) and the -O levels."""

from __future__ import annotations

import difflib
import re
import typing

from ..ir.diagnostics import Diagnostic, DiagnosticError
from .manager import Pass, get_pass, pass_names

CLEANUP = "canonicalize,fold-constants,cse,canonicalize,dce"
PATTERNS = "recognize-gelu,recognize-layernorm,recognize-softmax,recognize-attention"
ALGEBRAIC = ("fold-batchnorm,fold-pad,decompose-conv-transpose,cancel-transposes,simplify-broadcasts,"
             "unflatten-gemm,merge-sibling-matmuls")
LAYOUT = "propagate-layout{layout=nchwc}"

HALF = "emulate-f16{types=f16+bf16,intermediates=f32}"
"""f16 / bf16 models compute in f32 between their half edges (emulate-f16's docstring), so they fuse as
their f32 originals do."""
O_LEVELS: dict[int, str] = {
    0: "",
    1: CLEANUP,
    2: f"fold-qdq,{HALF},{CLEANUP},fold-lookup,{PATTERNS},{ALGEBRAIC},{CLEANUP},{LAYOUT},{CLEANUP},fuse,dce",
    3: f"fold-qdq,{HALF},{CLEANUP},fold-lookup,{PATTERNS},{ALGEBRAIC},{CLEANUP},{LAYOUT},{CLEANUP},"
       "fuse{recompute=true},dce",
}
"""-O1 cleans up; -O2 (what `tessel compile` runs) first turns quantized contractions into integer ops
(fold-qdq, before fold-constants folds a dequantize of constant weights) and tabulates the elementwise
chains of one 8-bit tensor left between them (fold-lookup), then adds pattern
recognition, algebraic folding, NCHWc layout propagation and fusion; -O3 also recomputes cheap
multi-use producers inside each consumer's kernel instead of storing them."""

WEIGHT_PRECISIONS = ("f32", "f16", "bf16")


def level_pipeline(level: int, weights: str = "f32") -> str:
    """The -O`level` pipeline; with f16 / bf16 `weights`, convert-precision runs before fuse (after the
    passes that fold into or merge weights), or last at -O1."""
    text = O_LEVELS[level]
    if weights == "f32":
        return text
    step = f"convert-precision{{weights={weights}}}"
    if ",fuse" in text:
        return text.replace(",fuse", f",{step},fuse", 1)
    return f"{text},{step}" if text else step


_ELEMENT = re.compile(r"\s*([a-z0-9][a-z0-9\-]*)\s*(\{([^{}]*)\})?\s*(,|$)")


class PipelineError(DiagnosticError):
    def __init__(self, message: str):
        super().__init__(Diagnostic("error", message))


def parse_pipeline(text: str) -> list[Pass]:
    """The passes of a pipeline string, options applied; raises PipelineError naming the problem."""
    passes: list[Pass] = []
    text = text.strip()
    if text.startswith("builtin.module(") and text.endswith(")"):
        text = text[len("builtin.module("):-1]
    pos = 0
    while pos < len(text):
        m = _ELEMENT.match(text, pos)
        if not m or m.end() == pos:
            raise PipelineError(
                f"malformed pass pipeline at '{text[pos : pos + 30]}' (expected pass{{opt=value}})"
            )
        passes.append(make_pass(m.group(1), m.group(3)))
        pos = m.end()
        if m.group(4) == "," and pos >= len(text):
            raise PipelineError("pass pipeline ends with ','")
    return passes


def make_pass(name: str, options: str | None) -> Pass:
    cls = get_pass(name)
    if cls is None:
        close = difflib.get_close_matches(name, pass_names(), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else "; see --list-passes"
        raise PipelineError(f"unknown pass '{name}'{hint}")
    fields = {f.name.replace("_", "-"): f for f in cls.options()}
    kwargs: dict[str, typing.Any] = {}
    for item in (options or "").split(","):
        item = item.strip()
        if not item:
            continue
        key, eq, value = item.partition("=")
        key = key.strip()
        if key not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise PipelineError(f"pass '{name}' has no option '{key}' (options: {known})")
        if not eq:
            raise PipelineError(f"option '{key}' of pass '{name}' needs a value: {key}=...")
        kwargs[fields[key].name] = v = _convert(name, key, value.strip(), fields[key].type)
        low = fields[key].metadata.get("min", 0)  # no option counts below zero; a field may ask for more
        if isinstance(v, int) and not isinstance(v, bool) and v < low:
            raise PipelineError(f"option '{key}' of pass '{name}' must be at least {low}, got {v}")
    return cls(**kwargs)


def _convert(pass_name: str, key: str, value: str, type_: typing.Any) -> typing.Any:
    t = (
        type_
        if not isinstance(type_, str)
        else {"int": int, "float": float, "bool": bool, "str": str}.get(type_, str)
    )
    try:
        if t is bool:
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return value.lower() in ("true", "1")
        return t(value)
    except ValueError:
        want = {int: "an integer", float: "a number", bool: "true or false"}.get(t, "a string")
        raise PipelineError(f"option '{key}' of pass '{pass_name}' must be {want}, got '{value}'") from None


def pipeline_spec(passes: list[Pass]) -> str:
    return ",".join(p.spec() for p in passes)
