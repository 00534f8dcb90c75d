"""Plain references of every attention layer: dense ``L x L`` logits built the obvious way.

Each ``*_reference(layer, x)`` takes a layer and ``x [B, L, D]`` and recomputes the layer's
output from its parameters with an explicit ``[B, H, L, L]`` logit tensor (explicit bias,
explicit causal mask, ``softmax``), sharing only the layer's input projections and
read-out. They exist for the tests (run them in float64) and for debugging; nothing here
is fast. ``reference_forward`` dispatches on the layer type.

What each reference checks: GOAT -- the composite-vector trick against
``content / sqrt(d_c) + sum_r alpha cos + beta sin + u(j)``; BAM -- the chunked /
FlexAttention kernels against the dense generalized-Gaussian prior and SSMax; RoPE -- the
rotate-half kernel against complex multiplication; ALiBi / NoPE -- SDPA against explicit
softmax; SLA -- the chunkwise and recurrent forms against the quadratic form with the
explicit pairwise decay.
"""

from __future__ import annotations

import math

import torch

from sinkalign.lm.attention.alibi import ALiBiAttention
from sinkalign.lm.attention.bam import BAMAttention
from sinkalign.lm.attention.base import CausalSelfAttention, alibi_slopes
from sinkalign.lm.attention.goat import GoatAttention
from sinkalign.lm.attention.nope import NoPEAttention
from sinkalign.lm.attention.rope import RoPEAttention
from sinkalign.lm.attention.sla import SLAAttention

__all__ = [
    "alibi_reference",
    "bam_reference",
    "dense_causal_attention",
    "goat_reference",
    "naive_linear_attention",
    "nope_reference",
    "reference_forward",
    "rope_reference",
    "sla_reference",
]


def dense_causal_attention(logits: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``softmax(logits + causal mask) @ v`` with ``logits [B, H, L, L]``, ``v [B, H, L, d]``."""
    length = logits.shape[-1]
    i = torch.arange(length, device=logits.device)
    future = i[None, :] > i[:, None]
    return torch.softmax(logits.masked_fill(future, float("-inf")), dim=-1) @ v


def _lags(length: int, device) -> torch.Tensor:
    """``[L, L]`` float64 matrix of ``i - j``."""
    i = torch.arange(length, device=device, dtype=torch.float64)
    return i[:, None] - i[None, :]


def _finish(layer, o: torch.Tensor) -> torch.Tensor:
    return layer.out(layer._merge_heads(o))


def goat_reference(layer: GoatAttention, x: torch.Tensor) -> torch.Tensor:
    """``softmax(q_c k_c^T / sqrt(d_c) + sum_r [alpha cos(w d) + beta sin(w d)] + u(j))``."""
    qc, kc, v = layer.project(x)
    length, dtype = x.shape[1], x.dtype
    lag = _lags(length, x.device)
    ang = lag[..., None] * layer.omega.to(lag.device)  # [L, L, R]
    rel = (ang.cos().to(dtype) * layer.alpha[:, None, None, :]
           + ang.sin().to(dtype) * layer.beta[:, None, None, :]).sum(-1)  # [H, L, L]
    u = layer.sink(torch.arange(length, device=x.device, dtype=torch.float64), dtype)  # [H, L]
    logits = qc @ kc.transpose(-1, -2) / math.sqrt(layer.content_dim) + rel + u[:, None, :]
    return _finish(layer, dense_causal_attention(logits, v))


def bam_reference(layer: BAMAttention, x: torch.Tensor) -> torch.Tensor:
    """``softmax(c_i q k^T / sqrt(d) - exp(theta_a) (|j - i - mu| + eps)^theta_b)``."""
    q, k, v = layer.project(x)
    length, dtype = x.shape[1], x.dtype
    logits = q @ k.transpose(-1, -2) / math.sqrt(layer.head_dim)
    if layer.ssmax is not None:
        n = torch.arange(1, length + 1, device=x.device, dtype=dtype)  # attended positions
        logits = logits * (layer.ssmax[:, None, None] * torch.log(n)[None, :, None])
    rel = -_lags(length, x.device).to(dtype)  # j - i
    prior = -torch.exp(layer.theta_a)[:, None, None] * (
        (rel[None] - layer.mu[:, None, None]).abs() + layer.eps) ** layer.theta_b[:, None, None]
    return _finish(layer, dense_causal_attention(logits + prior, v))


def rope_reference(layer: RoPEAttention, x: torch.Tensor) -> torch.Tensor:
    """RoPE as complex multiplication ``(x_m + i x_{m+d/2}) * exp(i pos theta_m)``."""
    q, k, v = layer.project(x)
    length, d = x.shape[1], layer.head_dim
    half = d // 2
    theta = layer.base ** (-torch.arange(half, dtype=torch.float64, device=x.device) * 2.0 / d)
    rot = torch.polar(torch.ones(length, half, dtype=torch.float64, device=x.device),
                      torch.arange(length, dtype=torch.float64, device=x.device)[:, None] * theta)

    def rotate(t):
        z = torch.complex(t[..., :half].double(), t[..., half:].double()) * rot
        return torch.cat([z.real, z.imag], dim=-1).to(t.dtype)

    logits = rotate(q) @ rotate(k).transpose(-1, -2) / math.sqrt(d)
    return _finish(layer, dense_causal_attention(logits, v))


def alibi_reference(layer: ALiBiAttention, x: torch.Tensor) -> torch.Tensor:
    """``softmax(q k^T / sqrt(d) - m_h (i - j))``."""
    q, k, v = layer.project(x)
    slopes = torch.tensor(alibi_slopes(layer.n_heads), dtype=x.dtype, device=x.device)
    bias = -slopes[:, None, None] * _lags(x.shape[1], x.device).to(x.dtype)
    logits = q @ k.transpose(-1, -2) / math.sqrt(layer.head_dim) + bias
    return _finish(layer, dense_causal_attention(logits, v))


def nope_reference(layer: NoPEAttention, x: torch.Tensor) -> torch.Tensor:
    """``softmax(q k^T / sqrt(d))`` under the causal mask."""
    q, k, v = layer.project(x)
    logits = q @ k.transpose(-1, -2) / math.sqrt(layer.head_dim)
    return _finish(layer, dense_causal_attention(logits, v))


def naive_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_decay: torch.Tensor,
                           initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Quadratic form of gated linear attention with the explicit pairwise decay.

    ``o_t = sum_{s <= t} sum_c q_tc k_sc exp(B_tc - B_sc) v_s + (q_t * exp(B_t)) S_0`` with
    ``B_t = sum_{r <= t} log_decay_r``; ``S_L = exp(B_L) S_0 + sum_s (k_s exp(B_L - B_s))^T v_s``.
    Shapes as in :func:`sinkalign.lm.attention.sla.recurrent_linear_attention`; builds a
    ``[B, H, L, L, d_k]`` tensor.
    """
    length = q.shape[2]
    cum = log_decay.cumsum(dim=2)  # [B, H, L, dk]
    diff = cum[:, :, :, None, :] - cum[:, :, None, :, :]  # [B, H, t, s, dk]
    allowed = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
    decay = torch.where(allowed[:, :, None], diff, torch.full_like(diff, float("-inf"))).exp()
    scores = (q[:, :, :, None, :] * k[:, :, None, :, :] * decay).sum(-1)  # [B, H, L, L]
    o = scores @ v
    last = cum[:, :, -1, :]  # [B, H, dk]
    final = ((k * (last[:, :, None, :] - cum).exp())[..., :, None] * v[..., None, :]).sum(2)
    if initial_state is not None:
        o = o + (q * cum.exp()) @ initial_state
        final = final + last.exp()[..., None] * initial_state
    return o, final


def sla_reference(layer: SLAAttention, x: torch.Tensor) -> torch.Tensor:
    """SLA through :func:`naive_linear_attention` (same gates, decay and read-out)."""
    q, k, v = layer.gated_qkv(x)
    o, _ = naive_linear_attention(q, k, v, layer.log_decay(x))
    return layer.readout(o, x)


_REFERENCES = {
    GoatAttention: goat_reference,
    BAMAttention: bam_reference,
    RoPEAttention: rope_reference,
    ALiBiAttention: alibi_reference,
    NoPEAttention: nope_reference,
    SLAAttention: sla_reference,
}


def reference_forward(layer: CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """Dense reference output ``[B, L, D]`` of ``layer`` at positions ``0 .. L-1``."""
    fn = _REFERENCES.get(type(layer))
    if fn is None:
        raise ValueError(f"no reference for {type(layer).__name__}; known: "
                         f"{', '.join(t.__name__ for t in _REFERENCES)}")
    return fn(layer, x)
