"""Backends: the platform picks Core ML on macOS and the MIL executor elsewhere; Core ML refuses clearly off macOS."""

from __future__ import annotations

import argparse
import platform

import numpy as np
import pytest

from experiments.ane_engineering.run.backends import (
    BACKEND_CHOICES,
    BackendError,
    BackendUnavailableError,
    CoreMLBackend,
    MILBackend,
    choose_backend,
    resolve_backend_name,
)
from experiments.ane_engineering.run.mil.numerics import FP16_STRICT, FP32_ACCUMULATE

ON_MAC = platform.system() == "Darwin"


@pytest.fixture(scope="module")
def small_package(tmp_path_factory):
    ct = pytest.importorskip("coremltools")
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    w = (np.random.default_rng(0).standard_normal((8, 16, 1, 1)) * 0.2).astype(np.float16)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 16, 1, 4), dtype=types.fp16)], opset_version=ct.target.macOS15)
    def prog(x):
        return mb.softmax(x=mb.conv(x=x, weight=w), axis=1, name="probs")

    from conversion_support import save_program

    return save_program(prog, tmp_path_factory.mktemp("backend") / "small.mlpackage", ct.target.macOS15), w


def _reference(x, w):
    z = np.einsum("oc,ncl->nol", w[:, :, 0, 0].astype(np.float64), x[:, :, 0, :].astype(np.float64))
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True))[:, :, None, :]


@pytest.mark.skipif(ON_MAC, reason="off-macOS behaviour")
def test_auto_picks_mil_off_macos():
    for name in (None, "auto"):
        backend = choose_backend(name)
        assert isinstance(backend, MILBackend)
        assert backend.name == "mil" and backend.mode == FP32_ACCUMULATE
    assert resolve_backend_name("auto") == "mil"


@pytest.mark.skipif(not ON_MAC, reason="macOS behaviour")
def test_auto_picks_coreml_on_macos():
    backend = choose_backend("auto")
    assert isinstance(backend, CoreMLBackend) and backend.compute_units == "CPU_AND_NE"


@pytest.mark.skipif(ON_MAC, reason="off-macOS behaviour")
@pytest.mark.parametrize("name", ["coreml", "coreml-cpu", "coreml-all", "coreml-gpu"])
def test_coreml_backend_refuses_clearly_off_macos(name):
    with pytest.raises(BackendUnavailableError) as err:
        choose_backend(name)
    msg = str(err.value)
    assert "needs macOS" in msg and platform.system() in msg and "--backend mil" in msg
    with pytest.raises(BackendUnavailableError):
        CoreMLBackend("CPU_ONLY")


def test_names_and_modes():
    assert choose_backend("mil-fp16-strict").mode == FP16_STRICT
    assert choose_backend("mil", mode=FP16_STRICT).mode == FP16_STRICT
    assert choose_backend("mil").mode == FP32_ACCUMULATE
    with pytest.raises(BackendError, match="unknown backend"):
        choose_backend("tpu")
    with pytest.raises(BackendError, match="unknown mil mode"):
        choose_backend("mil", mode="bf16")
    with pytest.raises(BackendError):
        choose_backend("mil-fp16-strict", mode=FP32_ACCUMULATE)
    with pytest.raises(BackendError):
        CoreMLBackend("GPU_ONLY")
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=BACKEND_CHOICES, default="auto")
    assert parser.parse_args(["--backend", "mil-fp16-strict"]).backend == "mil-fp16-strict"
    for name in BACKEND_CHOICES:
        if name.startswith("coreml") or (name == "auto" and ON_MAC):
            continue
        assert isinstance(choose_backend(name), MILBackend)


def test_describe_names_backend_mode_platform():
    info = choose_backend("mil").describe()
    assert info["backend"] == "mil" and info["mode"] == FP32_ACCUMULATE
    assert info["platform"] == platform.platform() and info["python"] == platform.python_version()
    assert "numpy" in info["versions"] and "coremltools" in info["versions"]
    strict = choose_backend("mil-fp16-strict").describe()
    assert strict["backend"] == "mil-fp16-strict" and strict["mode"] == FP16_STRICT


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mil", "mil-fp16-strict"])
def test_mil_backend_loads_and_predicts(small_package, name):
    path, w = small_package
    backend = choose_backend(name)
    with pytest.raises(BackendError, match="load"):
        backend.predict({"x": np.zeros((1, 16, 1, 4), np.float32)})
    loaded = backend.load(path)
    assert loaded.load_seconds > 0 and loaded.compile_seconds is None
    assert loaded.input_names == ["x"] and loaded.output_names == ["probs"]
    x = np.random.default_rng(1).standard_normal((1, 16, 1, 4)).astype(np.float32)
    out = backend.predict({"x": x})
    assert set(out) == {"probs"} and out["probs"].dtype == np.float32
    ref = _reference(x.astype(np.float16), w)
    assert np.max(np.abs(out["probs"] - ref)) < 2 ** -9  # fp16 outputs in [0, 1]: a couple of fp16 steps
    desc = backend.describe()
    assert desc["package"] == str(path) and "accumulation" in desc


@pytest.mark.slow
@pytest.mark.skipif(not ON_MAC, reason="Core ML runs only on macOS")
@pytest.mark.parametrize("name", ["coreml", "coreml-cpu"])
def test_coreml_backend_runs_on_macos(small_package, name):
    path, w = small_package
    backend = choose_backend(name)
    loaded = backend.load(path)
    assert loaded.compile_seconds is not None and loaded.compile_seconds >= 0 and loaded.load_seconds >= 0
    x = np.random.default_rng(1).standard_normal((1, 16, 1, 4)).astype(np.float32)
    out = backend.predict({"x": x})
    assert np.max(np.abs(out["probs"] - _reference(x.astype(np.float16), w))) < 2 ** -7
    backend.close()
