"""Numerical tolerances: their one home, each with where it comes from.

FP32 layout checks (BC1S vs reference, both FP32): the rewrite changes only the order of FP32 operations
(convs instead of matmuls, per-head einsums, split-half RoPE), so differences are rounding noise, a few FP32 ulps
(2^-24 relative) accumulated over the depth. The bounds below are the project's acceptance bounds, set just
above the reference run's own layout check (`layout_check` in core/reference_run.json); the measured values are
far below them (see tests/model/bc1s/test_models.py), and a one-weight perturbation breaks them.
"""

import math

# BC1S vs reference DecisionModel, option logits, FP32 (max abs).
BC1S_LOGITS_ABS = 1e-4
# One full encoder layer (or one FFN block), BC1S vs reference, FP32 (max abs on valid tokens).
BC1S_LAYER_ABS = 3e-5
# Whole encoder stack, final hidden states, FP32 (max abs on valid tokens; final norm output is O(1)).
BC1S_ENCODER_ABS = 1e-4
# Sentence embedding (mean-pooled, L2-normalised final hidden states), BC1S vs reference, FP32 (max abs of the
# unit vector's components): pooling averages the hidden-state errors (<= BC1S_ENCODER_ABS) over the tokens and the
# normalisation divides them by the pooled norm, so the encoder's bound holds whenever that norm is >= 1 (MiniLM's
# pooled norms are in the golden files).
BC1S_EMBEDDING_ABS = 1e-4
# Reference encoder vs transformers' ModernBertModel (eager), FP32 (max abs on valid tokens).
TRANSFORMERS_ORACLE_ABS = 1e-4
# A BC1S model with its residual stream rescaled by 2^-K (model/bc1s/stream_scale.py) vs the same model unscaled,
# both FP32 (max abs of the outputs relative to their largest magnitude). Every step of the rescaled graph is the
# original's scaled by a power of two (weights, biases, epsilons, each norm's mean, deviations, variance and rsqrt),
# and IEEE rounding commutes with power-of-two scaling away from underflow and overflow, so the two are expected to
# agree bit for bit. The bound leaves room for kernels that are not scale-equivariant to the last bit (a vectorised
# rsqrt or reduction that rounds differently at another exponent): one FP32 ulp (2^-23 relative) per norm and per
# contraction of the deepest graph here (24 layers x 8 such stages, about 2^7.6), summed without cancellation, is
# 2^-23 * 2^7.6 = 2.5e-5 at worst and about 2^-23 * sqrt(192) = 1.7e-6 as random errors; 1e-5 sits between. A wrong
# epsilon scaling (eps * s instead of eps * s^2) moves a norm's output by about eps (2^K - 1) / (2 var), 7e-5 for
# ModernBERT's 1e-5 at K = 4 and unit variance, and breaks it (tests/model/bc1s/test_stream_scale.py).
STREAM_SCALE_REL = 1e-5


# ----------------------------------------------------------------------------------------------------------------
# FP32 across machines: two correct FP32 evaluations of the same model on different CPUs (another BLAS kernel, block
# size, vector width or FMA use) sum the same products in another order, so they round differently. How far apart
# can their outputs be?
#
# One dot product of length K in FP32, any order: |computed - exact| <= gamma_K * sum_i |x_i y_i| with
# gamma_K = K u / (1 - K u), u = 2^-24 (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., eq. 3.5).
# That worst case has every rounding error of the same sign. Modelling the errors as independent, mean-zero random
# variables gives lambda * sqrt(K) * u * sum_i |x_i y_i| instead (Higham and Mary, "A New Approach to Probabilistic
# Rounding Error Analysis", SIAM J. Sci. Comput. 41(5), 2019): the error grows like sqrt(K), and in their
# experiments lambda of about 1 describes real errors. (Their theorem guarantees the bound only with probability
# 1 - 2K exp(-lambda^2 / 2), which says nothing at lambda = 3 and K = 1024: the constant below rests on measured
# behaviour, checked by the tests named at the end, not on that probability.)
#
# A network of D dot-product stages in sequence (per transformer layer: the Q/K/V projection, the scores, the
# attention-weighted values, the output projection and the two FFN convolutions; then the scorer's two maps), whose
# norms keep every stage's values at the scale M of the output, accumulates D such independent relative errors:
# their sum grows like sqrt(D). One evaluation is then within lambda * u * sqrt(D * K) * M of the exact result,
# and two evaluations within twice that of each other:
#
#     fp32_cross_machine_abs(M, D, K) = 2 * FP32_ROUNDING_LAMBDA * u * sqrt(D * K) * M
#
# with K the longest contraction (the attention's over L tokens: the longest input) and M the largest magnitude of
# the compared values. FP32_ROUNDING_LAMBDA = 3 is the stated safety factor over lambda = 1, for what the model
# ignores: cancellation (sum |x y| above |sum x y|) and a network that amplifies some perturbations. Checked:
# FP32 networks summed in three orders (BLAS, left to right, right to left) stay inside it against each other and
# against FP64 (tests/core/test_tolerances.py); builtin:tiny's FP32 golden outputs on the machine running the tests stay
# inside it against the committed ones made on another, and one perturbed weight of builtin:tiny moves its option
# logits past it (tests/validation/test_validate.py).
FP32_UNIT_ROUNDOFF = 2.0 ** -24
FP32_ROUNDING_LAMBDA = 3.0
DOT_STAGES_PER_LAYER = 6   # Q/K/V projection, scores, attention values, output projection, FFN in, FFN out
SCORER_STAGES = 2          # scorer.proj, scorer.out
ACTION_HEAD_STAGES = 2     # action.fc1, action.fc2 (on the host, after the option logits)


def fp32_cross_machine_abs(scale: float, depth: int, contraction: int) -> float:
    """The largest expected difference between two correct FP32 evaluations (see the derivation above)."""
    return 2.0 * FP32_ROUNDING_LAMBDA * FP32_UNIT_ROUNDOFF * math.sqrt(depth * contraction) * scale


def decision_model_rounding(config, tokens: int) -> dict:
    """depth and contraction of the FP32 reference decision model on inputs of at most `tokens` tokens, for
    fp32_cross_machine_abs (option logits; add ACTION_HEAD_STAGES to depth for the action logits)."""
    encoder, head = config.encoder, config.head
    layers = encoder.num_hidden_layers + head.num_layers
    contraction = max(encoder.hidden_size, encoder.intermediate_size, head.intermediate_size,
                      head.scorer_hidden_size, tokens)
    return {"depth": DOT_STAGES_PER_LAYER * layers + SCORER_STAGES, "contraction": contraction}


def softmax_abs(logit_abs: float, temperature: float) -> float:
    """Probabilities move by at most half the largest move of their logits: the softmax Jacobian's infinity norm is
    max_i 2 p_i (1 - p_i) <= 1/2; logits divided by `temperature` move by logit_abs / temperature."""
    return 0.5 * logit_abs / temperature
