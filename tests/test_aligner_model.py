"""The aligner model: configuration, the BLOSUM-diagonal initialisation, losses, gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from Bio.Align import substitution_matrices

from sinkalign.align import model as M


def test_config_errors():
    with pytest.raises(ValueError, match="alphabet='rna' is not one of"):
        M.AlignerConfig(alphabet="rna")
    with pytest.raises(ValueError, match=r"unknown loss terms \['kl'\]"):
        M.AlignerConfig(losses={"kl": 1.0})
    with pytest.raises(ValueError, match="has no positive weight"):
        M.AlignerConfig(losses={"ce": 0.0})
    with pytest.raises(ValueError, match="unknown preset 'k3'"):
        M.preset("k3")
    with pytest.raises(ValueError, match=r"supports tail \(R\) in \(2,\)"):
        M.AlignerConfig(tail=4)
    with pytest.raises(ValueError, match="unknown AlignerConfig keys"):
        M.AlignerConfig.from_dict({"wat": 1})


def test_presets_round_trip():
    for name in M.PRESETS:
        cfg = M.preset(name)
        assert M.AlignerConfig.from_dict(cfg.to_dict()) == cfg
    assert M.preset("k4_eps1").tail == 4 and M.preset("muot_dustbin_mono").dustbin == "paper"


def test_initial_scores_are_the_blosum_diagonal_sum():
    cfg = M.AlignerConfig(window=3)
    params = M.init_params(cfg)
    a, b = "MKVLAAGHW", "MKILSAGW"
    batch = M.make_batch([(a, b, None, None, None)], cfg, 12, 12)
    q, k = M.queries_keys(params, batch, cfg)
    S = np.asarray(q[0] @ k[0].T) / np.sqrt(cfg.qk_dim)
    blosum = substitution_matrices.load("BLOSUM62")
    for i in range(len(a)):
        for j in range(len(b)):
            want = sum((1 - abs(s) / 4) * blosum[a[i + s], b[j + s]] / 16
                       for s in range(-3, 4) if 0 <= i + s < len(a) and 0 <= j + s < len(b))
            assert S[i, j] == pytest.approx(want, abs=1e-5)


def test_initial_scores_from_a_given_substitution_matrix():
    """``init_params(substitution=...)`` puts another per-residue score on the same diagonal weights."""
    cfg = M.AlignerConfig(window=2)
    sub = np.random.default_rng(3).normal(size=(cfg.n_symbols, cfg.n_symbols))
    params = M.init_params(cfg, substitution=sub)
    a, b = "MKVLAAGHW", "MKILSAGW"
    batch = M.make_batch([(a, b, None, None, None)], cfg, 12, 12)
    q, k = M.queries_keys(params, batch, cfg)
    S = np.asarray(q[0] @ k[0].T) / np.sqrt(cfg.qk_dim)
    idx = {c: n for n, c in enumerate(M.ALPHABETS["protein"])}
    for i in range(len(a)):
        for j in range(len(b)):
            want = sum((1 - abs(s) / 3) * sub[idx[a[i + s]], idx[b[j + s]]]
                       for s in range(-2, 3) if 0 <= i + s < len(a) and 0 <= j + s < len(b))
            assert S[i, j] == pytest.approx(want, abs=1e-5)
    with pytest.raises(ValueError, match=r"substitution has shape \(20, 20\), expected \(21, 21\)"):
        M.init_params(cfg, substitution=sub[:20, :20])


def _batch(cfg, n=3, L=24, seed=0):
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n):
        la, lb = rng.integers(10, L), rng.integers(10, L)
        a = "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), la))
        b = "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), lb))
        m = min(la, lb) - 2
        pairs = np.stack([np.arange(m), np.arange(m) + 1], 1)
        fa = rng.normal(size=(la, cfg.feature_dim)).astype(np.float32) if cfg.feature_dim else None
        fb = rng.normal(size=(lb, cfg.feature_dim)).astype(np.float32) if cfg.feature_dim else None
        items.append((a, b, fa, fb, pairs))
    return M.make_batch(items, cfg, L, L)


@pytest.mark.parametrize("name", ["default", "k2_eps1", "muot_dustbin_hybrid"])
def test_plan_rows_and_losses_are_finite(name):
    cfg = M.preset(name, feature_dim=6, n_iters=5)
    params = M.init_params(cfg)
    batch = _batch(cfg)
    rows, transported = M.forward(params, batch, cfg)
    rows = np.asarray(rows)
    valid = batch.ma
    if cfg.dustbin == "banded":
        np.testing.assert_allclose(rows.sum(-1)[valid], 1.0, atol=1e-4)  # unit row mass incl. dustbin
    elif cfg.dustbin == "none":  # balanced: the column marginals are exact after the last half-step
        cols = np.einsum("bij->bj", rows[..., :-1])
        np.testing.assert_allclose(cols[batch.mb], 1.0, atol=1e-4)
    else:  # paper: the query-side dustbin row takes part of every key's unit mass
        cols = np.einsum("bij->bj", rows[..., :-1])
        assert np.all(cols[batch.mb] <= 1 + 1e-5) and np.all(rows >= 0)
    assert np.all(rows[~valid] == 0)
    loss, terms = M.loss_fn(params, batch, cfg)
    grads = jax.grad(lambda p: M.loss_fn(p, batch, cfg)[0])(params)
    assert np.isfinite(float(loss)) and all(np.isfinite(float(v)) for v in terms.values())
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree_util.tree_leaves(grads))
    assert float(jnp.abs(grads["sub"]).max()) > 0


def test_make_batch_rejects_long_pairs():
    with pytest.raises(ValueError, match=r"pair 0 \(30 x 5\) does not fit the batch shape 16 x 16"):
        M.make_batch([("A" * 30, "A" * 5, None, None, None)], M.AlignerConfig(), 16, 16)


def test_a_few_steps_reduce_the_cross_entropy():
    cfg = M.preset("default", feature_dim=0, n_iters=8)
    params = M.init_params(cfg)
    batch = _batch(cfg, n=4, seed=1)
    opt = optax.adam(0.05)
    state = opt.init(params)
    step = jax.jit(lambda p, s: _step(p, s, batch, cfg, opt))
    first = float(M.loss_fn(params, batch, cfg)[1]["ce"])
    for _ in range(15):
        params, state = step(params, state)
    assert float(M.loss_fn(params, batch, cfg)[1]["ce"]) < 0.8 * first


def _step(p, s, batch, cfg, opt):
    g = jax.grad(lambda p: M.loss_fn(p, batch, cfg)[0])(p)
    u, s = opt.update(g, s, p)
    return optax.apply_updates(p, u), s
