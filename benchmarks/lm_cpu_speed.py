"""What a genome LM costs a user on the CPU: generation and held-out scoring, per model.

For every ``--model`` (checkpoint, run directory or shipped name; the first is the baseline of
the ratios), in this process, on the same input:

* ``generate``: ``sinkalign.lm.generate.generate`` of ``--length`` bases (KV cache, seed 1,
  temperature 1) after a ``--prompt-length`` prompt from the C. diphtheriae chromosome: the
  median of ``--reps`` wall times (after one warm-up run) and ms a base;
* ``score``: ``heldout_bits_per_base`` of the first ``--score-bases`` bases of the
  chromosome's held-out tenth (context ``--context``, stride half of it, as ``sinkalign lm
  eval``): the median wall time and bases/s.

Prints a table and writes JSON (with the machine and torch's thread count).

    python benchmarks/lm_cpu_speed.py --model default --model runs/lm_gpu --json results/lm_cpu_speed.json
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time
from pathlib import Path

import torch
from _common import machine, write_json

from sinkalign.lm.data import read_genome, train_val_split
from sinkalign.lm.evaluate import heldout_bits_per_base
from sinkalign.lm.generate import generate, load_model, resolve_model_path

ROOT = Path(__file__).resolve().parents[1]
CDIPH = ROOT.parent / "shared" / "data" / "genomes" / "GCF_001457455.1_NCTC11397_genomic.fna.gz"


def _median_s(fn, reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", help="checkpoint, run directory or shipped name (repeat)")
    ap.add_argument("--genome", default=str(CDIPH))
    ap.add_argument("--length", type=int, default=2000, help="bases generated")
    ap.add_argument("--prompt-length", type=int, default=128)
    ap.add_argument("--score-bases", type=int, default=20000)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    models = args.model or ["default"]

    _, seq = next(iter(read_genome(args.genome)))
    prefix, heldout = train_val_split(seq, 0.1)
    prompt = prefix[:args.prompt_length]
    rows = []
    for name in models:
        model = load_model(name).model
        n_params = sum(p.numel() for p in model.parameters())
        gen_s = _median_s(lambda: generate(model, prompt, args.length, seed=1), args.reps)
        score_s = _median_s(lambda: heldout_bits_per_base(model, heldout, context=args.context, prefix=prefix,
                                                          max_bases=args.score_bases), args.reps)
        rows.append({"model": name, "path": str(resolve_model_path(name)), "parameters": n_params,
                     "generate_s": gen_s, "generate_ms_per_base": 1e3 * gen_s / args.length,
                     "score_s": score_s, "score_bases_per_s": args.score_bases / score_s})
    base = rows[0]
    for r in rows:
        r["generate_x_first"] = r["generate_s"] / base["generate_s"]
        r["score_x_first"] = r["score_s"] / base["score_s"]

    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); generate {args.length} bases after "
          f"{args.prompt_length}, score {args.score_bases} held-out bases (context {args.context}); median of {args.reps}")
    print(f"{'model':<28} {'params':>10} {'ms/base':>9} {'x first':>8} {'score s':>8} {'bases/s':>9} {'x first':>8}")
    for r in rows:
        print(f"{r['model'][-28:]:<28} {r['parameters']:>10,} {r['generate_ms_per_base']:>9.2f} "
              f"{r['generate_x_first']:>8.2f} {r['score_s']:>8.2f} {r['score_bases_per_s']:>9.0f} {r['score_x_first']:>8.2f}")
    if args.json:
        write_json(args.json, {"benchmark": "lm_cpu_speed", "date": datetime.date.today().isoformat(),
                               "machine": machine(), "torch_threads": torch.get_num_threads(),
                               "args": {k: str(v) for k, v in vars(args).items()}, "rows": rows})
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
