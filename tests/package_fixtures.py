"""Session fixtures of exported builtin:tiny packages, made once by the probe and shared by every test module.

Imported by conftest.py. Packages are exported lazily on first request; every request counts as an export for the
`slow` marker (slow_guard.py), whether or not an earlier test already made that package.
"""

from __future__ import annotations

import json

import pytest

from experiments.ane_engineering import validate
from experiments.ane_engineering.checkpoint import load_checkpoint
from experiments.ane_engineering.workflows.probe_run import run_probe
from slow_guard import record


class PackageCache:
    def __init__(self, root, checkpoint):
        self.root, self.checkpoint, self.reports = root, checkpoint, {}

    def get(self, kind: str, length: int, attention: str = "dense"):
        """(directory, probe report) of `kind` at `length` with that attention layout, exported on first use."""
        record("asks for an exported package")
        key = (kind, length, attention)
        if key not in self.reports:
            directory = self.root / (f"{kind}-{length}" + ("" if attention == "dense" else f"-{attention}"))
            self.reports[key] = (directory, run_probe(self.checkpoint, kind, length, directory, show_progress=False,
                                                      attention=attention))
        return self.reports[key]


@pytest.fixture(scope="session")
def tiny_packages(tmp_path_factory):
    return PackageCache(tmp_path_factory.mktemp("packages"), load_checkpoint("builtin:tiny"))


VALIDATION_REPEATS = 12


@pytest.fixture(scope="session")
def validation_report(tiny_packages, tmp_path_factory):
    """(exit status, report) of validating the dense builtin:tiny body packages of every bucket through mil; shared
    by tests/validation/test_validate.py and the windowed-vs-dense comparison of
    tests/model/bc1s/test_windowed_attention.py."""
    packages = [tiny_packages.get("body", length)[0] for length in (96, 192, 1024)]
    output = tmp_path_factory.mktemp("validation") / "validation.json"
    argv = [arg for p in packages for arg in ("--package", str(p))]
    status = validate.main(argv + ["--backend", "mil", "--repeats", str(VALIDATION_REPEATS), "--output", str(output)])
    return status, json.loads(output.read_text())
