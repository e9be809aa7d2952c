"""Cooperative execution: each run as persistent kernels whose work-groups the calling thread and PoCL's
worker threads share.

On PoCL's CPU device every launch costs a wake-up: the pool's second worker runs out of work-groups before
the first finishes the kernel, goes to sleep, and the next kernel waits 5-20 µs in this VM for it to wake
(docs/opencl.md "Execution"). The inline device has no wake-ups but one core. Cooperative execution keeps
both cores and pays no wake-up per launch:

- every kernel of the program without barriers becomes a plain function of its work-item ids
  (`get_global_id(0)` -> `(_g0 * 4 + _l0)`, sizes as literals); one whose work-items fill `__local`
  arrays (or their work-group's slice of a global buffer) and meet at one barrier becomes two (`Phased`:
  its fill, then the rest), its local arrays in the participant's scratch memory. Kernels with other
  barriers run alone, on the inline device;
- a persistent kernel calls them in program order: for each step it waits until the earlier steps it
  depends on (those whose buffers share bytes with its own where either writes) are done, then claims
  chunks of the step's work-groups from an atomic counter, runs them work-item by work-item, and adds
  them to the step's done counter;
- the pool's side is one persistent kernel (`tessel_pool`, every cooperative step; compute units - 1
  work-groups of one work-item, so the calling thread is the last core) that outlives a run: it runs each
  run the host starts (control word K[GEN]) and spins for the next up to POOL_WAIT_US before it
  leaves, so back-to-back runs pay no launch and no wake-up on the pool. The calling thread runs each
  segment (a maximal run of cooperative steps) as its own persistent kernel on the inline device, which
  runs it inside the enqueue, and each lone step between them; a lone step's done flag is set once it
  ran. The calling thread alone can finish every step, so nothing waits for a worker that has not come:
  a worker joins whatever step is current when it comes, goes on past a lone step to the later steps
  that do not depend on it, and leaves the run when it has nothing left to claim. The run is over when
  the calling thread's last enqueue returns: no finish, no wake-up.

Buffers are fine-grained SVM (one address space for the host, the pool and the inline device); each
kernel's arguments are read from a table of addresses. The counters live in an SVM array of two halves
used by alternate runs, so a worker still leaving run r reads its own half while run r + 1 starts; run
r + 2 clears that half once the worker says (K[IN]) it is not in run r. The last counter of a half is an
abort flag: when the calling thread's part of a run fails, it is set, and the pool's work-group leaves.
"""

from __future__ import annotations

import platform
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

KERNEL_HEAD = re.compile(r"__kernel\s+void\s+(\w+)\s*\(")
KERNEL_ATTRIBUTE = re.compile(r"__attribute__\s*\(\((reqd_work_group_size|work_group_size_hint|vec_type_hint)"
                              r"\([^()]*\)\)\)")
ID_CALL = re.compile(
    r"\bget_(global_id|local_id|group_id|local_size|num_groups|global_size|global_offset)\s*\(([^()]*)\)"
)
WORK_DIM = re.compile(r"\bget_work_dim\s*\(\s*\)")
NOT_COOPERATIVE = ("work_group_", "async_work_group", "wait_group_events", "reqd_work_group_size",
                   "mem_fence(", "printf(")
"""Text that keeps a kernel out of a cooperative segment: its work-items do not run one after another."""
LOCAL_DECL = re.compile(r"__local\s+(\w+)\s+(\w+)\s*\[\s*(\d+)\s*\]\s*;")
BARRIER = re.compile(r"barrier\s*\(\s*CLK_(LOCAL|GLOBAL)_MEM_FENCE\s*(\|\s*CLK_\w+\s*)?\)\s*;")
SIZES = {"float": 4, "int": 4, "uint": 4, "half": 2, "short": 2, "ushort": 2, "char": 1, "uchar": 1,
         "double": 8, "long": 8, "ulong": 8}
for _t, _n in list(SIZES.items()):
    SIZES.update({f"{_t}{w}": _n * w for w in (2, 4, 8, 16)})
SCRATCH_ALIGN = 128
CHUNKS = 16
"""A step's work-groups are claimed in about this many chunks: few atomics, and work left to balance."""


@dataclass(frozen=True)
class Task:
    """One step with work, as the cooperative plan sees it."""

    kernel: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    regions: tuple[tuple[int, int, bool], ...]  # per argument: (address, bytes, written)


@dataclass(frozen=True)
class Segment:
    """A run of steps: cooperative (`kernel` is the persistent kernel's name) or one step alone."""

    steps: tuple[int, ...]  # indices into the task list
    kernel: str | None  # None: the step runs alone


@dataclass
class Plan:
    source: str
    segments: list[Segment]
    table: list[int]  # the argument addresses, step by step
    counters: int  # ints per half of the counter array: two a step, then the abort flag
    scratch: int  # bytes of scratch memory a participant needs (the local arrays of phased kernels)
    profile: bool = False  # each participant records, per step, its first chunk's start and last one's end


def _past_comment(text: str, i: int) -> int:
    """The index just past the comment starting at `i` (the `//` comment's newline stays), or `i` when
    none starts there."""
    if text.startswith("//", i):
        j = text.find("\n", i)
        return len(text) if j < 0 else j
    if text.startswith("/*", i):
        return text.index("*/", i) + 2
    return i


def function_end(source: str, start: int) -> int:
    """The index just past the `}` that closes the first `{` at or after `start` (comments skipped)."""
    depth, i, n = 0, source.index("{", start), len(source)
    while i < n:
        c = source[i]
        if c == "/" and (j := _past_comment(source, i)) != i:
            i = j
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unbalanced braces in the OpenCL program")


def kernel_extents(source: str) -> dict[str, tuple[int, int, int]]:
    """name -> (start of `__kernel`, index of its parameter list's `)`, end of the body)."""
    out = {}
    for m in KERNEL_HEAD.finditer(source):
        close = source.index(")", m.end())
        out[m.group(1)] = (m.start(), close, function_end(source, close))
    return out


def cooperative(text: str) -> bool:
    return not any(s in text for s in NOT_COOPERATIVE)


@dataclass(frozen=True)
class Phased:
    """A kernel whose work-items fill `__local` arrays (or their work-group's part of a global buffer) and
    meet at one barrier: `fill` is what comes before the barrier (only self-contained `{...}` blocks:
    nothing declared there is used after it), `rest` what comes after; its local arrays become slices of
    the participant's scratch memory."""

    arrays: tuple[tuple[str, str, int], ...]  # (type, name, elements)
    fill: str
    rest: str

    @property
    def scratch(self) -> int:
        return sum(_align(SIZES[t] * n) for t, _, n in self.arrays)


def _align(n: int) -> int:
    return -(-n // SCRATCH_ALIGN) * SCRATCH_ALIGN


def _skip_space(text: str, i: int) -> int:
    """The index of the first character at or after `i` that is neither white space nor in a comment."""
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif (j := _past_comment(text, i)) != i:
            i = j
        else:
            break
    return i


def phased(body: str) -> Phased | None:
    """`body` (a kernel's `{...}`) as a Phased kernel, or None when it is not of that form."""
    inner = body[body.index("{") + 1 : body.rindex("}")]
    arrays, blocks, i = [], [], 0
    while True:
        i = _skip_space(inner, i)
        if i >= len(inner):
            return None
        m = LOCAL_DECL.match(inner, i)
        if m:
            if m.group(1) not in SIZES:
                return None
            arrays.append((m.group(1), m.group(2), int(m.group(3))))
            i = m.end()
            continue
        if inner[i] == "{":
            end = function_end(inner, i)
            blocks.append(inner[i:end])
            i = end
            continue
        m = BARRIER.match(inner, i)
        if m and blocks:  # (no local arrays: a fill into global memory, read back after the barrier)
            rest = inner[m.end():]
            if "barrier" in rest or LOCAL_DECL.search(rest):
                return None
            return Phased(tuple(arrays), "\n".join(blocks), rest)
        return None


def _sizes(task: Task) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
    """(groups, local) in three dims, or None when the global size is not a multiple of the local."""
    g = tuple(task.global_size) + (1,) * (3 - len(task.global_size))
    local = tuple(task.local_size or ()) or (1,) * len(task.global_size)
    lo = tuple(local) + (1,) * (3 - len(local))
    if any(x % y for x, y in zip(g, lo, strict=True)):
        return None
    return tuple(x // y for x, y in zip(g, lo, strict=True)), lo  # type: ignore[return-value]


def _rewrite_ids(body: str, groups: Sequence[int], local: Sequence[int], dims: int) -> str:
    """The work-item functions of OpenCL C in `body` as the function's id parameters and literal sizes."""

    def value(kind: str, d: int) -> str:
        if d > 2:
            return "1" if kind in ("local_size", "num_groups", "global_size") else "0"
        return {
            "global_id": f"(_g{d} * {local[d]} + _l{d})",
            "local_id": f"_l{d}",
            "group_id": f"_g{d}",
            "local_size": str(local[d]),
            "num_groups": str(groups[d]),
            "global_size": str(groups[d] * local[d]),
            "global_offset": "0",
        }[kind]

    def sub(m: re.Match[str]) -> str:
        kind, arg = m.group(1), m.group(2).strip()
        if arg.isdigit():
            return value(kind, int(arg))
        return f"(({arg}) == 0 ? {value(kind, 0)} : ({arg}) == 1 ? {value(kind, 1)} : {value(kind, 2)})"

    return WORK_DIM.sub(str(dims), ID_CALL.sub(sub, body))


def _variant(name: str, sizes: Sequence[Any], size: Any) -> str:
    """The function of kernel `name` at `size`, one of the `sizes` it runs at: its own name when one."""
    return name if len(sizes) == 1 else f"{name}_v{sizes.index(size)}"


def dependencies(tasks: Sequence[Task], steps: Sequence[int]) -> dict[int, list[int]]:
    """For each step of a segment, the earlier steps of the segment it must wait for: those sharing bytes
    with it where either writes (transitively reduced: a step already implied by another is dropped)."""
    deps: dict[int, list[int]] = {}
    closure: dict[int, set[int]] = {}
    for k, s in enumerate(steps):
        direct = []
        for t in reversed(steps[:k]):
            if _conflict(tasks[s], tasks[t]):
                direct.append(t)
        keep: list[int] = []
        implied: set[int] = set()
        for t in direct:  # latest first: a later dependency implies what it depends on
            if t not in implied:
                keep.append(t)
                implied |= closure[t]
        deps[s] = sorted(keep)
        closure[s] = set(keep) | implied
    return deps


def _conflict(a: Task, b: Task) -> bool:
    for pa, na, wa in a.regions:
        for pb, nb, wb in b.regions:
            if (wa or wb) and pa < pb + nb and pb < pa + na:
                return True
    return False


def plan(source: str, tasks: Sequence[Task], profile: bool = False) -> Plan:
    """The cooperative program and segments for `tasks` (the steps with work, in order) of the program
    `source` (every step alone when none can run cooperatively). `profile`: the persistent kernels take
    a fourth argument, T, where each participant records per step the cycle counter at the start of its
    first chunk (T[2 i], a minimum) and at the end of its last (T[2 i + 1], a maximum)."""
    extents = kernel_extents(source)
    sizes: list[tuple[tuple[int, int, int], tuple[int, int, int]] | None] = []
    forms: dict[str, Phased | None] = {}
    for t in tasks:
        ext = extents.get(t.kernel)
        ok = ext is not None and cooperative(source[ext[0]:ext[2]])
        if ok and ("barrier" in source[ext[1]:ext[2]] or "__local" in source[ext[1]:ext[2]]):
            form = phased(source[ext[1]:ext[2]])
            ok = form is not None
            forms[t.kernel] = form
        sizes.append(_sizes(t) if ok else None)
    # segments: maximal runs of cooperative steps, and every other step alone
    segments: list[Segment] = []
    run: list[int] = []
    for i, s in enumerate(sizes):
        if s is None:
            if run:
                segments.append(Segment(tuple(run), f"tessel_coop_{len(segments)}"))
                run = []
            segments.append(Segment((i,), None))
        else:
            run.append(i)
    if run:
        segments.append(Segment(tuple(run), f"tessel_coop_{len(segments)}"))
    # the program: each cooperative kernel as a function of its ids (two for a phased one), others dropped
    # one function a kernel and size: a kernel several launches share (share.py) may run at several sizes,
    # which become literals in its function
    used: dict[str, list[tuple[tuple[int, int, int], tuple[int, int, int]]]] = {}
    for i in range(len(tasks)):
        size = sizes[i]
        if size is not None and size not in used.setdefault(tasks[i].kernel, []):
            used[tasks[i].kernel].append(size)
    calls = {i: _variant(tasks[i].kernel, used[tasks[i].kernel], sizes[i])
             for i in range(len(tasks)) if sizes[i] is not None}
    dims = {t.kernel: len(t.global_size) for t in tasks}
    ids = ", const int _g0, const int _g1, const int _g2, const int _l0, const int _l1, const int _l2"
    pieces, at = [], 0
    for name, (start, close, end) in sorted(extents.items(), key=lambda kv: kv[1][0]):
        pieces.append(source[at:start])
        at = end
        if name not in used:
            continue
        for groups, local in used[name]:
            variant = _variant(name, used[name], (groups, local))
            # not inlined: one segment kernel holding every body would take LLVM minutes to optimize
            head = (source[start:close].replace("__kernel", "__attribute__((noinline)) static", 1)
                    .replace(f" {name}(", f" {variant}(", 1) + ids)
            form = forms.get(name)
            if form is None:
                pieces.append(head + _rewrite_ids(source[close:end], groups, local, dims[name]) + "\n")
                continue
            head += ", __global char* _scratch)"
            views, off = [], 0
            for t, a, n in form.arrays:
                views.append(f"    __global {t}* {a} = (__global {t}*)(_scratch + {off});")
                off += _align(SIZES[t] * n)
            for suffix, code in (("_fill", form.fill), ("", form.rest)):
                text = "\n".join(["{", *views, code, "}"]).replace("__local", "__global")
                pieces.append(head.replace(f" {variant}(", f" {variant}{suffix}(", 1) + " "
                              + _rewrite_ids(text, groups, local, dims[name]) + "\n")
    pieces.append(source[at:])
    scratch = max([f.scratch for f in forms.values() if f is not None] + [0])
    out = [KERNEL_ATTRIBUTE.sub("", "".join(pieces)), RUNTIME]  # no kernels left for them
    table: list[int] = []
    base: dict[int, int] = {}
    for i, t in enumerate(tasks):
        base[i] = len(table)
        table.extend(p for p, _, _ in t.regions)
    deps = dependencies(tasks, range(len(tasks)))
    counters = 2 * len(tasks) + 1  # a half: claimed and done a step, then the abort flag
    emit = _Emitter(tasks, sizes, forms, base, deps, scratch, calls, profile)
    if any(s is not None for s in sizes):
        out.append(emit.kernel(f"{POOL_KERNEL}_run", [i for i, s in enumerate(sizes) if s is not None], [],
                               "__attribute__((noinline)) static void"))
        out.append(emit.pool(counters))
    for k, seg in enumerate(segments):
        if seg.kernel is None:
            continue
        after = segments[k + 1].steps[0] if k + 1 < len(segments) else None
        # before the calling thread leaves a segment: the results the step after it reads (it runs alone
        # there), or at the end of the run every step
        waits = deps[after] if after is not None else [i for i, s in enumerate(sizes) if s is not None]
        out.append(emit.kernel(seg.kernel, list(seg.steps), waits))
    return Plan("\n".join(out), segments, table, counters, scratch, profile)


RUNTIME = """
// cooperative execution (targets/opencl/cooperative.py): counters S[2 i] (claimed work-groups of step i)
// and S[2 i + 1] (work-groups done)
// and S[A], set by the host when its part of a run failed: the pool's work-groups then leave
static bool tessel_wait(volatile __global int* S, const int i, const int n, const int A) {
    while (S[i] < n) {
        if (S[A]) return false;
    }
    atomic_or(&S[i], 0);  // an acquire: nothing below is read before the step's results are
    return true;
}
"""


POOL_KERNEL = "tessel_pool"
"""The pool's persistent kernel: every cooperative step of each run, in order (a step that runs alone is
the calling thread's, and only waited for), run after run while the host keeps starting them."""
POOL_WAIT_US = 700
"""How long the pool's work-group waits for the next run before it leaves (docs/opencl.md "Cooperative
execution"), timed by the cycle counter (a kernel argument: CYCLE_COUNTER's rate, measured once a process,
times this): back-to-back runs then pay neither the pool's launch (~20 us in this VM) nor its wake-up
(~20 us), and an idle process holds no core for longer. The wait starts when the pool's part of a run ends,
before the calling thread's tail and the host's work between runs: at 0.14 ms the pool left between a
squeezenet's API runs, and with PoCL's workers pinned (POCL_AFFINITY=1) each relaunch landed on the calling
thread's core half the time (median 5.7-5.8 ms, p90 10-11; waiting 0.7 ms: 3.1-3.7 ms, p90 3.6-4.3)."""
POOL_SPIN = 1 << 21
"""Without a cycle counter (not x86): the reads of K[GEN] that stand for POOL_WAIT_US (0.73 ms on the
Zen 4 VM; how long they take depends on the CPU)."""
GEN, IN = 0, 1
"""The control words K: the generation the host started last (-1: leave), the one the pool is in."""
HALF_GAP = 32
"""ints between the counters' two halves (apart by a cache line)."""


@dataclass
class _Emitter:
    """Writes persistent kernels: for each step, its waits, then the loop that claims chunks of its
    work-groups and runs them work-item by work-item."""

    tasks: Sequence[Task]
    sizes: Sequence[tuple[tuple[int, int, int], tuple[int, int, int]] | None]
    forms: dict[str, Phased | None]
    base: dict[int, int]
    deps: dict[int, list[int]]
    scratch: int
    calls: dict[int, str]  # the function each cooperative step calls (its kernel's, for its size)
    profile: bool = False

    def total(self, s: int) -> int:
        """The done count of step `s` once it is complete: its work-groups, or 1 for a step run alone."""
        size = self.sizes[s]
        return 1 if size is None else size[0][0] * size[0][1] * size[0][2]

    def wait(self, s: int) -> str:
        return f"    if (!tessel_wait(S, {2 * s + 1}, {self.total(s)}, {2 * len(self.tasks)})) return;"

    def kernel(self, name: str, steps: Sequence[int], waits: Sequence[int],
               head: str = "__kernel void") -> str:
        times = ", __global ulong* T0" if self.profile else ""
        lines = [f"{head} {name}(__global const ulong* restrict P, __global int* C, "
                 f"__global char* X{times}) {{",
                 "    volatile __global int* S = C;",
                 f"    __global char* _scratch = X + get_group_id(0) * {self.scratch};"]
        if self.profile:  # a participant's own times
            lines.append(f"    __global ulong* T = T0 + get_group_id(0) * {2 * len(self.tasks)};")
        for s in steps:
            lines += self.step(s)
        lines += [self.wait(d) for d in waits]
        lines.append("}")
        return "\n".join(lines)

    def pool(self, counters: int) -> str:
        """The pool's persistent kernel: runs generation after generation (K[GEN], set by the host as a
        run starts) on the counters' half of its parity, saying in K[IN] which one it is in (-1: none);
        between runs it spins for the next for up to POOL_WAIT_US (POOL_SPIN reads of K[GEN] where there is
        no cycle counter), then leaves. A negative generation sends it away at once."""
        times = ", __global ulong* T0, const int TH" if self.profile else ""
        per_half = ", T0 + (g & 1) * TH" if self.profile else ""
        if CYCLE_COUNTER:  # WAIT: POOL_WAIT_US in cycle-counter ticks
            wait = ", const ulong WAIT"
            # (the builtin's value is stored to a ulong before any arithmetic: used in an expression
            # directly, PoCL 3.1 mixes its 128-bit type with 64-bit operands and LLVM aborts the build)
            spin = ["            const ulong t0 = __builtin_readcyclecounter();",
                    f"            while (K[{GEN}] == g) {{",
                    "                const ulong t = __builtin_readcyclecounter();",
                    "                if (t - t0 > WAIT) return;",
                    "            }"]
        else:
            wait = ""
            spin = [f"            for (int spin = 0; K[{GEN}] == g; ++spin)",
                    f"                if (spin == {POOL_SPIN}) return;"]
        return "\n".join([
            f"__kernel void {POOL_KERNEL}(__global const ulong* restrict P, __global int* C, "
            f"__global char* X{times}, volatile __global int* K{wait}) {{",
            f"    int g = K[{GEN}];",
            "    while (g >= 0) {",
            f"        atomic_xchg(&K[{IN}], g);  // a full fence: K[GEN] is read after K[IN] is written",
            f"        if (K[{GEN}] == g) {{",
            f"            {POOL_KERNEL}_run(P, C + (g & 1) * {counters + HALF_GAP}, X{per_half});",
            f"            atomic_xchg(&K[{IN}], -1);",
            *spin,
            "        } else {",
            f"            atomic_xchg(&K[{IN}], -1);",
            "        }",
            f"        g = K[{GEN}];",
            "    }",
            "}",
        ])

    def step(self, s: int) -> list[str]:
        t = self.tasks[s]
        size = self.sizes[s]
        assert size is not None
        groups, local = size
        n, chunk = self.total(s), max(1, self.total(s) // CHUNKS)
        args = ", ".join(f"(__global void*)P[{self.base[s] + j}]" for j in range(len(t.regions)))
        args += ", g0, g1, g2, l0, l1, l2"
        gid = [
            f"g % {groups[0]}" if groups[1] * groups[2] > 1 else "g",
            f"(g / {groups[0]}) % {groups[1]}" if groups[2] > 1 else f"g / {groups[0]}",
            f"g / {groups[0] * groups[1]}",
        ]
        gid = [("0" if groups[d] == 1 else gid[d]) for d in range(3)]
        loops = [f"const int l{d} = 0;" if local[d] == 1 else f"for (int l{d} = 0; l{d} < {local[d]}; ++l{d})"
                 for d in (2, 1, 0)]
        fn = self.calls[s]
        if self.forms.get(t.kernel) is None:
            calls = _nest(loops, f"{fn}({args});")
        else:  # every work-item's fill, then every work-item's rest: the barrier
            calls = (_nest(loops, f"{fn}_fill({args}, _scratch);")
                     + _nest(loops, f"{fn}({args}, _scratch);"))
        start, end = [], []
        if self.profile:
            start = ["        const ulong _t0 = __builtin_readcyclecounter();"]
            end = ["        const ulong _t1 = __builtin_readcyclecounter();",
                   f"        T[{2 * s}] = min(T[{2 * s}], _t0);",
                   f"        T[{2 * s + 1}] = max(T[{2 * s + 1}], _t1);"]
        return [
            f"    // step {s}: {t.kernel}, {'x'.join(map(str, groups))} groups of "
            f"{'x'.join(map(str, local))}",
            *[self.wait(d) for d in self.deps[s]],
            f"    for (int c = atomic_add(&S[{2 * s}], {chunk}); c < {n}; "
            f"c = atomic_add(&S[{2 * s}], {chunk})) {{",
            f"        const int e = min(c + {chunk}, {n});",
            *start,
            "        for (int g = c; g < e; ++g) {",
            f"            const int g0 = {gid[0]}, g1 = {gid[1]}, g2 = {gid[2]};",
            *[f"            {ln}" for ln in calls],
            "        }",
            *end,
            f"        atomic_add(&S[{2 * s + 1}], e - c);",
            "    }",
        ]


CYCLE_COUNTER = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
"""Whether profiling plans may read the cycle counter: the TSC on x86; on other processors clang's
__builtin_readcyclecounter may read a register user code cannot (AArch64's PMCCNTR traps)."""
CYCLES = "__kernel void tessel_cycles(__global ulong* o) { o[0] = __builtin_readcyclecounter(); }\n"


_RATE: list[float] = []
"""The cycle counter's rate once measured (the TSC's: one for the machine, so once a process)."""


def _cycles_per_ns(cl: Any, context: Any, queue: Any) -> float:
    """The rate of the cycle counter the pool's wait and the profiling plans read (clang's
    __builtin_readcyclecounter: the TSC on x86), against the host's monotonic clock: the median of three
    5 ms intervals, measured the first time."""
    if not _RATE:
        _RATE.append(_measure_rate(cl, context, queue))
    return _RATE[0]


def _measure_rate(cl: Any, context: Any, queue: Any) -> float:
    program = cl.Program(context, CYCLES).build(devices=[queue.device])
    kernel = cl.Kernel(program, "tessel_cycles")
    flags = cl.svm_mem_flags.READ_WRITE | cl.svm_mem_flags.SVM_FINE_GRAIN_BUFFER
    out = cl.svm_empty(context, flags, 1, np.uint64, alignment=128)
    kernel.set_args(cl.SVM(out))

    def read() -> tuple[int, float]:
        t0 = time.perf_counter_ns()
        cl.enqueue_nd_range_kernel(queue, kernel, (1,), (1,))
        queue.finish()
        return int(out[0]), (t0 + time.perf_counter_ns()) / 2

    rates = []
    for _ in range(3):  # the median of three 5 ms intervals: a descheduled read spoils one at most
        c0, t0 = read()
        time.sleep(0.005)
        c1, t1 = read()
        rates.append((c1 - c0) / (t1 - t0))
    return sorted(rates)[1]


def _nest(loops: list[str], call: str) -> list[str]:
    """The work-item loops around `call` (a `const int lD = 0;` for a dim of one work-item)."""
    out, indent = ["{"], "    "
    for ln in loops:
        if ln.startswith("const"):
            out.append(indent + ln)
        else:
            out.append(indent + ln + " {")
            indent += "    "
    out.append(indent + call)
    while indent:
        indent = indent[:-4]
        out.append(indent + "}")
    return out


class Runner:
    """Runs an Executable's steps cooperatively (module docstring): the pool device and its inline
    companion share one context, and every buffer is fine-grained SVM."""

    def __init__(self, cl: Any, context: Any, device: Any, companion: Any, the_plan: Plan, program: Any,
                 inline: Sequence[tuple[Any, tuple[int, ...], tuple[int, ...] | None]]):
        """`inline[i]`: the companion's kernel object and launch sizes of task i, for the steps that run
        alone."""
        self.cl, self.plan = cl, the_plan
        flags = cl.svm_mem_flags.READ_WRITE | cl.svm_mem_flags.SVM_FINE_GRAIN_BUFFER
        self.table = cl.svm_empty(context, flags, max(len(the_plan.table), 1), np.uint64, alignment=128)
        self.table[: len(the_plan.table)] = the_plan.table
        n = the_plan.counters
        self.counters = cl.svm_empty(context, flags, 2 * n + 32, np.int32, alignment=128)
        self.counters[:] = 0
        self.workers = (max(1, int(device.max_compute_units) - 1),)
        # scratch memory for the local arrays of phased kernels: one slice per pool work-group, then the
        # calling thread's
        self.scratch = cl.svm_empty(context, flags, max(the_plan.scratch * (self.workers[0] + 1), 4),
                                    np.uint8, alignment=128)
        mine = self.scratch[the_plan.scratch * self.workers[0]:] if the_plan.scratch else self.scratch
        self.halves = [self.counters[: n], self.counters[n + HALF_GAP : 2 * n + HALF_GAP]]
        self.control = cl.svm_empty(context, flags, 32, np.int32, alignment=128)  # K: GEN, IN
        self.control[:] = -1
        self.pool_queue = cl.CommandQueue(context, device)
        self.inline_queue = cl.CommandQueue(context, companion)
        ntasks, parts = (n - 1) // 2, self.workers[0] + 1
        # profiling: per half, each participant's first start and last end of every step (cycle counter)
        self.times = cl.svm_empty(context, flags, max(2 * parts * 2 * ntasks, 1), np.uint64, alignment=128)
        self.time_halves = [self.times[h * parts * 2 * ntasks : (h + 1) * parts * 2 * ntasks] for h in (0, 1)]
        self.lone_ns: dict[int, int] = {}
        self.ticks_per_ns = _cycles_per_ns(cl, context, self.inline_queue) if the_plan.profile else 1.0
        self.pool: Any = None  # the pool's persistent kernel (one for both halves), if the plan has steps
        if program is not None:
            self.pool = cl.Kernel(program, POOL_KERNEL)
            args = [cl.SVM(self.table), cl.SVM(self.counters), cl.SVM(self.scratch)]
            if the_plan.profile:
                args += [cl.SVM(self.times), np.int32(parts * 2 * ntasks)]
            args.append(cl.SVM(self.control))
            if CYCLE_COUNTER:
                rate = _cycles_per_ns(cl, context, self.inline_queue)
                args.append(np.uint64(POOL_WAIT_US * 1e3 * rate))
            self.pool.set_args(*args)
        # per half, the calling thread's commands of a run in order: (kernel, global, local, done flag):
        # its segment kernels and lone steps (a lone step's done flag is set once it ran: later steps on the
        # pool wait for it)
        Command = tuple[Any, tuple[int, ...], tuple[int, ...] | None, int | None]
        self.commands: list[list[Command]] = [[], []]
        for h, half in enumerate(self.halves):
            host_args = [cl.SVM(self.table), cl.SVM(half), cl.SVM(mine)]
            if the_plan.profile:
                host_args.append(cl.SVM(self.time_halves[h][self.workers[0] * 2 * ntasks :]))
            for seg in the_plan.segments:
                if seg.kernel is None:
                    self.commands[h].append((*inline[seg.steps[0]], 2 * seg.steps[0] + 1))
                    continue
                k = cl.Kernel(program, seg.kernel)
                k.set_args(*host_args)
                self.commands[h].append((k, (1,), (1,), None))
        self.pending: Any = None  # the pool's persistent kernel, once launched: it ends when idle or parked
        self.runs = 0

    def run(self) -> None:
        """One run: returns when every step is done (the caller then reads the results). The pool's work-group
        of the last run may still be spinning for this one (POOL_WAIT_US): it then joins at once; otherwise a
        new one is launched."""
        cl = self.cl
        r = self.runs
        h = r & 1
        self.runs += 1
        control = self.control
        while control[IN] >= 0 and control[IN] & 1 == h and control[IN] != r:
            pass  # the pool is still in run r - 2, whose counters this run reuses: it is leaving
        half = self.halves[h]
        half[:] = 0
        if self.plan.profile:
            self.time_halves[h][0::2] = np.iinfo(np.uint64).max
            self.time_halves[h][1::2] = 0
        control[GEN] = r  # after the counters are clear (x86 keeps stores in order)
        if self.pool is not None and (
                self.pending is None
                or self.pending.command_execution_status == cl.command_execution_status.COMPLETE):
            self.pending = cl.enqueue_nd_range_kernel(self.pool_queue, self.pool, self.workers, (1,))
        launch = cl.enqueue_nd_range_kernel
        try:
            for k, g, lsize, flag in self.commands[h]:
                t0 = time.perf_counter_ns()
                launch(self.inline_queue, k, g, lsize)
                if flag is not None:  # a lone step: it ran inside the enqueue (the basic device)
                    self.inline_queue.finish()
                    self.lone_ns[flag // 2] = time.perf_counter_ns() - t0
                    half[flag] = 1
            self.inline_queue.finish()
        except BaseException:
            half[-1] = 1  # the pool's work-group stops waiting for steps nobody runs
            raise

    def park(self) -> None:
        """Send the pool's work-group away now rather than after its spin (before the pool device runs
        other work, or the buffers go away), and wait until it has left."""
        self.control[GEN] = -1
        if self.pending is not None:
            self.pending.wait()
            self.pending = None

    def spans(self) -> dict[int, float]:
        """After a run of a profiling plan: each step's span in ns, from the first start of a chunk of it
        to the last end (any participant), as an event's start and end would give it; a lone step's is
        its enqueue on the calling thread."""
        n = len(self.time_halves[0]) // (2 * (self.workers[0] + 1))
        t = self.time_halves[(self.runs - 1) & 1].reshape(self.workers[0] + 1, n, 2)
        start, end = t[:, :, 0].min(axis=0), t[:, :, 1].max(axis=0)
        out = {i: float(end[i] - start[i]) / self.ticks_per_ns for i in range(n) if end[i] > 0}
        out.update(self.lone_ns)
        return out

    def drain(self) -> None:
        """Wait until the pool has left every run (before the buffers go away)."""
        self.park()
        self.pool_queue.finish()
