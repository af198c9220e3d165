"""Validation gates: the one home of the thresholds a candidate package must meet.

They are the gates the reference run (reported by the project's user) applied.

A candidate passes only if, on every evaluated question, the decision argmax and the action argmax match the FP32
golden outputs, calibrated-probability and action-probability errors are at most PROBABILITY_ERROR_MAX, all outputs
are finite, token usage is unchanged, and REPEATS repeated calls give identical public (rounded) outputs.
Saturated probabilities can hide large logit errors, so logit errors are always reported beside them.
"""

PROBABILITY_ERROR_MAX = 0.02
DEFAULT_REPEATS = 100
