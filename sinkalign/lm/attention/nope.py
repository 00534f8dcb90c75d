"""NoPE: causal softmax attention with no positional encoding (the causal mask alone).

Order is seen only through the causal mask (BAM's "uniform prior"; the one-parameter-group
view's zero generator).
"""

from __future__ import annotations

import torch
from torch import nn

from sinkalign.lm.attention.base import SoftmaxAttention
from sinkalign.lm.config import LMConfig

__all__ = ["NoPEAttention"]


class NoPEAttention(SoftmaxAttention):
    """Multi-head causal attention via one SDPA call, no positional transform."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__(config)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.reset_parameters()

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self._split_heads(q), self._split_heads(k), self._split_heads(v)
