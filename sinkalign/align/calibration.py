"""Calibrated confidences: raw plan posteriors -> probabilities that a column is right.

The match posterior of an MEA column (:func:`sinkalign.align.decode.plan_posteriors`) is a
normalised transport mass. How large it is depends on the model's temperature: at a high
``eps`` the plan spreads each residue's mass over a stretch of the diagonal, so a correct
column may carry 0.01 while the alignment is right. A :class:`Calibration` maps a feature of
the column to the frequency with which such a column is in the reference alignment, fitted
by isotonic (monotone non-decreasing) regression on training pairs; likewise the gap
posterior of an unaligned residue is mapped to the frequency with which that residue is
unaligned in the reference. Both maps are piecewise linear through the fitted knots
(``numpy.interp``), constant beyond the end knots, and stored with the model
(``state.json``, key ``calibration``).

Match feature (``match_feature``):

* ``"local_share"`` (default): how peaked the posterior is around the column,
  ``M_ij / sqrt(R_ij C_ij)`` with ``R_ij = sum_{|d| <= r} M_{i, j+d}`` and
  ``C_ij = sum_{|d| <= r} M_{i+d, j}`` (``r = radius``, 3), in ``[0, 1]``. It does not
  depend on how diffuse the whole plan is, only on whether this pair stands out from its
  neighbours. On held-out Pfam families it ranks columns better than the raw posterior
  (AUC 0.80 vs 0.67) and its calibration carries over (expected calibration error 0.05
  vs 0.20; ``benchmarks/aligner_fit.py confidence``).
* ``"posterior"``: the raw match posterior ``M_ij``.

After calibration ``match_posterior`` is ``P(pair in reference)``, the gap posteriors of
unaligned residues are ``P(residue unaligned in reference)``, and ``expected_accuracy`` is
recomputed from them; the alignment itself (pairs, score) is unchanged.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from sinkalign.align.decode import Alignment, check_pairs

__all__ = ["MATCH_FEATURES", "Calibration", "calibration_samples", "column_feature", "fit_calibration", "fit_from_samples",
           "isotonic_knots", "local_share"]

MATCH_FEATURES = ("local_share", "posterior")


def isotonic_knots(x, y, *, max_knots: int = 16) -> tuple[list[float], list[float]]:
    """Knots ``(xs, ys)`` of the isotonic (non-decreasing) least-squares fit of ``y`` on ``x``.

    The fit is :func:`scipy.optimize.isotonic_regression` on the points sorted by ``x``
    (ties in ``x`` pooled); each constant block of the fit contributes one knot at its mean
    ``x``. Blocks are merged (weighted by their sizes) until at most ``max_knots`` remain.
    """
    from scipy.optimize import isotonic_regression

    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape or x.size == 0:
        raise ValueError(f"x and y must be non-empty and of equal size, got {x.shape} and {y.shape}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("x and y must be finite")
    if max_knots < 2:
        raise ValueError(f"{max_knots=} must be >= 2")
    ux, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    uy = np.bincount(inv, weights=y) / counts
    fit = isotonic_regression(uy, weights=counts.astype(np.float64), increasing=True).x
    # one knot per constant block: weighted mean x, the block value
    starts = np.flatnonzero(np.r_[True, np.diff(fit) != 0])
    sizes = np.add.reduceat(counts, starts).astype(np.float64)
    xs = np.add.reduceat(ux * counts, starts) / sizes
    ys = fit[starts]
    while xs.size > max_knots:  # merge the adjacent pair with the fewest points
        i = int(np.argmin(sizes[:-1] + sizes[1:]))
        w = sizes[i] + sizes[i + 1]
        xs[i] = (xs[i] * sizes[i] + xs[i + 1] * sizes[i + 1]) / w
        ys[i] = (ys[i] * sizes[i] + ys[i + 1] * sizes[i + 1]) / w
        sizes[i] = w
        xs, ys, sizes = np.delete(xs, i + 1), np.delete(ys, i + 1), np.delete(sizes, i + 1)
    return xs.tolist(), ys.tolist()


def local_share(match, pairs, radius: int = 3) -> np.ndarray:
    """``M_ij / sqrt(R_ij C_ij)`` at each pair (see the module docstring); 0 where ``R C = 0``.

    Args:
        match: ``[m, n]`` match posteriors; pairs: ``[k, 2]`` (i, j); radius: ``r >= 0``.
    """
    M = np.asarray(match, dtype=np.float64)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if M.ndim != 2:
        raise ValueError(f"match must be [m, n], got shape {M.shape}")
    if radius < 0:
        raise ValueError(f"{radius=} must be >= 0")
    if pairs.size == 0:
        return np.zeros(0)
    m, n = M.shape
    i, j = pairs[:, 0], pairs[:, 1]
    if np.any((i < 0) | (i >= m) | (j < 0) | (j >= n)):
        raise ValueError(f"pairs must index the [{m}, {n}] match matrix")
    # only the 2r + 1 neighbours of each pair on its row and column are read: O(k r), not O(m n)
    d = np.arange(-radius, radius + 1)
    cols, rows = j[:, None] + d, i[:, None] + d  # [k, 2r + 1]
    R = np.where((cols >= 0) & (cols < n), M[i[:, None], np.clip(cols, 0, n - 1)], 0.0).sum(1)
    C = np.where((rows >= 0) & (rows < m), M[np.clip(rows, 0, m - 1), j[:, None]], 0.0).sum(1)
    den = np.sqrt(np.maximum(R, 0.0) * np.maximum(C, 0.0))
    out = np.divide(M[i, j], den, out=np.zeros(len(i)), where=den > 0)
    return np.minimum(out, 1.0)


def column_feature(aln: Alignment, match=None, feature: str = "local_share", radius: int = 3) -> np.ndarray:
    """The match feature ``feature`` at each aligned pair of ``aln`` (raw posteriors):
    ``posterior`` is ``aln.match_posterior``; ``local_share`` needs ``match``, the ``[m, n]``
    match posteriors."""
    if feature not in MATCH_FEATURES:
        raise ValueError(f"match_feature={feature!r} is not one of {MATCH_FEATURES}")
    if feature == "posterior":
        return aln.match_posterior
    if match is None:
        raise ValueError("the local_share calibration needs the match posterior matrix (match=...)")
    return local_share(match, aln.pairs, radius)


@dataclass(frozen=True)
class Calibration:
    """Monotone maps from raw to calibrated posteriors (knots as plain lists, JSON-ready)."""

    match_x: list[float]
    match_y: list[float]
    gap_x: list[float]
    gap_y: list[float]
    fitted_on: str = ""
    match_feature: str = "local_share"
    radius: int = 3

    def __post_init__(self) -> None:
        if self.match_feature not in MATCH_FEATURES:
            raise ValueError(f"match_feature={self.match_feature!r} is not one of {MATCH_FEATURES}")
        for name in ("match", "gap"):
            xs, ys = getattr(self, f"{name}_x"), getattr(self, f"{name}_y")
            if len(xs) != len(ys) or not xs:
                raise ValueError(f"calibration {name} knots must be non-empty and paired, got {len(xs)} x, "
                                 f"{len(ys)} y")
            if np.any(np.diff(xs) <= 0) or np.any(np.diff(ys) < 0):
                raise ValueError(f"calibration {name} knots must have increasing x and non-decreasing y")
            if min(ys) < 0 or max(ys) > 1:
                raise ValueError(f"calibration {name} values must lie in [0, 1]")

    def match(self, p) -> np.ndarray:
        return np.interp(np.asarray(p, dtype=np.float64), self.match_x, self.match_y)

    def gap(self, p) -> np.ndarray:
        return np.interp(np.asarray(p, dtype=np.float64), self.gap_x, self.gap_y)

    def feature(self, aln: Alignment, match=None) -> np.ndarray:
        """This calibration's match feature at each aligned pair of ``aln`` (see :func:`column_feature`)."""
        return column_feature(aln, match, self.match_feature, self.radius)

    def apply(self, aln: Alignment, match=None) -> Alignment:
        """The same alignment with calibrated posteriors and expected accuracy.

        ``aln`` carries raw posteriors; ``match`` is its ``[m, n]`` match posterior matrix
        (:func:`sinkalign.align.decode.plan_posteriors`), needed by the ``local_share`` feature.
        """
        mp = self.match(self.feature(aln, match))
        qg, tg = self.gap(aln.query_gap_posterior), self.gap(aln.target_gap_posterior)
        q_un = np.ones(aln.m, dtype=bool)
        t_un = np.ones(aln.n, dtype=bool)
        q_un[aln.pairs[:, 0]] = False
        t_un[aln.pairs[:, 1]] = False
        total = aln.m + aln.n
        ea = float((2.0 * mp.sum() + qg[q_un].sum() + tg[t_un].sum()) / total) if total else float("nan")
        return dataclasses.replace(aln, match_posterior=mp, query_gap_posterior=qg, target_gap_posterior=tg,
                                   expected_accuracy=ea)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Calibration:
        if not isinstance(data, dict):
            raise ValueError(f"calibration must be a mapping, got {type(data).__name__}")
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown calibration keys {sorted(unknown)}")
        return cls(**data)


def calibration_samples(aln: Alignment, reference, match=None, *, match_feature: str = "local_share",
                        radius: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What one alignment contributes to a fit: ``(match feature, pair is right,
    gap posterior, residue is unaligned in the reference)``, for its aligned pairs and its
    unaligned residues (both sides). ``reference``: aligned pairs ``[k, 2]`` or an object with
    ``.pairs``; ``match``: the ``[m, n]`` match posteriors (for ``local_share``)."""
    ref = check_pairs(getattr(reference, "pairs", reference), aln.m, aln.n)
    ref_set = {(int(i), int(j)) for i, j in ref}
    mx = column_feature(aln, match, match_feature, radius)
    my = np.array([(int(i), int(j)) in ref_set for i, j in aln.pairs], dtype=np.float64)
    gx, gy = [], []
    for side, gaps, length in ((0, aln.query_gap_posterior, aln.m), (1, aln.target_gap_posterior, aln.n)):
        unaligned = np.ones(length, dtype=bool)
        unaligned[aln.pairs[:, side]] = False
        ref_unaligned = np.ones(length, dtype=bool)
        ref_unaligned[ref[:, side]] = False
        gx.append(gaps[unaligned])
        gy.append(ref_unaligned[unaligned].astype(np.float64))
    return mx, my, np.concatenate(gx), np.concatenate(gy)


def fit_calibration(alignments: Iterable[Alignment], references: Iterable, *, matches: Iterable | None = None,
                    match_feature: str = "local_share", radius: int = 3, fitted_on: str = "",
                    max_knots: int = 16) -> Calibration:
    """Fit a :class:`Calibration` from raw (uncalibrated) alignments and their references.

    Args:
        alignments: MEA alignments with raw posteriors.
        references: per alignment, the reference aligned pairs ``[k, 2]`` (or an object with
            ``.pairs``), in the same order.
        matches: per alignment, its ``[m, n]`` match posterior matrix (needed by
            ``match_feature="local_share"``). All three are consumed in lockstep, lazily.
    Match: each aligned column -> 1 if the pair is in the reference. Gap: each residue the
    alignment leaves unaligned -> 1 if the reference leaves it unaligned too.
    """
    if match_feature not in MATCH_FEATURES:
        raise ValueError(f"match_feature={match_feature!r} is not one of {MATCH_FEATURES}")
    if match_feature == "local_share" and matches is None:
        raise ValueError("match_feature='local_share' needs the match posterior matrices (matches=...)")
    samples = [calibration_samples(aln, ref, match, match_feature=match_feature, radius=radius)
               for aln, ref, match in zip(alignments, references, itertools.repeat(None) if matches is None
                                          else matches)]
    return fit_from_samples(samples, match_feature=match_feature, radius=radius, fitted_on=fitted_on,
                            max_knots=max_knots)


def fit_from_samples(samples, *, match_feature: str = "local_share", radius: int = 3, fitted_on: str = "",
                     max_knots: int = 16) -> Calibration:
    """A :class:`Calibration` from :func:`calibration_samples` tuples (one per alignment)."""
    samples = list(samples)
    if not samples:
        raise ValueError("fit_calibration needs at least one alignment")
    mx, my, gx, gy = (np.concatenate([s[k] for s in samples]) for k in range(4))
    if mx.size == 0 or gx.size == 0:
        raise ValueError(f"need aligned columns and unaligned residues to fit, got {mx.size} and {gx.size}")
    match_x, match_y = isotonic_knots(mx, my, max_knots=max_knots)
    gap_x, gap_y = isotonic_knots(gx, gy, max_knots=max_knots)
    return Calibration(match_x, match_y, gap_x, gap_y, fitted_on=fitted_on, match_feature=match_feature,
                       radius=radius)
