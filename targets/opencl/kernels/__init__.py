"""OpenCL C kernel templates, one module per op family; each registers its ops in `base.TEMPLATES`.

FAMILIES are the modules that register templates; the others are their helpers, imported by them
(base.py, reducers.py; conv_*.py and winograd.py by conv.py; fused_*.py and gate.py by fused.py).
"""

from __future__ import annotations

import importlib

FAMILIES = ("elementwise", "reduce", "scan", "norm", "movement", "gather", "pool", "gemm", "conv",
            "conv_transpose", "resize", "attention", "recurrent", "qlinear", "qsoftmax", "dynamic_quantize",
            "fused")
_loaded = False


def load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for fam in FAMILIES:
        try:
            importlib.import_module(f"{__name__}.{fam}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{fam}":
                raise
