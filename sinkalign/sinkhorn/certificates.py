"""Certificates for the tail-refinement surrogate (Propositions 4, 5, 6 and Corollary 2).

All functions take a prepared problem on an explicit support (use
:func:`sinkalign.sinkhorn.core.prepare` and :class:`~sinkalign.sinkhorn.support.Support`,
or the dustbin :func:`~sinkalign.sinkhorn.dustbin.augment`), so they apply unchanged to
the balanced and the dustbin-augmented problems.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sinkalign.sinkhorn import core
from sinkalign.sinkhorn.config import SinkhornConfig
from sinkalign.sinkhorn.support import Support

__all__ = [
    "BiasCertificate",
    "ContractionCertificate",
    "OrbitReconstruction",
    "TailDepthSelection",
    "bias_certificate",
    "contraction_certificate",
    "full_gradient",
    "orbit_reconstruction",
    "select_tail_depth",
]


# --------------------------------------------------------------------------------------
# Proposition 4: projective contraction per strictly positive active block
# --------------------------------------------------------------------------------------
class ContractionCertificate(NamedTuple):
    """Birkhoff-Hopf contraction coefficients, one entry per active row block.

    Attributes:
        rho_h: tanh^2(Delta / 4), Delta the projective diameter of exp(S) on the block.
        rho_range: the cheaper bound tanh^2(range(S) / 2) >= rho_h.
        delta: the projective diameter Delta.
        rows, cols: active rows and columns of each block (the block is rows x cols,
            the largest strictly positive block over those rows).
        batch_index: which batch element each block belongs to.
    """

    rho_h: np.ndarray
    rho_range: np.ndarray
    delta: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    batch_index: list


def projective_diameter(S: np.ndarray) -> float:
    """Delta = max_{i,i',j,j'} S_ij + S_i'j' - S_ij' - S_i'j for a dense block S [m, n]."""
    S = np.asarray(S, np.float64)
    if S.shape[0] < 2 or S.shape[1] < 2:
        return 0.0
    # max_j (S_ij - S_i'j) for every row pair, chunked over i to bound memory.
    m = np.empty((S.shape[0], S.shape[0]))
    for lo in range(0, S.shape[0], 64):
        m[lo : lo + 64] = (S[lo : lo + 64, None, :] - S[None, :, :]).max(-1)
    return float((m + m.T).max())


def contraction_certificate(
    q, k, q_valid, k_valid, support: Support, cfg: SinkhornConfig, *, block_rows: int = 128
) -> ContractionCertificate:
    """Proposition 4 on every row block of ``block_rows`` active queries.

    For each block of rows, the block's columns are the keys active for *every* row of
    the block (masked entries and dustbin fillers are excluded, as the proposition
    requires a strictly positive block). Scores use the scaled convention S = q k^T /
    (sqrt(d) eps). Dense diagnostics: O(block_rows * Lk) memory per block.
    """
    if block_rows < 1:
        raise ValueError(f"{block_rows=} must be positive")
    scale = core._scale(q.shape[-1], cfg.eps)
    mask = np.asarray(support.densify([m.astype(q.dtype) for m in support.masks(q_valid, k_valid)])) > 0
    qn = np.asarray(q, np.float64).reshape((-1,) + q.shape[-2:])
    kn = np.asarray(k, np.float64).reshape((-1,) + k.shape[-2:])
    mask = mask.reshape((-1,) + mask.shape[-2:])
    batch_shape = q.shape[:-2]
    rho, rng_b, deltas, nrows, ncols, where = [], [], [], [], [], []
    for b in range(qn.shape[0]):
        active_rows = np.flatnonzero(mask[b].any(-1))
        for lo in range(0, active_rows.size, block_rows):
            rows = active_rows[lo : lo + block_rows]
            cols = np.flatnonzero(mask[b][rows].all(0))
            if cols.size == 0:
                continue
            S = (qn[b][rows] @ kn[b][cols].T) * scale
            delta = projective_diameter(S)
            rho.append(np.tanh(delta / 4.0) ** 2)
            rng_b.append(np.tanh((S.max() - S.min()) / 2.0) ** 2)
            deltas.append(delta)
            nrows.append(rows.size)
            ncols.append(cols.size)
            where.append(np.unravel_index(b, batch_shape) if batch_shape else ())
    return ContractionCertificate(
        np.asarray(rho), np.asarray(rng_b), np.asarray(deltas), np.asarray(nrows), np.asarray(ncols), where
    )


def sinkhorn_step_map(support, S, prob, v):
    """The full step v -> colstep(rowstep(v)) (the map Proposition 4 contracts)."""
    u = core._row_step(support, S, prob.masks, v, prob.log_a, prob.row_active)
    return core._col_step(support, S, prob.masks, u, prob.log_b, prob.col_active)


# --------------------------------------------------------------------------------------
# Proposition 5 / Corollary 2: a-posteriori bias certificate and certified depth
# --------------------------------------------------------------------------------------
class BiasCertificate(NamedTuple):
    """Proposition 5 for one problem and one output cotangent.

    Attributes:
        surrogate: (dq, dk, dv) of the stopped-base surrogate.
        certificate: (cq, ck) = D_x z_T(x)^T eta, the VJP of the base solve applied to the
            discarded base cotangent eta = (u_bar^(0), v_bar^(0)).
        eta_norm: max |eta|.
        norm: max-abs norm of the certificate (the omitted gradient, exactly).
    """

    surrogate: tuple
    certificate: tuple
    eta_norm: float
    norm: float


def _base_duals(q, k, q_valid, k_valid, log_a, log_b, support, cfg):
    S = support.scores(q, k, core._scale(q.shape[-1], cfg.eps))
    prob = core._problem(support, q_valid, k_valid, log_a, log_b, q.dtype)
    return core.base_solve(support, S, prob, cfg.n_iters)


def bias_certificate(q, k, v, q_valid, k_valid, log_a, log_b, g, support, cfg) -> BiasCertificate:
    """Stopped-base gradient plus its exact omitted remainder D_x z_T^T eta (Proposition 5)."""
    adj = core.tail_adjoint(q, k, v, q_valid, k_valid, log_a, log_b, g, support, cfg)
    _, vjp = jax.vjp(
        lambda q_, k_: _base_duals(q_, k_, q_valid, k_valid, log_a, log_b, support, cfg), q, k
    )
    cq, ck = vjp((adj.u_bar[0], adj.v_bar[0]))
    eta = max(float(jnp.abs(adj.u_bar[0]).max()), float(jnp.abs(adj.v_bar[0]).max()))
    norm = max(float(jnp.abs(cq).max()), float(jnp.abs(ck).max()))
    return BiasCertificate((adj.dq, adj.dk, adj.dv), (cq, ck), eta, norm)


def full_gradient(q, k, v, q_valid, k_valid, log_a, log_b, g, support, cfg):
    """Gradient of <O, g> by full backprop through the T-step base and the R-step tail."""

    def f(q_, k_, v_):
        out = core._forward(q_, k_, v_, q_valid, k_valid, log_a, log_b, support, cfg, stop_base=False)[0]
        return jnp.sum(out * g)

    return jax.grad(f, argnums=(0, 1, 2))(q, k, v)


class TailDepthSelection(NamedTuple):
    """Corollary 2: the smallest certified depth and the certificate norm at each depth.

    ``depth`` is None when no candidate meets ``tau``.
    """

    depth: int | None
    tau: float
    norms: dict


def select_tail_depth(q, k, v, q_valid, k_valid, log_a, log_b, g, support, cfg, *, tau=1e-5, r_max=4):
    """First R in 0..r_max with ||D_x z_T^T eta_R||_max <= tau (Corollary 2)."""
    if not (math.isfinite(tau) and tau > 0):
        raise ValueError(f"{tau=} must be a finite positive number")
    if r_max < 0:
        raise ValueError(f"{r_max=} must be >= 0")
    norms, depth = {}, None
    for r in range(r_max + 1):
        c = bias_certificate(q, k, v, q_valid, k_valid, log_a, log_b, g, support,
                             cfg.replace(tail=r, backward="staircase"))
        norms[r] = c.norm
        if c.norm <= tau:
            depth = r
            break
    return TailDepthSelection(depth, tau, norms)


# --------------------------------------------------------------------------------------
# Proposition 6: transport orbit
# --------------------------------------------------------------------------------------
class OrbitReconstruction(NamedTuple):
    """All 2(T+R) half-step plans rebuilt from the final plan P^(R,R).

    Attributes:
        max_log_error: max over plans and active entries of |log P_rec - (S + u^a + v^b)|,
            where P_rec = diag(exp(u^a - u*)) P* diag(exp(v^b - v*)) is formed in the
            probability domain from the materialised reference plan.
        per_plan: the same maximum for each plan, in order (base t=1..T: row then
            column half-step; then the tail).
        n_plans: 2 (T + R).
    """

    max_log_error: float
    per_plan: np.ndarray
    n_plans: int


def orbit_reconstruction(q, k, q_valid, k_valid, log_a, log_b, support, cfg) -> OrbitReconstruction:
    S = support.scores(q, k, core._scale(q.shape[-1], cfg.eps))
    prob = core._problem(support, q_valid, k_valid, log_a, log_b, q.dtype)
    history, (u0, v0) = core.base_history(support, S, prob, cfg.n_iters)
    us, vs = core._tail(support, S, prob, v0, cfg.tail)
    pairs = []
    for u_raw, v_in, v_raw in history:
        pairs += [(u_raw, v_in), (u_raw, v_raw)]
    u_t = [u0] + us
    for t in range(1, cfg.tail + 1):
        pairs += [(u_t[t], vs[t - 1]), (u_t[t], vs[t])]
    u_ref, v_ref = (pairs[-1] if pairs else (u0, v0))
    P_ref = core._plan(support, S, prob.masks, u_ref, v_ref)
    tiny = np.finfo(np.dtype(q.dtype)).tiny
    errors = []
    for ua, vb in pairs:
        rec = [p * r * c for p, r, c in zip(P_ref, support.rows(jnp.exp(ua - u_ref)), support.cols(jnp.exp(vb - v_ref)))]
        err = 0.0
        for p_rec, s, m, r, c in zip(rec, S, prob.masks, support.rows(ua), support.cols(vb)):
            ok = m & (p_rec > tiny)
            diff = jnp.where(ok, jnp.log(jnp.where(ok, p_rec, 1.0)) - (s + r + c), 0.0)
            err = max(err, float(jnp.abs(diff).max()))
        errors.append(err)
    errors = np.asarray(errors)
    return OrbitReconstruction(float(errors.max()) if errors.size else 0.0, errors, len(pairs))
