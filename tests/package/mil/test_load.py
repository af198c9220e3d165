"""Hostile and careless packages, inputs and files, each refused in one `error:` line (exit 2, no traceback).

Built from builtin:tiny's body and encoder exports (the session's shared packages) and a few small coremltools
conversions of MIL programs. What each group guards:

- the seal covers what runs: a sealed package whose Core ML Manifest.json names an item outside the package
  (absolute, `..`) or that holds a symlink leading out is refused by validate, encode, benchmark, sweep, reweight and
  execute; changing only the outside file after sealing cannot make a command run it;
- the loader refuses in one line: a damaged weight.bin, an inconsistent program or model description, a damaged
  package directory, in `execute` (run and --describe) and in every backend's load;
- `execute --inputs`: sizes and names of an .npz are checked before anything is inflated;
- every wait is bounded: while_loop has an iteration cap (and a bound on its values), and FIFOs, devices and
  directories are refused wherever the harness reads a file;
- a read-only install: execute runs where numba can write no cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

import command_support

ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import get_new_symbol, types  # noqa: E402
from coremltools.proto import MIL_pb2, Model_pb2  # noqa: E402

from experiments.ane_engineering import benchmark, encode, execute, reweight, sweep, validate  # noqa: E402
from experiments.ane_engineering.core.cli import run_main  # noqa: E402
from experiments.ane_engineering.core.json_documents import ANY_OBJECT, DocumentError, read_json  # noqa: E402
from experiments.ane_engineering.core.provenance import REPOSITORY_ROOT  # noqa: E402
from experiments.ane_engineering.package.manifest import read_manifest, write_manifest  # noqa: E402
from experiments.ane_engineering.package.mil.blobs import read_blob_table  # noqa: E402
from experiments.ane_engineering.package.mil.errors import ProgramLoadError  # noqa: E402
from experiments.ane_engineering.package.mil.load import LoadedProgram, load_program  # noqa: E402
from experiments.ane_engineering.package.package_hash import combine  # noqa: E402
from experiments.ane_engineering.package.verified_copy import verified_copy  # noqa: E402
from experiments.ane_engineering.run.backends import Backend, CoreMLBackend, MILBackend  # noqa: E402
from experiments.ane_engineering.run.mil.executor import MILExecutor  # noqa: E402
from experiments.ane_engineering.run.mil.npz_inputs import NpzError, read_inputs  # noqa: E402
from experiments.ane_engineering.run.mil.ops.control_flow import LoopLimitError  # noqa: E402

# Every test here damages a package exported from builtin:tiny (a session fixture) or runs a command in a process.
pytestmark = pytest.mark.slow

PACKAGE = "model.mlpackage"
CORE_ML = Path("Data") / "com.apple.CoreML"


# ------------------------------------------------------------------------------------------------------ helpers
def refused(main, argv, capsys, *needles) -> str:
    """Run a command as the shell would: exit 2, exactly one short `error:` line naming the problem, no traceback."""
    return command_support.refused(main, argv, capsys, *needles, max_chars=600)


@contextlib.contextmanager
def must_not_block(seconds: int = 60):
    """Fail (instead of hanging the suite) if the block waits longer than `seconds`: a FIFO read blocks forever."""
    def expire(signum, frame):
        raise AssertionError(f"blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def copy_export(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target


def model_file(package: Path) -> Path:
    return package / CORE_ML / "model.mlmodel"


def weight_file(package: Path) -> Path:
    return package / CORE_ML / "weights" / "weight.bin"


def edit_spec(package: Path, change) -> None:
    spec = Model_pb2.Model()
    spec.ParseFromString(model_file(package).read_bytes())
    change(spec)
    model_file(package).write_bytes(spec.SerializeToString())


def main_block(spec):
    function = spec.mlProgram.functions["main"]
    return function.block_specializations[function.opset]


def first_op(block, blob: bool | None = None):
    """The first non-const op (blob None), or the first const stored in (blob True) or out of (False) weight.bin."""
    for op in block.operations:
        if blob is None and op.type != "const":
            return op
        if blob is not None and op.type == "const":
            if (op.attributes["val"].WhichOneof("value") == "blobFileValue") == blob:
                return op
    raise AssertionError("no such op")


def edit_coreml_manifest(package: Path, change) -> None:
    path = package / "Manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def item(manifest: dict, name: str) -> dict:
    return next(entry for entry in manifest["itemInfoEntries"].values() if entry["name"] == name)


def patch_blob_header(package: Path, field: str, value: int) -> None:
    """Overwrite one field of the first blob header of weight.bin in place."""
    offsets = {"sentinel": (0, "<I"), "dtype": (4, "<I"), "size": (8, "<Q"), "offset": (16, "<Q")}
    start, fmt = offsets[field]
    data = bytearray(weight_file(package).read_bytes())
    struct.pack_into(fmt, data, 64 + start, value)
    weight_file(package).write_bytes(bytes(data))


def seal_as_before(export: Path) -> None:
    """Seal `export` as the harness did before its packages were checked: every file reachable from the package
    (links followed) hashed, Manifest.json in canonical form. What an old export or a careful attacker carries."""
    package = export / PACKAGE
    files = {}
    for directory, _, names in os.walk(package, followlinks=True):
        for name in names:
            path = Path(directory) / name
            relative = path.relative_to(package).as_posix()
            if relative == "Manifest.json":
                manifest = json.loads(path.read_text())
                entries = manifest["itemInfoEntries"]
                canonical = {"fileFormatVersion": manifest["fileFormatVersion"],
                             "items": {e["path"]: {k: v for k, v in e.items() if k != "path"}
                                       for e in entries.values()},
                             "root": entries[manifest["rootModelIdentifier"]]["path"]}
                data = json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
            elif relative.endswith(".mlmodel"):
                spec = Model_pb2.Model()
                spec.ParseFromString(path.read_bytes())
                data = spec.SerializeToString(deterministic=True)
            else:
                data = path.read_bytes()
            files[relative] = hashlib.sha256(data).hexdigest()
    manifest = read_manifest(export)
    manifest["package"]["content_hash"] = {"sha256": combine(files), "files": files}
    write_manifest(export, manifest)


def scale_weights(path: Path, factor: float) -> None:
    """Scale every fp16 blob of a weight file in place (headers untouched)."""
    data = bytearray(path.read_bytes())
    for blob in read_blob_table(path).values():
        values = np.frombuffer(bytes(data[blob.data_offset:blob.data_offset + blob.size]), np.float16) * factor
        data[blob.data_offset:blob.data_offset + blob.size] = values.astype(np.float16).tobytes()
    path.write_bytes(bytes(data))


def redirect(export: Path, outside: Path, how: str) -> None:
    """Make the package of `export` read its weights (or program) from `outside`, the way `how` says."""
    package = export / PACKAGE
    outside.mkdir(parents=True)
    if how in ("absolute-weights", "dotdot-weights"):
        shutil.move(str(package / CORE_ML / "weights"), outside / "weights")
        target = (outside / "weights").resolve()
        path = str(target) if how == "absolute-weights" else os.path.relpath(target, package / "Data")
        edit_coreml_manifest(package, lambda m: item(m, "weights").update(path=path))
    elif how == "dotdot-model":
        shutil.move(str(model_file(package)), outside / "model.mlmodel")
        path = os.path.relpath((outside / "model.mlmodel").resolve(), package / "Data")
        edit_coreml_manifest(package, lambda m: item(m, "model.mlmodel").update(path=path))
    elif how == "symlink-weight-file":
        shutil.move(str(weight_file(package)), outside / "weight.bin")
        weight_file(package).symlink_to((outside / "weight.bin").resolve())
    elif how == "symlink-weights-dir":
        shutil.move(str(package / CORE_ML / "weights"), outside / "weights")
        (package / CORE_ML / "weights").symlink_to((outside / "weights").resolve())
    else:
        raise ValueError(how)
    seal_as_before(export)


REDIRECTS = ("absolute-weights", "dotdot-weights", "dotdot-model", "symlink-weight-file", "symlink-weights-dir")
REDIRECT_NEEDLE = {"absolute-weights": "Manifest.json", "dotdot-weights": "Manifest.json",
                   "dotdot-model": "Manifest.json", "symlink-weight-file": "symlink", "symlink-weights-dir": "symlink"}


@pytest.fixture(scope="module")
def body(tiny_packages):
    return tiny_packages.get("body", 96)[0]


@pytest.fixture(scope="module")
def body_inputs(body, tmp_path_factory):
    """A zero .npz for the body package's inputs (what execute --inputs takes)."""
    path = tmp_path_factory.mktemp("inputs") / "in.npz"
    loaded = load_program(body / PACKAGE)
    np.savez(path, **{t.name: np.zeros(t.shape, np.float16) for t in loaded.inputs})
    return path


def _execute_run(package: Path, inputs: Path, output: Path) -> list[str]:
    return ["--package", str(package), "--inputs", str(inputs), "--output", str(output)]


# ------------------------------------------------------------------------------------------------------ the seal
@pytest.mark.parametrize("how", REDIRECTS)
def test_execute_refuses_a_package_leading_outside_itself(body, body_inputs, tmp_path, capsys, how):
    """Guards: coremltools follows Manifest.json item paths and symlinks anywhere; execute (run and --describe) must
    refuse them instead of running a program or weights from outside the package."""
    export = copy_export(body, tmp_path / "export")
    redirect(export, tmp_path / "outside", how)
    refused(execute.main, ["--package", str(export), "--describe"], capsys, REDIRECT_NEEDLE[how])
    refused(execute.main, _execute_run(export, body_inputs, tmp_path / "o.npz"), capsys, REDIRECT_NEEDLE[how])
    assert not (tmp_path / "o.npz").exists()


@pytest.mark.parametrize("how", ["absolute-weights", "symlink-weight-file"])
def test_validate_refuses_and_never_runs_the_outside_weights(body, tmp_path, capsys, how):
    """Guards the attack of a sealed export whose Manifest.json names weights outside it: validate refused it before
    and after only the outside file changes (nothing re-sealed), so no evidence can name a hash of other bytes."""
    export = copy_export(body, tmp_path / "export")
    outside = tmp_path / "outside"
    redirect(export, outside, how)
    argv = ["--package", str(export), "--backend", "mil", "--repeats", "1", "--output", str(tmp_path / "v.json")]
    refused(validate.main, argv, capsys, REDIRECT_NEEDLE[how])
    scale_weights(next(outside.rglob("weight.bin")), -3.0)  # the attacker's change, after sealing
    refused(validate.main, argv, capsys, REDIRECT_NEEDLE[how])
    assert not (tmp_path / "v.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["dotdot-weights", "symlink-weights-dir"])
def test_benchmark_sweep_and_reweight_refuse_a_package_leading_outside(body, tmp_path, capsys, how):
    """Guards: every command that loads a sealed body package refuses one whose manifest or a link leads out."""
    export = copy_export(body, tmp_path / "export")
    redirect(export, tmp_path / "outside", how)
    needle = REDIRECT_NEEDLE[how]
    refused(benchmark.main, ["--package", str(export), "--length", "96", "--calls", "1", "--warmup", "0",
                             "--output", str(tmp_path / "b.json")], capsys, needle)
    refused(sweep.main, ["--package", str(export), "--bits", "8", "--modes", "uniform", "--group-sizes", "32",
                         "--jobs", "1", "--repeats", "1", "--output", str(tmp_path / "s")], capsys, needle)
    refused(reweight.main, ["--package", str(export), "--source", "builtin:tiny", "--output", str(tmp_path / "r")],
            capsys, needle)
    assert not any((tmp_path / name).exists() for name in ("b.json", "s", "r"))


@pytest.mark.parametrize("how", ["absolute-weights", "symlink-weight-file"])
def test_encode_refuses_an_encoder_package_leading_outside(tiny_packages, tmp_path, capsys, how):
    """Guards: encode --backend mil runs the verified copy only; a copy that would read outside bytes is refused."""
    export = copy_export(tiny_packages.get("encoder", 96)[0], tmp_path / "encoder")
    redirect(export, tmp_path / "outside", how)
    refused(encode.main, ["--ids", "1,40,77,2", "--backend", "mil", "--package", str(export),
                          "--output", str(tmp_path / "e.npy")], capsys, REDIRECT_NEEDLE[how])
    assert not (tmp_path / "e.npy").exists()


def test_the_verified_copy_holds_every_byte_the_backend_reads(body):
    """Guards: what runs is the private copy, whole: its model and weights are files inside it (no links), and the
    executor built from it reads its weights directory, not the user's."""
    manifest = read_manifest(body)
    with verified_copy(body, manifest) as copy:
        loaded = load_program(copy)
        assert Path(loaded.weights_dir).is_relative_to(copy.resolve()) or Path(loaded.weights_dir).is_relative_to(copy)
        assert not any(p.is_symlink() for p in copy.rglob("*"))
        assert all(p.is_file() or p.is_dir() for p in copy.rglob("*"))


# ------------------------------------------------------------------------------------------------------ the loader
def _truncate(package):
    data = weight_file(package).read_bytes()
    weight_file(package).write_bytes(data[: len(data) // 2])


def _shrink_last_blob(package):
    """The last blob two bytes shorter, the file cut to match: a consistent file whose blob no longer fits its const."""
    path = weight_file(package)
    last = list(read_blob_table(path).values())[-1]
    data = bytearray(path.read_bytes())
    struct.pack_into("<Q", data, last.metadata_offset + 8, last.size - 2)
    path.write_bytes(bytes(data[:-2]))


def _replace_weights(package, make):
    weight_file(package).unlink()
    make(weight_file(package))


def _device(path):
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    except PermissionError:
        pytest.skip("this user may not create a device node")


def _set_blob_const(package, change):
    def edit(spec):
        op = first_op(main_block(spec), blob=True)
        change(op.attributes["val"].type.tensorType)
        change(op.outputs[0].type.tensorType)
    edit_spec(package, edit)


def _cycle(spec):
    block = main_block(spec)
    first_op(block).inputs[next(iter(first_op(block).inputs))].arguments[0].name = block.operations[-1].outputs[0].name


def _undefined(spec):
    op = first_op(main_block(spec))
    op.inputs[next(iter(op.inputs))].arguments[0].name = "defined_nowhere"


def _unknown_opset(spec):
    function = spec.mlProgram.functions["main"]
    function.block_specializations["CoreML99"].CopyFrom(function.block_specializations[function.opset])
    del function.block_specializations[function.opset]
    function.opset = "CoreML99"


def _defined_twice(spec):
    block = main_block(spec)
    consts = [op for op in block.operations if op.type == "const"]
    consts[1].outputs[0].name = consts[0].outputs[0].name


def _renamed_parameter(spec):
    op = first_op(main_block(spec))
    name = next(iter(op.inputs))
    op.inputs["no_such_parameter"].CopyFrom(op.inputs[name])
    del op.inputs[name]


def _two_weights_items(manifest):
    entries = manifest["itemInfoEntries"]
    entries["another"] = {**item(manifest, "weights"), "path": "com.apple.CoreML"}


def _no_outputs(spec):
    del main_block(spec).outputs[:]


DAMAGES = {
    # weight.bin
    "truncated weight file": (_truncate, "truncated"),
    "weight file shorter than its header": (lambda p: weight_file(p).write_bytes(b"\0" * 10), "shorter than"),
    "wrong sentinel": (lambda p: patch_blob_header(p, "sentinel", 0x12345678), "sentinel"),
    "blob dtype disagrees": (lambda p: patch_blob_header(p, "dtype", 2), "holds fp32"),
    "blob dtype unknown": (lambda p: patch_blob_header(p, "dtype", 99), "dtype code 99"),
    "blob size past the end": (lambda p: patch_blob_header(p, "size", 1 << 40), "past the end"),
    "blob size disagrees with its const": (lambda p: _shrink_last_blob(p), "elements"),
    "blob size breaks the chain of headers": (lambda p: patch_blob_header(p, "size", 64), "sentinel"),
    "data offset past the end": (lambda p: patch_blob_header(p, "offset", 1 << 40), "puts its data at"),
    "data offset inside the header": (lambda p: patch_blob_header(p, "offset", 16), "puts its data at"),
    "storage version": (lambda p: weight_file(p).write_bytes(weight_file(p).read_bytes()[:4] + b"\x07\0\0\0"
                                                             + weight_file(p).read_bytes()[8:]), "storage version"),
    "bytes after the last blob": (lambda p: weight_file(p).write_bytes(weight_file(p).read_bytes() + bytes(64)),
                                  "after the last"),
    "weight file is a directory": (lambda p: _replace_weights(p, Path.mkdir), "does not hold as a file"),
    "weight file is a FIFO": (lambda p: _replace_weights(p, os.mkfifo), "FIFO"),
    "weight file is a device": (lambda p: _replace_weights(p, _device), "character device"),
    # the program
    "unknown op type": (lambda p: edit_spec(p, lambda s: setattr(first_op(main_block(s)), "type", "no_such_op")),
                        "unknown op type"),
    "undefined variable": (lambda p: edit_spec(p, _undefined), "nothing defines"),
    "a cycle": (lambda p: edit_spec(p, _cycle), "cycle"),
    "const shape disagrees with its blob": (
        lambda p: _set_blob_const(p, lambda t: setattr(t.dimensions[0].constant, "size",
                                                       3 * t.dimensions[0].constant.size)),
        "elements"),
    "const dtype disagrees with its blob": (
        lambda p: _set_blob_const(p, lambda t: setattr(t, "dataType", MIL_pb2.DataType.Value("FLOAT32"))),
        "holds fp16"),
    "blob offset names no header": (
        lambda p: edit_spec(p, lambda s: setattr(first_op(main_block(s), blob=True).attributes["val"].blobFileValue,
                                                 "offset", 8)), "no blob header"),
    "blob file outside the weights": (
        lambda p: edit_spec(p, lambda s: setattr(first_op(main_block(s), blob=True).attributes["val"].blobFileValue,
                                                 "fileName", "@model_path/weights/../model.mlmodel")), "blobs live in"),
    "unknown opset": (lambda p: edit_spec(p, _unknown_opset), "opset 'CoreML99'"),
    "unknown specification version": (lambda p: edit_spec(p, lambda s: setattr(s, "specificationVersion", 99)),
                                      "specification version 99"),
    "no outputs": (lambda p: edit_spec(p, _no_outputs), "no outputs"),
    "description input names": (
        lambda p: edit_spec(p, lambda s: setattr(s.description.input[0], "name", "renamed")), "names inputs"),
    "description input shape": (
        lambda p: edit_spec(p, lambda s: s.description.input[0].type.multiArrayType.shape.__setitem__(1, 7)),
        "in the model description"),
    "description output names": (
        lambda p: edit_spec(p, lambda s: setattr(s.description.output[0], "name", "renamed")), "names outputs"),
    "program is not protobuf": (lambda p: model_file(p).write_bytes(b"\xff" * 64), "not a readable Core ML model"),
    "not an ML program": (lambda p: edit_spec(p, lambda s: s.ClearField("mlProgram")), "not an ML program"),
    "a variable defined twice": (lambda p: edit_spec(p, _defined_twice), "twice"),
    "an input PyMIL rejects": (lambda p: edit_spec(p, _renamed_parameter), "PyMIL cannot build the program"),
    "a tensor larger than memory": (
        lambda p: edit_spec(p, lambda s: setattr(first_op(main_block(s)).outputs[0].type.tensorType.dimensions[0]
                                                 .constant, "size", 1 << 50)), "more than this machine's memory"),
    "rank and dimensions disagree": (
        lambda p: edit_spec(p, lambda s: setattr(first_op(main_block(s)).outputs[0].type.tensorType, "rank", 9)),
        "rank 9"),
    # the directory
    "no Manifest.json": (lambda p: (p / "Manifest.json").unlink(), "no Manifest.json"),
    "Manifest.json not JSON": (lambda p: (p / "Manifest.json").write_text("{"), "not valid JSON"),
    "Manifest.json names a missing item": (
        lambda p: edit_coreml_manifest(p, lambda m: item(m, "weights").update(path="com.apple.CoreML/elsewhere")),
        "does not hold"),
    "root model names no item": (lambda p: edit_coreml_manifest(p, lambda m: m.update(rootModelIdentifier="x")),
                                 "rootModelIdentifier"),
    "a FIFO inside the package": (lambda p: os.mkfifo(p / "Data" / "pipe"), "FIFO"),
    "an item path with '.'": (
        lambda p: edit_coreml_manifest(p, lambda m: item(m, "weights").update(path="./com.apple.CoreML/weights")),
        "stay inside the package"),
    "an item path with a backslash": (
        lambda p: edit_coreml_manifest(p, lambda m: item(m, "weights").update(path="com.apple.CoreML\\weights")),
        "stay inside the package"),
    "two weights items": (lambda p: edit_coreml_manifest(p, _two_weights_items), "2 weights directories"),
    "a newer package format": (lambda p: edit_coreml_manifest(p, lambda m: m.update(fileFormatVersion="2.0.0")),
                               "newer than"),
    "a package nested too deep": (lambda p: (p / "Data").joinpath(*["d"] * 20).mkdir(parents=True), "nested more"),
}


@pytest.fixture(scope="module")
def damaged(body, tmp_path_factory):
    """name -> a copy of the body package damaged that way (made once per module)."""
    root, made = tmp_path_factory.mktemp("damaged"), {}

    def get(name: str) -> Path:
        if name not in made:
            package = copy_export(body / PACKAGE, root / name.replace(" ", "-") / PACKAGE)
            DAMAGES[name][0](package)
            made[name] = package
        return made[name]
    return get


@pytest.mark.parametrize("name", list(DAMAGES))
def test_execute_refuses_a_damaged_package_in_one_line(damaged, body_inputs, tmp_path, capsys, name):
    """Guards: each damage used to end in a RuntimeError/ValueError/KeyError traceback from deep inside coremltools
    (or to wait on a FIFO); execute --describe and execute with inputs give one line naming it, exit 2."""
    package, needle = damaged(name), DAMAGES[name][1]
    with must_not_block():
        line = refused(execute.main, ["--package", str(package), "--describe"], capsys, needle)
        refused(execute.main, _execute_run(package, body_inputs, tmp_path / "o.npz"), capsys, needle)
    assert str(package.parent.name) in line  # the package is named
    assert not (tmp_path / "o.npz").exists()


@pytest.mark.parametrize("name", list(DAMAGES))
def test_every_backend_load_refuses_a_damaged_package(damaged, name):
    """Guards: the mil backend and the coreml backends check a package before anything reads it. The coreml backend
    cannot be constructed off macOS (nothing here is a Core ML result); its load is called on a bare instance to show
    the refusal comes before Core ML would compile a byte."""
    package, needle = damaged(name), DAMAGES[name][1]
    coreml = CoreMLBackend.__new__(CoreMLBackend)
    Backend.__init__(coreml)
    coreml._workdir, coreml.compute_units = None, "CPU_AND_NE"
    with must_not_block():
        for backend in (MILBackend(), coreml):
            with pytest.raises(ProgramLoadError, match=None) as raised:
                backend.load(package)
            assert needle in str(raised.value) and "\n" not in str(raised.value)


def test_the_undamaged_package_loads_everywhere(body, body_inputs, tmp_path, capsys):
    """The control for the damage tests: the same package, untouched, is described and runs."""
    assert run_main(execute.main, ["--package", str(body / PACKAGE), "--describe"]) == 0
    assert run_main(execute.main, _execute_run(body / PACKAGE, body_inputs, tmp_path / "o.npz")) == 0
    assert (tmp_path / "o.npz").is_file()
    MILBackend().load(body / PACKAGE)


# ------------------------------------------------------------------------------------------------------ inputs
def raw_zip(path: Path, members: list[tuple], ) -> Path:
    """A zip written byte by byte from (name, data, declared uncompressed size[, method]): method 0 stores `data`,
    8 says it is deflated. A size of 4 GiB or more is declared in a zip64 extra field, as zip writers do (APPNOTE
    4.5.3); the archive holds only the bytes given, whatever it declares."""
    local, central = bytearray(), bytearray()
    for name, data, declared, *method in members:
        method = method[0] if method else 0
        encoded, offset = name.encode(), len(local)
        crc = zlib.crc32(data) if method == 0 else 0
        big = declared >= 0xFFFFFFFF
        extra = struct.pack("<HHQQ", 1, 16, declared, len(data)) if big else b""
        size32, compressed32 = (0xFFFFFFFF, 0xFFFFFFFF) if big else (declared, len(data))
        local += struct.pack("<4s5H3L2H", b"PK\x03\x04", 45, 0, method, 0, 0, crc, compressed32, size32, len(encoded),
                             len(extra)) + encoded + extra + data
        central += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 45, 45, 0, method, 0, 0, crc, compressed32, size32,
                               len(encoded), len(extra), 0, 0, 0, 0, offset) + encoded + extra
    count, end = len(members), b""
    if count > 0xFFFF:  # zip64 end record and locator (APPNOTE 4.3.14, 4.3.15); the classic record then says 0xFFFF
        end = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, len(central), len(local))
        end += struct.pack("<4sLQL", b"PK\x06\x07", 0, len(local) + len(central), 1)
    small = min(count, 0xFFFF)
    end += struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, small, small, len(central), len(local), 0)
    path.write_bytes(bytes(local + central + end))
    return path


def npy_bytes(array: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_an_npz_member_that_would_inflate_past_its_input_is_refused_before_inflating(body, tmp_path, capsys):
    """Guards: np.load inflates a member before anyone sees its size. A deflated member that inflates to 128 MiB of
    zeros (a file smaller than the inputs' own bound), and one that declares 4 TB in 16 bytes, are refused from the
    zip's central directory alone, before a byte is inflated."""
    name = load_program(body / PACKAGE).inputs[0].name
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    inflated = 8 << 24
    deflated = b"".join(packer.compress(bytes(1 << 24)) for _ in range(8)) + packer.flush()
    bomb = raw_zip(tmp_path / "bomb.npz", [(f"{name}.npy", deflated, inflated, 8)])
    assert bomb.stat().st_size < 1 << 20 < inflated
    line = refused(execute.main, _execute_run(body / PACKAGE, bomb, tmp_path / "o.npz"), capsys, "declares")
    assert str(inflated) in line
    tiny = raw_zip(tmp_path / "4tb.npz", [(f"{name}.npy", bytes(16), 4 << 40)])
    refused(execute.main, _execute_run(body / PACKAGE, tiny, tmp_path / "o.npz"), capsys, str(4 << 40))
    assert not (tmp_path / "o.npz").exists()


def test_npz_names_counts_headers_and_kinds_are_checked(body, body_inputs, tmp_path, capsys):
    """Guards: an inputs file is refused in a short line for an unknown member name, a member given twice, more
    members than inputs (100,000 of them), a bare .npy, an object array, a wrong shape, a header that disagrees
    with the member's size, a directory, a FIFO and /dev/zero."""
    loaded = load_program(body / PACKAGE)
    names = [t.name for t in loaded.inputs]
    clean = {n: np.zeros(t.shape, np.float16) for n, t in zip(names, loaded.inputs)}
    cases = {}
    unknown = tmp_path / "unknown.npz"
    np.savez(unknown, **{("extra" if n == names[0] else n): a for n, a in clean.items()})
    cases[unknown] = "no input of the program"
    twice = raw_zip(tmp_path / "twice.npz", [(f"{n}.npy", npy_bytes(a), len(npy_bytes(a))) for n, a in clean.items()]
                    + [(f"{names[0]}.npy", npy_bytes(clean[names[0]]), len(npy_bytes(clean[names[0]])))])
    cases[twice] = "arrays; the program takes"
    repeated = raw_zip(tmp_path / "repeated.npz", [(f"{names[0]}.npy", npy_bytes(clean[names[0]]),
                                                    len(npy_bytes(clean[names[0]])))] * 2)
    cases[repeated] = "twice"
    many = raw_zip(tmp_path / "many.npz", [(f"m{i}.npy", b"", 0) for i in range(100_000)])
    with zipfile.ZipFile(many) as archive:
        assert len(archive.infolist()) == 100_000  # a well-formed archive of 100,000 members
    cases[many] = "bytes, more than"
    bare = tmp_path / "bare.npz"
    np.save(bare.with_suffix(".npy"), clean[names[0]])
    bare.with_suffix(".npy").rename(bare)
    cases[bare] = "bare .npy"
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, **{**clean, names[0]: np.array([{"a": 1}], dtype=object)})
    cases[pickled] = "numeric arrays"
    shaped = tmp_path / "shaped.npz"
    np.savez(shaped, **{**clean, names[0]: np.zeros((1, 2), np.float16)})
    cases[shaped] = "the program expects"
    lying = raw_zip(tmp_path / "lying.npz", [(f"{n}.npy", npy_bytes(a)[:-2], len(npy_bytes(a)) - 2)
                                             for n, a in clean.items()])
    cases[lying] = "header says"
    (tmp_path / "directory.npz").mkdir()
    cases[tmp_path / "directory.npz"] = "directory"
    os.mkfifo(tmp_path / "fifo.npz")
    cases[tmp_path / "fifo.npz"] = "FIFO"
    cases[Path("/dev/zero")] = "character device"
    for path, needle in cases.items():  # the reader execute uses, on the program's inputs
        with must_not_block(), pytest.raises(NpzError, match=needle) as raised:
            read_inputs(path, loaded.inputs)
        assert len(str(raised.value)) < 300 and "\n" not in str(raised.value), raised.value
    for path in (many, bare, Path("/dev/zero")):  # and through the command itself
        with must_not_block():
            refused(execute.main, _execute_run(body / PACKAGE, path, tmp_path / "o.npz"), capsys, cases[path])
    assert not (tmp_path / "o.npz").exists()
    assert run_main(execute.main, _execute_run(body / PACKAGE, body_inputs, tmp_path / "o.npz")) == 0  # the control


# ------------------------------------------------------------------------------------------------------ waits
def _counting_loop(limit: float):
    """x -> the loop that adds 1 to x until it reaches `limit` (never, for limit = inf: fp16 x stops at 2048)."""
    @mb.program(input_specs=[mb.TensorSpec(shape=(1,), dtype=types.fp32)], opset_version=ct.target.iOS17)
    def program(x):
        return mb.while_loop(_cond=lambda v: mb.less(x=mb.reduce_sum(x=v, axes=[0]), y=np.float32(limit)),
                             _body=lambda v: mb.add(x=v, y=np.float32(1)), loop_vars=(x,))
    return program


@pytest.fixture(scope="module")
def loop_packages(tmp_path_factory):
    """(a loop of 50 iterations, a loop that never ends) as saved packages, and an inputs file for both."""
    root = tmp_path_factory.mktemp("loops")
    paths = []
    for name, limit in (("fifty", 50.0), ("endless", np.inf)):
        model = ct.convert(_counting_loop(limit), convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17)
        model.save(str(root / f"{name}.mlpackage"))
        paths.append(root / f"{name}.mlpackage")
    np.savez(root / "x.npz", x=np.zeros(1, np.float32))
    return (*paths, root / "x.npz")


@pytest.mark.slow
def test_a_loop_that_never_ends_is_refused_with_the_loop_named(loop_packages, tmp_path, capsys):
    """Guards: while_loop ran for ever; now one run takes at most --max-loop-iterations iterations (all loops
    counted), the refusal names the loop, and raising the cap lets a long but finite loop finish."""
    fifty, endless, inputs = loop_packages
    refused(execute.main, [*_execute_run(endless, inputs, tmp_path / "o.npz"), "--max-loop-iterations", "2000"],
            capsys, "while_loop", "2000 loop iterations")
    refused(execute.main, [*_execute_run(fifty, inputs, tmp_path / "o.npz"), "--max-loop-iterations", "10"],
            capsys, "while_loop", "10 loop iterations")
    assert not (tmp_path / "o.npz").exists()
    assert run_main(execute.main,
                    [*_execute_run(fifty, inputs, tmp_path / "o.npz"), "--max-loop-iterations", "50"]) == 0
    with np.load(tmp_path / "o.npz") as data:
        assert data[data.files[0]].tolist() == [50.0]
    refused(execute.main, [*_execute_run(fifty, inputs, tmp_path / "p.npz"), "--max-loop-iterations", "0"],
            capsys, "at least 1")


def test_a_loop_that_doubles_a_tensor_is_refused_before_memory_runs_out():
    """Guards: a loop whose body doubles its tensor each time round would fill memory long before any iteration cap;
    the loop's values are bounded (a quarter of physical memory by default), and the refusal names the loop."""
    @mb.program(input_specs=[mb.TensorSpec(shape=(get_new_symbol(),), dtype=types.fp16)], opset_version=ct.target.iOS17)
    def doubling(x):
        return mb.while_loop(_cond=lambda v: mb.greater_equal(x=mb.reduce_sum(x=v, axes=[0]), y=np.float16(-1)),
                             _body=lambda v: mb.concat(values=[v, v], axis=0), loop_vars=(x,))

    executor = MILExecutor(LoadedProgram.built(doubling, "iOS17"), max_loop_bytes=1 << 20)
    with pytest.raises(LoopLimitError, match=r"while_loop.*1048576 a loop may hold"):
        executor.run({"x": np.zeros(4, np.float16)})
    assert MILExecutor(LoadedProgram.built(doubling, "iOS17"))._loop_budget.value_bytes >= 1 << 28


def test_json_documents_tokenizers_and_adapters_must_be_regular_files(tiny, tmp_path):
    """Guards: reading a FIFO blocked for ever and /dev/zero read until memory ran out. JSON documents (here a golden
    such as a golden), tokenizer.json and adapters are opened as regular files within a bound; a directory, a FIFO
    or a device is refused in one line, a document over the bound without being read."""
    from experiments.ane_engineering.checkpoint import load_checkpoint
    from experiments.ane_engineering.core.limits import MAX_JSON_BYTES

    os.mkfifo(tmp_path / "fifo")
    for path, needle in ((Path("/dev/zero"), "character device"), (tmp_path / "fifo", "FIFO"), (tmp_path, "directory")):
        with must_not_block(), pytest.raises(DocumentError, match=needle):
            read_json(path, ANY_OBJECT)
    big = tmp_path / "big.json"
    with open(big, "wb") as handle:
        handle.truncate(MAX_JSON_BYTES + 1)  # sparse: nothing is written, and nothing may be read
    with pytest.raises(DocumentError, match="more than"):
        read_json(big, ANY_OBJECT)
    for name in ("tokenizer.json", "model.safetensors", "config.json"):
        checkpoint = tmp_path / f"checkpoint-{name}"
        shutil.copytree(tiny.directory, checkpoint)
        (checkpoint / name).unlink()
        os.mkfifo(checkpoint / name)
        with must_not_block(), pytest.raises(Exception, match="FIFO"):
            load_checkpoint(str(checkpoint))
    from experiments.ane_engineering.package.inputs.adapter import AdapterError, read_spec

    with must_not_block(), pytest.raises(AdapterError, match="FIFO"):
        read_spec(tmp_path / "fifo")


def test_validate_refuses_a_golden_that_is_a_fifo_or_a_device(body, tmp_path, capsys):
    """Guards: `validate --golden /dev/zero` read until memory ran out, a FIFO golden waited for ever."""
    os.mkfifo(tmp_path / "golden.json")
    for golden in ("/dev/zero", str(tmp_path / "golden.json")):
        with must_not_block():
            refused(validate.main, ["--package", str(body), "--golden", golden, "--backend", "mil",
                                    "--output", str(tmp_path / "v.json")], capsys, golden)
    assert not (tmp_path / "v.json").exists()


# ------------------------------------------------------------------------------------------------------ read-only
@pytest.mark.slow
def test_execute_runs_where_numba_can_write_no_cache(body, body_inputs, tmp_path):
    """Guards: a read-only install used to die at import: numba's njit(cache=True) raises "no locator available"
    when it can write neither NUMBA_CACHE_DIR, the __pycache__ beside the source, nor ~/.cache. Here each of those
    is a path under a regular file (unwritable even for root, where permission bits are not enough), in a copy of
    the harness, and execute must still run the package."""
    tree = tmp_path / "install"
    shutil.copytree(REPOSITORY_ROOT / "experiments", tree / "experiments",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for directory in (tree / "experiments").rglob("*"):
        if directory.is_dir() and any(directory.glob("*.py")):
            (directory / "__pycache__").write_bytes(b"")  # numba's in-tree cache directory cannot be made
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(blocker),
           "XDG_CACHE_HOME": str(blocker / "cache"), "NUMBA_CACHE_DIR": str(blocker / "numba")}
    output = tmp_path / "out.npz"
    run = subprocess.run([sys.executable, "-m", "experiments.ane_engineering.execute", "--package", str(body / PACKAGE),
                          "--inputs", str(body_inputs), "--output", str(output)],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert output.is_file() and "Traceback" not in run.stderr
    probe = subprocess.run([sys.executable, "-c", "from experiments.ane_engineering.run.mil import kernels; "
                            "print(kernels._load_kernels() is not None)"], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert probe.stdout.strip() == "True", probe.stderr[-2000:]  # compiled without the cache, not given up


@pytest.mark.slow
def test_a_constant_folded_at_load_into_a_huge_value_is_refused(tmp_path, capsys):
    """Guards: PyMIL computes every op of constant inputs while it builds a program; a package can declare a small
    output and ask for a huge one (here a tile of constants declared (2, 2) whose reps ask for twice the value bound,
    which numpy would allocate and fill). The load refuses it from the inferred shape, before allocating."""
    from experiments.ane_engineering.core.limits import value_bound

    @mb.program(input_specs=[mb.TensorSpec(shape=(1,), dtype=types.fp32)], opset_version=ct.target.iOS17)
    def program(x):
        return mb.add(x=x, y=mb.tile(x=np.ones((1, 1), np.float32), reps=np.array([2, 2], np.int32)))

    package = tmp_path / "fold.mlpackage"
    ct.convert(program, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17,
               pass_pipeline=ct.PassPipeline.EMPTY, compute_precision=ct.precision.FLOAT32).save(str(package))
    assert run_main(execute.main, ["--package", str(package), "--describe"]) == 0  # reps [2, 2]: fine
    side = int((value_bound() // 2) ** 0.5) + 1  # fp32: side * side * 4 bytes = twice the bound

    def huge_reps(spec):
        reps = next(op for op in main_block(spec).operations if op.outputs[0].name.endswith("reps_0"))
        reps.attributes["val"].immediateValue.tensor.ints.values[:] = [side, side]
    edit_spec(package, huge_reps)
    refused(execute.main, ["--package", str(package), "--describe"], capsys, "tile", "would fold")
