"""OpenCL C kernel templates, one module per op family; each registers its ops in `base.TEMPLATES`."""

from __future__ import annotations

import importlib

FAMILIES = ("elementwise", "reduce", "scan", "norm", "movement", "gather", "pool", "gemm", "conv",
            "conv_transpose", "resize", "attention", "recurrent", "qlinear", "fused")
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
