"""Finding OpenCL devices, and what tessel needs to know about one.

PoCL's default CPU device (`pthread`) runs work-groups on a pool of worker threads that sleep between
commands; waking them costs 5-40 us a command in a VM. Its `basic` device runs kernels on the thread that
enqueues them, with no wake-ups but on one core. Unless the user set `POCL_DEVICES` (or
`TESSEL_POCL_INLINE=0`), tessel asks PoCL for both, and an Executable on the pool device may run a model
on its *inline companion* instead when that is faster (runtime.py, docs/opencl.md "Execution").
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Sequence
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


POCL_DEVICES = "pthread basic"
"""What tessel asks PoCL for when the user did not: the worker pool and its inline companion."""


@functools.lru_cache(maxsize=1)
def all_devices() -> tuple[Any, ...]:
    """Every device of every platform, in platform order."""
    if "POCL_DEVICES" not in os.environ and os.environ.get("TESSEL_POCL_INLINE", "1") != "0":
        os.environ["POCL_DEVICES"] = POCL_DEVICES  # read once, when PoCL initializes (below)
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
    """`spec`: None or 'auto' (the first GPU, else the first device of the most compute units), an index
    from --list-devices, or a case-insensitive substring of the platform or device name."""
    devices = all_devices()
    if spec in (None, "", "auto"):
        pcl = cl()
        gpus = [d for d in devices if d.type & pcl.device_type.GPU]
        most = max(int(d.max_compute_units) for d in devices)
        return (gpus or [d for d in devices if int(d.max_compute_units) == most])[0]
    if spec.isdigit():
        i = int(spec)
        if i >= len(devices):
            raise ValueError(f"no OpenCL device {i}: there are {len(devices)} (see --list-devices)")
        return devices[i]
    hits = [d for d in devices if spec.lower() in describe(d).lower()]
    if not hits:
        raise ValueError(f"no OpenCL device matches '{spec}' (see --list-devices)")
    return hits[0]


def locate(d: Any) -> tuple[int, int] | None:
    """(platform index, device index) of `d` in pyopencl's lists: how another process of this machine
    (same environment) finds the same device; None when it is not listed."""
    for p, platform in enumerate(cl().get_platforms()):
        for i, other in enumerate(platform.get_devices()):
            if other == d:
                return p, i
    return None


def _pocl_driver(d: Any) -> tuple[str, str] | None:
    """('pthread', 'haswell-AMD EPYC') for a PoCL CPU device, else None."""
    if "Portable Computing Language" not in d.platform.name:
        return None
    driver, _, rest = d.name.strip().partition("-")
    return driver, rest


def inline_companion(device: Any) -> Any | None:
    """The PoCL `basic` device beside a PoCL `pthread` device (same platform and processor, the same host
    memory), which runs kernels on the enqueuing thread; None on any other device or when absent."""
    own = _pocl_driver(device)
    if own is None or own[0] != "pthread":
        return None
    for d in device.platform.get_devices():
        other = _pocl_driver(d)
        if other == ("basic", own[1]):
            return d
    return None


@functools.lru_cache(maxsize=8)
def context_for(device: Any) -> Any:
    """One context per device, holding its inline companion too when it has one (they share memory, so
    one set of buffers serves both)."""
    companion = inline_companion(device)
    return cl().Context([device] if companion is None else [device, companion])


def device_info(d: Any, peaks: Any = None) -> DeviceInfo:
    """What the lowering knows of device `d`: its reported properties, and `peaks` (profile.Peaks: the
    stored calibration when not given, none for a device never calibrated; the tools that compile for a
    device calibrate it on first use through profile.peaks_for)."""
    if peaks is None:
        from .profile import load_peaks

        peaks = load_peaks(d)
    pcl = cl()
    ext = d.extensions
    cpu = bool(d.type & pcl.device_type.CPU)
    width = simd_floats(d) if cpu else 4
    return DeviceInfo(
        name=d.name.strip(),
        compute_units=int(d.max_compute_units),
        max_work_group_size=int(d.max_work_group_size),
        local_mem_size=int(d.local_mem_size),
        vector_width=width,
        vector_registers=32 if width >= 16 or not cpu else 16,  # AVX-512 has 32; AVX/AVX2, SSE 16
        fp64="cl_khr_fp64" in ext,
        fp16="cl_khr_fp16" in ext,
        is_cpu=bool(d.type & pcl.device_type.CPU),
        base_align=max(int(d.mem_base_addr_align) // 8, 4),
        fingerprint=fingerprint(d),
        peak_gflops=peaks.gflops if peaks else 0.0,
        stream_gbps=peaks.stream_gbps if peaks else 0.0,
        copy_gbps=peaks.gbps if peaks else 0.0,
        int8_dot=_candidate(d, "avx512vnni") if cpu else "",
        byte_permute=_candidate(d, "avx512vbmi") if cpu else "",
        probe=functools.partial(_probed, d) if cpu else None,
    )


# A function given the target attribute may use the instructions the device compiler's own CPU name leaves
# out (PoCL 3.1 targets a Sapphire Rapids as skylake-avx512, without VNNI or VBMI): the 8-bit dot product
# of the integer contractions (kernels/qdot.py, `vpdpbusd`) and the byte permute of the table lookups
# (kernels/gather.py, `vpermi2b`: 64 bytes picked from two 64-byte tables by 7-bit indices, a 256-entry
# byte table in three instructions for 64 elements) live in such functions, called from the kernels. One
# probe program holds a kernel for each; a feature is used where the process's CPU has it (PoCL's CPU
# devices run on it) and its kernel computes right.
PROBES = """typedef char tessel_c64 __attribute__((ext_vector_type(64)));
__attribute__((target("avx512vnni")))
static void dot(const __global int16* a, const __global int16* b, __global int16* c) {
    c[0] = __builtin_ia32_vpdpbusd512((int16)(7), a[0], b[0]);
}
__kernel void probe_avx512vnni(const __global int16* a, const __global int16* b, __global int16* c) {
    dot(a, b, c);
}
__attribute__((target("avx512vbmi")))
static void perm(const __global tessel_c64* t, __global tessel_c64* c) {
    c[0] = __builtin_ia32_vpermi2varqi512(t[0], t[2], t[1]);
}
__kernel void probe_avx512vbmi(const __global tessel_c64* t, __global tessel_c64* c) { perm(t, c); }
"""
# the numpy CPU features each needs, and the environment variable that turns it off
FEATURES = {"avx512vnni": (("AVX512VNNI", "AVX512BW"), "TESSEL_INT8_DOT"),
            "avx512vbmi": (("AVX512VBMI", "AVX512BW"), "TESSEL_BYTE_PERMUTE")}


def int8_dot(d: Any) -> str:
    """"avx512vnni" where device `d` is PoCL on an x86-64 CPU with AVX-512 VNNI and the probe computes its
    dot product right; "" elsewhere, or with TESSEL_INT8_DOT=0."""
    return _feature(d, "avx512vnni")


def byte_permute(d: Any) -> str:
    """"avx512vbmi" where device `d` is PoCL on an x86-64 CPU with AVX-512 VBMI and the probe permutes
    right; "" elsewhere, or with TESSEL_BYTE_PERMUTE=0."""
    return _feature(d, "avx512vbmi")


def _feature(d: Any, name: str) -> str:
    return name if _candidate(d, name) and name in _probed(d) else ""


def _candidate(d: Any, name: str) -> str:
    """`name` where everything but the probe says device `d` has the feature (not turned off, PoCL on an
    x86-64 CPU with 512-bit vectors whose host has it), else "": what device_info records, the probe
    left to the first kernel that would use it (DeviceInfo.has)."""
    import platform

    needs, switch = FEATURES[name]
    if os.environ.get(switch, "1").strip().lower() in ("0", "no", "off", "none"):
        return ""
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    if _pocl_driver(d) is None or not x86 or simd_floats(d) < 16 or not _host_features(*needs):
        return ""
    return name


def missing_features(source: str, d: Any) -> list[str]:
    """The target features the kernels of `source` ask for (a function's `target("...")` attribute) that
    device `d` lacks: running them would stop the process with an illegal instruction."""
    import re

    wanted = {f.strip() for m in re.findall(r'__attribute__\(\(target\("([^"]*)"\)\)\)', source)
              for f in m.split(",")}
    have = {_feature(d, f) for f in FEATURES} - {""}
    return sorted(wanted - have)


def _host_features(*names: str) -> bool:
    """Whether the CPU this process runs on has every feature named (numpy's runtime detection)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # numpy 1.x
        from numpy.core._multiarray_umath import __cpu_features__ as features
    return all(features.get(n, False) for n in names)


@functools.lru_cache(maxsize=8)
def _probed(d: Any) -> frozenset[str]:
    """The features of FEATURES whose probe kernel computes right on device `d`: the program built once,
    only the kernels of features the process's CPU has run (another would stop it with an illegal
    instruction); none where the build fails."""
    import numpy as np

    pcl = cl()
    ok = set()
    try:
        ctx = context_for(d)
        queue = pcl.CommandQueue(ctx, d)
        prog = pcl.Program(ctx, PROBES).build(devices=[d])
        mf = pcl.mem_flags

        def run(name: str, inputs: list[Any], out: Any) -> Any:
            bufs = [pcl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a) for a in inputs]
            ob = pcl.Buffer(ctx, mf.WRITE_ONLY, out.nbytes)
            pcl.Kernel(prog, f"probe_{name}")(queue, (1,), (1,), *bufs, ob)
            pcl.enqueue_copy(queue, out, ob)
            queue.finish()
            return out

        if _host_features(*FEATURES["avx512vnni"][0]):
            a = np.arange(64, dtype=np.uint8)
            b = (np.arange(64) % 7 - 3).astype(np.int8)
            want = 7 + (a.astype(np.int32) * b.astype(np.int32)).reshape(16, 4).sum(axis=1)
            if np.array_equal(run("avx512vnni", [a, b], np.empty(16, np.int32)), want):
                ok.add("avx512vnni")
        if _host_features(*FEATURES["avx512vbmi"][0]):
            t = np.random.default_rng(0).integers(-128, 128, 192).astype(np.int8)  # two tables, the indices
            want = t[:128][t[128:].view(np.uint8) & 127]
            if np.array_equal(run("avx512vbmi", [t], np.empty(64, np.int8)), want):
                ok.add("avx512vbmi")
    except Exception:  # noqa: BLE001 - any failure means: do not use them
        return frozenset()
    return frozenset(ok)


def simd_floats(d: Any) -> int:
    """Floats in one SIMD register of a CPU device: its preferred float vector width, or its native one
    where the preferred is 1 (Intel's CPU runtime reports 1: it vectorizes across work-items itself and
    asks for scalar code, while its native width, 16 with AVX-512, is what the registers hold); 4 at
    least (SSE)."""
    preferred = int(d.preferred_vector_width_float or 0)
    if preferred <= 1:
        preferred = int(getattr(d, "native_vector_width_float", 0) or 0)
    return max(4, preferred)


def fingerprint(d: Any) -> str:
    """Stable id of a device for the calibration store and tuning records: platform, device, driver and
    compute units."""
    text = "|".join(
        [d.platform.name, d.platform.version, d.name, d.version, d.driver_version, str(d.max_compute_units)]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# What PoCL 3.1 (LLVM 15) makes of two builtins, seen in the disassembly of its kernel cache, and what
# a program built for CPU devices gets instead (with_build_preamble adds this block after the source's
# extension pragmas, where the compiler is clang: the overloads and a typedef's alignment are its
# extensions; the IR's cl.program source stays the kernels):
# - vstore8 / vstore16 of chars and shorts store element by element (16 byte stores and the extracts
#   feeding them for one uchar16; vstore4 is whole): here a store through a pointer to the vector type
#   aligned to 1, one unaligned vector store. Every integer kernel stores its 8-bit results so.
# - vload8 / vload16 (and vstore8 / vstore16) of floats and ints are pairs of elements loaded and shuffled
#   together (a float16: 8 loads of two floats and 7 shuffles), which LLVM's instruction selection folds
#   back into one vector load, slowly: it was 93% of the backend's time on a fused mobilenet_v2 kernel (1.2
#   of its 1.6 s compile at the first launch). Here they are loads and stores through pointers to the
#   vector type aligned to 1, for every 8-, 16- and 32-bit type (64-bit ones keep the builtin): the same
#   code (bit-identical results, 0.97-1.0x run time) compiled 2-3x faster: mobilenet_v2's cold first run
#   16.3 -> 5.6 s, resnet18 11.4 -> 4.1 s, efficientnet_b0 31.1 -> 19.6 s on an AMD EPYC (Zen 4) VM.
# - rint (round half to even, the requantization's rounding) of floats is an 18-instruction emulation
#   (truncate, compare, fix up): here |x| + 2^23 - 2^23 with x's sign where |x| < 2^23 (the add rounds
#   to an integer, half to even, in the default rounding mode), x itself above (already an integer, or
#   inf or NaN): 5 instructions, the same value for every float, -0.0 included; doubles and halves keep
#   the builtin.
# Same process, bit-identical, int8 zoo copies: the stores 0.80-0.96x (convnext 0.80, mobilenet_v2 0.82,
# resnet50 0.89), then rint 0.77-0.91x (shufflenet 0.77, resnet50 0.82, efficientnet_b0 0.89).
BUILD_PREAMBLE = """#if defined(__clang__)
#define TESSEL_ST(T, N, S) static inline __attribute__((overloadable)) void tessel_vstore##N(T##N v, \\
    size_t o, S T* p) { *(S tessel_##T##N##_u*)(p + o * N) = v; }
#define TESSEL_BUILTIN(T, N, S) static inline __attribute__((overloadable)) void tessel_vstore##N(T##N v, \\
    size_t o, S T* p) { vstore##N(v, o, p); }
#define TESSEL_NARROW(T, N) typedef T##N tessel_##T##N##_u __attribute__((aligned(1))); \\
    TESSEL_ST(T, N, __global) TESSEL_ST(T, N, __local) TESSEL_ST(T, N, __private)
#define TESSEL_WIDE(T, N) TESSEL_BUILTIN(T, N, __global) TESSEL_BUILTIN(T, N, __local) \\
    TESSEL_BUILTIN(T, N, __private)
TESSEL_NARROW(char, 8) TESSEL_NARROW(char, 16) TESSEL_NARROW(uchar, 8) TESSEL_NARROW(uchar, 16)
TESSEL_NARROW(short, 8) TESSEL_NARROW(short, 16) TESSEL_NARROW(ushort, 8) TESSEL_NARROW(ushort, 16)
TESSEL_NARROW(int, 8) TESSEL_NARROW(int, 16) TESSEL_NARROW(uint, 8) TESSEL_NARROW(uint, 16)
TESSEL_WIDE(long, 8) TESSEL_WIDE(long, 16) TESSEL_WIDE(ulong, 8) TESSEL_WIDE(ulong, 16)
TESSEL_NARROW(float, 8) TESSEL_NARROW(float, 16)
#define TESSEL_LD(T, N, S) static inline __attribute__((overloadable)) T##N tessel_vload##N(size_t o, \
    const S T* p) { return *(const S tessel_##T##N##_u*)(p + o * N); }
#define TESSEL_LD_BUILTIN(T, N, S) static inline __attribute__((overloadable)) T##N tessel_vload##N( \
    size_t o, const S T* p) { return vload##N(o, p); }
#define TESSEL_LOADS(M, T, N) M(T, N, __global) M(T, N, __local) M(T, N, __constant) M(T, N, __private)
TESSEL_LOADS(TESSEL_LD, float, 8) TESSEL_LOADS(TESSEL_LD, float, 16)
TESSEL_LOADS(TESSEL_LD, int, 8) TESSEL_LOADS(TESSEL_LD, int, 16)
TESSEL_LOADS(TESSEL_LD, uint, 8) TESSEL_LOADS(TESSEL_LD, uint, 16)
TESSEL_LOADS(TESSEL_LD, char, 8) TESSEL_LOADS(TESSEL_LD, char, 16)
TESSEL_LOADS(TESSEL_LD, uchar, 8) TESSEL_LOADS(TESSEL_LD, uchar, 16)
TESSEL_LOADS(TESSEL_LD, short, 8) TESSEL_LOADS(TESSEL_LD, short, 16)
TESSEL_LOADS(TESSEL_LD, ushort, 8) TESSEL_LOADS(TESSEL_LD, ushort, 16)
TESSEL_LOADS(TESSEL_LD_BUILTIN, long, 8) TESSEL_LOADS(TESSEL_LD_BUILTIN, long, 16)
TESSEL_LOADS(TESSEL_LD_BUILTIN, ulong, 8) TESSEL_LOADS(TESSEL_LD_BUILTIN, ulong, 16)
#define TESSEL_RINT(T) static inline __attribute__((overloadable)) T tessel_rint(T x) { \\
    const T a = fabs(x); return a < 0x1p23f ? copysign((a + 0x1p23f) - 0x1p23f, x) : x; }
TESSEL_RINT(float) TESSEL_RINT(float2) TESSEL_RINT(float3) TESSEL_RINT(float4) TESSEL_RINT(float8)
TESSEL_RINT(float16)
#define TESSEL_RINT_BUILTIN(T) static inline __attribute__((overloadable)) T tessel_rint(T x) { \\
    return rint(x); }
#ifdef cl_khr_fp64
TESSEL_WIDE(double, 8) TESSEL_WIDE(double, 16)
TESSEL_LOADS(TESSEL_LD_BUILTIN, double, 8) TESSEL_LOADS(TESSEL_LD_BUILTIN, double, 16)
TESSEL_RINT_BUILTIN(double) TESSEL_RINT_BUILTIN(double2) TESSEL_RINT_BUILTIN(double3)
TESSEL_RINT_BUILTIN(double4) TESSEL_RINT_BUILTIN(double8) TESSEL_RINT_BUILTIN(double16)
#endif
#ifdef cl_khr_fp16
TESSEL_WIDE(half, 8) TESSEL_WIDE(half, 16)
TESSEL_LOADS(TESSEL_LD_BUILTIN, half, 8) TESSEL_LOADS(TESSEL_LD_BUILTIN, half, 16)
TESSEL_RINT_BUILTIN(half) TESSEL_RINT_BUILTIN(half2) TESSEL_RINT_BUILTIN(half3) TESSEL_RINT_BUILTIN(half4)
TESSEL_RINT_BUILTIN(half8) TESSEL_RINT_BUILTIN(half16)
#endif
#undef vstore8
#undef vstore16
#undef vload8
#undef vload16
#undef rint
#define vload8(o, p) tessel_vload8(o, p)
#define vload16(o, p) tessel_vload16(o, p)
#define vstore8(v, o, p) tessel_vstore8(v, o, p)
#define vstore16(v, o, p) tessel_vstore16(v, o, p)
#define rint(x) tessel_rint(x)
#endif"""


def with_build_preamble(source: str, devices: Sequence[Any]) -> str:
    """`source` as built for `devices`: with BUILD_PREAMBLE after its leading extension pragmas (a `#line`
    keeping the build log's line numbers the source's) where every device is a CPU."""
    if not devices or not all(int(d.type) & int(cl().device_type.CPU) for d in devices):
        return source
    lines = source.split("\n")
    i = 0
    while i < len(lines) and lines[i].startswith("#pragma OPENCL EXTENSION"):
        i += 1
    return "\n".join([*lines[:i], BUILD_PREAMBLE, f"#line {i + 1}", *lines[i:]])


def preamble(info: DeviceInfo) -> str:
    lines = []
    if info.fp64:
        lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    if info.fp16:
        lines.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    return "\n".join(lines) + ("\n" if lines else "")
