"""The `convert` extra pins NumPy below 2.4 because coremltools 9.0 does not convert ordinary models with 2.4: within
the pin, a tiny iOS18 SDPA model with a length-built mask and an FP16 nn.TransformerEncoder convert with plain
coremltools (none of the project's converter fixes); outside it, they fail with the error that motivates the pin.
Byte-identical exports under both: benchmarks/evidence/numpy_pin.json (benchmarks/numpy_pin.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from command_support import REPO
from experiments.ane_engineering.workflows.benchmarks.steps import checkout_env

tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def _pin() -> tuple[int, int]:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    pins = [re.fullmatch(r"numpy<(\d+)\.(\d+)", spec.replace(" ", "")) for spec in extra["convert"]]
    found = [m for m in pins if m]
    assert len(found) == 1, "the convert extra holds one numpy upper bound"
    return int(found[0][1]), int(found[0][2])


def test_the_convert_extra_pins_numpy_below_2_4():
    assert _pin() == (2, 4)


@pytest.mark.slow
def test_ordinary_models_convert_within_the_pin_and_fail_outside_it():
    """In a fresh process: plain coremltools, without the converter fixes another test may have installed here."""
    pytest.importorskip("coremltools")
    inside = tuple(int(part) for part in np.__version__.split(".")[:2]) < _pin()
    done = subprocess.run([sys.executable, "-m",
                           "experiments.ane_engineering.workflows.benchmarks.ordinary_conversions"],
                          capture_output=True, text=True, timeout=600, check=True, env=checkout_env())
    results = json.loads(done.stdout.strip().splitlines()[-1])["models"]
    assert set(results) == {"sdpa_ios18_masked", "transformer_encoder_fp16"}
    for name, result in results.items():
        if inside:
            assert result["converted"], f"{name}: {result['error']}"
            assert "scaled_dot_product_attention" in result["ops"] or name != "sdpa_ios18_masked"
        else:  # NumPy 2.4 or later: the failure the pin avoids, not another one
            assert not result["converted"] and "only 0-dimensional arrays" in result["error"], (name, result)
