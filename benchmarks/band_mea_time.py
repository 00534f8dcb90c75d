"""Banded MEA decoding (:func:`sinkalign.align.band.band_mea`): time per pair of the shipped
version (one kept table row, written by slices; each move decided when the traceback reaches
it) against the previous one (each row's ``above`` gathered by boolean masks, every cell's move
computed), in one process, one thread, alternating, best of ``--repeats``; and a check that
both give the same alignment, bit for bit (pairs, match posteriors, score, expected accuracy).

The posteriors are real: synthetic homologous protein pairs as ``aligner_throughput.py`` makes
them, each solved by the learned model's numpy engine on the corridor the aligner gives a long
pair (:func:`~sinkalign.align.band.guide_corridor` of ``--radii``; ``LONG_BAND`` = 32 is the
default aligner's), decoded at ``--gap-weights`` (the model's is 0).

    python benchmarks/band_mea_time.py --lengths 1000 3000 --radii 32 128
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import time
from pathlib import Path

import numpy as np
from _common import machine, write_json
from aligner_throughput import homologous_pairs
from threadpoolctl import threadpool_limits

from sinkalign.align.aligner import Aligner
from sinkalign.align.band import BandPosteriors, band_mea, classical_guides, guide_corridor
from sinkalign.alignment import Alignment
from tests.band_reference import band_mea_rows

RESULTS = Path(__file__).resolve().parent / "results" / "band_mea_time.json"


def banded_posteriors(aligner: Aligner, query: str, target: str, radius: int) -> BandPosteriors:
    """The pair's posteriors on its guide corridor of ``radius``, as the aligner solves a long pair."""
    lo, hi = guide_corridor(query, target, radius, guides=classical_guides(query, target))
    sides = aligner._numpy.sides_many([query, target])
    return aligner._numpy.solve_band(sides[0], sides[1], lo, hi).posteriors()


def same(a: Alignment, b: Alignment) -> bool:
    return (np.array_equal(a.pairs, b.pairs) and np.array_equal(a.match_posterior, b.match_posterior)
            and a.score == b.score and a.expected_accuracy == b.expected_accuracy)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1000, 3000])
    ap.add_argument("--radii", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--gap-weights", type=float, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--pairs", type=int, default=2, help="pairs per length")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--json", default=str(RESULTS))
    args = ap.parse_args()
    aligner = Aligner.load("learned", workers=1)
    load_before = os.getloadavg()
    rows = []
    header = f"{'length':>6s} {'radius':>6s} {'gap w':>5s} {'band cells':>10s} {'old ms':>8s} {'new ms':>8s} {'ratio':>6s}"
    print(header)
    print("-" * len(header))
    with threadpool_limits(1):
        for length in args.lengths:
            pairs = homologous_pairs(length, args.pairs)
            for radius in args.radii:
                posts = [banded_posteriors(aligner, q, t, radius) for q, t in pairs]
                for gap_weight in args.gap_weights:
                    best = {"old": [math.inf] * len(posts), "new": [math.inf] * len(posts)}
                    for _ in range(args.repeats):
                        for k, post in enumerate(posts):
                            for name, fn in (("old", band_mea_rows), ("new", band_mea)):
                                t0 = time.perf_counter()
                                fn(post, gap_weight=gap_weight)
                                best[name][k] = min(best[name][k], time.perf_counter() - t0)
                    identical = sum(same(band_mea(p, gap_weight=gap_weight), band_mea_rows(p, gap_weight=gap_weight))
                                    for p in posts)
                    assert identical == len(posts), f"length {length}, radius {radius}: the versions differ"
                    old, new = 1e3 * float(np.mean(best["old"])), 1e3 * float(np.mean(best["new"]))
                    cells = float(np.mean([p.match.nnz for p in posts]))
                    rows.append({"length": length, "radius": radius, "gap_weight": gap_weight, "pairs": len(posts),
                                 "band_cells": cells, "rows": float(np.mean([p.match.shape[0] for p in posts])),
                                 "old_ms": old, "new_ms": new, "ratio": old / new, "identical_pairs": identical})
                    print(f"{length:6d} {radius:6d} {gap_weight:5.1f} {cells:10.0f} {old:8.2f} {new:8.2f} "
                          f"{old / new:5.2f}x", flush=True)
    load_after = os.getloadavg()
    write_json(args.json, {"benchmark": "band_mea_time", "date": datetime.date.today().isoformat(),
                           "machine": machine(), "threads": 1, "repeats": args.repeats,
                           "load_average_before_after": [load_before, load_after], "rows": rows})
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; wrote {args.json}")


if __name__ == "__main__":
    main()
