"""Converters for detection post-processing: NonMaxSuppression, folded at import.

The number of boxes NonMaxSuppression keeps depends on the values of its inputs, and tessel's shapes are
static, so it converts only when every input is a constant: the selection is computed here in numpy (as
onnx's reference and onnxruntime do it) and enters the graph as a constant.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..builder import Builder, ConversionError, Tensor
from ..registry import converter


def _corners(box: np.ndarray, center_point_box: int) -> tuple[Any, Any, Any, Any]:
    """(y_min, x_min, y_max, x_max) of a [y1, x1, y2, x2] box (corners in either order) or an
    [x_center, y_center, width, height] one, as numpy scalars of the boxes' type: the IoU is computed
    in that type, as onnxruntime does, so boxes at the threshold fall the same way."""
    if center_point_box:
        xc, yc, w, h = box
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    y1, x1, y2, x2 = box
    return min(y1, y2), min(x1, x2), max(y1, y2), max(x1, x2)


def _overlaps(a: tuple[Any, ...], c: tuple[Any, ...], threshold: Any) -> bool:
    """Whether IoU(a, c) > threshold (degenerate boxes never overlap)."""
    ih = min(a[2], c[2]) - max(a[0], c[0])
    iw = min(a[3], c[3]) - max(a[1], c[1])
    if ih <= 0 or iw <= 0:
        return False
    inter = ih * iw
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    area_c = (c[2] - c[0]) * (c[3] - c[1])
    union = area_a + area_c - inter
    if area_a <= 0 or area_c <= 0 or union <= 0:
        return False
    return bool(inter / union > threshold)


def non_max_suppression(boxes: np.ndarray, scores: np.ndarray, max_out: int, iou: Any,
                        score_threshold: Any, center_point_box: int) -> np.ndarray:
    """[selected, 3] int64 rows (batch, class, box): per batch and class, boxes by descending score (ties:
    lower index first), each kept unless it overlaps a kept one by more than `iou`."""
    rows = []
    for n in range(scores.shape[0]):
        corners = [_corners(box, center_point_box) for box in boxes[n]]
        for c in range(scores.shape[1]):
            s = scores[n, c]
            order = sorted(range(s.shape[0]), key=lambda i: (-float(s[i]), i))
            if score_threshold is not None:
                order = [i for i in order if s[i] > score_threshold]
            kept: list[int] = []
            for i in order:
                if len(kept) >= max_out:
                    break
                if not any(_overlaps(corners[i], corners[j], iou) for j in kept):
                    kept.append(i)
                    rows.append((n, c, i))
    return np.array(rows, np.int64).reshape(len(rows), 3)


def _first(t: Tensor, what: str) -> Any:
    a = np.asarray(t.const(what)).reshape(-1)
    if a.size != 1:
        raise ConversionError(f"{what} must hold one value, got {t.type}")
    return a[0]


@converter("NonMaxSuppression", since=10)
def NonMaxSuppression(b: Builder, boxes: Tensor, scores: Tensor,
                      max_output_boxes_per_class: Tensor | None = None, iou_threshold: Tensor | None = None,
                      score_threshold: Tensor | None = None, *, center_point_box: int = 0) -> Tensor:
    if center_point_box not in (0, 1):
        raise ConversionError(f"center_point_box must be 0 or 1, got {center_point_box}")
    bx = np.asarray(boxes.const("NonMaxSuppression's boxes (its output size depends on them)"))
    sc = np.asarray(scores.const("NonMaxSuppression's scores (its output size depends on them)"))
    if bx.ndim != 3 or bx.shape[2] != 4 or sc.ndim != 3 or sc.shape[0] != bx.shape[0] \
            or sc.shape[2] != bx.shape[1]:
        raise ConversionError(f"boxes [batch, boxes, 4] and scores [batch, classes, boxes] expected, got "
                              f"{boxes.type} and {scores.type}")
    max_out = 0
    if max_output_boxes_per_class is not None and max_output_boxes_per_class.shape != (0,):
        max_out = max(max_output_boxes_per_class.ints("max_output_boxes_per_class")[0], 0)
    iou = _first(iou_threshold, "iou_threshold") if iou_threshold is not None else np.float32(0)
    thr = _first(score_threshold, "score_threshold") if score_threshold is not None else None
    return b.const(non_max_suppression(bx, sc, max_out, iou, thr, center_point_box))
