"""The blockwise JAX forward against a plain dense NumPy reference (float64)."""

from __future__ import annotations

import numpy as np
import pytest

from sinkalign.sinkhorn import SinkhornConfig, sinkhorn_attention, sinkhorn_solve, transport_plan
from tests.sinkhorn_reference import reference_forward

SHAPES = [
    # (lq, lk, band, block, pad_q, pad_k)
    (1, 1, None, 128, 0, 0),
    (1, 17, None, 128, 0, 0),
    (97, 97, 16, 32, 0, 0),
    (97, 120, 30, 16, 3, 4),  # Lq != Lk, band, blocks that do not divide L
    (257, 257, 8, 64, 7, 5),
    (33, 20, None, 8, 2, 1),
    (50, 50, 60, 16, 0, 0),  # band wider than the matrix
]


@pytest.mark.parametrize("lq,lk,band,block,pad_q,pad_k", SHAPES)
def test_forward_matches_dense_reference(lq, lk, band, block, pad_q, pad_k):
    rng = np.random.default_rng(lq * 1000 + lk)
    b, h, d, dv = 2, 2, 8, 3
    q = rng.normal(size=(b, h, lq, d))
    k = rng.normal(size=(b, h, lk, d))
    v = rng.normal(size=(b, h, lk, dv))
    qm = np.ones((b, lq), bool)
    km = np.ones((b, lk), bool)
    if pad_q:
        qm[0, -pad_q:] = False
    if pad_k:
        km[1, -pad_k:] = False
    cfg = SinkhornConfig(eps=0.8, n_iters=7, tail=2, band=band, block=block)
    out = np.asarray(sinkhorn_attention(q, k, v, q_mask=qm, k_mask=km, config=cfg))
    plan = np.asarray(transport_plan(q, k, q_mask=qm, k_mask=km, config=cfg))
    for bi in range(b):
        for hi in range(h):
            ref_o, ref_p = reference_forward(q[bi, hi], k[bi, hi], v[bi, hi], qm[bi], km[bi],
                                             eps=0.8, T=7, R=2, band=band)
            np.testing.assert_allclose(out[bi, hi], ref_o, atol=1e-12, rtol=0)
            np.testing.assert_allclose(plan[bi, hi], ref_p, atol=1e-12, rtol=0)


def test_random_marginals_match_reference():
    rng = np.random.default_rng(3)
    q, k, v = rng.normal(size=(40, 4)), rng.normal(size=(30, 4)), rng.normal(size=(30, 2))
    la, lb = rng.uniform(-1, 1, 40), rng.uniform(-1, 1, 30)
    m_q, m_k = np.ones(40, bool), np.ones(30, bool)
    out = sinkhorn_attention(q, k, v, log_a=la, log_b=lb, eps=1.3, n_iters=5, tail=3, band=12,
                             backward="staircase", block=16)
    ref, _ = reference_forward(q, k, v, m_q, m_k, eps=1.3, T=5, R=3, band=12, log_a=la, log_b=lb)
    np.testing.assert_allclose(np.asarray(out), ref, atol=1e-12)


def test_converged_plan_has_the_marginals_and_respects_band():
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(60, 8)), rng.normal(size=(60, 8)), rng.normal(size=(60, 2))
    res = sinkhorn_solve(q, k, v, n_iters=300, tail=2, band=10)
    assert float(res.row_marginal_error) < 1e-9
    plan = np.asarray(transport_plan(q, k, n_iters=300, band=10))
    np.testing.assert_allclose(plan.sum(0), 1.0, atol=1e-12)  # exact after a column step
    np.testing.assert_allclose(plan.sum(1), 1.0, atol=1e-9)
    i, j = np.indices(plan.shape)
    assert np.all(plan[np.abs(i - j) > 10] == 0)


def test_padded_rows_give_zero_output_and_float32_inputs_stay_float32():
    rng = np.random.default_rng(2)
    q = rng.normal(size=(1, 9, 4)).astype(np.float32)
    qm = np.array([[True] * 7 + [False] * 2])
    out = sinkhorn_attention(q, q, q, q_mask=qm, k_mask=qm)
    assert out.dtype == np.float32
    assert np.all(np.asarray(out)[0, 7:] == 0)


def test_per_batch_masks_and_marginals_apply_to_every_head():
    rng = np.random.default_rng(5)
    b, h, lq, lk = 2, 3, 11, 9
    q, k, v = rng.normal(size=(b, h, lq, 4)), rng.normal(size=(b, h, lk, 4)), rng.normal(size=(b, h, lk, 2))
    la, lb = rng.uniform(-1, 1, (b, lq)), rng.uniform(-1, 1, (b, lk))
    km = np.ones((b, lk), bool)
    km[0, -2:] = False
    out = np.asarray(sinkhorn_attention(q, k, v, k_mask=km, log_a=la, log_b=lb, n_iters=4))
    for bi in range(b):
        for hi in range(h):
            ref, _ = reference_forward(q[bi, hi], k[bi, hi], v[bi, hi], np.ones(lq, bool), km[bi],
                                       eps=1.0, T=4, R=2, band=None, log_a=la[bi], log_b=lb[bi])
            np.testing.assert_allclose(out[bi, hi], ref, atol=1e-12)


def test_solve_result_gives_output_plan_and_diagnostics_of_one_solve():
    """The plan read from a SinkhornResult is transport_plan's, its rows give the marginal
    error, and the output is that plan times V: one solve, read three ways."""
    rng = np.random.default_rng(7)
    q, k, v = rng.normal(size=(2, 37, 6)), rng.normal(size=(2, 29, 6)), rng.normal(size=(2, 29, 3))
    qm = np.ones((2, 37), bool)
    qm[1, -5:] = False
    km = np.ones((2, 29), bool)
    km[0, 3] = False
    la = rng.uniform(-0.5, 0.5, (2, 37))
    kw = dict(q_mask=qm, k_mask=km, log_a=la, eps=0.8, n_iters=6, band=9, block=16)
    res = sinkhorn_solve(q, k, v, **kw)
    plan = np.asarray(res.plan())
    np.testing.assert_allclose(plan, np.asarray(transport_plan(q, k, **kw)), atol=1e-13)
    np.testing.assert_allclose(np.asarray(res.output), plan @ v, atol=1e-12)
    rows = np.asarray(res.row_sums())
    np.testing.assert_allclose(rows, plan.sum(-1), atol=1e-12)
    want = np.where(qm, np.abs(rows - np.exp(la)), 0.0).max(-1)
    np.testing.assert_allclose(np.asarray(res.row_marginal_error), want, atol=1e-12)
    assert np.all(plan[1, -5:] == 0) and np.all(plan[0, :, 3] == 0)
    # under jax.jit and jax.vmap (its support is static: the result held a non-JAX field that jit refused)
    import jax

    jitted = jax.jit(lambda q, k, v: sinkhorn_solve(q, k, v, **kw))(q, k, v)
    np.testing.assert_allclose(np.asarray(jitted.plan()), plan, rtol=1e-12, atol=1e-15)  # (XLA fuses otherwise)
    assert jitted.support == res.support
    mapped = jax.vmap(lambda q, k, v: sinkhorn_solve(q, k, v, eps=0.8, n_iters=6, band=9, block=16))(q, k, v)
    alone = sinkhorn_solve(q[1], k[1], v[1], eps=0.8, n_iters=6, band=9, block=16)
    np.testing.assert_allclose(np.asarray(mapped.output[1]), np.asarray(alone.output), rtol=1e-12, atol=1e-14)
