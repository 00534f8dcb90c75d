"""``sinkalign gc-profile``: windowed GC content / GC skew report of a FASTA genome."""

from __future__ import annotations

from pathlib import Path

import click

from sinkalign.cli.options import progress_option, show_progress


def _out_dir(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value == "-":
        raise click.BadParameter("'-' (standard output) cannot hold the outputs: gc-profile writes several files "
                                 "(gc_profile.tsv, gc_profile.png, report.md, overlay.*); give a directory, e.g. "
                                 "-o gc_report", ctx=ctx, param=param)
    suffix = Path(value).suffix.lower()
    if suffix in _FILE_SUFFIXES and not Path(value).is_dir():  # -o report.png made a directory report.png/
        raise click.BadParameter(f"{value!r} names a file, and -o is the directory that gets gc_profile.tsv, "
                                 f"gc_profile.png and report.md (overlay.* with --overlay); give a directory, e.g. "
                                 f"-o {Path(value).with_suffix('')}", ctx=ctx, param=param)
    return value


_FILE_SUFFIXES = {".png", ".pdf", ".svg", ".jpg", ".jpeg", ".tsv", ".csv", ".txt", ".md", ".html", ".json"}


def _positive(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value <= 0:
        raise click.BadParameter(f"must be a positive integer, got {value}")
    return value


@click.command("gc-profile")
@click.argument("fasta", type=click.Path(exists=True, dir_okay=False, readable=True, allow_dash=True))
@click.option("--window", default=1000, show_default=True, type=int, callback=_positive,
              help="Window length (nt).")
@click.option("--step", default=None, type=int, callback=_positive,
              help="Distance between window starts (nt); must not exceed --window.  [default: half the window]")
@click.option("--island-threshold", default=0.10, show_default=True, type=click.FloatRange(0, 1, min_open=True,
                                                                                          max_open=True),
              help="Flag windows whose GC departs from their record's GC by more than this (GC fraction) as "
                   "candidate islands (TSV column island, shaded in the plot, listed in the report); neighbouring "
                   "flagged windows merge only when they depart in the same direction (GC-rich or AT-rich).")
@click.option("--overlay", type=click.Path(exists=True, dir_okay=False, readable=True, allow_dash=True),
              default=None,
              help="FASTA of generated continuations (headers carry chrom=ID start=POS, 0-based; '-' = standard "
                   "input). Only generated bases are compared: a record whose header says prompt_included=true "
                   "prompt_length=P (generate-dna --include-prompt) loses its first P bases and is compared from "
                   "start + P.")
@click.option("--overlay-window", default=25, show_default=True, type=int, callback=_positive,
              help="Sliding window of the continuation GC trajectories (nt).")
@click.option("-o", "--out-dir", required=True, type=click.Path(file_okay=False), callback=_out_dir,
              help="Output directory (created if needed); only gc_profile.tsv, gc_profile.png, report.md "
                   "(and overlay.*) are written there, through a hidden .gc-profile-*.tmp folder that holds them "
                   "until all are written. Not '-': the outputs are several files.")
@click.option("--circular/--linear", default=None,
              help="Read every record as a circular chromosome (its cumulative skew may turn across the record's "
                   "ends: the origin of a complete chromosome that starts at oriC, the usual convention) or as "
                   "linear (a turning point only inside the record). Default: each record by its FASTA "
                   "description: circular where it says the molecule is whole (complete genome or sequence, "
                   "chromosome, a RefSeq NC_ accession, circular=true) and names no piece of an assembly (contig, "
                   "scaffold, draft, partial, fragment, shotgun, NODE_, length=); else linear.")
@click.option("--overwrite", is_flag=True,
              help="Replace the outputs of an earlier run in --out-dir and remove those this run does not write "
                   "(overlay.* without --overlay). Without it, a directory holding any of them is an error. An "
                   "input (FASTA, --overlay) that is one of them is refused, --overwrite or not.")
@progress_option("bases read")
def gc_profile(fasta: str, window: int, step: int | None, island_threshold: float, overlay: str | None,
               overlay_window: int, out_dir: str, circular: bool, overwrite: bool, progress: bool | None) -> None:
    """GC content, GC skew and cumulative skew of FASTA (plain or .gz) in windows.

    FASTA may be '-', standard input. Writes gc_profile.tsv, gc_profile.png and report.md
    into OUT_DIR (plus overlay.tsv and overlay.png with --overlay); an OUT_DIR that already
    holds them needs --overwrite, and they replace the earlier run's files only once all of
    them are written (an interrupted run leaves those as they were). Coordinates are 0-based
    half-open.

    GC = (G + C) / (A + C + G + T): N is left out of the denominator, and so are the IUPAC
    ambiguity codes (R, Y, S, W, K, M, B, D, H, V; S too, though it is G or C) and X, which
    are read as N. Soft-masked (lowercase) bases count like uppercase ones; U (RNA) is read
    as T.

    A window with fewer A/C/G/T bases than half the window length (mostly N, or the short
    tail window of a record) is NA: empty GC and skew (nan in the TSV, a gap in the plot),
    never an island, and it leaves the cumulative skew unchanged. Other windows add their
    skew times (A/C/G/T bases / window) to the cumulative skew, so a full window without N
    adds its skew.

    Origin and terminus (minimum and maximum of the cumulative skew) are called only with
    the evidence for them: informative windows spanning at least 10 window lengths of the
    record; a curve whose range exceeds 4 standard deviations of the random walk a sequence
    without strand bias gives (4 x sigma x sqrt(windows x window / step), sigma estimated from non-overlapping
    neighbouring windows); a turning point (the curve moves away by 10% of its range on both
    sides: inside the record, and on a record read as circular across its ends too); and a
    record of at least 100,000 nt. Otherwise they are '-' and the output line and report.md
    say why; a curve that never turns is reported as one replichore. The calls are meaningful
    for complete circular chromosomes. Their positions are 0-based: the cumulative skew after
    window i is placed at its midpoint + step/2 (the boundary with the next window; its end
    when step = window), so they are good to one step; on a circular record the end is 0.

    Windows whose GC departs from the record's by more than --island-threshold are
    candidate islands. The plot shows the 4 longest records (stdout and report.md say so
    when there are more).
    """
    from sinkalign.pipelines.gc_profile import default_step, run_gc_profile

    if step is None:
        step = default_step(window)
    if step > window:
        raise click.BadParameter(f"{step} exceeds --window {window} (windows would leave gaps)",
                                 param_hint="'--step'")
    res = run_gc_profile(fasta, out_dir, window=window, step=step, overlay=overlay,
                         overlay_window=overlay_window, island_threshold=island_threshold,
                         progress=show_progress(progress), overwrite=overwrite, circular=circular)
    for s in res.profile.summaries:  # the same six fields on every line, then what explains a missing call
        notes = ["one replichore (no skew turning point)"] if s.one_replichore else []
        if s.no_call_reason:
            notes.append(f"no call: {s.no_call_reason}")
        elif not s.has_skew:  # every window NA, or no G/C: no curve to call from
            notes.append(f"no call: {s.replichore_note()}")
        origin, terminus = ("-" if x is None or s.one_replichore else x for x in (s.origin, s.terminus))
        click.echo("\t".join([f"{s.chrom}\tlength={s.length}\tgc={s.gc:.4f}\torigin={origin}\tterminus={terminus}"
                              f"\tcandidate_islands={len(s.islands)}", *notes]))
    n = len(res.profile.summaries)
    if len(res.plotted) < n:
        click.echo(f"plotted: the {len(res.plotted)} longest of {n} records in {res.png}", err=True)
    for path in res.removed:
        click.echo(f"removed {path} (from an earlier run)", err=True)
    click.echo(f"wrote {res.report}", err=True)  # status: stdout holds the results
