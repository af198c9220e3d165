"""Benchmark evidence: Neural Engine headroom and the decision error under the mil, mil-ane and mil-fp16-strict
backends, per bucket and attention layout of one source.

For each (bucket, layout): the body package is exported by the probe (workflows/probe_run.py, into a scratch
directory; the probe's own headroom preview is kept), then the golden questions that fit the bucket (at most
`questions` of them, evenly spaced in fixture order when there are more) are validated with validation/gate_run.py's
`validate_bucket` on each backend against FP32 reference decisions made here (validation/golden.py
`reference_decisions`, the golden file's maker): calibrated-probability, action-probability and logit errors, the
gates' verdict, the headroom of every op over those questions against the pre-A16 cliffs (mil backend) and, under
mil-ane, the first op where a cliff fired. fp16-strict costs O(K) numpy calls per dot product: it runs on
`strict_questions` questions of the smallest bucket only (0: not run), and the evidence says how many. With
`fp16_scales` each (bucket, layout) is also exported with `probe --fp16-scale` (the exact rescaling of the residual
stream), so a run with and one without rescaling sit side by side.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Callable

from ...core import gates
from ...core.provenance import harness_fingerprint, machine, tool_versions

FORMAT = "ane-engineering/evidence/ane-numerics/1"
BACKENDS = ("mil", "mil-ane-pre-a16", "mil-ane-a16")
STRICT = "mil-fp16-strict"
BUCKET_FIELDS = ("evaluated", "passed_questions", "max_calibrated_error", "max_action_probability_error",
                 "max_option_logit_error", "max_action_logit_error", "failed_questions", "ane_cliffs", "passed")


def _spaced(items: list, n: int | None) -> list:
    if n is None or len(items) <= n:
        return items
    return [items[round(i * (len(items) - 1) / max(1, n - 1))] for i in range(n)] if n > 1 else items[:1]


def _first_cliff(result: dict) -> dict | None:
    return next((r["ane_cliff"] for r in result["questions"] if "ane_cliff" in r), None)


def _bucket(agent, length: int, questions, golden_by_id: dict, headroom: bool) -> dict:
    from ...validation.gate_run import validate_bucket

    started = time.perf_counter()
    result = validate_bucket(agent, length, questions, golden_by_id, repeats=0, measure_headroom=headroom)
    out = {k: result[k] for k in BUCKET_FIELDS}
    out["first_ane_cliff"] = _first_cliff(result)
    out["seconds"] = round(time.perf_counter() - started, 3)
    if headroom:
        out["headroom"] = result["headroom"]
    return out


def ane_numerics_evidence(source: str, lengths: list[int], layouts: list[str], questions: int | None,
                          strict_questions: int, probe_options: dict | None = None,
                          progress: Callable[[str], None] = lambda line: None,
                          fp16_scales: tuple = (None,)) -> dict:
    """`fp16_scales`: the probe's --fp16-scale per run (None: no rescaling; "auto" or an exponent K)."""
    from ...checkpoint import load_checkpoint
    from ...package.inputs.questions import fixture_sha256, load_questions
    from ...run.agent import ANEAgent
    from ...validation.golden import reference_decisions
    from ..probe_run import run_probe

    harness = harness_fingerprint()
    started = time.perf_counter()
    checkpoint = load_checkpoint(source)
    fixture = load_questions()
    tokenizer = checkpoint.require_tokenizer("the numerics benchmark")
    from ...package.inputs.questions import encode_question

    tokens = {q.id: encode_question(tokenizer, checkpoint.config.head, q).num_tokens for q in fixture}
    chosen = {length: _spaced([q for q in fixture if tokens[q.id] <= length], questions) for length in lengths}
    needed = {q.id: q for qs in chosen.values() for q in qs}
    progress(f"FP32 reference decisions for {len(needed)} questions")
    golden_by_id = {r["question_id"]: r for r in reference_decisions(checkpoint, list(needed.values()))}
    runs = []
    with tempfile.TemporaryDirectory(prefix="ane-numerics-") as scratch:
        for length, layout, scale in ((n, a, k) for n in lengths for a in layouts for k in fp16_scales):
            directory = Path(scratch) / f"body-{length}-{layout}-{scale}"
            progress(f"L{length} {layout} fp16-scale {scale}: probe")
            options = {**(probe_options or {}), **({} if scale is None else {"fp16_scale": scale})}
            probe = run_probe(checkpoint, "body", length, directory, show_progress=False, attention=layout,
                              **options)
            scaled = probe.get("fp16_scale")
            run = {"length": length, "layout": layout, "fp16_scale": "none" if scale is None else str(scale),
                   "exponent": None if scaled is None else scaled.get("exponent"),
                   "package_sha256": probe["package_sha256"],
                   "attention": probe["attention"], "probe_passed": probe["passed"],
                   "probe_headroom": probe["headroom"], "questions": [q.id for q in chosen[length]],
                   "backends": {}}
            for backend in BACKENDS:
                progress(f"L{length} {layout}: {backend} on {len(chosen[length])} questions")
                agent = ANEAgent([directory], checkpoint, backend)
                run["backends"][backend] = _bucket(agent, length, chosen[length], golden_by_id,
                                                   headroom=backend == "mil")
            if strict_questions and length == min(lengths):  # the smallest bucket only: it is the slow one
                sample = _spaced(chosen[length], strict_questions)
                progress(f"L{length} {layout}: {STRICT} on {len(sample)} questions")
                agent = ANEAgent([directory], checkpoint, STRICT)
                run["backends"][STRICT] = {**_bucket(agent, length, sample, golden_by_id, headroom=False),
                                           "questions": [q.id for q in sample]}
            run["headroom"] = run["backends"]["mil"].pop("headroom")
            runs.append(run)
    return {
        "format": FORMAT,
        "benchmark": "Neural Engine headroom per bucket and layout, and decision errors under mil (fp32-accumulate), "
                     "mil-ane (the published cliffs, pre-A16 and A16) and mil-fp16-strict",
        "label": "measurement on the CPU with the mil executor (numpy); the mil-ane backend models the cliffs "
                 "published for real Neural Engines, it is not a Neural Engine run",
        "source": checkpoint.hashes,
        "fixture_sha256": fixture_sha256(),
        "questions_per_bucket": questions,
        "question_selection": "the fixture questions that fit the bucket, evenly spaced in fixture order when more "
                              "than questions_per_bucket fit",
        "strict_questions": strict_questions,
        "strict_note": (f"{STRICT} ran on {strict_questions} question(s) per run of the smallest bucket (its "
                        "sequential fp16 sums make one call take minutes at these sizes)" if strict_questions else
                        f"{STRICT} not run for this source (its sequential fp16 sums make one call take hours at "
                        "these sizes)"),
        "probe_options": probe_options or {},
        "gates": {"headroom_min": gates.HEADROOM_MIN, "probability_error_max": gates.PROBABILITY_ERROR_MAX},
        "runs": runs,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "machine": machine(),
        "tools": tool_versions(),
        "harness": harness,
    }


def summary(evidence: dict) -> str:
    lines = []
    for run in evidence["runs"]:
        h = run["headroom"]
        low = h.get("minimum") or {}
        errs = ", ".join(f"{name} calibrated {b['max_calibrated_error']} ({'pass' if b['passed'] else 'FAIL'})"
                         for name, b in run["backends"].items())
        lines.append(f"L{run['length']} {run['layout']}: minimum headroom {h.get('minimum_headroom')} at "
                     f"{low.get('op')} ({low.get('type')}, {low.get('cliff')}); {errs}")
    return "\n".join(lines)
