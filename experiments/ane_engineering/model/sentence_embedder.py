"""The FP32 reference sentence embedding: reference encoder (B x L x C, unpadded) -> mean over the tokens ->
L2 normalisation, as sentence-transformers' Transformer -> Pooling(mean) -> Normalize computes it."""

from __future__ import annotations

import numpy as np
import torch

from ..checkpoint import Checkpoint
from .encoders import reference_encoder


class ReferenceEmbedder:
    def __init__(self, checkpoint: Checkpoint):
        self.model = reference_encoder(checkpoint.config, checkpoint.tensors).eval()

    def pooled(self, input_ids: list[int]) -> np.ndarray:
        """(C,) float32 mean of the final hidden states over the tokens, before normalisation."""
        ids = torch.tensor([input_ids])
        with torch.no_grad():
            hidden = self.model(self.model.embed(ids), torch.ones_like(ids, dtype=torch.bool))[0]  # (n, C)
        return hidden.mean(dim=0).numpy()  # (C,)

    def embed(self, input_ids: list[int]) -> tuple[np.ndarray, float]:
        """(unit (C,) float32 embedding, norm of the pooled vector)."""
        pooled = self.pooled(input_ids)
        norm = float(np.linalg.norm(pooled))
        return (pooled / np.float32(norm)).astype(np.float32), norm
