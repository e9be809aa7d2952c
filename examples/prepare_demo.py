"""Helpers for `make demo`: write a random-weight copy of a bundled model, its classifier calibrated so the
softmax is not saturated, plus an input; and compare tessel's outputs with onnxruntime's.

    python examples/prepare_demo.py MODEL OUTDIR            # OUTDIR/MODEL.onnx, OUTDIR/input.npz
    python examples/prepare_demo.py --compare MODEL OUTDIR  # OUTDIR/out.npz against onnxruntime
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
from tessel.frontends.onnx.randomize import randomize_weights

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def calibrate(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Scale the classifier (the Gemm or Conv whose output the final Softmax reads) so the logits on
    `feeds` have a standard deviation of 2: random He-initialised weights give logits in the hundreds,
    a softmax of exactly 1.000 for one class and 0 for the rest, where a wrong kernel can hide; after
    this the top class has p well under 1 and every probability is compared."""
    import onnxruntime as ort

    soft = next((n for n in reversed(m.graph.node) if n.op_type == "Softmax"), None)
    if soft is None:
        return m
    producer = next((n for n in m.graph.node if soft.input[0] in n.output), None)
    while producer is not None and producer.op_type not in ("Gemm", "Conv", "MatMul", "FC"):
        producer = next((n for n in m.graph.node if producer.input[0] in n.output), None)
    if producer is None:
        return m
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    probe.graph.output.append(onnx.helper.make_empty_tensor_value_info(soft.input[0]))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    logits = ort.InferenceSession(probe.SerializeToString(), opts,
                                  providers=["CPUExecutionProvider"]).run([soft.input[0]], feeds)[0]
    scale = 2.0 / max(float(np.std(logits)), 1e-6)
    inits = {i.name: i for i in m.graph.initializer}
    for name in producer.input[1:]:
        if name in inits:
            arr = onnx.numpy_helper.to_array(inits[name])
            inits[name].CopyFrom(onnx.numpy_helper.from_array((arr * scale).astype(arr.dtype), name))
    return m


def prepare(model: str, out: str) -> None:
    m = randomize_weights(onnx.load(os.path.join(LIGHT, f"light_{model}.onnx")), seed=0)
    inits = {i.name for i in m.graph.initializer}
    inputs = [vi for vi in m.graph.input if vi.name not in inits]
    rng = np.random.default_rng(7)
    arrays = {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim])
              .astype(np.float32) for vi in inputs}
    m = calibrate(m, arrays)
    onnx.save(m, os.path.join(out, f"{model}.onnx"))
    np.savez(os.path.join(out, "input.npz"), **arrays)
    size = os.path.getsize(os.path.join(out, f"{model}.onnx")) / 1e6
    print(f"{model}.onnx: {len(m.graph.node)} ONNX nodes, {size:.1f} MB of weights; input "
          + ", ".join(f"{k} {list(v.shape)}" for k, v in arrays.items()))


def compare(model: str, out: str) -> int:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.log_severity_level = 3
    sess = ort.InferenceSession(os.path.join(out, f"{model}.onnx"), opts, providers=["CPUExecutionProvider"])
    inputs = dict(np.load(os.path.join(out, "input.npz")))
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, inputs), strict=True))
    got = dict(np.load(os.path.join(out, "out.npz")))
    ok = True
    for name, w in want.items():
        g = got[name]
        err = float(np.abs(g - w).max())
        close = np.allclose(g, w, rtol=1e-3, atol=1e-4)
        ok &= close
        cg, cw = int(np.argmax(g)), int(np.argmax(w))
        verdict = "OK" if close else "MISMATCH"
        print(f"{name}: max abs difference {err:.2e} ({verdict} at rtol 1e-3, atol 1e-4)")
        pg, pw = g.reshape(-1)[cg], w.reshape(-1)[cw]
        print(f"  top class: tessel {cg} (p={pg:.3f}), onnxruntime {cw} (p={pw:.3f})")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    prepare(sys.argv[1], sys.argv[2])
