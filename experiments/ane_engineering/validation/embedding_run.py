"""Validate embedding-kind packages against FP32 golden embeddings with the embedding gates of core/gates.py.

Per bucket: every golden text that fits is embedded by the package and compared with its golden embedding
(cosine, max abs error, finiteness; the cosine and max-abs bounds fail a text only for uncompressed packages, see
core/gates.py); texts that do not fit are listed as skipped and unvalidated. Then, over the texts evaluated in that
bucket, no similarity between two of them (a text with itself included) may move by more than the budget, the
similarity ranking of every anchor text must keep every resolved pair (golden similarities further apart than the
tie band) in order, and repeated calls must return bit-identical embeddings.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core import gates
from ..core.provenance import backend_record, harness_fingerprint, machine, portable_path, tool_versions
from .gate_run import package_records

RULES = ("per bucket: every similarity between two evaluated texts (a text with itself included) within "
         "SIMILARITY_ERROR_MAX of golden, no resolved pair of the similarity ranking swapped (tie band RANK_TIE_BAND), "
         "repeated calls bit-identical; per text: finite, and for uncompressed packages cosine to golden >= "
         "EMBEDDING_COSINE_MIN and max abs error <= EMBEDDING_ABS_MAX (reported for every package; core/gates.py "
         "derives the thresholds from SIMILARITY_ERROR_MAX and argues which packages the bounds gate)")


def compare_embedding(candidate: np.ndarray, golden: np.ndarray, bounds_gate: bool = True) -> dict:
    """Cosine, max abs error, norm and finiteness of one candidate embedding against its golden one. The cosine and
    max-abs bounds fail the text only with `bounds_gate` (uncompressed packages; see core/gates.py)."""
    c, g = candidate.astype(np.float64), golden.astype(np.float64)
    norm = float(np.linalg.norm(c))
    if not (np.isfinite(c).all() and norm > 0):  # no figure to record (JSON has no NaN): the gate fails by name
        return {"cosine": None, "cosine_distance": None, "max_abs_error": None, "norm": None, "finite": False,
                "failed_gates": ["non-finite or zero embedding"], "passed": False}
    cosine = float(c @ g / (norm * np.linalg.norm(g)))
    abs_error = float(np.abs(c - g).max())
    failed = []
    if bounds_gate and not cosine >= gates.EMBEDDING_COSINE_MIN:
        failed.append(f"cosine {cosine:.8f} < {gates.EMBEDDING_COSINE_MIN:.8f}")
    if bounds_gate and not abs_error <= gates.EMBEDDING_ABS_MAX:
        failed.append(f"max abs error {abs_error:.6f} > {gates.EMBEDDING_ABS_MAX:.6f}")
    return {"cosine": cosine, "cosine_distance": 1.0 - cosine, "max_abs_error": abs_error, "norm": norm,
            "finite": True, "failed_gates": failed, "passed": not failed}


def similarity_ranking(golden: np.ndarray, candidate: np.ndarray, ids: list[str]) -> dict:
    """Compare the rankings of every other text by similarity to each anchor, golden vs candidate (rows: texts).

    Similarities are dot products of the embeddings as returned (what a user computes from unit embeddings). A pair
    (j, k) of anchor i is resolved when |s_ij - s_ik| > RANK_TIE_BAND; a resolved pair in the other order fails."""
    n = len(ids)
    golden_sims = golden.astype(np.float64) @ golden.astype(np.float64).T  # (n, n)
    candidate_sims = candidate.astype(np.float64) @ candidate.astype(np.float64).T  # (n, n)
    off_diagonal = ~np.eye(n, dtype=bool)
    resolved = tie_swaps = resolved_swaps = identical = top1 = 0
    examples = []
    for i in range(n):
        others = np.flatnonzero(off_diagonal[i])
        g, c = golden_sims[i, others], candidate_sims[i, others]  # (n-1,)
        golden_gap = g[:, None] - g[None, :]  # (n-1, n-1): > 0 where j ranks above k
        swapped = np.sign(golden_gap) * np.sign(c[:, None] - c[None, :]) < 0  # each pair counted twice
        is_resolved = np.abs(golden_gap) > gates.RANK_TIE_BAND
        resolved += int(is_resolved.sum()) // 2
        resolved_swaps += int((swapped & is_resolved).sum()) // 2
        tie_swaps += int((swapped & ~is_resolved).sum()) // 2
        identical += int(np.array_equal(np.argsort(-g, kind="stable"), np.argsort(-c, kind="stable")))
        top1 += int(np.argmax(g) == np.argmax(c))
        for j, k in zip(*np.nonzero(swapped & is_resolved & (golden_gap > 0))):
            if len(examples) < 5:
                examples.append({"anchor": ids[i], "golden_higher": ids[others[j]], "golden_lower": ids[others[k]],
                                 "golden_gap": float(golden_gap[j, k])})
    errors = np.abs(candidate_sims - golden_sims)  # (n, n)
    pair_error = float(errors[off_diagonal].max()) if n > 1 else 0.0
    similarity_error = float(errors.max())  # the gated figure: every pair, each text with itself included
    return {"anchors": n, "resolved_pairs": resolved, "resolved_pairs_swapped": resolved_swaps,
            "tie_pairs_swapped": tie_swaps, "anchors_with_identical_ranking": identical,
            "top1_neighbour_agreement": top1, "max_similarity_error": similarity_error,
            "max_pair_similarity_error": pair_error, "max_self_similarity_error": float(np.diag(errors).max()),
            "similarity_passed": similarity_error <= gates.SIMILARITY_ERROR_MAX,
            "examples": examples, "passed": resolved_swaps == 0}


def validate_embedding_bucket(agent, length: int, golden_records: list[dict], repeats: int, progress=None) -> dict:
    records, skipped, outputs = [], [], {}
    bounds_gate = gates.BOUNDS_GATE_UNCOMPRESSED and not agent.manifests[length].get("compression")
    for record in golden_records:
        ids = record["input_ids"]
        if len(ids) > length:
            skipped.append({"id": record["id"], "tokens": len(ids), "reason": f"longer than bucket {length}"})
            continue
        embedding, _ = agent.embed_ids(ids, length)
        outputs[record["id"]] = embedding
        records.append({"id": record["id"], "language": record["language"], "tokens": len(ids),
                        **compare_embedding(embedding, np.asarray(record["embedding"], dtype=np.float32),
                                            bounds_gate)})
        if progress:
            progress()
    evaluated = [r["id"] for r in records if r["finite"]]  # the ranking of the texts with a finite embedding
    by_id = {r["id"]: r for r in golden_records}
    ranking = similarity_ranking(np.asarray([by_id[i]["embedding"] for i in evaluated], dtype=np.float32),
                                 np.asarray([outputs[i] for i in evaluated], dtype=np.float32), evaluated) \
        if evaluated else None
    mismatches = []
    for call in range(repeats if evaluated else 0):
        text_id = evaluated[call % len(evaluated)]
        again, _ = agent.embed_ids(by_id[text_id]["input_ids"], length)
        if not np.array_equal(again, outputs[text_id]):
            mismatches.append({"call": call, "id": text_id})
        if progress:
            progress()
    failed = [r for r in records if not r["passed"]]
    from ..package.inputs.device_inputs import embedding_inputs
    from .gate_run import headroom_gate

    config, tensors, layout = agent.checkpoint.config, agent.checkpoint.tensors, agent.layout(length)
    headroom = headroom_gate(agent.backends[length].headroom(
        {k: v.astype(np.float16) for k, v in embedding_inputs(config, tensors, r["input_ids"], length, layout).items()}
        for r in golden_records if len(r["input_ids"]) <= length))

    def extreme(key, pick):
        """The worst value over the texts; None if there is none or any text has none (a non-finite output)."""
        values = [r[key] for r in records]
        return None if not values or None in values else pick(values)

    return {
        "length": length, "evaluated": len(records), "passed_texts": len(records) - len(failed), "skipped": skipped,
        "min_cosine": extreme("cosine", min), "max_cosine_distance": extreme("cosine_distance", max),
        "max_abs_error": extreme("max_abs_error", max),
        "max_norm_deviation": None if any(r["norm"] is None for r in records)
        else max((abs(r["norm"] - 1.0) for r in records), default=None),
        "ranking": ranking, "max_similarity_error": None if ranking is None else ranking["max_similarity_error"],
        "bounds_gated": bounds_gate,
        "repeats": {"calls": repeats if evaluated else 0, "mismatches": mismatches, "identical": not mismatches},
        "failed_texts": [{"id": r["id"], "gates": r["failed_gates"]} for r in failed],
        "texts": records,
        "headroom": headroom,  # the Neural Engine headroom gate (gate_run.headroom_gate), over the evaluated texts
        "passed": bool(records) and not failed and not mismatches and ranking is not None and ranking["passed"]
        and ranking["similarity_passed"] and headroom["passed"] is not False,
    }


def validate_embeddings(agent, golden: dict, golden_path, lengths: list[int], repeats: int, progress=None, *,
                        evidence_dir: Path) -> dict:
    """The validation report of `agent`'s embedding packages against `golden`; `evidence_dir` is the directory the
    report will be written in (paths in it are recorded relative to it)."""
    buckets = {length: validate_embedding_bucket(agent, length, golden["embeddings"], repeats, progress)
               for length in lengths}
    reasons = []
    for length, result in buckets.items():
        if not result["evaluated"]:
            reasons.append(f"L{length}: no text fits this bucket")
            continue
        reasons += [f"L{length} {f['id']}: " + "; ".join(f["gates"]) for f in result["failed_texts"]]
        if result["ranking"] is not None and not result["ranking"]["similarity_passed"]:
            reasons.append(f"L{length}: a similarity moved by {result['ranking']['max_similarity_error']:.6f} > "
                           f"{gates.SIMILARITY_ERROR_MAX}")
        if result["headroom"]["passed"] is False:
            reasons.append(f"L{length}: {result['headroom']['reason']}")
        if result["ranking"] is not None and not result["ranking"]["passed"]:
            reasons.append(f"L{length}: {result['ranking']['resolved_pairs_swapped']} resolved pair(s) of the "
                           f"similarity ranking swapped, e.g. {result['ranking']['examples'][:1]}")
        if result["repeats"]["mismatches"]:
            reasons.append(f"L{length}: {len(result['repeats']['mismatches'])} repeated call(s) changed the embedding")
    return {
        "format": "ane-engineering/embedding-validation/1",
        "task": "embeddings",
        "passed": not reasons,
        "reasons": reasons,
        "gates": {"similarity_error_max": gates.SIMILARITY_ERROR_MAX, "cosine_min": gates.EMBEDDING_COSINE_MIN,
                  "abs_max": gates.EMBEDDING_ABS_MAX, "rank_tie_band": gates.RANK_TIE_BAND, "repeats": repeats,
                  "headroom_min": gates.HEADROOM_MIN,
                  "rules": RULES},
        "summary": {str(length): {k: v for k, v in result.items() if k != "texts"}
                    for length, result in buckets.items()},
        "buckets": {str(length): result for length, result in buckets.items()},
        "golden": {"path": portable_path(golden_path, evidence_dir), "content_sha256": golden["content_sha256"],
                   "source": golden["source"],
                   "texts": {k: golden["texts"][k] for k in ("sha256", "count")},
                   "max_pooled_norm": max(r["pooled_norm"] for r in golden["embeddings"])},
        "source": agent.checkpoint.hashes,
        "packages": package_records(agent),
        "backend": backend_record(agent.backend.describe()),
        "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint(),
    }
