"""Small synthetic protein families written as real Stockholm files, for aligner tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from Bio import AlignIO
from Bio.Align import MultipleSeqAlignment
from Bio.Seq import Seq
from Bio.SeqRecord import SeqRecord

AA = "ACDEFGHIKLMNPQRSTVWY"


def write_family(path: Path, name: str, n_seqs: int, length: int, seed: int) -> Path:
    """An ancestor evolved into ``n_seqs`` members by substitutions and deletions (as gaps)."""
    rng = np.random.default_rng(seed)
    anc = rng.choice(list(AA), size=length)
    rows = []
    for s in range(n_seqs):
        row = anc.copy()
        sub = rng.random(length) < 0.25
        row[sub] = rng.choice(list(AA), size=sub.sum())
        for _ in range(2):  # two deletions of 1-4 columns
            start = rng.integers(0, length - 4)
            row[start : start + rng.integers(1, 5)] = "-"
        rows.append(SeqRecord(Seq("".join(row)), id=f"{name}_{s}/1-{(row != '-').sum()}"))
    msa = MultipleSeqAlignment(rows)
    msa.annotations = {}
    AlignIO.write(msa, str(path), "stockholm")
    text = path.read_text().replace("# STOCKHOLM 1.0\n", f"# STOCKHOLM 1.0\n#=GF ID {name}\n#=GF AC PF9{seed:04d}\n", 1)
    path.write_text(text)
    return path


def make_families(directory: Path, n_families: int = 4, n_seqs: int = 5, length: int = 40) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return [write_family(directory / f"fam{i}.sto", f"fam{i}", n_seqs, length + 3 * i, seed=i)
            for i in range(n_families)]
