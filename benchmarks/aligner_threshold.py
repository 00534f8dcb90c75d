"""Precision, recall and F1 of a calibrated model against its confidence threshold.

Each pair of one split is aligned once with every MEA column kept (``min_confidence=0``), so
each column carries its calibrated confidence; a threshold ``t`` then keeps the columns of
confidence ``>= t``, which is exactly what ``sinkalign align --min-confidence t`` writes. Printed
per threshold: micro-averaged precision / recall / F1 on trusted (core) residues for the
structural pairs (all, below 20% identity), the Pfam families and the two pooled, with
Needleman-Wunsch and Smith-Waterman (parasail, BLOSUM62 11/1) on the same pairs in the same run.
Recall is the sum-of-pairs score of a reference-based benchmark (the share of reference pairs
recovered); precision is the share of the written pairs that are right. Also printed: the
reliability of the confidences themselves (every MEA column on a trusted residue, in ten equal
bins of confidence: mean confidence against the share right, and the expected calibration
error), per group.

    python benchmarks/aligner_threshold.py --shards SHARDS --split valid \\
        --json benchmarks/results/aligner_threshold_valid.json

``SHARDS`` as in ``benchmarks/aligner_learned.py``. Choose thresholds on ``valid`` only. The
JSON also keeps each pair's counts (at the model's own threshold, every column, NW and SW), so
``benchmarks/compare_models.py`` can put an interval on the difference between two models.
"""

from __future__ import annotations

import argparse
import time
from datetime import date
from pathlib import Path

import numpy as np
from _common import machine, pair_groups, write_json
from aligner_learned import source_of

from sinkalign.align.aligner import Aligner
from sinkalign.align.baselines import Scoring, align_pair
from sinkalign.align.evaluate import load_reference_set
from sinkalign.align.metrics import core_pair_scores, micro_average
from sinkalign.io.alignments import percent_identity

RESULTS = Path(__file__).resolve().parent / "results"
THRESHOLDS = (0.0, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6)


def scores_of(preds, pairs, idx_groups) -> tuple[dict, list[list[int]]]:
    """Micro scores per group, and each pair's ``[tp, n_pred, n_ref]``."""
    per_pair = [core_pair_scores(a, p) for a, p in zip(preds, pairs)]
    counts = [[s.tp, s.n_pred, s.n_ref] for s in per_pair]
    return {g: micro_average([per_pair[i] for i in idx]) for g, idx in idx_groups.items()}, counts


def reliability(results, pairs, idx_groups) -> dict:
    """Per group: the columns' confidences in ten equal bins (``n``, mean confidence, share
    right) and the expected calibration error; columns as :func:`core_pair_scores` counts them
    (a trusted residue on either side)."""
    conf, right = [], []
    for r, ref in zip(results, pairs):
        pred, c = r.alignment.pairs, r.alignment.match_posterior
        if getattr(ref, "query_core", None) is not None and len(pred):
            keep = ref.query_core[pred[:, 0]] | ref.target_core[pred[:, 1]]
            pred, c = pred[keep], c[keep]
        truth = {tuple(x) for x in np.asarray(ref.pairs).tolist()}
        conf.append(np.asarray(c, np.float64))
        right.append(np.array([tuple(x) in truth for x in pred.tolist()], np.float64))
    out = {}
    for g, idx in idx_groups.items():
        p = np.concatenate([conf[i] for i in idx]) if idx else np.zeros(0)
        y = np.concatenate([right[i] for i in idx]) if idx else np.zeros(0)
        b = np.clip((p * 10).astype(int), 0, 9)
        bins = [{"bin": f"[{k / 10:.1f}, {(k + 1) / 10:.1f})", "n": int(np.sum(b == k)),
                 "confidence": float(p[b == k].mean()), "right": float(y[b == k].mean())}
                for k in range(10) if np.any(b == k)]
        out[g] = {"columns": int(p.size), "confidence": float(p.mean()) if p.size else None,
                  "right": float(y.mean()) if p.size else None, "bins": bins,
                  "ece": float(sum(abs(x["confidence"] - x["right"]) * x["n"] for x in bins) / max(1, p.size))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--split", default="valid", choices=["valid", "test"])
    ap.add_argument("--model", default="learned", help="a calibrated model (shipped name or directory)")
    ap.add_argument("--thresholds", default=",".join(map(str, THRESHOLDS)))
    ap.add_argument("--max-pairs", type=int, default=None, help="subsample each set (seed 0)")
    ap.add_argument("--identity-weight", type=float, default=None,
                    help="the MEA identity tie-break tau (Aligner identity_weight; default: the model's)")
    ap.add_argument("--identity-min", type=float, default=None,
                    help="... only for pairs whose plain decoding is at least this identical (Aligner identity_min)")
    ap.add_argument("--identity-gaps", choices=["add", "move"], default=None,
                    help="... adding gaps or only moving the plain decoding's (Aligner identity_gaps; default: the "
                         "model's)")
    ap.add_argument("--identity-move-min", type=float, default=None,
                    help="... moving gaps only below --identity-min (Aligner identity_move_min; default: the model's)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    thresholds = [float(t) for t in args.thresholds.split(",")]

    aligner = Aligner.load(args.model, min_confidence=0.0, identity_weight=args.identity_weight,
                           identity_min=args.identity_min, identity_gaps=args.identity_gaps,
                           identity_move_min=args.identity_move_min)
    if aligner.calibration is None:
        ap.error(f"{args.model} has no calibration: its columns have no confidences to threshold")
    pairs = load_reference_set(args.shards, split=args.split, max_pairs=args.max_pairs)
    sources, identities = [source_of(p) for p in pairs], [percent_identity(p) for p in pairs]
    idx_groups = pair_groups(sources, identities)
    t0 = time.perf_counter()
    results = list(aligner.align_many((p.query_id, p.query_seq, p.target_id, p.target_seq) for p in pairs))
    secs = time.perf_counter() - t0
    print(f"{len(pairs)} pairs, {len(pairs) / secs:.1f} pairs/s; shipped threshold {aligner.calibration.min_confidence}")

    shipped = f"t={aligner.calibration.min_confidence:g}"
    rows, counts = {}, {}
    for t in thresholds:
        preds = [r.alignment.pairs[r.alignment.match_posterior >= t] for r in results]
        rows[f"t={t:g}"], counts[f"t={t:g}"] = scores_of(preds, pairs, idx_groups)
    for method in ("NW", "SW"):
        preds = [align_pair(p.query_seq, p.target_seq, method.lower(), scoring=Scoring.protein()).pairs
                 for p in pairs]
        rows[method], counts[method] = scores_of(preds, pairs, idx_groups)

    names = list(idx_groups)
    print("pairs: " + ", ".join(f"{g} {len(idx)}" for g, idx in idx_groups.items()))
    print("| threshold | " + " | ".join(f"{g} P / R / F1" for g in names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for key, row in rows.items():
        cells = [f"{row[g]['precision']:.3f} / {row[g]['recall']:.3f} / {row[g]['f1']:.3f}" for g in names]
        print(f"| {key} | " + " | ".join(cells) + " |")
    calib = reliability(results, pairs, idx_groups)
    print("\nconfidences of every MEA column (trusted residues): columns, mean confidence, share right, ECE")
    for g, c in calib.items():
        print(f"  {g}: {c['columns']}, {c['confidence']:.3f}, {c['right']:.3f}, {c['ece']:.3f}")
    first = next(iter(calib))
    print(f"  {first}, by bin: " + "; ".join(f"{x['bin']} {x['n']} {x['confidence']:.3f} {x['right']:.3f}"
                                          for x in calib[first]["bins"]))
    # another model's results never take the shipped model's file
    suffix = "" if args.model == "learned" else "_" + Path(args.model).name
    if args.identity_weight is not None:
        suffix += f"_identity{args.identity_weight:g}"
    if args.identity_min is not None:
        suffix += f"_min{args.identity_min:g}"
    if args.identity_gaps is not None:
        suffix += f"_{args.identity_gaps}"
    if args.identity_move_min is not None:
        suffix += f"_move{args.identity_move_min:g}"
    out = Path(args.json) if args.json else RESULTS / f"aligner_threshold_{args.split}{suffix}.json"
    write_json(out, {"date": date.today().isoformat(), "machine": machine(), "split": args.split,
                     "model": args.model, "shipped_threshold": aligner.calibration.min_confidence,
                     "identity_weight": aligner.identity_weight, "identity_min": aligner.identity_min,
                     "identity_gaps": aligner.identity_gaps, "identity_move_min": aligner.identity_move_min,
                     "pairs": {g: len(idx) for g, idx in idx_groups.items()}, "rows": rows,
                     "reliability": calib,
                     # what compare_models.py needs to pair two runs: each pair's counts at the model's
                     # own threshold, every column, NW and SW
                     "per_pair": {"id": [f"{p.query_id}/{p.target_id}" for p in pairs],
                                  "family": [p.family for p in pairs], "source": sources,
                                  "identity": identities,  # unrounded: compare_models.py regroups by it
                                  "counts": {k: counts[k] for k in dict.fromkeys([shipped, "t=0", "NW", "SW"])
                                             if k in counts}}})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
