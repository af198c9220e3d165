"""A deterministic content hash of an .mlpackage.

coremltools writes `model.mlmodel` and `weights/weight.bin` byte-stably for the same graph and weights, but the
package's `Manifest.json` names its items by random UUIDs. The hash therefore covers every file's bytes, except
that Manifest.json is replaced by a canonical form: its items keyed by path (author, description) and the path of
the root model, with the UUIDs dropped. Any change to the program, a weight byte, or the set of files changes it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MANIFEST = "Manifest.json"


def canonical_manifest(path: Path) -> bytes:
    manifest = json.loads(path.read_text(encoding="utf-8"))
    entries = manifest.get("itemInfoEntries", {})
    items = {entry["path"]: {k: v for k, v in entry.items() if k != "path"} for entry in entries.values()}
    root = entries.get(manifest.get("rootModelIdentifier"), {}).get("path")
    canonical = {"fileFormatVersion": manifest.get("fileFormatVersion"), "items": items, "root": root}
    return json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()


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
        data = canonical_manifest(path) if relative == MANIFEST else path.read_bytes()
        files[relative] = hashlib.sha256(data).hexdigest()
    total = hashlib.sha256(json.dumps(files, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return {"sha256": total, "files": files, "covers": "every file; Manifest.json canonicalised without item UUIDs"}
