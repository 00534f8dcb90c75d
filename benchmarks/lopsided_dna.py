"""Lopsided DNA pairs: a gene-sized window against a stretch of its contig R times longer.

There are no reference alignments of DNA at these lengths at hand, so the homologs are simulated
as in ``dna_strands.py``: a real window of ``--lengths`` bp from a contig of the held-out genera
is evolved into a copy with a known alignment (``--substitutions`` per base, insertions and
deletions each with probability ``--indels`` per base, geometric lengths of mean 2); the query is
the copy, the target the contig's stretch ``R`` times the window's length with the window in its
middle (real flanking DNA, not random letters). Aligned on the plus strand by the shipped DNA
model as it does by default (a pair with one side at least ``LOPSIDED_RATIO`` times the other
solved in the box around its Smith-Waterman hit), as before session 17 (no box:
``LOPSIDED_RATIO`` set to infinity) and densely (``band="dense"``), with Smith-Waterman and
Needleman-Wunsch (parasail, +2/-3, open 5 / extend 2), all in one process on the same pairs.
Printed: precision / recall / F1 against the true alignment at the model's threshold and the
share found at E <= 1e-3, per ratio and substitution rate.

    python benchmarks/lopsided_dna.py --json benchmarks/results/lopsided_dna_valid.json
"""

from __future__ import annotations

import argparse
from datetime import date

import numpy as np
from _common import machine, write_json
from dna_strands import evolve
from homology_evalues_dna import contigs, genomes
from lopsided_pairs import no_box

import sinkalign.align.aligner as A
from sinkalign.align.aligner import Aligner
from sinkalign.align.baselines import Scoring, align_pair
from sinkalign.align.metrics import micro_average, pair_scores


def cases(held: list[str], ratio: int, n: int, lengths, sub: float, indels: float, rng) -> tuple[list, list]:
    """``n`` (query, target) jobs and their true alignments."""
    jobs, truth = [], []
    for k in range(n):
        contig = held[int(rng.integers(len(held)))]
        length = int(rng.integers(lengths[0], lengths[1] + 1))
        extra = (ratio - 1) * length
        start = int(rng.integers(0, len(contig) - length - extra))
        target = contig[start:start + length + extra]
        off = extra // 2
        copy, pairs = evolve(target[off:off + length], rng, sub, indels)
        jobs.append((f"copy{k}", copy, f"contig{k}", target))
        truth.append(np.ascontiguousarray(pairs[:, ::-1]) + np.array([0, off]))
    return jobs, truth


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="dna")
    ap.add_argument("--split", default="valid", choices=["valid"], help="held-out genera (choose on valid)")
    ap.add_argument("--ratios", default="1,2,4,16", help="target length / window length (1: the window alone)")
    ap.add_argument("--lengths", type=int, nargs=2, default=(200, 400), help="window lengths, bp")
    ap.add_argument("--pairs", type=int, default=40, help="windows per ratio and substitution rate")
    ap.add_argument("--substitutions", type=float, nargs="+", default=[0.1, 0.25, 0.4])
    ap.add_argument("--indels", type=float, default=0.02)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    ratios = [int(r) for r in args.ratios.split(",")]
    held = [c for genome in contigs(genomes(args.split)) for c in genome
            if len(c) > max(ratios) * args.lengths[1] * 4]
    aligners = {"default": Aligner.load(args.model, strand="plus"),
                "dense": Aligner.load(args.model, strand="plus", band="dense")}
    scoring = Scoring.dna()
    payload = {"machine": machine(), "date": str(date.today()), "model": args.model, "split": args.split,
               "lengths": list(args.lengths), "indels": args.indels, "lopsided_ratio": A.LOPSIDED_RATIO,
               "box_margin": A.BOX_MARGIN, "threshold": aligners["default"].min_confidence, "rows": {}}
    print(f"{args.model}: windows of {args.lengths[0]}-{args.lengths[1]} bp of the {args.split} genera in their "
          f"contigs, indels {args.indels} per base, {args.pairs} pairs a row")
    print("| ratio | substitutions | default P / R / F1 (E <= 1e-3) | no box, session 16 | dense | SW F1 | NW F1 |")
    print("|---|---|---|---|---|---|---|")
    for ratio in ratios:
        for k, sub in enumerate(args.substitutions):
            rng = np.random.default_rng([ratio, k])
            jobs, truth = cases(held, ratio, args.pairs, args.lengths, sub, args.indels, rng)
            row = {}
            for name in ("default", "no box", "dense"):
                aligner = aligners["dense" if name == "dense" else "default"]
                if name == "no box":
                    with no_box():
                        res = list(aligner.align_many(jobs))
                else:
                    res = list(aligner.align_many(jobs))
                row[name] = {"found_1e-3": float(np.mean([r.evalue <= 1e-3 for r in res])),
                             **micro_average([pair_scores(r.alignment.pairs, t) for r, t in zip(res, truth)])}
            for method in ("sw", "nw"):
                preds = [align_pair(q, t, method, scoring=scoring).pairs for _, q, _, t in jobs]
                row[method.upper()] = micro_average([pair_scores(p, t) for p, t in zip(preds, truth)])
            payload["rows"][f"R={ratio}, sub={sub:g}"] = row

            def cell(r):
                return f"{r['precision']:.3f} / {r['recall']:.3f} / {r['f1']:.3f} ({r['found_1e-3']:.2f})"

            print(f"| {ratio} | {sub:g} | {cell(row['default'])} | {cell(row['no box'])} | {cell(row['dense'])} | "
                  f"{row['SW']['f1']:.3f} | {row['NW']['f1']:.3f} |", flush=True)
    if args.json:
        write_json(args.json, payload)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
