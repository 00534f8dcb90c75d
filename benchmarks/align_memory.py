"""Peak memory of ``sinkalign align`` against the number of pairs (issue 15: flat in the pairs).

Each run is a fresh ``python -m sinkalign.cli.main align ...`` subprocess; its peak resident
set size is ``ru_maxrss`` from ``os.wait4`` (the child alone). Sequences are tiny (8-16
residues of random protein, seed 0) so that 100,000 pairs are affordable; what is measured
is the pipeline's memory, which must not grow with the pair count. Modes:

* ``zip``: two FASTA files, ``--pairing zip``, TSV written to a file;
* ``pairs-stdout``: ``--pairs`` list over an indexed FASTA of 1,000 records, TSV to stdout
  (discarded);
* ``all``: all-vs-all against a fixed 100-record target file (queries = pairs / 100);
* ``zip-plans``: as ``zip`` with ``--plan-out`` (every transport plan into a .npz).

    python benchmarks/align_memory.py [--sizes 1000 100000] [--modes zip pairs-stdout all zip-plans] [--repeats 3]
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

import numpy as np
from _common import machine, write_json

ROOT = Path(__file__).resolve().parents[1]
AA = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
MODES = ("zip", "pairs-stdout", "all", "zip-plans")


def random_fasta(path: Path, prefix: str, n: int, rng) -> None:
    with open(path, "w") as fh:
        for i in range(n):
            fh.write(f">{prefix}{i}\n{''.join(rng.choice(AA, rng.integers(8, 17)))}\n")


def inputs(tmp: Path, mode: str, n: int) -> tuple[list[str], Path | None]:
    """The align arguments for ``n`` pairs in ``mode`` and the output file (None: stdout)."""
    rng = np.random.default_rng(0)
    out = tmp / f"{mode}-{n}.tsv"
    if mode in ("zip", "zip-plans"):
        random_fasta(tmp / "q.fa", "q", n, rng)
        random_fasta(tmp / "t.fa", "t", n, rng)
        args = [str(tmp / "q.fa"), str(tmp / "t.fa"), "--pairing", "zip", "-o", str(out)]
        if mode == "zip-plans":
            args += ["--plan-out", str(tmp / f"plans-{n}.npz")]
        return args, out
    if mode == "all":
        random_fasta(tmp / "q.fa", "q", n // 100, rng)
        random_fasta(tmp / "t.fa", "t", 100, rng)
        return [str(tmp / "q.fa"), str(tmp / "t.fa"), "-o", str(out)], out
    if mode == "pairs-stdout":
        random_fasta(tmp / "seqs.fa", "s", 1000, rng)
        with open(tmp / "pairs.tsv", "w") as fh:
            for a, b in rng.integers(0, 1000, (n, 2)):
                fh.write(f"s{a}\ts{b}\n")
        return ["--pairs", str(tmp / "pairs.tsv"), str(tmp / "seqs.fa"), "-o", "-"], None
    raise ValueError(f"mode={mode!r} is not one of {MODES}")


def run(mode: str, n: int, batch_size: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="sinkalign-mem-") as tmp:
        tmp = Path(tmp)
        args, out = inputs(tmp, mode, n)
        cmd = [sys.executable, "-m", "sinkalign.cli.main", "align", *args, "--no-progress",
               "--batch-size", str(batch_size)]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL if out is None else None,
                                stderr=subprocess.PIPE)
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{err.decode()[-2000:]}")
        if out is not None:
            with open(out) as fh:
                rows = sum(1 for _ in fh) - 1
            if rows != n:
                raise RuntimeError(f"{mode} {n}: {rows} rows written, expected {n}")
        return {"peak_rss_bytes": usage.ru_maxrss * 1024, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3, help="runs per (mode, size); the median peak is reported")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "align_memory.json"))
    args = ap.parse_args()
    rows = []
    print(f"{'mode':<14}{'pairs':>9}{'peak RSS MiB (median)':>23}{'min-max':>15}{'vs smallest':>13}"
          f"{'wall s':>9}")
    for mode in args.modes:
        base = None
        for n in sorted(args.sizes):
            runs = [run(mode, n, args.batch_size) for _ in range(args.repeats)]
            peaks = sorted(r["peak_rss_bytes"] for r in runs)
            peak = float(np.median(peaks))
            base = base or peak
            row = {"mode": mode, "pairs": n, "peak_rss_bytes_median": peak, "peak_rss_bytes_runs": peaks,
                   "ratio_to_smallest": peak / base, "wall_s_median": float(np.median([r["wall_s"] for r in runs]))}
            rows.append(row)
            print(f"{mode:<14}{n:>9}{peak / 2**20:>23.1f}{f'{peaks[0] / 2**20:.0f}-{peaks[-1] / 2**20:.0f}':>15}"
                  f"{row['ratio_to_smallest']:>13.3f}{row['wall_s_median']:>9.1f}", flush=True)
    write_json(args.json, {"benchmark": "align_memory", "date": datetime.date.today().isoformat(),
                           "machine": machine(), "batch_size": args.batch_size, "repeats": args.repeats,
                           "command": " ".join(sys.argv), "results": rows})
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
