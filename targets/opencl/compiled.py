"""The compiled-module cache: what `tessel.compile` made of a model, kept on disk so that compiling the
same model again (in any later process) loads it instead of importing, optimizing and lowering it again.

An entry is two files in `<cache_dir>/modules/`:
- `<key>.weights`: the module's weights, 64-byte aligned, mapped on load (never read into memory twice);
- `<key>.tsl`: the module's text, its resources section pointing into the weights file by offset, as
  `tessel-codegen --external-weights` writes it, stored as a cache entry (cache.py: a header with the
  text's sha256, written atomically).

The weights file is written (atomically) before the text, so a text always finds its weights; each weight
is checked against the sha256 the text gives for it when the entry is read, so a weights file that does
not match (replaced, truncated) makes the entry a miss, discarded with a CacheWarning, never a wrong model.

The key is a sha256 over everything the result depends on: the model's bytes, the compile options, the
tuning records' bytes, the device (its fingerprint and calibrated peaks: `DeviceInfo`) and tessel's own
code (`code_fingerprint`: its source files), so an upgrade or an edit of tessel gives new keys, not stale
entries. A model given by path also leaves a `<path key>.path` note of its key under a key of the file's
real path and stat (`path_key`), so compiling that file again finds its entry without reading the file.
A dynamic model's sizes, lowered at run time, are kept the same way under the model's key and the sizes
(`size_key`). The folder is trimmed to TESSEL_MODULE_CACHE_MB (default 4096) after each store, the
entries used least recently going first. TESSEL_MODULE_CACHE=0 turns the cache off. docs/opencl.md
"Caches".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...ir.core import Module
from .cache import atomic_file, discard, read_entry, write_entry

FORMAT = "module/1"
"""Part of every key: a change to how entries are stored gives new keys, not bad entries."""
LIMIT_MB = 4096
"""The folder's default size limit (TESSEL_MODULE_CACHE_MB)."""

_CODE: str | None = None
NOT_CODE = frozenset({"tests", "bench", "docs", "lit_tests", "build", "dist", "node_modules"})
"""Folders of a checkout that hold no code tessel runs (nor do hidden folders such as .venv)."""


def enabled() -> bool:
    return os.environ.get("TESSEL_MODULE_CACHE", "1").strip() not in ("0", "off", "no", "false")


def folder() -> str:
    from .runtime import cache_dir

    return os.path.join(cache_dir(), "modules")


def code_fingerprint() -> str:
    """A sha256 of tessel's Python sources (paths and bytes): what every key holds, so that entries made
    by another version (or an edited checkout) of tessel are never used. Computed once a process."""
    global _CODE
    if _CODE is None:
        root = Path(__file__).resolve().parents[2]
        h = hashlib.sha256()
        for top, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")) and d not in NOT_CODE)
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(top, name)
                    h.update(os.path.relpath(path, root).encode() + b"\0" + Path(path).read_bytes() + b"\0")
        _CODE = h.hexdigest()
    return _CODE


def model_key(data: bytes, text: bool, options: dict[str, Any], info: Any) -> str | None:
    """The key of `data` (the model's bytes: ONNX, or tessel IR when `text`) compiled with `options`
    (JSON-able) for device `info`; None when the model cannot be cached: one that may keep its weights in
    side files (ONNX whose bytes name a `location`, IR with `external:` weights), which the key would not
    cover."""
    if (b":external:" if text else b"location") in data:
        return None
    h = hashlib.sha256()
    for part in (FORMAT, code_fingerprint(), json.dumps(options, sort_keys=True, default=str), repr(info)):
        h.update(part.encode() + b"\0")
    h.update(data)
    return h.hexdigest()


def path_key(path: Path, options: dict[str, Any], info: Any) -> str | None:
    """A key for the model file at `path` as it is now (its real path, size, modification time and inode)
    compiled with `options` for `info`, under which `remember` notes the model's key: a compile of a file
    met before finds its model's key without reading and hashing the file (vgg19: 0.85 s of its 548 MB).
    A file rewritten since has another stat, so another key. None when the file cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = [os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino]
    text = json.dumps([FORMAT, code_fingerprint(), stamp, options, repr(info)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def remembered(by_path: str) -> str | None:
    """The model key `remember` noted under `by_path`, or None."""
    if not enabled():
        return None
    payload = read_entry(os.path.join(folder(), by_path + ".path"), "read again")
    key = payload.decode("ascii", "replace") if payload else ""
    return key if len(key) == 64 and all(c in "0123456789abcdef" for c in key) else None


def remember(by_path: str, key: str) -> None:
    if enabled():
        write_entry(os.path.join(folder(), by_path + ".path"), key.encode("ascii"))


def size_key(key: str, func: str, shapes: Sequence[Sequence[int]]) -> str:
    """The key of func `func` of the module cached under `key`, lowered for input `shapes`."""
    text = json.dumps([FORMAT, key, func, [list(map(int, s)) for s in shapes]])
    return hashlib.sha256(text.encode()).hexdigest()


def load(key: str) -> Module | None:
    """The module stored under `key`, or None (a miss; a bad entry is discarded with a CacheWarning)."""
    if not enabled():
        return None
    base = folder()
    text_path = os.path.join(base, key + ".tsl")
    payload = read_entry(text_path, "compiled again")
    if payload is None:
        return None
    from ...ir.diagnostics import DiagnosticError
    from ...ir.parser import parse_module
    from ...ir.resources import ResourceError

    try:
        module = parse_module(payload, text_path, base_dir=base, register_source=False)
    except (DiagnosticError, ResourceError, OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        discard(text_path, f"its module does not load ({first})", "compiled again")
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(base, key + ".weights"))
        return None
    now = time.time()
    for path in (text_path, os.path.join(base, key + ".weights")):
        with contextlib.suppress(OSError):
            os.utime(path, (now, now))  # used: trimmed last
    return module


def store(key: str, module: Module) -> bool:
    """Keep `module` under `key`; False (and nothing left behind) when the folder cannot be written."""
    if not enabled():
        return False
    import io

    from ...ir.printer import print_module

    base = folder()
    weights = key + ".weights"
    text = io.StringIO()
    try:
        os.makedirs(base, exist_ok=True)
        with atomic_file(os.path.join(base, weights)) as side:  # straight to disk: no copy in memory
            print_module(module, text, external=(side, weights))
    except OSError:
        return False
    if not write_entry(os.path.join(base, key + ".tsl"), text.getvalue().encode("utf-8")):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(base, weights))
        return False
    trim(base)
    return True


def trim(base: str, limit_mb: float | None = None) -> None:
    """Remove the entries used least recently until the folder holds at most `limit_mb` MiB
    (TESSEL_MODULE_CACHE_MB, default LIMIT_MB); an entry's text and weights go together (a `.path` note
    is an entry of its own)."""
    if limit_mb is None:
        try:
            limit_mb = float(os.environ.get("TESSEL_MODULE_CACHE_MB", LIMIT_MB))
        except ValueError:
            limit_mb = LIMIT_MB
    entries: dict[str, list[tuple[float, int, str]]] = {}
    with os.scandir(base) as it:
        for e in it:
            stem, ext = os.path.splitext(e.name)
            if ext in (".tsl", ".weights", ".path") and not e.name.startswith("."):
                with contextlib.suppress(OSError):
                    st = e.stat()
                    entries.setdefault(stem, []).append((st.st_mtime, st.st_size, e.path))
    total = sum(size for files in entries.values() for _, size, _ in files)
    for stem in sorted(entries, key=lambda s: max(t for t, _, _ in entries[s])):
        if total <= limit_mb * (1 << 20):
            break
        for _, size, path in entries[stem]:
            with contextlib.suppress(OSError):
                os.unlink(path)
                total -= size


GROWTH = 8
"""How much larger than its operands a load-time op's result may be and still be folded: a Winograd
filter transform F(4x4, 3x3) gives 36 values for 9, F(6x6, 3x3) 64; a broadcast may give any number."""
NOT_LOAD_TIME = frozenset({"const", "cl.launch", "cl.program", "buf.alloc", "buf.view", "return"})
"""Ops of a lowered func that are not load-time computations on constants."""


def fold_load_ops(module: Module) -> int:
    """Evaluate the load-time ops of `module`'s lowered funcs (a `pack` or `winograd_filter` of a weight,
    which Executable would compute with numpy at every load) into constants, dropping the weights only
    they read: a module read from the cache then loads its packed weights as they are (vgg19's FC weights
    took 3.4 s of packing a load). An op whose result is larger than GROWTH times its operands plus 1 MiB
    (a broadcast, say) stays, so an entry does not grow far past its weights. Returns how many ops it
    folded."""
    from ...passes.common import const_array, const_op, evaluate
    from .dynamic import SPECIALIZE

    folded = 0
    for func in module.funcs:
        if SPECIALIZE in func.attrs:  # not lowered: a dynamic func, or a host plan's, compiled per size
            continue
        block = func.block
        for op in list(block.ops):
            if op.name in NOT_LOAD_TIME or op.regions or not op.results or \
                    not all(t.is_static for t in (*op.operand_types, *op.result_types)):
                continue
            arrays = [const_array(v, module) for v in op.operands]
            if any(a is None for a in arrays):
                continue
            size = sum(r.type.nbytes for r in op.results)
            if size > GROWTH * sum(v.type.nbytes for v in op.operands) + (1 << 20):
                continue
            outs = evaluate(op, arrays, module)  # type: ignore[arg-type]
            for r, a in zip(op.results, outs, strict=True):
                c = const_op(op.loc, _constant(a, r.type, module, f"loaded.{folded}"))
                block.insert_before(op, c)
                r.replace_all_uses_with(c.results[0])
            inputs = [v.op for v in op.operands]
            op.erase()
            for producer in inputs:
                if producer is not None and producer.parent is block and \
                        not any(r.uses for r in producer.results):
                    producer.erase()
            folded += 1
    return folded


def _constant(a: Any, t: Any, module: Module, name: str) -> Any:
    """The attribute of a folded constant: inline when small (as make_const_attr makes it), else a
    resource over the array's own bytes (no copy; hashed once, by the resource)."""
    import numpy as np

    from ...ir.attributes import LITERAL_LIMIT, ResourceAttr
    from ...passes.common import make_const_attr

    arr = np.ascontiguousarray(np.asarray(a).astype(t.np_dtype, copy=False))
    if arr.size <= LITERAL_LIMIT or arr.dtype.byteorder == ">":
        return make_const_attr(arr, t, module, name)
    return ResourceAttr(module.resources.add(name, memoryview(arr).cast("B")), t)
