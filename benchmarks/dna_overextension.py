"""How far the DNA model's local alignments run past a homologous segment into unrelated DNA,
with and without an X-drop end trim (:func:`sinkalign.alignment.confident_core`, not shipped:
BENCHMARKS.md), against Smith-Waterman.

Random DNA, seeded (``--seed``), two kinds of pairs with a known homologous segment:

* chimera: a read made of two halves (100-200 bp each) cut from two random contigs (400-1200
  bp), aligned against each contig (two pairs a read); the true alignment is the diagonal of
  the half that came from that contig, the other half is unrelated.
* substituted: as a chimera against its first contig only, the homologous half carrying
  ``--substitutions`` (uniform in the range) per base; it comes first in even reads, last in odd.

Aligned by the shipped DNA model with its default settings (both strands, its own threshold),
then each alignment trimmed to its confident core per ``--drops`` (threshold ``--confidence``;
the trim keeps a stretch of the columns the floor kept, so it is scored on the same
alignments), and by Smith-Waterman (parasail, +2/-3, open 5 / extend 2) on the same pairs.
A column is outside when its query or target residue lies outside the homologous segment; its
reach is how far (bp) past the segment's end. Printed per set and method: pairs with columns
outside, outside columns per pair, the reach of the farthest outside column of each such pair
(median / p90 / max), pairs reaching more than 10 bp, true columns lost against the
untrimmed model (trims) and the recall of true columns, and seconds per pair.

    python benchmarks/dna_overextension.py --json benchmarks/results/dna_overextension.json
"""

from __future__ import annotations

import argparse
import time
from datetime import date

import numpy as np
from _common import machine, random_dna, substitute_bases, write_json

from sinkalign.align.aligner import Aligner, default_model_path
from sinkalign.align.baselines import Scoring, align_pair
from sinkalign.alignment import confident_core


def diagonal(qs: int, ts: int, n: int) -> np.ndarray:
    return np.stack([np.arange(qs, qs + n), np.arange(ts, ts + n)], 1)


def chimera_pairs(rng, reads: int) -> list[dict]:
    """Two pairs per read: the read against each of its two contigs."""
    out = []
    for _ in range(reads):
        x, y = random_dna(rng, int(rng.integers(400, 1201))), random_dna(rng, int(rng.integers(400, 1201)))
        la, lb = int(rng.integers(100, 201)), int(rng.integers(100, 201))
        oa, ob = int(rng.integers(0, len(x) - la + 1)), int(rng.integers(0, len(y) - lb + 1))
        read = x[oa:oa + la] + y[ob:ob + lb]
        out.append(dict(set="chimera", q=read, t=x, qs=0, qe=la, ts=oa, te=oa + la, true=diagonal(0, oa, la)))
        out.append(dict(set="chimera", q=read, t=y, qs=la, qe=la + lb, ts=ob, te=ob + lb, true=diagonal(la, ob, lb)))
    return out


def substituted_pairs(rng, reads: int, rates: tuple[float, float]) -> list[dict]:
    out = []
    for r in range(reads):
        x, y = random_dna(rng, int(rng.integers(400, 1201))), random_dna(rng, int(rng.integers(400, 1201)))
        la, lb = int(rng.integers(100, 201)), int(rng.integers(100, 201))
        oa, ob = int(rng.integers(0, len(x) - la + 1)), int(rng.integers(0, len(y) - lb + 1))
        seg = substitute_bases(rng, x[oa:oa + la], float(rng.uniform(*rates)))
        read, qs = (seg + y[ob:ob + lb], 0) if r % 2 == 0 else (y[ob:ob + lb] + seg, lb)
        out.append(dict(set="substituted", q=read, t=x, qs=qs, qe=qs + la, ts=oa, te=oa + la,
                        true=diagonal(qs, oa, la)))
    return out


def classify(pairs: np.ndarray, p: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column: outside the segment, a true pair, and the reach (bp past the segment, 0 inside)."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    i, j = pairs[:, 0], pairs[:, 1]
    out = (i < p["qs"]) | (i >= p["qe"]) | (j < p["ts"]) | (j >= p["te"])
    n = len(p["t"]) + 1
    true = np.isin(i * n + j, p["true"][:, 0] * n + p["true"][:, 1])
    reach = np.maximum.reduce([p["qs"] - i, i - (p["qe"] - 1), p["ts"] - j, j - (p["te"] - 1), np.zeros_like(i)])
    return out, true, reach


def summary(items, key: str, base: str | None) -> dict:
    n_out, reach, lost, found = [], [], 0, 0
    for p, r in items:
        out, true, rr = classify(r[key], p)
        n_out.append(int(out.sum()))
        if out.any():
            reach.append(int(rr[out].max()))
        found += int(true.sum())
        if base is not None:
            _, true0, _ = classify(r[base], p)
            n = len(p["t"]) + 1
            kept = {int(a) * n + int(b) for a, b in np.asarray(r[key]).reshape(-1, 2)}
            lost += sum(int(a) * n + int(b) not in kept for a, b in np.asarray(r[base]).reshape(-1, 2)[true0])
    n_out = np.array(n_out)
    pct = (lambda v: int(np.percentile(reach, v))) if reach else (lambda v: None)
    return {"pairs": len(items), "pairs_outside": int((n_out > 0).sum()), "outside_per_pair": float(n_out.mean()),
            "reach_median": pct(50), "reach_p90": pct(90), "reach_max": max(reach) if reach else None,
            "pairs_reaching_over_10": int(sum(x > 10 for x in reach)), "true_lost": lost if base else None,
            "true_recall": found / sum(len(p["true"]) for p, _ in items)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reads", type=int, default=100, help="chimeric reads (two pairs each)")
    ap.add_argument("--substituted", type=int, default=150, help="substituted reads (one pair each)")
    ap.add_argument("--substitutions", type=float, nargs=2, default=(0.05, 0.15))
    ap.add_argument("--drops", default="10", help="end trim drops X to run (comma-separated)")
    ap.add_argument("--confidence", type=float, default=0.5, help="the end trim's t")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    cases = chimera_pairs(rng, args.reads) + substituted_pairs(rng, args.substituted, tuple(args.substitutions))
    drops = [float(x) for x in args.drops.split(",")]
    jobs = [(f"q{k}", p["q"], f"t{k}", p["t"]) for k, p in enumerate(cases)]
    aligner = Aligner.load(default_model_path("dna"), workers=1)
    runs = ["model", *(f"model, trim X={x:g}" for x in drops)]
    results = [dict() for _ in cases]
    seconds = {}
    t0 = time.perf_counter()
    aligned = list(aligner.align_many(jobs))
    seconds["model"] = (time.perf_counter() - t0) / len(jobs)
    t0 = time.perf_counter()
    for r, res in zip(results, aligned):
        pairs = res.alignment.pairs if res.strand == "+" else np.zeros((0, 2), np.int64)
        r["model"], r["strand"] = pairs, res.strand
        for x, name in zip(drops, runs[1:]):
            core = confident_core(res.alignment.match_posterior, args.confidence, x) if len(pairs) else None
            r[name] = pairs if core is None else pairs[core[0] : core[1] + 1]
    for name in runs[1:]:
        seconds[name] = seconds["model"] + (time.perf_counter() - t0) / len(jobs) / len(drops)
    t0 = time.perf_counter()
    scoring = Scoring.dna()
    for p, r in zip(cases, results):
        r["SW"] = np.asarray(align_pair(p["q"], p["t"], "sw", scoring=scoring).pairs).reshape(-1, 2)
    seconds["SW"] = (time.perf_counter() - t0) / len(jobs)
    minus = sum(r["strand"] == "-" for r in results)
    payload = {"machine": machine(), "date": str(date.today()), "seed": args.seed, "reads": args.reads,
               "substituted": args.substituted, "substitutions": list(args.substitutions),
               "confidence": args.confidence, "drops": drops, "minus_strand": minus,
               "seconds_per_pair": seconds,
               "rows": {}}
    print(f"DNA model, default settings ({aligner!r}); minus-strand results (counted as aligning nothing): {minus}")
    print("| set | pairs | aligner | pairs with columns outside | outside columns / pair | reach bp median / p90 / max "
          "| pairs reaching > 10 bp | true columns lost (vs model) | true-column recall | s / pair |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for set_name in ("chimera", "substituted"):
        items = [(p, r) for p, r in zip(cases, results) if p["set"] == set_name]
        for name in [*runs, "SW"]:
            s = summary(items, name, "model" if name.startswith("model, trim") else None)
            payload["rows"][f"{set_name}: {name}"] = s
            reach = f"{s['reach_median']} / {s['reach_p90']} / {s['reach_max']}" if s["reach_max"] is not None else "-"
            lost = "-" if s["true_lost"] is None else s["true_lost"]
            print(f"| {set_name} | {s['pairs']} | {name} | {s['pairs_outside']} | {s['outside_per_pair']:.1f} | {reach} | "
                  f"{s['pairs_reaching_over_10']} | {lost} | {s['true_recall']:.4f} | {seconds[name]:.4f} |", flush=True)
    if args.json:
        write_json(args.json, payload)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
