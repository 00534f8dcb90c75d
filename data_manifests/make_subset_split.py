"""Split manifest for a learning curve: a seeded subset of the training families.

The training items (whole families / sets) of ``structural_split.json`` are shuffled with a
fixed seed and taken in that order until their pairs (as counted in the full shards'
``index.json``, i.e. after ``--max-pairs-per-family``) reach the wanted fraction of the training
pairs; the same seed gives nested subsets (10% inside 30%). Validation and test items keep their
sides. ``shards build`` needs a side for every family, so the dropped training families are put
on the test side of the subset manifest: use the subset shards only for training and
validation (the validation split is identical, pairs are drawn with a per-family seed) and
evaluate on the full shards' test split.

    python data_manifests/make_subset_split.py --fraction 0.1 --index /tmp/i14/mixed/index.json \
        --out /tmp/lc/split_10.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def subset_manifest(manifest: dict, index: dict, fraction: float, seed: int) -> dict:
    """A copy of ``manifest`` whose training side keeps ``fraction`` of the training pairs."""
    assignment = manifest["assignment"]
    fams = index["families"]
    train = sorted(f for f, side in assignment.items() if side == "train")
    total = sum(fams[f]["n_pairs"] for f in train)
    order = np.random.default_rng(seed).permutation(len(train))
    kept, n = [], 0
    for i in order:
        if n >= fraction * total:
            break
        kept.append(train[i])
        n += fams[train[i]]["n_pairs"]
    keep = set(kept)
    out = dict(manifest)
    out["assignment"] = {f: ("test" if side == "train" and f not in keep else side)
                         for f, side in assignment.items()}
    out["subset"] = {"fraction": fraction, "seed": seed, "train_families": len(kept),
                     "train_families_total": len(train), "train_pairs": n,
                     "train_pairs_total": total, "kept_train_families": sorted(kept),
                     "note": "dropped training families are on the test side; do not use this test split"}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", type=Path, default=Path(__file__).with_name("structural_split.json"))
    ap.add_argument("--index", type=Path, required=True, help="index.json of the full shards")
    ap.add_argument("--fraction", type=float, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    out = subset_manifest(json.loads(args.manifest.read_text()), json.loads(args.index.read_text()),
                          args.fraction, args.seed)
    args.out.write_text(json.dumps(out, indent=1))
    s = out["subset"]
    print(f"{args.out}: {s['train_families']}/{s['train_families_total']} training families, "
          f"{s['train_pairs']}/{s['train_pairs_total']} pairs")


if __name__ == "__main__":
    main()
