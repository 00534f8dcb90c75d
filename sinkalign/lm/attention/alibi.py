"""ALiBi: a fixed per-head linear recency bias ``-m_h (i - j)`` (Press et al.).

In BAM's reading, a Laplace prior over the lag. The bias is a dense ``[H, Lq, Lk]`` float
mask handed to SDPA (so the memory-efficient kernel, not flash, runs it); it is built from
positions on every call, never from a stored table.
"""

from __future__ import annotations

import torch
from torch import nn

from sinkalign.lm.attention.base import SoftmaxAttention, alibi_slopes, causal_sdpa
from sinkalign.lm.config import LMConfig

__all__ = ["ALiBiAttention"]


class ALiBiAttention(SoftmaxAttention):
    """Multi-head causal attention with ALiBi slopes ``alibi_slopes(n_heads)`` (not learned)."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__(config)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        # float64 on the CPU, deliberately not a buffer: ``model.to(bfloat16)`` must not round it
        self.slopes = torch.tensor(alibi_slopes(config.n_heads), dtype=torch.float64)
        self.reset_parameters()

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self._split_heads(q), self._split_heads(k), self._split_heads(v)

    def bias(self, lq: int, lk: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """``[H, Lq, Lk]`` bias ``-m_h (i - j)`` for queries at the end of ``Lk`` keys."""
        qpos = torch.arange(lk - lq, lk, device=device, dtype=torch.float64)
        kpos = torch.arange(lk, device=device, dtype=torch.float64)
        lag = qpos[:, None] - kpos[None, :]
        return (-self.slopes.to(device)[:, None, None] * lag).to(dtype)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int) -> torch.Tensor:
        bias = self.bias(q.shape[-2], k.shape[-2], q.device, q.dtype)
        return causal_sdpa(q, k, v, scale=self.scale, attn_bias=bias)
