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
