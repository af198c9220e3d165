"""FP32 golden outputs: the reference decision model run over the fixture questions, stored with what made them.

A golden file records per question the raw option logits, calibrated probabilities, action logits and
probabilities, decisions and token usage; plus the fixture hash, the source hashes, tool versions and the harness
fingerprint. It carries `content_sha256`, a hash of everything else in canonical JSON, so an edited golden file is
refused, and validation refuses a golden file made from other source weights.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..checkpoint import SOURCE_HASHES, Checkpoint
from ..checkpoint.config import QUESTION_KINDS
from ..checkpoint.files import sha256_json
from ..core.errors import HarnessError
from ..core.json_documents import (
    NON_EMPTY_STRING,
    NON_NEGATIVE_INTEGER,
    NUMBER,
    POSITIVE_INTEGER,
    SHA256,
    STRING,
    array_of,
    open_object,
    read_json,
)
from ..core.provenance import harness_fingerprint, tool_versions
from ..model.reference import ReferenceDecisionModel
from ..package.inputs.questions import FIXTURE_PATH, encode_question, fixture_sha256, load_questions
from ..run.host import DecisionHost

GOLDEN_FORMAT = "ane-engineering/golden/1"
COMMITTED_TINY_GOLDEN = Path(__file__).resolve().parent / "golden_builtin_tiny.json"


class GoldenError(HarnessError):
    """A golden file that cannot be trusted for this comparison."""


def golden_path_for(source: str, golden: Path | None, adapter: Path | None = None) -> Path:
    """The golden file to compare against: the one given, else the committed builtin:tiny golden -- which stands
    only for builtin:tiny without an adapter."""
    if golden is not None:
        return golden
    if adapter is not None:
        raise GoldenError("--golden is required with --adapter (make it with: golden --adapter FILE)")
    if source != "builtin:tiny":
        raise GoldenError(f"--golden is required for source {source!r} (make one with the golden command); the "
                          "committed golden is builtin:tiny's")
    return COMMITTED_TINY_GOLDEN


def reference_decisions(checkpoint: Checkpoint, questions, progress=None) -> list[dict]:
    """Run the FP32 reference (explicit attention, no padding) and finish each question on the host."""
    checkpoint.require_head("golden outputs")
    tokenizer = checkpoint.require_tokenizer("golden outputs")
    model = ReferenceDecisionModel(checkpoint.config, checkpoint.tensors).eval()
    host = DecisionHost(checkpoint.config.head, checkpoint.tensors)
    records = []
    with torch.no_grad():
        for question in questions:
            encoded = encode_question(tokenizer, checkpoint.config.head, question)
            ids = torch.tensor([encoded.input_ids])
            scores = model.token_scores(ids, torch.ones_like(ids, dtype=torch.bool),
                                        torch.tensor([encoded.token_types]))
            decision = host.finish(encoded, scores[0, list(encoded.marker_positions)].numpy())
            records.append({**decision.to_json(), "language": question.language})
            if progress:
                progress(question.id)
    return records


def make_golden(checkpoint: Checkpoint, fixture: Path = FIXTURE_PATH, progress=None) -> dict:
    questions = load_questions(fixture)
    body = {
        "format": GOLDEN_FORMAT,
        "source": checkpoint.hashes,
        "fixture": {"path": Path(fixture).name, "sha256": fixture_sha256(fixture), "questions": len(questions)},
        "reference": "FP32 B x L x C reference decision model, explicit attention, unpadded",
        "questions": reference_decisions(checkpoint, questions, progress),
        "tools": tool_versions(),
        "harness": harness_fingerprint(),
    }
    return {**body, "content_sha256": sha256_json(body)}


FLOATS = array_of(NUMBER, 1)
# One question's record (decision.host.Decision.to_json plus the language); the fields validation reads are required.
GOLDEN_RECORD = open_object({
    "question_id": NON_EMPTY_STRING, "kind": {"enum": list(QUESTION_KINDS)}, "option_logits": FLOATS,
    "calibrated": FLOATS, "action_logits": FLOATS, "action_probabilities": FLOATS,
    "decision_index": NON_NEGATIVE_INTEGER, "action_index": NON_NEGATIVE_INTEGER, "num_tokens": POSITIVE_INTEGER,
    "public": {"type": "object"},
}, {"language": {"type": ["string", "null"]}})
GOLDEN_SCHEMA = open_object({
    "format": {"const": GOLDEN_FORMAT}, "source": SOURCE_HASHES,
    "fixture": open_object({"path": STRING, "sha256": SHA256, "questions": POSITIVE_INTEGER}),
    "questions": array_of(GOLDEN_RECORD, 1), "content_sha256": SHA256,
}, {"reference": STRING, "tools": {"type": "object"}, "harness": {"type": "object"}})


def load_golden(path: Path, checkpoint: Checkpoint | None = None, fixture: Path = FIXTURE_PATH) -> dict:
    """Read and verify a golden file: its structure, intact content, made from `checkpoint`'s weights, and the
    current fixture."""
    golden = read_json(path, GOLDEN_SCHEMA, GoldenError)
    body = {k: v for k, v in golden.items() if k != "content_sha256"}
    if golden["content_sha256"] != sha256_json(body):
        raise GoldenError(f"{path}: content does not match its content_sha256 (the file was edited or damaged)")
    if checkpoint is not None:
        for key in ("weights_sha256", "config_sha256"):
            if golden["source"][key] != checkpoint.hashes[key]:
                raise GoldenError(f"{path}: made from other source {key.split('_')[0]} "
                                  f"({golden['source'][key][:12]}... vs {checkpoint.hashes[key][:12]}... of "
                                  f"{checkpoint.source}); regenerate it with the golden command")
    if golden["fixture"]["sha256"] != fixture_sha256(fixture):
        raise GoldenError(f"{path}: made from other questions ({golden['fixture']['path']}) than {fixture}; pass the "
                          "fixture it was made from with --fixture, or regenerate it")
    check_records(path, golden["questions"], load_questions(fixture),
                  None if checkpoint is None or checkpoint.config.head is None else checkpoint.config.head)
    return golden


def check_records(path: Path, records: list[dict], questions, head=None) -> None:
    """A golden says exactly what it seems to: one record per fixture question (no question twice, none missing,
    none unknown), of the question's kind, with one raw logit per option, one calibrated probability per option
    (plus "none" for a noul question), decisions that index them, and (given the head) one action logit and
    probability per action. A shorter list would leave an option or action uncompared."""
    by_id = {question.id: question for question in questions}
    seen = set()
    for record in records:
        qid = record["question_id"]
        where = f"{path}: question {qid!r}"
        if qid in seen:
            raise GoldenError(f"{where} appears twice; each question has one record")
        seen.add(qid)
        question = by_id.get(qid)
        if question is None:
            raise GoldenError(f"{where} is not in the fixture")
        if record["kind"] != question.kind:
            raise GoldenError(f"{where} is recorded as kind {record['kind']!r}; the fixture says {question.kind!r}")
        options = len(question.options)
        labels = options + (1 if question.kind == "noul" else 0)
        for field, expected in (("option_logits", options), ("calibrated", labels)):
            if len(record[field]) != expected:
                raise GoldenError(f"{where} has {len(record[field])} {field} for its {expected} "
                                  f"{'options' if field == 'option_logits' else 'calibrated outcomes'}")
        if record["decision_index"] >= labels:
            raise GoldenError(f"{where}: decision_index {record['decision_index']} is not one of its {labels} outcomes")
        actions = len(record["action_logits"]) if head is None else len(head.action_head.actions)
        for field in ("action_logits", "action_probabilities"):
            if len(record[field]) != actions:
                raise GoldenError(f"{where} has {len(record[field])} {field} for {actions} actions")
        if record["action_index"] >= actions:
            raise GoldenError(f"{where}: action_index {record['action_index']} is not one of its {actions} actions")
    missing = [question.id for question in questions if question.id not in seen]
    if missing:
        raise GoldenError(f"{path}: no record for {len(missing)} fixture question(s) (e.g. {missing[0]!r}); a golden "
                          "covers every question of its fixture")
