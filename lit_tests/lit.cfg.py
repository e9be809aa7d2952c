# lit configuration: tessel's tools and FileCheck on PATH, %filecheck and %roundtrip substitutions.
import os
import shutil
import sys

import lit.formats

config.name = "tessel"
config.test_format = lit.formats.ShTest()  # lit 23 refuses ShTest(True)
config.suffixes = [".tsl", ".test"]
config.excludes = ["Inputs", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)

bindir = os.path.dirname(sys.executable)  # the venv that runs lit has the tessel-* tools
config.environment["PATH"] = os.pathsep.join([bindir, config.environment.get("PATH", os.environ.get("PATH", ""))])
for var in ("HOME", "TMPDIR", "POCL_CACHE_DIR", "PYTHONDONTWRITEBYTECODE"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
config.environment["COLUMNS"] = "120"

filecheck = shutil.which("FileCheck") or os.path.join(bindir, "filecheck")
config.substitutions.append(("%filecheck", f"{filecheck} --enable-var-scope"))
config.substitutions.append(("%roundtrip", f"{sys.executable} {os.path.join(config.test_source_root, 'roundtrip.py')}"))
config.substitutions.append(("%python", sys.executable))
for var in ("TESSEL_CACHE_DIR", "XDG_CACHE_HOME", "OCL_ICD_VENDORS"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

# `REQUIRES: opencl` for tests that run kernels; codegen with --device=generic needs no device
try:
    import pyopencl

    if any(p.get_devices() for p in pyopencl.get_platforms()):
        config.available_features.add("opencl")
except Exception:
    pass
