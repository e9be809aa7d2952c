"""tessel: an optimizing compiler for neural-network graphs (ONNX in, textual IR, OpenCL out).

The Python API (api.py): `tessel.compile(model, ...)` gives a `CompiledModel` with onnxruntime's
`run(output_names, feeds)`; `tessel.load(path)` reads a compiled module back. Importing `tessel` loads
nothing else: the API's modules (onnx, pyopencl) load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_API = ("compile", "load", "CompiledModel", "InvalidArgument", "NodeArg")


def __getattr__(name: str) -> Any:
    if name in _API:  # imported by name: `import tessel` (and a type checker of ir/) stays light
        return getattr(importlib.import_module("tessel.api"), name)
    raise AttributeError(f"module 'tessel' has no attribute '{name}'")


__all__ = ["__version__", *_API]
