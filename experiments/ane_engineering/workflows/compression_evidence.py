"""Evidence of compression on one source and task family, through the commands a user runs.

For one family (decisions: a body package and the decision gates; embeddings: an embedding package and the
embedding gates) in a new directory:

- packages/: probe exports at the given lengths; golden.json (the committed fixture) and heldout-golden.json (the
  committed held-out set, `golden --fixture`);
- sweep/: the exact k-means grid at the first length (bits x group sizes x grouping axes x weightings none and
  fisher), every candidate validated on the golden and the held-out set, plus the mixed-bit walk;
- sweep-coremltools/: coremltools' own ``palettize_weights`` k-means on the same weights and groups (its default
  axis, output channels), under the same gates (so sizes and gate figures sit side by side);
- sweep-L<n>/: the 8-bit grid at each further length (the decision gates hold per bucket);
- sse.json: per weight group, the squared error of the exact k-means and of coremltools' against the FP16 weights,
  read back from the two sweeps' packages (ours <= theirs, ties allowed, is what it checks).

A sweep whose candidates fail their gates is recorded as it is; only a refusal or a crash stops the chain.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..core.provenance import harness_fingerprint, machine, portable_path, tool_versions
from .chain import Chain, build_in_staging


def group_errors(parent: Path, candidate: Path) -> dict[str, np.ndarray]:
    """Per palettized weight: the squared error of every LUT group against the parent's FP16 weight (groups of
    output channels, or of input channels, as the LUT's shape says)."""
    from coremltools.converters.mil.mil.ops.defs.iOS18.compression import constexpr_lut_to_dense

    from ..package.mil.load import load_program

    original = load_program(parent / "model.mlpackage").program
    weights = {op.outputs[0].name: op.outputs[0].val for op in original.functions["main"].operations
               if op.op_type == "const" and op.outputs[0].val is not None}
    palettized = load_program(candidate / "model.mlpackage").program
    out = {}
    for op in palettized.functions["main"].operations:
        if op.op_type != "constexpr_lut_to_dense":
            continue
        name = op.outputs[0].name.removesuffix("_palettized")
        dense = constexpr_lut_to_dense.decompress(op.indices.val, op.lut.val,
                                                  op.vector_axis.val if op.vector_axis is not None else None)
        error = (np.asarray(dense, np.float64) - np.asarray(weights[name], np.float64)) ** 2  # (Cout, Cin, 1, 1)
        lut = op.lut.val.shape
        if lut[0] == 1 and lut[1] > 1:  # groups of input channels
            error = np.swapaxes(error, 0, 1)
            groups = lut[1]
        else:
            groups = lut[0]
        out[name] = error.reshape(groups, -1).sum(axis=1)
    return out


def compare_groups(parent: Path, ours: Path, theirs: Path) -> dict:
    """Per group, the exact k-means' squared error against coremltools' (kmeans_exact's comparison: ours <= theirs
    (1 + SSE_RTOL) + SSE_ATOL counts as not worse)."""
    from ..package.palettize.kmeans_exact import SSE_ATOL, SSE_RTOL

    a, b = group_errors(parent, ours), group_errors(parent, theirs)
    if set(a) != set(b):
        raise RuntimeError(f"{ours.name} and {theirs.name} palettized different weights")
    ours_sse = np.concatenate([a[k] for k in sorted(a)])
    theirs_sse = np.concatenate([b[k] for k in sorted(b)])
    not_worse = ours_sse <= theirs_sse * (1 + SSE_RTOL) + SSE_ATOL
    ratio = np.where(theirs_sse > 0, ours_sse / np.maximum(theirs_sse, 1e-300), np.where(ours_sse > 0, np.inf, 1.0))
    return {"groups": int(ours_sse.size), "not_worse": int(not_worse.sum()), "worse": int((~not_worse).sum()),
            "ratio_max": float(ratio.max()), "ratio_median": float(np.median(ratio)), "ratio_min": float(ratio.min()),
            "total_sse_exact": float(ours_sse.sum()), "total_sse_coremltools": float(theirs_sse.sum()),
            "total_ratio": float(ours_sse.sum() / theirs_sse.sum()), "comparison_rtol": SSE_RTOL}


def sse_evidence(parent: Path, exact_sweep: Path, coremltools_sweep: Path, output: Path) -> dict:
    """Pair the unweighted exact candidates with coremltools' of the same bits, group and axis; compare per group."""
    exact = json.loads((exact_sweep / "sweep.json").read_text(encoding="utf-8"))
    theirs = json.loads((coremltools_sweep / "sweep.json").read_text(encoding="utf-8"))

    def key(row):
        return row["bits"], row["group_size"], row.get("group_axis", "output")

    by_key = {key(r): r for r in theirs["candidates"] if r["package"] is not None}
    pairs = []
    for row in exact["candidates"]:
        if row.get("weighting", "none") != "none" or row["mode"] != "kmeans" or row["package"] is None:
            continue
        other = by_key.get(key(row))
        if other is None:
            continue
        sse = compare_groups(parent, exact_sweep / row["package"], coremltools_sweep / other["package"])
        pairs.append({"bits": row["bits"], "group_size": row["group_size"], "group_axis": key(row)[2],
                      "exact": row["name"], "coremltools": other["name"], "sse": sse,
                      "package_bytes": {"exact": row["package_bytes"], "coremltools": other["package_bytes"]},
                      "passed": {"exact": row["passed"], "coremltools": other["passed"]}})
    evidence = {"format": "ane-engineering/evidence/palettize-sse/1",
                "parent": portable_path(parent, output.parent),
                "sweeps": {"exact": portable_path(exact_sweep, output.parent),
                           "coremltools": portable_path(coremltools_sweep, output.parent)},
                "pairs": pairs, "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint()}
    output.write_text(json.dumps(evidence, indent=1) + "\n", encoding="utf-8")
    return evidence


def family_chain(chain: Chain, commands: dict, root: Path, source: str, kind: str, lengths: list[int], bits: str,
                 group_sizes: str, jobs: int, mixed_bits: bool, executor: str = "local",
                 group_axes: str = "input,output") -> None:
    """The stages of one family into `root` (see the module docstring); `commands` holds the probe, golden and
    sweep commands' main functions (the workflows layer does not import the commands above it)."""
    from ..package.inputs.questions import HELDOUT_QUESTIONS_PATH
    from ..package.inputs.texts import HELDOUT_TEXTS_PATH

    heldout = HELDOUT_TEXTS_PATH if kind == "embedding" else HELDOUT_QUESTIONS_PATH
    task = ["--task", "embeddings"] if kind == "embedding" else []
    (root / "packages").mkdir(parents=True)
    for length in lengths:
        chain.command(f"probe {kind} L{length} ({source})", commands["probe"],
                ["--kind", kind, "--length", str(length), "--source", source,
                 "--output", str(root / "packages" / f"{kind}-{length}"), "--require-ane", "--quiet"])
    chain.command("golden (FP32 reference, committed fixture)", commands["golden"],
            ["--source", source, *task, "--output", str(root / "golden.json")])
    chain.command("golden of the held-out set", commands["golden"],
            ["--source", source, *task, "--fixture", str(heldout), "--output", str(root / "heldout-golden.json")])
    common = ["--source", source, "--golden", str(root / "golden.json"), "--heldout-golden",
              str(root / "heldout-golden.json"), "--heldout-fixture", str(heldout), "--jobs", str(jobs),
              "--modes", "kmeans", "--group-sizes", group_sizes, "--executor", executor]
    first = root / "packages" / f"{kind}-{lengths[0]}"
    chain.command(f"exact k-means sweep at L{lengths[0]}, weighted and not, with the mixed-bit walk", commands["sweep"],
            ["--package", str(first), *common, "--group-axes", group_axes, "--bits", bits, "--weightings",
             "none,fisher",
             *(["--mixed-bits"] if mixed_bits else []), "--output", str(root / "sweep")], False)
    chain.command(f"coremltools k-means sweep at L{lengths[0]}", commands["sweep"],
            ["--package", str(first), *common, "--group-axes", "output", "--bits", bits, "--weightings", "none",
             "--implementation", "coremltools", "--output", str(root / "sweep-coremltools")], False)
    for length in lengths[1:]:
        chain.command(f"8-bit sweep at L{length}", commands["sweep"],
                ["--package", str(root / "packages" / f"{kind}-{length}"), *common, "--group-axes", group_axes,
                 "--bits", "8",
                 "--weightings", "none,fisher", "--output", str(root / f"sweep-L{length}")], False)
    chain.stage("per-group SSE, exact against coremltools", sse_evidence, first, root / "sweep",
                root / "sweep-coremltools", root / "sse.json")


# The sources and settings of the committed evidence: (family directory, source, kind, lengths, mixed-bit walk).
REAL_WEIGHTS = (("decisions", "builtin:minilm-decision", "body", [96, 192], True),
                ("embeddings", "all-minilm-l6-v2", "embedding", [96], True))
BUILTIN_TINY = (("decisions", "builtin:tiny", "body", [96], False),)  # the grid; the walk runs on the real weights


def run_compression_evidence(output: Path, families, commands: dict, bits: str, group_sizes: str, jobs: int,
                             executor: str = "local", group_axes: str = "input,output") -> int:
    """Every family's chain into a staging sibling of `output` (refused if it exists), published when all ran; a
    chain that stops leaves the staging directory renamed `<output>.failed-<time>` for a look. Returns 0 or 1."""
    import time

    from ..core.staging import check_output

    output = check_output(output)
    chain = Chain(sum(6 + len(lengths) for *_, lengths, _ in families), "compression")

    def build(staging: Path) -> None:
        started = time.perf_counter()
        try:
            for family, source, kind, lengths, mixed in families:
                family_chain(chain, commands, staging / family, source, kind, lengths, bits, group_sizes, jobs,
                             mixed, executor, group_axes)
        finally:
            (staging / "compression.json").write_text(json.dumps(
                {"families": [{"family": f, "source": s, "kind": k, "lengths": list(n), "mixed_bits": m}
                              for f, s, k, n, m in families], "bits": bits, "group_sizes": group_sizes,
                 "group_axes": group_axes, "jobs": jobs, "executor": executor, "stages": chain.log,
                 "seconds": time.perf_counter() - started, "machine": machine(), "tools": tool_versions(),
                 "harness": harness_fingerprint()}, indent=1) + "\n", encoding="utf-8")

    return build_in_staging(output, build, "compression")
