"""Evidence: the FP16 range analysis of the BC1S body -- largest |activation| per site and layer against the cliff
that site faces on the Neural Engine (the matmul cliff for conv and einsum outputs, 65,504 for the rest).

Runs experiments/ane_engineering/evidence/fp16_range.py `range_report` (FP32 torch BC1SBody with recording hooks)
over the fixture questions, each on the smallest bucket that fits it, and writes one evidence JSON: per site the max
|value| over valid token columns and over all columns, the headroom cliff / max, a verdict (ok / near: headroom
< 4x / overflow), the layer-norm statistics (information only), the attention score magnitudes and the finite -1e4
mask check, the sites that need a clamp (with a suggested bound) and provenance.

    python benchmarks/fp16_range.py --source builtin:tiny --output benchmarks/evidence/fp16_range_builtin_tiny.json
    python benchmarks/fp16_range.py --source builtin:mmbert-base-shape --limit 96=12 --limit 1024=1 \\
        --output benchmarks/evidence/fp16_range_mmbert_base_shape.json

--limit LENGTH=N keeps N questions of that bucket (evenly spaced in fixture order); the others are listed as skipped
in the evidence. Refuses an existing output file. Exit status 0 whatever the verdict: this is a measurement, and the
verdict and the clamp list are in the file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from experiments.ane_engineering.checkpoint import load_checkpoint  # noqa: E402
from experiments.ane_engineering.core.buckets import BUCKET_LENGTHS  # noqa: E402
from experiments.ane_engineering.core.cli import atomic_file, run_main  # noqa: E402
from experiments.ane_engineering.core.staging import check_output
from experiments.ane_engineering.evidence import fp16_range  # noqa: E402


def parse_limits(values: list[str]) -> dict[int, int]:
    limits = {}
    for value in values:
        length, _, count = value.partition("=")
        try:
            limits[int(length)] = int(count)
        except ValueError:
            raise SystemExit(f"--limit expects LENGTH=N, got {value!r}")
    return limits


def print_summary(report: dict) -> None:
    print(f"{'group':28s} {'max|x| valid':>13s} {'max|x| all':>12s} {'headroom':>10s}  verdict", file=sys.stderr)
    for name in fp16_range.SUMMARY_GROUPS:
        group = report["groups"].get(name)
        if group is None:
            continue
        room = group["headroom_all"]
        print(f"{name:28s} {group['max_abs_valid']:13.4g} {group['max_abs_all']:12.4g} "
              f"{(room if room is not None else float('inf')):10.1f}  {group['verdict']}", file=sys.stderr)
    norms = [(n, e) for n, e in report["sites"].items() if e["kind"] == "norm_input"]
    worst_var = max(norms, key=lambda ne: ne[1]["norm"]["variance"]["all"] or float("inf"))
    worst_dev = max(norms, key=lambda ne: ne[1]["norm"]["max_abs_dev_all"] or float("inf"))
    print(f"largest norm-input variance {worst_var[1]['norm']['variance']['all']:.4g} at {worst_var[0]}; largest "
          f"|x - mean| {worst_dev[1]['norm']['max_abs_dev_all']:.4g} at {worst_dev[0]} (FP16 square overflows > 255.9)",
          file=sys.stderr)
    print(f"verdict {report['verdict']}; needs clamp: {report['needs_clamp'] or 'none'}; "
          f"{report['seconds']['total']:.1f} s", file=sys.stderr)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default="builtin:tiny")
    parser.add_argument("--lengths", default=",".join(str(n) for n in BUCKET_LENGTHS),
                        help="bucket lengths; each question runs on the smallest that fits")
    parser.add_argument("--limit", action="append", default=[], metavar="LENGTH=N",
                        help="keep N evenly spaced questions of bucket LENGTH (repeatable)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (default 1: on a shared 2-core machine two threads ran the tiny "
                             "analysis ~15x slower)")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    check_output(args.output)
    if args.threads:
        torch.set_num_threads(args.threads)
    lengths = tuple(int(n) for n in args.lengths.split(","))
    limits = parse_limits(args.limit)

    started = time.perf_counter()
    checkpoint = load_checkpoint(args.source)
    load_seconds = time.perf_counter() - started
    print(f"loaded {args.source} in {load_seconds:.1f} s; running the range analysis ...", file=sys.stderr, flush=True)
    evidence = fp16_range.range_evidence(checkpoint, lengths, limits, load_seconds)
    report = evidence["report"]
    print_summary(report)
    with atomic_file(args.output) as temporary:
        temporary.write_text(json.dumps(evidence, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
