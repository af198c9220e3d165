"""Questions as text, and their encoding into token ids, token types and marker positions.

Layout of an encoded question (one marker token in front of each option):

    [CLS] question text [SEP] ([MARK] option text [SEP]) x n_options

Token types: 0 question (CLS, text, first SEP), 1 option text and its SEP, 2 marker. The score of option i is read
at the position of its marker. Inputs are never truncated: a question that does not fit is refused by whoever runs it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from ...checkpoint.config import QUESTION_KINDS, DecisionHeadConfig
from ...checkpoint.tokenizer import content_ids, special_token_texts
from ...core.errors import HarnessError
from ...core.json_documents import NON_EMPTY_STRING, NUMBER, STRING, array_of, closed_object, read_json

TYPE_QUESTION, TYPE_OPTION, TYPE_MARKER = 0, 1, 2
FIXTURE_PATH = Path(__file__).resolve().parent / "fixtures" / "questions.json"
# Committed sets in the same format: calibration (sensitivities of weighted palettization and of the mixed-bit walk;
# never gates) and held-out (gated like the fixture, never used to calibrate or choose a candidate).
CALIBRATION_QUESTIONS_PATH = FIXTURE_PATH.parent / "questions_calibration.json"
HELDOUT_QUESTIONS_PATH = FIXTURE_PATH.parent / "questions_heldout.json"


class QuestionError(HarnessError):
    """A question that cannot be encoded as asked."""


NONE_DECISION = "none"  # the decision of a noul question when no listed option applies


@dataclass(frozen=True)
class Question:
    id: str
    kind: str  # "choice" | "score" | "noul"
    text: str
    options: tuple[str, ...]
    points: tuple[float, ...] | None = None  # rubric points of a score question, one per option
    language: str | None = None

    def __post_init__(self):
        if self.kind not in QUESTION_KINDS:
            raise QuestionError(f"question {self.id!r}: kind must be one of {QUESTION_KINDS}, got {self.kind!r}")
        if not isinstance(self.text, str) or not self.text.strip():
            raise QuestionError(f"question {self.id!r}: text must be a non-empty string")
        if len(self.options) < 2:
            raise QuestionError(f"question {self.id!r}: needs at least 2 options, got {len(self.options)}")
        if not all(isinstance(o, str) and o.strip() for o in self.options):
            raise QuestionError(f"question {self.id!r}: every option must be a non-empty string")
        # outputs are keyed by option label: a repeated label (or a noul option named like the "none" outcome)
        # would leave one of them out of every public output
        labels = [*self.options, *([NONE_DECISION] if self.kind == "noul" else [])]
        repeated = sorted({o for o in labels if labels.count(o) > 1})
        if repeated:
            raise QuestionError(f"question {self.id!r}: the label {repeated[0]!r} appears twice among its options"
                                + (" (with the noul outcome)" if repeated[0] == NONE_DECISION else ""))
        if self.kind == "score" and (self.points is None or len(self.points) != len(self.options)):
            raise QuestionError(f"question {self.id!r}: a score question needs one rubric point per option")


@dataclass(frozen=True)
class EncodedQuestion:
    question: Question
    input_ids: tuple[int, ...]
    token_types: tuple[int, ...]
    marker_positions: tuple[int, ...]  # one per option, in option order

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)


def encode_question(tokenizer: Tokenizer, head: DecisionHeadConfig, question: Question) -> EncodedQuestion:
    if len(question.options) > head.max_markers:
        raise QuestionError(f"question {question.id!r}: {len(question.options)} options exceed the "
                            f"{head.max_markers} marker slots")
    for piece in (question.text, *question.options):
        for special in special_token_texts(tokenizer):
            if special in piece:
                raise QuestionError(f"question {question.id!r}: text contains the special token {special!r}")

    def pieces(text: str) -> list[int]:  # never empty: a text the vocabulary misses is refused, not dropped
        return content_ids(tokenizer, text, f"question {question.id!r}", add_special_tokens=False)

    ids = [head.cls_token_id, *pieces(question.text), head.sep_token_id]
    types = [TYPE_QUESTION] * len(ids)
    markers = []
    for option in question.options:
        markers.append(len(ids))
        option_ids = [*pieces(option), head.sep_token_id]
        ids += [head.marker_token_id, *option_ids]
        types += [TYPE_MARKER] + [TYPE_OPTION] * len(option_ids)
    return EncodedQuestion(question, tuple(ids), tuple(types), tuple(markers))


# The fixture file (package/inputs/fixtures/questions.json): questions, and rubrics whose labels become the options of
# score questions in the question's language. Relations (a known rubric, labels in that language, one label per
# point, unique ids) are checked in load_questions.
RUBRIC = closed_object({"points": array_of(NUMBER, 2),
                        "labels": {"type": "object", "minProperties": 1,
                                   "additionalProperties": array_of(NON_EMPTY_STRING, 2)}})
QUESTION = {
    **closed_object({"id": NON_EMPTY_STRING, "kind": {"enum": list(QUESTION_KINDS)}, "text": NON_EMPTY_STRING},
                    {"options": array_of(NON_EMPTY_STRING, 2), "rubric": NON_EMPTY_STRING, "language": NON_EMPTY_STRING,
                     "script": STRING}),
    # a score question takes its options from a rubric in its language; the others list their own
    "if": {"required": ["kind"], "properties": {"kind": {"const": "score"}}},
    "then": {"required": ["rubric", "language"]},
    "else": {"required": ["options"]},
}
FIXTURE_SCHEMA = closed_object({"questions": array_of(QUESTION, 1)},
                               {"format_version": {"const": 1}, "description": STRING,
                                "rubrics": {"type": "object", "additionalProperties": RUBRIC}})


def load_questions(path: Path = FIXTURE_PATH) -> list[Question]:
    """Read a fixture file (see package/inputs/fixtures/questions.json); score questions take their options from a
    rubric."""
    data = read_json(path, FIXTURE_SCHEMA, QuestionError)
    rubrics = data.get("rubrics", {})
    questions, seen = [], set()
    for raw in data["questions"]:
        qid = raw["id"]
        if qid in seen:
            raise QuestionError(f"{path}: duplicate question id {qid!r}")
        seen.add(qid)
        points = None
        if raw["kind"] == "score":
            rubric = rubrics.get(raw["rubric"])
            if rubric is None:
                raise QuestionError(f"{path}: question {qid!r} names unknown rubric {raw['rubric']!r}")
            labels = rubric["labels"].get(raw["language"])
            if labels is None:
                raise QuestionError(f"{path}: rubric {raw['rubric']!r} has no labels in {raw['language']!r}")
            if len(labels) != len(rubric["points"]):
                raise QuestionError(f"{path}: rubric {raw['rubric']!r} has {len(labels)} labels in {raw['language']!r} "
                                    f"for {len(rubric['points'])} points")
            options, points = tuple(labels), tuple(float(p) for p in rubric["points"])
        else:
            options = tuple(raw["options"])
        questions.append(Question(id=qid, kind=raw["kind"], text=raw["text"], options=options, points=points,
                                  language=raw.get("language")))
    return questions


def fixture_sha256(path: Path = FIXTURE_PATH) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
