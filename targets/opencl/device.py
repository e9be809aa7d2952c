"""Finding OpenCL devices, and what tessel needs to know about one."""

from __future__ import annotations

import functools
import hashlib
from typing import Any

from .kernels.base import DeviceInfo

INSTALL_HINT = (
    "no OpenCL platform found: install one (on Debian/Ubuntu: apt-get install pocl-opencl-icd), "
    "or run on the reference interpreter with --target=numpy"
)


class NoOpenCL(Exception):
    """pyopencl or an OpenCL platform is missing; str() is the one-line hint."""


def cl() -> Any:
    try:
        import pyopencl
    except ImportError as e:
        raise NoOpenCL(INSTALL_HINT + f" (pyopencl does not import: {e})") from None
    return pyopencl


@functools.lru_cache(maxsize=1)
def all_devices() -> tuple[Any, ...]:
    """Every device of every platform, in platform order."""
    pcl = cl()
    try:
        platforms = pcl.get_platforms()
    except pcl.Error:
        raise NoOpenCL(INSTALL_HINT) from None
    devices = [d for p in platforms for d in p.get_devices()]
    if not devices:
        raise NoOpenCL(INSTALL_HINT)
    return tuple(devices)


def opencl_available() -> str | None:
    """None when OpenCL works here, else the reason it does not (for skips)."""
    try:
        all_devices()
    except NoOpenCL as e:
        return str(e)
    return None


def describe(d: Any) -> str:
    return f"{d.platform.name.strip()}: {d.name.strip()} ({d.max_compute_units} compute units)"


def pick_device(spec: str | None = None) -> Any:
    """`spec`: None or 'auto' (the first GPU, else the first device), an index from --list-devices, or a
    case-insensitive substring of the platform or device name."""
    devices = all_devices()
    if spec in (None, "", "auto"):
        pcl = cl()
        gpus = [d for d in devices if d.type & pcl.device_type.GPU]
        return (gpus or list(devices))[0]
    if spec.isdigit():
        i = int(spec)
        if i >= len(devices):
            raise ValueError(f"no OpenCL device {i}: there are {len(devices)} (see --list-devices)")
        return devices[i]
    hits = [d for d in devices if spec.lower() in describe(d).lower()]
    if not hits:
        raise ValueError(f"no OpenCL device matches '{spec}' (see --list-devices)")
    return hits[0]


@functools.lru_cache(maxsize=8)
def context_for(device: Any) -> Any:
    return cl().Context([device])


def device_info(d: Any) -> DeviceInfo:
    pcl = cl()
    ext = d.extensions
    return DeviceInfo(
        name=d.name.strip(),
        compute_units=int(d.max_compute_units),
        max_work_group_size=int(d.max_work_group_size),
        local_mem_size=int(d.local_mem_size),
        vector_width=max(4, int(d.preferred_vector_width_float) or 4) if d.type & pcl.device_type.CPU else 4,
        fp64="cl_khr_fp64" in ext,
        fp16="cl_khr_fp16" in ext,
        is_cpu=bool(d.type & pcl.device_type.CPU),
        base_align=max(int(d.mem_base_addr_align) // 8, 4),
    )


def fingerprint(d: Any) -> str:
    """Stable id of a device for the calibration store: platform, device, driver and compute units."""
    text = "|".join(
        [d.platform.name, d.platform.version, d.name, d.version, d.driver_version, str(d.max_compute_units)]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def preamble(info: DeviceInfo) -> str:
    lines = []
    if info.fp64:
        lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    if info.fp16:
        lines.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    return "\n".join(lines) + ("\n" if lines else "")
