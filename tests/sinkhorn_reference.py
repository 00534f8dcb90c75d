"""A plain dense NumPy float64 reference of the operator, independent of the blockwise layout."""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp


def dense_support(lq, lk, band, q_mask, k_mask):
    i = np.arange(lq)[:, None]
    j = np.arange(lk)[None, :]
    inside = np.ones((lq, lk), bool) if band is None else np.abs(i - j) <= band
    return inside & q_mask[:, None] & k_mask[None, :]


def reference_forward(q, k, v, q_mask, k_mask, *, eps, T, R, band, log_a=None, log_b=None, support=None):
    """One problem (no batch dims): q [Lq, d], k [Lk, d], v [Lk, dv]. Returns (O, P^(R,R))."""
    lq, d = q.shape
    lk = k.shape[0]
    omega = dense_support(lq, lk, band, q_mask, k_mask) if support is None else support
    la = np.zeros(lq) if log_a is None else log_a
    lb = np.zeros(lk) if log_b is None else log_b
    S = q @ k.T / (np.sqrt(d) * eps)
    rows = omega.any(1)
    cols = omega.any(0)

    def row(v_):
        x = np.where(omega, S + v_[None, :], -np.inf)
        return np.where(rows, la - logsumexp(np.where(rows[:, None], x, 0.0), axis=1), 0.0)

    def col(u_):
        x = np.where(omega, S + u_[:, None], -np.inf)
        return np.where(cols, lb - logsumexp(np.where(cols[None, :], x, 0.0), axis=0), 0.0)

    u = np.zeros(lq)
    vv = np.zeros(lk)
    for _ in range(T):
        u = row(vv)
        vv = col(u)
        c = u[rows].mean() if rows.any() else 0.0
        u = np.where(rows, u - c, 0.0)
        vv = np.where(cols, vv + c, 0.0)
    for _ in range(R):
        u = row(vv)
        vv = col(u)
    P = np.where(omega, np.exp(np.where(omega, S + u[:, None] + vv[None, :], -np.inf)), 0.0)
    return P @ v, P
