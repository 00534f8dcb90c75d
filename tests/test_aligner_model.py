"""The aligner model: configuration, the BLOSUM-diagonal initialisation, losses, gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from Bio.Align import substitution_matrices

from sinkalign.align import model as M
from sinkalign.errors import InputError


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
        M.AlignerConfig.create(tail=4)
    with pytest.raises(ValueError, match="unknown AlignerConfig keys"):
        M.AlignerConfig.from_dict({"wat": 1})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"window": "abc"}, "window='abc' must be an integer >= 0"),
        ({"window": 1.5}, "window=1.5 must be an integer >= 0"),
        ({"feature_dim": -1}, "feature_dim=-1 must be an integer >= 0"),
        ({"res_ctx_dim": 4, "res_ctx_kernel": 0}, "res_ctx_kernel=0 must be an integer >= 1"),
        ({"losses": 3}, r"losses=3 must map loss terms \('ce', 'recon', 'mono', 'f1'\) to numbers"),
        ({"losses": {"ce": "x"}}, r"losses=\{'ce': 'x'\} must map loss terms"),
        ({"alphabet": ["x"]}, r"alphabet=\['x'\] is not one of"),
        ({"eps": "x"}, "eps='x' must be a finite number > 0"),
        ({"band": [1]}, r"band=\[1\] must be an integer >= 1"),
        ({"n_iters": None}, "n_iters=None must be an integer >= 0"),
        ({"backward": [1]}, r"backward=\[1\] is not one of"),
        ({"dustbin": 5}, r"dustbin=5 is not one of \('banded', 'paper', 'none'\)"),
        ({"dustbin_mass": 3}, r"dustbin_mass=3 is not one of \('unit', 'length'\)"),
        ({"dustbin_mass": "big"}, "mass='big' is not one of"),
        ({"temperature": 2}, r"unknown AlignerConfig settings \['temperature'\]"),
        ({"feature_dim": 8, "ctx_dim": 0}, "ctx_dim=0 must be an integer >= 1"),
        ({"feature_dim": 8, "ctx_layers": -1}, "ctx_layers=-1 must be an integer >= 0"),
        ({"feature_dim": 8, "ctx_kernel": 2.5}, "ctx_kernel=2.5 must be an integer >= 1"),
        ({"feature_dim": 8, "qk_ctx_dim": "32"}, "qk_ctx_dim='32' must be an integer >= 1"),
        ({"decode_gap_weight": -0.1}, "decode_gap_weight=-0.1 must be a finite number >= 0"),
        ({"decode_gap_weight": float("nan")}, "decode_gap_weight=nan must be a finite number >= 0"),
        ({"decode_gap_weight": "1"}, "decode_gap_weight='1' must be a finite number >= 0"),
    ],
)
def test_bad_settings_of_any_type_are_input_errors(settings, message):
    """Settings come from users (`train --model-option KEY=JSON`): any value of any type is an
    InputError (still a ValueError) naming the setting, never a TypeError or AttributeError."""
    with pytest.raises(InputError, match=message) as info:
        M.preset("default", **settings)
    assert isinstance(info.value, ValueError)


def test_presets_round_trip():
    for name in M.PRESETS:
        cfg = M.preset(name)
        assert M.AlignerConfig.from_dict(cfg.to_dict()) == cfg
    assert M.preset("k4_eps1").sinkhorn.tail == 4 and M.preset("muot_dustbin_mono").dustbin_variant == "paper"


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
    if cfg.dustbin_variant == "banded":
        np.testing.assert_allclose(rows.sum(-1)[valid], 1.0, atol=1e-4)  # unit row mass incl. dustbin
    elif cfg.dustbin is None:  # balanced: the column marginals are exact after the last half-step
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


def test_aligner_config_holds_the_operators_configs_and_reads_the_flat_form():
    """The solver and dustbin settings live in one SinkhornConfig and one DustbinConfig (no
    re-declared fields); flat names work in create/replace/from_dict; JSON round-trips; the
    shipped models' state.json, written in the flat form, load to the same configs."""
    import json
    from pathlib import Path

    from sinkalign.sinkhorn import DustbinConfig, SinkhornConfig

    fields = set(M.AlignerConfig.__dataclass_fields__)
    assert {"sinkhorn", "dustbin"} <= fields and not fields & {"eps", "n_iters", "tail", "band", "backend", "dustbin_mass"}
    cfg = M.AlignerConfig.create(eps=6.0, band=40, dustbin="banded", dustbin_mass="unit", window=4)
    assert cfg.sinkhorn == SinkhornConfig(eps=6.0, band=40) and cfg.dustbin == DustbinConfig(mass="unit")
    assert cfg.replace(dustbin="none").dustbin is None and cfg.replace(dustbin=None).dustbin_variant == "none"
    assert cfg.replace(dustbin="paper").dustbin == DustbinConfig(variant="paper", mass="unit")
    assert cfg.replace(sinkhorn=SinkhornConfig(n_iters=3)).sinkhorn.eps == 1.0
    assert cfg.replace(n_iters=3).sinkhorn == SinkhornConfig(eps=6.0, band=40, n_iters=3)
    nested = cfg.to_dict()
    assert nested["sinkhorn"]["eps"] == 6.0 and nested["dustbin"]["mass"] == "unit" and "eps" not in nested
    assert M.AlignerConfig.from_dict(json.loads(json.dumps(nested))) == cfg
    flat = {k: v for k, v in nested.items() if k not in ("sinkhorn", "dustbin")}
    flat.update(eps=6.0, band=40, n_iters=15, tail=2, backward="one_reference", impl="reference",
                dustbin="banded", dustbin_mass="unit")
    assert M.AlignerConfig.from_dict(flat) == cfg
    with pytest.raises(ValueError, match="dustbin='sideways' is not one of"):
        cfg.replace(dustbin="sideways")
    with pytest.raises(ValueError, match=r"unknown AlignerConfig settings \['epsilon'\]"):
        cfg.replace(epsilon=1.0)
    with pytest.raises(ValueError, match="sinkhorn must be a SinkhornConfig"):
        M.AlignerConfig(sinkhorn={"eps": 1.0})
    data = Path(M.__file__).resolve().parents[1] / "data"
    for name, eps in (("aligner_blosum", 6.0), ("aligner_learned", 6.0), ("aligner_dna", None)):
        state = json.loads((data / name / "state.json").read_text())
        assert "eps" in state["model"] or "sinkhorn" in state["model"]
        loaded = M.AlignerConfig.from_dict(state["model"])
        assert loaded.dustbin == DustbinConfig(variant="banded", mass="length")
        if eps is not None:
            assert loaded.sinkhorn.eps == eps
        assert M.AlignerConfig.from_dict(loaded.to_dict()) == loaded


def test_soft_f1_term_reads_the_plan_as_expected_counts():
    """The f1 term from given plan rows: 0 for the reference itself, the expected-count F1
    otherwise (hand-computed), only query residues with a known reference state counting."""
    cfg = M.preset("default", feature_dim=0, embedder={"name": "none"}, n_iters=4, window=2)
    items = [("MKVLA", "MKVA", None, None, np.array([[0, 0], [1, 1], [2, 2], [4, 3]]))]
    batch = M.make_batch(items, cfg, 6, 6)
    lq, lk = batch.a.shape[1], batch.b.shape[1]
    ta = np.asarray(batch.ta[0])
    assert list(ta[:5]) == [0, 1, 2, lk, 3]  # residue 3 is a gap (the dustbin column lk)
    exact = np.zeros((1, lq, lk + 1))
    for i, t in enumerate(ta[:5]):
        exact[0, i, t] = 1.0
    transported = np.zeros((1, lq, 0))
    _, terms = M.loss_from_outputs(jnp.asarray(exact), jnp.asarray(transported), batch, cfg)
    assert float(terms["f1"]) == pytest.approx(0.0, abs=1e-7)
    # half of each aligned residue's mass on its partner, half on the next target (or the dustbin);
    # the gap residue puts 0.3 on target 0
    soft = np.zeros_like(exact)
    for i, t in enumerate(ta[:5]):
        if t < lk:
            soft[0, i, t] = 0.5
            soft[0, i, t + 1 if t + 1 < 4 else lk] += 0.5
        else:
            soft[0, i, 0], soft[0, i, lk] = 0.3, 0.7
    tp = 4 * 0.5
    predicted = 3 * 1.0 + 0.5 + 0.3  # rows 0-2 keep all their mass on targets, row 4 half, row 3 (gap) 0.3
    assert soft[0, :5, :lk].sum() == pytest.approx(predicted)
    expect = 1 - 2 * tp / (4 + predicted)
    _, terms = M.loss_from_outputs(jnp.asarray(soft), jnp.asarray(transported), batch, cfg)
    assert float(terms["f1"]) == pytest.approx(expect, rel=1e-6)
    assert 0 < expect < 1


def _dense_scores(params, config, a, b, feats=None):
    """The augmented score matrix ``[m + 1, n + 1]`` (real block, dustbin column and row, corner)
    of one pair, as the operator forms it from ``queries_keys`` and ``dustbin_tokens`` (the real
    block ``[m, n]`` without dustbins)."""
    fa, fb = feats if feats is not None else (None, None)
    batch = M.make_batch([(a, b, fa, fb, None)], config, len(a), len(b))
    q, k = (np.asarray(x, np.float64)[0] for x in M.queries_keys(params, batch, config))
    scale = 1.0 / (np.sqrt(q.shape[-1]) * config.sinkhorn.eps)
    if config.dustbin is None:
        return q @ k.T * scale
    qd, kd = (np.asarray(x, np.float64) for x in M.dustbin_tokens(params, config))
    m, n = len(a), len(b)
    S = np.empty((m + 1, n + 1))
    S[:m, :n], S[:m, n], S[m, :n], S[m, n] = q @ k.T, q @ kd, k @ qd, qd @ kd
    return S * scale


def _asymmetric_params(config, seed=0):
    """Parameters with every direction-dependent part away from its initial value: a window
    that is not symmetric, distinct residual query/key maps, gap head and dustbin tokens."""
    rng = np.random.default_rng(seed)
    params = {k: np.asarray(v, np.float64) for k, v in M.init_params(config, seed=seed).items()}
    for name in ("sub", "res_wk", "gap_w", "gap_b", "q_dustbin", "k_dustbin", "wq", "wk"):
        if name in params:
            params[name] = params[name] + 0.2 * rng.normal(size=params[name].shape)
    return params


@pytest.mark.parametrize("settings", [
    dict(res_ctx_dim=12, res_ctx_layers=2, res_qk_dim=8, gap_head=True),  # the shipped model's kind
    dict(feature_dim=6, res_ctx_dim=8, res_ctx_layers=1, res_qk_dim=4),  # embedder features too
    dict(dustbin="paper", res_ctx_dim=8, res_ctx_layers=1, res_qk_dim=4),
    dict(dustbin="none"),
])
def test_a_symmetric_model_scores_the_mean_of_both_directions(settings):
    """``symmetric=True`` scores a pair as ``S(a, b) / 2 + S(b, a)^T / 2`` of the same parameters,
    dustbin row, column and corner included, so aligning b to a scores the transpose exactly."""
    one_way = M.preset("default", embedder={"name": "none"}, window=3, **settings)
    both = one_way.replace(symmetric=True)
    params = _asymmetric_params(one_way)
    rng = np.random.default_rng(1)
    a, b = "MKVLAAGHWQERTS", "MKILSAGWQDRS"
    F = one_way.feature_dim
    fa, fb = (rng.normal(size=(len(s), F)) for s in (a, b)) if F else (None, None)
    fwd = _dense_scores(params, one_way, a, b, (fa, fb))
    rev = _dense_scores(params, one_way, b, a, (fb, fa))
    assert np.abs(fwd - rev.T).max() > 0.05  # the one-way model is not symmetric
    sym = _dense_scores(params, both, a, b, (fa, fb))
    np.testing.assert_allclose(sym, 0.5 * (fwd + rev.T), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_dense_scores(params, both, b, a, (fb, fa)), sym.T, rtol=1e-12, atol=1e-12)
    assert M.AlignerConfig.from_dict(both.to_dict()) == both and both != one_way
    assert M.AlignerConfig.from_dict({k: v for k, v in one_way.to_dict().items() if k != "symmetric"}) == one_way


def test_a_symmetric_models_plan_is_transposed_with_the_pair_and_trains():
    """Near convergence the plan of (b, a) is the transpose of the plan of (a, b); the gradient
    of the loss reaches every parameter of both roles (the key map and the query map), and a
    directional derivative matches a central difference."""
    config = M.preset("default", embedder={"name": "none"}, window=3, n_iters=300, res_ctx_dim=8,
                      res_ctx_layers=1, res_qk_dim=4, gap_head=True, symmetric=True)
    params = _asymmetric_params(config, seed=2)
    a, b = "MKVLAAGHWQERTSPL", "MKILSAGWQDRSL"
    fwd = M.plans(params, M.make_batch([(a, b, None, None, None)], config, len(a), len(b)), config)[0]
    rev = M.plans(params, M.make_batch([(b, a, None, None, None)], config, len(b), len(a)), config)[0]
    m, n = len(a), len(b)
    np.testing.assert_allclose(fwd[:m, :n], rev[:n, :m].T, atol=1e-9)
    np.testing.assert_allclose(fwd[:m, n], rev[n, :m], atol=1e-9)  # a's gap mass, as query and as target
    pairs = np.array([[0, 0], [1, 1], [2, 2], [4, 3], [5, 4], [6, 5]])
    batch = M.make_batch([(a, b, None, None, pairs)], config.replace(n_iters=15), m, n)
    cfg = config.replace(n_iters=15)
    loss = lambda p: M.loss_fn(p, batch, cfg)[0]  # noqa: E731
    grads = jax.grad(loss)(params)
    for name in ("sub", "res_wq", "res_wk", "gap_w", "q_dustbin", "k_dustbin"):
        assert np.abs(np.asarray(grads[name])).max() > 0, name
    rng = np.random.default_rng(3)
    direction = {k: rng.normal(size=np.shape(v)) for k, v in params.items()}
    h = 1e-5
    shifted = lambda s: loss({k: params[k] + s * direction[k] for k in params})  # noqa: E731
    numeric = (shifted(h) - shifted(-h)) / (2 * h)
    analytic = sum(np.sum(np.asarray(grads[k]) * direction[k]) for k in params)
    # the operator's gradient is the stopped-base tail surrogate, not the full derivative: the two
    # agree to the base solve's convergence (15 steps), far better than a wrong gradient would
    assert float(analytic) == pytest.approx(float(numeric), rel=1e-4)
