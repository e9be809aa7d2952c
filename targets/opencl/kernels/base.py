"""What a kernel template is: a function from one op (its `Ctx`) to a `Lowered` — OpenCL C kernels with
their launch sizes, any operand packing it wants done beforehand, and scratch buffers.

Conventions every template follows:
- each `Kernel.source` is one `__kernel void KERNEL(...)`; every identifier starting with `KERNEL` (the
  function and any helper such as `KERNEL_load`) is renamed by the lowering, so sources of many kernels
  concatenate into one program without clashes;
- buffer arguments come in `Kernel.args` order: `in<i>` is operand i (after packing, if requested),
  `out<j>` result j, `tmp<k>` scratch buffer k; by default every operand, then every result;
- shapes, strides and attributes are baked into the source as literals (a kernel is specialised to its
  op), so no scalar arguments are passed;
- a template raises `NotLowerable(reason)` for cases it does not cover (a dtype, an attribute value);
  the lowering lists every such op in one diagnostic.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ....ir.ops.registry import Sig
from ....ir.types import TensorType


class NotLowerable(Exception):
    """A template does not cover this op instance; the message says why."""


WIDEST_VECTOR = 16
"""Floats in the widest SIMD register tessel targets (AVX-512)."""
WIDEST_REGISTERS = 32
"""Vector registers of the largest x86 register file (AVX-512)."""


@dataclass(frozen=True)
class DeviceInfo:
    """The device facts templates and the cost model use. `generic()` is the deterministic default used when
    tessel-codegen is not told which device to compile for (a PoCL CPU with AVX-512)."""

    name: str = "generic"
    compute_units: int = 2
    max_work_group_size: int = 4096
    local_mem_size: int = 1 << 20  # bytes of __local memory per work-group (PoCL's pthread device: 1 MiB)
    vector_width: int = 16  # preferred float vector width (floats per SIMD register)
    vector_registers: int = 32  # SIMD registers (AVX-512: 32, AVX2: 16): what a micro-kernel's tile fits in
    fp64: bool = True
    fp16: bool = False
    is_cpu: bool = True
    base_align: int = 128  # bytes: sub-buffer offsets must be multiples (CL_DEVICE_MEM_BASE_ADDR_ALIGN)
    fingerprint: str = "generic"  # device.fingerprint of a real device: what tuning records are keyed by
    # measured peaks (profile.Peaks, calibrated on the device's first use; 0: not measured, e.g. generic):
    peak_gflops: float = 0.0  # tessel's SGEMM
    stream_gbps: float = 0.0  # constant weights streamed from memory by the GEMM micro-kernel
    copy_gbps: float = 0.0  # a three-stream elementwise kernel
    # the 8-bit dot product the device compiler may use in a function with that target attribute
    # ("avx512vnni": x86 `vpdpbusd` on 512-bit vectors; "": none): a candidate that `has` confirms by the
    # probe (device.int8_dot)
    int8_dot: str = ""
    # the byte permute a lookup may use in a function with that target attribute ("avx512vbmi": x86
    # `vpermi2b`; "": none): likewise (device.byte_permute)
    byte_permute: str = ""
    # where the peaks are 0: a zero-argument callable giving them (profile.OnFirstNeed: the device
    # calibrated when a lowering first asks, see `measured`); not part of the device's identity
    calibrate: Any = field(default=None, repr=False, compare=False)
    # where int8_dot or byte_permute names a feature: a zero-argument callable giving the features the
    # device compiler was seen to compile right (device._probed: a small program built and run once a
    # process), asked by `has` only when a lowering would use one; not part of the device's identity
    probe: Any = field(default=None, repr=False, compare=False)

    @staticmethod
    def generic() -> DeviceInfo:
        return DeviceInfo()

    def has(self, feature: str) -> bool:
        """Whether a kernel may use `feature` ("avx512vnni": int8_dot, "avx512vbmi": byte_permute): the
        device's candidate (everything but the probe says it has it) that its `probe` hook confirms. The
        probe runs on the first kernel that would use the feature, so a float model never builds it;
        without a hook (a DeviceInfo made by hand) the field alone says."""
        if not feature or feature not in (self.int8_dot, self.byte_permute):
            return False
        return self.probe is None or feature in self.probe()

    @property
    def has_peaks(self) -> bool:
        return bool(self.peak_gflops and self.stream_gbps and self.copy_gbps)

    def measured(self) -> DeviceInfo:
        """This device with its peaks: as it is when it has them or nothing can measure them, else with
        those its `calibrate` hook gives (a calibration of a few seconds on the device's first need; the
        hook keeps them, so every later call is free). Only the choices that depend on the peaks (the
        Winograd cost model) ask, so a model without such a choice never waits for a calibration."""
        if self.has_peaks or self.calibrate is None:
            return self
        peaks = self.calibrate()
        if peaks is None:
            return self
        return dataclasses.replace(self, peak_gflops=peaks.gflops, stream_gbps=peaks.stream_gbps,
                                   copy_gbps=peaks.gbps, calibrate=None)

    def registers_per(self, lanes: int) -> int:
        """SIMD registers one float<lanes> takes."""
        return max(1, -(-lanes // self.vector_width))

    def accumulators(self, lanes: int, loaded: int = 1) -> int:
        """How many float<lanes> accumulators a micro-kernel keeps in registers beside `loaded` loaded
        vectors of the same width and a broadcast scalar: 30 of float16 with AVX-512, 6 with AVX2 (a float16
        takes two of its 16 registers: the 6x16 tile of AVX2 BLAS kernels). Past it LLVM spills accumulators
        to the stack every FMA: SGEMM 1024^3 on an AVX2 Zen 3 runs at 40 GFLOP/s with 16 rows x float16,
        145 with 6."""
        per = self.registers_per(lanes)
        return max(1, (self.vector_registers - loaded * per - 1) // per)

    def accumulators_to_try(self, lanes: int, loaded: int = 1) -> int:
        """The accumulators a schedule space lets the tuner try: this device's, or those of the widest
        register file tessel targets (32 registers of 16 floats, AVX-512) where that holds more. The
        register model is read off the reported vector width, and a report can mislead (Intel's CPU
        runtime reports 1; a device's defaults may come from another one's choices), so the spaces reach
        past it and measuring decides: a tile that spills is slower and loses."""
        widest = DeviceInfo(vector_width=max(self.vector_width, WIDEST_VECTOR),
                            vector_registers=max(self.vector_registers, WIDEST_REGISTERS))
        return max(self.accumulators(lanes, loaded), widest.accumulators(lanes, loaded))


@dataclass(frozen=True)
class PackSpec:
    """Operand packing done before the launch (once, at load time, when the operand is a constant)."""

    inner_dims_pos: tuple[int, ...]
    inner_tiles: tuple[int, ...]
    outer_dims_perm: tuple[int, ...] = ()
    padding_value: float = 0.0
    reshape: tuple[int, ...] = ()  # row-major reshape applied before packing (e.g. split O into groups)
    winograd: int = 0  # m > 0: a `winograd_filter {tile = m}` (F(m x m, 3x3)) instead of a `pack`

    def attrs(self) -> dict[str, Any]:
        if self.winograd:
            return {"tile": self.winograd}
        return {"inner_dims_pos": list(self.inner_dims_pos), "inner_tiles": list(self.inner_tiles),
                "outer_dims_perm": list(self.outer_dims_perm), "padding_value": float(self.padding_value)}

    @property
    def op(self) -> str:
        """The op doing the packing; `inverse` undoes it in the launch's reference body."""
        return "winograd_filter" if self.winograd else "pack"

    def inverse(self, shape: tuple[int, ...]) -> tuple[str, dict[str, Any]]:
        """(op, attrs) of the op that recovers the operand, of `shape`, from its packed form."""
        if self.winograd:
            return "winograd_unfilter", {**self.attrs(), "shape": list(shape)}
        attrs = {k: v for k, v in self.attrs().items() if k != "padding_value"}
        return "unpack", {**attrs, "shape": list(shape)}

    def apply(self, x: Any) -> Any:
        """The packed array, as the op would compute it (for tests and benchmarks, which hold arrays)."""
        from ....ir.layout_util import pack_operand
        from ....ir.ops.winograd import transform_filter

        x = x.reshape(self.reshape) if self.reshape else x
        return transform_filter(x, self.winograd) if self.winograd else pack_operand(x, self.attrs())


@dataclass
class Kernel:
    source: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None = None
    args: tuple[str, ...] | None = None  # what each parameter binds: in<i>, out<j> or tmp<k> (arg_ref)


def arg_ref(name: str) -> tuple[str, int]:
    """What a kernel argument name binds: ('in', i) for the launch's operand i, ('out', j) for its result
    j, ('tmp', k) for its scratch buffer k. Any other name is a template bug (ValueError)."""
    kind = name.rstrip("0123456789")
    if kind not in ("in", "out", "tmp") or kind == name:
        raise ValueError(f"kernel argument {name!r} is not in<i>, out<j> or tmp<k>")
    return kind, int(name[len(kind):])


@dataclass
class Lowered:
    kernels: list[Kernel]
    scratch: list[int] = field(default_factory=list)  # bytes of tmp0, tmp1, ...
    pack: dict[int, PackSpec] = field(default_factory=dict)  # operand index -> packing applied first
    schedule: dict[str, Any] = field(default_factory=dict)  # the parameters chosen, printed on the launch
    flops_kernel: int = -1  # the kernel doing the op's arithmetic (its profile row gets the flops)


@dataclass
class Ctx:
    """One op as a template sees it."""

    op_name: str
    sig: Sig
    device: DeviceInfo = field(default_factory=DeviceInfo.generic)
    constant: tuple[bool, ...] = ()  # whether each operand is a compile-time constant
    schedule: dict[str, Any] = field(default_factory=dict)  # overrides from the op's `schedule` attribute
    body: Any = None  # a `kernel` op's region block (ir.core.Block), for the fused template
    resources: Any = None  # the module's ResourceTable (constants inside a kernel region)
    values: Any = None  # values(i): operand i's array where it is a constant with data, else None

    def value(self, i: int) -> Any:
        """Operand i's array when it is a compile-time constant with data at hand, else None."""
        return self.values(i) if self.values is not None and self.is_constant(i) else None

    @property
    def operands(self) -> list[TensorType]:
        return self.sig.operands

    @property
    def results(self) -> list[TensorType]:
        return self.sig.results

    def attr(self, name: str) -> Any:
        return self.sig.attrs[name]

    def is_constant(self, i: int) -> bool:
        return i < len(self.constant) and self.constant[i]


Template = Callable[[Ctx], Lowered]
TEMPLATES: dict[str, Template] = {}


F = TypeVar("F")


def registrar(table: dict[str, F], what: str, op_names: Sequence[str]) -> Callable[[F], F]:
    """A decorator registering its function in `table` under each of `op_names` (one `what` an op)."""

    def deco(fn: F) -> F:
        for name in op_names:
            if name in table:
                raise ValueError(f"op '{name}' has two {what}")
            table[name] = fn
        return fn

    return deco


def template(*op_names: str) -> Callable[[Template], Template]:
    """Register `fn` as the kernel template of each op in `op_names`."""
    return registrar(TEMPLATES, "OpenCL templates", op_names)


# helpers shared by templates ---------------------------------------------------------------------------
CTYPES = {"f32": "float", "f64": "double", "f16": "half", "i64": "long", "i32": "int", "i16": "short",
          "i8": "char", "ui8": "uchar", "ui16": "ushort", "ui32": "uint", "ui64": "ulong", "i1": "uchar"}


def ctype(t: TensorType | str) -> str:
    """The OpenCL C type of a tensor's elements (i1 is stored as uchar 0/1)."""
    dtype = t if isinstance(t, str) else t.dtype
    if dtype not in CTYPES:
        raise NotLowerable(f"element type {dtype} has no OpenCL type")
    return CTYPES[dtype]


def require_static(*types: TensorType) -> None:
    for t in types:
        if not t.is_static:
            raise NotLowerable(f"dynamic shape {t}")


def row_major_strides(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def index_type(*types: TensorType) -> str:
    """`int` when every flat index fits in 31 bits, else `long`."""
    return "int" if max((t.numel for t in types), default=0) < 2**31 else "long"


def launch_1d(n: int, per_item: int = 1, local: int = 64, min_groups: int = 16) -> Kernel:
    """Sizes for a 1-D kernel over n items (each work-item does `per_item`): an explicit small local size
    with enough work-groups (PoCL's own choice can leave a core idle); source filled in by the caller."""
    items = max(1, math.ceil(n / per_item))
    while local > 1 and math.ceil(items / local) < min_groups:
        local //= 2
    return Kernel("", (math.ceil(items / local) * local,), (local,))
