"""RoPE: rotary position embedding (Su et al.), the rotation one-parameter group.

Pairs ``(x[m], x[m + d_h/2])`` of each query and key head are rotated by the angle
``pos * base**(-2m / d_h)`` ("rotate-half" layout). Angles are computed in float64 from
absolute positions, so any length can be evaluated; cached keys are stored rotated.
"""

from __future__ import annotations

import torch
from torch import nn

from sinkalign.lm.attention.base import SoftmaxAttention, positions
from sinkalign.lm.config import LMConfig

__all__ = ["RoPEAttention", "apply_rope"]


def apply_rope(x: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate ``x [..., L, d]`` (``d`` even) at float64 positions ``pos [L]``."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"RoPE needs an even head dimension, got {d}")
    half = d // 2
    inv_freq = base ** (-torch.arange(half, device=x.device, dtype=torch.float64) * 2.0 / d)
    ang = pos[:, None] * inv_freq[None, :]  # [L, d/2] float64
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class RoPEAttention(SoftmaxAttention):
    """Multi-head causal attention with rotary queries and keys, one SDPA call."""

    def __init__(self, config: LMConfig) -> None:
        if config.head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {config.head_dim}")
        super().__init__(config)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.base = float(config.rope_base)
        self.reset_parameters()

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self._split_heads(q), self._split_heads(k), self._split_heads(v)

    def position(self, q: torch.Tensor, k: torch.Tensor, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
        pos = positions(offset, q.shape[-2], q.device)
        return apply_rope(q, pos, self.base), apply_rope(k, pos, self.base)
