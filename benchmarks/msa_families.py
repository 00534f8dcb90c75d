"""Multiple alignments of the structure-based families: ``sinkalign msa`` against the pairwise
aligners and other posterior sources in the same recipe, same families, same run.

Every family or set of ``../shared/data/structural/{homstrad,sabre,oxbench}`` on the chosen
side of ``data_manifests/structural_split.json`` with ``--min-seqs`` to ``--max-seqs``
sequences is unaligned and aligned again by each method; the result is scored on the trusted
(core) residues of the reference against every pair of its rows (the pairs of the pairwise
tables, :func:`sinkalign.io.alignments.msa_to_pairs`):

* micro precision / recall / F1 of the aligned residue pairs (recall is BAliBASE's
  sum-of-pairs score, SP), pooled, per source and per identity bin of the reference pair;
* TC: the share of the reference's columns with at least two trusted residues whose trusted
  residues all share one column of the method's alignment (per family, pooled over families).

Both as ``sinkalign score-msa`` scores them (:mod:`sinkalign.align.msa_scores`).

Methods (``--methods``):

* ``msa`` / ``msa-c0``: :func:`sinkalign.align.msa.align_multiple` over the default learned
  model's calibrated confidences, 2 / 0 consistency rounds (``sinkalign msa``);
* ``msa-plain``: ``msa`` with the library's pairs decoded without the identity tie-break of
  close pairs (``sinkalign msa`` before 2026-11-27);
* ``msa-blosum``: the same over the shipped BLOSUM window's;
* ``msa-pairhmm``: the same recipe over the pair-HMM's posteriors (BLOSUM62, ``--pairhmm``
  LAM OPEN EXTEND, as in ``aligner_learned.py``): ProbCons' own ingredients;
* ``msa-nw``: the same over Needleman-Wunsch's alignments (parasail BLOSUM62 11/1), every
  aligned pair at 1 (a T-Coffee-like library of NW alignments);
* ``famsa``: FAMSA (``pyfamsa``, when installed): an outside progressive aligner;
* ``pair``, ``pair-all``: the learned aligner on each pair alone, at its threshold / every
  MEA column; ``nw``, ``sw``, ``pairhmm``: the pairwise baselines (pair-HMM: MEA of the
  posteriors above).

    python benchmarks/msa_families.py --split valid
    python benchmarks/msa_families.py --split test --json benchmarks/results/msa_families_test.json
    python benchmarks/msa_families.py --split valid --sources pfam --json benchmarks/results/msa_pfam_valid.json

``--sources pfam``: the Pfam seed families of the split (validation LuxC, RRM_1, fn3; test
Pkinase, 3Beta_HSD), ``--pfam-sample`` rows each (60), every residue trusted: larger families
than the structural sets hold, against references that are profile-HMM alignments.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from _common import machine, write_json

from sinkalign.align.aligner import Aligner
from sinkalign.align.baselines import Scoring, align_pair
from sinkalign.align.metrics import IDENTITY_BINS, assign_identity_bins, core_pair_scores, identity_bin_labels, micro_average
from sinkalign.align.msa import align_multiple
from sinkalign.align.msa_scores import aligned_pairs, total_column
from sinkalign.align.pairhmm import pairhmm_align, pairhmm_posteriors
from sinkalign.io.alignments import MSA, msa_to_pairs, percent_identity, read_stockholm
from sinkalign.io.splits import structural_files
from sinkalign.io.structural import read_reference_alignment

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
SPLIT = ROOT / "data_manifests" / "structural_split.json"
RESULTS = Path(__file__).resolve().parent / "results"
SOURCES = ("homstrad", "sabre", "oxbench")
METHODS = ("msa", "msa-plain", "msa-c0", "msa-blosum", "msa-pairhmm", "msa-nw", "famsa", "pair", "pair-all", "nw", "sw",
           "pairhmm")


def families(split: str, sources, min_seqs: int, max_seqs: int, sample: int = 0):
    """``(source, MSA)`` of the split's families; ``pfam`` (the Pfam protein seed alignments,
    hundreds of rows) with ``sample`` rows drawn at random (seed 0) when it has more."""
    side = json.loads(SPLIT.read_text())["assignment"]
    out = []
    files = structural_files(SHARED)
    for src in sources:
        if src == "pfam":
            for path in sorted((SHARED / "pfam_seed").glob("*.sto")):
                for msa in read_stockholm(path):
                    if side.get(msa.family) != split or msa.alphabet != "protein":
                        continue
                    if sample and len(msa) > sample:
                        keep = np.sort(np.random.default_rng(0).choice(len(msa), sample, replace=False))
                        msa = replace(msa, ids=[msa.ids[k] for k in keep], rows=[msa.rows[k] for k in keep])
                    out.append((src, msa))
            continue
        for path in files[src]:
            for msa in read_reference_alignment(path):
                if side.get(msa.family) == split and min_seqs <= len(msa) <= max_seqs:
                    out.append((src, msa))
    return out


def parse_methods(ap: argparse.ArgumentParser, text: str, known: tuple, famsa: str) -> list[str]:
    """The comma-separated methods of ``text``, each one of ``known`` (else a usage error);
    ``famsa`` (the method that needs pyfamsa) left out with a note when pyfamsa is not installed."""
    methods = [m for m in text.split(",") if m]
    for m in methods:
        if m not in known:
            ap.error(f"unknown method {m!r}; choose from {known}")
    if famsa in methods:
        try:
            import pyfamsa  # noqa: F401
        except ImportError:
            print(f"pyfamsa is not installed: {famsa} left out")
            methods.remove(famsa)
    return methods


def first_families(fams: list, sources: list[str], limit: int) -> list:
    """The first ``limit`` families of each source, in ``sources``' order (0: all, as they are)."""
    return [f for src in sources for f in [g for g in fams if g[0] == src][:limit]] if limit else fams


def induced_pairs(rows: dict[str, str], a: str, b: str) -> np.ndarray:
    """The residue pairs that an alignment's rows ``a`` and ``b`` put in one column."""
    return aligned_pairs(rows[a], rows[b])


def tc_counts(msa, rows: dict[str, str]) -> tuple[int, int]:
    """:func:`sinkalign.align.msa_scores.total_column` of the method's rows against the reference."""
    return total_column(MSA(tuple(msa.ids), tuple(rows[i] for i in msa.ids), "method", "fasta", msa.alphabet), msa)


def famsa_rows(ids, seqs) -> dict[str, str]:
    from pyfamsa import Aligner as Famsa
    from pyfamsa import Sequence

    out = Famsa(guide_tree="upgma").align([Sequence(i.encode(), s.encode()) for i, s in zip(ids, seqs)])
    return {s.id.decode(): s.sequence.decode() for s in out}


def run_method(method: str, ids, seqs, refs, aligners, args) -> dict[tuple[str, str], np.ndarray]:
    """The method's residue pairs for every reference pair of the family."""
    lam, go, ge = args.pairhmm
    hmm_scoring = Scoring.protein(int(go), int(ge))
    if method.startswith("msa") or method == "famsa":
        if method == "famsa":
            rows = famsa_rows(ids, seqs)
        else:
            source = {"msa": aligners["learned"], "msa-plain": aligners["learned-plain"],
                      "msa-c0": aligners["learned"], "msa-blosum": aligners["blosum"],
                      "msa-pairhmm": lambda q, t: pairhmm_posteriors(q, t, scoring=hmm_scoring, lam=lam),
                      "msa-nw": nw_matrix}[method]
            result = align_multiple(ids, seqs, source, consistency=0 if method == "msa-c0" else args.consistency,
                                    refine_rounds=args.refine)
            rows = dict(zip(result.ids, result.rows))
        return {(r.query_id, r.target_id): induced_pairs(rows, r.query_id, r.target_id) for r in refs}, rows
    if method in ("pair", "pair-all"):
        aligner = aligners["learned" if method == "pair" else "learned-all"]
        res = aligner.align_many([(r.query_id, r.query_seq, r.target_id, r.target_seq) for r in refs])
        return {(r.query_id, r.target_id): x.alignment.pairs for r, x in zip(refs, res)}, None
    if method == "pairhmm":
        return {(r.query_id, r.target_id): pairhmm_align(r.query_seq, r.target_seq, scoring=hmm_scoring, lam=lam).pairs
                for r in refs}, None
    return {(r.query_id, r.target_id): align_pair(r.query_seq, r.target_seq, method, scoring=Scoring.protein()).pairs
            for r in refs}, None


def nw_matrix(q: str, t: str) -> np.ndarray:
    M = np.zeros((len(q), len(t)))
    p = align_pair(q, t, "nw", scoring=Scoring.protein()).pairs
    M[p[:, 0], p[:, 1]] = 1.0
    return M


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=("valid", "test"), default="valid")
    ap.add_argument("--sources", default=",".join(SOURCES),
                    help="of homstrad, sabre, oxbench and pfam (the Pfam seed families: larger, their "
                         "references profile-HMM alignments, not structural)")
    ap.add_argument("--pfam-sample", type=int, default=60, help="rows drawn from each Pfam family (0: all)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--min-seqs", type=int, default=3)
    ap.add_argument("--max-seqs", type=int, default=40)
    ap.add_argument("--max-families", type=int, default=0, help="at most this many families per source (0: all)")
    ap.add_argument("--consistency", type=int, default=2, help="consistency rounds of the msa methods but msa-c0")
    ap.add_argument("--refine", type=int, default=20, help="refinement rounds of the msa methods")
    ap.add_argument("--pairhmm", type=float, nargs=3, default=(0.2, 24, 2), metavar=("LAM", "OPEN", "EXTEND"))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    methods = parse_methods(ap, args.methods, METHODS, "famsa")
    fams = first_families(families(args.split, args.sources.split(","), args.min_seqs, args.max_seqs, args.pfam_sample),
                          args.sources.split(","), args.max_families)
    aligners = {"learned": Aligner.load("learned"), "learned-all": Aligner.load("learned", min_confidence=0.0),
                "blosum": Aligner.load("blosum"), "learned-plain": Aligner.load("learned", identity_weight=0.0)}
    print(f"{len(fams)} families ({args.split}), {sum(len(m) * (len(m) - 1) // 2 for _, m in fams)} pairs")
    scores = {m: [] for m in methods}
    tc = {m: [0, 0] for m in methods}
    seconds = {m: 0.0 for m in methods}
    pair_src, pair_id, per_family = [], [], []
    for src, msa in fams:
        refs = msa_to_pairs(msa)
        ids = list(msa.ids)
        seqs = [msa.ungapped(k) for k in range(len(msa))]
        pair_src += [src] * len(refs)
        pair_id += [percent_identity(r) for r in refs]
        fam_row = {"family": msa.family, "source": src, "sequences": len(msa), "pairs": len(refs)}
        for m in methods:
            t0 = time.perf_counter()
            preds, rows = run_method(m, ids, seqs, refs, aligners, args)
            seconds[m] += time.perf_counter() - t0
            s = [core_pair_scores(preds[(r.query_id, r.target_id)], r) for r in refs]
            scores[m] += s
            fam_row[m] = {"f1": micro_average(s)["f1"]}
            if rows is not None:
                ok, total = tc_counts(msa, rows)
                tc[m][0] += ok
                tc[m][1] += total
                fam_row[m]["tc"] = ok / max(total, 1)
        per_family.append(fam_row)
    pair_src, pair_id = np.array(pair_src), np.array(pair_id)
    bins = assign_identity_bins(pair_id)
    labels = identity_bin_labels(IDENTITY_BINS)
    groups = {"all": np.arange(len(pair_src))}
    groups.update({src: np.nonzero(pair_src == src)[0] for src in args.sources.split(",")})
    groups.update({f"id {lab}": np.nonzero(bins == b)[0] for b, lab in enumerate(labels)})
    table = {}
    for m in methods:
        table[m] = {g: {**micro_average([scores[m][i] for i in idx]), "pairs": int(len(idx))}
                    for g, idx in groups.items() if len(idx)}
        table[m]["tc"] = tc[m][0] / tc[m][1] if tc[m][1] else None
        table[m]["seconds"] = seconds[m]
    print(f"\nP / R (SP) / F1 on trusted residues, {args.split} families, pairs per group in brackets")
    head = [g for g in groups if len(groups[g])]
    print("| method | " + " | ".join(f"{g} ({len(groups[g])})" for g in head) + " | TC | s |")
    print("|---" * (len(head) + 3) + "|")
    for m in methods:
        cells = [f"{table[m][g]['precision']:.3f} / {table[m][g]['recall']:.3f} / {table[m][g]['f1']:.3f}"
                 for g in head]
        tcs = "-" if table[m]["tc"] is None else f"{table[m]['tc']:.3f}"
        print(f"| {m} | " + " | ".join(cells) + f" | {tcs} | {seconds[m]:.1f} |")
    payload = {"machine": machine(), "date": datetime.date.today().isoformat(), "split": args.split,
               "sources": args.sources.split(","), "min_seqs": args.min_seqs, "max_seqs": args.max_seqs,
               "pfam_sample": args.pfam_sample,
               "consistency": args.consistency, "refine": args.refine, "pairhmm": list(args.pairhmm), "families": len(fams),
               "table": table, "per_family": per_family}
    out = args.json or str(RESULTS / f"msa_families_{args.split}.json")
    write_json(out, payload)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
