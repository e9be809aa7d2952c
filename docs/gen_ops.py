"""Generate docs/ops.md, the op reference, from the op registry.

    .venv/bin/python docs/gen_ops.py           # rewrite docs/ops.md
    .venv/bin/python docs/gen_ops.py --check   # exit 1 if docs/ops.md is out of date

The registry is the only source: one table per family (the `ir/ops/<family>.py` module whose `register`
call defines the op), one row per op, ops sorted by name. tests/unit/test_docs.py fails when ops.md differs
from what this script prints, so adding or changing an op means rerunning it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tessel.ir.attributes import format_attr
from tessel.ir.ops.registry import FAMILIES, AttrSpec, OpDef, load_all

OUT = Path(__file__).resolve().parent / "ops.md"
FAMILY_PREFIX = "tessel.ir.ops."

HEADER = """\
<!-- Generated from the op registry by docs/gen_ops.py; do not edit, rerun it. -->
# Op reference

Every op the registry (`tessel.ir.ops.registry`) knows, grouped by the `ir/ops/<family>.py` file that
registers it. The textual form of an op is the generic syntax described in [ir.md](ir.md):

    %r = name %a, %b {attr = value} : (type_a, type_b) -> type_r loc("...")

Columns:
- **operands**: in order; `?` marks an optional operand (it may be left out, only at the end), `*` a
  variadic one (zero or more).
- **results**: how many; `*` means as many as `infer` computes from the operands and attributes.
- **attributes**: `name: kind = default` in the textual attribute syntax; *required* attributes have no
  default; "one of" lists the allowed values. Kinds: `int`, `float` (an integer literal is accepted too),
  `bool`, `str`, `ints` / `floats` / `strs` (arrays), `type` (a tensor type), `dense` (a `dense<...>` or
  `dense_resource<...>` tensor). Attributes whose name contains a `.` are discardable and never checked.
- **traits**: `pure` (no side effects: CSE, DCE and folding may touch it), `elementwise`, `broadcasting`,
  `commutative`, `layout-agnostic`, `reduction`, `constant`, `terminator`.

Result types are always inferred and checked by the verifier; the checks an op makes on its operands are
described in its row and spelled out by its error messages.
"""


def family_of(opdef: OpDef) -> str:
    """The family whose module registered `opdef`: the module its `infer` (else `reference`) lives in."""
    for fn in (opdef.infer, opdef.reference, opdef.verify, opdef.cost):
        module = getattr(fn, "__module__", None) or ""
        if module.startswith(FAMILY_PREFIX) and module != FAMILY_PREFIX + "registry":
            return module[len(FAMILY_PREFIX):]
    return "other"


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def fmt_operands(opdef: OpDef) -> str:
    return ", ".join(f"`{o}`" for o in opdef.operands) if opdef.operands else "none"


def fmt_results(opdef: OpDef) -> str:
    n = opdef.results
    text = "`*`" if n == "*" else ("none" if n == 0 else str(n))
    if opdef.regions:
        text += f"; {opdef.regions} region" + ("s" if opdef.regions > 1 else "")
    return text


def fmt_attr(name: str, spec: AttrSpec) -> str:
    text = f"`{name}: {spec.kind}"
    text += "` *required*" if spec.required else f" = {format_attr(spec.default)}`"
    if spec.allowed is not None:
        text += ", one of " + ", ".join(f"`{format_attr(v)}`" for v in spec.allowed)
    return text


def fmt_attrs(opdef: OpDef) -> str:
    return "<br>".join(fmt_attr(k, opdef.attrs[k]) for k in opdef.attrs) or ""


def family_intro(family: str) -> str:
    """The first paragraph of the family module's docstring."""
    module = sys.modules.get(FAMILY_PREFIX + family)
    doc = (getattr(module, "__doc__", None) or "").strip()
    return " ".join(doc.split("\n\n")[0].split())


def render() -> str:
    registry = load_all()
    families: dict[str, list[OpDef]] = {}
    for opdef in registry.values():
        families.setdefault(family_of(opdef), []).append(opdef)
    order = [f for f in FAMILIES if f in families] + sorted(f for f in families if f not in FAMILIES)

    out = [HEADER]
    total = sum(len(v) for v in families.values())
    out.append(f"{total} ops in {len(order)} families: "
               + ", ".join(f"[{f}](#{f}) ({len(families[f])})" for f in order) + ".\n")
    for family in order:
        ops = sorted(families[family], key=lambda d: d.name)
        out.append(f"## {family}\n")
        intro = family_intro(family)
        if family != "other":
            out.append(f"`ir/ops/{family}.py`" + (f": {intro}" if intro else "") + "\n")
        out.append("| op | operands | results | attributes | traits | description |")
        out.append("|---|---|---|---|---|---|")
        for d in ops:
            traits = ", ".join(sorted(d.traits))
            out.append(f"| `{d.name}` | {fmt_operands(d)} | {fmt_results(d)} | {cell(fmt_attrs(d))} | "
                       f"{traits} | {cell(d.doc)} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            sys.stderr.write(f"{OUT} is out of date: run .venv/bin/python docs/gen_ops.py\n")
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
