"""The banded, masked, log-domain balanced Sinkhorn tail-refinement operator (pure JAX).

Forward (``../design/sinkhorn_tail.md``): scores ``S = q k^T / (sqrt(d) eps)`` on the
active support; a stopped base solve of T full steps from ``v = 0``, each followed by
centering; then R differentiable full steps from the base column duals; output
``O = P^(R,R) V`` with ``P^(a,b)_ij = exp(S_ij + u^(a)_i + v^(b)_j)`` on the support.

Backward: the exact adjoint of that surrogate, selected by ``SinkhornConfig.backward``:
``one_reference`` (Proposition 2: every plan is a row/column rescaling of ``P^(2,2)``),
``staircase`` (Proposition 1, any R, each plan formed when needed), ``direct`` (all
2R plans formed up front, the paper's baseline) and ``autodiff`` (JAX differentiates the
unrolled surrogate). The first three are one ``jax.custom_vjp``.

Everything is stored blockwise on the support (see :mod:`sinkalign.sinkhorn.support`),
so a band of half-width W costs O(L W) memory, never O(Lq Lk).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sinkalign.sinkhorn.backends import tail_operator_for
from sinkalign.sinkhorn.checks import check_shapes, check_support, nonfinite
from sinkalign.sinkhorn.config import SinkhornConfig
from sinkalign.sinkhorn.support import Support

__all__ = [
    "SinkhornResult",
    "TailAdjoint",
    "sinkhorn_attention",
    "sinkhorn_solve",
    "transport_plan",
    "tail_operator",
    "tail_adjoint",
    "base_solve",
    "prepare",
]


# --------------------------------------------------------------------------------------
# half-steps on a support
# --------------------------------------------------------------------------------------
def _masked(xs, masks):
    return [jnp.where(m, x, -jnp.inf) for x, m in zip(xs, masks)]


def _lse(support: Support, xs, masks, axis: str) -> jnp.ndarray:
    """Masked log-sum-exp over keys (``axis='row'``) or over queries (``axis='col'``).

    Empty rows/columns give 0 (callers zero them out). The shift is stop-gradient:
    LSE does not depend on it, so this is exact and keeps ties out of the gradient.
    """
    xm = _masked(xs, masks)
    if axis == "row":
        mx = jax.lax.stop_gradient(support.row_max(xm))
        mx = jnp.where(jnp.isfinite(mx), mx, 0.0)
        s = support.row_sum([jnp.exp(x - r) for x, r in zip(xm, support.rows(mx))])
    else:
        mx = jax.lax.stop_gradient(support.col_max(xm))
        mx = jnp.where(jnp.isfinite(mx), mx, 0.0)
        s = support.col_sum([jnp.exp(x - c) for x, c in zip(xm, support.cols(mx))])
    return mx + jnp.log(jnp.where(s > 0, s, 1.0))


def _row_step(support, S, masks, v, log_a, row_active):
    """u_i = log a_i - LSE_j (S_ij + v_j) over the active support."""
    lse = _lse(support, [s + c for s, c in zip(S, support.cols(v))], masks, "row")
    return jnp.where(row_active, log_a - lse, 0.0)


def _col_step(support, S, masks, u, log_b, col_active):
    """v_j = log b_j - LSE_i (S_ij + u_i) over the active support."""
    lse = _lse(support, [s + r for s, r in zip(S, support.rows(u))], masks, "col")
    return jnp.where(col_active, log_b - lse, 0.0)


def _plan(support, S, masks, u, v):
    """P_ij = exp(S_ij + u_i + v_j) on the support, 0 elsewhere (mask after adding)."""
    return [
        jnp.exp(jnp.where(m, s + r + c, -jnp.inf))
        for s, m, r, c in zip(S, masks, support.rows(u), support.cols(v))
    ]


class _Problem(NamedTuple):
    """Everything about one solve that is not differentiated: masks and marginals."""

    masks: list
    row_active: jnp.ndarray  # [..., lq] bool
    col_active: jnp.ndarray  # [..., lk] bool
    log_a: jnp.ndarray  # [..., lq]
    log_b: jnp.ndarray  # [..., lk]


def _problem(support, q_valid, k_valid, log_a, log_b, dtype) -> _Problem:
    masks = support.masks(q_valid, k_valid)
    ones = [m.astype(dtype) for m in masks]
    row_active = support.row_sum(ones) > 0
    col_active = support.col_sum(ones) > 0
    return _Problem(masks, row_active, col_active, log_a.astype(dtype), log_b.astype(dtype))


def base_solve(support: Support, S, prob: _Problem, n_iters: int):
    """T centered Sinkhorn steps from v = 0. Returns the base duals (u0, v0), [..., lq], [..., lk]."""
    u, v, n_rows = _base_init(support, S, prob)
    return jax.lax.fori_loop(0, n_iters, lambda _, uv: _base_step(support, S, prob, n_rows, uv)[:2], (u, v))


def _base_init(support, S, prob):
    batch, dtype = S[0].shape[:-3], S[0].dtype
    n_rows = jnp.maximum(prob.row_active.sum(-1, keepdims=True), 1).astype(dtype)
    return jnp.zeros(batch + (support.lq,), dtype), jnp.zeros(batch + (support.lk,), dtype), n_rows


def _base_step(support, S, prob, n_rows, uv):
    """One full base step; returns (centered u, centered v, raw u, raw v)."""
    _, v = uv
    u_raw = _row_step(support, S, prob.masks, v, prob.log_a, prob.row_active)
    v_raw = _col_step(support, S, prob.masks, u_raw, prob.log_b, prob.col_active)
    c = jnp.sum(jnp.where(prob.row_active, u_raw, 0.0), -1, keepdims=True) / n_rows
    u = jnp.where(prob.row_active, u_raw - c, 0.0)
    v = jnp.where(prob.col_active, v_raw + c, 0.0)
    return u, v, u_raw, v_raw


def base_history(support: Support, S, prob: _Problem, n_iters: int):
    """Every base half-step's duals, for plan reconstruction (Proposition 6).

    Returns a list over t = 1..T of (u_raw^(t), v_in^(t-1), v_raw^(t)): the row half-step
    plan is P^(t,t-1) = exp(S + u_raw^(t) + v_in^(t-1)) and the column half-step plan is
    P^(t,t) = exp(S + u_raw^(t) + v_raw^(t)) (centering is a gauge change: plans unchanged).
    """
    u, v, n_rows = _base_init(support, S, prob)
    out = []
    for _ in range(n_iters):
        v_in = v
        u, v, u_raw, v_raw = _base_step(support, S, prob, n_rows, (u, v))
        out.append((u_raw, v_in, v_raw))
    return out, (u, v)


def _tail(support, S, prob, v0, n_tail):
    """R raw (uncentered) differentiable steps. Returns us [u^(1..R)], vs [v^(0..R)]."""
    us, vs = [], [v0]
    for _ in range(n_tail):
        u = _row_step(support, S, prob.masks, vs[-1], prob.log_a, prob.row_active)
        us.append(u)
        vs.append(_col_step(support, S, prob.masks, u, prob.log_b, prob.col_active))
    return us, vs


def _scale(d: int, eps: float) -> float:
    return 1.0 / (math.sqrt(d) * eps)


def _forward(q, k, v, q_valid, k_valid, log_a, log_b, support, cfg, *, stop_base=True):
    scale = _scale(q.shape[-1], cfg.eps)
    S = support.scores(q, k, scale)
    prob = _problem(support, q_valid, k_valid, log_a, log_b, q.dtype)
    S_base = [jax.lax.stop_gradient(s) for s in S] if stop_base else S
    u0, v0 = base_solve(support, S_base, prob, cfg.n_iters)
    if stop_base:
        u0, v0 = jax.lax.stop_gradient(u0), jax.lax.stop_gradient(v0)
    us, vs = _tail(support, S, prob, v0, cfg.tail)
    u_last = us[-1] if us else u0
    plan = _plan(support, S, prob.masks, u_last, vs[-1])
    out = support.matmul(plan, v)
    return out, ([u0] + us, vs)


# --------------------------------------------------------------------------------------
# exact adjoint of the surrogate
# --------------------------------------------------------------------------------------
class TailAdjoint(NamedTuple):
    """Result of the tail reverse pass.

    Attributes:
        dq, dk, dv: gradients of the loss w.r.t. q [..., lq, d], k [..., lk, d], v [..., lk, dv].
        u_bar: cotangents of u^(0..R) (u_bar[0] is the discarded base cotangent; it
            is nonzero only for R = 0).
        v_bar: cotangents of v^(0..R); v_bar[0] is eta, the base-state cotangent that
            the stop-gradient throws away (Proposition 5).
    """

    dq: jnp.ndarray
    dk: jnp.ndarray
    dv: jnp.ndarray
    u_bar: list
    v_bar: list


def normalising_factor(mass, sums):
    """The factor that brings a plan's row or column ``sums`` back to their ``mass`` (0 where
    either is 0: an inactive or empty row or column). Used by every backward that rebuilds tail
    plans from float32 duals (this module's and the Pallas kernels')."""
    return jnp.where(sums > 0, mass / jnp.where(sums > 0, sums, 1.0), 0.0)


def _adjoint(q, k, v, prob, us, vs, g, support, cfg, mode) -> TailAdjoint:
    """Propositions 1 and 2. ``us`` = [u^(0..R)], ``vs`` = [v^(0..R)] (raw tail duals)."""
    R = cfg.tail
    scale = _scale(q.shape[-1], cfg.eps)
    S = support.scores(q, k, scale)
    masks = prob.masks
    Z = [
        jnp.einsum("...bqe,...bwe->...bqw", p.row_blocks_mat(g), p.col_windows_mat(v))
        for p in support.pieces
    ]

    def mul(xs, ys):
        return [x * y for x, y in zip(xs, ys)]

    # With marginals a, b the half-step Jacobians are -P/a_i (row) and -P/b_j (column)
    # (Lemma 3 has a = b = 1), so plans always meet cotangents divided by the marginal.
    a = jnp.where(prob.row_active, jnp.exp(prob.log_a), 0.0)
    b = jnp.where(prob.col_active, jnp.exp(prob.log_b), 0.0)
    inv_a = jnp.where(prob.row_active, jnp.exp(-prob.log_a), 0.0)
    inv_b = jnp.where(prob.col_active, jnp.exp(-prob.log_b), 0.0)

    to = normalising_factor
    # Each tail plan is one half-step's: P^(t,t-1) = exp(S + u^t + v^(t-1)) has rows summing to a
    # (u^t = log a - LSE_j), P^(t,t) columns summing to b. Rebuilt from the stored duals, whose
    # float32 rounding (up to |u| 2^-24, |u| ~ max|S|) scales a whole row or column, a plan is
    # brought back to its step's sums, as a softmax is: in exact arithmetic the factors are 1,
    # in float32 they keep the gradients at autodiff's accuracy when max|S| is large (without
    # them dQ and dK erred 5x and 8x more than autodiff's at max|S| ~ 1,100, and dK 5x at ~10,000:
    # benchmarks/float32_accuracy.py, tests/test_sinkhorn_backward.py).
    def plan(t, s):
        P = _plan(support, S, masks, us[t], vs[s])
        if R == 0:  # P^(0,0): the stopped base duals, no step's plan when T = 0
            return P
        if t == s:
            return mul(P, support.cols(to(b, support.col_sum(P))))
        return mul(P, support.rows(to(a, support.row_sum(P))))

    u_bar = [jnp.zeros_like(us[0]) for _ in range(R + 1)]
    v_bar = [jnp.zeros_like(vs[0]) for _ in range(R + 1)]
    if R == 0:
        # O = P^(0,0) V with both base duals stopped: S receives P * Z only.
        P_RR = plan(0, 0)
        PZ = mul(P_RR, Z)
        u_bar[0], v_bar[0] = support.row_sum(PZ), support.col_sum(PZ)
        S_bar = PZ
    elif mode == "one_reference":
        # Proposition 2: P21 = P22 beta_j, P11 = P22 alpha_i beta_j, P10 = P22 alpha_i delta_j, with
        # the raw P22 as the one tile and each plan's normalisation folded into its vectors:
        # P22 f22_j (columns to b), P21 = P22 beta_j r21_i (rows to a), P11 = P22 alpha_i bc11_j
        # (columns to b; bc11 = beta in exact arithmetic), P10 = P22 ar10_i delta_j (rows to a;
        # ar10 = alpha in exact arithmetic).
        P = _plan(support, S, masks, us[2], vs[2])
        alpha = jnp.exp(us[1] - us[2])
        beta = jnp.exp(vs[1] - vs[2])
        delta = jnp.exp(vs[0] - vs[2])
        f22 = to(b, support.col_sum(P))
        r21 = to(a, support.row_sum(mul(P, support.cols(beta))))
        bc11 = to(b, support.col_sum(mul(P, support.rows(alpha))))
        ar10 = to(a, support.row_sum(mul(P, support.cols(delta))))
        P_RR = mul(P, support.cols(f22))
        PZ = mul(P_RR, Z)
        g_v = support.col_sum(PZ)
        v_bar[2] = g_v
        vb2 = inv_b * v_bar[2]
        u_bar[2] = support.row_sum(mul(P_RR, [z - c for z, c in zip(Z, support.cols(vb2))]))
        ub2 = r21 * inv_a * u_bar[2]
        v_bar[1] = -beta * support.col_sum(mul(P, support.rows(ub2)))
        bvb1 = bc11 * inv_b * v_bar[1]
        u_bar[1] = -alpha * support.row_sum(mul(P, support.cols(bvb1)))
        aub1 = ar10 * inv_a * u_bar[1]
        v_bar[0] = -delta * support.col_sum(mul(P, support.rows(aub1)))
        S_bar = [
            p * (fj * (z - c_vb2) - bj * r_ub2 - ai * c_bvb1 - dj * r_aub1)
            for p, fj, z, c_vb2, bj, r_ub2, ai, c_bvb1, dj, r_aub1 in zip(
                P,
                support.cols(f22),
                Z,
                support.cols(vb2),
                support.cols(beta),
                support.rows(ub2),
                support.rows(alpha),
                support.cols(bvb1),
                support.cols(delta),
                support.rows(aub1),
            )
        ]
    else:
        P_RR = plan(R, R)
        PZ = mul(P_RR, Z)
        g_u, g_v = support.row_sum(PZ), support.col_sum(PZ)
        if mode == "direct":
            # The baseline: all 2R staircase plans are formed (and held) up front.
            stored = {(R, R): P_RR}
            for t in range(1, R + 1):
                stored[(t, t - 1)] = plan(t, t - 1)
                if (t, t) not in stored:
                    stored[(t, t)] = plan(t, t)
            get = stored.__getitem__
        else:  # staircase: each plan formed when the recurrence needs it
            get = lambda ab: P_RR if ab == (R, R) else plan(*ab)  # noqa: E731
        v_bar[R] = g_v
        term = mul(P_RR, support.cols(inv_b * v_bar[R]))
        u_bar[R] = g_u - support.row_sum(term)
        S_bar = [pz - t for pz, t in zip(PZ, term)]
        for t in range(R, 0, -1):
            term = mul(get((t, t - 1)), support.rows(inv_a * u_bar[t]))
            v_bar[t - 1] = -support.col_sum(term)
            S_bar = [s - x for s, x in zip(S_bar, term)]
            if t >= 2:
                term = mul(get((t - 1, t - 1)), support.cols(inv_b * v_bar[t - 1]))
                u_bar[t - 1] = -support.row_sum(term)
                S_bar = [s - x for s, x in zip(S_bar, term)]

    dq = support.matmul(S_bar, k) * scale
    dk = support.matmul_t(S_bar, q) * scale
    dv = support.matmul_t(P_RR, g)
    return TailAdjoint(dq, dk, dv, u_bar, v_bar)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8))
def _tail_op(q, k, v, q_valid, k_valid, log_a, log_b, support, cfg):
    return _forward(q, k, v, q_valid, k_valid, log_a, log_b, support, cfg)[0]


def _tail_op_fwd(q, k, v, q_valid, k_valid, log_a, log_b, support, cfg):
    out, (us, vs) = _forward(q, k, v, q_valid, k_valid, log_a, log_b, support, cfg)
    # Residuals: the O(L d) inputs and O(L) dual vectors only; plans are recomputed.
    return out, (q, k, v, q_valid, k_valid, log_a, log_b, us, vs)


def _tail_op_bwd(support, cfg, res, g):
    q, k, v, q_valid, k_valid, log_a, log_b, us, vs = res
    prob = _problem(support, q_valid, k_valid, log_a, log_b, q.dtype)
    adj = _adjoint(q, k, v, prob, us, vs, g, support, cfg, cfg.backward)
    d_log_a, d_log_b = marginal_cotangents(adj, prob.row_active, prob.col_active)
    return adj.dq, adj.dk, adj.dv, None, None, d_log_a.astype(log_a.dtype), d_log_b.astype(log_b.dtype)


def marginal_cotangents(adj: TailAdjoint, row_active, col_active):
    """``(d log_a, d log_b)`` of the surrogate from the tail duals' cotangents: each tail row
    step is ``u^(t) = log a - LSE(...)`` on the active rows (column steps likewise with
    ``log b``), so ``d log_a = sum_{t=1..R} u_bar[t]`` and ``d log_b = sum_{t=1..R} v_bar[t]``;
    the stopped base takes none (R = 0: zeros)."""
    zero_a, zero_b = jnp.zeros_like(adj.u_bar[0]), jnp.zeros_like(adj.v_bar[0])
    d_a = sum(adj.u_bar[1:], zero_a)
    d_b = sum(adj.v_bar[1:], zero_b)
    return jnp.where(row_active, d_a, 0.0), jnp.where(col_active, d_b, 0.0)


_tail_op.defvjp(_tail_op_fwd, _tail_op_bwd)


@functools.partial(jax.jit, static_argnums=(7, 8))
def _tail_operator_jit(q, k, v, q_valid, k_valid, log_a, log_b, support, cfg):
    if cfg.backward == "autodiff":
        return _forward(q, k, v, q_valid, k_valid, log_a, log_b, support, cfg)[0]
    return _tail_op(q, k, v, q_valid, k_valid, log_a, log_b, support, cfg)


def tail_operator(q, k, v, q_valid, k_valid, log_a, log_b, support: Support, cfg: SinkhornConfig):
    """O = P^(R,R) V on an explicit support (inputs already validated; see :func:`prepare`).

    Differentiable in q, k, v and the log marginals with the backward selected by ``cfg.backward``.
    """
    if cfg.backend != "reference":
        return tail_operator_for(cfg.backend)(q, k, v, q_valid, k_valid, log_a, log_b, support, cfg)
    return _tail_operator_jit(q, k, v, q_valid, k_valid, log_a, log_b, support, cfg)


def tail_adjoint(q, k, v, q_valid, k_valid, log_a, log_b, g, support, cfg, *, mode=None) -> TailAdjoint:
    """Run the forward, then the exact tail reverse pass for output cotangent ``g``.

    Exposes the intermediate cotangents (``v_bar[0]`` is Proposition 5's eta).
    ``mode`` defaults to ``cfg.backward`` (``autodiff`` falls back to ``staircase``).
    """
    mode = mode or cfg.backward
    if mode == "autodiff":
        mode = "staircase"
    _, (us, vs) = _forward(q, k, v, q_valid, k_valid, log_a, log_b, support, cfg)
    prob = _problem(support, q_valid, k_valid, log_a, log_b, q.dtype)
    return _adjoint(q, k, v, prob, us, vs, g, support, cfg, mode)


# --------------------------------------------------------------------------------------
# the public boundary: validation before any tracing
# --------------------------------------------------------------------------------------
def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _compute_dtype(*arrays):
    dts = [jnp.asarray(a).dtype for a in arrays]
    for name, dt in zip("qkv", dts):
        if not jnp.issubdtype(dt, jnp.floating):
            raise ValueError(f"{name} must be a floating-point array, got dtype {dt}")
    return jnp.float64 if any(dt == jnp.float64 for dt in dts) else jnp.float32


def _per_batch(x, batch, length):
    """A [B, L] mask or marginal for [B, H, L, d] inputs means the same for every head."""
    if x.ndim == 2 and len(batch) == 2 and x.shape == (batch[0], length):
        return x[:, None, :]
    return x


def _norm_mask(mask, batch, length, name):
    if mask is None:
        return jnp.ones(batch + (length,), bool)
    mask = jnp.asarray(mask)
    if mask.dtype != bool:
        raise ValueError(f"{name} must be a boolean array (True = real token), got dtype {mask.dtype}")
    mask = _per_batch(mask, batch, length)
    try:
        return jnp.broadcast_to(mask, batch + (length,))
    except ValueError:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to {batch + (length,)}"
        ) from None


def _norm_marginal(x, batch, length, name, dtype):
    if x is None:
        return jnp.zeros(batch + (length,), dtype)
    x = _per_batch(jnp.asarray(x, dtype), batch, length)
    try:
        return jnp.broadcast_to(x, batch + (length,))
    except ValueError:
        raise ValueError(f"{name} of shape {tuple(x.shape)} does not broadcast to {batch + (length,)}") from None


def _check_finite(name, x, valid=None):
    """Refuse a NaN or infinity in a concrete ``x``, naming its first index; with ``valid`` (a
    concrete NumPy mask over ``x``'s leading dims, ``[..., L]``) only at valid positions: padding
    is zeroed before the solve, so what it holds matters to nothing (as under ``jax.jit``, where
    nothing is checked)."""
    if not _is_concrete(x):
        return
    bad = ~np.isfinite(np.asarray(x, dtype=np.float64))
    if valid is not None:
        bad &= np.asarray(valid, bool).reshape(valid.shape + (1,) * (bad.ndim - np.ndim(valid)))
    if bad.any():
        raise nonfinite(name, np.argwhere(bad)[0])


def _concrete_mask(mask, batch, length):
    """``mask`` as a NumPy [*batch, length] array while it is concrete (also a constant closed
    over by a jitted function, which jnp operations would turn into a tracer), else ``None``."""
    if mask is None:
        return np.ones(batch + (length,), bool)
    if not _is_concrete(mask):
        return None
    return np.broadcast_to(_per_batch(np.asarray(mask), batch, length), batch + (length,))


def prepare(q, k, v, q_mask=None, k_mask=None, log_a=None, log_b=None, *, band=None, check_empty=True):
    """Validate and normalise operator inputs. Returns (q, k, v, q_valid, k_valid, log_a, log_b).

    q [..., Lq, d], k [..., Lk, d], v [..., Lk, dv] with equal leading (batch) dims;
    masks broadcastable to [..., L] (a [B, L] mask is accepted for [B, H, L, d] inputs);
    log marginals broadcastable to [..., L] (default 0: unit mass).
    """
    q, k, v = (jnp.asarray(x) for x in (q, k, v))
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim < 2:
            raise ValueError(f"{name} must have shape [..., L, d], got {tuple(x.shape)}")
    check_shapes(q.shape, k.shape, v.shape)
    if min(q.shape[-2], k.shape[-2], q.shape[-1]) < 1:
        raise ValueError(f"empty input: q {tuple(q.shape)}, k {tuple(k.shape)}")
    dtype = _compute_dtype(q, k, v)
    q, k, v = q.astype(dtype), k.astype(dtype), v.astype(dtype)
    batch, lq, lk = q.shape[:-2], q.shape[-2], k.shape[-2]
    q_valid = _norm_mask(q_mask, batch, lq, "q_mask")
    k_valid = _norm_mask(k_mask, batch, lk, "k_mask")
    log_a = _norm_marginal(log_a, batch, lq, "log_a", dtype)
    log_b = _norm_marginal(log_b, batch, lk, "log_b", dtype)
    # on the masks as given: under jax.jit a closed-over mask is still concrete here (None: traced)
    q_np, k_np = _concrete_mask(q_mask, batch, lq), _concrete_mask(k_mask, batch, lk)
    for name, x, valid in (("q", q, q_np), ("k", k, k_np), ("v", v, k_np), ("log_a", log_a, q_np),
                           ("log_b", log_b, k_np)):
        _check_finite(name, x, valid)  # valid positions only, where the mask is known
    if check_empty and q_np is not None and k_np is not None:
        check_support(q_np, k_np, band)
    # padding is zeroed: whatever it holds (NaN under jit, where it is not checked) reaches neither
    # the output nor any gradient (dk = S_bar^T q would multiply it by 0)
    q = jnp.where(q_valid[..., None], q, 0)
    k = jnp.where(k_valid[..., None], k, 0)
    v = jnp.where(k_valid[..., None], v, 0)
    log_a = jnp.where(q_valid, log_a, 0)
    log_b = jnp.where(k_valid, log_b, 0)
    return q, k, v, q_valid, k_valid, log_a, log_b


class SinkhornResult(NamedTuple):
    """What one solve produced; everything is read from it without solving again.

    Attributes:
        output: O = P^(R,R) V, [..., Lq, dv].
        u, v: tail duals u^(R) [..., Lq] and v^(R) [..., Lk] (raw, uncentered).
        u_base, v_base: the stopped, centered base duals u^(0), v^(0).
        row_marginal_error: max over active rows of |sum_j P_ij - a_i| (the column
            marginals are exact after the final column half-step).
        support: the :class:`~sinkalign.sinkhorn.support.Support` the problem was solved on.
        plan_blocks: P^(R,R) on the support, in its blockwise layout (O(L W) memory); the
            dense matrix is :meth:`plan`.
    """

    output: jnp.ndarray
    u: jnp.ndarray
    v: jnp.ndarray
    u_base: jnp.ndarray
    v_base: jnp.ndarray
    row_marginal_error: jnp.ndarray
    support: Support
    plan_blocks: tuple

    def plan(self) -> jnp.ndarray:
        """The final plan P^(R,R) as a dense [..., Lq, Lk] array (zeros off the support): the
        same matrix as :func:`transport_plan`, from this solve. O(Lq Lk) memory."""
        return self.support.densify(list(self.plan_blocks))

    def row_sums(self) -> jnp.ndarray:
        """sum_j P_ij [..., Lq] (the row marginals the plan reaches), O(L W)."""
        return self.support.row_sum(list(self.plan_blocks))


def _config(config, overrides) -> SinkhornConfig:
    config = config or SinkhornConfig()
    return config.replace(**overrides) if overrides else config


def sinkhorn_attention(q, k, v, *, q_mask=None, k_mask=None, log_a=None, log_b=None, config=None, **overrides):
    """Sinkhorn attention O = P^(R,R) V with the exact tail-refinement gradient.

    Args:
        q: queries [..., Lq, d] (e.g. [B, H, Lq, d]); k: keys [..., Lk, d]; v: values [..., Lk, dv].
        q_mask, k_mask: True for real tokens, broadcastable to [..., L] ([B, L] accepted).
        log_a, log_b: log row/column marginals (default 0: unit mass per token).
        config: :class:`SinkhornConfig`; keyword overrides (``eps=0.5, band=64``) apply on top.

    Returns: O [..., Lq, dv] in float32 (float64 if any input is float64). Rows of
    padded queries are 0.

    Gradients (q, k, v, log_a, log_b) are exact for the stopped-base surrogate: the
    ``n_iters`` base steps are held constant and the ``tail`` refinement steps are
    differentiated, so finite differences of the full solve (``jax.test_util.check_grads``)
    differ from them by the base's own sensitivity, which the certificates bound. The custom
    modes (``one_reference``, ``staircase``, ``direct``) are reverse mode only: ``jax.jvp``
    and ``jax.jacfwd`` need ``backward="autodiff"``. ``eps``, ``n_iters``, ``tail`` and ``band``
    are static (a :class:`SinkhornConfig` goes to ``jax.jit`` as a static argument or closed
    over). Marginals of unequal total mass (unit masses with ``Lq != Lk``) admit no plan that
    meets both: the last half-step makes the columns exact, and
    :attr:`SinkhornResult.row_marginal_error` reports the rows'.
    """
    cfg = _config(config, overrides)
    q, k, v, qv, kv, la, lb = prepare(q, k, v, q_mask, k_mask, log_a, log_b, band=cfg.band)
    support = Support.single(q.shape[-2], k.shape[-2], cfg.band, cfg.block)
    return tail_operator(q, k, v, qv, kv, la, lb, support, cfg)


def sinkhorn_solve(q, k, v, *, q_mask=None, k_mask=None, log_a=None, log_b=None, config=None, **overrides):
    """Like :func:`sinkhorn_attention` but returns a :class:`SinkhornResult`: the output, the
    duals, the plan (:meth:`SinkhornResult.plan`) and the marginal diagnostics of one solve. It
    runs under ``jax.jit`` and ``jax.vmap`` (the support is static). Its gradient is JAX's
    autodiff of the stopped-base surrogate (the base steps held constant, the tail unrolled:
    what ``backward="autodiff"`` computes), in O(L W) memory per tail step."""
    cfg = _config(config, overrides)
    q, k, v, qv, kv, la, lb = prepare(q, k, v, q_mask, k_mask, log_a, log_b, band=cfg.band)
    support = Support.single(q.shape[-2], k.shape[-2], cfg.band, cfg.block)
    return _solve_on(support, cfg, q, k, v, qv, kv, la, lb)


def _solve_on(support, cfg, q, k, v, qv, kv, la, lb) -> SinkhornResult:
    out, (us, vs) = _forward(q, k, v, qv, kv, la, lb, support, cfg)
    S = support.scores(q, k, _scale(q.shape[-1], cfg.eps))
    prob = _problem(support, qv, kv, la, lb, q.dtype)
    plan = _plan(support, S, prob.masks, us[-1], vs[-1])
    row_err = jnp.where(prob.row_active, jnp.abs(support.row_sum(plan) - jnp.exp(prob.log_a)), 0.0).max(-1)
    return SinkhornResult(out, us[-1], vs[-1], us[0], vs[0], row_err, support, tuple(plan))


def transport_plan(q, k, *, q_mask=None, k_mask=None, log_a=None, log_b=None, config=None, **overrides):
    """The final plan P^(R,R) as a dense ``[..., Lq, Lk]`` array, zeros off the band and at
    padded rows and columns, in float32 (float64 if ``q`` or ``k`` is): O(Lq Lk) memory, for
    decoding and inspecting small problems (:meth:`SinkhornResult.plan` gives the same matrix
    of a solve; :func:`sinkhorn_attention` never forms it). Arguments as
    :func:`sinkhorn_attention`, without ``v``; its gradient is JAX's autodiff of the
    stopped-base surrogate, as :func:`sinkhorn_solve`'s."""
    cfg = _config(config, overrides)
    v = jnp.zeros(jnp.asarray(k).shape[:-1] + (1,), jnp.asarray(k).dtype)
    q, k, v, qv, kv, la, lb = prepare(q, k, v, q_mask, k_mask, log_a, log_b, band=cfg.band)
    support = Support.single(q.shape[-2], k.shape[-2], cfg.band, cfg.block)
    return plan_on(support, cfg, q, k, qv, kv, la, lb)


def plan_on(support, cfg, q, k, qv, kv, la, lb):
    """Dense P^(R,R) on an explicit support."""
    v = jnp.zeros(k.shape[:-1] + (1,), k.dtype)
    _, (us, vs) = _forward(q, k, v, qv, kv, la, lb, support, cfg)
    S = support.scores(q, k, _scale(q.shape[-1], cfg.eps))
    prob = _problem(support, qv, kv, la, lb, q.dtype)
    return support.densify(_plan(support, S, prob.masks, us[-1], vs[-1]))
