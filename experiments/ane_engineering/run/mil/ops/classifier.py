"""classify: a classifier's predicted label and its {class: probability} dictionary (coremltools'
defs/iOS15/classify.py: `probabilities` fp32, `classes` a const list of str or int64). The label is the class of
the largest probability (the first one on ties, as numpy's argmax)."""

from __future__ import annotations

import numpy as np

from ..registry import register


@register("classify")
def op_classify(node, args, num):
    probabilities = np.asarray(args["probabilities"], dtype=np.float32).reshape(-1)
    classes = [c.item() if isinstance(c, np.generic) else c for c in np.asarray(args["classes"]).reshape(-1).tolist()]
    if len(classes) != probabilities.size:
        raise ValueError(f"{len(classes)} classes for {probabilities.size} probabilities")
    label = classes[int(np.argmax(probabilities))]
    return label, {c: float(p) for c, p in zip(classes, probabilities)}
