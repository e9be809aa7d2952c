"""tessel's on-disk caches: entries that cannot hurt, and the compiled-program cache built on them.

An entry is one file: a header line `tessel-cache 1 <payload bytes> <payload sha256>`, then the payload.
`write_entry` writes a temporary file of a unique name in the entry's folder and renames it over the entry
(`os.replace` is atomic), so a reader finds the old entry or the new one, never half of one, however many
processes fill the folder at once. `read_entry` checks the header, the length and the hash: an entry that
fails (empty, truncated, a flipped byte, not tessel's) is removed, reported as one CacheWarning line naming
the file, and read as missing, so the caller rebuilds it. A cache that cannot be written (a read-only
folder, a full disk) is skipped: a cache never fails a build. docs/opencl.md "Caches".

Programs (`build_program`) are kept under a hash of their source, build options, devices (fingerprints)
and pyopencl version, the payload being the devices' binaries: loading one costs milliseconds where PoCL
takes 0.15-1 s to build from source. A binary is never handed to the driver unverified: PoCL loads a
corrupt one without complaint and crashes running it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import struct
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from . import device as dev

MAGIC = b"tessel-cache"
VERSION = 1
PROGRAM_FORMAT = "program/1"
"""Part of every program key: a change to how programs are stored gives new keys, not bad entries."""

PROGRAM_LOADS: Counter[str] = Counter()
"""How this process got its programs: "binary" (from the disk cache), "source" (built, then stored) or
"driver" (built by a driver that keeps its own cache: `stores_binaries`)."""


@dataclass
class Build:
    """One program this process built or loaded: what `--time-build` prints a line of."""

    name: str
    """What the program is for: 'model', 'inline', 'cooperative', ..."""
    source_bytes: int
    kernels: int
    seconds: float
    how: str
    """'binary' (a hit: loaded from tessel's cache), 'source' (a miss: built, then stored) or 'driver'
    (handed to a driver that keeps its own cache: a hit or a miss there)."""


class BuildLog:
    """Every program build of this process, in order (`BUILD_LOG`); `mark()` and `since(mark)` give the
    builds of one stretch of work (a compile, a load, a run)."""

    def __init__(self) -> None:
        self.builds: list[Build] = []
        self._lock = threading.Lock()

    def add(self, build: Build) -> None:
        with self._lock:
            self.builds.append(build)

    def mark(self) -> int:
        return len(self.builds)

    def since(self, mark: int = 0) -> list[Build]:
        return self.builds[mark:]

    def summary(self, mark: int = 0) -> dict[str, Any]:
        builds = self.since(mark)
        return {"programs": len(builds), "misses": sum(b.how == "source" for b in builds),
                "source_bytes": sum(b.source_bytes for b in builds),
                "seconds": sum(b.seconds for b in builds)}


BUILD_LOG = BuildLog()


class CacheWarning(UserWarning):
    """A cache entry (or a tuning record) was bad: it is discarded and rebuilt (or skipped)."""


def warn(message: str) -> None:
    """Show `message` (one line naming the file) as `tessel:0: CacheWarning: message` on stderr; Python's
    usual location would name this module and add a line of its source."""
    warnings.warn_explicit(message, CacheWarning, "tessel", 0)


def discard(path: str, problem: str, action: str = "rebuilt") -> None:
    """Remove a bad entry (whichever process notices first) and say so."""
    with contextlib.suppress(OSError):
        os.unlink(path)
    warn(f"{path}: {problem}; discarded and {action}")


def _payload(data: bytes) -> tuple[bytes | None, str]:
    """(the payload, "") of a valid entry, else (None, what is wrong)."""
    if not data:
        return None, "empty file"
    end = data.find(b"\n", 0, 128)
    fields = data[:end].split(b" ") if end >= 0 else []
    if len(fields) != 4 or fields[0] != MAGIC:
        if end < 0 and (data.startswith(MAGIC) or MAGIC.startswith(data)):
            return None, "truncated in its header"
        return None, "a corrupt header" if data.startswith(MAGIC) else "not a tessel cache entry"
    if fields[1] != str(VERSION).encode():
        return None, f"entry format {fields[1].decode(errors='replace')}, this tessel reads {VERSION}"
    payload = data[end + 1:]
    try:
        size = int(fields[2])
    except ValueError:
        return None, "a corrupt header"
    if len(payload) < size:
        return None, f"truncated ({len(payload)} of {size} bytes)"
    if len(payload) > size:
        return None, f"corrupt ({len(payload)} bytes, its header says {size})"
    if hashlib.sha256(payload).hexdigest().encode() != fields[3]:
        return None, "corrupt (its sha256 does not match)"
    return payload, ""


def read_entry(path: str, action: str = "rebuilt", legacy: bytes = b"") -> bytes | None:
    """The payload of the entry at `path`; None when it is missing, unreadable or bad (a bad one is
    removed with a CacheWarning ending "discarded and <action>"). A file starting with `legacy` (when
    given) is one written before the header: its bytes are returned unchecked, for the caller to parse."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if legacy and data.startswith(legacy):
        return data
    payload, problem = _payload(data)
    if payload is None:
        discard(path, problem, action)
    return payload


def write_entry(path: str, payload: bytes) -> bool:
    """Store `payload` at `path` atomically; False (and nothing left behind) when the folder cannot be
    written."""
    header = b"%s %d %d %s\n" % (MAGIC, VERSION, len(payload), hashlib.sha256(payload).hexdigest().encode())
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        replace_atomically(path, [header, payload])
    except OSError:
        return False
    return True


def replace_atomically(path: str, chunks: Sequence[bytes | memoryview]) -> None:
    """Write `chunks` to a temporary file of a unique name beside `path`, then rename it over `path`: a
    reader sees the old file or the new one, never half of one, and two writers never share a temporary
    file (the last rename wins). Raises OSError, leaving nothing behind."""
    with atomic_file(path) as f:
        for chunk in chunks:
            f.write(chunk)


@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[Any]:
    """A binary file to write `path` through: a temporary file of a unique name beside it, renamed over
    `path` when the block ends, removed when it raises (as `replace_atomically`)."""
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)),
                       f".{os.path.basename(path)}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold an exclusive lock on `path`.lock for a read-modify-write of `path` (fcntl.flock: released
    when the process dies). Without fcntl, or when the lock file cannot be made, no lock: the writes stay
    atomic, only an update may be lost."""
    fd = None
    try:
        import fcntl

        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except (ImportError, OSError):
        pass
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


# programs -------------------------------------------------------------------------------------------------
def program_key(source: str, options: Sequence[str], devices: Sequence[Any]) -> str:
    parts = [PROGRAM_FORMAT, source, " ".join(options), dev.cl().VERSION_TEXT,
             *(dev.fingerprint(d) for d in devices)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _pack(binaries: Sequence[bytes]) -> bytes:
    return struct.pack("<I", len(binaries)) + b"".join(struct.pack("<Q", len(b)) + b for b in binaries)


def _unpack(payload: bytes, count: int) -> list[bytes] | None:
    """The binaries of a payload holding `count` of them, else None."""
    if len(payload) < 4 or struct.unpack_from("<I", payload)[0] != count:
        return None
    out, at = [], 4
    for _ in range(count):
        if at + 8 > len(payload):
            return None
        (size,) = struct.unpack_from("<Q", payload, at)
        out.append(payload[at + 8:at + 8 + size])
        at += 8 + size
    return out if at == len(payload) and all(out) else None


def _binaries(prg: Any, devices: Sequence[Any]) -> list[bytes] | None:
    """The program's binaries for `devices` (in the context's order), or None when the driver does not
    say which is whose. PoCL lists binaries only for the devices the program was built for."""
    cl = dev.cl()
    listed = prg.get_info(cl.program_info.DEVICES)
    binaries = list(prg.get_info(cl.program_info.BINARIES))
    if len(binaries) == len(listed):
        binaries = [b for d, b in zip(listed, binaries, strict=True) if d in devices]
    if len(binaries) != len(devices) or not all(binaries):
        return None
    return [bytes(b) for b in binaries]


def stores_binaries(devices: Sequence[Any]) -> bool:
    """Whether tessel keeps the binaries of programs for `devices` (TESSEL_PROGRAM_BINARIES: "always",
    "never", or "auto", the default: unless the driver keeps its own cache). PoCL (POCL_KERNEL_CACHE on,
    its default) keeps every program it builds and every kernel it compiles for a work-group size, keyed
    by the source and options; asking it for a program's binaries compiles each kernel once more for any
    work-group size (squeezenet: 11 s on top of the 9 s its first run compiles), and loading those binaries
    still compiles each kernel for its work-group size on its first launch, so on PoCL tessel's copy cost
    a cold first run half its time and saved a warm one a second."""
    setting = os.environ.get("TESSEL_PROGRAM_BINARIES", "auto").strip().lower()
    if setting in ("always", "never"):
        return setting == "always"
    own = all("Portable Computing Language" in d.platform.name for d in devices)
    return not (own and os.environ.get("POCL_KERNEL_CACHE", "1") != "0")


def build_program(context: Any, source: str, options: Sequence[str], devices: Sequence[Any],
                  folder: str, name: str = "program") -> Any:
    """The program of `source` built for `devices` (all the context's when empty): from the binaries
    cached in `folder` when they are there and sound, else from source (then cached). A build error from
    source raises pyopencl's RuntimeError. Each build goes to BUILD_LOG under `name`."""
    t0 = time.perf_counter()
    prg, how = _build_program(context, source, options, devices, folder)
    BUILD_LOG.add(Build(name, len(source.encode()), source.count("__kernel"), time.perf_counter() - t0, how))
    return prg


def _build_program(context: Any, source: str, options: Sequence[str], devices: Sequence[Any],
                   folder: str) -> tuple[Any, str]:
    cl = dev.cl()
    devs = [d for d in context.devices if not devices or d in devices]
    if not stores_binaries(devs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prg = cl.Program(context, source).build(options=list(options), devices=list(devices) or None,
                                                    cache_dir=False)
        PROGRAM_LOADS["driver"] += 1
        return prg, "driver"
    path = os.path.join(folder, program_key(source, options, devs) + ".bin")
    payload = read_entry(path)
    if payload is not None:
        binaries = _unpack(payload, len(devs))
        try:
            if binaries is None:
                raise ValueError(f"does not hold {len(devs)} device binaries")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pyopencl's CompilerWarning: build logs
                prg = cl.Program(context, devs, binaries).build(options=list(options), devices=devs)
            PROGRAM_LOADS["binary"] += 1
            return prg, "binary"
        except (ValueError, cl.Error) as e:
            lines = str(e).strip().splitlines()
            discard(path, f"the cached program does not load ({lines[0] if lines else type(e).__name__})")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prg = cl.Program(context, source).build(
            options=list(options), devices=list(devices) or None, cache_dir=False  # ours, not pyopencl's
        )
    PROGRAM_LOADS["source"] += 1
    binaries = _binaries(prg, devs)
    if binaries is not None:
        write_entry(path, _pack(binaries))
    return prg, "source"


# build records -------------------------------------------------------------------------------------------
COLD_SECONDS_PER_KB = 0.03
"""What building a program from source and compiling its kernels at their first launches costs a KiB of
source where nothing was measured on this device yet (PoCL on an AMD EPYC: densenet121's 960 KiB 24 s,
resnet50's 302 KiB 9.5 s; on the Xeon VM squeezenet's 277 KiB 10 s); tuner.py reserves time with it."""
BUILT = "built.json"


def built_key(source: str, way: str, devices: Sequence[Any]) -> str:
    """The key of a model's program for one way of running it ('model', 'inline', 'cooperative') on
    `devices`, in the build records."""
    parts = [PROGRAM_FORMAT, way, source, dev.cl().VERSION_TEXT, *(dev.fingerprint(d) for d in devices)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _records(folder: str) -> dict[str, Any]:
    import json

    payload = read_entry(os.path.join(folder, BUILT))
    try:
        table = json.loads(payload) if payload else {}
    except ValueError:
        table = {}
    return table if isinstance(table, dict) else {}


def was_built(folder: str, key: str) -> bool:
    """Whether a program of this key was built and its kernels compiled on this machine before (so the
    driver's cache, or tessel's, holds it: building it again costs a load, not a compile)."""
    return key in _records(folder).get("programs", {})


def cold_rate(folder: str, fingerprint: str) -> float:
    """Seconds a KiB of source took the last time a program was built cold on this device (a build and
    its kernels' first launches), else COLD_SECONDS_PER_KB."""
    rate = _records(folder).get("rates", {}).get(fingerprint)
    return float(rate) if isinstance(rate, (int, float)) and rate > 0 else COLD_SECONDS_PER_KB


def note_built(folder: str, key: str, seconds: float, source_bytes: int, fingerprint: str,
               cold: bool) -> None:
    """Record that the program `key` is built on this machine; `cold`: it was built from nothing in
    `seconds` (its build and its kernels' first launches), which updates the device's rate."""
    import json

    path = os.path.join(folder, BUILT)
    with locked(path):
        table = _records(folder)
        programs = table.setdefault("programs", {})
        programs[key] = round(seconds, 3)
        if len(programs) > 4096:  # the oldest first: dicts keep their order
            for old in list(programs)[: len(programs) - 4096]:
                del programs[old]
        if cold and source_bytes >= 4096:
            table.setdefault("rates", {})[fingerprint] = seconds / (source_bytes / 1024)
        write_entry(path, json.dumps(table).encode())
