"""A deterministic content hash of an .mlpackage.

coremltools writes `weights/weight.bin` byte-stably for the same graph and weights, but not the rest: the
package's `Manifest.json` names its items by random UUIDs, and `model.mlmodel` serialises its protobuf maps (e.g.
the metadata map) in an order that varies between processes. The hash therefore covers every file's bytes, except
that Manifest.json is replaced by a canonical form (its items keyed by path, with author and description, and the
path of the root model; UUIDs dropped) and model.mlmodel by its deterministic protobuf serialisation (map entries
sorted by key: the same message, always the same bytes). Any change to the program, a weight byte, or the set of
files changes it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..checkpoint.files import sha256_file
from ..core.errors import HarnessError
from ..core.json_documents import NON_EMPTY_STRING, STRING, open_object, read_json

MANIFEST = "Manifest.json"
PROGRAM_SUFFIX = ".mlmodel"


class DamagedPackageError(HarnessError):
    pass


# Core ML's Manifest.json: items keyed by UUID, each naming its path; the root model is one of them.
COREML_MANIFEST_SCHEMA = open_object({
    "fileFormatVersion": STRING,
    "itemInfoEntries": {"type": "object", "minProperties": 1, "additionalProperties": open_object({"path": NON_EMPTY_STRING})},
    "rootModelIdentifier": STRING,
})


def canonical_manifest(path: Path) -> bytes:
    manifest = read_json(path, COREML_MANIFEST_SCHEMA, DamagedPackageError)
    entries = manifest["itemInfoEntries"]
    if manifest["rootModelIdentifier"] not in entries:
        raise DamagedPackageError(f"{path}: rootModelIdentifier names no item; the package is damaged")
    items = {entry["path"]: {k: v for k, v in entry.items() if k != "path"} for entry in entries.values()}
    root = entries[manifest["rootModelIdentifier"]]["path"]
    canonical = {"fileFormatVersion": manifest["fileFormatVersion"], "items": items, "root": root}
    return json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()


def canonical_program(path: Path) -> bytes:
    from coremltools.proto import Model_pb2
    from google.protobuf.message import DecodeError

    model = Model_pb2.Model()
    try:
        model.ParseFromString(path.read_bytes())
    except DecodeError as error:
        raise DamagedPackageError(f"{path}: not a readable Core ML model ({error}); the package is damaged") from error
    return model.SerializeToString(deterministic=True)


def combine(files: dict[str, str]) -> str:
    """The package hash from its per-file hashes (canonical JSON of the map)."""
    return hashlib.sha256(json.dumps(files, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def package_files(package: Path) -> list[Path]:
    return sorted(p for p in Path(package).rglob("*") if p.is_file())


def package_content_hash(package: Path) -> dict:
    """{"sha256": ..., "files": {relative path: sha256}} with Manifest.json in canonical form."""
    package = Path(package)
    if not package.is_dir():
        raise FileNotFoundError(f"{package}: not an .mlpackage directory")
    files = {}
    for path in package_files(package):
        relative = path.relative_to(package).as_posix()
        if relative == MANIFEST:
            files[relative] = hashlib.sha256(canonical_manifest(path)).hexdigest()
        elif relative.endswith(PROGRAM_SUFFIX):
            files[relative] = hashlib.sha256(canonical_program(path)).hexdigest()
        else:
            files[relative] = sha256_file(path)
    return {"sha256": combine(files), "files": files,
            "covers": "every file; Manifest.json without item UUIDs; model.mlmodel as deterministic protobuf"}
