"""How much two models' (or a model's and a baseline's) accuracy differs on the same pairs, with
an interval: a paired bootstrap over families.

Reads two JSON files of ``aligner_threshold.py`` on the same split and shards (the same pairs
in the same order) and prints, per group (all, structural, structural below 20%
identity, Pfam), micro precision / recall / F1 of each and the difference A - B with its 95%
interval, from resampling whole families with replacement
(:func:`sinkalign.align.metrics.micro_difference`): pairs of one family are not independent
evidence, and the splits are samples of families. ``share A better`` is the share of
resamples in which A has the higher F1. The interval is over the pairs only: it takes both
models as given, not the spread between training runs of one recipe. A group of fewer than 10
families (the Pfam sets: 2-3 large families) is flagged, its interval meaningless.

    python benchmarks/compare_models.py benchmarks/results/aligner_threshold_valid_X.json \\
        benchmarks/results/aligner_threshold_valid.json
    python benchmarks/compare_models.py A.json A.json --row-b NW     # a model against NW

``--row-a`` / ``--row-b``: which row of each file (default: each model's own threshold; ``t=0``
every MEA column, ``NW``, ``SW``).
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path

import numpy as np
from _common import machine, pair_groups, write_json

from sinkalign.align.metrics import micro_difference

FEW = 10  # below this many families a bootstrap over them says little (the Pfam evaluation sets have 2-3)


def load(path: str, row: str | None) -> tuple[dict, str, dict]:
    data = json.loads(Path(path).read_text())
    if "per_pair" not in data:
        raise SystemExit(f"{path} has no per-pair counts: rerun aligner_threshold.py (its results since "
                         "2026-11-24 keep them)")
    row = row or f"t={data['shipped_threshold']:g}"
    if row not in data["per_pair"]["counts"]:
        raise SystemExit(f"{path}: no per-pair counts for row {row!r}; it has {list(data['per_pair']['counts'])}")
    return data, row, data["per_pair"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--row-a", default=None)
    ap.add_argument("--row-b", default=None)
    ap.add_argument("--n-boot", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the comparison here")
    args = ap.parse_args()

    data_a, row_a, pa = load(args.a, args.row_a)
    data_b, row_b, pb = load(args.b, args.row_b)
    if data_a["split"] != data_b["split"]:
        raise SystemExit(f"{args.a} is on split {data_a['split']}, {args.b} on {data_b['split']}")
    # one pair can come from two sources (a HOMSTRAD pair also in OXBench): pairs are matched by
    # position, and both files must list the same pairs in the same order (the same shards)
    keys = lambda p: list(zip(p["source"], p["family"], p["id"]))  # noqa: E731
    if keys(pa) != keys(pb):
        raise SystemExit("the two files do not list the same pairs in the same order (other shards or --max-pairs?)")
    counts_a = np.asarray(pa["counts"][row_a], dtype=np.int64)
    counts_b = np.asarray(pb["counts"][row_b], dtype=np.int64)
    family = np.asarray([f"{s}:{f}" for s, f in zip(pa["source"], pa["family"])], dtype=object)

    name_a = f"{Path(data_a['model']).name} {row_a}"
    name_b = f"{Path(data_b['model']).name} {row_b}"
    print(f"split {data_a['split']}; A = {name_a} ({args.a}); B = {name_b} ({args.b}); "
          f"paired bootstrap over families, {args.n_boot} resamples")
    print("| group | pairs (families) | A P / R / F1 | B P / R / F1 | F1 A - B [95%] | recall A - B [95%] | share A better |")
    print("|---|---|---|---|---|---|---|")
    out = {}
    for g, idx in pair_groups(pa["source"], pa["identity"]).items():  # the groups aligner_threshold.py reported
        if not idx:
            continue
        res = micro_difference(counts_a[idx], counts_b[idx], family[idx], n_boot=args.n_boot, seed=args.seed)
        out[g] = res
        fmt = lambda s: f"{s['precision']:.3f} / {s['recall']:.3f} / {s['f1']:.3f}"  # noqa: E731
        d, ci = res["difference"], res["ci"]
        print(f"| {g} | {res['n']} ({res['clusters']}) | {fmt(res['a'])} | {fmt(res['b'])} | "
              f"{d['f1']:+.3f} [{ci['f1'][0]:+.3f}, {ci['f1'][1]:+.3f}] | "
              f"{d['recall']:+.3f} [{ci['recall'][0]:+.3f}, {ci['recall'][1]:+.3f}] | {res['share_a_better']:.3f} |"
              + (" few families: no interval to trust" if res["clusters"] < FEW else ""))
    if args.json:
        write_json(Path(args.json), {"date": date.today().isoformat(), "machine": machine(), "split": data_a["split"],
                                     "a": {"file": args.a, "model": data_a["model"], "row": row_a},
                                     "b": {"file": args.b, "model": data_b["model"], "row": row_b},
                                     "n_boot": args.n_boot, "seed": args.seed, "groups": out})
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
