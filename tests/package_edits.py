"""Copies and edits of exported packages, for tests that damage one: the weight file's blobs, the largest weight,
re-sealing as an honest export of the changed bytes would, and whether a package still matches its seal.

The blob walk is the test side's own reading of the MIL weight file (a 64-byte file header whose first field is the
blob count, then per blob a 64-byte header: sentinel 0xDEADBEEF, dtype code, byte size, data offset, each blob's
data padded to 64 bytes), so a test that damages a weight file does not rely on the loader it is testing.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Callable

import numpy as np

from experiments.ane_engineering.package.manifest import read_manifest, write_manifest
from experiments.ane_engineering.package.package_hash import package_content_hash

BLOB_SENTINEL = 0xDEADBEEF
HEADER_BYTES = 64


def weight_bin(mlpackage: Path) -> Path:
    """The MIL weight file of a .mlpackage directory."""
    return Path(mlpackage) / "Data" / "com.apple.CoreML" / "weights" / "weight.bin"


def weight_blobs(path: Path) -> list[tuple[int, int, int, int]]:
    """(header offset, dtype code, byte size, data offset) of every blob of a MIL weight file, in file order."""
    data = Path(path).read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    found, offset = [], HEADER_BYTES
    for _ in range(count):
        sentinel, dtype, size, data_offset = struct.unpack_from("<IIQQ", data, offset)
        assert sentinel == BLOB_SENTINEL and data_offset + size <= len(data), (path, offset)
        found.append((offset, dtype, size, data_offset))
        offset = data_offset + size
        offset += -offset % HEADER_BYTES
    return found


def copy_package(source: Path, target: Path) -> Path:
    """A copy of a package directory (manifest.json, model.mlpackage, reports) at `target`."""
    shutil.copytree(source, target)
    return target


def edit_largest_weight(package_dir: Path, edit: Callable[[np.ndarray], np.ndarray]) -> None:
    """Replace the largest blob of the package's weight file, an FP16 conv weight, by edit(its values), in place."""
    path = weight_bin(Path(package_dir) / "model.mlpackage")
    _, _, size, offset = max(weight_blobs(path), key=lambda blob: blob[2])
    data = bytearray(path.read_bytes())
    values = np.frombuffer(bytes(data[offset:offset + size]), dtype=np.float16).copy()
    changed = np.asarray(edit(values), dtype=np.float16)
    assert changed.shape == values.shape
    data[offset:offset + size] = changed.tobytes()
    path.write_bytes(bytes(data))


def reseal(package_dir: Path) -> None:
    """What an honest export of the changed bytes would carry: the content hash recomputed, the manifest re-sealed."""
    manifest = read_manifest(package_dir)
    manifest["package"]["content_hash"] = package_content_hash(Path(package_dir) / manifest["package"]["path"])
    write_manifest(package_dir, manifest)


def intact(package_dir: Path) -> bool:
    """Whether the package's bytes still have the content hash its manifest records."""
    manifest = read_manifest(package_dir)
    return (package_content_hash(Path(package_dir) / "model.mlpackage")["sha256"]
            == manifest["package"]["content_hash"]["sha256"])
