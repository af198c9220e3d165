"""The texts the sentence-embedding gates run on: every question text of the decision fixture (questions.json)
and the sentences of sentences.json (eight topics in several languages and scripts, plus degenerate inputs).

Each text is tokenized by the source's own tokenizer with its post-processor ([CLS] text [SEP] for BERT and the
built-ins), as a sentence embedder would, never truncated.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from ...checkpoint.tokenizer import content_ids
from ...core.json_documents import NON_EMPTY_STRING, STRING, array_of, closed_object, read_json
from .questions import FIXTURE_PATH, QuestionError, load_questions

SENTENCES_PATH = Path(__file__).resolve().parent / "fixtures" / "sentences.json"
# Committed sets beside the golden texts, in the sentences.json format: calibration (sensitivities of weighted
# palettization and of the mixed-bit walk; never gates) and held-out (gated, never used to calibrate or choose).
CALIBRATION_TEXTS_PATH = SENTENCES_PATH.parent / "texts_calibration.json"
HELDOUT_TEXTS_PATH = SENTENCES_PATH.parent / "texts_heldout.json"
SENTENCES_SCHEMA = closed_object(
    {"sentences": array_of(closed_object({"id": NON_EMPTY_STRING, "topic": NON_EMPTY_STRING,
                                          "language": NON_EMPTY_STRING,
                                          "script": NON_EMPTY_STRING, "text": NON_EMPTY_STRING}), 1)},
    {"format_version": {"const": 1}, "description": STRING})


@dataclass(frozen=True)
class Text:
    id: str
    language: str
    text: str
    origin: str  # "question" | "sentence"


def load_texts(questions: Path = FIXTURE_PATH, sentences: Path = SENTENCES_PATH) -> list[Text]:
    texts = [Text(f"question:{q.id}", q.language or "und", q.text, "question") for q in load_questions(questions)]
    for raw in read_json(sentences, SENTENCES_SCHEMA, QuestionError)["sentences"]:
        texts.append(Text(f"sentence:{raw['id']}", raw["language"], raw["text"], "sentence"))
    ids = [t.id for t in texts]
    if len(set(ids)) != len(ids):
        raise QuestionError(f"duplicate text ids in {questions} / {sentences}")
    return texts


def texts_sha256(questions: Path = FIXTURE_PATH, sentences: Path = SENTENCES_PATH) -> str:
    """One hash of both fixture files: a golden file made from other texts is refused."""
    digest = hashlib.sha256()
    for path in (questions, sentences):
        digest.update(hashlib.sha256(Path(path).read_bytes()).digest())
    return digest.hexdigest()


def load_text_fixture(path: Path) -> list[Text]:
    """The texts of one file in the sentences.json format (a user's own held-out set, or a committed one)."""
    texts = [Text(f"sentence:{raw['id']}", raw["language"], raw["text"], "sentence")
             for raw in read_json(path, SENTENCES_SCHEMA, QuestionError)["sentences"]]
    ids = [t.id for t in texts]
    if len(set(ids)) != len(ids):
        raise QuestionError(f"duplicate text ids in {path}")
    return texts


def text_fixture_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def texts_of(fixture: Path | None) -> tuple[list[Text], str]:
    """(texts, hash) of a text fixture file, or of the default golden texts (questions.json's question texts and
    sentences.json) when `fixture` is None."""
    if fixture is None:
        return load_texts(), texts_sha256()
    return load_text_fixture(fixture), text_fixture_sha256(fixture)


def token_ids(tokenizer: Tokenizer, text: str, what: str = "text") -> list[int]:
    """The text's ids with the tokenizer's own special tokens; refused when none of them is content."""
    return content_ids(tokenizer, text, what)
