"""non_maximum_suppression (iOS15 and iOS17 layouts).

Semantics follow coremltools' own NMS reference (ops/tests/iOS14/test_tensor_operation.py,
`_ref_non_maximum_suppression`, which its op tests compare Core ML against):
- boxes are (center_x, center_y, width, height); a box's score is its largest class score;
- greedy selection in descending score order (ties in index order), dropping boxes whose score is not above
  score_threshold and boxes whose IoU with an already selected box exceeds iou_threshold;
  with per_class_suppression the greedy pass runs within each class (class = argmax of the box's scores) and the
  survivors are merged back in score order;
- if nothing survives, the best-scoring box is returned alone; at most max_boxes are kept;
- outputs are padded to max_boxes: boxes and scores with 0, indices with -1.
iOS15: boxes [n, B, 4], scores [n, B, K] -> boxes [n, max, 4], scores [n, max, K], indices [n, max],
number of boxes [n]. iOS17: boxes [n, 4, B], scores [n, K, B], no score_threshold -> [n, 4, max], [n, K, max],
[n, max].

Numerics: IoU and scores are compared in float32 in both modes; the outputs copy input values.
"""

from __future__ import annotations

import numpy as np

from ..registry import register
from .common import as_bool, as_int


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """IoU of one (cx, cy, w, h) box with each row of `others`."""
    def corners(b):
        return (b[..., 0] - b[..., 2] / 2, b[..., 1] - b[..., 3] / 2,
                b[..., 0] + b[..., 2] / 2, b[..., 1] + b[..., 3] / 2)

    x1, y1, x2, y2 = corners(box)
    ox1, oy1, ox2, oy2 = corners(others)
    inter = (np.maximum(0, np.minimum(x2, ox2) - np.maximum(x1, ox1))
             * np.maximum(0, np.minimum(y2, oy2) - np.maximum(y1, oy1)))
    union = box[2] * box[3] + others[:, 2] * others[:, 3] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def _greedy(boxes, scores, candidates, iou_threshold, score_threshold, limit):
    """Indices (into boxes) kept by greedy NMS over `candidates`, in descending score order."""
    order = candidates[np.argsort(-scores[candidates], kind="stable")]
    order = order[scores[order] > score_threshold]
    kept: list[int] = []
    for i in order:
        if len(kept) >= limit:
            break
        if not kept or np.all(_iou(boxes[i], boxes[np.array(kept)]) <= iou_threshold):
            kept.append(int(i))
    return kept


def _select(boxes, class_scores, iou_threshold, score_threshold, max_boxes, per_class):
    """boxes [B, 4], class_scores [B, K] (float32) -> selected box indices."""
    scores = class_scores.max(axis=-1)
    everything = np.arange(boxes.shape[0])
    if not per_class:
        ids = _greedy(boxes, scores, everything, iou_threshold, score_threshold, max_boxes)
    else:
        classes = class_scores.argmax(axis=-1)
        ids = []
        for c in np.unique(classes):
            ids += _greedy(boxes, scores, everything[classes == c], iou_threshold, score_threshold, max_boxes)
        ids = sorted(ids, key=lambda i: (-scores[i], i))
    if not ids and boxes.shape[0]:
        ids = [int(np.argmax(scores))]
    return ids[:max_boxes]


@register("non_maximum_suppression")
def op_non_maximum_suppression(node, args, num):
    ios17 = "score_threshold" not in args
    boxes = np.asarray(args["boxes"])
    scores = np.asarray(args["scores"])
    if ios17:  # [n, 4, B] / [n, K, B] -> the iOS15 layout
        boxes, scores = np.swapaxes(boxes, 1, 2), np.swapaxes(scores, 1, 2)
    iou_threshold = float(np.asarray(args["iou_threshold"]))
    score_threshold = -np.inf if ios17 else float(np.asarray(args["score_threshold"]))
    max_boxes = as_int(args["max_boxes"])
    per_class = as_bool(args.get("per_class_suppression", False))
    n, _, k = scores.shape
    out_boxes = np.zeros((n, max_boxes, 4), boxes.dtype)
    out_scores = np.zeros((n, max_boxes, k), scores.dtype)
    out_ids = np.full((n, max_boxes), -1, np.int32)
    counts = np.zeros(n, np.int32)
    for b in range(n):
        ids = _select(boxes[b].astype(np.float32), scores[b].astype(np.float32), iou_threshold, score_threshold,
                      max_boxes, per_class)
        counts[b] = len(ids)
        out_boxes[b, :len(ids)] = boxes[b, ids]
        out_scores[b, :len(ids)] = scores[b, ids]
        out_ids[b, :len(ids)] = ids
    if ios17:
        return np.swapaxes(out_boxes, 1, 2), np.swapaxes(out_scores, 1, 2), out_ids
    return out_boxes, out_scores, out_ids, counts
