"""Accuracy of aligned residue pairs against reference alignments, with classical baselines.

For every reference set, the OT aligner, Needleman-Wunsch and Smith-Waterman (parasail,
BLOSUM62, gap open 11, extend 1; DNA +2/-3, 5/2) align the same pairs in the same run;
precision, recall and F1 of aligned residue pairs are micro-averaged per set and binned by
the reference alignment's percent identity. Throughput (pairs/s) is measured on the same
pairs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from sinkalign.align.baselines import Scoring, align_pair
from sinkalign.align.metrics import binned_table, core_pair_scores, micro_average
from sinkalign.errors import InputError, SinkalignError
from sinkalign.io.alignments import (
    ReferencePair,
    msa_to_pairs,
    percent_identity,
    read_tmalign_pairs,
)

__all__ = ["load_reference_set", "evaluate_sets", "reference_source", "METHODS"]

log = logging.getLogger(__name__)

METHODS = ("sinkalign", "nw", "sw", "pairhmm")
# the pair-HMM baseline as BENCHMARKS.md runs it: BLOSUM62 at lam 0.2, gap open 24 / extend 2
# (chosen on the Pfam training families), MAC decoding at posterior threshold 0.4 (chosen on
# the structural validation pairs); DNA: +2/-3 with open 5 / extend 2 at that matrix's own
# log-odds scale (the Karlin-Altschul lambda for uniform base composition), threshold 0.4
PAIRHMM_PROTEIN = {"lam": 0.2, "gap_open": 24, "gap_extend": 2, "threshold": 0.4}
PAIRHMM_DNA = {"lam": 0.6337314430979077, "gap_open": 5, "gap_extend": 2, "threshold": 0.4}


def _reference_kind(path: Path) -> str:
    """How a reference file is read: ``"tmalign"`` for a ``.tsv`` (also before ``.gz``) or a
    file whose first line is a TM-align table's (tab-separated pdb1, pdb2, tm1, tm2, ...), else
    ``"alignment"``: by its content, as ``sinkalign shards build`` reads it (Stockholm, PIR,
    bench1.0 aligned FASTA with its case as a core mask, A2M, Clustal, MSF, PHYLIP: see
    :func:`~sinkalign.io.structural.read_reference_alignment`), whatever its suffix (a ``.fa``
    was read as plain aligned FASTA, so the same file scored otherwise under another name).

    Raises:
        FormatError: a file that is neither (the alignment reader's message).
    """
    from sinkalign.io.fasta import open_text
    from sinkalign.io.structural import detect_alignment_format

    suffixes = [x.lower() for x in path.suffixes]
    if suffixes and suffixes[-1] in (".gz", ".bgz"):
        suffixes = suffixes[:-1]
    if suffixes and suffixes[-1] == ".tsv":
        return "tmalign"
    try:
        detect_alignment_format(path)
    except SinkalignError:
        try:
            with open_text(path) as handle:
                first = next((line for line in handle if line.strip()), "")
        except SinkalignError:
            first = ""
        if len(first.rstrip("\r\n").split("\t")) >= 8:  # a TM-align table under another name
            return "tmalign"
        raise
    return "alignment"


def load_reference_set(path: str | Path, *, min_tm: float | None = 0.5, max_pairs: int | None = None,
                       seed: int = 0, split: str = "test", name: str | None = None) -> list[ReferencePair]:
    """Reference pairs from a Stockholm / aligned FASTA / A2M / MSF file, a TM-align TSV, or a
    shard directory (its ``split``). ``max_pairs`` subsamples deterministically. ``name``: what
    the pairs of a file name as their ``source`` (and family, where it is the file's) instead of
    ``path``, for a copy of a pipe or of standard input (the pipe as given)."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    kind = None if path.is_dir() else _reference_kind(path)
    if path.is_dir() and not (path / "index.json").exists() and any(path.iterdir()):
        # a folder of structural alignments (HOMSTRAD .ali, bench1.0 sets): every file, sorted
        from sinkalign.io.structural import read_reference_alignment

        files = sorted(f for f in path.iterdir() if f.is_file() and not f.name.startswith(".")
                       and f.suffix.lower() not in (".txt", ".md", ".json", ".rst"))
        if not files:
            folders = sorted(f.name for f in path.iterdir() if f.is_dir() and not f.name.startswith("."))
            raise InputError(f"{path}: no reference pairs: no alignment file in it (sub-folders are not read"
                             + (f"; give one of them, e.g. {path / folders[0]}" if folders else "") + ")")
        pairs = [p for f in files for msa in read_reference_alignment(f) for p in msa_to_pairs(msa)]
    elif path.is_dir():
        from sinkalign.io.shards import ShardDataset

        # a missing or corrupt shard, an unknown split: SinkalignErrors naming the file or split
        ds = ShardDataset(path, split, load_embeddings=False)
        chosen = range(len(ds))
        if max_pairs is not None and len(ds) > max_pairs:  # drawn before reading: the same pairs as after
            chosen = np.sort(rng.choice(len(ds), size=max_pairs, replace=False))
        pairs = [ds[int(i)].pair for i in chosen]
    elif kind == "tmalign":
        pairs = list(read_tmalign_pairs(path, min_tm=min_tm))
    else:
        # Stockholm, HOMSTRAD PIR, a bench1.0 aligned FASTA file (SABRE, PREFAB, OXBench), A2M,
        # MSF, ..., recognised by content; structural references carry a core mask
        from sinkalign.io.structural import read_reference_alignment

        pairs = [p for msa in read_reference_alignment(path) for p in msa_to_pairs(msa)]
    if not pairs:
        if path.is_dir() and (path / "index.json").exists():
            why = f"its {split!r} split holds no pairs (--split picks another)"
        elif kind == "tmalign":
            why = "no pair in it" + (f" reaches --min-tm {min_tm}" if min_tm is not None else "")
        else:
            why = "its alignments hold fewer than two rows each: a reference pair needs two"
        raise InputError(f"{path}: no reference pairs: {why}")
    if name is not None and not path.is_dir():
        pairs = _renamed(pairs, path, name)
    if max_pairs is not None and len(pairs) > max_pairs:
        keep = np.sort(rng.choice(len(pairs), size=max_pairs, replace=False))
        pairs = [pairs[i] for i in keep]
    return pairs


def _renamed(pairs: list[ReferencePair], path: Path, name: str) -> list[ReferencePair]:
    """``pairs`` read from ``path`` with ``name`` for their source, and for a family named after
    the file (:func:`~sinkalign.io.structural.family_name`; a Stockholm ``#=GF ID`` stays)."""
    from dataclasses import replace

    from sinkalign.io.structural import family_name

    family = family_name(path)
    return [replace(p, source=name if p.source == str(path) else p.source,
                    family=family_name(name) if p.family == family else p.family) for p in pairs]


def _baseline_pair(pair: ReferencePair) -> tuple[bool, str, str]:
    """``(dna?, query, target)`` as the classical baselines read the pair: its alphabet is its
    reference's (``meta["alphabet"]``), else told from its residues; RNA's U as T, and letters
    outside the baselines' alphabet (IUPAC ambiguity codes, X) as the unknown letter, as the
    aligner's own baselines read them. (Telling DNA by ``ACGTUN`` alone scored a DNA pair with
    one ambiguity code by BLOSUM62, and RNA failed.)"""
    from sinkalign.align.calibration import _baseline_letters
    from sinkalign.io.fasta import detect_alphabet, rna_as_dna

    kind = pair.meta.get("alphabet") or detect_alphabet(pair.query_seq + pair.target_seq)
    if kind == "dna":
        return True, _baseline_letters(rna_as_dna(pair.query_seq), "dna"), _baseline_letters(
            rna_as_dna(pair.target_seq), "dna")
    return False, _baseline_letters(pair.query_seq, "protein"), _baseline_letters(pair.target_seq, "protein")


def _pairhmm_pairs(pair: ReferencePair) -> np.ndarray:
    """The pair-HMM baseline's aligned pairs (:data:`PAIRHMM_PROTEIN` / :data:`PAIRHMM_DNA`)."""
    from sinkalign.align.pairhmm import pairhmm_align

    dna, q, t = _baseline_pair(pair)
    cfg = PAIRHMM_DNA if dna else PAIRHMM_PROTEIN
    make = Scoring.dna if dna else Scoring.protein
    scoring = make(gap_open=cfg["gap_open"], gap_extend=cfg["gap_extend"])
    return pairhmm_align(q, t, scoring=scoring, lam=cfg["lam"], threshold=cfg["threshold"]).pairs


def check_reference_alphabet(pairs: Iterable[ReferencePair], alphabet: str, model: str) -> None:
    """Refuse reference pairs of the other alphabet than the model's (``alphabet``; ``model``
    names it): fitted or scored, they give a calibration, a null or an F1 that mean nothing (a
    protein sequence read as DNA is mostly N). The alphabet of each pair is its reference's
    (``meta["alphabet"]``), else told from its residues."""
    from sinkalign.errors import AlphabetError
    from sinkalign.io.fasta import detect_alphabet

    for p in pairs:
        kind = p.meta.get("alphabet") or detect_alphabet(p.query_seq + p.target_seq)
        if kind != alphabet:
            hint = "--model dna" if kind == "dna" else "a protein model (--model learned or blosum)"
            raise AlphabetError(f"reference pair ({p.query_id}, {p.target_id}) of {p.source or 'the references'} is "
                                f"{kind}, and the model {model} is for {alphabet}; give {hint}")


def reference_source(pair: ReferencePair) -> str:
    """The collection a reference pair belongs to: the folder part of a structural family's
    name (``homstrad``, ``sabre``, ``prefab``, ``oxbench`` for ``sabre/sup_002``: see
    :func:`~sinkalign.io.structural.family_name`, kept in shard directories), else the name of
    the file it was read from (a Pfam Stockholm file, a TM-align table)."""
    family = pair.family or ""
    if "/" in family:
        return family.split("/", 1)[0]
    return Path(pair.source).name if pair.source else "-"


def evaluate_sets(sets: dict[str, list[ReferencePair]], aligner=None, *, methods: Iterable[str] = METHODS,
                  progress: bool = False, n_boot: int = 1000, per_pair: bool = False,
                  by_source: bool = False) -> dict:
    """Evaluate every method on every set; returns a JSON-ready dict (``sets`` -> tables).
    ``per_pair``: each set also gets ``pairs`` (family, ids, percent identity of each pair, in
    the set's order) and each method ``pair_scores`` (its :class:`PairScores` of each pair, as
    dicts): the numbers the tables are made of, to recount or group otherwise.
    ``by_source``: a set whose pairs come from more than one collection
    (:func:`reference_source`) also gets ``sources`` (each one's pair count and mean identity)
    and each method ``by_source`` (each collection's pooled counts and identity bins, from the
    same alignments: nothing is aligned twice)."""
    methods = tuple(methods)
    bad = set(methods) - set(METHODS)
    if bad:
        raise InputError(f"unknown methods {sorted(bad)}; valid: {METHODS}")
    if "sinkalign" in methods and aligner is None:
        raise ValueError("evaluating 'sinkalign' needs an aligner")
    result: dict = {"methods": list(methods), "sets": {}}
    for name, pairs in sets.items():
        if not pairs:
            raise InputError(f"reference set {name!r} holds no pairs")
        identities = np.array([percent_identity(p) for p in pairs])
        groups: dict[str, list[int]] = {}
        if by_source:
            for i, p in enumerate(pairs):
                groups.setdefault(reference_source(p), []).append(i)
            if len(groups) < 2:  # one collection: its tables are the set's own
                groups = {}
        per_method: dict = {}
        for method in methods:
            t0 = time.perf_counter()
            if method == "sinkalign":
                # Warm-up compile on the first chunk is excluded from throughput.
                # Reference alignments pair the sequences as given: the plus strand.
                list(aligner.align_many([(p.query_id, p.query_seq, p.target_id, p.target_seq) for p in pairs[:8]],
                                        strand="plus"))
                t0 = time.perf_counter()
                preds = [r.alignment.pairs for r in aligner.align_many(
                    ((p.query_id, p.query_seq, p.target_id, p.target_seq) for p in pairs), strand="plus")]
            elif method == "pairhmm":
                _pairhmm_pairs(pairs[0])  # one-off setup (tables, compiled code) is not throughput
                t0 = time.perf_counter()
                preds = [_pairhmm_pairs(p) for p in pairs]
            else:
                dna, q, t = _baseline_pair(pairs[0])  # likewise parasail's first call
                align_pair(q, t, method, scoring=Scoring.dna() if dna else Scoring.protein())
                t0 = time.perf_counter()
                preds = []
                for p in pairs:
                    dna, q, t = _baseline_pair(p)
                    preds.append(align_pair(q, t, method, scoring=Scoring.dna() if dna else Scoring.protein()).pairs)
            seconds = time.perf_counter() - t0
            scores = [core_pair_scores(pred, p) for pred, p in zip(preds, pairs)]
            per_method[method] = {
                "micro": micro_average(scores),
                "bins": binned_table(scores, identities, n_boot=n_boot),
                "pairs_per_s": len(pairs) / seconds if seconds > 0 else None,
                "mean_length": float(np.mean([(len(p.query_seq) + len(p.target_seq)) / 2 for p in pairs])),
            }
            if groups:
                per_method[method]["by_source"] = {
                    src: {"micro": micro_average([scores[i] for i in idx]),
                          "bins": binned_table([scores[i] for i in idx], identities[idx], n_boot=n_boot)}
                    for src, idx in groups.items()}
            if per_pair:
                per_method[method]["pair_scores"] = [sc.to_dict() for sc in scores]
            log.info("%s / %s: F1 %.3f", name, method, per_method[method]["micro"]["f1"])
        result["sets"][name] = {"n_pairs": len(pairs), "mean_identity": _mean_finite(identities),
                                "methods": per_method}
        if groups:
            result["sets"][name]["sources"] = {src: {"n_pairs": len(idx), "mean_identity": _mean_finite(identities[idx])}
                                               for src, idx in groups.items()}
        if per_pair:
            result["sets"][name]["pairs"] = [{"family": p.family, "query": p.query_id, "target": p.target_id,
                                              "identity": float(x)} for p, x in zip(pairs, identities)]
    return result


def _mean_finite(identities: np.ndarray) -> float | None:
    """The mean of the finite identities (a pair whose reference aligns nothing has none)."""
    finite = identities[np.isfinite(identities)]
    return float(finite.mean()) if finite.size else None
