"""A short and a long timing window of the same call: what the device does over time.

The short window is the reference run's way of timing (a few warm-up calls, then tens of timed calls). A public
source saw the Neural Engine leave a burst state for a slower sustained one about 830 inferences into a run, a one-way
transition that minutes of idle did not undo (john-rocky/coreai-model-zoo models/granite-embedding-97m/README.md:
~1.85 ms against ~4.75 ms on a base M4). A short window alone cannot see that, so on a device backend the benchmark
also times a long window of consecutive calls and reports it by blocks, with the step between the first and the last
block. On the numpy executor there is no device state to watch and the long window is not run (said so).
"""

from __future__ import annotations

import numpy as np

from .timing import summarize, timed_calls

LONG_WINDOW_CALLS = 1000  # past the ~830 calls of the public burst -> sustained transition
BLOCK = 100               # calls per reported block of the long window
DEVICE_BACKENDS = ("coreml",)  # Core ML on CPU_AND_NE (macOS only); coreml-cpu etc. do not target the Neural Engine


def long_window(call, backend: str, calls: int = LONG_WINDOW_CALLS, block: int = BLOCK) -> dict:
    """`calls` consecutive timed calls (no further warm-up: it follows the short window) summarised whole and by
    blocks of `block` calls, or why it was not run."""
    if calls <= 0:
        return {"ran": False, "why": "--long-window 0"}
    if backend not in DEVICE_BACKENDS:
        return {"ran": False, "why": (f"backend {backend} is not the device: the long window watches the Neural "
                                      "Engine's burst and sustained state, which only a Core ML backend on macOS runs")}
    seconds = timed_calls(call, 0, calls)
    ms = np.asarray(seconds) * 1e3
    blocks = [{"first_call": i, "calls": int(len(ms[i:i + block])), "p50_ms": float(np.percentile(ms[i:i + block], 50))}
              for i in range(0, len(ms), block)]
    return {"ran": True, "calls": calls, "block": block, "timing": summarize(seconds), "blocks": blocks,
            "last_over_first_block_p50": blocks[-1]["p50_ms"] / blocks[0]["p50_ms"],
            "what": ("consecutive calls right after the short window; a burst -> sustained transition shows as a step "
                     "between blocks (public: ~830 calls on a base M4)")}
