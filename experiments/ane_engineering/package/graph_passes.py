"""The project's own MIL graph passes and where they run in a coremltools pass pipeline.

Each pass is a function of its own module that rewrites a PyMIL program in place and returns how many rewrites it
made: slice_merge.py (a slice of a slice is one slice) runs right after the first constant elimination, when
slice arguments are plain constants; layer_norm_gamma.py (a channel layer norm and its weight multiply are one
layer_norm) runs right after coremltools' own layer-norm fusion, which makes the layer_norm it extends. Both come
before the FP16 cast pass in the lean and in the default pipeline.
"""

from __future__ import annotations

from .layer_norm_gamma import fuse_layer_norm_gamma
from .slice_merge import merge_slices

NAMESPACE = "ane_engineering"
# pass name -> (rewrite, the coremltools pass it runs right after)
PASSES = {"merge_consecutive_slices": (merge_slices, "common::const_elimination"),
          "fuse_layer_norm_gamma": (fuse_layer_norm_gamma, "common::fuse_layernorm_or_instancenorm")}


def register() -> list[str]:
    """Register the passes with coremltools (once); returns their pipeline names, in order."""
    from coremltools.converters.mil.mil.passes.graph_pass import AbstractGraphPass
    from coremltools.converters.mil.mil.passes.pass_registry import (
        PASS_REGISTRY,
        register_pass,
    )

    names = []
    for name, (rewrite, _) in PASSES.items():
        pass_name = f"{NAMESPACE}::{name}"
        if pass_name not in PASS_REGISTRY:
            graph_pass = type(name, (AbstractGraphPass,), {"apply": lambda self, prog, rewrite=rewrite: rewrite(prog)})
            register_pass(namespace=NAMESPACE, name=name)(graph_pass)
        names.append(pass_name)
    return names


# Passes added after the reference run measured its graph: the reference-run layout is converted without them, so
# its program is the one the calibration was fitted on (model/bc1s/reference_attention.py).
AFTER_REFERENCE_RUN = ("fuse_layer_norm_gamma",)


def with_project_passes(passes: list[str], reference_graph: bool = False) -> list[str]:
    """`passes` with each project pass right after the first occurrence of the pass it follows (without the passes
    of AFTER_REFERENCE_RUN for the reference-run layout)."""
    passes = list(passes)
    for name, pass_name, (_, after) in zip(PASSES, register(), PASSES.values()):
        if reference_graph and name in AFTER_REFERENCE_RUN:
            continue
        passes.insert(passes.index(after) + 1, pass_name)
    return passes
