"""E-values of the shipped DNA model: a null from genome windows, checked on held-out genera.

The DNA model's only reference alignments are the Dfam MADE1 pairs (about 78 bp), too narrow a
range of lengths to fit how the null moves with ln(m n). So the null comes from shuffled
windows (50-1,000 bp, log-uniform) of the training genomes of the multi-genome corpus
(``data_manifests/genomes_multi_split.json``, split by genus), the MADE1 pairs choose the mix
(what ``sinkalign fit-evalues --model dna --reference MADE1 --null-fasta GENOMES`` does), and
the E-values are checked on windows of the held-out genera:

* shuffled windows: the share with ``E <= t`` against the expected ``1 - exp(-t)``;
* real windows, not shuffled, from two different held-out genomes (unrelated DNA, with its
  real repeats and codon structure), the same share;
* the MADE1 pairs (homologs; the DNA model was fitted on them, so this is not held out): the
  share found at ``E <= 1e-3``.

The composition-adjusted local score alone and the raw local score, with the same censored
fit on the same windows, are the baselines.

    python benchmarks/homology_evalues_dna.py --export DIR

Tables to stdout, everything to ``benchmarks/results/homology_evalues_dna_<split>.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _common import machine
from homology_evalues import THRESHOLDS, report_fit, save_result, share_header, with_weights

from sinkalign.align.aligner import Aligner
from sinkalign.align.evaluate import load_reference_set
from sinkalign.align.significance import aligned_features, composition_lambda, fit_significance, window_pairs
from sinkalign.io.fasta import read_fasta

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
LENGTH_EDGES = (50, 200, 500, 1000, 2000, 3000)
RESULTS = Path(__file__).resolve().parent / "results"


def genomes(split: str) -> list[Path]:
    manifest = json.loads((ROOT / "data_manifests" / "genomes_multi_split.json").read_text())
    return sorted(SHARED / "genomes" / "multi" / name for name, g in manifest["genomes"].items() if g["split"] == split)


def contigs(paths: list[Path]) -> list[list[str]]:
    """The sequences of each genome file, one list per genome."""
    return [[rec.seq for rec in read_fasta(p, "dna")] for p in paths]


def cross_genome_windows(per_genome: list[list[str]], n: int, lo: int, hi: int, seed: int) -> list[tuple[str, str]]:
    """Real (unshuffled) windows, the two of a pair from two different genomes."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a, b = rng.choice(len(per_genome), 2, replace=False)
        pa = window_pairs(per_genome[a], 1, min_length=lo, max_length=hi, seed=int(rng.integers(2**31)), shuffle=False)
        pb = window_pairs(per_genome[b], 1, min_length=lo, max_length=hi, seed=int(rng.integers(2**31)), shuffle=False)
        out.append((pa[0][0], pb[0][0]))
    return out


def raw(features, items) -> np.ndarray:
    """The features with the local score in raw units (no composition adjustment)."""
    lam = np.array([composition_lambda(q, t, kind="dna") for q, t in items])
    out = np.array(features, dtype=np.float64)
    out[:, 0] /= lam
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="dna")
    ap.add_argument("--split", default="valid", choices=["valid", "test"], help="held-out genera")
    ap.add_argument("--null-pairs", type=int, default=20000)
    ap.add_argument("--held-pairs", type=int, default=4000)
    ap.add_argument("--lengths", type=int, nargs=2, default=(50, 1000))
    ap.add_argument("--alpha", type=float, default=None, help="fix the statistic's mix (as `fit-evalues --alpha`; "
                                                              "default: chosen on the MADE1 pairs)")
    ap.add_argument("--export", default=None, help="write the model with the fitted null to this directory")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    t0 = time.perf_counter()
    lo, hi = args.lengths
    aligner = Aligner.load(args.model, significance=None)
    made1 = load_reference_set(SHARED / "pfam_seed" / "MADE1_dfam_dna.sto")
    items = [(p.query_seq, p.target_seq) for p in made1]
    train_paths = genomes("train")
    train = [s for g in contigs(train_paths) for s in g]
    null_items = window_pairs(train, args.null_pairs, min_length=lo, max_length=hi, seed=0)
    real, real_len = aligned_features(aligner, items)
    null, null_len = aligned_features(aligner, null_items)
    fitted_on = (f"{len(made1)} pairs of MADE1_dfam_dna.sto and {len(null)} pairs of shuffled {lo}-{hi} letter "
                 f"windows of the {len(train_paths)} training genomes of data_manifests/genomes_multi_split.json "
                 f"(seed 0)" + ("" if args.alpha is None else f", alpha fixed at {args.alpha:g}"))
    sw = [1.0, 0.0]
    alphas = {} if args.alpha is None else {"alphas": (args.alpha,)}
    stats = {"sinkalign": fit_significance(real, real_len, null, null_len, threshold=aligner.calibration.min_confidence,
                                           kind="dna", fitted_on=fitted_on, **alphas),
             "SW (composition-adjusted)": with_weights(sw, null, null_len, "dna", 0.0, "local nats only"),
             "SW (raw score)": with_weights(sw, raw(null, null_items), null_len, "dna", 0.0, "raw local score only")}
    t_fit = time.perf_counter() - t0
    print(f"fitted on {len(made1)} MADE1 pairs + {len(null)} training-genome windows in {t_fit:.0f} s")
    report_fit(stats, aligner, args.export,
               "`benchmarks/homology_evalues_dna.py` (as `sinkalign fit-evalues --null-fasta`)", fitted_on)

    held_paths = genomes(args.split)
    held = contigs(held_paths)
    shuffled_items = window_pairs([s for g in held for s in g], args.held_pairs, min_length=lo, max_length=hi, seed=1)
    real_items = cross_genome_windows(held, args.held_pairs, lo, hi, seed=2)
    sets = {"shuffled windows": (shuffled_items, *aligned_features(aligner, shuffled_items)),
            "real windows": (real_items, *aligned_features(aligner, real_items))}
    result = {"machine": machine(), "model": args.model, "split": args.split,
              "held_genomes": [p.name for p in held_paths], "lengths": [lo, hi], "null_pairs": len(null),
              "fit_seconds": t_fit, "statistics": {k: v.to_dict() for k, v in stats.items()}, "methods": {}}
    print(f"\nheld-out {args.split} genomes ({len(held_paths)}): {', '.join(p.name.split('__')[0] for p in held_paths)}")
    print("\nShare with E <= t (expected for a calibrated null: 1 - exp(-t)), and MADE1 homologs found at E <= 1e-3")
    share_header()
    for name, sig in stats.items():
        row = {}
        for label, (its, feats, lens) in sets.items():
            f = raw(feats, its) if name == "SW (raw score)" else feats
            e = sig.evalue(f, lens[:, 0], lens[:, 1])
            row[label] = [float(np.mean(e <= t)) for t in THRESHOLDS]
            print(f"| {name} | {label} | " + " | ".join(f"{v:.4f}" for v in row[label]) + " |")
        f = raw(real, items) if name == "SW (raw score)" else real
        row["made1_found_1e-3"] = float(np.mean(sig.evalue(f, real_len[:, 0], real_len[:, 1]) <= 1e-3))
        result["methods"][name] = row
    # by length: a null fitted on mixed lengths can be right on average and wrong at every length
    edges = sorted({lo, *(e for e in LENGTH_EDGES if lo < e < hi), hi + 1})
    print("\nBy length (geometric mean of the two windows): share with E <= 0.01 / 0.1 / 1 "
          "(expected 0.010 / 0.095 / 0.63)")
    print("| method | set | " + " | ".join(f"{a}-{b - 1} bp" for a, b in zip(edges[:-1], edges[1:])) + " |")
    print("|---|---|" + "---|" * (len(edges) - 1))
    for name, sig in stats.items():
        for label, (its, feats, lens) in sets.items():
            f = raw(feats, its) if name == "SW (raw score)" else feats
            e = sig.evalue(f, lens[:, 0], lens[:, 1])
            size = np.sqrt(lens[:, 0] * lens[:, 1])
            cells, shares = [], []
            for a, b in zip(edges[:-1], edges[1:]):
                inside = (size >= a) & (size < b)
                share = [float(np.mean(e[inside] <= t)) if inside.any() else None for t in (0.01, 0.1, 1.0)]
                shares.append({"from": a, "to": b - 1, "pairs": int(inside.sum()), "shares": share})
                cells.append("-" if not inside.any() else " / ".join(f"{v:.3f}" for v in share) + f" ({inside.sum()})")
            result["methods"][name].setdefault("by_length", {})[label] = shares
            print(f"| {name} | {label} | " + " | ".join(cells) + " |")
    print("\nMADE1 pairs (the DNA model's own training family) found at E <= 1e-3: "
          + ", ".join(f"{k} {v['made1_found_1e-3']:.3f}" for k, v in result["methods"].items()))
    save_result(result, t0, Path(args.out) if args.out else RESULTS / f"homology_evalues_dna_{args.split}.json")


if __name__ == "__main__":
    main()
