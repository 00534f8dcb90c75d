"""Which records of a family does ``sinkalign msa`` call unrelated, and does it catch intruders?

``sinkalign msa`` warns about a record whose smallest E-value against the others, times their
number (the E-value of a search of the others for it), is at least ``UNRELATED_EVALUE``
(:func:`sinkalign.align.msa.unrelated_records`): it has no likely homolog among them. Until
2026-11-29 the rule was the smallest E-value per comparison at least 0.1 (``per comparison``,
printed beside it).

For every structure-based family of the split with ``--min-seqs`` to ``--max-seqs`` sequences
(``msa_families.families``): its members' smallest E-values against the rest (a member flagged
is a false alarm), and one intruder per family, a sequence of another family of the split drawn
at random (seeded), against the members (an intruder flagged is caught); and sets of
``--random`` random proteins, every record unrelated, which show what each rule does with the
number of records. Shares at each threshold of ``--thresholds``, per source and family size.

    python benchmarks/msa_unrelated.py --split valid --json benchmarks/results/msa_unrelated_valid_search.json
"""

from __future__ import annotations

import argparse
import datetime

import numpy as np
from _common import machine, write_json
from msa_families import families

from sinkalign.align.aligner import Aligner
from sinkalign.align.msa import UNRELATED_EVALUE, is_unrelated, unrelated_records

SIZES = ((3, 5), (6, 10), (11, 40))


def shares(records, rule: str, t: float) -> float | None:
    """Share of ``(source, smallest E-value, comparisons)`` flagged by ``rule`` at ``t``: ``per
    comparison`` (the smallest E-value >= t, the rule until 2026-11-29) or ``search`` (the
    smallest E-value times the comparisons, the E-value of a search of the others, >= t)."""
    if not records:
        return None
    return float(np.mean([is_unrelated(e, c if rule == "search" else 1, t) for _, e, c in records]))


def random_records(n: int, length: int, families: int, aligner, seed: int) -> list:
    """``families`` sets of ``n`` random proteins (background residue frequencies of
    ``Aligner``'s statistics are not assumed: uniform over the 20 amino acids), each record's
    smallest E-value against the other ``n - 1``: every one is unrelated."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(families):
        seqs = ["".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), length)) for _ in range(n)]
        pairs = [(x, y) for x in range(n) for y in range(x + 1, n)]
        res = aligner.align_many([(str(x), seqs[x], str(y), seqs[y]) for x, y in pairs])
        best = {k: e for k, e, _ in unrelated_records(n, dict(zip(pairs, (r.evalue for r in res))), threshold=0.0,
                                                       rule="per comparison")}
        out += [("random", best[k], n - 1) for k in range(n)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=("valid", "test"), default="valid")
    ap.add_argument("--min-seqs", type=int, default=3)
    ap.add_argument("--max-seqs", type=int, default=40)
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.01, 0.03, 0.1, UNRELATED_EVALUE, 1.0])
    ap.add_argument("--random", type=int, nargs="*", default=[5, 10, 40],
                    help="also sets of this many random proteins (all unrelated), 20 sets of each size")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    fams = families(args.split, ("homstrad", "sabre", "oxbench"), args.min_seqs, args.max_seqs)
    seqs_of = [[r.replace("-", "").replace(".", "").upper() for r in msa.rows] for _, msa in fams]
    aligner = Aligner.load("learned")
    members, intruders = [], []  # (source, smallest E-value, comparisons)
    for f, (source, _) in enumerate(fams):
        seqs = seqs_of[f]
        other = int(rng.choice([g for g in range(len(fams)) if g != f]))
        seqs = seqs + [seqs_of[other][int(rng.integers(len(seqs_of[other])))]]
        n = len(seqs)
        pairs = [(x, y) for x in range(n) for y in range(x + 1, n)]
        res = aligner.align_many([(str(x), seqs[x], str(y), seqs[y]) for x, y in pairs])
        evalues = {p: r.evalue for p, r in zip(pairs, res)}
        family = {p: e for p, e in evalues.items() if p[1] < n - 1}
        best = {k: e for k, e, _ in unrelated_records(n - 1, family, threshold=0.0, rule="per comparison")}
        members += [(source, best[k], n - 2) for k in range(n - 1)]
        intruders.append((source, min(e for (x, y), e in evalues.items() if y == n - 1), n - 1))
    randoms = {n: random_records(n, 200, 20, aligner, args.seed + n) for n in args.random}
    rows = []
    groups = [("all", lambda r: True)] + [(s, lambda r, s=s: r[0] == s) for s in ("homstrad", "sabre", "oxbench")]
    groups += [(f"{lo}-{hi} records", lambda r, lo=lo, hi=hi: lo <= r[2] + 1 <= hi) for lo, hi in SIZES]
    for rule in ("per comparison", "search"):
        for name, keep in groups:
            # by family size (n - 1 members): a member's comparisons are n - 2, an intruder's n - 1
            mine = [r for r in members if keep((r[0], r[1], r[2]))]
            caught = [r for r in intruders if keep((r[0], r[1], r[2] - 1))]
            for t in args.thresholds:
                rows.append({"rule": rule, "group": name, "threshold": t, "members": len(mine),
                             "members_flagged": shares(mine, rule, t), "intruders": len(caught),
                             "intruders_flagged": shares(caught, rule, t)})
        for n, recs in randoms.items():
            for t in args.thresholds:
                rows.append({"rule": rule, "group": f"random, {n} records", "threshold": t, "members": 0,
                             "members_flagged": None, "intruders": len(recs), "intruders_flagged": shares(recs, rule, t)})
    print(f"{len(fams)} families ({args.split}); share flagged (members: false alarms; intruders and random "
          "records: caught)")
    print("| rule | group | threshold | members flagged | intruders flagged |")
    print("|---|---|---|---|---|")

    def cell(share, count):
        return "-" if share is None else f"{share:.3f} ({count})"

    for r in rows:
        print(f"| {r['rule']} | {r['group']} | {r['threshold']:g} | {cell(r['members_flagged'], r['members'])} | "
              f"{cell(r['intruders_flagged'], r['intruders'])} |")
    if args.json:
        write_json(args.json, {"benchmark": "msa_unrelated", "machine": machine(),
                               "date": datetime.date.today().isoformat(), "args": vars(args), "rows": rows,
                               "members": members, "intruders": intruders,
                               "random": {str(n): recs for n, recs in randoms.items()}})


if __name__ == "__main__":
    main()
