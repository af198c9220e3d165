"""public_latencies.json: every public point carries what the issue asks of it, with its source at a commit, and the
loader refuses a file that does not."""

from __future__ import annotations

import json

import pytest

from experiments.ane_engineering.core import reference_run
from experiments.ane_engineering.placement import public_latencies
from experiments.ane_engineering.placement.chips import load_chips

FIELDS = ("id", "chip", "os", "model", "length", "scope", "statistic", "compute_units", "graph", "source", "figure",
          "measured_ms")


@pytest.fixture(scope="module")
def document():
    return public_latencies.load()


def test_every_point_states_shape_chip_os_length_scope_statistic_units_graph_and_source(document):
    chips = load_chips()
    assert len(document["points"]) >= 50
    for point in document["points"]:
        missing = [f for f in FIELDS if point.get(f) in (None, "")]
        assert not missing, (point["id"], missing)
        assert point["chip"] in chips and point["scope"] in public_latencies.SCOPES
        source = document["sources"][point["source"]]
        assert "file" in source or (len(source["commit"]) == 40 and source["commit"] in source["url"])
        assert point["counted_as"] is not None or point["why_not_counted"]
    kinds = {p["graph"]["kind"] for p in document["points"]}
    assert public_latencies.MASKED_BC1S in kinds and len(kinds) > 1  # graphs unlike ours are kept, labelled
    assert {p["chip"] for p in document["points"] if p["graph"]["kind"] == public_latencies.MASKED_BC1S} == {
        "m3-max", "m4", "m4-pro", "m4-max"}


def test_reference_run_figures_are_read_from_their_one_home(document):
    measured = {m["id"]: m["p50_ms"] for m in reference_run.load()["timings"]["measurements"]}
    reference = [p for p in document["points"] if p["source"] == "reference-run"]
    assert {p["measured_ms"] for p in reference} == set(measured.values())
    raw = json.loads(public_latencies.PATH.read_text())
    typed = {p.get("measured_ms") for s in raw["series"] for p in s["points"]}
    assert not typed & set(measured.values())  # never copied into this file
    assert public_latencies.gpu_curve("mmbert-base-shape", "m3-max") == [
        (1024, reference_run.load()["timings"]["mlx"]["p50_ms"])]


def test_gpu_curves_pick_the_longest_series_and_refuse_an_unknown_pair(document):
    curve = public_latencies.gpu_curve("mmbert-base-shape", "m4-max", document)
    assert [length for length, _ in curve] == sorted(length for length, _ in curve) and len(curve) == 9
    with pytest.raises(public_latencies.PublicLatencyError, match="known: "):
        public_latencies.gpu_curve("mmbert-base-shape", "m1", document)


@pytest.mark.parametrize("damage, message", [
    (lambda d: d["series"][1].pop("counted_as"), "counted_as"),
    (lambda d: d["series"][1].update(counted_as=None), "does not say why"),
    (lambda d: d["series"][1].update(source="nowhere"), "unknown source"),
    (lambda d: d["series"][1]["points"][0].update(from_reference_run="L96-body"), "exactly one of"),
    (lambda d: d["series"].append(d["series"][1]), "duplicate ids"),
    (lambda d: d["series"][1].update(counted_as={"model": "nothing", "kind": "body", "layout": "dense"}),
     "unknown model"),
])
def test_a_malformed_file_is_refused(tmp_path, damage, message):
    raw = json.loads(public_latencies.PATH.read_text())
    damage(raw)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(public_latencies.PublicLatencyError, match=message):
        public_latencies.load(path)
