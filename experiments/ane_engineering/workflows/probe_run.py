"""The probe as a library: export one kind at one bucket length, with its manifest and placement evidence.

Writes DIR/model.mlpackage, DIR/manifest.json and DIR/probe.json, built in a staging sibling and renamed into place
only when all three are written (see staging.py).

probe.json's `headroom` is the package's Neural Engine headroom on its golden inputs (validation/headroom_inputs.py:
every op's largest |output| against the cliff it faces, pre-A16 cliffs), gated by core/gates.py HEADROOM_MIN; the
static rules see it too (placement/rules/numerics.py: a width-offset slice that can reach the pre-A16 slice cliff).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

from ..checkpoint import Checkpoint
from ..core.provenance import machine, peak_rss_bytes
from ..core.staging import staged_directory
from ..model.window_tiles import DEFAULT_TILE
from ..package.convert import convert
from ..package.kinds import build_export_spec
from ..package.layout_check import layout_check
from ..package.manifest import PACKAGE_NAME, manifest_for, write_manifest
from ..package.package_hash import package_content_hash
from ..validation.headroom_inputs import package_headroom
from .attention_choice import choose_layout, requested_layout

PROBE_NAME = "probe.json"


class Progress:
    """One line per stage on stderr, with the elapsed time of the previous stage."""

    def __init__(self, label: str, total: int, enabled: bool = True):
        self.label, self.total, self.enabled, self.step, self.started = label, total, enabled, 0, None

    def __call__(self, message: str) -> None:
        now = time.perf_counter()
        if self.enabled:
            done = f" (previous step {now - self.started:.1f} s)" if self.started is not None else ""
            self.step += 1
            print(f"[{self.label} {self.step}/{self.total}] {message}{done}", file=sys.stderr, flush=True)
        self.started = now


def mil_op_counts(program) -> dict:
    from ..package.mil.walk import walk_operations

    counts = Counter(op.op_type for op in walk_operations(program))
    constants = sum(n for op_type, n in counts.items() if op_type == "const" or op_type.startswith("constexpr_"))
    return {"by_type": dict(sorted(counts.items())), "non_constant": sum(counts.values()) - constants,
            "constant": constants}


def placement_report(package: Path, require_ane: bool, allow: set[str],
                     measured: dict | None = None) -> tuple[dict, dict]:
    """Static rules (always) and, on macOS, Core ML's compute plan. The gate fails on any static rule error: a
    program error (a non-finite or out-of-FP16-range constant, ...) always, a predicted off-ANE op unless its type is
    in `allow`; with `require_ane`, also on any op the compute plan places elsewhere."""
    from ..package.mil.load import load_program
    from ..placement.compute_plan import compute_plan
    from ..placement.static_check import check_program, program_errors, require_ane_gate

    loaded = load_program(package)
    static = check_program(loaded.program, loaded.spec, measured=measured)
    plan = compute_plan(package)
    errors = program_errors(static)
    reasons = [f"static rule {f['rule']} on {f['op']}: {f['detail']}" for f in errors[:5]]
    if len(errors) > 5:
        reasons.append(f"... and {len(errors) - 5} more program error(s)")
    placed, placement_reasons = require_ane_gate(static, allow)
    reasons += placement_reasons
    if require_ane and plan.get("available"):
        off = [op for op in plan["ops"] if op["preferred"] != "NeuralEngine" and op["operator"] not in allow]
        if off:
            reasons.append(f"MLComputePlan places {len(off)} non-constant op(s) off the Neural Engine, e.g. "
                           + ", ".join(f"{o['operator']}->{o['preferred']}" for o in off[:5]))
    gate = {"require_ane": require_ane, "allow": sorted(allow), "passed": not reasons, "reasons": reasons,
            "program_errors": len(errors)}
    return {"static": static, "compute_plan": plan, "op_counts": mil_op_counts(loaded.program)}, gate


def run_probe(checkpoint: Checkpoint, kind: str, length: int, output: Path, layer_index: int = 0,
              require_ane: bool = False, allow: set[str] | frozenset = frozenset(), show_progress: bool = True,
              lora=None, attention: str = "dense", tile: int = DEFAULT_TILE,
              fp16_scale: int | str | None = None) -> dict:
    """Export and report; returns probe.json's content. `passed` is False when a check (or the ANE gate) fails.
    `attention`: dense | windowed (tile `tile`) | auto (attention_choice.py decides for this bucket).
    `fp16_scale`: None (no rescaling), an exponent K, or "auto" (fp16_scale_choice.py picks K by measured headroom)."""
    progress = Progress("probe", 8 if fp16_scale == "auto" else 7, show_progress)
    with staged_directory(output) as staging:
        progress(f"building the {kind} module at length {length} from {checkpoint.source} (attention {attention})")
        chosen = requested_layout(attention, tile)
        model, choice = None, {"requested": attention}
        rss_before = peak_rss_bytes()
        started = time.perf_counter()
        exponent = None if fp16_scale == "auto" else fp16_scale
        if chosen is None:  # auto: convert both layouts and keep the one predicted faster
            chosen, choice, model = choose_layout(
                checkpoint, kind, length, tile,
                build=lambda layout: build_export_spec(checkpoint, kind, length, layer_index, lora, layout, exponent),
                convert=convert)
        scale_choice = None
        if fp16_scale == "auto":  # convert at increasing K until the measured headroom clears the gate's margin
            from .fp16_scale_choice import choose_exponent

            progress("choosing --fp16-scale by measured headroom on the golden inputs")
            exponent, scale_choice, model = choose_exponent(
                checkpoint, kind, length, chosen,
                build=lambda k: build_export_spec(checkpoint, kind, length, layer_index, lora, chosen, k),
                convert=convert)
        spec = build_export_spec(checkpoint, kind, length, layer_index, lora, chosen, exponent)
        if scale_choice is not None:
            spec.fp16_scale = {**spec.fp16_scale, "requested": "auto", "choice": scale_choice}
        if spec.attention is not None:
            spec.attention = {**spec.attention, "choice": choice}
        progress("layout check: BC1S vs reference in FP32")
        layout = layout_check(checkpoint, spec, layer_index)
        progress("tracing and converting with coremltools (FP16 ML Program)")
        if model is None:
            model = convert(spec)
        convert_seconds = time.perf_counter() - started
        package = staging / PACKAGE_NAME
        started = time.perf_counter()
        model.save(str(package))
        save_seconds = time.perf_counter() - started
        del model
        progress("hashing the package and writing the manifest")
        content_hash = package_content_hash(package)
        index = layer_index if kind in ("mlp", "layer") else None
        manifest = manifest_for(checkpoint, spec, content_hash, index)
        write_manifest(staging, manifest)
        progress("Neural Engine headroom on the golden inputs (mil executor)")
        headroom = package_headroom(package, checkpoint, kind, length, chosen, lora)
        progress("placement: static ANE rules" + (" and MLComputePlan" if sys.platform == "darwin" else ""))
        placement, gate = placement_report(package, require_ane, set(allow),
                                           {"headroom": headroom} if headroom["measured"] else None)
        progress("writing probe.json")
        checks_passed = layout["passed"] and gate["passed"] and headroom["passed"] is not False
        report = {
            "format": "ane-engineering/probe/1",
            "kind": kind, "length": length, "layer_index": index, "lora": lora.to_json() if lora else None,
            "attention": spec.attention,
            **({"fp16_scale": spec.fp16_scale} if spec.fp16_scale is not None else {}),
            "source": checkpoint.hashes,
            "package_sha256": content_hash["sha256"],
            "layout_check": layout,
            "mil_ops": placement.pop("op_counts"),
            "export": {"convert_seconds": convert_seconds, "save_seconds": save_seconds,
                       "peak_rss_bytes": peak_rss_bytes(), "peak_rss_bytes_before_convert": rss_before,
                       "peak_rss_note": "process-wide peak (ru_maxrss), including loading the checkpoint"},
            "placement": placement,
            "ane_gate": gate,
            "headroom": headroom,
            "machine": machine(),
            "tools": manifest["tools"],
            "harness": manifest["harness"],
            "passed": bool(checks_passed),
        }
        (staging / PROBE_NAME).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report
