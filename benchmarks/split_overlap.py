"""Near-duplicate sequences across the structural split, and the test figures without them.

``data_manifests/structural_split.json`` keeps apart families that share a PDB code or an
*identical* sequence. A sequence that lies inside another (a domain cut from a chain) or
differs from it by a few residues is not linked, so such pairs of sequences can sit on two
sides of the split. This script measures how many validation and test pairs (and pinned
TM-align test pairs) hold a sequence that is a near-duplicate of a training sequence:

* ``contained``: it is a substring of a training sequence, or one is a substring of it
  (case ignored);
* ``near``: otherwise, at least ``--kmer-share`` (0.9) of its distinct ``--k``-mers (10)
  occur in one training sequence.

With ``--evaluate`` it then aligns the test pairs (structural and Pfam) and the TM-align pairs
with the shipped learned model and parasail Needleman-Wunsch (BLOSUM62, 11/1) and prints
F1 (core residues, micro-averaged) on all pairs and on the pairs without a near-duplicate:
whether the test figures of BENCHMARKS.md depend on the overlap.

    python benchmarks/split_overlap.py --shards SHARDS --evaluate

``SHARDS``: the shards of BENCHMARKS.md's "A learned aligner on structure-based pairs"
(``sinkalign shards build ../shared/data/structural/{homstrad,sabre,prefab,oxbench}
../shared/data/pfam_seed --alphabet protein --split-manifest data_manifests/structural_split.json
--max-pairs-per-family 300``); without ``--shards`` they are built so in a temporary folder.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import machine, write_json
from aligner_learned import source_of

from sinkalign.io.shards import ShardDataset

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results" / "split_overlap.json"


class TrainIndex:
    """The training sequences, for substring and k-mer look-ups."""

    def __init__(self, seqs: set[str], k: int) -> None:
        self.seqs = sorted(seqs)
        self.k = k
        self.by_kmer: dict[str, set[int]] = collections.defaultdict(set)
        for i, s in enumerate(self.seqs):
            for j in range(len(s) - k + 1):
                self.by_kmer[s[j : j + k]].add(i)

    def overlap(self, seq: str, share: float) -> str | None:
        """``"contained"``, ``"near"`` or ``None`` for one sequence (see the module docstring)."""
        seq = seq.upper()
        kmers = {seq[j : j + self.k] for j in range(len(seq) - self.k + 1)}
        hits = collections.Counter(i for km in kmers for i in self.by_kmer.get(km, ()))
        for i, n in hits.most_common(20):
            t = self.seqs[i]
            if seq in t or t in seq:
                return "contained"
        if kmers and hits and hits.most_common(1)[0][1] >= share * len(kmers):
            return "near"
        return None


def build_shards(out: Path) -> Path:
    sources = [str(SHARED / "structural" / s) for s in ("homstrad", "sabre", "prefab", "oxbench")]
    subprocess.run([sys.executable, "-m", "sinkalign.cli.main", "shards", "build", *sources, str(SHARED / "pfam_seed"),
                    "--alphabet", "protein", "--split-manifest", str(ROOT / "data_manifests" / "structural_split.json"),
                    "--max-pairs-per-family", "300", "--out", str(out)], check=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", default=None)
    ap.add_argument("--tmalign", default=str(SHARED / "tmalign_pairs" / "valid.tsv"),
                    help="DeepBLAST's TM-align pairs pinned to the test split (min TM >= 0.5 kept)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--kmer-share", type=float, default=0.9)
    ap.add_argument("--evaluate", action="store_true", help="align the test sets with the learned model and NW")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        shards = Path(args.shards) if args.shards else build_shards(Path(tmp) / "shards")
        train = {s.upper() for e in ShardDataset(shards, "train", load_embeddings=False)
                 for s in (e.pair.query_seq, e.pair.target_seq)}
        index = TrainIndex(train, args.k)
        sets = {split: [e.pair for e in ShardDataset(shards, split, load_embeddings=False)] for split in ("valid", "test")}
    from sinkalign.io.alignments import read_tmalign_pairs

    sets["tmalign"] = list(read_tmalign_pairs(args.tmalign, min_tm=0.5))
    def pair_flag(p) -> str | None:  # the stronger of its two sequences' flags
        found = {index.overlap(s, args.kmer_share) for s in (p.query_seq, p.target_seq)}
        return "contained" if "contained" in found else "near" if "near" in found else None

    flags = {name: [pair_flag(p) for p in pairs] for name, pairs in sets.items()}
    counts = {}
    print(f"{len(index.seqs)} distinct training sequences; k = {args.k}, k-mer share >= {args.kmer_share}")
    print("| set | source | pairs | a sequence contained in / containing a training one | near-identical (k-mers) |")
    print("|---|---|---:|---:|---:|")
    for name, pairs in sets.items():
        by_source = collections.defaultdict(collections.Counter)
        for p, flag in zip(pairs, flags[name]):
            src = "tmalign" if name == "tmalign" else source_of(p)
            by_source[src]["pairs"] += 1
            by_source[src][flag or "clean"] += 1
        for src, c in sorted(by_source.items()):
            print(f"| {name} | {src} | {c['pairs']} | {c['contained']} | {c['near']} |")
        counts[name] = {src: dict(c) for src, c in by_source.items()}
    result = {"date": datetime.date.today().isoformat(), "machine": machine(), "k": args.k,
              "kmer_share": args.kmer_share, "train_sequences": len(index.seqs), "counts": counts}

    if args.evaluate:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from aligner_learned import BINS, predict, table

        from sinkalign.align.aligner import Aligner

        aligners = {"learned": Aligner.load("learned")}
        result["f1"] = {}
        for name in ("test", "tmalign"):
            pairs = sets[name]
            if name == "test":  # the structural test pairs and the Pfam test families apart, as in BENCHMARKS.md
                groups = {"structural test": [i for i, p in enumerate(pairs) if source_of(p) != "pfam"],
                          "Pfam test": [i for i, p in enumerate(pairs) if source_of(p) == "pfam"]}
            else:
                groups = {"TM-align": list(range(len(pairs)))}
            preds = {m: predict(m, pairs, aligners, args)[0] for m in ("learned", "NW")}
            for group, idx in groups.items():
                clean = [i for i in idx if flags[name][i] is None]
                for label, chosen in (("all", idx), ("without near-duplicates", clean)):
                    tab = table([pairs[i] for i in chosen], {m: [preds[m][i] for i in chosen] for m in preds})
                    result["f1"][f"{group}, {label}"] = tab
                    cells = " | ".join(f"{tab[m]['all']['f1']:.3f} / {tab[m][BINS[0][2]]['f1']:.3f}" for m in preds)
                    print(f"| {group}, {label} ({len(chosen)} pairs; {tab['NW'][BINS[0][2]]['n']} below 20%) | {cells} |")
    write_json(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
