"""`python -m experiments.ane_engineering.probe`: export one kind at one bucket length as a Core ML package, with
its manifest (hashes, I/O contract, tool versions) and placement evidence (static ANE rules everywhere; the Core ML
compute plan on macOS).

Kinds: mlp | layer (one block of the BC1S model), encoder (embedding norm to final norm), body (the whole on-device
part), baseline (the original B x L x C model exported the usual way, to show why it is a poor ANE target).
Writes DIR/model.mlpackage, DIR/manifest.json, DIR/probe.json; refuses an existing DIR and builds atomically.
Exit status: 0 passed, 1 a check failed (probe.json says which), 2 refused. The probe fails when the layout check
fails or a static ANE rule reports an error: a program error (e.g. a weight that overflows FP16) always, an op
predicted off the Neural Engine unless its type is given to --allow.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .core.buckets import DEFAULT_BUCKET
from .checkpoint import load_checkpoint
from .checkpoint.source import add_source_argument
from .core.cli import run_main
from .workflows.attention_choice import CHOICES
from .package.kinds import KINDS
from .core.staging import check_output
from .model.window_tiles import DEFAULT_TILE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", required=True, choices=KINDS, help="what to export")
    parser.add_argument("--length", type=int, default=DEFAULT_BUCKET, help=f"bucket length (default {DEFAULT_BUCKET})")
    add_source_argument(parser)
    parser.add_argument("--output", required=True, type=Path, help="new directory to create (refused if it exists)")
    parser.add_argument("--layer-index", type=int, default=0, help="encoder layer exported by --kind mlp|layer (default 0)")
    parser.add_argument("--require-ane", action="store_true",
                        help="on macOS, also fail (exit 1, passed: false) if Core ML's compute plan places any "
                             "non-constant op outside --allow off the Neural Engine (static predictions always count)")
    parser.add_argument("--allow", default="", help="comma-separated op types exempt from the placement checks")
    parser.add_argument("--lora-rank", type=int, help="export LoRA adapters as inputs with this rank (encoder/body)")
    parser.add_argument("--lora-targets", default="q,v", help="projections taking adapters: any of q,k,v (default q,v)")
    parser.add_argument("--lora-alpha", type=float, help="LoRA alpha (default: the rank, i.e. scaling 1)")
    parser.add_argument("--attention", choices=CHOICES, default="auto",
                        help="layout of sliding-window layers: dense (L x L scores, masked), windowed (query tiles "
                             "attending only to the keys their window reaches), or auto (default): dense when the "
                             "model has no sliding layer or the window covers the bucket, else whichever layout the "
                             "calibrated cost model predicts faster for this bucket (both predictions are recorded "
                             "in manifest.json and probe.json)")
    parser.add_argument("--tile", type=int, default=DEFAULT_TILE,
                        help=f"query tile of the windowed layout (default {DEFAULT_TILE}; see ANE_MATH.md)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def main(argv=None) -> int:
    from .workflows.probe_run import PROBE_NAME, run_probe

    args = build_parser().parse_args(argv)
    check_output(args.output)
    checkpoint = load_checkpoint(args.source)
    allow = {op.strip() for op in args.allow.split(",") if op.strip()}
    lora = None
    if args.lora_rank is not None:
        from .model.bc1s.lora import LoraSpec

        lora = LoraSpec(args.lora_rank, args.lora_alpha if args.lora_alpha is not None else float(args.lora_rank),
                        tuple(t.strip() for t in args.lora_targets.split(",") if t.strip()))
    report = run_probe(checkpoint, args.kind, args.length, args.output, args.layer_index, args.require_ane, allow,
                       show_progress=not args.quiet, lora=lora, attention=args.attention, tile=args.tile)
    static = report["placement"]["static"]
    attention = (report.get("attention") or {}).get("layout", "dense")
    print(f"{args.output}: {args.kind} L{args.length} ({attention} attention), layout max abs {report['layout_check']['max_abs']:.3g} "
          f"(<= {report['layout_check']['tolerance']:g}), {report['mil_ops']['non_constant']} non-constant ops, "
          f"static ANE rules: {static['violations']} violation(s), {static['warnings']} warning(s); "
          f"convert {report['export']['convert_seconds']:.1f} s; passed: {report['passed']} "
          f"(details in {args.output / PROBE_NAME})")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(run_main(main))
