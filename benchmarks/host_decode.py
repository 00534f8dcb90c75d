"""The jax engine's host share: decoding solved chunks (``Aligner._jax_decode_tasks``), per
stage and per thread count.

On an accelerator the batched Sinkhorn solve is fast and the aligner's end-to-end rate is set
by what the host does with each chunk of plans: widen one pair's rows to its float64 plan
(``pair_plan``), posteriors (``plan_posteriors``), the MEA dynamic programme and its traceback
(``mea_batch``) and the finish (calibrated column confidences, E-value). This script solves
one chunk of synthetic homologous pairs (``aligner_throughput.homologous_pairs``) per
``--lengths`` with the jax engine on JAX's default backend, then times, in this one process:

* each stage on one thread for the chunk's first pair (best of ``--repeats``);
* the decode of a stream of ``--chunks`` copies of the solved chunk, as ``align_many`` runs it
  (``_run_tasks``: one pool of ``workers`` threads for the stream), with ``workers`` = 1 and =
  every CPU this process may use, as pairs/s (best of ``--repeats`` after a warm-up).

The solve is not timed (``aligner_gpu.py`` times it). Prints a table and writes JSON.

    python benchmarks/host_decode.py --lengths 300 1000 3000

A copy of this script in another checkout's ``benchmarks/`` times that checkout's stages
(``_common`` puts the script's own checkout first on ``sys.path``, ahead of ``PYTHONPATH``), for a
before/after of a change.
"""

from __future__ import annotations

import argparse
import datetime
import os
import time
from pathlib import Path

import numpy as np
from _common import machine, write_json
from aligner_throughput import homologous_pairs

from sinkalign.align import model as M
from sinkalign.align.aligner import Aligner
from sinkalign.align.decode import mea_batch, plan_posteriors

RESULTS = Path(__file__).resolve().parent / "results" / "host_decode.json"
DEFAULT_PAIRS = {300: 32, 1000: 8, 3000: 4}


def best(fn, repeats: int) -> float:
    fn()  # warm-up (first-touch pages, caches)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[300, 1000, 3000])
    ap.add_argument("--pairs", type=int, default=None, help="pairs per chunk (default: 32 / 8 / 4 by length)")
    ap.add_argument("--model", default="blosum")
    ap.add_argument("--chunks", type=int, default=4, help="copies of the solved chunk in the decoded stream")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=RESULTS)
    args = ap.parse_args()

    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    rows = []
    print(f"{'length':>6s} {'pairs':>5s} {'stage / decode':34s} {'ms/pair':>9s} {'pairs/s':>9s}")
    for L in args.lengths:
        n = args.pairs or DEFAULT_PAIRS.get(L, 8)
        items = [(f"q{i}", q, f"t{i}", t) for i, (q, t) in enumerate(homologous_pairs(L, n))]
        aligner = Aligner.load(args.model, engine="jax", workers=1, band="dense")  # every pair solved in the batch
        chunk = items  # one chunk of n pairs, whatever the backend's cell budget (the CPU's takes one of 3000)
        solved = np.asarray(aligner._jax_dispatch(chunk))

        def row(stage, seconds, pairs):
            rows.append({"length": L, "pairs": pairs, "stage": stage, "ms_per_pair": 1e3 * seconds / pairs,
                         "pairs_per_s": pairs / seconds})
            print(f"{L:6d} {pairs:5d} {stage:34s} {1e3 * seconds / pairs:9.2f} {pairs / seconds:9.1f}", flush=True)

        q, t = chunk[0][1], chunk[0][3]
        plan = M.pair_plan(np.asarray(solved[0], np.float64), len(q), len(t))
        post = plan_posteriors(plan)
        aln = mea_batch([post], gap_weight=aligner.gap_weight)[0]
        row("pair_plan (1 thread)", best(lambda: M.pair_plan(np.asarray(solved[0], np.float64), len(q), len(t)),
                                         args.repeats), 1)
        row("plan_posteriors (1 thread)", best(lambda: plan_posteriors(plan), args.repeats), 1)
        row("mea_batch: DP + traceback (1 thread)", best(lambda: mea_batch([post], gap_weight=aligner.gap_weight),
                                                         args.repeats), 1)
        row("finish: confidences (1 thread)", best(lambda: aligner._finish(chunk[0], post, aln, None), args.repeats), 1)
        def stream():
            for _ in range(args.chunks):
                yield from aligner._jax_decode_tasks(chunk, solved, False)

        if not hasattr(aligner, "_run_tasks"):  # a checkout from before the stream's tasks (for a before/after)
            print(f"{L:6d} {'':5s} (this checkout decodes chunk by chunk: no stream rows)")
            continue
        for workers in sorted({1, threads}):
            aligner.workers = workers
            row(f"decode, {workers} thread{'s' if workers > 1 else ''}",
                best(lambda: list(aligner._run_tasks(stream())), args.repeats), args.chunks * len(chunk))
    write_json(args.json, {"script": "benchmarks/host_decode.py", "date": datetime.date.today().isoformat(),
                           "machine": machine(), "model": args.model, "threads": threads, "rows": rows})


if __name__ == "__main__":
    main()
