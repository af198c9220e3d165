"""Benchmark evidence: a stress source with a massive activation, validated under the Neural Engine numerics with and
without the exact FP16 rescaling (`probe --fp16-scale`, ANE_MATH.md section 17).

Steps, each a harness command in a fresh process (steps.py), so what is measured is what a user runs:
`stress_source` (the planted checkpoint, margin-fitted), `golden` (its FP32 reference), then per bucket and layout
a body `probe` without rescaling and one with `--fp16-scale auto`, each `validate`d with every backend asked for.
Each row keeps what the validation report says: passed or not, the reasons (first few), the minimum Neural Engine
headroom with its op, the first cliff that fired, and the decision errors; and, for the rescaled package, the K
auto chose with the headroom before and after from its manifest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from ...core.provenance import harness_fingerprint, machine, tool_versions
from .steps import BenchmarkError, command_argv, run_command

FORMAT = "ane-engineering/evidence/stress-rescale/1"
REASONS_KEPT = 3


def _validation_row(report: dict, length: int) -> dict:
    summary = report["summary"][str(length)]
    return {
        "passed": report["passed"], "reasons": report["reasons"][:REASONS_KEPT],
        "reasons_total": len(report["reasons"]),
        "evaluated": summary["evaluated"], "passed_questions": summary["passed_questions"],
        "headroom": summary.get("headroom"), "ane_cliffs": summary.get("ane_cliffs"),
        "max_calibrated_error": summary["max_calibrated_error"],
        "max_option_logit_error": summary["max_option_logit_error"],
        "max_action_probability_error": summary["max_action_probability_error"],
        "max_action_logit_error": summary["max_action_logit_error"],
    }


def _package(source: Path, length: int, layout: str, tile: int | None, scale: str | None, output: Path) -> dict:
    argv = ["--kind", "body", "--length", str(length), "--source", str(source), "--attention", layout,
            "--output", str(output), "--quiet"]
    argv += ["--tile", str(tile)] if layout == "windowed" and tile is not None else []
    argv += ["--fp16-scale", scale] if scale is not None else []
    _, wall = run_command(command_argv("probe", *argv), f"probe L{length} {layout} fp16-scale {scale}", ok=(0, 1))
    manifest = json.loads((output / "manifest.json").read_text(encoding="utf-8"))
    probe = json.loads((output / "probe.json").read_text(encoding="utf-8"))
    scaled = manifest.get("fp16_scale")
    row = {"fp16_scale": scale or "none", "probe_passed": probe["passed"], "probe_wall_seconds": wall,
           "package_sha256": manifest["package"]["content_hash"]["sha256"]}
    if scaled is not None:
        choice = scaled.get("choice") or {}
        row.update(exponent=scaled["exponent"], tried=choice.get("tried"),
                   headroom_before=(choice.get("headroom_before") or {}).get("minimum"),
                   headroom_after=(choice.get("headroom_after") or {}).get("minimum"))
    return row


def stress_rescale_evidence(base: str, magnitude: float, lengths: list[int], layouts: list[str], backends: list[str],
                            scratch: Path, tile: int | None = None, progress: Callable[[str], None] = lambda line: None,
                            source: str | None = None, question_ids: list[str] | None = None) -> dict:
    """`source` None: build the stress source `base` at `magnitude`; else validate that source (e.g. builtin:tiny,
    builtin:minilm-decision: the rescaling must leave a source without massive activations passing).
    `question_ids`: validate on these questions of the committed fixture only (a shorter run at long buckets; the
    headroom auto measures stays that of every golden input, validation/headroom_inputs.py)."""
    golden = scratch / "golden.json"
    fixture = []
    if question_ids:
        from ...package.inputs.questions import FIXTURE_PATH

        document = json.loads(FIXTURE_PATH.read_text(encoding="utf-8"))
        known = {q["id"] for q in document["questions"]}
        if set(question_ids) - known:
            raise BenchmarkError(f"--questions: unknown id(s) {sorted(set(question_ids) - known)[:5]}")
        document["questions"] = [q for q in document["questions"] if q["id"] in question_ids]
        (scratch / "fixture.json").write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
        fixture = ["--fixture", str(scratch / "fixture.json")]
    if source is None:
        source = scratch / "source"
        progress(f"building the stress source ({base}, |h| {magnitude:g}) and its margin fit ...")
        run_command(command_argv("stress_source", "--base", base, "--magnitude", repr(magnitude), "--output",
                                 str(source)), "stress_source")
        planted = json.loads((source / "builtin.json").read_text(encoding="utf-8"))
    else:
        planted = {"massive_activation": None}
    progress("FP32 golden outputs ...")
    run_command(command_argv("golden", "--source", str(source), "--output", str(golden), *fixture), "golden")
    rows = []
    for length in lengths:
        for layout in layouts:
            for scale in (None, "auto"):
                name = f"body-L{length}-{layout}-{scale or 'none'}"
                progress(f"probe {name} ...")
                row = {"length": length, "layout": layout,
                       **_package(source, length, layout, tile, scale, scratch / name)}
                row["validation"] = {}
                for backend in backends:
                    progress(f"  validate --backend {backend} ...")
                    report_path = scratch / f"{name}-{backend}.json"
                    run_command(command_argv("validate", "--package", str(scratch / name), "--source", str(source),
                                             "--golden", str(golden), "--backend", backend, "--repeats", "2",
                                             "--output", str(report_path), *fixture), f"validate {name} {backend}",
                                ok=(0, 1))
                    report = json.loads(report_path.read_text(encoding="utf-8"))
                    row["validation"][backend] = _validation_row(report, length)
                    progress(f"    passed {report['passed']}")
                rows.append(row)
    return {
        "format": FORMAT,
        "benchmark": "stress source past the matmul cliff: validate under the Neural Engine numerics, without and "
                     "with probe --fp16-scale auto",
        "stress_source": {"base": base if planted["massive_activation"] else str(source),
                          "massive_activation": planted["massive_activation"],
                          "margins_when_fitted": planted.get("margins_when_fitted"),
                          "source": json.loads(golden.read_text(encoding="utf-8")).get("source")},
        "questions": question_ids or "every committed fixture question that fits",
        "runs": rows,
        "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint(),
    }
