"""Order-k Markov baseline and genome data handling (sinkalign.lm.markov, sinkalign.lm.data)."""

from __future__ import annotations

import gzip
import math
from collections import Counter

import numpy as np
import pytest

from sinkalign.lm.data import (
    GenomeWindows,
    decode,
    encode,
    read_genome,
    read_genome_records,
    train_val_split,
)
from sinkalign.lm.markov import MarkovModel, best_order

CDIPH = "genomes/GCF_001457455.1_NCTC11397_genomic.fna.gz"


def _random_dna(rng: np.random.Generator, n: int, n_rate: float = 0.0) -> str:
    s = rng.choice(list("ACGT"), size=n)
    if n_rate:
        s[rng.random(n) < n_rate] = "N"
    return "".join(s)


def _naive_log2_probs(train: list[str], seq: str, order: int, a: float, prefix: str = "") -> list[float]:
    """Dictionary-count reference: log2 P per base of seq, NaN where unscored."""
    kmers, ctxs = Counter(), Counter()
    for s in train:
        for i in range(len(s) - order):
            w = s[i : i + order + 1]
            if "N" not in w:
                kmers[w] += 1
                ctxs[w[:-1]] += 1
    full = prefix + seq  # the whole prefix: a prefix shorter than the order is context too
    out = []
    for j in range(len(seq)):
        i = j + len(prefix)
        if i < order or "N" in full[i - order : i + 1]:
            out.append(math.nan)
            continue
        w = full[i - order : i + 1]
        out.append(math.log2((kmers[w] + a) / (ctxs[w[:-1]] + 4 * a)))
    return out


# ----------------------------------------------------------------------------- Markov


def test_hand_computed_order1():
    m = MarkovModel(1).fit("AACAC")  # 2-mers: AA, AC, CA, AC
    np.testing.assert_array_equal(m.counts("A"), [1, 2, 0, 0])
    np.testing.assert_array_equal(m.counts("C"), [1, 0, 0, 0])
    # P(C|A) = (2 + .5) / (3 + 2); P(T|C) = (0 + .5) / (1 + 2); P(G|G) = .5 / 2 (unseen context)
    lp = m.log2_probs("ACTGG")
    assert math.isnan(lp[0])  # no context without a prefix
    np.testing.assert_allclose(lp[1:], np.log2([2.5 / 5, 0.5 / 3, 0.5 / 2.0, 0.5 / 2.0]))
    assert m.bits_per_base("ACTGG") == pytest.approx(-np.mean(lp[1:]))
    # with a prefix the first base is conditioned on the prefix's last base: P(A|C) = 1.5/3
    assert m.log2_probs("ACTGG", prefix="GGC")[0] == pytest.approx(math.log2(1.5 / 3))


def test_order0_is_base_composition():
    m = MarkovModel(0, pseudocount=1.0).fit("AAAC")
    np.testing.assert_allclose(m.log2_probs("ACGT"), np.log2(np.array([4, 2, 1, 1]) / 8))


@pytest.mark.parametrize("order", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("pseudocount", [0.5, 1.0])
def test_matches_naive_counts_with_n_and_records(order, pseudocount):
    rng = np.random.default_rng(order)
    train = [_random_dna(rng, 3000, 0.02), _random_dna(rng, 7, 0.0), "N" * 5, _random_dna(rng, 500, 0.1)]
    val = _random_dna(rng, 400, 0.03)
    prefix = _random_dna(rng, 20, 0.0)
    m = MarkovModel(order, pseudocount).fit(train)
    for pre in ("", prefix, prefix[:2], prefix[:order - 1]):  # shorter than the order too
        got = m.log2_probs(val, prefix=pre)
        want = _naive_log2_probs(train, val, order, pseudocount, prefix=pre)
        np.testing.assert_allclose(got, want, rtol=1e-12, equal_nan=True)
    # bits_per_base is the mean over scored bases only
    want = np.array(_naive_log2_probs(train, val, order, pseudocount))
    assert m.bits_per_base(val) == pytest.approx(-np.nanmean(want), rel=1e-12)


def test_kmers_do_not_span_records():
    m = MarkovModel(1).fit(["AAAA", "CCCC"])
    assert m.counts("A")[1] == 0  # no A->C across the record boundary
    assert m.n_train == 6


def test_high_order_sparse_memory_and_values():
    rng = np.random.default_rng(0)
    s = _random_dna(rng, 20000)
    m = MarkovModel(12).fit(s)
    assert m._keys.size <= 20000  # sparse: only the 13-mers seen, not 4**13 cells
    ctx = s[100:112]
    c = m.counts(ctx)
    assert c.sum() >= 1 and c[encode(s[112])[0]] >= 1


def test_sample_reproducible_and_matches_transition_probs():
    rng = np.random.default_rng(1)
    # a strongly non-uniform order-1 chain
    p = {"A": [0.7, 0.1, 0.1, 0.1], "C": [0.1, 0.1, 0.1, 0.7], "G": [0.25] * 4, "T": [0.1, 0.6, 0.2, 0.1]}
    x = ["A"]
    for _ in range(20000):
        x.append("ACGT"[rng.choice(4, p=p[x[-1]])])
    m = MarkovModel(1).fit("".join(x))
    s1 = m.sample(30000, prompt="GA", seed=5)
    assert len(s1) == 30000 and set(s1) <= set("ACGT")
    assert s1 == m.sample(30000, prompt="GA", seed=5)
    assert s1 != m.sample(30000, prompt="GA", seed=6)
    full = "A" + s1  # prompt's last base conditions the first sample
    pairs = Counter(full[i : i + 2] for i in range(len(full) - 1))
    for a in "ACGT":
        n = sum(pairs[a + b] for b in "ACGT")
        emp = np.array([pairs[a + b] / n for b in "ACGT"])
        model = (m.counts(a) + 0.5) / (m.counts(a).sum() + 2)
        np.testing.assert_allclose(emp, model, atol=0.03)


def test_sample_without_prompt_and_order0():
    m = MarkovModel(3).fit("ACGTTGCA" * 50)
    s = m.sample(50, seed=0)
    assert len(s) == 50 and s[:3] in "ACGTTGCA" * 2  # initial context is a seen context
    assert m.sample(0, prompt="ACG") == ""
    m0 = MarkovModel(0).fit("GGGG")
    assert len(m0.sample(10, prompt="A", seed=0)) == 10
    assert len(m0.sample(10, seed=0)) == 10


def test_markov_bad_inputs():
    for bad in (-1, 31, 1.5, True):
        with pytest.raises(ValueError, match="order=.* must be an integer in"):
            MarkovModel(bad)
    for bad in (0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="pseudocount=.* must be a positive finite"):
            MarkovModel(2, bad)
    with pytest.raises(RuntimeError, match="not fitted"):
        MarkovModel(2).bits_per_base("ACGT")
    with pytest.raises(ValueError, match="no N-free 4-mer"):
        MarkovModel(3).fit(["ACG", "ACNNTG"])
    with pytest.raises(ValueError, match=r"training sequence 1: invalid character '-' at 0-based position 2"):
        MarkovModel(1).fit(["ACGT", "AC-T"])
    m = MarkovModel(3).fit("ACGTACGTAC")
    with pytest.raises(ValueError, match=r"evaluation sequence \(after 3 prefix bases\): invalid character 'X' "
                                         r"at 0-based position 5"):
        m.bits_per_base("AAX", prefix="CCC")
    with pytest.raises(ValueError, match="no base of the evaluation sequence .length 3. can be scored at order 3"):
        m.bits_per_base("ACG")
    with pytest.raises(ValueError, match="every window contains N"):
        m.bits_per_base("ACGNACGNACGN")
    with pytest.raises(ValueError, match="prompt of length 2 is shorter than order=3"):
        m.sample(5, prompt="AC")
    with pytest.raises(ValueError, match="the last order=3 bases of the prompt contain N"):
        m.sample(5, prompt="ACGTANC")
    with pytest.raises(ValueError, match="length=-1 must be a non-negative integer"):
        m.sample(-1, prompt="ACG")
    with pytest.raises(ValueError, match="context 'AC' must have exactly order=3 bases"):
        m.counts("AC")
    with pytest.raises(ValueError, match="orders must not be empty"):
        best_order("ACGT" * 10, "ACGT", orders=[])


def test_best_order_on_synthetic_chain():
    rng = np.random.default_rng(3)
    # order-2 structure: next base is a deterministic function of the previous 2 bases, 10% noise
    x = list(_random_dna(rng, 2))
    table = rng.integers(0, 4, size=16)
    for _ in range(30000):
        ctx = "ACGT".index(x[-2]) * 4 + "ACGT".index(x[-1])
        x.append("ACGT"[table[ctx]] if rng.random() > 0.1 else "ACGT"[rng.integers(4)])
    train, val = train_val_split("".join(x))
    sweep = best_order(train, val, orders=range(0, 6))
    assert sweep.best_order == 2
    assert set(sweep.bits_per_base) == set(range(6))
    # entropy rate of the chain: P(table base) = 0.925, each other base 0.025
    h = -(0.925 * math.log2(0.925) + 3 * 0.025 * math.log2(0.025))
    assert sweep.bits_per_base[2] == pytest.approx(h, abs=0.05)
    assert sweep.bits_per_base[1] > h + 0.3


# ----------------------------------------------------------------------------- real genome


@pytest.fixture(scope="module")
def cdiph_split(shared_data):
    ((_, seq),) = read_genome(shared_data / CDIPH)
    return train_val_split(seq)


def test_cdiph_order6_reference_figure(cdiph_split):
    train, val = cdiph_split
    assert (len(train), len(val)) == (2217299, 246367)
    bpb = MarkovModel(6, pseudocount=0.5).fit(train).bits_per_base(val, prefix=train)
    assert f"{bpb:.3f}" == "1.952"  # data README reference point
    # the convention for the first 6 validation bases changes nothing at this precision
    assert f"{MarkovModel(6).fit(train).bits_per_base(val):.3f}" == "1.952"


def test_cdiph_order_sweep_best_is_6(cdiph_split):
    train, val = cdiph_split
    sweep = best_order(train, val, orders=range(0, 13))
    assert sweep.best_order == 6
    assert f"{sweep.bits_per_base[6]:.3f}" == "1.952"
    assert all(v > sweep.bits_per_base[6] for k, v in sweep.bits_per_base.items() if k != 6)


# ----------------------------------------------------------------------------- data


def test_read_genome_plain_gz_case_and_iupac(tmp_path):
    text = ">chr1 first record\nacgtRYKM\nNNac\n>chr2\nGGGG\n"
    plain = tmp_path / "g.fa"
    plain.write_text(text)
    gz = tmp_path / "g.fa.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    odd = tmp_path / "g_gz_without_suffix.fa"  # gzip recognised by content, not name
    odd.write_bytes(gzip.compress(text.encode()))
    want = [("chr1", "ACGTNNNNNNAC"), ("chr2", "GGGG")]
    for p in (plain, gz, odd):
        assert read_genome(p) == want
    assert read_genome_records(plain)[0].description == "chr1 first record"


@pytest.mark.parametrize(
    "text, msg",
    [
        (">a\nACGT\n>b\nACG-T\n", r"record 'b' has invalid character '-' at 0-based position 3"),
        (">a\nACGU\n", r"record 'a' has invalid character 'U' at 0-based position 3"),
        (">a\nAC\nG*T\n", r"record 'a' has invalid character '\*' at 0-based position 3"),
        ("", "no FASTA records found"),
        ("just text\n>a\nACGT\n", "not a valid FASTA file"),
        (">a\n>b\nACGT\n", "record 'a' is empty"),
        (">a\nAC\n>a\nGT\n", "duplicate record id 'a'"),
    ],
)
def test_read_genome_errors_name_file_record_position(tmp_path, text, msg):
    p = tmp_path / "bad.fa"
    p.write_text(text)
    with pytest.raises(ValueError, match=msg) as exc:
        read_genome(p)
    assert str(p) in str(exc.value)


def test_read_genome_missing_and_corrupt_gzip(tmp_path):
    with pytest.raises(FileNotFoundError, match="FASTA file not found: .*nope.fa"):
        read_genome(tmp_path / "nope.fa")
    with pytest.raises(ValueError, match="not a regular file"):
        read_genome(tmp_path)
    p = tmp_path / "trunc.fa.gz"
    p.write_bytes(gzip.compress(b">a\n" + b"ACGT" * 1000)[:40])
    with pytest.raises(ValueError, match="trunc.fa.gz: truncated gzip file"):
        read_genome(p)
    p.write_bytes(b"\x1f\x8b" + b"not gzip at all" * 4)
    with pytest.raises(ValueError, match="trunc.fa.gz: corrupt gzip file"):
        read_genome(p)


def test_train_val_split_rounding():
    s = "A" * 2463666
    tr, va = train_val_split(s)
    assert len(tr) == 2217299 and len(va) == 246367
    for n, n_val in [(10, 1), (30, 3), (11, 2), (19, 2), (20, 2), (100, 10)]:
        seq = "".join("ACGT"[i % 4] for i in range(n))
        tr, va = train_val_split(seq)
        assert len(va) == n_val and tr + va == seq
    assert [len(x) for x in train_val_split("A" * 100, 0.25)] == [75, 25]
    for bad in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="val_fraction=.* must be in \\(0, 1\\)"):
            train_val_split("ACGT" * 10, bad)
    with pytest.raises(ValueError, match="too short for val_fraction=0.1: a split would be empty"):
        train_val_split("A")


def test_encode_decode():
    t = encode("ACGTNacgtn")
    assert t.dtype == np.int8
    np.testing.assert_array_equal(t, [0, 1, 2, 3, 4, 0, 1, 2, 3, 4])
    assert decode(t) == "ACGTNACGTN"
    with pytest.raises(ValueError, match="invalid character 'R' at 0-based position 2"):
        encode("ACRT")
    with pytest.raises(ValueError, match="tokens must lie in 0..4"):
        decode(np.array([0, 5]))


def test_genome_windows_sampling():
    rng = np.random.default_rng(0)
    seqs = [_random_dna(rng, 300), _random_dna(rng, 50), _random_dna(rng, 20), _random_dna(rng, 1000)]
    gw = GenomeWindows(seqs, 64, seed=7)
    assert gw.n_windows == (300 - 63) + 0 + 0 + (1000 - 63)
    batch = gw.sample(200)
    assert batch.shape == (200, 64) and batch.dtype == np.int8
    np.testing.assert_array_equal(batch, GenomeWindows(seqs, 64, seed=7).sample(200))
    assert not np.array_equal(batch, GenomeWindows(seqs, 64, seed=8).sample(200))
    owners = []
    for w in batch:  # every window is a real substring of one record (none span records)
        s = decode(w)
        owners.append([i for i, r in enumerate(seqs) if s in r])
        assert owners[-1]
    # starts uniform over valid starts: the long record gets ~80% of windows
    frac_long = np.mean([3 in o for o in owners])
    assert 0.7 < frac_long < 0.9


def test_genome_windows_n_filter_and_sequential():
    seq = "ACGT" * 25 + "N" * 100 + "GGCC" * 25  # 300 nt
    gw = GenomeWindows(seq, 20, seed=0, max_n_fraction=0.0)
    assert not np.any(gw.sample(100) == 4)
    tiles = list(GenomeWindows([seq, "ACGTA"], 40).sequential(3))
    assert [t.shape for t in tiles] == [(3, 40), (3, 40), (1, 40)]  # 7 windows, remainders dropped
    assert decode(np.concatenate(tiles).reshape(-1)) == seq[:280]


def test_genome_windows_bad_inputs():
    with pytest.raises(ValueError, match="length=0 must be a positive integer"):
        GenomeWindows("ACGT", 0)
    with pytest.raises(ValueError, match="no sequence is at least length=10 long .longest is 4."):
        GenomeWindows(["ACGT", "AC"], 10)
    with pytest.raises(ValueError, match="max_n_fraction=1.5 must be in"):
        GenomeWindows("ACGT", 2, max_n_fraction=1.5)
    with pytest.raises(ValueError, match="invalid character 'X' at 0-based position 1"):
        GenomeWindows("AXGT", 2)
    gw = GenomeWindows("ACGT", 2)
    with pytest.raises(ValueError, match="batch_size=0 must be a positive integer"):
        gw.sample(0)
    with pytest.raises(RuntimeError, match="could not find windows"):
        GenomeWindows("NNNNNNAC", 4, max_n_fraction=0.0).sample(1)
