"""Checks of generated DNA that a biologist can read: open reading frames and k-mer spectra.

* :func:`orf_mask`: the bases covered by open reading frames (ATG to the first in-frame stop
  codon, TAA / TAG / TGA) of at least ``min_len`` bases, on either strand. A window of a
  genome cuts genes: a frame still open at the end of the sequence counts up to its last whole
  codon, and one open from the start (no stop before the first in-frame stop) counts from the
  start, as a gene begun before the window would. Bacterial genomes are ~85-90% coding, so the true
  continuation of a prompt lies mostly in long ORFs; random sequence hits a stop every ~21
  codons and rarely does.
* :func:`kmer_spectrum` and :func:`js_divergence`: pooled k-mer counts and the Jensen-Shannon
  divergence (bits, 0..1) between two spectra.
"""

from __future__ import annotations

import numpy as np
from Bio.Seq import reverse_complement

from sinkalign.errors import InputError
from sinkalign.lm.data import encode

__all__ = ["js_divergence", "kmer_spectrum", "orf_fraction", "orf_mask"]

_STOPS = {"TAA", "TAG", "TGA"}


def _forward_orfs(seq: str, min_len: int) -> np.ndarray:
    """Mask of ``seq`` covered by forward-strand ORFs of >= ``min_len`` bases."""
    n = len(seq)
    mask = np.zeros(n, bool)
    for frame in range(3):
        start = frame  # open from the start of the window (a gene begun before it)
        for i in range(frame, n - 2, 3):
            codon = seq[i : i + 3]
            if start is None and codon == "ATG":
                start = i
            elif start is not None and codon in _STOPS:
                if i + 3 - start >= min_len:
                    mask[start : i + 3] = True
                start = None
        if start is not None:  # open at the end of the sequence
            end = frame + (n - frame) // 3 * 3
            if end - start >= min_len:
                mask[start:end] = True
    return mask


def orf_mask(seq: str, min_len: int = 300) -> np.ndarray:
    """Bool ``[len(seq)]``: bases inside an ORF of at least ``min_len`` bases on either strand
    (ATG to the first in-frame stop, stop included; frames open at either end of the sequence
    count, see the module docstring)."""
    if isinstance(min_len, bool) or not isinstance(min_len, (int, np.integer)) or min_len < 3:
        raise InputError(f"min_len={min_len!r} must be an integer >= 3")
    encode(seq)  # validates the alphabet (ACGTN, either case), naming the position of a bad character
    seq = seq.upper()
    rc = reverse_complement(seq)  # Biopython's, over the validated ACGTN
    return _forward_orfs(seq, int(min_len)) | _forward_orfs(rc, int(min_len))[::-1]


def orf_fraction(prefix: str, seq: str, min_len: int = 300) -> float:
    """Fraction of ``seq``'s bases inside ORFs of >= ``min_len`` bases found on ``prefix + seq``
    (an ORF may start in the prefix: a 200-base completion holds no 300-base ORF by itself)."""
    if not seq:
        raise InputError("orf_fraction of an empty sequence")
    return float(orf_mask(prefix + seq, min_len)[len(prefix):].mean())


def kmer_spectrum(seqs: str | list[str], k: int = 4) -> np.ndarray:
    """Pooled counts ``[4**k]`` of the k-mers over ACGT in ``seqs`` (k-mers with N skipped);
    index = the k-mer read as a base-4 number (A=0, C=1, G=2, T=3)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= 12:
        raise InputError(f"k={k!r} must be an integer in [1, 12]")
    counts = np.zeros(4**k, np.int64)
    for s in [seqs] if isinstance(seqs, str) else seqs:
        t = encode(s).astype(np.int64)
        if t.size < k:
            continue
        windows = np.lib.stride_tricks.sliding_window_view(t, k)
        ok = (windows < 4).all(1)
        codes = windows[ok] @ (4 ** np.arange(k - 1, -1, -1))
        counts += np.bincount(codes, minlength=4**k)
    return counts


def js_divergence(p_counts: np.ndarray, q_counts: np.ndarray, pseudocount: float = 0.5) -> float:
    """Jensen-Shannon divergence (bits, in [0, 1]) of two count vectors, each smoothed by
    ``pseudocount`` per entry."""
    p = np.asarray(p_counts, np.float64) + pseudocount
    q = np.asarray(q_counts, np.float64) + pseudocount
    if p.shape != q.shape:
        raise InputError(f"spectra of different sizes: {p.shape} vs {q.shape}")
    p, q = p / p.sum(), q / q.sum()
    m = 0.5 * (p + q)
    return float(0.5 * np.sum(p * np.log2(p / m)) + 0.5 * np.sum(q * np.log2(q / m)))
