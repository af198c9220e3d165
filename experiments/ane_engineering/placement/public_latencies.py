"""Public latencies (public_latencies.json): out-of-sample Neural Engine checks and MLX/GPU curves, read through a
schema. Kept apart from the calibration points (the reference run's measurements, core/reference_run.json): the
model is never fitted to a figure here. `ane_checks()` are the points benchmarks/predict_check.py predicts;
`mlx_curve(model, chip)` the GPU side of a crossover (crossover.py)."""

from __future__ import annotations

from pathlib import Path

from ..core import reference_run
from ..core.errors import HarnessError
from ..core.json_documents import NON_EMPTY_STRING, POSITIVE_INTEGER, POSITIVE_NUMBER, array_of, open_object, read_json
from .chips import CHIP_KEY

PATH = Path(__file__).resolve().parent / "public_latencies.json"
FORMAT = "ane-engineering/public-latencies/1"
SOURCE = open_object({"figure": NON_EMPTY_STRING})
CHECK = open_object({"id": NON_EMPTY_STRING, "chip": {"type": "string", "pattern": CHIP_KEY}, "os": NON_EMPTY_STRING,
                     "length": POSITIVE_INTEGER, "measured_ms": POSITIVE_NUMBER, "statistic": NON_EMPTY_STRING,
                     "scope": {"enum": ["body", "full_path"]}, "kind": NON_EMPTY_STRING, "config": NON_EMPTY_STRING,
                     "what": NON_EMPTY_STRING, "graph": NON_EMPTY_STRING,
                     "source": open_object({"repo": NON_EMPTY_STRING, "path": NON_EMPTY_STRING,
                                            "commit": {"type": "string", "pattern": "^[0-9a-f]{40}$"},
                                            "figure": NON_EMPTY_STRING, "url": NON_EMPTY_STRING})})
MLX = open_object({"id": NON_EMPTY_STRING, "model": NON_EMPTY_STRING, "chip": {"type": "string", "pattern": CHIP_KEY},
                   "length": POSITIVE_INTEGER, "what": NON_EMPTY_STRING, "source": SOURCE},
                  {"ms": POSITIVE_NUMBER, "ms_from": {"enum": ["reference_run"]}})
SCHEMA = open_object({"format": {"const": FORMAT}, "configs": {"type": "object"},
                      "ane_checks": array_of(CHECK, 1), "mlx_curves": array_of(MLX, 1)})


class PublicLatencyError(HarnessError):
    """A malformed public-latencies file, or a curve it does not have."""


def load(path: Path | str = PATH) -> dict:
    document = read_json(path, SCHEMA, PublicLatencyError)
    ids = [p["id"] for p in document["ane_checks"] + document["mlx_curves"]]
    if len(ids) != len(set(ids)):
        raise PublicLatencyError(f"{path}: duplicate ids")
    for point in document["ane_checks"]:
        if point["config"] not in document["configs"]:
            raise PublicLatencyError(f"{path}: check {point['id']} names unknown config {point['config']!r}")
    for point in document["mlx_curves"]:
        if ("ms" in point) == ("ms_from" in point):
            raise PublicLatencyError(f"{path}: MLX point {point['id']} needs exactly one of ms, ms_from")
        if point.get("ms_from") == "reference_run":  # the figure's one home is core/reference_run.json
            point["ms"] = reference_run.load()["timings"]["mlx"]["p50_ms"]
    return document


def ane_checks(document: dict | None = None) -> list[dict]:
    return (document or load())["ane_checks"]


def mlx_curve(model: str, chip: str, document: dict | None = None) -> list[tuple[int, float]]:
    """[(length, ms)] of the public MLX points of `model` on `chip`, by length; refuses an unknown pair."""
    document = document or load()
    points = sorted((p["length"], p["ms"]) for p in document["mlx_curves"] if p["model"] == model and p["chip"] == chip)
    if not points:
        known = sorted({(p["model"], p["chip"]) for p in document["mlx_curves"]})
        raise PublicLatencyError(f"no MLX curve for {model} on {chip}; known: "
                                 f"{', '.join(f'{m} on {c}' for m, c in known)}")
    return points
