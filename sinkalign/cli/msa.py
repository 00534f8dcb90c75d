"""``sinkalign msa``: a multiple alignment of the records of one FASTA file."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from sinkalign.cli.options import (
    FiniteFloatRange,
    OutputPath,
    check_processes_option,
    esm_weights_option,
    exit_on_broken_pipe,
    os_error_message,
    progress_option,
    show_progress,
)

log = logging.getLogger(__name__)

_INPUT = click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path)


@click.command()
@click.argument("fasta", type=_INPUT, required=False)
@click.option("--example", is_flag=True, help="Align the built-in example: human alpha and beta globin and "
              "myoglobin.")
@click.option("-o", "--output", type=OutputPath(dir_okay=False, allow_dash=True, path_type=Path),
              help="Alignment file, written atomically (temporary file renamed at the end). Default or '-': "
                   "standard output.")
@click.option("--format", "fmt", type=click.Choice(["fasta", "clustal", "stockholm", "phylip"], case_sensitive=False),
              default=None,
              help="[default: the one the -o file's extension names (.afa/.fa/.fasta, .aln, .sto, .phy; through "
              ".gz), else fasta; a --format the extension contradicts is an error] Aligned FASTA, Clustal (with "
              "its conservation line), Stockholm (with each "
              "residue's confidence, #=GR PP, and each column's, #=GC PP_cons, in HMMER's code: * for >= 0.95, "
              "else the nearest tenth: 8 for [0.75, 0.85)) or relaxed PHYLIP (Biopython's writers).")
@click.option("--tree", type=OutputPath(dir_okay=False, allow_dash=True, path_type=Path),
              help="Also write the guide tree (Newick; UPGMA on one minus each pair's expected accuracy).")
@click.option("--column-scores", type=OutputPath(dir_okay=False, allow_dash=True, path_type=Path),
              help="Also write each column's confidence (the mean calibrated probability of its residue pairs), "
                   "residue count and conservation mark as a tab-separated table, e.g. to trim unreliable columns.")
@click.option("--sequence-scores", type=OutputPath(dir_okay=False, allow_dash=True, path_type=Path),
              help="Also write each record's confidence (the mean calibrated probability of its residue pairs: the "
                   "records that fit the family worst score lowest) as a tab-separated table.")
@click.option("--trim", type=FiniteFloatRange(0.0, 1.0), metavar="CONFIDENCE",
              help="Write the alignment without its columns of confidence below CONFIDENCE (and, above 0, without "
                   "the columns of a single residue), as trimAl or GUIDANCE trim an alignment for a tree. "
                   "--column-scores still lists every column.")
@click.option("--model", help="Trained model or a shipped model by name (learned, blosum, dna); it needs "
              "calibrated confidences. Default: the shipped model for the input.")
@esm_weights_option()
@click.option("--consistency", type=click.IntRange(0, 3), default=2, show_default=True,
              help="Rounds of ProbCons' consistency transformation of the pairwise confidences (each round "
                   "O(N^3) in the number of records: 0 for hundreds). At most 3: each round averages every pair's "
                   "confidences over the family, and past 3 the library thins until columns fall apart (the "
                   "confidences are calibrated for 0-3).")
@click.option("--refine", type=click.IntRange(min=0), default=20, show_default=True,
              help="Rounds of iterative refinement: the records split in two at random and the halves "
                   "aligned again, kept when the sum-of-pairs score does not drop.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the refinement's splits.")
@click.option("--engine", type=click.Choice(["auto", "numpy", "jax"]), default="auto", show_default=True,
              help="The pairwise aligner's engine (see `sinkalign align --help`).")
@click.option("--threads", type=click.IntRange(min=1), metavar="N",
              help="Threads of the numpy engine (default: a thread per CPU this process may use for a family of "
                   "fewer than 46 records, 1,024 pairs, else a worker process per CPU: see --processes).")
@click.option("--processes", type=click.IntRange(min=1), metavar="N",
              help="Run the pairwise alignments on N worker processes of this machine instead of threads (faster "
                   "on many cores; the same alignment): the default from 1,024 pairs (N: every CPU), as "
                   "`sinkalign align`'s. Not with --threads, --workers or --scheduler.")
@click.option("--workers", type=click.IntRange(min=1), help="Run the pairwise alignments on a local Dask cluster "
              "of this many worker processes (needs the 'cluster' extra).")
@click.option("--scheduler", metavar="ADDRESS", help="Run the pairwise alignments on the Dask cluster whose "
              "scheduler is at ADDRESS, e.g. tcp://host:8786 (the model path must be readable by every worker).")
@click.option("--chunk-size", type=click.IntRange(min=1), default=256, show_default=True,
              help="Pairs per chunk: the unit of work sent to a cluster worker.")
@click.option("--add-to", type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
              metavar="ALIGNMENT",
              help="Add the records of FASTA to this existing alignment (aligned FASTA, A2M, Stockholm, Clustal, MSF, "
                   "PIR or PHYLIP, told by content; '-': standard input) without changing it, as MAFFT's --add: its "
                   "rows come out as they went in, with a new column only where a new record has residues that no "
                   "existing column takes; a Stockholm alignment written as Stockholm keeps its markup (#=GF, #=GS "
                   "lines; #=GC and #=GR annotations follow their columns, '.' in new ones). "
                   "Each record is aligned to every row and to the other records; --consistency applies; --refine, "
                   "--trim and --tree do not. --workers / --scheduler run the pairwise alignments on a cluster.")
@click.option("--keep-length", is_flag=True, help="With --add-to: drop the new records' residues that no existing "
              "column takes, so that the output has exactly the alignment's columns (MAFFT's --keeplength).")
@click.option("--independent", is_flag=True, help="With --add-to: align each record to the alignment's rows only, "
              "not to the other records, so that its columns do not depend on what else is added (MAFFT's "
              "--addfragments): N x K pairwise alignments for N records and K rows, no consistency rounds. With "
              "--keep-length: many queries for phylogenetic placement on a reference alignment.")
@click.option("--nearest", type=click.IntRange(min=1), metavar="M",
              help="With --independent: align each record to its M most similar rows only (ranked by the "
                   "Smith-Waterman score of `sinkalign align --prefilter`) and place it on their profile: N x M "
                   "pairwise alignments, for alignments of hundreds or thousands of rows (on held-out Pfam families "
                   "M = 10 was as accurate as every row).")
@progress_option("pairwise alignments")
@click.option("--overwrite", is_flag=True, help="Replace an existing output, --tree, --column-scores or "
              "--sequence-scores file (when the run succeeds). Without it an existing file is an error.")
def msa(fasta, example, output, fmt, tree, column_scores, sequence_scores, trim, model, esm_weights, consistency, refine,
        seed, engine, threads, processes, workers, scheduler, chunk_size, add_to, keep_length, independent, nearest,
        progress, overwrite):
    """Align the records of FASTA all together (a multiple alignment).

    \b
    sinkalign msa family.fasta -o family.afa
    sinkalign msa --example
    sinkalign msa big_family.fasta --workers 4 -o big_family.afa
    sinkalign msa family.fasta --format clustal --tree family.nwk -o family.aln
    sinkalign msa family.fasta --format stockholm --column-scores family.tsv -o family.sto
    sinkalign msa family.fasta --trim 0.5 -o family.trimmed.afa
    sinkalign msa new.fasta --add-to family.afa -o family_plus_new.afa
    sinkalign msa queries.fasta --add-to reference.afa --independent --keep-length -o placed.afa

    Every pair of records is aligned by the OT aligner; the pairs' calibrated column
    confidences are combined as ProbCons combines its posteriors (consistency, a guide tree,
    progressive alignment). Nucleotide records are aligned on the strand given. Each
    residue and column gets a confidence: the mean probability that its residue pairs are
    right (calibrated on reference families for the shipped protein models).

    The records are written in upper case (a lower-case residue would read as an insertion in
    Stockholm), without a protein's trailing stop '*'. With --add-to the alignment's rows keep
    their letter case, except rows of a format where case means nothing written as Stockholm.
    """
    from sinkalign.pipelines.msa import msa_fasta

    if example == (fasta is not None):
        raise click.UsageError("give FASTA or --example (and not both)")
    if workers is not None and scheduler is not None:
        raise click.UsageError("give --workers (a local cluster) or --scheduler (an existing one), not both")
    if threads is not None and (workers is not None or scheduler is not None):
        raise click.UsageError("--threads is for a local run: a cluster's workers use their own threads")
    check_processes_option(processes, threads, workers, scheduler)
    if independent:  # no consistency rounds, unless asked for (which is an error the pipeline words)
        source = click.get_current_context().get_parameter_source("consistency")
        if source is not click.core.ParameterSource.COMMANDLINE:
            consistency = 0
    if example:
        from sinkalign.cli.align import EXAMPLES

        fasta = [EXAMPLES / "globins_query.fasta", EXAMPLES / "globins_target.fasta"]
    try:
        result = msa_fasta(fasta, output=output, fmt=fmt, tree=tree, model=model, consistency=consistency,
                           refine=refine, seed=seed, threads=threads, processes=processes, engine=engine,
                           workers=workers,
                           scheduler=scheduler, chunk_size=chunk_size, progress=show_progress(progress),
                           overwrite=overwrite, column_scores=column_scores, trim=trim,
                           sequence_scores=sequence_scores, add_to=add_to, keep_length=keep_length,
                           independent=independent, nearest=nearest, esm_weights=esm_weights)
    except BrokenPipeError:  # e.g. `sinkalign msa ... | head`
        exit_on_broken_pipe()
    except OSError as exc:
        stdout = output is None or str(output) == "-"
        raise click.ClickException(os_error_message(exc, ["standard output" if stdout else output, tree, column_scores,
                                                          sequence_scores])) from exc
    log.info("aligned %d records in %d columns", len(result.ids), result.n_columns)
