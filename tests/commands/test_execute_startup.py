"""The execute command starts lean: describing and running a package imports neither torch nor the other ML
frameworks coremltools probes (core/lean_imports.py), describing imports no numba, and the frameworks stay
importable in a library process (the refusal is the command's alone). Timings: benchmarks/execute_startup.py."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from command_support import REPO
from experiments.ane_engineering.core.lean_imports import FRAMEWORKS, _Refuse

# Runs the command exactly as `python -m experiments.ane_engineering.execute ARGS` does (run_name "__main__"), then
# writes which of the watched modules the process holds.
PROBE = """
import json, runpy, sys
report, args = sys.argv[1], sys.argv[2:]
sys.argv = ["execute", *args]
try:
    runpy.run_module("experiments.ane_engineering.execute", run_name="__main__", alter_sys=True)
    status = 0
except SystemExit as stop:
    status = stop.code
watched = {watched!r}
with open(report, "w") as handle:
    json.dump({{"status": status, "imported": sorted(m for m in watched if m in sys.modules)}}, handle)
"""


def _modules_after(tmp_path, *args) -> dict:
    report = tmp_path / "modules.json"
    code = PROBE.format(watched=(*FRAMEWORKS, "numba", "coremltools"))
    done = subprocess.run([sys.executable, "-c", code, str(report), *map(str, args)], capture_output=True, text=True,
                          timeout=600, check=False)
    assert report.exists(), done.stderr[-2000:]
    return json.loads(report.read_text())


def test_the_refusal_answers_the_frameworks_and_their_submodules_only():
    finder = _Refuse(("torch", "sklearn"))
    for name in ("torch", "torch.nn.functional", "sklearn.utils"):
        with pytest.raises(ModuleNotFoundError, match="not imported by this command"):
            finder.find_spec(name)
    for name in ("numpy", "torchlike", "scipy.special", "coremltools"):
        assert finder.find_spec(name) is None
    assert "torch" in FRAMEWORKS and "scipy" not in FRAMEWORKS  # the executor's erf comes from scipy


@pytest.mark.slow
def test_describe_and_run_import_no_torch(tiny_packages, tmp_path):
    helped = _modules_after(tmp_path, "--help")
    assert helped == {"status": 0, "imported": []}  # --help imports neither coremltools nor numba
    directory, _ = tiny_packages.get("body", 96)
    described = _modules_after(tmp_path, "--package", directory, "--describe", "--json")
    assert described["status"] == 0
    assert described["imported"] == ["coremltools"]  # no framework, and no numba for a description
    info = json.loads(subprocess.run([sys.executable, "-m", "experiments.ane_engineering.execute", "--package",
                                      str(directory), "--describe", "--json"], capture_output=True, text=True,
                                     check=True, timeout=600).stdout)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "in.npz", **{i["name"]: rng.standard_normal(i["shape"]).astype(np.float16) * np.float16(0.1)
                                     for i in info["inputs"]})
    ran = _modules_after(tmp_path, "--package", directory, "--inputs", tmp_path / "in.npz", "--output",
                         tmp_path / "out.npz")
    assert ran["status"] == 0 and (tmp_path / "out.npz").exists()
    assert not set(ran["imported"]) & set(FRAMEWORKS), ran["imported"]
    # the refusal is the command's: importing the library (as a user's test does) leaves torch importable
    library = subprocess.run([sys.executable, "-c", "import experiments.ane_engineering.execute, torch; print('ok')"],
                             capture_output=True, text=True, timeout=600, check=False)
    assert library.stdout.strip() == "ok", library.stderr[-2000:]


def test_the_startup_section_calls_a_run_quiet_only_below_one_load_per_core(tmp_path):
    """The committed evidence with its recorded load replaced: quiet below the machine's core count, shared above."""
    from experiments.ane_engineering.evidence.ledger import Ledger
    from experiments.ane_engineering.evidence.sections_startup import FILE, quietness

    committed = json.loads((REPO / "benchmarks" / "evidence" / FILE).read_text())
    verdicts = []
    for one_minute in (0.5, committed["machine"]["cpu_count"] + 0.5):
        path = tmp_path / f"{one_minute}.json"
        load = {"before": [one_minute, 1.0, 1.0], "after": [0.1, 1.0, 1.0]}
        path.write_text(json.dumps({**committed, "load_average_1_5_15": load}))
        verdicts.append(quietness(Ledger(tmp_path).open(path)))
    assert verdicts == ["below one per core, a quiet machine",
                        "the build machine was shared, so these are not the timings of a quiet machine"]
