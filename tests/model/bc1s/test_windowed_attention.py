"""Windowed local attention (model/bc1s/windowed_attention.py, model/window_tiles.py) against the FP32 reference and
transformers, through export, the `mil` executor, validation and the static ANE rules.

Bounds: FP32 BC1S vs the reference encoder, max abs 1e-4 on valid tokens (tolerances.BC1S_ENCODER_ABS, the
acceptance bound); the exported FP16 package vs transformers: one FP16 rounding of the largest output grown by every
layer, x4 (the derivation of tests/run/mil/test_executor.py body_tolerance). Moving the window edge by one token, in the
host mask or in the graph's geometry, breaks the FP32 bound.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from checkpoint_support import (
    config_and_tensors,
    randomize_transformers_model,
    small_config,
)
from experiments.ane_engineering import validate
from experiments.ane_engineering.checkpoint import load_checkpoint
from experiments.ane_engineering.core import tolerances
from experiments.ane_engineering.core.buckets import MASK_BIAS
from experiments.ane_engineering.model.bc1s.models import BC1SEncoder
from experiments.ane_engineering.model.encoders import reference_encoder
from experiments.ane_engineering.model.masks import additive_bc1s
from experiments.ane_engineering.model.window_tiles import (
    LayoutError,
    WindowTiles,
    additive_window,
    windowed,
)
from experiments.ane_engineering.package.convert import convert
from experiments.ane_engineering.package.kinds import ExportSpecError, build_export_spec
from experiments.ane_engineering.placement.static_check import check_program
from experiments.ane_engineering.run.agent import RequestError, check_shapes_and_masks
from experiments.ane_engineering.validation.golden import (
    COMMITTED_TINY_GOLDEN,
    load_golden,
)
from experiments.ane_engineering.workflows.probe_run import run_probe
from fp16_support import U16

FP16_SAFETY = 2

# (bucket L, valid tokens n, tile T, local_attention): L96/L192/L1024, tiles dividing L or not, a window wider
# than the input (local_attention 512 -> radius 256 > L), a last tile of one query.
CASES = [
    (96, 80, 32, 32), (96, 96, 64, 32), (96, 70, 64, 512),
    (192, 150, 40, 32), (192, 192, 64, 128), (192, 100, 96, 512),
    (1024, 1000, 64, 128), (1024, 1024, 96, 32), (1024, 1000, 31, 128),
]


def _encoder_outputs(raw: dict, length: int, n: int, tile: int, graph_radius: int | None = None,
                     mask_radius: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(BC1S windowed encoder, reference encoder) final hidden states of the n valid tokens, FP32. graph_radius /
    mask_radius build the graph's windows / the host mask for another radius than the checkpoint's (defects)."""
    config, tensors = config_and_tensors(raw, seed=1)
    radius = config.encoder.window_radius
    encoder = BC1SEncoder(config, tensors, length, attention=windowed(tile)).eval()
    if graph_radius is not None:
        from experiments.ane_engineering.model.bc1s.windowed_attention import WindowTiling

        tiling = WindowTiling(WindowTiles(length, graph_radius, tile), config.encoder.hidden_size,
                              config.encoder.head_dim)
        for layer in encoder.layers:
            if layer.attn.tiling is not None:
                layer.attn.tiling = tiling
        encoder.tiling = tiling
        encoder.local_mask_shape = tiling.tiles.mask_shape()
        radius = graph_radius
    tiles = WindowTiles(length, radius, tile)
    mask = additive_window(tiles, n)
    if mask_radius is not None:  # same shape, visibility rule with another radius
        keys, queries = tiles.key_positions()[:, :, None], tiles.query_positions()[None]
        visible = (keys >= 0) & (keys < n) & (((keys - queries).abs() <= mask_radius) | (queries >= n))
        mask = torch.where(visible, 0.0, MASK_BIAS).unsqueeze(0)
    valid = torch.zeros(1, length, dtype=torch.bool)
    valid[0, :n] = True
    x = torch.randn(1, config.encoder.hidden_size, 1, length, generator=torch.Generator().manual_seed(2))
    reference = reference_encoder(config, tensors).eval()
    with torch.no_grad():
        ours = encoder(x, additive_bc1s(valid, None), mask)[0, :, 0, :n].T  # (n, C)
        theirs = reference(x[0, :, 0, :].T[None], valid)[0, :n]  # (n, C)
    return ours, theirs


@pytest.mark.parametrize("length,n,tile,local", CASES)
def test_windowed_encoder_matches_the_reference(length, n, tile, local):
    ours, theirs = _encoder_outputs(small_config(local_attention=local), length, n, tile)
    assert float((ours - theirs).abs().max()) <= tolerances.BC1S_ENCODER_ABS


@pytest.mark.parametrize("where,radius", [("mask", 17), ("mask", 15), ("graph", 15)])
def test_moving_the_window_edge_by_one_token_breaks_the_bound(where, radius):
    """The checkpoint's radius is 16: a host mask with |i - j| <= 17 or <= 15, or a graph whose windows (and
    matching mask) are built for radius 15, each leave the bound."""
    raw = small_config(local_attention=32)
    moved = {"mask_radius": radius} if where == "mask" else {"graph_radius": radius}
    ours, theirs = _encoder_outputs(raw, 192, 150, 64, **moved)
    assert float((ours - theirs).abs().max()) > tolerances.BC1S_ENCODER_ABS


def test_tile_geometry_and_mask_rule():
    tiles = WindowTiles(100, 5, 32)  # 4 tiles, the last holding 4 real queries
    assert (tiles.n_tiles, tiles.padded_length, tiles.width, tiles.pieces) == (4, 128, 42, 2)
    keys = tiles.key_positions()
    assert keys[0, 0] == -5 and keys[-1, -1] == 3 * 32 - 5 + 41  # slot w of tile t is key t*T - r + w
    mask = additive_window(tiles, 90)[0]  # (W, nT, T)
    visible = mask == 0
    q = 40  # tile 1, slot 8: keys 35..45 visible, exactly 2r + 1 of them
    seen = keys[:, 1][visible[:, 1, q - 32]]
    assert seen.tolist() == list(range(35, 46))
    padded_rows = visible[:, 2, 90 - 64:]  # queries 90..95 are padding: they see the valid keys 59..89 in reach
    assert set(keys[:, 2][padded_rows.any(dim=1)].tolist()) == set(range(59, 90))
    assert not visible[:, 3].any()  # tile 3 (queries 96..127) reaches no valid key: all masked, never read


def test_host_refuses_a_wrong_window_mask():
    tiles = WindowTiles(96, 16, 32)
    good = {"embeddings": np.zeros((1, 64, 1, 96)), "global_mask": additive_bc1s(
        torch.arange(96)[None] < 50, None).numpy(), "window_mask": additive_window(tiles, 50).numpy()}
    shapes = {k: v.shape for k, v in good.items()}
    check_shapes_and_masks(good, shapes, 50)
    leaky = dict(good, window_mask=good["window_mask"].copy())
    leaky["window_mask"][0, 40, 2, :] = 0.0  # slot 40 of tile 2 is key 2*32 - 16 + 40 = 88: a padding key
    with pytest.raises(RequestError, match="padding key"):
        check_shapes_and_masks(leaky, shapes, 50)
    empty = dict(good, window_mask=good["window_mask"].copy())
    empty["window_mask"][0, :, 0, 3] = MASK_BIAS  # query 3 sees nothing
    with pytest.raises(RequestError, match="query 3 has no valid key"):
        check_shapes_and_masks(empty, shapes, 50)


def test_windowed_layout_is_refused_without_sliding_layers(tiny):
    with pytest.raises(ExportSpecError, match="no attention layout"):
        build_export_spec(tiny, "mlp", 96, attention=windowed(32))
    raw = small_config(global_attn_every_n_layers=1)  # every layer global
    config, tensors = config_and_tensors(raw)
    with pytest.raises(LayoutError, match="has none"):
        BC1SEncoder(config, tensors, 96, attention=windowed(32))


# ---------------------------------------------------------------------------------------- exported packages, L1024

@pytest.mark.slow
def test_static_rules_report_no_violation_for_a_windowed_layer_at_l1024(tiny):
    """Body and encoder packages are checked through their probe reports below; here the one-layer kind."""
    spec = build_export_spec(tiny, "layer", 1024, layer_index=1, attention=windowed())
    report = check_program(convert(spec)._mil_program)
    assert report["violations"] == 0, report["findings_by_rule"]
    assert spec.attention["layout"] == "windowed" and "window_mask" in [c.name for c in spec.inputs]


def test_a_bxhxlxd_tensor_is_still_a_form_violation_beside_tiles(tiny):
    """The tile axis a package declares is the only dim-2 size R02 accepts: (1, heads, L, D) still fails."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 64, 1, 96), dtype=types.fp16),
                             mb.TensorSpec(shape=(1, 64, 3, 32), dtype=types.fp16)],
                opset_version=ct.target.macOS15)
    def prog(x, window_mask):
        heads = mb.reshape(x=x, shape=[1, 2, 96, 32])  # (B, heads, L, D)
        tiles = mb.reshape(x=x, shape=[1, 64, 3, 32])  # (1, C, nT, T)
        return mb.add(x=tiles, y=window_mask), mb.relu(x=heads)

    findings = [f for f in check_program(prog)["findings"] if f["rule"] == "ANE-R02-bc1s-form"]
    assert len(findings) == 2 and all("(1, 2, 96, 32)" in f["detail"] for f in findings)


def _fp16_tolerance(expected: np.ndarray, layers: int) -> float:
    """One FP16 rounding (u16) of the largest output per dot-product stage it passed through (6 per layer,
    tolerances.DOT_STAGES_PER_LAYER), summed as a worst case, x2 for what the final LayerNorm amplifies; a window
    edge moved by one token must leave it, which the FP16 check below shows."""
    return U16 * float(np.abs(expected).max()) * tolerances.DOT_STAGES_PER_LAYER * layers * FP16_SAFETY


@pytest.mark.slow
def test_windowed_package_from_a_transformers_checkpoint_matches_modernbert_at_l1024(tmp_path):
    transformers = pytest.importorskip("transformers")
    from experiments.ane_engineering import encode

    torch.manual_seed(0)
    config = transformers.ModernBertConfig(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=2,
        global_attn_every_n_layers=3, local_attention=128, global_rope_theta=160000.0, local_rope_theta=10000.0,
        max_position_embeddings=1024, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1,
        sep_token_id=2, attn_implementation="eager")
    model = transformers.ModernBertModel(config).eval()
    randomize_transformers_model(model, 0, dense_std=0.2)
    model.save_pretrained(tmp_path / "ckpt")
    checkpoint = load_checkpoint(str(tmp_path / "ckpt"))
    report = run_probe(checkpoint, "encoder", 1024, tmp_path / "pkg", show_progress=False, attention="windowed")
    assert report["passed"] and report["attention"]["layout"] == "windowed"
    assert report["placement"]["static"]["violations"] == 0
    assert report["mil_ops"]["by_type"].get("slice_by_index") and "gather" not in report["mil_ops"]["by_type"]
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    assert manifest["attention"]["tile"] == 128 and manifest["attention"]["radius"] == 64
    assert {c["name"]: c["shape"] for c in manifest["io"]["inputs"]}["window_mask"] == [1, 256, 8, 128]

    ids = torch.randint(3, 300, (1, 1000), generator=torch.Generator().manual_seed(1))
    ids[0, 0], ids[0, -1] = 1, 2
    got = encode.encode(checkpoint, ids[0].tolist(), "mil", package=tmp_path / "pkg")  # (1000, 64)
    with torch.no_grad():
        expected = model(input_ids=ids).last_hidden_state[0].numpy()  # (1000, 64)
    bound = _fp16_tolerance(expected, config.num_hidden_layers)
    error = float(np.abs(got - expected).max())
    assert 0 < error <= bound, (error, bound)

    # The same package fed a tile mask whose window edge is one token short leaves the bound.
    from experiments.ane_engineering.package.inputs.device_inputs import encoder_inputs
    from experiments.ane_engineering.run.backends import choose_backend

    inputs = encoder_inputs(checkpoint.config, checkpoint.tensors, ids[0].tolist(), 1024, windowed())
    tiles = WindowTiles(1024, 64, 128)
    keys, queries = tiles.key_positions()[:, :, None], tiles.query_positions()[None]
    short = (keys >= 0) & (keys < 1000) & (((keys - queries).abs() <= 63) | (queries >= 1000))
    inputs["window_mask"] = torch.where(short, 0.0, MASK_BIAS).unsqueeze(0).numpy()
    runner = choose_backend("mil")
    runner.load(tmp_path / "pkg" / "model.mlpackage")
    hidden = runner.predict({k: v.astype(np.float16) for k, v in inputs.items()})["hidden_states"]  # (1, C, 1, L)
    assert float(np.abs(hidden[0, :, 0, :1000].T - expected).max()) > bound


@pytest.mark.slow
def test_validation_of_tiny_at_l1024_passes_with_the_windowed_layout_no_worse_than_dense(tiny, tiny_packages,
                                                                                         validation_report, tmp_path):
    package, probe = tiny_packages.get("body", 1024, "windowed")
    assert probe["placement"]["static"]["violations"] == 0 and probe["attention"]["layout"] == "windowed"
    output = tmp_path / "windowed.json"
    status = validate.main(["--package", str(package), "--backend", "mil", "--repeats", "2", "--output", str(output)])
    report = json.loads(output.read_text())
    assert status == 0 and report["passed"], report["reasons"]
    assert report["packages"][0]["attention"]["layout"] == "windowed"
    dense_status, dense_report = validation_report  # the dense packages of every bucket (package_fixtures.py)
    assert dense_status == 0
    assert [p["attention"]["layout"] for p in dense_report["packages"]] == ["dense"] * 3
    dense, tiled = dense_report["buckets"]["1024"], report["buckets"]["1024"]
    assert tiled["evaluated"] == dense["evaluated"] == tiled["passed_questions"] == 63
    assert [q["decision"] for q in tiled["questions"]] == [q["decision"] for q in dense["questions"]]
    # "No worse" up to the one thing the layouts do differently in FP16: the FP32 sums inside softmax and AV of the
    # sliding layers run over W instead of L terms (the extra terms are exact zeros) in another order, which can
    # move one FP16 rounding (u16 relative) of each sliding layer's output; grown linearly through the model, the
    # option logits may then differ by u16 * max|logit| * (sliding layers), probabilities by half that over the
    # smallest calibration temperature (tolerances.softmax_abs).
    magnitude = max(abs(v) for q in load_golden(COMMITTED_TINY_GOLDEN)["questions"] for v in q["option_logits"])
    sliding = tiny.config.encoder.layer_types.count("sliding_attention")
    logit_allowance = U16 * magnitude * sliding
    probability_allowance = tolerances.softmax_abs(logit_allowance,
                                                   min(tiny.config.head.calibration.temperature.values()))
    assert tiled["max_option_logit_error"] <= dense["max_option_logit_error"] + logit_allowance
    for key in ("max_calibrated_error", "max_action_probability_error"):
        assert tiled[key] <= dense[key] + probability_allowance, (key, tiled[key], dense[key])


@pytest.mark.slow
def test_auto_layout_follows_the_calibrated_prediction_and_is_recorded(tmp_path):
    from checkpoint_support import write_checkpoint

    near = load_checkpoint(str(write_checkpoint(tmp_path / "near", small_config(local_attention=32),
                                                config_and_tensors(small_config(local_attention=32))[1])))
    report = run_probe(near, "encoder", 192, tmp_path / "auto", show_progress=False, attention="auto", tile=32)
    choice = report["attention"]["choice"]
    predicted = choice["predicted_body_ms"]
    assert set(predicted) == {"dense", "windowed"} and choice["chip"] == "M3 Max"
    assert report["attention"]["layout"] == min(predicted, key=predicted.get)
    assert choice["cost"]["windowed"]["unfused_mb"] != choice["cost"]["dense"]["unfused_mb"]
    manifest = json.loads((tmp_path / "auto" / "manifest.json").read_text())
    assert manifest["attention"] == report["attention"]

    wide_raw = small_config(local_attention=512)  # radius 256 >= L - 1: the window covers the bucket
    wide = load_checkpoint(str(write_checkpoint(tmp_path / "wide", wide_raw, config_and_tensors(wide_raw)[1])))
    report = run_probe(wide, "encoder", 96, tmp_path / "auto-wide", show_progress=False, attention="auto")
    assert (report["attention"]["layout"] == "dense"
            and "covers the whole bucket" in report["attention"]["choice"]["reason"])
    assert "predicted_body_ms" not in report["attention"]["choice"]
