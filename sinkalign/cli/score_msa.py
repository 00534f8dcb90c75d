"""``sinkalign score-msa``: a multiple alignment scored against a reference alignment."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

_INPUT = click.Path(exists=True, dir_okay=False, path_type=Path)
_OUTPUT = click.Path(dir_okay=False, path_type=Path)


def _fmt(value) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


@click.command("score-msa")
@click.argument("test", type=_INPUT)
@click.argument("reference", type=_INPUT)
@click.option("--json", "json_path", type=_OUTPUT, help="Also write the scores (and every pair's) as JSON.")
@click.option("--pairs", "pairs_path", type=_OUTPUT, help="Also write each pair of rows' scores as a "
              "tab-separated table.")
@click.option("--overwrite", is_flag=True, help="Replace existing --json / --pairs files (without it an existing "
              "file is an error).")
def score_msa(test, reference, json_path, pairs_path, overwrite):
    """Score the multiple alignment TEST against the REFERENCE alignment of the same sequences.

    \b
    sinkalign score-msa family.afa reference.sto
    sinkalign msa family.fasta -o mine.afa && sinkalign score-msa mine.afa reference.afa --pairs pairs.tsv

    SP (sum-of-pairs: the share of the reference's aligned residue pairs that TEST aligns too),
    precision (the share of TEST's aligned pairs that the reference has), F1 and TC (the share
    of reference columns reproduced whole), overall and per identity bin of the reference
    pairs. A structure-based reference (HOMSTRAD PIR, bench1.0 aligned FASTA with a lower-case
    untrusted region) counts its trusted core only. Either file may be aligned FASTA, A2M,
    Stockholm, Clustal, MSF, PIR or relaxed PHYLIP (told by content); rows are matched by name
    and must hold the same residues.
    """
    from rich.console import Console
    from rich.table import Table

    from sinkalign.align.msa_scores import score_alignment
    from sinkalign.io.alignments import read_alignment
    from sinkalign.io.structural import read_reference_alignment
    from sinkalign.pipelines.runner import check_output
    from sinkalign.utils import atomic_write

    for path, what in ((json_path, "JSON file"), (pairs_path, "pairs file")):
        if path is not None:
            check_output(path, overwrite, [test, reference], what)
    references = read_reference_alignment(reference)
    if len(references) != 1:
        raise click.ClickException(f"{reference}: holds {len(references)} alignments; give a file of one")
    scores = score_alignment(read_alignment(test), references[0])
    console = Console()
    if scores.extra:
        console.print(f"note: {len(scores.extra)} rows of {test} are not in the reference and are not scored "
                      f"(first: {scores.extra[0]!r})")
    table = Table(title=f"{test.name} against {reference.name}: {scores.overall['pairs']} pairs of rows")
    for head in ("pairs", "identity", "SP (recall)", "precision", "F1"):
        table.add_column(head, justify="right" if head != "pairs" else "left")
    rows = [("all", scores.overall)] + list(scores.by_identity.items())
    for label, s in rows:
        table.add_row(str(s["pairs"]), label, _fmt(s["recall"]), _fmt(s["precision"]), _fmt(s["f1"]))
    console.print(table)
    ok, total = scores.tc
    console.print(f"TC (total column): {_fmt(scores.total_column)} ({ok} of {total} reference columns with two or "
                  "more trusted residues)")
    if json_path is not None:
        with atomic_write(json_path) as handle:
            json.dump({"test": str(test), "reference": str(reference), **scores.to_dict()}, handle, indent=1)
        console.print(f"wrote {json_path}")
    if pairs_path is not None:
        with atomic_write(pairs_path) as handle:
            handle.write("query\ttarget\tidentity\treference_pairs\ttest_pairs\tcorrect\tprecision\trecall\tf1\n")
            for q, t, ident, s in scores.pairs:
                handle.write(f"{q}\t{t}\t{'NA' if ident != ident else f'{ident:.1f}'}\t{s.n_ref}\t{s.n_pred}\t{s.tp}\t"
                             f"{s.precision:.4f}\t{s.recall:.4f}\t{s.f1:.4f}\n")
        console.print(f"wrote {pairs_path}")
