"""Explicit input-shape checks: a wrong shape is an error that says what was expected, never a broadcast."""

from __future__ import annotations

import torch


def expect_shape(name: str, tensor: torch.Tensor, shape: tuple[int, ...]) -> None:
    if torch.jit.is_tracing():
        return  # the export's input contract fixes these shapes; comparing traced sizes only adds warnings
    if tuple(tensor.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} (B, C, 1, S layout), got {tuple(tensor.shape)}")
