"""Trace an ExportSpec and convert it with coremltools to an FP16 ML Program.

Deployment target: macOS 15 / iOS 18 (MIL opset CoreML8). Why: it is the first target whose palettization
emits `constexpr_lut_to_dense` with per-grouped-channel LUTs (the palettize stage needs it), FP16 model inputs and
outputs are allowed (since macOS 13), so the host hands FP16 straight to the ANE without an in-graph cast, and it
is what the reference run used (macOS 27.2 runs it).
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings

import numpy as np
import torch

from ..core import stop
from .graph_passes import with_project_passes
from .kinds import ExportSpec

DEPLOYMENT_TARGET = "macOS15"

# The coremltools default pipeline runs 95 passes and validates the whole program after each; on a 24-layer BC1S
# body most passes find nothing to do and conversion time is dominated by that validation. These are the default
# passes that change BC1S graphs (measured pass by pass), in the default order. tests/package/test_convert.py
# checks that the lean pipeline yields exactly the program the default one does, for every BC1S kind.
LEAN_BC1S_PASSES = (
    "common::update_output_dtypes", "common::noop_elimination", "common::const_elimination",
    "common::sanitize_input_output_names", "common::const_deduplication", "common::fuse_layernorm_or_instancenorm",
    "common::dedup_op_and_var_names", "common::add_fp16_cast", "common::update_output_dtypes",
    "common::const_elimination", "common::dead_code_elimination", "common::cast_optimization",
    "common::dead_code_elimination", "common::const_deduplication", "common::dead_code_elimination",
    "common::topological_reorder", "common::dead_code_elimination",
)


@contextlib.contextmanager
def quiet_coremltools():
    """coremltools prints an untested-torch warning and per-pass progress bars; keep our own progress readable."""
    logging.getLogger("coremltools").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stderr(io.StringIO()):
            yield


def import_coremltools():
    with quiet_coremltools():
        import coremltools as ct
    return ct


_SCALAR_CAST_PATCHED = False


def install_numpy2_scalar_cast_workaround() -> None:
    """coremltools 9.0's torch frontend converts `aten::Int`/`aten::Bool` of a folded constant with `int(x.val)`;
    under NumPy >= 2.4 a shape-(1,) array no longer converts ("only 0-dimensional arrays can be converted to Python
    scalars"). The original-layout baseline traces such nodes (sizes read from tensor shapes). Re-register those two
    ops, through coremltools' documented `register_torch_op(override=True)`, with `.item()` on the constant.
    BC1S graphs never emit these nodes. Within the `convert` extra's pin (numpy<2.4, pyproject.toml) coremltools'
    own `int(x.val)` still works and this changes nothing; it stays for environments outside the pin (NumPy 2.4
    installed by other means), where coremltools' own cast fails (benchmarks/evidence/numpy_pin.json)."""
    global _SCALAR_CAST_PATCHED
    if _SCALAR_CAST_PATCHED:
        return
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.frontend.torch import ops as torch_ops
    from coremltools.converters.mil.frontend.torch.torch_op_registry import register_torch_op

    def make(python_type, mil_dtype):
        def convert_scalar_cast(context, node):
            x = torch_ops._get_inputs(context, node, expected=1)[0]
            if x.can_be_folded_to_const():
                value = python_type(np.asarray(x.val).reshape(-1)[0])
                context.add(mb.const(val=value, name=node.name), node.name)
                return
            torch_ops._cast(context, node, python_type, mil_dtype)
        return convert_scalar_cast

    for name, python_type, mil_dtype in (("int", int, "int32"), ("bool", bool, "bool")):
        function = make(python_type, mil_dtype)
        function.__name__ = name
        register_torch_op(function, override=True)
    _SCALAR_CAST_PATCHED = True


def _input_types(ct, spec: ExportSpec) -> list:
    types = []
    for contract in spec.inputs:
        dtype = np.int32 if contract.dtype == "int32" else np.float16
        shape = contract.shape
        if (spec.enumerated_lengths and len(shape) == 2 and shape[1] == spec.length
                and contract.name != "marker_positions"):
            shape = ct.EnumeratedShapes(shapes=[(1, n) for n in spec.enumerated_lengths], default=(1, spec.length))
        types.append(ct.TensorType(name=contract.name, shape=shape, dtype=dtype))
    return types


# BC1S graphs are traced at this short length and then given the bucket's length-dependent constants (the RoPE
# tables, the only buffers whose shape depends on the length; weights do not). torch.jit.trace runs the forward
# pass, and at L1024 that forward (dense 1024 x 1024 attention in FP32) was a quarter of the conversion time; the
# traced graph itself is length-agnostic (shapes come from the declared inputs). The package is byte-identical to
# tracing at full length: tests/package/test_convert.py compares the two.
TRACE_LENGTH = 16


def trace(spec: ExportSpec, short: bool = True):
    """TorchScript of the spec's module: traced at TRACE_LENGTH with the full-length buffers swapped in (BC1S
    kinds), or traced at full length."""
    if not short or spec.rebuild is None or spec.length <= TRACE_LENGTH:
        with torch.no_grad():
            return torch.jit.trace(spec.module, spec.example_inputs(), check_trace=False)
    short = spec.rebuild(TRACE_LENGTH)  # its own inputs: only the length axes are short (a channel axis may equal L)
    with torch.no_grad():
        traced = torch.jit.trace(short.module.eval(), short.example_inputs(), check_trace=False)
    full = dict(spec.module.named_modules(remove_duplicate=False))
    for path, module in traced.named_modules(remove_duplicate=False):
        for name, _ in list(module.named_buffers(recurse=False)):  # none at all for an FFN block: nothing to swap
            setattr(module, name, getattr(full[path], name))
    return traced


def pass_pipeline(ct, spec: ExportSpec, lean: bool = True):
    """The lean pipeline for BC1S kinds; coremltools' default for the baseline (its graph needs the rest). Both BC1S
    pipelines also run the project's passes (graph_passes.py)."""
    if spec.kind == "baseline":
        return ct.PassPipeline.DEFAULT
    if not lean:
        default = ct.PassPipeline.DEFAULT
        return ct.PassPipeline(pass_names=with_project_passes(list(default.passes), spec.reference_graph),
                               pipeline_name="default-and-ane-engineering")
    return ct.PassPipeline(pass_names=with_project_passes(list(LEAN_BC1S_PASSES), spec.reference_graph),
                           pipeline_name="ane-engineering-lean-bc1s")


def convert(spec: ExportSpec, lean: bool = True, convert_to: str = "mlprogram", short_trace: bool = True):
    """Return the converted ct.models.MLModel (not loaded: prediction is macOS-only), or with
    convert_to="milinternal" the PyMIL program."""
    ct = import_coremltools()
    stop.check()  # importing coremltools and tracing swallow a stop raised inside them (core/stop.py)
    install_numpy2_scalar_cast_workaround()
    traced = trace(spec, short_trace)
    stop.check()
    outputs = [ct.TensorType(name=c.name, dtype=np.float16) for c in spec.outputs]
    with quiet_coremltools():
        model = ct.convert(
            traced,
            inputs=_input_types(ct, spec),
            outputs=outputs,
            convert_to=convert_to,
            compute_precision=ct.precision.FLOAT16,
            minimum_deployment_target=getattr(ct.target, DEPLOYMENT_TARGET),
            pass_pipeline=pass_pipeline(ct, spec, lean),
            **({"skip_model_load": True} if convert_to == "mlprogram" else {}),
        )
    stop.check()
    return model
