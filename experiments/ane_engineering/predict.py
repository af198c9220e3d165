"""`python -m experiments.ane_engineering.predict`: predicted Neural Engine latency of a package, per chip, with a band.

Either a package on disk:

    python -m experiments.ane_engineering.predict --package DIR [--chip m4-max --chip m1 ...]

or the program an export would produce (converted here exactly as `probe` converts it, nothing written):

    python -m experiments.ane_engineering.predict --source builtin:mmbert-base-shape --kind body --length 512 \\
        [--attention dense|windowed|reference-run|auto] --chip m3-max [--json]
    python -m experiments.ane_engineering.predict --chip m4 --config path/to/config.json --length 256 --json

--config takes a Hugging Face config.json (BERT or ModernBERT family, or a named config of
placement/public_latencies.json) and counts the program a checkpoint of that config would export, with weights drawn
at random (a program's cost does not depend on weight values): the body when the config has a decision head, else
the encoder.

Per chip (placement/chips.json; all chips when no --chip): predicted_body_ms (the device call) and
predicted_request_ms (plus the fitted host term of a request), each term, the band (leave-one-chip-out errors of the
cross-chip fit on public timings) and the device-state band (burst / sustained), the ANE regions the static placement
splits the program into (each crossing charged, the split named), the nearest public points with their fitted /
held-out status, and, where a public GPU (MLX) curve of this model exists on the chip, the route: ANE or GPU at this
length. The model is fitted across chips (benchmarks/evidence/latency_fit.json): a prediction, not a measurement;
`--json` also lists what it does not see. An unknown chip is refused with the list of known ones (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .checkpoint.source import source_argument
from .core.arguments import ArgumentValueError, integer
from .core.cli import run_main
from .core.limits import MAX_DIMENSION
from .model.window_tiles import DEFAULT_TILE
from .package.kinds import BC1S_KINDS
from .placement import predict
from .workflows.predict_export import ATTENTION_CHOICES, package_cost, source_cost


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.predict", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--package", type=Path, help="a probe directory (model.mlpackage + manifest.json) or .mlpackage")
    what.add_argument("--source", type=source_argument,
                      help="a checkpoint (local directory, builtin:..., a named source) to count the export of")
    what.add_argument("--config", help="a config.json path or a named config (e.g. modernbert-large-shape): the "
                                       "export of a checkpoint of that config, weights drawn at random")
    parser.add_argument("--kind", choices=BC1S_KINDS, help="kind to export (with --source / --config; default body, or "
                                                            "encoder for a config without a decision head)")
    parser.add_argument("--length", type=integer("--length", 1, MAX_DIMENSION, "a device tensor axis"),
                        help="bucket length to export (with --source / --config; default 96)")
    parser.add_argument("--attention", choices=ATTENTION_CHOICES,
                        help="layout of the export (default auto, as probe): dense, windowed, reference-run (the "
                             "masked dense graph with split RoPE the calibration was fitted on) or auto")
    parser.add_argument("--tile", type=integer("--tile", 1, MAX_DIMENSION), help="query tile of the windowed layout")
    parser.add_argument("--chip", action="append", default=[],
                        help="chip key (m1, m3-max, m4-max, ...); repeatable; default every chip of the table")
    parser.add_argument("--json", action="store_true", help="print the whole prediction as JSON")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    chips = predict.resolve_chips(args.chip)  # an unknown chip is refused before anything is converted
    if args.package is not None:
        unused = [flag for flag, value in (("--kind", args.kind), ("--length", args.length),
                                           ("--attention", args.attention), ("--tile", args.tile)) if value is not None]
        if unused:
            raise ArgumentValueError(f"{', '.join(unused)} describe an export; a --package is counted as it is")
        cost, program = package_cost(args.package)
    else:
        if args.tile is not None and args.attention not in ("windowed", "auto", None):
            raise ArgumentValueError(f"--tile sets the windowed layout's query tile; not used with --attention "
                                     f"{args.attention}")
        cost, program = source_cost(args.source, args.config, args.kind, args.length or 96,
                                    args.attention or "auto", DEFAULT_TILE if args.tile is None else args.tile)
    document = predict.report(cost, program, chips, dims=program.get("model_dims"))
    if args.json:
        print(json.dumps(document, indent=1))
        return 0
    p = document["program"]
    print(f"{p.get('source') or p.get('package')}: {p.get('kind')} L{p.get('length')}, {p['non_constant_ops']} ops, "
          f"{p['gflop']:.2f} GFLOP, {p['unfused_mb']:.1f} MB unfused ({document['label']})")
    regions = document["regions"]
    if regions["regions"] != 1 or regions["islands"]:
        where = "; ".join(f"{part['ops']} op(s) {', '.join(part['off_ane_types'])} from {part['first']}"
                          for part in regions["split"]) or "as stated"
        print(f"  split into {regions['regions']} ANE regions, {regions['crossings']} crossings charged: {where}")
    for key, row in document["chips"].items():
        low, high = row["band"]["body_ms"]
        note = " (figures assumed)" if row["assumed"] else ""
        routed = row["route"]
        route = f"  -> {routed['route']} (GPU {routed['gpu_ms']:.2f} ms)" if routed else ""
        print(f"  {key:8s} body {row['predicted_body_ms']:8.3f} ms [{low:.3f}, {high:.3f}]  request "
              f"{row['predicted_request_ms']:8.3f} ms{route}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
