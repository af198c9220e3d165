"""Delta weight updates: write a same-architecture checkpoint's weights into a copy of an exported package.

From direct ANE programming (Orion): when only weights change, keep the program and the weight names identical
and swap the weight bytes instead of recompiling. Here: the MIL program (model.mlmodel) is copied byte for byte;
weights/weight.bin is written anew in one streamed pass, with the parent's headers and layout and the new
checkpoint's FP16 values at the same offset, size and dtype for every weight blob. The values come from the same
BC1S module the probe traces (so Q/K row order, folded scales and layouts are produced by one piece of code); every
blob is matched to a module tensor by the name coremltools gave its constant (`<module path with _>_to_fp16`). Anything
that cannot be matched exactly, a weight stored inline in the program that would change, a changed architecture, or a
palettized package is refused, and so is a parent the MIL module refuses (package/mil: a symlink or special file in it,
a Core ML manifest item leading outside it, a damaged blob header); the parent's other files are copied without
following any link.

Speed (the point of it; benchmarks/reweight_vs_export.py): the parent's hash is checked in a thread beside the
write, the new file is hashed as it is written, and nothing is copied or read twice. Figures against a re-export:
ANE_BENCHMARKS.md, from benchmarks/evidence/reweight_mmbert_base_shape.json.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import torch

from ..checkpoint import Checkpoint
from ..core.errors import HarnessError
from ..core.provenance import harness_fingerprint, portable_path, tool_versions
from ..core.staging import staged_directory
from ..core.torch_threads import single_torch_thread
from ..model.window_tiles import AttentionLayout
from .kinds import build_export_spec
from .manifest import PACKAGE_NAME, package_path, read_manifest, write_manifest
from .mil.blobs import CODE_OF, read_blob_table
from .mil.container import PackageFiles, copy_tree
from .mil.errors import ProgramLoadError
from .mil.load import check_package
from .mil.spec_check import BLOB_PREFIX
from .package_hash import combine, package_content_hash
from .streamed_file import StreamedFile

FP16_DTYPE_CODE = CODE_OF["fp16"]
FP16_BYTES = 2
WEIGHT_FILE_NAME = "weight.bin"
REPORT_NAME = "reweight.json"
HOST_ONLY_HEAD_FIELDS = ("calibration", "output_decimals", "action_head")  # never inside the package


class ReweightError(HarnessError):
    pass


def weight_file(package: Path) -> Path:
    """Where coremltools writes a package's weights; reweight writes only this file (checked_package)."""
    return Path(package) / "Data" / "com.apple.CoreML" / "weights" / WEIGHT_FILE_NAME


def program_file(package: Path) -> Path:
    return Path(package) / "Data" / "com.apple.CoreML" / "model.mlmodel"


def checked_package(package: Path) -> tuple[PackageFiles, object]:
    """(files, model spec) of a package that passes the MIL module's checks (no links, Core ML's manifest items
    inside, every blob header and const consistent) and keeps its program and weights where coremltools writes
    them: the one weight file reweight rewrites is then the one the program reads."""
    files, spec, _ = check_package(package)
    if files.model_file != program_file(package) or files.weights_dir != weight_file(package).parent:
        raise ReweightError(f"{package}: its Manifest.json puts the model at {files.model_file} and the weights at "
                            f"{files.weights_dir}; reweight rewrites {weight_file(package)} only")
    return files, spec


def device_config(config: dict) -> dict:
    """The part of a model config that shapes the package (host-side heads and calibration excluded)."""
    out = json.loads(json.dumps(config))
    if out.get("head"):
        for field in HOST_ONLY_HEAD_FIELDS:
            out["head"].pop(field, None)
    return out


def _differences(a, b, path="") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out += _differences(a.get(key), b.get(key), f"{path}.{key}" if path else key)
        return out
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"]


def _constants(package: Path) -> dict:
    """Blob constants of the program, read from the protobuf alone (no weights are loaded):
    {name: (metadata offset, shape, is_integer)}; and the names of constants stored inline."""
    from coremltools.proto import MIL_pb2

    _, model = checked_package(package)
    integer_types = {value for name, value in MIL_pb2.DataType.items() if "INT" in name}
    blobs, inline = {}, set()
    for function in model.mlProgram.functions.values():
        for block in function.block_specializations.values():
            for op in block.operations:
                if op.type != "const":
                    continue
                value = op.attributes["val"]
                name = op.outputs[0].name
                if value.WhichOneof("value") == "blobFileValue":
                    if value.blobFileValue.fileName != BLOB_PREFIX + WEIGHT_FILE_NAME:
                        raise ReweightError(f"{package}: const '{name}' reads blob file "
                                            f"{value.blobFileValue.fileName!r}; reweight rewrites {WEIGHT_FILE_NAME}")
                    tensor = value.type.tensorType
                    shape = tuple(d.constant.size for d in tensor.dimensions)
                    blobs[name] = (value.blobFileValue.offset, shape, tensor.dataType in integer_types)
                else:
                    inline.add(name)
    return blobs, inline


class ModuleTensors(dict):
    """{coremltools constant name: FP32 tensor} of the BC1S module; `buffers` names those that are not checkpoint
    tensors but fixed by the architecture (ones and zeros channels, RoPE tables, rotation matrices)."""

    def __init__(self, values: dict, buffers: set[str]):
        super().__init__(values)
        self.buffers = frozenset(buffers)


def module_tensors(checkpoint: Checkpoint, manifest: dict) -> ModuleTensors:
    """Every parameter and buffer of the BC1S module the parent was traced from (FP32 torch tensors, mostly views of
    the checkpoint's), keyed like coremltools names their constants. Cast to FP16 only while writing."""
    kind, length = manifest["kind"], manifest["length"]
    if kind == "baseline":
        raise ReweightError("baseline packages are not BC1S exports; re-export them")
    spec = build_export_spec(checkpoint, kind, length, manifest.get("layer_index") or 0,
                             attention=AttentionLayout.from_json(manifest.get("attention")))
    key = lambda name: name.replace(".", "_")  # noqa: E731
    parameters = {key(name): t.detach() for name, t in spec.module.named_parameters()}
    buffers = {key(name): t.detach() for name, t in spec.module.named_buffers()}
    return ModuleTensors({**parameters, **buffers}, set(buffers) - set(parameters))


def _without_units(shape) -> tuple[int, ...]:
    return tuple(int(d) for d in shape if int(d) != 1)


def plan_blobs(package: Path, values: dict) -> tuple[dict, dict]:
    """{metadata offset: new tensor} for every weight blob, after checking names, shapes and inline constants."""
    blobs, inline = _constants(package)
    layout = {blob.metadata_offset: (blob.dtype, blob.size, blob.data_offset)
              for blob in read_blob_table(weight_file(package)).values()}
    writes, matched, structural = {}, set(), 0
    for name, (meta, shape, is_integer) in sorted(blobs.items()):
        key = name[: -len("_to_fp16")] if name.endswith("_to_fp16") else name
        if key not in values and is_integer:
            structural += 1  # e.g. split sizes: fixed by the architecture, which is checked to be unchanged
            continue
        if key not in values:
            raise ReweightError(f"weight blob '{name}' matches no tensor of the model; this package was not "
                                "exported by this harness's probe (or coremltools renamed it): re-export instead")
        value = values[key]
        dtype, size, _ = layout[meta]
        fp16_bytes = value.numel() * FP16_BYTES
        if _without_units(value.shape) == _without_units(shape):  # e.g. a (1, C, 1, 1) norm weight fused as (C,)
            value = value.reshape(tuple(shape))  # package/layer_norm_gamma.py: same values, same order
        if tuple(value.shape) != tuple(shape) or dtype != FP16_DTYPE_CODE or size != fp16_bytes:
            raise ReweightError(f"weight '{name}': package holds shape {list(shape)} dtype code {dtype} ({size} "
                                f"bytes); the new checkpoint gives {list(value.shape)} float16 ({fp16_bytes} bytes)")
        writes[meta] = value
        matched.add(key)
    buffers = getattr(values, "buffers", frozenset())
    for key in values:  # every checkpoint tensor must own a blob: inline or merged constants cannot be swapped
        if key in matched:
            continue
        if key + "_to_fp16" in inline or key in inline:
            if key in buffers:
                continue  # fixed by the architecture, which is checked unchanged: the same value is already there
            raise ReweightError(f"tensor '{key}' is stored inline in the program text; a new value would change "
                                "the program: re-export instead")
        if key in buffers:
            # Not a checkpoint tensor: traced away (e.g. the marker-slot ones of an encoder without a decision
            # head) or merged with an identical constant. Its value depends on the architecture alone, so whatever
            # the package holds for it is already right -- unless it was merged into a checkpoint tensor's blob,
            # whose new value would then change it too.
            _require_not_merged_into_a_weight(key, values[key], package, blobs, layout, buffers)
            continue
        raise ReweightError(f"tensor '{key}' has no constant of its own in the package (coremltools merged it "
                            "with an identical one); reweighting cannot split it: re-export instead")
    return writes, {"blobs_rewritten": len(writes), "structural_blobs_kept": structural}


def _require_not_merged_into_a_weight(key: str, value, package: Path, blobs: dict, layout: dict,
                                      buffers: frozenset) -> None:
    """A buffer with no constant of its own may have been merged (const deduplication) into the blob of a checkpoint
    tensor with the same shape and FP16 bytes; then reweighting that tensor would change the buffer: refused.
    (Conservative: an equal weight that was not merged is refused too.)"""

    target = value.to(dtype=torch.float16).contiguous().numpy().tobytes()
    shape = _without_units(value.shape)
    with open(weight_file(package), "rb") as handle:
        for name, (meta, blob_shape, is_integer) in blobs.items():
            owner = name[: -len("_to_fp16")] if name.endswith("_to_fp16") else name
            if owner in buffers or is_integer or _without_units(blob_shape) != shape:
                continue
            _dtype, size, data_offset = layout[meta]
            if size != len(target):
                continue
            handle.seek(data_offset)
            if handle.read(size) == target:
                raise ReweightError(f"buffer '{key}' shares the constant of weight '{owner}' (coremltools merged two "
                                    "equal constants); a new weight would change it: re-export instead")


def reweight(parent_dir: Path, checkpoint: Checkpoint, output: Path, compiled: Path | None = None) -> dict:
    started = time.perf_counter()
    parent_dir = Path(parent_dir)
    parent = read_manifest(parent_dir)
    parent_package = package_path(parent_dir, parent)
    if parent.get("compression"):
        c = parent["compression"]
        raise ReweightError(
            f"{parent_dir} is palettized (W{c.get('bits')} {c.get('mode')}, group {c.get('group_size')}); its LUTs "
            "are not the new weights. Reweight its FP16 parent instead, then palettize that with the same settings: "
            f"palettize --bits {c.get('bits')} --mode {c.get('mode')} --group-size {c.get('group_size')}")
    differences = _differences(device_config(parent["model_config"]), device_config(asdict(checkpoint.config)))
    if differences:
        raise ReweightError("the new checkpoint's architecture differs from the package's: "
                            + "; ".join(differences[:8]))
    # Hashing the parent overlaps the FP16 cast and write: hashlib and torch release the GIL.
    # Nothing is published before it agrees with the manifest, and a modified parent is named as the cause first.
    # One torch thread: its spinning pool would otherwise compete with the hashing threads (the
    # reweight benchmark's evidence, benchmarks/evidence/reweight_mmbert_base_shape.json, times the whole path).
    with single_torch_thread(), ThreadPoolExecutor(max_workers=1) as pool:
        parent_hash = pool.submit(package_content_hash, parent_package)
        try:
            return _write_reweighted(parent_dir, parent, checkpoint, output, compiled, started, parent_hash)
        except Exception as error:
            try:
                _require_unmodified(parent_dir, parent, parent_hash)
            except ReweightError as modified:
                raise modified from error
            raise


def _require_unmodified(parent_dir: Path, parent: dict, parent_hash) -> None:
    """Wait for the parent's content hash (a future) and refuse if it is not the one its manifest records."""
    try:
        modified = parent_hash.result()["sha256"] != parent["package"]["content_hash"]["sha256"]
    except ProgramLoadError as error:
        raise ReweightError(f"{parent_dir}: modified package: {error}") from error
    if modified:
        raise ReweightError(f"{parent_dir}: package content hash differs from its manifest (modified package)")


def _write_reweighted(parent_dir: Path, parent: dict, checkpoint: Checkpoint, output: Path, compiled: Path | None,
                      started: float, parent_hash) -> dict:
    parent_package = package_path(parent_dir, parent)
    writes, counts = plan_blobs(parent_package, module_tensors(checkpoint, parent))
    with staged_directory(output, [parent_dir]) as staging:
        package = staging / PACKAGE_NAME
        copy_tree(parent_package, package,
                  skip=frozenset({weight_file(parent_package).relative_to(parent_package).as_posix()}),
                  directory_mode=0o777)
        weight_sha256 = write_weight_file(weight_file(parent_package), weight_file(package), writes)
        _require_unmodified(parent_dir, parent, parent_hash)
        identity = verify_identity(parent_package, package)
        content_hash = updated_content_hash(parent["package"]["content_hash"], package, weight_sha256)
        manifest = {**{k: v for k, v in parent.items() if k != "manifest_sha256"},
                    "source": checkpoint.hashes, "model_config": json.loads(json.dumps(asdict(checkpoint.config))),
                    "package": {"path": PACKAGE_NAME, "content_hash": content_hash},
                    "tools": tool_versions(), "harness": harness_fingerprint(), "created_by": "reweight",
                    "parent": {"path": portable_path(parent_dir, staging), "manifest_sha256": parent["manifest_sha256"],
                               "package_sha256": parent["package"]["content_hash"]["sha256"],
                               "source": parent["source"]}}
        write_manifest(staging, manifest)
        report = {"format": "ane-engineering/reweight/1", "seconds": time.perf_counter() - started, **counts,
                  "identity": identity, "package_sha256": content_hash["sha256"], "source": checkpoint.hashes,
                  "parent": manifest["parent"], "kind": parent["kind"], "length": parent["length"]}
        if compiled is not None:
            report["compiled"] = reweight_compiled(Path(compiled), package, staging / Path(compiled).name)
        (staging / REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def write_weight_file(parent: Path, output: Path, writes: dict) -> str:
    """Write the new weight.bin in one sequential pass and return its SHA256. Every byte outside the rewritten blobs'
    data (file header, blob headers, padding, structural blobs) is copied from the parent; each rewritten blob is
    cast to FP16 as it is appended (streamed_file.py: hashed and written by a second thread)."""
    with open(parent, "rb") as source, StreamedFile(output) as sink:
        position = 0
        for blob in read_blob_table(parent).values():
            if blob.metadata_offset not in writes:
                continue  # kept blobs travel with the bytes copied up to the next rewritten one
            sink.write_bytes(source.read(blob.data_offset - position))  # headers, padding, kept blobs since the last
            sink.write_fp16(writes[blob.metadata_offset])
            source.seek(blob.data_offset + blob.size)
            position = blob.data_offset + blob.size
        sink.write_bytes(source.read())
        return sink.finish()


def updated_content_hash(parent_hash: dict, package: Path, weight_sha256: str) -> dict:
    """The package hash after only weight.bin changed: the other files were copied byte for byte (and the program
    was verified identical), so their entries carry over; weight.bin's is the hash of the bytes written. Same result
    as package_content_hash (tests/package/test_reweight.py compares them)."""
    files = dict(parent_hash["files"])
    files[weight_file(package).relative_to(package).as_posix()] = weight_sha256
    return {**parent_hash, "files": files, "sha256": combine(files)}


def _layout_record(weights: Path) -> dict:
    """What a weight file's layout is compared by: its blob table (meta offset, dtype, size, data offset) and size."""
    layout = [(b.metadata_offset, b.dtype, b.size, b.data_offset) for b in read_blob_table(weights).values()]
    return {"blobs": len(layout), "bytes": weights.stat().st_size,
            "blob_table_sha256": hashlib.sha256(json.dumps(layout).encode()).hexdigest()}


def verify_identity(parent_package: Path, package: Path) -> dict:
    """Only weight bytes may differ: the program is byte-identical and the blob layout (offsets, sizes, dtypes)
    is the same. Records both sides of each comparison; raises if either differs."""
    programs = {name: hashlib.sha256(program_file(path).read_bytes()).hexdigest()
                for name, path in (("parent", parent_package), ("package", package))}
    layouts = {name: _layout_record(weight_file(path)) for name, path in (("parent", parent_package),
                                                                           ("package", package))}
    record = {"program_sha256": programs, "weight_layout": layouts,
              "program_identical": programs["parent"] == programs["package"],
              "layout_identical": layouts["parent"] == layouts["package"]}
    if not record["program_identical"]:
        raise ReweightError("the MIL program changed while reweighting")
    if not record["layout_identical"]:
        raise ReweightError("the weight blob layout changed while reweighting")
    return record


def reweight_compiled(compiled: Path, package: Path, output: Path) -> dict:
    """macOS: the same swap inside a compiled .mlmodelc (its weights/weight.bin has the package's blob layout), so
    the update needs no recompilation. The copy is refused unless the layouts are identical. Not exercised against
    a real compiled model on the Linux build machines (they cannot compile); it only moves verified bytes."""
    source = Path(compiled) / "weights" / "weight.bin"
    if not source.is_file():
        raise ReweightError(f"{compiled}: no weights/weight.bin (not a compiled ML Program)")
    layouts = {"compiled": _layout_record(source), "package": _layout_record(weight_file(package))}
    layout_identical = layouts["compiled"]["blob_table_sha256"] == layouts["package"]["blob_table_sha256"]
    if not layout_identical:
        raise ReweightError(f"{compiled}: its weight layout differs from the package's; recompile instead")
    shutil.copytree(compiled, output)
    shutil.copyfile(weight_file(package), output / "weights" / "weight.bin")
    return {"path": output.name, "weight_layout": layouts, "layout_identical": layout_identical}
