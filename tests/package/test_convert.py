"""The conversion shortcuts give exactly the package of the plain route: the lean pass pipeline against
coremltools' default one, and tracing at a short length (full-length buffers swapped in) against tracing at the
bucket length."""

from __future__ import annotations

import pytest

from experiments.ane_engineering.package.convert import convert
from experiments.ane_engineering.package.kinds import build_export_spec
from experiments.ane_engineering.package.package_hash import package_content_hash

pytestmark = pytest.mark.slow  # every test here converts, exports or starts Python


def _hash(spec, path, **options):
    convert(spec, **options).save(str(path))
    return package_content_hash(path)


@pytest.mark.parametrize("kind", ["layer", "body"])
def test_lean_pipeline_gives_the_default_pipelines_package(tiny, tmp_path, kind):
    spec = build_export_spec(tiny, kind, 96)
    assert _hash(spec, tmp_path / "lean.mlpackage", lean=True) == _hash(spec, tmp_path / "default.mlpackage",
                                                                        lean=False)


# ("encoder", 128): builtin:tiny's hidden size is 128 too, so only the length axes of the inputs may be shortened
@pytest.mark.parametrize("kind, length", [("body", 1024), ("layer", 192), ("encoder", 192), ("encoder", 128)])
def test_short_tracing_gives_the_full_length_package(tiny, tmp_path, kind, length):
    spec = build_export_spec(tiny, kind, length, layer_index=1)
    short = _hash(spec, tmp_path / "short.mlpackage", short_trace=True)
    assert short == _hash(spec, tmp_path / "full.mlpackage", short_trace=False)


def test_short_tracing_would_notice_a_missing_buffer(tiny, tmp_path):
    """If the length-dependent tables were not swapped in, the package would differ (the check above can fail)."""
    import torch

    from experiments.ane_engineering.package import convert as conversion

    spec = build_export_spec(tiny, "encoder", 192)
    good = _hash(spec, tmp_path / "good.mlpackage")
    original = conversion.trace

    def unswapped(spec, short=True):
        traced = original(spec, short)
        for _, module in traced.named_modules(remove_duplicate=False):
            for name, buffer in list(module.named_buffers(recurse=False)):
                setattr(module, name, torch.zeros_like(buffer))
        return traced

    conversion.trace = unswapped
    try:
        assert _hash(spec, tmp_path / "bad.mlpackage") != good
    finally:
        conversion.trace = original
