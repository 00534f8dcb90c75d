"""A genome LM on genera it never saw, against each genome's own k-mer model (the issue's bar).

For every genome of the chosen split of ``data_manifests/genomes_multi_split.json`` (``valid``
for model selection; ``test`` is judged once, at the end) and for C. diphtheriae (the shipped
model's genome), per genome, on the last ``--val-fraction`` of each record:

* ``lm``: the model's bits/base (strided windows of ``--context`` bases, stride half of it,
  the record's first part as the context of the first bases: it sees the genome only in
  context, never in training);
* ``markov_own``: an order-``--order`` Markov chain fitted to that genome's own first part
  (every record), scored on the same bases: what a per-genome k-mer model gets by seeing the
  genome, and what a universal model must beat without seeing it;
* ``markov6_own`` for C. diphtheriae: the order-6 chain of BENCHMARKS' shipped-model table.

Prints a table (mean over genomes, and per genome) and writes JSON. Models: ``--model`` paths
or run directories (default: the shipped model), each evaluated on the same bases.

    python benchmarks/lm_multi_genome.py --model runs/lm_multi --split valid [--max-bases 20000]
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

import numpy as np
from _common import write_json

from sinkalign.lm.data import read_genome, train_val_split
from sinkalign.lm.evaluate import heldout_bits_per_base
from sinkalign.lm.generate import load_model, resolve_model_path
from sinkalign.lm.markov import MarkovModel

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "genomes"
SPLIT = ROOT / "data_manifests" / "genomes_multi_split.json"
CDIPH = SHARED / "GCF_001457455.1_NCTC11397_genomic.fna.gz"


def genome_rows(path: Path, models: dict, args) -> dict:
    recs = read_genome(path)
    parts = [train_val_split(seq, args.val_fraction) for _, seq in recs]
    if args.max_bases:
        parts = [(tr, va[: args.max_bases]) for tr, va in parts]
    row = {"genome": path.name, "bases_scored": sum(len(va) for _, va in parts)}
    for order in sorted({args.order, 6 if path == CDIPH else args.order}):
        mm = MarkovModel(order).fit([tr for tr, _ in parts])
        lps = np.concatenate([mm.log2_probs(va, prefix=tr) for tr, va in parts])
        row[f"markov{order}_own"] = float(-lps[np.isfinite(lps)].mean())
    for name, model in models.items():
        total, n = 0.0, 0
        for tr, va in parts:
            res = heldout_bits_per_base(model, va, context=args.context, stride=args.context // 2, prefix=tr,
                                        batch_size=args.batch_size)
            total += res.bits_per_base * res.n_scored
            n += res.n_scored
        row[f"lm:{name}"] = total / n
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=None, help="checkpoint or run directory (repeat)")
    ap.add_argument("--split", choices=["valid", "test"], default="valid")
    ap.add_argument("--order", type=int, default=5)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--max-bases", type=int, default=None, help="score only the first N held-out bases per record")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the models run")
    ap.add_argument("--genomes", type=Path, default=SHARED / "multi")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "lm_multi_genome.json"))
    args = ap.parse_args()
    split = json.loads(SPLIT.read_text())["genomes"]
    files = sorted(args.genomes / name for name, g in split.items() if g["split"] == args.split)
    models, resolved = {}, {}
    for m in args.model or [None]:
        resolved[m or "shipped"] = str(resolve_model_path(m))  # a run directory: its newest checkpoint
        models[m or "shipped"] = load_model(resolved[m or "shipped"], device=args.device).model
    t0 = time.perf_counter()
    rows = [genome_rows(p, models, args) for p in files]
    cd = genome_rows(CDIPH, models, args) if CDIPH.is_file() else None
    own = f"markov{args.order}_own"
    print(f"split {args.split}: {len(rows)} genomes; bits/base on each genome's last {args.val_fraction:.0%}")
    header = f"{'genome':58s} {own:>13s} " + " ".join(f"{k:>14s}" for k in rows[0] if k.startswith("lm:"))
    print(header)
    for r in rows + ([cd] if cd else []):
        print(f"{r['genome'][:58]:58s} {r[own]:13.4f} " + " ".join(f"{r[k]:14.4f}" for k in r if k.startswith("lm:"))
              + (f"   (markov6_own {r['markov6_own']:.4f})" if "markov6_own" in r else ""))
    summary = {own: float(np.mean([r[own] for r in rows]))}
    for k in rows[0]:
        if k.startswith("lm:"):
            summary[k] = float(np.mean([r[k] for r in rows]))
            summary[f"{k} genomes below {own}"] = int(sum(r[k] < r[own] for r in rows))
    print("mean over genomes:", json.dumps(summary))
    write_json(args.json, {"benchmark": "lm_multi_genome", "date": datetime.date.today().isoformat(),
                           "split": args.split, "args": {k: str(v) for k, v in vars(args).items()},
                           "checkpoints": resolved,
                           "rows": rows, "c_diphtheriae": cd, "summary": summary,
                           "wall_s": time.perf_counter() - t0})


if __name__ == "__main__":
    main()
