"""One palettized candidate: a weight-only palettization of an exported package, with its own sealed manifest.

Only conv weights of more than `weight_threshold` elements are palettized (per grouped output channel, one FP16
LUT of 2^bits entries per group); RoPE tables, norm parameters and masks stay untouched (a global config would
hit the RoPE tables, so selection is by op type). The manifest records the parent's hashes and every setting.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from ..core.errors import HarnessError
from ..core.provenance import harness_fingerprint, portable_path, tool_versions
from ..package.convert import quiet_coremltools
from ..package.manifest import PACKAGE_NAME, read_manifest, write_manifest
from ..package.package_hash import package_content_hash
from ..package.verified_copy import verified_copy
from ..core.provenance import peak_rss_bytes
from ..core.staging import staged_directory

MODES = ("uniform", "kmeans")
BITS = (8, 6, 4)
WEIGHT_THRESHOLD = 2048
OP_TYPES = ("conv",)
REPORT_NAME = "palettize.json"


class PalettizeError(HarnessError):
    pass


def package_bytes(package: Path) -> int:
    return sum(p.stat().st_size for p in Path(package).rglob("*") if p.is_file())


def resolve_implementation(mode: str, implementation: str) -> str:
    if implementation == "auto":
        return "exact" if mode == "kmeans" else "coremltools"
    if implementation == "exact" and mode != "kmeans":
        raise PalettizeError("the exact implementation is k-means; use --implementation coremltools for uniform")
    return implementation


def uncompressed_parent(parent_dir: Path) -> dict:
    manifest = read_manifest(parent_dir)
    if manifest.get("compression"):
        raise PalettizeError(f"{parent_dir}: already compressed ({manifest['compression']['method']}); "
                             "palettize the uncompressed export")
    return manifest


def palettized_contents(package: Path) -> dict:
    """What a saved package really holds: conv weights over WEIGHT_THRESHOLD elements, and which of them are fed by
    a LUT (with the bits and group size each LUT implies: lut (Cout/group, 1, 1, 1, 2^bits, 1))."""
    from ..package.mil.load import load_program
    from ..package.mil.walk import walk_operations

    program = load_program(package).program
    producers = {out.name: op for op in walk_operations(program) for out in op.outputs}
    eligible, palettized, bits, groups = [], [], set(), set()
    for op in walk_operations(program):
        if op.op_type not in OP_TYPES:
            continue
        weight = op.inputs["weight"]
        if weight.shape is None or int(np.prod(weight.shape)) <= WEIGHT_THRESHOLD:
            continue
        eligible.append(op.name)
        source = producers.get(weight.name)
        if source is not None and source.op_type == "constexpr_lut_to_dense":
            palettized.append(op.name)
            lut = source.inputs["lut"].shape
            bits.add(int(np.log2(lut[-2])))
            groups.add(int(weight.shape[0]) // int(lut[0]))
    return {"eligible_weights": len(eligible), "palettized_weights": len(palettized), "bits": sorted(bits),
            "group_sizes": sorted(groups), "unpalettized": [n for n in eligible if n not in palettized]}


def require_contents(contents: dict, bits: int, group_size: int) -> None:
    """A manifest never records a compression the package does not have: refuse a palettization that left eligible
    weights dense, or whose LUTs are not the requested bits and group size."""
    if not contents["palettized_weights"]:
        raise PalettizeError(f"palettization changed nothing: none of the {contents['eligible_weights']} conv weights "
                             f"over {WEIGHT_THRESHOLD} elements got a LUT (group size {group_size} cannot split their "
                             "output channels?)")
    if contents["unpalettized"]:
        raise PalettizeError(f"{len(contents['unpalettized'])} of {contents['eligible_weights']} eligible conv weights "
                             f"were left dense (e.g. {contents['unpalettized'][0]}); refusing a partly palettized "
                             f"package recorded as W{bits}")
    if contents["bits"] != [bits] or contents["group_sizes"] != [group_size]:
        raise PalettizeError(f"the package holds LUTs of {contents['bits']} bits and groups of {contents['group_sizes']}"
                             f", not the requested W{bits}, group {group_size}")


def palettize_candidate(parent_dir: Path, output: Path, bits: int, mode: str, group_size: int, workers: int = 2,
                        implementation: str = "auto", progress=None) -> dict:
    if bits not in BITS:
        raise PalettizeError(f"--bits must be one of {BITS}, got {bits}")
    if mode not in MODES:
        raise PalettizeError(f"--mode must be one of {MODES}, got {mode!r}")
    if group_size < 1:
        raise PalettizeError(f"--group-size must be positive, got {group_size}")
    if workers < 1:
        raise PalettizeError(f"--workers must be >= 1, got {workers}")
    implementation = resolve_implementation(mode, implementation)
    say = progress or (lambda message: None)
    parent = uncompressed_parent(parent_dir)
    with verified_copy(Path(parent_dir), parent) as parent_package, \
            staged_directory(output, [parent_dir]) as staging:
        say(f"loading {parent_dir} (verified copy)")
        with quiet_coremltools():
            import coremltools as ct

            from ..package.palettize.fast_palettizer import palettize_package

            model = ct.models.MLModel(str(parent_package), skip_model_load=True)
            say(f"palettizing conv weights > {WEIGHT_THRESHOLD} elements: W{bits} {mode}, group {group_size}, "
                f"{implementation}, {workers} worker(s)")
            stats: dict = {}
            started = time.perf_counter()
            palettized = palettize_package(model, bits, group_size, mode=mode, weight_threshold=WEIGHT_THRESHOLD,
                                           op_types=OP_TYPES, workers=workers, implementation=implementation,
                                           stats=stats)
            seconds = time.perf_counter() - started
            say("saving, hashing and sealing the manifest")
            palettized.save(str(staging / PACKAGE_NAME))
            contents = palettized_contents(staging / PACKAGE_NAME)
        require_contents(contents, bits, group_size)
        content_hash = package_content_hash(staging / PACKAGE_NAME)
        compression = {"method": "palettize", "bits": bits, "mode": mode, "granularity": "per_grouped_channel",
                       "group_size": group_size, "weight_threshold": WEIGHT_THRESHOLD, "op_types": list(OP_TYPES),
                       "implementation": implementation, "workers": workers, "lut_dtype": "float16",
                       "palettized_weights": contents["palettized_weights"]}
        manifest = {**{k: v for k, v in parent.items() if k != "manifest_sha256"},
                    "package": {"path": PACKAGE_NAME, "content_hash": content_hash},
                    "tools": tool_versions(), "harness": harness_fingerprint(), "created_by": "palettize",
                    "parent": {"path": portable_path(parent_dir, staging), "manifest_sha256": parent["manifest_sha256"],
                               "package_sha256": parent["package"]["content_hash"]["sha256"]},
                    "compression": compression}
        write_manifest(staging, manifest)
        report = {
            "format": "ane-engineering/palettize/1",
            "compression": compression,
            "seconds": seconds,
            "stats": {k: v for k, v in stats.items() if isinstance(v, (int, float, str, bool))},
            "peak_rss_bytes": peak_rss_bytes(),
            "parent_bytes": package_bytes(parent_package),
            "package_bytes": package_bytes(staging / PACKAGE_NAME),
            "package_sha256": content_hash["sha256"],
            "parent": manifest["parent"],
            "kind": parent["kind"], "length": parent["length"], "source": parent["source"],
        }
        (staging / REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report
