"""`tessel-opt --emit-dot=FILE.dot`: the graph as Graphviz, so a person can see what fused.

Each computing op is a node labelled with its name and result type, with its ONNX node names as the
tooltip (shown on hover in SVG output: `dot -Tsvg m.dot -o m.svg`). A `kernel` region is a cluster holding
its ops, labelled with its kind; a `cl.launch` likewise holds its reference body. Constants are left out
(weights would bury the graph); function arguments and results are ellipses. Edges follow SSA uses, through
region boundaries.
"""

from __future__ import annotations

from ..ir.core import Func, Module, Op

SKIP = ("const", "cl.program", "buf.alloc")


def _q(s: str) -> str:
    return '"' + s.replace('"', '\\"') + '"'


class _Dot:
    def __init__(self, func: Func) -> None:
        self.func = func
        self.lines: list[str] = []
        self.node_of: dict[int, str] = {}  # value id -> node producing it
        self.count = 0
        self.clusters = 0

    def node(self, op: Op, indent: str) -> None:
        name = f"n{self.count}"
        self.count += 1
        types = ", ".join(str(t) for t in op.result_types)
        label = f"{op.name}\\n{types}" if types else op.name
        tip = ", ".join(op.loc) or op.name
        self.lines.append(f"{indent}{name} [label={_q(label)}, tooltip={_q(tip)}];")
        for v in op.operands:
            src = self.node_of.get(id(v))
            if src is not None:
                self.lines.append(f"{indent}{src} -> {name};")
        for r in op.results:
            self.node_of[id(r)] = name

    def ops(self, ops: list[Op], indent: str) -> None:
        for op in ops:
            if op.name in SKIP or op.name == "yield":
                continue
            if op.name in ("kernel", "cl.launch") and op.regions:
                self.cluster(op, indent)
            elif op.name == "return":
                for i, v in enumerate(op.operands):
                    src = self.node_of.get(id(v))
                    self.lines.append(f"{indent}out{i} [label={_q('result ' + str(i))}, shape=ellipse];")
                    if src:
                        self.lines.append(f"{indent}{src} -> out{i};")
            else:
                self.node(op, indent)

    def cluster(self, op: Op, indent: str) -> None:
        body = op.regions[0].blocks[0]
        for a, v in zip(body.args, op.operands, strict=False):
            if id(v) in self.node_of:
                self.node_of[id(a)] = self.node_of[id(v)]
        kind = op.attrs.get("kind", "launch" if op.name == "cl.launch" else "")
        self.lines.append(f"{indent}subgraph cluster_{self.clusters} {{")
        self.clusters += 1
        tip = ", ".join(op.loc)
        self.lines.append(f"{indent}  label={_q(f'{op.name} ({kind})')}; style=rounded; color=blue; "
                          f"tooltip={_q(tip)};")
        self.ops(body.ops, indent + "  ")
        self.lines.append(f"{indent}}}")
        term = body.ops[-1] if body.ops else None
        if term is not None and term.name == "yield":
            for r, v in zip(op.results, term.operands, strict=False):
                if id(v) in self.node_of:
                    self.node_of[id(r)] = self.node_of[id(v)]

    def render(self) -> str:
        self.lines.append(f"digraph {_q(self.func.name)} {{")
        self.lines.append('  node [shape=box, fontname="monospace", fontsize=10];')
        for i, a in enumerate(self.func.args):
            self.lines.append(f"  in{i} [label={_q('%' + str(a.name))}, shape=ellipse];")
            self.node_of[id(a)] = f"in{i}"
        self.ops(list(self.func.block.ops), "  ")
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"


def module_dot(module: Module) -> str:
    """One `digraph` per func."""
    return "".join(_Dot(f).render() for f in module.funcs)

