"""Operator inputs an audit found mishandled under jax.jit: a closed-over mask that leaves a
valid row without keys (silently zero rows), NaN in padding (NaN gradients for every key), and
eps given as a JAX value (a misleading message)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sinkalign import SinkhornConfig, sinkhorn_attention

MODES = ("one_reference", "staircase", "direct", "autodiff")


def _qkv(seed=0, lq=10, lk=12, d=4, dv=3):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(1, lq, d)), rng.normal(size=(1, lk, d)), rng.normal(size=(1, lk, dv))


def test_a_closed_over_mask_is_checked_under_jit():
    q, k, v = _qkv()
    k_mask = np.arange(12)[None] < 3  # queries 5..9 have no active key within the band
    cfg = SinkhornConfig(eps=1.0, n_iters=4, band=1)
    with pytest.raises(ValueError, match="has no active key"):
        sinkhorn_attention(q, k, v, k_mask=k_mask, config=cfg)
    with pytest.raises(ValueError, match="has no active key"):  # was: rows 5..9 silently all zero
        jax.jit(lambda q: sinkhorn_attention(q, k, v, k_mask=k_mask, config=cfg))(q)
    # a mask that is an argument of the jitted function is a tracer: not checked (documented)
    out = jax.jit(lambda q, m: sinkhorn_attention(q, k, v, k_mask=m, config=cfg))(q, jnp.asarray(k_mask))
    assert out.shape == (1, 10, 3)


@pytest.mark.parametrize("mode", MODES)
def test_nan_in_padding_reaches_no_gradient_under_jit(mode):
    jax.config.update("jax_enable_x64", True)
    q, k, v = _qkv(1, lq=6, lk=7)
    q_mask = np.array([[1, 1, 1, 1, 0, 0]], bool)
    k_mask = np.array([[1, 1, 1, 1, 1, 0, 0]], bool)
    cfg = SinkhornConfig(eps=1.0, n_iters=4, backward=mode)

    def loss(q, k, v):
        return sinkhorn_attention(q, k, v, q_mask=q_mask, k_mask=k_mask, config=cfg).sum()

    grads_clean = jax.grad(jax.jit(loss), (0, 1, 2))(q, k, v)
    qn, kn, vn = q.copy(), k.copy(), v.copy()
    qn[0, 4:], kn[0, 5:], vn[0, 5:] = np.nan, np.inf, np.nan
    value = jax.jit(loss)(qn, kn, vn)
    grads = jax.grad(jax.jit(loss), (0, 1, 2))(qn, kn, vn)
    assert np.isfinite(value) and value == pytest.approx(float(jax.jit(loss)(q, k, v)), abs=1e-13)
    for g, g0 in zip(grads, grads_clean):
        assert np.all(np.isfinite(g))  # dk was NaN for every key
        np.testing.assert_allclose(g, g0, rtol=0, atol=1e-13)
    assert np.all(grads[0][0, 4:] == 0) and np.all(grads[1][0, 5:] == 0) and np.all(grads[2][0, 5:] == 0)
    # eager: the same (it was refused eagerly while it ran under jit; a valid position is still refused,
    # tests/test_sinkhorn_inputs.py)
    assert float(loss(qn, kn, vn)) == pytest.approx(float(value), abs=1e-13)


def test_eps_as_a_jax_value_is_refused_saying_it_is_static():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"eps must be a Python number, got .*static setting.*float\(eps\)"):
        sinkhorn_attention(q, k, v, config=SinkhornConfig(eps=jnp.asarray(0.9), n_iters=2))
    with pytest.raises(ValueError, match=r"eps must be a Python number.*static setting"):
        jax.grad(lambda e: sinkhorn_attention(q, k, v, config=SinkhornConfig(eps=e, n_iters=2)).sum())(0.9)
    out = sinkhorn_attention(q, k, v, config=SinkhornConfig(eps=np.float32(0.9), n_iters=2))
    assert np.all(np.isfinite(out))
