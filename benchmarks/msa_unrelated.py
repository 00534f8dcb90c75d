"""Which records of a family does ``sinkalign msa`` call unrelated, and does it catch intruders?

``sinkalign msa`` warns about a record whose E-value against every other record is at least
``UNRELATED_EVALUE`` (:func:`sinkalign.align.msa.unrelated_records`): it has no likely homolog
among them. For every structure-based family of the split with ``--min-seqs`` to ``--max-seqs``
sequences (``msa_families.families``): its members' smallest E-values against the rest (a
member flagged is a false alarm), and one intruder per family, a sequence of another family of
the split drawn at random (seeded), against the members (an intruder flagged is caught). Shares
at each threshold of ``--thresholds``, per source.

    python benchmarks/msa_unrelated.py --split valid --json benchmarks/results/msa_unrelated_valid.json
"""

from __future__ import annotations

import argparse
import datetime

import numpy as np
from _common import machine, write_json
from msa_families import families

from sinkalign.align.aligner import Aligner
from sinkalign.align.msa import UNRELATED_EVALUE, unrelated_records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=("valid", "test"), default="valid")
    ap.add_argument("--min-seqs", type=int, default=3)
    ap.add_argument("--max-seqs", type=int, default=40)
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.01, 0.03, UNRELATED_EVALUE, 0.3, 1.0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    fams = families(args.split, ("homstrad", "sabre", "oxbench"), args.min_seqs, args.max_seqs)
    seqs_of = [[r.replace("-", "").replace(".", "").upper() for r in msa.rows] for _, msa in fams]
    aligner = Aligner.load("learned")
    members, intruders = [], []  # (source, smallest E-value)
    for f, (source, _) in enumerate(fams):
        seqs = seqs_of[f]
        other = int(rng.choice([g for g in range(len(fams)) if g != f]))
        seqs = seqs + [seqs_of[other][int(rng.integers(len(seqs_of[other])))]]
        n = len(seqs)
        pairs = [(x, y) for x in range(n) for y in range(x + 1, n)]
        res = aligner.align_many([(str(x), seqs[x], str(y), seqs[y]) for x, y in pairs])
        evalues = {p: r.evalue for p, r in zip(pairs, res)}
        family = {p: e for p, e in evalues.items() if p[1] < n - 1}
        best = {k: e for k, e, _ in unrelated_records(n - 1, family, threshold=0.0)}
        members += [(source, best[k]) for k in range(n - 1)]
        intruders.append((source, min(e for (x, y), e in evalues.items() if y == n - 1)))
    rows = []
    for group in ("all", "homstrad", "sabre", "oxbench"):
        mine = [e for s, e in members if group in ("all", s)]
        caught = [e for s, e in intruders if group in ("all", s)]
        for t in args.thresholds:
            rows.append({"group": group, "threshold": t, "members": len(mine),
                         "members_flagged": float(np.mean([e >= t for e in mine])) if mine else None,
                         "intruders": len(caught),
                         "intruders_flagged": float(np.mean([e >= t for e in caught])) if caught else None})
    print(f"{len(fams)} families ({args.split}); share flagged (E-value against every other record >= threshold)")
    print("| group | threshold | members flagged (false alarms) | intruders flagged (caught) |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['group']} | {r['threshold']:g} | {r['members_flagged']:.3f} ({r['members']}) | "
              f"{r['intruders_flagged']:.3f} ({r['intruders']}) |")
    if args.json:
        write_json(args.json, {"benchmark": "msa_unrelated", "machine": machine(),
                               "date": datetime.date.today().isoformat(), "args": vars(args), "rows": rows,
                               "members": members, "intruders": intruders})


if __name__ == "__main__":
    main()
