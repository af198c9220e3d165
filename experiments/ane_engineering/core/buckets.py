"""Fixed shapes of the on-device graph: the one home of bucket lengths, marker slots and mask constants.

The ANE wants static shapes (flexible or enumerated shapes pushed the reference run's baseline to the CPU), so
every package is exported for one bucket length and a request runs on the smallest bucket that fits it.
"""

# Sequence capacities of the exported packages; 96 is the default, longer inputs use 192 or 1024.
BUCKET_LENGTHS = (96, 192, 1024)
DEFAULT_BUCKET = 96

# Marker read-out slots kept in the graph: one per answer option; unused slots are masked on the host.
MARKER_SLOTS = 32

# Finite additive bias for masked attention scores. exp(-1e4) underflows to exactly 0 in FP32 and FP16, and -1e4
# is representable in FP16, unlike -inf which turns an all-masked row into NaN. See ANE_MATH.md.
MASK_BIAS = -1.0e4

# Host-side raw logit written into inactive marker slots so they never win an argmax or carry softmax mass.
INACTIVE_LOGIT = -1.0e4


def buckets_within(max_positions: int, lengths: tuple[int, ...] = BUCKET_LENGTHS) -> tuple[int, ...]:
    """The buckets a source can run: a model with absolute positions (BERT: max_position_embeddings) has no bucket
    longer than its position table."""
    return tuple(length for length in lengths if length <= max_positions)


def smallest_bucket(num_tokens: int, available: tuple[int, ...] = BUCKET_LENGTHS) -> int | None:
    """The smallest available bucket that holds `num_tokens`, or None when none does (never truncate)."""
    fitting = [length for length in sorted(available) if length >= num_tokens]
    return fitting[0] if fitting else None
