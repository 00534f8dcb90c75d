"""The NumPy inference engine against the JAX operator, and the Aligner's streaming behaviour.

The engine (sinkalign.align.engine) must compute the plans of the model's JAX forward pass
(the reference) to float64 precision, and the Aligner must give the same alignments with
either engine. conftest.py enables float64 in JAX, so the reference runs in float64 here.
"""

from __future__ import annotations

import numpy as np
import pytest

from sinkalign.align import model as M
from sinkalign.align.aligner import Aligner, compilation_cache_dir
from sinkalign.align.decode import cigar, plan_posteriors
from sinkalign.align.engine import MAX_SPREAD, NumpyEngine, engine_support

AA = "ACDEFGHIKLMNPQRSTVWY"


def _random_seq(rng, n, alphabet=AA):
    return "".join(rng.choice(list(alphabet), n))


def _mutate(rng, seq, rate=0.3, alphabet=AA):
    out = [rng.choice(list(alphabet)) if rng.random() < rate else c for c in seq]
    cut = rng.integers(0, max(1, len(out) - 5))
    del out[cut : cut + rng.integers(0, 5)]
    return "".join(out)


def _separable_params(config, rng, *, dustbins: bool):
    """Parameters whose substitution tensor is exactly w_k * base in float64 (so the engine's
    triangular-filter scores are the reference's scores to rounding), optionally with random
    dustbin tokens."""
    params = {k: np.asarray(v, np.float64) for k, v in M.init_params(config).items()}
    K = config.window
    w = 1.0 - np.abs(np.arange(-K, K + 1)) / (K + 1)
    params["sub"] = w[:, None, None] * params["sub"][K][None]
    if dustbins:
        params["q_dustbin"] = 0.3 * rng.normal(size=params["q_dustbin"].shape)
        params["k_dustbin"] = 0.3 * rng.normal(size=params["k_dustbin"].shape)
    return params


SHAPES = [(1, 1), (1, 40), (40, 1), (5, 130), (130, 5), (97, 257), (300, 290)]


@pytest.mark.parametrize("alphabet, settings", [
    ("protein", dict(window=16, eps=6.0)),  # the shipped protein model's settings
    ("dna", dict(window=8, eps=1.0)),  # the shipped DNA model's settings
    ("protein", dict(window=4, eps=0.5, band=12)),  # a band, a sharper plan
    ("protein", dict(window=3, eps=2.0, dustbin_mass="unit")),
])
@pytest.mark.parametrize("dustbins", [False, True])
def test_engine_plans_are_the_reference_plans_to_float64_precision(alphabet, settings, dustbins):
    config = M.AlignerConfig.create(alphabet=alphabet, embedder={"name": "none"}, feature_dim=0, dustbin="banded",
                             **settings)
    rng = np.random.default_rng(len(settings) + dustbins)
    params = _separable_params(config, rng, dustbins=dustbins)
    engine = NumpyEngine.from_model(params, config)
    letters = AA if alphabet == "protein" else "ACGT"
    pairs = []
    for m, n in SHAPES:
        query = _random_seq(rng, m, letters)
        target = (_mutate(rng, query, alphabet=letters) + _random_seq(rng, n, letters))[:n]
        pairs.append((query, target))
    # one padded batch for the reference (one compilation); the engine takes each pair unpadded
    batch = M.make_batch([(q, t, None, None, None) for q, t in pairs], config, 304, 300)
    rows = np.asarray(M.forward(params, batch, config)[0], np.float64)
    for (query, target), row in zip(pairs, rows):
        m, n = len(query), len(target)
        ref = M.pair_plan(row, m, n)
        solution = engine.solve(query, target)
        got = solution.plan()
        assert got.shape == (m + 1, n + 1)
        np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-13 * ref.max(), err_msg=f"{m} x {n}")
        for fast, slow in zip(solution.posteriors(), plan_posteriors(ref)):  # read off without the plan
            np.testing.assert_allclose(fast, slow, rtol=1e-10, atol=1e-15)


def test_engine_scores_match_the_models_q_k_scores():
    """The score matrix itself (real block and dustbin row/column) against Q K^T / eps."""
    config = M.preset("default", embedder={"name": "none"}, feature_dim=0)
    rng = np.random.default_rng(3)
    params = _separable_params(config, rng, dustbins=True)
    engine = NumpyEngine.from_model(params, config)
    long_q, long_t = _random_seq(rng, 150), _random_seq(rng, 2100)  # several row tiles of the filters
    for query, target in [("MKVLAAGHWERTYLLKPQXB", "mkvlagHWERTYLKPQDESTRIV"),  # X, B (-> X), lower case
                          (long_q, long_t)]:
        batch = M.make_batch([(query, target, None, None, None)], config, len(query), len(target))
        q, k = M.queries_keys(params, batch, config)
        q, k = np.asarray(q)[0], np.asarray(k)[0]
        scale = 1.0 / (np.sqrt(q.shape[-1]) * config.sinkhorn.eps)
        m, n = len(query), len(target)
        ref = np.empty((m + 1, n + 1))
        ref[:m, :n] = q @ k.T * scale
        ref[:m, n] = q @ params["k_dustbin"] * scale
        ref[m, :n] = k @ params["q_dustbin"] * scale
        ref[m, n] = params["q_dustbin"] @ params["k_dustbin"] * scale
        got = engine.scores(engine.encode(query), engine.encode(target))
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-13)


def test_shipped_window_models_run_on_the_numpy_engine_and_the_learned_one_on_jax():
    from sinkalign.align.aligner import default_model_path

    for name in ("blosum", "dna"):
        assert Aligner.load(name).engine == "numpy"
        assert Aligner.load(name, engine="jax").engine == "jax"
    assert Aligner.load(default_model_path("dna")).engine == "numpy"
    learned = Aligner.load()  # the default protein model: learned context features
    assert learned.engine == "jax" and learned.config.res_ctx_dim > 0
    with pytest.raises(ValueError, match="engine='numpy' cannot run this model"):
        Aligner.load(engine="numpy")


def test_models_outside_the_engine_name_the_reason_and_fall_back_to_jax():
    base = M.preset("default", embedder={"name": "none"}, feature_dim=0)
    params = M.init_params(base)
    assert engine_support(params, base) is None
    cases = [
        (base.replace(feature_dim=8, embedder={"name": "builtin"}), None, "context features"),
        (base.replace(dustbin="paper", dustbin_mass="unit"), None, "dustbin='paper'"),
        (base, {"sub": np.asarray(params["sub"]) + 1e-3 * np.random.default_rng(0).normal(size=params["sub"].shape)},
         "not triangular-separable"),
        (base, {"sub": np.asarray(params["sub"]) * np.linspace(1, 2, 33)[:, None, None]}, "not triangular-separable"),
        (base.replace(eps=1e-3), None, "may span"),
    ]
    for config, override, reason in cases:
        p = dict(M.init_params(config))
        p.update(override or {})
        assert reason in engine_support(p, config)
        with pytest.raises(ValueError, match=f"engine='numpy' cannot run this model: .*{reason}"):
            Aligner(p, config, engine="numpy")
        assert Aligner(p, config).engine == "jax"
    with pytest.raises(ValueError, match="engine='fast' is not one of"):
        Aligner(params, base, engine="fast")
    with pytest.raises(ValueError, match="workers=0 must be >= 1"):
        Aligner(params, base, workers=0)
    assert MAX_SPREAD < 700  # exp(-MAX_SPREAD) must stay a normal float64


def _awkward_pairs():
    """Length 1, very unequal lengths, pairs on both sides of the length buckets (64, 128, 256,
    1024) and past them, unrelated and identical sequences, unknown letters."""
    rng = np.random.default_rng(11)
    anc = _random_seq(rng, 1100)
    pairs = [("one", "W", "one_b", "W"), ("one_c", "M", "long", anc[:300]), ("long2", anc[:300], "one_d", "K"),
             ("short", anc[500:520], "longer", _mutate(rng, anc[400:1000])),
             ("unrel_a", _random_seq(rng, 150), "unrel_b", _random_seq(rng, 140)),
             ("same", anc[:77], "same2", anc[:77]), ("xs", "MKVXXXXLAAGHWER", "xs2", "MKVLAAGBZHWERX")]
    for L in (64, 65, 128, 129, 256, 257, 1024, 1025):
        pairs.append((f"q{L}", anc[:L], f"t{L}", _mutate(rng, anc[:L])))
    return pairs


def test_numpy_engine_gives_the_reference_alignments_on_awkward_inputs():
    items = _awkward_pairs()
    fast = list(Aligner.load("blosum", workers=2).align_many(items))
    ref = list(Aligner.load("blosum", engine="jax").align_many(items, batch_size=4))
    assert [(r.query_id, r.target_id) for r in fast] == [(q, t) for q, _, t, _ in items]
    for a, b, (qid, q, tid, t) in zip(fast, ref, items):
        np.testing.assert_array_equal(a.alignment.pairs, b.alignment.pairs, err_msg=f"{qid} / {tid}")
        assert cigar(a.alignment, len(q), len(t)) == cigar(b.alignment, len(q), len(t))
        # calibrated confidences: the plans agree to ~1e-8 (float32-stored parameters)
        np.testing.assert_allclose(a.alignment.match_posterior, b.alignment.match_posterior, atol=1e-5)
        assert a.alignment.score == pytest.approx(b.alignment.score, rel=1e-6)
    identical = next(r for r in fast if r.query_id == "same")
    np.testing.assert_array_equal(identical.alignment.pairs, np.stack([np.arange(77)] * 2, 1))


def test_results_stream_in_input_order_and_a_bad_pair_is_named_after_the_ones_before_it():
    rng = np.random.default_rng(5)
    items = [(f"q{i}", _random_seq(rng, int(rng.integers(1, 300))), f"t{i}", _random_seq(rng, int(rng.integers(1, 300))))
             for i in range(70)]
    aligner = Aligner.load(workers=2)
    single = Aligner.load(workers=1)
    got = list(aligner.align_many(iter(items)))
    assert [r.query_id for r in got] == [q for q, *_ in items]
    for a, b in zip(got, single.align_many(items)):
        np.testing.assert_array_equal(a.alignment.pairs, b.alignment.pairs)
        np.testing.assert_array_equal(a.alignment.match_posterior, b.alignment.match_posterior)
    bad = items[:40] + [("bad", "", "t", "MKV")] + items[40:]
    seen = []
    with pytest.raises(ValueError, match="pair bad / t: the query sequence is empty"):
        for res in aligner.align_many(bad):
            seen.append(res.query_id)
    assert seen == [q for q, *_ in items[:40]]
    seen = []
    with pytest.raises(ValueError, match="pair bad / t: the query sequence is empty"):
        for res in Aligner.load(engine="jax").align_many(bad[35:], batch_size=4):
            seen.append(res.query_id)
    assert seen == [q for q, *_ in items[35:40]]


def test_align_pairs_takes_records_or_tuples_and_keeps_plans():
    from sinkalign.io.fasta import Sequence

    rec = lambda i, s: Sequence(id=i, description="", seq=s, alphabet="protein")  # noqa: E731
    aligner = Aligner.load("blosum")
    pairs = [(rec("a", "MKVLAAGHWER"), rec("b", "MKVLAGHWER")), (("c", "PQDESTRIV"), ("d", "PQDSTRIV"))]
    got = list(aligner.align_pairs(pairs, keep_plan=True))
    assert [(r.query_id, r.target_id) for r in got] == [("a", "b"), ("c", "d")]
    np.testing.assert_array_equal(got[0].plan, aligner._numpy.plan("MKVLAAGHWER", "MKVLAGHWER"))
    assert got[1].plan.shape == (10, 9)
    assert got[0].alignment.pairs.tolist() == aligner.align("MKVLAAGHWER", "MKVLAGHWER").alignment.pairs.tolist()


def test_compilation_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("SINKALIGN_JAX_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compilation_cache_dir() == tmp_path / "sinkalign" / "jax"
    monkeypatch.setenv("SINKALIGN_JAX_CACHE", str(tmp_path / "elsewhere"))
    assert compilation_cache_dir() == tmp_path / "elsewhere"
    for off in ("0", "off", ""):
        monkeypatch.setenv("SINKALIGN_JAX_CACHE", off)
        assert compilation_cache_dir() is None


def test_blas_runs_on_one_thread_while_a_stream_runs_and_is_restored_after():
    from threadpoolctl import ThreadpoolController

    blas = [lib for lib in ThreadpoolController().info() if lib["user_api"] == "blas"]
    if not blas:
        pytest.skip("no BLAS library that threadpoolctl can see")

    def threads():
        return [lib["num_threads"] for lib in ThreadpoolController().info() if lib["user_api"] == "blas"]

    before = threads()
    stream = Aligner.load("blosum").align_many([("a", "MKVLAAGHWER", "b", "MKVLAGHWER")] * 3)
    next(stream)
    assert threads() == [1] * len(before)
    list(stream)
    assert threads() == before


def test_embedder_options_reach_the_embedder_builder():
    """Aligner(..., embedder_options=...) builds the model's embedder with them (here a wrong
    one, which the config check must refuse), and cannot be combined with an embedder."""
    from sinkalign.align import model as M
    from sinkalign.align.embed import get_embedder

    emb = get_embedder("builtin", alphabet="protein")
    config = M.AlignerConfig(embedder=emb.config(), feature_dim=emb.dim)
    params = M.init_params(config, seed=0)
    assert Aligner(params, config).embedder.config() == emb.config()
    with pytest.raises(ValueError, match="alphabet"):
        Aligner(params, config, embedder_options={"alphabet": "dna"}).embedder
    with pytest.raises(ValueError, match="either embedder or embedder_options"):
        Aligner(params, config, embedder=emb, embedder_options={"alphabet": "protein"})


def test_jax_engine_batches_respect_the_cell_budget_and_keep_the_input_order(monkeypatch):
    """Chunks hold at most batch_size pairs and at most the backend's cell budget (pairs x
    padded length^2); long pairs share a chunk when the budget allows, and results are the
    same alignments in input order whatever the chunking."""
    import sinkalign.align.aligner as A

    rng = np.random.default_rng(11)
    lengths = [40, 1100, 60, 1300, 1200, 70, 1500, 30]
    items = []
    for n, L in enumerate(lengths):
        anc = "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), L))
        items.append((f"q{n}", anc, f"t{n}", _mutate(rng, anc)))
    aligner = Aligner.load(engine="jax")
    chunks = list(aligner._jax_batches(items, 8))
    assert [it for c in chunks for it in c] == items
    budget = A.jax_batch_cells()
    for c in chunks:
        L = A.padded_length(max(max(len(q), len(t)) for _, q, _, t in c))
        assert len(c) == 1 or len(c) * L * L <= budget
    monkeypatch.setitem(A.JAX_BATCH_CELLS, "cpu", 4 * 1536 * 1536)
    wide = list(aligner._jax_batches(items, 8))
    assert len(wide) < len(chunks) and [it for c in wide for it in c] == items
    assert any(sum(len(q) > 1024 for _, q, _, _ in c) >= 2 for c in wide)  # long pairs batched together
    got = list(aligner.align_many(items, batch_size=8))
    ref = list(Aligner.load(workers=1).align_many(items))
    assert [r.query_id for r in got] == [q for q, _, _, _ in items]
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a.alignment.pairs, b.alignment.pairs, err_msg=a.query_id)
