"""The palettization sweep of an embedding-kind package: each candidate judged by the embedding gates
(validation/embedding_run.py, thresholds in core/gates.py), with its own table row and size-against-error plot."""

from __future__ import annotations

from pathlib import Path

from ..core import gates
from ..core.figures import Document
from .sweep_sections import fig_or_dash, mixed_bits_sections, plot_frontier, smallest_passing_line, weighting_comparison
from .sweep_sections import setting as _setting


def embedding_row_fields(report: dict) -> dict:
    (length, summary), = report["summary"].items()
    ranking = summary["ranking"] or {}
    return {"length": int(length), "evaluated": summary["evaluated"], "skipped": len(summary["skipped"]),
            "min_cosine": summary["min_cosine"], "max_cosine_distance": summary["max_cosine_distance"],
            "max_abs_error": summary["max_abs_error"],
            "max_similarity_error": ranking.get("max_similarity_error"),
            "resolved_pairs": ranking.get("resolved_pairs"),
            "resolved_pairs_swapped": ranking.get("resolved_pairs_swapped"),
            "top1_neighbour_agreement": ranking.get("top1_neighbour_agreement"),
            "max_pair_similarity_error": ranking.get("max_pair_similarity_error"),
            "max_self_similarity_error": ranking.get("max_self_similarity_error"),
            "bounds_gated": summary.get("bounds_gated")}


def gate_fields() -> dict:
    return {"similarity_error_max": gates.SIMILARITY_ERROR_MAX, "cosine_min": gates.EMBEDDING_COSINE_MIN,
            "abs_max": gates.EMBEDDING_ABS_MAX, "rank_tie_band": gates.RANK_TIE_BAND}


def measured_gate(sweep: Document) -> bool:
    """Sweeps from format 2 on were judged by the measured similarity gate; earlier ones by the cosine and max-abs
    bounds, and their pass/fail is shown as it was judged then."""
    return sweep.value("format") != "ane-engineering/evidence/sweep/1"


def _gate_text(sweep: Document, held: bool) -> str:
    return ("gate: no similarity between two texts (a text with itself included) moves by more than "
            f"{sweep.fig('gate', 'similarity_error_max')}, no resolved pair of the similarity ranking swapped (tie "
            f"band {sweep.fig('gate', 'rank_tie_band')})"
            + (f", on the golden texts and on the held-out texts `{sweep.value('heldout', 'fixture', 'path')}` (a "
               "candidate passes only if it passes both)" if held else "")
            + f". Reported, gating the FP16 package only: cosine >= {sweep.fig('gate', 'cosine_min', fmt='.8f')}, "
            f"max abs error <= {sweep.fig('gate', 'abs_max', fmt='.6f')}.")


def _bounds_gate_text(sweep: Document) -> str:
    return ("judged when it ran by the gates of that time, the worst-case bounds: cosine >= "
            f"{sweep.fig('gate', 'cosine_min', fmt='.8f')}, max abs error <= "
            f"{sweep.fig('gate', 'abs_max', fmt='.6f')}, no resolved pair of the similarity ranking swapped (tie band "
            f"{sweep.fig('gate', 'rank_tie_band')}); the similarity errors were reported beside them.")


def markdown_table(sweep: Document, evidence_name: str = "sweep.json") -> str:
    """The embedding sweep's table; every figure printed through `sweep.fig` (see sweep_report.markdown_table).
    The gated figure is the largest similarity error (golden texts, and held-out texts when the sweep has them);
    the cosine and max-abs bounds are reported beside it (they gate the uncompressed package only)."""
    rows = [("baseline",)] + [("candidates", i) for i in range(len(sweep.value("candidates")))]
    held = sweep.data.get("heldout") is not None
    lines = [
        f"Palettization sweep of the embedding package `{sweep.value('parent', 'path')}` "
        f"(L{sweep.fig('parent', 'length', fmt='d')}), validated through the `{sweep.value('backend')}` backend "
        "against FP32 golden embeddings; "
        + (_gate_text(sweep, held) if measured_gate(sweep) else _bounds_gate_text(sweep))
        + f" Source: `{evidence_name}` (harness `{sweep.value('harness', 'sha256')[:12]}`).",
        "",
        "| candidate | bits | mode | group | axis | weighting | size (MB) | vs FP16 | texts | max similarity err "
        "| resolved pairs swapped | "
        + ("held-out max similarity err | held-out pairs swapped | " if held else "")
        + "min cosine (reported) | max abs err (reported) | top-1 neighbour | gates |",
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if held else "") + "---|---|---|---|",
    ]
    for row in rows:
        held_cells = ""
        if held:
            held_cells = (f"{fig_or_dash(sweep, row + ('heldout', 'max_similarity_error'), '.6f')} | "
                          f"{fig_or_dash(sweep, row + ('heldout', 'resolved_pairs_swapped'), 'd')}/"
                          f"{fig_or_dash(sweep, row + ('heldout', 'resolved_pairs'), 'd')} | ")
        lines.append(
            f"| {sweep.fig(*row, 'name')} | {sweep.fig(*row, 'bits', fmt='d')} | {sweep.fig(*row, 'mode')} | "
            f"{sweep.fig(*row, 'group_size', fmt='d')} | {_setting(sweep, row, 'group_axis', '-')} | "
            f"{_setting(sweep, row, 'weighting', '-')} | {sweep.fig(*row, 'package_mb', fmt='.3f')} | "
            f"{sweep.fig(*row, 'size_ratio_vs_fp16', fmt='.3f')} | {sweep.fig(*row, 'evaluated', fmt='d')} | "
            f"{sweep.fig(*row, 'max_similarity_error', fmt='.6f')} | "
            f"{sweep.fig(*row, 'resolved_pairs_swapped', fmt='d')}/{sweep.fig(*row, 'resolved_pairs', fmt='d')} | "
            f"{held_cells}{sweep.fig(*row, 'min_cosine', fmt='.8f')} | {sweep.fig(*row, 'max_abs_error', fmt='.6f')} | "
            f"{sweep.fig(*row, 'top1_neighbour_agreement', fmt='d')}/{sweep.fig(*row, 'evaluated', fmt='d')} | "
            f"{'pass' if sweep.value(*row, 'passed') else 'FAIL'} |")
    lines += weighting_comparison(sweep) + mixed_bits_sections(sweep) + smallest_passing_line(sweep)
    return "\n".join(lines) + "\n"


def plot(sweep: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gate = sweep["gate"]
    rows = [sweep["baseline"]] + sweep["candidates"]
    markers = {"fp16": "*", "uniform": "s", "kmeans": "o"}
    walk = bool(sweep.get("mixed_bits"))
    figure, axes = plt.subplots(1, 3 if walk else 2, figsize=(18 if walk else 12, 4.8))
    left, right = axes[0], axes[1]
    if walk:
        plot_frontier(axes[2], sweep, "max_similarity_error", gate["similarity_error_max"], "max |similarity error|")
    for row in rows:
        size, label = row["package_mb"], row["name"]
        if size is None or row["min_cosine"] is None or row["max_similarity_error"] is None:
            continue  # refused or non-finite: no figure to plot (the table lists it as FAIL)
        color = "tab:green" if row["passed"] else "tab:red"
        distance = max(row["max_cosine_distance"], 1e-9)
        left.scatter(size, distance, marker=markers[row["mode"]], color=color)
        left.annotate(label, (size, distance), fontsize=7, xytext=(3, 3), textcoords="offset points")
        right.scatter(size, max(row["max_similarity_error"], 1e-9), marker=markers[row["mode"]], color=color)
        right.annotate(label, (size, max(row["max_similarity_error"], 1e-9)), fontsize=7, xytext=(3, 3),
                       textcoords="offset points")
    left.axhline(1.0 - gate["cosine_min"], color="black", linestyle="--", label=f"gate {1.0 - gate['cosine_min']:.3g}")
    left.set(xlabel="package size (MB)", ylabel="1 - min cosine to golden", yscale="log",
             title="1 - cosine, reported (the bound gates FP16 only)")
    left.legend(loc="upper right")
    right.axhline(gate["similarity_error_max"], color="black", linestyle="--",
                  label=f"budget {gate['similarity_error_max']}")
    right.set(xlabel="package size (MB)", ylabel="max |similarity error|", yscale="log",
              title="largest change of any text-to-text similarity")
    right.legend(loc="upper right")
    figure.suptitle(f"Palettization sweep of the sentence embedder, L{sweep['parent']['length']}, {sweep['backend']} "
                    "backend (square: uniform, circle: k-means, star: FP16)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
