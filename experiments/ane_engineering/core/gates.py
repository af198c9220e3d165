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

# ---- Neural Engine headroom (validation/gate_run.py applies it; run/mil/headroom.py measures it)
#
# headroom = cliff / max |output| of an op over the golden inputs, against the cliff that op faces on the Neural
# Engine (run/mil/ane_cliffs.json: matmul-class outputs, pre-A16 width-offset slices; the FP16 limit for the rest).
# The graph's minimum must be at least HEADROOM_MIN, or validation fails naming the op. Why 2x and not 1x: a pass on
# the golden inputs must hold on inputs that were not measured, and activations move with the input -- the published
# massive activation of mmBERT grows with the sequence (|h| 1.37e4 at 256 tokens, 1.40e4 at 512: john-rocky/
# coreai-model-zoo, knowledge/laya-multilingual-port.md); the cliffs themselves are published as approximate
# ("around 32752") and measured on two chips (sbryngelson/ANEForge, docs/numeric-cliffs.md). A factor of 2 is one
# binary order of magnitude: the margin of one step of an exact power-of-two rescaling (probe --fp16-scale), so a
# model that fails it can be brought back inside it without changing a single FP16 mantissa.
# Tests: tests/validation/test_headroom_gate.py shows a scaled weight (a real defect) breaking it while the package
# passes.
HEADROOM_MIN = 2.0

# ---- Sentence-embedding gates (embedding-kind packages; validation/embedding_run.py applies them)
#
# One task budget: SIMILARITY_ERROR_MAX, the most any similarity between two texts may move. Similarities are what
# a sentence embedder is used for (retrieval ranks them, deduplication and clustering threshold them), and
# thresholds on them are set to two decimals; a move of 0.01 is one unit of that.
#
# The gate checks what it promises, measured:
# - similarity: the largest |e_i . e_j - g_i . g_j| over every pair of evaluated texts, each text with itself
#   included (e_i . e_i - 1 is the norm error, so a broken normalisation counts), <= SIMILARITY_ERROR_MAX. It is
#   measured over the golden texts and, in a sweep, over a held-out text set that nothing was calibrated or chosen
#   on (package/inputs/fixtures/texts_heldout.json, or the user's own through --fixture); both must pass.
# - similarity ranking: for every text, the ranking of every other text by similarity must not change, up to
#   ties: two texts whose golden similarities to the anchor differ by more than RANK_TIE_BAND = 2 x the budget
#   cannot legitimately swap (each similarity may move by the budget), so any such swap fails. Pairs closer than
#   that are ties at the gated precision; their swaps are counted and reported, not failed.
# - every embedding finite, repeated calls bit-identical.
#
# Worst-case bounds, always reported: per-text cosine to golden >= EMBEDDING_COSINE_MIN and max abs error <=
# EMBEDDING_ABS_MAX. For unit vectors |e - g|^2 = 2 (1 - cos), so cos >= 1 - d^2 / 2 bounds the error vector by d,
# and a similarity e_i . e_j moves by at most |D_i . g_j + g_i . D_j + D_i . D_j| <= 2 d + d^2; 2 d + d^2 = 0.01
# gives d = sqrt(1.01) - 1 = 0.0049876 and 1 - cos <= 1.244e-5. This keeps the budget for every pair of texts,
# fixture or not, whatever direction the errors take -- a guarantee, not a measurement. It is the gate of
# uncompressed (FP16) packages (BOUNDS_GATE_UNCOMPRESSED): their error is rounding, which they keep far inside the
# bound, so keeping the stronger promise costs them nothing and still catches a defect the fixture might not show.
# It is not the gate of palettized packages: errors of 2 d = 0.01 in opposite directions on the two texts of a
# pair are what reaching the bound takes, while a palettized weight adds nearly the same error direction to texts
# that are alike (the same LUT entries feed every input), so the measured similarity changes stay several times
# below the bound's worst case; judging them by the bound fails packages that keep the promise on every measured
# pair. What stops a palettized package from keeping it only on the fixture is the held-out set above.
# Tests: tests/validation/test_embedding_run.py shows a wrong LayerNorm epsilon, a dropped position embedding and two
# swapped attention heads each breaking the measured gates (and the bounds), while the FP16 package passes.
SIMILARITY_ERROR_MAX = 0.01
EMBEDDING_ERROR_VECTOR_MAX = (1.0 + SIMILARITY_ERROR_MAX) ** 0.5 - 1.0  # d: 0.0049876
EMBEDDING_COSINE_MIN = 1.0 - EMBEDDING_ERROR_VECTOR_MAX ** 2 / 2.0  # 0.99998756
EMBEDDING_ABS_MAX = EMBEDDING_ERROR_VECTOR_MAX
RANK_TIE_BAND = 2.0 * SIMILARITY_ERROR_MAX
BOUNDS_GATE_UNCOMPRESSED = True  # the cosine and max-abs bounds gate packages without a compression record
