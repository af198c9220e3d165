"""Executing exported ML programs without Core ML.

- program.py: load a saved .mlpackage back into a PyMIL Program (no torch model, no checkpoint)
- ops.py: one numpy handler per MIL op type (`OP_HANDLERS`), precision modes fp32-accumulate / fp16-strict
- executor.py: `MILExecutor`, runs the program op by op with fp16 storage and bounded memory
- backends.py: the `Backend` interface, `MILBackend`, `CoreMLBackend` (macOS) and `choose_backend`

Heavy imports (coremltools, scipy) happen inside the modules that need them, not here.
"""

from .ops import FP16_STRICT, FP32_ACCUMULATE, MODES, UnsupportedOpError

__all__ = ["FP16_STRICT", "FP32_ACCUMULATE", "MODES", "UnsupportedOpError"]
