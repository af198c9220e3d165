"""non_maximum_suppression (ops/nms.py) in the mil executor, against coremltools' reference implementation."""

from __future__ import annotations

import numpy as np

from executor_ops_support import ct, mb, run


def test_non_maximum_suppression_follows_coremltools_reference():
    # coremltools' own smoke case (iOS14 op tests): per-class NMS keeps boxes 1 and 2
    boxes = np.array([[[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]]], np.float32)
    scores = np.array([[[-3.5], [9.4], [2.3], [0.7]]], np.float32)
    outs = run(lambda b, s: mb.non_maximum_suppression(boxes=b, scores=s, iou_threshold=0.2, score_threshold=0.4,
                                                       max_boxes=2, per_class_suppression=True),
               {"b": boxes, "s": scores}, opset=ct.target.iOS15)
    np.testing.assert_array_equal(outs[0], [[[1, 1, 1, 1], [2, 2, 2, 2]]])
    np.testing.assert_array_equal(outs[1], scores[:, 1:3])
    assert outs[2].tolist() == [[1, 2]] and outs[3].tolist() == [2]
    # (cx, cy, w, h): box 1 overlaps box 0 (IoU 1/3), box 2 is apart, box 3 overlaps box 2 (IoU 0.6); two classes
    b = np.array([[[0, 0, 2, 2], [1, 0, 2, 2], [10, 10, 2, 2], [10.5, 10, 2, 2], [20, 20, 1, 1]]], np.float32)
    s = np.array([[[0.9, 0.1], [0.1, 0.8], [0.7, 0.0], [0.6, 0.0], [0.05, 0.0]]], np.float32)
    outs = run(lambda bb, ss: (*mb.non_maximum_suppression(boxes=bb, scores=ss, iou_threshold=0.3, score_threshold=0.1,
                                                           max_boxes=4),
                               *mb.non_maximum_suppression(boxes=bb, scores=ss, iou_threshold=0.3, score_threshold=0.1,
                                                           max_boxes=4, per_class_suppression=True)),
               {"bb": b, "ss": s}, opset=ct.target.iOS15)
    assert outs[2].tolist() == [[0, 2, -1, -1]] and outs[3].tolist() == [2]  # 1 and 3 suppressed, 4 below threshold
    np.testing.assert_array_equal(outs[0][0, 2:], 0)
    assert outs[6].tolist() == [[0, 1, 2, -1]]  # class 1 (box 1) is suppressed only within its class
    # iOS17 layout: boxes [n, 4, B], scores [n, K, B], no score threshold, three outputs
    outs = run(lambda bb, ss: mb.non_maximum_suppression(boxes=bb, scores=ss, iou_threshold=0.3, max_boxes=3),
               {"bb": np.swapaxes(b, 1, 2).copy(), "ss": np.swapaxes(s, 1, 2).copy()}, opset=ct.target.iOS17)
    assert len(outs) == 3 and outs[2].tolist() == [[0, 2, 4]]
    np.testing.assert_array_equal(outs[0][0, :, 1], b[0, 2])
