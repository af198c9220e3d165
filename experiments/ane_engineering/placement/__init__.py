"""Placement: where the operations of an exported package are expected to run.

`rules/` is the one home of the ANE rules, each registered by a decorator above its check (with its public source,
severity and, for constraints that come from the Orion direct-ANE catalogue, whether it applies to Core ML
packages). `static_check.py` runs them over a PyMIL program and labels the result as a prediction;
`compute_plan.py` reads Core ML's own plan where it exists (macOS only).

How fast it is expected to run: `cost_model.py` counts a program's FLOPs and bytes and sets a roofline floor per chip
(`chips.json`: peak, bandwidth, SRAM, generation, each sourced); `regions.py` splits a program into the ANE regions
the static placement predicts; `chip_fit.py` fits physical terms across chips on every public timing
(`public_latencies.py` reads them) and holds out each chip and source in turn; `predict.py` applies that fit to any
program on any chip with its band, device state, regions, nearest public points and GPU route; `crossover.py` finds
where a predicted request loses to a GPU curve. `calibration.py` is the older two-term fit to the reference run alone,
still used by `--attention auto` and the long-attention evidence.
"""
