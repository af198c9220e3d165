"""The sentence-embedding gates (core/gates.py) on the real all-MiniLM-L6-v2 weights: the derivation holds, real defects
break the gates, the FP16 package passes them through `mil`, and `validate` exits 1 when they fail."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from experiments.ane_engineering.core import gates
from experiments.ane_engineering.core.cli import run_main
from experiments.ane_engineering.model.bc1s.embedding import BC1SSentenceEmbedder
from experiments.ane_engineering.model.sentence_embedder import ReferenceEmbedder
from experiments.ane_engineering.package.inputs.device_inputs import embedding_inputs
from experiments.ane_engineering.package.inputs.texts import load_texts, token_ids
from experiments.ane_engineering.validation.embedding_run import compare_embedding, similarity_ranking

LENGTH = 96


def test_the_cosine_bound_keeps_every_similarity_within_the_budget():
    """Candidates exactly at EMBEDDING_COSINE_MIN in random directions move no similarity by more than the budget;
    twice the allowed error vector can."""
    rng = np.random.default_rng(0)
    golden = rng.standard_normal((40, 384))
    golden /= np.linalg.norm(golden, axis=1, keepdims=True)

    def at_cosine(cosine):
        noise = rng.standard_normal(golden.shape)
        noise -= (noise * golden).sum(axis=1, keepdims=True) * golden  # orthogonal to each golden vector
        noise /= np.linalg.norm(noise, axis=1, keepdims=True)
        return cosine * golden + np.sqrt(1 - cosine ** 2) * noise  # unit vectors at exactly this cosine

    worst = max(np.abs(c @ c.T - golden @ golden.T).max() for c in (at_cosine(gates.EMBEDDING_COSINE_MIN)
                                                                    for _ in range(20)))
    assert worst <= gates.SIMILARITY_ERROR_MAX
    d = 2 * gates.EMBEDDING_ERROR_VECTOR_MAX
    # adversarial: both vectors of a pair pushed towards each other by 2d each
    g1, g2 = golden[0], golden[1]
    toward = lambda a, b: (a + d * (b - (a @ b) * a) / np.linalg.norm(b - (a @ b) * a)) / np.linalg.norm(  # noqa: E731
        a + d * (b - (a @ b) * a) / np.linalg.norm(b - (a @ b) * a))
    assert toward(g1, g2) @ toward(g2, g1) - g1 @ g2 > gates.SIMILARITY_ERROR_MAX


@pytest.fixture(scope="module")
def golden_and_ids(minilm):
    embedder = ReferenceEmbedder(minilm)
    ids = [token_ids(minilm.tokenizer, t.text) for t in load_texts()]
    ids = [i for i in ids if len(i) <= LENGTH]
    return np.asarray([embedder.embed(i)[0] for i in ids]), ids


def _bc1s_embeddings(checkpoint, ids_list, edit_inputs=None) -> np.ndarray:
    model = BC1SSentenceEmbedder(checkpoint.config, checkpoint.tensors, LENGTH).eval()
    out = []
    with torch.no_grad():
        for ids in ids_list:
            inputs = {k: torch.from_numpy(v) for k, v in embedding_inputs(checkpoint.config, checkpoint.tensors, ids,
                                                                            LENGTH).items()}
            if edit_inputs:
                edit_inputs(inputs)
            out.append(model(**inputs).reshape(-1).numpy())
    return np.asarray(out)


def _gates(golden, candidate) -> dict:
    per_text = [compare_embedding(c, g) for c, g in zip(candidate, golden)]
    ranking = similarity_ranking(golden, candidate, [str(i) for i in range(len(golden))])
    return {"cosine": all(r["cosine"] >= gates.EMBEDDING_COSINE_MIN for r in per_text),
            "abs": all(r["max_abs_error"] <= gates.EMBEDDING_ABS_MAX for r in per_text),
            "ranking": ranking["passed"], "similarity": ranking["similarity_passed"],
            "min_cosine": min(r["cosine"] for r in per_text)}


def _swapped_heads(tensors, layer: int, a: int, b: int, head_dim: int) -> dict:
    """Heads a and b of one layer's query projection trade places: each head's queries meet the other's keys."""
    out = dict(tensors)
    for suffix in ("weight", "bias"):
        name = f"encoder.layer.{layer}.attention.self.query.{suffix}"
        value = tensors[name].clone()
        rows_a, rows_b = slice(a * head_dim, (a + 1) * head_dim), slice(b * head_dim, (b + 1) * head_dim)
        value[rows_a], value[rows_b] = tensors[name][rows_b], tensors[name][rows_a]
        out[name] = value
    return out


@pytest.mark.slow  # several FP32 runs of the real MiniLM embedder over the texts
def test_the_fp32_bc1s_embedder_passes_and_real_defects_fail(minilm, golden_and_ids):
    golden, ids = golden_and_ids
    golden, ids = golden[::2], ids[::2]  # half the texts: still thousands of resolved ranking pairs, half the time
    assert all(_gates(golden, _bc1s_embeddings(minilm, ids)).values())

    wrong_eps = replace(minilm, config=replace(minilm.config,
                                               encoder=replace(minilm.config.encoder, layer_norm_eps=1e-3)))
    result = _gates(golden, _bc1s_embeddings(wrong_eps, ids))
    assert not result["similarity"] and not result["ranking"] and not result["cosine"] and not result["abs"]

    positions = minilm.tensors["embeddings.position_embeddings.weight"][:LENGTH].T.reshape(1, -1, 1, LENGTH)

    def drop_positions(inputs):
        inputs["embeddings"] = inputs["embeddings"] - positions  # (1, C, 1, L): word + type rows only

    result = _gates(golden, _bc1s_embeddings(minilm, ids, drop_positions))
    assert not result["similarity"] and not result["ranking"] and not result["cosine"] and not result["abs"]

    swapped = replace(minilm, tensors=_swapped_heads(minilm.tensors, 2, 0, 5, minilm.config.encoder.head_dim))
    result = _gates(golden, _bc1s_embeddings(swapped, ids))
    assert not result["similarity"] and not result["ranking"] and not result["cosine"] and not result["abs"]


def test_a_slightly_wrong_epsilon_is_within_the_budget_but_not_within_the_oracle_bound(minilm, golden_and_ids):
    """The gates have a resolution: ModernBERT's epsilon 1e-5 in place of 1e-12 moves similarities by far less than
    the budget (it passes), while eps 1e-4 already fails the cosine gate. The FP32 oracle tests
    (test_bert_family.py) catch the 1e-5 mix-up at the hidden-state level."""
    golden, ids = golden_and_ids
    subset = list(range(0, len(ids), 4))

    def with_eps(eps):
        return replace(minilm, config=replace(minilm.config,
                                              encoder=replace(minilm.config.encoder, layer_norm_eps=eps)))

    assert all(v for k, v in _gates(golden[subset], _bc1s_embeddings(with_eps(1e-5), [ids[i] for i in subset])).items()
               if k != "min_cosine")
    assert not _gates(golden[subset], _bc1s_embeddings(with_eps(1e-4), [ids[i] for i in subset]))["cosine"]


def _unit(*rows):
    array = np.asarray(rows, dtype=np.float64)
    return array / np.linalg.norm(array, axis=1, keepdims=True)


def test_the_similarity_gate_counts_a_wrong_norm():
    """Each text with itself is one of the gated similarities: a candidate 1% too long moves e_i . e_i by 0.0201
    and fails, though every direction (cosine 1) and every ranking is intact."""
    golden = _unit([1.0, 0.0, 0.0], [0.6, 0.8, 0.0], [0.0, 0.6, 0.8])
    report = similarity_ranking(golden, golden * 1.01, ["a", "b", "c"])
    assert report["passed"] and not report["similarity_passed"]
    assert report["max_self_similarity_error"] == pytest.approx(0.0201)
    assert similarity_ranking(golden, golden * 1.004, ["a", "b", "c"])["similarity_passed"]


def test_ranking_gate_fails_only_on_resolved_swaps():
    """Anchor a sees b (0.80) and c (0.79): a tie within the band, so swapping them is reported, not failed.
    Anchor b sees a (0.80) far above c (0.26): swapping those fails."""
    golden = _unit([1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [0.79, -0.6131, 0.0])
    assert similarity_ranking(golden, golden, ["a", "b", "c"])["anchors_with_identical_ranking"] == 3
    tie = golden.copy()
    tie[2] = _unit([0.81, -0.5864, 0.0])[0]  # a . c = 0.81 > a . b: anchor a's two neighbours swap
    report = similarity_ranking(golden, tie, ["a", "b", "c"])
    assert report["passed"] and report["tie_pairs_swapped"] == 1 and report["resolved_pairs_swapped"] == 0
    resolved = golden.copy()
    resolved[1] = _unit([0.3, -0.954, 0.0])[0]  # b . c = 0.82 > b . a = 0.30
    report = similarity_ranking(golden, resolved, ["a", "b", "c"])
    assert not report["passed"] and report["resolved_pairs_swapped"] >= 1
    assert report["examples"][0]["anchor"] == "b"


@pytest.mark.slow
def test_validate_embedding_packages_through_mil(minilm, minilm_packages, tmp_path, capsys):
    from experiments.ane_engineering import golden as golden_command
    from experiments.ane_engineering import validate

    package, probe = minilm_packages.get("embedding", LENGTH)
    assert probe["passed"] and probe["placement"]["static"]["violations"] == 0
    assert run_main(golden_command.main, ["--source", "all-minilm-l6-v2", "--output", str(tmp_path / "g.json")]) == 0
    golden = json.loads((tmp_path / "g.json").read_text(encoding="utf-8"))
    assert golden["format"] == "ane-engineering/embedding-golden/1" and len(golden["embeddings"]) == len(load_texts())
    argv = ["--package", str(package), "--source", "all-minilm-l6-v2", "--golden", str(tmp_path / "g.json"),
            "--backend", "mil", "--repeats", "5"]
    assert run_main(validate.main, argv + ["--output", str(tmp_path / "v.json")]) == 0
    report = json.loads((tmp_path / "v.json").read_text(encoding="utf-8"))
    summary = report["summary"][str(LENGTH)]
    assert report["passed"] and summary["evaluated"] + len(summary["skipped"]) == len(golden["embeddings"])
    assert gates.EMBEDDING_COSINE_MIN <= summary["min_cosine"] < 1.0  # FP16 error is real, and within the gate
    assert 0 < summary["max_abs_error"] <= gates.EMBEDDING_ABS_MAX
    assert summary["ranking"]["resolved_pairs"] > 1000 and summary["ranking"]["resolved_pairs_swapped"] == 0

    # an embedding golden of another source is refused; body validation is not asked of an embedding package
    assert run_main(validate.main, argv[:4] + ["--golden", str(tmp_path / "g.json"), "--source", "builtin:tiny",
                                               "--output", str(tmp_path / "x.json")]) == 2
    capsys.readouterr()


@pytest.mark.slow
def test_validate_exits_1_when_the_embedding_gates_fail(minilm, minilm_packages, tmp_path, capsys):
    """A 4-bit palettization of the real weights fails the embedding gates: passed false, reasons, exit 1."""
    from experiments.ane_engineering import golden as golden_command
    from experiments.ane_engineering import validate
    from experiments.ane_engineering.workflows.palettize_candidate import palettize_candidate

    package, _ = minilm_packages.get("embedding", LENGTH)
    palettize_candidate(package, tmp_path / "w4", 4, "uniform", 32)
    assert run_main(golden_command.main, ["--source", "all-minilm-l6-v2", "--output", str(tmp_path / "g.json")]) == 0
    status = run_main(validate.main, ["--package", str(tmp_path / "w4"), "--source", "all-minilm-l6-v2", "--golden",
                                      str(tmp_path / "g.json"), "--backend", "mil", "--repeats", "0",
                                      "--output", str(tmp_path / "v.json")])
    report = json.loads((tmp_path / "v.json").read_text(encoding="utf-8"))
    assert status == 1 and not report["passed"] and report["reasons"]
    assert report["summary"][str(LENGTH)]["min_cosine"] < gates.EMBEDDING_COSINE_MIN
    capsys.readouterr()


def test_reference_embedder_matches_sentence_transformers(minilm, golden_and_ids):
    """The FP32 golden embeddings are what sentence-transformers' own all-MiniLM-L6-v2 pipeline (Transformer ->
    Pooling(mean) -> Normalize, read from the package's modules.json) computes, to FP32 rounding."""
    sentence_transformers = pytest.importorskip("sentence_transformers")
    texts = [t.text for t in load_texts()][::5]
    model = sentence_transformers.SentenceTransformer(str(minilm.directory), device="cpu")
    model.max_seq_length = minilm.config.encoder.max_position_embeddings  # its default 256 would truncate
    expected = model.encode(texts, normalize_embeddings=False, convert_to_numpy=True)
    embedder = ReferenceEmbedder(minilm)
    ours = np.asarray([embedder.embed(token_ids(minilm.tokenizer, text))[0] for text in texts])
    assert np.abs(np.linalg.norm(expected, axis=1) - 1).max() < 1e-5  # its pipeline normalises by itself
    assert np.abs(ours - expected).max() < 1e-5
