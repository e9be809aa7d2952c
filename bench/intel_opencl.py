"""Intel's CPU OpenCL runtime, installed from PyPI, as a second OpenCL implementation for the benches.

    .venv/bin/pip install -e '.[intel-opencl]'      # intel-opencl-rt and its compiler runtime (~1 GB)
    .venv/bin/python bench/tune_bench.py --intel-opencl --suite zoo
    .venv/bin/python bench/bench.py --intel-opencl --suite light

The wheel puts `libintelocl.so` in the venv's `lib/` and its ICD file under the venv's `etc/`, where the
OpenCL ICD loader does not look. `register()` points the loader at a folder of its own holding every
vendor file it would read anyway (OCL_ICD_VENDORS, else /etc/OpenCL/vendors) plus one for the venv's
library, so PoCL stays visible beside it, and returns the device spec that picks it ('Intel(R) OpenCL').
It must run before the first OpenCL call of the process (the loader reads the variable once); child
processes inherit it.

The runtime is proprietary: an optional bench extra, never a test dependency or the default device. It
runs on AMD CPUs too (it checks for SSE4.2 and picks its code paths by CPUID), which makes it a second
compiler and thread pool on the same processor, one whose behaviour tessel's defaults were never fitted to.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

SPEC = "Intel(R) OpenCL"
"""The device spec (a substring of the platform's name) that picks the Intel runtime's CPU device."""
SYSTEM_VENDORS = Path("/etc/OpenCL/vendors")


def library() -> Path | None:
    """The venv's libintelocl.so, or None when intel-opencl-rt is not installed in it."""
    lib = Path(sys.prefix) / "lib" / "libintelocl.so"
    return lib if lib.exists() else None


def register() -> str:
    """Make the Intel runtime visible to this process and its children; its device spec. SystemExit with
    the install hint when it is not installed."""
    lib = library()
    if lib is None:
        raise SystemExit("intel-opencl-rt is not installed in this venv: .venv/bin/pip install -e "
                         "'.[intel-opencl]'")
    folder = Path(tempfile.mkdtemp(prefix="tessel-icd-"))
    current = Path(os.environ.get("OCL_ICD_VENDORS") or SYSTEM_VENDORS)
    if current.is_dir():
        for icd in sorted(current.glob("*.icd")):
            (folder / icd.name).write_text(icd.read_text())
    (folder / "tessel-intel-cpu.icd").write_text(f"{lib}\n")
    os.environ["OCL_ICD_VENDORS"] = str(folder)
    return SPEC
