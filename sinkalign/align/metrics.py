"""Alignment accuracy: precision / recall / F1 of aligned residue pairs, identity binning.

A predicted alignment is scored against a reference alignment by the sets of aligned
residue pairs ``(i, j)`` (0-based; only aligned pairs count, gaps are not scored):
``precision = |pred & ref| / |pred|`` (a.k.a. the "modeler" score), ``recall =
|pred & ref| / |ref|`` (the "developer"/SP score), ``F1 = 2 |pred & ref| / (|pred| +
|ref|)``. A ratio whose denominator is zero takes ``zero_division`` (default 0, as in
scikit-learn).

Per-bin tables are plain dicts of floats / ints / lists / None, ready for ``json.dump``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from sinkalign.alignment import percent_identity

__all__ = [
    "CI_METHODS",
    "IDENTITY_BINS",
    "PairScores",
    "assign_identity_bins",
    "binned_table",
    "core_pair_scores",
    "identity_bin_labels",
    "macro_average",
    "micro_average",
    "micro_difference",
    "pair_scores",
    "percent_identity",
    "render_table",
]

#: Default percent-identity bin edges: [0,20), [20,30), [30,40), [40,60), [60,100].
IDENTITY_BINS: tuple[float, ...] = (0.0, 20.0, 30.0, 40.0, 60.0, 100.0)
CI_METHODS = ("bootstrap", "normal")


@dataclass(frozen=True)
class PairScores:
    """Pair-level accuracy of one predicted alignment against its reference."""

    tp: int
    n_pred: int
    n_ref: int
    precision: float
    recall: float
    f1: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pair_keys(pairs: Any, name: str) -> np.ndarray:
    """Unique int64 keys ``i << 32 | j`` of a ``[k, 2]`` pair array (ValueError when malformed)."""
    pairs = getattr(pairs, "pairs", pairs)
    arr = np.asarray(pairs)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"{name} must have shape [k, 2], got {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integer indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    bad = np.flatnonzero(((arr < 0) | (arr >= 2**31)).any(axis=1))
    if bad.size:
        raise ValueError(f"{name}[{bad[0]}]={arr[bad[0]].tolist()} is not a valid 0-based index pair")
    keys = (arr[:, 0] << 32) | arr[:, 1]
    uniq, counts = np.unique(keys, return_counts=True)
    if np.any(counts > 1):
        dup = uniq[np.argmax(counts > 1)]
        raise ValueError(f"{name} lists the pair {[int(dup >> 32), int(dup & 0xFFFFFFFF)]} more than once")
    return uniq


def _ratio(num: float, den: float, zero_division: float) -> float:
    return float(num) / float(den) if den else float(zero_division)


def pair_scores(predicted: Any, reference: Any, *, zero_division: float = 0.0) -> PairScores:
    """Precision, recall and F1 of ``predicted`` vs ``reference`` aligned pairs ``[k, 2]``.

    Either argument may be a pair array or an object with ``.pairs`` (an ``Alignment``).
    Pairs need not be monotone, but may not repeat.
    """
    p = _pair_keys(predicted, "predicted")
    r = _pair_keys(reference, "reference")
    tp = int(np.intersect1d(p, r, assume_unique=True).size)
    return PairScores(
        tp=tp,
        n_pred=int(p.size),
        n_ref=int(r.size),
        precision=_ratio(tp, p.size, zero_division),
        recall=_ratio(tp, r.size, zero_division),
        f1=_ratio(2 * tp, p.size + r.size, zero_division),
    )


def core_pair_scores(predicted: Any, reference: Any, *, zero_division: float = 0.0) -> PairScores:
    """:func:`pair_scores` against a :class:`~sinkalign.io.alignments.ReferencePair`, on its core.

    Without a core mask (``reference.query_core is None``) this is ``pair_scores(predicted,
    reference.pairs)``. With one (structure-based references, :mod:`sinkalign.io.structural`),
    the reference pairs are the trusted ones it lists, and a predicted pair ``(i, j)`` counts
    only when query residue ``i`` or target residue ``j`` is trusted: pairs wholly inside
    untrusted (lower-case) regions are neither right nor wrong.
    """
    if getattr(reference, "query_core", None) is None:
        return pair_scores(predicted, getattr(reference, "pairs", reference), zero_division=zero_division)
    pred = np.asarray(getattr(predicted, "pairs", predicted))
    if pred.size:
        if pred.ndim != 2 or pred.shape[1] != 2 or pred.dtype.kind not in "iu":
            raise ValueError(f"predicted must be an integer array of shape [k, 2], got {pred.shape} {pred.dtype}")
        lq, lt = reference.query_core.shape[0], reference.target_core.shape[0]
        if pred.min() < 0 or pred[:, 0].max() >= lq or pred[:, 1].max() >= lt:
            raise ValueError(f"predicted pairs out of range for lengths ({lq}, {lt})")
        keep = reference.query_core[pred[:, 0]] | reference.target_core[pred[:, 1]]
        pred = pred[keep]
    else:
        pred = np.zeros((0, 2), np.int64)
    return pair_scores(pred, reference.pairs, zero_division=zero_division)


def micro_average(scores: Iterable[PairScores], *, zero_division: float = 0.0) -> dict[str, float]:
    """Pooled counts over a set: ``sum(tp) / sum(n_pred)`` etc. Keys: n, tp, n_pred, n_ref, precision, recall, f1."""
    scores = list(scores)
    tp = sum(s.tp for s in scores)
    n_pred = sum(s.n_pred for s in scores)
    n_ref = sum(s.n_ref for s in scores)
    return {
        "n": len(scores),
        "tp": tp,
        "n_pred": n_pred,
        "n_ref": n_ref,
        "precision": _ratio(tp, n_pred, zero_division),
        "recall": _ratio(tp, n_ref, zero_division),
        "f1": _ratio(2 * tp, n_pred + n_ref, zero_division),
    }


def micro_difference(
    counts_a: Any,
    counts_b: Any,
    clusters: Sequence[Any] | None = None,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """How much two methods' micro-averaged precision, recall and F1 differ on the same pairs,
    with a paired percentile-bootstrap interval of each difference (``a - b``).

    ``counts_a`` and ``counts_b`` are ``[N, 3]`` integer ``(tp, n_pred, n_ref)`` rows of the
    same ``N`` pairs in the same order (:class:`PairScores` fields), or ``N`` :class:`PairScores`
    each. ``clusters`` (``N`` labels, e.g. each pair's family) makes it a cluster bootstrap:
    whole clusters are drawn with replacement, since pairs of one family are not independent
    evidence (a split by family is a sample of families). ``None``: each pair is its own cluster.
    Both methods are scored on the same resample, so what they share cancels.

    Returns ``{"n", "clusters", "a", "b", "difference", "ci", "share_a_better"}``: the micro
    scores of each method on all pairs (dicts as :func:`micro_average` gives), the differences
    ``{"precision", "recall", "f1"}``, their ``confidence`` intervals ``[low, high]`` and the
    share of resamples in which ``a`` has the higher F1 (ties count half).
    """
    def as_counts(counts: Any, name: str) -> np.ndarray:
        items = list(counts)
        if items and isinstance(items[0], PairScores):
            items = [(c.tp, c.n_pred, c.n_ref) for c in items]
        arr = np.asarray(items, dtype=np.int64).reshape(-1, 3) if len(items) else np.zeros((0, 3), np.int64)
        if arr.ndim != 2 or arr.shape[1] != 3 or (arr < 0).any() or (arr[:, 0] > arr[:, 1:].min(axis=1)).any():
            raise ValueError(f"{name} must be [N, 3] counts (tp, n_pred, n_ref) with 0 <= tp <= n_pred, n_ref")
        return arr

    a, b = as_counts(counts_a, "counts_a"), as_counts(counts_b, "counts_b")
    if a.shape != b.shape or a.shape[0] == 0:
        raise ValueError(f"counts_a and counts_b must hold the same N > 0 pairs, got {a.shape[0]} and {b.shape[0]}")
    if (a[:, 2] != b[:, 2]).any():
        raise ValueError("counts_a and counts_b disagree on n_ref: they are not the same pairs")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"{confidence=} must be in (0, 1)")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"{n_boot=} must be a positive integer")
    labels = np.arange(a.shape[0]) if clusters is None else np.asarray(list(clusters), dtype=object)
    if labels.shape != (a.shape[0],):
        raise ValueError(f"clusters must give one label per pair ({a.shape[0]}), got {labels.shape}")
    _, member = np.unique(labels.astype(str), return_inverse=True)
    k = int(member.max()) + 1
    # counts summed per cluster; a resample is a multiset of clusters, i.e. a weight per cluster
    sums_a = np.zeros((k, 3), np.int64)
    sums_b = np.zeros((k, 3), np.int64)
    np.add.at(sums_a, member, a)
    np.add.at(sums_b, member, b)
    rng = np.random.default_rng(seed)
    weights = np.stack([np.bincount(rng.integers(0, k, size=k), minlength=k) for _ in range(n_boot)])

    def scores(sums: np.ndarray) -> dict[str, np.ndarray]:
        tot = weights @ sums  # [n_boot, 3]
        tp, n_pred, n_ref = tot[:, 0].astype(np.float64), tot[:, 1], tot[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            return {"precision": np.where(n_pred > 0, tp / n_pred, 0.0),
                    "recall": np.where(n_ref > 0, tp / n_ref, 0.0),
                    "f1": np.where(n_pred + n_ref > 0, 2 * tp / (n_pred + n_ref), 0.0)}

    boot_a, boot_b = scores(sums_a), scores(sums_b)
    whole_a = micro_average(PairScores(int(t), int(p), int(r), 0.0, 0.0, 0.0) for t, p, r in a)
    whole_b = micro_average(PairScores(int(t), int(p), int(r), 0.0, 0.0, 0.0) for t, p, r in b)
    alpha = 1.0 - confidence
    diff, ci = {}, {}
    for key in ("precision", "recall", "f1"):
        diff[key] = whole_a[key] - whole_b[key]
        lo, hi = np.quantile(boot_a[key] - boot_b[key], [alpha / 2, 1.0 - alpha / 2])
        ci[key] = [float(lo), float(hi)]
    better = float(np.mean((boot_a["f1"] > boot_b["f1"]) + 0.5 * (boot_a["f1"] == boot_b["f1"])))
    return {"n": int(a.shape[0]), "clusters": k, "a": whole_a, "b": whole_b, "difference": diff, "ci": ci,
            "share_a_better": better}


def macro_average(scores: Iterable[PairScores]) -> dict[str, float]:
    """Mean of the per-alignment precision, recall and F1 (NaN for an empty set). Keys: n, precision, recall, f1."""
    scores = list(scores)
    out: dict[str, float] = {"n": len(scores)}
    for key in ("precision", "recall", "f1"):
        out[key] = float(np.mean([getattr(s, key) for s in scores])) if scores else float("nan")
    return out


def _check_edges(edges: Sequence[float]) -> np.ndarray:
    e = np.asarray(edges, dtype=np.float64)
    if e.ndim != 1 or e.size < 2 or not np.all(np.isfinite(e)) or np.any(np.diff(e) <= 0):
        raise ValueError(f"edges={tuple(edges)} must be >= 2 finite, strictly increasing values")
    return e


def _fmt_edge(x: float) -> str:
    return f"{x:g}"


def identity_bin_labels(edges: Sequence[float] = IDENTITY_BINS) -> list[str]:
    """Labels ``"[0,20)"``, ..., with the last bin closed ``"[60,100]"``."""
    e = _check_edges(edges)
    labels = [f"[{_fmt_edge(a)},{_fmt_edge(b)})" for a, b in zip(e[:-1], e[1:])]
    labels[-1] = labels[-1][:-1] + "]"
    return labels


def assign_identity_bins(identities: Any, edges: Sequence[float] = IDENTITY_BINS) -> np.ndarray:
    """Bin index ``[N]`` of each identity: ``[e_k, e_{k+1})``, last bin closed on the right.

    Raises ``ValueError`` naming the first identity that is NaN or outside ``[e_0, e_last]``.
    """
    e = _check_edges(edges)
    x = np.asarray(identities, dtype=np.float64).reshape(-1)
    bad = np.flatnonzero(~np.isfinite(x) | (x < e[0]) | (x > e[-1]))
    if bad.size:
        raise ValueError(f"identities[{bad[0]}]={x[bad[0]]} is outside the bin range [{e[0]:g}, {e[-1]:g}]")
    idx = np.searchsorted(e, x, side="right") - 1
    return np.minimum(idx, e.size - 2)


#: the row of :func:`binned_table` for references that align no residue pair (no identity)
NO_IDENTITY_BIN = "none aligned"


def _mean_ci(x: np.ndarray, ci: str, confidence: float, n_boot: int, rng: np.random.Generator) -> list[float] | None:
    """``[low, high]`` CI of the mean of ``x`` (None when fewer than 2 values)."""
    if x.size < 2:
        return None
    alpha = 1.0 - confidence
    if ci == "normal":
        z = NormalDist().inv_cdf(1.0 - alpha / 2)
        half = z * float(np.std(x, ddof=1)) / math.sqrt(x.size)
        mean = float(x.mean())
        # precision / recall / F1 live in [0, 1]; the symmetric interval may not.
        return [max(mean - half, 0.0), min(mean + half, 1.0)]
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    means = x[idx].mean(axis=1)
    lo, hi = np.quantile(means, [alpha / 2, 1.0 - alpha / 2])
    return [float(lo), float(hi)]


def _json_float(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def binned_table(
    scores: Sequence[PairScores],
    identities: Any,
    *,
    edges: Sequence[float] = IDENTITY_BINS,
    ci: str = "bootstrap",
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Per-identity-bin accuracy table, one dict per bin and a final ``"all"`` row.

    Each row: ``bin`` (label), ``lo``, ``hi`` (edges; ``None`` for ``"all"``), ``n``, and for
    ``precision``, ``recall``, ``f1``: the macro mean over the bin's alignments and
    ``<metric>_ci = [low, high]``, a ``confidence`` interval of that mean, either the
    percentile bootstrap (``n_boot`` resamples, ``seed``) or the normal approximation
    ``mean +- z * sd / sqrt(n)`` clipped to ``[0, 1]``; ``None`` when ``n < 2``. Also
    ``micro_precision``, ``micro_recall``, ``micro_f1`` from pooled counts. Empty bins have
    ``n = 0`` and ``None`` values. NaN becomes ``None`` so the rows are valid JSON. A reference
    that aligns no residue pair (Pfam fragments that do not overlap) has no identity (NaN): such
    alignments get a row of their own, :data:`NO_IDENTITY_BIN`, before ``"all"`` (which counts
    them), where there are any.

    Args:
        scores: ``N`` :class:`PairScores`, one per alignment.
        identities: ``[N]`` percent identity of each reference alignment.
    """
    if ci not in CI_METHODS:
        raise ValueError(f"{ci=} is not one of {CI_METHODS}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"{confidence=} must be in (0, 1)")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"{n_boot=} must be a positive integer")
    scores = list(scores)
    ident = np.asarray(identities, dtype=np.float64).reshape(-1)
    if ident.size != len(scores):
        raise ValueError(f"got {len(scores)} scores but {ident.size} identities")
    for k, s in enumerate(scores):
        if not isinstance(s, PairScores):
            raise ValueError(f"scores[{k}] must be a PairScores, got {type(s).__name__}")
    e = _check_edges(edges)
    unaligned = np.isnan(ident)  # references that align no residue pair: no identity, no bin
    bins = np.full(ident.size, -1)
    bins[~unaligned] = assign_identity_bins(ident[~unaligned], e)
    rng = np.random.default_rng(seed)
    labels = identity_bin_labels(e)
    groups = [(labels[b], float(e[b]), float(e[b + 1]), np.flatnonzero(bins == b)) for b in range(e.size - 1)]
    if unaligned.any():
        groups.append((NO_IDENTITY_BIN, None, None, np.flatnonzero(unaligned)))
    groups.append(("all", None, None, np.arange(len(scores))))
    rows: list[dict[str, Any]] = []
    for label, lo, hi, members in groups:
        row: dict[str, Any] = {"bin": label, "lo": lo, "hi": hi, "n": int(members.size)}
        chosen = [scores[k] for k in members]
        for key in ("precision", "recall", "f1"):
            x = np.array([getattr(s, key) for s in chosen], dtype=np.float64)
            row[key] = _json_float(float(x.mean())) if x.size else None
            interval = _mean_ci(x, ci, confidence, n_boot, rng) if np.all(np.isfinite(x)) else None
            row[f"{key}_ci"] = None if interval is None else [_json_float(v) for v in interval]
        micro = micro_average(chosen, zero_division=float("nan")) if chosen else None
        for key in ("precision", "recall", "f1"):
            row[f"micro_{key}"] = _json_float(micro[key]) if micro else None
        rows.append(row)
    return rows


def render_table(rows: Sequence[dict[str, Any]], *, title: str | None = None, digits: int = 3):
    """A ``rich.table.Table`` of :func:`binned_table` rows that fits 80 columns.

    Columns: identity bin, ``n``, mean precision, mean recall, mean F1 with its confidence
    interval (these three are means over the bin's alignments, each alignment weighted
    equally) and the pooled F1 (all aligned residue pairs of the bin counted together, so
    long alignments weigh more). The caption says which is which.
    """
    from rich import box
    from rich.table import Table

    def num(value: Any) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    def with_ci(value: Any, interval: Any) -> str:
        text = num(value)
        if value is not None and interval:
            text += f" [{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]"
        return text

    table = Table(title=title, box=box.SIMPLE_HEAD, caption="precision, recall, F1: mean over pairs [95% CI]; "
                  "pooled F1: over all aligned residue pairs", caption_justify="left")
    table.add_column("identity bin", no_wrap=True)
    table.add_column("n", justify="right", no_wrap=True)
    table.add_column("precision", justify="right", no_wrap=True)
    table.add_column("recall", justify="right", no_wrap=True)
    table.add_column("F1 [95% CI]", justify="right", no_wrap=True)
    table.add_column("pooled F1", justify="right", no_wrap=True)
    for pos, row in enumerate(rows):
        missing = [k for k in ("bin", "n", "precision", "recall", "f1") if k not in row]
        if missing:
            raise ValueError(f"row {row.get('bin', '?')!r} lacks keys {missing}")
        table.add_row(
            str(row["bin"]),
            str(row["n"]),
            num(row["precision"]),
            num(row["recall"]),
            with_ci(row["f1"], row.get("f1_ci")),
            num(row.get("micro_f1")),
            end_section=pos + 1 < len(rows) and rows[pos + 1].get("bin") == "all",
        )
    return table
