"""What produced a result: tool versions, a fingerprint of the harness source, the machine.

Every manifest and evidence file embeds these, so a number can be traced to the exact code and tools behind it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import resource
import sys
from pathlib import Path

HARNESS_ROOT = Path(__file__).resolve().parent.parent  # experiments/ane_engineering
REPOSITORY_ROOT = HARNESS_ROOT.parents[1]  # the checkout that holds experiments/, benchmarks/ and docs/
TOOL_PACKAGES = ("torch", "coremltools", "numpy", "safetensors", "tokenizers", "huggingface_hub", "scikit-learn",
                 "numba", "scipy", "transformers")


def tool_versions() -> dict:
    versions = {"python": platform.python_version()}
    for package in TOOL_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def harness_files() -> list[Path]:
    """The harness source: every .py and .json under experiments/ane_engineering, in a fixed order."""
    return sorted(p for p in HARNESS_ROOT.rglob("*") if p.suffix in (".py", ".json") and "__pycache__" not in p.parts)


def harness_fingerprint() -> dict:
    digest = hashlib.sha256()
    files = harness_files()
    for path in files:
        digest.update(path.relative_to(HARNESS_ROOT).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return {"sha256": digest.hexdigest(), "files": len(files), "root": "experiments/ane_engineering"}


def machine() -> dict:
    """The machine, without any path of it (the interpreter is named by version in tool_versions)."""
    return {"platform": platform.platform(), "system": platform.system(), "machine": platform.machine(),
            "processor": platform.processor() or None, "cpu_count": os.cpu_count()}


def portable_path(path: Path | str, base: Path | str) -> str:
    """`path` as an evidence file records it: relative to `base`, the directory the evidence is written in.

    A run's files are recorded relative to each other, so the record holds wherever the run's directory is moved
    (a staging directory renamed to the output, a run committed to the repository) and names no directory of the
    machine that made it. A path that shares no directory with `base` but the filesystem root is recorded by its
    name only: the content hashes recorded beside it identify it."""
    path, base = Path(os.path.abspath(path)), Path(os.path.abspath(base))
    if os.path.commonpath([path, base]) == path.anchor:
        return path.name
    return Path(os.path.relpath(path, base)).as_posix()


def backend_record(description: dict) -> dict:
    """A backend's describe() as evidence records it: without the path the backend loaded from. The ANEAgent loads a
    private verified copy that is gone after the run; the evidence names what ran by its package and manifest
    hashes (and, where a command was given a package, by its portable_path)."""
    return {key: value for key, value in description.items() if key != "package"}


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far. On Linux, VmHWM of /proc/self/status: unlike ru_maxrss it
    is not inherited from the parent across fork and exec, so a child's figure is its own."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # KiB on Linux, bytes on macOS
