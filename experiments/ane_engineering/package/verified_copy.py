"""Run exactly the bytes that were verified: read a package once into a private copy, hash the copy, use the copy.

Hashing a package in place and then letting a backend read it again leaves a window in which the files can be
swapped (a check-then-load race): the run would use other weights while the evidence records the verified hash.
Here the package is copied once into a fresh private directory (mode 0700), the copy is hashed and compared with
the manifest, and the caller loads the copy; nothing reads the user's directory again. Symlinks are copied as links
and refused, so nothing outside the package enters the copy.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..core import stop
from ..core.errors import HarnessError
from .manifest import package_path
from .package_hash import package_content_hash


class PackageVerificationError(HarnessError):
    """A package whose bytes are not the ones its manifest seals."""


@contextmanager
def verified_copy(package_dir: Path, manifest: dict) -> Iterator[Path]:
    """Yield a private copy of the manifest's package whose content hash equals the manifest's; removed on exit."""
    source = package_path(package_dir, manifest)
    if not source.is_dir():
        raise PackageVerificationError(f"{package_dir}: no package at {source}")
    # removed on exit, also when a stop request ends the command (core/stop.py)
    with stop.scratch(lambda: tempfile.mkdtemp(prefix="ane-verified-")) as workdir:
        copy = workdir / source.name
        shutil.copytree(source, copy, symlinks=True)
        links = [p for p in copy.rglob("*") if p.is_symlink()]
        if links:
            raise PackageVerificationError(f"{package_dir}: the package contains symlinks "
                                           f"({links[0].relative_to(copy)}); exports never do")
        actual = package_content_hash(copy)["sha256"]
        expected = manifest["package"]["content_hash"]["sha256"]
        if actual != expected:
            raise PackageVerificationError(f"{package_dir}: package content hash {actual[:12]}... differs from the "
                                           f"manifest's {expected[:12]}... (the package was modified)")
        yield copy
