"""What `--prefilter N` keeps and what it saves: a homology search with and without it.

The sequences of one split of the structure-based + Pfam shards (``--split valid``: 670
sequences of 213 families) form the target set; ``--queries`` of them (seed 0, from families
with at least two members) are searched against all of it, once aligning every pair (what
``sinkalign align Q T`` does) and once per ``--keep`` N with the prefilter
(:func:`sinkalign.align.prefilter.best_targets`, what ``--prefilter N`` does). A hit is a pair
with E <= ``--evalue`` (per comparison); a homolog is a target sharing a family with the query
(itself excluded). Printed per mode: homologs found, hits outside the family (a SABRE or
PREFAB "family" is a fold-level set, so some of these are remote homologs, not errors), pairs
aligned, and the wall time (prefilter included), all in one process; plus how many of the
homologs the prefilter ranks within its N (its own recall, before any alignment).

    python benchmarks/search_prefilter.py --shards SHARDS

``SHARDS`` as in ``benchmarks/aligner_learned.py``. Everything to
``benchmarks/results/search_prefilter_<split>.json``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from _common import machine
from homology_evalues import save_result

from sinkalign.align.aligner import Aligner
from sinkalign.align.evaluate import load_reference_set
from sinkalign.align.prefilter import best_targets

RESULTS = Path(__file__).resolve().parent / "results"


def search_set(pairs) -> tuple[list[str], list[str], list[set]]:
    """The split's distinct sequences: ids, sequences and the families each belongs to."""
    seqs: dict[str, str] = {}
    fams: dict[str, set] = {}
    for p in pairs:
        for sid, seq in ((p.query_id, p.query_seq), (p.target_id, p.target_seq)):
            seqs.setdefault(sid, seq)
            fams.setdefault(sid, set()).add(p.family)
    ids = sorted(seqs)
    return ids, [seqs[i] for i in ids], [fams[i] for i in ids]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--split", default="valid", choices=["valid", "test"])
    ap.add_argument("--model", default="learned")
    ap.add_argument("--queries", type=int, default=80)
    ap.add_argument("--keep", default="10,25,50,100")
    ap.add_argument("--evalue", type=float, default=1e-3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    aligner = Aligner.load(args.model)
    kind = aligner.config.alphabet
    ids, seqs, fams = search_set(load_reference_set(args.shards, split=args.split))
    members: dict[str, int] = {}
    for f in fams:
        for fam in f:
            members[fam] = members.get(fam, 0) + 1
    eligible = [k for k, f in enumerate(fams) if any(members[fam] >= 2 for fam in f)]
    rng = np.random.default_rng(0)
    queries = sorted(rng.choice(eligible, min(args.queries, len(eligible)), replace=False).tolist())
    homolog = {(q, t) for q in queries for t in range(len(ids)) if t != q and fams[q] & fams[t]}
    print(f"{len(queries)} queries against {len(ids)} sequences ({len({f for s in fams for f in s})} families); "
          f"{len(homolog)} query-homolog pairs; hits at E <= {args.evalue:g} per comparison")

    def run(kept: dict[int, np.ndarray]) -> dict:
        jobs = [(q, t) for q in queries for t in kept[q]]
        t1 = time.perf_counter()
        res = list(aligner.align_many((ids[q], seqs[q], ids[t], seqs[t]) for q, t in jobs))
        secs = time.perf_counter() - t1
        hits = {(q, t) for (q, t), r in zip(jobs, res) if t != q and r.evalue <= args.evalue}
        return {"pairs_aligned": len(jobs), "homologs_found": len(hits & homolog),
                "hits_outside_family": len(hits - homolog), "align_seconds": secs}

    rows = {"every target": run({q: np.arange(len(ids)) for q in queries})}
    rows["every target"]["prefilter_seconds"] = 0.0
    for keep in [int(k) for k in args.keep.split(",")]:
        t1 = time.perf_counter()
        kept = {q: best_targets(seqs[q], seqs, keep, kind=kind) for q in queries}
        pre = time.perf_counter() - t1
        row = run(kept)
        row["prefilter_seconds"] = pre
        row["homologs_ranked_in"] = sum((q, int(t)) in homolog for q in queries for t in kept[q])
        rows[f"--prefilter {keep}"] = row

    full = rows["every target"]
    print(f"| mode | homologs found (of {len(homolog)}) | hits outside the family | homologs within the N | "
          "pairs aligned | wall s (prefilter + align) | time vs every target |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        wall = r["prefilter_seconds"] + r["align_seconds"]
        r["wall_seconds"] = wall
        ranked = r.get("homologs_ranked_in", len(homolog))
        print(f"| {name} | {r['homologs_found']} | {r['hits_outside_family']} | {ranked} | {r['pairs_aligned']} | "
              f"{r['prefilter_seconds']:.1f} + {r['align_seconds']:.1f} | "
              f"{wall / (full['prefilter_seconds'] + full['align_seconds']):.3f} |")
    save_result({"machine": machine(), "split": args.split, "model": args.model, "queries": len(queries),
                 "targets": len(ids), "homolog_pairs": len(homolog), "evalue": args.evalue, "rows": rows}, t0,
                Path(args.out) if args.out else RESULTS / f"search_prefilter_{args.split}.json")


if __name__ == "__main__":
    main()
