"""A checkpoint directory in Hugging Face layout, read into a `Checkpoint`: config.json (type-checked), safetensors
weights (names and shapes checked against the config), tokenizer.json when present, and the SHA256 of weights and
config, computed once here and carried into everything later stages write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from tokenizers import Tokenizer

from ..core.json_documents import SHA256, STRING, open_object
from .config import ModelConfig, parse_config
from .files import (
    CONFIG_FILE,
    TOKENIZER_FILE,
    read_config_json,
    read_shapes,
    read_tensors,
    sha256_file,
    weight_files,
    weights_sha256,
)
from .tensors import CheckpointError, canonicalize_names, ignored_tensors, require_host_memory
from .tokenizer import load_tokenizer

# Checkpoint.hashes as recorded in manifests, goldens and evidence (a json_documents schema fragment).
SOURCE_HASHES = open_object({"source": STRING, "weights_sha256": SHA256, "config_sha256": SHA256},
                            {"tokenizer_sha256": {**SHA256, "type": ["string", "null"]}})

@dataclass
class Checkpoint:
    source: str  # the --source value as given
    directory: Path
    config: ModelConfig
    raw_config: dict
    tensors: dict[str, torch.Tensor] = field(repr=False)  # canonical names -> float32
    tokenizer: Tokenizer | None
    weights_sha256: str
    config_sha256: str
    tokenizer_sha256: str | None
    ignored: dict[str, str] = field(default_factory=dict)  # stored tensors not part of the model -> why

    @property
    def notes(self) -> list[str]:
        """One line per reason for ignored tensors, naming them."""
        by_reason: dict[str, list[str]] = {}
        for name, reason in sorted(self.ignored.items()):
            by_reason.setdefault(reason, []).append(name)
        return [f"{self.source}: ignored {len(names)} tensor(s) "
                f"{', '.join(names[:4])}{' ...' if len(names) > 4 else ''}: "
                f"{reason}" for reason, names in by_reason.items()]

    @property
    def hashes(self) -> dict:
        """What every later artifact records about the source it came from."""
        return {"source": self.source, "weights_sha256": self.weights_sha256, "config_sha256": self.config_sha256,
                "tokenizer_sha256": self.tokenizer_sha256}

    def require_head(self, purpose: str) -> None:
        if self.config.head is None:
            raise CheckpointError(f"{self.source}: {purpose} needs a decision head, but config.json has no "
                                  "'decision_head' section (an encoder-only checkpoint)")

    def require_tokenizer(self, purpose: str) -> Tokenizer:
        if self.tokenizer is None:
            raise CheckpointError(f"{self.source}: {purpose} needs {TOKENIZER_FILE}, which this checkpoint lacks")
        return self.tokenizer


def load_checkpoint_dir(directory: Path, source: str | None = None) -> Checkpoint:
    directory = Path(directory)
    raw = read_config_json(directory)
    config = parse_config(raw, str(directory / CONFIG_FILE))
    require_host_memory(config, str(directory / CONFIG_FILE))
    files = weight_files(directory)
    shapes = read_shapes(files)
    mapping = canonicalize_names(shapes, config)
    tensors = read_tensors(files, mapping)
    tokenizer_path = directory / TOKENIZER_FILE
    present = tokenizer_path.exists() or tokenizer_path.is_symlink()  # a FIFO or dangling link is refused, not skipped
    tokenizer = load_tokenizer(tokenizer_path) if present else None
    return Checkpoint(
        source=source or str(directory), directory=directory, config=config, raw_config=raw, tensors=tensors,
        tokenizer=tokenizer, weights_sha256=weights_sha256(files), config_sha256=sha256_file(directory / CONFIG_FILE),
        tokenizer_sha256=sha256_file(tokenizer_path) if tokenizer is not None else None,
        ignored=ignored_tensors(shapes, config),
    )
