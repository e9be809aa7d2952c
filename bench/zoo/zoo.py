"""The model zoo: real model definitions (torchvision, Hugging Face transformers, torch.nn) with seeded random
weights, exported to ONNX by build.py so tessel is benchmarked on families it was never tuned on.

This module is the data: one `Spec` per model (name, family, build function, inputs with how to seed
them), importable without torch — torch, torchvision and transformers are imported only inside the build
functions. The bench needs only numpy:

    sys.path.insert(0, "bench/zoo"); import zoo    # bench/ is not a package
    path, feeds = zoo.load("resnet18")   # bench/zoo/models/resnet18.onnx and its seeded inputs

docs/bench-zoo.md says what each model is there for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ZOO_DIR = Path(__file__).resolve().parent / "models"
"""Where build.py writes `<name>.onnx` by default (gitignored)."""

OPSET = 18
FEED_SEED = 7
"""The seed of the feeds the bench and check.py use (the export's example inputs use seed 0)."""


@dataclasses.dataclass(frozen=True)
class Input:
    """One graph input and how to seed it.

    kind: "normal" (float32, N(0, scale)), "tokens" (int64 in [0, high)), or "mask" (int64 attention
    mask of ones with `pad` trailing zeros in the last row, `pad // 2` in the others).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    kind: str = "normal"
    high: int = 0
    scale: float = 1.0
    pad: int = 0


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    family: str
    build: Callable[[Spec], tuple[Any, tuple]]
    """Returns (torch module in eval mode with seeded weights, example inputs as torch tensors)."""
    inputs: tuple[Input, ...]
    outputs: tuple[str, ...]
    seed: int = 0
    keep_batchnorm: bool = False
    """Keep BatchNormalization nodes in the ONNX graph (else the exporter folds them into the convs)."""
    exporter: str = "dynamo"
    """"dynamo" (torch.export + onnxscript) or "torchscript" (dynamo=False, for nn.LSTM/nn.GRU, which
    it exports as the ONNX LSTM/GRU ops instead of an unrolled loop)."""
    note: str = ""


def feeds(spec: Spec, seed: int = FEED_SEED) -> dict[str, np.ndarray]:
    """Seeded inputs for `spec`, numpy only: the same seed gives the same arrays on any machine."""
    out: dict[str, np.ndarray] = {}
    for i, inp in enumerate(spec.inputs):
        rng = np.random.default_rng([seed, i])
        if inp.kind == "normal":
            a = (rng.standard_normal(inp.shape) * inp.scale).astype(inp.dtype)
        elif inp.kind == "tokens":
            a = rng.integers(0, inp.high, size=inp.shape).astype(inp.dtype)
        elif inp.kind == "mask":
            a = np.ones(inp.shape, dtype=inp.dtype)
            for row in range(inp.shape[0]):
                pad = inp.pad if row == inp.shape[0] - 1 else inp.pad // 2
                if pad:
                    a[row, -pad:] = 0
        else:
            raise ValueError(f"{spec.name}: unknown input kind {inp.kind!r}")
        out[inp.name] = a
    return out


def get(name: str) -> Spec:
    for s in SPECS:
        if s.name == name:
            return s
    raise KeyError(f"no zoo model {name!r}; known: {', '.join(s.name for s in SPECS)}")


def load(name: str, zoo_dir: Path | str | None = None) -> tuple[Path, dict[str, np.ndarray]]:
    """(path of `<name>.onnx`, its seeded feeds). Raises FileNotFoundError naming build.py if not built."""
    spec = get(name)
    path = Path(zoo_dir or ZOO_DIR) / f"{name}.onnx"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run .venv/bin/python bench/zoo/build.py --only {name}")
    return path, feeds(spec)


# ----------------------------------------------------------------------------------------------------------
# Build helpers (torch is imported inside them only)


def _example(spec: Spec) -> tuple:
    import torch

    return tuple(torch.from_numpy(a) for a in feeds(spec, seed=0).values())


def _calibrate(model: Any, spec: Spec, batches: int = 4) -> Any:
    """Give every BatchNorm seeded non-trivial affine weights and running statistics measured on seeded
    inputs (momentum=None: a plain average over the batches), so outputs are not degenerate; then eval()."""
    import torch

    g = torch.Generator().manual_seed(spec.seed + 1)
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        for bn in bns:
            bn.weight.copy_(torch.rand(bn.weight.shape, generator=g) + 0.5)
            bn.bias.copy_(torch.randn(bn.bias.shape, generator=g) * 0.1)
            bn.momentum = None
            bn.reset_running_stats()
        model.train()
        (inp,) = spec.inputs
        shape = (max(inp.shape[0], 4), *inp.shape[1:])
        for _ in range(batches):
            model(torch.randn(shape, generator=g) * inp.scale)
    return model.eval()


def _image(shape: tuple[int, ...]) -> tuple[Input, ...]:
    return (Input("input", shape),)


# ----------------------------------------------------------------------------------------------------------
# Build functions


def _mlp(spec: Spec) -> tuple[Any, tuple]:
    import torch
    from torch import nn

    torch.manual_seed(spec.seed)
    m = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    return m.eval(), _example(spec)


def _torchvision(ctor: str, reset_linear: bool = False, **kwargs: Any) -> Callable[[Spec], tuple[Any, tuple]]:
    """torchvision.models.<ctor>(weights=None, **kwargs); `reset_linear` re-initializes the classifier's
    Linear layers with torch's default init where torchvision's N(0, 0.01) leaves logits near 0.01, too
    small for atol 1e-4 to mean anything."""

    def build(spec: Spec) -> tuple[Any, tuple]:
        import torch
        import torchvision.models as tvm

        torch.manual_seed(spec.seed)
        m = getattr(tvm, ctor)(weights=None, **kwargs)
        if reset_linear:
            for lin in m.modules():
                if isinstance(lin, torch.nn.Linear):
                    lin.reset_parameters()
        return _calibrate(m, spec), _example(spec)

    build.__name__ = f"_torchvision_{ctor}"
    return build


def _convnext(spec: Spec) -> tuple[Any, tuple]:
    import torch
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    torch.manual_seed(spec.seed)
    cfg = [CNBlockConfig(32, 64, 2), CNBlockConfig(64, 128, 2), CNBlockConfig(128, None, 2)]
    m = ConvNeXt(cfg, stochastic_depth_prob=0.0, num_classes=100)
    return m.eval(), _example(spec)


def _unet(spec: Spec) -> tuple[Any, tuple]:
    import torch
    from torch import nn
    from torch.nn import functional as F

    def double(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        )

    class UNet(nn.Module):
        """3 levels (16/32/64 channels, 128 at the bottom); the deepest up-step is a ConvTranspose2d, the
        others bilinear Resize + 1x1 conv; skip connections concatenate."""

        def __init__(self, cin: int = 3, cout: int = 2, w: int = 16) -> None:
            super().__init__()
            self.enc1, self.enc2, self.enc3 = double(cin, w), double(w, 2 * w), double(2 * w, 4 * w)
            self.mid = double(4 * w, 8 * w)
            self.up3 = nn.ConvTranspose2d(8 * w, 4 * w, 2, stride=2)
            self.dec3 = double(8 * w, 4 * w)
            self.up2 = nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
                                     nn.Conv2d(4 * w, 2 * w, 1))
            self.dec2 = double(4 * w, 2 * w)
            self.up1 = nn.Conv2d(2 * w, w, 1)
            self.dec1 = double(2 * w, w)
            self.head = nn.Conv2d(w, cout, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            e1 = self.enc1(x)
            e2 = self.enc2(F.max_pool2d(e1, 2))
            e3 = self.enc3(F.max_pool2d(e2, 2))
            m = self.mid(F.max_pool2d(e3, 2))
            d3 = self.dec3(torch.cat([self.up3(m), e3], 1))
            d2 = self.dec2(torch.cat([self.up2(d3), e2], 1))
            up1 = self.up1(F.interpolate(d2, scale_factor=2.0, mode="nearest"))
            d1 = self.dec1(torch.cat([up1, e1], 1))
            return self.head(d1)

    torch.manual_seed(spec.seed)
    return _calibrate(UNet(), spec), _example(spec)


def _vit(spec: Spec) -> tuple[Any, tuple]:
    import torch
    from torchvision.models import VisionTransformer

    torch.manual_seed(spec.seed)
    m = VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=4, hidden_dim=128,
                          mlp_dim=512, num_classes=10)
    torch.nn.init.normal_(m.heads.head.weight, std=0.02)  # torchvision zero-inits the head: constant logits
    return m.eval(), _example(spec)


def _bert(spec: Spec) -> tuple[Any, tuple]:
    import torch
    from transformers import BertConfig, BertModel

    class Bert(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            cfg = BertConfig(vocab_size=4000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=512, max_position_embeddings=128)
            self.bert = BertModel(cfg)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple:
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
            return out.last_hidden_state, out.pooler_output

    torch.manual_seed(spec.seed)
    return Bert().eval(), _example(spec)


def _gpt2(spec: Spec) -> tuple[Any, tuple]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    class GPT2(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            cfg = GPT2Config(vocab_size=2048, n_positions=64, n_embd=128, n_layer=2, n_head=4,
                             use_cache=False, tie_word_embeddings=True)
            self.gpt2 = GPT2LMHeadModel(cfg)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.gpt2(input_ids=input_ids, use_cache=False, return_dict=True).logits

    torch.manual_seed(spec.seed)
    return GPT2().eval(), _example(spec)


def _audio1d(spec: Spec) -> tuple[Any, tuple]:
    import torch
    from transformers import Wav2Vec2Config
    from transformers.models.wav2vec2.modeling_wav2vec2 import (
        Wav2Vec2FeatureEncoder,
        Wav2Vec2FeatureProjection,
    )

    class FrontEnd(torch.nn.Module):
        """wav2vec2-base's feature encoder (7 strided Conv1d, GroupNorm on the first, GELU) at 64 channels,
        then its feature projection (LayerNorm, Linear to 128): 16000 samples -> 49 frames."""

        def __init__(self) -> None:
            super().__init__()
            cfg = Wav2Vec2Config(conv_dim=(64,) * 7, hidden_size=128, feat_extract_norm="group",
                                 conv_bias=False, feat_proj_dropout=0.0)
            self.encoder = Wav2Vec2FeatureEncoder(cfg)
            self.projection = Wav2Vec2FeatureProjection(cfg)

        def forward(self, audio: torch.Tensor) -> torch.Tensor:
            features = self.encoder(audio).transpose(1, 2)
            return self.projection(features)[0]

    torch.manual_seed(spec.seed)
    return FrontEnd().eval(), _example(spec)


def _recurrent(cell: str) -> Callable[[Spec], tuple[Any, tuple]]:
    def build(spec: Spec) -> tuple[Any, tuple]:
        import torch
        from torch import nn

        class Recurrent(nn.Module):
            """2-layer batch-first nn.LSTM/nn.GRU (64 -> 128), a Linear head on every step."""

            def __init__(self) -> None:
                super().__init__()
                self.rnn = getattr(nn, cell)(64, 128, num_layers=2, batch_first=True)
                self.head = nn.Linear(128, 10)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.head(self.rnn(x)[0])

        torch.manual_seed(spec.seed)
        return Recurrent().eval(), _example(spec)

    build.__name__ = f"_recurrent_{cell}"
    return build


# ----------------------------------------------------------------------------------------------------------
# The zoo

SPECS: tuple[Spec, ...] = (
    Spec("mlp", "mlp", _mlp, (Input("input", (1, 784)),), ("logits",),
         note="784-256-128-10 ReLU, batch 1: Gemm chains, tiny launch-bound model"),
    Spec("resnet18", "resnet", _torchvision("resnet18"), _image((1, 3, 224, 224)), ("logits",),
         keep_batchnorm=True, note="torchvision ResNet-18 at 224^2, BatchNormalization kept in the graph"),
    Spec("resnet34", "resnet", _torchvision("resnet34"), _image((8, 3, 64, 64)), ("logits",),
         keep_batchnorm=True, note="torchvision ResNet-34, batch 8 at 64^2 (the batch-8 CNN), BN kept"),
    Spec("mobilenet_v2", "mobilenet", _torchvision("mobilenet_v2", width_mult=0.5), _image((1, 3, 160, 160)),
         ("logits",), note="width 0.5 at 160^2: depthwise 3x3, ReLU6 (Clip), inverted residuals"),
    Spec("mobilenet_v3_small", "mobilenet", _torchvision("mobilenet_v3_small", reset_linear=True),
         _image((1, 3, 224, 224)), ("logits",),
         note="hardswish, hardsigmoid squeeze-excitation, 5x5 depthwise"),
    Spec("efficientnet_b0", "efficientnet", _torchvision("efficientnet_b0"), _image((1, 3, 192, 192)),
         ("logits",), note="SiLU, sigmoid squeeze-excitation, 5x5 depthwise, at 192^2"),
    Spec("convnext", "convnext", _convnext, _image((1, 3, 128, 128)), ("logits",),
         note="torchvision ConvNeXt, 3 stages 32/64/128: 7x7 depthwise, LayerNorm over channels, GELU"),
    Spec("unet", "unet", _unet, _image((1, 3, 128, 128)), ("mask",), keep_batchnorm=True,
         note="3-level U-Net 3->2: ConvTranspose2d and Resize up-paths, skip concats, BN kept"),
    Spec("vit", "vit", _vit, _image((1, 3, 64, 64)), ("logits",),
         note="torchvision VisionTransformer 64^2/16: 17 tokens, 2 layers, hidden 128, 4 heads"),
    Spec("bert", "bert", _bert,
         (Input("input_ids", (2, 64), "int64", "tokens", high=4000),
          Input("attention_mask", (2, 64), "int64", "mask", pad=12)),
         ("last_hidden_state", "pooler_output"),
         note="transformers BertModel, 2 layers, hidden 128, seq 64, batch 2, padded attention mask"),
    Spec("gpt2", "gpt2", _gpt2, (Input("input_ids", (1, 32), "int64", "tokens", high=2048),), ("logits",),
         note="transformers GPT2LMHeadModel, 2 layers, n_embd 128, causal mask, tied LM head"),
    Spec("audio1d", "audio", _audio1d, (Input("audio", (1, 16000), scale=0.1),), ("features",),
         note="wav2vec2 conv feature encoder (64 ch) + projection on 1 s of 16 kHz audio"),
    Spec("lstm", "rnn", _recurrent("LSTM"), (Input("input", (1, 32, 64)),), ("output",),
         exporter="torchscript", note="2-layer nn.LSTM 64->128, seq 32, Linear head (ONNX LSTM op)"),
    Spec("gru", "rnn", _recurrent("GRU"), (Input("input", (1, 32, 64)),), ("output",),
         exporter="torchscript", note="2-layer nn.GRU 64->128, seq 32, Linear head (ONNX GRU op)"),
)
