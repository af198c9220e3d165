"""Executing exported ML programs without Core ML.

- program.py: load a saved .mlpackage back into a PyMIL Program (no torch model, no checkpoint)
- registry.py: `register` and `OPS`, one `OpDef` (handler, load-time prepare, opset range) per MIL op type
- ops/: the handlers, one module per concept (elementwise_binary, activation, normalization, reduction, reshape,
  slicing, indexing, contraction, constexpr, control_flow, classifier, ...)
- numerics.py: precision modes fp32-accumulate / fp16-strict (`Numerics`), `cast_to`
- kernels.py: numba fp16 <-> fp32 and fused fp16 binary kernels, the thread pool
- executor.py: `MILExecutor`, runs the program op by op with fp16 storage and bounded memory
- backends.py: the `Backend` interface, `MILBackend`, `CoreMLBackend` (macOS) and `choose_backend`
- tool.py and __main__.py: `python -m experiments.ane_engineering.execute`, describe or run any .mlpackage
- batch.py: the command's input files (many per process, a directory) and its output directory
- predictor.py: the Python API beyond tensors: pictures (images.py, ct.ImageType), states (state.py, ct.StateType)
- predict_shim.py, pytest_plugin.py: coremltools' MLModel.predict / make_state off macOS through the executor
- op_table.py: docs/EXECUTOR_OPS.md (op x opset, supported or not) generated from the registry

Heavy imports (coremltools, scipy) happen inside the modules that need them, not here.
"""

from .numerics import FP16_STRICT, FP32_ACCUMULATE, MODES
from .registry import UnsupportedOpError

__all__ = ["FP16_STRICT", "FP32_ACCUMULATE", "MODES", "UnsupportedOpError"]
