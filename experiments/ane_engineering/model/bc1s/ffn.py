"""ANE principle: feed-forward blocks as 1x1 convs on (B, C, 1, S); elementwise activations stay on the ANE.

GeGLU (encoder): Wi's rows are [input | gate]; they become two convs, so no channel split op is needed.
ReLU FFN (decision head): Wi -> ReLU -> Wo.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .conv import Conv1x1


class GeGLUConv(nn.Module):
    def __init__(self, tensors: dict, prefix: str, intermediate: int, approximate: str):
        super().__init__()
        self.input = Conv1x1.from_rows(tensors, f"{prefix}.Wi", slice(0, intermediate))
        self.gate = Conv1x1.from_rows(tensors, f"{prefix}.Wi", slice(intermediate, 2 * intermediate))
        self.output = Conv1x1.from_rows(tensors, f"{prefix}.Wo")
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = F.gelu(self.input(x), approximate=self.approximate)  # (1, I, 1, L)
        return self.output(hidden * self.gate(x))  # (1, C, 1, L)


class ReluConv(nn.Module):
    def __init__(self, tensors: dict, prefix: str):
        super().__init__()
        self.input = Conv1x1.from_rows(tensors, f"{prefix}.Wi")
        self.output = Conv1x1.from_rows(tensors, f"{prefix}.Wo")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(F.relu(self.input(x)))  # (1, C, 1, L)
