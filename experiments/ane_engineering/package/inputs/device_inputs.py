"""What the host prepares for the one device call: fixed-shape (B, C, 1, S) inputs for one bucket length.

The embedding table (vocab_size x hidden_size) stays on the host; only the rows of the request's tokens are looked
up (for an encoder with a position table, BERT's: word, token-type and position rows, summed on the host). Padding
columns get the pad token's row (their values never reach a valid token: keys at padding are masked). Masks are
finite additive biases in the score layout [0, key, 0, query] (see model/masks.py); a package exported with the
windowed layout takes a tile-local mask for its sliding layers instead of the L x L local mask
(model/window_tiles.py), and the host builds only the masks the package's layout needs.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from ...checkpoint.config import ModelConfig
from ...checkpoint.tensors import HEAD_PREFIX
from ...core.buckets import MARKER_SLOTS
from ...core.errors import HarnessError
from ...model.masks import additive_bc1s
from ...model.window_tiles import DENSE, AttentionLayout, WindowTiles, additive_window


class DeviceInputError(HarnessError):
    """A request that cannot become valid device inputs; never truncated, never guessed."""


@lru_cache(maxsize=128)
def _masks(length: int, num_tokens: int, window_radius: int | None, tile: int | None) -> dict[str, np.ndarray]:
    """The additive masks depend only on the bucket, the token count, the window and the layout: built once, then
    copied. global_mask (1, L, 1, L) always; with sliding layers, local_mask (1, L, 1, L) for the dense layout or
    window_mask (1, W, nT, T) for the windowed one (tile given)."""
    valid = torch.zeros(1, length, dtype=torch.bool)
    valid[0, :num_tokens] = True
    masks = {"global_mask": additive_bc1s(valid, None).numpy()}  # (1, L, 1, L)
    if window_radius is not None and tile is None:
        masks["local_mask"] = additive_bc1s(valid, window_radius).numpy()  # (1, L, 1, L)
    elif window_radius is not None:
        tiles = WindowTiles(length, window_radius, tile)
        masks["window_mask"] = additive_window(tiles, num_tokens).numpy()  # (1, W, nT, T)
    return masks


def device_masks(config: ModelConfig, length: int, num_tokens: int,
                 attention: AttentionLayout = DENSE) -> dict[str, np.ndarray]:
    """Copies of the additive masks a package of this config, bucket and attention layout takes."""
    enc = config.encoder
    has_local = enc.has_sliding_layers
    masks = _masks(length, num_tokens, enc.window_radius if has_local else None,
                   attention.tile if has_local and attention.windowed else None)
    return {name: mask.copy() for name, mask in masks.items()}  # copies: callers may edit their inputs


def embedding_rows(config: ModelConfig, tensors: dict, ids: torch.Tensor) -> torch.Tensor:
    """(L, C) embedding rows of the (L,) padded ids: ModernBERT's token rows, or BERT's word + token-type (0) +
    absolute position rows, summed in transformers' order. Only the rows needed are read from the tables."""
    if not config.encoder.has_position_table:
        return tensors["embeddings.tok_embeddings.weight"][ids]  # (L, C)
    length, positions = ids.shape[0], config.encoder.max_position_embeddings
    if length > positions:
        raise DeviceInputError(f"bucket {length} exceeds the {positions} absolute positions of this BERT encoder")
    rows = (tensors["embeddings.word_embeddings.weight"][ids]
            + tensors["embeddings.token_type_embeddings.weight"][0])  # (L, C)
    return rows + tensors["embeddings.position_embeddings.weight"][:length]  # (L, C)


def encoder_inputs(config: ModelConfig, tensors: dict, input_ids: list[int] | tuple[int, ...], length: int,
                   attention: AttentionLayout = DENSE) -> dict[str, np.ndarray]:
    """embeddings (1, C, 1, L), global_mask (1, L, 1, L) and, with sliding layers, local_mask (1, L, 1, L) or (windowed
    layout) window_mask (1, W, nT, T)."""
    enc = config.encoder
    n = len(input_ids)
    if n == 0:
        raise DeviceInputError("a request needs at least one token")
    if n > length:
        raise DeviceInputError(f"{n} tokens do not fit the bucket of {length}; inputs are never truncated")
    bad = [t for t in input_ids if not (isinstance(t, (int, np.integer)) and 0 <= t < enc.vocab_size)]
    if bad:
        raise DeviceInputError(f"token id(s) {bad[:5]} outside the vocabulary of {enc.vocab_size}")
    ids = torch.full((length,), enc.pad_token_id, dtype=torch.long)
    ids[:n] = torch.tensor(list(input_ids), dtype=torch.long)
    rows = embedding_rows(config, tensors, ids)  # (L, C): only the needed rows
    out = {"embeddings": rows.T.reshape(1, enc.hidden_size, 1, length).numpy().astype(np.float32)}  # (1, C, 1, L)
    out.update(device_masks(config, length, n, attention))
    return out


def body_inputs(config: ModelConfig, tensors: dict, input_ids, token_types, marker_positions, length: int,
                attention: AttentionLayout = DENSE) -> dict[str, np.ndarray]:
    """encoder_inputs plus type_vectors (1, C, 1, L) and the one-hot marker_selector (1, L, 1, MARKER_SLOTS)."""
    head = config.head
    if head is None:
        raise DeviceInputError("body inputs need a decision head")
    out = encoder_inputs(config, tensors, input_ids, length, attention)
    n = len(input_ids)
    if len(token_types) != n:
        raise DeviceInputError(f"{len(token_types)} token types for {n} tokens")
    if any(not (0 <= t < head.num_token_types) for t in token_types):
        raise DeviceInputError(f"token types must be in [0, {head.num_token_types})")
    if not 1 <= len(marker_positions) <= MARKER_SLOTS:
        raise DeviceInputError(f"{len(marker_positions)} options; the graph has 1..{MARKER_SLOTS} marker slots")
    if any(not (0 <= p < n) for p in marker_positions) or len(set(marker_positions)) != len(marker_positions):
        raise DeviceInputError(f"marker positions {list(marker_positions)} must be distinct valid token "
                               f"positions (< {n})")
    table = tensors[f"{HEAD_PREFIX}type_embeddings.weight"]  # (T, C)
    types = torch.zeros(length, config.encoder.hidden_size)
    types[:n] = table[torch.tensor(list(token_types), dtype=torch.long)]  # padding columns stay zero
    selector = np.zeros((1, length, 1, MARKER_SLOTS), dtype=np.float32)  # (1, L, 1, M)
    for slot, position in enumerate(marker_positions):
        selector[0, position, 0, slot] = 1.0
    out["type_vectors"] = types.T.reshape(1, -1, 1, length).numpy().astype(np.float32)  # (1, C, 1, L)
    out["marker_selector"] = selector
    return out


def embedding_inputs(config: ModelConfig, tensors: dict, input_ids, length: int,
                     attention: AttentionLayout = DENSE) -> dict[str, np.ndarray]:
    """encoder_inputs plus the mean-pooling weights (1, L, 1, 1): 1/n at the n valid columns, exact 0 at padding."""
    out = encoder_inputs(config, tensors, input_ids, length, attention)
    pooling = np.zeros((1, length, 1, 1), dtype=np.float32)  # (1, L, 1, 1)
    pooling[0, :len(input_ids), 0, 0] = 1.0 / len(input_ids)
    out["pooling"] = pooling
    return out
