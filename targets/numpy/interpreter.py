"""The numpy target: `tessel-run --target=numpy`'s adapter to the reference interpreter.

The interpreter is the IR's semantics and lives in ir/interpreter.py, below passes, so that validation,
the onnx.backend adapter and the debugging tools need no target. This module only re-exports what the
numpy target runs (and keeps `tessel.targets.numpy.interpreter` importable); code outside targets/
imports `tessel.ir.interpreter`.
"""

from __future__ import annotations

from ...ir.interpreter import check_inputs, input_names, output_names, random_inputs, run_block, run_func

__all__ = ["check_inputs", "input_names", "output_names", "random_inputs", "run_block", "run_func"]
