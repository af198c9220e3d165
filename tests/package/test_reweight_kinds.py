"""reweight on every package kind and both attention layouts: buffers of the export model that are not checkpoint
tensors (the marker-slot ones an encoder never reads, the windowed layout's zero pads, RoPE tables) do not block
it, and the result is byte for byte a fresh export of the new checkpoint.

A small config whose sliding window (local_attention 8, radius 4) is shorter than the bucket makes the windowed
layout apply at a short bucket (64, the shortest a fixture question fits for the body layout check); tile 16
gives four query tiles."""

from __future__ import annotations

import json

import pytest
import torch

from checkpoint_support import checkpoint_tensors, small_config, write_checkpoint
from experiments.ane_engineering import reweight
from experiments.ane_engineering.checkpoint import load_checkpoint
from experiments.ane_engineering.core.cli import run_main
from experiments.ane_engineering.package.package_hash import package_content_hash
from experiments.ane_engineering.package.reweight import ModuleTensors, ReweightError, module_tensors, plan_blobs
from experiments.ane_engineering.workflows.probe_run import run_probe

pytestmark = pytest.mark.slow

LENGTH, TILE = 64, 16
RAW = small_config(local_attention=8, num_hidden_layers=3, global_attn_every_n_layers=3)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """(parent, fine-tuned) checkpoint directories of one architecture."""
    root = tmp_path_factory.mktemp("reweight-kinds")
    parent = write_checkpoint(root / "parent", RAW, checkpoint_tensors(RAW, seed=0), tokenizer=True)
    tuned = {name: value + 0.01 * torch.randn(value.shape, generator=torch.Generator().manual_seed(1))
             for name, value in checkpoint_tensors(RAW, seed=0).items()}
    return parent, write_checkpoint(root / "tuned", RAW, tuned, tokenizer=True)


@pytest.mark.parametrize("kind", ["encoder", "embedding", "body"])
@pytest.mark.parametrize("attention", ["dense", "windowed"])
def test_reweight_gives_a_fresh_export_of_the_new_checkpoint(sources, tmp_path, kind, attention):
    parent_source, tuned_source = sources
    parent = tmp_path / "parent"
    report = run_probe(load_checkpoint(str(parent_source)), kind, LENGTH, parent, show_progress=False,
                       attention=attention, tile=TILE)
    assert (report["attention"] or {}).get("layout", "dense") == attention
    assert run_main(reweight.main, ["--package", str(parent), "--source", str(tuned_source),
                                    "--output", str(tmp_path / "reweighted")]) == 0
    fresh = tmp_path / "fresh"
    run_probe(load_checkpoint(str(tuned_source)), kind, LENGTH, fresh, show_progress=False, attention=attention,
              tile=TILE)
    assert (package_content_hash(tmp_path / "reweighted" / "model.mlpackage")
            == package_content_hash(fresh / "model.mlpackage"))
    assert (package_content_hash(tmp_path / "reweighted" / "model.mlpackage")
            != package_content_hash(parent / "model.mlpackage"))


def _with(values, extra: dict, buffers=()):
    return ModuleTensors({**values, **extra}, set(values.buffers) | set(buffers))


def test_a_checkpoint_tensor_without_a_constant_of_its_own_is_still_refused(tiny_packages, tiny):
    """Only architecture buffers may lack a constant of their own: a checkpoint tensor without one (e.g. merged
    with an identical constant) cannot be reweighted."""
    parent, _ = tiny_packages.get("body", 96)
    values = module_tensors(tiny, json.loads((parent / "manifest.json").read_text()))
    with pytest.raises(ReweightError, match="'an_unexported_weight' has no constant of its own"):
        plan_blobs(parent / "model.mlpackage", _with(values, {"an_unexported_weight": torch.zeros(3)}))


def test_a_buffer_merged_into_a_weight_is_refused(tiny_packages, tiny):
    """A buffer equal (shape and FP16 bytes) to a weight may share the weight's constant; a new weight would then
    change the buffer, so it is refused rather than assumed traced away."""
    parent, _ = tiny_packages.get("body", 96)
    values = module_tensors(tiny, json.loads((parent / "manifest.json").read_text()))
    weight = "encoder_layers_0_attn_q_weight"
    assert plan_blobs(parent / "model.mlpackage", _with(values, {"an_unused_buffer": torch.ones(1, 1, 1, 7)},
                                                        ["an_unused_buffer"]))  # absent and equal to no weight: fine
    with pytest.raises(ReweightError, match=f"buffer 'a_merged_buffer' shares the constant of weight '{weight}'"):
        plan_blobs(parent / "model.mlpackage", _with(values, {"a_merged_buffer": values[weight].clone()},
                                                     ["a_merged_buffer"]))
