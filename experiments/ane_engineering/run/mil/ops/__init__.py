"""Op handlers grouped by family, one module each; importing this package registers every op in registry.OPS.

A new family: a module here whose handlers use `@register(...)` from ..registry, and one line in the import below
(`    <family>,  # noqa: F401`, in alphabetical order; ruff's isort keeps this one grouped import).
"""

from . import activation, activation_extra, classifier, constexpr, contraction, control_flow, conv_transpose, elementwise, elementwise_extra, gather, nms, normalization, normalization_extra, pad_resize, pool, quantization, recurrent, reduction, reduction_extra, resample, scatter_gather, tensor_extra, tensor_shape
