"""Render a sweep: a Markdown table and a PNG plot of package size against the largest errors, gate drawn (and,
for a mixed-bit walk, its size-error frontier with the pass region)."""

from __future__ import annotations

from pathlib import Path

from ..core.figures import Document
from .sweep_sections import fig_or_dash, mixed_bits_sections, plot_frontier, smallest_passing_line, weighting_comparison
from .sweep_sections import setting as _setting


def markdown_table(sweep: Document, evidence_name: str = "sweep.json") -> str:
    """The sweep table; every figure printed through `sweep.fig` (a ledger's Evidence records each one). A sweep with
    a held-out set shows its figures beside the golden ones; the weighting comparison and the mixed-bit walk follow."""
    if sweep.data.get("task") == "embeddings":  # sweeps of body packages before embeddings existed have no task
        from . import sweep_embedding

        return sweep_embedding.markdown_table(sweep, evidence_name)
    rows = [("baseline",)] + [("candidates", i) for i in range(len(sweep.value("candidates")))]
    held = sweep.data.get("heldout") is not None
    lines = [
        f"Palettization sweep of `{sweep.value('parent', 'path')}` (L{sweep.fig('parent', 'length', fmt='d')}), "
        f"validated through the `{sweep.value('backend')}` backend against FP32 golden outputs; gate: probability "
        f"errors <= {sweep.fig('gate', 'probability_error_max')}"
        + (f", on the golden questions and on the held-out set `{sweep.value('heldout', 'fixture', 'path')}` (a "
           "candidate passes only if it passes both)" if held else "")
        + f". Source: `{evidence_name}` (harness `{sweep.value('harness', 'sha256')[:12]}`).",
        "",
        "| candidate | bits | mode | group | axis | weighting | size (MB) | vs FP16 | argmax | max calibrated err "
        "| max action prob err | max option-logit err | max action-logit err | "
        + ("held-out argmax | held-out max calibrated err | held-out max action prob err | " if held else "")
        + "gates |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if held else "") + "---|",
    ]
    for row in rows:
        held_cells = ""
        if held:
            held_cells = (f"{fig_or_dash(sweep, row + ('heldout', 'argmax_matches'), 'd')}/"
                          f"{fig_or_dash(sweep, row + ('heldout', 'evaluated'), 'd')} | "
                          f"{fig_or_dash(sweep, row + ('heldout', 'max_calibrated_error'), '.5f')} | "
                          f"{fig_or_dash(sweep, row + ('heldout', 'max_action_probability_error'), '.5f')} | ")
        lines.append(
            f"| {sweep.fig(*row, 'name')} | {sweep.fig(*row, 'bits', fmt='d')} | {sweep.fig(*row, 'mode')} | "
            f"{sweep.fig(*row, 'group_size', fmt='d')} | {_setting(sweep, row, 'group_axis', '-')} | "
            f"{_setting(sweep, row, 'weighting', '-')} | {sweep.fig(*row, 'package_mb', fmt='.3f')} | "
            f"{sweep.fig(*row, 'size_ratio_vs_fp16', fmt='.3f')} | "
            f"{sweep.fig(*row, 'argmax_matches', fmt='d')}/{sweep.fig(*row, 'evaluated', fmt='d')} | "
            f"{sweep.fig(*row, 'max_calibrated_error', fmt='.5f')} | "
            f"{sweep.fig(*row, 'max_action_probability_error', fmt='.5f')} | "
            f"{sweep.fig(*row, 'max_option_logit_error', fmt='.4f')} | "
            f"{sweep.fig(*row, 'max_action_logit_error', fmt='.4f')} | {held_cells}"
            f"{'pass' if sweep.value(*row, 'passed') else 'FAIL'} |")
    lines += weighting_comparison(sweep) + mixed_bits_sections(sweep) + smallest_passing_line(sweep)
    return "\n".join(lines) + "\n"


def plot(sweep: dict, path: Path) -> None:
    if sweep.get("task") == "embeddings":
        from . import sweep_embedding

        return sweep_embedding.plot(sweep, path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gate = sweep["gate"]["probability_error_max"]
    rows = [sweep["baseline"]] + sweep["candidates"]
    markers = {"fp16": "*", "uniform": "s", "kmeans": "o"}
    walk = bool(sweep.get("mixed_bits"))
    figure, axes = plt.subplots(1, 3 if walk else 2, figsize=(18 if walk else 12, 4.8))
    left, right = axes[0], axes[1]
    if walk:
        plot_frontier(axes[2], sweep, "max_calibrated_error", gate, "max calibrated-probability error")
    for row in rows:
        size = row["package_mb"]
        label = row["name"]
        if size is None or row["max_calibrated_error"] is None:
            continue  # refused or non-finite: no figure to plot (the table lists it as FAIL)
        color = "tab:green" if row["passed"] else "tab:red"
        left.scatter(size, max(row["max_calibrated_error"], 1e-7), marker=markers[row["mode"]], color=color)
        left.annotate(label, (size, max(row["max_calibrated_error"], 1e-7)), fontsize=7, xytext=(3, 3),
                      textcoords="offset points")
        right.scatter(size, max(row["max_option_logit_error"], 1e-7), marker=markers[row["mode"]], color="tab:blue")
        right.scatter(size, max(row["max_action_logit_error"], 1e-7), marker=markers[row["mode"]], color="tab:orange")
        right.annotate(label, (size, max(row["max_option_logit_error"], 1e-7)), fontsize=7, xytext=(3, 3),
                       textcoords="offset points")
    left.axhline(gate, color="black", linestyle="--", label=f"gate {gate}")
    left.set(xlabel="package size (MB)", ylabel="max calibrated-probability error", yscale="log",
             title="probability error (green: passes all gates, red: fails)")
    left.legend(loc="upper right")
    right.set(xlabel="package size (MB)", ylabel="max logit error", yscale="log",
              title="logit errors (blue: option logits, orange: action logits)")
    figure.suptitle(f"Palettization sweep, L{sweep['parent']['length']}, {sweep['backend']} backend "
                    "(square: uniform, circle: k-means, star: FP16)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
