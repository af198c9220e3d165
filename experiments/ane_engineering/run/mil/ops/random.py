"""Random ops: random_bernoulli, random_normal, random_uniform, random_categorical (coremltools' iOS15 random.py).

The draws come from numpy's default generator (PCG64), seeded with the op's `seed` when it is 0 or more, so a seeded
op gives the same values on every run, as the definition asks ("a reproducible sequence of values across multiple
invokes"); seed -1 (the default) draws fresh values each run. They are not Core ML's values: Core ML's generator is
not specified, so only the distribution is the same. Where a distribution is degenerate (probability 0 or 1, standard
deviation 0, low = high, one category) the output is exact, and equal to Core ML's.
"""

from __future__ import annotations

import numpy as np

from ..registry import register
from .common import as_ints


def _generator(args) -> np.random.Generator:
    seed = int(np.asarray(args.get("seed", -1)).reshape(()))
    return np.random.default_rng(seed if seed >= 0 else None)


def _scalar(args, name: str, default: float) -> float:
    return float(np.asarray(args.get(name, default), dtype=np.float64).reshape(()))


@register("random_bernoulli")
def op_random_bernoulli(node, args, num):
    shape = as_ints(args["shape"])
    # uniform [0, 1) < prob: all ones for prob 1, all zeros for prob 0
    return (_generator(args).random(shape) < _scalar(args, "prob", 0.5)).astype(node.output_dtypes[0])


@register("random_normal")
def op_random_normal(node, args, num):
    shape = as_ints(args["shape"])
    mean, stddev = _scalar(args, "mean", 0.0), _scalar(args, "stddev", 1.0)
    return (mean + stddev * _generator(args).standard_normal(shape)).astype(node.output_dtypes[0])


@register("random_uniform")
def op_random_uniform(node, args, num):
    shape = as_ints(args["shape"])
    low, high = _scalar(args, "low", 0.0), _scalar(args, "high", 1.0)
    return (low + (high - low) * _generator(args).random(shape)).astype(node.output_dtypes[0])


@register("random_categorical")
def op_random_categorical(node, args, num):
    x = np.asarray(args["x"], dtype=np.float64)  # [*D, K]: one distribution per leading index
    mode = str(args.get("mode", "logits"))
    size = int(np.asarray(args.get("size", 1)).reshape(()))
    if mode == "logits":
        weights = np.exp(x - x.max(axis=-1, keepdims=True))
    elif mode == "probs":
        weights = np.clip(x, 0.0, None)
    else:
        raise ValueError(f"random_categorical mode must be 'logits' or 'probs', got {mode!r}")
    rows = weights.reshape(-1, x.shape[-1])
    rng = _generator(args)
    drawn = np.stack([rng.choice(rows.shape[1], size=size, p=row / row.sum()) for row in rows])  # [prod(D), size]
    return drawn.reshape(x.shape[:-1] + (size,)).astype(node.output_dtypes[0])  # category indices, as T
