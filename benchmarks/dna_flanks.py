"""DNA homologs with unrelated DNA on both sides: how far the DNA model aligns into the flanks,
and whether its confidences say so.

A real window of ``--lengths`` bp from a contig of the chosen genera is evolved into a copy with a
known alignment (``dna_strands.evolve``: ``--substitutions`` per base, insertions and deletions
each ``--indels`` per base). The target is the window with the contig's own DNA on each side, the
query the copy with DNA of another genome on each side: a gene found in two contigs, each
flank 0 to ``F`` times the window's length (uniform, each end drawn apart). The flanks are
unrelated, so every column in them is wrong. Aligned on the plus strand by the model as it does
by default, by Smith-Waterman and Needleman-Wunsch (parasail, +2/-3, open 5 / extend 2), all in
one process on the same pairs.

Printed per flank size F and substitution rate: precision / recall / F1 against the true
alignment, the share of the model's columns in the flanks, the mean confidence the model gives
its right and its wrong columns, and its mean confidence against its precision (a calibrated
model has them equal).

    python benchmarks/dna_flanks.py --json benchmarks/results/dna_flanks_valid.json

``--end-trims 5,10,20`` also scores the model's columns trimmed to their confident core (an
X-drop end trim, :func:`sinkalign.alignment.confident_core`, not shipped: BENCHMARKS.md) at each
drop, with ``--end-trim-confidence``, on the same alignments (the trim keeps a stretch of the
columns the threshold kept).
"""

from __future__ import annotations

import argparse
import time
from datetime import date

import numpy as np
from _common import machine, write_json
from dna_strands import evolve
from homology_evalues_dna import contigs, genomes

from sinkalign.align.aligner import Aligner
from sinkalign.align.baselines import Scoring, align_pair
from sinkalign.align.metrics import micro_average, pair_scores
from sinkalign.alignment import confident_core


def cases(per_genome: list[list[str]], flank: float, n: int, lengths, sub: float, indels: float, rng):
    """``n`` (query, target) jobs, their true alignments, and the query / target core spans."""
    jobs, truth, cores = [], [], []
    for k in range(n):
        g = int(rng.integers(len(per_genome)))
        length = int(rng.integers(lengths[0], lengths[1] + 1))
        ends = [int(rng.integers(0, int(flank * length) + 1)) for _ in range(4)]  # qL, qR, tL, tR
        long = [c for c in per_genome[g] if len(c) > length + ends[2] + ends[3] + 1]
        contig = long[int(rng.integers(len(long)))]
        start = int(rng.integers(ends[2], len(contig) - length - ends[3]))
        target = contig[start - ends[2]:start + length + ends[3]]
        copy, pairs = evolve(contig[start:start + length], rng, sub, indels)
        other = [c for h, genome in enumerate(per_genome) if h != g for c in genome if len(c) > ends[0] + ends[1] + 1]
        donor = other[int(rng.integers(len(other)))]
        at = int(rng.integers(0, len(donor) - ends[0] - ends[1]))
        query = donor[at:at + ends[0]] + copy + donor[at + ends[0]:at + ends[0] + ends[1]]
        jobs.append((f"copy{k}", query, f"contig{k}", target))
        truth.append(np.ascontiguousarray(pairs[:, ::-1]) + np.array([ends[0], ends[2]]))
        cores.append(((ends[0], ends[0] + len(copy)), (ends[2], ends[2] + length)))
    return jobs, truth, cores


def training_reference(per_genome, n: int, seed: int) -> str:
    """``n`` simulated pairs as Stockholm alignments (one block each), for ``sinkalign
    calibrate``: windows of 100-1000 bp (log-uniform), substitutions from {0.05, 0.1, 0.2, 0.3,
    0.4}, indels 0.02, flanks up to F in {0, 0.1, 0.25, 0.5, 1} times the window; the flanks'
    residues are lower case, insertions aligned to nothing (trusted gaps)."""
    rng = np.random.default_rng(seed)
    blocks = []
    for k in range(n):
        length = int(np.exp(rng.uniform(np.log(100), np.log(1000))))
        sub = float(rng.choice([0.05, 0.1, 0.2, 0.3, 0.4]))
        flank = float(rng.choice([0.0, 0.1, 0.25, 0.5, 1.0]))
        jobs, truth, _ = cases(per_genome, flank, 1, (length, length), sub, 0.02, rng)
        _, query, _, target = jobs[0]
        blocks.append(stockholm_pair(f"q{k}", query, f"t{k}", target, truth[0]))
    return "".join(blocks)


def stockholm_pair(qid: str, query: str, tid: str, target: str, pairs: np.ndarray) -> str:
    """One Stockholm block of two rows whose upper-case columns are ``pairs`` (query, target);
    every other residue lower case, in a column of its own."""
    rows_q, rows_t, i, j = [], [], 0, 0
    for a, b in [*map(tuple, pairs.tolist()), (len(query), len(target))]:
        rows_q.append(query[i:a].lower() + "-" * (b - j))  # unaligned stretches, each in its own columns
        rows_t.append("-" * (a - i) + target[j:b].lower())
        if a < len(query):
            rows_q.append(query[a].upper())
            rows_t.append(target[b].upper())
        i, j = a + 1, b + 1
    return f"# STOCKHOLM 1.0\n{qid} {''.join(rows_q)}\n{tid} {''.join(rows_t)}\n//\n"


def model_row(results, truth, cores) -> dict:
    """Precision / recall / F1 and what the confidences say of the model's columns."""
    right, wrong, in_flank, total = [], [], 0, 0
    for r, t, ((q0, q1), (t0, t1)) in zip(results, truth, cores):
        pairs, conf = r.alignment.pairs, r.alignment.match_posterior
        ok = {(int(i), int(j)) for i, j in t}
        for (i, j), c in zip(pairs, conf):
            (right if (int(i), int(j)) in ok else wrong).append(float(c))
            in_flank += not (q0 <= i < q1 and t0 <= j < t1)
            total += 1
    scores = micro_average([pair_scores(r.alignment.pairs, t) for r, t in zip(results, truth)])
    every = right + wrong
    return {**scores, "flank_share": in_flank / max(total, 1),
            "conf_right": float(np.mean(right)) if right else float("nan"),
            "conf_wrong": float(np.mean(wrong)) if wrong else float("nan"),
            "mean_confidence": float(np.mean(every)) if every else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="dna")
    ap.add_argument("--split", default="valid", choices=["train", "valid", "test"],
                    help="genera (choose on valid; test: one look)")
    ap.add_argument("--flanks", default="0,0.1,0.25,0.5", help="largest flank, times the window's length")
    ap.add_argument("--lengths", type=int, nargs=2, default=(200, 400), help="window lengths, bp")
    ap.add_argument("--pairs", type=int, default=40, help="windows per flank size and substitution rate")
    ap.add_argument("--substitutions", type=float, nargs="+", default=[0.1, 0.25])
    ap.add_argument("--indels", type=float, default=0.02)
    ap.add_argument("--min-confidence", type=float, default=None,
                    help="the aligner's threshold (default: the model's own, 0.1 for the DNA model since 2026-11-29; "
                         "0 keeps every column, to score --thresholds)")
    ap.add_argument("--thresholds", default=None, help="also score the model's columns at these confidence "
                    "thresholds (comma-separated; with --min-confidence 0), the --reference pairs too")
    ap.add_argument("--end-trims", default=None, help="also score the model's columns under the X-drop end trim at "
                    "these drops (comma-separated; sinkalign.alignment.confident_core on the same alignments), the "
                    "--reference pairs too")
    ap.add_argument("--end-trim-confidence", type=float, default=0.5, help="the end trim's t (default 0.5)")
    ap.add_argument("--write-reference", metavar="FILE", default=None,
                    help="write --pairs simulated pairs of the --split genera (windows 100-1000 bp, every flank size "
                         "and substitution rate of training_reference) as Stockholm for `sinkalign calibrate`, "
                         "and stop")
    ap.add_argument("--reference", default=None, help="also a real DNA family (e.g. ../shared/data/pfam_seed/"
                    "MADE1_dfam_dna.sto): the confidences against its reference pairs")
    ap.add_argument("--reference-pairs", type=int, default=400, help="pairs of --reference (a seeded subsample)")
    ap.add_argument("--identity-weight", type=float, default=None,
                    help="the MEA identity tie-break (Aligner identity_weight; default: the model's)")
    ap.add_argument("--identity-min", type=float, default=None,
                    help="... for pairs whose plain decoding is at least this identical (default: the model's)")
    ap.add_argument("--identity-gaps", choices=["add", "move"], default=None,
                    help="... adding gaps or only moving the plain decoding's (Aligner identity_gaps; default: the "
                         "model's)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    flanks = [float(f) for f in args.flanks.split(",")]
    per_genome = [g for g in contigs(genomes(args.split)) if any(len(c) > 4 * args.lengths[1] for c in g)]
    if args.write_reference:
        from sinkalign.utils import atomic_write_text

        per_genome = [g for g in contigs(genomes(args.split)) if any(len(c) > 5000 for c in g)]
        atomic_write_text(args.write_reference, training_reference(per_genome, args.pairs, seed=0))
        print(f"wrote {args.pairs} pairs of the {args.split} genera to {args.write_reference}")
        return
    thresholds = [float(t) for t in args.thresholds.split(",")] if args.thresholds else []
    aligner = Aligner.load(args.model, strand="plus", identity_weight=args.identity_weight,
                           identity_min=args.identity_min, identity_gaps=args.identity_gaps,
                           min_confidence=args.min_confidence)
    trims = [float(x) for x in args.end_trims.split(",")] if args.end_trims else []
    trim_seconds = [0.0, 0]  # time spent trimming, alignments trimmed

    def trimmed(results, drop):
        t0 = time.perf_counter()
        out = []
        for r in results:
            core = confident_core(r.alignment.match_posterior, args.end_trim_confidence, drop)
            out.append(r.alignment.pairs if core is None else r.alignment.pairs[core[0] : core[1] + 1])
        trim_seconds[0] += time.perf_counter() - t0
        trim_seconds[1] += len(results)
        return out

    if thresholds and aligner.min_confidence > min(thresholds):
        ap.error(f"--thresholds below the aligner's own threshold {aligner.min_confidence:g} cannot be scored: "
                 "pass --min-confidence 0")
    scoring = Scoring.dna()
    payload = {"machine": machine(), "date": str(date.today()), "model": args.model, "split": args.split,
               "identity_weight": aligner.identity_weight, "identity_min": aligner.identity_min,
               "identity_gaps": aligner.identity_gaps,
               "lengths": list(args.lengths), "indels": args.indels, "threshold": aligner.min_confidence,
               "end_trims": trims, "end_trim_confidence": args.end_trim_confidence, "rows": {}}
    model_seconds = [0.0, 0]
    print(f"{args.model} (threshold {aligner.min_confidence}): windows of {args.lengths[0]}-{args.lengths[1]} bp of "
          f"the {args.split} genera, unrelated DNA on both sides, indels {args.indels} per base, {args.pairs} pairs a "
          "row")
    if args.reference:  # a real DNA family: what the confidences say of its pairs
        from sinkalign.align.evaluate import load_reference_set

        pairs = load_reference_set(args.reference, max_pairs=args.reference_pairs)
        t0 = time.perf_counter()
        results = list(aligner.align_many([(p.query_id, p.query_seq, p.target_id, p.target_seq) for p in pairs]))
        model_seconds[0] += time.perf_counter() - t0
        model_seconds[1] += len(results)
        ref = model_row(results, [p.pairs for p in pairs], [((0, len(p.query_seq)), (0, len(p.target_seq)))
                                                             for p in pairs])
        payload["reference"] = {"path": str(args.reference), "pairs": len(pairs), **ref}
        print(f"{args.reference} ({len(pairs)} pairs): P / R / F1 {ref['precision']:.3f} / {ref['recall']:.3f} / "
              f"{ref['f1']:.3f}, mean confidence {ref['mean_confidence']:.3f} vs precision {ref['precision']:.3f}, "
              f"right / wrong {ref['conf_right']:.2f} / {ref['conf_wrong']:.2f}")
        for t in thresholds:  # the columns a threshold t keeps
            kept = [r.alignment.pairs[r.alignment.match_posterior >= t] for r in results]
            at = micro_average([pair_scores(k, p.pairs) for k, p in zip(kept, pairs)])
            payload["reference"][f"model@{t:g}"] = at
            print(f"  at threshold {t:g}: P / R / F1 {at['precision']:.4f} / {at['recall']:.4f} / {at['f1']:.4f}")
        for x in trims:  # the columns the end trim at drop x keeps
            at = micro_average([pair_scores(k, p.pairs) for k, p in zip(trimmed(results, x), pairs)])
            payload["reference"][f"trim@{x:g}"] = at
            print(f"  end trim X={x:g}: P / R / F1 {at['precision']:.4f} / {at['recall']:.4f} / {at['f1']:.4f}")
    print("| flank <= | substitutions | model P / R / F1 | columns in the flanks | confidence right / wrong | "
          "mean confidence vs precision | SW P / R / F1 | NW P / R / F1 |")
    print("|---|---|---|---|---|---|---|---|")
    for f_index, flank in enumerate(flanks):
        for k, sub in enumerate(args.substitutions):
            rng = np.random.default_rng([f_index, k, 7])
            jobs, truth, cores = cases(per_genome, flank, args.pairs, args.lengths, sub, args.indels, rng)
            t0 = time.perf_counter()
            results = list(aligner.align_many(jobs))
            model_seconds[0] += time.perf_counter() - t0
            model_seconds[1] += len(results)
            row = {"model": model_row(results, truth, cores)}
            for x in trims:  # the columns the end trim at drop x keeps
                row[f"trim@{x:g}"] = micro_average([pair_scores(p, tr) for p, tr in zip(trimmed(results, x), truth)])
            for t in thresholds:  # the columns a threshold t keeps: those of confidence >= t
                kept = [r.alignment.pairs[r.alignment.match_posterior >= t] for r in results]
                row[f"model@{t:g}"] = micro_average([pair_scores(p, tr) for p, tr in zip(kept, truth)])
            for method in ("sw", "nw"):
                preds = [align_pair(q, t, method, scoring=scoring).pairs for _, q, _, t in jobs]
                row[method.upper()] = micro_average([pair_scores(p, t) for p, t in zip(preds, truth)])
            payload["rows"][f"F={flank:g}, sub={sub:g}"] = row
            m = row["model"]

            def prf(r):
                return f"{r['precision']:.3f} / {r['recall']:.3f} / {r['f1']:.3f}"

            print(f"| {flank:g} | {sub:g} | {prf(m)} | {m['flank_share']:.3f} | {m['conf_right']:.2f} / "
                  f"{m['conf_wrong']:.2f} | {m['mean_confidence']:.3f} vs {m['precision']:.3f} | {prf(row['SW'])} | "
                  f"{prf(row['NW'])} |", flush=True)
    if thresholds:
        print("| threshold | pooled P / R / F1 over every row |")
        print("|---|---|")
        pooled = {}
        for t in [aligner.min_confidence, *thresholds]:
            rows = [r["model" if t == aligner.min_confidence else f"model@{t:g}"] for r in payload["rows"].values()]
            tp, n_pred, n_true = (sum(r[k] for r in rows) for k in ("tp", "n_pred", "n_ref"))
            pooled[t] = {"precision": tp / max(n_pred, 1), "recall": tp / max(n_true, 1)}
            p_, r_ = pooled[t]["precision"], pooled[t]["recall"]
            pooled[t]["f1"] = 2 * p_ * r_ / max(p_ + r_, 1e-12)
            print(f"| {t:g} | {p_:.4f} / {r_:.4f} / {pooled[t]['f1']:.4f} |")
        payload["pooled"] = {f"{t:g}": v for t, v in pooled.items()}
    if trims:
        print(f"| flank <= | substitutions | model F1 (threshold {aligner.min_confidence:g}) | "
              + " | ".join(f"trim X={x:g}" for x in trims) + " | NW | SW |")
        print("|---|---|---|" + "---|" * len(trims) + "---|---|")
        for key, row in payload["rows"].items():
            flank, sub = (v.split("=")[1] for v in key.split(", "))
            print(f"| {flank} | {sub} | {row['model']['f1']:.4f} | "
                  + " | ".join(f"{row[f'trim@{x:g}']['f1']:.4f}" for x in trims)
                  + f" | {row['NW']['f1']:.4f} | {row['SW']['f1']:.4f} |")
        pooled = {}
        for name in ["model", *(f"trim@{x:g}" for x in trims)]:
            rows = [r[name] for r in payload["rows"].values()]
            tp, n_pred, n_true = (sum(r[k] for r in rows) for k in ("tp", "n_pred", "n_ref"))
            p_, r_ = tp / max(n_pred, 1), tp / max(n_true, 1)
            pooled[name] = {"precision": p_, "recall": r_, "f1": 2 * p_ * r_ / max(p_ + r_, 1e-12)}
        print("| pooled | | " + " | ".join(f"{pooled[n]['f1']:.4f}" for n in pooled) + " | | |")
        payload["pooled_trims"] = pooled
        payload["seconds_per_pair"] = {"model": model_seconds[0] / max(model_seconds[1], 1),
                                       "end_trim": trim_seconds[0] / max(trim_seconds[1], 1)}
        print(f"seconds per pair: model {payload['seconds_per_pair']['model']:.4f}, end trim alone "
              f"{payload['seconds_per_pair']['end_trim']:.2e}")
    if args.json:
        write_json(args.json, payload)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
