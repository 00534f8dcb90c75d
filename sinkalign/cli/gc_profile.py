"""``sinkalign gc-profile``: windowed GC content / GC skew report of a FASTA genome."""

from __future__ import annotations

import click

from sinkalign.pipelines.gc_profile import run_gc_profile


def _positive(ctx: click.Context, param: click.Parameter, value: int) -> int:
    if value <= 0:
        raise click.BadParameter(f"must be a positive integer, got {value}")
    return value


@click.command("gc-profile")
@click.argument("fasta", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option("--window", default=1000, show_default=True, type=int, callback=_positive,
              help="Window length (nt).")
@click.option("--step", default=500, show_default=True, type=int, callback=_positive,
              help="Distance between window starts (nt); must not exceed --window.")
@click.option("--overlay", type=click.Path(exists=True, dir_okay=False, readable=True), default=None,
              help="FASTA of generated continuations (headers carry chrom=ID start=POS, 0-based).")
@click.option("--overlay-window", default=25, show_default=True, type=int, callback=_positive,
              help="Sliding window of the continuation GC trajectories (nt).")
@click.option("-o", "--out-dir", required=True, type=click.Path(file_okay=False),
              help="Output directory (created if needed).")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="Progress bar on stderr (only shown on a terminal).")
def gc_profile(fasta: str, window: int, step: int, overlay: str | None, overlay_window: int, out_dir: str,
               progress: bool) -> None:
    """GC content, GC skew and cumulative skew of FASTA (plain or .gz) in windows.

    Writes gc_profile.tsv, gc_profile.png and report.md into OUT_DIR (plus overlay.tsv and
    overlay.png with --overlay). Coordinates are 0-based half-open.
    """
    if step > window:
        raise click.BadParameter(f"{step} exceeds --window {window} (windows would leave gaps)",
                                 param_hint="'--step'")
    try:
        res = run_gc_profile(fasta, out_dir, window=window, step=step, overlay=overlay,
                             overlay_window=overlay_window, progress=progress)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    for s in res.profile.summaries:
        click.echo(f"{s.chrom}\tlength={s.length}\tgc={s.gc:.4f}\torigin={s.origin}\tterminus={s.terminus}")
    click.echo(f"wrote {res.report}")
