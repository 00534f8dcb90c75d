"""The gap-aware dustbin bridge (Proposition 3) and a band-preserving variant.

Both attach one learned dustbin token per side and run the *same* balanced
tail-refinement surrogate on an augmented support, so the exact backward of
:mod:`sinkalign.sinkhorn.core` applies unchanged (Corollary 1). Mass that a residue
sends to the other side's dustbin is gap evidence.

``paper``: augmented tensors of length L + B (one active dustbin, B - 1 inactive
fillers), unit marginals, band ``max(W, Lq, Lk)`` so every real token reaches the
opposite dustbin. This makes the gap-aware path dense and lets a dustbin absorb at
most one unit of mass.

``banded``: the band of half-width W plus an always-active dustbin row and column
(three support pieces, O(L W) memory). The dustbin's mass is 1 (``unit``) or the
number of valid tokens on the other side (``length``), so that it can absorb every
residue of an unequal-length pair; the problem stays balanced (both sides carry
``nq + nk`` in the ``length`` case).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from sinkalign.sinkhorn import core
from sinkalign.sinkhorn.config import DustbinConfig, SinkhornConfig
from sinkalign.sinkhorn.support import Piece, Support

__all__ = ["AugmentedProblem", "augment", "dustbin_attention", "dustbin_plan"]


class AugmentedProblem(NamedTuple):
    """A dustbin-augmented problem, ready for :func:`sinkalign.sinkhorn.core.tail_operator`.

    Attributes:
        q, k, v: augmented tensors [..., Lq', d], [..., Lk', d], [..., Lk', dv].
        q_valid, k_valid: augmented masks (the dustbin tokens are active, fillers not).
        log_a, log_b: augmented log marginals.
        support: the augmented support.
        config: the solver config to use on it (band enlarged for ``paper``).
        lq, lk: the real lengths; the dustbins sit at row ``lq`` and column ``lk``.
    """

    q: jnp.ndarray
    k: jnp.ndarray
    v: jnp.ndarray
    q_valid: jnp.ndarray
    k_valid: jnp.ndarray
    log_a: jnp.ndarray
    log_b: jnp.ndarray
    support: Support
    config: SinkhornConfig
    lq: int
    lk: int


def _token(x, batch, dim, name, dtype):
    x = jnp.asarray(x, dtype)
    if x.shape[-1:] != (dim,):
        raise ValueError(f"{name} must have last dimension {dim}, got shape {tuple(x.shape)}")
    try:
        return jnp.broadcast_to(x, batch + (dim,))[..., None, :]
    except ValueError:
        raise ValueError(f"{name} of shape {tuple(x.shape)} does not broadcast to {batch + (dim,)}") from None


def augment(
    q, k, v, q_dustbin, k_dustbin, v_dustbin=None, *, q_mask=None, k_mask=None,
    config: SinkhornConfig | None = None, dustbin: DustbinConfig | None = None,
) -> AugmentedProblem:
    """Validate inputs and build the dustbin-augmented problem.

    Args:
        q [..., Lq, d], k [..., Lk, d], v [..., Lk, dv]: real tokens.
        q_dustbin [d] (or [..., d]): the query-side dustbin token (a row that absorbs
            unmatched keys); k_dustbin [d]: the key-side dustbin (a column that absorbs
            unmatched queries); v_dustbin [dv]: value carried by the key dustbin (default 0).
    """
    cfg = config or SinkhornConfig()
    db = dustbin or DustbinConfig()
    q, k, v, qv, kv, la, lb = core.prepare(q, k, v, q_mask, k_mask, band=cfg.band, check_empty=False)
    batch, lq, lk, d, dv = q.shape[:-2], q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    dtype = q.dtype
    qd = _token(q_dustbin, batch, d, "q_dustbin", dtype)
    kd = _token(k_dustbin, batch, d, "k_dustbin", dtype)
    vd = _token(jnp.zeros((dv,), dtype) if v_dustbin is None else v_dustbin, batch, dv, "v_dustbin", dtype)
    core._check_finite("q_dustbin", qd)
    core._check_finite("k_dustbin", kd)
    core._check_finite("v_dustbin", vd)
    true1 = jnp.ones(batch + (1,), bool)

    if db.variant == "paper":
        n_fill = db.filler - 1

        def pad(x, tok):
            return jnp.concatenate([x, tok, jnp.zeros(batch + (n_fill, x.shape[-1]), dtype)], -2)

        fill = jnp.zeros(batch + (n_fill,), bool)
        qa, ka, va = pad(q, qd), pad(k, kd), pad(v, vd)
        qva = jnp.concatenate([qv, true1, fill], -1)
        kva = jnp.concatenate([kv, true1, fill], -1)
        band = None if cfg.band is None else max(cfg.band, lq, lk)
        acfg = cfg.replace(band=band)
        support = Support.single(lq + db.filler, lk + db.filler, band, cfg.block)
        laa = jnp.zeros(batch + (lq + db.filler,), dtype)
        lba = jnp.zeros(batch + (lk + db.filler,), dtype)
    else:
        qa = jnp.concatenate([q, qd], -2)
        ka = jnp.concatenate([k, kd], -2)
        va = jnp.concatenate([v, vd], -2)
        qva = jnp.concatenate([qv, true1], -1)
        kva = jnp.concatenate([kv, true1], -1)
        if db.mass == "unit":
            m_q = m_k = jnp.zeros(batch + (1,), dtype)
        else:  # the dustbin of one side can absorb every valid token of the other side
            m_q = jnp.log(jnp.maximum(kv.sum(-1, keepdims=True), 1).astype(dtype))
            m_k = jnp.log(jnp.maximum(qv.sum(-1, keepdims=True), 1).astype(dtype))
        laa = jnp.concatenate([la, m_q], -1)
        lba = jnp.concatenate([lb, m_k], -1)
        support = Support(
            lq + 1,
            lk + 1,
            (
                Piece(0, lq, 0, lk, cfg.band, cfg.block),  # the band
                Piece(0, lq + 1, lk, 1, None, cfg.block),  # dustbin column (with the corner)
                Piece(lq, 1, 0, lk, None, cfg.block),  # dustbin row
            ),
        )
        acfg = cfg
    return AugmentedProblem(qa, ka, va, qva, kva, laa, lba, support, acfg, lq, lk)


def dustbin_attention(q, k, v, q_dustbin, k_dustbin, v_dustbin=None, *, q_mask=None, k_mask=None,
                      config=None, dustbin=None):
    """Sinkhorn attention with learned dustbins. Returns O [..., Lq, dv] for the real queries.

    Differentiable in q, k, v and the dustbin tokens, with the exact tail backward of
    ``config.backward`` applied on the augmented support.
    """
    aug = augment(q, k, v, q_dustbin, k_dustbin, v_dustbin, q_mask=q_mask, k_mask=k_mask,
                  config=config, dustbin=dustbin)
    out = core.tail_operator(aug.q, aug.k, aug.v, aug.q_valid, aug.k_valid, aug.log_a, aug.log_b,
                             aug.support, aug.config)
    return out[..., : aug.lq, :]


def dustbin_plan(q, k, q_dustbin, k_dustbin, *, q_mask=None, k_mask=None, config=None, dustbin=None):
    """Dense final plan ``[..., Lq + 1, Lk + 1]``: the last column is each query's gap mass
    (sent to the key-side dustbin), the last row each key's gap mass; the paper variant's
    inactive fillers are dropped. Arguments as :func:`dustbin_attention` without ``v``; float32
    (float64 if an input is), O(Lq Lk) memory, for decoding and inspecting small problems; its
    gradient (to the dustbin tokens too) is JAX's autodiff of the stopped-base surrogate."""
    k = jnp.asarray(k)
    v = jnp.zeros(k.shape[:-1] + (1,), k.dtype)
    aug = augment(q, k, v, q_dustbin, k_dustbin, None, q_mask=q_mask, k_mask=k_mask,
                  config=config, dustbin=dustbin)
    plan = core.plan_on(aug.support, aug.config, aug.q, aug.k, aug.q_valid, aug.k_valid, aug.log_a, aug.log_b)
    return plan[..., : aug.lq + 1, : aug.lk + 1]
