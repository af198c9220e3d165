"""Timing primitives: warm-up then timed calls with a monotonic clock, and the summary every evidence file uses."""

from __future__ import annotations

import time

import numpy as np

from ...core.errors import HarnessError


class TimingError(HarnessError):
    """Timing settings or results that cannot be summarised."""


def summarize(seconds: list[float]) -> dict:
    """p50, p95, min, max and mean in milliseconds, plus every raw timing (ms)."""
    ms = np.asarray(seconds, dtype=np.float64) * 1e3
    if ms.size == 0:
        raise TimingError("no timings to summarize")
    return {"n": int(ms.size), "p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)),
            "min_ms": float(ms.min()), "max_ms": float(ms.max()), "mean_ms": float(ms.mean()),
            "raw_ms": [float(v) for v in ms]}


def timed_calls(call, warmup: int, calls: int) -> list[float]:
    """Run `call` `warmup` times untimed, then `calls` times timed; returns seconds per timed call."""
    if warmup < 0 or calls < 1:
        raise TimingError("warmup must be >= 0 and calls >= 1")
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


def paired_calls(first, second, warmup: int, calls: int) -> tuple[list[float], list[float]]:
    """Interleave two candidates call by call in one process (ABBA order, so drift hits both alike)."""
    for _ in range(warmup):
        first()
        second()
    a, b = [], []
    for index in range(calls):
        order = ((first, a), (second, b)) if index % 2 == 0 else ((second, b), (first, a))
        for call, sink in order:
            started = time.perf_counter()
            call()
            sink.append(time.perf_counter() - started)
    return a, b


def ratio_summary(a: list[float], b: list[float]) -> dict:
    """Per-pair ratios b/a (second candidate over the first)."""
    ratios = np.asarray(b) / np.asarray(a)
    return {"n": int(ratios.size), "p50": float(np.percentile(ratios, 50)), "p05": float(np.percentile(ratios, 5)),
            "p95": float(np.percentile(ratios, 95)), "min": float(ratios.min()), "max": float(ratios.max()),
            "raw": [float(r) for r in ratios]}
