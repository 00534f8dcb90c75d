"""The banded MEA decoder as it was before session 21 (:func:`sinkalign.align.band.band_mea`
before its row loop worked on one kept table row): the reference that
``tests/test_band.py`` holds the shipped decoder to, bit for bit, and that
``benchmarks/band_mea_time.py`` times it against."""

import numpy as np

from sinkalign.align.decode import alignment_of_pairs
from sinkalign.alignment import Alignment


def band_mea_rows(post, *, gap_weight: float = 0.0):
    """band_mea as it was before its row loop worked on one kept table row (a copy): each row's
    ``above`` gathered by masks from the row above, the moves of every cell kept, then traced."""
    M, qg, tg = post.match, np.asarray(post.query_gap, np.float64), np.asarray(post.target_gap, np.float64)
    m, n = M.shape
    lo, hi, ptr = M.lo, M.hi, M.indptr
    moves = np.zeros(M.nnz, np.uint8)
    left_vals = np.zeros(m)
    row_max = np.zeros(m)
    prev_lo = prev_hi = 0
    prev_vals = np.zeros(0)
    prev_left = prev_max = 0.0
    for i in range(m):
        a, b = int(lo[i]), int(hi[i])
        w = M.data[ptr[i] : ptr[i + 1]]
        if gap_weight:
            w = w - gap_weight * (qg[i] + tg[a:b])
        above = np.empty(b - a + 1)
        j = np.arange(a - 1, b)
        inside = (j >= prev_lo) & (j < prev_hi)
        above[inside] = prev_vals[j[inside] - prev_lo]
        above[j < prev_lo] = prev_left
        above[j >= prev_hi] = prev_max
        if a == 0:
            above[0] = 0.0
        row = np.maximum(above[1:], above[:-1] + w)
        left = above[0]
        row = np.maximum.accumulate(np.concatenate([[left], row]))
        up = row[1:] == above[1:]
        horizontal = row[1:] == row[:-1]
        moves[ptr[i] : ptr[i + 1]] = np.where(up, 1, np.where(horizontal, 2, 0))
        vals = row[1:]
        left_vals[i] = left
        row_max[i] = max(prev_max, vals[-1]) if b > a else prev_max
        prev_lo, prev_hi, prev_vals, prev_left, prev_max = a, b, vals, left, row_max[i]
    best = float(row_max[m - 1]) if m else 0.0
    pairs = []
    i, j = m - 1, n - 1
    while i >= 0 and j >= 0:
        if j < lo[i]:
            i -= 1
        elif j >= hi[i]:
            if row_max[i] == (row_max[i - 1] if i else 0.0):
                i -= 1
            else:
                j = int(hi[i]) - 1
        else:
            move = moves[ptr[i] + j - lo[i]]
            if move == 1:
                i -= 1
            elif move == 2:
                j -= 1
            else:
                pairs.append((i, j))
                i -= 1
                j -= 1
    pairs = np.asarray(pairs[::-1], np.int64).reshape(-1, 2)
    mp = M.at(pairs[:, 0], pairs[:, 1]) if len(pairs) else np.zeros(0)
    aln = alignment_of_pairs(pairs, mp, qg, tg, gap_weight=gap_weight)
    return Alignment(aln.pairs, aln.match_posterior, qg, tg, aln.expected_accuracy,
                     best + gap_weight * (qg.sum() + tg.sum()))
