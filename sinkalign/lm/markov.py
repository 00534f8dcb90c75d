"""Order-k Markov chain over DNA: the k-mer baseline a genome language model must beat.

Model: ``P(x | c) = (n(c, x) + a) / (n(c) + 4 a)`` for a context ``c`` of the previous
``order`` bases and ``a = pseudocount`` (add-0.5 by default; unseen contexts get the
uniform 1/4). Counts are taken over every (order+1)-mer of the training sequence(s) with
vectorised base-4 hashing (A=0, C=1, G=2, T=3; hash = sum_j x_j 4^(order-j)) and kept
sparse (sorted unique hashes + counts), so order 12 (4^13 possible 13-mers) costs memory
proportional to the distinct k-mers actually seen, not 4^13.

N handling: every (order+1)-mer that contains an N -- in the context or as the predicted
base -- is skipped, both when counting and when scoring. k-mers never span two records.

Reference figure (``tests/test_markov.py``): trained on the first 90% of the
C. diphtheriae NCTC11397 chromosome and scored on the last 10% (conditioning the first
``order`` validation bases on the end of the training split), order 6 gives 1.952
bits/base, the best of orders 0..12.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from sinkalign.lm.data import decode, encode

__all__ = ["MarkovModel", "MarkovSweep", "best_order"]

logger = logging.getLogger(__name__)

#: Largest order whose (order+1)-mer hash fits in int64.
MAX_ORDER = 30


def _kmer_hashes(tokens: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Base-4 hashes of every k-mer of ``tokens`` ``[L]`` -> ``(hash [L-k+1], valid [L-k+1])``.

    ``valid`` is False for k-mers containing N (token 4). Needs ``L >= k``.
    """
    n = tokens.size - k + 1
    assert n >= 1 and k >= 1
    base = (tokens & 3).astype(np.int64)  # N's low bits are masked out by `valid`
    h = np.zeros(n, dtype=np.int64)
    for j in range(k):  # k vectorised passes: h = h * 4 + x[j : j + n]
        h <<= 2
        h |= base[j : j + n]
    is_n = np.concatenate([[0], np.cumsum(tokens == 4, dtype=np.int64)])  # [L + 1]
    valid = (is_n[k:] - is_n[:n]) == 0
    return h, valid


def _lookup(keys: np.ndarray, values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``values[keys == q]`` for each query (0 where absent); ``keys`` sorted ascending."""
    if keys.size == 0:
        return np.zeros(queries.shape, dtype=values.dtype)
    idx = np.searchsorted(keys, queries)
    idx = np.minimum(idx, keys.size - 1)
    hit = keys[idx] == queries
    return np.where(hit, values[idx], 0)


class MarkovModel:
    """Order-``order`` Markov chain over ``ACGT`` with add-``pseudocount`` smoothing.

    Args:
        order: context length k (0 = i.i.d. base composition), ``0 <= order <= 30``.
        pseudocount: additive smoothing a > 0 per (context, base) cell.
    """

    def __init__(self, order: int, pseudocount: float = 0.5) -> None:
        if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or not 0 <= order <= MAX_ORDER:
            raise ValueError(f"{order=} must be an integer in [0, {MAX_ORDER}]")
        if not (pseudocount > 0 and np.isfinite(pseudocount)):
            raise ValueError(f"{pseudocount=} must be a positive finite number")
        self.order = int(order)
        self.pseudocount = float(pseudocount)
        self._keys: np.ndarray | None = None  # sorted (order+1)-mer hashes seen [K]
        self._counts: np.ndarray | None = None  # their counts [K]
        self._ctx_keys: np.ndarray | None = None  # sorted context hashes seen [C]
        self._ctx_counts: np.ndarray | None = None  # their counts [C]
        self.n_train = 0  # number of (order+1)-mers counted

    def __repr__(self) -> str:
        state = f"fitted on {self.n_train} k-mers" if self.fitted else "unfitted"
        return f"MarkovModel(order={self.order}, pseudocount={self.pseudocount}, {state})"

    @property
    def fitted(self) -> bool:
        return self._keys is not None

    def _check_fitted(self) -> None:
        if not self.fitted:
            raise RuntimeError("MarkovModel is not fitted; call .fit(train_seq) first")

    def fit(self, seqs: str | Sequence[str]) -> MarkovModel:
        """Count every N-free (order+1)-mer of ``seqs`` (one string or several records).

        Returns ``self``. Raises ``ValueError`` for characters outside ACGTN (with their
        position) or when no N-free (order+1)-mer exists.
        """
        if isinstance(seqs, str):
            seqs = [seqs]
        k = self.order + 1
        hashes = []
        for i, s in enumerate(seqs):
            try:
                tokens = encode(s)
            except ValueError as exc:
                raise ValueError(f"training sequence {i}: {exc}") from None
            if tokens.size >= k:
                h, valid = _kmer_hashes(tokens, k)
                hashes.append(h[valid])
        all_h = np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.int64)
        if all_h.size == 0:
            raise ValueError(f"no N-free {k}-mer in the training data; cannot fit order {self.order}")
        keys, counts = np.unique(all_h, return_counts=True)
        ctx = keys >> 2  # keys sorted => ctx sorted
        ctx_keys, first = np.unique(ctx, return_index=True)
        self._keys, self._counts = keys, counts.astype(np.int64)
        self._ctx_keys, self._ctx_counts = ctx_keys, np.add.reduceat(self._counts, first)
        self.n_train = int(all_h.size)
        logger.debug("order %d: %d k-mers, %d distinct", self.order, self.n_train, keys.size)
        return self

    def counts(self, context: str) -> np.ndarray:
        """Counts ``[4]`` of A, C, G, T following ``context`` (exactly ``order`` bases, no N)."""
        self._check_fitted()
        if len(context) != self.order:
            raise ValueError(f"context {context!r} must have exactly order={self.order} bases")
        t = encode(context)
        if np.any(t == 4):
            raise ValueError(f"context {context!r} contains N")
        c = 0
        for x in t:
            c = c * 4 + int(x)
        return _lookup(self._keys, self._counts, c * 4 + np.arange(4, dtype=np.int64))

    def log2_probs(self, seq: str, *, prefix: str = "") -> np.ndarray:
        """Per-base ``log2 P(seq[i] | previous order bases)``: float64 ``[len(seq)]``.

        The context of the first bases comes from the last ``order`` bases of ``prefix``
        (e.g. the end of the training split, which directly precedes the validation
        split). Entries are NaN where the base is not scored: fewer than ``order``
        preceding bases are available, or the (order+1)-mer contains N.
        """
        self._check_fitted()
        tail = prefix[max(0, len(prefix) - self.order) :] if self.order else ""
        try:
            tokens = encode(tail + seq)
        except ValueError as exc:
            raise ValueError(f"evaluation sequence (after {len(tail)} prefix bases): {exc}") from None
        m, k = len(tail), self.order + 1
        out = np.full(tokens.size, np.nan)
        if tokens.size >= k:
            h, valid = _kmer_hashes(tokens, k)  # h[i] predicts tokens[i + order]
            a = self.pseudocount
            n_cx = _lookup(self._keys, self._counts, h)
            n_c = _lookup(self._ctx_keys, self._ctx_counts, h >> 2)
            lp = np.log2(n_cx + a) - np.log2(n_c + 4 * a)
            out[self.order :] = np.where(valid, lp, np.nan)
        return out[m:]

    def bits_per_base(self, seq: str, *, prefix: str = "") -> float:
        """Mean ``-log2 P`` over the scored bases of held-out ``seq`` (see :meth:`log2_probs`).

        Without ``prefix`` the first ``order`` bases have no full context and are not
        scored; pass the preceding sequence (``prefix=train``) to score every base.
        Raises ``ValueError`` when no base can be scored.
        """
        lp = self.log2_probs(seq, prefix=prefix)
        scored = ~np.isnan(lp)
        if not scored.any():
            raise ValueError(
                f"no base of the evaluation sequence (length {len(seq)}) can be scored at "
                f"order {self.order}: too short or every window contains N"
            )
        return float(-lp[scored].mean())

    def sample(self, length: int, *, prompt: str = "", seed: int | np.random.Generator = 0) -> str:
        """Sample ``length`` new bases continuing ``prompt``; returns only the new bases.

        ``prompt`` must end with ``order`` N-free bases (its earlier part is ignored).
        Without a prompt the first ``order`` bases of the result are a context drawn in
        proportion to its training count, and sampling continues from there (the result
        is still ``length`` bases long). ``seed`` is an int or a ``numpy.random.Generator``.
        """
        self._check_fitted()
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
            raise ValueError(f"{length=} must be a non-negative integer")
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        k, a = self.order, self.pseudocount
        out = np.empty(length + k, dtype=np.int8)
        if prompt:
            if len(prompt) < k:
                raise ValueError(f"prompt of length {len(prompt)} is shorter than order={k}")
            ctx_tokens = encode(prompt[len(prompt) - k :]) if k else np.zeros(0, dtype=np.int8)
            if np.any(ctx_tokens == 4):
                raise ValueError(f"the last order={k} bases of the prompt contain N")
        else:
            p = self._ctx_counts / self._ctx_counts.sum()
            c = int(self._ctx_keys[rng.choice(self._ctx_keys.size, p=p)])
            ctx_tokens = np.array([(c >> (2 * (k - 1 - j))) & 3 for j in range(k)], dtype=np.int8)
        out[:k] = ctx_tokens
        ctx = 0
        for x in ctx_tokens:
            ctx = ctx * 4 + int(x)
        mask = (1 << (2 * k)) - 1
        four = np.arange(4, dtype=np.int64)
        cache: dict[int, np.ndarray] = {}
        u = rng.random(length)
        for i in range(length):
            cdf = cache.get(ctx)
            if cdf is None:
                w = _lookup(self._keys, self._counts, ctx * 4 + four) + a
                cdf = np.cumsum(w / w.sum())
                cache[ctx] = cdf
            x = min(int(np.searchsorted(cdf, u[i], side="right")), 3)
            out[k + i] = x
            ctx = ((ctx << 2) | x) & mask
        return decode(out[k:] if prompt else out[:length])


class MarkovSweep(NamedTuple):
    """Result of :func:`best_order`: the winning order and bits/base for every order tried."""

    best_order: int
    bits_per_base: dict[int, float]


def best_order(
    train: str | Sequence[str],
    val: str,
    orders: Sequence[int] = range(0, 13),
    *,
    pseudocount: float = 0.5,
    contiguous: bool = True,
) -> MarkovSweep:
    """Fit one model per order on ``train`` and score held-out ``val``; lowest bits/base wins.

    With ``contiguous=True`` (the ``train_val_split`` convention: ``val`` directly follows
    ``train``), the first ``order`` validation bases are conditioned on the end of the
    (last) training sequence, so every validation base is scored at every order. With
    ``contiguous=False`` those bases are left unscored. Ties go to the lower order.
    """
    orders = list(orders)
    if not orders:
        raise ValueError("orders must not be empty")
    prefix = ""
    if contiguous:
        prefix = train if isinstance(train, str) else (train[-1] if len(train) else "")
    result: dict[int, float] = {}
    for k in orders:
        model = MarkovModel(k, pseudocount).fit(train)
        result[int(k)] = model.bits_per_base(val, prefix=prefix)
        logger.info("order %d: %.4f bits/base", k, result[int(k)])
    best = min(result, key=lambda o: (result[o], o))
    return MarkovSweep(best, result)
