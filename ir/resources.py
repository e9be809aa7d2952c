"""The resources section: named, content-hashed byte blobs (weights) referenced by `dense_resource<name>`.

Text form, after the module:

    {-#
      resources: {
        conv1.weight: "sha256:<hex>:base64:<payload>",
        fc.bias: "sha256:<hex>:elided",
        fc.weight: "sha256:<hex>:external:weights.bin:<offset>:<nbytes>"
      }
    #-}

`elided` entries (from `--elide-resources`) keep the hash but no bytes; using their data is an error.
`external` entries point into a side file written by `--external-weights=FILE`, mapped on load, so a large
model never needs its weights in memory more than once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import mmap
import os
from collections.abc import Iterator
from typing import IO

import numpy as np

from .types import TensorType

CHUNK = 3 * (1 << 20)  # bytes per base64 chunk when streaming (a multiple of 3: no padding mid-stream)
ALIGN = 64


class ResourceError(Exception):
    """A resource problem the user caused: bad entry, hash mismatch, elided data, missing file."""


class Resource:
    __slots__ = ("name", "digest", "_data", "origin")

    def __init__(
        self, name: str, data: bytes | memoryview | None, digest: str | None = None, origin: str = ""
    ):
        self.name = name
        self._data = data
        if digest is None:
            if data is None:
                raise ValueError("a resource needs data or a digest")
            digest = hashlib.sha256(data).hexdigest()
        self.digest = digest
        self.origin = origin  # "" inline, "elided", or the external file it came from

    @property
    def has_data(self) -> bool:
        return self._data is not None

    @property
    def data(self) -> bytes | memoryview:
        if self._data is None:
            raise ResourceError(
                f"resource '{self.name}' has no data: it was printed with --elide-resources"
            )
        return self._data

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def array(self, type: TensorType) -> np.ndarray:
        """The bytes viewed as a read-only array of `type` (no copy)."""
        data = self.data
        want = type.numel * type.np_dtype.itemsize
        if len(data) != want:
            raise ResourceError(
                f"resource '{self.name}' holds {len(data)} bytes but {type} needs {want}"
            )
        arr = np.frombuffer(data, dtype=type.np_dtype.newbyteorder("<"), count=type.numel)
        return arr.astype(type.np_dtype, copy=False).reshape(type.dims)


class ResourceTable:
    """Resources by name, in insertion order; names are unique, equal bytes under one name are shared."""

    def __init__(self) -> None:
        self._by_name: dict[str, Resource] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> Resource:
        return self._by_name[name]

    def __len__(self) -> int:
        return len(self._by_name)

    def __iter__(self) -> Iterator[Resource]:
        return iter(self._by_name.values())

    def get(self, name: str) -> Resource | None:
        return self._by_name.get(name)

    def put(self, res: Resource) -> None:
        self._by_name[res.name] = res

    def add(self, name: str, data: bytes | memoryview) -> str:
        """Store `data` under `name` (or `name_N` if another blob holds that name); returns the name used."""
        res = Resource(name, data)
        base, n = name, 0
        while name in self._by_name:
            if self._by_name[name].digest == res.digest:
                return name
            n += 1
            name = f"{base}_{n}"
        res.name = name
        self._by_name[name] = res
        return name

    def add_array(self, name: str, array: np.ndarray) -> str:
        arr = np.ascontiguousarray(array)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return self.add(name, arr.tobytes())

    def remove(self, name: str) -> None:
        self._by_name.pop(name, None)

    def keep_only(self, names: set[str]) -> None:
        for n in [n for n in self._by_name if n not in names]:
            del self._by_name[n]


# printing ---------------------------------------------------------------------------------------------
def write_section(
    table: ResourceTable,
    out: IO[str],
    *,
    elide: bool = False,
    external: tuple[IO[bytes], str] | None = None,
    format_name=str,
) -> None:
    """Write the `{-# resources: {...} #-}` section. `external` is (open side file, its path as
    referenced from the text)."""
    if not len(table):
        return
    out.write("{-#\n  resources: {\n")
    items = sorted(table, key=lambda r: r.name)
    offset = external[0].tell() if external is not None else 0  # the side file may hold earlier modules
    for i, res in enumerate(items):
        out.write(f"    {format_name(res.name)}: \"sha256:{res.digest}:")
        if elide or not res.has_data:
            out.write("elided")
        elif external is not None:
            f, ref = external
            pad = (-offset) % ALIGN
            if pad:
                f.write(b"\0" * pad)
                offset += pad
            data = res.data
            f.write(data)
            out.write(f"external:{ref}:{offset}:{len(data)}")
            offset += len(data)
        else:
            out.write("base64:")
            data = memoryview(res.data).cast("B")
            for start in range(0, len(data), CHUNK):
                out.write(base64.b64encode(data[start:start + CHUNK]).decode("ascii"))
        out.write('"' + ("," if i + 1 < len(items) else "") + "\n")
    out.write("  }\n#-}\n")


# parsing ----------------------------------------------------------------------------------------------
def decode_entry(name: str, value: memoryview, base_dir: str, verify_hash: bool = True) -> Resource:
    """Decode one entry's quoted value (without quotes), given as bytes."""
    head = bytes(value[:80])
    if not head.startswith(b"sha256:") or len(head) < 72 or head[71:72] != b":":
        raise ResourceError(f"resource '{name}': expected \"sha256:<64 hex digits>:...\"")
    digest = head[7:71].decode("ascii", "replace")
    rest = value[72:]
    kind_end = bytes(rest[:16]).find(b":")
    kind = bytes(rest[: kind_end if kind_end >= 0 else 16]).decode("ascii", "replace")
    if kind == "elided":
        return Resource(name, None, digest, origin="elided")
    if kind == "base64":
        try:
            data: bytes | memoryview = binascii.a2b_base64(rest[kind_end + 1:], strict_mode=True)
        except (binascii.Error, ValueError) as e:
            raise ResourceError(f"resource '{name}': bad base64 payload ({e})") from None
        origin = ""
    elif kind == "external":
        spec = bytes(rest[kind_end + 1:]).decode("utf-8", "replace")
        try:
            path, off_s, len_s = spec.rsplit(":", 2)
            off, length = int(off_s), int(len_s)
        except ValueError:
            raise ResourceError(f"resource '{name}': expected external:<file>:<offset>:<nbytes>") from None
        data = _map_external(os.path.join(base_dir, path), off, length, name)
        origin = path
    else:
        raise ResourceError(
            f"resource '{name}': unknown encoding '{kind}' (expected base64, external or elided)"
        )
    if verify_hash and hashlib.sha256(data).hexdigest() != digest:
        raise ResourceError(f"resource '{name}': content does not match its sha256 hash")
    return Resource(name, data, digest, origin)


_MAPS: dict[str, tuple[tuple[int, int, int], mmap.mmap]] = {}
"""The external weights files mapped so far, by real path, with the (inode, size, mtime) they were mapped
at: a file replaced since (the compiled-module cache rewrites its entries) is mapped again."""


def _map_external(path: str, offset: int, length: int, name: str) -> memoryview:
    key = os.path.realpath(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise ResourceError(
            f"resource '{name}': cannot open external weights '{path}': {e.strerror}"
        ) from None
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    known = _MAPS.get(key)
    m = known[1] if known is not None and known[0] == stamp else None
    if m is None:
        try:
            with open(path, "rb") as f:
                fst = os.fstat(f.fileno())
                m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if fst.st_size else None
                stamp = (fst.st_ino, fst.st_size, fst.st_mtime_ns)
        except OSError as e:
            raise ResourceError(
                f"resource '{name}': cannot open external weights '{path}': {e.strerror}"
            ) from None
        if m is None:
            raise ResourceError(f"resource '{name}': external weights file '{path}' is empty")
        _MAPS[key] = (stamp, m)
    if offset < 0 or offset + length > len(m):
        raise ResourceError(f"resource '{name}': bytes {offset}..{offset + length} lie outside '{path}'")
    return memoryview(m)[offset:offset + length]
