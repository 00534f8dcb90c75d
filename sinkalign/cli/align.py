"""``sinkalign align``: align the records of two FASTA files with a trained OT aligner."""

from __future__ import annotations

import logging
from pathlib import Path

import click

log = logging.getLogger(__name__)


EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "examples"


@click.command()
@click.argument("query_fasta", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=False)
@click.argument("target_fasta", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=False)
@click.option("--example", is_flag=True, help="Align the built-in example (human alpha globin and myoglobin "
              "against beta globin).")
@click.option("--pairing", type=click.Choice(["all", "zip"]), default="all", show_default=True,
              help="all: every query against every target; zip: record i with record i.")
@click.option("--format", "fmt", type=click.Choice(["fasta", "tsv", "sam", "bam", "stockholm", "json"]),
              default="tsv", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Output file (written atomically). Default: standard output (not for bam).")
@click.option("--model", type=click.Path(exists=True, path_type=Path),
              help="Trained model (run or checkpoint directory). Default: the shipped model for the input (DNA when every record is nucleotides, else protein).")
@click.option("--embedder", type=str, help="Embedder name; must be the one the model was trained with.")
@click.option("--esm-weights", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Local ESM-2 weights for models trained on esm2 features.")
@click.option("--backend", type=click.Choice(["reference", "pallas"]), default="reference", show_default=True)
@click.option("--plan-out", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write every transport plan (with dustbin row/column) to this .npz file.")
@click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--gap-weight", type=click.FloatRange(min=0), help="MEA gap weight (default: the model's).")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar on stderr.")
def align(query_fasta, target_fasta, example, pairing, fmt, output, model, embedder, esm_weights, backend, plan_out,
          batch_size, gap_weight, progress):
    """Align the records of QUERY_FASTA against those of TARGET_FASTA (protein or DNA)."""
    from sinkalign.pipelines.align import align_fasta  # noqa: PLC0415

    if example:
        if query_fasta or target_fasta:
            raise click.UsageError("--example takes no FASTA arguments")
        query_fasta, target_fasta = EXAMPLES / "globins_query.fasta", EXAMPLES / "globins_target.fasta"
    elif not (query_fasta and target_fasta):
        raise click.UsageError("give QUERY_FASTA and TARGET_FASTA (or --example)")
    if fmt == "bam" and output is None:
        raise click.UsageError("--format bam needs -o FILE")
    try:
        n = align_fasta(query_fasta, target_fasta, output=output, fmt=fmt, pairing=pairing, model=model,
                        embedder=embedder, esm_weights=esm_weights, backend=backend, plan_out=plan_out,
                        batch_size=batch_size, gap_weight=gap_weight, progress=progress)
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc
    log.info("aligned %d pairs", n)
