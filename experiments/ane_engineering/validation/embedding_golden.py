"""FP32 golden sentence embeddings: the reference embedder (embedding/reference.py) over the embedding texts.

A golden file records per text its token ids, the norm of the mean-pooled vector (the FP16 range of the
normalisation's sum of squares is its square) and the unit embedding (float32 values, 9 significant digits: exact
for float32); plus the texts hash, the source hashes, tool versions and the harness fingerprint, sealed by
`content_sha256`. Texts longer than the source's position table are listed as skipped, never truncated.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..checkpoint import Checkpoint
from ..checkpoint.files import sha256_json
from ..embedding.reference import ReferenceEmbedder
from ..embedding.texts import load_texts, texts_sha256, token_ids
from ..evidence.provenance import harness_fingerprint, tool_versions
from .golden import GoldenError

EMBEDDING_GOLDEN_FORMAT = "ane-engineering/embedding-golden/1"


def _float32_list(vector: np.ndarray) -> list[float]:
    return [float(f"{value:.9g}") for value in np.asarray(vector, dtype=np.float32).tolist()]


def make_embedding_golden(checkpoint: Checkpoint, progress=None) -> dict:
    tokenizer = checkpoint.require_tokenizer("golden embeddings")
    embedder = ReferenceEmbedder(checkpoint)
    positions = checkpoint.config.encoder.max_position_embeddings
    records, skipped = [], []
    for text in load_texts():
        ids = token_ids(tokenizer, text.text)
        if len(ids) > positions:
            skipped.append({"id": text.id, "tokens": len(ids), "reason": f"longer than the {positions} positions"})
        else:
            embedding, norm = embedder.embed(ids)
            records.append({"id": text.id, "language": text.language, "origin": text.origin, "num_tokens": len(ids),
                            "input_ids": ids, "pooled_norm": norm, "embedding": _float32_list(embedding)})
        if progress:
            progress(text.id)
    body = {
        "format": EMBEDDING_GOLDEN_FORMAT,
        "source": checkpoint.hashes,
        "texts": {"sha256": texts_sha256(), "count": len(records) + len(skipped), "skipped": skipped},
        "reference": "FP32 B x L x C reference encoder, explicit attention, unpadded; mean over the tokens; L2 "
                     "normalisation (sentence-transformers' Transformer -> Pooling(mean) -> Normalize)",
        "embeddings": records,
        "tools": tool_versions(),
        "harness": harness_fingerprint(),
    }
    return {**body, "content_sha256": sha256_json(body)}


def load_embedding_golden(path: Path, checkpoint: Checkpoint | None = None) -> dict:
    """Read and verify: intact content, made from `checkpoint`'s weights, config and tokenizer, current texts."""
    try:
        golden = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise GoldenError(f"{path}: cannot read golden file ({error})") from error
    if not isinstance(golden, dict) or golden.get("format") != EMBEDDING_GOLDEN_FORMAT:
        raise GoldenError(f"{path}: not a golden file of format {EMBEDDING_GOLDEN_FORMAT} (make one with: "
                          "golden --task embeddings)")
    if golden.get("content_sha256") != sha256_json({k: v for k, v in golden.items() if k != "content_sha256"}):
        raise GoldenError(f"{path}: content does not match its content_sha256 (the file was edited or damaged)")
    if checkpoint is not None:
        for key in ("weights_sha256", "config_sha256", "tokenizer_sha256"):
            if golden["source"].get(key) != checkpoint.hashes[key]:
                raise GoldenError(f"{path}: made from another source ({key} differs from {checkpoint.source}'s); "
                                  "regenerate it with: golden --task embeddings")
    if golden["texts"]["sha256"] != texts_sha256():
        raise GoldenError(f"{path}: made from another version of the embedding texts; regenerate it")
    return golden
