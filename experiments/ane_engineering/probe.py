"""`python -m experiments.ane_engineering.probe`: export one kind at one bucket length as a Core ML package, with
its manifest (hashes, I/O contract, tool versions) and placement evidence (static ANE rules everywhere; the Core ML
compute plan on macOS).

Kinds: mlp | layer (one block of the BC1S model), encoder (embedding norm to final norm), body (the whole on-device
part), baseline (the original B x L x C model exported the usual way, to show why it is a poor ANE target).
Writes DIR/model.mlpackage, DIR/manifest.json, DIR/probe.json; refuses an existing DIR and builds atomically.
Exit status: 0 passed, 1 a check failed (probe.json says which), 2 refused. The probe fails when the layout check
fails or a static ANE rule reports an error: a program error (e.g. a weight that overflows FP16, or a pre-A16
width-offset slice whose measured input can reach its cliff) always, an op predicted off the Neural Engine unless its
type is given to --allow; and when the Neural Engine headroom measured on the golden inputs (body, encoder and
embedding kinds: every op's largest |output| against the cliff it faces, run/mil/ane_cliffs.json, pre-A16) is below
the gate of core/gates.py (HEADROOM_MIN), naming the op.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .checkpoint import load_checkpoint
from .checkpoint.source import add_source_argument, local_source_directory
from .core.arguments import ArgumentValueError, comma_list, integer, positive_float, refuse_unused
from .core.buckets import DEFAULT_BUCKET
from .core.cli import run_main
from .core.limits import MAX_DIMENSION, MAX_LAYERS
from .core.staging import check_output
from .model.bc1s.lora import LORA_TARGETS
from .model.bc1s.stream_scale import MAX_EXPONENT
from .model.window_tiles import DEFAULT_TILE
from .package.kinds import KINDS, SCALED_KINDS
from .workflows.attention_choice import CHOICES, has_sliding_layers

DEVICE_AXIS = f"a device tensor axis; Core ML loads none above {MAX_DIMENSION}"


def fp16_scale_argument(text: str) -> int | str | None:
    """An argparse type for --fp16-scale: 'none' (None), 'auto', or an exponent K in 0..MAX_EXPONENT."""
    if text in ("none", "auto"):
        return None if text == "none" else text
    return integer("--fp16-scale", 0, MAX_EXPONENT, "2^-K times an FP16 weight is below FP16's smallest "
                   "subnormal beyond")(text) if text.isdigit() else _refuse_scale(text)


def _refuse_scale(text: str):
    raise ArgumentValueError(f"--fp16-scale must be auto, none or an exponent 0..{MAX_EXPONENT}, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", required=True, choices=KINDS, help="what to export")
    parser.add_argument("--length", type=integer("--length", 1, MAX_DIMENSION, DEVICE_AXIS), default=DEFAULT_BUCKET,
                        help=f"bucket length (default {DEFAULT_BUCKET})")
    add_source_argument(parser)
    parser.add_argument("--output", required=True, type=Path, help="new directory to create (refused if it exists)")
    parser.add_argument("--layer-index", type=integer("--layer-index", 0, MAX_LAYERS - 1),
                        help="encoder layer exported by --kind mlp|layer (default 0)")
    parser.add_argument("--require-ane", action="store_true",
                        help="on macOS, also fail (exit 1, passed: false) if Core ML's compute plan places any "
                             "non-constant op outside --allow off the Neural Engine (static predictions always count)")
    parser.add_argument("--allow", type=comma_list("--allow"), default=[],
                        help="comma-separated op types exempt from the placement checks")
    parser.add_argument("--lora-rank", type=integer("--lora-rank", 1, MAX_DIMENSION, "layers x rank is " + DEVICE_AXIS),
                        help="export LoRA adapters as inputs with this rank (encoder/body)")
    parser.add_argument("--lora-targets", type=comma_list("--lora-targets", choices=LORA_TARGETS),
                        help="projections taking adapters: any of q,k,v (default q,v; needs --lora-rank)")
    parser.add_argument("--lora-alpha", type=positive_float("--lora-alpha"),
                        help="LoRA alpha (default: the rank, i.e. scaling 1; needs --lora-rank)")
    parser.add_argument("--attention", choices=CHOICES, default="auto",
                        help="layout of sliding-window layers: dense (L x L scores, masked), windowed (query tiles "
                             "attending only to the keys their window reaches), or auto (default): dense when the "
                             "model has no sliding layer or the window covers the bucket, else whichever layout the "
                             "calibrated cost model predicts faster for this bucket (both predictions are recorded "
                             "in manifest.json and probe.json)")
    parser.add_argument("--tile", type=integer("--tile", 1, MAX_DIMENSION, "the window mask (1, T + 2r, nT, T) is "
                                               + DEVICE_AXIS.replace("a device tensor axis", "on the device")),
                        help=f"query tile of the windowed layout (default {DEFAULT_TILE}, at most the bucket length; "
                             "--attention windowed or auto; see ANE_MATH.md)")
    parser.add_argument("--fp16-scale", type=fp16_scale_argument, default=None, metavar="auto|none|K",
                        help="rescale the residual stream by 2^-K, exactly (ANE_MATH.md section 17): the stream, every "
                             "residual-writing projection and its bias carry 2^-K, every norm reading the stream "
                             "takes epsilon * 2^-2K, so the outputs are unchanged and the values that would meet an "
                             "FP16 or Neural Engine cliff are 2^K times smaller. K: 0.."
                             f"{MAX_EXPONENT}; auto: the smallest K giving every op of the package at least the "
                             "headroom gate's margin on the golden inputs (the fixture's questions or texts that fit "
                             "the bucket), with the headroom before and after in manifest.json; none (default): "
                             "the package as without this option. Kinds encoder, embedding and body")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def main(argv=None) -> int:
    from .workflows.probe_run import PROBE_NAME, run_probe

    args = build_parser().parse_args(argv)
    check_arguments(args)
    check_output(args.output, [local_source_directory(args.source)])
    checkpoint = load_checkpoint(args.source)
    if args.tile is not None and not has_sliding_layers(checkpoint):
        raise ArgumentValueError(f"--tile is not used: {checkpoint.source} has no sliding-window layer, so every "
                                 "layout is dense; leave it out")
    lora = None
    if args.lora_rank is not None:
        from .model.bc1s.lora import LoraSpec

        layers = checkpoint.config.encoder.num_hidden_layers + (checkpoint.config.head.num_layers
                                                                if checkpoint.config.head else 0)
        if args.lora_rank * layers > MAX_DIMENSION:
            raise ArgumentValueError(f"--lora-rank {args.lora_rank} x {layers} layers exceeds {MAX_DIMENSION}: the "
                                     "adapters of every layer are stacked on one device axis, which Core ML loads "
                                     f"only up to {MAX_DIMENSION}")
        lora = LoraSpec(args.lora_rank, args.lora_alpha if args.lora_alpha is not None else float(args.lora_rank),
                        tuple(args.lora_targets or ("q", "v")))
    allow = set(args.allow)
    report = run_probe(checkpoint, args.kind, args.length, args.output, args.layer_index or 0, args.require_ane, allow,
                       show_progress=not args.quiet, lora=lora, attention=args.attention,
                       tile=DEFAULT_TILE if args.tile is None else args.tile, fp16_scale=args.fp16_scale)
    static = report["placement"]["static"]
    attention = (report.get("attention") or {}).get("layout", "dense")
    print(f"{args.output}: {args.kind} L{args.length} ({attention} attention), layout max abs "
          f"{report['layout_check']['max_abs']:.3g} (<= {report['layout_check']['tolerance']:g}), "
          f"{report['mil_ops']['non_constant']} non-constant ops, static ANE rules: {static['violations']} "
          f"violation(s), {static['warnings']} warning(s); {_headroom_line(report['headroom'])}; convert "
          f"{report['export']['convert_seconds']:.1f} s; passed: {report['passed']} (details in "
          f"{args.output / PROBE_NAME})")
    return 0 if report["passed"] else 1


def _headroom_line(headroom: dict) -> str:
    if not headroom["measured"]:
        return f"headroom not measured ({headroom['reason']})"
    low = headroom["minimum"]
    if headroom["minimum_headroom"] is None:
        return "headroom unbounded"
    return (f"minimum headroom {headroom['minimum_headroom']:.3g}x at {low['op']} ({low['type']}, {low['cliff']})"
            + ("" if headroom["passed"] else " FAILS the headroom gate"))


def check_arguments(args) -> None:
    """Flags that would do nothing with the others given are refused, not ignored."""
    refuse_unused(args, {
        **({} if args.kind in ("mlp", "layer") else {"layer_index": f"by --kind {args.kind} (only mlp and layer)"}),
        **({} if args.lora_rank is not None else {"lora_targets": "without --lora-rank",
                                                   "lora_alpha": "without --lora-rank"}),
        **({} if args.attention != "dense" else {"tile": "with --attention dense (it sets the windowed layout's "
                                                         "query tile)"}),
    })
    if args.fp16_scale is not None and args.kind not in SCALED_KINDS:
        raise ArgumentValueError(f"--fp16-scale rescales the residual stream of kinds {', '.join(SCALED_KINDS)}, "
                                 f"not --kind {args.kind}")
    if args.fp16_scale is not None and args.lora_rank is not None:
        raise ArgumentValueError("--fp16-scale with --lora-rank is not implemented (layer 0's adapters "
                                 "read the stream)")
    if args.tile is not None and args.tile > args.length:
        raise ArgumentValueError(f"--tile {args.tile} exceeds the bucket length {args.length}: a tile holds at most "
                                 "the bucket's queries")


if __name__ == "__main__":
    sys.exit(run_main(main))
