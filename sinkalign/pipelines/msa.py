"""``sinkalign msa``: a multiple alignment of the records of one FASTA file.

Every pair of records is aligned by the OT aligner (the shipped model for the input's
alphabet, or ``model``); the pairs' calibrated column confidences are combined by ProbCons'
consistency and progressive recipe (:mod:`sinkalign.align.msa`). The alignment is written by
Biopython (``Bio.AlignIO``) in aligned FASTA, Clustal, Stockholm or relaxed PHYLIP, atomically;
the guide tree optionally as Newick.
"""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path

import numpy as np

from sinkalign.errors import InputError
from sinkalign.io.formats import MSA_SUFFIXES, output_format, unwritten_msa_format
from sinkalign.io.writers import check_name
from sinkalign.pipelines.align import STRONG_DNA
from sinkalign.pipelines.runner import (
    DEFAULT_CHUNK_SIZE,
    STDIN_NAME,
    STDIO,
    ModelSpec,
    align_chunk,
    auto_processes,
    check_outputs,
    check_processes,
    chunks,
    is_stdio,
    load_aligner,
    run_cluster,
    stdin_spooled,
)

log = logging.getLogger(__name__)

__all__ = ["MSA_FORMATS", "msa_fasta", "write_column_scores", "write_sequence_scores"]

#: ``--format`` name -> ``Bio.AlignIO`` format
MSA_FORMATS = {"fasta": "fasta", "clustal": "clustal", "stockholm": "stockholm", "phylip": "phylip-relaxed"}
#: Biopython's Clustal writer keeps the first 30 characters of a name (as Clustal W does)
CLUSTAL_ID_WIDTH = 30


def _check_names(names: list[str], fmt: str, where: str) -> None:
    """The record ``names`` as ``fmt`` writes them. A Clustal file keeps 30 characters of each
    name; PHYLIP drops ``[](),`` from a name and writes ``:;`` as ``|`` (Biopython's writer): two
    names that become one are an error (the output could not tell them apart), a name changed a
    warning. A Stockholm row cannot start with ``#`` or ``//``
    (:func:`~sinkalign.io.writers.check_name`)."""
    if fmt == "stockholm":
        for n, name in enumerate(names, 1):
            check_name("stockholm", name, "query", f"record #{n} of {where}")
        return
    if fmt == "clustal":
        def rewrite(name: str) -> str:
            return name[:CLUSTAL_ID_WIDTH]

        same = f"share their first {CLUSTAL_ID_WIDTH} characters, all that a Clustal file keeps of a name"
        changed = f"are cut to {CLUSTAL_ID_WIDTH} characters in the Clustal file"
    elif fmt == "phylip":
        from Bio.AlignIO.PhylipIO import sanitize_name as rewrite

        same = "are both written {written!r} in a PHYLIP file (it drops [](), and writes :; as |)"
        changed = "are changed in the PHYLIP file"
    else:
        return
    seen: dict[str, str] = {}
    for name in names:
        written = rewrite(name)
        if written in seen:
            raise InputError(f"{where}: records {seen[written]!r} and {name!r} {same.format(written=written)}; write "
                             "--format fasta or stockholm, or rename them")
        seen[written] = name
    other = [(name, written) for written, name in seen.items() if written != name]
    if other:
        log.warning("%s: %d record names %s (first: %r as %r)", where, len(other), changed, *other[0])


def _records(path: Path) -> list:
    from sinkalign.io.fasta import read_fasta

    records = list(read_fasta(path, alphabet="auto"))
    if not records:
        raise InputError(f"{path}: no FASTA records")
    return records


def _alphabet(records: list, path: str, model_alphabet: str | None) -> str:
    """The alphabet to align in, as ``sinkalign align`` decides it: protein when any record is
    protein (a nucleotide-looking record shorter than ``STRONG_DNA`` is a peptide), an error when
    protein meets a longer nucleotide record, or when a DNA model meets protein."""
    protein = next((r for r in records if r.alphabet == "protein"), None)
    strong_dna = next((r for r in records if r.alphabet == "dna" and len(r) >= STRONG_DNA), None)
    if model_alphabet is None:
        if protein is not None and strong_dna is not None:
            raise InputError(f"{path}: record {strong_dna.id!r} is DNA but record {protein.id!r} is protein; a "
                             "multiple alignment is of one kind of sequence")
        return "protein" if protein is not None else "dna"
    if model_alphabet == "dna" and protein is not None:
        raise InputError(f"{path}: the model is a DNA model and record {protein.id!r} is protein")
    if model_alphabet == "protein" and protein is None:
        log.warning("%s: every record is nucleotides; aligning them with the given protein model anyway", path)
    return model_alphabet


def write_column_scores(result, handle, alphabet: str | None = "protein") -> None:
    """The columns of ``result`` (a :class:`~sinkalign.align.msa.MultipleAlignment`) as a
    tab-separated table: 1-based column, residues in it, its confidence (``NA`` for fewer than
    two residues) and Clustal's conservation mark (``*``, ``:``, ``.``, or empty)."""
    from sinkalign.align.msa import clustal_consensus

    handle.write(f"# column confidences: {'calibrated' if result.calibrated else 'not calibrated'}\n")
    handle.write("column\tresidues\tconfidence\tconservation\n")
    marks = clustal_consensus(result.rows, alphabet)
    for c, conf in enumerate(result.column_confidence):
        residues = sum(row[c] != "-" for row in result.rows)
        value = f"{conf:.4f}" if np.isfinite(conf) else "NA"
        handle.write(f"{c + 1}\t{residues}\t{value}\t{marks[c].strip()}\n")


def write_sequence_scores(result, handle) -> None:
    """The rows of ``result`` as a tab-separated table: id, residues, and its confidence
    (:attr:`~sinkalign.align.msa.MultipleAlignment.sequence_confidence`; ``NA`` when none)."""
    handle.write(f"# sequence confidences: {'calibrated' if result.calibrated else 'not calibrated'}\n")
    handle.write("id\tresidues\tconfidence\n")
    for name, row, conf in zip(result.ids, result.rows, result.sequence_confidence):
        value = f"{conf:.4f}" if np.isfinite(conf) else "NA"
        handle.write(f"{name}\t{sum(c != '-' for c in row)}\t{value}\n")


def msa_fasta(fasta, *, output=None, fmt: str | None = None, tree=None, model=None, consistency: int = 2,
              refine: int = 20, seed: int = 0, threads: int | None = None, processes: int | None = None,
              engine: str = "auto",
              workers: int | None = None, scheduler: str | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
              progress: bool = False, overwrite: bool = False, column_scores=None, trim: float | None = None,
              sequence_scores=None, add_to=None, keep_length: bool = False, independent: bool = False,
              nearest: int | None = None, esm_weights=None):
    """Align the records of ``fasta`` all together and write the alignment.

    Args:
        fasta: a FASTA file (``-``: standard input), or a list of them (their records in
            order), protein or nucleotide (aligned on the strands given).
        output: the alignment file (written atomically), ``None`` or ``-``: standard output.
        fmt: one of :data:`MSA_FORMATS`; ``None`` (default): the one ``output``'s extension
            names (:data:`~sinkalign.io.formats.MSA_SUFFIXES`: ``.afa``, ``.aln``, ``.sto``,
            ``.phy``, ...), else ``fasta``. A format the extension contradicts is an error.
        tree: also write the guide tree (Newick) to this file.
        model: a model directory or shipped name (default: the shipped model for the input).
        consistency, refine, seed: as :func:`sinkalign.align.msa.align_multiple`.
        threads: the numpy engine's threads; engine: the aligner's engine. processes: the
            pairwise alignments' host work on this many worker processes of this machine
            instead of threads (``Aligner(processes=)``; the same alignment). With neither
            (nor a cluster), a family of at least
            :data:`~sinkalign.pipelines.runner.AUTO_PROCESSES_MIN_PAIRS` pairs (46 records)
            takes one process per usable CPU, as ``align_fasta`` (not with ``add_to``).
        workers, scheduler: run the pairwise alignments, in chunks of ``chunk_size`` pairs, on a
            local Dask cluster of ``workers`` processes or on the cluster whose scheduler is at
            ``scheduler`` (as ``sinkalign align``; the same alignment as a single process).
        progress: a progress bar of the pairwise alignments on standard error.
        overwrite: replace existing ``output`` / ``tree`` / ``column_scores`` files (default:
            refuse, before anything is aligned).
        column_scores: also write each column's confidence (:func:`write_column_scores`) to
            this file (of the untrimmed alignment, its columns numbered as there).
        trim: write the alignment without its columns of confidence below this
            (:meth:`~sinkalign.align.msa.MultipleAlignment.trimmed`).
        sequence_scores: also write each record's confidence (:func:`write_sequence_scores`,
            of the untrimmed alignment) to this file.
        add_to: an existing alignment (any format ``score-msa`` reads, told by content) to add
            the records to, its columns kept (:func:`~sinkalign.align.msa.add_to_alignment`;
            no guide tree, no refinement; one process).
        keep_length: with ``add_to``, drop the new records' residues that no existing column
            takes, so that the output has exactly the existing columns.
        independent: with ``add_to``, align each record to the alignment's rows only, not to the
            other records (``consistency`` must be 0).
        nearest: with ``independent``, align each record to its ``nearest`` most similar rows
            only (:func:`~sinkalign.align.msa.nearest_rows`).
        esm_weights: the local ESM-2 weights of a model trained on ``esm2`` features (the file
            it was trained with, checked when the model is loaded, before any pair); a model
            without ESM-2 features refuses them.

    A Stockholm file carries each residue's confidence (``#=GR id PP``) and each column's
    (``#=GC PP_cons``), a Clustal file the conservation line. The confidences are calibrated
    when the model carries a calibration for ``consistency`` rounds (the shipped protein
    models, learned and blosum: 0 to 3 rounds); otherwise a warning says they are not.

    Returns the :class:`~sinkalign.align.msa.MultipleAlignment` (untrimmed: ``.trimmed(trim)`` is what was written).
    """
    if fmt is not None and fmt not in MSA_FORMATS:
        raise InputError(f"format {fmt!r} is not one of {sorted(MSA_FORMATS)}")
    unwritten_msa_format(output)
    fmt = output_format(output, fmt, "fasta", MSA_SUFFIXES)
    if trim is not None and not 0.0 <= trim <= 1.0:
        raise InputError(f"--trim ({trim}) must be a confidence in [0, 1]")
    if consistency < 0 or refine < 0:
        raise InputError(f"--consistency ({consistency}) and --refine ({refine}) must be >= 0")
    if workers is not None and scheduler is not None:
        raise InputError("give either workers (a local cluster) or scheduler (an existing one), not both")
    check_processes(processes, threads, workers, scheduler)
    if keep_length and add_to is None:
        raise InputError("--keep-length keeps the columns of the alignment given by --add-to; give one")
    if trim is not None and add_to is not None:
        raise InputError("--trim: an alignment added to has confidences only in the columns of new residues, so "
                         "trimming by them would drop the alignment's own columns; trim the result with `sinkalign "
                         "msa --trim` on the whole family, or by --column-scores")
    if independent and add_to is None:
        raise InputError("--independent places records on the alignment given by --add-to; give one")
    if nearest is not None and not independent:
        raise InputError(f"--nearest {nearest}: only with --independent (each record placed on its nearest rows "
                         "alone; without it every record is aligned to every row and record)")
    if nearest is not None and nearest < 1:
        raise InputError(f"--nearest ({nearest}) must be >= 1")
    if independent and consistency:
        raise InputError(f"--independent takes no consistency rounds (--consistency {consistency} given): each record "
                         "is aligned to the alignment's rows alone")
    if add_to is not None and tree is not None:
        raise InputError("--tree: adding to an alignment builds no guide tree")
    fastas = list(fasta) if isinstance(fasta, (list, tuple)) else [fasta]
    if add_to is not None and is_stdio(add_to) and any(is_stdio(f) for f in fastas):
        raise InputError("standard input can be read once: give either the records (FASTA) or the alignment "
                         "(--add-to) as '-', not both")
    inputs = [Path(f) for f in [*fastas, add_to] if f is not None and not is_stdio(f)]
    check_outputs([(STDIO if output is None else output, "output"), (tree, "--tree"),
                   (column_scores, "--column-scores"), (sequence_scores, "--sequence-scores")], overwrite, inputs)
    with stdin_spooled([*fastas, add_to]) as paths:  # the alignment read from here on as its spooled copy
        return _msa(fastas, paths[:-1], paths[-1], output, fmt, tree, model, consistency, refine, seed, threads,
                    engine, workers, scheduler, chunk_size, progress, column_scores, trim, sequence_scores,
                    keep_length, independent, nearest, processes, esm_weights)


def _msa(fastas: list, paths: list, add_to, output, fmt, tree, model, consistency, refine, seed, threads, engine,
         workers, scheduler, chunk_size, progress, column_scores, trim, sequence_scores, keep_length, independent,
         nearest, processes=None, esm_weights=None):
    """:func:`msa_fasta` once its options are checked and standard input is spooled: ``paths``
    are the FASTA files (``fastas`` as named to the user), ``add_to`` the alignment's file."""
    from tqdm import tqdm

    from sinkalign.align.msa import align_multiple, library_aligner, library_entry, unrelated_records

    where = ", ".join(STDIN_NAME if is_stdio(f) else str(f) for f in fastas)
    records = [r for path in paths for r in _records(path)]
    seen: dict[str, int] = {}
    for k, r in enumerate(records):
        if seen.setdefault(r.id, k) != k:
            raise InputError(f"record id {r.id!r} appears twice in {where}; ids must be unique")
    existing = _existing_alignment(add_to, seen, where, fmt) if add_to is not None else None
    if existing is not None:
        _check_names(list(existing.ids), fmt, f"the alignment {add_to}")
        if fmt in ("clustal", "phylip"):  # collisions between the two
            _check_names(list(existing.ids) + [r.id for r in records], fmt, f"{add_to} and {where}")
    _check_names([r.id for r in records], fmt, where)
    path = None
    if model is not None:
        from sinkalign.align.aligner import resolve_model

        path = str(resolve_model(model).resolve())
    esm_weights = None if esm_weights is None else str(esm_weights)
    spec = ModelSpec(path, "protein", min_confidence=0.0, engine=engine, threads=threads, processes=processes,
                     esm_weights=esm_weights)
    model_alphabet = load_aligner(spec).config.alphabet if path is not None else None
    alphabet = _alphabet(records, where, model_alphabet)
    if existing is not None and existing.alphabet != alphabet:
        which = f"the model ({model}) is" if model_alphabet is not None else f"the records of {where} are"
        raise InputError(f"{add_to}: the alignment is {existing.alphabet}, but {which} {alphabet}")
    n = len(records)
    if existing is None and n >= 2:  # every pair of the records: on worker processes when large, as `sinkalign align`
        longest = sorted((len(r.seq) for r in records), reverse=True)[:2]
        processes = auto_processes(n * (n - 1) // 2, largest_cells=longest[0] * longest[-1], threads=threads,
                                   processes=processes, workers=workers, scheduler=scheduler) or processes
    # the strands as given; every MEA column, as library_aligner reads them (on cluster workers too)
    spec = ModelSpec(path, alphabet, min_confidence=0.0, engine=engine, threads=threads, processes=processes,
                     strand="plus" if alphabet == "dna" else None, esm_weights=esm_weights)
    aligner = library_aligner(load_aligner(spec))  # a model without calibration fails here, before any pair
    ids, seqs = [r.id for r in records], [r.seq for r in records]
    if existing is not None:
        from sinkalign.io.alignments import row_descriptions
        from sinkalign.io.stockholm import read_stockholm_markup

        cluster = None if workers is None and scheduler is None else (spec, workers, scheduler, chunk_size)
        result = _add(existing, ids, seqs, aligner, consistency, keep_length, independent, progress, cluster,
                      nearest)
        # a Stockholm file's markup, read once: its rows' descriptions and, written as Stockholm, the
        # annotations that follow their columns
        markup = read_stockholm_markup(add_to) if existing.format == "stockholm" else None
        given = row_descriptions(add_to) if markup is None else markup.descriptions()
        descriptions = given | {r.id: r.description for r in records}
        markup = markup.spread(result.source_columns, result.n_columns) if markup is not None and fmt == "stockholm" \
            else None
        return _write(result, descriptions, alphabet, fmt, output, tree, column_scores, sequence_scores, trim,
                      f"the model has no calibration for records added with {consistency} consistency rounds", markup)
    if n == 1:  # written as its one row, as other aligners do; said, since nothing was aligned
        log.warning("%s holds one record (%s): nothing to align it to; it is written as a one-row alignment", where,
                    ids[0])
    log.info("aligning %d records: %d pairs, %d consistency rounds", n, n * (n - 1) // 2, consistency)
    evalues: dict = {}
    with tqdm(total=n * (n - 1) // 2, disable=not progress, unit="pair", desc="pairwise") as bar:
        if workers is None and scheduler is None:
            posteriors = aligner
        else:  # the pairs on the cluster, then the library as aligner_posteriors builds it
            items = [(ids[x], seqs[x], ids[y], seqs[y]) for x in range(n) for y in range(x + 1, n)]
            index = {name: k for k, name in enumerate(ids)}
            posteriors = {}
            for chunk, out in run_cluster(spec, chunks(items, chunk_size), 8, False, scheduler, workers,
                                           align_chunk):
                for (qid, q, tid, t), (aln, _, evalue, *_) in zip(chunk, out):
                    posteriors[(index[qid], index[tid])] = library_entry(aln, len(q), len(t))
                    evalues[(index[qid], index[tid])] = evalue
                bar.update(len(chunk))
        result = align_multiple(ids, seqs, posteriors, consistency=consistency, refine_rounds=refine, seed=seed,
                                progress=bar.update, evalues=evalues)
    for k, evalue, other in unrelated_records(n, evalues):
        log.warning("record %s has no likely homolog among the others (its E-value as a search of the other %d "
                    "records is %.2g, best against %s): the alignment places its residues all the same, with "
                    "confidences that assume it belongs to the family; --sequence-scores shows how it fits, or leave "
                    "it out", ids[k], n - 1, evalue, ids[other])
    why = (f"one record ({ids[0]}): nothing aligned to it, so no residue has a confidence" if n == 1 else
           f"the model has no multiple-alignment calibration for {consistency} consistency rounds")
    return _write(result, {r.id: r.description for r in records}, alphabet, fmt, output, tree, column_scores,
                  sequence_scores, trim, why)


def _existing_alignment(path, new_ids: dict, where: str, out_format: str):
    """The alignment at ``path`` (any format :func:`~sinkalign.io.alignments.read_alignment`
    reads), its row ids apart from the new records', its rows in the letter case of the file
    where the output reads case as the input does: lower case is an insert residue in Stockholm
    and A2M and means nothing in the other formats, so the rows of those go to a Stockholm
    output upper-cased (else lower-case rows came back as insertions), with a warning; and a
    Stockholm or A2M input's insert residues written to another format are warned of."""
    from dataclasses import replace

    from sinkalign.io.alignments import read_alignment, rows_as_written

    existing = read_alignment(path)
    case_is_insert = existing.format in ("stockholm", "a2m")
    written = rows_as_written(path, existing)  # the letter case of the file
    lower = any(c.islower() for row in written for c in row)
    if out_format == "stockholm" and not case_is_insert and lower:
        log.warning("%s is %s, where letter case means nothing: its rows are written upper case, as Stockholm reads "
                    "lower case as insert residues (aligned to nothing)", path, existing.format)
    else:
        existing = replace(existing, rows=written)
        if out_format != "stockholm" and case_is_insert and lower:
            log.warning("%s's lower-case residues are insertions (aligned to nothing) in %s; the %s output keeps "
                        "them lower case, and a reader that ignores case (most) takes them as aligned: write "
                        "Stockholm (-o NAME.sto) to keep them insertions", path, existing.format, out_format)
    for name in existing.ids:
        if name in new_ids:
            raise InputError(f"record {name!r} of {where} is already a row of the alignment {path}; ids must be unique")
    return existing


def _add(existing, ids: list, seqs: list, aligner, consistency: int, keep_length: bool, independent: bool,
         progress: bool, cluster: tuple | None = None, nearest: int | None = None):
    """:func:`~sinkalign.align.msa.add_to_alignment` of the records to ``existing``, with a
    progress bar of the pairwise alignments and a note of the residues ``keep_length`` dropped;
    ``cluster``: ``(spec, workers, scheduler, chunk_size)`` to run the pairwise alignments on a
    Dask cluster (as ``sinkalign align``; the same alignment as one process)."""
    from tqdm import tqdm

    from sinkalign.align.msa import add_to_alignment, is_unrelated, library_entry, nearest_rows, search_evalue

    n = len(ids)
    k = sum(any(c.isalpha() for c in row) for row in existing.rows)  # the rows with residues
    total = n * min(k, nearest or k) + (0 if independent else n * (n - 1) // 2)
    log.info("adding %d records to an alignment of %d rows and %d columns: %d pairs, %d consistency rounds", n,
             len(existing), existing.n_columns, total, consistency)
    evalues: dict = {}  # (name, name) -> E-value of each pairwise alignment
    with tqdm(total=total, disable=not progress, unit="pair", desc="pairwise") as bar:
        posteriors = aligner
        if cluster is not None:  # the pairs on the cluster, then the library as aligner_posteriors builds it
            rows = [(i, "".join(c for c in row if c.isalpha()).upper()) for i, row in zip(existing.ids, existing.rows)]
            rows = [(i, seq) for i, seq in rows if seq]
            near = nearest_rows([seq for _, seq in rows], seqs, nearest, kind=aligner.config.alphabet)
            items = [(*rows[x], name, new) for name, new, mine in zip(ids, seqs, near) for x in mine]
            if not independent:
                items += [(ids[a], seqs[a], ids[b], seqs[b]) for b in range(n) for a in range(b)]
            spec, workers, scheduler, chunk_size = cluster
            posteriors = {}
            for chunk, out in run_cluster(spec, chunks(items, chunk_size), 8, False, scheduler, workers, align_chunk):
                for (qid, q, tid, t), (aln, _, evalue, *_) in zip(chunk, out):
                    posteriors[(qid, tid)] = library_entry(aln, len(q), len(t))
                    evalues[(qid, tid)] = evalue
                bar.update(len(chunk))
        try:
            result = add_to_alignment(existing.ids, existing.rows, ids, seqs, posteriors, consistency=consistency,
                                      keep_length=keep_length, independent=independent, nearest=nearest,
                                      calibration=aligner.msa_calibration, progress=bar.update,
                                      evalues=evalues if cluster is None else None)
        except ValueError as err:  # what the readers let through: an alignment of no residues
            raise InputError(f"{existing.source}: {err}") from err
    row_ids = set(existing.ids)
    best: dict = {}  # each record's smallest E-value against a row (None: one is unknown), in one pass
    for (a, b), e in evalues.items():  # (a row or record, a record)
        if a in row_ids and best.get(b, ()) is not None:
            best[b] = None if e is None else min(best.get(b, (math.inf, a)), (e, a))
    searched = len(row_ids)  # every row is searched (with --nearest, the prefilter ranks them all)
    for name in ids:  # as a fresh msa warns of a record unrelated to the others (unrelated_records)
        if best.get(name) is not None and is_unrelated(best[name][0], searched):
            evalue, row = best[name]
            log.warning("record %s has no likely homolog among the rows of %s (its E-value as a search of the %d rows "
                        "is %.2g, best against %s): it is placed all the same, with confidences that assume it "
                        "belongs to the family; --sequence-scores shows how it fits, or leave it out", name,
                        existing.source, searched, search_evalue(evalue, searched), row)
    if keep_length:
        dropped = {i: len(s) - sum(c != "-" for c in row) for i, s, row in zip(ids, seqs, result.rows[len(existing):])}
        cut = {i: d for i, d in dropped.items() if d}
        if cut:
            log.warning("--keep-length dropped %d residues of %d records that no column of %s takes (first: %s, %d)",
                        sum(cut.values()), len(cut), existing.source, *next(iter(cut.items())))
    else:
        log.info("%d columns added to the alignment's %d", result.n_columns - existing.n_columns, existing.n_columns)
    return result


def _write(result, descriptions: dict, alphabet: str, fmt: str, output, tree, column_scores, sequence_scores,
           trim: float | None, uncalibrated: str, markup=None):
    """Write ``result`` (a :class:`~sinkalign.align.msa.MultipleAlignment`) and its side
    outputs as :func:`msa_fasta` says, each row with its description (by id) from
    ``descriptions``; ``uncalibrated``: why its confidences are not calibrated, for the warning;
    ``markup``: a :class:`~sinkalign.io.stockholm.StockholmMarkup` on ``result``'s columns, kept
    in a Stockholm output (its ``PP`` lines before the confidences of ``result``)."""
    from Bio import AlignIO

    from sinkalign.io.stockholm import write_stockholm
    from sinkalign.utils import atomic_write, wants_gzip

    written = result
    if trim is not None:
        if not result.calibrated:
            log.warning("trimming by confidences that are not calibrated (see --help): %s is not a probability "
                        "here", trim)
        written, kept = result.trimmed(trim)
        log.info("--trim %s kept %d of %d columns", trim, len(kept), result.n_columns)
        if not len(kept):
            raise InputError(f"--trim {trim} leaves no column (the highest column confidence is "
                             f"{np.nanmax(result.column_confidence, initial=0.0):.3f}); lower it")

    def emit(handle):
        if fmt == "clustal":  # Biopython heads it "CLUSTAL X (1.81)", a program that did not write it
            import io

            from sinkalign import __version__

            text = io.StringIO()
            AlignIO.write(written.to_biopython(alphabet, descriptions), text, MSA_FORMATS[fmt])
            _, rest = text.getvalue().split("\n", 1)
            handle.write(f"CLUSTAL format alignment by sinkalign (v{__version__})\n{rest}")  # as MAFFT heads its
            return
        if fmt != "stockholm":
            AlignIO.write(written.to_biopython(alphabet, descriptions), handle, MSA_FORMATS[fmt])
            return
        pp_rows, pp_cons = written.pp_lines()  # those with a value: an existing row's residues have none
        write_stockholm(handle, written.ids, written.rows, markup=markup, descriptions=descriptions,
                        residues={i: {"PP": pp} for i, pp in zip(written.ids, pp_rows) if pp.strip(".")},
                        columns={"PP_cons": pp_cons} if pp_cons.strip(".") else {})

    if output is None or is_stdio(output):
        emit(sys.stdout)
    else:
        with atomic_write(output, gzip=wants_gzip(output)) as handle:
            emit(handle)
    if tree is not None:
        if is_stdio(tree):
            print(result.tree)
        else:
            with atomic_write(tree, gzip=wants_gzip(tree)) as handle:
                handle.write(result.tree + "\n")
    for path, write in ((column_scores, lambda h: write_column_scores(result, h, alphabet)),
                        (sequence_scores, lambda h: write_sequence_scores(result, h))):
        if path is None:
            continue
        if is_stdio(path):
            write(sys.stdout)
        else:
            with atomic_write(path, gzip=wants_gzip(path)) as handle:
                write(handle)
    if not result.calibrated and (fmt == "stockholm" or column_scores is not None or sequence_scores is not None):
        (log.info if len(result.rows) < 2 else log.warning)(
            "the confidences written are the consistency-transformed library's own, not calibrated: %s", uncalibrated)
    finite = result.column_confidence[np.isfinite(result.column_confidence)]
    if finite.size:
        log.info("mean column confidence %.3f (%s)", finite.mean(), "calibrated" if result.calibrated else
                 "not calibrated")
    return result
