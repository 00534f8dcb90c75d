"""Both strands with the shipped DNA model: what `--strand both` finds, what it costs, and
whether its doubled E-values stay calibrated.

Three sets, aligned with `--strand plus`, `minus` and `both` in one process:

* homologs with a known alignment: real windows of the held-out genera (``--lengths``), each
  evolved into a copy (``--substitutions`` per base, an insertion and a deletion each with
  probability ``--indels`` per base, geometric lengths of mean 2), aligned as given and with the
  copy reverse-complemented: the share found at ``E <= 1e-3`` and the F1 of the kept strand's
  pairs against the true ones (read back onto the copy as given for the turned pairs; a pair
  kept on the wrong strand recovers nothing);
* the Dfam MADE1 pairs (the DNA model's own training family, so not held out), the same way.
  MADE1 is a MITE: its two terminal inverted repeats make each copy align to the reverse
  complement of another nearly as well as to it, so which strand wins is close to a coin toss
  on part of the pairs;
* real, unshuffled windows of two different held-out genera (unrelated DNA; as
  ``homology_evalues_dna.py`` draws them): the share with ``E <= t`` against the expected
  ``1 - exp(-t)``, per strand and for both (twice the smaller of the two E-values);
* the wall time of each mode on the MADE1 pairs, best of ``--repeats``.

    python benchmarks/dna_strands.py

Tables to stdout, everything to ``benchmarks/results/dna_strands_<split>.json``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from _common import machine
from homology_evalues import THRESHOLDS, save_result
from homology_evalues_dna import SHARED, contigs, cross_genome_windows, genomes

from sinkalign.align.aligner import Aligner
from sinkalign.align.evaluate import load_reference_set
from sinkalign.align.metrics import core_pair_scores, micro_average
from sinkalign.alignment import reverse_complement

RESULTS = Path(__file__).resolve().parent / "results"
MODES = ("plus", "minus", "both")


def run(aligner, jobs, strand):
    return list(aligner.align_many(jobs, strand=strand))


def recovered(results, refs, turned: bool) -> dict:
    """Precision / recall / F1 of the kept strands' pairs against the references, with a
    minus-strand result's pairs read back onto the target as given when the target was turned."""
    preds = []
    for res, ref in zip(results, refs):
        pairs = res.pairs
        m, n = len(res.query), len(res.target)
        if res.strand == "-" and turned:  # rc(q)[i] ~ rc(t0)[j]  <=>  q[m-1-i] ~ t0[n-1-j]
            pairs = np.stack([m - 1 - pairs[::-1, 0], n - 1 - pairs[::-1, 1]], 1)
        elif res.strand == "-" or turned:  # the wrong strand for this reference: nothing right
            pairs = np.zeros((0, 2), dtype=np.int64)
        preds.append(pairs)
    return micro_average([core_pair_scores(p, r) for p, r in zip(preds, refs)])


def evolve(seq: str, rng, sub: float, indel: float) -> tuple[str, np.ndarray]:
    """A mutated copy of ``seq`` and the true alignment ``[k, 2]`` of ``seq`` to it."""
    out, pairs, j = [], [], 0
    for i, base in enumerate(seq):
        if rng.random() < indel:  # an insertion in the copy before this base
            extra = "".join(rng.choice(list("ACGT"), rng.geometric(0.5)))
            out.append(extra)
            j += len(extra)
        if rng.random() < indel:  # this base deleted (a run: geometric length)
            continue
        out.append(rng.choice([b for b in "ACGT" if b != base.upper()]) if rng.random() < sub else base)
        pairs.append((i, j))
        j += 1
    return "".join(out), np.array(pairs, dtype=np.int64).reshape(-1, 2)


def homolog_rows(aligner, label: str, jobs: list, refs: list, table: dict) -> None:
    """The two rows (as given, reverse-complemented) of one homolog set."""
    turned_jobs = [(q, a, t, reverse_complement(b)) for q, a, t, b in jobs]
    for name, js, is_turned in (("as given", jobs, False), ("reverse-complemented", turned_jobs, True)):
        row = {}
        for mode in MODES:
            res = run(aligner, js, mode)
            e = np.array([r.evalue for r in res])
            row[mode] = {"found_1e-3": float(np.mean(e <= 1e-3)), **recovered(res, refs, is_turned),
                         "minus_kept": float(np.mean([r.strand == "-" for r in res]))}
        table[f"{label}, {name}"] = row
        print(f"| {label} | {name} | "
              + " | ".join(f"{row[m]['found_1e-3']:.3f} / {row[m]['f1']:.3f}" for m in MODES) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="dna")
    ap.add_argument("--split", default="valid", choices=["valid", "test"], help="held-out genera")
    ap.add_argument("--held-pairs", type=int, default=4000)
    ap.add_argument("--lengths", type=int, nargs=2, default=(50, 1000))
    ap.add_argument("--homologs", type=int, default=1000)
    ap.add_argument("--substitutions", type=float, default=0.2)
    ap.add_argument("--indels", type=float, default=0.02)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    aligner = Aligner.load(args.model)
    result = {"machine": machine(), "model": args.model, "split": args.split, "lengths": list(args.lengths)}

    held = contigs(genomes(args.split))
    lo, hi = args.lengths
    rng = np.random.default_rng(3)
    windows = cross_genome_windows(held, args.homologs, lo, hi, seed=4)
    evolved = [evolve(a, rng, args.substitutions, args.indels) for a, _ in windows]
    sim_jobs = [(f"w{k}", a, f"w{k}_copy", copy) for k, ((a, _), (copy, _)) in enumerate(zip(windows, evolved))]
    made1 = load_reference_set(SHARED / "pfam_seed" / "MADE1_dfam_dna.sto")
    given = [(p.query_id, p.query_seq, p.target_id, p.target_seq) for p in made1]
    print("Homologs: found at E <= 1e-3 / F1 against the true alignment, per --strand")
    print("| set | targets | " + " | ".join(MODES) + " |")
    print("|---|---|" + "---|" * len(MODES))
    result["homologs"] = {"evolved": {"pairs": len(sim_jobs), "substitutions": args.substitutions,
                                      "indels": args.indels}, "made1": {"pairs": len(given)}, "rows": {}}
    homolog_rows(aligner, f"evolved held-out windows ({len(sim_jobs)})", sim_jobs, [p for _, p in evolved],
                 result["homologs"]["rows"])
    homolog_rows(aligner, f"MADE1 ({len(given)})", given, made1, result["homologs"]["rows"])

    items = cross_genome_windows(held, args.held_pairs, lo, hi, seed=2)
    jobs = [(f"q{k}", a, f"t{k}", b) for k, (a, b) in enumerate(items)]
    evalues = {mode: np.array([r.evalue for r in run(aligner, jobs, mode)]) for mode in MODES}
    result["real_windows"] = {"pairs": len(items), "thresholds": list(THRESHOLDS), "share": {}}
    print(f"\nReal windows of two different held-out genera ({len(items)} pairs, {lo}-{hi} bp): share with E <= t")
    print("| strand | " + " | ".join(f"t={t:g}" for t in THRESHOLDS) + " |")
    print("|---|" + "---|" * len(THRESHOLDS))
    print("| expected | " + " | ".join(f"{-np.expm1(-t):.2g}" for t in THRESHOLDS) + " |")
    rows = {**evalues, "both, undoubled": evalues["both"] / 2}
    for mode, e in rows.items():
        share = [float(np.mean(e <= t)) for t in THRESHOLDS]
        result["real_windows"]["share"][mode] = share
        print(f"| {mode} | " + " | ".join(f"{v:.4f}" for v in share) + " |")
    both_is_min = bool(np.allclose(evalues["both"], 2 * np.minimum(evalues["plus"], evalues["minus"]), rtol=1e-12))
    result["real_windows"]["both_is_twice_the_smaller"] = both_is_min

    times = {}
    for mode in MODES:
        best = float("inf")
        for _ in range(args.repeats):
            t1 = time.perf_counter()
            run(aligner, given, mode)
            best = min(best, time.perf_counter() - t1)
        times[mode] = {"seconds": best, "pairs_per_s": len(given) / best}
    result["time_made1"] = times
    print(f"\nWall time on the {len(given)} MADE1 pairs (best of {args.repeats}): "
          + ", ".join(f"{m} {v['pairs_per_s']:.0f} pairs/s" for m, v in times.items())
          + f"; both / plus = {times['both']['seconds'] / times['plus']['seconds']:.2f}x")
    save_result(result, t0, Path(args.out) if args.out else RESULTS / f"dna_strands_{args.split}.json")


if __name__ == "__main__":
    main()
