"""Tuning records: what tessel-tune measured, as JSON lines, and the kernel signatures they are keyed by.

One record per (kind, key, device, space):
- `kind` "kernel": `key` is a kernel signature hash (`signature`: the op or fused region the launch comes
  from, its operand and result types, attributes, which operands are compile-time constants, and the
  lowering options), `space` the schedule space version it was measured in (space.py), `schedule` the
  point that won ({} when the template's own choice did);
- `kind` "model": `key` is a model signature (the kernel signatures of a func's launches, in order),
  `space` "execution/1", `schedule` {"execution": "pool" | "inline" | "cooperative"}: the way the runtime
  runs that func on the device (runtime.EXECUTIONS), written on the func as its `execution` attribute;
- `device` is the fingerprint of the device measured on (device.fingerprint: platform, device, driver
  version, compute units), `device_name` its name for people.
The times (`default_us`, `best_us`: one run of the kernel, or of the whole func, in microseconds), the
`repeats` each was measured in, `measured` (points compiled and timed), `space_size` (valid points), the
`trials` ([point, us] of every point measured: what the cost model learns from) and the `date` are kept
for people and for the tuner; only kind, key, device, space and schedule decide what a lowering does.
Each line tessel writes carries a `checksum` (`checksum()`: 16 hex digits of the SHA-256 of the line's
other fields, as `line()` writes them): a line whose checksum does not match (a flipped byte, a hand edit)
is skipped with a CacheWarning naming its file and line; a line without one (tessel before the checksum,
another tool) is read as it is. docs/tools/tessel-tune.md documents the format.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ...ir.attributes import DenseAttr, ResourceAttr, format_attr, is_splat_array
from ...ir.core import Op
from .cache import replace_atomically, warn

FORMAT = 1
EXECUTION_SPACE = "execution/1"
REQUIRED: dict[str, type | tuple[type, ...]] = {
    "format": int, "kind": str, "key": str, "device": str, "space": str, "schedule": dict,
    "default_us": (int, float), "best_us": (int, float), "repeats": int, "date": str}


class RecordError(Exception):
    """A record file that cannot be read: the message names the file and line."""


@dataclass
class Record:
    kind: str  # "kernel" or "model"
    key: str
    device: str
    space: str
    schedule: dict[str, Any]
    default_us: float
    best_us: float
    repeats: int
    date: str = field(default_factory=lambda: datetime.date.today().isoformat())
    op: str = ""  # the template's op (kernel) or the func's name (model)
    label: str = ""  # the signature in a few words, for people
    device_name: str = ""
    measured: int = 0
    space_size: int = 0
    trials: list[list[Any]] = field(default_factory=list)
    format: int = FORMAT

    @property
    def ident(self) -> tuple[str, str, str, str]:
        return (self.kind, self.key, self.device, self.space)

    @property
    def speedup(self) -> float:
        return self.default_us / self.best_us if self.best_us > 0 else 1.0

    def line(self) -> str:
        obj = asdict(self)
        return _dumps({**obj, "checksum": checksum(obj)})


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def checksum(obj: dict[str, Any]) -> str:
    """Of a record's fields (all but `checksum`), as a line writes them."""
    return hashlib.sha256(_dumps({k: v for k, v in obj.items() if k != "checksum"}).encode()).hexdigest()[:16]


def parse_records(text: str, path: str = "<records>") -> list[Record]:
    """Every record of a JSON-lines text (blank lines skipped); RecordError naming the first line that is not
    a record; a record whose checksum does not match is skipped with a CacheWarning."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise RecordError(f"{path}:{n}: not a JSON object ({e.msg}, column {e.colno}): a truncated or "
                              "corrupt record file") from None
        if not isinstance(obj, dict):
            raise RecordError(f"{path}:{n}: a record is a JSON object, not {type(obj).__name__}")
        for name, kind in REQUIRED.items():
            if name not in obj:
                raise RecordError(f"{path}:{n}: the record has no '{name}'")
            if not isinstance(obj[name], kind) or isinstance(obj[name], bool):
                raise RecordError(f"{path}:{n}: '{name}' is {json.dumps(obj[name])[:40]}, expected "
                                  f"{getattr(kind, '__name__', 'a number')}")
        if obj["format"] != FORMAT:
            raise RecordError(f"{path}:{n}: record format {obj['format']}, this tessel reads {FORMAT}")
        if obj["kind"] not in ("kernel", "model"):
            raise RecordError(f"{path}:{n}: kind '{obj['kind']}' is neither 'kernel' nor 'model'")
        if "checksum" in obj and obj["checksum"] != checksum(obj):
            warn(f"{path}:{n}: the record's checksum does not match its fields (a corrupt or edited line); "
                 "record skipped (tessel-tune measures it again)")
            continue
        known = {f for f in Record.__dataclass_fields__}
        try:
            out.append(Record(**{k: v for k, v in obj.items() if k in known}))
        except TypeError as e:
            raise RecordError(f"{path}:{n}: {e}") from None
    return out


def read_records(path: str) -> list[Record]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        raise RecordError(f"{path}: not a UTF-8 text file of JSON lines") from None
    except OSError as e:
        raise RecordError(f"cannot read tuning records '{path}': {e.strerror}") from None
    return parse_records(text, path)


def merge(*groups: Iterable[Record]) -> list[Record]:
    """One record per (kind, key, device, space): the one with the lowest best time (ties: the smaller
    line), sorted by that identity, so any order of the same inputs gives the same output."""
    best: dict[tuple[str, str, str, str], Record] = {}
    for group in groups:
        for r in group:
            have = best.get(r.ident)
            if have is None or (r.best_us, r.line()) < (have.best_us, have.line()):
                best[r.ident] = r
    return [best[k] for k in sorted(best)]


def write_records(path: str, records: Sequence[Record]) -> None:
    """Write atomically (cache.replace_atomically): a reader never sees half a file."""
    replace_atomically(path, [(r.line() + "\n").encode() for r in records])


class Tuning:
    """The records a lowering consults, for one device fingerprint."""

    def __init__(self, records: Iterable[Record], device: str, collect: Callable[..., None] | None = None):
        self.device = device
        self.collect = collect  # called with (key, op, ctx, lowered, space, module) for each kernel
        self.models: dict[str, str] = {}  # func name -> model signature, as the lowering found them
        self.by_key: dict[tuple[str, str], list[Record]] = {}
        for r in merge(records):
            self.by_key.setdefault((r.kind, r.key), []).append(r)

    def find(self, kind: str, key: str, space: str | None) -> tuple[Record | None, str, str]:
        """The record for this key on this device in `space`, or None, with a reason code and a message
        saying why none applies."""
        found = self.by_key.get((kind, key), [])
        if not found:
            return None, "no-record", "no record"
        mine = [r for r in found if r.device == self.device]
        if not mine:
            names = sorted({r.device_name or r.device for r in found})
            return None, "other-device", f"only records for another device ({', '.join(names)})"
        match = [r for r in mine if r.space == space]
        if not match:
            return None, "other-space", (f"a record of space {mine[0].space}, the template's space is now "
                                         f"{space or 'none'}")
        return match[0], "", ""


# signatures -----------------------------------------------------------------------------------------------
def _attr(v: Any) -> str:
    if isinstance(v, ResourceAttr):
        return f"resource:{v.type}"  # the weights' values never change the kernel
    if isinstance(v, DenseAttr) and is_splat_array(v.data):
        return f"splat:{v.type}:{v.data.reshape(-1)[0]!r}"
    if isinstance(v, DenseAttr) and v.data.size > 64:
        return f"dense:{v.type}:{hashlib.sha256(v.data.tobytes()).hexdigest()[:16]}"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}={_attr(v[k])}" for k in sorted(v)) + "}"
    if isinstance(v, list | tuple):
        return "[" + ",".join(_attr(x) for x in v) + "]"
    return format_attr(v)


def _op_lines(op: Op, names: dict[int, str], out: list[str], depth: int) -> None:
    for r in op.results:
        names[id(r)] = f"%{len(names)}"
    ins = ",".join(names.get(id(v), "?") for v in op.operands)
    attrs = ",".join(f"{k}={_attr(op.attrs[k])}" for k in sorted(op.attrs))
    types = ",".join(str(t) for t in op.operand_types) + "->" + ",".join(str(t) for t in op.result_types)
    out.append(f"{' ' * depth}{op.name}({ins}){{{attrs}}}:{types}")
    for region in op.regions:
        for block in region.blocks:
            for a in block.args:
                names[id(a)] = f"%{len(names)}"
            out.append(f"{' ' * depth}^({','.join(names[id(a)] for a in block.args)})")
            for inner in block.ops:
                _op_lines(inner, names, out, depth + 1)


def signature(op: Op, constant: Sequence[bool], options: dict[str, Any]) -> tuple[str, str]:
    """(key, text) of the kernel an op lowers to: its canonical text (the op and its region, operands
    numbered in order, weights by type only), which operands are constants, and the lowering's options
    (--no-winograd); the key is the text's SHA-256, 16 hex digits."""
    names: dict[int, str] = {id(v): f"%{i}" for i, v in enumerate(op.operands)}
    lines = [f"constant={''.join('1' if c else '0' for c in constant)}",
             f"options={_attr(dict(sorted(options.items())))}"]
    _op_lines(op, names, lines, 0)
    text = "\n".join(lines)
    return hashlib.sha256(text.encode()).hexdigest()[:16], text


def model_key(kernel_keys: Sequence[str]) -> str:
    return hashlib.sha256(" ".join(kernel_keys).encode()).hexdigest()[:16]


def label(op: Op) -> str:
    """`conv2d 1x64x56x56xf32,64x64x3x3xf32 -> 1x64x56x56xf32` (a region: its ops' names joined by +)."""
    name = op.name
    if op.regions:
        inner = [o.name for b in op.regions[0].blocks for o in b.ops if o.name not in ("yield", "const")]
        name = "+".join(inner) or name
    dims = ",".join(str(t).removeprefix("tensor<").removesuffix(">") for t in op.operand_types)
    res = ",".join(str(t).removeprefix("tensor<").removesuffix(">") for t in op.result_types)
    return f"{name} {dims} -> {res}"
