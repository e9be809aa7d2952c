"""The `.tsl` parser fuzzer: a corpus of valid texts, mutations of them, and the property that the
parser and verifier answer any input with a module or a DiagnosticError, never another exception.

The corpus is every `// -----` chunk of the lit tests' `.tsl` files plus the printer's output for two
imported models (with their resources section) at -O0 and -O2, and one lowered for OpenCL (with a
`cl.program` source string), so mutations reach the resources parser and long strings too.

Mutations work on bytes (so they can break UTF-8): delete, duplicate or swap characters, tokens and
lines; truncate; insert random bytes or unicode; replace a number by an extreme one (`1e309`, `-0`,
`2**64`, `nan`); replace an element type or a shape by another (valid or not).
"""

from __future__ import annotations

import functools
import os
import random
import re
import signal
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARSE_SECONDS = 10  # a parse of a few-KB text that takes longer than this is a hang

NUMBERS = [b"0", b"-1", b"1", b"-0", b"1e309", b"-1e309", b"nan", b"inf", b"18446744073709551616",
           b"9223372036854775807", b"-9223372036854775809", b"0x7fc00000", b"1.5", b"3", b"65536",
           b"0.0", b"1e-45", b"00", b"1_000", b"4294967296"]
TYPES = [b"f32", b"f16", b"bf16", b"f64", b"i64", b"i32", b"i8", b"ui8", b"i1", b"f33", b"i0", b"tensor",
         b"tensor<f32>", b"tensor<?xf32>", b"tensor<0x3xf32>", b"tensor<2x3>", b"tensor<-1xf32>",
         b"tensor<2x3xf32", b"tensor<99999999999x99999999999xf32>", b"f32>", b"x", b"!"]
UNICODE = ["\u00e9", "\u2028", "\u0000", "\ufeff", "\U0001f600", "\u200b", "\ud7ff", "\u00a0", "\t", "\r"]
TOKEN = re.compile(rb"%[\w.$-]+|@[\w.$-]+|\"(?:[^\"\\\n]|\\.)*\"|[A-Za-z_][\w.]*|-?\d[\w.+-]*|\S")
NUMBER = re.compile(rb"-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?")
TYPE = re.compile(rb"tensor<[^>]*>|\b(?:f32|f16|bf16|f64|i64|i32|i8|ui8|i1)\b")


@functools.lru_cache(maxsize=1)
def corpus() -> tuple[bytes, ...]:
    """The valid (and some deliberately invalid: the negative lit cases) seed texts."""
    texts: list[bytes] = []
    for path in sorted((ROOT / "lit_tests").rglob("*.tsl")):
        if "Output" in path.parts:
            continue
        for chunk in path.read_bytes().split(b"// -----"):
            if chunk.strip():
                texts.append(chunk)
    texts.extend(printed_models())
    return tuple(texts)


def printed_models() -> list[bytes]:
    """The printer's output for two small imported ONNX models (at -O0 and -O2, one also lowered)."""
    import onnx
    from tessel.frontends.onnx.importer import import_model
    from tessel.ir.printer import to_text
    from tessel.passes.manager import PassManager
    from tessel.passes.pipeline import O_LEVELS, parse_pipeline
    from tessel.targets.opencl.lower import lower_module

    data = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "pytorch-converted"
    out = []
    for name in ("test_Conv2d_groups", "test_Linear"):
        raw = (data / name / "model.onnx").read_bytes()
        out.append(to_text(import_model(raw, "model.onnx")).encode())
        m = import_model(raw, "model.onnx")
        PassManager(parse_pipeline(O_LEVELS[2])).run(m)
        out.append(to_text(m).encode())
        if name == "test_Conv2d_groups":
            out.append(to_text(lower_module(m)).encode())
    return out


# mutations -----------------------------------------------------------------------------------------
def _span(rnd: random.Random, n: int) -> tuple[int, int]:
    i = rnd.randrange(n + 1)
    return i, min(n, i + rnd.choice([1, 1, 2, 4, 16]))


def _tokens(text: bytes) -> list[tuple[int, int]]:
    return [m.span() for m in TOKEN.finditer(text)]


def _chars(text: bytes, rnd: random.Random) -> bytes:
    i, j = _span(rnd, len(text))
    kind = rnd.choice(["delete", "duplicate", "swap"])
    if kind == "delete":
        return text[:i] + text[j:]
    if kind == "duplicate":
        return text[:j] + text[i:j] + text[j:]
    k = rnd.randrange(len(text) + 1)
    return _swap(text, (i, j), (k, min(len(text), k + (j - i))))


def _swap(text: bytes, a: tuple[int, int], b: tuple[int, int]) -> bytes:
    if a > b:
        a, b = b, a
    if a[1] > b[0]:
        return text
    return text[: a[0]] + text[b[0] : b[1]] + text[a[1] : b[0]] + text[a[0] : a[1]] + text[b[1] :]


def _token(text: bytes, rnd: random.Random) -> bytes:
    toks = _tokens(text)
    if not toks:
        return text
    a = rnd.choice(toks)
    kind = rnd.choice(["delete", "duplicate", "swap", "replace"])
    if kind == "delete":
        return text[: a[0]] + text[a[1] :]
    if kind == "duplicate":
        return text[: a[1]] + b" " + text[a[0] : a[1]] + text[a[1] :]
    b = rnd.choice(toks)
    if kind == "swap":
        return _swap(text, a, b)
    return text[: a[0]] + text[b[0] : b[1]] + text[a[1] :]


def _line(text: bytes, rnd: random.Random) -> bytes:
    lines = text.split(b"\n")
    i, j = rnd.randrange(len(lines)), rnd.randrange(len(lines))
    kind = rnd.choice(["delete", "duplicate", "swap"])
    if kind == "delete":
        del lines[i]
    elif kind == "duplicate":
        lines.insert(j, lines[i])
    else:
        lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


def _truncate(text: bytes, rnd: random.Random) -> bytes:
    return text[: rnd.randrange(len(text) + 1)]


def _insert(text: bytes, rnd: random.Random) -> bytes:
    i = rnd.randrange(len(text) + 1)
    if rnd.random() < 0.5:
        junk = bytes(rnd.randrange(256) for _ in range(rnd.choice([1, 2, 3, 8])))
    else:
        junk = rnd.choice(UNICODE).encode("utf-8", "surrogatepass")
    return text[:i] + junk + text[i:]


def _swap_match(text: bytes, rnd: random.Random, pattern: re.Pattern[bytes], choices: list[bytes],
                fallback: Callable[[bytes, random.Random], bytes]) -> bytes:
    """Replace one match of `pattern` by one of `choices`; `fallback` when nothing matches."""
    spans = [m.span() for m in pattern.finditer(text)]
    if not spans:
        return fallback(text, rnd)
    i, j = rnd.choice(spans)
    return text[:i] + rnd.choice(choices) + text[j:]


def _number(text: bytes, rnd: random.Random) -> bytes:
    return _swap_match(text, rnd, NUMBER, NUMBERS, _insert)


def _type(text: bytes, rnd: random.Random) -> bytes:
    return _swap_match(text, rnd, TYPE, TYPES, _token)


def _nest(text: bytes, rnd: random.Random) -> bytes:
    """Deep brackets: a recursive-descent parser must answer with a diagnostic, not a RecursionError."""
    i = rnd.randrange(len(text) + 1)
    depth = rnd.choice([10, 100, 5000])
    opener = rnd.choice([b"[", b"{", b"(", b"tensor<", b"dense<["])
    return text[:i] + opener * depth + text[i:]


MUTATIONS: list[Callable[[bytes, random.Random], bytes]] = [
    _chars, _token, _line, _truncate, _insert, _number, _type, _token, _number, _nest,
]


def mutate(text: bytes, rnd: random.Random, count: int) -> bytes:
    for _ in range(count):
        text = rnd.choice(MUTATIONS)(text, rnd) if text else _insert(text, rnd)
    return text


# the property --------------------------------------------------------------------------------------
class ParseHang(Exception):
    pass


def check_parse(data: bytes) -> str | None:
    """None when the parser and verifier either accept `data` or reject it with a DiagnosticError; else
    what went wrong (another exception, a hang, or a verified module that does not print back)."""
    from tessel.ir.diagnostics import DiagnosticError
    from tessel.ir.parser import parse_module
    from tessel.ir.printer import to_text
    from tessel.ir.verifier import verify

    def alarm(signum: int, frame: object) -> None:
        raise ParseHang(f"parse took more than {PARSE_SECONDS} s")

    use_alarm = hasattr(signal, "SIGALRM") and _main_thread()
    old = signal.signal(signal.SIGALRM, alarm) if use_alarm else None
    if use_alarm:
        signal.alarm(PARSE_SECONDS)
    stage = "parse"
    try:
        module = parse_module(data, "fuzz.tsl", register_source=False)
        stage = "verify"
        if verify(module):
            return None
        stage = "print"
        text = to_text(module)
        stage = "reparse"
        again = to_text(parse_module(text, "printed.tsl", register_source=False))
        if again != text:
            return "print -> parse -> print differs for a module that parsed and verified"
    except DiagnosticError as e:
        if stage == "parse" or stage == "verify":
            return None
        return f"{stage}: the printed module does not parse back: {e}"
    except ParseHang as e:
        return f"{stage}: hang: {e}"
    except RecursionError:
        return f"{stage}: RecursionError (deep nesting should be a diagnostic)"
    except Exception as e:
        return f"{stage}: {type(e).__name__}: {e}"
    finally:
        if use_alarm:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
    return None


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
