"""Render a sweep: a Markdown table and a PNG plot of package size against the largest errors, gate drawn."""

from __future__ import annotations

from pathlib import Path


def _fmt(value, digits=5):
    return "-" if value is None else f"{value:.{digits}f}"


def markdown_table(sweep: dict, evidence_name: str = "sweep.json") -> str:
    gate = sweep["gate"]["probability_error_max"]
    rows = [sweep["baseline"]] + sweep["candidates"]
    lines = [
        f"Palettization sweep of `{sweep['parent']['path']}` (L{sweep['parent']['length']}), validated through the "
        f"`{sweep['backend']}` backend against FP32 golden outputs; gate: probability errors <= {gate}. "
        f"Source: `{evidence_name}` (harness {sweep['harness']['sha256'][:12]}).",
        "",
        "| candidate | bits | mode | group | size (MB) | vs FP16 | argmax | max calibrated err | max action prob err "
        "| max option-logit err | max action-logit err | gates |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['name']} | {row['bits']} | {row['mode']} | {row['group_size'] or '-'} | "
            f"{_fmt(row['package_mb'], 3)} | {_fmt(row['size_ratio_vs_fp16'], 3)} | "
            f"{row['argmax_matches']}/{row['evaluated']} | {_fmt(row['max_calibrated_error'])} | "
            f"{_fmt(row['max_action_probability_error'])} | {_fmt(row['max_option_logit_error'], 4)} | "
            f"{_fmt(row['max_action_logit_error'], 4)} | {'pass' if row['passed'] else 'FAIL'} |")
    return "\n".join(lines) + "\n"


def plot(sweep: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gate = sweep["gate"]["probability_error_max"]
    rows = [sweep["baseline"]] + sweep["candidates"]
    markers = {"fp16": "*", "uniform": "s", "kmeans": "o"}
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
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
