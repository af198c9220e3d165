"""Benchmark evidence: the NumPy pin of the `convert` extra, checked in two environments of the same checkout.

For each environment (a Python interpreter with the project installed; e.g. one with NumPy 2.4 and one installed
from pyproject.toml with its `numpy<2.4`):
- ordinary_conversions.py converts tiny ordinary models with plain coremltools (an iOS18 SDPA model with a mask
  built from the input's length, an FP16 nn.TransformerEncoder) and records converted or the error;
- the project's own exports are made by its commands (`probe --source builtin:tiny` bodies at each length, dense
  and windowed, and one `palettize` W8 k-means group-32 candidate of the L96 body) and their manifests' content
  hashes recorded.
The evidence says, per export, whether the two environments made byte-identical packages (equal content hashes:
every file of the package, model.mlmodel as deterministic protobuf), and per model, which environment converts it.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from ...core.provenance import harness_fingerprint, machine
from .steps import BenchmarkError, checkout_env, command_argv, last_error_line

FORMAT = "ane-engineering/evidence/numpy-pin/1"
LENGTHS = (96, 192, 1024)
ATTENTIONS = ("dense", "windowed")
PALETTE = ("--bits", "8", "--mode", "kmeans", "--group-size", "32")
VERSIONS = ("import json, importlib.metadata as m; print(json.dumps({d: m.version(d) for d in "
            "('numpy', 'coremltools', 'torch', 'numba', 'scipy', 'scikit-learn')}))")


def run(python: Path, argv: list[str], what: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    done = subprocess.run([str(python), *argv], capture_output=True, text=True, env=checkout_env(), timeout=timeout,
                          check=False)
    if done.returncode != 0:
        raise BenchmarkError(f"{what} with {python} failed (exit {done.returncode}): {last_error_line(done.stderr)}")
    return done


def content_hash(directory: Path) -> str:
    return json.loads((directory / "manifest.json").read_text(encoding="utf-8"))["package"]["content_hash"]["sha256"]


def environment_record(python: Path, scratch: Path, progress: Callable[[str], None]) -> dict:
    """Versions, ordinary conversions and export hashes of one environment (its packages go into `scratch`)."""
    versions = json.loads(run(python, ["-c", VERSIONS], "reading versions").stdout)
    progress(f"{python}: numpy {versions['numpy']}, coremltools {versions['coremltools']}")
    module = "experiments.ane_engineering.workflows.benchmarks.ordinary_conversions"
    conversions = json.loads(run(python, ["-m", module],
                                 "ordinary conversions").stdout.strip().splitlines()[-1])["models"]
    progress("  ordinary models: " + ", ".join(f"{k} {'converted' if v['converted'] else 'FAILED'}"
                                               for k, v in conversions.items()))
    exports = {}
    for length in LENGTHS:
        for attention in ATTENTIONS:
            name = f"body-L{length}-{attention}"
            run(python, command_argv("probe", "--kind", "body", "--length", str(length), "--attention", attention,
                                     "--source", "builtin:tiny", "--output", str(scratch / name), "--quiet"),
                f"probe {name}")
            exports[name] = content_hash(scratch / name)
            progress(f"  {name} {exports[name][:16]}")
    name = "palettize-W8-kmeans-g32-of-body-L96-dense"
    run(python, command_argv("palettize", "--package", str(scratch / "body-L96-dense"), *PALETTE,
                             "--output", str(scratch / name)), "palettize")
    exports[name] = content_hash(scratch / name)
    progress(f"  {name} {exports[name][:16]}")
    return {"versions": versions, "ordinary_conversions": conversions, "export_content_hashes": exports}


def numpy_pin_evidence(unpinned: Path, pinned: Path, scratch: Path,
                       progress: Callable[[str], None] = lambda line: None) -> dict:
    harness = harness_fingerprint()
    started = time.perf_counter()
    records = {}
    for label, python in (("unpinned", unpinned), ("pinned", pinned)):
        (scratch / label).mkdir()
        records[label] = environment_record(python, scratch / label, progress)
    a, b = (records[k]["export_content_hashes"] for k in ("unpinned", "pinned"))
    identical = {name: a[name] == b[name] for name in a}
    conversions = {name: {"unpinned": records["unpinned"]["ordinary_conversions"][name]["converted"],
                          "pinned": records["pinned"]["ordinary_conversions"][name]["converted"]}
                   for name in records["pinned"]["ordinary_conversions"]}
    return {
        "format": FORMAT,
        "benchmark": "the convert extra's NumPy pin: tiny ordinary models converted by plain coremltools, and the "
                     "project's exports' content hashes, in an environment outside the pin and one installed with it",
        "pin": "numpy<2.4 in pyproject.toml's convert extra",
        "environments": records,
        "exports_identical": identical,
        "all_exports_identical": all(identical.values()),
        "ordinary_conversions_converted": conversions,
        "all_convert_pinned": all(v["pinned"] for v in conversions.values()),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "machine": machine(), "harness": harness,
    }


def summary(evidence: dict) -> str:
    conv = evidence["ordinary_conversions_converted"]
    return (f"exports identical: {sum(evidence['exports_identical'].values())}/{len(evidence['exports_identical'])}; "
            + ", ".join(f"{k}: unpinned {'ok' if v['unpinned'] else 'FAILS'}, pinned {'ok' if v['pinned'] else 'FAILS'}"
                        for k, v in conv.items()))
