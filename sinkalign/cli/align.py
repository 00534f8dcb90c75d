"""``sinkalign align``: align pairs of sequences with a trained OT aligner."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from sinkalign.cli.options import (
    EValueThreshold,
    FiniteFloatRange,
    OutputPath,
    RecordedCommand,
    Strand,
    check_processes_option,
    esm_weights_option,
    exit_on_broken_pipe,
    given_command,
    os_error_message,
    progress_option,
    show_progress,
)

log = logging.getLogger(__name__)


EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "examples"
_INPUT = click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path)


class _DbSize(click.ParamType):
    """A whole number >= 1, or ``targets``."""

    name = "N|targets"

    def convert(self, value, param, ctx):
        if isinstance(value, int) or value == "targets":
            return value
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            self.fail(f"{value!r} is not a whole number >= 1 or 'targets'", param, ctx)
        return n


class _Band(click.ParamType):
    """A whole number >= 0 (a corridor's radius), or ``dense``."""

    name = "R|dense"

    def convert(self, value, param, ctx):
        if isinstance(value, int) or value == "dense":
            return value
        try:
            return int(value) if int(value) >= 0 else self.fail(f"{value!r} is not a whole number >= 0 or 'dense'",
                                                                param, ctx)
        except ValueError:
            self.fail(f"{value!r} is not a whole number >= 0 or 'dense'", param, ctx)


@click.command(cls=RecordedCommand)
@click.argument("query_fasta", type=_INPUT, required=False)
@click.argument("target_fasta", type=_INPUT, required=False)
@click.option("--example", is_flag=True, help="Align the built-in example (human alpha globin and myoglobin "
              "against beta globin).")
@click.option("--pairing", type=click.Choice(["all", "zip"]), default="all", show_default=True,
              help="all: every query against every target; zip: record i with record i.")
@click.option("--pairs", "pairs", type=_INPUT,
              help="Align the pairs listed in this file (query id, target id per line; tab- or space-separated, "
                   "further columns ignored, '#' comments), fetched from QUERY_FASTA (and TARGET_FASTA when "
                   "given) through a .fai index, built beside the FASTA when missing.")
@click.option("--format", "fmt", type=click.Choice(["fasta", "tsv", "sam", "bam", "stockholm", "json", "text",
                                                  "blast6", "m8", "paf", "maf"], case_sensitive=False),
              default=None,
              help="[default: the one the -o file's extension names (.sam, .bam, .paf, .maf, .m8, .json, .sto, "
                   ".fa, .tsv; through .gz), else tsv; a --format the extension contradicts is an error] "
                   "text: each pair's figures, its rows with a match line and its column confidences, to read "
                   "by eye. json: JSON Lines, one object per pair and line (read it line by line, or with "
                   "pandas.read_json(lines=True)). blast6: BLAST's tabular -outfmt 6 (m8), its last column "
                   "sinkalign's score, not bits (it depends on --band: rank hits by the evalue column). sam/bam: a "
                   "protein read has SEQ '*' and its residues in an XQ:Z tag (BAM's SEQ holds nucleotide codes "
                   "only); "
                   "the E-value in ZE:f is float32 (below ~1e-45 it reads 0; json adds log_evalue, its natural log; the other "
                   "formats print it). paf: "
                   "minimap2's PAF, with the CIGAR (cg:Z), score, mean confidence and E-value as tags. maf: UCSC's and "
                   "LAST's MAF, a block per pair (target first).")
@click.option("-o", "--output", type=OutputPath(dir_okay=False, allow_dash=True, path_type=Path),
              help="Output file, written atomically (temporary file renamed at the end). Default or '-': "
                   "standard output, written as pairs finish (not for bam; with --max-hits, a query's pairs "
                   "when its last is done).")
@click.option("--overwrite", is_flag=True, help="Replace an existing output or --plan-out file (when the run "
              "succeeds). Without it an existing file is an error.")
@click.option("--model", type=str,
              help="Trained model (run, checkpoint or model directory) or a shipped model by name: learned (the "
                   "protein default, trained on structure-based and Pfam pairs), blosum (its BLOSUM62 starting point: "
                   "about 3x faster, less accurate on remote homologs), dna. Default: the shipped model for the "
                   "input (DNA when every record is nucleotides, else learned; DNA against protein is an error).")
@click.option("--embedder", type=str, help="Embedder name; must be the one the model was trained with.")
@esm_weights_option()
@click.option("--backend", type=click.Choice(["reference", "pallas"]), default="reference", show_default=True,
              help="The jax engine's dense solve: the pure-JAX operator, or the blockwise Pallas kernels (for a GPU; "
                   "interpreted on a CPU, slow). The numpy engine has one of its own.")
@click.option("--engine", type=click.Choice(["auto", "numpy", "jax"]), default="auto", show_default=True,
              help="numpy: float64 plans pair by pair on every CPU, nothing to compile. jax: batched JAX forward "
                   "passes of the dense pairs, on a GPU when JAX has one (pairs on a corridor or in a box, see "
                   "--band, are solved on the CPU as the numpy engine solves them: the same alignments); the only "
                   "engine for models with embedder features and for --backend pallas. auto: numpy whenever the "
                   "model allows it.")
@click.option("--threads", type=click.IntRange(min=1), metavar="N",
              help="Threads of the numpy engine, as BLAST's -num_threads; not with --workers/--scheduler, whose "
                   "workers use their own. Default: a thread per CPU this process may use for fewer than 1,024 "
                   "pairs or a pair past 1024 x 1024 residues, else a worker process per CPU (see --processes).")
@click.option("--processes", type=click.IntRange(min=1), metavar="N",
              help="Align on N worker processes of this machine instead of threads: faster than --threads on "
                   "many cores (a pair's work holds Python's GIL much of the time; 3.2x on 16), a few seconds to "
                   "start, the same output. The default from 1,024 pairs (N: every CPU). Not with --threads, "
                   "--workers or --scheduler.")
@click.option("--plan-out", type=OutputPath(dir_okay=False, path_type=Path),
              help="Also write the transport plan (with dustbin row/column) of every pair written to this .npz "
                   "file (on the minus strand: the plan of the query's reverse complement), each named "
                   "query|target|index, with % and | in an id written %25 and %7C.")
@click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True,
              help="Pairs per batch of the jax engine (padded to a common length; the numpy engine aligns pair by pair).")
@click.option("--chunk-size", type=click.IntRange(min=1), default=256, show_default=True,
              help="Pairs per chunk: the unit of work sent to a cluster worker.")
@click.option("--workers", type=click.IntRange(min=1),
              help="Run on a local Dask cluster of this many worker processes (needs the 'cluster' extra).")
@click.option("--scheduler", metavar="ADDRESS",
              help="Run on the Dask cluster whose scheduler is at ADDRESS, e.g. tcp://host:8786 (needs the "
                   "'cluster' extra; the model path must be readable by every worker).")
@click.option("--gap-weight", type=FiniteFloatRange(min=0),
              help="MEA gap weight (default: the model's, 0 for the shipped ones, which were tuned with it): a "
                   "column is kept only where its posterior beats this times the two residues' gap posteriors, so "
                   "values near 0.5 and above leave most pairs nearly unaligned.")
@click.option("--identity-weight", type=FiniteFloatRange(min=0), metavar="TAU",
              help="Break near-ties of the decoding towards identical residues: TAU times each identical pair "
                   "is added to the MEA gain (posteriors and scores stay the model's). Default: the model's "
                   "(the shipped protein model: 0.1 for pairs at least 80% identical, see --identity-min: a "
                   "single deletion between close variants placed exactly in 240 of 240 pairs of 200-500 residues; "
                   "the DNA model: 0.05 for pairs at least 90% identical, moving gaps only, see --identity-gaps; "
                   "blosum: 0). 0 turns it off. "
                   "For every pair it costs accuracy on remote homologs (BENCHMARKS.md, 'Near-identical pairs with "
                   "one indel').")
@click.option("--identity-min", type=FiniteFloatRange(min=0, max=1), metavar="SHARE",
              help="Apply --identity-weight only to the pairs whose plain decoding aligns at least this share of "
                   "identical residues (decoded again with it); 0 applies it to every pair. Default: the model's "
                   "(0.8 for the shipped protein model, 0.9 for the DNA model).")
@click.option("--identity-gaps", type=click.Choice(["add", "move"]),
              help="add: the --identity-weight tie-break may open gaps the plain decoding lacks (it finds indels "
                   "that decoding aligned as mismatches); move: it only moves the plain decoding's gaps to where "
                   "the identities put them (with four letters a shifted chance identity is common: 'add' would "
                   "trade two mismatches for a gap pair). Default: the model's.")
@click.option("--identity-move-min", type=FiniteFloatRange(min=0, max=1), metavar="SHARE",
              help="Also apply the tie-break, moving gaps only, to the pairs whose plain decoding aligns at least "
                   "this share of identical residues but less than --identity-min. Default: the model's (0.7 for "
                   "the shipped protein model, none for the others); 0: none.")
@click.option("--min-confidence", type=FiniteFloatRange(min=0, max=1, max_open=True),
              help="Leave unaligned the columns whose calibrated confidence is below this (default: the model's "
                   "own threshold, 0.35 for the shipped protein model, 0.1 for the shipped DNA model; 0 keeps every "
                   "MEA column). Higher: fewer, surer columns (precision up, recall down). DNA homologs inside "
                   "unrelated flanking sequence: 0.5 keeps more of the alignment from running on into the flanks "
                   "(BENCHMARKS.md, 'DNA homologs between unrelated flanks').")
@click.option("--max-evalue", type=EValueThreshold(), metavar="E",
              help="Write only the pairs whose E-value is at most this (e.g. 1e-3 in an all-vs-all run: the "
                   "likely homologs); needs a model with an E-value null (every shipped model has one). Compared "
                   "as logs and read exactly, so E-values and thresholds below the float range count (1e-400).")
@click.option("--db-size", type=_DbSize(), metavar="N|targets",
              help="Report E-values for a search of N comparisons per query (each pair's E-value times N, as "
                   "HMMER's -Z), or 'targets': the number of pairs of this run the query is in (the target count "
                   "all-vs-all, every target searched with --prefilter). Default: per comparison, as bl2seq. "
                   "--max-evalue applies to the E-values as reported.")
@click.option("--max-hits", type=click.IntRange(min=1), metavar="N",
              help="Keep the N pairs of smallest E-value per query, best first (as BLAST's -max_target_seqs). "
                   "A query's pairs must be consecutive: always so all-vs-all; group a --pairs list by query.")
@click.option("--prefilter", type=click.IntRange(min=1), metavar="N",
              help="All-vs-all searches: align each query with only the N targets of best Smith-Waterman score "
                   "(in nats, less the log of the target's length; ~0.02 ms a pair), as BLAST's and MMseqs2's "
                   "prefilters. E-values stay per comparison; --db-size targets counts every target searched. A "
                   "query with more than N homologs keeps only N of them: make N at least the number of hits you "
                   "want (BENCHMARKS.md, 'A search with --prefilter N').")
@click.option("--strand", type=Strand(),
              help="Nucleotide pairs: align the query as given (plus or +), its reverse complement (minus or -) "
                   "or both, keeping the strand of smaller E-value (default: both, as BLAST; the E-value is doubled: "
                   "two comparisons); any case. A minus-strand pair is written as SAM writes a reverse-strand read "
                   "(flag 16, the reverse complement as SEQ), with query spans on the query as given (TSV, JSON, blast6).")
@click.option("--band", type=_Band(), metavar="R|dense",
              help="Solve every pair on a corridor of R residues around its Needleman-Wunsch and Smith-Waterman "
                   "alignments (O((m + n) R) instead of O(m n)); 'dense': every pair's plan dense (up to 8192 x "
                   "8192 residues). Default, on either engine: a pair with one side at least twice the other (a domain "
                   "against a whole protein, a gene against a contig) in the box around its Smith-Waterman hit, "
                   "10% of the shorter side wider each way; other pairs dense up to 1024 x 1024 residues, a "
                   "corridor of 32 past it (long pairs: faster, and their confidences keep); models with embedder "
                   "features and --backend pallas: dense. With --plan-out a banded plan is written dense, 0 outside "
                   "its corridor.")
@progress_option("aligned pairs")
@click.pass_context
def align(ctx, query_fasta, target_fasta, example, pairing, pairs, fmt, output, overwrite, model, embedder,
          esm_weights, backend, engine, threads, processes, plan_out, batch_size, chunk_size, workers, scheduler, gap_weight,
          identity_weight, identity_min, identity_gaps, identity_move_min, min_confidence,
          max_evalue, db_size, max_hits, prefilter, strand, band, progress):
    """Align the records of QUERY_FASTA against those of TARGET_FASTA (protein or DNA).

    \b
    sinkalign align queries.fasta targets.fasta -o out.tsv     all-vs-all
    sinkalign align a.fasta b.fasta --pairing zip              record i with record i, to stdout
    sinkalign align --pairs pairs.tsv seqs.fasta [targets.fasta] -o out.tsv
    sinkalign align ... --workers 4 | --scheduler tcp://host:8786

    '-' reads a FASTA file or the pair list from standard input; '-' as both FASTA files aligns
    the records read there against each other (all-vs-all of one file).
    """
    from sinkalign.pipelines.align import align_fasta

    if example:
        if query_fasta or target_fasta or pairs:
            raise click.UsageError("--example takes no FASTA arguments and no --pairs")
        query_fasta, target_fasta = EXAMPLES / "globins_query.fasta", EXAMPLES / "globins_target.fasta"
    elif pairs is not None:
        if query_fasta is None:
            raise click.UsageError("--pairs PAIRS needs the FASTA file that holds the sequences: "
                                   "sinkalign align --pairs PAIRS SEQS.fasta [TARGETS.fasta]")
        if ctx.get_parameter_source("pairing") is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError("--pairing does not apply to --pairs (the list names every pair)")
    elif not (query_fasta and target_fasta):
        raise click.UsageError("give QUERY_FASTA and TARGET_FASTA (or --pairs PAIRS SEQS.fasta, or --example)")
    if fmt == "bam" and (output is None or str(output) == "-"):
        raise click.UsageError("--format bam needs -o FILE")
    if workers is not None and scheduler is not None:
        raise click.UsageError("give --workers (a local cluster) or --scheduler (an existing one), not both")
    if threads is not None and (workers is not None or scheduler is not None):
        raise click.UsageError("--threads is for a local run: a cluster's workers use their own threads "
                               "(dask worker --nthreads)")
    check_processes_option(processes, threads, workers, scheduler)
    try:
        n = align_fasta(query_fasta, target_fasta, pairs=pairs, output=output, fmt=fmt, pairing=pairing,
                        model=model, embedder=embedder, esm_weights=esm_weights, backend=backend,
                        plan_out=plan_out, batch_size=batch_size, gap_weight=gap_weight,
                        min_confidence=min_confidence, max_evalue=max_evalue, db_size=db_size, max_hits=max_hits,
                        progress=show_progress(progress),
                        overwrite=overwrite, workers=workers, scheduler=scheduler, chunk_size=chunk_size,
                        engine=engine, threads=threads, processes=processes, strand=strand, prefilter=prefilter,
                        band=band,
                        identity_weight=identity_weight, identity_min=identity_min, identity_gaps=identity_gaps,
                        identity_move_min=identity_move_min, command_line=given_command())
    except BrokenPipeError:  # e.g. `sinkalign align ... | head`
        exit_on_broken_pipe()
    except OSError as exc:  # a file that is missing, unreadable or unwritable (SinkalignError: the group)
        stdout = output is None or str(output) == "-"
        raise click.ClickException(os_error_message(exc, ["standard output" if stdout else output, plan_out])) from exc
    log.info("wrote %d records", n)  # (SAM/BAM: lines, a query's unmapped line included)
