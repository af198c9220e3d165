"""Placement: where the operations of an exported package are expected to run.

`rules/` is the one home of the ANE rules, each registered by a decorator above its check (with its public source,
severity and, for constraints that come from the Orion direct-ANE catalogue, whether it applies to Core ML
packages). `static_check.py` runs them over a PyMIL program and labels the result as a prediction;
`compute_plan.py` reads Core ML's own plan where it exists (macOS only).
"""
