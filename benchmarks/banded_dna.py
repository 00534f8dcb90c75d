"""Long DNA pairs: the shipped DNA model's dense plans against its default (a corridor past 1024 x 1024).

There are no long DNA reference alignments at hand (the Dfam MADE1 pairs are ~78 bp), so the
homologs are simulated as in ``dna_strands.py``: real windows of the held-out genera
(``--lengths``), each evolved into a copy with a known alignment (``--substitutions`` per base,
insertions and deletions each with probability ``--indels`` per base, geometric lengths of mean 2),
at each substitution rate of ``--substitutions``. Aligned on the plus strand (the copy as made)
densely (``band="dense"``) and as the default aligner does, one thread each, in one process; with
Needleman-Wunsch and Smith-Waterman (parasail, +2/-3, open 5 / extend 2) on the same pairs. Printed:
precision / recall / F1 against the true alignment at the model's threshold, the share found at
E <= 1e-3, seconds per pair; and, for real windows of two different held-out genera (unrelated
DNA), the share with E <= 0.01 / 0.1 / 1 (calibrated: about 0.010 / 0.095 / 0.63).

    python benchmarks/banded_dna.py --json benchmarks/results/banded_dna_valid.json
"""

from __future__ import annotations

import argparse
import time
from datetime import date

import numpy as np
from _common import machine, write_json
from dna_strands import evolve
from homology_evalues_dna import contigs, cross_genome_windows, genomes

from sinkalign.align.aligner import AUTO_BAND_CELLS, Aligner
from sinkalign.align.baselines import Scoring, align_pair
from sinkalign.align.metrics import micro_average, pair_scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="dna")
    ap.add_argument("--split", default="valid", choices=["valid"], help="held-out genera (choose on valid)")
    ap.add_argument("--lengths", type=int, nargs=2, default=(1200, 3000))
    ap.add_argument("--pairs", type=int, default=40, help="homologs per substitution rate")
    ap.add_argument("--substitutions", type=float, nargs="+", default=[0.1, 0.25, 0.4])
    ap.add_argument("--indels", type=float, default=0.02)
    ap.add_argument("--unrelated", type=int, default=100)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    held = contigs(genomes(args.split))
    lo, hi = args.lengths
    aligners = {"dense": Aligner.load(args.model, workers=1, band="dense", strand="plus"),
                "default": Aligner.load(args.model, workers=1, strand="plus")}
    threshold = aligners["default"].min_confidence
    scoring = Scoring.dna()
    payload = {"machine": machine(), "date": str(date.today()), "model": args.model, "split": args.split,
               "lengths": [lo, hi], "indels": args.indels, "threshold": threshold, "homologs": {}}
    print(f"{args.model}: windows of {lo}-{hi} bp of the {args.split} genera, indels {args.indels} per base")
    print("| substitutions | pairs (banded by default) | method | s / pair | found E <= 1e-3 | P / R / F1 |")
    print("|---|---|---|---|---|---|")
    for k, sub in enumerate(args.substitutions):
        rng = np.random.default_rng(10 + k)
        windows = cross_genome_windows(held, args.pairs, lo, hi, seed=20 + k)
        evolved = [evolve(a, rng, sub, args.indels) for a, _ in windows]
        jobs = [(f"w{i}", a, f"w{i}_copy", copy) for i, ((a, _), (copy, _)) in enumerate(zip(windows, evolved))]
        truth = [pairs for _, pairs in evolved]
        banded = sum(len(a) * len(c) > AUTO_BAND_CELLS for _, a, _, c in jobs)
        rows = {}
        for name, aligner in aligners.items():
            t0 = time.perf_counter()
            res = list(aligner.align_many(jobs))
            secs = (time.perf_counter() - t0) / len(jobs)
            scores = micro_average([pair_scores(r.pairs, t) for r, t in zip(res, truth)])
            found = float(np.mean([r.evalue <= 1e-3 for r in res]))
            rows[name] = {"sec_per_pair": secs, "found_1e-3": found, **scores}
        for method in ("nw", "sw"):
            t0 = time.perf_counter()
            preds = [align_pair(a, c, method, scoring=scoring).pairs for _, a, _, c in jobs]
            rows[method.upper()] = {"sec_per_pair": (time.perf_counter() - t0) / len(jobs),
                                    **micro_average([pair_scores(p, t) for p, t in zip(preds, truth)])}
        payload["homologs"][f"{sub:g}"] = {"pairs": len(jobs), "banded_by_default": banded, "rows": rows}
        for name, row in rows.items():
            found = f"{row['found_1e-3']:.3f}" if "found_1e-3" in row else "-"
            print(f"| {sub:g} | {len(jobs)} ({banded}) | {name} | {row['sec_per_pair']:.3f} | {found} | "
                  f"{row['precision']:.3f} / {row['recall']:.3f} / {row['f1']:.3f} |")
    items = cross_genome_windows(held, args.unrelated, lo, hi, seed=2)
    jobs = [(f"q{i}", a, f"t{i}", b) for i, (a, b) in enumerate(items)]
    payload["unrelated"] = {"pairs": len(jobs)}
    print(f"\nUnrelated: real windows of two different {args.split} genera ({len(jobs)} pairs, {lo}-{hi} bp), "
          "share with E <= 0.01 / 0.1 / 1 (calibrated: 0.010 / 0.095 / 0.63)")
    for name, aligner in aligners.items():
        e = np.array([r.evalue for r in aligner.align_many(jobs)])
        payload["unrelated"][name] = {f"E<={t:g}": float((e <= t).mean()) for t in (0.01, 0.1, 1.0)}
        print(f"| {name} | " + " / ".join(f"{v:.3f}" for v in payload["unrelated"][name].values()) + " |")
    if args.json:
        write_json(args.json, payload)


if __name__ == "__main__":
    main()
