"""Baselines the on-device body is compared against in benchmarks (never the thing under test).

`mlx_decision`: the same decision-model body (embedding rows -> encoder -> decision head -> scorer -> option logits)
in MLX with FP16 weights and FP16 activations, compiled (`mx.compile`) or eager, for paired same-session timing
against the Core ML / ANE path. MLX is an optional dependency (the `dev` extra); `mlx_available()` says whether it
imports here.
"""
