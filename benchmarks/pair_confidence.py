"""Pairwise column confidences fitted on held-out pairs: cross-fitted against the shipped fit.

The shipped learned model's column confidences (a logistic model over
:data:`sinkalign.align.calibration.COLUMN_FEATURES`, then an isotonic map) were fitted on the
training pairs, which its weights were trained on. This script asks what a fit on the
validation pairs would give, without fitting and judging on the same families: the pairs of
``--split`` (as :func:`sinkalign.cli.evaluate` ``calibrate`` takes them: both sequences at most
``--max-length``, plus flanked copies of a ``--flank`` share, donors the split's other families)
are aligned once with the raw model, and every variant is fitted by K-fold cross-fitting over
families (families shuffled with ``--seed``; a flanked copy goes with its pair's family), so
each pair's columns are mapped by a fit that did not see its family:

* ``shipped``: the model's own calibration (no refit);
* ``V``: logistic model and isotonic map both refitted (``sinkalign calibrate --split SPLIT``);
* ``I``: the shipped logistic model kept, the isotonic map refitted.

Judged on every pair of the split as it is (MEA columns on trusted residues, as F1 counts them):
reliability (ten equal bins: ECE; "mid ECE" over the columns of confidence below 0.9) per
group (all, structural, structural <20% identity, Pfam) and on the flanked copies; and
precision / recall / F1 per group at each threshold, with Needleman-Wunsch (parasail, BLOSUM62
11/1) on the same pairs, and the threshold the session-12 rule gives (the largest whose recall
beats NW's in every group).

    python benchmarks/pair_confidence.py --shards SHARDS --split valid --cache /tmp/pc_valid \\
        --json benchmarks/results/pair_confidence_valid.json

``--cache DIR`` keeps the aligned samples for the next run. ``--full`` also reports each
refitted variant fitted on all of the split (in-sample: for the record, not for choosing).
"""

from __future__ import annotations

import argparse
import pickle
import time
from datetime import date
from pathlib import Path

import numpy as np
from _common import machine, pair_groups, write_json
from aligner_learned import source_of

from sinkalign.align.aligner import Aligner
from sinkalign.align.baselines import Scoring, align_pair
from sinkalign.align.calibration import Calibration, calibration_samples, fit_from_samples
from sinkalign.align.decode import plan_posteriors
from sinkalign.align.evaluate import load_reference_set
from sinkalign.align.metrics import core_pair_scores
from sinkalign.align.train import flanked_copies
from sinkalign.io.alignments import percent_identity

RESULTS = Path(__file__).resolve().parent / "results"
THRESHOLDS = tuple(round(0.2 + 0.05 * k, 2) for k in range(9))  # 0.20 ... 0.60


def aligned_samples(aligner, pairs, *, kind: str) -> list[dict]:
    """Per pair: the ``columns`` calibration samples of its raw MEA alignment (as
    ``sinkalign calibrate`` builds them) and its number of trusted reference pairs."""
    out = []
    items = ((p.query_id, p.query_seq, p.target_id, p.target_seq) for p in pairs)
    for r, p in zip(aligner.align_many(items, keep_plan=True), pairs):
        match = plan_posteriors(r.plan).match
        mx, my, gx, gy = calibration_samples(r.alignment, p, match, match_feature="columns", query=p.query_seq,
                                             target=p.target_seq, kind=kind)
        s = core_pair_scores(r.alignment.pairs, p)
        if s.n_pred != len(my) or s.tp != int(my.sum()):  # the samples are the columns F1 counts
            raise AssertionError(f"{p.query_id}/{p.target_id}: samples {len(my)}/{int(my.sum())} against "
                                 f"F1's {s.n_pred}/{s.tp}")
        out.append({"mx": mx, "my": my, "gx": gx, "gy": gy, "n_ref": s.n_ref, "family": p.family})
    return out


def fit(samples, variant: str, shipped: Calibration, *, symmetric: bool) -> Calibration:
    """``V``: column model and maps refitted; ``I``: the shipped column model kept, its maps refitted."""
    if variant not in ("V", "I"):
        raise ValueError(f"variant {variant!r} is not V or I")
    kept = shipped.column_model if variant == "I" else None
    return fit_from_samples([(s["mx"], s["my"], s["gx"], s["gy"]) for s in samples], match_feature="columns",
                            kind=shipped.kind, symmetric=symmetric, column_model=kept)


def reliability(conf: list[np.ndarray], right: list[np.ndarray], idx) -> dict:
    p = np.concatenate([conf[i] for i in idx]) if len(idx) else np.zeros(0)
    y = np.concatenate([right[i] for i in idx]) if len(idx) else np.zeros(0)
    b = np.clip((p * 10).astype(int), 0, 9)
    bins = [{"bin": f"[{k / 10:.1f}, {(k + 1) / 10:.1f})", "n": int(np.sum(b == k)),
             "confidence": float(p[b == k].mean()), "right": float(y[b == k].mean())}
            for k in range(10) if np.any(b == k)]
    gap = lambda bs: sum(abs(x["confidence"] - x["right"]) * x["n"] for x in bs)  # noqa: E731
    mid = [x for x in bins if x["bin"] < "[0.9"]
    return {"columns": int(p.size), "confidence": float(p.mean()) if p.size else None,
            "right": float(y.mean()) if p.size else None, "bins": bins,
            "ece": float(gap(bins) / max(1, p.size)),
            "mid_ece": float(gap(mid) / max(1, sum(x["n"] for x in mid)))}


def threshold_rows(conf, right, n_ref, idx_groups, nw) -> dict:
    rows = {}
    for t in (0.0, *THRESHOLDS):
        row = {}
        for g, idx in idx_groups.items():
            tp = sum(float(right[i][conf[i] >= t].sum()) for i in idx)
            npred = sum(int(np.sum(conf[i] >= t)) for i in idx)
            nref = sum(n_ref[i] for i in idx)
            prec, rec = tp / max(1, npred), tp / max(1, nref)
            row[g] = {"precision": prec, "recall": rec, "f1": 2 * prec * rec / max(1e-12, prec + rec)}
        rows[f"t={t:g}"] = row
    beats = [t for t in THRESHOLDS if all(rows[f"t={t:g}"][g]["recall"] > nw[g]["recall"] for g in idx_groups)]
    return {"rows": rows, "rule_threshold": max(beats) if beats else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--split", default="valid", choices=["valid", "test"])
    ap.add_argument("--model", default="learned")
    ap.add_argument("--cv", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="seed of the folds and of the flanked copies")
    ap.add_argument("--max-length", type=int, default=1024)
    ap.add_argument("--flank", type=float, default=0.5)
    ap.add_argument("--flank-ratio", type=float, default=64.0)
    ap.add_argument("--flank-max-length", type=int, default=2048)
    ap.add_argument("--variants", default="V,I")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--max-pairs", type=int, default=None, help="subsample each set (seed 0): a quick look")
    ap.add_argument("--cache", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    variants = [v for v in args.variants.split(",") if v]

    model = Aligner.load(args.model)
    shipped = model.calibration
    if shipped is None or shipped.column_model is None:
        ap.error(f"{args.model} has no column-model calibration")
    raw = Aligner.load(args.model, calibration=None, strand="plus")
    symmetric = bool(raw.config.symmetric)
    pairs = load_reference_set(args.shards, split=args.split, max_pairs=args.max_pairs)
    fitting = [i for i, p in enumerate(pairs) if max(len(p.query_seq), len(p.target_seq)) <= args.max_length]
    copies = flanked_copies([pairs[i] for i in fitting], args.flank, args.flank_max_length, args.flank_ratio,
                            args.seed) if args.flank else []
    cache = Path(args.cache) / f"{args.split}_{Path(args.model).name}.pkl" if args.cache else None
    t0 = time.perf_counter()
    if cache is not None and cache.is_file():
        with open(cache, "rb") as f:
            got = pickle.load(f)
        evals, flanked, nw = got["evals"], got["flanked"], got["nw"]
    else:
        evals = aligned_samples(raw, pairs, kind=shipped.kind)
        flanked = aligned_samples(raw, copies, kind=shipped.kind)
        nw = [core_pair_scores(align_pair(p.query_seq, p.target_seq, "nw", scoring=Scoring.protein()).pairs, p)
              for p in pairs]
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            with open(cache, "wb") as f:
                pickle.dump({"evals": evals, "flanked": flanked, "nw": nw}, f)
    print(f"{len(pairs)} pairs ({len(fitting)} fitted on, {len(copies)} flanked copies), aligned in "
          f"{time.perf_counter() - t0:.0f} s")

    sources, identities = [source_of(p) for p in pairs], [percent_identity(p) for p in pairs]
    idx_groups = pair_groups(sources, identities)
    nw_rows = {}
    for g, idx in idx_groups.items():
        tp, npred, nref = (sum(getattr(nw[i], k) for i in idx) for k in ("tp", "n_pred", "n_ref"))
        prec, rec = tp / max(1, npred), tp / max(1, nref)
        nw_rows[g] = {"precision": prec, "recall": rec, "f1": 2 * prec * rec / max(1e-12, prec + rec)}

    families = sorted({s["family"] for s in evals})
    rng = np.random.default_rng(args.seed)
    order = [families[k] for k in rng.permutation(len(families))]
    fold_of = {fam: k % args.cv for k, fam in enumerate(order)}
    fit_pool = [evals[i] for i in fitting] + flanked  # what `sinkalign calibrate` fits on

    right = [s["my"] for s in evals]
    n_ref = [s["n_ref"] for s in evals]
    confs = {"shipped": [shipped.confidence(s["mx"]) for s in evals]}
    confs_flanked = {"shipped": [shipped.confidence(s["mx"]) for s in flanked]}
    # the samples' confidences under the shipped fit are what `sinkalign align` reports (checked on a few pairs)
    check = Aligner.load(args.model, min_confidence=0.0)
    for i in range(min(20, len(pairs))):
        p = pairs[i]
        aln = next(iter(check.align_many([(p.query_id, p.query_seq, p.target_id, p.target_seq)]))).alignment
        kept = aln.match_posterior if p.query_core is None else aln.match_posterior[
            p.query_core[aln.pairs[:, 0]] | p.target_core[aln.pairs[:, 1]]]
        if not np.allclose(kept, confs["shipped"][i], rtol=0, atol=1e-12):
            raise AssertionError(f"pair {i}: the shipped confidences differ from what the aligner reports")
    fits = {}
    for v in variants:
        t1 = time.perf_counter()
        conf = [None] * len(evals)
        conf_f = [None] * len(flanked)
        for k in range(args.cv):
            cal = fit([s for s in fit_pool if fold_of[s["family"]] != k], v, shipped, symmetric=symmetric)
            for i, s in enumerate(evals):
                if fold_of[s["family"]] == k:
                    conf[i] = cal.confidence(s["mx"])
            for i, s in enumerate(flanked):
                if fold_of[s["family"]] == k:
                    conf_f[i] = cal.confidence(s["mx"])
        confs[f"{v} cv"], confs_flanked[f"{v} cv"] = conf, conf_f
        if args.full:
            cal = fit(fit_pool, v, shipped, symmetric=symmetric)
            fits[v] = cal.to_dict()
            confs[f"{v} full"] = [cal.confidence(s["mx"]) for s in evals]
            confs_flanked[f"{v} full"] = [cal.confidence(s["mx"]) for s in flanked]
        print(f"variant {v}: fitted in {time.perf_counter() - t1:.0f} s")

    result = {}
    all_flanked = list(range(len(flanked)))
    for name, conf in confs.items():
        rel = {g: reliability(conf, right, idx) for g, idx in idx_groups.items()}
        rel["flanked copies"] = reliability(confs_flanked[name], [s["my"] for s in flanked], all_flanked)
        result[name] = {"reliability": rel, **threshold_rows(conf, right, n_ref, idx_groups, nw_rows)}

    names = list(idx_groups)
    print("pairs: " + ", ".join(f"{g} {len(idx)}" for g, idx in idx_groups.items()) + f", flanked {len(flanked)}")
    print("\nreliability: ECE / mid ECE (columns < 0.9) per group")
    print("| calibration | " + " | ".join([*names, "flanked copies"]) + " |")
    print("|---" * (len(names) + 2) + "|")
    for name, r in result.items():
        cells = [f"{r['reliability'][g]['ece']:.3f} / {r['reliability'][g]['mid_ece']:.3f}"
                 for g in [*names, "flanked copies"]]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for name, r in result.items():
        print(f"\n{name}: by bin (all): " + "; ".join(f"{x['bin']} {x['n']} {x['confidence']:.3f} {x['right']:.3f}"
                                               for x in r["reliability"]["all"]["bins"]))
        print(f"{name}: threshold by the session-12 rule: {r['rule_threshold']}")
        print("| threshold | " + " | ".join(f"{g} P / R / F1" for g in names) + " |")
        print("|---" * (len(names) + 1) + "|")
        for key, row in [*r["rows"].items(), ("NW", nw_rows)]:
            print(f"| {key} | " + " | ".join(f"{row[g]['precision']:.3f} / {row[g]['recall']:.3f} / "
                                             f"{row[g]['f1']:.3f}" for g in names) + " |")

    out = Path(args.json) if args.json else RESULTS / f"pair_confidence_{args.split}.json"
    write_json(out, {"date": date.today().isoformat(), "machine": machine(), "split": args.split,
                     "model": args.model, "cv": args.cv, "seed": args.seed, "max_length": args.max_length,
                     "flank": [args.flank, args.flank_ratio, args.flank_max_length],
                     "pairs": {g: len(idx) for g, idx in idx_groups.items()}, "fitted_on": len(fitting),
                     "flanked_copies": len(flanked), "shipped_threshold": shipped.min_confidence,
                     "NW": nw_rows, "results": result, "full_fits": fits})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
