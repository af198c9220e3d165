"""Checkpoints: the first stage of the pipeline (checkpoint -> model -> package -> placement -> run -> validation ->
evidence).

`load_checkpoint(spec)` resolves any `--source` to a directory (source.py) and reads it the same way
(loading.py): config.json (type-checked), safetensors weights (names and shapes checked against the config),
tokenizer.json when present, and the SHA256 of weights and config, carried into everything later stages write.
"""

from __future__ import annotations

import sys

from .config import ConfigError
from .loading import SOURCE_HASHES, Checkpoint, load_checkpoint_dir
from .source import DEFAULT_SOURCE, SOURCE_HELP, resolve_source
from .tensors import CheckpointError

__all__ = ["Checkpoint", "CheckpointError", "ConfigError", "DEFAULT_SOURCE", "SOURCE_HASHES", "SOURCE_HELP",
           "load_checkpoint", "load_checkpoint_dir"]


def load_checkpoint(spec: str = DEFAULT_SOURCE) -> Checkpoint:
    """Load any --source value: local directory, named source, or 'builtin:<name>'. Notes about ignored tensors
    go to stderr, once per load."""
    checkpoint = load_checkpoint_dir(resolve_source(spec), source=spec)
    for note in checkpoint.notes:
        print(f"note: {note}", file=sys.stderr)
    return checkpoint
