"""The lean coremltools pass pipeline used for BC1S kinds yields exactly the package the default pipeline does."""

from __future__ import annotations

import pytest

from experiments.ane_engineering.export.convert import convert
from experiments.ane_engineering.export.kinds import build_export_spec
from experiments.ane_engineering.export.package_hash import package_content_hash


@pytest.mark.parametrize("kind", ["layer", "body"])
def test_lean_pipeline_gives_the_default_pipelines_package(tiny, tmp_path, kind):
    spec = build_export_spec(tiny, kind, 96)
    hashes = {}
    for lean in (True, False):
        path = tmp_path / f"{kind}-{lean}.mlpackage"
        convert(spec, lean=lean).save(str(path))
        hashes[lean] = package_content_hash(path)
    assert hashes[True] == hashes[False]
