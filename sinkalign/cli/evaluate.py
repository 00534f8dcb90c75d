"""``sinkalign evaluate``: F1 of aligned residue pairs vs references, with NW/SW in the same run."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console

from sinkalign.utils import atomic_write_text


@click.command()
@click.option("--reference", "references", multiple=True, required=True,
              type=click.Path(exists=True, path_type=Path),
              help="Reference set: Stockholm/aligned FASTA/A2M/MSF file, TM-align TSV, or shard directory. Repeatable.")
@click.option("--model", type=click.Path(exists=True, path_type=Path), help="Trained model (default: shipped).")
@click.option("--split", default="test", show_default=True, help="Split to read from shard directories.")
@click.option("--min-tm", type=float, default=0.5, show_default=True, help="TM-align pairs: keep min(tm1, tm2) >= this.")
@click.option("--max-pairs", type=click.IntRange(min=1), help="Subsample each set to at most this many pairs.")
@click.option("--methods", default="sinkalign,nw,sw", show_default=True, help="Comma-separated subset of sinkalign,nw,sw.")
@click.option("--backend", type=click.Choice(["reference", "pallas"]), default="reference", show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write results as JSON.")
def evaluate(references, model, split, min_tm, max_pairs, methods, backend, json_path):
    """Precision, recall and F1 per reference set, binned by percent identity."""
    from sinkalign.align.evaluate import evaluate_sets, load_reference_set  # noqa: PLC0415
    from sinkalign.align.metrics import render_table  # noqa: PLC0415

    chosen = tuple(m.strip() for m in methods.split(",") if m.strip())
    try:
        sets = {}
        for ref in references:
            name = ref.name if not ref.is_dir() else f"{ref.name}:{split}"
            sets[name] = load_reference_set(ref, min_tm=min_tm, max_pairs=max_pairs, split=split)
        aligner = None
        if "sinkalign" in chosen:
            from sinkalign.align.aligner import Aligner  # noqa: PLC0415

            aligner = Aligner.load(model, backend=backend)
        result = evaluate_sets(sets, aligner, methods=chosen)
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc
    console = Console()
    for name, data in result["sets"].items():
        for method, m in data["methods"].items():
            console.print(render_table(m["bins"], title=f"{name} ({data['n_pairs']} pairs): {method}, "
                                                        f"F1 {m['micro']['f1']:.3f}, {m['pairs_per_s']:.1f} pairs/s"))
    if json_path:
        atomic_write_text(json_path, json.dumps(result, indent=2) + "\n")
        console.print(f"wrote {json_path}")
