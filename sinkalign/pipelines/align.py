"""FASTA -> alignments: the pipeline behind ``sinkalign align``."""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from sinkalign.io.fasta import read_fasta
from sinkalign.io.writers import write_alignments
from sinkalign.utils import atomic_write

__all__ = ["align_fasta"]


def _load_aligner(model, embedder, esm_weights, backend, gap_weight):
    from sinkalign.align.aligner import Aligner  # noqa: PLC0415

    aligner = Aligner.load(model, backend=backend, gap_weight=gap_weight)
    trained_with = aligner.config.embedder.get("name") if aligner.config.feature_dim else None
    if embedder is not None and trained_with is not None and embedder != trained_with:
        raise ValueError(f"the model was trained with the {trained_with!r} embedder, not {embedder!r}")
    if trained_with == "esm2":
        from sinkalign.align.embed import embedder_from_config  # noqa: PLC0415

        opts = {"weights": str(esm_weights)} if esm_weights else {}
        aligner._embedder = embedder_from_config(aligner.config.embedder, **opts)
    return aligner


def align_fasta(query_fasta, target_fasta, *, output=None, fmt="tsv", pairing="all", model=None, embedder=None,
                esm_weights=None, backend="reference", plan_out=None, batch_size=8, gap_weight=None,
                progress=False) -> int:
    """Align every query record with every target record (``pairing='all'``) or record i with
    record i (``'zip'``); write ``fmt`` to ``output`` (stdout when None). Returns the count.

    Records are validated while read (errors name file, record and position); results are
    written in input order, atomically.
    """
    queries = targets = None
    if model is None:  # the shipped model for the input: DNA when every record is nucleotides
        from sinkalign.align.aligner import default_model_path  # noqa: PLC0415

        queries, targets = (list(read_fasta(path, alphabet="auto")) for path in (query_fasta, target_fasta))
        kinds = {r.alphabet for r in queries + targets}
        model = default_model_path("dna" if kinds == {"dna"} else "protein")
    aligner = _load_aligner(model, embedder, esm_weights, backend, gap_weight)
    # Records read as "auto" are kept as they are: the DNA model is only chosen when every
    # record is DNA, and a DNA record is also a valid protein record (each nucleotide and
    # IUPAC letter is an amino-acid letter or an accepted ambiguous one: U, B), with the
    # same residue string. Only ids and residues are used below.
    if queries is None:
        alphabet = aligner.config.alphabet
        queries = list(read_fasta(query_fasta, alphabet=alphabet))
        targets = list(read_fasta(target_fasta, alphabet=alphabet))
    if pairing == "zip":
        if len(queries) != len(targets):
            raise ValueError(f"--pairing zip needs equal record counts: {query_fasta} has {len(queries)}, "
                             f"{target_fasta} has {len(targets)}")
        pairs, total = zip(queries, targets), len(queries)
    elif pairing == "all":
        pairs, total = itertools.product(queries, targets), len(queries) * len(targets)
    else:
        raise ValueError(f"pairing={pairing!r} is not one of ('all', 'zip')")
    stream = ((q.id, q.seq, t.id, t.seq) for q, t in pairs)
    from tqdm import tqdm  # noqa: PLC0415

    plans = {}
    keep = plan_out is not None

    def records():
        for res in tqdm(aligner.align_many(stream, batch_size=batch_size, keep_plan=keep), total=total,
                        disable=not progress, unit="pair", file=sys.stderr):
            if keep:
                plans[f"{res.query_id}|{res.target_id}|{len(plans)}"] = res.plan.astype(np.float32)
            yield res.as_record()

    if output is None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"out.{fmt}"
            n = write_alignments(records(), path, fmt)
            sys.stdout.write(path.read_text())
    else:
        n = write_alignments(records(), output, fmt)
    if keep:
        with atomic_write(plan_out, "wb") as fh:
            np.savez_compressed(fh, **plans)
    return n


del os
