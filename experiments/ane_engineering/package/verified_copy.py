"""Run exactly the bytes that were verified: read a package once into a private copy, hash the copy, use the copy.

Hashing a package in place and then letting a backend read it again leaves a window in which the files can be
swapped (a check-then-load race): the run would use other weights while the evidence records the verified hash.
Here the package is copied once into a fresh private directory (mode 0700), the copy is hashed and compared with
the manifest, and the caller loads the copy; nothing reads the user's directory again. The copy holds every byte that
will run: it is made without following any link (package/mil/container.py: a symlink, FIFO or device in the package
is refused), and Core ML's own Manifest.json inside the copy must name only items inside it (an absolute or `..`
item path would send coremltools, and the backend, to bytes outside what was hashed).
"""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..core import stop
from ..core.errors import HarnessError
from .manifest import package_path
from .mil.container import copy_tree, open_package
from .mil.errors import ProgramLoadError
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
        try:
            copy_tree(source, copy)
            open_package(copy)  # what runs is the copy: its own manifest must stay inside it
        except ProgramLoadError as error:
            raise PackageVerificationError(str(error).replace(str(copy), str(source))) from None
        actual = package_content_hash(copy)["sha256"]
        expected = manifest["package"]["content_hash"]["sha256"]
        if actual != expected:
            raise PackageVerificationError(f"{package_dir}: package content hash {actual[:12]}... differs from the "
                                           f"manifest's {expected[:12]}... (the package was modified)")
        yield copy
