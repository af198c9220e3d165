"""predict: per-chip predictions of the cross-chip fit with its bands, regions charged, the nearest public points and
their status, the GPU route, the chip table, the reference-run layout, and the crossover rule."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from experiments.ane_engineering import predict as command
from experiments.ane_engineering.core.cli import run_main
from experiments.ane_engineering.placement import crossover, predict, public_latencies
from experiments.ane_engineering.placement.chips import chip_key, load_chips


@pytest.fixture(scope="module")
def fit():
    return predict.load_fit()


def reference_cost(fit, length: int) -> dict:
    """The counts of the reference-run-layout mmBERT body at `length` (the committed latency counts), as a cost."""
    from experiments.ane_engineering.placement import chip_fit
    from experiments.ane_engineering.workflows.benchmarks.latency_fit import load_counts

    program = chip_fit.program_at(load_counts()["programs"]["mmbert-base-shape|body|reference-run"], length)
    totals = {f: program[f] for f in chip_fit.FIELDS if f != "lxl_bytes"}
    return {"length": length, "totals": {**totals, "io_bytes": {"inputs": 0, "outputs": 0}},
            "lxl": {"tensor_ops": {"bytes": program["lxl_bytes"]},
                    "blocks_by_mask": {"all": {"blocks": program["attention_blocks"]}}},
            "regions": program["regions"]}


def test_every_chip_of_the_table_gets_a_prediction_with_its_terms_bands_and_assumptions(fit):
    rows = predict.predict_cost(reference_cost(fit, 96), None, fit, heads=12)
    assert list(rows) == list(load_chips())
    for key, row in rows.items():
        assert row["predicted_body_ms"] == pytest.approx(sum(v for t, v in row["terms_ms"].items() if t != "host"))
        assert row["predicted_request_ms"] == pytest.approx(row["predicted_body_ms"] + row["terms_ms"]["host"])
        low, high = row["band"]["body_ms"]
        assert low <= row["predicted_body_ms"] <= high and low < high
        state = row["device_state"]["body_ms"]
        assert state["burst_ms"] < row["predicted_body_ms"] < state["sustained_ms"]
        assert row["chip_figures"]["peak_is_assumed"] == (load_chips()[key]["peak_fp16_tflops"] is None)
        assert any("no public point" in a for a in row["assumed"]) == (key not in fit["chips"])
    assert rows["m5"]["chip_figures"]["peak_is_assumed"] and "peak_fp16_tflops" in rows["m5"]["assumed"][0]
    assert not any("sram" in a for a in rows["m4"]["assumed"]) and any("sram" in a for a in rows["m1"]["assumed"])
    # a faster memory system predicts a faster call: the M3 Max (120 GB/s) beats the M3 (63 GB/s) at equal peak
    assert rows["m3-max"]["predicted_body_ms"] < rows["m3"]["predicted_body_ms"]


def test_each_crossing_of_a_split_program_is_charged(fit):
    whole = reference_cost(fit, 128)
    split = {**whole, "regions": {**whole["regions"], "regions": 13, "islands": 12, "crossings": 24}}
    a = predict.predict_cost(whole, ["m4"], fit, heads=12)["m4"]
    b = predict.predict_cost(split, ["m4"], fit, heads=12)["m4"]
    per_crossing = fit["fit"]["coefficients"]["crossing"]
    assert per_crossing > 0
    assert b["predicted_body_ms"] - a["predicted_body_ms"] == pytest.approx(24 * per_crossing)
    assert predict.program_of({"totals": whole["totals"]})["regions"]["label"].startswith("not counted")


def test_nearest_points_carry_their_fitted_and_held_out_status(fit):
    nearest = predict.nearest_points(fit, "m4-max", "mmbert-base-shape", 100)
    assert len(nearest) == predict.NEAREST and all(p["chip"] == "m4-max" for p in nearest)
    assert {p["length"] for p in nearest} <= {96, 128} and all(p["status"] == "fitted" for p in nearest)
    assert all("never saw m4-max" in p["held_out"] and isinstance(p["held_out_error"], float) for p in nearest)


def test_route_follows_the_public_gpu_curve_of_the_same_model(fit):
    document = public_latencies.load()
    dims = public_latencies.model_dims("mmbert-base-shape", document)
    assert predict.matching_model(dims, document) == "mmbert-base-shape"
    assert predict.matching_model({**dims, "hidden_size": 7}, document) is None
    short = predict.predict_cost(reference_cost(fit, 96), ["m4-max"], fit, heads=12)["m4-max"]
    long = predict.predict_cost(reference_cost(fit, 1024), ["m4-max"], fit, heads=12)["m4-max"]
    # the public M4 Max timings route L96 to the ANE (3.85 against 6.36 ms) and L1024 to MLX (82.74 against 29.11)
    assert predict.route(short, "mmbert-base-shape", 96, document)["route"] == "ane"
    assert predict.route(long, "mmbert-base-shape", 1024, document)["route"] == "gpu"
    assert predict.route(short, "mmbert-base-shape", 96, document)["gpu_ms"] == pytest.approx(6.36)
    assert predict.route(short, None, 96, document) is None


def test_unknown_chip_is_refused_naming_the_known_ones(capsys):
    with pytest.raises(predict.PredictionError, match="known chips: m1, m1-pro"):
        predict.resolve_chips(["m9"])
    assert predict.resolve_chips(["M3 Max", "m4-max"]) == ["m3-max", "m4-max"]
    assert run_main(command.main, ["--source", "builtin:tiny", "--chip", "m9"]) == 2  # before any conversion
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown chip 'm9'") and "m5-max" in err[0]


def test_a_missing_or_malformed_fit_is_refused(tmp_path):
    with pytest.raises(predict.PredictionError, match="no latency-fit evidence"):
        predict.load_fit(tmp_path / "absent.json")
    document = json.loads(predict.FIT_PATH.read_text())
    document["fit"]["coefficients"]["weights"] = -1.0
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(predict.PredictionError):
        predict.load_fit(path)


def test_mlx_curve_and_crossover_rule():
    one = [(1024, 52.0)]
    assert crossover.mlx_ms(one, 512) == pytest.approx(26.0)  # proportional to L with a single point
    three = [(128, 12.0), (256, 20.0), (1024, 72.0)]
    assert crossover.mlx_ms(three, 192) == pytest.approx(16.0) and crossover.mlx_ms(three, 64) == pytest.approx(8.0)
    assert crossover.mlx_ms(three, 2048) == pytest.approx(72.0 + 52.0 * 1024 / 768)
    result = crossover.crossover({128: 5.0, 256: 10.0, 512: 40.0, 1024: 60.0}, one)
    assert result["crossover_length"] == 512 and result["ane_faster_up_to"] == 256
    assert crossover.crossover({128: 1.0}, one)["crossover_length"] is None
    # slower at a short length (the one-point curve has no fixed cost), faster in between, slower from 1024 on
    dip = crossover.crossover({64: 4.0, 512: 20.0, 1024: 60.0}, one)
    assert dip["crossover_length"] == 1024 and dip["ane_faster_up_to"] == 512 and dip["ane_slower_at"] == [64, 1024]


def test_quadratic_totals_refuse_counts_that_are_not_a_quadratic():
    def cost(v):
        return {"totals": {**{f: v for f in crossover.FIELDS}, "io_bytes": {"inputs": 1, "outputs": 1}}}
    with pytest.raises(crossover.CrossoverError, match="exactly three"):
        crossover.quadratic_totals({1: cost(1), 2: cost(2)}, 3)
    with pytest.raises(crossover.CrossoverError, match="not a quadratic"):
        crossover.quadratic_totals({1: cost(0), 2: cost(0), 4: cost(1)}, 3)  # 1/3 at L3: no integer count
    assert crossover.quadratic_totals({1: cost(1), 2: cost(4), 3: cost(9)}, 5)["totals"]["flops"] == 25


def test_reference_run_layout_computes_what_the_dense_layout_computes(tiny):
    """The restored layout is the same function: split RoPE halves + masked scores in every layer."""
    from experiments.ane_engineering.model.window_tiles import DENSE, reference_run_layout
    from experiments.ane_engineering.package.inputs.device_inputs import body_inputs
    from experiments.ane_engineering.package.kinds import build_export_spec

    length, ids = 48, list(range(5, 35))
    inputs = body_inputs(tiny.config, tiny.tensors, ids, [0] * 20 + [1] * 8 + [2, 2], [28, 29], length)
    outputs = {}
    for layout in (DENSE, reference_run_layout()):
        spec = build_export_spec(tiny, "body", length, attention=layout)
        with torch.no_grad():
            outputs[layout.name] = spec.module(*[torch.from_numpy(inputs[c.name]) for c in spec.inputs]).numpy()
        assert spec.attention["layout"] == layout.name
    active = outputs["dense"][..., :2]
    np.testing.assert_allclose(outputs["reference-run"][..., :2], active, rtol=1e-4, atol=1e-5)
    assert np.abs(active).max() > 1e-3  # not a vacuous comparison of zeros


@pytest.mark.slow
def test_predict_counts_any_length_and_a_package_on_disk(tiny_packages, capsys):
    assert run_main(command.main, ["--source", "builtin:tiny", "--kind", "body", "--length", "40", "--attention",
                                   "dense", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["program"]["length"] == 40 and document["program"]["attention"]["layout"] == "dense"
    assert set(document["chips"]) == set(load_chips()) and document["not_modelled"]
    # the fitted host term may be 0 (at its bound): a request is never predicted faster than its body
    assert all(row["predicted_request_ms"] >= row["predicted_body_ms"] > 0 for row in document["chips"].values())
    assert document["regions"]["regions"] == 1 and document["matching_public_model"] is None
    directory, _ = tiny_packages.get("body", 96)
    assert run_main(command.main, ["--package", str(directory), "--chip", "m4-max", "--json"]) == 0
    on_disk = json.loads(capsys.readouterr().out)
    assert list(on_disk["chips"]) == ["m4-max"] and on_disk["program"]["length"] == 96
    assert on_disk["regions"]["label"].startswith("prediction")
    assert run_main(command.main, ["--package", str(directory), "--length", "96"]) == 2
    assert "describe an export" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_predict_a_config_file_on_a_chip(tmp_path, capsys, family):
    """The issue's command line: any chip of the table, a BERT- or ModernBERT-family config.json, any length."""
    import transformers

    from checkpoint_support import small_config

    raw = (transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=48, max_position_embeddings=64).to_dict()
           if family == "bert" else {k: v for k, v in small_config().items() if k != "decision_head"})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    assert run_main(command.main, ["--chip", "m4", "--config", str(path), "--length", "40", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    row = document["chips"]["m4"]
    assert list(document["chips"]) == ["m4"] and document["program"]["kind"] == "encoder"
    low, high = row["band"]["body_ms"]
    assert low < row["predicted_body_ms"] < high
    assert len(row["nearest_points"]) == predict.NEAREST and row["nearest_points"][0]["chip"] == "m4"
    assert {p["status"] for p in row["nearest_points"]} <= {"fitted", "checked only (not fitted)"}
    assert row["route"] is None  # no public GPU timing of this model


@pytest.mark.slow
def test_reference_run_export_has_two_score_contractions_per_head_and_dense_totals_are_quadratic(tiny):
    """The reference-run graph is the one the calibration requires (two half einsums per softmax), and the dense
    export's totals at a fourth length equal the quadratic through three exact counts."""
    from experiments.ane_engineering.workflows.predict_export import export_cost

    ref, description = export_cost(tiny, "body", 48, "reference-run")  # L differs from head sizes 64 and 32
    assert description["attention"]["layout"] == "reference-run"
    softmaxes = ref["by_op_type"]["softmax"]["ops"]
    assert ref["by_category"]["attention_scores"]["ops"] == 2 * softmaxes
    costs = {length: export_cost(tiny, "body", length, "dense")[0] for length in (32, 64, 128)}
    direct = export_cost(tiny, "body", 96, "dense")[0]["totals"]
    interpolated = crossover.quadratic_totals(costs, 96)["totals"]
    for field in crossover.FIELDS:
        assert interpolated[field] == direct[field], field
    assert interpolated["io_bytes"] == direct["io_bytes"]


def test_chip_keys_normalise_apple_names():
    assert chip_key("M3 Max") == "m3-max" == chip_key(" m3  MAX ") and chip_key("m4-pro") == "m4-pro"


@pytest.mark.slow
def test_agent_exposes_the_predicted_crossover_of_its_packages(tiny_packages, tiny):
    from experiments.ane_engineering.run.agent import ANEAgent, RequestError

    agent = ANEAgent([tiny_packages.get("body", n)[0] for n in (96, 192)], tiny, "mil")
    with pytest.raises(RequestError, match="no public MLX curve"):
        agent.predicted_crossover("m3-max")  # builtin:tiny is not the reference model
    with pytest.raises(predict.PredictionError, match="known chips"):
        agent.predicted_crossover("m9", mlx_curve=[(96, 1.0)])
    rows = {r["length"]: r for r in agent.predicted_crossover("m3-max", mlx_curve=[(96, 1e3)])["rows"]}
    assert set(rows) == {96, 192} and all(r["ane_faster"] for r in rows.values())
    ane = rows[192]["ane_request_ms"]
    # an MLX curve reaching the predicted ANE time at L192: the crossover is that bucket, L96 stays on the ANE
    result = agent.predicted_crossover("m3-max", mlx_curve=[(96, 2 * ane), (192, ane)])  # exactly ane at L192
    assert result["crossover_length"] == 192 and result["ane_faster_up_to"] == 96


def test_a_bare_config_builds_the_module_a_checkpoint_of_it_would_export(tmp_path):
    """--config: ModernBERT and BERT encoders from config.json alone (random float32 weights, no embedding table)."""
    import transformers

    from checkpoint_support import small_config
    from experiments.ane_engineering.package.kinds import build_export_spec
    from experiments.ane_engineering.workflows.predict_export import PredictInputError, config_checkpoint, named_configs

    bert = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=48, max_position_embeddings=64).to_dict()
    for name, raw in (("modernbert", small_config()), ("bert", bert)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(raw))
        checkpoint = config_checkpoint(str(path))
        assert all(t.dtype == torch.float32 for t in checkpoint.tensors.values())
        spec = build_export_spec(checkpoint, "encoder", 24)
        with torch.no_grad():
            out = spec.module(*spec.example_inputs())
        assert out.shape == (1, checkpoint.config.encoder.hidden_size, 1, 24) and torch.isfinite(out).all()
    assert named_configs()["modernbert-large-shape"]["num_hidden_layers"] == 28
    with pytest.raises(PredictInputError, match="neither a named config"):
        config_checkpoint(str(tmp_path / "missing.json"))


def test_reference_run_layout_is_converted_without_the_passes_added_after_that_run():
    from experiments.ane_engineering.package.convert import LEAN_BC1S_PASSES
    from experiments.ane_engineering.package.graph_passes import AFTER_REFERENCE_RUN, with_project_passes

    lean, reference = with_project_passes(list(LEAN_BC1S_PASSES)), with_project_passes(list(LEAN_BC1S_PASSES), True)
    assert AFTER_REFERENCE_RUN == ("fuse_layer_norm_gamma",)
    assert ("ane_engineering::fuse_layer_norm_gamma" in lean
            and "ane_engineering::fuse_layer_norm_gamma" not in reference)
    assert [p for p in lean if p != "ane_engineering::fuse_layer_norm_gamma"] == reference
