"""EmbeddingAgent: one CPU -> package -> CPU boundary per text for `embedding`-kind packages.

Host: tokenize ([CLS] text [SEP]), look up the needed embedding rows, build the fixed-shape mask and the mean-pooling
weights. Device: one backend call (encoder, pooling, L2 normalisation). Packages are verified like the ANEAgent's
(manifest, source hashes, content hash, fixed shapes) before any is loaded; a text that fits no bucket is refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..checkpoint import Checkpoint
from ..package.inputs.device_inputs import DeviceInputError, embedding_inputs
from ..package.inputs.texts import token_ids
from .agent import PackageAgent, PackageError, RequestError, check_shapes_and_masks, load_packages


class EmbeddingAgent(PackageAgent):
    def __init__(self, packages: list[Path], checkpoint: Checkpoint, backend: str | None = None):
        self.checkpoint = checkpoint
        self.tokenizer = checkpoint.require_tokenizer("the EmbeddingAgent")
        load_packages(self, packages, checkpoint, backend, "embedding")
        self.adapter = None  # validation evidence records it; embedding packages take no adapters

    def tokens(self, text: str) -> list[int]:
        return token_ids(self.tokenizer, text)

    def embed_ids(self, input_ids: list[int], length: int | None = None) -> tuple[np.ndarray, int]:
        """(unit embedding (C,) float32 as the package returned it, bucket used)."""
        bucket = self.bucket_for(len(input_ids), length)
        try:
            inputs = embedding_inputs(self.checkpoint.config, self.checkpoint.tensors, input_ids, bucket,
                                      self.layout(bucket))
        except DeviceInputError as error:
            raise RequestError(str(error)) from error
        check_shapes_and_masks(inputs, self.expected_shapes(bucket), len(input_ids))
        outputs = self.backends[bucket].predict({k: v.astype(np.float16) for k, v in inputs.items()})
        embedding = np.asarray(outputs["sentence_embedding"], dtype=np.float32).reshape(-1)
        if embedding.shape != (self.checkpoint.config.encoder.hidden_size,):
            raise PackageError(f"package returned sentence_embedding of {embedding.size} values, expected "
                               f"{self.checkpoint.config.encoder.hidden_size}")
        return embedding, bucket

    def embed(self, text: str, length: int | None = None) -> np.ndarray:
        return self.embed_ids(self.tokens(text), length)[0]
