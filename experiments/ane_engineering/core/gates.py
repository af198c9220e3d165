"""Validation gates: the one home of the thresholds a candidate package must meet.

They are the gates the reference run (reported by the project's user) applied.

A candidate passes only if, on every evaluated question, the decision argmax and the action argmax match the FP32
golden outputs, calibrated-probability and action-probability errors are at most PROBABILITY_ERROR_MAX, all outputs
are finite, token usage is unchanged, and REPEATS repeated calls give identical public (rounded) outputs.
Saturated probabilities can hide large logit errors, so logit errors are always reported beside them.
Embedding-kind packages (sentence embedders) have gates of their own, derived below.
"""

PROBABILITY_ERROR_MAX = 0.02
DEFAULT_REPEATS = 100

# ---- Sentence-embedding gates (embedding-kind packages; validation/embedding_run.py applies them)
#
# One task budget decides all three thresholds: SIMILARITY_ERROR_MAX, the most any cosine similarity between two
# texts may move. Similarities are what a sentence embedder is used for (retrieval ranks them, deduplication and
# clustering threshold them), and thresholds on them are set to two decimals; a move of 0.01 is one unit of that.
#
# - per-text cosine to the golden embedding >= EMBEDDING_COSINE_MIN. For unit vectors g (golden) and e
#   (candidate), |e - g|^2 = 2 (1 - cos), so cos >= 1 - d^2 / 2 bounds the error vector by d, and a similarity
#   e_i . e_j moves by at most |D_i . g_j + g_i . D_j + D_i . D_j| <= 2 d + d^2. Setting 2 d + d^2 = 0.01 gives
#   d = sqrt(1.01) - 1 = 0.0049876 and 1 - cos <= 1.244e-5.
# - max abs error of any component <= EMBEDDING_ABS_MAX = d. For a unit candidate this follows from the cosine
#   (|D|_inf <= |D|_2 <= d); the cosine is blind to scale, so this is the gate that catches a wrong norm (a broken
#   normalisation, an FP16 overflow in the sum of squares) or a few channels gone wrong.
# - similarity ranking: for every text, the ranking of every other text by similarity must not change, up to
#   ties: two texts whose golden similarities to the anchor differ by more than RANK_TIE_BAND = 2 x the budget
#   cannot legitimately swap (each similarity may move by the budget), so any such swap fails. Pairs closer than
#   that are ties at the gated precision; their swaps are counted and reported, not failed. Top-1 neighbour
#   agreement and the largest similarity error are reported beside it.
# The cosine gate is a worst case: it keeps the budget for every pair of texts, including texts outside the
# fixture, so it is stricter than the fixture's own similarity errors (reported beside it as max_similarity_error);
# a candidate can keep the fixture's similarities within the budget and still fail it.
# Tests: tests/test_embedding_gates.py shows a wrong LayerNorm epsilon, a dropped position embedding and two
# swapped attention heads each breaking these gates, while the FP16 package passes.
SIMILARITY_ERROR_MAX = 0.01
EMBEDDING_ERROR_VECTOR_MAX = (1.0 + SIMILARITY_ERROR_MAX) ** 0.5 - 1.0  # d: 0.0049876
EMBEDDING_COSINE_MIN = 1.0 - EMBEDDING_ERROR_VECTOR_MAX ** 2 / 2.0  # 0.99998756
EMBEDDING_ABS_MAX = EMBEDDING_ERROR_VECTOR_MAX
RANK_TIE_BAND = 2.0 * SIMILARITY_ERROR_MAX
