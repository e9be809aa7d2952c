"""Seeded pictures drawn with numpy alone, for the image models of the wild suite: a 5x7 bitmap font,
text masks, document pages (title, paragraphs, a table, a figure), text-line crops, captchas and
photo-like scenes. Every function takes a numpy Generator and returns uint8 HxWx3 (or HxW) arrays,
so the same seed always draws the same picture."""

from __future__ import annotations

import numpy as np

_GLYPHS = (  # 7 rows of 5 bits a glyph (HD44780-style), in the order of _CHARS
    "0E11131519110E 040C040404040E 0E11010204081F 1F02040201110E 02060A121F0202 1F101E0101110E "
    "0608101E11110E 1F010204080808 0E11110E11110E 0E11110F01020C 0E1111111F1111 1E11111E11111E "
    "0E11101010110E 1C12111111121C 1F10101E10101F 1F10101E101010 0E11101711110F 1111111F111111 "
    "0E04040404040E 0702020202120C 11121418141211 1010101010101F 111B1515111111 11111915131111 "
    "0E11111111110E 1E11111E101010 0E11111115120D 1E11111E141211 0F10100E01011E 1F040404040404 "
    "1111111111110E 11111111110A04 1111111515150A 11110A040A1111 1111110A040404 1F01020408101F "
    "00000000000C0C 0000001F000000 000C0C000C0C00 00000000000000"
)
_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ.-: "


def _font() -> dict[str, np.ndarray]:
    codes = _GLYPHS.replace(" ", "")
    font = {}
    for i, ch in enumerate(_CHARS):
        rows = [int(codes[14 * i + 2 * r:14 * i + 2 * r + 2], 16) for r in range(7)]
        font[ch] = np.array([[(row >> (4 - b)) & 1 for b in range(5)] for row in rows], bool)
    return font


FONT = _font()
WORDS = ("INVOICE TOTAL DATE ORDER QTY PRICE ITEM PAGE SECTION RESULTS TABLE SUMMARY MODEL NETWORK "
         "LAYER INPUT OUTPUT SHAPE BATCH KERNEL TENSOR GRAPH REPORT NOTE FIGURE ADDRESS CITY PHONE "
         "ACCOUNT BALANCE AMOUNT TAX PAID DUE THE AND FOR WITH FROM INTO OVER UNDER").split()


def words(rng: np.random.Generator, n: int) -> str:
    """`n` words, a number now and then (dates, amounts)."""
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.15:
            out.append(f"{rng.integers(1, 9999)}.{rng.integers(0, 99):02d}")
        elif r < 0.2:
            out.append(f"2024-{rng.integers(1, 13):02d}-{rng.integers(1, 29):02d}")
        else:
            out.append(str(rng.choice(WORDS)))
    return " ".join(out)


def blur(img: np.ndarray, passes: int = 1) -> np.ndarray:
    """A 3x3 box blur over the first two axes, `passes` times (edge pixels repeated)."""
    out = img.astype(np.float32)
    for _ in range(passes):
        p = np.pad(out, [(1, 1), (1, 1)] + [(0, 0)] * (out.ndim - 2), mode="edge")
        out = sum(p[i:i + out.shape[0], j:j + out.shape[1]] for i in range(3) for j in range(3)) / 9.0
    return out


def text_mask(text: str, height: int, rng: np.random.Generator | None = None, jitter: int = 0) -> np.ndarray:
    """Coverage in [0, 1] of `text` in the 5x7 font, glyphs `height` pixels tall, each moved up or down
    by up to `jitter` pixels (captcha style); anti-aliased by a box blur."""
    gh, gw = height, max(2, round(height * 5 / 7))
    gap = max(1, gw // 4)
    mask = np.zeros((gh + 2 * jitter, max(1, len(text)) * (gw + gap)), np.float32)
    rows, cols = np.arange(gh) * 7 // gh, np.arange(gw) * 5 // gw
    for i, ch in enumerate(text.upper()):
        glyph = FONT.get(ch, FONT[" "])[rows][:, cols]
        dy = int(rng.integers(0, 2 * jitter + 1)) if (jitter and rng is not None) else jitter
        x = i * (gw + gap)
        mask[dy:dy + gh, x:x + gw] = np.maximum(mask[dy:dy + gh, x:x + gw], glyph)
    return np.clip(blur(mask), 0.0, 1.0)


def paste(canvas: np.ndarray, mask: np.ndarray, y: int, x: int, color: object) -> None:
    """Blends `color` into `canvas` (HxW or HxWxC, float) at (y, x) by the coverage `mask`, clipped to
    the canvas."""
    h = min(mask.shape[0], canvas.shape[0] - y)
    w = min(mask.shape[1], canvas.shape[1] - x)
    if h <= 0 or w <= 0 or y < 0 or x < 0:
        return
    m = mask[:h, :w]
    if canvas.ndim == 3:
        m = m[..., None]
    region = canvas[y:y + h, x:x + w]
    canvas[y:y + h, x:x + w] = region * (1 - m) + np.asarray(color, np.float32) * m


def background(h: int, w: int, rng: np.random.Generator, lo: float = 225, hi: float = 250) -> np.ndarray:
    """Paper-like background: a light colour with a linear gradient and sensor noise (float HxWx3)."""
    base = rng.uniform(lo, hi, 3)
    gy, gx = np.linspace(0, 1, h)[:, None, None], np.linspace(0, 1, w)[None, :, None]
    grad = rng.uniform(-12, 12, 3) * gy + rng.uniform(-12, 12, 3) * gx
    return base + grad + rng.normal(0, 3, (h, w, 3))


def document(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """A page: a title, paragraphs of dark text, a ruled table and a figure (uint8 HxWx3)."""
    page = background(h, w, rng)
    margin = max(4, w // 16)
    line_h = max(7, h // int(rng.integers(38, 56)))
    y = margin
    paste(page, text_mask(words(rng, 3), line_h * 2), y, margin, rng.uniform(0, 60, 3))
    y += line_h * 3
    blocks = ["para", "table", "para", "figure", "para"]
    for block in blocks:
        if y > h - margin - line_h:
            break
        if block == "para":
            for _ in range(int(rng.integers(2, 6))):
                text = words(rng, int(rng.integers(3, 12)))
                mask = text_mask(text, line_h)[:, :w - 2 * margin]
                paste(page, mask, y, margin + int(rng.integers(0, line_h)), rng.uniform(0, 70, 3))
                y += int(line_h * 1.6)
            y += line_h
        elif block == "table":
            rows, ncols = int(rng.integers(3, 6)), int(rng.integers(2, 5))
            cell_w, cell_h = (w - 2 * margin) // ncols, int(line_h * 1.8)
            y1 = min(h - margin, y + rows * cell_h)
            for r in range(rows + 1):
                page[min(h - 1, y + r * cell_h), margin:margin + ncols * cell_w] = 60
            for c in range(ncols + 1):
                page[y:y1, min(w - 1, margin + c * cell_w)] = 60
            for r in range(rows):
                for c in range(ncols):
                    mask = text_mask(words(rng, 1), line_h)[:, :cell_w - 4]
                    paste(page, mask, y + r * cell_h + line_h // 3, margin + c * cell_w + 3, (20, 20, 20))
            y = y1 + line_h
        else:
            fh = min(h - margin - y, int(rng.integers(h // 8, h // 4)))
            fw = int(rng.integers(w // 3, w - 2 * margin))
            if fh > 4:
                patch = scene(fh, fw, rng).astype(np.float32)
                page[y:y + fh, margin:margin + fw] = patch
                y += fh + line_h
    return np.clip(page, 0, 255).astype(np.uint8)


def text_line(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """A detected text box cut out of a page: one line of text filling `width` pixels (uint8 HxWx3)."""
    img = background(height, width, rng, 200, 250)
    glyph_h = int(height * rng.uniform(0.5, 0.75))
    n = max(1, (width - 4) // (round(glyph_h * 5 / 7) + max(1, round(glyph_h * 5 / 7) // 4)))
    text = words(rng, 8)[:n].strip() or "A"
    paste(img, text_mask(text, glyph_h), (height - glyph_h) // 2, 2, rng.uniform(0, 80, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def captcha(height: int, width: int, rng: np.random.Generator, chars: int) -> np.ndarray:
    """A grayscale text captcha: noisy background, jittered characters of random grey levels, curved
    interference lines and salt-and-pepper dots (uint8 HxW)."""
    img = rng.uniform(190, 245) + rng.normal(0, 12, (height, width))
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
    text = "".join(str(c) for c in rng.choice(list(alphabet), chars))
    glyph_h = int(height * 0.55)
    step = (width - 8) / chars
    for i, ch in enumerate(text):
        mask = text_mask(ch, glyph_h, rng, jitter=height // 10)
        x = int(4 + i * step + rng.uniform(0, max(1.0, step - mask.shape[1])))
        paste(img, mask, int(rng.integers(0, height - mask.shape[0] + 1)), x, rng.uniform(10, 120))
    for _ in range(int(rng.integers(2, 4))):
        xs = np.arange(width)
        wave = np.sin(xs / rng.uniform(8, 30) + rng.uniform(0, 6))
        ys = rng.uniform(0.2, 0.8) * height + rng.uniform(4, 12) * wave
        for dy in (0, 1):
            img[np.clip(ys.astype(int) + dy, 0, height - 1), xs] = rng.uniform(30, 140)
    dots = rng.random((height, width))
    img[dots < 0.02], img[dots > 0.98] = 0, 255
    return np.clip(img, 0, 255).astype(np.uint8)


def scene(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """A photo-like picture: sky-to-ground gradient, soft ellipses (some skin-toned), rectangles, noise,
    blurred once (uint8 HxWx3)."""
    top, bottom = rng.uniform(80, 230, 3), rng.uniform(30, 160, 3)
    t = np.linspace(0, 1, h)[:, None, None]
    img = top * (1 - t) + bottom * t + np.zeros((1, w, 1))
    yy, xx = np.mgrid[0:h, 0:w]
    for _ in range(int(rng.integers(3, 8))):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        ry, rx = rng.uniform(h / 12, h / 3), rng.uniform(w / 12, w / 3)
        inside = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
        skin = np.array([rng.uniform(180, 235), rng.uniform(130, 185), rng.uniform(100, 160)])
        img[inside] = skin if rng.random() < 0.5 else rng.uniform(0, 255, 3)
    for _ in range(int(rng.integers(1, 4))):
        y0, x0 = int(rng.integers(0, h)), int(rng.integers(0, w))
        y1, x1 = y0 + int(rng.integers(h // 10, h // 3 + 2)), x0 + int(rng.integers(w // 10, w // 3 + 2))
        img[y0:y1, x0:x1] = rng.uniform(0, 255, 3)
    img = blur(img) + rng.normal(0, 4, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def click_captcha(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """A click-the-characters captcha: a scene with 3 to 5 large outlined characters on it (uint8 HxWx3)."""
    img = scene(h, w, rng).astype(np.float32)
    for _ in range(int(rng.integers(3, 6))):
        size = int(rng.integers(h // 10, h // 6))
        mask = text_mask(str(rng.choice(list("ABCDEFGHKMNPRSTUVWXYZ"))), size)
        y, x = int(rng.integers(0, h - size - 2)), int(rng.integers(0, w - mask.shape[1] - 2))
        paste(img, np.clip(blur(mask, 2) * 3, 0, 1), y, x, (255, 255, 255))
        paste(img, mask, y, x, rng.uniform(0, 255, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def resize(img: np.ndarray, h: int, w: int) -> np.ndarray:
    """Bilinear resize of an HxW or HxWxC array to h x w (float32), as cv2.resize's INTER_LINEAR samples."""
    src_h, src_w = img.shape[:2]
    ys = np.clip((np.arange(h) + 0.5) * src_h / h - 0.5, 0, src_h - 1)
    xs = np.clip((np.arange(w) + 0.5) * src_w / w - 0.5, 0, src_w - 1)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, src_h - 1), np.minimum(x0 + 1, src_w - 1)
    fy, fx = ys - y0, xs - x0
    a = img.astype(np.float32)
    if a.ndim == 3:
        fy, fx = fy[:, None, None], fx[None, :, None]
    else:
        fy, fx = fy[:, None], fx[None, :]
    top = a[y0][:, x0] * (1 - fx) + a[y0][:, x1] * fx
    bottom = a[y1][:, x0] * (1 - fx) + a[y1][:, x1] * fx
    return top * (1 - fy) + bottom * fy
