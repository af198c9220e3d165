"""One palettized candidate: a weight-only palettization of an exported package, with its own sealed manifest.

Only conv weights of more than `weight_threshold` elements are palettized (per grouped output channel, one FP16
LUT of 2^bits entries per group); RoPE tables, norm parameters and masks stay untouched (a global config would
hit the RoPE tables, so selection is by op type). The manifest records the parent's hashes and every setting.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np

from ..core.errors import HarnessError
from ..core.provenance import harness_fingerprint, peak_rss_bytes, portable_path, tool_versions
from ..core.staging import staged_directory
from ..package.convert import quiet_coremltools
from ..package.manifest import PACKAGE_NAME, read_manifest, write_manifest
from ..package.package_hash import package_content_hash
from ..package.verified_copy import verified_copy

MODES = ("uniform", "kmeans")
BITS = (8, 6, 4)
GROUP_AXES = ("output", "input")
WEIGHTINGS = ("none", "fisher")
DENSE_BITS = 16  # an allocation's "bits" of a layer left in FP16
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


def layer_of(const_name: str) -> str:
    """The layer a weight belongs to, for per-layer bit widths: "encoder.3" / "head.0" for the transformer layers
    (the converter names consts after their parameter paths, e.g. encoder_layers_3_mlp_input_weight_to_fp16), else
    the name's first word (the scorer's convs: "scorer")."""
    match = re.match(r"^(encoder|head)_layers_(\d+)_", const_name)
    return f"{match.group(1)}.{match.group(2)}" if match else const_name.split("_")[0]


def palettized_contents(package: Path) -> dict:
    """What a saved package really holds: conv weights over WEIGHT_THRESHOLD elements, and which of them are fed by
    a LUT (with the bits, group size and grouping axis each LUT implies: lut (Cout/G, 1, 1, 1, 2^bits, 1) for groups
    of output channels, (1, Cin/G, 1, 1, 2^bits, 1) for groups of input channels)."""
    from ..package.mil.load import load_program
    from ..package.mil.walk import walk_operations

    program = load_program(package).program
    producers = {out.name: op for op in walk_operations(program) for out in op.outputs}
    eligible, palettized, bits, groups, axes, per_weight, elements = [], [], set(), set(), set(), {}, {}
    for op in walk_operations(program):
        if op.op_type not in OP_TYPES:
            continue
        weight = op.inputs["weight"]
        if weight.shape is None or int(np.prod(weight.shape)) <= WEIGHT_THRESHOLD:
            continue
        eligible.append(op.name)
        source = producers.get(weight.name)
        const = weight.name.removesuffix("_palettized")
        if source is not None and source.op_type == "constexpr_lut_to_dense":
            palettized.append(op.name)
            lut = source.inputs["lut"].shape
            nbits = int(np.log2(lut[-2]))
            bits.add(nbits)
            if int(lut[0]) > 1 or int(lut[1]) > 1:  # one LUT for the whole weight fits either axis: no evidence
                axis = "input" if int(lut[0]) == 1 else "output"
                groups.add(int(weight.shape[0]) // int(lut[0]) if axis == "output"
                           else int(weight.shape[1]) // int(lut[1]))
                axes.add(axis)
            per_weight[const] = nbits
        else:
            per_weight[const] = 16
        elements[const] = int(np.prod(weight.shape))
    return {"eligible_weights": len(eligible), "palettized_weights": len(palettized), "bits": sorted(bits),
            "group_sizes": sorted(groups), "group_axes": sorted(axes),
            "unpalettized": [n for n in eligible if n not in palettized], "weight_bits": per_weight,
            "weight_elements": elements}


def require_contents(contents: dict, bits: int, group_size: int, allocation: dict | None = None,
                     group_axis: str = "output") -> None:
    """A manifest never records a compression the package does not have: refuse a palettization that left eligible
    weights dense, or whose LUTs are not the requested bits, group size and axis. With a per-layer `allocation`,
    every weight must hold exactly its layer's bits (16: left dense)."""
    if not contents["palettized_weights"]:
        raise PalettizeError(f"palettization changed nothing: none of the {contents['eligible_weights']} conv weights "
                             f"over {WEIGHT_THRESHOLD} elements got a LUT (group size {group_size} cannot split their "
                             "channels?)")
    if contents["group_sizes"] not in ([], [group_size]) or contents["group_axes"] not in ([], [group_axis]):
        raise PalettizeError(f"the package holds LUTs over groups of {contents['group_sizes']} along "
                             f"{contents['group_axes']}, not the requested group {group_size} along {group_axis}")
    if allocation is not None:
        wrong = [(name, got, allocation.get(layer_of(name))) for name, got in contents["weight_bits"].items()
                 if got != allocation.get(layer_of(name))]
        if wrong:
            raise PalettizeError(f"{len(wrong)} weight(s) do not hold their layer's allocated bits, e.g. "
                                 f"{wrong[0][0]}: {wrong[0][1]} bits, allocated {wrong[0][2]}")
        return
    if contents["unpalettized"]:
        raise PalettizeError(f"{len(contents['unpalettized'])} of {contents['eligible_weights']} eligible conv weights "
                             f"were left dense (e.g. {contents['unpalettized'][0]}); refusing a partly palettized "
                             f"package recorded as W{bits}")
    if contents["bits"] != [bits]:
        raise PalettizeError(f"the package holds LUTs of {contents['bits']} bits and groups of "
                             f"{contents['group_sizes']}, not the requested W{bits}, group {group_size}")


def palettize_candidate(parent_dir: Path, output: Path, bits: int, mode: str, group_size: int, workers: int = 2,
                        implementation: str = "auto", progress=None, *, group_axis: str = "output",
                        weighting: str = "none", calibration: Path | None = None, source: str | None = None,
                        allocation: dict | None = None, sensitivities_file: Path | None = None) -> dict:
    """Palettize `parent_dir`'s package into `output` (new) and seal its manifest; returns the palettize report.

    group_axis: LUTs per group of output or input channels. weighting "fisher": the k-means minimises the
    Fisher-weighted squared error (package/palettize/sensitivity.py) over `calibration` (default: the committed
    calibration set of the package's task); it needs the source checkpoint (`source`, default the manifest's).
    allocation: {layer: bits} (layers as `layer_of` names them, 16 = left dense) for a mixed-bit package; `bits`
    is then the largest allocated width. sensitivities_file: Fisher sensitivities computed once beforehand
    (`Sensitivities.save`; a sweep shares them between its candidates), checked against the weights by hash."""
    if allocation is not None:
        if not allocation or not set(allocation.values()) <= set(BITS) | {DENSE_BITS}:
            raise PalettizeError(f"an allocation gives every layer one of {BITS} or {DENSE_BITS} bits, "
                                 f"got {allocation}")
        bits = max(b for b in allocation.values() if b != DENSE_BITS) if set(allocation.values()) - {DENSE_BITS} \
            else BITS[0]
    if bits not in BITS:
        raise PalettizeError(f"--bits must be one of {BITS}, got {bits}")
    if mode not in MODES:
        raise PalettizeError(f"--mode must be one of {MODES}, got {mode!r}")
    if group_size < 1:
        raise PalettizeError(f"--group-size must be positive, got {group_size}")
    if workers < 1:
        raise PalettizeError(f"--workers must be >= 1, got {workers}")
    if group_axis not in GROUP_AXES:
        raise PalettizeError(f"--group-axis must be one of {GROUP_AXES}, got {group_axis!r}")
    if weighting not in WEIGHTINGS:
        raise PalettizeError(f"--weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    if calibration is not None and weighting != "fisher":
        raise PalettizeError("--calibration is the input set of --weighting fisher; it means nothing without it")
    implementation = resolve_implementation(mode, implementation)
    if (weighting != "none" or allocation is not None) and implementation != "exact":
        raise PalettizeError("sensitivity weighting and per-layer bits are the exact k-means's (--mode kmeans, "
                             "--implementation exact)")
    say = progress or (lambda message: None)
    parent = uncompressed_parent(parent_dir)
    sensitivities = None
    if sensitivities_file is not None:
        from ..package.palettize.sensitivity import Sensitivities

        if weighting != "fisher" or calibration is not None:
            raise PalettizeError("a sensitivities file stands for --weighting fisher and its own calibration set")
        sensitivities = Sensitivities.load(sensitivities_file)
    elif weighting == "fisher":
        from ..checkpoint import load_checkpoint
        from ..package.palettize.sensitivity import fisher_sensitivities

        checkpoint = load_checkpoint(source or parent["source"]["source"])
        if checkpoint.hashes["weights_sha256"] != parent["source"]["weights_sha256"]:
            raise PalettizeError(f"{parent_dir} was exported from other weights than {checkpoint.source}'s; Fisher "
                                 "sensitivities must come from the package's own source")
        say(f"Fisher sensitivities of the FP32 {parent['kind']} module at L{parent['length']}")
        sensitivities = fisher_sensitivities(checkpoint, parent["kind"], parent["length"], calibration,
                                             progress=say)
    bits_for = None if allocation is None else (lambda name: None if allocation.get(layer_of(name), DENSE_BITS)
                                                == DENSE_BITS else allocation[layer_of(name)])
    with verified_copy(Path(parent_dir), parent) as parent_package, \
            staged_directory(output, [parent_dir]) as staging:
        say(f"loading {parent_dir} (verified copy)")
        with quiet_coremltools():
            import coremltools as ct

            from ..package.palettize.fast_palettizer import palettize_package

            model = ct.models.MLModel(str(parent_package), skip_model_load=True)
            say(f"palettizing conv weights > {WEIGHT_THRESHOLD} elements: "
                f"{'mixed ' + str(allocation) if allocation else 'W' + str(bits)} {mode}, group {group_size} along "
                f"{group_axis}, weighting {weighting}, {implementation}, {workers} worker(s)")
            stats: dict = {}
            started = time.perf_counter()
            palettized = palettize_package(model, bits, group_size, mode=mode, weight_threshold=WEIGHT_THRESHOLD,
                                           op_types=OP_TYPES, workers=workers, implementation=implementation,
                                           stats=stats, group_axis=group_axis, bits_for=bits_for,
                                           sensitivities=sensitivities)
            seconds = time.perf_counter() - started
            say("saving, hashing and sealing the manifest")
            palettized.save(str(staging / PACKAGE_NAME))
            contents = palettized_contents(staging / PACKAGE_NAME)
        require_contents(contents, bits, group_size, allocation, group_axis)
        if allocation is not None and set(allocation) != {layer_of(n) for n in contents["weight_bits"]}:
            raise PalettizeError(f"the allocation names layers {sorted(allocation)}; the package's weights are in "
                                 f"{sorted({layer_of(n) for n in contents['weight_bits']})}")
        content_hash = package_content_hash(staging / PACKAGE_NAME)
        compression = {"method": "palettize", "bits": bits if allocation is None else "mixed", "mode": mode,
                       "granularity": "per_grouped_channel",
                       "group_size": group_size, "group_axis": group_axis, "weight_threshold": WEIGHT_THRESHOLD,
                       "op_types": list(OP_TYPES), "implementation": implementation, "workers": workers,
                       "lut_dtype": "float16", "palettized_weights": contents["palettized_weights"],
                       "weighting": None if sensitivities is None else {
                           **sensitivities.record, "weighted_weights": len(sensitivities.used),
                           "unweighted_weights": sorted(sensitivities.unweighted)}}
        if allocation is not None:
            compression["allocation"] = dict(sorted(allocation.items()))
            compression["max_bits"] = bits
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
