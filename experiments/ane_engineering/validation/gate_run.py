"""Validate packages against FP32 golden outputs with the gates of core/gates.py.

Per bucket: every fixture question that fits is run through the ANEAgent on that bucket's package and compared with
its golden record; questions that do not fit are listed as skipped and unvalidated, never counted as passed. Then
repeated calls must give identical public outputs, and with several buckets a question that fits several of them
must get the same decisions from each.

Neural Engine headroom (core/gates.py HEADROOM_MIN): per bucket, every op's largest |output| over the evaluated
questions against the cliff that op faces (run/mil/headroom.py, measured with the mil executor whatever the backend
that ran the questions, when that backend is a mil one); a minimum below the gate fails the bucket, naming the op.
On a Core ML backend nothing can look inside the compiled program: the headroom is reported as not measured.
With the mil-ane backend, each question whose run met a cliff records the first op where it fired (`ane_cliff`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..core import gates
from ..core.provenance import backend_record, harness_fingerprint, machine, portable_path, tool_versions
from ..package.inputs.questions import load_questions
from ..run.agent import ANEAgent
from ..run.host import NonFiniteOutputError
from .golden import GoldenError


def _max_abs(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return math.inf
    return float(np.abs(a - b).max()) if a.size else 0.0


def compare(decision, golden: dict) -> dict:
    """One question's errors against its golden record, and which gates it fails."""
    finite = all(np.isfinite(decision.option_logits)) and all(np.isfinite(decision.calibrated)) \
        and all(np.isfinite(decision.action_logits)) and all(np.isfinite(decision.action_probabilities))
    record = {
        "id": golden["question_id"],
        "kind": golden["kind"],
        "tokens": decision.num_tokens,
        "decision": decision.decision_index, "golden_decision": golden["decision_index"],
        "action": decision.action_index, "golden_action": golden["action_index"],
        "calibrated_error": _max_abs(decision.calibrated, golden["calibrated"]),
        "action_probability_error": _max_abs(decision.action_probabilities, golden["action_probabilities"]),
        "option_logit_error": _max_abs(decision.option_logits, golden["option_logits"]),
        "action_logit_error": _max_abs(decision.action_logits, golden["action_logits"]),
        "finite": bool(finite),
    }
    failed = []
    if record["decision"] != record["golden_decision"]:
        failed.append("decision argmax differs")
    if record["action"] != record["golden_action"]:
        failed.append("action argmax differs")
    if not record["calibrated_error"] <= gates.PROBABILITY_ERROR_MAX:
        failed.append(f"calibrated probability error {record['calibrated_error']:.6f} > {gates.PROBABILITY_ERROR_MAX}")
    if not record["action_probability_error"] <= gates.PROBABILITY_ERROR_MAX:
        failed.append(f"action probability error {record['action_probability_error']:.6f} > "
                      f"{gates.PROBABILITY_ERROR_MAX}")
    if not finite:
        failed.append("non-finite output")
    if decision.num_tokens != golden["num_tokens"]:
        failed.append(f"token usage {decision.num_tokens} != golden {golden['num_tokens']}")
    record["failed_gates"] = failed
    record["passed"] = not failed
    return record


def non_finite_record(encoded, golden: dict, error: NonFiniteOutputError) -> dict:
    """The record of a question whose package outputs were not finite: no decision, no errors, the finite gate
    failed."""
    return {
        "id": golden["question_id"], "kind": golden["kind"], "tokens": encoded.num_tokens,
        "decision": None, "golden_decision": golden["decision_index"],
        "action": None, "golden_action": golden["action_index"],
        "calibrated_error": None, "action_probability_error": None, "option_logit_error": None,
        "action_logit_error": None,
        "finite": False, "non_finite": str(error),
        "failed_gates": [f"finite gate: {error}"], "passed": False,
    }


def _cliff_text(cliff: dict) -> str:
    return (f"first Neural Engine cliff at op {cliff['op']!r} ({cliff['type']}): {cliff['cliff']} "
            f"(|x| > {cliff['cliff_value']:g}) fired on {cliff['value']:g}")


def headroom_gate(report) -> dict:
    """The headroom gate of one bucket: passed, and the reason naming the op when it fails (None: not measured)."""
    if report is None:
        return {"measured": False, "passed": None, "reason": "the backend runs Core ML: no op values to measure"}
    doc = report.to_json()
    low = doc["minimum"]
    passed = low is None or doc["minimum_headroom"] is None or doc["minimum_headroom"] >= gates.HEADROOM_MIN
    reason = None
    if not passed:
        value = "non-finite" if low["non_finite"] else f"max |value| {low['max_abs']:g}"
        reason = (f"headroom gate: minimum headroom {doc['minimum_headroom']:.3g}x < {gates.HEADROOM_MIN:g}x at op "
                  f"{low['op']!r} ({low['type']}, {value} against {low['cliff']} {low['cliff_value']:g})")
    return {"measured": True, "passed": bool(passed), "reason": reason, "headroom_min": gates.HEADROOM_MIN, **doc}


def _headroom_summary(gate: dict) -> dict:
    low = gate.get("minimum") or {}
    return {"measured": gate["measured"], "passed": gate["passed"], "minimum_headroom": gate.get("minimum_headroom"),
            "op": low.get("op"), "type": low.get("type"), "cliff": low.get("cliff")}


def validate_bucket(agent: ANEAgent, length: int, questions, golden_by_id: dict, repeats: int, progress=None,
                    measure_headroom: bool = True) -> dict:
    """One bucket's records, repeats and (unless `measure_headroom` is False: a caller that measures it once
    elsewhere) its headroom gate."""
    records, skipped, public = [], [], {}
    backend = agent.backends[length]
    for question in questions:
        encoded = agent.encode(question)
        if encoded.num_tokens > length:
            skipped.append({"id": question.id, "tokens": encoded.num_tokens, "reason": f"longer than bucket {length}"})
            continue
        try:
            decision, _ = agent.decide_encoded(encoded, length)
        except NonFiniteOutputError as error:
            record = non_finite_record(encoded, golden_by_id[question.id], error)
            cliff = backend.last_cliff()
            if cliff is not None:
                record["failed_gates"] = [f"{record['failed_gates'][0]} ({_cliff_text(cliff)})"]
        else:
            record = compare(decision, golden_by_id[question.id])
            public[question.id] = (encoded, decision.public)
            cliff = backend.last_cliff()
        if cliff is not None:
            record["ane_cliff"] = cliff
        records.append(record)
        if progress:
            progress()
    evaluated_inputs = (agent.device_inputs(e.input_ids, e.token_types, e.marker_positions, length)
                        for e in (agent.encode(q) for q in questions) if e.num_tokens <= length)
    headroom = (headroom_gate(backend.headroom(({k: v.astype(np.float16) for k, v in i.items()}
                                                for i in evaluated_inputs)))
                if measure_headroom else {"measured": False, "passed": None, "reason": "not asked for"})
    # Repeated calls: round-robin over the evaluated questions; every public output must be identical.
    mismatches = []
    evaluated = list(public)
    for call in range(repeats if evaluated else 0):
        qid = evaluated[call % len(evaluated)]
        encoded, first = public[qid]
        try:
            again = agent.decide_encoded(encoded, length)[0].public
        except NonFiniteOutputError as error:
            again = f"non-finite: {error}"
        if again != first:
            mismatches.append({"call": call, "id": qid})
        if progress:
            progress()
    failed = [r for r in records if not r["passed"]]

    def worst(key):  # over the questions that produced a decision (non-finite ones failed their gate already)
        return max((r[key] for r in records if r[key] is not None), default=None)

    return {
        "length": length,
        "evaluated": len(records), "passed_questions": len(records) - len(failed), "skipped": skipped,
        "max_calibrated_error": worst("calibrated_error"),
        "max_action_probability_error": worst("action_probability_error"),
        "max_option_logit_error": worst("option_logit_error"),
        "max_action_logit_error": worst("action_logit_error"),
        "repeats": {"calls": repeats if evaluated else 0, "mismatches": mismatches, "identical": not mismatches},
        "failed_questions": [{"id": r["id"], "gates": r["failed_gates"]} for r in failed],
        "questions": records,
        "ane_cliffs": sum(1 for r in records if "ane_cliff" in r),
        "headroom": headroom,
        "passed": bool(records) and not failed and not mismatches and headroom["passed"] is not False,
    }


def cross_bucket(buckets: dict[int, dict]) -> dict:
    """A question evaluated in several buckets must get the same decision and action in each."""
    seen: dict[str, dict[int, tuple]] = {}
    for length, result in buckets.items():
        for record in result["questions"]:
            seen.setdefault(record["id"], {})[length] = (record["decision"], record["action"])
    shared = {qid: by_length for qid, by_length in seen.items() if len(by_length) > 1}
    disagreements = [{"id": qid, "by_length": {str(k): list(v) for k, v in by_length.items()}}
                     for qid, by_length in shared.items() if len(set(by_length.values())) > 1]
    return {"questions_in_several_buckets": len(shared), "disagreements": disagreements,
            "passed": not disagreements}


def package_records(agent) -> list[dict]:
    """What validation evidence records about each loaded package."""
    return [{"length": length, "kind": m["kind"], "package_sha256": m["package"]["content_hash"]["sha256"],
             "manifest_sha256": m["manifest_sha256"], "compression": m.get("compression"),
             # how sliding-window layers run (dense L x L or windowed tiles), as the manifest records it
             "attention": m.get("attention") or agent.layout(length).to_json(),
             "load_seconds": agent.load_seconds[length]} for length, m in sorted(agent.manifests.items())]


def validate(agent: ANEAgent, golden: dict, golden_path: Path, lengths: list[int], repeats: int,
             fixture_questions=None, progress=None, *, evidence_dir: Path) -> dict:
    """The validation report of `agent`'s packages against `golden`; `evidence_dir` is the directory the report will
    be written in (paths in it are recorded relative to it)."""
    questions = fixture_questions if fixture_questions is not None else load_questions()
    golden_by_id = {record["question_id"]: record for record in golden["questions"]}
    missing = [q.id for q in questions if q.id not in golden_by_id]
    if missing:
        raise GoldenError(f"golden file lacks questions {missing[:5]}")
    buckets = {length: validate_bucket(agent, length, questions, golden_by_id, repeats, progress) for length in lengths}
    reasons = []
    for length, result in buckets.items():
        if not result["evaluated"]:
            reasons.append(f"L{length}: no question fits this bucket")
        for failure in result["failed_questions"]:
            reasons.append(f"L{length} {failure['id']}: " + "; ".join(failure["gates"]))
        if result["repeats"]["mismatches"]:
            reasons.append(f"L{length}: {len(result['repeats']['mismatches'])} repeated call(s) changed "
                           "the public output")
        if result["headroom"]["passed"] is False:
            reasons.append(f"L{length}: {result['headroom']['reason']}")
    consistency = cross_bucket(buckets) if len(buckets) > 1 else None
    if consistency and not consistency["passed"]:
        reasons += [f"cross-bucket: {d['id']} decides differently {d['by_length']}"
                    for d in consistency["disagreements"]]
    return {
        "format": "ane-engineering/validation/1",
        "passed": not reasons,
        "reasons": reasons,
        "gates": {"probability_error_max": gates.PROBABILITY_ERROR_MAX, "repeats": repeats,
                  "headroom_min": gates.HEADROOM_MIN,
                  "rules": "argmax decision and action match; calibrated and action probability errors <= max; "
                           "finite; token usage unchanged; repeated public outputs identical; Neural Engine "
                           "headroom >= headroom_min on every op (mil backends)"},
        "summary": {str(length): {**{k: v for k, v in result.items() if k not in ("questions", "headroom")},
                                  "headroom": _headroom_summary(result["headroom"])}
                    for length, result in buckets.items()},
        "buckets": {str(length): result for length, result in buckets.items()},
        "cross_bucket": consistency,
        "golden": {"path": portable_path(golden_path, evidence_dir), "content_sha256": golden["content_sha256"],
                   "source": golden["source"],
                   "fixture": golden["fixture"]},
        "source": agent.checkpoint.hashes,
        "adapter": None if agent.adapter is None else {"name": agent.adapter.name, "sha256": agent.adapter.sha256,
                                                       **agent.adapter.spec.to_json()},
        "packages": package_records(agent),
        "backend": backend_record(agent.backend.describe()),
        "machine": machine(),
        "tools": tool_versions(),
        "harness": harness_fingerprint(),
    }
