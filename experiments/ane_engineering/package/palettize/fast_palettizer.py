"""Per-grouped-channel k-means palettization of a Core ML package with the exact k-means of `kmeans_exact`.

Route (coremltools 9.0): coremltools' own ``compression::palettize_weights`` pass does all the graph work and the
LUTs come from us through its public ``OpPalettizerConfig(mode="custom", lut_function=...)`` hook:

- ``mode="custom"`` works with ``granularity="per_grouped_channel"``: ``grouped_channelwise_compress`` splits the
  weight into groups exactly as for ``mode="kmeans"`` and calls ``lut_function(group)`` per group, expecting what
  its k-means returns (``lut`` of 2^nbits entries in the weight dtype, ``indices`` uint8 flattened); it then infers
  nbits from the LUT length, reshapes the LUT to ``[Cout/G, 1, 1, 1, 2^nbits, 1]``, casts indices to
  ``uint{nbits}`` and builds the same ``constexpr_lut_to_dense`` op named ``<const>_palettized``. So the package
  is an ordinary palettized package, op for op what ``mode="kmeans"`` emits; only the LUT values and indices
  differ (never worse in squared error).
- The hook is called one group at a time, serially and without the process pool (the pool is only used for
  ``mode="kmeans"``). To use both cores, a first pass (`_GroupCollector`, a subclass of the same pass class, so
  the op selection -- op type config, ``weight_threshold``, block sizes -- is coremltools' own code) walks the
  program and records every group the real pass will hand to the hook, by calling coremltools'
  ``blockwise_compress`` with a recording function. All groups are then palettized in one batch on ``workers``
  threads (compiled nogil code). The real pass then runs with a ``lut_function`` that looks each group up by a
  SHA-1 of its bytes (plus shape and dtype); a group it has not seen is computed on the spot, so a selection
  mismatch could only cost time, never correctness. ``stats["cache_misses"]`` counts them.
- Both passes run on one PyMIL program through ``coremltools.models.utils._apply_graph_pass`` (the helper
  ``palettize_weights`` itself uses), so the package is loaded and written once; it loads the program through the
  MIL module (package/mil/load.py, every check of a package first) instead of coremltools' unchecked loader. The program is then converted
  back with coremltools' default pass pipeline minus REPALETTIZE_SKIPPED_PASSES (`apply_passes`; see there why).

Select only conv weights (``op_types=("conv",)`` -> ``op_type_configs``), never a global config: that would also
palettize RoPE tables and masks over 2048 elements.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np

from . import kmeans_exact

__all__ = ["palettize_package", "IMPLEMENTATIONS"]

IMPLEMENTATIONS = ("exact", "coremltools")

# coremltools converts a palettized program back with its default pass pipeline. One pass there,
# fuse_elementwise_to_batchnorm, folds a (1, C, 1, 1) multiply followed by an add of constants into batch_norm --
# which is what a channel LayerNorm with a bias leaves beside the fused layer_norm (BERT's norms; ModernBERT with
# norm_bias) -- and fails on an FP16 program ("gamma has dtype fp16 whereas mean has dtype fp32"). The export
# already ran its passes on the program; palettization only swaps conv weights for constexpr_lut_to_dense, so the
# fold has nothing to gain, and it is left out.
REPALETTIZE_SKIPPED_PASSES = ("common::fuse_elementwise_to_batchnorm",)


def _checked_load(mlmodel):
    """A ``pymil_load_func`` for ``_apply_graph_pass``: the MIL module's checked load of the model's package."""
    from ..mil.load import program_of_model

    return lambda model_spec, specification_version, file_weights_dir: program_of_model(mlmodel, specification_version)


def apply_passes(mlmodel, passes):
    """coremltools' ``_apply_graph_pass(mlmodel, passes)`` (the program loaded by the MIL module) with the program
    converted back by the default pass pipeline minus REPALETTIZE_SKIPPED_PASSES (the same arguments
    ``_apply_graph_pass`` gives its conversion)."""
    import coremltools as ct
    from coremltools.converters.mil.converter import mil_convert
    from coremltools.models.utils import _apply_graph_pass

    program = _apply_graph_pass(mlmodel, passes, return_pymil_prog=True, pymil_load_func=_checked_load(mlmodel))
    pipeline = ct.PassPipeline.DEFAULT
    pipeline.remove_passes(REPALETTIZE_SKIPPED_PASSES)
    spec = mlmodel.get_spec()
    return mil_convert(program, convert_from="milinternal", convert_to="mlprogram",
                       compute_units=mlmodel.compute_unit, specification_version=spec.specificationVersion,
                       model_description=spec.description, skip_model_load=True, pass_pipeline=pipeline)


def _key(group: np.ndarray) -> tuple:
    g = np.ascontiguousarray(group)
    digest = hashlib.sha1(memoryview(g).cast("B"), usedforsecurity=False).digest()
    return g.shape, g.dtype.str, digest


class _LutCache:
    """The ``lut_function``: returns precomputed (lut, indices) for a group, computing any group it lacks."""

    def __init__(self, nbits: int):
        self.nbits = nbits
        self.entries: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self.hits = 0
        self.misses = 0

    def fill(self, groups: list[np.ndarray], workers: int) -> dict:
        """Palettize the recorded groups in batches of equal size (one batch per group shape)."""
        stats = {"groups": 0, "sse": 0.0, "methods": {}}
        by_shape: dict[tuple, list[int]] = {}
        for i, g in enumerate(groups):
            by_shape.setdefault((g.shape, g.dtype.str), []).append(i)
        for (_, dtype), members in by_shape.items():
            if dtype != np.dtype(np.float16).str:
                continue  # computed on demand by the generic path in __call__
            batch = np.stack([groups[i] for i in members])
            luts, idx, info = kmeans_exact.palettize_groups(batch, self.nbits, workers=workers, return_stats=True)
            for row, i in enumerate(members):
                self.entries[_key(groups[i])] = (luts[row], idx[row])
            stats["groups"] += len(members)
            stats["sse"] += float(info["sse"].sum())
            for code, count in zip(*np.unique(info["method"], return_counts=True)):
                name = kmeans_exact.METHOD_NAMES[int(code)]
                stats["methods"][name] = stats["methods"].get(name, 0) + int(count)
        return stats

    def __call__(self, group: np.ndarray):
        entry = self.entries.pop(_key(group), None)
        if entry is not None:
            self.hits += 1
            return entry
        self.misses += 1
        if group.dtype == np.float16:
            return kmeans_exact.palettize_group(group, self.nbits)
        return _palettize_generic(group, self.nbits)


def _palettize_generic(group: np.ndarray, nbits: int):
    """Non-FP16 weights: the same exact k-means on np.unique's histogram, LUT cast to the weight dtype."""
    values, counts = np.unique(group.astype(np.float64).ravel(), return_counts=True)
    k = 1 << nbits
    centroids, _ = kmeans_exact.kmeans_1d_weighted(values, counts, k)
    lut = np.empty(k, dtype=group.dtype)
    lut[: centroids.size] = centroids.astype(group.dtype)
    lut[centroids.size:] = lut[centroids.size - 1]
    lut.sort()
    lut64 = lut.astype(np.float64)
    flat = group.astype(np.float64).ravel()
    pos = np.clip(np.searchsorted(lut64, flat), 1, k - 1)
    left = lut64[pos - 1]
    right = lut64[pos]
    indices = np.where(np.abs(flat - left) <= np.abs(right - flat), pos - 1, pos)
    return lut, indices.astype(np.uint8 if nbits <= 8 else np.uint16)


def _collector_class():
    from coremltools.optimize.coreml._quantization_passes import palettize_weights as _PalettizePass

    class _GroupCollector(_PalettizePass):
        """Visits exactly the consts the palettize pass would compress and records their groups, changing nothing.

        The head of ``palettize_weights.transform_op`` (config lookup, threshold, block sizes) is repeated here for
        the plain case this module configures (no joint compression, no per-channel scale, scalar LUTs)."""

        def __init__(self, config, sink: list, nbits: int):
            super().__init__(config=config)
            self.sink, self.nbits = sink, nbits

        def transform_op(self, op):
            op_config = self.config._get_const_op_config(op)
            if op_config is None:
                return
            if not self.need_compress_const(op, self.config._is_deprecated, op_config.weight_threshold):
                return
            from coremltools.optimize import _utils as optimize_utils

            value = op.outputs[0].val
            block_sizes, channel_axis = optimize_utils.infer_block_sizes(op, op_config, value,
                                                                        return_channel_axis=True)
            if block_sizes is None:
                return
            k = 1 << self.nbits

            def record(group):
                self.sink.append(np.array(group, copy=True))
                return np.zeros(k, dtype=group.dtype), np.zeros(group.size, dtype=np.uint8)

            self.blockwise_compress(value, op_config.mode, None, block_sizes, record, 1, channel_axis=channel_axis)

    return _GroupCollector


def _config(nbits, group_size, mode, weight_threshold, op_types, workers, lut_function=None):
    from coremltools.optimize.coreml import OpPalettizerConfig, OptimizationConfig

    if lut_function is None:
        cfg = OpPalettizerConfig(mode=mode, nbits=nbits, granularity="per_grouped_channel", group_size=group_size,
                                 num_kmeans_workers=workers, weight_threshold=weight_threshold)
    else:
        cfg = OpPalettizerConfig(mode="custom", lut_function=lut_function, granularity="per_grouped_channel",
                                 group_size=group_size, weight_threshold=weight_threshold)
    return OptimizationConfig(op_type_configs={t: cfg for t in op_types})


def palettize_package(mlmodel, nbits: int, group_size: int, mode: str = "kmeans", weight_threshold: int = 2048,
                      op_types=("conv",), workers: int = 2, implementation: str = "exact",
                      stats: dict | None = None):
    """Return a new MLModel whose weights of `op_types` ops over `weight_threshold` elements are palettized per
    grouped output channel (groups of `group_size`, 2^nbits FP16 LUT entries), fed by ``constexpr_lut_to_dense``.

    implementation "coremltools": ``palettize_weights`` with ``OpPalettizerConfig(mode=mode, ...,
    num_kmeans_workers=workers)``. "exact": the same pass with LUTs from `kmeans_exact` (mode must be "kmeans").
    `stats`, if given, receives timings and counts."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    if isinstance(op_types, str):
        op_types = (op_types,)
    op_types = tuple(op_types)
    if not op_types:
        raise ValueError("op_types is empty: select the op types whose weights to palettize (e.g. ('conv',))")
    stats = {} if stats is None else stats
    stats.update({"implementation": implementation, "nbits": nbits, "group_size": group_size, "workers": workers})
    t0 = time.perf_counter()
    from coremltools.optimize.coreml._quantization_passes import palettize_weights as _PalettizePass

    if implementation == "coremltools":  # palettize_weights(mlmodel, config), reconverted by apply_passes
        model = apply_passes(mlmodel, _PalettizePass(config=_config(nbits, group_size, mode, weight_threshold,
                                                                    op_types, workers)))
        stats["total_s"] = time.perf_counter() - t0
        return model

    if mode.lower() != "kmeans":
        raise ValueError(f"implementation='exact' is k-means; mode={mode!r} is only available with 'coremltools'")
    if nbits not in (1, 2, 3, 4, 6, 8):
        raise ValueError(f"coremltools palettization supports nbits in (1, 2, 3, 4, 6, 8), got {nbits}")
    from coremltools.converters.mil.mil.passes.graph_pass import AbstractGraphPass

    stats["compile_s"] = kmeans_exact.warmup()
    cache = _LutCache(nbits)
    config = _config(nbits, group_size, mode, weight_threshold, op_types, workers, lut_function=cache)
    groups: list[np.ndarray] = []
    collector = _collector_class()(config, groups, nbits)

    class _Fill(AbstractGraphPass):
        """Between collection and palettization: run the batch on all recorded groups."""

        def apply(self, prog):
            t = time.perf_counter()
            stats.update(cache.fill(groups, workers))
            stats["kmeans_s"] = time.perf_counter() - t
            groups.clear()

    class _Timed(AbstractGraphPass):
        def __init__(self, inner, name):
            super().__init__()
            self.inner, self.name = inner, name

        def apply(self, prog):
            t = time.perf_counter()
            self.inner.apply(prog)
            stats[self.name] = time.perf_counter() - t

    palettizer = _PalettizePass(config=config)
    model = apply_passes(mlmodel, [_Timed(collector, "collect_s"), _Fill(), _Timed(palettizer, "pass_s")])
    stats["cache_hits"], stats["cache_misses"] = cache.hits, cache.misses
    stats["total_s"] = time.perf_counter() - t0
    return model
