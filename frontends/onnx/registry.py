"""ONNX converters by op type. A converter is a function named after the ONNX op, taking the builder, the
node's inputs (Tensors, None for an absent optional input) and its attributes as keyword arguments with
the spec's defaults:

    @converter("Gemm")
    def Gemm(b, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0): ...

`since` is the first opset the converter handles; opset differences inside that range are explicit in
the converter (`b.opset`). Attributes a converter does not name are reported as unsupported. Ops of
another domain name it (`@converter("QLinearAdd", domain="com.microsoft")`); `since` is then unchecked.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

FAMILIES = ("elementwise", "nn", "norm", "resize", "linalg", "tensor", "reduce", "misc", "attention",
            "quantize", "quantize_ms", "fused_ms", "recurrent", "control", "signal", "detection")
DEFAULT_DOMAINS = ("", "ai.onnx")
TRAINING_DOMAIN = "ai.onnx.preview.training"  # Momentum, Adagrad, Adam: pure math, converted like the rest


@dataclass(frozen=True)
class Converter:
    op_type: str
    domain: str
    fn: Callable
    since: int
    attributes: frozenset[str]
    takes_any_attribute: bool


CONVERTERS: dict[str, Converter] = {}
_loaded = False


def _key(op_type: str, domain: str) -> str:
    return op_type if domain in (*DEFAULT_DOMAINS, TRAINING_DOMAIN) else f"{domain}:{op_type}"


def converter(op_type: str, since: int = 1, domain: str = "") -> Callable[[Callable], Callable]:
    def register(fn: Callable) -> Callable:
        params = inspect.signature(fn).parameters.values()
        kw = frozenset(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)
        any_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        key = _key(op_type, domain)
        if key in CONVERTERS:
            raise ValueError(f"converter for {key} registered twice")
        CONVERTERS[key] = Converter(op_type, domain, fn, since, kw, any_kw)
        return fn

    return register


def get_converter(op_type: str, domain: str = "") -> Converter | None:
    global _loaded
    if not _loaded:
        _loaded = True
        for fam in FAMILIES:
            importlib.import_module(f"tessel.frontends.onnx.ops.{fam}")
    return CONVERTERS.get(_key(op_type, domain))
