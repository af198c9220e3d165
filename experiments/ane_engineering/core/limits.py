"""How large a model may be: the one home of the bounds checked before anything is allocated.

Imported by the first stage (checkpoint config schemas) and by placement (the ANE rule on dimensions), so it sits
beside core/errors.py and imports nothing of the pipeline.

- MAX_DIMENSION: the ANE compiler rejects tensors outside "N[1-65536]D[1-16384]C[1-65536]H[1-16384]W[1-16384]"
  (its message, quoted in FluidInference/FluidAudio issue #121); the harness applies the tightest bound, 16384, to
  every axis of every tensor on the device. Every size in a config that becomes a device tensor dimension (hidden
  and intermediate sizes, heads, the attention window, scorer width, marker slots, token types) is bounded by it.
- MAX_LAYERS: a LoRA-capable export stacks the adapters of every transformer layer on one device axis,
  (1, layers x rank, 1, C) (model/bc1s/lora.py), so with rank >= 1 more than MAX_DIMENSION layers cannot be exported.
  The bound applies to every config so that any checkpoint loads for every export kind, and it caps the per-layer
  lists a config implies (layer types, tensor names) before they are built.
- Host memory: the harness holds every weight as float32 on the host (checkpoint/files.py), so the parameters a
  config implies times 4 bytes must fit in this machine's physical memory; sizes that live only on the host (the
  vocabulary table, the action head) are bounded by this alone. checkpoint/tensors.py counts the parameters.

Command-line values are bounded where they enter (core/arguments.py), by the same facts:
- a bucket length, a windowed-attention query tile, a palettization group size and a LoRA rank each become an axis
  of a device tensor ((1, C, 1, L); the window mask (1, T + 2r, nT, T); a LUT per group of output channels; the
  stacked adapters (1, layers x rank, 1, C)), so each is at most MAX_DIMENSION (a LoRA rank times the layers is
  checked again once the config is known);
- worker threads or processes (k-means workers, sweep jobs) are at most WORKERS_PER_CPU per CPU of this machine:
  beyond that they only compete for the same cores (each process holding its own copy of the model), and a typo
  such as 10^6 workers would start that many;
- timed or repeated calls are at most MAX_CALLS: each is a full call, and every raw timing is written into the
  evidence file.
"""

from __future__ import annotations

import os

MAX_DIMENSION = 16384
MAX_LAYERS = MAX_DIMENSION  # encoder + decision-head layers; see the module docstring
FLOAT32_BYTES = 4
MAX_CALLS = 1_000_000  # timed or repeated calls of one run (see the module docstring)


WORKERS_PER_CPU = 4


def max_workers() -> int:
    """Worker threads or processes a command may start (see the module docstring)."""
    return WORKERS_PER_CPU * max(os.cpu_count() or 1, 1)


def physical_memory_bytes() -> int | None:
    """This machine's physical memory (POSIX sysconf; Linux and macOS), or None where the OS does not report it."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
