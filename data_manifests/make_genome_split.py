"""Split the multi-genome corpus (../shared/data/genomes/multi) by whole genera.

Genus: the first word of the species (after "Candidatus"; "candidate division WOR-1" is one
unit); Escherichia and Shigella are one unit (Shigella lies inside E. coli). Corynebacterium
stays in train: C. diphtheriae (genomes/GCF_001457455.1, the shipped model's genome) is trained
on. So do units of more than MAX_HELD_OUT genomes (Cupriavidus, Blochmannia: half the bases
between them), which is where balanced sampling matters. The other units are shuffled with
numpy's default_rng(SEED); the first N_TEST are the test genera (judged once, by the bar of
the genome-LM issue), the next N_VALID the validation genera (model selection), the rest
train. Every genome of a unit goes to the unit's split.

    python data_manifests/make_genome_split.py [MANIFEST.tsv] > data_manifests/genomes_multi_split.json
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np

SEED, N_TEST, N_VALID = 0, 5, 4
DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "genomes" / "multi" / "MANIFEST.tsv"
MERGED = {"Shigella": "Escherichia"}
FORCED_TRAIN = {"Corynebacterium"}
MAX_HELD_OUT = 3


def genus(species: str) -> str:
    words = species.split()
    if words[:2] == ["candidate", "division"]:
        return " ".join(words[2:3])
    if words[0] == "Candidatus":
        words = words[1:]
    return MERGED.get(words[0], words[0])


def main() -> None:
    manifest = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    with open(manifest, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    sizes: dict[str, int] = {}
    for r in rows:
        sizes[genus(r["species"])] = sizes.get(genus(r["species"]), 0) + 1
    units = sorted(u for u, n in sizes.items() if u not in FORCED_TRAIN and n <= MAX_HELD_OUT)
    order = [units[i] for i in np.random.default_rng(SEED).permutation(len(units))]
    split = {u: "test" for u in order[:N_TEST]} | {u: "valid" for u in order[N_TEST:N_TEST + N_VALID]}
    genomes = {r["file"]: {"genus": genus(r["species"]), "split": split.get(genus(r["species"]), "train"),
                           "species": r["species"], "gc": float(r["GC_fraction"]), "length": int(r["total_length"])}
               for r in rows}
    summary = {}
    for name in ("train", "valid", "test"):
        sel = [g for g in genomes.values() if g["split"] == name]
        summary[name] = {"genera": sorted({g["genus"] for g in sel}), "genomes": len(sel),
                         "bases": sum(g["length"] for g in sel),
                         "gc_range": [min(g["gc"] for g in sel), max(g["gc"] for g in sel)]}
    out = {"source": "genomes/multi/MANIFEST.tsv", "rule": __doc__.split("\n\n")[0].replace("\n", " "),
           "seed": SEED, "summary": summary, "genomes": genomes}
    json.dump(out, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
