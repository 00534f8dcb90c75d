"""Peak memory and time of ``sinkalign align`` on genes against a long contig, under each budget
of residue pairs in work in the process (``HOST_CELL_BUDGET``).

A lopsided pair is solved in the box around its Smith-Waterman hit, but its classical guides
(Needleman-Wunsch and Smith-Waterman tracebacks, parasail) are dense: about 6 bytes a residue
pair, 1.2 GB for 2 kb against 100 kb. Two threads aligning two such pairs (the two strands of
``--strand both``, or two genes) held two tables. Since 2026-11-27 a pair of more than
``AUTO_BAND_CELLS`` residue pairs waits while others in work would take the total past
``HOST_CELL_BUDGET``. Budgets (set in the child process): ``auto`` (the default: half the memory
available at 6 bytes a residue pair), ``tight`` (``MAX_PAIR_CELLS``, one pair of the largest size
at a time: what a machine with about 3 GB free gets), ``off`` (no budget, as before).

The contig is a stretch of ``--contig`` bp of the first genome of the held-out genera
(``data_manifests/genomes_multi_split.json``, test side); the genes are ``--genes`` windows of
``--gene`` bp from it, each evolved with 5% substitutions and a few indels (seeded, as
``dna_strands.py`` does). Each run is a fresh ``sinkalign align`` process (``--threads 2``), its
peak resident set size ``ru_maxrss`` from ``os.wait4``.

    python benchmarks/lopsided_memory.py --json benchmarks/results/lopsided_memory.json
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
from dna_strands import evolve
from homology_evalues_dna import contigs, genomes

BUDGETS = {"auto": "", "tight": "A.HOST_CELL_BUDGET = A.MAX_PAIR_CELLS; ", "off": "A.HOST_CELL_BUDGET = 2**62; "}


def run(args: list[str], budget: str) -> tuple[float, float]:
    """``(wall s, peak MB)`` of one ``sinkalign align`` process."""
    code = f"import sinkalign.align.aligner as A; {BUDGETS[budget]}from sinkalign.cli.main import main; main()"
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, "align", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if status != 0:
        raise RuntimeError(f"sinkalign align {' '.join(args)} failed: {err[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contig", type=int, default=100_000)
    ap.add_argument("--gene", type=int, default=2_000)
    ap.add_argument("--genes", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    seq = max(contigs(genomes("test")[:1])[0], key=len)
    start = int(rng.integers(0, len(seq) - args.contig))
    contig = seq[start:start + args.contig]
    genes = []
    for k in range(args.genes):
        at = int(rng.integers(0, args.contig - args.gene))
        genes.append(evolve(contig[at:at + args.gene], rng, 0.05, 0.005)[0])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "contig.fa").write_text(f">contig\n{contig}\n")
        (tmp / "gene.fa").write_text(f">gene0\n{genes[0]}\n")
        (tmp / "genes.fa").write_text("".join(f">gene{k}\n{g}\n" for k, g in enumerate(genes)))
        cases = [("1 gene, --strand both (default)", ["gene.fa", "contig.fa"]),
                 ("1 gene, --strand plus", ["gene.fa", "contig.fa", "--strand", "plus"]),
                 (f"{args.genes} genes, --strand plus", ["genes.fa", "contig.fa", "--strand", "plus"])]
        print(f"{args.gene} bp gene(s) against a {args.contig:,} bp contig, --threads 2, fresh process each")
        print(f"{'case':<34} {'budget':<7} {'wall s':>7} {'peak MB':>8}")
        for label, files in cases:
            for budget in BUDGETS:
                wall, peak = run([str(tmp / f) if f.endswith(".fa") else f for f in files]
                                 + ["--threads", "2", "--no-progress", "-o", str(tmp / "out.tsv"), "--overwrite"],
                                 budget)
                rows.append({"case": label, "budget": budget, "wall_s": wall, "peak_mb": peak})
                print(f"{label:<34} {budget:<7} {wall:7.2f} {peak:8.0f}", flush=True)
    if args.json:
        write_json(args.json, {"benchmark": "lopsided_memory", "machine": machine(),
                               "date": datetime.date.today().isoformat(), "args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
