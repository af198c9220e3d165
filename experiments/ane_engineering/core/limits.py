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

Files the harness reads are opened as regular files and refused above their bound before a byte is read
(core/regular_files.py): a FIFO would block forever and a device such as /dev/zero never ends.

- MAX_JSON_BYTES: a JSON document (config.json, manifests, goldens, evidence, Core ML's Manifest.json,
  tokenizer.json) is parsed whole into Python objects, which take several times the text's size; the largest
  document the harness reads, a tokenizer.json, holds one entry per vocabulary token and merge, far below this.
- MAX_PROGRAM_BYTES: model.mlmodel is one protobuf message, and "any proto in serialized form must be <2GiB"
  (protobuf.dev, Programming Guides, Proto Limits).
- weight files (weight.bin) and the arrays given to `execute --inputs`: held whole in host memory, so bounded by
  physical memory (host_memory_bound). A value made while a program loads or runs -- a loop's values between
  iterations, an op of constant inputs folded at load -- by a quarter of it (value_bound): the op making it also
  needs room for its inputs and temporaries (a concat doubling its input holds input and output at once).
- MAX_PACKAGE_ENTRIES, MAX_PACKAGE_DEPTH: an .mlpackage holds Manifest.json, model.mlmodel and a weights directory
  (coremltools writes 3 files in 3 directories, Data/com.apple.CoreML/weights); the bounds leave ample room and stop a
  directory bomb before it is walked, copied or hashed.
- MAX_NPY_HEADER_BYTES: numpy's own default limit on an .npy header (numpy.lib.format, `max_header_size`).
- ZIP_OVERHEAD_BYTES: what an .npz may add per member (and once for the archive) beyond the .npy itself: a zip
  local and central header with the member's name and zip64 fields, and the end record with its comment of at most
  65,535 bytes (PKWARE APPNOTE.TXT 4.3); deflate may add 5 bytes per stored block of at most 65,535 bytes (RFC 1951
  3.2.4), a further 1/8192 of the data at most. So an inputs file is bounded before its central directory is parsed.
- MAX_LOOP_ITERATIONS: iterations of while_loop bodies in one run of a program, every loop counted (nested loops
  too). No program the harness exports has a loop; the cap is far above what coremltools' own op tests loop, low
  enough that a loop that never ends is refused instead of left running. `execute --max-loop-iterations` raises it.
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


MAX_JSON_BYTES = 256 << 20
MAX_PROGRAM_BYTES = (2 << 30) - 1
MAX_PACKAGE_ENTRIES = 1024
MAX_PACKAGE_DEPTH = 16
MAX_NPY_HEADER_BYTES = 10000
ZIP_OVERHEAD_BYTES = 1 << 17
MAX_LOOP_ITERATIONS = 1_000_000
UNKNOWN_MEMORY_BYTES = 1 << 40  # the host-memory bound where the OS does not report its memory


def host_memory_bound() -> int:
    """Bytes one file or array held whole in host memory may take: the machine's physical memory."""
    return physical_memory_bytes() or UNKNOWN_MEMORY_BYTES


def value_bound() -> int:
    """Bytes one value made at load or run time may take (a loop's values together): a quarter of physical memory."""
    return host_memory_bound() // 4
