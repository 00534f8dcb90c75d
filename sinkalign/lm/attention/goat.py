"""GOAT: attention with a learned log-prior realised inside one unmodified SDPA call.

The logit of query position ``i`` for key position ``j`` (``j <= i``) is::

    z_ij = <q_c,i, k_c,j> / sqrt(d_c)  +  K_rel(i - j)  +  u(j)

* Content subspace: ``q_c, k_c`` have ``d_c = d_h - 2R - 1`` dims per head; values keep
  the full ``d_h``.
* Relative prior: ``K_rel(d) = sum_r alpha_hr cos(w_r d) + beta_hr sin(w_r d)`` with
  fixed geometric frequencies ``w_r = 2 pi / P_r`` (periods ``P_r`` geometric from
  ``goat_min_period`` to ``goat_max_period``; a single frequency uses the longest period)
  and learnable per-head weights ``alpha`` (symmetric) and ``beta`` (antisymmetric).
* Sink prior: a key-only bias ``u_h(j) = lambda_h * j / max_train_len + MLP_h(f(j))`` with
  a learned linear decay ``lambda_h`` and a small MLP over ``f(j) = [sin(w'_k j),
  cos(w'_k j)]_k + [log1p(j) / log1p(max_train_len)]`` (sinusoids at
  ``goat_sink_n_freqs`` geometric periods in the same range, and a length-normalised
  scalar). The scalar is normalised by the *training* length, not the current sequence
  length, so ``u(j)`` of a cached key never changes during generation; its logarithm
  grows slowly beyond the training length (1.4 at 8x for ``max_train_len=128``).

Composite vectors (paper eq. 20-21) so that SDPA's default ``1/sqrt(d_h)`` scaling yields
exactly ``z_ij``::

    q~_i = [ q_c,i * sqrt(d_h/d_c),  q_rel,i * sqrt(d_h),  sqrt(d_h) ]      (d_h dims)
    k~_j = [ k_c,j,                   k_rel,j,              u(j)      ]      (d_h dims)
    q_rel,i^(r) = [alpha_r cos(w_r i) + beta_r sin(w_r i),  alpha_r sin(w_r i) - beta_r cos(w_r i)]
    k_rel,j^(r) = [cos(w_r j), sin(w_r j)]

so ``<q~_i, k~_j> / sqrt(d_h) = z_ij``. Queries, keys and values all have ``d_h`` dims and
there is no bias tensor, so the flash kernel runs it (``is_causal=True``) with no dense
``L x L`` term; cached keys are stored augmented.

Initialisation (``goat_init``); the sink MLP output layer starts at zero in every mode:

* "uniform": ``alpha = beta = 0``, ``lambda = 0``: a uniform prior, the layer starts as NoPE.
* "alibi": per head, ``alpha, beta`` (and a free constant, dropped since softmax ignores
  it) are ridge-least-squares fitted to the ALiBi recency ``-m_h d`` over the causal lags
  ``d = 0 .. max_train_len - 1`` (:func:`fit_alibi_fourier`); ``lambda = 0``. With the
  default periods (3 .. 16 x ``max_train_len``) the RMS residual is about 1% of the
  ramp's range for R = 4 and 0.2% for R = 8 (``max_train_len`` 128). Past the training
  window the fit is a bounded trigonometric polynomial, not a ramp: it does not keep
  decreasing and can rise again at long lags (the bounded-prior behaviour the paper
  argues for; the longest period, 16x the window, keeps it from wrapping round within
  8x). For ALiBi's unbounded recency at every length use "alibi_sink".
* "alibi_sink": ``alpha = beta = 0`` and ``lambda_h = m_h * max_train_len``, so that
  ``u(j) = m_h j``: under the causal mask a key-linear bias equals ALiBi's ``-m_h (i - j)``
  exactly, at every length (paper, Prop. F.6), with the Fourier part free to learn.

Precision note: ``u(j)`` enters the key in the working dtype; in bf16 keep ``|u|`` small
(a large learned ``lambda`` at long lengths loses absolute precision).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from sinkalign.lm.attention.base import SoftmaxAttention, alibi_slopes, positions
from sinkalign.lm.config import LMConfig

__all__ = ["GoatAttention", "SinkBias", "fit_alibi_fourier", "geometric_frequencies"]


def geometric_frequencies(n: int, min_period: float, max_period: float) -> torch.Tensor:
    """``[n]`` float64 angular frequencies ``2 pi / P`` with periods geometric in [min, max].

    Ordered from the shortest period to the longest; ``n == 1`` gives the longest period.
    """
    if n == 1:
        periods = torch.tensor([max_period], dtype=torch.float64)
    else:
        periods = min_period * (max_period / min_period) ** (torch.arange(n, dtype=torch.float64) / (n - 1))
    return 2.0 * math.pi / periods


def fit_alibi_fourier(omega: torch.Tensor, slopes: list[float] | torch.Tensor, length: int,
                      ridge: float = 1e-4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fit ``sum_r a_r cos(w_r d) + b_r sin(w_r d) + c ~= -m d`` over lags ``d = 0 .. length-1``.

    Ridge least squares in float64 (penalty ``ridge * length`` on ``a, b``; the constant
    ``c`` is free and unpenalised because a per-row constant does not change a softmax).

    Args:
        omega: ``[R]`` angular frequencies.
        slopes: ``[H]`` recency slopes ``m_h``.
        length: number of lags fitted (the training length).
    Returns:
        ``(alpha [H, R], beta [H, R], rms [H])``: weights and the RMS residual of the fit
        (in logits, over the fitted lags).
    """
    omega = omega.to(torch.float64)
    m = torch.as_tensor(slopes, dtype=torch.float64)
    d = torch.arange(length, dtype=torch.float64)
    ang = d[:, None] * omega[None, :]
    phi = torch.cat([torch.ones(length, 1, dtype=torch.float64), ang.cos(), ang.sin()], dim=1)  # [n, 1+2R]
    target = -m[None, :] * d[:, None]  # [n, H]
    pen = torch.full((phi.shape[1],), ridge * length, dtype=torch.float64)
    pen[0] = 0.0
    coef = torch.linalg.solve(phi.T @ phi + torch.diag(pen), phi.T @ target)  # [1+2R, H]
    resid = phi @ coef - target
    r = omega.numel()
    return coef[1 : 1 + r].T.contiguous(), coef[1 + r :].T.contiguous(), resid.pow(2).mean(0).sqrt()


class SinkBias(nn.Module):
    """Key-only log-prior ``u(j)``: learned linear decay + MLP over position features.

    ``forward(pos [L] float64, dtype) -> [H, L]``.
    """

    def __init__(self, n_heads: int, max_train_len: int, hidden: int, n_freqs: int,
                 min_period: float, max_period: float) -> None:
        super().__init__()
        self.max_train_len = int(max_train_len)
        # float64 on the CPU, deliberately not a buffer: ``model.to(bfloat16)`` must not round it
        self.omega = geometric_frequencies(n_freqs, min_period, max_period)
        self.slope = nn.Parameter(torch.zeros(n_heads))
        self.fc1 = nn.Linear(2 * n_freqs + 1, hidden)
        self.fc2 = nn.Linear(hidden, n_heads)

    def features(self, pos: torch.Tensor) -> torch.Tensor:
        """``[L, 2 n_freqs + 1]`` float64 features of float64 positions ``[L]``."""
        ang = pos[:, None] * self.omega.to(pos.device)[None, :]
        norm = torch.log1p(pos) / math.log1p(self.max_train_len)
        return torch.cat([ang.sin(), ang.cos(), norm[:, None]], dim=1)

    def forward(self, pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        f = self.features(pos).to(dtype)
        mlp = self.fc2(F.gelu(self.fc1(f)))  # [L, H]
        lin = self.slope.to(dtype)[None, :] * (pos / self.max_train_len).to(dtype)[:, None]
        return (mlp + lin).T


class GoatAttention(SoftmaxAttention):
    """GOAT multi-head causal attention (see the module docstring)."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__(config)
        h, dh, r = config.n_heads, config.head_dim, config.goat_n_freqs
        self.n_freqs = r
        self.content_dim = dh - 2 * r - 1
        if self.content_dim < 1:
            raise ValueError(f"goat_n_freqs={r} leaves no content dims for head_dim={dh}")
        self.wq = nn.Linear(config.d_model, h * self.content_dim, bias=False)
        self.wk = nn.Linear(config.d_model, h * self.content_dim, bias=False)
        self.wv = nn.Linear(config.d_model, config.d_model, bias=False)
        pmin, pmax = config.goat_periods
        # float64 on the CPU, deliberately not a buffer: ``model.to(bfloat16)`` must not round it
        self.omega = geometric_frequencies(r, pmin, pmax)
        self.alpha = nn.Parameter(torch.zeros(h, r))
        self.beta = nn.Parameter(torch.zeros(h, r))
        self.sink = SinkBias(h, config.max_train_len, config.goat_sink_hidden, config.goat_sink_n_freqs, pmin, pmax)
        self.reset_parameters()

    @torch.no_grad()
    def reset_special_parameters(self) -> None:
        """Sink MLP: default ``nn.Linear`` init for the hidden layer, zeros for the output
        layer; then :meth:`init_prior` with ``goat_init``."""
        self.sink.fc1.reset_parameters()
        nn.init.zeros_(self.sink.fc2.weight)
        nn.init.zeros_(self.sink.fc2.bias)
        self.init_prior(self.config.goat_init)

    @torch.no_grad()
    def init_prior(self, mode: str) -> None:
        """Set ``alpha, beta`` and the sink slope per ``mode`` (see the module docstring)."""
        if mode not in ("uniform", "alibi", "alibi_sink"):
            raise ValueError(f"goat init {mode!r} is not one of 'uniform', 'alibi', 'alibi_sink'")
        if mode == "alibi":
            a, b, _ = fit_alibi_fourier(self.omega, alibi_slopes(self.n_heads), self.config.max_train_len)
            self.alpha.copy_(a)
            self.beta.copy_(b)
        else:
            self.alpha.zero_()
            self.beta.zero_()
        if mode == "alibi_sink":
            slopes = torch.tensor(alibi_slopes(self.n_heads), dtype=torch.float64)
            self.sink.slope.copy_(slopes * self.config.max_train_len)
        else:
            self.sink.slope.zero_()

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Content ``q_c, k_c [B, H, L, d_c]`` and values ``[B, H, L, d_h]``."""
        return self._split_heads(self.wq(x)), self._split_heads(self.wk(x)), self._split_heads(self.wv(x))

    def fourier_features(self, pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q_rel [H, L, 2R], k_rel [L, 2R])`` at float64 positions ``pos [L]``."""
        ang = pos[:, None] * self.omega.to(pos.device)[None, :]  # [L, R]
        cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)
        a = self.alpha.to(dtype)[:, None, :]  # [H, 1, R]
        b = self.beta.to(dtype)[:, None, :]
        q_rel = torch.stack([a * cos + b * sin, a * sin - b * cos], dim=-1).flatten(-2)  # [H, L, 2R]
        k_rel = torch.stack([cos, sin], dim=-1).flatten(-2)  # [L, 2R]
        return q_rel, k_rel

    def position(self, q: torch.Tensor, k: torch.Tensor, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Build the composite ``q~, k~ [B, H, L, d_h]`` from content ``q_c, k_c``."""
        bsz, h, length, dc = q.shape
        dh, dtype = self.head_dim, q.dtype
        pos = positions(offset, length, q.device)
        q_rel, k_rel = self.fourier_features(pos, dtype)
        u = self.sink(pos, dtype)  # [H, L]
        root = math.sqrt(dh)
        q_aug = torch.cat([
            q * math.sqrt(dh / dc),
            (q_rel * root).unsqueeze(0).expand(bsz, h, length, 2 * self.n_freqs),
            q.new_full((bsz, h, length, 1), root),
        ], dim=-1)
        k_aug = torch.cat([
            k,
            k_rel.expand(bsz, h, length, 2 * self.n_freqs),
            u[None, :, :, None].expand(bsz, h, length, 1),
        ], dim=-1)
        return q_aug, k_aug

    @torch.no_grad()
    def log_prior(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """Dense ``[H, Lq, Lk]`` log-prior ``K_rel(i - j) + u(j)`` (no causal mask), for inspection."""
        q_pos = q_pos.to(torch.float64)
        k_pos = k_pos.to(torch.float64)
        lag = q_pos[:, None] - k_pos[None, :]
        ang = lag[..., None] * self.omega.to(lag.device)
        rel = (ang.cos() * self.alpha.double()[:, None, None, :]
               + ang.sin() * self.beta.double()[:, None, None, :]).sum(-1)
        return rel + self.sink(k_pos, self.alpha.dtype).double()[:, None, :]
