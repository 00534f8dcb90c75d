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
from sinkalign.errors import InputError

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


def _learned_params(config, rng):
    """Parameters of a trained-looking model: a window that is not triangular, a residue
    encoder with non-zero residual and gap scores, random dustbin tokens (float64)."""
    params = {k: np.asarray(v, np.float64) for k, v in M.init_params(config, seed=1).items()}
    params["sub"] = params["sub"] + 0.05 * rng.normal(size=params["sub"].shape)
    for name in ("res_wk", "gap_w", "gap_b", "res_scale"):
        if name in params:
            params[name] = params[name] + 0.3 * rng.normal(size=params[name].shape)
    params["q_dustbin"] = params["q_dustbin"] + 0.3 * rng.normal(size=params["q_dustbin"].shape)
    params["k_dustbin"] = params["k_dustbin"] + 0.3 * rng.normal(size=params["k_dustbin"].shape)
    return params


LEARNED = dict(res_ctx_dim=24, res_ctx_layers=3, res_ctx_kernel=5, res_qk_dim=16, gap_head=True)
SHAPES = [(1, 1), (1, 40), (40, 1), (5, 130), (130, 5), (97, 257), (300, 290)]


@pytest.mark.parametrize("alphabet, settings", [
    ("protein", dict(window=16, eps=6.0)),  # the shipped protein model's settings
    ("dna", dict(window=8, eps=1.0)),  # the shipped DNA model's settings
    ("protein", dict(window=4, eps=0.5, band=12)),  # a band, a sharper plan
    ("protein", dict(window=3, eps=2.0, dustbin_mass="unit")),
])
@pytest.mark.parametrize("model", ["triangular", "triangular+dustbins", "learned", "learned+symmetric"])
def test_engine_plans_are_the_reference_plans_to_float64_precision(alphabet, settings, model):
    """Triangular windows (the blosum and dna models' filter path) with zero and random
    dustbin tokens, and learned models (any window, the residue encoder, the gap head), one
    of them symmetric (both directions' scores averaged)."""
    learned = model.startswith("learned")
    extra = LEARNED if learned else {}
    config = M.AlignerConfig.create(alphabet=alphabet, embedder={"name": "none"}, feature_dim=0, dustbin="banded",
                                    symmetric=model.endswith("symmetric"), **settings, **extra)
    rng = np.random.default_rng(len(settings) + len(model))
    if learned:
        params = _learned_params(config, rng)
    else:
        params = _separable_params(config, rng, dustbins=model.endswith("dustbins"))
    engine = NumpyEngine.from_model(params, config)
    assert (engine.base is None) == learned and (engine.encoder is None) == (not learned)
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
        fast, slow = solution.posteriors(), plan_posteriors(ref)  # read off without the plan, and off it
        np.testing.assert_allclose(fast.match, slow.match, rtol=1e-10, atol=1e-15)
        # a gap posterior near 0 is 1 minus a sum of up to max(m, n) + 1 terms that the two
        # compute in different orders: each is within that many float64 roundings of the truth
        sum_rounding = (max(m, n) + 1) * np.finfo(np.float64).eps
        for name in ("query_gap", "target_gap"):
            np.testing.assert_allclose(getattr(fast, name), getattr(slow, name), rtol=1e-10, atol=sum_rounding,
                                       err_msg=name)


@pytest.mark.parametrize("model", ["triangular", "learned", "encoder+triangular", "triangular+symmetric",
                                   "learned+symmetric"])
def test_engine_scores_match_the_models_q_k_scores(model):
    """The score matrix itself (real block and dustbin row/column) against Q K^T / eps: the
    triangular filters, a trained window with the encoder, the encoder with an untrained
    (triangular) window, as at step 0 of training, and symmetric models (both directions'
    scores averaged: the window, the residual pair score, the gap head and the dustbins)."""
    rng = np.random.default_rng(3)
    symmetric = model.endswith("symmetric")
    if not model.startswith("triangular"):
        config = M.preset("default", embedder={"name": "none"}, feature_dim=0, symmetric=symmetric, **LEARNED)
        params = _learned_params(config, rng)
        if model == "encoder+triangular":
            params["sub"] = _separable_params(config, rng, dustbins=False)["sub"]
            assert NumpyEngine.from_model(params, config).base is not None
    else:
        config = M.preset("default", embedder={"name": "none"}, feature_dim=0, symmetric=symmetric)
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
        q_db, k_db = (np.asarray(x) for x in M.dustbin_tokens(params, config))
        ref[:m, n] = q @ k_db * scale
        ref[m, :n] = k @ q_db * scale
        ref[m, n] = q_db @ k_db * scale
        got = engine.scores(engine.encode(query), engine.encode(target))
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-13)
        np.testing.assert_array_equal(engine.scores(engine.sides(query), engine.sides(target)), got)
        if symmetric:  # the pair the other way round: the transposed scores
            np.testing.assert_allclose(engine.scores(engine.encode(target), engine.encode(query)), got.T,
                                       rtol=1e-12, atol=1e-13)


def test_shipped_models_run_on_the_numpy_engine():
    from sinkalign.align.aligner import default_model_path

    for name in ("learned", "blosum", "dna"):
        assert Aligner.load(name).engine == "numpy"
        assert Aligner.load(name, engine="jax").engine == "jax"
    assert Aligner.load(default_model_path("dna")).engine == "numpy"
    learned = Aligner.load()  # the default protein model: the residue encoder, a trained window
    assert learned.engine == "numpy" and learned._numpy.encoder is not None and learned._numpy.base is None
    assert Aligner.load("blosum")._numpy.base is not None  # the triangular filter path


def test_the_shipped_learned_model_on_the_engine_is_its_float64_forward_pass():
    """The default protein model's stored (float32) parameters, evaluated in float64 by both."""
    from sinkalign.align.aligner import resolve_model
    from sinkalign.align.checkpoints import load_checkpoint

    params, state, _ = load_checkpoint(resolve_model("learned"))
    config = M.AlignerConfig.from_dict(state["model"])
    params = {k: np.asarray(v, np.float64) for k, v in params.items()}
    engine = NumpyEngine.from_model(params, config)
    rng = np.random.default_rng(21)
    anc = _random_seq(rng, 260)
    pairs = [("W", "W"), ("MKV", "A" * 40), (anc, _mutate(rng, anc)), ("MKVXXLBZAGH", "mkvlaghwqQ"),
             (_random_seq(rng, 97), _random_seq(rng, 130))]
    batch = M.make_batch([(q, t, None, None, None) for q, t in pairs], config, 260, 260)
    rows = np.asarray(M.forward(params, batch, config)[0], np.float64)
    for (query, target), row in zip(pairs, rows):
        ref = M.pair_plan(row, len(query), len(target))
        np.testing.assert_allclose(engine.plan(query, target), ref, rtol=1e-11, atol=1e-13 * ref.max(),
                                   err_msg=f"{query[:10]} / {target[:10]}")


def test_models_outside_the_engine_name_the_reason_and_fall_back_to_jax():
    base = M.preset("default", embedder={"name": "none"}, feature_dim=0)
    params = M.init_params(base)
    assert engine_support(params, base) is None
    cases = [
        (base.replace(feature_dim=8, embedder={"name": "builtin"}), None, "embedder features"),
        (base.replace(dustbin="paper", dustbin_mass="unit"), None, "dustbin='paper'"),
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
    with pytest.raises(ValueError, match="workers=0 must be a whole number >= 1"):
        Aligner(params, base, workers=0)
    assert MAX_SPREAD < 700  # exp(-MAX_SPREAD) must stay a normal float64
    # any window runs on the engine: triangular ones through the filters, others offset by offset
    for sub, triangular in [(np.asarray(params["sub"]), True),
                            (np.asarray(params["sub"]) * np.linspace(1, 2, 33)[:, None, None], False),
                            (np.asarray(params["sub"]) + 1e-3 * np.random.default_rng(0).normal(size=(33, 21, 21)),
                             False)]:
        aligner = Aligner({**params, "sub": sub}, base)
        assert aligner.engine == "numpy" and (aligner._numpy.base is not None) == triangular


@pytest.mark.parametrize("model", ["triangular", "learned"])
def test_scores_too_spread_for_the_scaling_form_are_solved_in_the_log_domain(model, monkeypatch):
    """A small eps spreads the scores past MAX_SPREAD: those pairs take the log-domain path,
    with the same plans as the reference (and the same as the scaling form where both apply)."""
    import sinkalign.align.engine as E

    extra = LEARNED if model == "learned" else {}
    config = M.AlignerConfig.create(embedder={"name": "none"}, feature_dim=0, dustbin="banded", window=4, eps=0.01,
                                    band=20, **extra)
    rng = np.random.default_rng(8)
    params = _learned_params(config, rng) if model == "learned" else _separable_params(config, rng, dustbins=True)
    engine = NumpyEngine.from_model(params, config)
    calls = []
    real = E._log_domain_solve
    monkeypatch.setattr(E, "_log_domain_solve", lambda *a: calls.append(1) or real(*a))
    anc = _random_seq(rng, 60)
    pairs = [(anc, _mutate(rng, anc)), (anc[:7], anc[:9]), ("W", "W")]
    batch = M.make_batch([(q, t, None, None, None) for q, t in pairs], config, 60, 60)
    rows = np.asarray(M.forward(params, batch, config)[0], np.float64)
    for (query, target), row in zip(pairs, rows):
        ref = M.pair_plan(row, len(query), len(target))
        S = engine.scores(engine.sides(query), engine.sides(target))
        spread = S.max() - S.min()
        n_calls = len(calls)
        got = engine.plan(query, target)
        assert len(calls) - n_calls == (spread > MAX_SPREAD)
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12 * ref.max(), err_msg=f"{len(query)}")
    assert calls  # the long pair's scores span more than MAX_SPREAD


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


@pytest.mark.parametrize("name", ["blosum", "learned"])
def test_numpy_engine_gives_the_reference_alignments_on_awkward_inputs(name):
    items = _awkward_pairs()
    # dense plans on both engines (by default lopsided pairs go in a box: test_band.py)
    fast = list(Aligner.load(name, workers=2, band="dense").align_many(items))
    ref = list(Aligner.load(name, engine="jax", band="dense").align_many(items, batch_size=4))
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


@pytest.mark.parametrize("engine", ["numpy", "jax"])
def test_a_symmetric_model_aligns_a_pair_the_same_either_way(engine):
    """Aligning b to a is exactly aligning a to b turned round: pairs, confidences, gap
    posteriors (swapped), score and plan (transposed), whatever order the stream gives; the
    one-way model with the same parameters does not have this property. (A sequence against
    itself has one order: its plan is symmetric to float64 rounding.)"""
    config = M.preset("default", embedder={"name": "none"}, feature_dim=0, window=6, **LEARNED)
    params = _learned_params(config, np.random.default_rng(8))
    rng = np.random.default_rng(9)
    pairs = []
    for m in (12, 40, 40, 75):
        a = _random_seq(rng, m)
        pairs += [(a, _mutate(rng, a)), (a, _random_seq(rng, m))]  # related, unrelated, equal lengths
    pairs.append(("MKVLA", "MKVLA"))
    items = [(f"a{i}", a, f"b{i}", b) for i, (a, b) in enumerate(pairs)]
    swapped = [(t, b, q, a) for q, a, t, b in items]
    differs = 0
    for symmetric in (True, False):
        aligner = Aligner(params, config.replace(symmetric=symmetric), engine=engine)
        both = list(aligner.align_many(items + swapped, keep_plan=True, batch_size=3))
        for one, other in zip(both[: len(items)], both[len(items) :]):
            turned = other.transposed()
            assert (turned.query_id, turned.target_id) == (one.query_id, one.target_id)
            tol = 1e-12 if one.query == one.target else 0.0
            x, y = turned.alignment, one.alignment
            same = (np.array_equal(x.pairs, y.pairs)
                    and all(np.allclose(getattr(x, name), getattr(y, name), rtol=0, atol=tol)
                            for name in ("match_posterior", "query_gap_posterior", "target_gap_posterior", "score"))
                    and np.allclose(turned.plan, one.plan, rtol=0, atol=tol))
            if symmetric:
                assert same, one.query_id
            else:
                differs += not same
    assert differs >= len(items) // 2
    # a bad pair is named as given, after the results before it
    aligner = Aligner(params, config.replace(symmetric=True), engine=engine)
    seen = []
    with pytest.raises(ValueError, match="pair q / bad: the target sequence is empty"):
        for res in aligner.align_many(swapped[:3] + [("q", "MKVLL", "bad", "")] + items):
            seen.append(res.query_id)
    assert seen == [q for q, *_ in swapped[:3]]


def test_align_pairs_takes_records_or_tuples_and_keeps_plans():
    from sinkalign.io.fasta import Sequence

    rec = lambda i, s: Sequence(id=i, description="", seq=s, alphabet="protein")  # noqa: E731
    aligner = Aligner.load("blosum")
    pairs = [(rec("a", "MKVLAAGHWER"), rec("b", "MKVLAGHWER")), (("c", "PQDESTRIV"), ("d", "PQDSTRIV"))]
    got = list(aligner.align_pairs(pairs, keep_plan=True))
    got_first = got[0].alignment.pairs.tolist()
    assert [(r.query_id, r.target_id) for r in got] == [("a", "b"), ("c", "d")]
    # (a symmetric model solves the shorter sequence as the query, and turns the plan round)
    np.testing.assert_array_equal(got[0].plan, aligner._numpy.plan("MKVLAGHWER", "MKVLAAGHWER").T)
    assert got[1].plan.shape == (10, 9)
    assert got[0].alignment.pairs.tolist() == aligner.align("MKVLAAGHWER", "MKVLAGHWER").alignment.pairs.tolist()
    # Biopython records and plain strings too; anything else is an error naming the pair
    from Bio.Seq import Seq
    from Bio.SeqRecord import SeqRecord

    more = [(SeqRecord(Seq("MKVLAAGHWER"), id="e"), "MKVLAGHWER"), ("PQDESTRIV", "PQDSTRIV")]
    got = list(aligner.align_pairs(more))
    assert [(r.query_id, r.target_id) for r in got] == [("e", "target0"), ("query1", "target1")]
    assert got[0].query == "MKVLAAGHWER" and got[0].alignment.pairs.tolist() == got_first
    with pytest.raises(InputError, match="pair 1: the target must be a record"):
        list(aligner.align_pairs([("MKV", "PKV"), ("MKV", 5)]))


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
    aligner = Aligner.load(engine="jax", band="dense")  # every pair in the batches (by default those past 1024^2 are banded)
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
    ref = list(Aligner.load(workers=1, band="dense").align_many(items))
    assert [r.query_id for r in got] == [q for q, _, _, _ in items]
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a.alignment.pairs, b.alignment.pairs, err_msg=a.query_id)


def test_jax_engine_decodes_a_chunk_of_long_pairs_on_several_threads(monkeypatch):
    """The host's share of a solved chunk (plans, posteriors, MEA) is cut into tasks of at most
    TASK_PAIRS pairs and TASK_CELLS cells, as the numpy engine's: a chunk of long pairs is not
    decoded on one thread while the others wait. The alignments are the same, in input order."""
    import sinkalign.align.aligner as A

    rng = np.random.default_rng(12)
    items = []
    for n, L in enumerate([120, 40, 45, 150, 130]):
        anc = "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), L))
        items.append((f"q{n}", anc, f"t{n}", _mutate(rng, anc)))
    aligner = Aligner.load(engine="jax", workers=2, identity_weight=0)  # one MEA call per task
    ref = list(aligner.align_many(items, batch_size=8))  # one chunk, one task (5 pairs, < TASK_CELLS)
    seen = []
    mea_batch = A.mea_batch

    def spy(posts, **kwargs):  # one call per task
        seen.append(len(posts))
        return mea_batch(posts, **kwargs)

    monkeypatch.setattr(A, "mea_batch", spy)
    monkeypatch.setattr(A, "TASK_CELLS", 100 * 100)  # the two short pairs share a task; longer ones go alone
    got = list(aligner.align_many(items, batch_size=8))
    assert sorted(seen) == [1, 1, 1, 2]
    assert [r.query_id for r in got] == [q for q, _, _, _ in items]
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a.alignment.pairs, b.alignment.pairs, err_msg=a.query_id)
        assert a.alignment.score == b.alignment.score


def test_identity_weight_places_a_single_deletion_on_every_path():
    """A pair that differs by one deletion in the middle: the shipped model misplaces the gap by a
    residue or two without the identity tie-break (benchmarks/single_indels.py); with it the gap
    is where it belongs, the same on the dense numpy path, a corridor and the jax engine. The
    shipped model applies it to close pairs (decode_identity_weight 0.1 since 2026-11-29, 0.05 before;
    decode_identity_min 0.8)."""
    L, pos = 300, 150
    rng = np.random.default_rng(L * 1000 + pos)
    query = "".join(rng.choice(list(AA), L))
    target = query[:pos] + query[pos + 1:]
    truth = [[i, i if i < pos else i - 1] for i in range(L) if i != pos]
    default = Aligner.load(min_confidence=0.0)
    assert (default.identity_weight, default.identity_min, default.identity_gaps) == (0.1, 0.8, "add")
    assert (default.config.decode_identity_weight, default.config.decode_identity_min) == (0.1, 0.8)
    dna = Aligner.load("dna")
    assert (dna.identity_weight, dna.identity_min, dna.identity_gaps) == (0.05, 0.9, "move")
    assert default.align(query, target).pairs.tolist() == truth
    assert Aligner.load(min_confidence=0.0, identity_weight=0).align(query, target).pairs.tolist() != truth
    for kwargs in ({}, {"band": 32}, {"engine": "jax"}):
        got = Aligner.load(min_confidence=0.0, identity_weight=0.05, identity_min=0, **kwargs).align(query, target)
        assert got.pairs.tolist() == truth, kwargs
        ref = Aligner.load(min_confidence=0.0, identity_weight=0, **kwargs).align(query, target)
        np.testing.assert_allclose(got.alignment.query_gap_posterior, ref.alignment.query_gap_posterior)
    with pytest.raises(InputError, match="identity_weight=-1.0 must be a finite number >= 0"):
        Aligner.load(identity_weight=-1)
    with pytest.raises(InputError, match="decode_identity_weight=nan must be a finite number >= 0"):
        M.AlignerConfig(decode_identity_weight=float("nan"))


def test_short_close_variants_get_their_gap_where_it_belongs():
    """Human beta globin's first 19-147 residues against the same with residue 10 deleted: with the
    tie-break at 0.05 the shipped model put the gap three residues early up to 50 residues
    (`MVHLTP-EEKAVT`, 89% identical where 100% is possible; a usability audit); at 0.1, as NW."""
    hbb = ("MVHLTPEEKSAVTALWGKVNVDEVGGEALGRLLVVYPWTQRFFESFGDLSTPDAVMGNPKVKAHGKKVLGAFSDGLAHLDNLKGTFATLSELHCDKLHVDPENF"
           "RLLGNVLVCVLAHHFGKEFTPPVQAAYQKVVAGVANALAHKYH")
    default = Aligner.load()
    for length in (19, 30, 50, 147):
        a = hbb[:length]
        got = default.align(a, a[:9] + a[10:])
        assert got.identity == 100.0 and got.gapped()[1].startswith("MVHLTPEEK-AVT"), (length, got.gapped())
    old = Aligner.load(identity_weight=0.05)
    assert old.align(hbb[:19], hbb[:9] + hbb[10:19]).identity < 100.0  # the case the change is for


def test_identity_min_limits_the_tie_break_to_close_pairs():
    """With identity_min, the close pair of the test above is decoded again with the tie-break
    (on every path), and a remote pair, whose plain decoding is far below the share, keeps its
    plain decoding bit for bit."""
    L, pos = 300, 150
    rng = np.random.default_rng(L * 1000 + pos)
    query = "".join(rng.choice(list(AA), L))
    close = query[:pos] + query[pos + 1:]
    remote = _mutate(np.random.default_rng(5), query, rate=0.75)
    truth = [[i, i if i < pos else i - 1] for i in range(L) if i != pos]
    for kwargs in ({}, {"band": 32}, {"engine": "jax"}):
        plain = Aligner.load(min_confidence=0.0, identity_weight=0, **kwargs)
        tied = Aligner.load(min_confidence=0.0, identity_weight=0.05, identity_min=0.9, **kwargs)
        assert tied.identity_min == 0.9 and plain.identity_weight == 0.0
        got = list(tied.align_many([("q", query, "c", close), ("q", query, "r", remote)]))
        ref = list(plain.align_many([("q", query, "c", close), ("q", query, "r", remote)]))
        assert got[0].alignment.pairs.tolist() == truth != ref[0].alignment.pairs.tolist(), kwargs
        np.testing.assert_array_equal(got[1].alignment.pairs, ref[1].alignment.pairs)
        assert got[1].alignment.score == ref[1].alignment.score and got[1].evalue == ref[1].evalue
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(InputError, match="identity_min=.* must be a share between 0 and 1"):
            Aligner.load(identity_min=bad)
    with pytest.raises(InputError, match="decode_identity_min=2 must be at most 1"):
        M.AlignerConfig(decode_identity_min=2)


def _breaks(pairs) -> int:
    steps = np.diff(np.asarray(pairs).reshape(-1, 2), axis=0)
    return int(np.sum((steps[:, 0] != 1) | (steps[:, 1] != 1)))


def test_identity_gaps_move_places_a_deletion_but_opens_no_gap():
    """identity_gaps="move": the tie-break places a single deletion between close DNA variants
    where the plain decoding misplaces it, as "add" does; on a close pair where "add" trades
    mismatches for an extra gap, "move" keeps the plain decoding's breaks and still takes the
    tie-break's other moves. The same on the dense path, a corridor and the jax engine."""
    from sinkalign.align.decode import keep_gaps

    rng = np.random.default_rng(3)
    query = "".join(rng.choice(list("ACGT"), 120))
    target = query[:60] + query[61:]  # the deletion may sit at 59 or 60 (a repeated base)
    truths = [[[i, i if i < p else i - 1] for i in range(120) if i != p] for p in (59, 60)]
    # a close pair (benchmarks/close_pairs.py: evolve(default_rng(0), "dna", 100, 0.05))
    close = ("TGGCCAAAATGTGGTGGGGTCTGACTGATGTAATAGACCCCAAAAGGGCGTCCTTTCGTGTGGCTAGGTGCCCCGTATGCGGCCGGGCTCCTCAGGAACT",
             "TGGCCAAAATGTGGTGGGGTCTTGACTGATTAGTTTAATAGACCCCAAAAGGCGTCCTTTCGTGTGGCTAGGTCCCCCGTATGCGGCCGGGCTCCTCAGGAACT")
    for kwargs in ({}, {"band": 32}, {"engine": "jax"}):
        common = dict(min_confidence=0.0, strand="plus", identity_weight=0.05, identity_min=0.9, **kwargs)
        plain = Aligner.load("dna", min_confidence=0.0, strand="plus", identity_weight=0, **kwargs)
        add = Aligner.load("dna", identity_gaps="add", **common)
        move = Aligner.load("dna", identity_gaps="move", **common)
        assert (move.identity_gaps, add.identity_gaps) == ("move", "add")
        assert plain.align(query, target).pairs.tolist() not in truths
        assert add.align(query, target).pairs.tolist() in truths, kwargs
        assert move.align(query, target).pairs.tolist() in truths, kwargs
        by = {name: aligner.align(*close).alignment for name, aligner in
              (("plain", plain), ("add", add), ("move", move))}
        assert _breaks(by["add"].pairs) > _breaks(by["plain"].pairs) == _breaks(by["move"].pairs), kwargs
        assert not np.array_equal(by["move"].pairs, by["plain"].pairs), kwargs  # it took the tie-break's moves
        np.testing.assert_array_equal(by["move"].pairs, keep_gaps(by["plain"].pairs, by["add"].pairs))
        # reported with the model's posteriors, as every decoding
        np.testing.assert_array_equal(by["move"].query_gap_posterior, by["plain"].query_gap_posterior)
    with pytest.raises(InputError, match=r"identity_gaps='shift' is not one of \('add', 'move'\)"):
        Aligner.load("dna", identity_gaps="shift")
    with pytest.raises(InputError, match=r"decode_identity_gaps='keep' is not one of"):
        M.AlignerConfig(alphabet="dna", decode_identity_gaps="keep")


def test_identity_move_min_moves_the_gaps_of_pairs_below_identity_min():
    """The shipped protein model's lower tier (decode_identity_move_min 0.7): a pair whose plain
    decoding is 70-80% identical is decoded with the tie-break moving gaps only, the plain
    decoding's stretches kept where the tie-break would add breaks; above 0.8 it may add gaps,
    below 0.7 the pair keeps its plain decoding. The same on every path."""
    from sinkalign.align.decode import keep_gaps

    # benchmarks/close_pairs.py evolve(default_rng(0), "protein", 120, 0.22): plain decoding 79% identical
    query = ("VPMGHACAETPWMPYRPMNWGTQAIVNASRTECVAMCGLKKAADAQMPGPSILYTYIQYQTQRIVDNRTMIHKLRVCWMIQNGHRNMHSIHVGFRPACITKSHFS"
             "VCCQHNEVLVSRFSC")
    target = ("WPCGHACAETPWMDYCYTYLPMNWGTYDIVNASRRECVAMCGLPKMPAPSILYTYIQYQVQRIRMNSMNRTMIHQLRVCIFIQNGVQNMHSIHVGFTPACIWGV"
              "EKSHFSVCCDLNMVLDSRFSC")
    shipped = Aligner.load()
    assert (shipped.identity_min, shipped.identity_move_min) == (0.8, 0.7)
    assert shipped.config.decode_identity_move_min == 0.7 and Aligner.load("dna").identity_move_min == 0.0
    assert [shipped._tie_break(x) for x in (0.95, 0.8, 0.79, 0.7, 0.69, float("nan"))] == \
        ["add", "add", "move", "move", None, None]
    for kwargs in ({}, {"band": 32}, {"engine": "jax"}):
        plain = Aligner.load(min_confidence=0.0, identity_weight=0, **kwargs).align(query, target).pairs
        before = Aligner.load(min_confidence=0.0, identity_move_min=0, **kwargs).align(query, target).pairs
        got = Aligner.load(min_confidence=0.0, **kwargs).align(query, target).pairs
        added = Aligner.load(min_confidence=0.0, identity_min=0.7, **kwargs).align(query, target).pairs
        np.testing.assert_array_equal(before, plain)  # below identity_min: the plain decoding
        assert not np.array_equal(got, plain), kwargs
        np.testing.assert_array_equal(got, keep_gaps(plain, added))  # the tie-break's moves, no added breaks
        assert _breaks(got) <= _breaks(plain)
    with pytest.raises(InputError, match="identity_move_min=1.5 must be a share between 0 and 1"):
        Aligner.load(identity_move_min=1.5)
    with pytest.raises(InputError, match="decode_identity_move_min=2 must be at most 1"):
        M.AlignerConfig(decode_identity_move_min=2)


def test_encoded_sequences_are_cached_within_a_bound_and_give_the_same_alignments():
    """All against all (6 queries x 8 targets, three tasks of 16 pairs): a task encodes each of
    its distinct sequences once, and a sequence is kept from the second task that uses it, so
    with room for all the targets the third task encodes only its queries; a cache smaller
    than the targets keeps some (random replacement), one of size 0 none; a stream in which
    nothing recurs keeps nothing; every setting gives the same alignments, bit for bit."""
    from sinkalign.align.aligner import TASK_PAIRS
    from sinkalign.align.engine import _SequenceCache

    rng = np.random.default_rng(4)
    queries = [_random_seq(rng, int(rng.integers(20, 120))) for _ in range(6)]
    targets = [_mutate(rng, queries[i % 3]) for i in range(8)]
    items = [(f"q{i}", q, f"t{j}", t) for i, q in enumerate(queries) for j, t in enumerate(targets)]
    per_task = [len({s for it in items[k : k + TASK_PAIRS] for s in (it[1], it[3])})
                for k in range(0, len(items), TASK_PAIRS)]
    assert per_task == [10, 10, 10]
    params, config = Aligner.load().params, Aligner.load().config
    results = {}
    for residues in (10**6, sum(map(len, targets)) // 2, 0):
        aligner = Aligner(params, config, workers=1, band="dense")  # a task encodes its dense pairs together
        object.__setattr__(aligner._numpy, "cache_residues", residues)
        encoded = []
        encoder = aligner._numpy.encoder
        real = encoder.sides
        object.__setattr__(encoder, "sides", lambda idx: encoded.append(len(idx)) or real(idx))
        results[residues] = list(aligner.align_many(items))
        cache = aligner._numpy._cache
        assert cache._size <= residues and cache._size == sum(map(len, cache._keys))
        if residues == 10**6:  # task 3 finds the 8 targets kept by task 2
            assert len(encoded) == 10 + 10 + 2 and set(cache._items) == set(targets)
        elif residues:
            assert 10 + 10 + 2 < len(encoded) < sum(per_task) and 0 < len(cache) < len(targets)
        else:
            assert len(encoded) == sum(per_task) and len(cache) == 0
    for a, b, c in zip(*results.values()):
        np.testing.assert_array_equal(a.alignment.pairs, b.alignment.pairs)
        np.testing.assert_array_equal(a.alignment.match_posterior, c.alignment.match_posterior)
    small = _SequenceCache(5)
    for _ in range(2):
        assert small.get("MKVLAAG", lambda: 1) == 1 and len(small) == 0  # longer than the cache: not kept
    for seq in ("MK", "VL", "AG", "HW"):
        assert small.get(seq, lambda: seq) == seq and len(small) == 0  # first use: not kept
    for seq in ("MK", "VL", "AG", "HW"):
        small.get(seq, lambda: seq)
    assert small._size <= 5 and len(small) == 2 and small.get("HW", lambda: None) == "HW"
    zipped = Aligner(params, config, workers=1)  # nothing recurs: nothing kept
    list(zipped.align_many([(f"q{i}", q, f"t{i}", t) for i, (q, t) in enumerate(zip(queries, targets))]))
    assert len(zipped._numpy._cache) == 0


@pytest.mark.parametrize("layers, kernel", [(0, 5), (1, 1), (2, 2), (3, 4), (4, 5)])
def test_engine_residue_encoder_is_the_models(layers, kernel):
    """The NumPy encoder (its first layer as symbol tables, the rest as stacked-tap products)
    against model.residue_context on a padded, masked batch, float64, for odd and even
    kernels (uneven 'SAME' padding) and dilations past the sequence ends."""
    config = M.AlignerConfig.create(embedder={"name": "none"}, feature_dim=0, dustbin="banded", window=2,
                                    res_ctx_dim=12, res_ctx_layers=layers, res_ctx_kernel=kernel, res_qk_dim=4)
    params = _learned_params(config, np.random.default_rng(layers + kernel))
    engine = NumpyEngine.from_model(params, config)
    rng = np.random.default_rng(0)
    seqs = ["W", "MK", _random_seq(rng, 9), _random_seq(rng, 40) + "XBZ"]
    batch = M.make_batch([(s, s, None, None, None) for s in seqs], config, 48, 48)
    ref = np.asarray(M.residue_context(params, batch.a, batch.ma, config), np.float64)
    for n, seq in enumerate(seqs):
        got = engine.encoder.context(engine.encode(seq))
        np.testing.assert_allclose(got, ref[n, : len(seq)], rtol=1e-12, atol=1e-12, err_msg=f"{seq[:10]}")


@pytest.mark.shared_data
def test_engines_agree_on_real_remote_homologs(shared_data):
    """The default protein model on the first 40 TM-align validation pairs (remote homologs,
    lengths up to ~500): the numpy engine (float64) and the jax engine (float32 batches)
    give the same alignments, and confidences within float32's reach."""
    import itertools

    from sinkalign.io.alignments import read_tmalign_pairs

    pairs = list(itertools.islice(read_tmalign_pairs(shared_data / "tmalign_pairs" / "valid.tsv"), 40))
    items = [(p.query_id, p.query_seq, p.target_id, p.target_seq) for p in pairs]
    fast = list(Aligner.load(band="dense").align_many(items))  # the jax engine's plans of every pair
    ref = list(Aligner.load(engine="jax", band="dense").align_many(items))
    assert Aligner.load().engine == "numpy"
    for a, b in zip(fast, ref):
        np.testing.assert_array_equal(a.alignment.pairs, b.alignment.pairs, err_msg=f"{a.query_id} / {a.target_id}")
        np.testing.assert_allclose(a.alignment.match_posterior, b.alignment.match_posterior, atol=1e-5)


def test_a_short_query_meets_a_target_past_the_old_square_limit():
    """The aligner's limit is a cell budget (m n <= MAX_CELLS) and a per-sequence ceiling, not
    8192 residues a side: a 40-residue query against a 12,000-residue target is one dense
    40 x 12,000 plan. The numpy engine's plan is the float64 JAX forward pass's (the scaling
    form with a dustbin mass of 12,000), the jax engine pads each side on its own (no square
    12,288 x 12,288 batch) and gives the same alignment, found where the copy is."""
    import sinkalign.align.aligner as A
    from sinkalign.align.aligner import resolve_model
    from sinkalign.align.checkpoints import load_checkpoint

    rng = np.random.default_rng(31)
    query = _random_seq(rng, 40)
    target = _random_seq(rng, 9000) + _mutate(rng, query, rate=0.15) + _random_seq(rng, 2960)
    n = len(target)  # about 12,000 (the copy has indels)
    assert n > 8192 and 40 * n <= A.MAX_CELLS
    assert A.padded_shape(40, n) == (64, 12288) and A.padded_shape(300, 1100) == (1536, 1536)
    params, state, _ = load_checkpoint(resolve_model("learned"))
    config = M.AlignerConfig.from_dict(state["model"])
    params = {k: np.asarray(v, np.float64) for k, v in params.items()}
    batch = M.make_batch([(query, target, None, None, None)], config, *A.padded_shape(40, n))
    ref = M.pair_plan(np.asarray(M.forward(params, batch, config)[0], np.float64)[0], 40, n)
    got = NumpyEngine.from_model(params, config).plan(query, target)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-13 * ref.max())
    # every MEA column: the learned model's column confidences extrapolate past its training
    # pairs' length ratios (at most 9:1) and fall here, though the copy's columns are right
    by_numpy = Aligner.load(min_confidence=0.0, band="dense").align(query, target)
    by_jax = Aligner.load(engine="jax", min_confidence=0.0, band="dense").align(query, target)
    np.testing.assert_array_equal(by_numpy.pairs, by_jax.pairs)
    boxed = Aligner.load().align(query, target)  # the default: in the box around the local hit, at its threshold
    np.testing.assert_array_equal(Aligner.load(engine="jax").align(query, target).pairs, boxed.pairs)  # either engine
    for pairs in (by_numpy.pairs, boxed.pairs, Aligner.load("blosum").align(query, target).pairs):
        in_copy = pairs[(pairs[:, 1] >= 9000) & (pairs[:, 1] < 9045)]
        assert len(in_copy) >= 25 and np.all(np.abs(in_copy[:, 1] - in_copy[:, 0] - 9000) <= 5)
    assert by_numpy.evalue < 1e-3 and boxed.evalue < 1e-3  # found as a homolog at the usual bar, in a 40 x 12,000 search space


def test_the_scaling_form_holds_for_the_largest_marginals():
    """With a length dustbin mass the marginals reach MAX_LENGTH (131,072): the scaling form
    on scores spread over MAX_SPREAD still gives the log-domain plan."""
    import sinkalign.align.aligner as A
    import sinkalign.align.engine as E

    config = M.AlignerConfig.create(embedder={"name": "none"}, feature_dim=0, dustbin="banded", window=4)
    engine = NumpyEngine.from_model(_separable_params(config, np.random.default_rng(3), dustbins=True), config)
    assert engine.length_mass
    rng = np.random.default_rng(5)
    m, n = 3, A.MAX_LENGTH
    S = rng.uniform(-MAX_SPREAD, 0.0, size=(m + 1, n + 1))
    S[0, 0], S[-1, -1] = 0.0, -MAX_SPREAD  # the full spread the scaling form takes
    a, b = np.ones(m + 1), np.ones(n + 1)
    a[m], b[n] = n, m
    scaled = engine.solve_scores(S.copy())
    assert np.all(np.isfinite(scaled.x)) and np.all(np.isfinite(scaled.y))
    logd = E._log_domain_solve(S - S.max(), np.log(a), np.log(b), engine.n_steps)
    P, Q = scaled.plan(), logd.plan()
    np.testing.assert_allclose(P, Q, rtol=1e-9, atol=1e-14 * Q.max())


def test_pairs_past_the_cell_budget_are_named(monkeypatch):
    import sinkalign.align.aligner as A

    aligner = Aligner.load("blosum")
    with pytest.raises(ValueError, match=r"pair q / t: a sequence of 200000 residues is longer than the 131072"):
        list(aligner.align_many([("q", "MKV", "t", "A" * 200000)]))
    monkeypatch.setattr(A, "MAX_PAIR_CELLS", 1000)
    stream = aligner.align_many([("ok", "MKV", "ok2", "MKV"), ("q", "A" * 20, "t", "A" * 60)])
    assert next(stream).query_id == "ok"
    with pytest.raises(ValueError, match=r"pair q / t: 20 x 60 residues make 1,200 residue pairs, more than "
                                         r"the 1,000 the aligner takes \(the classical alignments"):
        next(stream)
    # past the dense limit a pair goes in a box or on a corridor, on either engine; with dense
    # plans only (band='dense', a model the numpy engine cannot run) it is an error
    monkeypatch.setattr(A, "MAX_CELLS", 11_000)  # 40 x 300 = 12,000 cells; a corridor of +-128 holds at most 10,280
    monkeypatch.setattr(A, "MAX_PAIR_CELLS", 10**6)
    target = _random_seq(np.random.default_rng(0), 300)
    pair = [("q", target[:40], "t", target)]
    for engine in ("numpy", "jax"):
        assert next(Aligner.load("blosum", engine=engine).align_many(pair)).alignment.pairs.shape[0] == 40
    stream = Aligner.load("blosum", engine="jax", band="dense").align_many(pair)
    with pytest.raises(ValueError, match=r"pair q / t: 40 x 300 residues make 12,000 residue pairs, more than "
                                         r"the 11,000 the aligner takes \(its plan is dense: O\(m n\) memory; "
                                         r"without band='dense' it takes longer pairs on a corridor"):
        next(stream)
    config = M.preset("default", embedder={"name": "none"}, feature_dim=0).replace(dustbin="paper", dustbin_mass="unit")
    stream = Aligner(M.init_params(config), config).align_many(pair)
    with pytest.raises(ValueError, match=r"pair q / t: 40 x 300 residues make 12,000 residue pairs, more than "
                                         r"the 11,000 the aligner takes \(its plan is dense: O\(m n\) memory, and "
                                         r"this model takes no corridor: dustbin='paper'"):
        next(stream)
