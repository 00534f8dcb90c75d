"""ORFs and k-mer spectra of generated DNA (sinkalign.lm.seqstats)."""

from __future__ import annotations

import numpy as np
import pytest

from sinkalign.lm.seqstats import js_divergence, kmer_spectrum, orf_fraction, orf_mask

COMP = str.maketrans("ACGT", "TGCA")


def _gene(codons: int, rng) -> str:
    """ATG + ``codons`` random sense codons + TAA."""
    sense = [c for c in (a + b + d for a in "ACGT" for b in "ACGT" for d in "ACGT") if c not in ("TAA", "TAG", "TGA")]
    return "ATG" + "".join(rng.choice(sense, codons)) + "TAA"


def test_orfs_on_both_strands_with_and_without_a_stop():
    rng = np.random.default_rng(0)
    gene = _gene(120, rng)  # 366 bases
    seq = "CC" + gene + "GGGG"
    m = orf_mask(seq, 300)
    assert m[2 : 2 + len(gene)].all() and not m[:2].any() and not m[-4:].any()
    assert not orf_mask(seq, 400).any()  # too short for 400
    rev = seq.translate(COMP)[::-1]  # the same gene on the other strand
    np.testing.assert_array_equal(orf_mask(rev, 300), m[::-1])
    open_end = "A" + gene[:-3]  # no stop: open at the end of the sequence, still counted
    assert orf_mask(open_end, 300)[1:].all()
    mid = gene[60:]  # a window that starts inside the gene: open from the start, up to its stop
    assert orf_mask(mid, 300).all()
    rng2 = np.random.default_rng(7)  # random sequence: a stop every ~21 codons, few long ORFs
    noise = "".join(rng2.choice(list("ACGT"), 3000))
    assert orf_mask(noise, 300).mean() < 0.2
    # a continuation inside a gene that started in the prompt is coding
    assert orf_fraction(seq[:250], seq[250:359], 300) == 1.0  # ends on a codon boundary of the gene
    assert orf_fraction("", seq[250:359], 300) == 0.0  # alone, the 109 bases hold no 300-base ORF
    with pytest.raises(ValueError, match="min_len=2 must be an integer >= 3"):
        orf_mask(seq, 2)
    with pytest.raises(ValueError, match="invalid character 'X' at 0-based position 1"):
        orf_mask("AX", 3)


def test_kmer_spectrum_and_js_divergence():
    spec = kmer_spectrum(["ACGTN", "AC"], k=2)
    assert spec.sum() == 4 and spec[0 * 4 + 1] == 2 and spec[1 * 4 + 2] == 1 and spec[2 * 4 + 3] == 1  # AC AC CG GT
    rng = np.random.default_rng(1)
    a = "".join(rng.choice(list("ACGT"), 5000))
    b = "".join(rng.choice(list("ACGT"), 5000))
    at_rich = "".join(rng.choice(list("ACGT"), 5000, p=[0.4, 0.1, 0.1, 0.4]))
    same = js_divergence(kmer_spectrum(a), kmer_spectrum(b))
    far = js_divergence(kmer_spectrum(a), kmer_spectrum(at_rich))
    assert 0 <= same < 0.03 < far <= 1
    assert js_divergence(kmer_spectrum(a), kmer_spectrum(a)) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="k=13 must be an integer in"):
        kmer_spectrum(a, 13)


def test_orf_mask_names_a_non_ascii_letter_where_it_stands():
    with pytest.raises(ValueError, match=r"invalid character 'ß' at 0-based position 2"):
        orf_mask("atßATG", 3)
