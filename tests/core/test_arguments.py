"""Values checked where they enter: every command refuses, in one `error:` line and exit 2 before any work, absurd
sizes (bounded by core/limits.py, the bound and its reason said), zero or negative counts, list items that are
empty or repeated, flags that would do nothing with the others given, a `~user` that does not exist, and an output
inside the --source checkpoint directory. Nothing is written."""

from __future__ import annotations

import shutil

import pytest

import command_support
from experiments.ane_engineering import (
    benchmark,
    encode,
    execute,
    golden,
    palettize,
    probe,
    reproduce,
    reweight,
    sweep,
    validate,
)
from experiments.ane_engineering.core.limits import MAX_DIMENSION, max_workers

HUGE = str(10 ** 9)


def refused(main, argv, capsys, *needles) -> str:
    """A refusal whose one `error:` line is all the command wrote to stderr."""
    return command_support.refused(main, argv, capsys, *needles, alone=True)


@pytest.fixture
def out(tmp_path):
    """An output path in a directory that must stay empty."""
    directory = tmp_path / "outputs"
    directory.mkdir()
    yield directory / "result"
    assert list(directory.iterdir()) == []


@pytest.mark.parametrize("argv, needles", [
    (["--ids", "1,2", "--backend", "bc1s", "--length", HUGE], ["--length", f"<= {MAX_DIMENSION}", "Core ML"]),
    (["--ids", "1,2", "--backend", "bc1s", "--length", "0"], ["--length must be >= 1"]),
    (["--ids", "1,2", "--backend", "bc1s", "--length", "-96"], ["--length must be >= 1"]),
    (["--ids", "1,,2"], ["--ids", "empty item"]),
    (["--ids", ","], ["--ids", "empty item"]),
    (["--ids", "1,x"], ["--ids must be an integer"]),
    (["--ids", "1,-3"], ["--ids must be >= 0"]),
    (["--ids", "1,2", "--adapter", "adapter.safetensors"], ["--adapter is not used by --backend reference"]),
    (["--ids", "1,2", "--package", "pkg"], ["--package is not used by --backend reference"]),
    (["--ids", "1,2", "--backend", "bc1s", "--package", "pkg"], ["--package is not used by --backend bc1s"]),
    (["--ids", "1,2", "--length", "96"], ["--length is not used by --backend reference"]),
    (["--ids", "1,2", "--backend", "mil", "--length", "96", "--package", "pkg"],
     ["--length is not used by --backend mil"]),
    (["--ids", "1,2", "--source", "~no-such-user-here/x"], ["--source", "no user 'no-such-user-here'"]),
    (["--ids", "1,2", "--source", ""], ["--source is empty"]),
])
def test_encode_refuses(argv, needles, out, capsys):
    refused(encode.main, argv + ["--output", str(out) + ".npy"], capsys, *needles)


def test_encode_refuses_more_tokens_than_the_model_has_positions(tiny, out, capsys):
    n = tiny.config.encoder.max_position_embeddings + 1
    refused(encode.main, ["--ids", ",".join(["5"] * n), "--output", str(out) + ".npy"], capsys,
            f"{n} tokens", "max_position_embeddings")


@pytest.mark.parametrize("argv, needles", [
    (["--lora-rank", str(10 ** 6)], ["--lora-rank", f"<= {MAX_DIMENSION}"]),
    (["--lora-rank", "0"], ["--lora-rank must be >= 1"]),
    (["--lora-rank", "4096"], ["--lora-rank 4096 x 8 layers exceeds"]),  # builtin:tiny: 6 + 2 layers
    (["--tile", HUGE], ["--tile", f"<= {MAX_DIMENSION}"]),
    (["--tile", "0"], ["--tile must be >= 1"]),
    (["--tile", "64", "--attention", "dense"], ["--tile is not used with --attention dense"]),
    (["--tile", "200", "--attention", "windowed"], ["--tile 200 exceeds the bucket length 96"]),
    (["--length", HUGE], ["--length", f"<= {MAX_DIMENSION}"]),
    (["--length", "0"], ["--length must be >= 1"]),
    (["--lora-rank", "4", "--lora-targets", "q,,v"], ["--lora-targets", "empty item"]),
    (["--lora-rank", "4", "--lora-targets", "q,q"], ["--lora-targets", "repeats 'q'"]),
    (["--lora-rank", "4", "--lora-targets", "q,o"], ["--lora-targets", "'o' is not one of q, k, v"]),
    (["--lora-rank", "4", "--lora-alpha", "0"], ["--lora-alpha must be a positive finite number"]),
    (["--lora-rank", "4", "--lora-alpha", "nan"], ["--lora-alpha must be a positive finite number"]),
    (["--lora-alpha", "8"], ["--lora-alpha is not used without --lora-rank"]),
    (["--lora-targets", "q,k"], ["--lora-targets is not used without --lora-rank"]),
    (["--layer-index", "2"], ["--layer-index is not used by --kind body"]),
    (["--allow", "conv,,gelu"], ["--allow", "empty item"]),
])
def test_probe_refuses(argv, needles, out, capsys):
    refused(probe.main, ["--kind", "body", "--output", str(out)] + argv, capsys, *needles)


def test_probe_refuses_an_output_inside_the_source_checkpoint(tiny, tmp_path, capsys):
    source = shutil.copytree(tiny.directory, tmp_path / "checkpoint")
    before = sorted(p.name for p in source.iterdir())
    refused(probe.main, ["--kind", "mlp", "--source", str(source), "--output", str(source / "export")], capsys,
            "lies inside the input")
    assert sorted(p.name for p in source.iterdir()) == before


@pytest.mark.parametrize("main, argv", [
    (encode.main, ["--ids", "1,2", "--output", "{source}/hidden.npy"]),
    (golden.main, ["--output", "{source}/golden.json"]),
    (validate.main, ["--package", "{source}", "--output", "{source}/validation.json"]),
    (sweep.main, ["--package", "{source}", "--output", "{source}/sweep"]),
    (benchmark.main, ["--package", "{source}", "--length", "96", "--output", "{source}/bench.json"]),
    (reweight.main, ["--package", "{source}/../package", "--output", "{source}/sub/../reweighted"]),
    (reproduce.main, ["--output", "{source}/run"]),
])
def test_no_command_writes_into_its_source_checkpoint(tiny, tmp_path, capsys, main, argv):
    source = shutil.copytree(tiny.directory, tmp_path / "checkpoint")
    (source / "sub").mkdir()
    before = sorted(p.name for p in source.rglob("*"))
    refused(main, [a.format(source=source) for a in argv] + ["--source", str(source)], capsys, "lies inside the input")
    assert sorted(p.name for p in source.rglob("*")) == before


@pytest.mark.parametrize("argv, needles", [
    (["--mode", "kmeans", "--workers", "0"], ["--workers must be >= 1"]),
    (["--mode", "kmeans", "--workers", str(10 ** 6)], ["--workers", f"<= {max_workers()}", "per CPU"]),
    (["--mode", "uniform", "--workers", "2"], ["--workers is not used by --mode uniform"]),
    (["--mode", "kmeans", "--group-size", "0"], ["--group-size must be >= 1"]),
    (["--mode", "kmeans", "--group-size", HUGE], ["--group-size", f"<= {MAX_DIMENSION}"]),
])
def test_palettize_refuses(argv, needles, out, capsys):
    argv = argv if "--group-size" in argv else argv + ["--group-size", "32"]
    refused(palettize.main, ["--package", "pkg", "--bits", "8", "--output", str(out)] + argv, capsys, *needles)


@pytest.mark.parametrize("argv, needles", [
    (["--bits", ""], ["--bits is empty"]),
    (["--bits", "8,8"], ["--bits", "repeats 8"]),
    (["--bits", "8,,4"], ["--bits", "empty item"]),
    (["--bits", "8,5"], ["--bits: 5 is not one of 8, 6, 4"]),
    (["--modes", ","], ["--modes is empty"]),
    (["--modes", "kmeans,kmeans"], ["--modes", "repeats 'kmeans'"]),
    (["--modes", "kmean"], ["--modes: 'kmean' is not one of uniform, kmeans"]),
    (["--group-sizes", "32,,16"], ["--group-sizes", "empty item"]),
    (["--group-sizes", "32,32"], ["--group-sizes", "repeats 32"]),
    (["--group-sizes", "0"], ["--group-sizes must be >= 1"]),
    (["--jobs", "0"], ["--jobs must be >= 1"]),
    (["--jobs", str(10 ** 6)], ["--jobs", "per CPU"]),
    (["--repeats", "-1"], ["--repeats must be >= 0"]),
    (["--repeats", HUGE], ["--repeats", "<= 1000000"]),
    (["--modes", "uniform", "--implementation", "exact"], ["--implementation is not used without the kmeans mode"]),
])
def test_sweep_refuses(argv, needles, out, capsys):
    refused(sweep.main, ["--package", "pkg", "--output", str(out)] + argv, capsys, *needles)


def test_sweep_takes_only_known_backends(out, capsys):
    with pytest.raises(SystemExit) as exit_info:  # argparse's own choice check, with its usage block
        sweep.main(["--package", "pkg", "--backend", "nonsense", "--output", str(out)])
    assert exit_info.value.code == 2 and "invalid choice: 'nonsense'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, needles", [
    (["--repeats", "-1"], ["--repeats must be >= 0"]),
    (["--repeats", HUGE], ["--repeats", "<= 1000000"]),
    (["--length", "0"], ["--length must be >= 1"]),
    (["--package", "pkg"], ["--package is given twice"]),
])
def test_validate_refuses(argv, needles, out, capsys):
    refused(validate.main, ["--package", "pkg", "--output", str(out)] + argv, capsys, *needles)


@pytest.mark.parametrize("argv, needles", [
    (["--calls", "0"], ["--calls must be >= 1"]),
    (["--calls", HUGE], ["--calls", "<= 1000000"]),
    (["--warmup", "-1"], ["--warmup must be >= 0"]),
    (["--length", "0"], ["--length must be >= 1"]),
    (["--vs", "pkg"], ["--vs names the --package itself"]),
])
def test_benchmark_refuses(argv, needles, out, capsys):
    argv = argv if "--length" in argv else argv + ["--length", "96"]
    refused(benchmark.main, ["--package", "pkg", "--output", str(out)] + argv, capsys, *needles)


@pytest.mark.parametrize("argv, needles", [
    (["--describe", "--json", "--mode", "fp16-strict"], ["--mode is not used by --describe"]),
    (["--describe", "--output", "x.npz"], ["--output is not used by --describe"]),
    (["--json", "--inputs", "in.npz", "--output", "x.npz"], ["--json is not used without --describe"]),
])
def test_execute_refuses(argv, needles, capsys):
    refused(execute.main, ["--package", "pkg.mlpackage"] + argv, capsys, *needles)


def test_reproduce_and_reweight_refuse_absurd_counts_and_homes(out, capsys):
    refused(reproduce.main, ["--jobs", "0", "--output", str(out)], capsys, "--jobs must be >= 1")
    refused(reweight.main, ["--package", "pkg", "--source", "~no-such-user-here", "--output", str(out)], capsys,
            "no user 'no-such-user-here'")


def test_render_refuses_a_directory_that_is_not_the_repository(tmp_path, capsys):
    from experiments.ane_engineering import render

    refused(render.main, ["--repo", str(tmp_path), "--check"], capsys, "no benchmarks/evidence/ directory there")
    assert list(tmp_path.iterdir()) == []


def test_probe_refuses_a_tile_for_a_model_without_sliding_layers(random_checkpoint, out, capsys):
    from checkpoint_support import small_config

    source = random_checkpoint(small_config(global_attn_every_n_layers=1))  # every layer full attention
    refused(probe.main, ["--kind", "encoder", "--tile", "16", "--source", str(source), "--output", str(out)], capsys,
            "--tile is not used", "no sliding-window layer")
