"""ANE principle (from direct ANE programming): weights are baked at compile time, so anything that changes per
call must be an input. LoRA adapters therefore enter the body as inputs, never as weights, and hot-swap per call.

For a projection W (a 1x1 conv) with adapter matrices A (R x C_in) and B (C_out x R):

    y = conv(x, W) + (alpha / R) * B (A x)

kept in (B, C, 1, S) form with the same native einsum pattern as attention:

    A x  : einsum('bchq,bkhc->bkhq', x (1, C_in, 1, L), A (1, R, 1, C_in))   -> (1, R, 1, L)
    B Ax : einsum('bchq,bkhc->bkhq', Ax (1, R, 1, L), B' (1, C_out, 1, R))   -> (1, C_out, 1, L)

One input per target and matrix stacks every layer: lora_<t>_A (1, N*R, 1, C) and lora_<t>_B (1, C, 1, N*R); layer n
slices its R rows / columns. The host prepares B' = (alpha / R) * B with the rows in the package's order (Q and K
rows in attention.qk_row_order and Q pre-scaled by head_dim^-0.5, see attention.py), so the graph holds no adapter
constant. Targets: q, k, v (the rows of Wqkv) of every transformer layer of the exported stack.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...core.errors import HarnessError

LORA_TARGETS = ("q", "k", "v")


class LoraSpecError(HarnessError):
    """LoRA settings that no package can be exported or run with."""


@dataclass(frozen=True)
class LoraSpec:
    rank: int
    alpha: float
    targets: tuple[str, ...]

    def __post_init__(self):
        if self.rank < 1:
            raise LoraSpecError(f"LoRA rank must be >= 1, got {self.rank}")
        if (not self.targets or any(t not in LORA_TARGETS for t in self.targets)
                or len(set(self.targets)) != len(self.targets)):
            raise LoraSpecError(f"LoRA targets must be distinct names from {LORA_TARGETS}, got {self.targets}")
        if not (isinstance(self.alpha, (int, float)) and math.isfinite(self.alpha) and self.alpha > 0):
            raise LoraSpecError(f"LoRA alpha must be a positive finite number, got {self.alpha}")

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank

    def input_names(self) -> list[str]:
        return [f"lora_{t}_{m}" for t in self.targets for m in ("A", "B")]

    def to_json(self) -> dict:
        return {"rank": self.rank, "alpha": self.alpha, "targets": list(self.targets)}


def low_rank_delta(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """B (A x) for x (1, C_in, 1, L), a (1, R, 1, C_in), b (1, C_out, 1, R) -> (1, C_out, 1, L)."""
    ax = torch.einsum("bchq,bkhc->bkhq", x, a)  # (1, R, 1, L)
    return torch.einsum("bchq,bkhc->bkhq", ax, b)  # (1, C_out, 1, L)


def layer_slices(inputs: dict[str, torch.Tensor], spec: LoraSpec,
                 layer: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Layer `layer`'s (A, B) per target from the stacked inputs."""
    lo, hi = layer * spec.rank, (layer + 1) * spec.rank
    return {t: (inputs[f"lora_{t}_A"][:, lo:hi], inputs[f"lora_{t}_B"][..., lo:hi]) for t in spec.targets}
