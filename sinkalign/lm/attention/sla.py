"""SLA: softmax linear attention -- head-wise softmax gates over a decaying linear attention.

Per head ``h`` the recurrent memory ``S_h [d_k, d_v]`` evolves as::

    S_h,t = diag(a_h,t) S_h,t-1 + (G^K_h,t k_h,t)^T v_h,t
    o_h,t = (G^Q_h,t q_h,t) S_h,t

with ``G^Q_t = softmax_h(q_t W_GQ)`` and ``G^K_t = softmax_h(k_t W_GK)`` (softmax over the
*heads*, from the full ``[H * d_h]`` query / key; "read" and "write" competition), the
identity feature map, and the decay ``a`` of the backbone:

* "gla" (gated linear attention): data-dependent, per key dim,
  ``log a_t = logsigmoid(x_t W_1 W_2 + b) / tau`` (low-rank ``W_1 W_2``).
* "retnet": fixed per head, ``a_h = 1 - 2 ** (-5 - h)`` for every ``t`` and key dim. As the
  SLA paper's equations 10-11 print it: no rotation of q and k by position (RetNet itself, and
  the multi-scale retention layer of flash-linear-attention, also rotate them), so positions
  enter only through the decay.

Queries are scaled by ``d_k ** -0.5``. Each head's output is RMS-normalised, multiplied by
a SiLU output gate ``silu(x W_g)`` (both backbones have one) and projected back.

Three forms of the same operator (:func:`chunk_linear_attention`,
:func:`recurrent_linear_attention`, and the quadratic reference
:func:`sinkalign.lm.attention.reference.naive_linear_attention`) agree to rounding. The
layer uses the chunkwise-parallel form for ``L > 1`` and the recurrent form for single-token
steps; its cache is a :class:`RecurrentState`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from sinkalign.lm.attention.base import CausalSelfAttention, RecurrentState
from sinkalign.lm.config import LMConfig

__all__ = ["SLAAttention", "chunk_linear_attention", "recurrent_linear_attention"]


def _check_linear_inputs(q, k, v, log_decay, initial_state):
    if q.ndim != 4 or k.shape != q.shape or log_decay.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"expected q, k, log_decay [B, H, L, d_k] and v [B, H, L, d_v]; got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}, log_decay {tuple(log_decay.shape)}"
        )
    b, h, _, dk = q.shape
    dv = v.shape[-1]
    if initial_state is not None and initial_state.shape != (b, h, dk, dv):
        raise ValueError(f"initial_state must be [B, H, d_k, d_v] = {(b, h, dk, dv)}, "
                         f"got {tuple(initial_state.shape)}")


def recurrent_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_decay: torch.Tensor,
                               initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Step-by-step form: ``S_t = exp(g_t)[:, None] * S_t-1 + k_t^T v_t``, ``o_t = q_t S_t``.

    Args:
        q, k: ``[B, H, L, d_k]`` (gates already applied); v: ``[B, H, L, d_v]``.
        log_decay: ``[B, H, L, d_k]`` log of the decay ``a_t`` (``<= 0``).
        initial_state: ``[B, H, d_k, d_v]`` or ``None`` (zeros).
    Returns:
        ``(o [B, H, L, d_v], final_state [B, H, d_k, d_v])``.
    """
    _check_linear_inputs(q, k, v, log_decay, initial_state)
    b, h, length, dk = q.shape
    state = initial_state if initial_state is not None else q.new_zeros(b, h, dk, v.shape[-1])
    outs = []
    for t in range(length):
        state = log_decay[:, :, t, :, None].exp() * state + k[:, :, t, :, None] * v[:, :, t, None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], state))
    return torch.stack(outs, dim=2), state


# Largest within-chunk log-decay span for which the factorised intra-chunk form is used:
# its factors exp(b_t) and exp(-b_s) then stay far from under/overflow in the working dtype.
_FACTORISED_SPAN = {torch.float32: 60.0, torch.float64: 600.0}


def chunk_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_decay: torch.Tensor,
                           initial_state: torch.Tensor | None = None, *,
                           chunk_size: int = 32, factorised: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunkwise-parallel form of :func:`recurrent_linear_attention` (same arguments/result).

    Within a chunk with inclusive cumulative log-decay ``b_t`` (relative to the chunk
    start), with ``S`` the state entering the chunk::

        o_t   = (q_t * exp(b_t)) S  +  sum_{s <= t} [sum_c q_tc k_sc exp(b_tc - b_sc)] v_s
        S_out = exp(b_last)[:, None] * S + sum_s (k_s * exp(b_last - b_s))^T v_s

    The intra-chunk scores are formed in one of two exact ways:

    * factorised: ``(q_t * exp(b_t)) . (k_s * exp(-b_s))``, one ``[C, d_k] x [d_k, C]``
      matmul per chunk, then the causal mask. ``exp(-b_s) <= exp(span)`` where ``span`` is
      the chunk's total log decay, so this is used only when every chunk's span is at most
      60 (float32) / 600 (float64): the factors stay within range and each product
      carries the same relative rounding as the direct form.
    * pairwise: the decay ``exp(b_t - b_s)`` is formed per pair, ``[C, C, d_k]``, masked
      before ``exp``; every exponent is ``<= 0``, safe for any decay, ``C`` times the work.

    ``factorised=None`` chooses per call (one reduction over ``log_decay``); ``True`` /
    ``False`` force a form (tests). float16/bfloat16 inputs are computed in float32. The
    last chunk may be shorter.
    """
    _check_linear_inputs(q, k, v, log_decay, initial_state)
    if chunk_size < 1:
        raise ValueError(f"{chunk_size=} must be positive")
    out_dtype = q.dtype
    work = q.dtype if q.dtype in _FACTORISED_SPAN else torch.float32
    q, k, v, log_decay = (t.to(work) for t in (q, k, v, log_decay))
    b, h, length, dk = q.shape
    state = initial_state.to(work) if initial_state is not None else q.new_zeros(b, h, dk, v.shape[-1])
    if factorised is None:
        n_chunks = -(-length // chunk_size)
        padded = torch.nn.functional.pad(log_decay.detach(), (0, 0, 0, n_chunks * chunk_size - length))
        span = -float(padded.view(b, h, n_chunks, chunk_size, dk).sum(dim=3).min())
        factorised = span <= _FACTORISED_SPAN[work]
    outs = []
    for t0 in range(0, length, chunk_size):
        t1 = min(t0 + chunk_size, length)
        qc, kc, vc = q[:, :, t0:t1], k[:, :, t0:t1], v[:, :, t0:t1]
        cum = log_decay[:, :, t0:t1].cumsum(dim=2)  # [B, H, C, d_k], b_t
        c = t1 - t0
        causal = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()  # [t, s]: s <= t
        q_dec = qc * cum.exp()
        if factorised:
            scores = torch.matmul(q_dec, (kc * (-cum).exp()).transpose(-1, -2)).masked_fill(~causal, 0.0)
        else:
            diff = cum[:, :, :, None, :] - cum[:, :, None, :, :]  # [B, H, C, C, d_k], b_t - b_s
            decay = torch.where(causal[:, :, None], diff, diff.new_full((), float("-inf"))).exp()
            scores = torch.einsum("bhtk,bhsk,bhtsk->bhts", qc, kc, decay)
        o = torch.matmul(scores, vc) + torch.matmul(q_dec, state)
        last = cum[:, :, -1:, :]  # [B, H, 1, d_k]
        state = last.transpose(-1, -2).exp() * state + torch.matmul((kc * (last - cum).exp()).transpose(-1, -2), vc)
        outs.append(o)
    return torch.cat(outs, dim=2).to(out_dtype), state.to(out_dtype)


class SLAAttention(CausalSelfAttention):
    """Softmax linear attention with a GLA or RetNet backbone (see the module docstring)."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__(config)
        d, h = config.d_model, config.n_heads
        self.backbone = config.sla_backbone
        self.chunk_size = config.sla_chunk_size
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, d, bias=False)
        self.wv = nn.Linear(d, d, bias=False)
        self.gate_q = nn.Linear(d, h, bias=False)  # W_GQ
        self.gate_k = nn.Linear(d, h, bias=False)  # W_GK
        if self.backbone == "gla":
            self.decay_down = nn.Linear(d, config.sla_gate_rank, bias=False)
            self.decay_up = nn.Linear(config.sla_gate_rank, d, bias=True)
            self.tau = float(config.sla_gla_tau)
        else:
            gamma = 1.0 - 2.0 ** (-5.0 - torch.arange(h, dtype=torch.float64))
            self.log_gamma = gamma.log()  # float64 CPU, not a buffer (dtype casts must not round it)
        self.head_norm = nn.RMSNorm(self.head_dim, eps=config.norm_eps)
        self.out_gate = nn.Linear(d, d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_special_parameters(self) -> None:
        """GLA decay projection: default ``nn.Linear`` init (so the low-rank gate starts
        data-dependent, decays around ``0.5 ** (1/tau)``); head norm weight 1."""
        if self.backbone == "gla":
            self.decay_down.reset_parameters()
            self.decay_up.reset_parameters()
        self.head_norm.reset_parameters()

    def log_decay(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, H, L, d_k]`` log decay (``<= 0``) for the backbone."""
        bsz, length, _ = x.shape
        if self.backbone == "gla":
            g = F.logsigmoid(self.decay_up(self.decay_down(x))) / self.tau  # [B, L, D]
            return self._split_heads(g)
        g = self.log_gamma.to(device=x.device, dtype=x.dtype)[None, :, None, None]
        return g.expand(bsz, self.n_heads, length, self.head_dim)

    def gated_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(G^Q q * d_k**-0.5, G^K k, v)``, each ``[B, H, L, d_h]``."""
        q_flat, k_flat = self.wq(x), self.wk(x)
        gq = torch.softmax(self.gate_q(q_flat), dim=-1).transpose(1, 2)[..., None]  # [B, H, L, 1]
        gk = torch.softmax(self.gate_k(k_flat), dim=-1).transpose(1, 2)[..., None]
        q = self._split_heads(q_flat) * (gq / math.sqrt(self.head_dim))
        k = self._split_heads(k_flat) * gk
        return q, k, self._split_heads(self.wv(x))

    def readout(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Head norm, output gate and projection: ``o [B, H, L, d_v], x -> [B, L, D]``."""
        return self.out(self._merge_heads(self.head_norm(o)) * F.silu(self.out_gate(x)))

    def forward(self, x: torch.Tensor, *, cache: RecurrentState | None = None, return_cache: bool = False):
        """``x [B, L, D] -> y [B, L, D]`` (and the new :class:`RecurrentState` if ``return_cache``)."""
        offset = self._check_input(x, cache, RecurrentState)
        q, k, v = self.gated_qkv(x)
        g = self.log_decay(x)
        s0 = cache.state if cache is not None else None
        if x.shape[1] == 1:
            o, state = recurrent_linear_attention(q, k, v, g, s0)
        else:
            o, state = chunk_linear_attention(q, k, v, g, s0, chunk_size=self.chunk_size)
        y = self.readout(o, x)
        if return_cache:
            return y, RecurrentState(state=state, offset=offset + x.shape[1])
        return y
