"""A BERT-style transformer encoder as torch.onnx exports one (opset 17), built with onnx.helper.

    build_encoder(layers=2, hidden=128, heads=4, seq=64, ffn=512, seed=0) -> onnx.ModelProto

Inputs `hidden_states` [batch, seq, hidden] (the embeddings' output) and `attention_mask` [batch, seq]
(1 for a visible token, 0 for padding); output `last_hidden_state` [batch, seq, hidden]. Each layer is
what torch.onnx writes for a HuggingFace BertLayer with the LayerNorm and GELU modules expanded (as older
exporters and hand-written modules give them):
- the extended mask once: Unsqueeze to [B, 1, 1, S], Cast, (1 - m) * -10000;
- self-attention: q, k, v each MatMul + Add (a linear layer), Reshape to [B, S, heads, dh] and Transpose
  to [B, heads, S, dh] (k straight to [B, heads, dh, S], the permute and the transpose of `k.T` folded),
  MatMul, Div by sqrt(dh), Add the mask, Softmax(-1), MatMul with v, Transpose and Reshape back, the
  output linear layer, the residual Add and a LayerNorm;
- feed-forward: linear, GELU (x * 0.5 * (1 + erf(x / sqrt 2))), linear, residual Add, LayerNorm;
- LayerNorm: ReduceMean(-1), Sub, Pow 2, ReduceMean(-1), Add eps, Sqrt, Div, Mul gamma, Add beta.
Weights are seeded random normals scaled by 1/sqrt(fan-in), so activations stay near unit size.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _Graph:
    def __init__(self, seed: int) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.count: dict[str, int] = {}

    def name(self, op: str) -> str:
        n = self.count.get(op, 0)
        self.count[op] = n + 1
        return f"/{op}_{n}"

    def node(self, op: str, inputs: list[str], prefix: str = "", **attrs: object) -> str:
        name = f"{prefix}{self.name(op)}"
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, name: str, shape: tuple[int, ...], scale: float) -> str:
        return self.const(name, (scale * self.rng.standard_normal(shape)).astype(np.float32))

    def scalar(self, name: str, value: float) -> str:
        return self.const(name, np.array(value, np.float32))

    def linear(self, x: str, prefix: str, fan_in: int, fan_out: int) -> str:
        w = self.weight(f"{prefix}.weight", (fan_in, fan_out), 1 / math.sqrt(fan_in))
        b = self.weight(f"{prefix}.bias", (fan_out,), 0.1)
        return self.node("Add", [self.node("MatMul", [x, w], prefix), b], prefix)

    def layer_norm(self, x: str, prefix: str, hidden: int, eps: float = 1e-12) -> str:
        gamma = self.const(
            f"{prefix}.weight", (1 + 0.1 * self.rng.standard_normal(hidden)).astype(np.float32)
        )
        beta = self.weight(f"{prefix}.bias", (hidden,), 0.1)
        mean = self.node("ReduceMean", [x], prefix, axes=[-1], keepdims=1)
        d = self.node("Sub", [x, mean], prefix)
        sq = self.node("Pow", [d, self.scalar(f"{prefix}.two", 2.0)], prefix)
        var = self.node("ReduceMean", [sq], prefix, axes=[-1], keepdims=1)
        den = self.node("Sqrt", [self.node("Add", [var, self.scalar(f"{prefix}.eps", eps)], prefix)], prefix)
        y = self.node("Div", [d, den], prefix)
        return self.node("Add", [self.node("Mul", [y, gamma], prefix), beta], prefix)

    def gelu(self, x: str, prefix: str) -> str:
        z = self.node("Div", [x, self.scalar(f"{prefix}.sqrt2", 1.4142135381698608)], prefix)
        one_plus = self.node(
            "Add", [self.node("Erf", [z], prefix), self.scalar(f"{prefix}.one", 1.0)], prefix
        )
        return self.node(
            "Mul", [self.node("Mul", [x, one_plus], prefix), self.scalar(f"{prefix}.half", 0.5)], prefix
        )


def build_encoder(
    layers: int = 2,
    hidden: int = 128,
    heads: int = 4,
    seq: int = 64,
    ffn: int = 512,
    seed: int = 0,
    batch: int = 1,
) -> onnx.ModelProto:
    """The encoder described in the module docstring, with seeded random weights."""
    assert hidden % heads == 0, "hidden must be a multiple of heads"
    dh = hidden // heads
    g = _Graph(seed)
    split = g.const("shape.heads", np.array([batch, seq, heads, dh], np.int64))
    merge = g.const("shape.hidden", np.array([batch, seq, hidden], np.int64))
    # extended attention mask: (1 - mask[:, None, None, :]) * -10000
    m = g.node("Unsqueeze", ["attention_mask", g.const("mask.axes", np.array([1, 2], np.int64))], "/mask")
    m = g.node("Cast", [m], "/mask", to=TensorProto.FLOAT)
    m = g.node("Sub", [g.scalar("mask.one", 1.0), m], "/mask")
    mask = g.node("Mul", [m, g.scalar("mask.min", -10000.0)], "/mask")
    h = "hidden_states"
    for i in range(layers):
        p = f"/encoder/layer.{i}"
        heads_of = {}
        for part, perm in (("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3])):
            pp = f"{p}/attention/self/{part}"
            t = g.node("Reshape", [g.linear(h, pp, hidden, hidden), split], pp)
            heads_of[part] = g.node("Transpose", [t], pp, perm=perm)
        a = f"{p}/attention/self"
        scores = g.node("MatMul", [heads_of["query"], heads_of["key"]], a)
        scores = g.node("Div", [scores, g.scalar(f"{a}.scale", math.sqrt(dh))], a)
        scores = g.node("Add", [scores, mask], a)
        probs = g.node("Softmax", [scores], a, axis=-1)
        ctx = g.node("MatMul", [probs, heads_of["value"]], a)
        ctx = g.node("Reshape", [g.node("Transpose", [ctx], a, perm=[0, 2, 1, 3]), merge], a)
        o = f"{p}/attention/output"
        attn = g.node("Add", [g.linear(ctx, f"{o}/dense", hidden, hidden), h], o)
        h1 = g.layer_norm(attn, f"{o}/LayerNorm", hidden)
        f = g.gelu(g.linear(h1, f"{p}/intermediate/dense", hidden, ffn), f"{p}/intermediate")
        out = g.node("Add", [g.linear(f, f"{p}/output/dense", ffn, hidden), h1], f"{p}/output")
        h = g.layer_norm(out, f"{p}/output/LayerNorm", hidden)
    g.nodes.append(helper.make_node("Identity", [h], ["last_hidden_state"], name="/output/Identity"))
    graph = helper.make_graph(
        g.nodes,
        "bert_encoder",
        [
            helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, [batch, seq, hidden]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [batch, seq]),
        ],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [batch, seq, hidden])],
        g.inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="tessel-tests (torch.onnx-style BERT encoder)",
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def encoder_inputs(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    """Seeded inputs: normal hidden states and a mask hiding the last quarter of the tokens."""
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    batch, seq = shape[0], shape[1]
    mask = np.ones((batch, seq), np.int64)
    mask[:, seq - seq // 4 :] = 0
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return {"hidden_states": x, "attention_mask": mask}
