"""``sinkalign msa`` against the number of sequences: time per stage and peak memory.

Simulated families (every sequence distinct, the true alignment known): a random ancestor of
``--length`` residues (uniform background), and N copies each evolved alone from it with
``--substitutions`` substitutions per site (residue ``a`` replaced by ``b != a`` with
probability proportional to ``exp(lambda s(a, b))``, BLOSUM62 in half bits, lambda = ln 2 / 2)
and an indel of up to 5 residues per 50 sites; residues from one ancestral site form a true
column. For each N (one
fresh subprocess each, so that the peak resident memory is that N's), the stages of
:func:`sinkalign.align.msa.align_multiple` are timed one by one (the shipped learned model,
the numpy engine on every CPU, consistency 2, refinement 20): the N (N - 1) / 2 pairwise
alignments, the guide tree, the consistency transformation, the progressive alignment, the
refinement. FAMSA (``pyfamsa``, when installed) on the same sequences for the ratio; F1 and
SP against the true alignment for both.

    python benchmarks/msa_scaling.py --sizes 10 25 50 100
"""

from __future__ import annotations

import argparse
import datetime
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _common import machine, write_json
from msa_families import famsa_rows, induced_pairs

RESULTS = Path(__file__).resolve().parent / "results" / "msa_scaling.json"
AA = "ACDEFGHIKLMNPQRSTVWY"


def family(n: int, length: int, subs: float, seed: int = 0) -> tuple[list[str], list[np.ndarray]]:
    """``n`` sequences and, for each, the ancestral site of every residue (-1: inserted)."""
    from Bio.Align import substitution_matrices

    blosum = substitution_matrices.load("BLOSUM62")
    S = np.array([[blosum[a, b] for b in AA] for a in AA], np.float64)
    W = np.exp(np.log(2) / 2 * S)
    np.fill_diagonal(W, 0.0)
    replace = W / W.sum(1, keepdims=True)  # P(b | a), b != a
    rng = np.random.default_rng(seed)
    ancestor = rng.integers(0, 20, length)
    seqs, sites = [], []
    for _ in range(n):
        res, site = [], []
        k = 0
        while k < length:
            if rng.random() < 1 / 50:  # an indel of 1-5
                size = int(rng.integers(1, 6))
                if rng.random() < 0.5:
                    k += size  # deletion
                    continue
                res += list(rng.integers(0, 20, size))
                site += [-1] * size
            a = ancestor[k]
            res.append(int(rng.choice(20, p=replace[a])) if rng.random() < subs else int(a))
            site.append(k)
            k += 1
        seqs.append("".join(AA[r] for r in res))
        sites.append(np.array(site))
    return seqs, sites


def scores(rows: list[str], sites: list[np.ndarray]) -> dict:
    """Precision, recall (SP) and F1 of the residue pairs the rows put in one column, against
    the pairs of one ancestral site (micro-averaged over every pair of rows)."""
    from sinkalign.align.metrics import micro_average, pair_scores

    named = {str(k): row for k, row in enumerate(rows)}
    out = []
    for x in range(len(rows)):
        for y in range(x + 1, len(rows)):
            sx = {int(s): i for i, s in enumerate(sites[x]) if s >= 0}
            ref = np.array([(sx[int(s)], j) for j, s in enumerate(sites[y]) if s >= 0 and int(s) in sx],
                           np.int64).reshape(-1, 2)
            out.append(pair_scores(induced_pairs(named, str(x), str(y)), ref))
    return {k: v for k, v in micro_average(out).items() if k in ("precision", "recall", "f1")}


def one(n: int, args) -> dict:
    from sinkalign.align import msa
    from sinkalign.align.aligner import Aligner

    seqs, sites = family(n, args.length, args.substitutions, seed=n)
    aligner = Aligner.load("learned")
    aligner.align(seqs[0], seqs[1])  # model and engine warm
    lengths = [len(s) for s in seqs]
    t = {}
    t0 = time.perf_counter()
    posts = msa.aligner_posteriors(aligner, seqs)
    t["pairwise"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    Z = msa.guide_tree(posts, lengths)
    t["tree"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    posts = msa.consistency_transform(posts, lengths, 2)
    t["consistency"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    cols = msa.progressive(posts, lengths, Z)
    t["progressive"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    cols = msa.refine(cols, posts, 20, seed=0)
    t["refine"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, column = msa.confidences(cols, posts, lengths, aligner.msa_calibration.mapper(2, n))
    t["confidences"] = time.perf_counter() - t0
    rows = list(msa._rows(seqs, cols))
    whole = msa.align_multiple([str(i) for i in range(n)], seqs, aligner)
    assert list(whole.rows) == rows, "the stages timed one by one are not align_multiple"
    np.testing.assert_array_equal(whole.column_confidence, column)
    out = {"n": n, "mean_length": float(np.mean(lengths)), "pairs": n * (n - 1) // 2, "seconds": t,
           "total_s": sum(t.values()), "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "msa": scores(rows, sites)}
    try:
        import pyfamsa  # noqa: F401
    except ImportError:
        return out
    t0 = time.perf_counter()
    aligned = famsa_rows([str(i) for i in range(n)], seqs)
    out["famsa_s"] = time.perf_counter() - t0
    out["famsa"] = scores([aligned[str(i)] for i in range(n)], sites)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 25, 50, 100])
    ap.add_argument("--length", type=int, default=300)
    ap.add_argument("--substitutions", type=float, default=0.4)
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=str(RESULTS))
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args)))
        return
    rows = []
    for n in args.sizes:
        cmd = [sys.executable, __file__, "--one", str(n), "--length", str(args.length),
               "--substitutions", str(args.substitutions)]
        rows.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1]))
        r = rows[-1]
        print(f"N={n}: {r['total_s']:.1f} s, peak {r['peak_rss_mib']:.0f} MiB, F1 {r['msa']['f1']:.3f}", flush=True)
    print("\n| N (pairs) | pairwise s | tree s | consistency s | progressive s | refine s | confidences s | total s "
          "| peak MiB | F1 (SP) | FAMSA s | FAMSA F1 (SP) |")
    print("|---" * 12 + "|")
    for r in rows:
        s = r["seconds"]
        fam = (f"{r['famsa_s']:.2f} | {r['famsa']['f1']:.3f} ({r['famsa']['recall']:.3f})" if "famsa" in r
               else "- | -")
        print(f"| {r['n']} ({r['pairs']}) | {s['pairwise']:.1f} | {s['tree']:.2f} | {s['consistency']:.2f} | "
              f"{s['progressive']:.2f} | {s['refine']:.2f} | {s['confidences']:.2f} | {r['total_s']:.1f} | "
              f"{r['peak_rss_mib']:.0f} | "
              f"{r['msa']['f1']:.3f} ({r['msa']['recall']:.3f}) | {fam} |")
    write_json(args.json, {"machine": machine(), "date": datetime.date.today().isoformat(), "length": args.length,
                           "substitutions": args.substitutions, "rows": rows})
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
