"""Documents that say less than they seem to are refused: a golden whose per-option or per-action lists are shorter
than the question's options (the missing one would never be compared), a question recorded twice, missing or
unknown, a fixture question whose option labels repeat, an embedding golden that does not cover its texts once
each, and a tokenizer that maps text to no content token (an empty vocabulary turns "hello world" into
[CLS] [SEP])."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, processors

from command_support import REPO
from experiments.ane_engineering import encode, validate
from experiments.ane_engineering.checkpoint.files import sha256_json
from experiments.ane_engineering.checkpoint.tensors import CheckpointError
from experiments.ane_engineering.checkpoint.tokenizer import load_tokenizer
from experiments.ane_engineering.core.cli import run_main
from experiments.ane_engineering.package.inputs.questions import Question, QuestionError, encode_question
from experiments.ane_engineering.validation.embedding_golden import load_embedding_golden
from experiments.ane_engineering.validation.golden import COMMITTED_TINY_GOLDEN, GoldenError, load_golden

REPOSITORY = REPO
MINILM_EMBEDDING_GOLDEN = REPOSITORY / "benchmarks/evidence/real-weights-minilm/embeddings/golden.json"


def resealed(document: dict, path: Path) -> Path:
    """What an honest writer of the edited content would produce: the content hash recomputed."""
    body = {k: v for k, v in document.items() if k != "content_sha256"}
    path.write_text(json.dumps({**body, "content_sha256": sha256_json(body)}), encoding="utf-8")
    return path


def _edit_first(field, edit):
    def apply(golden):
        edit(golden["questions"][0][field])
    return apply


GOLDEN_EDITS = {
    "an option logit missing": (_edit_first("option_logits", list.pop), "option_logits for its"),
    "a calibrated outcome missing": (_edit_first("calibrated", list.pop), "calibrated for its"),
    "an extra option logit": (_edit_first("option_logits", lambda v: v.append(0.0)), "option_logits for its"),
    "an action missing": (_edit_first("action_logits", list.pop), "action_logits for 3 actions"),
    "an action probability missing": (_edit_first("action_probabilities", list.pop), "action_probabilities for"),
    "a question twice": (lambda g: g["questions"].append(copy.deepcopy(g["questions"][0])), "appears twice"),
    "a question missing": (lambda g: g["questions"].pop(), "no record for 1 fixture question"),
    "an unknown question": (lambda g: g["questions"][0].update(question_id="no-such-question"),
                            "is not in the fixture"),
    "another kind": (lambda g: g["questions"][0].update(kind="noul" if g["questions"][0]["kind"] != "noul"
                                                         else "choice"), "is recorded as kind"),
    "a decision past the options": (lambda g: g["questions"][0].update(decision_index=40), "decision_index 40"),
}


@pytest.mark.parametrize("damage", sorted(GOLDEN_EDITS))
def test_a_golden_that_covers_less_than_the_fixture_is_refused(tiny, tmp_path, damage):
    edit, message = GOLDEN_EDITS[damage]
    golden = json.loads(COMMITTED_TINY_GOLDEN.read_text())
    edit(golden)
    with pytest.raises(GoldenError, match=message):
        load_golden(resealed(golden, tmp_path / "golden.json"), tiny)


def test_validate_refuses_a_golden_with_a_missing_option_in_one_line(tiny, tmp_path, capsys):
    golden = json.loads(COMMITTED_TINY_GOLDEN.read_text())
    golden["questions"][0]["option_logits"].pop()
    path = resealed(golden, tmp_path / "golden.json")
    status = run_main(validate.main, ["--package", str(tmp_path / "package"), "--golden", str(path), "--backend",
                                      "mil", "--output", str(tmp_path / "validation.json")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "option_logits for its" in lines[0], lines
    assert not (tmp_path / "validation.json").exists()


@pytest.mark.skipif(not MINILM_EMBEDDING_GOLDEN.exists(), reason="committed real-weights evidence")
@pytest.mark.parametrize("damage, message", [
    (lambda g: g["embeddings"].append(copy.deepcopy(g["embeddings"][0])), "appears twice"),
    (lambda g: g["embeddings"].pop(), "no record for 1 text"),
    (lambda g: g["embeddings"][0].update(id="sentence:no-such-text"), "not one of the embedding texts"),
    (lambda g: g["embeddings"][0]["embedding"].pop(), "embeddings of different lengths"),
    (lambda g: g["embeddings"][0].update(num_tokens=g["embeddings"][0]["num_tokens"] + 1), "tokens for"),
    (lambda g: g["texts"].update(count=g["texts"]["count"] + 1), "texts.count says"),
])
def test_an_embedding_golden_that_does_not_cover_its_texts_once_each_is_refused(tmp_path, damage, message):
    golden = json.loads(MINILM_EMBEDDING_GOLDEN.read_text())
    assert load_embedding_golden(MINILM_EMBEDDING_GOLDEN)  # intact, it loads
    damage(golden)
    with pytest.raises(GoldenError, match=message):
        load_embedding_golden(resealed(golden, tmp_path / "golden.json"))


@pytest.mark.parametrize("kind, options, message", [
    ("choice", ("Paris", "Rome", "Paris"), "'Paris' appears twice"),
    ("noul", ("tennis", "none"), r"'none' appears twice among its options \(with the noul outcome\)"),
])
def test_a_question_whose_labels_repeat_is_refused(kind, options, message):
    with pytest.raises(QuestionError, match=message):
        Question(id="q", kind=kind, text="Which one?", options=options)


def _char_tokenizer(path: Path, characters: str) -> Path:
    """A BPE tokenizer.json without merges or unknown token (characters outside the vocabulary are dropped), with
    [CLS] text [SEP] post-processing."""
    specials = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[MARK]": 3}
    vocab = {c: len(specials) + i for i, c in enumerate(sorted(set(characters)))}
    tokenizer = Tokenizer(models.BPE(vocab={**specials, **vocab}, merges=[]))
    tokenizer.add_special_tokens(list(specials))
    tokenizer.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                             special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    tokenizer.save(str(path))
    return path


def test_a_tokenizer_with_an_empty_vocabulary_is_refused(tmp_path):
    path = _char_tokenizer(tmp_path / "tokenizer.json", "")
    assert Tokenizer.from_file(str(path)).encode("hello world").tokens == ["[CLS]", "[SEP]"]  # what it would do
    with pytest.raises(CheckpointError, match="maps every text to no content token"):
        load_tokenizer(path)


def test_a_text_the_vocabulary_misses_is_refused_where_it_is_encoded(tiny, tmp_path):
    """A vocabulary that covers some text loads, but a question or option it maps to nothing is refused, not
    encoded as a question without text or an option without label."""
    tokenizer = load_tokenizer(_char_tokenizer(tmp_path / "tokenizer.json", "helowrd"))
    head = tiny.config.head
    # [CLS] h e l l o [SEP] [MARK] h e l l o [SEP] [MARK] w o r l d [SEP]
    assert encode_question(tokenizer, head, Question("q", "choice", "hello", ("hello", "world"))).num_tokens == 21
    with pytest.raises(CheckpointError, match="maps 'xyz' to no content token"):
        encode_question(tokenizer, head, Question("q", "choice", "xyz", ("hello", "world")))
    with pytest.raises(CheckpointError, match="maps 'qux' to no content token"):
        encode_question(tokenizer, head, Question("q", "choice", "hello", ("hello", "qux")))


@pytest.mark.parametrize("text", [""])
def test_encode_refuses_a_text_with_no_content_token(tmp_path, capsys, text):
    status = run_main(encode.main, ["--text", text, "--output", str(tmp_path / "hidden.npy")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "--text: the tokenizer maps" in lines[0], lines
    assert not (tmp_path / "hidden.npy").exists()
