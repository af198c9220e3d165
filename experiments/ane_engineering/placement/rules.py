"""The ANE rule catalogue: the one home of the rules this harness checks exported programs against.

Each `Rule` has a stable id, a one-line statement, the public source it rests on, a severity and a `check` that
runs over a `CheckContext` (a PyMIL program, optionally with the Core ML model spec) and returns `Finding`s.

Severity:
    "error"   the op is predicted to run off the Neural Engine, or the program violates a rule it must keep
              (e.g. a non-finite constant). Error findings on non-constant ops make up the predicted-off list.
    "warning" a performance or numerical hazard that is not expected to move the op off the ANE.

`orion` is None for rules that do not come from the Orion direct-ANE constraint catalogue. For the Orion
constraints it says whether the constraint applies to a Core ML package:
    "enforced"        checked here, with error severity,
    "warned"          checked here, with warning severity (Core ML itself copes, the hazard remains),
    "not applicable"  documented only: kept in the catalogue so the Orion list is complete, with no check and no
                      severity (a Core ML package cannot violate it; `reason` says why).

Every rule is a prediction from static facts (op types, shapes, dtypes, constants). Core ML decides placement with
its own cost model, which depends on the chip and OS version (apple/coremltools issue #1780: "There is no static
documentation, as it changes based on device generation, operating system version, tensor sizes"); on a Mac,
MLComputePlan is the authority (see compute_plan.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from ..core import reference_run
from ..core.limits import MAX_DIMENSION
from ..package.mil.tensors import is_const_like
from ..package.mil.walk import walk_operations

SEVERITIES = ("error", "warning")
ORION_STATUSES = ("enforced", "warned", "not applicable")

# ----------------------------------------------------------------------------------------------------------------
# Public sources (cited by the rules below).
# ----------------------------------------------------------------------------------------------------------------
SRC_APPLE_ARTICLE = ('Apple Machine Learning Research, "Deploying Transformers on the Apple Neural Engine" (2022), '
                     "https://machinelearning.apple.com/research/neural-engine-transformers")
SRC_ML_ANE = ("apple/ml-ane-transformers, ane_transformers/reference/multihead_attention.py "
              "(https://github.com/apple/ml-ane-transformers)")
SRC_HOLLANCE_UNSUPPORTED = ("hollance/neural-engine, docs/unsupported-layers.md "
                            "(https://github.com/hollance/neural-engine/blob/master/docs/unsupported-layers.md)")
SRC_HOLLANCE_16BIT = ("hollance/neural-engine, docs/16-bit.md ('The ANE appears to use float16 for everything') "
                      "(https://github.com/hollance/neural-engine/blob/master/docs/16-bit.md)")
_REFERENCE = reference_run.load()
SRC_REFERENCE_RUN = f"{reference_run.citation(_REFERENCE)}, MLComputePlan under {_REFERENCE['placement']['compute_units']}"
SRC_ORION = ('Orion (direct ANE programming): R. Kumaresan, "Orion: Characterizing and Programming Apple\'s Neural '
             'Engine for LLM Training and Inference", arXiv:2603.06728 (2026), its catalogue of ANE constraints')
SRC_CT_FLEX = ('coremltools docs, "Flexible Input Shapes" '
               "(https://apple.github.io/coremltools/docs-guides/source/flexible-inputs.html)")
SRC_FORUM_RANGE = ("Apple Developer Forums thread 724930, answer by an Apple engineer: with range flexibility only the "
                   "default shape runs on the Neural Engine; with enumerated shapes each shape can "
                   "(https://developer.apple.com/forums/thread/724930)")
SRC_CT_TYPED = ('coremltools docs, "Typed Execution Workflow Example": a float 32 typed model executes on a '
                "combination of the GPU and CPU "
                "(https://apple.github.io/coremltools/docs-guides/source/typed-execution-example.html)")
SRC_CT_RNN = ("apple/coremltools issue #1780 (maintainer: RNN or LSTM ops are not supported on the neural engine), "
              "https://github.com/apple/coremltools/issues/1780")
SRC_ANE_LIMITS = ("FluidInference/FluidAudio issue #121, ANE compiler message 'Tensor dimensions ... are not within "
                  "supported range, N[1-65536]D[1-16384]C[1-65536]H[1-16384]W[1-16384]' "
                  "(https://github.com/FluidInference/FluidAudio/issues/121)")
SRC_CT_EINSUM = ('coremltools MIL op reference, iOS15 "einsum": supported equations "nchw,nwhu->nchu" and '
                 '"chw,whr->chr" (https://apple.github.io/coremltools/source/coremltools.converters.mil.mil.ops.defs.html)')
SRC_CT_2536 = ("apple/coremltools issue #2536 (Core ML supports tensors of rank <= 5; a dynamic convolution "
               "reported falling off the Neural Engine), https://github.com/apple/coremltools/issues/2536")
SRC_CAST_MEASURED = ("measured with coremltools 9.0 on Linux by this project: the B x L x C `baseline` export, which "
                     "looks tokens up with an in-graph nn.Embedding, has gather and int cast ops "
                     "(tests/test_probe.py::test_baseline_export_shows_its_violations)")
_PLACEMENT = _REFERENCE["placement"]
SRC_EINSUM_MEASURED = ("measured with coremltools 9.0 on Linux by this project: the per-head einsums of the exported "
                       "BC1S body stay native MIL einsums (tests/test_ane_rules.py::test_tiny_bc1s_body_has_no_violations)")

# ----------------------------------------------------------------------------------------------------------------
# Op-type sets.
# ----------------------------------------------------------------------------------------------------------------
# Non-constant MIL op types predicted to run on the ANE. Membership means: the op type is in the reference run's
# all-ANE BC1S plan (const, mul, add, sub, slice_by_index, conv, einsum, layer_norm, softmax, transpose, gelu, relu),
# or it is an elementwise / normalisation / layout op that Apple's ANE reference transformer (ml-ane-transformers)
# relies on. It is deliberately not a list of everything the ANE can do: an op type outside it
# is predicted off the ANE until a Core ML compute plan on a Mac shows otherwise (then add it here, with the plan as
# the evidence). Constants (const, constexpr_*) are not placed and are never checked against this list.
ANE_OP_ALLOWLIST = frozenset({
    "const", "constexpr_lut_to_dense", "constexpr_affine_dequantize", "constexpr_blockwise_shift_scale",
    "conv", "einsum", "matmul", "linear",
    "layer_norm", "batch_norm", "instance_norm", "softmax",
    "gelu", "relu", "tanh", "sigmoid", "silu", "exp", "pow", "sqrt", "rsqrt", "clip",
    "add", "sub", "mul", "real_div", "maximum", "minimum", "reduce_mean",
    "slice_by_index", "transpose", "reshape", "concat", "split", "squeeze", "expand_dims",
})

# Indexing ops: gather is the classic off-ANE layer; scatter is its write-side twin.
GATHER_OPS = frozenset({"gather", "gather_nd", "gather_along_axis", "scatter", "scatter_nd", "scatter_along_axis"})
RECURRENT_OPS = frozenset({"lstm", "gru", "rnn"})
# Ops whose output shape (or control flow) is decided at run time.
DYNAMIC_SHAPE_OPS = frozenset({
    "shape", "range_1d", "fill_like", "while_loop", "cond", "non_zero", "non_maximum_suppression",
    "make_list", "list_read", "list_write", "list_gather", "list_scatter", "list_length",
})
# Inputs that decide an op's output shape: when one is not a compile-time constant, the shape is dynamic.
SHAPE_ARGUMENTS = {
    "reshape": ("shape",),
    "slice_by_index": ("begin", "end"),
    "slice_by_size": ("begin", "size"),
    "tile": ("reps",),
    "pad": ("pad",),
    "fill": ("shape",),
    "random_uniform": ("shape",),
    "random_normal": ("shape",),
    "resize": ("shape",),
    "upsample_nearest_neighbor": ("scale_factor_height", "scale_factor_width"),
    "upsample_bilinear": ("scale_factor_height", "scale_factor_width"),
}
# Op types owned by a more specific error rule; the allow-list rule does not report them a second time.
OWNED_BY_SPECIFIC_RULES = GATHER_OPS | RECURRENT_OPS | DYNAMIC_SHAPE_OPS | {"scaled_dot_product_attention", "cast"}

# The two per-head contractions of the BC1S attention. The converter swaps torch's operands into MIL's native
# pattern: torch "bchq,bkhc->bkhq" (QK) becomes MIL "bkhc,bchq->bkhq", torch "bkhq,bchk->bchq" (AV and the marker
# read-out) becomes MIL "bchk,bkhq->bchq". Both are "nchw,nwhu->nchu" up to letter names.
NATIVE_EINSUM_PATTERN = "abcd,adce->abce"

# Thresholds.
ANE_ROW_BYTES = 64                    # the ANE pads the last axis of a tensor to 64 bytes
SRAM_CLIFF_BYTES = 32 * 1024 * 1024   # Orion: throughput falls off a cliff near 32 MB of working set
LARGE_TRANSPOSE_BYTES = 4 * 1024 * 1024
FP16_MAX = 65504.0


# ----------------------------------------------------------------------------------------------------------------
# Catalogue data types.
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Orion:
    """How an Orion direct-ANE constraint relates to Core ML packages."""

    status: str
    reason: str

    def __post_init__(self):
        if self.status not in ORION_STATUSES:
            raise ValueError(f"orion status {self.status!r} not in {ORION_STATUSES}")

    def to_dict(self) -> dict:
        return {"status": self.status, "reason": self.reason}


@dataclass(frozen=True)
class Finding:
    rule: str
    op: str
    op_type: str
    detail: str

    def to_dict(self) -> dict:
        return {"rule": self.rule, "op": self.op, "op_type": self.op_type, "detail": self.detail}


@dataclass(frozen=True)
class Rule:
    id: str
    statement: str
    source: str
    severity: str | None  # None: documented only (no check runs)
    orion: Orion | None
    check: Callable[["CheckContext"], list] | None = field(compare=False, repr=False)
    note: str = ""

    def __post_init__(self):
        if self.applicable != (self.check is not None) or self.applicable != (self.severity is not None):
            raise ValueError(f"{self.id}: an applicable rule has a check and a severity; a documented-only "
                             "(not applicable) rule has neither")
        if self.severity is not None and self.severity not in SEVERITIES:
            raise ValueError(f"{self.id}: severity {self.severity!r} not in {SEVERITIES}")

    @property
    def applicable(self) -> bool:
        return self.orion is None or self.orion.status != "not applicable"

    def to_dict(self) -> dict:
        return {"id": self.id, "statement": self.statement, "source": self.source, "severity": self.severity,
                "orion": self.orion.to_dict() if self.orion else None, "note": self.note}


# ----------------------------------------------------------------------------------------------------------------
# What the checks see.
# ----------------------------------------------------------------------------------------------------------------
def _types():
    from coremltools.converters.mil.mil import types

    return types


def is_symbolic_dim(dim) -> bool:
    from coremltools.converters.mil.mil.types.symbolic import is_symbolic

    return is_symbolic(dim)


@dataclass
class TensorRef:
    """A tensor the checks look at: a function input, or one output of a non-constant op."""

    op: str           # the producing op's name (the input's name for a function input)
    op_type: str      # the producing op's type ("input" for a function input)
    var: Any
    shape: tuple
    dtype: str        # "fp16", "fp32", "int32", "bool", ...
    itemsize: int

    @property
    def symbolic(self) -> bool:
        return any(is_symbolic_dim(d) for d in self.shape)

    @property
    def nbytes(self) -> int | None:
        if self.symbolic:
            return None
        return int(math.prod(int(d) for d in self.shape)) * self.itemsize


def _tensor_info(var) -> tuple[tuple, str, int] | None:
    """(shape, dtype name, item size) of a tensor or scalar Var; None for lists, tuples and states."""
    types = _types()
    sym_type = getattr(var, "sym_type", None)
    if not (types.is_tensor(sym_type) or types.is_scalar(sym_type)):
        return None
    dtype = var.dtype
    name = types.builtin_to_string(dtype)
    if name == "str":
        return None
    try:
        itemsize = np.dtype(types.nptype_from_builtin(dtype)).itemsize
    except Exception:  # pragma: no cover - unusual builtin types
        itemsize = 4
    return tuple(var.shape), name, int(itemsize)


class CheckContext:
    """A PyMIL program (its "main" function) and, optionally, the model spec it came with."""

    def __init__(self, program, spec=None, function: str = "main"):
        self.program = program
        self.spec = spec
        functions = program.functions
        self.function = functions[function] if function in functions else next(iter(functions.values()))
        self.operations = list(walk_operations(self.function))
        self.inputs = dict(self.function.inputs)
        self.outputs = list(self.function.outputs)
        self._input_ids = {id(v) for v in self.inputs.values()}
        self._output_ids = {id(v) for v in self.outputs}
        self.non_constant_ops = [op for op in self.operations if not is_const_like(op.op_type)]
        self.constant_ops = [op for op in self.operations if is_const_like(op.op_type)]
        self.tensors = list(self._collect_tensors())

    # -- tensors ---------------------------------------------------------------------------------------------------
    def _collect_tensors(self) -> Iterator[TensorRef]:
        for name, var in self.inputs.items():
            info = _tensor_info(var)
            if info:
                yield TensorRef(name, "input", var, *info)
        for op in self.non_constant_ops:
            for var in op.outputs:
                info = _tensor_info(var)
                if info:
                    yield TensorRef(op.name, op.op_type, var, *info)

    def non_constant_tensors(self, include_boundary_casts: bool = True) -> Iterator[TensorRef]:
        for tensor in self.tensors:
            if not include_boundary_casts and tensor.op_type == "cast" and self.is_boundary_cast(tensor.var.op):
                continue
            yield tensor

    def constant_outputs(self) -> Iterator[tuple[Any, Any]]:
        for op in self.constant_ops:
            for var in op.outputs:
                yield op, var

    # -- vars and ops ----------------------------------------------------------------------------------------------
    def is_function_input(self, var) -> bool:
        return id(var) in self._input_ids

    def is_function_output(self, var) -> bool:
        return id(var) in self._output_ids

    @staticmethod
    def is_constant_var(var) -> bool:
        """A compile-time constant: produced by const/constexpr_*, or carrying a known value."""
        producer = getattr(var, "op", None)
        if producer is not None and is_const_like(producer.op_type):
            return True
        return getattr(var, "val", None) is not None

    def is_boundary_cast(self, op) -> bool:
        """A cast that reads a function input or writes a function output: the host-side dtype change of an
        fp32 model interface (reported by the fp32-I/O rule, not as in-graph work)."""
        if op is None or op.op_type != "cast":
            return False
        x = op.inputs.get("x")
        return (x is not None and self.is_function_input(x)) or any(self.is_function_output(v) for v in op.outputs)

    # -- the model spec --------------------------------------------------------------------------------------------
    def spec_inputs(self) -> list:
        if self.spec is None:
            return []
        description = self.spec.description
        inputs = list(description.input)
        for function in getattr(description, "functions", ()):
            inputs.extend(function.input)
        return inputs

    def flexible_inputs(self) -> list[tuple[str, str, str]]:
        """(input name, "enumerated" | "range", detail) for every input of the spec with a flexible shape."""
        found = []
        for feature in self.spec_inputs():
            kind = feature.type.WhichOneof("Type")
            if kind == "multiArrayType":
                array = feature.type.multiArrayType
                flex = array.WhichOneof("ShapeFlexibility")
                if flex == "enumeratedShapes":
                    shapes = [tuple(s.shape) for s in array.enumeratedShapes.shapes]
                    found.append((feature.name, "enumerated", f"{len(shapes)} enumerated shapes {shapes}"))
                elif flex == "shapeRange":
                    ranges = [(r.lowerBound, r.upperBound) for r in array.shapeRange.sizeRanges]
                    found.append((feature.name, "range", f"shape ranges {ranges} (upper bound -1 = unbounded)"))
            elif kind == "imageType":
                image = feature.type.imageType
                flex = image.WhichOneof("SizeFlexibility")
                if flex == "enumeratedSizes":
                    found.append((feature.name, "enumerated", f"{len(image.enumeratedSizes.sizes)} enumerated image sizes"))
                elif flex == "imageSizeRange":
                    found.append((feature.name, "range", "image size range"))
        return found


def _finding(rule_id: str, tensor_or_op, detail: str) -> Finding:
    if isinstance(tensor_or_op, TensorRef):
        return Finding(rule_id, tensor_or_op.op, tensor_or_op.op_type, detail)
    return Finding(rule_id, tensor_or_op.name, tensor_or_op.op_type, detail)


def _shape_str(shape: Iterable) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _const_arg(op, name: str):
    var = op.inputs.get(name)
    return None if var is None else var.val


# ----------------------------------------------------------------------------------------------------------------
# The checks.
# ----------------------------------------------------------------------------------------------------------------
def check_rank(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [_finding(rule_id, t, f"rank {len(t.shape)} tensor {_shape_str(t.shape)}")
            for t in ctx.non_constant_tensors() if len(t.shape) > 4]


# The input through which a windowed-attention package (model/window_tiles.py) declares its query tiles.
TILE_MASK_INPUT = "window_mask"


def tile_axes(ctx: CheckContext) -> set[int]:
    """Sizes dim 2 may take as a tile axis: from a (1, W, nT, T) tile mask input, nT (query tiles) and nT - s for
    s = 1..ceil(r / T), r = (W - T) / 2 (the tiles a window piece shifted by s tiles is cut from,
    model/bc1s/windowed_attention.py). Empty without such an input."""
    var = ctx.inputs.get(TILE_MASK_INPUT)
    shape = tuple(var.shape) if var is not None and var.shape is not None else ()
    if len(shape) != 4 or any(is_symbolic_dim(d) for d in shape):
        return set()
    width, tiles, tile = int(shape[1]), int(shape[2]), int(shape[3])
    if tile <= 0:
        return set()
    reach = math.ceil((width - tile) // 2 / tile)
    return {tiles} | {tiles - s for s in range(1, reach + 1) if tiles - s > 0}


def check_bc1s_form(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    tiles = tile_axes(ctx)
    for t in ctx.non_constant_tensors(include_boundary_casts=False):
        rank = len(t.shape)
        if rank > 4:
            continue  # reported by the rank rule
        if rank != 4:
            found.append(_finding(rule_id, t, f"rank {rank} tensor {_shape_str(t.shape)}, not (B, C, 1, S)"))
        elif is_symbolic_dim(t.shape[2]) or int(t.shape[2]) not in {1} | tiles:
            found.append(_finding(rule_id, t, f"tensor {_shape_str(t.shape)} has dim 2 = {t.shape[2]}, not 1"
                                              + (f" or a tile axis {sorted(tiles)}" if tiles else "")))
    return found


def check_dimension_limit(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for t in ctx.non_constant_tensors():
        big = [d for d in t.shape if not is_symbolic_dim(d) and int(d) > MAX_DIMENSION]
        if big:
            found.append(_finding(rule_id, t, f"tensor {_shape_str(t.shape)}: dimension {max(big)} > {MAX_DIMENSION}"))
    for op, var in ctx.constant_outputs():
        info = _tensor_info(var)
        if info:
            big = [d for d in info[0] if not is_symbolic_dim(d) and int(d) > MAX_DIMENSION]
            if big:
                found.append(_finding(rule_id, op, f"constant {_shape_str(info[0])}: dimension {max(big)} > {MAX_DIMENSION}"))
    return found


def check_symbolic(ctx: CheckContext, rule_id: str) -> list[Finding]:
    flexible = ctx.flexible_inputs()
    if flexible and all(kind == "enumerated" for _, kind, _ in flexible):
        # The spec says where the symbols come from: enumerated inputs, specialised per shape by Core ML and
        # reported by the enumerated-shapes rule. Without a spec the symbols are unexplained and count as dynamic.
        return []
    return [_finding(rule_id, t, f"tensor {_shape_str(t.shape)} has symbolic dimensions")
            for t in ctx.non_constant_tensors() if t.symbolic]


def check_range_inputs(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [Finding(rule_id, name, "input", detail) for name, kind, detail in ctx.flexible_inputs() if kind == "range"]


def check_enumerated_inputs(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [Finding(rule_id, name, "input", detail)
            for name, kind, detail in ctx.flexible_inputs() if kind == "enumerated"]


def _ops_of_types(ctx: CheckContext, rule_id: str, op_types: Iterable[str], detail: str) -> list[Finding]:
    wanted = frozenset(op_types)
    return [_finding(rule_id, op, detail.format(op_type=op.op_type)) for op in ctx.non_constant_ops if op.op_type in wanted]


def check_gather(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return _ops_of_types(ctx, rule_id, GATHER_OPS, "{op_type}: indexed read/write inside the graph")


def check_sdpa(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return _ops_of_types(ctx, rule_id, {"scaled_dot_product_attention"},
                         "fused scaled_dot_product_attention (split heads into per-head einsums instead)")


def check_recurrent(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return _ops_of_types(ctx, rule_id, RECURRENT_OPS, "recurrent layer {op_type}")


def check_allowlist(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [_finding(rule_id, op, f"op type {op.op_type!r} is not in ANE_OP_ALLOWLIST")
            for op in ctx.non_constant_ops
            if op.op_type not in ANE_OP_ALLOWLIST and op.op_type not in OWNED_BY_SPECIFIC_RULES]


def check_dynamic_ops(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type in DYNAMIC_SHAPE_OPS:
            found.append(_finding(rule_id, op, f"{op.op_type}: output shape or control flow decided at run time"))
            continue
        for argument in SHAPE_ARGUMENTS.get(op.op_type, ()):
            var = op.inputs.get(argument)
            if var is not None and not ctx.is_constant_var(var):
                found.append(_finding(rule_id, op, f"{op.op_type}: '{argument}' is computed at run time"))
                break
    return found


def check_non_fp16(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [_finding(rule_id, t, f"output {_shape_str(t.shape)} is {t.dtype}")
            for t in ctx.non_constant_tensors(include_boundary_casts=False)
            if t.op_type != "input" and t.dtype != "fp16"]


def check_cast(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type == "cast" and not ctx.is_boundary_cast(op):
            x = op.inputs.get("x")
            source = _tensor_info(x)[1] if x is not None and _tensor_info(x) else "?"
            found.append(_finding(rule_id, op, f"in-graph cast {source} -> {_const_arg(op, 'dtype')}"))
    return found


def check_fp32_io(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for name, var in ctx.inputs.items():
        info = _tensor_info(var)
        if info and info[1] != "fp16":
            found.append(Finding(rule_id, name, "input", f"model input {_shape_str(info[0])} is {info[1]}"))
    for var in ctx.outputs:
        info = _tensor_info(var)
        if info and info[1] != "fp16":
            found.append(Finding(rule_id, var.name, "output", f"model output {_shape_str(info[0])} is {info[1]}"))
    return found


def _float_constants(ctx: CheckContext) -> Iterator[tuple[Any, np.ndarray]]:
    types = _types()
    for op, var in ctx.constant_outputs():
        info = _tensor_info(var)
        if not info or not types.is_float(var.dtype):
            continue
        value = var.val
        if value is None:
            continue
        yield op, np.asarray(value)


def check_non_finite_constants(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op, value in _float_constants(ctx):
        bad = ~np.isfinite(value)
        if bad.any():
            sample = value[bad].ravel()[:3].tolist()
            found.append(_finding(rule_id, op, f"constant {_shape_str(value.shape)} has {int(bad.sum())} non-finite "
                                               f"value(s), e.g. {sample}"))
    return found


def check_fp16_range_constants(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op, value in _float_constants(ctx):
        finite = value[np.isfinite(value)]
        if finite.size and float(np.abs(finite).max()) > FP16_MAX:
            found.append(_finding(rule_id, op, f"constant {_shape_str(value.shape)} reaches |x| = "
                                               f"{float(np.abs(finite).max()):g} > {FP16_MAX:g}"))
    return found


def check_last_axis_padding(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for t in ctx.non_constant_tensors():
        if not t.shape or is_symbolic_dim(t.shape[-1]):
            continue
        row = int(t.shape[-1]) * t.itemsize
        padded = max(ANE_ROW_BYTES, -(-row // ANE_ROW_BYTES) * ANE_ROW_BYTES)
        waste = padded - row
        if waste * 2 > padded:
            found.append(_finding(rule_id, t, f"last axis {t.shape[-1]} x {t.itemsize} B = {row} B padded to {padded} B "
                                              f"({waste / padded:.0%} padding)"))
    return found


def _normalise_equation(equation: str) -> str:
    letters: dict[str, str] = {}
    out = []
    for char in equation.replace(" ", ""):
        if char.isalpha():
            letters.setdefault(char, "abcdefghijklmnopqrstuvwxyz"[len(letters)])
            out.append(letters[char])
        else:
            out.append(char)
    return "".join(out)


def check_einsum_form(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type != "einsum":
            continue
        equation = str(_const_arg(op, "equation"))
        values = op.inputs.get("values") or ()
        shapes = [tuple(v.shape) for v in values]
        if _normalise_equation(equation) != NATIVE_EINSUM_PATTERN:
            found.append(_finding(rule_id, op, f"equation {equation!r} is not the rank-4 per-head form "
                                               f"(MIL 'bkhc,bchq->bkhq' / 'bchk,bkhq->bchq')"))
        elif any(len(s) != 4 or is_symbolic_dim(s[2]) or int(s[2]) != 1 for s in shapes):
            found.append(_finding(rule_id, op, f"equation {equation!r} on {[_shape_str(s) for s in shapes]}: "
                                               f"more than one head per contraction (dim 2 != 1)"))
    return found


def check_softmax_axis(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type != "softmax":
            continue
        axis = _const_arg(op, "axis")
        rank = len(op.inputs["x"].shape)
        axis = -1 if axis is None else int(axis)
        if axis < 0:
            axis += rank
        if axis != 1:
            found.append(_finding(rule_id, op, f"softmax over axis {axis} of {_shape_str(op.inputs['x'].shape)}"))
    return found


def check_dense_matmul(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type == "linear":
            weight = op.inputs.get("weight")
            found.append(_finding(rule_id, op, f"linear with weight {_shape_str(weight.shape)}: use a 1x1 conv"))
        elif op.op_type == "matmul":
            constant = [name for name in ("x", "y") if ctx.is_constant_var(op.inputs[name])]
            if constant:
                shape = op.inputs[constant[0]].shape
                found.append(_finding(rule_id, op, f"matmul with constant '{constant[0]}' {_shape_str(shape)}: "
                                                   f"use a 1x1 conv"))
    return found


def check_large_transpose(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for t in ctx.non_constant_tensors():
        if t.op_type == "transpose" and t.nbytes is not None and t.nbytes > LARGE_TRANSPOSE_BYTES:
            found.append(_finding(rule_id, t, f"transpose copies {t.nbytes / 2**20:.1f} MiB "
                                              f"(> {LARGE_TRANSPOSE_BYTES / 2**20:.0f} MiB), {_shape_str(t.shape)}"))
    return found


def check_batch(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [_finding(rule_id, t, f"batch dimension {t.shape[0]} in {_shape_str(t.shape)}")
            for t in ctx.non_constant_tensors()
            if len(t.shape) == 4 and (is_symbolic_dim(t.shape[0]) or int(t.shape[0]) != 1)]


def check_dilated_conv(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type in ("conv", "conv_transpose"):
            dilations = _const_arg(op, "dilations")
            if dilations is not None and any(int(d) != 1 for d in np.ravel(dilations)):
                found.append(_finding(rule_id, op, f"{op.op_type} with dilations {list(np.ravel(dilations))}"))
    return found


def check_sram_cliff(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [_finding(rule_id, t, f"tensor {_shape_str(t.shape)} {t.dtype} is {t.nbytes / 2**20:.1f} MiB "
                                 f"(> {SRAM_CLIFF_BYTES / 2**20:.0f} MiB)")
            for t in ctx.non_constant_tensors() if t.nbytes is not None and t.nbytes > SRAM_CLIFF_BYTES]


def check_exact_gelu(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type == "gelu":
            mode = _const_arg(op, "mode") or "EXACT"
            if str(mode) == "EXACT":
                found.append(_finding(rule_id, op, "gelu mode EXACT (erf)"))
    return found


def check_concat(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [_finding(rule_id, op, f"concat of {len(op.inputs.get('values') or ())} tensors")
            for op in ctx.non_constant_ops if op.op_type == "concat"]


def check_runtime_weights(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type in ("conv", "conv_transpose", "linear"):
            weight = op.inputs.get("weight")
            if weight is not None and not ctx.is_constant_var(weight):
                found.append(_finding(rule_id, op, f"{op.op_type} weight {_shape_str(weight.shape)} is computed at run time"))
    return found


# ----------------------------------------------------------------------------------------------------------------
# The catalogue.
# ----------------------------------------------------------------------------------------------------------------
def _rule(rule_id: str, statement: str, source: str, severity: str, check, orion: Orion | None = None,
          note: str = "") -> Rule:
    return Rule(rule_id, statement, source, severity, orion, lambda ctx, _c=check, _id=rule_id: _c(ctx, _id), note)


def _documented(rule_id: str, statement: str, source: str, orion: Orion) -> Rule:
    """A catalogued constraint that does not apply to Core ML packages: no check, no severity."""
    return Rule(rule_id, statement, source, None, orion, None)


CATALOGUE: tuple[Rule, ...] = (
    _rule("ANE-R01-rank",
          "No non-constant tensor of rank above 4.",
          f"{SRC_APPLE_ARTICLE} (Principle 1: the 4D channels-first data format); {SRC_CT_2536}",
          "error", check_rank),
    _rule("ANE-R02-bc1s-form",
          "Every non-constant tensor is in (B, C, 1, S) form: rank 4 with dim 2 equal to 1, or equal to the tile "
          "axis a windowed package declares in its tile mask input.",
          f"{SRC_APPLE_ARTICLE} (Principle 1: the (B, C, 1, S) data format); {SRC_REFERENCE_RUN} (the B x L x C "
          f"export ran all {_PLACEMENT['bxlxc_export']['assigned_ops']:,} ops on the CPU; the BC1S rewrite ran all "
          f"{_PLACEMENT['bc1s_export']['non_constant_ops']:,} on the ANE)",
          "error", check_bc1s_form,
          note="Attention scores (1, L, 1, L) and the marker selector (1, L, 1, 32) are of this form. Windowed "
               "attention carries query tiles in dim 2 ((1, C, nT, T), scores (1, T+2r, nT, T)): the ANE's native "
               "4D layout is (N, C, H, W), and MIL's native einsum '(B, C, H, W1) x (B, W1, H, W2)' keeps H as a "
               "batch axis. Dim 2 may therefore equal the tile count nT that the package's window_mask input "
               "(1, W, nT, T) declares, or nT - s for the s = 1..ceil(r/T) tiles a window piece is shifted by, and "
               "nothing else: a (B, heads, L, D) tensor is "
               "still an error. R18 still warns on einsums over tiles, as no compute plan has confirmed them yet. "
               "Boundary casts of an fp32 interface are left to "
               "ANE-R14-fp32-io."),
    _rule("ANE-R03-dimension-limit",
          f"No tensor dimension (constants included) above {MAX_DIMENSION}.",
          SRC_ANE_LIMITS,
          "error", check_dimension_limit,
          note="The ANE compiler message allows N and C up to 65536 but D, H and W only up to 16384; the stricter "
               "limit is applied to every axis."),
    _rule("ANE-R04-symbolic-shape",
          "No non-constant tensor with a symbolic (run-time) dimension.",
          SRC_FORUM_RANGE,
          "error", check_symbolic,
          note="When the spec is given and every flexible input is enumerated, the symbols are explained by the "
               "enumeration and ANE-R06 reports them instead."),
    _rule("ANE-R05-range-input",
          "No model input with a shape range (ct.RangeDim / unbounded dims).",
          f"{SRC_FORUM_RANGE}; {SRC_CT_FLEX}",
          "error", check_range_inputs),
    _rule("ANE-R06-enumerated-input",
          "Model inputs have one fixed shape; enumerated shapes are a hazard (fixed buckets are exported instead).",
          f"{SRC_CT_FLEX}; {SRC_FORUM_RANGE}; {SRC_REFERENCE_RUN} (the enumerated-shape B x L x C export ran on the CPU)",
          "warning", check_enumerated_inputs,
          note="Apple says each enumerated shape can run on the ANE, so this is a warning; the reference run's "
               "enumerated export also had SDPA, rank-5 tensors and a gather, which the error rules catch."),
    _rule("ANE-R07-gather",
          "No gather/scatter indexing inside the graph (look rows up on the host, or contract a one-hot selector).",
          f"{SRC_HOLLANCE_UNSUPPORTED} (gather listed as not working on the ANE)",
          "error", check_gather),
    _rule("ANE-R08-sdpa",
          "No fused scaled_dot_product_attention op; attention is split into per-head einsums.",
          f"{SRC_REFERENCE_RUN} (the export with SDPA put every op on the CPU); {SRC_ML_ANE} (per-head einsum attention)",
          "error", check_sdpa),
    _rule("ANE-R09-op-allowlist",
          "Every non-constant op type is in ANE_OP_ALLOWLIST.",
          f"{SRC_REFERENCE_RUN} (op types of the all-ANE BC1S plan); {SRC_ML_ANE}; {SRC_HOLLANCE_UNSUPPORTED}",
          "error", check_allowlist,
          note="A conservative prediction: an op type outside the list is predicted off the ANE until a Core ML "
               "compute plan shows otherwise. Types owned by a more specific error rule are reported there."),
    _rule("ANE-R10-recurrent",
          "No recurrent layers (lstm, gru, rnn).",
          f"{SRC_CT_RNN}; {SRC_HOLLANCE_UNSUPPORTED}",
          "error", check_recurrent),
    _rule("ANE-R11-dynamic-shape-op",
          "No op whose output shape or control flow is decided at run time (shape, range_1d, fill_like, while_loop, "
          "cond, reshape/slice/tile/pad with computed shape arguments, ...).",
          SRC_FORUM_RANGE,
          "error", check_dynamic_ops),
    _rule("ANE-R12-fp16-compute",
          "Every non-constant op computes in fp16 (no fp32, integer or bool outputs).",
          f"{SRC_CT_TYPED}; {SRC_HOLLANCE_16BIT}",
          "error", check_non_fp16,
          note="Boundary casts of an fp32 interface are left to ANE-R14-fp32-io."),
    _rule("ANE-R13-cast",
          "No cast inside the graph.",
          f"{SRC_CT_TYPED}; {SRC_CAST_MEASURED}",
          "error", check_cast,
          note="A cast that reads a model input or writes a model output is the host-side conversion of an fp32 "
               "interface, reported by ANE-R14-fp32-io."),
    _rule("ANE-R14-fp32-io",
          "Model inputs and outputs are fp16 (an fp32 interface costs a conversion on every call).",
          f"{SRC_CT_TYPED}; apple/coremltools issue #1984 (fp16 inputs and outputs via ct.TensorType(dtype=np.float16))",
          "warning", check_fp32_io),
    _rule("ANE-R15-non-finite-constant",
          "No non-finite constant (inf/nan); masks use a finite additive bias such as -1e4.",
          f"{SRC_ML_ANE} (masks use -1e4); {SRC_REFERENCE_RUN} (finite additive bias of -1e4); {SRC_ORION} "
          "(FP16 hygiene: sanitise NaN/Inf)",
          "error", check_non_finite_constants,
          orion=Orion("enforced", "Statically checkable in a Core ML package: a -inf mask makes fully masked rows "
                                  "NaN (-inf - -inf) in fp16 softmax."),
          note="Not a placement rule: the op stays on the ANE, the result becomes NaN."),
    _rule("ANE-R16-fp16-range-constant",
          f"Float constants fit fp16 (|x| <= {FP16_MAX:g}).",
          f"{SRC_HOLLANCE_16BIT}; {SRC_ORION} (FP16 hygiene)",
          "error", check_fp16_range_constants,
          orion=Orion("enforced", "Statically checkable: on the fp16 ANE such a constant becomes inf."),
          note="Not a placement rule: the value overflows to inf."),
    _rule("ANE-R17-last-axis-padding",
          "The last axis of a non-constant tensor does not waste more than half of its 64-byte-padded row.",
          f"{SRC_APPLE_ARTICLE} (Principle 1: the last axis is padded to 64 bytes)",
          "warning", check_last_axis_padding,
          note="fp16 last dims of 1..15 waste more than half; 16 wastes exactly half."),
    _rule("ANE-R18-einsum-form",
          "einsum is the native rank-4 per-head contraction ('nchw,nwhu->nchu' up to letters, with dim 2 = 1).",
          f"{SRC_ML_ANE} ('bchq,bkhc->bkhq' and 'bkhq,bchk->bchq'); {SRC_CT_EINSUM}; {SRC_EINSUM_MEASURED}",
          "warning", check_einsum_form,
          note="The converter writes torch's 'bchq,bkhc->bkhq' as MIL 'bkhc,bchq->bkhq' (operands swapped)."),
    _rule("ANE-R19-softmax-axis",
          "softmax runs over axis 1 (the channel axis of (B, C, 1, S), i.e. the key axis of (1, L, 1, L) scores).",
          f"{SRC_ML_ANE} (softmax(dim=1)); {SRC_REFERENCE_RUN}",
          "warning", check_softmax_axis),
    _rule("ANE-R20-dense-as-conv",
          "Dense layers with constant weights are 1x1 convs, not matmul/linear.",
          f"{SRC_APPLE_ARTICLE} (nn.Linear -> nn.Conv2d); {SRC_ORION} (1x1 conv about 3x faster than matmul)",
          "warning", check_dense_matmul,
          orion=Orion("warned", "Core ML runs matmul/linear on the ANE, but a 1x1 conv is the faster ANE path; "
                                "warned, not enforced.")),
    _rule("ANE-R21-large-transpose",
          f"No transpose of a non-constant tensor above {LARGE_TRANSPOSE_BYTES // 2**20} MiB.",
          f"{SRC_APPLE_ARTICLE} (Principle 3: minimise memory copies); {SRC_ML_ANE} (K is transposed once)",
          "warning", check_large_transpose,
          note="The BC1S body transposes K once per layer: (1, 768, 1, 1024) fp16 is 1.5 MiB, under the threshold."),
    _rule("ANE-R22-batch-one",
          "Rank-4 non-constant tensors have batch dimension 1.",
          f"{SRC_REFERENCE_RUN} (batch 1; questions run one after another)",
          "warning", check_batch),
    _rule("ANE-R23-dilated-conv",
          "No dilated convolutions.",
          f"{SRC_HOLLANCE_UNSUPPORTED} (dilated convolutions listed as not working; the page says some entries are guesses)",
          "warning", check_dilated_conv,
          note="A warning because the source marks its list as partly guessed and dated."),
    _rule("ANE-R24-sram-cliff",
          f"No non-constant tensor above {SRAM_CLIFF_BYTES // 2**20} MiB.",
          SRC_ORION + " (SRAM cliff near 32 MB)",
          "warning", check_sram_cliff,
          orion=Orion("warned", "Core ML tiles large tensors itself, so they still run, but past the on-chip SRAM "
                                "they spill to DRAM and throughput drops.")),
    _rule("ANE-R25-exact-gelu",
          "gelu uses the tanh approximation (direct ANE programs have no exact erf GELU).",
          SRC_ORION + " (exact GELU not available; tanh approximation)",
          "warning", check_exact_gelu,
          orion=Orion("warned", "Core ML runs gelu(mode=EXACT) (the reference run's all-ANE plan has it); only a "
                                "direct-ANE program needs the tanh form, which would change the numbers."),
          note="Expected on this model: mmBERT's GeGLU uses exact erf GELU and the export keeps it."),
    _rule("ANE-R26-concat",
          "No concat (direct ANE programs have none).",
          SRC_ORION + " (no concat in direct programs)",
          "warning", check_concat,
          orion=Orion("warned", "Core ML supports concat on the ANE; it matters only for a direct-ANE port and "
                                "costs a copy.")),
    _rule("ANE-R27-baked-weights",
          "conv/linear weights are compile-time constants (the ANE bakes weights at compile time).",
          f"{SRC_ORION} (weights baked at compile time; LoRA adapters passed as inputs instead); {SRC_CT_2536}",
          "warning", check_runtime_weights,
          orion=Orion("warned", "A Core ML package bakes its const weights into the compiled program; a weight "
                                "computed at run time may still compile but risks leaving the ANE.")),
    _documented("ANE-R28-io-alphabetical",
                "Program inputs and outputs are ordered alphabetically by name.",
                SRC_ORION,
                orion=Orion("not applicable", "Core ML binds inputs and outputs by name; the order in a package does not "
                                              "matter.")),
    _documented("ANE-R29-min-surface",
                "Every I/O tensor occupies at least about 49 KB.",
                SRC_ORION,
                orion=Orion("not applicable", "Core ML allocates and pads the I/O surfaces itself; a small tensor such as "
                                              "the (1, 1, 1, 32) option logits is legal.")),
    _documented("ANE-R30-uniform-outputs",
                "All outputs of a program have the same size.",
                SRC_ORION,
                orion=Orion("not applicable", "Core ML programs may return outputs of different sizes; it lays them out.")),
    _documented("ANE-R31-compile-budget",
                "At most about 119 ANE compiles per process.",
                SRC_ORION,
                orion=Orion("not applicable", "One package is compiled once per load; the budget matters to delta-"
                                              "compilation or per-step training loops, not to a single Core ML package.")),
)

CATALOGUE_BY_ID = {rule.id: rule for rule in CATALOGUE}
