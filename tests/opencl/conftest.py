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
