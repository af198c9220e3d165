"""Public latencies (public_latencies.json): every usable public Neural Engine timing of a transformer encoder, the
public GPU (MLX) curves used for routing, device-state observations and sourced priors, read through a schema.

A series shares its source, chip, OS, model, graph, scope and statistic; `points()` expands it into one record per
timing with an id (`<series>-L<length>`, plus the scope where a series has two at one length). The reference run's
figures keep their one home, core/reference_run.json: a point says which of its measurements it is
(`from_reference_run`) and the figure is read from there. `counted_as` names the program this harness counts for a
point (placement/chip_fit.py); a point whose architecture the harness cannot export has none and is not predicted.
"""

from __future__ import annotations

from pathlib import Path

from ..core import reference_run
from ..core.errors import HarnessError
from ..core.json_documents import NON_EMPTY_STRING, POSITIVE_INTEGER, POSITIVE_NUMBER, array_of, open_object, read_json
from .chips import CHIP_KEY

PATH = Path(__file__).resolve().parent / "public_latencies.json"
FORMAT = "ane-engineering/public-latencies/2"
SCOPES = ("body", "request")
MASKED_BC1S = "masked-bc1s"  # this harness's graph kind: BC1S with additive masks

_CHIP = {"type": "string", "pattern": CHIP_KEY}
_COMMIT = {"type": "string", "pattern": "^[0-9a-f]{40}$"}
SOURCE = {"anyOf": [open_object({"repo": NON_EMPTY_STRING, "path": NON_EMPTY_STRING, "commit": _COMMIT,
                                 "url": NON_EMPTY_STRING, "what": NON_EMPTY_STRING}),
                    open_object({"file": NON_EMPTY_STRING, "what": NON_EMPTY_STRING})]}
COUNTED_AS = open_object({"model": NON_EMPTY_STRING, "kind": NON_EMPTY_STRING, "layout": NON_EMPTY_STRING})
GRAPH = open_object({"kind": NON_EMPTY_STRING, "name": NON_EMPTY_STRING},
                    {"plan_non_constant_ops": POSITIVE_INTEGER, "regions": POSITIVE_INTEGER, "about": NON_EMPTY_STRING})
POINT = open_object({"length": POSITIVE_INTEGER},
                    {"measured_ms": POSITIVE_NUMBER, "figure": NON_EMPTY_STRING, "from_reference_run": NON_EMPTY_STRING,
                     "scope": {"enum": list(SCOPES)}, "statistic": NON_EMPTY_STRING})
SERIES = open_object({"id": NON_EMPTY_STRING, "source": NON_EMPTY_STRING, "chip": _CHIP, "os": NON_EMPTY_STRING,
                      "model": NON_EMPTY_STRING, "compute_units": NON_EMPTY_STRING, "graph": GRAPH,
                      "counted_as": {"anyOf": [COUNTED_AS, {"type": "null"}]}, "points": array_of(POINT, 1)},
                     {"scope": {"enum": list(SCOPES)}, "statistic": NON_EMPTY_STRING, "state": NON_EMPTY_STRING,
                      "fit": {"type": "boolean"}, "why_not_fitted": NON_EMPTY_STRING,
                      "why_not_counted": NON_EMPTY_STRING})
CURVE_POINT = open_object({"length": POSITIVE_INTEGER, "figure": NON_EMPTY_STRING},
                          {"ms": POSITIVE_NUMBER, "from_reference_run": NON_EMPTY_STRING})
CURVE = open_object({"id": NON_EMPTY_STRING, "model": NON_EMPTY_STRING, "chip": _CHIP, "source": NON_EMPTY_STRING,
                     "framework": NON_EMPTY_STRING, "statistic": NON_EMPTY_STRING, "points": array_of(CURVE_POINT, 1)})
SCHEMA = open_object({"format": {"const": FORMAT}, "configs": {"type": "object"},
                      "sources": {"type": "object", "additionalProperties": SOURCE},
                      "series": array_of(SERIES, 1), "gpu_curves": array_of(CURVE, 1),
                      "observations": {"type": "array"}, "priors": {"type": "object"},
                      "left_out": array_of(open_object({"what": NON_EMPTY_STRING, "why": NON_EMPTY_STRING}))})


class PublicLatencyError(HarnessError):
    """A malformed public-latencies file, or a curve it does not have."""


def _reference_figure(name: str, where: str) -> float:
    timings = reference_run.load()["timings"]
    if name == "mlx":
        return timings["mlx"]["p50_ms"]
    by_id = {m["id"]: m for m in timings["measurements"]}
    if name not in by_id:
        raise PublicLatencyError(f"{where}: no reference-run measurement {name!r}")
    return by_id[name]["p50_ms"]


def _expand(series: dict, where: str) -> list[dict]:
    """The records of one series, each with every series field, its id and its figure resolved."""
    shared = {k: v for k, v in series.items() if k not in ("points", "id")}
    lengths = [p["length"] for p in series["points"]]
    records = []
    for point in series["points"]:
        record = {**shared, **point, "series": series["id"]}
        if "scope" not in record or "statistic" not in record:
            raise PublicLatencyError(f"{where}: point L{point['length']} of {series['id']} has no scope or statistic")
        if ("measured_ms" in point) == ("from_reference_run" in point):
            raise PublicLatencyError(f"{where}: point L{point['length']} of {series['id']} needs exactly one of "
                                     "measured_ms, from_reference_run")
        if "from_reference_run" in point:
            record["measured_ms"] = _reference_figure(point["from_reference_run"], where)
            record["figure"] = f"timings.measurements.{point['from_reference_run']}.p50_ms"
        suffix = f"-{record['scope']}" if lengths.count(point["length"]) > 1 else ""
        record["id"] = f"{series['id']}-L{point['length']}{suffix}"
        record["fit"] = series.get("fit", True) and record["counted_as"] is not None
        records.append(record)
    return records


def load(path: Path | str = PATH) -> dict:
    """The document with `points` (every series expanded) and every GPU curve's figures resolved."""
    document = read_json(path, SCHEMA, PublicLatencyError)
    points = [record for series in document["series"] for record in _expand(series, str(path))]
    ids = [p["id"] for p in points] + [c["id"] for c in document["gpu_curves"]]
    if len(ids) != len(set(ids)):
        raise PublicLatencyError(f"{path}: duplicate ids")
    for record in points:
        if record["source"] not in document["sources"]:
            raise PublicLatencyError(f"{path}: point {record['id']} names unknown source {record['source']!r}")
        model = (record["counted_as"] or {}).get("model")
        if model is not None and model not in document["configs"] and model_source(model) is None:
            raise PublicLatencyError(f"{path}: point {record['id']} is counted as unknown model {model!r}")
        if record["counted_as"] is None and "why_not_counted" not in record:
            raise PublicLatencyError(f"{path}: point {record['id']} is not counted and does not say why")
    for curve in document["gpu_curves"]:
        for point in curve["points"]:
            if ("ms" in point) == ("from_reference_run" in point):
                raise PublicLatencyError(f"{path}: GPU point {curve['id']} L{point['length']} needs exactly one of "
                                         "ms, from_reference_run")
            if "from_reference_run" in point:  # the figure's one home is core/reference_run.json
                point["ms"] = _reference_figure(point["from_reference_run"], str(path))
    document["points"] = points
    return document


def model_source(model: str, document: dict | None = None) -> str | None:
    """The checkpoint source a counted model name stands for: a named config of the file counts as `config:` (None
    here), `mmbert-base-shape` and the other built-in shapes as `builtin:<name>`."""
    from ..checkpoint.builtin import BUILTINS

    if model in (document or {}).get("configs", {}):
        return None
    return f"builtin:{model}" if model in BUILTINS else None


def points(document: dict | None = None) -> list[dict]:
    return (document or load())["points"]


def gpu_curve(model: str, chip: str, document: dict | None = None) -> list[tuple[int, float]]:
    """[(length, ms)] of the public GPU (MLX) curve of `model` on `chip` (the series with the most points when
    several sources timed it), by length; refuses an unknown pair naming the known ones."""
    document = document or load()
    curves = [c for c in document["gpu_curves"] if c["model"] == model and c["chip"] == chip]
    if not curves:
        known = sorted({(c["model"], c["chip"]) for c in document["gpu_curves"]})
        raise PublicLatencyError(f"no GPU curve for {model} on {chip}; known: "
                                 f"{', '.join(f'{m} on {c}' for m, c in known)}")
    curve = max(curves, key=lambda c: len(c["points"]))
    return sorted((p["length"], p["ms"]) for p in curve["points"])


def gpu_curves(document: dict | None = None) -> list[dict]:
    return (document or load())["gpu_curves"]


mlx_curve = gpu_curve  # the name run/agent.py uses: every public GPU curve here is MLX


DIMENSIONS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def model_dims(model: str, document: dict | None = None) -> dict:
    """The encoder dimensions of a counted model (a named config, or a built-in shape)."""
    from ..checkpoint.builtin import BUILTINS

    document = document or load()
    raw = document["configs"][model]["config"] if model in document["configs"] else BUILTINS[model]
    return {name: raw[name] for name in DIMENSIONS}
