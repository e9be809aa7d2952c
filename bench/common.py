"""What the bench scripts (bench.py, compare_ort.py, graph_stats.py) share: onnxruntime's session options
as `make bench` runs it, tessel's import and optimization of an ONNX model, and the profiled twin of a
settled executable (bench/ is not a package: each script puts this directory on sys.path)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

ORT_THREADS = 2
"""onnxruntime's intra-op threads: the machine's two cores, as tessel's device has."""

RTOL, ATOL = 1e-3, 1e-4
"""How close tessel's outputs must be to onnxruntime's (np.allclose) for a bench to call a model correct."""


def ort_options(**settings: Any) -> Any:
    """onnxruntime SessionOptions as the benches run it (ORT_THREADS threads, warnings off), with
    `settings` (e.g. enable_profiling=True) set on top."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = ORT_THREADS
    opts.log_severity_level = 3
    for key, value in settings.items():
        setattr(opts, key, value)
    return opts


def cpu_model() -> str:
    """The processor's model name (recorded with every result: schedules and peaks differ between CPUs)."""
    import platform
    from pathlib import Path

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def openvino_model(data: bytes) -> Any:
    """OpenVINO's CPU plugin compiling the ONNX model `data` as a user running it for latency would:
    f32 inference precision, the latency hint, ORT_THREADS threads; None when openvino is not installed
    (it is in the `bench` extra only)."""
    try:
        import openvino as ov
    except ImportError:
        return None
    core = ov.Core()
    return core.compile_model(core.read_model(data, b""), "CPU", {
        "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": ORT_THREADS,
        "INFERENCE_PRECISION_HINT": "f32"})


def optimize(data: bytes, name: str, level: int) -> Any:
    """The ONNX model `data` imported (as `<name>.onnx`) and run through tessel's -O`level` pipeline."""
    from tessel.frontends.onnx.importer import import_model
    from tessel.passes.manager import PassManager
    from tessel.passes.pipeline import O_LEVELS, parse_pipeline

    module = import_model(data, f"{name}.onnx")
    PassManager(parse_pipeline(O_LEVELS[level])).run(module)
    return module


def profiled_twin(exe: Any) -> Any:
    """A profiling Executable of `exe`'s func on its device, placed as `exe` settled (the pool, inline, a
    hybrid, or cooperative: then each kernel's span inside the persistent kernels)."""
    from tessel.targets.opencl.runtime import Executable

    prof = Executable(exe.module, exe.func, exe.device, profile=True, execution="pool")
    prof.place(exe.placement)
    return prof


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temp file in its folder and a rename: a reader never sees half a
    file, and a failed write leaves the old one (the folder is made if missing; the file gets mode 644)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
