"""``sinkalign shards``: build and inspect Pfam pair shards (thin over :mod:`sinkalign.io.shards`)."""

from __future__ import annotations

from pathlib import Path

import click

from sinkalign.cli.options import progress_option, show_progress

__all__ = ["shards"]


def _parse_split(ctx: click.Context, param: click.Parameter, value: str) -> tuple[float, float, float]:
    try:
        parts = tuple(float(x) for x in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not three comma-separated numbers, e.g. 0.8,0.1,0.1") from None
    if len(parts) != 3:
        raise click.BadParameter(f"{value!r} has {len(parts)} fields; give train,valid,test e.g. 0.8,0.1,0.1")
    from sinkalign.errors import InputError
    from sinkalign.io.shards import check_split

    try:
        return check_split(parts)
    except InputError as err:
        raise click.BadParameter(str(err)) from None


@click.group("shards")
def shards() -> None:
    """Pfam pair shards: family-disjoint train/valid/test pairs with reference alignments."""


@shards.command("build")
@click.argument("stockholm", nargs=-1, required=True, metavar="ALIGNMENTS...",
                type=click.Path(exists=True, path_type=Path))
@click.option("--out", "-o", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output directory.")
@click.option("--split", "split", default="0.8,0.1,0.1", show_default=True, callback=_parse_split,
              help="Fractions of families for train,valid,test.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Split and subsampling seed.")
@click.option("--max-pairs-per-family", type=click.IntRange(min=1), default=None,
              help="Keep at most N pairs per family (default: all).")
@click.option("--pairs-per-shard", default=4096, show_default=True, type=click.IntRange(min=1))
@click.option("--min-length", default=10, show_default=True, type=click.IntRange(min=1),
              help="Drop sequences shorter than this (ungapped residues).")
@click.option("--max-length", default=None, type=click.IntRange(min=1),
              help="Drop sequences longer than this (default: no limit).")
@click.option("--alphabet", type=click.Choice(["protein", "dna"]), default=None,
              help="Keep only families of this alphabet (default: all).")
@click.option("--mixed-alphabets", is_flag=True,
              help="Accept protein and DNA families in one directory (refused by default).")
@click.option("--split-manifest", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="JSON file assigning every family to train/valid/test ({\"assignment\": {family: split}}), "
                   "e.g. data_manifests/structural_split.json; replaces --split/--seed for the split.")
@click.option("--overwrite", is_flag=True,
              help="Replace the shards of an existing shard directory (never an index.json that is not one).")
@progress_option("pairs written")
def build(
    stockholm: tuple[Path, ...],
    out: Path,
    split: tuple[float, float, float],
    seed: int,
    max_pairs_per_family: int | None,
    pairs_per_shard: int,
    min_length: int,
    max_length: int | None,
    alphabet: str | None,
    mixed_alphabets: bool,
    split_manifest: Path | None,
    overwrite: bool,
    progress: bool | None,
) -> None:
    """Build shards from the alignment files ALIGNMENTS... into --out.

    Each file's format is told by its content (its first non-blank line; gzip is
    detected), whatever its name:

    \b
    - Stockholm (# STOCKHOLM): every alignment in the file is a family; lower case
      marks insert columns (Pfam/HMMER), aligned to nothing.
    - aligned FASTA (>): a bench1.0 set (SABRE, PREFAB, OXBench): upper case = trusted
      core, lower case = aligned but not trusted (no upper case at all: all trusted).
      With a .a2m suffix, or rows of unequal length shaped as A2M: A2M, lower case =
      insertions.
    - PIR as HOMSTRAD writes it (>P1;): every residue trusted.
    - Clustal, GCG MSF, relaxed PHYLIP: case ignored, every residue aligned.

    A family is named by its #=GF ID (Stockholm; else the file stem, with #k for the k-th
    alignment of a file after the first) or <folder>/<file name> less a .ali, .pir, .fa,
    .fasta or .afa suffix (the other formats), as --split-manifest names it. A directory
    stands for every file in it except hidden ones and .txt, .md, .json and .rst files.
    All families must share one alphabet unless --alphabet picks one or --mixed-alphabets
    allows both. A rebuild (--overwrite) replaces the old shards only once the new ones are
    complete, keeping the directory's other files.
    """
    import json

    from sinkalign.errors import InputError
    from sinkalign.io.shards import build_shards

    if max_length is not None and max_length < min_length:
        raise click.BadParameter(
            f"--max-length {max_length} is below --min-length {min_length}", param_hint="--max-length"
        )
    files: list[Path] = []
    for item in stockholm:
        if item.is_dir():
            files += sorted(f for f in item.iterdir() if f.is_file() and not f.name.startswith(".")
                            and f.suffix.lower() not in (".txt", ".md", ".json", ".rst"))
        else:
            files.append(item)
    if not files:
        raise click.BadParameter("no alignment file in the given directories", param_hint="ALIGNMENTS")
    assignment = None
    if split_manifest is not None:
        try:  # a user's file: invalid JSON (ValueError), no "assignment" or not an object
            assignment = json.loads(split_manifest.read_text(encoding="utf-8"))["assignment"]
        except (ValueError, KeyError, TypeError) as err:
            raise InputError(f"{split_manifest}: not a split manifest with an 'assignment' object ({err})") from err
    index = build_shards(  # user errors are SinkalignErrors naming the file; anything else is a bug
        files,
        out,
        split=split,
        seed=seed,
        pairs_per_shard=pairs_per_shard,
        max_pairs_per_family=max_pairs_per_family,
        min_length=min_length,
        max_length=max_length,
        alphabet=alphabet,
        overwrite=overwrite,
        progress=show_progress(progress),
        mixed_alphabets=mixed_alphabets,
        assignment=assignment,
    )
    for name, info in index["splits"].items():
        click.echo(f"{name}: {info['n_families']} families, {info['n_pairs']} pairs, {len(info['shards'])} shards")
    click.echo(f"wrote {out}")


@shards.command("info")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--families/--no-families", default=True, show_default=True, help="Also list every family.")
@click.option("--verify", is_flag=True, help="Check every shard file against its sha256.")
def info(directory: Path, families: bool, verify: bool) -> None:
    """Print splits, families and pair counts of a shard DIRECTORY."""
    from rich.console import Console
    from rich.table import Table

    from sinkalign.io.shards import embedder_label, shard_summary, verify_shards

    summary = shard_summary(directory)
    checked = verify_shards(directory) if verify else None
    console = Console(width=120)
    table = Table(title=f"shards in {directory}")
    for col in ("split", "families", "sequences", "pairs", "shards", "MB"):
        table.add_column(col, justify="left" if col == "split" else "right")
    for row in summary["splits"]:
        table.add_row(
            row["split"], str(row["n_families"]), str(row["n_sequences"]), str(row["n_pairs"]),
            str(row["n_shards"]), f"{row['bytes'] / 1e6:.2f}",
        )
    console.print(table)
    if families:
        fam_table = Table(title="families")
        for col in ("family", "split", "accession", "alphabet", "sequences", "pairs", "mean %id"):
            fam_table.add_column(col, justify="right" if col in ("sequences", "pairs", "mean %id") else "left")
        for row in summary["families"]:
            pid = row["mean_percent_identity"]
            fam_table.add_row(
                row["family"], row["split"], row["accession"] or "-", row["alphabet"], str(row["n_sequences"]),
                str(row["n_pairs"]), "-" if pid is None else f"{pid:.1f}",
            )
        console.print(fam_table)
    emb = summary["embeddings"]
    console.print(f"embeddings: {embedder_label(emb['name'])} (D={emb['dim']}, {emb['dtype']})" if emb
                  else "embeddings: none")
    for fam, why in summary["skipped_families"].items():
        console.print(f"skipped family {fam}: {why}")
    if checked is not None:
        console.print(f"verified {checked} files against their sha256")


@shards.command("embed")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--embedder", type=click.Choice(["builtin", "esm2"]), default="builtin", show_default=True)
@click.option("--esm-model", default=None, metavar="NAME",
              help="ESM-2 model name, from which fair-esm builds the architecture (e.g. esm2_t33_650M_UR50D). "
                   "Default: the --esm-weights file's stem, else esm2_t6_8M_UR50D.")
@click.option("--esm-weights", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Local ESM-2 weights (a fair-esm .pt file); default: <model>.pt in the torch hub cache "
                   "($TORCH_HOME/hub/checkpoints). Nothing is downloaded.")
@click.option("--dtype", type=click.Choice(["float16", "float32"]), default="float32", show_default=True)
@click.option("--overwrite", is_flag=True, help="Replace embeddings already stored.")
@progress_option("shards embedded")
def embed(directory: Path, embedder: str, esm_model: str | None, esm_weights: Path | None, dtype: str,
          overwrite: bool, progress: bool | None) -> None:
    """Precompute per-residue embeddings for every sequence in the shards.

    The builtin embedder (the default) needs no weights; esm2 reads local ESM-2 weights
    and caches its embeddings on disk (SINKALIGN_EMBED_CACHE=off: no cache).
    """
    from sinkalign.align.embed import embed_shards, get_embedder

    options: dict = {}
    if embedder == "esm2":
        options["weights"] = str(esm_weights) if esm_weights else None
        if esm_model is not None:  # else the weights file's stem, or the 8M model (ESM2Config)
            options["model"] = esm_model
    elif esm_model is not None or esm_weights is not None:
        raise click.UsageError("--esm-model and --esm-weights are for --embedder esm2")
    index = embed_shards(directory, get_embedder(embedder, **options), dtype=dtype, overwrite=overwrite,
                         progress=show_progress(progress))
    click.echo(f"embedded {directory} ({index['embeddings']['dim']}-dim, {dtype})")
