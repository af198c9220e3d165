"""The op-type sets the rules test op types against: the ANE allow-list and the families owned by specific rules."""

from __future__ import annotations

from .sources import PLACEMENT

# Non-constant MIL op types predicted to run on the ANE. Membership means: the op type is in the reference run's
# all-ANE BC1S plan (core/reference_run.json, placement.bc1s_export.op_types), or it is an elementwise /
# normalisation / layout op that Apple's ANE reference transformer (ml-ane-transformers) relies on. It is
# deliberately not a list of everything the ANE can do: an op type outside it is predicted off the ANE until a
# Core ML compute plan on a Mac shows otherwise (then add it here, with the plan as the evidence). Constants (const,
# constexpr_*) are not placed and are never checked against this list.
REFERENCE_PLAN_OPS = frozenset(PLACEMENT["bc1s_export"]["op_types"])
ANE_OP_ALLOWLIST = REFERENCE_PLAN_OPS | frozenset({
    "constexpr_lut_to_dense", "constexpr_affine_dequantize", "constexpr_blockwise_shift_scale",
    "matmul", "linear", "batch_norm", "instance_norm",
    "tanh", "sigmoid", "silu", "exp", "pow", "sqrt", "rsqrt", "clip",
    "real_div", "maximum", "minimum", "reduce_mean",
    "reshape", "concat", "split", "squeeze", "expand_dims",
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
