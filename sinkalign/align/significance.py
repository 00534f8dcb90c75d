"""E-values: how often would an unrelated pair align as well as this one?

An alignment is always produced, homologous or not; the E-value says whether to believe it.
For a pair of lengths ``m`` and ``n`` the aligner computes the pair's features
(:data:`PAIR_FEATURES`):

* ``local_nats``: the Smith-Waterman score of the two sequences (BLOSUM62, open 11 / extend 1
  for protein; +2/-3, open 5 / extend 2 for DNA; parasail) times ``lambda_pq``, the
  Karlin-Altschul lambda of the substitution matrix for *this pair's* residue compositions
  ``p`` and ``q`` (:func:`composition_lambda`: the root of ``sum p_a q_b exp(lambda s_ab) =
  1``). Two sequences of alike, skewed composition (two transmembrane proteins, a
  low-complexity pair) score high by chance; their ``lambda_pq`` is smaller, which takes that
  back (the idea of BLAST's composition-based statistics);
* ``expected_correct``: the sum of the calibrated confidences of the MEA columns at or above
  the calibration's own threshold (its ``min_confidence``, whatever a user passes to the
  aligner), i.e. the number of columns the model expects to be right;

and scores them with a fixed linear statistic ``S = local_nats + alpha * expected_correct``.
``alpha`` is chosen from :data:`MIX_GRID` on training pairs: the one that finds most of them
at ``E <= 1e-3`` (:data:`FIT_EVALUE`), each candidate with its own null fit.

The null distribution of ``S`` (pairs with one sequence shuffled: same compositions) is fitted
as an extreme value (Gumbel) law whose location and log scale are linear in ``ln(m n)``, as
Karlin-Altschul statistics have ``lambda S ~ Gumbel(ln(K m n), 1)`` for local alignment scores.
The fit is by maximum likelihood on the upper tail, where E-values are read: scores below
``mu + beta`` of a first fit to all of them count as left-censored (:data:`CENSOR_BELOW`).

    z = (S - mu(m, n)) / beta(m, n),   mu = a + b ln(m n),   beta = exp(c + d ln(m n))
    E = exp(-z),                        P(S_null >= S) = 1 - exp(-E)

with ``ln(m n)`` raised to the null's shortest pair (:attr:`Significance.min_log_mn`) where a
pair is shorter: the law is not extrapolated below what it was fitted on (conservative there).

``E`` is the expected number of shuffled pairs of these lengths scoring at least ``S`` per
comparison (``bl2seq``'s convention); in a search of ``N`` comparisons the expected number
of chance hits at least as good is ``N E`` (``sinkalign align --db-size``). It is a
statement about shuffled sequences: real unrelated proteins with repeats can score better
than shuffles, so treat E-values near the threshold with the usual care. ``benchmarks/homology_evalues.py`` measures how well the
E-values are calibrated and how many homologs they find.

The fit is :func:`fit_significance`; ``sinkalign fit-evalues`` runs it for a model and stores
the result with the model (``state.json``, key ``significance``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np

from sinkalign.utils import dataclass_from_dict

__all__ = ["CENSOR_BELOW", "MIX_GRID", "PAIR_FEATURES", "Significance", "composition_lambda",
           "composition_lambdas", "fit_gumbel",
           "aligned_features", "fit_significance", "local_nats", "pair_features", "shuffled", "significance_samples",
           "window_pairs"]

PAIR_FEATURES = ("local_nats", "expected_correct")
# weights of expected_correct (in nats of local score per expected correct column) tried by the fit
MIX_GRID = (0.0, 0.03125, 0.0625, 0.125, 0.25, 0.5, 1.0)
# the null is fitted to scores above mu + CENSOR_BELOW * beta of a first fit (the top ~31%)
CENSOR_BELOW = 1.0
# letters whose composition sets lambda_pq, and the pseudocount added to each letter's count
_COMPOSITION_LETTERS = {"protein": "ARNDCQEGHILKMFPSTWYV", "dna": "ACGT"}
_PSEUDOCOUNT = 0.5
# the fit maximises the share of real pairs found at this E-value
FIT_EVALUE = 1e-3


def shuffled(seq: str, rng: np.random.Generator) -> str:
    """``seq`` with its letters in a random order (same length and composition)."""
    letters = np.frombuffer(seq.encode("ascii"), dtype=np.uint8).copy()
    rng.shuffle(letters)
    return letters.tobytes().decode("ascii")


def composition_lambda(query: str, target: str, *, kind: str = "protein") -> float:
    """The Karlin-Altschul lambda of the substitution matrix (BLOSUM62 or +2/-3) for the
    residue compositions ``p`` of ``query`` and ``q`` of ``target``: the positive root of
    ``sum_ab p_a q_b exp(lambda s_ab) = 1``. Compositions count the standard letters (20
    amino acids, ACGT) plus a pseudocount of 0.5 each. When the expected score ``p^T s q``
    is not negative (no root: alignments of such a pair grow linearly with length) the
    lambda of the expected score 0 limit, 0, is replaced by a small floor (0.01), so that
    such pairs get large E-values.

    The sum is taken over the matrix's distinct scores ``s_k`` with weights ``w_k`` (the
    probability of a letter pair scoring ``s_k``, ``sum_k w_k = 1``), and the root found by
    Newton's method on ``g(lambda) = ln(1 + h(lambda))``, ``h = sum_k w_k expm1(lambda s_k)``:
    ``g`` is convex (a log-sum-exp) with ``g(0) = 0`` exactly and ``g'(0) = p^T s q < 0``, so
    from a point where ``g > 0`` the iterates fall monotonically to the root, and nearly
    linear far above it (few steps). ``expm1`` and ``log1p`` keep the root accurate (to about
    1e-13 relative) when the drift is near 0 and the root small."""
    values, classes, letters = _score_classes(kind)
    w = np.bincount(classes, weights=np.outer(_composition(query, letters), _composition(target, letters)).ravel(),
                    minlength=values.size)
    if w @ values >= 0:
        return 0.01

    def h_and_step(lam: float) -> tuple[float, float]:  # h and the Newton step g / g', g' = h' / (1 + h)
        em1 = np.expm1(lam * values)
        h = float(w @ em1)
        return h, math.log1p(h) * (1.0 + h) / float(w @ ((em1 + 1.0) * values))

    lam = 1.0
    while (h_step := h_and_step(lam))[0] <= 0:  # h < 0 just above 0 (negative drift), unbounded above
        lam *= 2.0
    for _ in range(100):
        dx = h_step[1]
        lam -= dx
        if dx <= 1e-14 * lam:  # (a last step may be a rounding's width upwards)
            return lam
        h_step = h_and_step(lam)
    raise ArithmeticError(f"composition_lambda: Newton's method did not converge (lambda {lam}, step {h_step[1]})")


def composition_lambdas(query: str, targets, *, kind: str = "protein") -> np.ndarray:
    """:func:`composition_lambda` of ``query`` with each of ``targets`` (``float64``; the same
    numbers to rounding), all Newton iterations run together: one query against many targets
    (a search's prefilter) costs a fraction of one call per pair."""
    values, classes, letters = _score_classes(kind)
    n_letters = len(letters)
    p = _composition(query, letters)
    # weights of each score class for each target: W[t, k] = sum_ab p_a q_tb [class(a, b) = k]
    by_target = np.zeros((n_letters, values.size))
    pair = np.arange(classes.size)
    np.add.at(by_target, (pair % n_letters, classes), p[pair // n_letters])
    W = np.array([_composition(t, letters) for t in targets]).reshape(-1, n_letters) @ by_target
    out = np.full(W.shape[0], 0.01)
    todo = np.flatnonzero(W @ values < 0)  # the rest has no root: the floor, as composition_lambda

    def h_and_step(rows, lam):
        em1 = np.expm1(lam[:, None] * values)
        h = np.einsum("tk,tk->t", W[rows], em1)
        return h, np.log1p(h) * (1.0 + h) / np.einsum("tk,tk->t", W[rows], (em1 + 1.0) * values)

    lam = np.ones(todo.size)
    h, step = h_and_step(todo, lam)
    while np.any(low := h <= 0):  # h < 0 just above 0 (negative drift), unbounded above
        lam[low] *= 2.0
        h[low], step[low] = h_and_step(todo[low], lam[low])
    for _ in range(100):
        lam -= step
        done = step <= 1e-14 * lam
        out[todo[done]] = lam[done]
        todo, lam = todo[~done], lam[~done]
        if not todo.size:
            return out
        h, step = h_and_step(todo, lam)
    raise ArithmeticError(f"composition_lambdas: Newton's method did not converge for {todo.size} targets")


def _composition(seq: str, letters: str) -> np.ndarray:
    codes = _letter_codes(letters)
    counts = np.bincount(codes[np.frombuffer(seq.upper().encode("ascii", "replace"), np.uint8)],
                         minlength=len(letters) + 1)[:-1] + _PSEUDOCOUNT
    return counts / counts.sum()


@functools.cache
def _letter_codes(letters: str) -> np.ndarray:
    """Byte -> index of the letter in ``letters``, ``len(letters)`` for every other byte."""
    codes = np.full(256, len(letters), dtype=np.intp)
    codes[np.frombuffer(letters.encode("ascii"), np.uint8)] = np.arange(len(letters))
    return codes


@functools.cache
def _score_classes(kind: str) -> tuple[np.ndarray, np.ndarray, str]:
    """The distinct scores of the ``kind``'s substitution matrix over its standard letters,
    the class (index into them) of each letter pair (row-major), and the letters."""
    from sinkalign.align.baselines import Scoring, _score_lookup

    if kind not in _COMPOSITION_LETTERS:
        raise ValueError(f"{kind=} is not 'protein' or 'dna'")
    letters = _COMPOSITION_LETTERS[kind]
    lut, table = _score_lookup(Scoring.default(kind))
    rows = np.array([lut[ord(a)] for a in letters])
    values, classes = np.unique(table[np.ix_(rows, rows)], return_inverse=True)
    return values.astype(np.float64), classes.ravel(), letters


def pair_features(confidences, query: str, target: str, *, threshold: float = 0.0,
                  kind: str = "protein") -> np.ndarray:
    """``float64 [len(PAIR_FEATURES)]`` of one pair: ``confidences`` are the calibrated
    confidences of every MEA column (before any threshold), ``threshold`` the calibration's own."""
    conf = np.asarray(confidences, dtype=np.float64).ravel()
    return np.array([local_nats(query, target, kind=kind), conf[conf >= threshold].sum()])


def local_nats(query: str, target: str, *, kind: str = "protein") -> float:
    """The Smith-Waterman score (BLOSUM62 11/1 for protein, +2/-3 5/2 for DNA; parasail) in
    nats: times the Karlin-Altschul lambda of the pair's own compositions
    (:func:`composition_lambda`). The first of :data:`PAIR_FEATURES`."""
    from sinkalign.align.baselines import Scoring, local_score
    from sinkalign.align.calibration import _baseline_letters

    if kind not in ("protein", "dna"):
        raise ValueError(f"{kind=} is not 'protein' or 'dna'")
    q, t = _baseline_letters(query, kind), _baseline_letters(target, kind)
    return local_score(q, t, scoring=Scoring.default(kind)) * composition_lambda(q, t, kind=kind)


def _gumbel_nll(theta: np.ndarray, s: np.ndarray, x: np.ndarray,
                censored: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Mean negative log-likelihood of the Gumbel (maximum) law with ``mu = a + b x``,
    ``beta = exp(c + d x)`` at the points ``s``, and its gradient in ``(a, b, c, d)``.
    Where ``censored`` is true, ``s`` is a censoring point: the observation is only known to
    lie below it (log-likelihood ``log F(s) = -exp(-z)``)."""
    a, b, c, d = theta
    # a trial step far off overflows to an infinite loss, which the line search backs off from
    with np.errstate(over="ignore", invalid="ignore"):
        log_beta = c + d * x
        inv_beta = np.exp(-log_beta)
        z = (s - a - b * x) * inv_beta
        ez = np.exp(-z)
        terms = log_beta + z + ez
        dz = 1.0 - ez  # d term / d z
        dlb = 1.0 - dz * z  # d term / d log beta, through z = (s - mu) / beta as well
        if censored is not None and censored.any():
            terms = np.where(censored, ez, terms)
            dz = np.where(censored, -ez, dz)
            dlb = np.where(censored, ez * z, dlb)
        dmu = -dz * inv_beta
        return float(np.mean(terms)), np.array([dmu.mean(), (dmu * x).mean(), dlb.mean(), (dlb * x).mean()])


def fit_gumbel(scores, log_mn, *, censor_below: float | None = None) -> tuple[list[float], list[float]]:
    """Maximum-likelihood ``([a, b], [c, d])`` of the Gumbel law ``mu = a + b ln(mn)``,
    ``beta = exp(c + d ln(mn))`` of null ``scores`` at ``log_mn = ln(m n)`` (L-BFGS from the
    moment estimates; ``ln(mn)`` centred inside for conditioning).

    ``censor_below``: fit the upper tail, where E-values are read. After the fit to every
    score, the scores below ``mu + beta * censor_below`` of that fit (``censor_below`` a
    standard-Gumbel quantile, e.g. 0.367 the median) count only as lying below that point
    (left-censored), and the law is fitted again.
    """
    from scipy.optimize import minimize

    s = np.asarray(scores, dtype=np.float64).ravel()
    x = np.asarray(log_mn, dtype=np.float64).ravel()
    if s.size != x.size or s.size < 10:
        raise ValueError(f"need at least 10 null scores with one ln(mn) each, got {s.size} and {x.size}")
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(x))):
        raise ValueError("null scores and ln(mn) must be finite")
    centre = x.mean()
    xc = x - centre
    sd = s.std() or 1.0
    beta0 = sd * math.sqrt(6) / math.pi
    start = np.array([s.mean() - 0.5772 * beta0, 0.0, math.log(beta0), 0.0])
    opts = {"maxiter": 5000, "ftol": 1e-15, "gtol": 1e-10}
    theta = minimize(_gumbel_nll, start, args=(s, xc), jac=True, method="L-BFGS-B", options=opts).x
    if censor_below is not None:
        a, b, c, d = theta
        cut = a + b * xc + np.exp(c + d * xc) * censor_below
        censored = s < cut
        points = np.where(censored, cut, s)
        theta = minimize(_gumbel_nll, theta, args=(points, xc, censored), jac=True, method="L-BFGS-B",
                         options=opts).x
    a, b, c, d = theta
    return [float(a - b * centre), float(b)], [float(c - d * centre), float(d)]


@dataclass(frozen=True)
class Significance:
    """E-values of aligned pairs (see the module doc).

    Attributes:
        weights: ``w`` of the statistic ``S = w . x`` over :data:`PAIR_FEATURES`.
        location: ``[a, b]``: ``mu = a + b ln(m n)``.
        scale: ``[c, d]``: ``beta = exp(c + d ln(m n))``.
        threshold: the confidence threshold of ``expected_correct`` (the calibration's own).
        kind: ``"protein"`` or ``"dna"`` (the local-score scoring).
        fitted_on: what the fit saw (free text).
        min_log_mn: the smallest ``ln(m n)`` among the null pairs (``None``: no floor). The law
            was not fitted below it, and extrapolated there it put the null's location far
            too low (two unrelated 3-residue peptides at E ~ 1e-4): a shorter pair is scored
            against the null at this size, whose scores run higher than its own would, so its
            E-value errs large (conservative).
    """

    weights: list
    location: list
    scale: list
    threshold: float = 0.0
    kind: str = "protein"
    fitted_on: str = ""
    min_log_mn: float | None = None

    def __post_init__(self) -> None:
        for name, size in (("weights", len(PAIR_FEATURES)), ("location", 2), ("scale", 2)):
            value = np.asarray(getattr(self, name), dtype=np.float64)
            if value.shape != (size,) or not np.all(np.isfinite(value)):
                raise ValueError(f"significance {name} must be {size} finite numbers, got {getattr(self, name)!r}")
            object.__setattr__(self, name, [float(v) for v in value])
        if self.kind not in ("protein", "dna"):
            raise ValueError(f"significance kind must be 'protein' or 'dna', got {self.kind!r}")
        if not (isinstance(self.threshold, (int, float)) and 0 <= self.threshold < 1):
            raise ValueError(f"significance threshold must be in [0, 1), got {self.threshold!r}")
        if self.min_log_mn is not None:
            if isinstance(self.min_log_mn, bool) or not isinstance(self.min_log_mn, (int, float)) or not (
                    math.isfinite(self.min_log_mn) and self.min_log_mn >= 0):
                raise ValueError(f"significance min_log_mn must be a finite number >= 0 (ln(m n) of the shortest "
                                 f"null pair) or null, got {self.min_log_mn!r}")
            object.__setattr__(self, "min_log_mn", float(self.min_log_mn))

    def statistic(self, features) -> np.ndarray:
        """``S = w . x`` of feature rows ``[..., len(PAIR_FEATURES)]``."""
        return np.asarray(features, dtype=np.float64) @ np.asarray(self.weights)

    def log_evalue(self, features, m, n) -> np.ndarray:
        """Natural logs of the E-values of feature rows for sequences of lengths ``m`` and ``n``
        (broadcast): finite where the E-values themselves underflow to 0 (below ~1e-308, as
        long close homologs reach), so strong hits still rank. Pairs shorter than the null's
        shortest (:attr:`min_log_mn`) are scored against the null at that size."""
        x = np.log(np.asarray(m, dtype=np.float64) * np.asarray(n, dtype=np.float64))
        if self.min_log_mn is not None:
            x = np.maximum(x, self.min_log_mn)
        mu = self.location[0] + self.location[1] * x
        beta = np.exp(self.scale[0] + self.scale[1] * x)
        return -(self.statistic(features) - mu) / beta

    def evalue(self, features, m, n) -> np.ndarray:
        """E-values of feature rows for sequences of lengths ``m`` and ``n`` (broadcast)."""
        with np.errstate(over="ignore"):
            return np.exp(self.log_evalue(features, m, n))

    def pair_log_evalue(self, confidences, query: str, target: str) -> float:
        """The natural log of one aligned pair's E-value, from its MEA columns' calibrated
        confidences (``exp`` of it is :meth:`pair_evalue`)."""
        feats = pair_features(confidences, query, target, threshold=self.threshold, kind=self.kind)
        return float(self.log_evalue(feats, len(query), len(target)))

    def pair_evalue(self, confidences, query: str, target: str) -> float:
        """The E-value of one aligned pair from its MEA columns' calibrated confidences."""
        with np.errstate(over="ignore"):
            return float(np.exp(self.pair_log_evalue(confidences, query, target)))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Significance:
        return dataclass_from_dict(cls, data, "significance")


def fit_significance(features, lengths, null_features, null_lengths, *, threshold: float = 0.0,
                     kind: str = "protein", fitted_on: str = "", alphas=MIX_GRID) -> Significance:
    """The statistic's mix ``alpha`` and its Gumbel null: for each ``alpha`` of ``alphas``
    (default :data:`MIX_GRID`), the null fitted on ``null_features [M, F]`` of shuffled pairs
    (lengths ``null_lengths [M, 2]``); kept: the ``alpha`` whose E-values put most real pairs
    (``features [N, F]``, ``lengths [N, 2]``) at ``E <= FIT_EVALUE`` (ties: the smaller alpha).

    ``alphas=(0.0,)`` keeps the local score alone, whose null moves with ``ln(m n)`` as the
    Gumbel location assumes at every length; a positive ``alpha`` adds expected correct columns,
    which grow with the length itself wherever the model's confidences on unrelated pairs are not
    small (the DNA model's), so its null holds only at the lengths it was fitted on."""
    X = np.asarray(features, dtype=np.float64)
    N = np.asarray(null_features, dtype=np.float64)
    lx = np.asarray(lengths, dtype=np.float64)
    ln = np.asarray(null_lengths, dtype=np.float64)
    F = len(PAIR_FEATURES)
    if X.ndim != 2 or N.ndim != 2 or X.shape[1] != F or N.shape[1] != F or len(X) == 0:
        raise ValueError(f"features must be [N, {F}] with N > 0, got {X.shape} and {N.shape}")
    for name, arr, rows in (("lengths", lx, len(X)), ("null_lengths", ln, len(N))):
        if arr.shape != (rows, 2) or np.any(arr < 1):
            raise ValueError(f"{name} must be [{rows}, 2] positive lengths, got {arr.shape}")
    alphas = [float(a) for a in alphas]
    if not alphas or any(not np.isfinite(a) or a < 0 for a in alphas):
        raise ValueError(f"alphas must be finite numbers >= 0, got {alphas!r}")
    best = None
    log_mn = np.log(ln[:, 0] * ln[:, 1])
    for alpha in alphas:
        w = [1.0, alpha]
        location, scale = fit_gumbel(N @ np.asarray(w), log_mn, censor_below=CENSOR_BELOW)
        sig = Significance(w, location, scale, threshold=float(threshold), kind=kind, fitted_on=fitted_on,
                           min_log_mn=float(log_mn.min()))
        found = float(np.mean(sig.evalue(X, lx[:, 0], lx[:, 1]) <= FIT_EVALUE))
        if best is None or found > best[0]:
            best = (found, sig)
    return best[1]


def aligned_features(aligner, items) -> tuple[np.ndarray, np.ndarray]:
    """``(features [N, F], lengths [N, 2])`` of ``(query, target)`` sequence pairs aligned by
    ``aligner`` (calibrated, at its calibration's own threshold, as the E-values see them), each
    as given (on the plus strand: the null is that of one comparison)."""
    cal = aligner.calibration
    if cal is None:
        raise ValueError("E-values need a calibrated model (fit one with `sinkalign calibrate`)")
    if aligner.min_confidence != cal.min_confidence:
        raise ValueError(f"the aligner's min_confidence {aligner.min_confidence} is not its calibration's "
                         f"{cal.min_confidence}: fit E-values at the calibration's own threshold")
    kind = aligner.config.alphabet  # "protein" or "dna" (AlignerConfig checks it)
    items = [(str(q), str(t)) for q, t in items]
    stream = aligner.align_many(((f"q{i}", q, f"t{i}", t) for i, (q, t) in enumerate(items)), strand="plus")
    feats = np.array([pair_features(r.alignment.match_posterior, r.query, r.target, threshold=0.0, kind=kind)
                      for r in stream]).reshape(-1, len(PAIR_FEATURES))
    return feats, np.array([(len(q), len(t)) for q, t in items], dtype=np.float64).reshape(-1, 2)


def significance_samples(aligner, pairs, *, shuffles: int = 2, seed: int = 0):
    """What :func:`fit_significance` takes, for ``(query, target)`` sequence pairs aligned by
    ``aligner`` (calibrated, at its calibration's own threshold), each also aligned
    ``shuffles`` times with its target shuffled (even draws) or its query shuffled (odd
    draws); ``seed`` fixes the shuffles. Returns ``(features [N, F], lengths [N, 2],
    null_features [N * shuffles, F], null_lengths [N * shuffles, 2])``, the shuffles of pair
    ``k`` in rows ``k * shuffles`` onwards."""
    rng = np.random.default_rng(seed)
    pairs = [(str(q), str(t)) for q, t in pairs]
    null = []
    for q, t in pairs:
        for s in range(shuffles):
            null.append((q, shuffled(t, rng)) if s % 2 == 0 else (shuffled(q, rng), t))
    return (*aligned_features(aligner, pairs), *aligned_features(aligner, null))


def window_pairs(sequences, n_pairs: int, *, min_length: int = 50, max_length: int = 1000, seed: int = 0,
                 shuffle: bool = True) -> list[tuple[str, str]]:
    """``n_pairs`` pairs of windows cut at random from ``sequences`` (e.g. genome contigs), for
    a null whose lengths span ``[min_length, max_length]`` (log-uniform, drawn independently
    per window). Each window comes from a sequence drawn in proportion to its length (at
    least ``min_length`` long), the two of a pair from different sequences where there are
    several, and is shuffled (``shuffle``) so that chance homology (repeats, shared genes)
    cannot enter the null. The shuffles draw from their own stream: with the same ``seed``,
    ``shuffle=True`` gives the shuffles of the windows ``shuffle=False`` gives."""
    seqs = [str(s) for s in sequences if len(s) >= min_length]
    if not seqs:
        raise ValueError(f"no sequence of at least {min_length} letters to cut windows from")
    if not 1 <= min_length <= max_length:
        raise ValueError(f"window lengths [{min_length}, {max_length}] must satisfy 1 <= min <= max")
    rng = np.random.default_rng(seed)
    shuffle_rng = np.random.default_rng([seed, 1])
    weights = np.array([len(s) for s in seqs], dtype=np.float64)
    weights /= weights.sum()

    def window(k: int, length: int) -> str:
        seq = seqs[k]
        length = min(length, len(seq))
        start = int(rng.integers(0, len(seq) - length + 1))
        w = seq[start:start + length]
        return shuffled(w, shuffle_rng) if shuffle else w

    out = []
    for _ in range(n_pairs):
        a = int(rng.choice(len(seqs), p=weights))
        b = a
        while b == a and len(seqs) > 1:
            b = int(rng.choice(len(seqs), p=weights))
        la, lb = np.exp(rng.uniform(np.log(min_length), np.log(max_length), 2)).round().astype(int)
        out.append((window(a, int(la)), window(b, int(lb))))
    return out
