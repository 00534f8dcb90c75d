"""`sinkalign align` on one machine's cores: threads, or Dask worker processes (``--workers``).

The host's work per pair (the numpy engine's solve and decoding, the jax engine's decoding) is
many small NumPy calls, which hold the GIL, so threads add up badly on a many-core machine.
This script times ``sinkalign align`` end to end, as a user runs it (a fresh process each time,
model loading and, for ``--workers``, the local Dask cluster's start included), on ``--pairs``
distinct synthetic homologous pairs of ``--length`` residues (``--pairing zip``; the learned
model by default), for:

* one thread, and one thread under ``MALLOC_TRIM_THRESHOLD_=65536``: the environment Dask's
  nanny gives every worker (``distributed.nanny.pre-spawn-environ``), which fixes glibc's mmap
  threshold, so each array above 128 KB is mapped afresh (the workers now set the thresholds
  back, ``sinkalign.pipelines.runner._restore_malloc_thresholds``);
* ``--threads N``, ``--processes N`` and ``--workers N`` (N = ``--cpus``, default every CPU this
  process may use);
* ``--threads N`` and ``--processes N`` with BLAS unlimited: the runs cannot import threadpoolctl
  (a module of that name that raises ``ImportError`` first on ``PYTHONPATH``), as in an
  environment installed without sinkalign's dependencies, so BLAS keeps one thread per core
  under each of the aligner's threads or worker processes.

Each configuration runs at ``--pairs`` and at a quarter of them: the difference gives the
marginal rate (pairs/s once started) apart from the fixed cost (start, model, cluster).

Then the Python API in this process (``--api``): ``Aligner.align_many`` on the same pairs
with ``workers`` = 1 and N threads and with ``processes=N`` (``spawn``ed worker processes,
each with a copy of the aligner), best of ``--repeats`` after a warm-up run that also starts
the processes (their start is timed apart). Prints tables and writes JSON. ``--only`` picks
the command-line configurations, ``--no-cli`` / ``--no-api`` leave a part out.

    python benchmarks/host_parallel.py --json benchmarks/results/host_parallel.json
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine, write_json
from aligner_throughput import homologous_pairs


def run_align(fasta_q: Path, fasta_t: Path, n: int, extra: list[str], env: dict, model: str) -> float:
    """Wall seconds of one ``sinkalign align`` of the first ``n`` pairs."""
    with tempfile.TemporaryDirectory(prefix="host-parallel-") as tmp:
        q, t = Path(tmp) / "q.fa", Path(tmp) / "t.fa"
        for src, dst in ((fasta_q, q), (fasta_t, t)):
            lines = src.read_text().splitlines(keepends=True)
            dst.write_text("".join(lines[: 2 * n]))
        cmd = [sys.executable, "-m", "sinkalign.cli.main", "align", str(q), str(t), "--pairing", "zip",
               "--model", model, "--no-progress", "-o", str(Path(tmp) / "out.tsv"), *extra]
        t0 = time.perf_counter()
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {res.stderr[-2000:]}")
        rows = (Path(tmp) / "out.tsv").read_text().count("\n") - 1
        if rows != n:
            raise RuntimeError(f"{rows} rows for {n} pairs")
    return wall


def api(args, pairs, rows, save) -> None:
    """``Aligner.align_many`` in this process: threads against worker processes."""
    from sinkalign.align.aligner import Aligner

    items = [(f"q{i}", q, f"t{i}", t) for i, (q, t) in enumerate(pairs)]
    print(f"\nPython API, {len(items)} pairs: {'configuration':28s} {'start s':>8s} {'wall s':>8s} {'pairs/s':>8s}")
    for name, kwargs in (("workers=1", {"workers": 1}), (f"workers={args.cpus}", {"workers": args.cpus}),
                         (f"processes={args.cpus}", {"processes": args.cpus})):
        with Aligner.load(args.model, **kwargs) as aligner:
            t0 = time.perf_counter()
            list(aligner.align_many(items[:1]))  # starts the processes
            start = time.perf_counter() - t0
            list(aligner.align_many(items))  # warm-up (a fresh cache each run: every pair distinct)
            walls = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                list(aligner.align_many(items))
                walls.append(time.perf_counter() - t0)
        row = {"configuration": name, "start_s": start, "wall_s": min(walls), "pairs_per_s": len(items) / min(walls)}
        rows.append(row)
        print(f"{'':33s}{name:28s} {start:8.2f} {row['wall_s']:8.2f} {row['pairs_per_s']:8.1f}", flush=True)
        save()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--length", type=int, default=300)
    ap.add_argument("--pairs", type=int, default=2048)
    ap.add_argument("--model", default="learned")
    ap.add_argument("--cpus", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--only", nargs="*", default=None,
                    help="run only the configurations whose names contain one of these words")
    ap.add_argument("--api", action=argparse.BooleanOptionalAction, default=True,
                    help="also time the Python API (threads against processes)")
    ap.add_argument("--cli", action=argparse.BooleanOptionalAction, default=True,
                    help="time `sinkalign align` runs")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default="benchmarks/results/host_parallel.json")
    args = ap.parse_args()

    small = max(1, args.pairs // 4)
    rows, api_rows = [], []
    payload = {"benchmark": "host_parallel", "date": datetime.date.today().isoformat(), "machine": machine(),
               "length": args.length, "pairs": args.pairs, "small": small, "model": args.model, "rows": rows,
               "api_rows": api_rows}
    with tempfile.TemporaryDirectory(prefix="host-parallel-") as tmp:
        base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
        dask_env = {**base, "MALLOC_TRIM_THRESHOLD_": "65536"}
        blocker = Path(tmp) / "no-threadpoolctl"
        blocker.mkdir()
        (blocker / "threadpoolctl.py").write_text('raise ImportError("threadpoolctl left out (host_parallel.py)")\n')
        unlimited = {**base, "PYTHONPATH": os.pathsep.join(filter(None, [str(blocker), base.get("PYTHONPATH")]))}
        configs = [("1 thread", ["--threads", "1"], base),
                   ("1 thread, MALLOC_TRIM_THRESHOLD_=65536", ["--threads", "1"], dask_env),
                   (f"{args.cpus} threads", ["--threads", str(args.cpus)], base),
                   (f"{args.cpus} processes (--processes)", ["--processes", str(args.cpus)], base),
                   (f"{args.cpus} Dask workers (--workers)", ["--workers", str(args.cpus)], base),
                   (f"{args.cpus} threads, BLAS unlimited", ["--threads", str(args.cpus)], unlimited),
                   (f"{args.cpus} processes, BLAS unlimited", ["--processes", str(args.cpus)], unlimited)]
        if args.only:
            configs = [c for c in configs if any(word in c[0] for word in args.only)]
        if not args.cli:
            configs = []
        fq, ft = Path(tmp) / "q.fa", Path(tmp) / "t.fa"
        pairs = homologous_pairs(args.length, args.pairs, seed=3)
        fq.write_text("".join(f">q{i}\n{q}\n" for i, (q, _) in enumerate(pairs)))
        ft.write_text("".join(f">t{i}\n{t}\n" for i, (_, t) in enumerate(pairs)))
        print(f"{args.pairs} pairs of {args.length} (and {small}), model {args.model}, {args.cpus} CPUs")
        if configs:
            print(f"{'configuration':42s} {'wall s':>8s} {'pairs/s':>8s} {'wall s (' + str(small) + ')':>12s} "
                  f"{'marginal pairs/s':>17s} {'fixed s':>8s}")
        for name, extra, env in configs:
            full = run_align(fq, ft, args.pairs, extra, env, args.model)
            part = run_align(fq, ft, small, extra, env, args.model)
            marginal = (args.pairs - small) / (full - part) if full > part else float("nan")
            fixed = full - args.pairs / marginal
            row = {"configuration": name, "args": extra, "wall_s": full, "pairs_per_s": args.pairs / full,
                   "wall_s_small": part, "marginal_pairs_per_s": marginal, "fixed_s": fixed}
            rows.append(row)
            print(f"{name:42s} {full:8.2f} {args.pairs / full:8.1f} {part:12.2f} {marginal:17.1f} {fixed:8.2f}",
                  flush=True)
            write_json(args.json, payload)
        if args.api:
            api(args, pairs, api_rows, lambda: write_json(args.json, payload))
    write_json(args.json, payload)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
