"""FP32 golden sentence embeddings: the reference embedder (model/sentence_embedder.py) over the embedding texts.

A golden file records per text its token ids, the norm of the mean-pooled vector (the FP16 range of the
normalisation's sum of squares is its square) and the unit embedding (float32 values, 9 significant digits: exact
for float32); plus the texts hash, the source hashes, tool versions and the harness fingerprint, sealed by
`content_sha256`. Texts longer than the source's position table are listed as skipped, never truncated.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..checkpoint import SOURCE_HASHES, Checkpoint
from ..checkpoint.files import sha256_json
from ..core.json_documents import (
    NON_EMPTY_STRING,
    NON_NEGATIVE_INTEGER,
    NUMBER,
    POSITIVE_INTEGER,
    POSITIVE_NUMBER,
    SHA256,
    STRING,
    array_of,
    open_object,
    read_json,
)
from ..core.provenance import harness_fingerprint, tool_versions
from ..model.sentence_embedder import ReferenceEmbedder
from ..package.inputs.texts import texts_of, token_ids
from .golden import GoldenError

EMBEDDING_GOLDEN_FORMAT = "ane-engineering/embedding-golden/1"


def _float32_list(vector: np.ndarray) -> list[float]:
    return [float(f"{value:.9g}") for value in np.asarray(vector, dtype=np.float32).tolist()]


def make_embedding_golden(checkpoint: Checkpoint, progress=None, fixture: Path | None = None) -> dict:
    """The golden embeddings of the default texts, or of a text fixture file (sentences.json format)."""
    tokenizer = checkpoint.require_tokenizer("golden embeddings")
    embedder = ReferenceEmbedder(checkpoint)
    positions = checkpoint.config.encoder.max_position_embeddings
    records, skipped = [], []
    texts, texts_hash = texts_of(fixture)
    for text in texts:
        ids = token_ids(tokenizer, text.text, f"text {text.id!r}")
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
        "texts": {"sha256": texts_hash, "count": len(records) + len(skipped), "skipped": skipped,
                  "fixture": None if fixture is None else Path(fixture).name},
        "reference": "FP32 B x L x C reference encoder, explicit attention, unpadded; mean over the tokens; L2 "
                     "normalisation (sentence-transformers' Transformer -> Pooling(mean) -> Normalize)",
        "embeddings": records,
        "tools": tool_versions(),
        "harness": harness_fingerprint(),
    }
    return {**body, "content_sha256": sha256_json(body)}


# One text's record; the fields validation reads are required.
EMBEDDING_RECORD = open_object({
    "id": NON_EMPTY_STRING, "language": STRING, "origin": {"enum": ["question", "sentence"]},
    "num_tokens": POSITIVE_INTEGER, "input_ids": array_of(NON_NEGATIVE_INTEGER, 1), "pooled_norm": POSITIVE_NUMBER,
    "embedding": array_of(NUMBER, 1),
})
EMBEDDING_GOLDEN_SCHEMA = open_object({
    "format": {"const": EMBEDDING_GOLDEN_FORMAT}, "source": SOURCE_HASHES,
    "texts": open_object({"sha256": SHA256, "count": POSITIVE_INTEGER, "skipped": {"type": "array"}}),
    "embeddings": array_of(EMBEDDING_RECORD, 1), "content_sha256": SHA256,
}, {"reference": STRING, "tools": {"type": "object"}, "harness": {"type": "object"}})


def load_embedding_golden(path: Path, checkpoint: Checkpoint | None = None, fixture: Path | None = None) -> dict:
    """Read and verify: its structure, intact content, made from `checkpoint`'s weights, config and tokenizer,
    and the current texts (the default texts, or the `fixture` file given)."""
    golden = read_json(path, EMBEDDING_GOLDEN_SCHEMA, GoldenError)
    if golden["content_sha256"] != sha256_json({k: v for k, v in golden.items() if k != "content_sha256"}):
        raise GoldenError(f"{path}: content does not match its content_sha256 (the file was edited or damaged)")
    if checkpoint is not None:
        for key in ("weights_sha256", "config_sha256", "tokenizer_sha256"):
            if golden["source"].get(key) != checkpoint.hashes[key]:
                raise GoldenError(f"{path}: made from another source ({key} differs from {checkpoint.source}'s); "
                                  "regenerate it with: golden --task embeddings")
    if golden["texts"]["sha256"] != texts_of(fixture)[1]:
        made = golden["texts"].get("fixture") or "the default texts"
        asked = "the default texts" if fixture is None else str(fixture)
        raise GoldenError(f"{path}: made from other texts ({made}) than {asked}; pass the fixture it was made from "
                          "with --fixture, or regenerate it")
    hidden = None if checkpoint is None else checkpoint.config.encoder.hidden_size
    if hidden is not None and any(len(r["embedding"]) != hidden for r in golden["embeddings"]):
        raise GoldenError(f"{path}: an embedding is not {hidden} values long")
    check_records(path, golden, fixture)
    return golden


def check_records(path: Path, golden: dict, fixture: Path | None = None) -> None:
    """The golden covers the texts of `fixture` (default: the golden texts) exactly: every text once, as an embedding or
    as skipped (none twice, none unknown, none missing), each embedding of one length and its token count that of its
    ids."""
    expected = [text.id for text in texts_of(fixture)[0]]
    skipped = [item.get("id") for item in golden["texts"]["skipped"] if isinstance(item, dict)]
    if len(skipped) != len(golden["texts"]["skipped"]):
        raise GoldenError(f"{path}: a skipped text has no id")
    ids = [record["id"] for record in golden["embeddings"]] + skipped
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise GoldenError(f"{path}: text {repeated[0]!r} appears twice; each text has one record")
    unknown = sorted(set(ids) - set(expected))
    if unknown:
        raise GoldenError(f"{path}: text {unknown[0]!r} is not one of the embedding texts")
    missing = [i for i in expected if i not in set(ids)]
    if missing:
        raise GoldenError(f"{path}: no record for {len(missing)} text(s) (e.g. {missing[0]!r}); a golden covers every "
                          "embedding text")
    if golden["texts"]["count"] != len(expected):
        raise GoldenError(f"{path}: texts.count says {golden['texts']['count']}; there are {len(expected)} texts")
    lengths = {len(record["embedding"]) for record in golden["embeddings"]}
    if len(lengths) != 1:
        raise GoldenError(f"{path}: embeddings of different lengths {sorted(lengths)}")
    for record in golden["embeddings"]:
        if record["num_tokens"] != len(record["input_ids"]):
            raise GoldenError(f"{path}: text {record['id']!r} records {record['num_tokens']} tokens for "
                              f"{len(record['input_ids'])} ids")
