"""A deterministic content hash of an .mlpackage.

coremltools writes `weights/weight.bin` byte-stably for the same graph and weights, but not the rest: the
package's `Manifest.json` names its items by random UUIDs, and `model.mlmodel` serialises its protobuf maps (e.g.
the metadata map) in an order that varies between processes. The hash therefore covers every file's bytes, except
that Manifest.json is replaced by a canonical form (its items keyed by path, with author and description, and the
path of the root model; UUIDs dropped) and model.mlmodel by its deterministic protobuf serialisation (map entries
sorted by key: the same message, always the same bytes). Any change to the program, a weight byte, or the set of
files changes it.

Only a package the MIL module accepts is hashed (package/mil/container.py): a symlink, FIFO or device in it, or a
Core ML manifest item that leads outside it, is refused, so the hash describes every byte a backend can run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..core.limits import MAX_PROGRAM_BYTES, host_memory_bound
from ..core.regular_files import open_regular, read_regular
from .mil.container import open_package
from .mil.errors import ProgramLoadError

MANIFEST = "Manifest.json"
PROGRAM_SUFFIX = ".mlmodel"


def canonical_manifest(manifest: dict) -> bytes:
    """Core ML's Manifest.json (as checked by the MIL module) without its item UUIDs."""
    entries = manifest["itemInfoEntries"]
    items = {entry["path"]: {k: v for k, v in entry.items() if k != "path"} for entry in entries.values()}
    root = entries[manifest["rootModelIdentifier"]]["path"]
    canonical = {"fileFormatVersion": manifest["fileFormatVersion"], "items": items, "root": root}
    return json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()


def canonical_program(path: Path) -> bytes:
    from coremltools.proto import Model_pb2
    from google.protobuf.message import DecodeError

    model = Model_pb2.Model()
    try:
        model.ParseFromString(read_regular(path, MAX_PROGRAM_BYTES, "Core ML model file", follow_links=False,
                                           error=ProgramLoadError))
    except (DecodeError, RecursionError) as error:
        raise ProgramLoadError(f"{path}: not a readable Core ML model ({error}); the package is damaged") from error
    return model.SerializeToString(deterministic=True)


def combine(files: dict[str, str]) -> str:
    """The package hash from its per-file hashes (canonical JSON of the map)."""
    return hashlib.sha256(json.dumps(files, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 of a package file, read as a regular file without following a link."""
    with open_regular(path, host_memory_bound(), "package file", follow_links=False, error=ProgramLoadError) as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def package_content_hash(package: Path) -> dict:
    """{"sha256": ..., "files": {relative path: sha256}} with Manifest.json in canonical form."""
    checked = open_package(Path(package))
    files = {}
    for relative in checked.files:
        path = checked.root / relative
        if relative == MANIFEST:
            files[relative] = hashlib.sha256(canonical_manifest(checked.manifest)).hexdigest()
        elif relative.endswith(PROGRAM_SUFFIX):
            files[relative] = hashlib.sha256(canonical_program(path)).hexdigest()
        else:
            files[relative] = file_sha256(path)
    return {"sha256": combine(files), "files": files,
            "covers": "every file; Manifest.json without item UUIDs; model.mlmodel as deterministic protobuf"}
