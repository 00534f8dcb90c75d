"""Close pairs with substitutions and indels: accuracy and gappiness of the identity tie-break.

Random sequences (uniform residues, ``--length``) evolved with ``--substitutions`` per residue
and an indel of 1-5 residues every ~50 (insertion or deletion, equally likely); seeded. For the
protein and the DNA model, each decoded plainly (``identity_weight=0``) and with the tie-break
(``--identity-weight``, ``--identity-min``; adding gaps, and only moving the plain decoding's:
``identity_gaps``), every column, and parasail NW: mean F1 against the
true alignment, and the mean number of breaks (places where consecutive aligned pairs are not
on one diagonal: each indel makes one) against the truth's. A decoding that trades mismatches
for gap pairs (``1I1M1D`` around a chance identity) has more breaks than the truth.

    python benchmarks/close_pairs.py --substitutions 0.02 0.05 0.1
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import numpy as np
from _common import write_json

from sinkalign.align.aligner import Aligner, default_model_path
from sinkalign.align.baselines import Scoring, align_pairs

RESULTS = Path(__file__).resolve().parent / "results" / "close_pairs.json"
ALPHABET = {"protein": "ACDEFGHIKLMNPQRSTVWY", "dna": "ACGT"}
SCORING = {"protein": Scoring(), "dna": Scoring(kind="dna", gap_open=5, gap_extend=2)}


def evolve(rng, alphabet: str, length: int, sub: float, indel_every: int = 50):
    """``(query, target, true pairs)``."""
    letters = list(ALPHABET[alphabet])
    anc = list(rng.choice(letters, length))
    target, truth, i = [], set(), 0
    while i < length:
        if rng.random() < 1 / indel_every:
            n = int(rng.integers(1, 6))
            if rng.random() < 0.5:
                i += n  # deleted from the target
                continue
            target.extend(rng.choice(letters, n))  # inserted into the target
        c = anc[i]
        if rng.random() < sub:
            c = rng.choice([a for a in letters if a != c])
        truth.add((i, len(target)))
        target.append(c)
        i += 1
    return "".join(anc), "".join(target), truth


def f1(got: set, truth: set) -> float:
    return 2 * len(got & truth) / max(1, len(got) + len(truth))


def breaks(pairs) -> int:
    p = np.asarray(sorted(map(tuple, pairs)), np.int64).reshape(-1, 2)
    if len(p) < 2:
        return 0
    d = np.diff(p, axis=0)
    return int(np.sum((d[:, 0] != 1) | (d[:, 1] != 1)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--alphabets", nargs="+", default=["protein", "dna"], choices=sorted(ALPHABET))
    ap.add_argument("--substitutions", type=float, nargs="+", default=[0.02, 0.05, 0.1])
    ap.add_argument("--length", type=int, default=250)
    ap.add_argument("--pairs", type=int, default=60)
    ap.add_argument("--identity-weight", type=float, default=0.05)
    ap.add_argument("--identity-min", type=float, default=0.9)
    ap.add_argument("--identity-move-min", type=float, default=0.0,
                    help="... and moving gaps only for the pairs this identical below --identity-min")
    ap.add_argument("--json", type=Path, default=RESULTS)
    args = ap.parse_args()

    rows = []
    print("mean F1 against the true alignment / mean breaks (truth's in brackets)")
    for alphabet in args.alphabets:
        model = None if alphabet == "protein" else default_model_path("dna")
        strand = {"strand": "plus"} if alphabet == "dna" else {}
        methods = {
            "plain": Aligner.load(model, min_confidence=0.0, identity_weight=0.0, **strand),
            f"tie-break {args.identity_weight:g} if >= {args.identity_min:g}": Aligner.load(
                model, min_confidence=0.0, identity_weight=args.identity_weight, identity_min=args.identity_min,
                identity_gaps="add", identity_move_min=args.identity_move_min, **strand),
            "the same, moving gaps only": Aligner.load(
                model, min_confidence=0.0, identity_weight=args.identity_weight, identity_min=args.identity_min,
                identity_gaps="move", identity_move_min=args.identity_move_min, **strand),
        }
        for sub in args.substitutions:
            rng = np.random.default_rng([int(round(sub * 1000)), args.length, len(ALPHABET[alphabet])])
            made = [evolve(rng, alphabet, args.length, sub) for _ in range(args.pairs)]
            pairs = [(q, t) for q, t, _ in made]
            got = {name: [set(map(tuple, r.alignment.pairs.tolist())) for r in al.align_pairs(pairs)]
                   for name, al in methods.items()}
            got["NW"] = [set(map(tuple, np.asarray(o.pairs).tolist()))
                         for o in align_pairs(pairs, "nw", scoring=SCORING[alphabet])]
            truth_breaks = float(np.mean([breaks(c[2]) for c in made]))
            line = f"{alphabet:8s} subs {sub:4.2f} ({truth_breaks:.2f})"
            for name, results in got.items():
                row = {"alphabet": alphabet, "substitutions": sub, "method": name, "pairs": len(made),
                       "f1": float(np.mean([f1(g, c[2]) for g, c in zip(results, made)])),
                       "breaks": float(np.mean([breaks(g) for g in results])), "truth_breaks": truth_breaks}
                rows.append(row)
                line += f" | {name} {row['f1']:.4f} / {row['breaks']:.2f}"
            print(line, flush=True)
    write_json(args.json, {"script": "benchmarks/close_pairs.py", "date": datetime.date.today().isoformat(),
                           "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                           "rows": rows})


if __name__ == "__main__":
    main()
