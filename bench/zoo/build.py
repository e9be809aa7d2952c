"""Build the model zoo: export every spec of zoo.py to `<out>/<name>.onnx`, byte-identical run after run.

    .venv/bin/python bench/zoo/build.py                      # all models into bench/zoo/models/
    .venv/bin/python bench/zoo/build.py --only bert,gpt2 --out /tmp/zoo --force

Needs the `bench` extra (torch, torchvision, transformers, onnxscript). A model is skipped when its sidecar
`<name>.json` records the same build key: a hash of the spec, the source of its build function and of the
shared helpers, this file, and the versions of every package the export goes through. One line per model:
name, parameters, ONNX nodes, file size, and the largest difference between torch and onnxruntime.

Determinism: weights come from torch.manual_seed(spec.seed) and seeded generators only; the export is
single-threaded; node metadata (stack traces with paths, fx node text), doc strings and the exporter's
per-node namespaces are stripped; the file is written in one piece (no external data) atomically.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import io
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import zoo  # noqa: E402
from common import write_atomic  # noqa: E402

PACKAGES = ("torch", "torchvision", "transformers", "onnxscript", "onnx_ir", "onnx", "numpy")


def versions() -> dict[str, str]:
    from importlib import metadata

    return {p: metadata.version(p.replace("_", "-")) for p in PACKAGES}


def build_key(spec: zoo.Spec) -> str:
    fields = {f.name: getattr(spec, f.name) for f in zoo.dataclasses.fields(spec) if f.name != "build"}
    closure = [c.cell_contents for c in (spec.build.__closure__ or ())]
    helpers = [zoo._calibrate, zoo._example, zoo.feeds, zoo.Input]
    text = "\n".join([
        repr(fields), repr(closure), inspect.getsource(spec.build),
        *(inspect.getsource(h) for h in helpers), Path(__file__).read_text(),
        json.dumps(versions(), sort_keys=True), f"opset={zoo.OPSET}",
    ])
    return hashlib.sha256(text.encode()).hexdigest()


def _strip(graph: Any) -> None:
    """Drop what depends on paths, processes or source text: doc strings and every metadata_props."""
    graph.doc_string = ""
    del graph.metadata_props[:]
    for vi in (*graph.input, *graph.output, *graph.value_info):
        vi.doc_string = ""
        del vi.metadata_props[:]
    for t in graph.initializer:
        t.doc_string = ""
        del t.metadata_props[:]
    for node in graph.node:
        node.doc_string = ""
        del node.metadata_props[:]
        for a in node.attribute:
            a.doc_string = ""
            if a.HasField("g"):
                _strip(a.g)
            for g in a.graphs:
                _strip(g)


def _optimize(program: Any, keep_batchnorm: bool) -> None:
    """onnxscript's optimizer as torch.onnx.export(optimize=True) runs it, without the BatchNorm-into-Conv
    fusion when the spec keeps BatchNormalization in the graph."""
    from unittest import mock

    import onnxscript.optimizer
    import onnxscript.rewriter as rw

    rules = rw._DEFAULT_REWRITE_RULES
    if keep_batchnorm:
        from onnxscript.rewriter.rules.common import _fuse_batchnorm

        rules = tuple(r for r in rules if r not in _fuse_batchnorm.rules)
    with mock.patch.object(rw, "_DEFAULT_REWRITE_RULES", rules):
        onnxscript.optimizer.optimize_ir(program.model)


def export(spec: zoo.Spec) -> tuple[Any, int, Any]:
    """(ModelProto, parameter count, torch outputs on the seeded feeds)."""
    import onnx
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    model, example = spec.build(spec)
    params = sum(p.numel() for p in model.parameters())
    names = [i.name for i in spec.inputs]
    with torch.no_grad():
        ref = model(*(torch.from_numpy(a) for a in zoo.feeds(spec).values()))
    if spec.exporter == "dynamo":
        program = torch.onnx.export(model, example, dynamo=True, opset_version=zoo.OPSET,
                                    input_names=names, output_names=list(spec.outputs), optimize=False,
                                    external_data=False, verbose=False)
        _optimize(program, spec.keep_batchnorm)
        proto = program.model_proto
    elif spec.exporter == "torchscript":
        buf = io.BytesIO()
        mode = torch.onnx.TrainingMode.PRESERVE if spec.keep_batchnorm else torch.onnx.TrainingMode.EVAL
        torch.onnx.export(model, example, buf, dynamo=False, opset_version=zoo.OPSET, input_names=names,
                          output_names=list(spec.outputs), training=mode, do_constant_folding=True)
        proto = onnx.load_model_from_string(buf.getvalue())
    else:
        raise ValueError(f"{spec.name}: unknown exporter {spec.exporter!r}")
    proto.doc_string = ""
    del proto.metadata_props[:]
    _strip(proto.graph)
    onnx.checker.check_model(proto, full_check=True)
    refs = ref if isinstance(ref, tuple) else (ref,)
    return proto, params, [r.numpy() for r in refs]


def check_exported(spec: zoo.Spec, data: bytes, want: list[Any]) -> float:
    """Load in onnxruntime, check static shapes and outputs; return the max abs error against torch."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    model = onnx.load_model_from_string(data)
    for vi in (*model.graph.input, *model.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            raise RuntimeError(f"{spec.name}: '{vi.name}' has a dynamic shape")
    have_bn = any(n.op_type == "BatchNormalization" for n in model.graph.node)
    if spec.keep_batchnorm and not have_bn:
        raise RuntimeError(f"{spec.name}: BatchNormalization was folded away")
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = sess.run(None, zoo.feeds(spec))
    err = 0.0
    for g, w in zip(got, want, strict=True):
        if g.shape != w.shape:
            raise RuntimeError(f"{spec.name}: onnxruntime shape {g.shape} vs torch {w.shape}")
        err = max(err, float(np.abs(g - w).max()))
        if not np.isfinite(g).all() or float(g.std()) == 0.0:
            raise RuntimeError(f"{spec.name}: degenerate output (non-finite or constant)")
    return err


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=zoo.ZOO_DIR, help="output folder (default %(default)s)")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or [s.name for s in zoo.SPECS]
    specs = [zoo.get(n) for n in names]
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for spec in specs:
        path, side = args.out / f"{spec.name}.onnx", args.out / f"{spec.name}.json"
        key = build_key(spec)
        if not args.force and path.exists() and side.exists():
            meta = json.loads(side.read_text())
            if meta.get("key") == key and meta.get("sha256") == hashlib.sha256(path.read_bytes()).hexdigest():
                print(f"{spec.name:20s} up to date  params {meta['params']:>10,}  nodes {meta['nodes']:>5}  "
                      f"{meta['bytes'] / 2**20:8.2f} MiB", flush=True)
                continue
        t0 = time.perf_counter()
        try:
            proto, params, want = export(spec)
            data = proto.SerializeToString()
            err = check_exported(spec, data, want)
        except Exception as e:  # report and go on with the next model
            failed += 1
            first = str(e).strip().split("\n")[0][:300]
            print(f"{spec.name:20s} FAILED      {type(e).__name__}: {first}", flush=True)
            continue
        write_atomic(path, data)
        meta = {"name": spec.name, "key": key, "sha256": hashlib.sha256(data).hexdigest(), "params": params,
                "nodes": len(proto.graph.node), "bytes": len(data), "max_abs_err_vs_torch": err,
                "inputs": {i.name: [list(i.shape), i.dtype] for i in spec.inputs}, "versions": versions()}
        write_atomic(side, (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode())
        print(f"{spec.name:20s} built {time.perf_counter() - t0:5.1f}s  params {params:>10,}  "
              f"nodes {len(proto.graph.node):>5}  {len(data) / 2**20:8.2f} MiB  torch-vs-ort {err:.1e}",
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
