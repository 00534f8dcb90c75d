"""Does a model align a pair the same whichever sequence is the query?

Every pair of one split of a shard directory is aligned as stored (a, b) and turned round
(b, a), in one process, with each model given. Printed per model: how many pairs give the same
aligned residue pairs both ways, the mean and largest share of columns that differ (symmetric
difference over union), the largest ratio of the two E-values, and F1 (core residues,
micro-averaged) of each direction against the reference.

    python benchmarks/aligner_symmetry.py --shards SHARDS --split valid --model learned \
        --model blosum --json benchmarks/results/aligner_symmetry.json

``SHARDS`` as in ``benchmarks/aligner_learned.py``. A model is a shipped name or a model
directory (e.g. an older model exported from the git history, to compare). ``--time`` also
times each model on each engine over the first ``--time-pairs`` pairs of at most 400 residues
(wall clock, one way, best of ``--repeats``, the models taking turns in one process), and
times each model's JAX scores alone (``model.queries_keys``, jit, a batch of the first 8 such
pairs padded to 400, best of 20).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import date

import numpy as np

from sinkalign import Aligner
from sinkalign.align.metrics import core_pair_scores, micro_average
from sinkalign.io.shards import ShardDataset


def measure(aligner: Aligner, examples: list) -> dict:
    stored = [(e.pair.query_id, e.pair.query_seq, e.pair.target_id, e.pair.target_seq) for e in examples]
    t0 = time.perf_counter()
    forward = list(aligner.align_many(stored))
    backward = list(aligner.align_many([(t, b, q, a) for q, a, t, b in stored]))
    seconds = time.perf_counter() - t0
    same, shares, log_ratios, f1 = 0, [], [], {"forward": [], "backward": []}
    for example, one, other in zip(examples, forward, backward):
        a = {tuple(p) for p in one.alignment.pairs.tolist()}
        b = {(j, i) for i, j in other.alignment.pairs.tolist()}
        same += a == b
        shares.append(len(a ^ b) / max(1, len(a | b)))
        if one.evalue is not None and other.evalue is not None and one.evalue > 0 and other.evalue > 0:
            log_ratios.append(abs(np.log(one.evalue) - np.log(other.evalue)))
        f1["forward"].append(core_pair_scores(one.alignment.pairs, example.pair))
        f1["backward"].append(core_pair_scores(other.alignment.pairs[:, ::-1], example.pair))
    return {
        "pairs": len(examples),
        "same_both_ways": same,
        "mean_share_of_columns_differing": float(np.mean(shares)),
        "max_share_of_columns_differing": float(np.max(shares)),
        "max_evalue_ratio": float(np.exp(max(log_ratios))) if log_ratios else None,
        "f1_forward": micro_average(f1["forward"])["f1"],
        "f1_backward": micro_average(f1["backward"])["f1"],
        "pairs_per_s_both_ways": 2 * len(examples) / seconds,
    }


def time_queries_keys(aligner: Aligner, jobs: list, repeats: int = 20) -> float:
    """Best wall time (s) of the jitted ``queries_keys`` of one batch of ``jobs`` padded to 400."""
    import jax

    from sinkalign.align import model as M

    batch = M.make_batch([(q, t, None, None, None) for _, q, _, t in jobs], aligner.config, 400, 400)
    fn = jax.jit(lambda p, b: M.queries_keys(p, b, aligner.config))
    jax.block_until_ready(fn(aligner.params, batch))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(aligner.params, batch))
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", required=True)
    ap.add_argument("--split", default="valid", choices=["train", "valid", "test"])
    ap.add_argument("--model", action="append", required=True, help="repeatable")
    ap.add_argument("--json")
    ap.add_argument("--time", action="store_true", help="also time every model on both engines")
    ap.add_argument("--time-pairs", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    data = ShardDataset(args.shards, args.split)
    examples = [data[k] for k in range(len(data))]
    out = {"date": date.today().isoformat(), "machine": f"{platform.machine()} {platform.processor()}".strip(),
           "split": args.split, "models": {}}
    print("| model | pairs | same both ways | columns differing (mean / max) | largest E-value ratio "
          "| F1 a-b / b-a |")
    print("|---|---|---|---|---|---|")
    for name in args.model:
        r = measure(Aligner.load(name), examples)
        out["models"][name] = r
        ratio = "-" if r["max_evalue_ratio"] is None else f"{r['max_evalue_ratio']:.3g}"
        print(f"| {name} | {r['pairs']} | {r['same_both_ways']} | {r['mean_share_of_columns_differing']:.4f} / "
              f"{r['max_share_of_columns_differing']:.3f} | {ratio} | {r['f1_forward']:.4f} / {r['f1_backward']:.4f} |")
    if args.time:
        subset = [e for e in examples if max(len(e.pair.query_seq), len(e.pair.target_seq)) <= 400][: args.time_pairs]
        jobs = [(e.pair.query_id, e.pair.query_seq, e.pair.target_id, e.pair.target_seq) for e in subset]
        aligners = {(name, engine): Aligner.load(name, engine=engine) for engine in ("numpy", "jax")
                    for name in args.model}
        for aligner in aligners.values():  # compile the jax engine's programs before timing
            list(aligner.align_many(jobs))
        best = {key: float("inf") for key in aligners}
        for _ in range(args.repeats):
            for key, aligner in aligners.items():
                if aligner.engine == "numpy":
                    aligner._numpy.clear_cache()
                t0 = time.perf_counter()
                list(aligner.align_many(jobs))
                best[key] = min(best[key], time.perf_counter() - t0)
        out["timing"] = {"pairs": len(jobs), "repeats": args.repeats,
                         "pairs_per_s": {f"{name} / {engine}": len(jobs) / t for (name, engine), t in best.items()}}
        print(f"\n{len(jobs)} pairs of <= 400 residues, best of {args.repeats}, pairs/s (wall):")
        for (name, engine), t in best.items():
            print(f"  {name} / {engine}: {len(jobs) / t:.1f}")
        forward = {name: time_queries_keys(aligners[(name, "jax")], jobs[:8]) for name in args.model}
        out["timing"]["queries_keys_ms"] = {name: 1e3 * t for name, t in forward.items()}
        print(f"\nqueries_keys of {len(jobs[:8])} pairs padded to 400 (jit), best of 20, ms:")
        for name, t in forward.items():
            print(f"  {name}: {1e3 * t:.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
            fh.write("\n")


if __name__ == "__main__":
    main()
