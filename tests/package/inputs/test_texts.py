"""The calibration and held-out sets are disjoint from each other and from every golden set: no text, question or
id of one appears in another (compared after Unicode and whitespace normalisation, case-folded)."""

from __future__ import annotations

import unicodedata

from experiments.ane_engineering.package.inputs.questions import (
    CALIBRATION_QUESTIONS_PATH,
    FIXTURE_PATH,
    HELDOUT_QUESTIONS_PATH,
    load_questions,
)
from experiments.ane_engineering.package.inputs.texts import (
    CALIBRATION_TEXTS_PATH,
    HELDOUT_TEXTS_PATH,
    load_text_fixture,
    load_texts,
)


def _norm(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def _question_sets():
    return {path.name: load_questions(path)
            for path in (FIXTURE_PATH, CALIBRATION_QUESTIONS_PATH, HELDOUT_QUESTIONS_PATH)}


def _text_sets():
    return {"golden texts": [t.text for t in load_texts()],
            CALIBRATION_TEXTS_PATH.name: [t.text for t in load_text_fixture(CALIBRATION_TEXTS_PATH)],
            HELDOUT_TEXTS_PATH.name: [t.text for t in load_text_fixture(HELDOUT_TEXTS_PATH)]}


def test_question_sets_are_disjoint():
    sets = _question_sets()
    assert all(len(questions) >= 20 for questions in sets.values())
    texts = {name: {_norm(q.text) for q in questions} for name, questions in sets.items()}
    ids = {name: {q.id for q in questions} for name, questions in sets.items()}
    names = list(sets)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not texts[a] & texts[b], (a, b, sorted(texts[a] & texts[b])[:3])
            assert not ids[a] & ids[b], (a, b)


def test_text_sets_are_disjoint_from_each_other_and_from_every_question():
    sets = {name: {_norm(t) for t in texts} for name, texts in _text_sets().items()}
    for questions in _question_sets().values():  # the golden texts hold questions.json's question texts
        sets.setdefault("question texts", set()).update(_norm(q.text) for q in questions)
    for name in (CALIBRATION_TEXTS_PATH.name, HELDOUT_TEXTS_PATH.name):
        assert len(sets[name]) >= 30
        for other, values in sets.items():
            if other != name:
                overlap = sets[name] & values
                assert not overlap, (name, other, sorted(overlap)[:3])


def test_every_set_fits_the_smallest_bucket_of_the_real_weights():
    """All calibration and held-out inputs fit L96 under the real MiniLM tokenizer, so none is skipped there."""
    from experiments.ane_engineering.checkpoint import load_checkpoint
    from experiments.ane_engineering.package.inputs.questions import encode_question
    from experiments.ane_engineering.package.inputs.texts import token_ids

    checkpoint = load_checkpoint("builtin:minilm-decision")
    for path in (CALIBRATION_QUESTIONS_PATH, HELDOUT_QUESTIONS_PATH):
        assert max(encode_question(checkpoint.tokenizer, checkpoint.config.head, q).num_tokens
                   for q in load_questions(path)) <= 96
    for path in (CALIBRATION_TEXTS_PATH, HELDOUT_TEXTS_PATH):
        assert max(len(token_ids(checkpoint.tokenizer, t.text)) for t in load_text_fixture(path)) <= 96


def test_the_held_out_questions_are_decided_beyond_what_the_probability_gate_allows():
    """A candidate within the probability gate moves each probability by at most PROBABILITY_ERROR_MAX, so a
    decision whose FP32 top-1/top-2 margin exceeds twice that cannot flip legitimately: on the held-out set the
    argmax gate and the probability gate agree (calibrated and action probabilities, both built-in decision heads)."""
    from experiments.ane_engineering.checkpoint import load_checkpoint
    from experiments.ane_engineering.core import gates
    from experiments.ane_engineering.validation.golden import reference_decisions

    questions = load_questions(HELDOUT_QUESTIONS_PATH)
    for source in ("builtin:tiny", "builtin:minilm-decision"):
        for record in reference_decisions(load_checkpoint(source), questions):
            for key in ("calibrated", "action_probabilities"):
                top = sorted(record[key], reverse=True)
                assert top[0] - top[1] > 2 * gates.PROBABILITY_ERROR_MAX, (source, record["question_id"], key)
