"""onnxruntime references for the wild suite: for each model and each of its two sizes, the seeded
inputs (bench/wild/inputs.py) and onnxruntime's outputs, cached as bench/wild/models/<id>.<size>.npz.

    .venv/bin/python bench/wild/reference.py [--models a,b] [--force]

Prints, per model, its inputs with their shapes as declared in the ONNX file (dim_param names, '?' for
an unnamed dim, -1 as written), the control-flow and shape ops it holds, and the output shapes at both
sizes. A cached reference is reused unless --force.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from common import write_atomic  # noqa: E402
from fetch import fetch_one  # noqa: E402
from models import BY_ID, WildModel, select  # noqa: E402

CONTROL_FLOW = ("If", "Loop", "Scan")
RECURRENT = ("LSTM", "GRU", "RNN")
SHAPE_READS = ("Shape", "Size")
SHAPE_TAKERS = ("Reshape", "Expand", "ConstantOfShape", "Range", "Slice", "Resize", "Tile", "Pad", "Squeeze",
                "Unsqueeze", "Split", "TopK", "NonZero")
"""Ops whose output shape comes from a (shape) input: counted, and counted as dynamic when that input is
neither an initializer nor a Constant's output."""


def _dims(value_info: Any) -> list[Any]:
    out: list[Any] = []
    for d in value_info.type.tensor_type.shape.dim:
        known = d.HasField("dim_param") or d.HasField("dim_value")
        out.append((d.dim_param or d.dim_value) if known else "?")
    return out


def declared_inputs(model: Any) -> list[dict[str, Any]]:
    """The graph inputs that are not initializers: name, element type, shape as declared."""
    import onnx

    inits = {i.name for i in model.graph.initializer}
    return [{"name": i.name, "type": onnx.TensorProto.DataType.Name(i.type.tensor_type.elem_type).lower(),
             "shape": _dims(i)} for i in model.graph.input if i.name not in inits]


def graph_facts(path: Path) -> dict[str, Any]:
    """Declared inputs and outputs, the op histogram (subgraphs included), control-flow ops, shape ops
    (with how many take a computed shape), ops outside the default domain, producer and opsets."""
    import onnx

    model = onnx.load(str(path))
    ops: collections.Counter[str] = collections.Counter()
    dynamic: collections.Counter[str] = collections.Counter()
    custom: collections.Counter[str] = collections.Counter()

    def walk(graph: Any, consts: set[str]) -> None:
        consts = consts | {i.name for i in graph.initializer}
        consts |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
        for node in graph.node:
            ops[node.op_type] += 1
            if node.domain not in ("", "ai.onnx"):
                custom[f"{node.domain}.{node.op_type}"] += 1
            if node.op_type in SHAPE_TAKERS and any(x and x not in consts for x in node.input[1:]):
                dynamic[node.op_type] += 1
            for attr in node.attribute:
                for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                    walk(sub, consts)

    walk(model.graph, set())
    shape_ops = {op: {"count": ops[op], "dynamic": dynamic[op]}
                 for op in SHAPE_READS + SHAPE_TAKERS if ops[op]}
    return {
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "inputs": declared_inputs(model),
        "outputs": [{"name": o.name, "shape": _dims(o)} for o in model.graph.output],
        "nodes": sum(ops.values()),
        "control_flow": {op: ops[op] for op in CONTROL_FLOW if ops[op]},
        "recurrent": {op: ops[op] for op in RECURRENT if ops[op]},
        "shape_ops": shape_ops,
        "custom_ops": dict(custom),
        "ops": dict(sorted(ops.items())),
    }


def describe_ops(facts: dict[str, Any]) -> str:
    """'If x25; Shape x20, Reshape x4 (4 dyn), ...' for a table cell."""
    parts = [f"{op} x{n}" for op, n in facts["control_flow"].items()]
    for op, c in facts["shape_ops"].items():
        parts.append(f"{op} x{c['count']}" + (f" ({c['dynamic']} dyn)" if c["dynamic"] else ""))
    parts += [f"{op} x{n}" for op, n in {**facts["recurrent"], **facts["custom_ops"]}.items()]
    return ", ".join(parts) or "-"


class Upstream:
    """Runs models of the table with onnxruntime for the input generators (sessions cached)."""

    def __init__(self) -> None:
        self.sessions: dict[str, Any] = {}

    def session(self, model: WildModel) -> Any:
        import onnxruntime as ort
        from common import ort_options

        if model.id not in self.sessions:
            path = fetch_one(model, log=False)
            self.sessions[model.id] = ort.InferenceSession(str(path), ort_options(),
                                                           providers=["CPUExecutionProvider"])
        return self.sessions[model.id]

    def __call__(self, model_id: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session(BY_ID[model_id]).run(None, feeds)


def save_reference(path: Path, feeds: dict[str, np.ndarray], out_names: list[str],
                   outputs: list[np.ndarray], meta: dict[str, Any]) -> None:
    arrays: dict[str, Any] = {f"in_{i}": v for i, v in enumerate(feeds.values())}
    arrays.update({f"out_{i}": v for i, v in enumerate(outputs)})
    meta = dict(meta, inputs=list(feeds), outputs=out_names)
    buf = io.BytesIO()
    np.savez_compressed(buf, meta=np.array(json.dumps(meta)), **arrays)
    write_atomic(path, buf.getvalue())


def load_reference(path: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any]]:
    """(feeds, outputs by name, meta) of a cached reference."""
    with np.load(path) as z:
        meta = json.loads(str(z["meta"]))
        feeds = {name: z[f"in_{i}"] for i, name in enumerate(meta["inputs"])}
        outputs = {name: z[f"out_{i}"] for i, name in enumerate(meta["outputs"])}
    return feeds, outputs, meta


def build(model: WildModel, force: bool = False, upstream: Upstream | None = None) -> dict[str, Path]:
    """The model's reference .npz for each size, made unless cached (or when `force`)."""
    import onnxruntime as ort

    upstream = upstream or Upstream()
    out = {}
    for size in model.sizes:
        path = model.reference_path(size)
        out[size] = path
        if path.is_file() and not force:
            continue
        session = upstream.session(model)
        feeds = model.feeds(size, upstream)
        names = [o.name for o in session.get_outputs()]
        t0 = time.perf_counter()
        outputs = session.run(names, feeds)
        meta = {"model": model.id, "size": size, "seed": model.seed(size), "onnxruntime": ort.__version__,
                "ort_first_run_s": round(time.perf_counter() - t0, 4)}
        save_reference(path, feeds, names, outputs, meta)
    return out


def _shape(a: np.ndarray) -> str:
    return "(" + ",".join(str(d) for d in a.shape) + ")"


def report(model: WildModel) -> None:
    facts = graph_facts(model.path)
    size_mb = model.path.stat().st_size / 1e6
    print(f"{model.id}  {model.package}=={model.version}  {model.family}  [{model.exporter}]  "
          f"{size_mb:.1f} MB  producer '{facts['producer']}' opsets {facts['opsets']}")
    for i in facts["inputs"]:
        print(f"  input   {i['name']}: {i['type']} [{', '.join(str(d) for d in i['shape'])}]")
    print(f"  ops     {facts['nodes']} nodes; {describe_ops(facts)}")
    for size in model.sizes:
        feeds, outputs, meta = load_reference(model.reference_path(size))
        ins = ", ".join(f"{k} {_shape(v)}" for k, v in feeds.items())
        outs = ", ".join(f"{k} {_shape(v)}" for k, v in outputs.items())
        print(f"  {size}       {ins} -> {outs}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated ids (default: all)")
    parser.add_argument("--force", action="store_true", help="rebuild cached references")
    args = parser.parse_args(argv)
    upstream = Upstream()
    failed = 0
    for model in select(args.models):
        try:
            fetch_one(model)
            build(model, args.force, upstream)
            report(model)
        except Exception as e:  # noqa: BLE001 - one model's failure must not stop the others
            failed += 1
            print(f"{model.id}: FAILED: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        print(flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
