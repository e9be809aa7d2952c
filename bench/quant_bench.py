"""`make bench-quant`: int8 models against onnxruntime running the same int8 models, and tessel's own
float32; then f16 weights against f32 on the fully connected nets.

    .venv/bin/python bench/quant_bench.py [--models resnet18,bert] [--rounds 5 --repeat 10] [--json F]

int8 table: each model (a light model with seeded random weights, or a zoo model) is quantized the way
users do it: CNNs by onnxruntime's quantize_static (QDQ format, per-channel int8 weights, uint8
activations, 8 seeded standard-normal calibration inputs), transformers and recurrent nets by
quantize_dynamic (int8 weights, activations quantized at run time); the quantized copies are cached in
bench/zoo/models/int8/. tessel compiles the int8 model at -O2 for OpenCL (fold-qdq turns the QDQ
contractions into qconv2d / qmatmul) and, beside it, the float model. In one process the three (tessel
int8, onnxruntime int8, tessel float32) are timed in alternating rounds (each the median of --repeat runs
after a warm-up); the table gives the single-process medians of every run and the ratios. Accuracy: the
output's largest difference from onnxruntime's int8 output in quantization steps (the last
DequantizeLinear's scale; for dynamic models, relative to the output's range), the share of exactly equal
elements and whether the top-1 class agrees.

f16 table: alexnet, zfnet512 and vgg19 at -O2 with f32 and with f16 matmul / gemm weights
(--weight-precision): medians, speed-up and the largest relative difference of the outputs.

f16 models table (--half): models converted by onnxruntime's convert_float_to_float16 (keep_io_types: f32
inputs and outputs, everything inside f16), compiled as they are beside their f32 originals: kernel
launches of each, the medians, f16 / f32, and the largest difference of the f16 output from onnxruntime's
run of the same f16 model and from the f32 output (relative to the f32 output's largest magnitude).
Results go to bench/results/quant-<time>.json.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import RESULTS, ZOO, geomean, load_model  # noqa: E402

STATIC = ("resnet50", "squeezenet", "inception_v1", "shufflenet", "resnet18", "resnet34", "mobilenet_v2",
          "mobilenet_v3_small", "efficientnet_b0", "convnext", "unet", "audio1d")
DYNAMIC = ("bert", "gpt2", "vit", "mlp", "lstm", "gru")
FC_HEAVY = ("alexnet", "zfnet512", "vgg19")
HALF_MODELS = ("resnet18", "mobilenet_v2", "vit", "bert")
CACHE = ZOO / "models" / "int8"


def quantized(name: str, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """`model` quantized (cached by name): static QDQ for the CNNs, dynamic for the rest."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"{name}.onnx"
    if out.exists():
        return onnx.load(str(out))
    src = CACHE / f"{name}.f32.onnx"
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    if opset < 13:  # per-channel DequantizeLinear (its axis) needs opset 13
        from onnx import version_converter

        model = version_converter.convert_version(model, 13)
        model.ir_version = max(model.ir_version, 7)  # initializers need not be graph inputs
    onnx.save(model, str(src))
    if name in DYNAMIC:
        quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8)
    else:
        pre = CACHE / f"{name}.pre.onnx"
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        rng = np.random.default_rng(5)
        batches = [{k: rng.standard_normal(v.shape).astype(np.float32) for k, v in feeds.items()}
                   for _ in range(8)]

        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self.data = iter(batches)

            def get_next(self) -> dict | None:
                return next(self.data, None)

        quantize_static(str(pre), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        pre.unlink()
    src.unlink()
    return onnx.load(str(out))


def compiled(model: onnx.ModelProto, name: str, weights: str = "f32"):  # noqa: ANN201
    from tessel.frontends.onnx.importer import import_model
    from tessel.passes.manager import PassManager
    from tessel.passes.pipeline import level_pipeline, parse_pipeline
    from tessel.targets.numpy.interpreter import input_names
    from tessel.targets.opencl import device as dev
    from tessel.targets.opencl.lower import lower_module
    from tessel.targets.opencl.runtime import Executable

    module = import_model(model.SerializeToString(), f"{name}.onnx")
    PassManager(parse_pipeline(level_pipeline(2, weights))).run(module)
    func = module.func("main") or module.funcs[0]
    device = dev.pick_device(None)
    lower_module(module, dev.device_info(device))
    return Executable(module, func, device), input_names(func), module


def rounds(fns: dict[str, object], n: int, repeat: int) -> dict[str, float]:
    """Median ms of every timed run of each function, timed in alternating rounds after a warm-up."""
    runs: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()  # type: ignore[operator]
    for _ in range(n):
        for k, fn in fns.items():
            time.sleep(0.2)
            fn()  # type: ignore[operator]
            for _ in range(repeat):
                t0 = time.perf_counter()
                fn()  # type: ignore[operator]
                runs[k].append((time.perf_counter() - t0) * 1000)
    return {k: statistics.median(v) for k, v in runs.items()}


def output_step(model: onnx.ModelProto) -> float | None:
    last = model.graph.node[-1]
    if last.op_type != "DequantizeLinear":
        return None
    inits = {i.name: i for i in model.graph.initializer}
    if last.input[1] not in inits:
        return None
    return float(onnx.numpy_helper.to_array(inits[last.input[1]]).reshape(-1)[0])


def int8_row(name: str, args: argparse.Namespace) -> dict:
    import onnxruntime as ort
    from common import ort_options

    model, feeds = load_model(name)
    qmodel = quantized(name, model, feeds)
    sess = ort.InferenceSession(qmodel.SerializeToString(), ort_options(), providers=["CPUExecutionProvider"])
    qexe, qnames, qmodule = compiled(qmodel, f"{name}.int8")
    fexe, fnames, _ = compiled(model, name)
    qin, fin = [feeds[n] for n in qnames], [feeds[n] for n in fnames]
    want = sess.run(None, feeds)[0]
    got = qexe.run(qin)[0]
    qexe.settle(qin)
    fexe.settle(fin)
    ms = rounds({"tessel_int8": lambda: qexe.run(qin), "ort_int8": lambda: sess.run(None, feeds),
                 "tessel_f32": lambda: fexe.run(fin)}, args.rounds, args.repeat)
    step = output_step(qmodel)
    diff = float(np.abs(got.astype(np.float64) - want).max())
    spread = float(np.abs(want).max()) or 1.0
    names = [op.name for op in qmodule.walk()]
    return {
        "model": name, "quantization": "dynamic" if name in DYNAMIC else "static QDQ",
        **{f"{k}_ms": round(v, 3) for k, v in ms.items()},
        "vs_ort": round(ms["tessel_int8"] / ms["ort_int8"], 3),
        "vs_f32": round(ms["tessel_int8"] / ms["tessel_f32"], 3),
        "max_steps": round(diff / step, 3) if step else None,
        "max_rel": round(diff / spread, 6),
        "equal_share": round(float(np.mean(got == want)), 4),
        "top1_same": bool(np.argmax(got.reshape(len(got), -1)[0])
                          == np.argmax(want.reshape(len(want), -1)[0])),
        "integer_ops": sum(n in ("qconv2d", "qmatmul", "matmul_integer", "conv2d_integer") for n in names),
        "float_contractions": sum(n in ("conv2d", "matmul", "gemm") for n in names),
    }


def f16_row(name: str, args: argparse.Namespace) -> dict:
    model, feeds = load_model(name)
    exe32, names, _ = compiled(model, name)
    exe16, _, _ = compiled(model, name, "f16")
    arrays = [feeds[n] for n in names]
    a, b = exe32.run(arrays)[0], exe16.run(arrays)[0]
    exe32.settle(arrays)
    exe16.settle(arrays)
    ms = rounds({"f32": lambda: exe32.run(arrays), "f16_weights": lambda: exe16.run(arrays)},
                args.rounds, args.repeat)
    return {"model": name, "f32_ms": round(ms["f32"], 3), "f16_weights_ms": round(ms["f16_weights"], 3),
            "speedup": round(ms["f32"] / ms["f16_weights"], 3),
            "max_rel": round(float(np.abs(a - b).max() / np.abs(a).max()), 6),
            "top1_same": bool(np.argmax(a) == np.argmax(b))}


def half_model_row(name: str, args: argparse.Namespace) -> dict:
    import onnxruntime as ort
    from common import ort_options
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model, feeds = load_model(name)
    half = convert_float_to_float16(model, keep_io_types=True)
    exe32, names, m32 = compiled(model, name)
    exe16, _, m16 = compiled(half, f"{name}.f16")
    arrays = [feeds[n] for n in names]
    a, b = exe32.run(arrays)[0], exe16.run(arrays)[0]
    want = ort.InferenceSession(half.SerializeToString(), ort_options(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    exe32.settle(arrays)
    exe16.settle(arrays)
    ms = rounds({"f32": lambda: exe32.run(arrays), "f16": lambda: exe16.run(arrays)}, args.rounds,
                args.repeat)
    scale = float(np.abs(a).max()) or 1.0

    def launches(module: object) -> int:
        return sum(op.name == "cl.launch" for op in module.walk())  # type: ignore[attr-defined]

    return {"model": name, "f32_ms": round(ms["f32"], 3), "f16_ms": round(ms["f16"], 3),
            "f16_vs_f32": round(ms["f16"] / ms["f32"], 3), "kernels_f32": launches(m32),
            "kernels_f16": launches(m16),
            "max_rel_vs_ort_f16": round(float(np.abs(b.astype(np.float32) - want).max()) / scale, 6),
            "max_rel_vs_f32": round(float(np.abs(b.astype(np.float32) - a).max()) / scale, 6)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="comma-separated int8 models (default: all)")
    ap.add_argument("--f16", default=",".join(FC_HEAVY), help="models of the f16-weights table ('' none)")
    ap.add_argument("--half", default=",".join(HALF_MODELS),
                    help="models of the f16-models table ('' none)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--json", help="write the results here (default bench/results/quant-<time>.json)")
    args = ap.parse_args()
    int8 = args.models.split(",") if args.models else [*STATIC, *DYNAMIC]
    rows = []
    for name in int8:
        r = int8_row(name, args)
        rows.append(r)
        print(f"{name:16} int8 {r['tessel_int8_ms']:8.3f} ms  ort int8 {r['ort_int8_ms']:8.3f} ms  "
              f"f32 {r['tessel_f32_ms']:8.3f} ms  vs ort {r['vs_ort']:5.2f}  vs f32 {r['vs_f32']:5.2f}  "
              f"steps {r['max_steps']}  rel {r['max_rel']:.2e}  equal {r['equal_share']:.3f}  "
              f"top1 {r['top1_same']}  int ops {r['integer_ops']} float {r['float_contractions']}",
              flush=True)
    half = []
    for name in filter(None, args.f16.split(",")):
        r = f16_row(name, args)
        half.append(r)
        print(f"{name:16} f32 {r['f32_ms']:8.3f} ms  f16 weights {r['f16_weights_ms']:8.3f} ms  "
              f"speed-up {r['speedup']:5.2f}  rel {r['max_rel']:.2e}  top1 {r['top1_same']}", flush=True)
    models16 = []
    for name in filter(None, args.half.split(",")):
        r = half_model_row(name, args)
        models16.append(r)
        print(f"{name:16} f32 {r['f32_ms']:8.3f} ms  f16 model {r['f16_ms']:8.3f} ms  "
              f"f16/f32 {r['f16_vs_f32']:5.2f}  kernels {r['kernels_f16']} (f32 {r['kernels_f32']})  "
              f"rel vs ort f16 {r['max_rel_vs_ort_f16']:.2e}  vs f32 {r['max_rel_vs_f32']:.2e}", flush=True)
    out = {"int8": rows, "f16_weights": half, "f16_models": models16,
           "geomean_vs_ort": round(geomean([r["vs_ort"] for r in rows]), 3) if rows else None,
           "geomean_vs_f32": round(geomean([r["vs_f32"] for r in rows]), 3) if rows else None}
    print(f"int8 geomean: {out['geomean_vs_ort']} x onnxruntime int8, {out['geomean_vs_f32']} x tessel f32")
    path = Path(args.json) if args.json else RESULTS / f"quant-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
