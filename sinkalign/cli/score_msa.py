"""``sinkalign score-msa``: a multiple alignment scored against a reference alignment."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from sinkalign.cli.options import OutputPath

_INPUT = click.Path(exists=True, allow_dash=True, path_type=Path)
_OUTPUT = OutputPath(dir_okay=False, allow_dash=True, path_type=Path)


def _fmt(value) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def _tsv(value, spec: str = ".4f") -> str:
    """A ratio in the TSV outputs: ``NA`` for 0 / 0 (precision where the test aligns nothing)."""
    return "NA" if value is None or value != value else format(value, spec)


def _stem(path: Path) -> str:
    """A file's name without its suffixes: ``sup_002.afa`` and ``sup_002.fasta.gz`` -> ``sup_002``."""
    return path.name.split(".")[0]


def _wrote(console, path: Path) -> None:
    from sinkalign.utils import is_stdio

    if not is_stdio(path):
        console.print(f"wrote {path}")


def _matched(test: Path, reference: Path) -> list[tuple[str, Path, Path]]:
    """``(family, test file, reference file)``: one pair of files, or every reference file of a
    folder with the test file of the same name (suffixes aside) in the test folder. ``-``
    (standard input) is a file, for one of the two."""
    from sinkalign.utils import is_stdio

    if is_stdio(test) and is_stdio(reference):
        raise click.UsageError("TEST and REFERENCE are both '-': standard input holds one file; give the other as a "
                               "file, or as a pipe: <(...)")
    if is_stdio(test) or is_stdio(reference):
        if (reference if is_stdio(test) else test).is_dir():
            raise click.UsageError("give TEST and REFERENCE both as files or both as folders")
        return [(_stem(reference), test, reference)]
    if test.is_dir() != reference.is_dir():
        raise click.UsageError("give TEST and REFERENCE both as files or both as folders")
    if not test.is_dir():
        return [(_stem(reference), test, reference)]

    def files(folder: Path) -> dict[str, Path]:
        out: dict[str, Path] = {}
        for f in sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")):
            if _stem(f) in out:
                raise click.UsageError(f"{folder}: {out[_stem(f)].name} and {f.name} are both family {_stem(f)!r}")
            out[_stem(f)] = f
        return out

    tests, refs = files(test), files(reference)
    if not refs:
        raise click.UsageError(f"{reference}: no reference files")
    missing = [name for name in refs if name not in tests]
    if missing:
        raise click.UsageError(f"{test}: no alignment of family {missing[0]!r} ({refs[missing[0]].name} in "
                               f"{reference})" + (f" nor of {len(missing) - 1} more" if len(missing) > 1 else ""))
    return [(name, tests[name], refs[name]) for name in refs]


@click.command("score-msa")
@click.argument("test", type=_INPUT)
@click.argument("reference", type=_INPUT)
@click.option("--json", "json_path", type=_OUTPUT, help="Also write the scores (and every pair's) as JSON ('-': "
              "standard output, the table then going to standard error).")
@click.option("--pairs", "pairs_path", type=_OUTPUT, help="Also write each pair of rows' scores as a "
              "tab-separated table ('-': standard output).")
@click.option("--families", "families_path", type=_OUTPUT, help="Also write each family's scores (folders) as a "
              "tab-separated table ('-': standard output).")
@click.option("--subset", is_flag=True, help="Score against the reference's rows that TEST holds (at least two), "
              "for a TEST that aligned some of a family's sequences; without it a reference row TEST lacks is an "
              "error.")
@click.option("--overwrite", is_flag=True, help="Replace existing --json / --pairs / --families files (without it "
              "an existing file is an error).")
def score_msa(test, reference, json_path, pairs_path, families_path, subset, overwrite):
    """Score the multiple alignment TEST against the REFERENCE alignment of the same sequences.

    \b
    sinkalign score-msa family.afa reference.sto
    sinkalign msa family.fasta -o mine.afa && sinkalign score-msa mine.afa reference.afa --pairs pairs.tsv
    sinkalign score-msa my_alignments/ references/ --families families.tsv

    SP (sum-of-pairs: the share of the reference's aligned residue pairs that TEST aligns too),
    precision (the share of TEST's aligned pairs that the reference has), F1 and TC (the share
    of reference columns reproduced whole), overall and per identity bin of the reference
    pairs. A structure-based reference (HOMSTRAD PIR, bench1.0 aligned FASTA with a lower-case
    untrusted region) counts its trusted core only. Either file may be aligned FASTA, A2M,
    Stockholm, Clustal, MSF, PIR or relaxed PHYLIP (told by content); rows are matched by name
    and must hold the same residues. Either file may be '-' (standard input) or a pipe
    (<(...)). Given two folders, each reference file is scored against the test file of the
    same name (suffixes aside) and the pairs of every family pooled.
    """
    from rich.console import Console
    from rich.table import Table

    from sinkalign.align.msa_scores import pooled, score_alignment
    from sinkalign.io.alignments import read_alignment
    from sinkalign.io.structural import read_reference_alignment
    from sinkalign.pipelines.runner import check_outputs, stdin_spooled
    from sinkalign.utils import is_stdio, open_output

    jobs = _matched(test, reference)
    inputs = [p for _, t, r in jobs for p in (t, r) if not is_stdio(p)]
    outputs = ((json_path, "--json"), (pairs_path, "--pairs"), (families_path, "--families"))
    check_outputs(outputs, overwrite, inputs)
    per_family = []
    console = Console(stderr=any(is_stdio(path) for path, _ in outputs))  # stdout: the machine-readable file's
    for name, test_file, ref_file in jobs:
        # '-' and pipes are read through a copy (a pipe would be read empty by a second open, after
        # its format is sniffed); errors raised here name them as given
        with stdin_spooled([test_file, ref_file]) as (test_read, ref_read):
            references = read_reference_alignment(ref_read)
            if len(references) == 1 and len(references[0]) >= 2:
                s = score_alignment(read_alignment(test_read), references[0], subset=subset)
        if len(references) != 1:
            raise click.ClickException(f"{ref_file}: holds {len(references)} alignments; give a file of one")
        if len(references[0]) < 2:
            why = f"{ref_file}: the reference holds one row ({references[0].ids[0]}): there is no pair of rows to score"
            if not test.is_dir():
                raise click.ClickException(why)
            console.print(f"note: {why}: family {name} adds nothing")
            continue
        if s.extra:
            console.print(f"note: {len(s.extra)} row{'s' if len(s.extra) > 1 else ''} of {test_file} "
                          f"{'are' if len(s.extra) > 1 else 'is'} not in the reference and not scored "
                          f"(first: {s.extra[0]!r})")
        if not s.overall["n_ref"]:
            if not test.is_dir():
                raise click.ClickException(f"{ref_file} aligns no pair of trusted residues: there is nothing to "
                                           "score (lower-case residues are untrusted, as in bench1.0)")
            console.print(f"note: {ref_file} aligns no pair of trusted residues: family {name} adds nothing")
        per_family.append((name, s))
    scores = per_family[0][1] if len(per_family) == 1 and not test.is_dir() else pooled([s for _, s in per_family])
    what = f"{len(per_family)} families" if test.is_dir() else f"{test.name} against {reference.name}"
    table = Table(title=f"{what}: {scores.overall['pairs']} pairs of rows")
    for head in ("identity", "pairs", "SP (recall)", "precision", "F1"):
        table.add_column(head, justify="left" if head == "identity" else "right")
    rows = [("all", scores.overall)] + list(scores.by_identity.items())
    for label, s in rows:
        table.add_row(label, str(s["pairs"]), _fmt(s["recall"]), _fmt(s["precision"]), _fmt(s["f1"]))
    console.print(table)
    ok, total = scores.tc
    console.print(f"TC (total column): {_fmt(scores.total_column)} ({ok} of {total} reference columns with two or "
                  "more trusted residues)")
    if json_path is not None:
        payload = {"test": str(test), "reference": str(reference), **scores.to_dict()}
        if test.is_dir():
            payload.pop("pairs")
            payload["families"] = {name: s.to_dict() for name, s in per_family}
        with open_output(json_path) as handle:
            json.dump(payload, handle, indent=1)
            handle.write("\n")
        _wrote(console, json_path)
    if pairs_path is not None:
        with open_output(pairs_path) as handle:
            handle.write("family\tquery\ttarget\tidentity\treference_pairs\ttest_pairs\tcorrect\tprecision\trecall"
                         "\tf1\n")
            for name, fam in per_family:
                for q, t, ident, s in fam.pairs:
                    handle.write(f"{name}\t{q}\t{t}\t{_tsv(ident, '.1f')}\t{s.n_ref}\t{s.n_pred}\t{s.tp}\t"
                                 f"{_tsv(s.precision)}\t{_tsv(s.recall)}\t{_tsv(s.f1)}\n")
        _wrote(console, pairs_path)
    if families_path is not None:
        with open_output(families_path) as handle:
            handle.write("family\tpairs\tsp\tprecision\tf1\ttc\ttc_columns\n")
            for name, s in per_family:
                o = s.overall
                tc = "NA" if s.total_column is None else f"{s.total_column:.4f}"
                handle.write(f"{name}\t{o['pairs']}\t{_tsv(o['recall'])}\t{_tsv(o['precision'])}\t{_tsv(o['f1'])}\t"
                             f"{tc}\t{s.tc[1]}\n")
        _wrote(console, families_path)
