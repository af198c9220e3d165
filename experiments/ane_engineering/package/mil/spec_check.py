"""The program in model.mlmodel, checked before PyMIL builds it: what the builder would crash on, or read wrongly.

PyMIL's loader (coremltools.converters.mil.frontend.milproto.load) trusts the protobuf: an unknown op type, a name no
op defines, ops out of order, a blob offset that is no header or a blob shorter than its const's type end in a
KeyError, AttributeError, ValueError or a RuntimeError from the blob reader, deep inside coremltools. Here, per
function, in program order (nested blocks included):

- the model is an ML program of a known specification version, each function's opset is a known one and has its
  block, and the program has at least one function; the chosen function has outputs;
- every op type is a MIL core op coremltools defines (SSAOpRegistry), every input names a var defined before it
  (a function input, an earlier op's output, or an input of an enclosing block), no name is defined twice, every
  block output is defined; a var read before the op that makes it is reported as a cycle;
- every tensor type has as many dimensions as its rank, and none declares more bytes than host memory holds;
- every blob-backed value names `@model_path/weights/<file>` of the package's weights directory and the offset of
  one of that file's blob headers (blobs.py), with the const's dtype and as many elements as its shape;
- the model description agrees with the function: the same input names, and for each multi-array input the same
  rank, the same fixed sizes and the same element type; the same output names.
"""

from __future__ import annotations

import math
from pathlib import Path

from ...core.limits import MAX_PROGRAM_BYTES, host_memory_bound
from ...core.regular_files import read_regular
from .blobs import CODE_OF, DTYPES, Blob, read_blob_table
from .container import PackageFiles
from .errors import ProgramLoadError

BLOB_PREFIX = "@model_path/weights/"
# Blob types PyMIL's loader reads (milproto/load.py _load_file_value); bf16 and fp8 blobs it cannot.
READABLE_BLOB_TYPES = {"fp16", "fp32", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int4", "uint1", "uint2",
                       "uint3", "uint4", "uint6"}
_MULTIARRAY_TYPES = {"FLOAT16": "fp16", "FLOAT32": "fp32", "DOUBLE": "fp64", "INT32": "int32", "INT8": "int8"}


def read_spec(files: PackageFiles):
    """The Model protobuf of a checked package (model.mlmodel, at most MAX_PROGRAM_BYTES)."""
    from coremltools.proto import Model_pb2
    from google.protobuf.message import DecodeError

    data = read_regular(files.model_file, MAX_PROGRAM_BYTES, "Core ML model file", follow_links=False,
                        error=ProgramLoadError)
    spec = Model_pb2.Model()
    try:
        spec.ParseFromString(data)
    except (DecodeError, RecursionError, ValueError) as problem:
        raise ProgramLoadError(f"{files.model_file}: not a readable Core ML model ({problem}); the package is "
                               "damaged") from None
    return spec


def dtype_name(data_type: int) -> str:
    """'fp16', 'int32', ... for a MIL_pb2.DataType value."""
    from coremltools.proto import MIL_pb2

    name = MIL_pb2.DataType.Name(data_type) if data_type in MIL_pb2.DataType.values() else f"code {data_type}"
    table = {"FLOAT16": "fp16", "FLOAT32": "fp32", "FLOAT64": "fp64", "BFLOAT16": "bf16", "BOOL": "bool",
             "STRING": "str", "FLOAT8E4M3FN": "fp8e4m3fn", "FLOAT8E5M2": "fp8e5m2"}
    return table.get(name, name.lower())


class _ProgramCheck:
    """The checks of one Model protobuf (module docstring), raising ProgramLoadError with the package named."""

    def __init__(self, spec, where: str, weights_dir: Path | None, files: tuple[str, ...] = (),
                 root: Path | None = None):
        import coremltools.converters.mil.mil.ops.defs  # noqa: F401 - fills the op registry
        from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry

        self.spec, self.where, self.weights_dir = spec, where, weights_dir
        self.files, self.root = set(files), root
        self.core_ops = set(SSAOpRegistry.core_ops) | {"write_state"}  # write_state: the loader's own mapping
        self.tables: dict[str, dict[int, Blob]] = {}
        self.memory = host_memory_bound()

    def fail(self, message: str):
        raise ProgramLoadError(f"{self.where}: {message}")

    # -- the program -------------------------------------------------------------------------------------------
    def program(self) -> None:
        import coremltools as ct

        if self.spec.WhichOneof("Type") != "mlProgram":
            self.fail(f"is a {self.spec.WhichOneof('Type')!r} model, not an ML program (mlprogram)")
        version = int(self.spec.specificationVersion)
        if version not in ct._OPSET or version < ct._LOWEST_ALLOWED_SPECIFICATION_VERSION_FOR_MILPROGRAM:
            self.fail(f"specification version {version} is not one coremltools {ct.__version__} reads ML programs of")
        program = self.spec.mlProgram
        if program.version != 1:
            self.fail(f"ML program version {program.version}; the loader reads version 1")
        if not program.functions:
            self.fail("the ML program has no function")
        known = set(ct._OPSET.values())
        for name, function in program.functions.items():
            if function.opset not in known:
                self.fail(f"function {name!r} has opset {function.opset[:40]!r}, not one of {sorted(known)}")
            if function.opset not in function.block_specializations:
                self.fail(f"function {name!r} has no block for its opset {function.opset}")
            self.function(name, function)

    def function(self, name: str, function) -> None:
        scope: set[str] = set()
        for value in function.inputs:
            self.value_type(value.type, f"input {value.name!r} of function {name!r}")
            self.define(value.name, scope, f"function {name!r}")
        block = function.block_specializations[function.opset]
        later = set()
        self.collect_outputs(block, later)
        self.block(block, scope, later, f"function {name!r}")
        if not block.outputs:
            self.fail(f"function {name!r} has no outputs")

    def collect_outputs(self, block, names: set[str]) -> None:
        for op in block.operations:
            names.update(v.name for v in op.outputs)
            for inner in op.blocks:
                names.update(v.name for v in inner.inputs)
                self.collect_outputs(inner, names)

    def define(self, name: str, scope: set[str], where: str) -> None:
        if name in scope:
            self.fail(f"{where} defines variable {name[:80]!r} twice")
        scope.add(name)

    def block(self, block, outer: set[str], every: set[str], where: str) -> None:
        scope = set(outer)
        for index, op in enumerate(block.operations):
            here = f"op #{index} ({op.type[:40]!r}) of {where}"
            if op.type not in self.core_ops:
                self.fail(f"{here} has unknown op type {op.type[:60]!r} (not a MIL op coremltools defines)")
            for param, argument in op.inputs.items():
                for binding in argument.arguments:
                    kind = binding.WhichOneof("binding")
                    if kind == "name":
                        self.read(binding.name, scope, every, f"{here} input {param!r}")
                    elif kind == "value":
                        self.value(binding.value, f"{here} input {param!r}")
            if op.type == "const" and "val" in op.attributes:
                self.value(op.attributes["val"], here)
            for number, inner in enumerate(op.blocks):
                inner_scope = set(scope)
                for value in inner.inputs:
                    self.define(value.name, inner_scope, f"block {number} of {here}")
                self.block(inner, inner_scope, every, f"block {number} of {here}")
            for value in op.outputs:
                self.value_type(value.type, f"output {value.name[:80]!r} of {here}")
                self.define(value.name, scope, here)
        for name in block.outputs:
            self.read(name, scope, every, f"the outputs of {where}")

    def read(self, name: str, scope: set[str], every: set[str], where: str) -> None:
        if name in scope:
            return
        if name in every:
            self.fail(f"{where} reads {name[:80]!r} before the op that defines it (a cycle, or ops out of order)")
        self.fail(f"{where} reads {name[:80]!r}, which nothing defines")

    # -- types and values --------------------------------------------------------------------------------------
    def value_type(self, value_type, where: str) -> tuple[str, tuple[int | None, ...]] | None:
        """(dtype name, dims with None for unknown ones) of a tensor type, after its checks; None for other types."""
        kind = value_type.WhichOneof("type")
        if kind == "stateType":
            return self.value_type(value_type.stateType.wrappedType, where)
        if kind == "listType":
            return self.value_type(value_type.listType.type, where)
        if kind != "tensorType":
            return None
        tensor = value_type.tensorType
        if tensor.rank != len(tensor.dimensions):
            self.fail(f"{where} has rank {tensor.rank} but {len(tensor.dimensions)} dimensions")
        dims = tuple(d.constant.size if d.WhichOneof("dimension") == "constant" else None for d in tensor.dimensions)
        name = dtype_name(tensor.dataType)
        bits = next((b for n, b in DTYPES.values() if n == name), 64)
        known = [d for d in dims if d is not None]
        if math.prod(known) * bits // 8 > self.memory:
            self.fail(f"{where} declares a {name} tensor of shape {list(dims)}, more than this machine's memory")
        return name, dims

    def value(self, value, where: str) -> None:
        if value.WhichOneof("value") != "blobFileValue":
            return
        declared = self.value_type(value.type, where)
        if declared is None:
            self.fail(f"{where} stores a non-tensor value in a blob")
        name, dims = declared
        if any(d is None for d in dims):
            self.fail(f"{where} stores a blob of unknown shape {list(dims)}")
        blob = self.blob(value.blobFileValue, where)
        if name not in READABLE_BLOB_TYPES:
            self.fail(f"{where} is a {name} blob, a type the PyMIL loader does not read")
        if blob.dtype != CODE_OF[name]:
            self.fail(f"{where} is {name} but its blob at offset {blob.metadata_offset} holds {blob.dtype_name}")
        if blob.elements != math.prod(dims):
            self.fail(f"{where} has shape {list(dims)} ({math.prod(dims)} elements) but its blob at offset "
                      f"{blob.metadata_offset} holds {blob.elements} {blob.dtype_name} elements")

    def blob(self, reference, where: str) -> Blob:
        file_name = reference.fileName
        name = file_name[len(BLOB_PREFIX):] if file_name.startswith(BLOB_PREFIX) else None
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            self.fail(f"{where} reads blob file {file_name[:80]!r}; blobs live in {BLOB_PREFIX}<file>")
        if self.weights_dir is None:
            self.fail(f"{where} reads a blob, but the package names no weights directory")
        if self.root is not None:
            relative = (self.weights_dir / name).relative_to(self.root).as_posix()
            if relative not in self.files:
                self.fail(f"{where} reads blob file {relative}, which the package does not hold as a file")
        if name not in self.tables:
            self.tables[name] = read_blob_table(self.weights_dir / name)
        table = self.tables[name]
        if reference.offset not in table:
            self.fail(f"{where} reads the blob at offset {reference.offset} of {name}, where no blob header is")
        return table[reference.offset]

    # -- the model description ---------------------------------------------------------------------------------
    def description(self, function_name: str) -> None:
        description = self.spec.description
        for described in description.functions:  # a multifunction package describes each function apart
            if described.name == function_name:
                description = described
        function = self.spec.mlProgram.functions[function_name]
        block = function.block_specializations[function.opset]
        inputs = {value.name: value.type for value in function.inputs}
        # an iOS18 stateful model describes its states (ct.StateType) apart from its inputs; the function takes both
        described_inputs = [feature.name for feature in description.input] + [f.name for f in description.state]
        if sorted(described_inputs) != sorted(inputs):
            self.fail(f"the model description names inputs {sorted(described_inputs)[:8]}, function "
                      f"{function_name!r} takes {sorted(inputs)[:8]}")
        for feature in description.input:
            self.feature(feature, inputs[feature.name], function_name)
        for feature in description.state:
            self.state_feature(feature, inputs[feature.name], function_name)
        described_outputs = sorted(feature.name for feature in description.output)
        if described_outputs != sorted(block.outputs):
            self.fail(f"the model description names outputs {described_outputs[:8]}, function {function_name!r} "
                      f"returns {sorted(block.outputs)[:8]}")

    def state_feature(self, feature, value_type, function_name: str) -> None:
        """A described state (ct.StateType) is a state of the function, of the same shape."""
        if value_type.WhichOneof("type") != "stateType":
            self.fail(f"state {feature.name!r} of the model description is no state in function {function_name!r}")
        _, dims = self.value_type(value_type, f"state {feature.name!r}")
        shape = tuple(feature.type.stateType.arrayType.shape)
        if shape and (len(shape) != len(dims) or any(d is not None and d != s for d, s in zip(dims, shape))):
            self.fail(f"state {feature.name!r} has shape {list(shape)} in the model description, "
                      f"{['?' if d is None else d for d in dims]} in function {function_name!r}")

    def feature(self, feature, value_type, function_name: str) -> None:
        if feature.type.WhichOneof("Type") != "multiArrayType":
            return
        array = feature.type.multiArrayType
        declared = self.value_type(value_type, f"input {feature.name!r}")
        if declared is None:
            self.fail(f"input {feature.name!r} is a multi-array in the model description but not a tensor in "
                      f"function {function_name!r}")
        name, dims = declared
        data_type = _MULTIARRAY_TYPES.get(type(array).ArrayDataType.Name(array.dataType))
        if data_type is not None and data_type != name:
            self.fail(f"input {feature.name!r} is {data_type} in the model description, {name} in function "
                      f"{function_name!r}")
        flexibility = array.WhichOneof("ShapeFlexibility")
        shapes = [tuple(array.shape)] if array.shape else []
        if flexibility == "enumeratedShapes":
            shapes += [tuple(e.shape) for e in array.enumeratedShapes.shapes]
        for shape in shapes:
            if len(shape) != len(dims) or any(d is not None and d != s for d, s in zip(dims, shape)):
                self.fail(f"input {feature.name!r} has shape {list(shape)} in the model description, "
                          f"{['?' if d is None else d for d in dims]} in function {function_name!r}")
        if flexibility == "shapeRange" and len(array.shapeRange.sizeRanges) != len(dims):
            self.fail(f"input {feature.name!r}: {len(array.shapeRange.sizeRanges)} shape ranges in the model "
                      f"description for a rank-{len(dims)} input")


def check_spec(spec, where: str, weights_dir: Path | None, function_name: str | None = None,
               files: PackageFiles | None = None) -> str:
    """Run the checks (module docstring) and return the function to load: `function_name`, or the description's
    default function ("main" when it names none)."""
    check = _ProgramCheck(spec, where, weights_dir, files.files if files else (), files.root if files else None)
    check.program()
    name = function_name if function_name is not None else (spec.description.defaultFunctionName or "main")
    if name not in spec.mlProgram.functions:
        check.fail(f"has no function {name!r} (functions: {sorted(spec.mlProgram.functions)})")
    check.description(name)
    return name
