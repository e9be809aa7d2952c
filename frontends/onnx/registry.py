"""ONNX converters by op type. A converter is a function named after the ONNX op, taking the builder, the
node's inputs (Tensors, None for an absent optional input) and its attributes as keyword arguments with
the spec's defaults:

    @converter("Gemm")
    def Gemm(b, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0): ...

`since` is the first opset the converter handles; opset differences inside that range are explicit in
the converter (`b.opset`). Attributes a converter does not name are reported as unsupported.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

FAMILIES = ("elementwise", "nn", "norm", "resize", "linalg", "tensor", "reduce", "misc", "attention",
            "quantize", "recurrent", "control", "signal", "detection")


@dataclass(frozen=True)
class Converter:
    op_type: str
    fn: Callable
    since: int
    attributes: frozenset[str]
    takes_any_attribute: bool


CONVERTERS: dict[str, Converter] = {}
_loaded = False


def converter(op_type: str, since: int = 1) -> Callable[[Callable], Callable]:
    def register(fn: Callable) -> Callable:
        params = inspect.signature(fn).parameters.values()
        kw = frozenset(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)
        any_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        if op_type in CONVERTERS:
            raise ValueError(f"converter for {op_type} registered twice")
        CONVERTERS[op_type] = Converter(op_type, fn, since, kw, any_kw)
        return fn

    return register


def get_converter(op_type: str) -> Converter | None:
    global _loaded
    if not _loaded:
        _loaded = True
        for fam in FAMILIES:
            importlib.import_module(f"tessel.frontends.onnx.ops.{fam}")
    return CONVERTERS.get(op_type)
