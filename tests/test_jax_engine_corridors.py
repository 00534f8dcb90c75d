"""The jax engine solves the pairs the band policy puts on a corridor or in a box (long pairs,
lopsided pairs, every pair with ``band=R``) as the numpy engine does, on the host, and batches
only the dense ones: both engines give the same alignments, in input order."""

from __future__ import annotations

import numpy as np
import pytest

import sinkalign.align.aligner as A
from sinkalign.align import model as M
from sinkalign.align.aligner import Aligner
from sinkalign.errors import InputError

AA = np.array(list("ACDEFGHIKLMNPQRSTVWY"))


def _seq(rng, n: int) -> str:
    return "".join(rng.choice(AA, n))


def _mutate(rng, seq: str, rate: float = 0.3) -> str:
    out = [str(rng.choice(AA)) if rng.random() < rate else c for c in seq]
    cut = int(rng.integers(0, max(1, len(out) - 5)))
    del out[cut : cut + int(rng.integers(0, 5))]
    return "".join(out)


def _mixed_pairs() -> list:
    """Dense pairs, lopsided ones (a domain in flanks: solved in a box), a long pair past
    AUTO_BAND_CELLS (on a corridor), in an order that mixes them within a batch."""
    rng = np.random.default_rng(41)
    items = []
    for i in range(3):
        anc = _seq(rng, 90 + 20 * i)
        items.append((f"d{i}", anc, f"d{i}t", _mutate(rng, anc)))
    domain = _seq(rng, 70)
    items.append(("lop", domain, "lop_t", _seq(rng, 150) + _mutate(rng, domain) + _seq(rng, 120)))
    items.append(("d3", domain, "d3t", _mutate(rng, domain)))
    long_anc = _seq(rng, 1060)
    items.append(("long", long_anc, "long_t", _mutate(rng, long_anc, 0.25)))
    items.append(("lop2", _seq(rng, 400) + domain, "lop2_t", _mutate(rng, domain)))
    items.append(("d4", long_anc[:200], "d4t", _mutate(rng, long_anc[:200])))
    return items


ITEMS = _mixed_pairs()


def _same(got, want, *, exact: bool) -> None:
    assert [(r.query_id, r.target_id) for r in got] == [(r.query_id, r.target_id) for r in want]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.alignment.pairs, b.alignment.pairs, err_msg=a.query_id)
        if exact:  # solved by the same code on the host
            np.testing.assert_array_equal(a.alignment.match_posterior, b.alignment.match_posterior)
            assert (a.score, a.evalue) == (b.score, b.evalue)
        else:  # float32 batches against float64 pairs
            np.testing.assert_allclose(a.alignment.match_posterior, b.alignment.match_posterior, atol=1e-5)


@pytest.fixture(scope="module")
def numpy_aligner():
    return Aligner.load("learned", workers=2)


@pytest.fixture(scope="module")
def jax_aligner():
    return Aligner.load("learned", engine="jax", workers=2)


def test_the_policy_puts_these_pairs_where_the_test_means(numpy_aligner, jax_aligner):
    banded = {item[0] for item in ITEMS if numpy_aligner._banded(item)}
    assert banded == {"lop", "long", "lop2"}
    assert [jax_aligner._banded(item) for item in ITEMS] == [numpy_aligner._banded(item) for item in ITEMS]
    assert len(ITEMS[5][1]) * len(ITEMS[5][3]) > A.AUTO_BAND_CELLS and not A.lopsided(len(ITEMS[5][1]),
                                                                                      len(ITEMS[5][3]))


@pytest.mark.parametrize("batch_size", [1, 2, 8])
def test_the_jax_engine_gives_the_numpy_engines_alignments_on_a_mixed_stream(numpy_aligner, jax_aligner, batch_size):
    want = list(numpy_aligner.align_many(ITEMS))
    got = list(jax_aligner.align_many(ITEMS, batch_size=batch_size))
    _same(got, want, exact=False)
    for a, b, item in zip(got, want, ITEMS):
        if numpy_aligner._banded(item):
            _same([a], [b], exact=True)


def test_chunks_batch_the_dense_pairs_and_carry_the_banded_ones_in_order(jax_aligner, monkeypatch):
    chunks = list(jax_aligner._jax_batches(ITEMS, 2))
    assert [item for chunk in chunks for item in chunk] == ITEMS
    for chunk in chunks:
        banded = sum(map(jax_aligner._banded, chunk))
        assert len(chunk) - banded <= 2 and banded <= 2
    assert any(0 < sum(map(jax_aligner._banded, chunk)) < len(chunk) for chunk in chunks)  # mixed chunks
    # the cell budget counts the dense pairs only: the long pair pads no batch
    assert jax_aligner._jax_dispatch([ITEMS[3], ITEMS[5]]) is None
    calls = []
    make_batch = M.make_batch

    def spy(items, config, lq, lt):
        calls.append((len(items), lq, lt))
        return make_batch(items, config, lq, lt)

    monkeypatch.setattr(M, "make_batch", spy)
    rows = jax_aligner._jax_dispatch(ITEMS[:6])
    dense = [item for item in ITEMS[:6] if not jax_aligner._banded(item)]
    shape = A.padded_shape(max(len(item[1]) for item in dense), max(len(item[3]) for item in dense))
    assert len(dense) == 4 and shape[0] < 1024 and calls == [(4, *shape)] and np.asarray(rows).shape[0] == 4


def test_plans_are_kept_for_banded_pairs_on_the_jax_engine(numpy_aligner, jax_aligner):
    items = ITEMS[3:5]  # a lopsided pair in its box, a dense pair
    want = list(numpy_aligner.align_many(items, keep_plan=True))
    got = list(jax_aligner.align_many(items, keep_plan=True))
    np.testing.assert_array_equal(got[0].plan, want[0].plan)  # dense, 0 outside the box
    assert (got[0].plan[:-1, :-1] == 0).any()
    np.testing.assert_allclose(got[1].plan, want[1].plan, rtol=1e-4, atol=1e-7)


def test_a_band_radius_puts_every_pair_on_a_corridor_on_the_jax_engine():
    items = ITEMS[:3]
    want = list(Aligner.load("blosum", band=6).align_many(items))
    jax_aligner = Aligner.load("blosum", band=6, engine="jax")
    assert all(map(jax_aligner._banded, items))
    _same(list(jax_aligner.align_many(items, batch_size=2)), want, exact=True)


def test_errors_come_after_the_results_before_them(jax_aligner, monkeypatch):
    bad = [*ITEMS[:4], ("bad", "", "t", "MKV"), *ITEMS[4:]]
    seen = []
    with pytest.raises(InputError, match="pair bad / t: the query sequence is empty"):
        for res in jax_aligner.align_many(bad, batch_size=2):
            seen.append(res.query_id)
    assert seen == [item[0] for item in ITEMS[:4]]
    # an error found on the host, solving a banded pair (its box holds too many cells)
    monkeypatch.setattr(A, "MAX_CELLS", 3_000)  # lop2's box (about 70 x 85 residues) does not fit
    items = [ITEMS[0], ITEMS[6], ITEMS[1]]
    seen = []
    with pytest.raises(InputError, match=r"pair lop2 / lop2_t: its box around its Smith-Waterman hit .* holds "
                                         r"[\d,]+ residue pairs, more than the 3,000"):
        for res in jax_aligner.align_many(items, batch_size=8):
            seen.append(res.query_id)
    assert seen == ["d0"]


def test_the_jax_engine_with_banded_pairs_on_processes(jax_aligner):
    want = list(jax_aligner.align_many(ITEMS[:5], batch_size=4))
    with Aligner.load("learned", engine="jax", processes=2) as aligner:
        _same(list(aligner.align_many(ITEMS[:5], batch_size=4)), want, exact=True)


def test_a_model_the_numpy_engine_cannot_run_keeps_dense_plans():
    config = M.preset("default", embedder={"name": "none"}, feature_dim=0).replace(dustbin="paper",
                                                                                   dustbin_mass="unit")
    aligner = Aligner(M.init_params(config), config)
    assert aligner.engine == "jax" and aligner.dense_only and not any(map(aligner._banded, ITEMS))
    assert Aligner.load("learned", engine="jax").dense_only is False
    assert Aligner.load("learned", engine="jax", band="dense").dense_only is True


def test_the_jax_engines_products_are_float32_on_every_backend(jax_aligner):
    """Every matrix product and convolution of the jax engine's forward pass asks for float32
    precision (HIGHEST), so a GPU does not run them as one TF32 pass (its default)."""
    batch = M.make_batch([(ITEMS[0][1], ITEMS[0][3], None, None, None)], jax_aligner.config, 128, 128)
    text = jax_aligner._plans_fn().lower(jax_aligner.params, batch).as_text()
    products = [line for line in text.splitlines() if "dot_general" in line or "convolution" in line]
    assert len(products) >= 10
    assert all(line.count("HIGHEST") == 2 and "DEFAULT" not in line for line in products), products[:3]
