"""Lopsided pairs: a homologous pair with the longer sequence buried in unrelated residues.

A search aligns a domain against a whole protein, a gene against a contig: one side many
times longer than the other, while the training pairs of the learned model's column
calibration were at most 9 to 1 (``abs_log_length_ratio`` <= 2.21). This script takes
validation pairs, makes the shorter sequence the query, and puts the target in the middle of
random residues (drawn from the pooled composition of the split) until it is ``R`` times the
query's length, for each ``R`` of ``--ratios`` (1: the pair as it is). Each flanked pair is
aligned once by the learned model with every MEA column kept (raw posteriors, the plan kept);
its column features are computed once and read by two column models: the shipped one, which
clips each feature to the range it was fitted on, and the same model with those ranges removed
(a linear extrapolation of the log-odds: the model before session 14). Both keep the columns
at or above the shipped threshold. The shipped BLOSUM-window model (``--model blosum``, its own
calibration), Needleman-Wunsch, Smith-Waterman (parasail, BLOSUM62 11/1)
and the pair-HMM (MAC 0.4, the settings of ``aligner_learned.py``) align the same flanked pairs
in the same run (the pair-HMM up to ``--pairhmm-max-ratio``). Printed: precision / recall / F1
on trusted (core) residues, per ratio, for all pairs and below 30% identity.

    python benchmarks/lopsided_pairs.py --shards SHARDS --split valid \\
        --json benchmarks/results/lopsided_pairs_valid.json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import time
from datetime import date
from pathlib import Path

import numpy as np
from _common import machine, write_json

import sinkalign.align.aligner as A
from sinkalign.align.aligner import Aligner
from sinkalign.align.baselines import Scoring, align_pair
from sinkalign.align.calibration import Calibration
from sinkalign.align.decode import plan_posteriors
from sinkalign.align.evaluate import load_reference_set
from sinkalign.align.metrics import core_pair_scores, micro_average
from sinkalign.align.pairhmm import pairhmm_align
from sinkalign.io.alignments import percent_identity

RESULTS = Path(__file__).resolve().parent / "results"


@contextlib.contextmanager
def box_features(flag: bool):
    """The aligner's boxed pairs' column features read on the box (True) or the whole pair."""
    old = A.BOX_FEATURES
    A.BOX_FEATURES = flag
    try:
        yield
    finally:
        A.BOX_FEATURES = old


def shorter_first(p):
    """The reference pair with its shorter sequence as the query."""
    if len(p.query_seq) <= len(p.target_seq):
        return p
    return dataclasses.replace(p, query_id=p.target_id, target_id=p.query_id, query_seq=p.target_seq,
                               target_seq=p.query_seq, pairs=np.ascontiguousarray(p.pairs[:, ::-1]),
                               query_core=p.target_core, target_core=p.query_core)


def flanked(p, ratio: float, letters: np.ndarray, rng, donors: list | None = None):
    """``p`` with its target in the middle of random ``letters`` (or, given ``donors``, of
    windows of their sequences from other families), ``ratio`` times the query long (rounded down)."""
    extra = max(0, int(ratio * len(p.query_seq)) - len(p.target_seq)) if ratio > 1 else 0
    left = extra // 2
    if donors is None:
        flank = "".join(rng.choice(letters, extra))
    else:
        others = [d for d in donors if d.family != p.family]
        pieces: list[str] = []
        while sum(map(len, pieces)) < extra:
            d = others[int(rng.integers(len(others)))]
            seq = (d.query_seq, d.target_seq)[int(rng.integers(2))]
            need = extra - sum(map(len, pieces))
            start = int(rng.integers(max(1, len(seq) - need + 1)))
            pieces.append(seq[start:start + need])
        flank = "".join(pieces)
    target_core = p.target_core
    if target_core is not None:
        target_core = np.concatenate([np.zeros(left, bool), target_core, np.zeros(extra - left, bool)])
    return dataclasses.replace(p, target_seq=flank[:left] + p.target_seq + flank[left:],
                               pairs=p.pairs + np.array([0, left], dtype=p.pairs.dtype), target_core=target_core)


def reference_cases(shards, split: str, n_pairs: int, max_query: int):
    """``(everything, letters, pairs, remote)``: the split's pairs (the shorter side first), the
    residues flanks are drawn from (its pooled composition), ``n_pairs`` of those with a query of
    at most ``max_query`` residues (seed 0), and the indices of those below 30% identity."""
    rng = np.random.default_rng(0)
    everything = [shorter_first(p) for p in load_reference_set(shards, split=split)]
    letters = np.array(list("".join(p.query_seq + p.target_seq for p in everything)))
    letters = letters[np.isin(letters, list("ACDEFGHIKLMNPQRSTVWY"))]
    eligible = [p for p in everything if len(p.query_seq) <= max_query]
    pick = np.sort(rng.choice(len(eligible), min(n_pairs, len(eligible)), replace=False))
    pairs = [eligible[i] for i in pick]
    return everything, letters, pairs, [i for i, p in enumerate(pairs) if percent_identity(p) < 30]


@contextlib.contextmanager
def setting(name: str, value):
    """The aligner module's constant ``name`` set to ``value`` within the block."""
    old = getattr(A, name)
    setattr(A, name, value)
    try:
        yield
    finally:
        setattr(A, name, old)


def no_box():
    """The aligner as before session 17: a lopsided pair is not put in the box around its local hit."""
    return setting("LOPSIDED_RATIO", float("inf"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--split", default="valid", choices=["valid", "test"])
    ap.add_argument("--ratios", default="1,2,4,16,64", help="target length / query length (1: no flanks)")
    ap.add_argument("--pairs", type=int, default=150, help="pairs drawn (seed 0) from those with a query of "
                                                          "at most --max-query residues")
    ap.add_argument("--max-query", type=int, default=300)
    ap.add_argument("--model", default="learned", help="a model (shipped name, directory or run); without a "
                                                       "calibration, only its every-column row")
    ap.add_argument("--methods", default="blosum,NW,SW,pairHMM-mac",
                    help="baselines run on the same flanked pairs (blosum: the shipped BLOSUM-window model)")
    ap.add_argument("--pairhmm-max-ratio", type=int, default=4,
                    help="run the pair-HMM (quadratic time in a JAX scan, the slowest) only up to this ratio")
    ap.add_argument("--band", default=None, help="the learned model's band (Aligner(band=...)): a radius or "
                                                 "'dense'; default: the aligner's own (long pairs on a corridor)")
    ap.add_argument("--flanks", default="random", choices=["random", "real"],
                    help="random residues of the split's composition, or windows of the split's sequences of other "
                         "families")
    ap.add_argument("--before", action="store_true",
                    help="also the learned model as before session 17 (no box around the local hit of a lopsided "
                         "pair: LOPSIDED_RATIO set to infinity), calibrated, in the same run")
    ap.add_argument("--null", action="store_true",
                    help="also E-values of the same pairs with the query shuffled (seed 7): the share at E <= 0.01 / "
                         "0.1 / 1 (calibrated: 0.010 / 0.095 / 0.63), by the default and (with --before) as before")
    ap.add_argument("--compare-features", action="store_true",
                    help="also align every pair by the default aligner with its boxed pairs' column features read "
                         "on the box (A.BOX_FEATURES, tried in session 22, off) and on the whole pair (the default)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    ratios = [int(r) for r in args.ratios.split(",")]
    baselines = [m for m in args.methods.split(",") if m]

    everything, letters, pairs, remote = reference_cases(args.shards, args.split, args.pairs, args.max_query)
    groups = {"all": list(range(len(pairs))), "<30% identity": remote}

    band = None if args.band is None else args.band if args.band == "dense" else int(args.band)
    raw = Aligner.load(args.model, calibration=None, strand="plus", band=band)
    full = Aligner.load(args.model, strand="plus", band=band)
    shipped = full.calibration
    unclipped = None
    if shipped is not None and shipped.column_model is not None:
        model = {k: v for k, v in shipped.column_model.items() if k not in ("low", "high")}
        unclipped = dataclasses.replace(shipped, column_model=model)
        assert isinstance(unclipped, Calibration) and "low" in shipped.column_model
    threshold = None if shipped is None else shipped.min_confidence
    blosum = Aligner.load("blosum", strand="plus") if "blosum" in baselines else None
    scoring = Scoring.protein()

    rows: dict[str, dict] = {}
    print(f"{args.model}: {len(pairs)} {args.split} pairs ({len(remote)} below 30% identity), queries of at most "
          f"{args.max_query} residues, {args.flanks} flanks; threshold {threshold}")
    donors = everything if args.flanks == "real" else None
    for ratio in ratios:
        flank_rng = np.random.default_rng(ratio)
        cases = [flanked(p, ratio, letters, flank_rng, donors) for p in pairs]
        preds = {"learned (clipped, shipped)": [], "learned (unclipped, before)": [], "learned every column": []}
        if shipped is None:
            preds = {"learned every column": []}
        elif unclipped is None:
            preds = {"learned (calibrated)": [], "learned every column": []}
        t0 = time.perf_counter()
        for r, p in zip(raw.align_many(((p.query_id, p.query_seq, p.target_id, p.target_seq) for p in cases),
                                       keep_plan=True), cases):
            aln = r.alignment
            if shipped is not None:
                feats = shipped.feature(aln, plan_posteriors(r.plan).match, query=p.query_seq, target=p.target_seq)
                keep = shipped.confidence(feats) >= threshold
                preds["learned (calibrated)" if unclipped is None else "learned (clipped, shipped)"].append(
                    aln.pairs[keep])
            if unclipped is not None:
                preds["learned (unclipped, before)"].append(aln.pairs[unclipped.confidence(feats) >= threshold])
            preds["learned every column"].append(aln.pairs)
        secs = {"learned": time.perf_counter() - t0}
        jobs = [(p.query_id, p.query_seq, p.target_id, p.target_seq) for p in cases]
        null, shuffled = {}, []
        if args.null and shipped is not None:
            shuffle_rng = np.random.default_rng(7)
            shuffled = [(q, "".join(shuffle_rng.permutation(list(qs))), t, ts) for q, qs, t, ts in jobs]
            null["default"] = [r.evalue for r in full.align_many(shuffled)]
        if args.compare_features and shipped is not None:
            for name, flag in (("default, box features", True), ("default, whole-pair features", False)):
                t0 = time.perf_counter()
                with box_features(flag):
                    preds[name] = [r.alignment.pairs for r in full.align_many(jobs)]
                    if args.null:
                        null[name] = [r.evalue for r in full.align_many(shuffled)]
                secs[name] = time.perf_counter() - t0
        if args.before and shipped is not None:
            t0 = time.perf_counter()
            with no_box():
                preds["learned, no box (session 16)"] = [r.alignment.pairs for r in full.align_many(jobs)]
                if args.null:
                    null["no box (session 16)"] = [r.evalue for r in full.align_many(shuffled)]
            secs["no box"] = time.perf_counter() - t0
        for method in baselines:
            if method == "pairHMM-mac" and ratio > args.pairhmm_max_ratio:
                continue
            t0 = time.perf_counter()
            if method == "blosum":  # the shipped BLOSUM-window model, its own calibration
                preds[method] = [r.alignment.pairs for r in blosum.align_many(
                    (p.query_id, p.query_seq, p.target_id, p.target_seq) for p in cases)]
            elif method == "pairHMM-mac":
                preds[method] = [pairhmm_align(p.query_seq, p.target_seq, scoring=Scoring.protein(24, 2), lam=0.2,
                                               threshold=0.4).pairs for p in cases]
            else:
                preds[method] = [align_pair(p.query_seq, p.target_seq, method.lower(), scoring=scoring).pairs
                                 for p in cases]
            secs[method] = time.perf_counter() - t0
        per_pair = {m: [core_pair_scores(a, p) for a, p in zip(v, cases)] for m, v in preds.items()}
        rows[f"R={ratio}"] = {
            "mean_target_length": float(np.mean([len(p.target_seq) for p in cases])),
            "seconds": secs,
            "shuffled_query_evalues": {k: {f"E<={t:g}": float(np.mean(np.array(v) <= t)) for t in (0.01, 0.1, 1.0)}
                                       for k, v in null.items()},
            "methods": {m: {g: micro_average([s[i] for i in idx]) for g, idx in groups.items()}
                        for m, s in per_pair.items()}}
        print(f"\nR = {ratio} (mean target {rows[f'R={ratio}']['mean_target_length']:.0f} residues; "
              + ", ".join(f"{m} {s:.0f} s" for m, s in secs.items()) + ")")
        print("| method | " + " | ".join(f"{g} P / R / F1" for g in groups) + " |")
        print("|---" * (len(groups) + 1) + "|")
        for m, row in rows[f"R={ratio}"]["methods"].items():
            print(f"| {m} | " + " | ".join(f"{row[g]['precision']:.3f} / {row[g]['recall']:.3f} / "
                                          f"{row[g]['f1']:.3f}" for g in groups) + " |")
        for k, v in rows[f"R={ratio}"]["shuffled_query_evalues"].items():
            print(f"shuffled queries, {k}: E <= 0.01 / 0.1 / 1: " + " / ".join(f"{x:.3f}" for x in v.values()))
    # another model's results never take the shipped model's file
    suffix = ("" if args.model == "learned" else "_" + Path(args.model).name) + ("_real" if args.flanks == "real" else "")
    out = Path(args.json) if args.json else RESULTS / f"lopsided_pairs_{args.split}{suffix}.json"
    write_json(out, {"date": date.today().isoformat(), "machine": machine(), "split": args.split, "model": args.model,
                     "band": args.band, "flanks": args.flanks,
                     "lopsided_ratio": A.LOPSIDED_RATIO, "box_margin": A.BOX_MARGIN,
                     "threshold": threshold, "pairs": {g: len(v) for g, v in groups.items()},
                     "max_query": args.max_query, "rows": rows})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
