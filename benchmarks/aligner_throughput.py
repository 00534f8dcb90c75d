"""Aligner throughput: pairs/s of a shipped protein model against parasail NW and SW, same run.

``--model`` (default ``blosum``, the BLOSUM window; ``learned``, the default protein model, whose
residue encoder runs once per distinct sequence in a run: the cache is emptied before each run).

For each workload (synthetic homologous pairs of length 100, 300, 1000 and 3000, the Pfam
test families, mean length ~270, and with ``--all-vs-all N`` N sequences of length 300 against N
others) it times, in this one process and one after the other:

* ``sinkalign`` with the default engine (``numpy``) on all the CPUs this process may use
  (``workers``) and on one thread;
* ``sinkalign (jax engine)``, the batched JAX path (with ``--jax``; ``--jax-pfam-only``: on the
  Pfam row only): what the aligner did before the numpy engine, for the ratio;
* parasail Needleman-Wunsch and Smith-Waterman (BLOSUM62, open 11, extend 1, with traceback:
  :func:`sinkalign.align.baselines.align_pairs`), single-threaded.

Each figure is the best of ``--repeats`` runs (after a warm-up) of wall time and of process
CPU time (every thread), reported as pairs/s (wall), CPU ms per pair and pairs per CPU-second,
and as ratios to parasail NW in the same run, by wall time and by CPU time. On a shared
machine the wall figures depend on what else runs (the load average is recorded); the CPU
figures much less. On the Pfam row the
two sinkalign engines' alignments are compared (identical pairs, F1 against the reference
alignments to 4 decimals); with ``--jax``, on every row every pair (the jax engine solves the
pairs the numpy engine bands on the same corridors, on the host, since 2026-11-27).

    python benchmarks/aligner_throughput.py --shards SHARDS --jax
    python benchmarks/aligner_throughput.py --lengths 100 300 --no-pfam   # quick look

``SHARDS`` is ``sinkalign shards build ../shared/data/pfam_seed/*.sto --alphabet protein
--split 0.6,0.2,0.2 --seed 0 --max-pairs-per-family 300 --out SHARDS`` (as in
``aligner_fit.py``); without ``--shards`` it is built in a temporary directory from
``../shared/data/pfam_seed`` when that is present.
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import machine, write_json

from sinkalign.align.aligner import Aligner
from sinkalign.align.baselines import align_pairs

RESULTS = Path(__file__).resolve().parent / "results" / "aligner_throughput.json"
PFAM_SEED = Path(__file__).resolve().parents[2] / "shared" / "data" / "pfam_seed"
AA = "ACDEFGHIKLMNPQRSTVWY"
DEFAULT_PAIRS = {100: 400, 300: 200, 1000: 24, 3000: 4}


def homologous_pairs(length: int, count: int, seed: int = 0) -> list[tuple[str, str]]:
    """``count`` pairs: a random ancestor of ``length`` residues (background frequencies
    uniform) and a copy with 30% substitutions and an indel of up to 5 residues per 50."""
    rng = np.random.default_rng(seed + length)
    out = []
    for _ in range(count):
        anc = rng.choice(list(AA), length)
        copy = [rng.choice(list(AA)) if rng.random() < 0.3 else c for c in anc]
        for _ in range(max(1, length // 50)):
            at = int(rng.integers(0, len(copy)))
            if rng.random() < 0.5:
                del copy[at : at + int(rng.integers(1, 6))]
            else:
                copy[at:at] = rng.choice(list(AA), int(rng.integers(1, 6))).tolist()
        out.append(("".join(anc), "".join(copy)))
    return out


def pfam_test_pairs(shards: str | None):
    from sinkalign.align.evaluate import load_reference_set

    if shards is None:
        if not PFAM_SEED.is_dir():
            return None
        from sinkalign.io.shards import build_shards

        tmp = tempfile.mkdtemp(prefix="sinkalign_shards_")
        build_shards(sorted(PFAM_SEED.glob("*.sto")), tmp, split=(0.6, 0.2, 0.2), seed=0, max_pairs_per_family=300,
                     alphabet="protein")
        shards = tmp
    return load_reference_set(shards, split="test")


def timed(fn, repeats: int) -> dict:
    """Best wall and best CPU time (s) of ``fn()`` over ``repeats`` runs, after one warm-up."""
    out = fn()
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"wall_s": min(wall), "cpu_s": min(cpu), "result": out}


def cold(aligner) -> None:
    """Empty the numpy engine's cache of encoded sequences, so that a timed run encodes afresh
    (within a run, repeats are reused)."""
    if aligner.engine == "numpy":
        aligner._numpy.clear_cache()


def run_sinkalign(aligner, pairs):
    cold(aligner)
    items = [(f"q{i}", q, f"t{i}", t) for i, (q, t) in enumerate(pairs)]
    return [r.alignment.pairs for r in aligner.align_many(items)]


def measure(name: str, fn, pairs, repeats: int) -> dict:
    t = timed(fn, repeats)
    n = len(pairs)
    row = {"method": name, "pairs": n, "pairs_per_s": n / t["wall_s"], "cpu_ms_per_pair": 1e3 * t["cpu_s"] / n,
           "wall_s": t["wall_s"], "cpu_s": t["cpu_s"]}
    return row, t["result"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", type=int, nargs="*", default=[100, 300, 1000, 3000])
    ap.add_argument("--pairs", type=int, default=None, help="pairs per synthetic length (default: by length)")
    ap.add_argument("--shards", default=None, help="Pfam pair shards (test split is timed)")
    ap.add_argument("--no-pfam", action="store_true")
    ap.add_argument("--jax", action="store_true", help="also time the jax engine (every row)")
    ap.add_argument("--jax-pfam-only", action="store_true", help="with --jax: on the Pfam row only")
    ap.add_argument("--all-vs-all", type=int, default=0, metavar="N",
                    help="also time N synthetic sequences of length 300 against N others (N^2 pairs, each "
                         "sequence in N of them: what `sinkalign align q.fasta t.fasta` does)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default="blosum", help="shipped model name or model directory")
    ap.add_argument("--band", default=None, help="the aligner's band (a radius or 'dense'; default: its own, "
                                                 "long pairs on a corridor)")
    ap.add_argument("--json", default=str(RESULTS))
    args = ap.parse_args()

    band = None if args.band is None else args.band if args.band == "dense" else int(args.band)
    fast = Aligner.load(args.model, band=band)
    single = Aligner.load(args.model, workers=1, band=band)
    workloads = [(f"length {L}", homologous_pairs(L, args.pairs or DEFAULT_PAIRS.get(L, 20)), None)
                 for L in args.lengths]
    if args.all_vs_all:
        n = args.all_vs_all
        base = homologous_pairs(300, n, seed=1)
        workloads.append((f"{n}x{n} 300", [(q, t) for q, _ in base for _, t in base], None))
    if not args.no_pfam:
        ref = pfam_test_pairs(args.shards)
        if ref is None:
            print("Pfam test row skipped: no --shards and no ../shared/data/pfam_seed")
        else:
            workloads.insert(0, ("Pfam test", [(p.query_seq, p.target_seq) for p in ref], ref))

    rows = []
    load_before = os.getloadavg()
    header = (f"{'workload':12s} {'mean len':>8s} {'method':24s} {'pairs/s':>9s} {'CPU ms/pair':>12s} "
              f"{'pairs/CPU-s':>11s} {'x NW wall':>9s} {'x NW CPU':>8s}")
    print(header)
    print("-" * len(header))
    for label, pairs, ref in workloads:
        mean_len = float(np.mean([(len(q) + len(t)) / 2 for q, t in pairs]))
        block = []
        row, fast_pairs = measure(f"sinkalign ({fast.workers} threads)", lambda: run_sinkalign(fast, pairs), pairs,
                                  args.repeats)
        block.append(row)
        row, _ = measure("sinkalign (1 thread)", lambda: run_sinkalign(single, pairs), pairs, args.repeats)
        block.append(row)
        if args.jax and (ref is not None or not args.jax_pfam_only):
            jax_aligner = Aligner.load(args.model, engine="jax", band=band)
            row, jax_pairs = measure("sinkalign (jax engine)", lambda: run_sinkalign(jax_aligner, pairs), pairs,
                                     max(1, args.repeats - 2))
            block.append(row)
        for method in ("nw", "sw"):
            row, _ = measure(f"parasail {method.upper()}", lambda m=method: align_pairs(pairs, m), pairs, args.repeats)
            block.append(row)
        nw = next(r for r in block if r["method"] == "parasail NW")
        for r in block:
            r.update(workload=label, mean_length=mean_len, pairs_per_cpu_s=1e3 / r["cpu_ms_per_pair"],
                     vs_nw_wall=r["pairs_per_s"] / nw["pairs_per_s"],
                     vs_nw_cpu=nw["cpu_ms_per_pair"] / r["cpu_ms_per_pair"])
            print(f"{label:12s} {mean_len:8.0f} {r['method']:24s} {r['pairs_per_s']:9.1f} {r['cpu_ms_per_pair']:12.3f} "
                  f"{r['pairs_per_cpu_s']:11.1f} {r['vs_nw_wall']:9.3f} {r['vs_nw_cpu']:8.3f}", flush=True)
        jax_ran = any(r["method"] == "sinkalign (jax engine)" for r in block)
        if ref is not None or jax_ran:
            from sinkalign.align.metrics import micro_average, pair_scores

            def f1(preds):
                return micro_average([pair_scores(a, p.pairs) for a, p in zip(preds, ref)])["f1"]

            check = {f"f1_{fast.engine}_engine": f1(fast_pairs)} if ref is not None else {}
            if jax_ran:
                if ref is not None:
                    check["f1_jax_engine"] = f1(jax_pairs)
                check["identical_pairs"] = sum(np.array_equal(a, b) for a, b in zip(fast_pairs, jax_pairs))
            print(f"{label:12s} same alignments: " + ", ".join(
                f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}/{len(pairs)}" for k, v in check.items()))
            block[0]["check"] = check
        rows.extend(block)
    payload = {
        "benchmark": "aligner_throughput",
        "band": args.band,
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "model": args.model,
        "workers": fast.workers,
        "engine": fast.engine,
        "load_average_before_after": [load_before, os.getloadavg()],
        "repeats": args.repeats,
        "rows": rows,
    }
    write_json(args.json, payload)
    print(f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; wrote {args.json}")


if __name__ == "__main__":
    main()
