"""The real-weights section of ANE_BENCHMARKS.md: benchmarks/evidence/real-weights-minilm (benchmarks/real_weights.py).

Two run directories laid out like a reproduce run -- `embeddings/` (all-minilm-l6-v2 as a sentence embedder) and
`decisions/` (builtin:minilm-decision: the trained encoder under the built-in decision head) -- rendered with the
reproduce sections where they fit, plus the embedding validation, the FP16 ranges of trained against random weights
and what the trained weights changed. Every figure is printed through the ledger (render.py), none typed here.
"""

from __future__ import annotations

from pathlib import Path

from .ledger import Evidence, Ledger
from .report import link
from .sections_run import section_benchmarks, section_sweep, section_validation

REAL_WEIGHTS_DIR = "real-weights-minilm"
# Site groups compared between the trained encoder (post-LN BERT) and the random ModernBERT-family built-ins: the
# same quantity where both have it, the residual stream in the form each architecture has.
RANGE_ROWS = (
    ("embedding_norm", "embedding_norm", "embedding LayerNorm output"),
    ("encoder.attn.q", "encoder.attn.q", "Q projection (pre-scaled)"),
    ("encoder.attn.k", "encoder.attn.k", "K projection"),
    ("encoder.attn.scores", "encoder.attn.scores", "attention scores"),
    ("encoder.attn.out", "encoder.attn.out", "attention output projection"),
    ("encoder.mlp.input", "encoder.mlp.input", "FFN input projection"),
    ("encoder.mlp.out", "encoder.mlp.out", "FFN output projection"),
    ("encoder.mlp_norm.input", "encoder.residual", "residual stream (BERT: the sum entering the FFN LayerNorm)"),
    ("option_logits", "option_logits", "option logits"),
)


def _demote(lines: list[str], levels: int = 2) -> list[str]:
    return [("#" * levels + line) if line.startswith("## ") else line for line in lines]


def _candidate(ev: Evidence, name: str) -> tuple:
    """The JSON path of the sweep row named `name`."""
    if ev.value("baseline", "name") == name:
        return ("baseline",)
    names = [row["name"] for row in ev.value("candidates")]
    return ("candidates", names.index(name))


def section_probes(ledger: Ledger, root: Path) -> list[str]:
    probes = sorted((ledger.open(p) for p in root.glob("packages/*/probe.json")),
                    key=lambda ev: (ev.value("kind"), ev.value("length")))
    if not probes:
        return []
    lines = ["#### Export and placement (probe)", "",
             "| kind | bucket | non-constant ops | static violations | layout max abs | convert (s) | evidence |",
             "|---|---|---|---|---|---|---|"]
    for ev in probes:
        lines.append(f"| {ev.fig('kind')} | {ev.fig('length', fmt='d')} | {ev.fig('mil_ops', 'non_constant', fmt='d')} "
                     f"| {ev.fig('placement', 'static', 'violations', fmt='d')} | "
                     f"{ev.fig('layout_check', 'max_abs', fmt='num3')} | "
                     f"{ev.fig('export', 'convert_seconds', fmt='.1f')} | {link(ev)} |")
    return lines + ["", f"Source weights `{probes[0].value('source', 'weights_sha256')[:16]}`, harness "
                        f"`{probes[0].value('harness', 'sha256')[:16]}`.", ""]


def section_embedding_validation(ledger: Ledger, root: Path) -> list[str]:
    path = root / "validation.json"
    if not path.is_file():
        return []
    ev = ledger.open(path)
    gates = ("gates",)
    lines = ["#### Validation against FP32 golden embeddings", "",
             f"Backend `{ev.value('backend', 'backend')}`; gates (core/gates.py, from one budget: no similarity "
             f"between two texts may move by more than {ev.fig(*gates, 'similarity_error_max')}): cosine to golden >= "
             f"{ev.fig(*gates, 'cosine_min', fmt='.8f')}, max abs error <= {ev.fig(*gates, 'abs_max', fmt='.6f')}, no "
             f"resolved pair of the similarity ranking swapped (tie band {ev.fig(*gates, 'rank_tie_band')}), "
             f"{ev.fig(*gates, 'repeats', fmt='d')} repeated calls bit-identical. Evidence: {link(ev)}; passed: "
             f"**{ev.value('passed')}**. Largest pooled norm before normalisation over the golden texts: "
             f"{ev.fig('golden', 'max_pooled_norm', fmt='.3f')}.", "",
             "| bucket | passed / evaluated | skipped | min cosine | max cosine distance | max abs err | max norm "
             "deviation | max similarity err | resolved pairs swapped | tie pairs swapped | identical rankings | top-1 "
             "neighbour | repeats identical |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for length in ev.value("summary"):
        row, ranking = ("summary", length), ("summary", length, "ranking")
        lines.append(
            f"| {ev.fig(*row, 'length', fmt='d')} | "
            f"{ev.fig(*row, 'passed_texts', fmt='d')}/{ev.fig(*row, 'evaluated', fmt='d')} | "
            f"{ev.fig(*row, 'skipped', fmt='len')} | {ev.fig(*row, 'min_cosine', fmt='.8f')} | "
            f"{ev.fig(*row, 'max_cosine_distance', fmt='.2e')} | {ev.fig(*row, 'max_abs_error', fmt='.6f')} | "
            f"{ev.fig(*row, 'max_norm_deviation', fmt='.2e')} | {ev.fig(*ranking, 'max_similarity_error', fmt='.6f')} "
            f"| {ev.fig(*ranking, 'resolved_pairs_swapped', fmt='d')}/{ev.fig(*ranking, 'resolved_pairs', fmt='d')} | "
            f"{ev.fig(*ranking, 'tie_pairs_swapped', fmt='d')} | "
            f"{ev.fig(*ranking, 'anchors_with_identical_ranking', fmt='d')}/{ev.fig(*ranking, 'anchors', fmt='d')} | "
            f"{ev.fig(*ranking, 'top1_neighbour_agreement', fmt='d')}/{ev.fig(*ranking, 'anchors', fmt='d')} | "
            f"{ev.value(*row, 'repeats', 'identical')} |")
    return lines + [""]


def section_range_comparison(ledger: Ledger, real: Evidence, randoms: list[tuple[str, Evidence]]) -> list[str]:
    groups = ("report", "groups")
    header = " | ".join(f"{name}: max abs" for name, _ in randoms)
    lines = ["### FP16 range: trained against random weights", "",
             f"The trained encoder ({link(real)}) beside the random-weight built-ins ("
             + ", ".join(f"{name}: {link(ev)}" for name, ev in randoms) + "). Largest |value| over valid tokens per "
             "site group; outlier channels are those whose largest |value| is at least `OUTLIER_RATIO` times the "
             "median channel's (evidence/fp16_range.py; channel numbers in code spans, each with the number of the "
             "group's sites where it is an outlier).", "",
             "| site | trained: max abs | trained: verdict | trained: top channel / median | trained: outlier channels "
             f"| {header} |", "|---|---|---|---|---|" + "---|" * len(randoms)]
    for real_group, random_group, label in RANGE_ROWS:
        if real_group not in real.value(*groups):
            continue
        entry = (*groups, real_group)
        counts = real.value(*entry).get("outlier_channels", {})
        channels = ", ".join(f"`{channel}` ({real.fig(*entry, 'outlier_channels', channel, fmt='d')})"
                             for channel in sorted(counts, key=lambda c: -counts[c])[:4]) or "none"
        ratio = real.fig(*entry, "max_top_to_median", fmt=".1f") if "max_top_to_median" in real.value(*entry) else "-"
        cells = [ev.fig(*groups, random_group, "max_abs_valid", fmt=".4g") if random_group in ev.value(*groups) else "-"
                 for _, ev in randoms]
        lines.append(f"| {label} (`{real_group}`) | {real.fig(*entry, 'max_abs_valid', fmt='.4g')} | "
                     f"{real.fig(*entry, 'verdict')} | {ratio} | {channels} | {' | '.join(cells)} |")
    lines += [""]
    for index, clamp in enumerate(real.value("summary", "clamp")):
        at = ("summary", "clamp", index)
        lines.append(f"- `{clamp['site']}` ({real.fig(*at, 'verdict')}): |x - mean| reaches "
                     f"{real.fig(*at, 'max_abs_dev_all', fmt='.1f')}, so its FP16 square comes within "
                     f"{real.fig('report', 'sites', clamp['site'], 'norm', 'max_sq_dev', 'headroom_all', fmt='.2f')}x "
                     f"of {real.fig('report', 'fp16_max', fmt=',.0f')}; remedy: {real.fig(*at, 'remedy')}.")
    smallest = (*groups, "embedding_norm.input", "min_variance_valid")
    lines += ["", f"Smallest per-token variance at any LayerNorm input (the embedding LayerNorm): "
                  f"{real.fig(*smallest, fmt='.3g')}, a normal FP16 number, far above the epsilon the package stores "
                  "(ANE_MATH.md, the BERT family and its epsilon).", ""]
    return lines


def section_changes(ledger: Ledger, emb: Path, dec: Path, tiny: Path) -> list[str]:
    """What trained weights changed against random ones, every figure from the evidence."""
    need = [emb / "validation.json", emb / "sweep" / "sweep.json", dec / "validation.json",
            dec / "sweep" / "sweep.json",
            dec / "fp16_range.json", tiny / "validation.json", tiny / "sweep" / "sweep.json", tiny / "fp16_range.json"]
    if not all(path.is_file() for path in need):
        return []
    ev_emb, emb_sweep, ev_dec, dec_sweep, real_range, ev_tiny, tiny_sweep, tiny_range = (ledger.open(p) for p in need)
    first = next(iter(ev_dec.value("summary")))
    tiny_first = next(iter(ev_tiny.value("summary")))
    w8 = _candidate(dec_sweep, "w8-kmeans-g32")
    tiny_w8 = _candidate(tiny_sweep, "w8-kmeans-g32")
    emb_w8 = _candidate(emb_sweep, "w8-kmeans-g32")
    emb_w4u = _candidate(emb_sweep, "w4-uniform-g32")
    groups = ("report", "groups")
    passing = [row["name"] for row in dec_sweep.value("candidates") + emb_sweep.value("candidates") if row["passed"]]
    return [
        "### What the trained weights changed", "",
        f"- FP16 through `mil` still passes both gate families at L96 and L192, with larger errors than on random "
        f"weights: the decisions' largest calibrated-probability error is "
        f"{ev_dec.fig('summary', first, 'max_calibrated_error', fmt='num5')} on the trained encoder against "
        f"{ev_tiny.fig('summary', tiny_first, 'max_calibrated_error', fmt='num5')} on `builtin:tiny` (gate "
        f"{ev_dec.fig('gates', 'probability_error_max')}); the embeddings keep every resolved pair of the similarity "
        f"ranking, with a smallest cosine to golden of {ev_emb.fig('summary', first, 'min_cosine', fmt='.8f')} (gate "
        f"{ev_emb.fig('gates', 'cosine_min', fmt='.8f')}).",
        f"- Ranges: random weights keep every site small (largest residual value "
        f"{tiny_range.fig(*groups, 'encoder.residual', 'max_abs_valid', fmt='.4g')} on `builtin:tiny`). The trained "
        f"encoder's residual sums entering the FFN LayerNorm reach "
        f"{real_range.fig(*groups, 'encoder.mlp_norm.input', 'max_abs_valid', fmt='.4g')}, carried by a few outlier "
        f"channels (the largest {real_range.fig(*groups, 'encoder.mlp_norm.input', 'max_top_to_median', fmt='.1f')} "
        "times the median channel): the large activations trained weights bring, invisible on random ones. The "
        "layer norm's FP16 squared deviation is recorded beside them for information only: no source establishes "
        "it as a Neural Engine hazard (ANE_MATH.md, \"10. FP16 range, the Neural Engine's cliffs and headroom\").",
        f"- Palettization: on `builtin:tiny` `w8-kmeans-g32` passed the decision gates (calibrated error "
        f"{tiny_sweep.fig(*tiny_w8, 'max_calibrated_error', fmt='.5f')}); on the trained encoder it fails them "
        f"({dec_sweep.fig(*w8, 'max_calibrated_error', fmt='.5f')}), and "
        + (f"the candidates that pass are {', '.join(passing)}." if passing else "no candidate of either sweep passes.")
        + " Uniform LUTs suffer most: trained weight rows hold a few entries far outside their spread, on which a "
        f"min-max LUT spends its levels (`w4-uniform-g32` leaves a smallest embedding cosine of "
        f"{emb_sweep.fig(*emb_w4u, 'min_cosine', fmt='.4f')}).",
        "- The embedding cosine gate is a guarantee for every pair of texts, not only the fixture's: `w8-kmeans-g32` "
        f"moves the fixture's similarities by at most {emb_sweep.fig(*emb_w8, 'max_similarity_error', fmt='.4f')} "
        f"(within the budget of {emb_sweep.fig('gate', 'similarity_error_max')}) and swaps "
        f"{emb_sweep.fig(*emb_w8, 'resolved_pairs_swapped', fmt='d')} resolved pairs, yet fails at a cosine distance "
        f"of {emb_sweep.fig(*emb_w8, 'max_cosine_distance', fmt='.2e')}: a direction error that size could move some "
        "other pair's similarity past the budget.",
        "",
    ]


def section_real_weights(ledger: Ledger, evidence_root: Path, tiny_root: Path, mmbert_range: Path) -> list[str]:
    root = Path(evidence_root) / REAL_WEIGHTS_DIR
    if not root.is_dir():
        return section_compression(ledger, evidence_root)
    emb, dec = root / "embeddings", root / "decisions"
    lines = ["## Real pretrained weights: sentence-transformers/all-MiniLM-L6-v2 (BERT family)", "",
             "Every section above runs random weights. This one runs the chain on trained weights: the packaged "
             "source `all-minilm-l6-v2` as a sentence embedder (the `embedding` kind: encoder, mean pooling and L2 "
             "normalisation on the device), and `builtin:minilm-decision`, the same trained encoder under the "
             "built-in decision head (whose decisions mean nothing; its encoder is real). Made by "
             "`python benchmarks/real_weights.py`; in the timing tables, 'body' is the whole device graph of the "
             "package.", "",
             "### Sentence embeddings (`all-minilm-l6-v2`)", ""]
    lines += section_probes(ledger, emb) + section_embedding_validation(ledger, emb)
    lines += _demote(section_sweep(ledger, emb)) + _demote(section_benchmarks(ledger, emb))
    lines += ["### Decisions on the trained encoder (`builtin:minilm-decision`)", ""]
    lines += section_probes(ledger, dec)
    for section in (section_validation, section_sweep, section_benchmarks):
        lines += _demote(section(ledger, dec))
    if (dec / "fp16_range.json").is_file():
        randoms = [(name, ledger.open(path)) for name, path in (("builtin:tiny", tiny_root / "fp16_range.json"),
                                                               ("builtin:mmbert-base-shape", mmbert_range))
                   if path.is_file()]
        lines += section_range_comparison(ledger, ledger.open(dec / "fp16_range.json"), randoms)
    return lines + section_changes(ledger, emb, dec, tiny_root) + section_compression(ledger, evidence_root)



COMPRESSION_DIRS = (("compression-minilm",
                     "Compression on the real weights (`builtin:minilm-decision`, `all-minilm-l6-v2`)"),
                    ("compression-builtin-tiny", "Compression on `builtin:tiny`"))


def _sweep_lines(ledger: Ledger, path: Path, title: str) -> list[str]:
    if not path.is_file():
        return []
    from .sweep_report import markdown_table

    ev = ledger.open(path)
    lines = [f"##### {title}", "",
             f"Evidence: {link(ev)}; {ev.fig('seconds', fmt='.0f')} s on {ev.fig('jobs', fmt='d')} "
             f"job(s), executor `{ev.value('executor')}`.", "", markdown_table(ev, evidence_name=path.name)]
    png = path.parent / "sweep.png"
    if png.is_file():
        lines += [f"![size against error]({png.resolve().relative_to(ledger.root).as_posix()})", ""]
    return lines


def _sse_lines(ledger: Ledger, path: Path) -> list[str]:
    if not path.is_file():
        return []
    ev = ledger.open(path)
    lines = ["##### Exact k-means against coremltools' `palettize_weights` on the same weights and groups", "",
             f"Evidence: {link(ev)}. Per LUT group, the squared error against the FP16 weights of each package "
             "(unweighted objective); 'not worse' allows ties (relative "
             + (ev.fig("pairs", 0, "sse", "comparison_rtol", fmt="g") if ev.value("pairs") else "-") + ").", "",
             "| bits | group | axis | groups | exact not worse | total SSE exact / coremltools | median ratio | worst "
             "ratio | size exact / coremltools (bytes) | gates exact / coremltools |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for i, pair in enumerate(ev.value("pairs")):
        row = ("pairs", i)
        lines.append(
            f"| {ev.fig(*row, 'bits', fmt='d')} | {ev.fig(*row, 'group_size', fmt='d')} | {ev.fig(*row, 'group_axis')} "
            f"| {ev.fig(*row, 'sse', 'groups', fmt='d')} | {ev.fig(*row, 'sse', 'not_worse', fmt='d')} | "
            f"{ev.fig(*row, 'sse', 'total_ratio', fmt='.4f')} | {ev.fig(*row, 'sse', 'ratio_median', fmt='.4f')} | "
            f"{ev.fig(*row, 'sse', 'ratio_max', fmt='.4f')} | {ev.fig(*row, 'package_bytes', 'exact', fmt='d')} / "
            f"{ev.fig(*row, 'package_bytes', 'coremltools', fmt='d')} | "
            f"{'pass' if pair['passed']['exact'] else 'FAIL'} "
            f"/ {'pass' if pair['passed']['coremltools'] else 'FAIL'} |")
    return lines + [""]


def section_compression(ledger: Ledger, evidence_root: Path) -> list[str]:
    """benchmarks/evidence/compression-* (benchmarks/compression.py): per family the exact k-means grid (weighted
    and not, both grouping axes, with the mixed-bit walk), coremltools' k-means on the same groups, the 8-bit grid at
    the longer bucket, and the per-group SSE of the two implementations."""
    lines = []
    for name, title in COMPRESSION_DIRS:
        root = Path(evidence_root) / name
        if not (root / "compression.json").is_file():
            continue
        run = ledger.open(root / "compression.json")
        lines += [f"### {title}", "",
                  f"Made by `python benchmarks/compression.py` ({link(run)}, {run.fig('seconds', fmt='.0f')} s in "
                  "all). Every candidate is its own sealed package validated under the unchanged gates on the "
                  "committed golden set and on a held-out set nothing was calibrated or chosen on; Fisher weights and "
                  "the mixed-bit walk's sensitivities come from the committed calibration sets.", ""]
        for family in ("decisions", "embeddings"):
            directory = root / family
            if not directory.is_dir():
                continue
            lines += [f"#### {family.capitalize()}", ""]
            lines += _sweep_lines(ledger, directory / "sweep" / "sweep.json", "Exact k-means grid and mixed-bit walk")
            lines += _sweep_lines(ledger, directory / "sweep-coremltools" / "sweep.json",
                                  "coremltools' k-means on the same weights and groups")
            for longer in sorted(directory.glob("sweep-L*/sweep.json")):
                lines += _sweep_lines(ledger, longer, "The top-width grid at a longer bucket")
            lines += _sse_lines(ledger, directory / "sse.json")
    return lines
