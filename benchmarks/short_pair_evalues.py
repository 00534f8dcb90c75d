"""E-values of short unrelated pairs and of runs of N: with the null's floor and without, same run.

For each shipped protein model (``--models``) and each length of ``--lengths``, it draws
``--pairs`` pairs of unrelated random peptides (uniform residues, seeded) and aligns them;
each pair's statistic is then read against the model's null twice: as shipped (pairs shorter
than the null's shortest are scored against the null at that size, ``min_log_mn``) and with the
floor removed (the fitted law extrapolated to their size, as before 2026-11-29). Unrelated
pairs should fall below ``E = t`` about ``1 - exp(-t)`` of the time or less (about 1% at 0.01).

The DNA model is read on pairs that hold runs of ``N`` (an assembly gap): ``N`` against ``N``,
and a 20-base window of a random sequence with a run of ``N`` before it against another such
window, with the DNA statistic as now (``N`` scoring -2) and with ``N`` scored as a match (+2,
before), each against the shipped null.

    python benchmarks/short_pair_evalues.py --lengths 3 5 8 12 20 30 50 --pairs 200
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
from pathlib import Path

import numpy as np
from _common import machine, write_json

from sinkalign.align.aligner import Aligner
from sinkalign.align.baselines import Scoring, local_score
from sinkalign.align.calibration import _baseline_letters
from sinkalign.align.significance import composition_lambda

RESULTS = Path(__file__).resolve().parent / "results" / "short_pair_evalues.json"
PROTEIN = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
DNA = np.array(list("ACGT"))


def protein_rows(models, lengths, n_pairs, seed, thresholds):
    rows = []
    for name in models:
        aligner = Aligner.load(name)
        sig = aligner.significance
        free = dataclasses.replace(sig, min_log_mn=None)
        rng = np.random.default_rng(seed)
        for length in lengths:
            pairs = [("".join(rng.choice(PROTEIN, length)), "".join(rng.choice(PROTEIN, length)))
                     for _ in range(n_pairs)]
            res = list(aligner.align_many([(f"q{k}", a, f"t{k}", b) for k, (a, b) in enumerate(pairs)]))
            floor = np.array([r.log_evalue for r in res])
            # the same statistic against the law extrapolated below the floor: shift by the
            # difference of the two laws' log E at these lengths (the statistic is the pair's own)
            x = np.log(float(length) * length)
            xf = max(x, sig.min_log_mn)
            stat = sig.location[0] + sig.location[1] * xf - floor * np.exp(sig.scale[0] + sig.scale[1] * xf)
            extrap = -(stat - free.location[0] - free.location[1] * x) / np.exp(free.scale[0] + free.scale[1] * x)
            row = {"model": name, "length": length, "pairs": n_pairs, "min_log_mn": sig.min_log_mn,
                   "median_E_floor": float(np.exp(np.median(floor))),
                   "median_E_extrapolated": float(np.exp(np.median(extrap)))}
            for t in thresholds:
                row[f"below_{t:g}_floor"] = float(np.mean(floor <= np.log(t)))
                row[f"below_{t:g}_extrapolated"] = float(np.mean(extrap <= np.log(t)))
            rows.append(row)
    return rows


def dna_rows(n_pairs, seed):
    aligner = Aligner.load("dna")
    sig = aligner.significance
    rng = np.random.default_rng(seed)
    now = Scoring.dna()

    def log_e(a, b, n_as_match):
        qa, tb = _baseline_letters(a, "dna"), _baseline_letters(b, "dna")
        if n_as_match:  # the statistic as it was: N a letter like the others (+2 on N, -3 on a base)
            import parasail

            old = parasail.matrix_create("ACGTN", now.match, now.mismatch)
            score = max(float(parasail.sw_striped_32(qa, tb, now.gap_open, now.gap_extend, old).score), 0.0)
        else:
            score = local_score(qa, tb, scoring=now)
        stat = score * composition_lambda(qa, tb, kind="dna")
        return float(sig.log_evalue([stat, 0.0], len(a), len(b)))

    rows = []
    cases = {"N x100 against N x100": [("N" * 100, "N" * 100)],
             "N x400 + 20 random bases, twice": [
                 ("N" * 400 + "".join(rng.choice(DNA, 20)), "N" * 400 + "".join(rng.choice(DNA, 20)))
                 for _ in range(n_pairs)]}
    for name, pairs in cases.items():
        now_e = np.array([log_e(a, b, False) for a, b in pairs])
        before_e = np.array([log_e(a, b, True) for a, b in pairs])
        reported = np.array([r.log_evalue for r in aligner.align_many(
            [(f"q{k}", a, f"t{k}", b) for k, (a, b) in enumerate(pairs)], strand="plus")])
        rows.append({"case": name, "pairs": len(pairs), "median_log10_E_now": float(np.median(now_e) / np.log(10)),
                     "median_log10_E_N_as_match": float(np.median(before_e) / np.log(10)),
                     "median_log10_E_reported": float(np.median(reported) / np.log(10)),
                     "below_0.01_now": float(np.mean(now_e <= np.log(0.01))),
                     "below_0.01_N_as_match": float(np.mean(before_e <= np.log(0.01)))})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["learned", "blosum"])
    ap.add_argument("--lengths", nargs="+", type=int, default=[3, 5, 8, 12, 20, 30, 50])
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--dna-pairs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=RESULTS)
    args = ap.parse_args()
    thresholds = (0.01, 0.1)
    prot = protein_rows(args.models, args.lengths, args.pairs, args.seed, thresholds)
    print("| model | length | below 0.01 (floor) | below 0.01 (extrapolated) | below 0.1 (floor) | "
          "below 0.1 (extrapolated) | median E (floor) | median E (extrapolated) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in prot:
        print(f"| {r['model']} | {r['length']} | {r['below_0.01_floor']:.1%} | {r['below_0.01_extrapolated']:.1%} | "
              f"{r['below_0.1_floor']:.1%} | {r['below_0.1_extrapolated']:.1%} | {r['median_E_floor']:.3g} | "
              f"{r['median_E_extrapolated']:.3g} |")
    dna = dna_rows(args.dna_pairs, args.seed)
    print("\n| DNA case | pairs | median log10 E, N = -2 (now) | median log10 E, N a match (before) | "
          "reported | below 0.01 now | below 0.01 before |")
    print("|---|---|---|---|---|---|---|")
    for r in dna:
        print(f"| {r['case']} | {r['pairs']} | {r['median_log10_E_now']:.1f} | {r['median_log10_E_N_as_match']:.1f} | "
              f"{r['median_log10_E_reported']:.1f} | {r['below_0.01_now']:.0%} | {r['below_0.01_N_as_match']:.0%} |")
    write_json(args.json, {"benchmark": "short_pair_evalues", "machine": machine(),
                           "date": datetime.date.today().isoformat(), "args": {k: str(v) if isinstance(v, Path) else v
                                                                               for k, v in vars(args).items()},
                           "protein": prot, "dna": dna})


if __name__ == "__main__":
    main()
