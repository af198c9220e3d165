"""Sections of a sweep's report shared by both tasks: weighted against unweighted k-means side by side, the per-layer
sensitivities and the mixed-bit walk (its size-error frontier with the passing steps marked). Every figure is
printed through the Document, so a ledger records where it came from."""

from __future__ import annotations

from ..core.figures import Document

# The figure each task's gate reads first, as (key, label, format): the comparison and the frontier use it.
HEADLINE = {"decisions": ("max_calibrated_error", "max calibrated err", ".5f"),
            "embeddings": ("max_similarity_error", "max similarity err", ".6f")}


def fig_or_dash(sweep: Document, path: tuple, fmt: str = "") -> str:
    try:
        return sweep.fig(*path, fmt=fmt)
    except (KeyError, IndexError, TypeError):
        return "-"


def setting(sweep: Document, row: tuple, key: str, default: str) -> str:
    """A candidate's setting as text (sweeps made before the setting existed have none: `default`)."""
    try:
        value = sweep.value(*row, key)
    except KeyError:
        return default
    return default if value is None else str(value)


def headline(sweep: Document) -> tuple[str, str, str]:
    return HEADLINE[sweep.data.get("task") or "decisions"]


def weighting_comparison(sweep: Document) -> list[str]:
    """Unweighted and Fisher-weighted k-means of the same bits, group and axis side by side, on the golden and the
    held-out figures; each pair says which is lower, and says so where weighting is worse."""
    candidates = sweep.value("candidates")
    index = {(c["bits"], c["group_size"], c.get("group_axis", "output"), c.get("weighting", "none")): i
             for i, c in enumerate(candidates) if c["mode"] == "kmeans"}
    pairs = [(key[:3], i, index[key[:3] + ("fisher",)]) for key, i in index.items()
             if key[3] == "none" and key[:3] + ("fisher",) in index]
    if not pairs:
        return []
    key, label, fmt = headline(sweep)
    held = sweep.data.get("heldout") is not None
    lines = ["", f"Weighted (Fisher) against unweighted k-means, {label} (lower is better"
             + ("; held-out: the set nothing was calibrated or chosen on" if held else "") + "):", "",
             "| bits | group | axis | unweighted | fisher | held-out unweighted | held-out fisher | "
             "weighting on held-out |",
             "|---|---|---|---|---|---|---|---|"]
    for (bits, group, axis), plain, weighted in sorted(pairs, key=lambda p: (-p[0][0], p[0][1], p[0][2])):
        verdict = "-"
        if held:
            a = candidates[plain].get("heldout", {}).get(key)
            b = candidates[weighted].get("heldout", {}).get(key)
            if a is not None and b is not None:
                verdict = "better" if b < a else ("WORSE" if b > a else "equal")
        lines.append(
            f"| {sweep.fig('candidates', plain, 'bits', fmt='d')} | "
            f"{sweep.fig('candidates', plain, 'group_size', fmt='d')} | {sweep.fig('candidates', plain, 'group_axis')} "
            f"| {fig_or_dash(sweep, ('candidates', plain, key), fmt)} | "
            f"{fig_or_dash(sweep, ('candidates', weighted, key), fmt)} | "
            f"{fig_or_dash(sweep, ('candidates', plain, 'heldout', key), fmt)} | "
            f"{fig_or_dash(sweep, ('candidates', weighted, 'heldout', key), fmt)} | {verdict} |")
    return lines


def mixed_bits_sections(sweep: Document) -> list[str]:
    walk = sweep.data.get("mixed_bits")
    if not walk:
        return []
    key, label, fmt = headline(sweep)
    widths = [str(b) for b in walk["widths"]]
    settings = walk["settings"]
    lines = ["", f"Mixed bits: per-layer sensitivity ({label} of the package with only that layer palettized, on the "
             f"calibration set `{sweep.value('mixed_bits', 'calibration', 'fixture')}`; k-means group "
             f"{sweep.fig('mixed_bits', 'settings', 'group_size')} along {settings['group_axis']}, weighting "
             f"{settings['weighting']}):", "",
             "| layer | weights | " + " | ".join(f"W{sweep.fig('mixed_bits', 'widths', i, fmt='d')}"
                                                 for i in range(len(widths))) + " |",
             "|---|---|" + "---|" * len(widths)]
    for i, layer in enumerate(walk["layers"]):
        lines.append(f"| {sweep.fig('mixed_bits', 'layers', i, 'layer')} | "
                     f"{sweep.fig('mixed_bits', 'layers', i, 'elements', fmt='d')} | "
                     + " | ".join(fig_or_dash(sweep, ('mixed_bits', 'layers', i, 'sensitivity', b), 'num3')
                                  for b in widths) + " |")
    held = sweep.data.get("heldout") is not None
    boundary = ", ".join(sweep.fig("mixed_bits", "boundary_layers", i) for i in range(len(walk["boundary_layers"])))
    lines += ["", f"The greedy walk down from every layer at W{sweep.fig('mixed_bits', 'widths', 0, fmt='d')} "
              f"(boundary layers kept at W{sweep.fig('mixed_bits', 'boundary_bits', fmt='d')}: {boundary or 'none'}); "
              "every step is a sealed "
              "package validated under the unchanged gates -- the size-error frontier, passing steps marked:", "",
              f"| step | moved | mean bits | size (MB) | vs FP16 | {label} | "
              + (f"held-out {label} | " if held else "") + "gates |",
              "|---|---|---|---|---|---|" + ("---|" if held else "") + "---|"]
    for i, step in enumerate(walk["steps"]):
        row = ("mixed_bits", "steps", i)
        moved = sweep.fig(*row, "moved") if step["moved"] else "(start)"
        lines.append(f"| {sweep.fig(*row, 'step', fmt='d')} | {moved} | {sweep.fig(*row, 'mean_bits', fmt='.2f')} | "
                     f"{fig_or_dash(sweep, row + ('package_mb',), '.3f')} | "
                     f"{fig_or_dash(sweep, row + ('size_ratio_vs_fp16',), '.3f')} | "
                     f"{fig_or_dash(sweep, row + (key,), fmt)} | "
                     + (f"{fig_or_dash(sweep, row + ('heldout', key), fmt)} | " if held else "")
                     + f"{'**pass**' if step['passed'] else 'FAIL'} |")
    smallest = walk.get("smallest_passing_step")
    lines += ["", "Smallest passing step of the walk: "
              + ("none" if smallest is None else
                 f"step {sweep.fig('mixed_bits', 'smallest_passing_step', fmt='d')}, "
                 f"{sweep.fig('mixed_bits', 'steps', smallest, 'package_mb', fmt='.3f')} MB") + "."]
    return lines


def smallest_passing_line(sweep: Document) -> list[str]:
    if sweep.data.get("smallest_passing") is None:
        return ["", "No candidate passes the gates."]
    return ["", f"Smallest passing package of the sweep: `{sweep.fig('smallest_passing', 'name')}`, "
            f"{sweep.fig('smallest_passing', 'package_mb', fmt='.3f')} MB."]


def plot_frontier(axis, sweep: dict, key: str, gate: float, label: str) -> None:
    """The walk's steps as size against error, the region under the gate shaded as the pass region."""
    walk = sweep.get("mixed_bits")
    if not walk:
        return
    points = [(s["package_mb"], s[key], s["passed"]) for s in walk["steps"]
              if s["package_mb"] is not None and s.get(key) is not None]
    if not points:
        return
    axis.axhspan(1e-9, gate, color="tab:green", alpha=0.08, label="pass region (gate)")
    axis.plot([p[0] for p in points], [max(p[1], 1e-9) for p in points], color="gray", linewidth=0.8)
    for size, value, passed in points:
        axis.scatter(size, max(value, 1e-9), marker="D", color="tab:green" if passed else "tab:red")
    axis.axhline(gate, color="black", linestyle="--")
    axis.set(xlabel="package size (MB)", ylabel=label, yscale="log",
             title="mixed-bit walk: size-error frontier (green: passes all gates)")
    axis.legend(loc="upper right")
