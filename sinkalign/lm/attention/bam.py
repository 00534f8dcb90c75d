"""BAM: causal attention with a per-head generalized-Gaussian log-prior and optional SSMax.

Logit of query position ``i`` (absolute) for key ``j <= i``::

    z_ij = c_i * <q_i, k_j> / sqrt(d_h)  -  exp(theta_a,h) * (|j - i - mu_h| + eps) ** theta_b,h

* ``theta_a`` (log scale), ``theta_b`` (shape; may go negative: then the prior suppresses
  local context and favours distant keys) and ``mu`` (location, 0 and frozen unless
  ``bam_learn_mu``) are per-head parameters. ``theta_b = 0`` is the uniform prior (NoPE),
  ``theta_b = 1`` a Laplace prior (ALiBi with slope ``exp(theta_a)``).
* SSMax (``bam_ssmax``): ``c_i = s_h * log(n_i)`` with ``n_i = i + 1`` the number of
  attended positions and a learnable ``s_h`` (initialised to 1); without SSMax ``c_i = 1``.
  As in the BAM authors' code, the scaling multiplies the content logits only; the prior
  is added unscaled.

Initialisation (``bam_init``): "uniform" (``theta_b = 0, theta_a = 0``; the paper's best
extrapolating choice) or "alibi" (``theta_b = 1``, ``exp(theta_a)`` = ALiBi slopes).

No ``L x L`` tensor is formed. Two implementations, same numbers:

* "chunked" (CPU and any device): queries in blocks of ``bam_chunk_size`` rows; each block
  forms its ``[B, H, C, keys so far]`` logits, takes an exact softmax and is wrapped in
  ``torch.utils.checkpoint`` when gradients are needed, so the backward pass recomputes a
  block instead of storing it. Peak memory is ``O(C * L)`` per head.
* "flex": ``torch.nn.attention.flex_attention`` with the prior and SSMax as a ``score_mod``
  and the causal mask as a block mask, compiled with ``torch.compile``. Under torch 2.13
  FlexAttention has no backward on CPU and its compiled CPU path rejects float64, so
  "auto" takes "flex" only on CUDA for blocks longer than ``bam_chunk_size`` (prefill and
  training), and "chunked" otherwise (CPU, and single-token decoding).
"""

from __future__ import annotations

import functools
import logging

import torch
import torch.utils.checkpoint
from torch import nn

from sinkalign.lm.attention.base import SoftmaxAttention, alibi_slopes
from sinkalign.lm.config import LMConfig

__all__ = ["BAMAttention", "bam_attention_chunked", "bam_attention_flex", "bam_log_prior"]

logger = logging.getLogger(__name__)


def bam_log_prior(rel: torch.Tensor, theta_a: torch.Tensor, theta_b: torch.Tensor, mu: torch.Tensor,
                  eps: float) -> torch.Tensor:
    """``-exp(theta_a) * (|rel - mu| + eps) ** theta_b`` for offsets ``rel = j - i``.

    ``rel [...]`` broadcast against per-head parameters ``[H]`` gives ``[H, ...]``. ``mu`` is
    the location itself (BAM's appendix C writes it ``e^{theta_mu} - e^{-theta_mu}``; the two
    agree at the default, a frozen ``mu = 0``). The prior is kept finite (at most a quarter of
    the dtype's largest value in size): ``eps ** theta_b`` overflowed in float32 for strongly
    negative ``theta_b``, and the first position, with one key, became NaN.
    """
    shape = (-1,) + (1,) * rel.ndim
    base = (rel[None] - mu.view(shape)).abs() + eps
    prior = -theta_a.view(shape).exp() * base.pow(theta_b.view(shape))
    return prior.clamp(min=torch.finfo(prior.dtype).min / 4)


def _bam_block(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, theta_a: torch.Tensor,
               theta_b: torch.Tensor, mu: torch.Tensor, s: torch.Tensor | None, *, q_start: int,
               eps: float, scale: float) -> torch.Tensor:
    """Exact attention of query rows at absolute positions ``q_start ..`` over keys ``0 .. Lk-1``."""
    out_dtype = q.dtype
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    q, k, v = q.to(work), k.to(work), v.to(work)
    lq, lk = q.shape[-2], k.shape[-2]
    qpos = torch.arange(q_start, q_start + lq, device=q.device)
    kpos = torch.arange(lk, device=q.device)
    logits = torch.matmul(q, k.transpose(-1, -2)) * scale  # [B, H, C, Lk]
    if s is not None:
        log_n = torch.log1p(qpos.to(work))  # log(i + 1)
        logits = logits * (s.to(work)[:, None, None] * log_n[None, :, None])
    rel = (kpos[None, :] - qpos[:, None]).to(work)  # [C, Lk]
    logits = logits + bam_log_prior(rel, theta_a.to(work), theta_b.to(work), mu.to(work), eps)
    logits = logits.masked_fill(kpos[None, :] > qpos[:, None], float("-inf"))
    return torch.matmul(torch.softmax(logits, dim=-1), v).to(out_dtype)


def bam_attention_chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, theta_a: torch.Tensor,
                          theta_b: torch.Tensor, mu: torch.Tensor, s: torch.Tensor | None, *,
                          q_offset: int, eps: float, scale: float, chunk_size: int) -> torch.Tensor:
    """BAM attention in query blocks (see the module docstring).

    Args:
        q: ``[B, H, Lq, d]`` queries at absolute positions ``q_offset .. q_offset + Lq - 1``.
        k, v: ``[B, H, Lk, d]`` keys/values at positions ``0 .. Lk - 1`` (``Lk = q_offset + Lq``).
        theta_a, theta_b, mu: ``[H]`` prior parameters; s: ``[H]`` SSMax scales or ``None``.
    Returns:
        ``[B, H, Lq, d]``.
    """
    if chunk_size < 1:
        raise ValueError(f"{chunk_size=} must be positive")
    lq = q.shape[-2]
    need_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (q, k, v, theta_a, theta_b, mu, s))
    outs = []
    for t0 in range(0, lq, chunk_size):
        t1 = min(t0 + chunk_size, lq)
        kend = q_offset + t1
        fn = functools.partial(_bam_block, q_start=q_offset + t0, eps=eps, scale=scale)
        args = (q[:, :, t0:t1], k[:, :, :kend], v[:, :, :kend], theta_a, theta_b, mu, s)
        if need_grad and lq > 1:
            outs.append(torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False))
        else:
            outs.append(fn(*args))
    return torch.cat(outs, dim=-2)


@functools.lru_cache(maxsize=1)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    logger.info("compiling FlexAttention for BAM (first call only)")
    return torch.compile(flex_attention)


def bam_attention_flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, theta_a: torch.Tensor,
                       theta_b: torch.Tensor, mu: torch.Tensor, s: torch.Tensor | None, *,
                       q_offset: int, eps: float, scale: float, compile: bool = True) -> torch.Tensor:
    """BAM attention through FlexAttention (``score_mod`` + causal block mask).

    Same arguments and result as :func:`bam_attention_chunked`. ``compile=False`` runs
    FlexAttention eagerly (forward only on CPU under torch 2.13; used by the CPU tests).
    """
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    lq, lk = q.shape[-2], k.shape[-2]
    offset = torch.tensor(q_offset, device=q.device)  # a tensor, so new offsets do not recompile
    log_scale = theta_a.float() if q.dtype != torch.float64 else theta_a
    shape = theta_b.float() if q.dtype != torch.float64 else theta_b
    loc = mu.float() if q.dtype != torch.float64 else mu
    ss = None if s is None else (s.float() if q.dtype != torch.float64 else s)

    def score_mod(score, b, h, q_idx, kv_idx):
        i = q_idx + offset
        if ss is not None:
            score = score * (ss[h] * torch.log1p(i.to(score.dtype)))
        rel = (kv_idx - i).to(score.dtype)
        prior = torch.exp(log_scale[h]) * ((rel - loc[h]).abs() + eps) ** shape[h]
        return score - prior.clamp(max=torch.finfo(score.dtype).max / 4)  # finite, as bam_log_prior

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    block_mask = create_block_mask(causal, None, None, lq, lk, device=q.device, _compile=compile)
    fn = _compiled_flex() if compile else flex_attention
    return fn(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)


class BAMAttention(SoftmaxAttention):
    """BAM multi-head causal attention (see the module docstring)."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__(config)
        h = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.theta_a = nn.Parameter(torch.zeros(h))
        self.theta_b = nn.Parameter(torch.zeros(h))
        self.mu = nn.Parameter(torch.zeros(h), requires_grad=config.bam_learn_mu)
        self.ssmax = nn.Parameter(torch.ones(h)) if config.bam_ssmax else None
        self.eps = float(config.bam_eps)
        self.impl = config.bam_impl
        self.chunk_size = config.bam_chunk_size
        self.reset_parameters()

    @torch.no_grad()
    def reset_special_parameters(self) -> None:
        """Prior per ``bam_init``; ``mu = 0``; SSMax ``s = 1``."""
        if self.config.bam_init == "uniform":
            self.theta_a.zero_()
            self.theta_b.zero_()
        else:  # "alibi"
            self.theta_a.copy_(torch.tensor(alibi_slopes(self.n_heads)).log())
            self.theta_b.fill_(1.0)
        self.mu.zero_()
        if self.ssmax is not None:
            self.ssmax.fill_(1.0)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self._split_heads(q), self._split_heads(k), self._split_heads(v)

    def _choose_impl(self, q: torch.Tensor) -> str:
        if self.impl != "auto":
            return self.impl
        return "flex" if q.is_cuda and q.shape[-2] > self.chunk_size else "chunked"

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int) -> torch.Tensor:
        impl = self._choose_impl(q)
        kwargs = dict(q_offset=offset, eps=self.eps, scale=self.scale)
        params = (self.theta_a, self.theta_b, self.mu, self.ssmax)
        if impl == "flex":
            return bam_attention_flex(q, k, v, *params, **kwargs)
        return bam_attention_chunked(q, k, v, *params, chunk_size=self.chunk_size, **kwargs)

    @torch.no_grad()
    def log_prior(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """Dense ``[H, Lq, Lk]`` log-prior (no causal mask), for inspection."""
        rel = k_pos.double()[None, :] - q_pos.double()[:, None]
        return bam_log_prior(rel, self.theta_a.double(), self.theta_b.double(), self.mu.double(), self.eps)
