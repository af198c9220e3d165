"""Benchmark: reweight against a full re-export, one run, full-size body (builtin:mmbert-base-shape).

A "fine-tuned" checkpoint of the same architecture is written next to the output (the built-in weights plus small
noise, safetensors). Then, in fresh processes run back to back, (1) the probe exports that checkpoint from scratch
and (2) reweight writes its weights into the existing export of the base checkpoint. Both commands include loading
the checkpoint; the report also records reweight's own in-process time. The two packages are compared: equal
content hashes mean reweight produced exactly what a fresh export would. Goal: reweight at least 50x faster.

    python benchmarks/reweight_vs_export.py --package DIR --output benchmarks/evidence/reweight_mmbert_base_shape.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.cli import atomic_file, refuse_existing  # noqa: E402
from experiments.ane_engineering.evidence.provenance import harness_fingerprint, machine, tool_versions  # noqa: E402
from experiments.ane_engineering.export.manifest import read_manifest  # noqa: E402

GOAL_SPEEDUP = 50.0


def fine_tuned_checkpoint(source: str, directory: Path, scale: float = 1e-3) -> None:
    import torch
    from safetensors.torch import save_file

    from experiments.ane_engineering.checkpoint import load_checkpoint

    base = load_checkpoint(source)
    directory.mkdir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(base.directory / name, directory / name)
    generator = torch.Generator().manual_seed(1)
    save_file({k: v + scale * torch.randn(v.shape, generator=generator) for k, v in base.tensors.items()},
              str(directory / "model.safetensors"))


def warm_comparison(parent_dir: Path, source: str, parent: dict, scratch: Path) -> dict:
    """Both operations from an already loaded checkpoint, imports warm, in this process: the recompile
    (trace + convert + save) against the weight swap (reweight, with all its verification)."""
    from experiments.ane_engineering.checkpoint import load_checkpoint
    from experiments.ane_engineering.export.convert import convert
    from experiments.ane_engineering.export.kinds import build_export_spec
    from experiments.ane_engineering.export.reweight import reweight

    checkpoint = load_checkpoint(source)
    started = time.perf_counter()
    convert(build_export_spec(checkpoint, parent["kind"], parent["length"])).save(str(scratch / "warm.mlpackage"))
    convert_seconds = time.perf_counter() - started
    swaps = []
    for index in range(3):
        started = time.perf_counter()
        reweight(parent_dir, checkpoint, scratch / f"warm-reweight-{index}")
        swaps.append(time.perf_counter() - started)
    return {"convert_and_save_seconds": convert_seconds, "reweight_seconds": swaps,
            "speedup": convert_seconds / min(swaps), "speedup_median": convert_seconds / sorted(swaps)[1]}


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {result.stderr[-2000:]}")
    return time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True, type=Path, help="probe export of the base checkpoint's body")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    refuse_existing(args.output)
    parent = read_manifest(args.package)
    with tempfile.TemporaryDirectory(dir=args.output.parent) as scratch:
        scratch = Path(scratch)
        print("writing a fine-tuned checkpoint of the same architecture ...", file=sys.stderr, flush=True)
        fine_tuned_checkpoint(parent["source"]["source"], scratch / "fine-tuned")
        source = str(scratch / "fine-tuned")
        print("full re-export (probe) ...", file=sys.stderr, flush=True)
        export_seconds = timed(["experiments.ane_engineering.probe", "--kind", parent["kind"], "--length",
                                str(parent["length"]), "--source", source, "--output", str(scratch / "export"),
                                "--quiet"])
        print(f"  {export_seconds:.1f} s; reweight ...", file=sys.stderr, flush=True)
        reweight_seconds = timed(["experiments.ane_engineering.reweight", "--package", str(args.package), "--source",
                                  source, "--output", str(scratch / "reweight")])
        print(f"  {reweight_seconds:.1f} s", file=sys.stderr, flush=True)
        print("in one process with warm imports: convert + save vs reweight ...", file=sys.stderr, flush=True)
        warm = warm_comparison(args.package, source, parent, scratch)
        exported, reweighted = read_manifest(scratch / "export"), read_manifest(scratch / "reweight")
        report = json.loads((scratch / "reweight" / "reweight.json").read_text())
        probe = json.loads((scratch / "export" / "probe.json").read_text())
        evidence = {
            "format": "ane-engineering/evidence/reweight/1",
            "benchmark": "reweight vs full re-export of a same-architecture checkpoint, fresh processes, one run",
            "goal": {"speedup_min": GOAL_SPEEDUP},
            "parent": {"path": str(args.package), "package_sha256": parent["package"]["content_hash"]["sha256"],
                       "source": parent["source"], "kind": parent["kind"], "length": parent["length"]},
            "new_source_weights_sha256": exported["source"]["weights_sha256"],
            "export_command_seconds": export_seconds,
            "export_convert_seconds": probe["export"]["convert_seconds"],
            "reweight_command_seconds": reweight_seconds,
            "reweight_in_process_seconds": report["seconds"],
            "speedup_commands": export_seconds / reweight_seconds,
            "speedup_in_process_vs_convert": probe["export"]["convert_seconds"] / report["seconds"],
            "warm_in_one_process": warm,
            "blobs_rewritten": report["blobs_rewritten"],
            "identical_to_fresh_export": exported["package"]["content_hash"] == reweighted["package"]["content_hash"],
            "exported_package_sha256": exported["package"]["content_hash"]["sha256"],
            "reweighted_package_sha256": reweighted["package"]["content_hash"]["sha256"],
            "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint(),
        }
    evidence["meets_goal_commands"] = evidence["speedup_commands"] >= GOAL_SPEEDUP
    evidence["meets_goal_warm"] = evidence["warm_in_one_process"]["speedup_median"] >= GOAL_SPEEDUP
    with atomic_file(args.output) as temporary:
        temporary.write_text(json.dumps(evidence, indent=1) + "\n", encoding="utf-8")
    warm = evidence["warm_in_one_process"]
    print(f"commands: export {export_seconds:.1f} s vs reweight {reweight_seconds:.2f} s: x{evidence['speedup_commands']:.1f}; "
          f"warm in one process: convert+save {warm['convert_and_save_seconds']:.1f} s vs reweight "
          f"{sorted(warm['reweight_seconds'])[1]:.2f} s: x{warm['speedup_median']:.1f}; identical to a fresh export: "
          f"{evidence['identical_to_fresh_export']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
