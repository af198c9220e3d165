"""The texts the sentence-embedding gates run on: every question text of the decision fixture (questions.json)
and the sentences of sentences.json (eight topics in several languages and scripts, plus degenerate inputs).

Each text is tokenized by the source's own tokenizer with its post-processor ([CLS] text [SEP] for BERT and the
built-ins), as a sentence embedder would, never truncated.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from ..decision.questions import FIXTURE_PATH, load_questions

SENTENCES_PATH = Path(__file__).resolve().parent.parent / "fixtures" / "sentences.json"


@dataclass(frozen=True)
class Text:
    id: str
    language: str
    text: str
    origin: str  # "question" | "sentence"


def load_texts(questions: Path = FIXTURE_PATH, sentences: Path = SENTENCES_PATH) -> list[Text]:
    texts = [Text(f"question:{q.id}", q.language or "und", q.text, "question") for q in load_questions(questions)]
    for raw in json.loads(Path(sentences).read_text(encoding="utf-8"))["sentences"]:
        texts.append(Text(f"sentence:{raw['id']}", raw["language"], raw["text"], "sentence"))
    ids = [t.id for t in texts]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate text ids in {questions} / {sentences}")
    return texts


def texts_sha256(questions: Path = FIXTURE_PATH, sentences: Path = SENTENCES_PATH) -> str:
    """One hash of both fixture files: a golden file made from other texts is refused."""
    digest = hashlib.sha256()
    for path in (questions, sentences):
        digest.update(hashlib.sha256(Path(path).read_bytes()).digest())
    return digest.hexdigest()


def token_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text).ids
