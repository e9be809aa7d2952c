import pytest
from tessel.targets.opencl.device import opencl_available

REASON = opencl_available()


def pytest_collection_modifyitems(config, items):
    if REASON is None:
        return
    skip = pytest.mark.skip(reason=REASON)
    for item in items:
        if "tests/opencl/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)


def here():  # noqa: ANN201
    """The DeviceInfo of the device an Executable runs on by default: a module lowered for another one (the
    generic device) may place results at offsets this one cannot make sub-buffers of (a GPU: 512 bytes)."""
    from tessel.targets.opencl import device as dev

    return dev.device_info(dev.pick_device())


def pocl_probe(tmp_path, script: str) -> str:  # noqa: ANN001
    """The output of the Python `script` run in a child process whose PoCL kernel cache is `tmp_path`
    (what it builds and launches lands there, for a test to disassemble); skips unless the device is
    PoCL's and objdump is installed."""
    import os
    import shutil
    import subprocess
    import sys

    from tessel.targets.opencl import device as dev

    if opencl_available() is not None or shutil.which("objdump") is None:
        pytest.skip("needs an OpenCL device and objdump")
    if "Portable Computing Language" not in dev.pick_device().platform.name:
        pytest.skip("reads PoCL's kernel cache")
    env = {**os.environ, "POCL_CACHE_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          check=True).stdout
