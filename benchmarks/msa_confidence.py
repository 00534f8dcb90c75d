"""Calibrated confidences of ``sinkalign msa``: fit on the training families, check on held-out ones.

Every structure-based family of ``../shared/data/structural/{homstrad,sabre,oxbench}`` with
``--min-seqs`` to ``--max-seqs`` sequences on a split of ``data_manifests/structural_split.json``
is aligned as ``sinkalign msa`` aligns it (the learned model's library, each number of
consistency rounds in ``--consistency``, 20 rounds of refinement). Each residue pair that the
alignment puts in one column and that the reference scores (a trusted residue on either side,
as precision is counted) is a sample: its probability under the consistency-transformed
library, and whether the reference has it (:func:`sinkalign.align.msa.calibration_samples`).

* ``--fit-split`` (train): :func:`~sinkalign.align.msa.fit_msa_calibration`, an isotonic map
  per number of consistency rounds and class of family size (``--size-classes``; ``0``: one
  class); ``--out MODEL_DIR`` writes the model with it.
* ``--eval-splits`` (valid; ``test`` once, by the rule set down before): reliability of the
  raw and the calibrated probabilities, as pairs (expected calibration error over ten equal
  bins, and by the family's number of sequences), as columns (mean confidence of a column's
  scored pairs against the share of them right: what ``#=GC PP_cons`` reports) and as
  families (mean confidence against precision); and what ``sinkalign msa --trim T`` keeps
  (columns, precision and recall of the pairs left) at a few thresholds.
* ``--cv K``: also maps fitted on each evaluated split itself, by K-fold cross-fitting over its
  families (each family mapped by a fit that did not see it), for each variant of size classes
  in ``--cv-size-classes``: how a map fitted on held-out families would do. ``--fit-split
  valid --out DIR`` then writes a model with the maps fitted on all validation families.
* ``--cache DIR`` keeps each split's aligned families (pickles) for the next run.

    python benchmarks/msa_confidence.py --eval-splits valid
    python benchmarks/msa_confidence.py --eval-splits valid --out /tmp/learned_msa   # a model with the fit
    python benchmarks/msa_confidence.py --fit-split none --eval-splits test   # the shipped model's own
    python benchmarks/msa_confidence.py --fit-split none --eval-splits valid --cv 5   # against cross-fitted maps

The pairwise library of each family is computed once and shared by every number of rounds.
"""

from __future__ import annotations

import argparse
import datetime
import pickle
import time
from pathlib import Path

import numpy as np
from _common import export_with_msa_calibration, machine, write_json
from msa_families import families

from sinkalign.align.aligner import Aligner
from sinkalign.align.msa import (
    SIZE_CLASSES,
    MsaCalibration,
    aligner_posteriors,
    calibration_samples,
    column_pairs,
    consistency_transform,
    fit_msa_calibration,
    guide_tree,
    library_aligner,
    progressive,
    refine,
)
from sinkalign.io.alignments import msa_to_pairs

RESULTS = Path(__file__).resolve().parent / "results"
SOURCES = ("homstrad", "sabre", "oxbench")
BINS = np.linspace(0.0, 1.0, 11)
SIZE_BINS = ((3, 5), (6, 10), (11, 40))
TRIM_THRESHOLDS = (0.0, 0.3, 0.5, 0.7, 0.9)


def family_samples(aligner, msa, refs, rounds_list, refine_rounds: int) -> dict:
    """``{rounds: (p, right, column, all_p, all_column)}`` of one family (its reference pairs
    ``refs``): the scored samples, and every residue pair in one column (for the columns'
    confidences)."""
    ids = list(msa.ids)
    seqs = [msa.ungapped(k) for k in range(len(msa))]
    lengths = [len(s) for s in seqs]
    library = aligner_posteriors(aligner, seqs, ids=ids)
    Z = guide_tree(library, lengths)
    out = {}
    for rounds in rounds_list:
        posts = consistency_transform(library, lengths, rounds)
        cols = refine(progressive(posts, lengths, Z), posts, refine_rounds)
        placed = list(column_pairs(cols, posts))
        all_p = np.concatenate([p for *_, p in placed]) if placed else np.zeros(0)
        all_col = np.concatenate([cols[x][i] for x, _, i, _, _ in placed]) if placed else np.zeros(0, np.int64)
        out[rounds] = (*calibration_samples(cols, posts, ids, refs), all_p, all_col)
    return out


def collect(aligner, split: str, rounds_list, args) -> list[dict]:
    cache = None
    if args.cache:
        rounds = "-".join(map(str, rounds_list))
        key = f"{Path(args.model).name}_{split}_r{rounds}_ref{args.refine}_{args.min_seqs}-{args.max_seqs}"
        cache = Path(args.cache) / f"{key}.pkl"
        if cache.exists():
            with open(cache, "rb") as fh:
                rows = pickle.load(fh)
            print(f"{split}: {len(rows)} families from {cache}")
            return rows
    fams = families(split, SOURCES, args.min_seqs, args.max_seqs)
    t0 = time.perf_counter()
    rows = []
    for src, msa in fams:
        refs = msa_to_pairs(msa)
        rows.append({"family": msa.family, "source": src, "n": len(msa), "n_ref": sum(len(r.pairs) for r in refs),
                     "samples": family_samples(aligner, msa, refs, rounds_list, args.refine)})
    print(f"{split}: {len(fams)} families, {sum(r['n'] * (r['n'] - 1) // 2 for r in rows)} pairs of sequences, "
          f"{time.perf_counter() - t0:.0f} s")
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            pickle.dump(rows, fh)
        tmp.replace(cache)
    return rows


def ece(p: np.ndarray, y: np.ndarray) -> float:
    """Expected calibration error over the bins of :func:`reliability`."""
    return float(sum(abs(b["confidence"] - b["right"]) * b["n"] for b in reliability(p, y)) / max(1, len(p)))


def mid_ece(p: np.ndarray, y: np.ndarray, below: float = 0.9) -> float:
    """:func:`ece` over the pairs of confidence below ``below`` (the bins below it): how far the
    middle of the range is from the truth, which the pairs above 0.9 (most of them) hide."""
    keep = p < below
    return ece(p[keep], y[keep]) if keep.any() else 0.0


def reliability(p: np.ndarray, y: np.ndarray) -> list[dict]:
    b = np.clip(np.digitize(p, BINS) - 1, 0, len(BINS) - 2)
    return [{"bin": f"[{BINS[k]:.1f}, {BINS[k + 1]:.1f})", "n": int(np.sum(b == k)),
             "confidence": float(p[b == k].mean()), "right": float(y[b == k].mean())}
            for k in range(len(BINS) - 1) if np.any(b == k)]


def evaluate(rows: list[dict], rounds: int, cal) -> dict:
    """Reliability of the raw (``cal`` None) or calibrated probabilities; ``cal`` may also be a
    function of the row (cross-fitting: each family mapped by a fit without it)."""
    pair_p, pair_y, col_p, col_y, fam_p, fam_y, size = [], [], [], [], [], [], []
    for row in rows:
        p, y, column = row["samples"][rounds][:3]
        if not p.size:
            continue
        row_cal = cal(row) if callable(cal) else cal
        p = p if row_cal is None else row_cal.mapper(rounds, row["n"])(p)
        y = y.astype(np.float64)
        pair_p.append(p)
        pair_y.append(y)
        size.append(np.full(p.size, row["n"]))
        _, inv = np.unique(column, return_inverse=True)
        counts = np.bincount(inv)
        col_p.append(np.bincount(inv, weights=p) / counts)
        col_y.append(np.bincount(inv, weights=y) / counts)
        fam_p.append(p.mean())
        fam_y.append(y.mean())
    p, y, size = np.concatenate(pair_p), np.concatenate(pair_y), np.concatenate(size)
    cp, cy = np.concatenate(col_p), np.concatenate(col_y)
    fam_p, fam_y = np.array(fam_p), np.array(fam_y)
    by_size = {}
    for lo, hi in SIZE_BINS:
        keep = (size >= lo) & (size <= hi)
        if keep.any():
            by_size[f"{lo}-{hi}"] = {"pairs": int(keep.sum()), "ece": ece(p[keep], y[keep]),
                                     "confidence": float(p[keep].mean()), "right": float(y[keep].mean())}
    return {"pairs": int(p.size), "confidence": float(p.mean()), "right": float(y.mean()), "ece": ece(p, y),
            "mid_ece": mid_ece(p, y), "reliability": reliability(p, y), "by_sequences": by_size,
            "columns": int(cp.size), "column_ece": ece(cp, cy),
            "families": int(fam_p.size), "family_mae": float(np.mean(np.abs(fam_p - fam_y))),
            "family_corr": float(np.corrcoef(fam_p, fam_y)[0, 1]) if fam_p.size > 2 else None}


def trimming(rows: list[dict], rounds: int, cal, thresholds) -> list[dict]:
    """``--trim T`` on each family: the columns of (calibrated) confidence >= T kept; the share
    of columns kept, the precision of the scored pairs left and their share of the reference's
    trusted pairs (recall, SP)."""
    out = []
    for threshold in thresholds:
        kept_cols = total_cols = tp = n_pred = n_ref = 0
        for row in rows:
            p, y, column, all_p, all_col = row["samples"][rounds]
            n_ref += row["n_ref"]
            if not all_p.size:
                continue
            mapped = cal.mapper(rounds, row["n"])(all_p)
            used, inv = np.unique(all_col, return_inverse=True)
            conf = np.bincount(inv, weights=mapped) / np.bincount(inv)
            keep = set(used[conf >= threshold].tolist())
            kept_cols += len(keep)
            total_cols += used.size
            mask = np.isin(column, list(keep))
            tp += int(y[mask].sum())
            n_pred += int(mask.sum())
        out.append({"threshold": threshold, "columns_kept": kept_cols / max(1, total_cols),
                    "precision": tp / max(1, n_pred), "recall": tp / max(1, n_ref)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="learned")
    ap.add_argument("--fit-split", default="train", choices=("train", "valid", "none"),
                    help="none: check the model's own MSA calibration instead of fitting one")
    ap.add_argument("--eval-splits", default="valid", help="comma-separated of valid, test")
    ap.add_argument("--consistency", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--refine", type=int, default=20)
    ap.add_argument("--min-seqs", type=int, default=3)
    ap.add_argument("--max-seqs", type=int, default=40)
    ap.add_argument("--knots", type=int, default=16)
    ap.add_argument("--size-classes", type=int, nargs="+", default=list(SIZE_CLASSES),
                    help="smallest family size of each class mapped apart (0: one class)")
    ap.add_argument("--out", default=None, help="write the model with the fitted calibration to this directory")
    ap.add_argument("--cv", type=int, default=0,
                    help="also fit maps on each evaluated split by K-fold cross-fitting over its families")
    ap.add_argument("--cv-size-classes", nargs="+", default=["3,6", "0"],
                    help="the size classes of each cross-fitted variant (comma-separated; 0: one class)")
    ap.add_argument("--seed", type=int, default=0, help="of the cross-fitting folds")
    ap.add_argument("--cache", default=None, help="keep each split's aligned families here (pickles) and reuse them")
    ap.add_argument("--plain-library", action="store_true",
                    help="decode the library's pairs without the identity tie-break of close pairs (as sinkalign "
                         "msa did before 2026-11-27)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    splits = [s for s in args.eval_splits.split(",") if s]
    plain = {"identity_weight": 0.0} if args.plain_library else {}
    aligner = library_aligner(Aligner.load(args.model, min_confidence=0.0, **plain))
    if args.fit_split == "none":
        cal = aligner.msa_calibration
        if cal is None:
            ap.error(f"the model {args.model} has no MSA calibration to check")
        fitted_on = cal.fitted_on
    else:
        cal, fitted_on = fit(aligner, args)
    result = {"benchmark": "msa_confidence", "machine": machine(), "date": datetime.date.today().isoformat(),
              "model": args.model, "plain_library": args.plain_library,
              "fit_split": args.fit_split, "calibration": cal.to_dict(), "eval": {}}
    evaluate_splits(aligner, cal, splits, result, args)
    if args.out:  # the model with these maps, its maps for added records (msa_add.py --fit-added) kept
        source = Aligner.load(args.model)
        added = source.msa_calibration.added if source.msa_calibration is not None else {}
        export_with_msa_calibration(source, args.out, MsaCalibration(cal.knots, cal.fitted_on, added),
                                    "Multiple-alignment confidences", "Multiple-alignment confidences calibrated with "
                                    f"benchmarks/msa_confidence.py on {fitted_on}.")
        print(f"wrote the model with its MSA calibration to {args.out}")
    out = args.json or str(RESULTS / f"msa_confidence_{'_'.join(splits) or 'fit'}.json")
    write_json(out, result)
    print(f"wrote {out}")


def fit(aligner, args):
    return fit_rows(collect(aligner, args.fit_split, args.consistency, args), args.fit_split, args.size_classes, args)


def fit_rows(rows: list[dict], label: str, size_classes, args):
    """The isotonic maps fitted on the families ``rows`` (of the split ``label``), and their description."""
    samples = {r: (np.concatenate([row["samples"][r][0] for row in rows]),
                   np.concatenate([row["samples"][r][1] for row in rows]),
                   np.concatenate([np.full(row["samples"][r][0].size, row["n"]) for row in rows]))
               for r in args.consistency}
    fitted_on = (f"{len(rows)} {label} families of {', '.join(SOURCES)} ({args.min_seqs}-{args.max_seqs} "
                 f"sequences, data_manifests/structural_split.json), {args.refine} refinement rounds, "
                 f"{sum(len(s[0]) for s in samples.values()) // len(samples)} scored residue pairs per setting")
    classes = [3] if list(size_classes) == [0] else size_classes
    return fit_msa_calibration(samples, fitted_on=fitted_on, max_knots=args.knots, size_classes=classes), fitted_on


def cross_fitted(rows: list[dict], folds: int, size_classes, args):
    """A function of a row: the maps fitted on the other folds' families (families shuffled with
    ``--seed``, dealt into ``folds`` folds), so that no family is mapped by a fit that saw it."""
    order = np.random.default_rng(args.seed).permutation(len(rows))
    fold_of = {rows[i]["family"]: k % folds for k, i in enumerate(order)}
    fits = [fit_rows([r for r in rows if fold_of[r["family"]] != k], "cross-fitting", size_classes, args)[0]
            for k in range(folds)]
    return lambda row: fits[fold_of[row["family"]]]


def evaluate_splits(aligner, cal, splits, result, args) -> None:
    for split in splits:
        rows = collect(aligner, split, args.consistency, args)
        result["eval"][split] = {}
        variants = {v: cross_fitted(rows, args.cv, [int(c) for c in v.split(",")], args)
                    for v in args.cv_size_classes} if args.cv else {}
        for r in args.consistency:
            raw, calibrated = evaluate(rows, r, None), evaluate(rows, r, cal)
            result["eval"][split][str(r)] = {"raw": raw, "calibrated": calibrated,
                                             "trim": trimming(rows, r, cal, TRIM_THRESHOLDS),
                                             "cross_fitted": {v: evaluate(rows, r, f) for v, f in variants.items()}}
    source = "the model's own" if args.fit_split == "none" else f"fitted on {args.fit_split}"
    print(f"\nresidue pairs in one column, scored on trusted residues; ECE over ten equal bins; calibration: {source}")
    print("| split | consistency | pairs | right | raw mean / ECE | calibrated mean / ECE / mid ECE | column ECE raw / cal "
          "| family MAE raw / cal | calibrated ECE by sequences |")
    print("|---|---|---|---|---|---|---|---|---|")
    for split in splits:
        for r in args.consistency:
            raw, c = (result["eval"][split][str(r)][k] for k in ("raw", "calibrated"))
            sizes = ", ".join(f"{k}: {v['ece']:.3f}" for k, v in c["by_sequences"].items())
            print(f"| {split} | {r} | {c['pairs']} | {c['right']:.3f} | {raw['confidence']:.3f} / {raw['ece']:.3f} | "
                  f"{c['confidence']:.3f} / {c['ece']:.3f} / {c['mid_ece']:.3f} | {raw['column_ece']:.3f} / "
                  f"{c['column_ece']:.3f} | {raw['family_mae']:.3f} / {c['family_mae']:.3f} | {sizes} |")
    if args.cv:
        print(f"\ncross-fitted on the evaluated split itself ({args.cv} folds by family, seed {args.seed}): "
              "size classes, consistency, mean / ECE / mid ECE (pairs below 0.9), column ECE, family MAE, by sequences")
        for split in splits:
            for r in args.consistency:
                for v, c in result["eval"][split][str(r)]["cross_fitted"].items():
                    sizes = ", ".join(f"{k}: {x['ece']:.3f}" for k, x in c["by_sequences"].items())
                    print(f"| {split} | {v} | {r} | {c['confidence']:.3f} / {c['ece']:.3f} / {c['mid_ece']:.3f} | "
                          f"{c['column_ece']:.3f} | {c['family_mae']:.3f} | {sizes} |")
    for split in splits:
        default = result["eval"][split].get("2")
        if default:
            print(f"\n{split}, 2 rounds (the default), calibrated: bin, pairs, mean confidence, share right")
            for b in default["calibrated"]["reliability"]:
                print(f"  {b['bin']:12s} {b['n']:7d} {b['confidence']:.3f} {b['right']:.3f}")
            for v, c in default["cross_fitted"].items():
                print(f"\n{split}, 2 rounds, cross-fitted (size classes {v}): bin, pairs, mean confidence, share right")
                for b in c["reliability"]:
                    print(f"  {b['bin']:12s} {b['n']:7d} {b['confidence']:.3f} {b['right']:.3f}")
            print(f"\n{split}, 2 rounds, `sinkalign msa --trim T` (columns with two or more residues; the rest "
                  "dropped at any T > 0): T, columns kept, precision, recall (SP)")
            for d in default["trim"]:
                print(f"  {d['threshold']:.2f} {d['columns_kept']:.3f} {d['precision']:.3f} {d['recall']:.3f}")


if __name__ == "__main__":
    main()
