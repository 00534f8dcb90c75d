"""End columns pulled across a long gap by the DNA model, with and without its confidence floor.

MEA keeps every column with any posterior when nothing competes for it, so without a threshold
the DNA model could align the first (or last) base or two of a copy tens of bases away from
the rest, across a long gap (``1M83D299M`` where ``1S299M`` is right). This script counts such
pulled ends on the two kinds of pair where they were seen, in one process:

- ``random``: a 500 bp random target and a copy (``--substitutions`` per base, no indels) of
  its middle 300 bp, the recipe of ``tests/test_strands.py``; seed ``s`` of ``range(--seeds)``
  draws pair ``s`` exactly as the test does.
- ``contig``: a real 700 bp slice of a contig of the chosen genera and a copy of its middle
  600 bp (the walkthrough's case); ``--seeds`` pairs from one generator.

Each pair is aligned on the plus strand with ``min_confidence=0`` (every MEA column) and with the
model's own floor. An end is *pulled* when its outermost run of at most ``--max-run`` aligned
columns is separated from the next aligned column by a gap of ``--min-gap`` or more on either
sequence. Printed: the pairs with a pulled end, the mean and largest confidence of the pulled
columns, and the pairs still pulled with the floor.

    python benchmarks/dna_end_columns.py --json benchmarks/results/dna_end_columns.json
"""

from __future__ import annotations

import argparse
from datetime import date

import numpy as np
from _common import machine, write_json
from homology_evalues_dna import contigs, genomes

from sinkalign.align.aligner import Aligner


def random_pair(seed: int, sub: float) -> tuple[str, str]:
    """As ``test_the_dna_model_leaves_near_zero_confidence_end_columns_unaligned``."""
    rng = np.random.default_rng(seed)
    target = "".join(rng.choice(list("ACGT"), 500))
    query = "".join(c if rng.random() > sub else rng.choice([x for x in "ACGT" if x != c]) for c in target[100:400])
    return query, target


def contig_pairs(per_genome: list[list[str]], n: int, sub: float, seed: int) -> list[tuple[str, str]]:
    """``n`` (copy of the middle 600 bp, 700 bp slice) pairs from real contigs."""
    rng = np.random.default_rng(seed)
    long = [c for genome in per_genome for c in genome if len(c) >= 700 and set(c) <= set("ACGT")]
    out = []
    for _ in range(n):
        contig = long[int(rng.integers(len(long)))]
        at = int(rng.integers(0, len(contig) - 700 + 1))
        target = contig[at:at + 700]
        query = "".join(c if rng.random() > sub else rng.choice([x for x in "ACGT" if x != c])
                        for c in target[50:650])
        out.append((query, target))
    return out


def pulled_ends(pairs: np.ndarray, max_run: int, min_gap: int) -> list[np.ndarray]:
    """Indices (into ``pairs``) of each pulled end's columns: at most ``max_run`` columns at
    an end, then a jump of at least ``min_gap`` in either sequence to the next column."""
    if len(pairs) <= max_run:
        return []
    jumps = np.maximum(*(np.diff(pairs, axis=0) - 1).T)  # the gap before column k + 1
    out = []
    for run in range(1, max_run + 1):
        if jumps[run - 1] >= min_gap:
            out.append(np.arange(run))
            break
    for run in range(1, max_run + 1):
        if jumps[-run] >= min_gap:
            out.append(np.arange(len(pairs) - run, len(pairs)))
            break
    return out


def measure(aligner_plain: Aligner, aligner: Aligner, jobs, max_run: int, min_gap: int) -> dict:
    pulled, confidences, still, cigars = 0, [], 0, []
    for query, target in jobs:
        plain = aligner_plain.align(query, target, strand="plus")
        aln = plain.alignment
        ends = pulled_ends(np.asarray(aln.pairs), max_run, min_gap)
        if ends:
            pulled += 1
            mine = [float(aln.match_posterior[i]) for end in ends for i in end]
            confidences.extend(mine)
            cigars.append({"cigar": plain.cigar, "pulled_confidences": mine})
        hit = aligner.align(query, target, strand="plus")
        still += bool(pulled_ends(np.asarray(hit.alignment.pairs), max_run, min_gap))
    return {"pairs": len(jobs), "pulled_without_floor": pulled, "pulled_with_floor": still,
            "pulled_confidence_mean": float(np.mean(confidences)) if confidences else None,
            "pulled_confidence_max": float(np.max(confidences)) if confidences else None,
            "pulled_columns": len(confidences), "example_cigars": cigars[:5]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=100, help="pairs of each kind (random: seeds 0 .. N-1)")
    ap.add_argument("--substitutions", type=float, default=0.1)
    ap.add_argument("--split", default="valid", choices=["train", "valid", "test"], help="genera of the contig pairs")
    ap.add_argument("--max-run", type=int, default=2, help="columns an end run may have")
    ap.add_argument("--min-gap", type=int, default=10, help="the gap that makes an end run pulled")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    plain = Aligner.load("dna", min_confidence=0.0)
    floored = Aligner.load("dna")
    jobs = {"random": [random_pair(s, args.substitutions) for s in range(args.seeds)],
            "contig": contig_pairs(contigs(genomes(args.split)), args.seeds, args.substitutions, seed=0)}
    results = {kind: measure(plain, floored, pairs, args.max_run, args.min_gap) for kind, pairs in jobs.items()}

    print(f"DNA model, floor {floored.min_confidence}; an end of <= {args.max_run} columns across a gap of "
          f">= {args.min_gap} bp; {args.substitutions:.0%} substitutions")
    print("| pairs | n | pulled, no floor | mean / max confidence of the pulled columns | pulled, floor |")
    print("|---|---|---|---|---|")
    for kind, r in results.items():
        conf = ("-" if r["pulled_confidence_mean"] is None
                else f"{r['pulled_confidence_mean']:.4f} / {r['pulled_confidence_max']:.4f}")
        print(f"| {kind} | {r['pairs']} | {r['pulled_without_floor']} | {conf} | {r['pulled_with_floor']} |")
    for kind, r in results.items():
        shown = ", ".join(f"{e['cigar']} ({' / '.join(f'{c:.4f}' for c in e['pulled_confidences'])})"
                          for e in r["example_cigars"])
        print(f"{kind}, the first pulled pairs without a floor (confidence of the pulled columns): {shown}")
    if args.json:
        write_json(args.json, {"date": str(date.today()), "machine": machine(), "args": vars(args),
                               "min_confidence": floored.min_confidence, "results": results})


if __name__ == "__main__":
    main()
