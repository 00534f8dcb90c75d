"""Near-identical pairs with one indel: is the gap where it belongs? Models against NW, same run.

For each alphabet (``--alphabets``: ``protein`` with the shipped protein models, ``dna`` with
the shipped DNA model), each length of ``--lengths`` and each indel length of ``--indels``, it
makes random sequences (uniform residues; seeded) and deletes ``k`` residues at positions near
the start (``--edge`` positions from residue 5), in the middle and near the end; both
orientations are aligned (the deletion in the target, then in the query). The truth is the
identity alignment around the gap. A result is **exact** when its pairs equal the truth for
*some* placement of the deletion that gives the same sequence (a deletion inside a repeat can
sit anywhere in it with the same residues aligned to the same residues; every such placement
counts); otherwise its misplaced pairs are counted: those that differ from the nearest correct
placement, wrong pairs and missing ones (so a column the threshold leaves unaligned counts).
Methods: each model as it decodes (every column: ``min_confidence=0``; at its threshold), its
plain decoding (``identity_weight=0``; every column, and at the threshold), and every column with each MEA identity
tie-break of ``--identity-weights`` (``Aligner(identity_weight=)``), for every pair or only
those whose plain decoding is ``--identity-mins`` identical; and parasail Needleman-Wunsch and
Smith-Waterman with the project's scoring (BLOSUM62 11/1; DNA +2/-3, 5/2) on the same pairs.
Prints a table per alphabet and writes JSON.

    python benchmarks/single_indels.py --lengths 200 500 --indels 1 3
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import numpy as np
from _common import write_json

from sinkalign.align.aligner import Aligner, default_model_path
from sinkalign.align.baselines import Scoring, align_pairs

RESULTS = Path(__file__).resolve().parent / "results" / "single_indels.json"
ALPHABET = {"protein": "ACDEFGHIKLMNPQRSTVWY", "dna": "ACGT"}
SCORING = {"protein": Scoring(), "dna": Scoring(kind="dna", gap_open=5, gap_extend=2)}


def cases(alphabet: str, length: int, k: int, edge: int, seed: int = 0):
    """``(query, target, placements, region)``: ``placements`` every start p whose deletion of
    k residues from the query gives the target."""
    out = []
    starts = ([("start", p) for p in range(5, 5 + edge)] + [("middle", length // 2 + d) for d in range(edge)]
              + [("end", p) for p in range(length - k - 5 - edge, length - k - 5)])
    for n, (region, pos) in enumerate(starts):
        rng = np.random.default_rng([seed, length, k, n])
        anc = "".join(rng.choice(list(ALPHABET[alphabet]), length))
        target = anc[:pos] + anc[pos + k:]
        places = [p for p in range(length - k + 1) if anc[:p] + anc[p + k:] == target]
        out.append((anc, target, places, region))
    return out


def truth(length: int, k: int, p: int) -> set:
    return {(i, i if i < p else i - k) for i in range(length) if not p <= i < p + k}


def score(pairs: set, case, k: int, swapped: bool) -> tuple[bool, int]:
    """(exact, misplaced pairs against the closest correct placement)."""
    anc, _, places, _ = case
    best = None
    for p in places:
        ref = truth(len(anc), k, p)
        if swapped:
            ref = {(j, i) for i, j in ref}
        wrong = len(pairs - ref) + len(ref - pairs)
        best = wrong if best is None else min(best, wrong)
    return best == 0, best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--alphabets", nargs="+", default=["protein", "dna"], choices=sorted(ALPHABET))
    ap.add_argument("--protein-models", nargs="+", default=["learned", "blosum"])
    ap.add_argument("--identity-weights", type=float, nargs="*", default=[0.01, 0.05],
                    help="also each model, every column, with this MEA identity tie-break (Aligner identity_weight)")
    ap.add_argument("--identity-mins", type=float, nargs="+", default=[0.0, 0.9],
                    help="... for the pairs whose plain decoding is at least this identical (Aligner identity_min)")
    ap.add_argument("--identity-gaps", nargs="+", default=["add"], choices=["add", "move"],
                    help="... adding gaps or only moving the plain decoding's (Aligner identity_gaps)")
    ap.add_argument("--lengths", type=int, nargs="+", default=[200, 500])
    ap.add_argument("--indels", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--edge", type=int, default=10, help="positions per region (start, middle, end)")
    ap.add_argument("--json", type=Path, default=RESULTS)
    args = ap.parse_args()

    rows = []
    for alphabet in args.alphabets:
        models = args.protein_models if alphabet == "protein" else [str(default_model_path("dna"))]
        methods = {}
        for model in models:
            name = "dna" if alphabet == "dna" else model
            strand = {"strand": "plus"} if alphabet == "dna" else {}
            methods[f"{name}, every column"] = Aligner.load(model, min_confidence=0.0, **strand)
            methods[f"{name}, threshold"] = Aligner.load(model, **strand)
            methods[f"{name}, plain decoding"] = Aligner.load(model, min_confidence=0.0, identity_weight=0.0, **strand)
            methods[f"{name}, plain decoding, threshold"] = Aligner.load(model, identity_weight=0.0, **strand)
            for tau in args.identity_weights:
                for h in args.identity_mins:
                    for gaps in args.identity_gaps:
                        label = (f"{name}, identity {tau:g}" + (f" if >= {h:g}" if h else "")
                                 + (", moving gaps" if gaps == "move" else ""))
                        methods[label] = Aligner.load(model, min_confidence=0.0, identity_weight=tau, identity_min=h,
                                                      identity_gaps=gaps, identity_move_min=0.0, **strand)
        print(f"\n{alphabet}: exact placements / pairs (misplaced pairs in all), by region start / middle / end")
        for L in args.lengths:
            for k in args.indels:
                made = cases(alphabet, L, k, args.edge)
                for swapped in (False, True):
                    pairs = [(t, q) if swapped else (q, t) for q, t, _, _ in made]
                    got = {}
                    for name, aligner in methods.items():
                        got[name] = [set(map(tuple, r.alignment.pairs.tolist())) for r in aligner.align_pairs(pairs)]
                    for method in ("nw", "sw"):
                        out = align_pairs(pairs, method, scoring=SCORING[alphabet])
                        got[method.upper()] = [set(map(tuple, np.asarray(o.pairs).tolist())) for o in out]
                    for name, results in got.items():
                        row = {"alphabet": alphabet, "method": name, "length": L, "indel": k,
                               "deletion_in": "query" if swapped else "target"}
                        for region in ("start", "middle", "end"):
                            sel = [score(p, c, k, swapped) for p, c in zip(results, made) if c[3] == region]
                            row[f"{region}_exact"] = sum(e for e, _ in sel)
                            row[f"{region}_pairs"] = len(sel)
                            row[f"{region}_misplaced"] = sum(w for _, w in sel)
                        rows.append(row)
                        print(f"  L={L:4d} indel {k} in {row['deletion_in']:6s} {name:24s} "
                              + "  ".join(f"{row[f'{r}_exact']:2d}/{row[f'{r}_pairs']} ({row[f'{r}_misplaced']:3d})"
                                          for r in ("start", "middle", "end")), flush=True)
    totals = {}
    for r in rows:
        t = totals.setdefault((r["alphabet"], r["method"]), [0, 0, 0])
        for region in ("start", "middle", "end"):
            t[0] += r[f"{region}_exact"]
            t[1] += r[f"{region}_pairs"]
            t[2] += r[f"{region}_misplaced"]
    print("\nall: exact / pairs (misplaced pairs)")
    for (alphabet, method), (exact, n, wrong) in totals.items():
        print(f"  {alphabet:8s} {method:24s} {exact:4d}/{n} ({wrong})")
    write_json(args.json, {"script": "benchmarks/single_indels.py", "date": datetime.date.today().isoformat(),
                           "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                           "rows": rows,
                           "totals": [{"alphabet": a, "method": m, "exact": e, "pairs": n, "misplaced": w}
                                      for (a, m), (e, n, w) in totals.items()]})


if __name__ == "__main__":
    main()
