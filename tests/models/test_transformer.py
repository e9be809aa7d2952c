"""A BERT-style encoder (tests/models/transformer.py) through the pattern-recognition passes.

The expanded LayerNorm, GELU and attention that torch.onnx writes become `layer_norm`, `gelu` and
`attention`; the recognized module must still match onnxruntime on the numpy target and, lowered for
OpenCL (the attention template included), on the device.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest

from .transformer import build_encoder, encoder_inputs

PIPELINE = (
    "canonicalize,fold-constants,cse,recognize-gelu,recognize-layernorm,recognize-softmax,"
    "recognize-attention,dce"
)
LAYERS = 2


@pytest.fixture(scope="module")
def encoder() -> onnx.ModelProto:
    return build_encoder(layers=LAYERS, hidden=128, heads=4, seq=64, ffn=512, seed=0)


@pytest.fixture(scope="module")
def expected(encoder: onnx.ModelProto) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.log_severity_level = 3
    sess = ort.InferenceSession(encoder.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in sess.run(None, encoder_inputs(encoder))]


def recognized(model: onnx.ModelProto):  # noqa: ANN201
    from tessel.frontends.onnx.importer import import_model
    from tessel.passes.manager import PassManager
    from tessel.passes.pipeline import parse_pipeline

    module = import_model(model.SerializeToString(), "encoder.onnx")
    pm = PassManager(parse_pipeline(PIPELINE))
    pm.run(module)
    return module, pm


def feeds_in_order(module, model: onnx.ModelProto) -> list[np.ndarray]:  # noqa: ANN001
    from tessel.ir.interpreter import input_names

    feeds = encoder_inputs(model)
    return [feeds[n] for n in input_names(module.funcs[0])]


def op_counts(module) -> dict[str, int]:  # noqa: ANN001
    counts: dict[str, int] = {}
    for op in module.walk():
        counts[op.name] = counts.get(op.name, 0) + 1
    return counts


def test_encoder_builds_a_torch_style_graph(encoder: onnx.ModelProto) -> None:
    ops = [n.op_type for n in encoder.graph.node]
    assert encoder.opset_import[0].version == 17
    assert ops.count("Softmax") == LAYERS and ops.count("Erf") == LAYERS
    assert ops.count("ReduceMean") == 4 * LAYERS and ops.count("Pow") == 2 * LAYERS
    assert ops.count("MatMul") == 8 * LAYERS


def test_patterns_are_recognized(encoder: onnx.ModelProto) -> None:
    module, pm = recognized(encoder)
    counts = op_counts(module)
    assert counts.get("gelu") == LAYERS
    assert counts.get("layer_norm") == 2 * LAYERS
    assert counts.get("attention") == LAYERS
    for gone in ("erf", "reduce_mean", "softmax", "sqrt", "pow", "div"):
        assert gone not in counts, f"'{gone}' left after recognition: {counts}"
    assert counts.get("matmul") == 6 * LAYERS  # q, k, v, output and two feed-forward projections
    recognized_remarks = [r for r in pm.ctx.remarks if r.kind == "passed" and r.reason == "recognized"]
    assert len(recognized_remarks) == 4 * LAYERS
    assert not [r for r in pm.ctx.remarks if r.kind == "missed"]
    stats = {p.NAME: p.stats for p in pm.passes}
    # q, k, v and the result stay [B, S, H, D]: the 4 transposes of each layer are absorbed
    assert stats["recognize-attention"] == {
        "num-recognized": LAYERS,
        "num-bshd": LAYERS,
        "num-transposes-absorbed": 4 * LAYERS,
    }
    assert "transpose" not in counts
    # the attention keeps the ONNX names of the ops it replaced, the absorbed transposes included
    att = next(op for op in module.walk() if op.name == "attention")
    assert "onnx:/encoder/layer.0/attention/self/Softmax_0" in att.loc
    assert "onnx:/encoder/layer.0/attention/self/key/Transpose_1" in att.loc
    assert att.attrs["scale"] == pytest.approx(1 / np.sqrt(32))
    assert att.attrs["layout"] == "bshd" and att.result.type.dims == (1, 64, 4, 32)


def test_recognized_encoder_matches_onnxruntime(encoder: onnx.ModelProto, expected: list[np.ndarray]) -> None:
    from tessel.ir.interpreter import run_func

    module, _ = recognized(encoder)
    got = run_func(module, module.funcs[0], feeds_in_order(module, encoder))
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-3, atol=1e-4)


def test_recognized_encoder_on_opencl_matches_onnxruntime(
    encoder: onnx.ModelProto, expected: list[np.ndarray]
) -> None:
    from tessel.targets.opencl import device as dev

    reason = dev.opencl_available()
    if reason is not None:
        pytest.skip(reason)
    from tessel.targets.opencl.lower import lower_module
    from tessel.targets.opencl.runtime import Executable

    module, _ = recognized(encoder)
    device = dev.pick_device()
    lower_module(module, dev.device_info(device))
    launches = [op for op in module.funcs[0].block.ops if op.name == "cl.launch"]
    assert any(op.regions[0].blocks[0].ops[-2].name == "attention" for op in launches)
    # no data movement of its own around the attention: no transpose, no pack of k (made in local
    # memory), no packing kernel in front of a matmul (its 64-row activations are read as they are)
    bodies = [op.regions[0].blocks[0].ops[-2].name for op in launches]
    assert "transpose" not in bodies and "pack" not in bodies
    assert all(len(op.attrs["kernels"]) == 1 for op in launches)
    exe = Executable(module, module.funcs[0], device)
    got = exe.run(feeds_in_order(module, encoder))
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "additive-mask"])
def test_attention_reference_matches_onnx_attention(masked: bool) -> None:
    """The `attention` op's numpy reference against onnxruntime's own Attention (opset 23) node."""
    from tessel.ir.ops.registry import get_op
    from tessel.ir.types import TensorType

    from ..numeric.ort_util import run_ort

    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 3, 10, 8)).astype(np.float32) for _ in range(3))
    mask = np.where(rng.random((2, 1, 10, 10)) < 0.3, -1e4, 0.0).astype(np.float32) if masked else None
    inputs = [q, k, v] + ([mask] if masked else [])
    (want,) = run_ort("Attention", inputs, {"scale": 0.3}, opset=23)
    opdef = get_op("attention")
    assert opdef is not None
    sig = opdef.sig([TensorType.of(a) for a in inputs], {"scale": 0.3})
    sig.results = opdef.infer(sig)
    got = opdef.reference(sig, *inputs)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    n = 2 * 3 * 10 * 10  # scores
    assert opdef.cost(sig).flops == 2 * n * 8 + 2 * n * 8 + 9 * n  # both products, then softmax and mask
    # layout bshd: the same attention on [B, S, H, D] operands, the result [B, S, H, D]
    swapped = [np.ascontiguousarray(a.swapaxes(1, 2)) for a in (q, k, v)] + ([mask] if masked else [])
    sig = opdef.sig([TensorType.of(a) for a in swapped], {"scale": 0.3, "layout": "bshd"})
    sig.results = opdef.infer(sig)
    assert sig.results[0].dims == (2, 10, 3, 8)
    np.testing.assert_allclose(opdef.reference(sig, *swapped), want.swapaxes(1, 2), rtol=1e-5, atol=1e-6)
    plain = opdef.sig([TensorType.of(a) for a in inputs], {"scale": 0.3})
    plain.results = opdef.infer(plain)
    assert opdef.cost(sig) == opdef.cost(plain)


@pytest.mark.parametrize(
    "types, attrs, message",
    [
        ([(8, 4)] * 3, {"layout": "bshd"}, "q must have rank >= 3 ([..., seq, heads, dim] in layout bshd)"),
        ([(1, 8, 2, 4), (1, 6, 2, 4), (1, 7, 2, 4)], {"layout": "bshd"}, "k and v sequence lengths differ"),
        ([(1, 8, 2, 4), (1, 6, 3, 4), (1, 6, 3, 4)], {"layout": "bshd"}, "broadcast"),
    ],
)
def test_attention_bshd_shape_errors(types, attrs, message: str) -> None:  # noqa: ANN001
    from tessel.ir.ops.registry import OpError, get_op
    from tessel.ir.types import TensorType

    opdef = get_op("attention")
    assert opdef is not None
    with pytest.raises(OpError, match=re.escape(message)):
        opdef.infer(opdef.sig([TensorType(t, "f32") for t in types], attrs))
