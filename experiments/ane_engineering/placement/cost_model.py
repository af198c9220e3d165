"""A cost model of a saved package: FLOPs and bytes per MIL op, and a roofline latency floor per chip.

What it counts (every non-constant op of the program's "main" function, nested blocks included):

- FLOPs. A multiply-add is 2 FLOPs. conv: 2 * prod(output shape) * (Cin/groups) * kh * kw (+1 per output element
  for a bias); einsum: 2 * the product of the sizes of every distinct index in the equation; matmul / linear the
  same (2*M*K*N per batch, +bias). Elementwise and activation ops use the per-element constants in
  FLOPS_PER_ELEMENT (1 for arithmetic, 4 for a transcendental, 8 for gelu / softmax / layer_norm -- conventions,
  not measurements; next to the contractions they are a rounding error). Reductions: 1 per input element. Data
  movement (slice, transpose, reshape, ...): 0 FLOPs.
- Bytes, in the stored dtype (FP16 activations: 2 bytes per element). Activations read (non-constant inputs; a
  slice reads only what it keeps) and written (outputs). Weights: a const/constexpr-fed operand of rank >= 1 in
  its stored form -- a palettized weight (constexpr_lut_to_dense) moves its nbits-wide indices plus its LUT, not the
  dense FP16 tensor. Parameters (axes, perm, begin/end, equation, epsilon, ...) and scalar constants are not bytes
  moved. A constant used by several ops counts once in the program totals.
- A category per op: linear (conv/matmul/linear with a constant weight), attention_scores (a contraction that
  produces an L x L tensor), attention_values (a contraction that consumes one), softmax, norm, elementwise,
  data_movement, other (e.g. the marker read-out einsum, whose output is 32 marker slots, not L x L).

L x L work: with L the bucket length, the einsums (or dynamic matmuls) that have two distinct indices of size L
in one operand or result -- the score contraction (writes (1, Lk, 1, Lq)) and the AV contraction (reads it). The
wider "L x L tensor ops" also count every op that reads or writes an L x L tensor (mask adds, the half-sum of
RoPE scores, softmax): in an unfused schedule they are what moves the bytes. A tensor is L x L when it is made by
a score contraction or by an element-wise/softmax op from an L x L tensor, or is a function input of shape
(1, L, 1, L) (the masks). Each softmax over an L x L tensor is grouped with its score and AV contractions into
an attention block keyed by the mask input(s) it adds (global_mask / local_mask) or folds into the score
contraction as a key-bias channel, so sliding-window layers can be told apart from full-attention layers.

Latency floor (a roofline): compute_ms = FLOPs / peak FP16 rate; memory_ms = bytes / ANE bandwidth;
floor_ms = max(compute_ms, memory_ms). Two byte counts are reported, each with its own floor:
- compulsory bytes: weights once + the function's inputs and outputs. Every call must move them (a full-size
  body's ~240 MB of FP16 weights far exceed the ANE's ~32 MB of on-chip SRAM -- the "SRAM cliff near 32 MB" of
  Orion, arXiv:2603.06728; maderix, "Inside the M4 Apple Neural Engine, Part 2"), so `floor_ms` from them is a
  lower bound on the device time, given the chip figures.
- unfused bytes: every op reads its operands from and writes its result to memory (weights once). This is the
  traffic of a schedule that keeps nothing on chip between ops; the ANE fuses chains and tiles into SRAM, so
  `unfused_floor_ms` is an estimate of an unfused schedule, not a bound.
`no_overlap_ms` (compute + unfused memory, nothing overlapped) is a pessimistic estimate, and
`by_category` gives each category's own roofline time (max of its compute and its unfused memory time) to show
which work dominates a bucket.

This module counts; the floor per chip is roofline.py, the chip figures chips.json (read by chips.py, one home, each
with its source); the reference run's measurements live in core/reference_run.json (core/reference_run.py), a run
reported by the project's user.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from ..core.errors import HarnessError
from ..package.mil.load import load_program
from ..package.mil.tensors import PARAMETER_PORTS as PARAM_PORTS
from ..package.mil.tensors import dense_bytes as _dense_bytes
from ..package.mil.tensors import (  # noqa: F401 - part of this module's interface
    dtype_bits,
    is_const_like,  # constants: no device runs them
    stored_bytes,
)
from ..package.mil.tensors import element_count as _numel
from ..package.mil.tensors import fixed_shape as _shape
from ..package.mil.tensors import is_const_var as _is_const_var
from ..package.mil.walk import walk_operations
from .chips import load_chips
from .roofline import latency_floor

FORMAT = "ane-engineering/cost-model/1"

CATEGORIES = ("linear", "attention_scores", "attention_values", "softmax", "norm", "elementwise", "data_movement",
              "other")

# --------------------------------------------------------------------------------------------------------------
# FLOP conventions (per output element unless stated). Documented constants, not measurements.
ARITHMETIC_FLOPS = 1       # add, sub, mul, real_div, maximum, relu, clip, comparisons, ...
TRANSCENDENTAL_FLOPS = 4   # exp, log, sqrt, rsqrt, inverse, tanh, sigmoid, erf, sin, cos, ...
GELU_FLOPS = 8             # erf (or tanh) plus ~4 multiplies/adds
SILU_FLOPS = 5             # sigmoid + multiply
SOFTMAX_FLOPS = 8          # max, subtract, exp (4), sum, divide
LAYER_NORM_FLOPS = 8       # mean, subtract, square, sum, scale by rsqrt, gamma, beta, (rsqrt amortised)
RMS_NORM_FLOPS = 5         # square, sum, scale by rsqrt, gamma, (rsqrt amortised)
REDUCTION_FLOPS = 1        # per input element

_ARITHMETIC = {
    "add", "sub", "mul", "real_div", "floor_div", "mod", "maximum", "minimum", "pow", "equal", "not_equal", "less",
    "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "select",
    "relu", "relu6", "leaky_relu", "clip", "clamped_relu", "thresholded_relu", "threshold", "abs", "square", "sign",
    "ceil", "floor", "round", "linear_activation", "prelu", "band_part", "hard_sigmoid", "sigmoid_hard",
}
_TRANSCENDENTAL = {"exp", "exp2", "log", "sqrt", "rsqrt", "inverse", "tanh", "sigmoid", "erf", "sin", "cos", "tan",
                   "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "softplus", "softsign", "elu",
                   "scaled_tanh", "softplus_parametric"}
FLOPS_PER_ELEMENT = {
    **{op: ARITHMETIC_FLOPS for op in _ARITHMETIC},
    **{op: TRANSCENDENTAL_FLOPS for op in _TRANSCENDENTAL},
    "gelu": GELU_FLOPS, "silu": SILU_FLOPS, "softmax": SOFTMAX_FLOPS,
    "layer_norm": LAYER_NORM_FLOPS, "instance_norm": LAYER_NORM_FLOPS, "batch_norm": LAYER_NORM_FLOPS,
    "local_response_norm": LAYER_NORM_FLOPS, "rms_norm": RMS_NORM_FLOPS, "l2_norm": RMS_NORM_FLOPS,
}
_NORMS = {"layer_norm", "instance_norm", "batch_norm", "local_response_norm", "rms_norm", "l2_norm"}
_REDUCTIONS = {"reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_l1_norm",
               "reduce_l2_norm", "reduce_log_sum", "reduce_log_sum_exp", "reduce_sum_square", "reduce_argmax",
               "reduce_argmin"}
_DATA_MOVEMENT = {"slice_by_index", "slice_by_size", "transpose", "reshape", "squeeze", "expand_dims", "concat",
                  "split", "stack", "tile", "gather", "gather_nd", "gather_along_axis", "scatter", "scatter_nd",
                  "scatter_along_axis", "pad", "identity", "cast", "reverse", "reverse_sequence", "sliding_windows",
                  "space_to_depth", "depth_to_space", "pixel_shuffle", "pixel_unshuffle", "space_to_batch",
                  "batch_to_space", "reshape_like", "slice_update"}
_SLICES = {"slice_by_index", "slice_by_size"}   # read only what they keep
_CONTRACTIONS = {"conv", "linear", "matmul", "einsum"}

# Inputs that configure an op rather than carry data (PARAM_PORTS): never bytes moved (package/mil/tensors.py).


class CostModelError(HarnessError):
    """A program the cost model cannot count (e.g. a symbolic shape)."""


# --------------------------------------------------------------------------------------------------------------
# Variables: shapes, element sizes and stored bytes come from the MIL module (package/mil/tensors.py).

def _inputs(op):
    """(port, var) for every input, tuple ports flattened."""
    for port, value in op.inputs.items():
        for var in (value if isinstance(value, (list, tuple)) else (value,)):
            yield port, var


def _data_inputs(op):
    """(port, var, is_weight) for the inputs that carry data: non-constant vars, and constants of rank >= 1."""
    for port, var in _inputs(op):
        if port in PARAM_PORTS:
            continue
        if _is_const_var(var):
            if _shape(var):
                yield port, var, True
        else:
            yield port, var, False


# --------------------------------------------------------------------------------------------------------------
# FLOPs and categories per op.

def parse_equation(equation: str) -> tuple[list[str], str]:
    lhs, rhs = equation.replace(" ", "").split("->")
    return lhs.split(","), rhs


def einsum_index_sizes(op) -> dict[str, int]:
    terms, _ = parse_equation(op.inputs["equation"].val)
    sizes: dict[str, int] = {}
    for term, var in zip(terms, op.inputs["values"]):
        shape = _shape(var)
        if len(term) != len(shape):
            raise CostModelError(f"{op.name}: equation term {term!r} does not match operand shape {shape}")
        for index, size in zip(term, shape):
            sizes[index] = max(sizes.get(index, 1), size)
    return sizes


def _contraction_lxl(op, length: int | None) -> str | None:
    """'scores' when the result is L x L, 'values' when an operand is L x L, else None."""
    if length is None:
        return None
    if op.op_type == "einsum":
        terms, result = parse_equation(op.inputs["equation"].val)
        sizes = einsum_index_sizes(op)

        def is_lxl(term):
            return sum(1 for index in set(term) if sizes[index] == length) >= 2

        if is_lxl(result):
            return "scores"
        if any(is_lxl(term) for term in terms):
            return "values"
        return None
    if op.op_type == "matmul":
        m, k, n = _matmul_mkn(op)
        if m == n == length:
            return "scores"
        if k == length and length in (m, n):
            return "values"
    return None


def _matmul_mkn(op) -> tuple[int, int, int]:
    x, y = _shape(op.inputs["x"]), _shape(op.inputs["y"])
    tx = bool(op.inputs["transpose_x"].val) if "transpose_x" in op.inputs else False
    ty = bool(op.inputs["transpose_y"].val) if "transpose_y" in op.inputs else False
    if len(x) == 1:
        x = (1,) + x
    if len(y) == 1:
        y = y + (1,)
    m, k = (x[-1], x[-2]) if tx else (x[-2], x[-1])
    n = y[-2] if ty else y[-1]
    return m, k, n


def op_flops(op) -> tuple[int, bool]:
    """(FLOPs of `op`, whether its type is modelled)."""
    op_type = op.op_type
    out = op.outputs[0]
    if op_type == "conv":
        weight = _shape(op.inputs["weight"])  # (Cout, Cin/groups, *kernel)
        flops = 2 * _numel(out) * math.prod(weight[1:])
        if "bias" in op.inputs and op.inputs["bias"] is not None:
            flops += _numel(out)
        return flops, True
    if op_type == "linear":
        weight = _shape(op.inputs["weight"])  # (out, in)
        flops = 2 * _numel(out) * weight[1]
        if "bias" in op.inputs and op.inputs["bias"] is not None:
            flops += _numel(out)
        return flops, True
    if op_type == "matmul":
        _, k, _ = _matmul_mkn(op)
        return 2 * _numel(out) * k, True
    if op_type == "einsum":
        return 2 * math.prod(einsum_index_sizes(op).values()), True
    if op_type in FLOPS_PER_ELEMENT:
        return FLOPS_PER_ELEMENT[op_type] * _numel(out), True
    if op_type in _REDUCTIONS:
        return REDUCTION_FLOPS * _numel(op.inputs["x"]), True
    if op_type in _DATA_MOVEMENT:
        return 0, True
    return 0, False


def _weight_is_constant(op) -> bool:
    port = "y" if op.op_type == "matmul" else "weight"
    candidates = [op.inputs.get(port)] + ([op.inputs.get("x")] if op.op_type == "matmul" else [])
    return any(var is not None and _is_const_var(var) for var in candidates)


def op_category(op, length: int | None = None) -> str:
    op_type = op.op_type
    if op_type in _CONTRACTIONS:
        if op_type in ("conv", "linear", "matmul") and _weight_is_constant(op):
            return "linear"
        lxl = _contraction_lxl(op, length)
        if lxl == "scores":
            return "attention_scores"
        if lxl == "values":
            return "attention_values"
        return "other"
    if op_type == "softmax":
        return "softmax"
    if op_type in _NORMS:
        return "norm"
    if op_type in FLOPS_PER_ELEMENT or op_type in _REDUCTIONS:
        return "elementwise"
    if op_type in _DATA_MOVEMENT:
        return "data_movement"
    return "other"


def op_cost(op, length: int | None = None) -> dict | None:
    """FLOPs, bytes read (activations, weights in stored form), bytes written and category of one op; None for a
    constant. `length` (the bucket L) is needed to tell attention contractions apart."""
    if is_const_like(op.op_type):
        return None
    flops, modelled = op_flops(op)
    activation_read = weight_read = 0
    weights = {}
    for _, var, is_weight in _data_inputs(op):
        if is_weight:
            size = stored_bytes(var)
            weights[var.name] = (size, _numel(var) * 2)  # (stored, as dense FP16)
            weight_read += size
        elif op.op_type not in _SLICES:
            activation_read += _dense_bytes(var)
    written = sum(_dense_bytes(var) for var in op.outputs)
    if op.op_type in _SLICES:
        activation_read = written
    return {
        "name": op.name, "op_type": op.op_type, "category": op_category(op, length), "flops": flops,
        "activation_bytes_read": activation_read, "weight_bytes_read": weight_read, "bytes_written": written,
        "bytes": activation_read + weight_read + written, "modelled": modelled, "weights": weights,
        "output_shape": list(_shape(op.outputs[0])),
    }


# --------------------------------------------------------------------------------------------------------------
# Whole programs.

def _is_lxl_shape(shape, length) -> bool:
    return sum(1 for d in shape if d == length) >= 2


def infer_length(program) -> int | None:
    """The bucket L of a BC1S program: the side of a square (1, L, 1, L) input, else the last axis of the first
    rank-4 input ((B, C, 1, L) layout)."""
    inputs = [_shape(var) for var in program.functions["main"].inputs.values()]
    for shape in inputs:
        if len(shape) == 4 and shape[1] == shape[3] and shape[1] > 1 and shape[2] == 1:
            return shape[1]
    for shape in inputs:
        if len(shape) == 4:
            return shape[3]
    return None


def _empty_bucket():
    return {"ops": 0, "flops": 0, "activation_bytes_read": 0, "weight_bytes_read": 0, "bytes_written": 0, "bytes": 0}


def _add(bucket, record):
    bucket["ops"] += 1
    for key in ("flops", "activation_bytes_read", "weight_bytes_read", "bytes_written", "bytes"):
        bucket[key] += record[key]


def _shares(bucket, totals):
    bucket["flops_share"] = bucket["flops"] / totals["flops"] if totals["flops"] else None
    bucket["bytes_share"] = bucket["bytes"] / totals["unfused_bytes"] if totals["unfused_bytes"] else None
    return bucket


def program_cost(program, length: int | None = None, per_op: bool = False) -> dict:
    """Totals, per-category and per-op-type breakdowns and the L x L attention share of a PyMIL program.
    `length` defaults to infer_length(program); `per_op` adds one record per op (large for full-size bodies)."""
    function = program.functions["main"]
    if length is None:
        length = infer_length(program)
    records, weights = [], {}
    by_category = {name: _empty_bucket() for name in CATEGORIES}
    by_op_type: dict[str, dict] = defaultdict(_empty_bucket)
    unmodelled: set[str] = set()
    ops = [op for op in walk_operations(program) if not is_const_like(op.op_type)]
    index_of = {id(op): i for i, op in enumerate(ops)}
    for op in ops:
        record = op_cost(op, length)
        records.append(record)
        weights.update(record["weights"])
        _add(by_category[record["category"]], record)
        _add(by_op_type[record["op_type"]], record)
        if not record["modelled"]:
            unmodelled.add(record["op_type"])

    io_in = sum(_dense_bytes(var) for var in function.inputs.values())
    io_out = sum(_dense_bytes(var) for var in function.outputs)
    weight_bytes = sum(stored for stored, _ in weights.values())
    activation_read = sum(r["activation_bytes_read"] for r in records)
    written = sum(r["bytes_written"] for r in records)
    totals = {
        "non_constant_ops": len(records),
        "flops": sum(r["flops"] for r in records),
        "activation_bytes_read": activation_read,
        "activation_bytes_written": written,
        "weight_bytes": weight_bytes,
        "weight_bytes_as_dense_fp16": sum(dense for _, dense in weights.values()),
        "io_bytes": {"inputs": io_in, "outputs": io_out},
        "unfused_bytes": activation_read + written + weight_bytes,
        "compulsory_bytes": weight_bytes + io_in + io_out,
    }
    for bucket in list(by_category.values()) + list(by_op_type.values()):
        _shares(bucket, totals)

    lxl = _lxl_analysis(function, ops, records, index_of, length, totals) if length else None
    report = {
        "length": length,
        "totals": totals,
        "by_category": by_category,
        "by_op_type": dict(sorted(by_op_type.items())),
        "lxl": lxl,
        "unmodelled_op_types": sorted(unmodelled),
    }
    if per_op:
        report["per_op"] = [{k: v for k, v in r.items() if k != "weights"} for r in records]
    return report


def _lxl_analysis(function, ops, records, index_of, length, totals) -> dict:
    """L x L einsum share, L x L tensor-op share and attention blocks grouped by mask input."""
    mask_inputs = {var.name for var in function.inputs.values() if _is_lxl_shape(_shape(var), length)}
    lxl_vars = set(mask_inputs)
    touches = [False] * len(ops)
    for i, op in enumerate(ops):
        record = records[i]
        reads = any(var.name in lxl_vars for _, var in _inputs(op))
        if record["category"] == "attention_scores":
            writes = True
        elif record["category"] in ("attention_values", "linear", "other") or op.op_type in _CONTRACTIONS:
            writes = False
        else:  # element-wise, softmax, norm, data movement: L x L in, L x L (same shape class) out
            writes = reads and any(_is_lxl_shape(_shape(var), length) for var in op.outputs)
        if writes:
            lxl_vars.update(var.name for var in op.outputs)
        touches[i] = reads or writes or record["category"] in ("attention_scores", "attention_values")

    einsum, tensor_ops = _empty_bucket(), _empty_bucket()
    for i, record in enumerate(records):
        if record["category"] in ("attention_scores", "attention_values"):
            _add(einsum, record)
        if touches[i]:
            _add(tensor_ops, record)

    blocks: dict[str, dict] = {}
    for op in ops:
        if op.op_type != "softmax" or op.inputs["x"].name not in lxl_vars:
            continue
        members, masks = _attention_block(op, mask_inputs)
        key = "+".join(sorted(masks)) or "no mask input"
        group = blocks.setdefault(key, {"blocks": 0, "einsum": _empty_bucket(), "tensor_ops": _empty_bucket()})
        group["blocks"] += 1
        for member in members:
            record = records[index_of[id(member)]]
            if record["category"] in ("attention_scores", "attention_values"):
                _add(group["einsum"], record)
            _add(group["tensor_ops"], record)
    for group in blocks.values():
        _shares(group["einsum"], totals)
        _shares(group["tensor_ops"], totals)
    return {
        "length": length,
        "definition": ("einsum: contractions with two distinct indices of size L in one operand or result (score "
                       "and AV einsums); tensor_ops: every op that reads or writes an L x L tensor"),
        "einsum": _shares(einsum, totals),
        "tensor_ops": _shares(tensor_ops, totals),
        "blocks_by_mask": blocks,
    }


def _attention_block(softmax, mask_inputs: set[str]) -> tuple[list, set[str]]:
    """The ops of one attention block around `softmax`: back through element-wise ops to the score contractions
    (and the mask input they add), forward to the AV contraction. A mask input that reaches a score contraction's
    operands through data movement only -- a key bias sliced from a mask and concatenated onto K as an extra
    channel (model/bc1s/attention.py) -- keys the block like an added mask."""
    members, masks = _walk_back(_inputs(softmax), mask_inputs, lambda op: op.op_type not in _CONTRACTIONS)
    for op in [op for op in members if op.op_type in _CONTRACTIONS]:  # the score contractions
        masks |= _walk_back(_inputs(op), mask_inputs, lambda op: op.op_type in _DATA_MOVEMENT)[1]
    members.insert(0, softmax)
    seen = {id(op) for op in members}
    frontier = list(softmax.outputs)
    while frontier:
        var = frontier.pop()
        for child in var.child_ops:
            if id(child) in seen:
                continue
            seen.add(id(child))
            members.append(child)
            if child.op_type not in _CONTRACTIONS:
                frontier.extend(child.outputs)
    return members, masks


def _walk_back(operands, mask_inputs: set[str], crosses) -> tuple[list, set[str]]:
    """From (name, var) operands back to the function inputs: the non-constant ops met (crossing only those that
    `crosses(op)` accepts) and the mask inputs reached."""
    members, masks, seen = [], set(), set()
    stack = [var for _, var in operands]
    while stack:
        var = stack.pop()
        if var.op is None:
            if var.name in mask_inputs:
                masks.add(var.name)
            continue
        op = var.op
        if is_const_like(op.op_type) or id(op) in seen:
            continue
        seen.add(id(op))
        members.append(op)
        if crosses(op):
            stack.extend(v for _, v in _inputs(op))
    return members, masks


# --------------------------------------------------------------------------------------------------------------
# Floors.

def conventions() -> dict:
    """The constants behind the counts, for evidence files."""
    return {
        "flop_per_multiply_add": 2,
        "flops_per_element": {"arithmetic": ARITHMETIC_FLOPS, "transcendental": TRANSCENDENTAL_FLOPS,
                              "gelu": GELU_FLOPS, "silu": SILU_FLOPS, "softmax": SOFTMAX_FLOPS,
                              "layer_norm": LAYER_NORM_FLOPS, "rms_norm": RMS_NORM_FLOPS,
                              "reduction_per_input_element": REDUCTION_FLOPS, "data_movement": 0},
        "bytes": "stored dtype (fp16 = 2 bytes); weights in stored form (palettized: nbits/8 per index + LUT), "
                 "counted once per program; slices read only what they keep; parameters and scalars not counted",
        "units": {"flops": "FLOP", "bytes": "byte", "bandwidth": "GB/s = 1e9 byte/s", "peak": "TFLOPS = 1e12"},
    }


def cost_report(package_path, per_op: bool = False, chips: dict | None = None, length: int | None = None,
                regions: bool = False) -> dict:
    """Cost and floors of a saved package: a probe directory (model.mlpackage + manifest.json) or an .mlpackage;
    `regions` adds the static placement's ANE regions (regions.py) to the cost."""
    from ..package.manifest import MANIFEST_NAME, PACKAGE_NAME, read_manifest
    from ..package.manifest import package_path as manifest_package

    path = Path(package_path)
    manifest = None
    if path.is_dir() and (path / MANIFEST_NAME).exists():
        manifest = read_manifest(path)
        package = manifest_package(path, manifest) if manifest.get("package") else path / PACKAGE_NAME
    else:
        package = path
    loaded = load_program(package)
    program = loaded.program
    if length is None and manifest is not None:
        length = manifest.get("length")
    cost = program_cost(program, length=length, per_op=per_op)
    if regions:
        from .regions import program_regions

        cost["regions"] = program_regions(program, loaded.spec)
    chips = chips or load_chips()
    report = {"format": FORMAT, "package": str(package), "cost": cost,
              "floors": {name: latency_floor(cost, chip) for name, chip in chips.items()},
              "conventions": conventions()}
    if manifest is not None:
        report["manifest"] = {
            "kind": manifest.get("kind"), "length": manifest.get("length"),
            "compute_precision": manifest.get("compute_precision"),
            "package_sha256": manifest["package"]["content_hash"]["sha256"],
            "source": manifest.get("source"), "model_config": manifest.get("model_config"),
            "export_harness": manifest.get("harness"), "manifest_sha256": manifest.get("manifest_sha256")}
    return report


def window_fraction(length: int, radius: int) -> float:
    """Fraction of the L x L (key, query) pairs with |key - query| <= radius: the part of a sliding-window
    layer's dense score work that a window-only kernel would still do."""
    pairs = sum(min(length - 1, q + radius) - max(0, q - radius) + 1 for q in range(length))
    return pairs / (length * length)
