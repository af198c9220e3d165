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
  MIL module (package/mil/load.py, every check of a package first) instead of coremltools' unchecked loader. The program
  is then converted back with coremltools' default pass pipeline minus REPALETTIZE_SKIPPED_PASSES (`apply_passes`; see
  there why).

Beyond coremltools' own options (exact only): each const can get its own bit width (`bits_for`; the LUT length tells
the custom mode its nbits) or stay dense, and each group can carry per-element sensitivities for a weighted
objective (`sensitivities`). The collector then records groups per const (the real pass, `_ContextPass`, tells the
cache which const it is on) and splits the sensitivities with `split_groups`, checked against coremltools' own split.
Groups run along the output axis (channel_axis 0, coremltools' default for conv) or the input axis (channel_axis 1:
LUT [1, Cin/G, 1, 1, 2^nbits, 1]).

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


GROUP_AXES = {"output": 0, "input": 1}  # per-grouped-channel LUTs over groups of output or of input channels


def _digest(group: np.ndarray) -> bytes:
    g = np.ascontiguousarray(group)
    return hashlib.sha1(memoryview(g).cast("B"), usedforsecurity=False).digest()


def split_groups(value: np.ndarray, channel_axis: int, group_size: int) -> list[np.ndarray]:
    """The groups coremltools' ``grouped_channelwise_compress`` hands its LUT function, in its order: the channel
    axis swapped to the front, split into groups of `group_size` channels (each then flattened in C order). Used for
    a weight's sensitivities, which must be split exactly like the weight; the collector checks that it is."""
    data = np.swapaxes(np.asarray(value), 0, channel_axis) if channel_axis else np.asarray(value)
    return np.split(data, data.shape[0] // group_size, axis=0)


class _LutCache:
    """The ``lut_function``: returns the precomputed (lut, indices) of the current op's next group.

    Entries are keyed by (const name, group number); the real pass sets ``current`` per const (`_context_pass`) and
    the groups come in the collector's order, which each lookup checks against the group's bytes. A group it lacks
    (a selection or order mismatch) is computed on the spot when the objective is unweighted -- costing time, never
    correctness -- and refused when it is weighted, because its sensitivities are then unknown."""

    def __init__(self, bits_for):
        self.bits_for = bits_for
        self.entries: dict[tuple, tuple[bytes, np.ndarray, np.ndarray]] = {}
        self.current, self.position = None, 0
        self.hits = 0
        self.misses = 0

    def fill(self, records: list[dict], workers: int) -> dict:
        """Palettize the recorded groups in batches (one per group shape, bit width and objective)."""
        stats = {"groups": 0, "sse": 0.0, "methods": {}, "weighted_groups": 0}
        batches: dict[tuple, list[dict]] = {}
        for r in records:
            g = r["group"]
            if g.dtype != np.float16:
                continue  # computed on demand by the generic path in __call__
            batches.setdefault((g.shape, r["nbits"], r["weights"] is not None), []).append(r)
        for (_, nbits, weighted), members in batches.items():
            batch = np.stack([r["group"] for r in members])
            weights = np.stack([r["weights"] for r in members]) if weighted else None
            luts, idx, info = kmeans_exact.palettize_groups(batch, nbits, workers=workers, return_stats=True,
                                                            weights=weights)
            for row, r in enumerate(members):
                self.entries[(r["op"], r["index"])] = (_digest(r["group"]), luts[row], idx[row])
            stats["groups"] += len(members)
            stats["weighted_groups"] += len(members) if weighted else 0
            stats["sse"] += float(info["sse"].sum())
            for code, count in zip(*np.unique(info["method"], return_counts=True)):
                name = kmeans_exact.METHOD_NAMES[int(code)]
                stats["methods"][name] = stats["methods"].get(name, 0) + int(count)
        return stats

    def start(self, op_name: str) -> None:
        self.current, self.position = op_name, 0

    def __call__(self, group: np.ndarray):
        key = (self.current, self.position)
        self.position += 1
        entry = self.entries.pop(key, None)
        if entry is not None and entry[0] == _digest(group):
            self.hits += 1
            return entry[1], entry[2]
        self.misses += 1
        if self.weighted:
            raise RuntimeError(f"{self.current}: group {key[1]} was not collected; its sensitivities are unknown")
        nbits = self.bits_for(self.current)
        if group.dtype == np.float16:
            return kmeans_exact.palettize_group(group, nbits)
        return _palettize_generic(group, nbits)

    weighted = False


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


def _pass_classes():
    from coremltools.optimize.coreml._quantization_passes import palettize_weights as _PalettizePass

    class _Select:
        """Skips the consts `bits_for` leaves dense (None) before the pass's own selection."""

        def keep(self, op) -> bool:
            return self.bits_for(op.name) is not None

    class _GroupCollector(_Select, _PalettizePass):
        """Visits exactly the consts the palettize pass would compress and records their groups, changing nothing.

        The head of ``palettize_weights.transform_op`` (config lookup, threshold, block sizes) is repeated here for
        the plain case this module configures (no joint compression, no per-channel scale, scalar LUTs)."""

        def __init__(self, config, sink: list, bits_for, sensitivity_for, group_size: int):
            super().__init__(config=config)
            self.sink, self.bits_for = sink, bits_for
            self.sensitivity_for, self.group_size = sensitivity_for, group_size

        def transform_op(self, op):
            op_config = self.config._get_const_op_config(op)
            if op_config is None or not self.keep(op):
                return
            if not self.need_compress_const(op, self.config._is_deprecated, op_config.weight_threshold):
                return
            from coremltools.optimize import _utils as optimize_utils

            value = op.outputs[0].val
            block_sizes, channel_axis = optimize_utils.infer_block_sizes(op, op_config, value,
                                                                        return_channel_axis=True)
            if block_sizes is None:
                return
            nbits = self.bits_for(op.name)
            k = 1 << nbits
            recorded = []

            def record(group):
                recorded.append(np.array(group, copy=True))
                return np.zeros(k, dtype=group.dtype), np.zeros(group.size, dtype=np.uint8)

            self.blockwise_compress(value, op_config.mode, None, block_sizes, record, 1, channel_axis=channel_axis)
            sensitivity = self.sensitivity_for(op.name, value)
            axis = channel_axis if channel_axis is not None else 0
            ours = split_groups(value, axis, self.group_size)
            if len(ours) != len(recorded) or any(not np.array_equal(a, b) for a, b in zip(ours, recorded)):
                raise RuntimeError(f"{op.name}: coremltools split the weight into groups other than split_groups's; "
                                   "sensitivities could not follow the weights")
            weight_groups = None if sensitivity is None else split_groups(sensitivity, axis, self.group_size)
            for index, group in enumerate(recorded):
                self.sink.append({"op": op.name, "index": index, "group": group, "nbits": nbits,
                                  "weights": None if weight_groups is None else weight_groups[index]})

    class _ContextPass(_Select, _PalettizePass):
        """The real pass, telling the LUT cache which const its groups belong to."""

        def __init__(self, config, cache: _LutCache):
            super().__init__(config=config)
            self.cache, self.bits_for = cache, cache.bits_for

        def transform_op(self, op):
            if not self.keep(op):
                return
            self.cache.start(op.name)
            super().transform_op(op)

    return _GroupCollector, _ContextPass


def _config(nbits, group_size, mode, weight_threshold, op_types, workers, lut_function=None, channel_axis=0):
    from coremltools.optimize.coreml import OpPalettizerConfig, OptimizationConfig

    if lut_function is None:
        cfg = OpPalettizerConfig(mode=mode, nbits=nbits, granularity="per_grouped_channel", group_size=group_size,
                                 channel_axis=channel_axis, num_kmeans_workers=workers,
                                 weight_threshold=weight_threshold)
    else:
        cfg = OpPalettizerConfig(mode="custom", lut_function=lut_function, granularity="per_grouped_channel",
                                 group_size=group_size, channel_axis=channel_axis, weight_threshold=weight_threshold)
    return OptimizationConfig(op_type_configs={t: cfg for t in op_types})


def palettize_package(mlmodel, nbits: int, group_size: int, mode: str = "kmeans", weight_threshold: int = 2048,
                      op_types=("conv",), workers: int = 2, implementation: str = "exact",
                      stats: dict | None = None, *, group_axis: str = "output", bits_for=None, sensitivities=None):
    """Return a new MLModel whose weights of `op_types` ops over `weight_threshold` elements are palettized per
    grouped channel (groups of `group_size` channels along `group_axis`: "output" or "input"; 2^nbits FP16 LUT
    entries per group), fed by ``constexpr_lut_to_dense``.

    implementation "coremltools": ``palettize_weights`` with ``OpPalettizerConfig(mode=mode, ...,
    num_kmeans_workers=workers)``. "exact": the same pass with LUTs from `kmeans_exact` (mode must be "kmeans").
    Exact only: `bits_for(const_name)` gives each weight its own bit width (None: left dense; default: `nbits` for
    every weight); `sensitivities(const_name, value)` gives a per-element weight array of the value's shape for the
    weighted objective, or None for the plain SSE. `stats`, if given, receives timings and counts."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    if group_axis not in GROUP_AXES:
        raise ValueError(f"group_axis must be one of {sorted(GROUP_AXES)}, got {group_axis!r}")
    if isinstance(op_types, str):
        op_types = (op_types,)
    op_types = tuple(op_types)
    if not op_types:
        raise ValueError("op_types is empty: select the op types whose weights to palettize (e.g. ('conv',))")
    stats = {} if stats is None else stats
    stats.update({"implementation": implementation, "nbits": nbits, "group_size": group_size, "workers": workers,
                  "group_axis": group_axis})
    channel_axis = GROUP_AXES[group_axis]
    t0 = time.perf_counter()
    from coremltools.optimize.coreml._quantization_passes import palettize_weights as _PalettizePass

    if implementation == "coremltools":  # palettize_weights(mlmodel, config), reconverted by apply_passes
        if bits_for is not None or sensitivities is not None:
            raise ValueError("per-weight bits and sensitivity weighting need implementation='exact'")
        model = apply_passes(mlmodel, _PalettizePass(config=_config(nbits, group_size, mode, weight_threshold,
                                                                    op_types, workers, channel_axis=channel_axis)))
        stats["total_s"] = time.perf_counter() - t0
        return model

    if mode.lower() != "kmeans":
        raise ValueError(f"implementation='exact' is k-means; mode={mode!r} is only available with 'coremltools'")
    bits_for = bits_for or (lambda name: nbits)
    sensitivity_for = sensitivities or (lambda name, value: None)
    if nbits not in (1, 2, 3, 4, 6, 8):
        raise ValueError(f"coremltools palettization supports nbits in (1, 2, 3, 4, 6, 8), got {nbits}")
    from coremltools.converters.mil.mil.passes.graph_pass import AbstractGraphPass

    stats["compile_s"] = kmeans_exact.warmup()
    cache = _LutCache(bits_for)
    cache.weighted = sensitivities is not None
    config = _config(nbits, group_size, mode, weight_threshold, op_types, workers, lut_function=cache,
                     channel_axis=channel_axis)
    records: list[dict] = []
    collector_class, context_class = _pass_classes()
    collector = collector_class(config, records, bits_for, sensitivity_for, group_size)

    class _Fill(AbstractGraphPass):
        """Between collection and palettization: run the batch on all recorded groups."""

        def apply(self, prog):
            t = time.perf_counter()
            stats.update(cache.fill(records, workers))
            stats["kmeans_s"] = time.perf_counter() - t
            records.clear()

    class _Timed(AbstractGraphPass):
        def __init__(self, inner, name):
            super().__init__()
            self.inner, self.name = inner, name

        def apply(self, prog):
            t = time.perf_counter()
            self.inner.apply(prog)
            stats[self.name] = time.perf_counter() - t

    palettizer = context_class(config, cache)
    model = apply_passes(mlmodel, [_Timed(collector, "collect_s"), _Fill(), _Timed(palettizer, "pass_s")])
    stats["cache_hits"], stats["cache_misses"] = cache.hits, cache.misses
    stats["total_s"] = time.perf_counter() - t0
    return model
