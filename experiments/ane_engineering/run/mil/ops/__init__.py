"""Op handlers grouped by family, one module each; importing this package registers every op in registry.OPS.

A new family: a module here whose handlers use `@register(...)` from ..registry, and one line in the import below
(`    <family>,  # noqa: F401`, in alphabetical order; ruff's isort keeps this one grouped import).
"""

from . import (
    activation,  # noqa: F401
    activation_extra,  # noqa: F401
    classifier,  # noqa: F401
    constexpr,  # noqa: F401
    contraction,  # noqa: F401
    control_flow,  # noqa: F401
    conv_transpose,  # noqa: F401
    elementwise,  # noqa: F401
    elementwise_extra,  # noqa: F401
    gather,  # noqa: F401
    nms,  # noqa: F401
    normalization,  # noqa: F401
    normalization_extra,  # noqa: F401
    pad_resize,  # noqa: F401
    pool,  # noqa: F401
    quantization,  # noqa: F401
    recurrent,  # noqa: F401
    reduction,  # noqa: F401
    reduction_extra,  # noqa: F401
    resample,  # noqa: F401
    scatter_gather,  # noqa: F401
    tensor_extra,  # noqa: F401
    tensor_shape,  # noqa: F401
)
