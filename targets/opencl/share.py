"""Kernels that differ only in constants share one kernel, their constants passed in a small buffer.

PoCL compiles each kernel of a program separately (0.1-1.5 s apiece), and a network repeats its layers
at sizes that differ only in a channel count or an offset: densenet121's 257 kernels are 86 up to integer
literals (116 of them are concatenation copies into its growing feature maps, differing in their offset
and extent; 58 are 1x1 convolutions differing in their input channels). `share_kernels` groups a
program's kernels whose sources are equal but for integer literals at the top level of the kernel's body
(the statements before and around its loops: base offsets, extents, outer loop bounds), keeps one kernel a
group, and turns the literals that differ into values it reads from an extra argument `KP` (an int32
constant the launch passes, one a member): the loops inside, where the arithmetic is, keep every literal,
so sharing costs no speed. Literals inside brackets (array sizes), inside `get_global_id(...)`-style
calls, on preprocessor lines and anywhere outside the kernel's body (helpers, its signature) stay part of
what must be equal. Comments do not count; a shared kernel's comment says which launches share it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ...ir.attributes import DenseAttr
from ...ir.core import Block, Op, Value
from ...ir.types import TensorType

LITERAL = re.compile(r"(?<![\w.])\d+(?![\w.])")
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
HEAD = re.compile(r"__kernel\b[^;{]*?\bvoid\s+(\w+)\s*\(")
ID_CALL = re.compile(r"\bget_\w+\s*\(")
PARAMS = "KP"
"""The shared kernel's last argument: its constants, one int each."""


@dataclass
class _Kernel:
    name: str
    text: str  # the entry without comments
    key: str  # the text with its name and its shallow literals replaced
    spans: list[tuple[int, int]]  # the shallow literals' positions in `text`
    values: list[int]


def _match(text: str, i: int, open_: str, close: str) -> int:
    """The index of the bracket closing the one at `i`."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return -1


def _in_word(text: str, i: int) -> bool:
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")


def _shallow_literals(text: str, body: int, end: int) -> list[tuple[int, int]]:
    """The integer literals of the body text[body:end] (from its `{`) at its top level: not in a nested
    block, brackets, an id call's parentheses or a preprocessor line."""
    spans = []
    depth, brackets, calls = 0, 0, []
    paren = 0
    i = body
    line_start = True
    pre = False
    while i < end:
        c = text[i]
        if c == "\n":
            line_start, pre = True, False
        elif line_start and not c.isspace():
            line_start = False
            pre = c == "#"
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "[":
            brackets += 1
        elif c == "]":
            brackets -= 1
        elif c == "(":
            paren += 1
        elif c == ")":
            if calls and calls[-1] == paren:
                calls.pop()
            paren -= 1
        elif c == "g" and (m := ID_CALL.match(text, i)) is not None and not _in_word(text, i):
            i = m.end()
            paren += 1
            calls.append(paren)
            continue
        elif c.isdigit() and not (text[i - 1].isalnum() or text[i - 1] in "_."):
            m = LITERAL.match(text, i)
            if m is not None:
                if depth == 1 and not brackets and not calls and not pre and int(m.group()) < 2**31:
                    spans.append((m.start(), m.end()))
                i = m.end()
                continue
            while i < end and (text[i].isalnum() or text[i] in "_."):
                i += 1
            continue
        elif c.isalpha() or c == "_":
            while i < end and (text[i].isalnum() or text[i] == "_"):
                i += 1
            continue
        i += 1
    return spans


def _kernel(entry: str) -> _Kernel | None:
    """The parts of one program entry (helpers and one kernel) that grouping needs; None when it holds
    no kernel or several."""
    text = COMMENT.sub("", entry)
    heads = list(HEAD.finditer(text))
    if len(heads) != 1:
        return None
    head = heads[0]
    name = head.group(1)
    sig_end = _match(text, head.end() - 1, "(", ")")
    body = text.find("{", sig_end)
    end = _match(text, body, "{", "}") if body >= 0 else -1
    if sig_end < 0 or end < 0:
        return None
    spans = _shallow_literals(text, body, end)
    parts, at = [], 0
    for s, e in spans:
        parts.append(text[at:s])
        parts.append("#")
        at = e
    parts.append(text[at:])
    key = re.sub(rf"\b{re.escape(name)}", "KERNEL", "".join(parts))
    return _Kernel(name, text, key, spans, [int(text[s:e]) for s, e in spans])


def _shared_source(first: _Kernel, params: list[int], members: int) -> str:
    """`first`'s text with its literals at `params` read from KP, and KP its last argument."""
    text = first.text
    for j, p in reversed(list(enumerate(params))):
        s, e = first.spans[p]
        text = text[:s] + f"{PARAMS}_{j}" + text[e:]
    head = HEAD.search(text)
    assert head is not None
    sig_end = _match(text, head.end() - 1, "(", ")")
    body = text.find("{", sig_end)
    if params:
        reads = ", ".join(f"{PARAMS}_{j} = {PARAMS}[{j}]" for j in range(len(params)))
        text = (text[:sig_end] + f", __global const int* restrict {PARAMS}" + text[sig_end:body + 1]
                + f"\n    const int {reads};" + text[body + 1:])
    return f"// shared by {members} kernels that differ only in constants (share.py)\n" + text.strip() + "\n"


def drop_unused(block: Block, program: list[str]) -> list[str]:
    """The entries of `program` whose kernel some cl.launch of `block` runs (a concatenation the memory
    plan assembles in place keeps its launch but no kernel: its copies were 116 of densenet121's 257)."""
    used = {k["name"] for op in block.ops if op.name == "cl.launch" for k in op.attrs.get("kernels") or []}
    out = []
    for entry in program:
        heads = HEAD.findall(COMMENT.sub("", entry))
        if not heads or any(h in used for h in heads):
            out.append(entry)
    return out


def share_kernels(block: Block, program: list[str]) -> list[str]:
    """Merge the kernels of `program` (one entry a kernel, with its helpers) that differ only in shallow
    literals, rewriting the cl.launch ops of `block` that name them; the new program."""
    kernels = [_kernel(e) for e in program]
    groups: dict[str, list[int]] = defaultdict(list)
    for i, k in enumerate(kernels):
        if k is not None:
            groups[k.key].append(i)
    rename: dict[str, tuple[str, list[int]]] = {}  # member name -> (shared name, its constants)
    drop: set[int] = set()
    out = list(program)
    for members in groups.values():
        if len(members) < 2:
            continue
        ks = [kernels[i] for i in members]
        assert all(k is not None for k in ks)
        first = ks[0]
        assert first is not None
        params = [p for p in range(len(first.values)) if len({k.values[p] for k in ks if k}) > 1]
        out[members[0]] = _shared_source(first, params, len(members))
        drop.update(members[1:])
        for k in ks:
            assert k is not None
            rename[k.name] = (first.name, [k.values[p] for p in params])
    if not rename:
        return program
    for op in list(block.ops):
        if op.name != "cl.launch":
            continue
        entries = op.attrs.get("kernels") or []
        for entry in entries:
            if entry["name"] not in rename:
                continue
            shared, values = rename[entry["name"]]
            entry["name"] = shared
            if not values:
                continue
            t = TensorType((len(values),), "i32")
            const = Op("const", [], [t], {"value": DenseAttr(t, np.array(values, np.int32))}, loc=op.loc)
            block.insert_before(op, const)
            op.set_operands([*op.operands, const.results[0]])
            body = op.regions[0].blocks[0]
            body.args.append(Value(t, body, len(body.args)))
            entry["args"] = [*entry["args"], f"in{len(op.operands) - 1}"]
    return [e for i, e in enumerate(out) if i not in drop]
