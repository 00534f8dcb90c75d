"""GC trajectories of sequences: what the LM evaluation compares between generated and true
DNA, and what ``sinkalign gc-profile`` reports beside its windows.

Lives in :mod:`sinkalign.lm` (not in the pipelines) so that both the LM evaluation and the
GC-profile pipeline can use it with the layers pointing one way.
"""

from __future__ import annotations

import math

import numpy as np

from sinkalign.errors import InputError
from sinkalign.lm.data import encode

__all__ = ["gc_trajectory", "trajectory_correlation"]

A, C, G, T, N = range(5)  # token ids of sinkalign.lm.data.encode


def gc_trajectory(seq: str, window: int = 25) -> np.ndarray:
    """Sliding-window (step 1) GC fraction of ``seq``: float64 ``[len(seq) - window + 1]``.

    Entry ``i`` is the GC fraction of ``seq[i : i + window]`` with N excluded from the
    denominator (NaN where the window is all N). Raises ``ValueError`` if ``window`` is not
    positive or exceeds ``len(seq)``.
    """
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window <= 0:
        raise InputError(f"window={window!r} must be a positive integer")
    window = int(window)
    if window > len(seq):
        raise InputError(f"window={window} exceeds the sequence length {len(seq)}")
    t = encode(seq)
    gc = np.concatenate([[0], np.cumsum((t == C) | (t == G), dtype=np.int64)])
    n = np.concatenate([[0], np.cumsum(t == N, dtype=np.int64)])
    gcw = (gc[window:] - gc[:-window]).astype(np.float64)
    acgt = window - (n[window:] - n[:-window])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(acgt > 0, gcw / acgt, np.nan)


def trajectory_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two equal-length trajectories ``[T]`` over positions finite in both.

    Returns NaN when fewer than 2 such positions exist or either side is constant there
    (the correlation is undefined). Raises ``ValueError`` on unequal lengths.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or b.ndim != 1:
        raise InputError(f"trajectories must be 1-D, got shapes {a.shape} and {b.shape}")
    if a.size != b.size:
        raise InputError(f"trajectories differ in length: {a.size} != {b.size}")
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 2:
        return math.nan
    x, y = a[ok] - a[ok].mean(), b[ok] - b[ok].mean()
    den = math.sqrt(float(x @ x) * float(y @ y))
    if den == 0.0:
        return math.nan
    return float(np.clip((x @ y) / den, -1.0, 1.0))
