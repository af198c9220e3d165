"""Benchmark: fit the calibrated cost model (placement/calibration.py) to the reference run's three measurements.

Exports the dense body of builtin:mmbert-base-shape at each length the reference run measured (L96 and L1024; one
probe process at a time, into a temporary directory beside the output), counts each program with the static cost
model (placement/cost_model.py), and fits the per-op and per-byte terms to the reference timings
(experiments/ane_engineering/core/reference_run.json, measured on an M3 Max by the project's user), on the chip they
were measured on. Writes the fitted parameters, each point's recorded cost inputs, prediction and residual, and the
hashes of the programs and the harness. The result is a prediction model, not a measurement.

The fit belongs to the graph the reference run measured: the dense layout, with each head's scores as two half-size
einsums plus an add (the harness before its leaner layouts, e.g. git commit 48ff4e9). The script refuses a
program with another number of score contractions per softmax, so it cannot be refitted on the leaner graphs;
export the bodies with that harness (a checkout of that commit) and pass them with --package. The packages' hashes
are recorded.

    python benchmarks/cost_calibration.py --output benchmarks/evidence/cost_calibration_mmbert_base_shape.json

or with existing probe directories (body packages at L96 and L1024):

    python benchmarks/cost_calibration.py --package /tmp/body-96 --package /tmp/body-1024 --output out.json

Refuses an existing output file.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core import reference_run  # noqa: E402
from experiments.ane_engineering.core.cli import (  # noqa: E402
    run_main,
    write_evidence,
)
from experiments.ane_engineering.core.provenance import (  # noqa: E402
    harness_fingerprint,
    machine,
    tool_versions,
)
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.placement import calibration, chips  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.cost_calibration import (  # noqa: E402
    GRAPH,
    costed_bodies,
    reference_bodies,
    reference_points,
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", action="append", type=Path, default=[],
                        help="an existing dense body probe directory; repeatable (default: export them)")
    parser.add_argument("--source", default="builtin:mmbert-base-shape", help="source to export when no --package")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    check_output(args.output)

    with tempfile.TemporaryDirectory(dir=args.output.parent, prefix=".cost-calibration-") as scratch:
        costs, records = costed_bodies(reference_bodies(args.package, args.source, Path(scratch)))
    chip = reference_run.chip()
    result = calibration.fit(reference_points(costs, records), chip)
    chip_figures = chips.load_chips()[chip]
    parameters = result["parameters"]
    for point in result["points"]:
        point["terms"] = calibration.terms({"totals": point["totals"]}, chip, parameters)
    evidence = {
        "format": calibration.FORMAT,
        "benchmark": "calibrated cost model: roofline floor + per-op + per-byte terms fitted to the reference run",
        "label": calibration.LABEL,
        "model": {
            "body_ms": "floor_ms + per_op_ms * non_constant_ops + traffic_factor * (unfused_bytes - "
                       "compulsory_bytes) / ane_bandwidth",
            "request_ms": "body_ms + (input bytes + output bytes) / ane_bandwidth; no term for the host's CPU work",
            "fit": "least squares on relative residuals over the reference run's measurements",
            "parameters": len(calibration.PARAMETERS), "measurements": len(result["points"]),
            "degrees_of_freedom": len(result["points"]) - len(calibration.PARAMETERS),
            "in_sample": ("Every residual is in-sample; the measurements sit at two lengths, so the L1024 request "
                          "is matched exactly by construction and only the L96 pair tests the fit"),
            "notes": [
                ("The dense graph has the same number of non-constant ops at every bucket, so for these points the "
                "per-op term is one constant: the data tell it from the traffic term only through the L96 pair, and "
                "weakly."),
                ("Ops are counted in the exported MIL program (placement/cost_model.py). The reference run's Core ML "
                "compute plan counted the non-constant ops of its own BC1S export (core/reference_run.json, "
                "placement.bc1s_export), a different graph or count basis; per_op_ms is an effective cost per op "
                "as counted here, not a measured dispatch time."),
                ("Other chips: the same per_op_ms and traffic_factor with each chip's peak rate and bandwidth "
                "(chips.json); an assumption, only the M3 Max was measured."),
            ],
        },
        "graph": GRAPH,
        "fit": {**result,
                "derived": {"effective_activation_bandwidth_gbs": (chip_figures["ane_bandwidth_gbs"]
                                                                   / parameters["traffic_factor"]
                                                                   if parameters["traffic_factor"] else None),
                            "per_op_us": parameters["per_op_ms"] * 1e3},
                "chip_figures": {k: chip_figures[k] for k in ("peak_fp16_tflops", "ane_bandwidth_gbs",
                                                              "fp16_basis", "bandwidth_source")}},
        "reference_run": {"citation": reference_run.citation(),
                          "measurements": reference_run.load()["timings"]["measurements"]},
        "provenance": {"packages": records, "machine": machine(), "tools": tool_versions(),
                       "harness": harness_fingerprint()},
    }
    for point in result["points"]:
        print(f"{point['id']}: measured {point['measured_ms']:.3f} ms, predicted {point['predicted_ms']:.3f} ms "
              f"({point['relative_residual']:+.1%})", file=sys.stderr)
    print(f"per_op_ms {parameters['per_op_ms']:.3g}, traffic_factor {parameters['traffic_factor']:.3g}",
          file=sys.stderr)
    write_evidence(args.output, evidence)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
