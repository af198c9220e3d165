"""Op handlers grouped by concept (the family column of docs/EXECUTOR_OPS.md), one module each; importing this
package registers every op in registry.OPS.

A new family: a module here whose handlers use `@register(...)` from ..registry, and one line in the import below
(`    <family>,  # noqa: F401`, in alphabetical order; ruff's isort keeps this one grouped import).
"""

from . import (
    activation,  # noqa: F401
    block_rearrange,  # noqa: F401
    classifier,  # noqa: F401
    constexpr,  # noqa: F401
    contraction,  # noqa: F401
    control_flow,  # noqa: F401
    conv_transpose,  # noqa: F401
    elementwise_binary,  # noqa: F401
    elementwise_unary,  # noqa: F401
    indexing,  # noqa: F401
    joining,  # noqa: F401
    nms,  # noqa: F401
    normalization,  # noqa: F401
    pad_resize,  # noqa: F401
    pool,  # noqa: F401
    quantization,  # noqa: F401
    random,  # noqa: F401
    recurrent,  # noqa: F401
    reduction,  # noqa: F401
    resample,  # noqa: F401
    reshape,  # noqa: F401
    shape_construction,  # noqa: F401
    slicing,  # noqa: F401
    sorting,  # noqa: F401
    stateful,  # noqa: F401
)
