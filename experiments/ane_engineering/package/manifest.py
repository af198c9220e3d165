"""manifest.json: what a package is and where it came from, sealed with a hash of its own content.

Fields: kind, bucket length, deployment target; the source's weights/config/tokenizer SHA256 and model config;
the package content hash (package_hash.py); the I/O contract; tool versions; the harness fingerprint; the parent
package and compression settings for derived packages. `manifest_sha256` covers everything else, so an edited
manifest is refused by readers.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from ..checkpoint import SOURCE_HASHES, Checkpoint
from ..checkpoint.files import sha256_json
from ..core.errors import HarnessError
from ..core.json_documents import (
    NON_EMPTY_STRING,
    NUMBER,
    POSITIVE_INTEGER,
    SHA256,
    STRING,
    array_of,
    open_object,
    read_json,
)
from ..core.limits import MAX_DIMENSION
from ..core.provenance import harness_fingerprint, tool_versions
from ..model.bc1s.lora import LORA_TARGETS
from ..model.window_tiles import LAYOUTS
from .convert import DEPLOYMENT_TARGET
from .kinds import KINDS, ExportSpec

PACKAGE_NAME = "model.mlpackage"
MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "ane-engineering/manifest/1"


# The fields readers use are required and checked; a derived package's manifest (palettize, reweight) adds its own.
TENSOR_CONTRACT = open_object({"name": NON_EMPTY_STRING, "dtype": STRING,
                               "shape": array_of({**POSITIVE_INTEGER, "maximum": MAX_DIMENSION}, 1)})
MANIFEST_SCHEMA = open_object({
    "format": {"const": MANIFEST_FORMAT}, "kind": {"enum": list(KINDS)},
    "length": {**POSITIVE_INTEGER, "maximum": MAX_DIMENSION}, "source": SOURCE_HASHES,
    "model_config": {"type": "object"},
    "package": open_object({
        "path": NON_EMPTY_STRING,  # that it stays inside the package directory is package_path's check
        "content_hash": open_object({"sha256": SHA256, "files": {"type": "object", "additionalProperties": SHA256}}),
    }),
    "io": open_object({"inputs": array_of(TENSOR_CONTRACT), "outputs": array_of(TENSOR_CONTRACT, 1)}),
    "manifest_sha256": SHA256,
}, {
    "layer_index": {"type": ["integer", "null"], "minimum": 0},
    "lora": {"type": ["object", "null"], "required": ["rank", "alpha", "targets"],
             "properties": {"rank": POSITIVE_INTEGER, "alpha": NUMBER,
                            "targets": array_of({"enum": list(LORA_TARGETS)}, 1, uniqueItems=True)}},
    "compression": {"type": ["object", "null"], "required": ["method"]},
    # How sliding-window layers were exported (model/window_tiles.py); absent or null: dense.
    "attention": {"type": ["object", "null"], "required": ["layout"],
                  "properties": {"layout": {"enum": list(LAYOUTS)},
                                 "tile": {"type": ["integer", "null"], "minimum": 1}}},
    "parent": {"type": ["object", "null"]},
    "tools": {"type": "object"}, "harness": {"type": "object"}, "created_by": STRING,
})


class ManifestError(HarnessError):
    """A manifest that cannot be trusted."""


def seal(manifest: dict) -> dict:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return {**body, "manifest_sha256": sha256_json(body)}


def manifest_for(checkpoint: Checkpoint, spec: ExportSpec, package_hash: dict, layer_index: int | None) -> dict:
    return seal({
        "format": MANIFEST_FORMAT,
        "kind": spec.kind,
        "length": spec.length,
        "layer_index": layer_index,
        "enumerated_lengths": list(spec.enumerated_lengths) or None,
        "deployment_target": DEPLOYMENT_TARGET,
        "compute_precision": "float16",
        "source": checkpoint.hashes,
        "model_config": json.loads(json.dumps(asdict(checkpoint.config))),
        "package": {"path": PACKAGE_NAME, "content_hash": package_hash},
        "io": {"inputs": [c.to_json() for c in spec.inputs], "outputs": [c.to_json() for c in spec.outputs]},
        "tools": tool_versions(),
        "harness": harness_fingerprint(),
        "created_by": "probe",
        "parent": None,
        "compression": None,
        "lora": spec.lora.to_json() if spec.lora else None,
        "attention": spec.attention,
        # Only when the residual stream was rescaled (model/bc1s/stream_scale.py): unscaled manifests keep their fields.
        **({"fp16_scale": spec.fp16_scale} if spec.fp16_scale is not None else {}),
    })


def write_manifest(directory: Path, manifest: dict) -> None:
    (Path(directory) / MANIFEST_NAME).write_text(json.dumps(seal(manifest), indent=2) + "\n", encoding="utf-8")


def package_path(package_dir: Path, manifest: dict) -> Path:
    """The manifest's package, which must lie inside `package_dir`: a relative path without '..' that does not
    resolve (through a symlink) anywhere else. Otherwise an edited and re-sealed manifest could send every reader to
    another package's bytes."""
    relative = manifest["package"]["path"]  # a non-empty string (MANIFEST_SCHEMA)
    parts = Path(relative).parts
    if Path(relative).is_absolute() or ".." in parts or "\\" in relative:
        raise ManifestError(f"{package_dir}: package path {relative!r} must be relative to the package directory "
                            "and stay inside it")
    root = Path(package_dir).resolve()
    resolved = (root / relative).resolve()
    if root not in resolved.parents:
        raise ManifestError(f"{package_dir}: package path {relative!r} resolves to {resolved}, outside the package "
                            "directory (a symlink leading out)")
    return Path(package_dir) / relative


def read_manifest(package_dir: Path) -> dict:
    path = Path(package_dir) / MANIFEST_NAME
    manifest = read_json(path, MANIFEST_SCHEMA, ManifestError)
    if manifest["manifest_sha256"] != seal(manifest)["manifest_sha256"]:
        raise ManifestError(f"{path}: content does not match its manifest_sha256 (edited or damaged)")
    return manifest
