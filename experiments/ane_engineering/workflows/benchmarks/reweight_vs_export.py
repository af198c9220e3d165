"""Benchmark evidence: reweight against a full re-export of a same-architecture checkpoint, one run.

A "fine-tuned" checkpoint (the parent's source weights plus small seeded noise, safetensors) is written into the
scratch directory. Then, back to back:

1. as commands, in fresh processes: `probe` exports that checkpoint from scratch, and `reweight` writes its weights
   into the parent package. Both pay the interpreter start, the torch/coremltools imports and the SHA256 of the
   checkpoint, which bound this ratio;
2. in this process with imports warm and the checkpoint loaded once (a training loop's view, the one Orion
   reports its recompile speedup for): the recompile alone (trace + convert + save), the whole probe (`run_probe`:
   layout check, convert, save, hash, manifest, placement), and REPEATS reweights with all their verification.

The goal (at least 50x) is judged on the strictest in-process pair: convert + save against the median reweight.
The packages from the export command and the reweight command are compared: equal content hashes mean reweight
produced exactly what a fresh export would.
"""

from __future__ import annotations

import gc
import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Callable

from ...core.provenance import harness_fingerprint, machine, portable_path, tool_versions
from ...package.manifest import read_manifest
from .steps import command_argv, run_command

FORMAT = "ane-engineering/evidence/reweight/2"
GOAL_SPEEDUP = 50.0
REPEATS = 5
NOISE_SCALE, NOISE_SEED = 1e-3, 1


def fine_tuned_checkpoint(source: str, directory: Path, scale: float = NOISE_SCALE) -> Path:
    """`source`'s config and tokenizer with its weights plus scale * N(0, 1) noise (seeded), in a new directory."""
    import torch
    from safetensors.torch import save_file

    from ...checkpoint import load_checkpoint

    base = load_checkpoint(source)
    directory.mkdir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(base.directory / name, directory / name)
    generator = torch.Generator().manual_seed(NOISE_SEED)
    save_file({k: v + scale * torch.randn(v.shape, generator=generator) for k, v in base.tensors.items()},
              str(directory / "model.safetensors"))
    return directory


def _content_sha256(directory: Path) -> str:
    return read_manifest(directory)["package"]["content_hash"]["sha256"]


def warm_comparison(parent_dir: Path, source: str, parent: dict, scratch: Path) -> dict:
    """In this process, imports warm, from one loaded checkpoint: the recompile (trace + convert + save), the whole
    probe, and REPEATS weight swaps (reweight, with all its verification), each into a new directory."""
    import coremltools  # noqa: F401  (warm: neither side pays the import)

    from ...checkpoint import load_checkpoint
    from ...package.convert import convert
    from ...package.kinds import build_export_spec
    from ...package.reweight import reweight
    from ..probe_run import run_probe

    checkpoint = load_checkpoint(source)
    # Each export leaves a large cyclic garbage graph (traced graph, MIL program) whose collection is the export's
    # cost, so it is timed with it; left behind, it would be collected inside the next timed call.
    gc.collect()
    started = time.perf_counter()
    convert(build_export_spec(checkpoint, parent["kind"], parent["length"])).save(str(scratch / "warm.mlpackage"))
    gc.collect()
    convert_seconds = time.perf_counter() - started
    started = time.perf_counter()
    run_probe(checkpoint, parent["kind"], parent["length"], scratch / "warm-probe", show_progress=False)
    gc.collect()
    probe_seconds = time.perf_counter() - started
    swaps = []
    for index in range(REPEATS):
        started = time.perf_counter()
        reweight(parent_dir, checkpoint, scratch / f"warm-reweight-{index}")
        swaps.append(time.perf_counter() - started)
    median = statistics.median(swaps)
    probe_hash = _content_sha256(scratch / "warm-probe")
    identical = all(_content_sha256(scratch / f"warm-reweight-{index}") == probe_hash for index in range(REPEATS))
    return {"reweights_identical_to_probe": identical, "convert_and_save_seconds": convert_seconds,
            "probe_seconds": probe_seconds, "reweight_seconds": swaps, "reweight_median_seconds": median,
            "speedup_vs_convert_and_save": convert_seconds / median, "speedup_vs_probe": probe_seconds / median}


def reweight_evidence(package: Path, scratch: Path, evidence_dir: Path,
                      progress: Callable[[str], None] = lambda line: None) -> dict:
    """The evidence document of reweighting the probe export `package` against re-exporting; working files go into
    `scratch`, paths are recorded relative to `evidence_dir` (where the evidence file will be written)."""
    parent = read_manifest(package)
    progress("writing a fine-tuned checkpoint of the same architecture ...")
    source = str(fine_tuned_checkpoint(parent["source"]["source"], scratch / "fine-tuned"))
    progress("full re-export (probe) ...")
    _, export_seconds = run_command(command_argv("probe", "--kind", parent["kind"], "--length", str(parent["length"]),
                                                 "--source", source, "--output", str(scratch / "export"), "--quiet"),
                                    "the re-export (probe)")
    progress(f"  {export_seconds:.1f} s; reweight ...")
    _, reweight_seconds = run_command(command_argv("reweight", "--package", str(package), "--source", source,
                                                   "--output", str(scratch / "reweight")), "reweight")
    progress(f"  {reweight_seconds:.1f} s")
    progress(f"in one process, imports warm: convert + save, probe, then reweight x{REPEATS} ...")
    warm = warm_comparison(package, source, parent, scratch)
    exported, reweighted = read_manifest(scratch / "export"), read_manifest(scratch / "reweight")
    report = json.loads((scratch / "reweight" / "reweight.json").read_text(encoding="utf-8"))
    probe = json.loads((scratch / "export" / "probe.json").read_text(encoding="utf-8"))
    return {
        "format": FORMAT,
        "benchmark": "reweight vs full re-export of a same-architecture checkpoint, one run: fresh processes, "
                     "then one warm process",
        "goal": {"speedup_min": GOAL_SPEEDUP, "judged_on": "in one process: convert + save vs median reweight"},
        "parent": {"path": portable_path(package, evidence_dir),
                   "package_sha256": parent["package"]["content_hash"]["sha256"],
                   "source": parent["source"], "kind": parent["kind"], "length": parent["length"]},
        "new_source_weights_sha256": exported["source"]["weights_sha256"],
        "export_command_seconds": export_seconds,
        "export_convert_seconds": probe["export"]["convert_seconds"],
        "reweight_command_seconds": reweight_seconds,
        "reweight_in_process_seconds": report["seconds"],
        "speedup_commands": export_seconds / reweight_seconds,
        "warm_in_one_process": warm,
        "blobs_rewritten": report["blobs_rewritten"],
        "identical_to_fresh_export": exported["package"]["content_hash"] == reweighted["package"]["content_hash"],
        "exported_package_sha256": exported["package"]["content_hash"]["sha256"],
        "reweighted_package_sha256": reweighted["package"]["content_hash"]["sha256"],
        "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint(),
        "meets_goal": warm["speedup_vs_convert_and_save"] >= GOAL_SPEEDUP,
    }


def summary(evidence: dict) -> str:
    """One line of the evidence's figures, for the command's output."""
    warm = evidence["warm_in_one_process"]
    return (f"commands: export {evidence['export_command_seconds']:.1f} s vs reweight "
            f"{evidence['reweight_command_seconds']:.2f} s: x{evidence['speedup_commands']:.1f}; one process: "
            f"convert+save {warm['convert_and_save_seconds']:.1f} s, probe {warm['probe_seconds']:.1f} s vs reweight "
            f"{warm['reweight_median_seconds']:.3f} s (median of {REPEATS}): "
            f"x{warm['speedup_vs_convert_and_save']:.1f} / x{warm['speedup_vs_probe']:.1f}; identical to a fresh "
            f"export: {evidence['identical_to_fresh_export']}; goal met: {evidence['meets_goal']}")
