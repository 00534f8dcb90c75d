"""``builtin``: fixed per-residue features for protein and DNA that need no download.

Every residue maps to one row of a fixed table, so the embedding is deterministic,
context-free and computed by a single vectorised NumPy gather. (Context comes from the
learned encoder of the alignment model, not from here.) Protein and DNA share one
``D = 53`` space with disjoint blocks; the block of the other alphabet is zero.

Columns (0-based, half-open):

=========  =====  ================================================================
columns    width  feature
=========  =====  ================================================================
[0, 20)    20     protein: BLOSUM62 row of the residue against
                  ``ACDEFGHIKLMNPQRSTVWY``, divided by 4 (Henikoff & Henikoff
                  1992, PNAS 89:10915; read from ``Bio.Align.substitution_matrices``)
[20, 41)   21     protein: one-hot over ``ACDEFGHIKLMNPQRSTVWY`` then ``X``
41         1      protein: Kyte-Doolittle hydropathy / 4.5, in [-1, 1]
                  (Kyte & Doolittle 1982, J Mol Biol 157:105)
42         1      protein: side-chain charge at pH 7: D, E -1; K, R +1; H +0.1
                  (Henderson-Hasselbalch with the histidine pKa 6.0: 1/(1+10) ~ 0.09)
43         1      protein: residue volume (Zamyatnin 1972, Prog Biophys Mol Biol
                  24:107), min-max scaled over the 20 to [-1, 1] (G -1, W +1)
[44, 49)   5      DNA: one-hot over ``ACGTN``
[49, 53)   4      DNA: row of the transition/transversion similarity matrix
                  ``TRANS`` (Wheeler 1996, in Biopython) against ``ACGT``, mapped
                  by (s - 2.5) / 2.5: match 1, transition 0.6, transversion -1
=========  =====  ================================================================

Ambiguous and non-standard letters (all accepted by :func:`sinkalign.io.fasta.read_fasta`):

* protein ``B`` = mean of the D and N rows, ``Z`` = mean of E and Q, ``J`` = mean of I
  and L (the whole 53-vector, so the one-hot is split 0.5/0.5); ``U``
  (selenocysteine) = ``C``; ``O`` (pyrrolysine) = ``K``; ``X`` has its own one-hot
  column and the unweighted mean over the 20 standard residues of the BLOSUM62 and
  physico-chemical columns. (BLOSUM62's own B/Z/X rows are not used, so every
  ambiguous letter is defined the same way.)
* DNA ``U`` = ``T``; ``N`` has its own one-hot column and the mean TRANS row of
  ``ACGT``; IUPAC codes ``R Y S W K M B D H V`` are the mean of the vectors of the bases
  they stand for (``R`` = mean of A and G, ...).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence as SequenceT
from dataclasses import dataclass

import numpy as np
from Bio.Align import substitution_matrices

from sinkalign.align.embed.base import SequenceLike, as_records
from sinkalign.errors import InputError

__all__ = ["BUILTIN_DIM", "BuiltinConfig", "BuiltinEmbedder", "builtin_tables"]

AMINO = "ACDEFGHIKLMNPQRSTVWY"
BASES = "ACGT"

#: Kyte & Doolittle (1982) hydropathy index.
KYTE_DOOLITTLE = {
    "A": 1.8, "R": -4.5, "N": -3.5, "D": -3.5, "C": 2.5, "Q": -3.5, "E": -3.5, "G": -0.4, "H": -3.2, "I": 4.5,
    "L": 3.8, "K": -3.9, "M": 1.9, "F": 2.8, "P": -1.6, "S": -0.8, "T": -0.7, "W": -0.9, "Y": -1.3, "V": 4.2,
}  # fmt: skip
#: Side-chain charge at pH 7 (H: fraction protonated with pKa 6.0).
CHARGE = {**{a: 0.0 for a in AMINO}, "D": -1.0, "E": -1.0, "K": 1.0, "R": 1.0, "H": 0.1}
#: Residue volumes in cubic angstroms, Zamyatnin (1972).
VOLUME = {
    "A": 88.6, "R": 173.4, "N": 114.1, "D": 111.1, "C": 108.5, "Q": 143.8, "E": 138.4, "G": 60.1, "H": 153.2,
    "I": 166.7, "L": 166.7, "K": 168.6, "M": 162.9, "F": 189.9, "P": 112.7, "S": 89.0, "T": 116.1, "W": 227.8,
    "Y": 193.6, "V": 140.0,
}  # fmt: skip

PROTEIN_BLOSUM = slice(0, 20)
PROTEIN_ONEHOT = slice(20, 41)
PROTEIN_PHYSCHEM = slice(41, 44)
DNA_ONEHOT = slice(44, 49)
DNA_TRANS = slice(49, 53)
#: D of the ``builtin`` embedding.
BUILTIN_DIM = 53
#: Bump when the table changes; part of :meth:`BuiltinEmbedder.config`.
TABLE_VERSION = 1

_PROTEIN_MEANS = {"B": "DN", "Z": "EQ", "J": "IL", "U": "C", "O": "K"}
_DNA_MEANS = {
    "U": "T", "R": "AG", "Y": "CT", "S": "CG", "W": "AT", "K": "GT", "M": "AC",
    "B": "CGT", "D": "AGT", "H": "ACT", "V": "ACG",
}  # fmt: skip


def _protein_table() -> np.ndarray:
    blosum = substitution_matrices.load("BLOSUM62")
    kd_scale = 4.5
    vmin, vmax = min(VOLUME.values()), max(VOLUME.values())
    table = np.zeros((128, BUILTIN_DIM), dtype=np.float64)
    for k, a in enumerate(AMINO):
        row = table[ord(a)]
        row[PROTEIN_BLOSUM] = [blosum[a][b] / 4.0 for b in AMINO]
        row[PROTEIN_ONEHOT.start + k] = 1.0
        row[PROTEIN_PHYSCHEM] = [
            KYTE_DOOLITTLE[a] / kd_scale,
            CHARGE[a],
            2.0 * (VOLUME[a] - vmin) / (vmax - vmin) - 1.0,
        ]
    standard = np.array([ord(a) for a in AMINO])
    x = table[ord("X")]
    x[PROTEIN_BLOSUM] = table[standard, PROTEIN_BLOSUM].mean(axis=0)
    x[PROTEIN_PHYSCHEM] = table[standard, PROTEIN_PHYSCHEM].mean(axis=0)
    x[PROTEIN_ONEHOT.start + 20] = 1.0
    for code, members in _PROTEIN_MEANS.items():
        table[ord(code)] = table[[ord(m) for m in members]].mean(axis=0)
    return table


def _dna_table() -> np.ndarray:
    trans = substitution_matrices.load("TRANS")
    table = np.zeros((128, BUILTIN_DIM), dtype=np.float64)
    for k, b in enumerate(BASES):
        row = table[ord(b)]
        row[DNA_ONEHOT.start + k] = 1.0
        row[DNA_TRANS] = [(trans[b][c] - 2.5) / 2.5 for c in BASES]
    n = table[ord("N")]
    n[DNA_ONEHOT.start + 4] = 1.0
    n[DNA_TRANS] = table[[ord(b) for b in BASES], DNA_TRANS].mean(axis=0)
    for code, members in _DNA_MEANS.items():
        table[ord(code)] = table[[ord(m) for m in members]].mean(axis=0)
    return table


_TABLES: dict[str, np.ndarray] | None = None


def builtin_tables() -> dict[str, np.ndarray]:
    """``{"protein": [128, 53], "dna": [128, 53]}`` float32 lookup tables indexed by ASCII code.

    Rows of letters outside the alphabet are zero (input is validated before lookup).
    """
    global _TABLES
    if _TABLES is None:
        _TABLES = {"protein": _protein_table().astype(np.float32), "dna": _dna_table().astype(np.float32)}
        for t in _TABLES.values():
            t.flags.writeable = False
    return _TABLES


@dataclass(frozen=True)
class BuiltinConfig:
    """Options of the ``builtin`` embedder.

    Attributes:
        alphabet: how plain strings are read: ``"protein"``, ``"dna"`` or ``"auto"``
            (per string, :func:`sinkalign.io.fasta.detect_alphabet`). ``Sequence``
            records always use their own alphabet.
    """

    alphabet: str = "auto"

    def __post_init__(self) -> None:
        if self.alphabet not in ("auto", "protein", "dna"):
            raise InputError(f"alphabet={self.alphabet!r} is not one of ('auto', 'protein', 'dna')")


class BuiltinEmbedder:
    """Fixed BLOSUM62 / one-hot / physico-chemical (protein) and one-hot / TRANS (DNA) features.

    See the module docstring for the 53 columns and the ambiguity rules.
    ``embed(seqs)`` returns one ``[L_i, 53]`` float32 array per sequence.
    """

    name = "builtin"
    alphabet = "both"
    dim = BUILTIN_DIM

    def __init__(self, config: BuiltinConfig | None = None, **options) -> None:
        if config is not None and options:
            raise ValueError("give either config or keyword options, not both")
        self.options = config if config is not None else BuiltinConfig(**options)

    def __repr__(self) -> str:
        return f"BuiltinEmbedder(alphabet={self.options.alphabet!r}, dim={self.dim})"

    def config(self) -> dict:
        """``{"name", "version", "dim", "alphabet", "table_sha1"}``; the sha1 covers both lookup tables."""
        tables = builtin_tables()
        digest = hashlib.sha1(tables["protein"].tobytes() + tables["dna"].tobytes()).hexdigest()
        return {
            "name": self.name,
            "version": TABLE_VERSION,
            "dim": self.dim,
            "alphabet": self.options.alphabet,
            "table_sha1": digest,
        }

    def embed(self, seqs: SequenceT[SequenceLike] | SequenceLike) -> list[np.ndarray]:
        """One ``[L_i, 53]`` float32 array per input, in input order (fresh, writable arrays)."""
        records = as_records(seqs, self.options.alphabet, ("protein", "dna"), self.name)
        tables = builtin_tables()
        out = []
        for residues, alphabet in records:
            codes = np.frombuffer(residues.encode("ascii"), dtype=np.uint8)
            out.append(tables[alphabet][codes])  # fancy indexing copies: [L, 53]
        return out
