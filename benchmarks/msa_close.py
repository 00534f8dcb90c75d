"""Multiple alignments of close sequences: does ``sinkalign msa`` place their indels exactly?

Each family is one real protein of the chosen split (a structure-based family's sequence of
``--min-length`` to ``--max-length`` residues, from ``msa_families.families``; one sequence per
family, seeded) and ``--members`` - 1 variants of it: each with ``--substitutions`` per residue
(uniform, to another residue) and one indel of 1-3 residues (a deletion or an insertion of
random residues, equally likely, away from the ends), so the truth is known: two members'
residues are a true pair when they descend from one residue of the original. Every method
aligns every family; scored over every pair of members (micro precision / recall / F1 of
aligned residue pairs) and as families whose every pair is exactly the truth.

Methods: ``msa`` (``sinkalign msa`` as shipped), ``msa-plain`` (its library decoded without the
identity tie-break of close pairs: ``sinkalign msa`` before 2026-11-27), ``famsa`` (pyfamsa,
when installed), ``pair`` (the learned aligner on each pair alone, every MEA column kept).

    python benchmarks/msa_close.py --split valid --json benchmarks/results/msa_close_valid.json
"""

from __future__ import annotations

import argparse
import datetime
import time

import numpy as np
from _common import machine, write_json
from msa_families import families, famsa_rows, induced_pairs

from sinkalign.align.aligner import Aligner
from sinkalign.align.msa import align_multiple

ALPHABET = "ACDEFGHIKLMNPQRSTVWY"
METHODS = ("msa", "msa-plain", "famsa", "pair")


def variant(rng, seq: str, sub: float) -> tuple[str, np.ndarray]:
    """``(variant, origin)``: ``origin[k]`` is the index in ``seq`` of the variant's residue
    ``k``, -1 for an inserted one."""
    letters = list(seq)
    origin = list(range(len(seq)))
    for k in range(len(letters)):
        if rng.random() < sub:
            letters[k] = rng.choice([a for a in ALPHABET if a != letters[k]])
    size = int(rng.integers(1, 4))
    at = int(rng.integers(10, len(letters) - 10))
    if rng.random() < 0.5:
        del letters[at:at + size], origin[at:at + size]
    else:
        letters[at:at] = list(rng.choice(list(ALPHABET), size))
        origin[at:at] = [-1] * size
    return "".join(letters), np.asarray(origin)


def truth(a: np.ndarray, b: np.ndarray) -> set:
    where_b = {o: j for j, o in enumerate(b) if o >= 0}
    return {(i, where_b[o]) for i, o in enumerate(a) if o >= 0 and o in where_b}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=("valid", "test"), default="valid")
    ap.add_argument("--families", type=int, default=30, help="per substitution rate")
    ap.add_argument("--members", type=int, default=6)
    ap.add_argument("--substitutions", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.2])
    ap.add_argument("--min-length", type=int, default=80)
    ap.add_argument("--max-length", type=int, default=400)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        ap.error(f"unknown methods {unknown}; known: {METHODS}")
    if "famsa" in methods:
        try:
            import pyfamsa  # noqa: F401
        except ImportError:
            methods.remove("famsa")
            print("pyfamsa is not installed: no famsa rows")
    rng = np.random.default_rng(args.seed)
    pool = []
    for _, msa in families(args.split, ("homstrad", "sabre", "oxbench"), 2, 10_000):
        seqs = [r.replace("-", "").replace(".", "").upper() for r in msa.rows]
        seqs = [s for s in seqs if args.min_length <= len(s) <= args.max_length and set(s) <= set(ALPHABET)]
        if seqs:
            pool.append(seqs[int(rng.integers(len(seqs)))])
    print(f"{len(pool)} sequences ({args.split}), {args.families} families per row")
    aligners = {"msa": Aligner.load("learned"), "msa-plain": Aligner.load("learned", identity_weight=0.0),
                "pair": Aligner.load("learned", min_confidence=0.0)}
    rows, seconds = [], dict.fromkeys(methods, 0.0)
    for sub in args.substitutions:
        counts = {m: {"tp": 0, "n_pred": 0, "n_ref": 0, "exact_families": 0} for m in methods}
        for f in range(args.families):
            base = pool[int(rng.integers(len(pool)))]
            members = [(base, np.arange(len(base)))] + [variant(rng, base, sub) for _ in range(args.members - 1)]
            ids = [f"m{k}" for k in range(len(members))]
            seqs = [s for s, _ in members]
            pairs = [(a, b) for a in range(len(ids)) for b in range(a + 1, len(ids))]
            for m in methods:
                t0 = time.perf_counter()
                if m == "famsa":
                    got = famsa_rows(ids, seqs)
                elif m == "pair":
                    res = aligners["pair"].align_many([(ids[a], seqs[a], ids[b], seqs[b]) for a, b in pairs])
                    got = {(ids[a], ids[b]): x.alignment.pairs for (a, b), x in zip(pairs, res)}
                else:
                    result = align_multiple(ids, seqs, aligners[m], consistency=2, refine_rounds=20)
                    got = dict(zip(result.ids, result.rows))
                seconds[m] += time.perf_counter() - t0
                exact = True
                for a, b in pairs:
                    p = got[(ids[a], ids[b])] if m == "pair" else induced_pairs(got, ids[a], ids[b])
                    mine = {tuple(x) for x in np.asarray(p).reshape(-1, 2).tolist()}
                    true = truth(members[a][1], members[b][1])
                    c = counts[m]
                    c["tp"] += len(mine & true)
                    c["n_pred"] += len(mine)
                    c["n_ref"] += len(true)
                    exact &= mine == true
                counts[m]["exact_families"] += int(exact)
        for m in methods:
            c = counts[m]
            p, r = c["tp"] / max(c["n_pred"], 1), c["tp"] / max(c["n_ref"], 1)
            row = {"substitutions": sub, "method": m, **c, "precision": p, "recall": r,
                   "f1": 2 * c["tp"] / max(c["n_pred"] + c["n_ref"], 1), "families": args.families}
            rows.append(row)
            print(f"subs {sub:.2f}  {m:<10} P {p:.4f}  R {r:.4f}  F1 {row['f1']:.4f}  exact families "
                  f"{c['exact_families']}/{args.families}")
    pooled = {}
    for m in methods:
        mine = [r for r in rows if r["method"] == m]
        tp, n = sum(r["tp"] for r in mine), sum(r["n_pred"] + r["n_ref"] for r in mine)
        pooled[m] = {"f1": 2 * tp / max(n, 1), "exact_families": sum(r["exact_families"] for r in mine)}
        print(f"pooled     {m:<10} F1 {pooled[m]['f1']:.4f}  exact families {pooled[m]['exact_families']}")
    if args.json:
        write_json(args.json, {"benchmark": "msa_close", "machine": machine(), "date": datetime.date.today().isoformat(),
                               "args": vars(args), "rows": rows, "pooled": pooled, "seconds": seconds})


if __name__ == "__main__":
    main()
