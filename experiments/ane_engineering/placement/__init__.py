"""Placement: where the operations of an exported package are expected to run.

`rules/` is the one home of the ANE rules, each registered by a decorator above its check (with its public source,
severity and, for constraints that come from the Orion direct-ANE catalogue, whether it applies to Core ML
packages). `static_check.py` runs them over a PyMIL program and labels the result as a prediction;
`compute_plan.py` reads Core ML's own plan where it exists (macOS only).

How fast it is expected to run: `cost_model.py` counts a program's FLOPs and bytes and sets a roofline floor per chip
(`chips.json`); `calibration.py` fits two terms on top to the reference run; `predict.py` applies the fit to any
program on any chip of the table with its leave-one-out band; `crossover.py` finds where a predicted request loses
to an MLX curve; `public_latencies.py` reads the public timings used only to check the model (never to fit it).
"""
