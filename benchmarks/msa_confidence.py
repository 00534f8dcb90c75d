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

    python benchmarks/msa_confidence.py --eval-splits valid
    python benchmarks/msa_confidence.py --eval-splits valid --out /tmp/learned_msa   # a model with the fit
    python benchmarks/msa_confidence.py --fit-split none --eval-splits test   # the shipped model's own

The pairwise library of each family is computed once and shared by every number of rounds.
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

import numpy as np
from _common import machine, write_json
from msa_families import families

from sinkalign.align.aligner import Aligner
from sinkalign.align.msa import (
    SIZE_CLASSES,
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
    fams = families(split, SOURCES, args.min_seqs, args.max_seqs)
    t0 = time.perf_counter()
    rows = []
    for src, msa in fams:
        refs = msa_to_pairs(msa)
        rows.append({"family": msa.family, "source": src, "n": len(msa), "n_ref": sum(len(r.pairs) for r in refs),
                     "samples": family_samples(aligner, msa, refs, rounds_list, args.refine)})
    print(f"{split}: {len(fams)} families, {sum(r['n'] * (r['n'] - 1) // 2 for r in rows)} pairs of sequences, "
          f"{time.perf_counter() - t0:.0f} s")
    return rows


def ece(p: np.ndarray, y: np.ndarray) -> float:
    """Expected calibration error over the bins of :func:`reliability`."""
    return float(sum(abs(b["confidence"] - b["right"]) * b["n"] for b in reliability(p, y)) / max(1, len(p)))


def reliability(p: np.ndarray, y: np.ndarray) -> list[dict]:
    b = np.clip(np.digitize(p, BINS) - 1, 0, len(BINS) - 2)
    return [{"bin": f"[{BINS[k]:.1f}, {BINS[k + 1]:.1f})", "n": int(np.sum(b == k)),
             "confidence": float(p[b == k].mean()), "right": float(y[b == k].mean())}
            for k in range(len(BINS) - 1) if np.any(b == k)]


def evaluate(rows: list[dict], rounds: int, cal) -> dict:
    """Reliability of the raw (``cal`` None) or calibrated probabilities."""
    pair_p, pair_y, col_p, col_y, fam_p, fam_y, size = [], [], [], [], [], [], []
    for row in rows:
        p, y, column = row["samples"][rounds][:3]
        if not p.size:
            continue
        p = p if cal is None else cal.mapper(rounds, row["n"])(p)
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
            "reliability": reliability(p, y), "by_sequences": by_size,
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
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    splits = [s for s in args.eval_splits.split(",") if s]
    aligner = library_aligner(Aligner.load(args.model, min_confidence=0.0))
    if args.fit_split == "none":
        cal = aligner.msa_calibration
        if cal is None:
            ap.error(f"the model {args.model} has no MSA calibration to check")
        fitted_on = cal.fitted_on
    else:
        cal, fitted_on = fit(aligner, args)
    result = {"benchmark": "msa_confidence", "machine": machine(), "date": datetime.date.today().isoformat(),
              "model": args.model, "fit_split": args.fit_split, "calibration": cal.to_dict(), "eval": {}}
    evaluate_splits(aligner, cal, splits, result, args)
    if args.out:
        from sinkalign.align.checkpoints import export_model

        source = Aligner.load(args.model)
        provenance = (source.provenance.split(" Multiple-alignment confidences")[0] + " Multiple-alignment "
                      f"confidences calibrated with benchmarks/msa_confidence.py on {fitted_on}.").strip()
        export_model(args.out, source.params, source.config, provenance=provenance,
                     calibration=source.calibration.to_dict(),
                     significance=None if source.significance is None else source.significance.to_dict(),
                     msa_calibration=cal.to_dict())
        print(f"wrote the model with its MSA calibration to {args.out}")
    out = args.json or str(RESULTS / f"msa_confidence_{'_'.join(splits) or 'fit'}.json")
    write_json(out, result)
    print(f"wrote {out}")


def fit(aligner, args):
    fit_rows = collect(aligner, args.fit_split, args.consistency, args)
    n_fams = len(fit_rows)
    samples = {r: (np.concatenate([row["samples"][r][0] for row in fit_rows]),
                   np.concatenate([row["samples"][r][1] for row in fit_rows]),
                   np.concatenate([np.full(row["samples"][r][0].size, row["n"]) for row in fit_rows]))
               for r in args.consistency}
    fitted_on = (f"{n_fams} {args.fit_split} families of {', '.join(SOURCES)} ({args.min_seqs}-{args.max_seqs} "
                 f"sequences, data_manifests/structural_split.json), {args.refine} refinement rounds, "
                 f"{sum(len(s[0]) for s in samples.values()) // len(samples)} scored residue pairs per setting")
    classes = [3] if args.size_classes == [0] else args.size_classes
    return fit_msa_calibration(samples, fitted_on=fitted_on, max_knots=args.knots, size_classes=classes), fitted_on


def evaluate_splits(aligner, cal, splits, result, args) -> None:
    for split in splits:
        rows = collect(aligner, split, args.consistency, args)
        result["eval"][split] = {}
        for r in args.consistency:
            raw, calibrated = evaluate(rows, r, None), evaluate(rows, r, cal)
            result["eval"][split][str(r)] = {"raw": raw, "calibrated": calibrated,
                                             "trim": trimming(rows, r, cal, TRIM_THRESHOLDS)}
    source = "the model's own" if args.fit_split == "none" else f"fitted on {args.fit_split}"
    print(f"\nresidue pairs in one column, scored on trusted residues; ECE over ten equal bins; calibration: {source}")
    print("| split | consistency | pairs | right | raw mean / ECE | calibrated mean / ECE | column ECE raw / cal "
          "| family MAE raw / cal | calibrated ECE by sequences |")
    print("|---|---|---|---|---|---|---|---|---|")
    for split in splits:
        for r in args.consistency:
            raw, c = (result["eval"][split][str(r)][k] for k in ("raw", "calibrated"))
            sizes = ", ".join(f"{k}: {v['ece']:.3f}" for k, v in c["by_sequences"].items())
            print(f"| {split} | {r} | {c['pairs']} | {c['right']:.3f} | {raw['confidence']:.3f} / {raw['ece']:.3f} | "
                  f"{c['confidence']:.3f} / {c['ece']:.3f} | {raw['column_ece']:.3f} / {c['column_ece']:.3f} | "
                  f"{raw['family_mae']:.3f} / {c['family_mae']:.3f} | {sizes} |")
    for split in splits:
        default = result["eval"][split].get("2")
        if default:
            print(f"\n{split}, 2 rounds (the default), calibrated: bin, pairs, mean confidence, share right")
            for b in default["calibrated"]["reliability"]:
                print(f"  {b['bin']:12s} {b['n']:7d} {b['confidence']:.3f} {b['right']:.3f}")
            print(f"\n{split}, 2 rounds, `sinkalign msa --trim T` (columns with two or more residues; the rest "
                  "dropped at any T > 0): T, columns kept, precision, recall (SP)")
            for d in default["trim"]:
                print(f"  {d['threshold']:.2f} {d['columns_kept']:.3f} {d['precision']:.3f} {d['recall']:.3f}")


if __name__ == "__main__":
    main()
