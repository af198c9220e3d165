"""FP32 golden outputs: the reference decision model run over the fixture questions, stored with what made them.

A golden file records per question the raw option logits, calibrated probabilities, action logits and
probabilities, decisions and token usage; plus the fixture hash, the source hashes, tool versions and the harness
fingerprint. It carries `content_sha256`, a hash of everything else in canonical JSON, so an edited golden file is
refused, and validation refuses a golden file made from other source weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..checkpoint import Checkpoint
from ..checkpoint.files import sha256_json
from ..decision.host import DecisionHost
from ..decision.questions import FIXTURE_PATH, encode_question, fixture_sha256, load_questions
from ..errors import HarnessError
from ..evidence.provenance import harness_fingerprint, tool_versions
from ..model.reference import ReferenceDecisionModel

GOLDEN_FORMAT = "ane-engineering/golden/1"
COMMITTED_TINY_GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "golden_builtin_tiny.json"


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
            scores = model.token_scores(ids, torch.ones_like(ids, dtype=torch.bool), torch.tensor([encoded.token_types]))
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


def load_golden(path: Path, checkpoint: Checkpoint | None = None, fixture: Path = FIXTURE_PATH) -> dict:
    """Read and verify a golden file: intact content, made from `checkpoint`'s weights, and the current fixture."""
    try:
        golden = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise GoldenError(f"{path}: cannot read golden file ({error})") from error
    if not isinstance(golden, dict) or golden.get("format") != GOLDEN_FORMAT:
        raise GoldenError(f"{path}: not a golden file of format {GOLDEN_FORMAT}")
    claimed = golden.get("content_sha256")
    body = {k: v for k, v in golden.items() if k != "content_sha256"}
    if claimed != sha256_json(body):
        raise GoldenError(f"{path}: content does not match its content_sha256 (the file was edited or damaged)")
    if checkpoint is not None:
        for key in ("weights_sha256", "config_sha256"):
            if golden["source"].get(key) != checkpoint.hashes[key]:
                raise GoldenError(f"{path}: made from other source {key.split('_')[0]} "
                                  f"({golden['source'].get(key, '?')[:12]}... vs {checkpoint.hashes[key][:12]}... of "
                                  f"{checkpoint.source}); regenerate it with the golden command")
    if golden["fixture"]["sha256"] != fixture_sha256(fixture):
        raise GoldenError(f"{path}: made from another version of the fixture questions; regenerate it")
    return golden
