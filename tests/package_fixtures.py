"""Session fixtures of exported builtin:tiny packages, made once by the probe and shared by every test module.

Loaded from conftest.py through `pytest_plugins`. Packages are exported lazily on first request.
"""

from __future__ import annotations

import pytest

from experiments.ane_engineering.checkpoint import load_checkpoint
from experiments.ane_engineering.export.probe_run import run_probe


class PackageCache:
    def __init__(self, root, checkpoint):
        self.root, self.checkpoint, self.reports = root, checkpoint, {}

    def get(self, kind: str, length: int, attention: str = "dense"):
        """(directory, probe report) of `kind` at `length` with that attention layout, exported on first use."""
        key = (kind, length, attention)
        if key not in self.reports:
            directory = self.root / (f"{kind}-{length}" + ("" if attention == "dense" else f"-{attention}"))
            self.reports[key] = (directory, run_probe(self.checkpoint, kind, length, directory, show_progress=False,
                                                      attention=attention))
        return self.reports[key]


@pytest.fixture(scope="session")
def tiny_packages(tmp_path_factory):
    return PackageCache(tmp_path_factory.mktemp("packages"), load_checkpoint("builtin:tiny"))
