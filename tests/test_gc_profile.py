"""GC-profile pipeline (sinkalign.pipelines.gc_profile) and the ``gc-profile`` command."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
from Bio.SeqUtils import GC_skew, gc_fraction
from click.testing import CliRunner
from scipy.stats import pearsonr

from sinkalign.cli.gc_profile import gc_profile as gc_profile_cmd
from sinkalign.cli.main import cli
from sinkalign.lm.data import GenomeRecord, read_genome, read_genome_records
from sinkalign.pipelines.gc_profile import (
    TSV_COLUMNS,
    compare_continuations,
    continuation_description,
    gc_profile,
    gc_trajectory,
    parse_continuation_description,
    plot_overlay,
    plot_profile,
    profile_figure,
    run_gc_profile,
    trajectory_correlation,
    window_bounds,
    write_report,
    write_tsv,
)

ECOLI = "genomes/MIIJ01000039.fna.gz"


def _random_dna(rng, n, n_rate=0.0):
    s = rng.choice(list("ACGT"), size=n)
    if n_rate:
        s[rng.random(n) < n_rate] = "N"
    return "".join(s)


def _read_tsv(path: Path) -> list[dict]:
    with open(path) as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


# ----------------------------------------------------------------------------- values


def test_hand_computed_windows():
    #        0123456789A
    seq = "GGGCATNNATC"  # 11 nt, window 4, step 2: full windows at 0,2,4,6 + partial [8, 11)
    p = gc_profile([("r", seq)], window=4, step=2)
    np.testing.assert_array_equal(p.start, [0, 2, 4, 6, 8])
    np.testing.assert_array_equal(p.end, [4, 6, 8, 10, 11])
    # GGGC: G3 C1 | GCAT: G1 C1 | ATNN: no G/C | NNAT: no G/C | ATC: C1 (3 ACGT); every window
    # has at least ceil(4 / 2) = 2 A/C/G/T bases, so none is NA
    np.testing.assert_allclose(p.gc, [1.0, 0.5, 0.0, 0.0, 1 / 3])
    np.testing.assert_allclose(p.gc_skew, [0.5, 0.0, np.nan, np.nan, -1.0])
    # each window adds skew * ACGT / window: the 3-base tail window adds -1 * 3/4
    np.testing.assert_allclose(p.cumulative_gc_skew, [0.5, 0.5, 0.5, 0.5, -0.25])
    np.testing.assert_allclose(p.n_fraction, [0, 0, 0.5, 0.5, 0])
    (s,) = p.summaries
    assert (s.length, s.n_windows, s.n_na_windows, s.min_acgt) == (11, 5, 0, 2)
    assert s.gc == pytest.approx(5 / 9) and s.n_fraction == pytest.approx(2 / 11)
    assert (s.min_window_gc, s.max_window_gc) == (0.0, 1.0)
    # curve [0 @0, .5 @ mid0 + step/2 = 3, ..., -.25 @ min(floor(9.5 + 1), 11) = 10]: its extremes
    # are placed at 3 and 10, but 11 nt (the informative windows span 11 / 4 = 2.75 window
    # lengths) is far too little sequence for an origin/terminus call
    assert (s.skew_max_at, s.skew_min_at) == (3, 10)
    assert (s.origin, s.terminus) == (None, None) and not s.one_replichore
    assert ("no origin/terminus call: too few informative windows to tell a skew from noise (they span 2.75 window "
            "lengths") in s.replichore_note()


def test_all_n_window_and_record_shorter_than_window():
    p = gc_profile([("a", "NNNNACNN"), ("b", "ATAT")], window=4, step=4)
    np.testing.assert_array_equal(p.chrom, ["a", "a", "b"])
    assert math.isnan(p.gc[0]) and math.isnan(p.gc_skew[0]) and p.n_fraction[0] == 1.0
    assert p.gc[1] == 0.5 and p.gc_skew[1] == -1.0 and p.n_fraction[1] == 0.5
    assert p.gc[2] == 0.0 and math.isnan(p.gc_skew[2])
    assert p.summaries[1].origin is None and p.summaries[1].terminus is None
    short = gc_profile(("c", "GGC" * 20), window=100, step=50)  # a single (id, seq) is accepted
    np.testing.assert_array_equal([short.start[0], short.end[0]], [0, 60])
    assert short.gc_skew[0] == pytest.approx(1 / 3)  # 60 A/C/G/T bases: at least half the window
    tiny = gc_profile(("c", "GGC"), window=100, step=50)  # 3 bases of a 100-nt window: NA
    np.testing.assert_array_equal([tiny.start[0], tiny.end[0]], [0, 3])
    assert math.isnan(tiny.gc[0]) and math.isnan(tiny.gc_skew[0]) and tiny.cumulative_gc_skew[0] == 0
    assert tiny.summaries[0].gc == pytest.approx(1.0)  # the record's GC is still reported
    np.testing.assert_array_equal(p.record("b").start, [0])


@pytest.mark.parametrize("window, step", [(100, 100), (100, 37), (64, 1), (250, 250)])
def test_against_biopython_gc_fraction_and_gc_skew(window, step):
    rng = np.random.default_rng(window + step)
    seq = _random_dna(rng, 2003, 0.05).lower()  # lower case is accepted
    p = gc_profile([("r", seq)], window=window, step=step)
    up = seq.upper()
    acgt = np.array([e - s - up[s:e].count("N") for s, e in zip(p.start, p.end)])
    ok = acgt >= math.ceil(window / 2)  # informative windows; the others (here the 3-nt tail of 2003) are NA
    assert ok[:-1].all() and ok[-1] == (p.end[-1] - p.start[-1] > 3)
    for s, e, gc, good in zip(p.start, p.end, p.gc, ok):
        if good:
            assert gc == pytest.approx(gc_fraction(up[s:e], ambiguous="remove"), abs=1e-12)
        else:
            assert math.isnan(gc)
    if step == window:  # Biopython's GC_skew tiles with step == window, partial tail included
        np.testing.assert_allclose(np.nan_to_num(p.gc_skew, nan=0.0)[ok], np.array(GC_skew(up, window))[ok], atol=1e-12)
    # each window adds its skew weighted by its share of A/C/G/T bases
    np.testing.assert_allclose(p.cumulative_gc_skew, np.cumsum(np.nan_to_num(p.gc_skew) * acgt / window))


@pytest.mark.parametrize("length", [1, 99, 100, 101, 1000, 1049, 1050, 1051])
@pytest.mark.parametrize("window, step", [(100, 100), (100, 50), (100, 33), (7, 1)])
def test_window_bounds_cover_every_base_once_at_the_tail(length, window, step):
    starts, ends = window_bounds(length, window, step)
    assert starts[0] == 0 and ends[-1] == length
    lengths = ends - starts
    assert np.all(lengths[:-1] == window) and 0 < lengths[-1] <= window
    assert np.all(np.diff(starts) == step)
    covered = np.zeros(length, bool)
    for s, e in zip(starts, ends):
        covered[s:e] = True
    assert covered.all()


def test_bad_profile_inputs():
    with pytest.raises(ValueError, match="window=0 must be a positive integer"):
        gc_profile([("r", "ACGT")], window=0, step=1)
    with pytest.raises(ValueError, match="step=-1 must be a positive integer"):
        gc_profile([("r", "ACGT")], window=4, step=-1)
    with pytest.raises(ValueError, match="step=5 must not exceed window=4"):
        gc_profile([("r", "ACGT")], window=4, step=5)
    with pytest.raises(ValueError, match="record 'r': invalid character 'Z' at 0-based position 2"):
        gc_profile([("r", "ACZT")], window=2, step=1)
    with pytest.raises(ValueError, match="record 'r': invalid character 'ß' at 0-based position 1"):
        gc_profile([("r", "Aßgt")], window=2, step=1)
    # IUPAC codes and X are N, as a FASTA file is read (they were refused in Python alone)
    iupac, plain = gc_profile([("r", "ACRTYGXNacgt")], window=4, step=2), gc_profile([("r", "ACNTNGNNACGT")],
                                                                                    window=4, step=2)
    for column in ("gc", "gc_skew", "n_fraction", "gc_deviation"):
        np.testing.assert_array_equal(getattr(iupac, column), getattr(plain, column))
    assert iupac.summaries == plain.summaries and len(iupac) == 5
    with pytest.raises(ValueError, match=r"not one sequence: give \[\(id, seq\)\]"):
        gc_profile("ACGTACGT", window=4)
    with pytest.raises(ValueError, match=r"record 1: expected an \(id, seq\) pair or a record with \.id and \.seq, "
                                         r"got str 'ACGT'"):
        gc_profile([("a", "ACGT"), "ACGT"], window=2)
    with pytest.raises(ValueError, match="record 'e' is empty"):
        gc_profile([("e", "")], window=2, step=1)
    with pytest.raises(ValueError, match=r"duplicate record ids: \['a'\]"):
        gc_profile([("a", "ACGT"), ("a", "GG")], window=2, step=1)
    with pytest.raises(ValueError, match="no records given"):
        gc_profile([], window=2, step=1)
    with pytest.raises(KeyError, match="no record 'zz' in profile"):
        gc_profile([("a", "ACGT")], window=2, step=1).record("zz")


# ----------------------------------------------------------------------------- trajectories


def test_gc_trajectory_and_correlation():
    rng = np.random.default_rng(0)
    seq = _random_dna(rng, 500, 0.05)
    traj = gc_trajectory(seq, 25)
    assert traj.shape == (476,)
    want = [gc_fraction(seq[i : i + 25], ambiguous="remove") for i in range(476)]
    np.testing.assert_allclose(traj, want, atol=1e-12)
    other = gc_trajectory(_random_dna(rng, 500), 25)
    assert trajectory_correlation(traj, other) == pytest.approx(pearsonr(traj, other)[0], abs=1e-12)
    assert trajectory_correlation(traj, traj) == pytest.approx(1.0)
    assert trajectory_correlation(traj, 1 - traj) == pytest.approx(-1.0)
    # NaN positions (all-N windows) are dropped pairwise
    a = gc_trajectory("ACGG" * 10 + "N" * 10 + "GCAT" * 10, 5)
    b = gc_trajectory("AGGC" * 10 + "TTTTTTTTTT" + "ACCC" * 10, 5)
    ok = np.isfinite(a)
    assert (~ok).sum() == 6
    assert trajectory_correlation(a, b) == pytest.approx(pearsonr(a[ok], b[ok])[0], abs=1e-12)
    assert math.isnan(trajectory_correlation(np.full(10, 0.5), other[:10]))  # constant: undefined
    assert math.isnan(trajectory_correlation([np.nan, 1.0], [1.0, np.nan]))


def test_trajectory_bad_inputs():
    with pytest.raises(ValueError, match="window=30 exceeds the sequence length 20"):
        gc_trajectory("A" * 20, 30)
    with pytest.raises(ValueError, match="window=0 must be a positive integer"):
        gc_trajectory("ACGT", 0)
    with pytest.raises(ValueError, match="trajectories differ in length: 3 != 4"):
        trajectory_correlation(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="trajectories must be 1-D"):
        trajectory_correlation(np.zeros((2, 2)), np.zeros((2, 2)))


def _genome_and_continuations(rng):
    genome = [GenomeRecord("chr1", "chr1", _random_dna(rng, 3000)), GenomeRecord("chr2", "chr2", _random_dna(rng, 800))]
    true = genome[0].seq[1000:1300]
    gen = [
        GenomeRecord("copy", continuation_description("copy", "chr1", 1000), true),
        GenomeRecord("rand", continuation_description("rand", "chr1", 1000), _random_dna(rng, 300)),
        GenomeRecord("tail", continuation_description("tail", "chr2", 700), _random_dna(rng, 300)),
    ]
    return genome, gen


def test_compare_continuations():
    rng = np.random.default_rng(1)
    genome, gen = _genome_and_continuations(rng)
    comps = compare_continuations(genome, gen, window=25)
    assert [c.id for c in comps] == ["copy", "rand", "tail"]
    assert comps[0].pearson_r == pytest.approx(1.0) and comps[0].true_gc == comps[0].generated_gc
    t = gc_trajectory(genome[0].seq[1000:1300], 25)
    np.testing.assert_array_equal(comps[1].true_trajectory, t)
    assert comps[1].pearson_r == pytest.approx(pearsonr(t, gc_trajectory(gen[1].seq, 25))[0])
    assert comps[2].length == 100  # runs past the end of chr2: compared over the 100 bases there
    assert parse_continuation_description("x chrom=c1 start=5 temp=0.7") == ("c1", 5)
    # a single-record genome needs no chrom= tag
    single = compare_continuations([genome[0]], [GenomeRecord("s", "s start=1000", genome[0].seq[1000:1100])])
    assert single[0].chrom == "chr1" and single[0].pearson_r == pytest.approx(1.0)


@pytest.mark.parametrize(
    "desc, seq, msg",
    [
        ("g chrom=chr1", "A" * 50, "generated record 'g': header 'g chrom=chr1' lacks a start="),
        ("g start=x1", "A" * 50, "start='x1' is not an integer"),
        ("g start=-3 chrom=chr1", "A" * 50, "start=-3 must be >= 0"),
        ("g start=5", "A" * 50, "generated record 'g' has no chrom= tag and the genome has 2 records"),
        ("g chrom=chrX start=5", "A" * 50, r"chrom='chrX' is not in the genome \(\['chr1', 'chr2'\]\)"),
        ("g chrom=chr2 start=800", "A" * 50, r"start=800 is beyond 'chr2' \(length 800\)"),
        ("g chrom=chr2 start=790", "A" * 50, "only 10 bases to compare, fewer than window=25"),
    ],
)
def test_compare_continuations_errors(desc, seq, msg):
    genome, _ = _genome_and_continuations(np.random.default_rng(2))
    with pytest.raises(ValueError, match=msg):
        compare_continuations(genome, [GenomeRecord(desc.split()[0], desc, seq)], window=25)


# ----------------------------------------------------------------------------- outputs


def test_tsv_png_report(tmp_path):
    rng = np.random.default_rng(3)
    recs = [("chrA", _random_dna(rng, 5000, 0.01)), ("chrB", "GGGGCCCC" * 100 + "N" * 300)]
    p = gc_profile(recs, window=200, step=100)
    tsv = write_tsv(p, tmp_path / "out" / "gc.tsv")
    rows = _read_tsv(tsv)
    assert tuple(rows[0]) == TSV_COLUMNS and len(rows) == len(p)
    for i, r in enumerate(rows):
        assert (r["chrom"], int(r["start"]), int(r["end"])) == (p.chrom[i], p.start[i], p.end[i])
        for col in ("gc", "gc_skew", "cumulative_gc_skew", "n_fraction"):
            np.testing.assert_allclose(float(r[col]), getattr(p, col)[i], atol=1e-6, equal_nan=True)
    assert rows[-1]["gc"] == "nan" and rows[-1]["n_fraction"] == "1.000000"

    png = plot_profile(p, tmp_path / "out" / "gc.png")
    img = mpimg.imread(png)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    report = write_report(p, tmp_path / "out" / "report.md", source="in.fa", png_name="gc.png", tsv_name="gc.tsv")
    text = report.read_text()
    assert "![GC profile](gc.png)" in text and "[gc.tsv](gc.tsv)" in text
    assert "| chrA | 5,000 |" in text and "| chrB | 1,100 |" in text
    s = p.summaries[0]  # 5,000 nt of random sequence: no origin/terminus call, and the report says why
    assert f"| chrA | 5,000 | linear | {s.gc:.4f} |" in text  # a bare id says nothing of a whole molecule and (s.origin, s.terminus) == (None, None)
    assert "- chrA: no origin/terminus call: " in text
    assert sorted(x.name for x in (tmp_path / "out").iterdir()) == ["gc.png", "gc.tsv", "report.md"]  # no temp files


def test_plot_panels_share_the_record_and_an_all_n_record_says_so(tmp_path):
    """A record's three panels span it, 0 to its length (the GC and skew panels ended at the last
    informative window, the cumulative one went on); an all-N record's panels say why they are
    empty, with no 'overall GC nan' legend (they were empty frames over -0.04..0.04)."""
    rng = np.random.default_rng(5)
    p = gc_profile([("allN", "N" * 5000), ("mixed", _random_dna(rng, 3000) + "N" * 2000)], window=1000, step=500)
    fig = profile_figure(p)
    axes = fig.axes
    assert len(axes) == 6
    for r, length in enumerate((5000, 5000)):
        assert [ax.get_xlim() for ax in axes[3 * r: 3 * r + 3]] == [(0.0, float(length))] * 3
    texts = [t.get_text() for t in axes[0].texts + axes[1].texts]
    assert texts == ["no window with enough A/C/G/T bases (NA)"] * 2
    assert axes[0].get_legend() is None and not axes[3].texts
    assert [t.get_text() for t in axes[3].get_legend().get_texts()] == [f"overall GC {p.summaries[1].gc:.3f}",
                                                                        "island threshold \u00b10.1"]
    img = mpimg.imread(plot_profile(p, tmp_path / "gc.png"))
    assert img.ndim == 3 and img.shape[0] > 100


def test_plotting_leaves_the_users_matplotlib_backend(tmp_path):
    """Importing the module and drawing keep the backend a user chose (it switched to Agg at
    import, which broke a notebook's inline plots)."""
    import os
    import subprocess
    import sys

    code = ("import matplotlib; from sinkalign.pipelines.gc_profile import gc_profile, plot_profile; "
            "plot_profile(gc_profile([('a', 'ACGT' * 300)], window=100, step=50), 'x.png'); "
            "print(matplotlib.get_backend())")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "MPLBACKEND": "svg"},
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "svg" and (tmp_path / "x.png").is_file()


def test_overlay_plot_is_valid_png(tmp_path):
    genome, gen = _genome_and_continuations(np.random.default_rng(4))
    comps = compare_continuations(genome, gen)
    img = mpimg.imread(plot_overlay(comps, tmp_path / "ov.png"))
    assert img.ndim == 3 and img.shape[0] > 100


# ----------------------------------------------------------------------------- CLI


def _write_inputs(rng):
    chr1 = _random_dna(rng, 6000, 0.01)
    chr2 = _random_dna(rng, 2500)
    Path("genome.fa").write_text(f">chr1 test\n{chr1}\n>chr2\n{chr2}\n")
    gen = _random_dna(rng, 400)
    Path("gen.fa").write_text(
        f">{continuation_description('s0', 'chr1', 3000)}\n{chr1[3000:3400]}\n"
        f">{continuation_description('s1', 'chr1', 3000)}\n{gen}\n"
    )
    return chr1, chr2, gen


def test_cli_end_to_end(tmp_path, monkeypatch):
    runner = CliRunner()
    monkeypatch.chdir(tmp_path)
    chr1, chr2, gen = _write_inputs(np.random.default_rng(5))
    res = runner.invoke(cli, ["gc-profile", "genome.fa", "--window", "500", "--step", "250",
                              "--overlay", "gen.fa", "-o", "out"])
    assert res.exit_code == 0, res.output
    assert "wrote out/report.md" in res.stderr and "wrote" not in res.stdout  # status on stderr
    out = Path("out")
    assert sorted(p.name for p in out.iterdir()) == [
        "gc_profile.png", "gc_profile.tsv", "overlay.png", "overlay.tsv", "report.md"]
    want = gc_profile([("chr1", chr1), ("chr2", chr2)], window=500, step=250)
    rows = _read_tsv(out / "gc_profile.tsv")
    assert len(rows) == len(want)
    np.testing.assert_allclose([float(r["gc"]) for r in rows], want.gc, atol=1e-6)
    for name in ("gc_profile.png", "overlay.png"):
        assert mpimg.imread(out / name).ndim == 3
    ov = _read_tsv(out / "overlay.tsv")
    assert [r["id"] for r in ov] == ["s0", "s1"]
    assert float(ov[0]["pearson_r"]) == pytest.approx(1.0)
    r1 = trajectory_correlation(gc_trajectory(chr1[3000:3400], 25), gc_trajectory(gen, 25))
    assert float(ov[1]["pearson_r"]) == pytest.approx(r1, abs=1e-6)
    report = (out / "report.md").read_text()
    assert "![GC trajectories](overlay.png)" in report and "| s1 | chr1 | 3,000 | 400 |" in report


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--window", "0"], "Invalid value for '--window': must be a positive integer, got 0"),
        (["--window", "-5"], "Invalid value for '--window': must be a positive integer, got -5"),
        (["--step", "0"], "Invalid value for '--step': must be a positive integer, got 0"),
        (["--window", "100", "--step", "101"], "Invalid value for '--step': 101 exceeds --window 100"),
        (["--overlay-window", "0"], "Invalid value for '--overlay-window': must be a positive integer"),
        (["--overlay", "missing.fa"], "Invalid value for '--overlay': File 'missing.fa' does not exist"),
    ],
)
def test_cli_bad_parameters(args, msg, tmp_path, monkeypatch):
    runner = CliRunner()
    monkeypatch.chdir(tmp_path)
    _write_inputs(np.random.default_rng(6))
    res = runner.invoke(cli, ["gc-profile", "genome.fa", "-o", "out", *args])
    assert res.exit_code == 2
    assert msg in " ".join(res.output.split())
    assert not Path("out").exists()


def test_cli_missing_and_invalid_inputs(tmp_path, monkeypatch):
    runner = CliRunner()
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(cli, ["gc-profile", "nope.fa", "-o", "out"])
    assert res.exit_code == 2 and "File 'nope.fa' does not exist" in res.output
    _write_inputs(np.random.default_rng(7))
    res = runner.invoke(cli, ["gc-profile", "genome.fa"])
    assert res.exit_code == 2 and "Missing option '-o' / '--out-dir'" in res.output
    Path("bad.fa").write_text(">r1\nACGT\n>r2\nACGTACET\n")
    res = runner.invoke(cli, ["gc-profile", "bad.fa", "-o", "out"])
    assert res.exit_code == 1
    assert "bad.fa: record 'r2' has invalid character 'E' at 0-based position 6" in res.output
    Path("gen_bad.fa").write_text(">g chrom=chr9 start=0\n" + "A" * 100 + "\n")
    res = runner.invoke(cli, ["gc-profile", "genome.fa", "--overlay", "gen_bad.fa", "-o", "out"])
    assert res.exit_code == 1
    assert "gen_bad.fa (against genome.fa): generated record 'g': chrom='chr9' is not in the genome" in res.output
    assert not Path("out").exists()  # inputs are validated before anything is written


def test_registered_in_main_cli():
    pytest.importorskip("sinkalign.cli.validate", reason="main CLI imports the validate command (other helper)")
    from sinkalign.cli.main import cli

    assert cli.get_command(None, "gc-profile") is gc_profile_cmd


# ----------------------------------------------------------------------------- real genome


def test_ecoli_contig_large_window(shared_data, tmp_path):
    ((chrom, seq),) = read_genome(shared_data / ECOLI)
    assert len(seq) == 869782
    res = run_gc_profile(shared_data / ECOLI, tmp_path / "out", window=50000, step=50000)
    p = res.profile
    assert len(p) == math.ceil(869782 / 50000) and p.end[-1] == 869782
    ok = []
    for s, e, gc, nf in zip(p.start, p.end, p.gc, p.n_fraction):
        w = seq[s:e]
        assert nf == pytest.approx(w.count("N") / len(w))
        ok.append(len(w) - w.count("N") >= 25000)
        if ok[-1]:
            assert gc == pytest.approx(gc_fraction(w, ambiguous="remove"), abs=1e-12)
        else:  # inside the contig's 432,770-nt run of N, or the 19,782-nt tail: fewer than 25,000 ACGT
            assert math.isnan(gc)
    assert sum(ok) == 9 and not ok[-1]  # 7 windows before the N run, one on each of its edges
    np.testing.assert_allclose(np.nan_to_num(p.gc_skew)[ok], np.array(GC_skew(seq, 50000))[ok], atol=1e-12)
    (summ,) = p.summaries
    assert summ.gc == pytest.approx(gc_fraction(seq, ambiguous="remove"))
    assert summ.n_fraction == pytest.approx(seq.count("N") / len(seq))
    assert 0.45 < summ.gc < 0.55  # E. coli is ~50.8% GC
    assert mpimg.imread(res.png).ndim == 3
    assert f"| {chrom} | 869,782 |" in res.report.read_text()


# ----------------------------------------------------------------------------- truthful reports


def _skewed(rng, n: int, gc: float, skew: float) -> str:
    """Random DNA with GC fraction ``gc`` and GC skew ``(G - C) / (G + C)`` about ``skew``."""
    g = gc * (1 + skew) / 2
    c = gc * (1 - skew) / 2
    at = (1 - gc) / 2
    return "".join(rng.choice(list("ACGT"), size=n, p=[at, c, g, at]))


def test_step_defaults_to_half_the_window():
    seq = _skewed(np.random.default_rng(0), 1000, 0.5, 0.0)
    p = gc_profile([("r", seq)], window=100)
    assert p.step == 50 and p.start[:3].tolist() == [0, 50, 100]
    assert gc_profile([("r", seq)], window=1).step == 1
    res = CliRunner().invoke(cli, ["gc-profile", "--help"])
    assert "[default: half the window]" in res.output


def test_cli_window_smaller_than_the_old_default_step(tmp_path):
    """`gc-profile FILE --window 100` used to fail: the default step (500) exceeded the window."""
    fa = tmp_path / "g.fa"
    fa.write_text(">r\n" + _skewed(np.random.default_rng(1), 2000, 0.5, 0.0) + "\n")
    res = CliRunner().invoke(cli, ["gc-profile", str(fa), "--window", "100", "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    rows = _read_tsv(tmp_path / "out" / "gc_profile.tsv")
    assert [int(r["start"]) for r in rows[:3]] == [0, 50, 100]


def test_two_replichores_give_origin_and_terminus():
    rng = np.random.default_rng(2)
    # ter ... ori (C-rich leading on the left half), ori ... ter (G-rich), then back towards ter
    seq = _skewed(rng, 50_000, 0.5, -0.1) + _skewed(rng, 100_000, 0.5, 0.1) + _skewed(rng, 50_000, 0.5, -0.1)
    (s,) = gc_profile([("chr", seq)], window=2000).summaries
    assert abs(s.origin - 50_000) <= 2000 and abs(s.terminus - 150_000) <= 2000
    assert s.replichore_note() == "" and not s.one_replichore


def test_contig_on_one_replichore_names_no_origin_or_terminus(tmp_path):
    rng = np.random.default_rng(3)
    fa = tmp_path / "contig.fa"
    fa.write_text(">contig\n" + _skewed(rng, 60_000, 0.5, 0.08) + "\n")
    res = CliRunner().invoke(cli, ["gc-profile", str(fa), "--window", "1000", "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("contig\t")).split("\t")
    assert line[3:5] == ["origin=-", "terminus=-"] and line[-1] == "one replichore (no skew turning point)"
    assert len(line) == 7  # the six fields every record's line has, then the note
    report = (tmp_path / "out" / "report.md").read_text()
    assert "the sequence lies on one replichore" in report
    row = next(line for line in report.splitlines() if line.startswith("| contig |"))
    assert row.split("|")[9:11] == [" - ", " - "]  # predicted origin, predicted terminus
    (s,) = gc_profile([("contig", fa.read_text().split()[1])], window=1000).summaries
    assert s.origin is None and s.terminus is None and s.one_replichore
    assert s.skew_min_at == 0 and s.skew_max_at > 59_000


def test_low_gc_island_is_flagged_in_table_plot_and_report(tmp_path):
    rng = np.random.default_rng(4)
    seq = _skewed(rng, 40_000, 0.47, 0.0) + _skewed(rng, 10_000, 0.29, 0.0) + _skewed(rng, 50_000, 0.47, 0.0)
    fa = tmp_path / "bacillus.fa"
    fa.write_text(">contig\n" + seq + "\n")
    res = CliRunner().invoke(cli, ["gc-profile", str(fa), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0 and "candidate_islands=1" in res.output, res.output
    rows = _read_tsv(tmp_path / "out" / "gc_profile.tsv")
    flagged = [(int(r["start"]), int(r["end"])) for r in rows if r["island"] == "1"]
    assert flagged and min(a for a, _ in flagged) >= 39_000 and max(b for _, b in flagged) <= 51_000
    assert all(abs(float(r["gc_deviation"])) > 0.1 for r in rows if r["island"] == "1")
    assert all(abs(float(r["gc_deviation"])) <= 0.1 for r in rows if r["island"] == "0")
    report = (tmp_path / "out" / "report.md").read_text()
    line = next(x for x in report.splitlines() if x.startswith("| contig | 4"))
    start, end, gc = (float(line.split("|")[k].replace(",", "")) for k in (2, 3, 5))
    assert 39_000 <= start <= 41_000 and 49_000 <= end <= 51_000 and abs(gc - 0.29) < 0.02
    (s,) = gc_profile([("contig", seq)]).summaries
    assert len(s.islands) == 1 and s.islands[0].gc < 0.31
    assert mpimg.imread(tmp_path / "out" / "gc_profile.png").ndim == 3
    # a higher threshold flags nothing, and the report says so
    res = CliRunner().invoke(cli, ["gc-profile", str(fa), "--island-threshold", "0.3", "-o", str(tmp_path / "o2")])
    assert res.exit_code == 0 and "candidate_islands=0" in res.output
    assert "None: no window's GC departs from its record's GC by more than 0.3." in (
        tmp_path / "o2" / "report.md").read_text()
    bad = CliRunner().invoke(cli, ["gc-profile", str(fa), "--island-threshold", "1.5", "-o", str(tmp_path / "o3")])
    assert bad.exit_code == 2 and "--island-threshold" in bad.output


def test_real_complete_chromosome_and_contig(shared_data, tmp_path):
    """C. diphtheriae's RefSeq chromosome starts near dnaA: the terminus is near the middle and the
    skew minimum (the origin) at an end, where the circular curve turns (read as linear, it is
    reported as at an end); the E. coli draft contig never turns."""
    fa = shared_data / "genomes" / "GCF_001457455.1_NCTC11397_genomic.fna.gz"
    res = run_gc_profile(fa, tmp_path / "cd", window=10_000)
    (s,) = res.profile.summaries
    assert s.origin == s.skew_min_at > s.length - 30_000 and 1_100_000 < s.terminus < 1_350_000
    res = run_gc_profile(fa, tmp_path / "cdl", window=10_000, circular=False)
    (lin,) = res.profile.summaries
    assert lin.origin is None and lin.skew_min_at == s.skew_min_at and lin.terminus == s.terminus
    assert "the origin is there or beyond that end" in res.report.read_text()
    (e,) = run_gc_profile(shared_data / ECOLI, tmp_path / "ec", window=10_000).profile.summaries
    assert e.one_replichore


# ----------------------------------------------------------------------------- review fixes


def test_gc_rich_and_at_rich_neighbours_are_separate_islands(tmp_path):
    """Touching flagged windows that depart in opposite directions used to merge into one island
    whose GC averaged out to the record's (difference ~0)."""
    #     0-20: 50% GC        20-24 GGGG   24-28 AAAA   28-48: 50% GC;  record GC 24/48 = 0.5
    seq = "ACGT" * 5 + "GGGG" + "AAAA" + "ACGT" * 5
    p = gc_profile([("r", seq)], window=4, step=4)
    np.testing.assert_array_equal(p.island, [0] * 5 + [1, 1] + [0] * 5)
    (s,) = p.summaries
    assert s.islands == ((20, 24, 1.0, 1, 1), (24, 28, 0.0, 1, -1))
    assert [i.kind for i in s.islands] == ["GC-rich", "AT-rich"]
    text = write_report(p, tmp_path / "report.md").read_text()
    assert "| r | 20 | 24 | 4 | 1.0000 | 0.5000 | +0.5000 | GC-rich | 1 |" in text
    assert "| r | 24 | 28 | 4 | 0.0000 | 0.5000 | -0.5000 | AT-rich | 1 |" in text
    # windows departing the same way still merge: GGGG GGGG gives one island of 2 windows
    (s2,) = gc_profile([("r", "ACGT" * 5 + "GGGG" * 2 + "ACGT" * 5)], window=4, step=4).summaries
    assert s2.islands == ((20, 28, 1.0, 2, 1),)
    # the reviewer's case: 20 kb at 50% GC, 3 kb at 75%, 3 kb at 25%, 20 kb at 50%, window 1000 (step 500)
    rng = np.random.default_rng(11)
    seq = "".join(_skewed(rng, n, gc, 0.0) for n, gc in ((20_000, 0.5), (3_000, 0.75), (3_000, 0.25), (20_000, 0.5)))
    (s3,) = gc_profile([("isl", seq)], window=1000).summaries
    assert [(i.kind, i.start, i.end) for i in s3.islands] == [("GC-rich", 19_500, 23_000), ("AT-rich", 23_000, 26_500)]
    assert s3.islands[0].gc - s3.gc > 0.15 and s3.islands[1].gc - s3.gc < -0.15


def test_windows_with_few_acgt_are_na(tmp_path):
    """A window with fewer than half the window length in A/C/G/T (mostly N, or a short tail) used
    to get a GC and a skew from its few bases: flagged as an island, +-1 added to the cumulative skew."""
    #      ACGT | NNNG (1 ACGT) | ACGT | G (1-nt tail); window 4 needs 2 A/C/G/T bases
    p = gc_profile([("r", "ACGT" + "NNNG" + "ACGT" + "G")], window=4, step=4, island_threshold=0.3)
    np.testing.assert_allclose(p.gc, [0.5, np.nan, 0.5, np.nan])
    np.testing.assert_allclose(p.gc_skew, [0.0, np.nan, 0.0, np.nan])
    np.testing.assert_allclose(p.gc_deviation, [-0.1, np.nan, -0.1, np.nan])
    np.testing.assert_allclose(p.cumulative_gc_skew, [0.0, 0.0, 0.0, 0.0])  # was [0, 1, 1, 2]
    assert not p.island.any()  # NNNG and G have GC 1.0, 0.4 above the record's 0.6: they were islands
    (s,) = p.summaries
    assert (s.n_na_windows, s.min_acgt, s.gc, s.islands) == (2, 2, pytest.approx(0.6), ())
    assert (s.min_window_gc, s.max_window_gc) == (0.5, 0.5)
    # an informative window with N adds its skew in proportion to its A/C/G/T bases: GGNN adds 1 * 2/4
    q = gc_profile([("w", "GGNN" + "CCCC")], window=4, step=4)
    np.testing.assert_allclose(q.gc_skew, [1.0, -1.0])
    np.testing.assert_allclose(q.cumulative_gc_skew, [0.5, -0.5])
    # in the TSV an NA window is nan (never an island), and its cumulative skew carries on unchanged
    rows = _read_tsv(write_tsv(p, tmp_path / "gc.tsv"))
    assert [(r["gc"], r["gc_skew"], r["gc_deviation"], r["island"], r["cumulative_gc_skew"]) for r in rows[1::2]] == [
        ("nan", "nan", "nan", "0", "0.000000")] * 2


def test_cli_na_windows_in_report(tmp_path):
    fa = tmp_path / "ngap.fa"
    rng = np.random.default_rng(12)
    fa.write_text(">ngap\n" + _skewed(rng, 5000, 0.5, 0.0) + "N" * 995 + "GGGGG" + _skewed(rng, 5000, 0.5, 0.0) + "\n")
    res = CliRunner().invoke(cli, ["gc-profile", str(fa), "--window", "1000", "--step", "1000", "-o", str(tmp_path / "o")])
    assert res.exit_code == 0 and "candidate_islands=0" in res.output, res.output
    report = (tmp_path / "o" / "report.md").read_text()
    assert "Windows with fewer than 500 A/C/G/T bases (NA in the table):" in report and "- ngap: 1 of 11 windows." in report
    row = _read_tsv(tmp_path / "o" / "gc_profile.tsv")[5]
    assert (row["start"], row["gc"], row["island"], row["n_fraction"]) == ("5000", "nan", "0", "0.995000")


def test_no_origin_terminus_without_evidence():
    """Origin/terminus used to be called on any curve that turned: short draft contigs, random sequence."""
    rng = np.random.default_rng(13)
    # a clear V (skew -0.3 then +0.3) on a 30-kb contig: a signal that turns, but no chromosome
    (s,) = gc_profile([("contig", _skewed(rng, 15_000, 0.5, -0.3) + _skewed(rng, 15_000, 0.5, 0.3))]).summaries
    assert (s.origin, s.terminus) == (None, None) and not s.one_replichore
    assert abs(s.skew_min_at - 15_000) <= 1000 and s.skew_range > 2 * s.skew_noise_range
    assert s.no_call_reason == "the record is too short for a chromosome (30,000 nt; at least 100,000 nt)"
    # 200 kb of random sequence: its cumulative skew is a random walk, whose turns mean nothing
    (r,) = gc_profile([("random", _skewed(rng, 200_000, 0.5, 0.0))]).summaries
    assert (r.origin, r.terminus) == (None, None) and not r.one_replichore
    assert r.skew_range < r.skew_noise_range
    assert r.replichore_note().startswith("no origin/terminus call: the cumulative skew's range (")
    assert "is within what a sequence without strand bias gives (4 SD of a random walk: " in r.no_call_reason
    # the same length with two replichores is called (as in test_two_replichores_give_origin_and_terminus)
    (c,) = gc_profile([("chr", _skewed(rng, 100_000, 0.5, -0.05) + _skewed(rng, 100_000, 0.5, 0.05))]).summaries
    assert abs(c.origin - 100_000) <= 5000 and c.no_call_reason == "" and c.skew_range > c.skew_noise_range


def test_no_call_reason_in_cli_output_and_report(tmp_path):
    fa = tmp_path / "contig.fa"
    rng = np.random.default_rng(14)
    fa.write_text(">contig\n" + _skewed(rng, 15_000, 0.5, -0.3) + _skewed(rng, 15_000, 0.5, 0.3) + "\n")
    res = CliRunner().invoke(cli, ["gc-profile", str(fa), "-o", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "origin=-\tterminus=-\tcandidate_islands=0\tno call: the record is too short for a chromosome " \
           "(30,000 nt" in res.output
    report = (tmp_path / "o" / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| contig |"))
    assert row.split("|")[9:11] == [" - ", " - "]
    assert "- contig: no origin/terminus call: the record is too short for a chromosome (30,000 nt" in report


def _summaries(path, window):
    return gc_profile(read_genome_records(path), window=window).summaries


def test_real_genomes_keep_their_calls_and_mag_contigs_get_none(shared_data):
    """S. pyogenes M1 (complete): terminus at 977,500 as before, and (circular) the origin at its start;
    Bathyarchaeota MAG contigs (5-28 kb), which used to get origins and termini, get none."""
    multi = shared_data / "genomes" / "multi"
    (s,) = _summaries(multi / "Streptococcus_pyogenes__M1_GAS.fna.gz", window=10_000)
    assert (s.origin, s.terminus) == (0, 977_500) and s.skew_range > 3 * s.skew_noise_range
    mag = _summaries(multi / "Bathyarchaeota_archaeon_B26-1_MAG__GCA_001593925.1.fna.gz", window=1000)
    assert len(mag) == 124 and max(x.length for x in mag) < 30_000
    assert all(x.origin is None and x.terminus is None for x in mag)


def test_plot_of_many_records_says_which_are_shown(tmp_path):
    rng = np.random.default_rng(15)
    fa = tmp_path / "many.fa"
    lengths = [3000, 500, 2500, 4000, 3500]
    fa.write_text("".join(f">r{i}\n{_skewed(rng, n, 0.5, 0.0)}\n" for i, n in enumerate(lengths)))
    res = CliRunner().invoke(cli, ["gc-profile", str(fa), "--window", "200", "-o", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert f"plotted: the 4 longest of 5 records in {tmp_path / 'o' / 'gc_profile.png'}" in res.stderr
    assert "plotted:" not in res.stdout  # status on stderr: stdout holds a line per record
    report = (tmp_path / "o" / "report.md").read_text()
    assert "Plotted: the 4 longest of 5 records (r0, r2, r3, r4); the tables cover all of them." in report
    assert report.index("Plotted: the 4 longest") < report.index("![GC profile](gc_profile.png)")
    # four records or fewer: all are plotted and nothing is said
    four = gc_profile([(f"r{i}", _skewed(rng, n, 0.5, 0.0)) for i, n in enumerate(lengths[:4])], window=200)
    assert "Plotted:" not in write_report(four, tmp_path / "four.md").read_text()


def test_pipe_in_record_id_is_escaped_in_report(tmp_path):
    """NCBI-style IDs (``gi|15282445|ref|NC_000918.1|``) used to split the Markdown table rows."""
    import re

    chrom = "gi|15282445|ref|NC_000918.1|"
    p = gc_profile([(chrom, "ACGT" * 5 + "GGGG" + "ACGT" * 5)], window=4, step=4)  # one GC-rich island
    comps = compare_continuations([(chrom, "ACGT" * 20)], [GenomeRecord("g|1", f"g|1 chrom={chrom} start=10",
                                                                       "ACGT" * 10)], window=5)
    text = write_report(p, tmp_path / "report.md", overlay=comps).read_text()
    escaped = r"gi\|15282445\|ref\|NC_000918.1\|"
    assert f"| {escaped} | 44 |" in text and f"| {escaped} | 20 | 24 | 4 |" in text
    assert rf"| g\|1 | {escaped} | 10 | 40 |" in text
    tables = [t.splitlines() for t in re.findall(r"(?m)(?:^\|.*\n?)+", text)]
    assert len(tables) == 3  # summary, islands, continuations
    for rows in tables:  # every row has as many cells (split at unescaped pipes) as its header
        counts = {len(re.split(r"(?<!\\)\|", row)) for row in rows}
        assert len(rows) == 3 and len(counts) == 1, rows


def _outputs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_cli_refuses_to_overwrite_an_earlier_run(tmp_path, monkeypatch):
    runner = CliRunner()
    monkeypatch.chdir(tmp_path)
    _write_inputs(np.random.default_rng(16))
    Path("out").mkdir()
    Path("out/notes.txt").write_text("mine")  # a directory holding other files is fine
    res = runner.invoke(cli, ["gc-profile", "genome.fa", "--window", "500", "--overlay", "gen.fa", "-o", "out"])
    assert res.exit_code == 0, res.output
    before = _outputs(Path("out"))
    assert sorted(before) == ["gc_profile.png", "gc_profile.tsv", "notes.txt", "overlay.png", "overlay.tsv", "report.md"]
    res = runner.invoke(cli, ["gc-profile", "genome.fa", "--window", "1000", "-o", "out"])
    assert res.exit_code == 1
    assert ("Error: out already holds the outputs of a gc-profile run (gc_profile.tsv, gc_profile.png, report.md, "
            "overlay.tsv, overlay.png); pass --overwrite to replace them") in " ".join(res.output.split())
    assert _outputs(Path("out")) == before  # nothing touched
    with pytest.raises(FileExistsError, match="already holds the outputs of a gc-profile run"):
        run_gc_profile("missing.fa", "out")  # refused before the input is read
    # an earlier run without an overlay is refused too: any one of the outputs counts
    Path("out2").mkdir()
    Path("out2/report.md").write_text("old")
    res = runner.invoke(cli, ["gc-profile", "genome.fa", "-o", "out2"])
    assert res.exit_code == 1 and "(report.md)" in res.output and Path("out2/report.md").read_text() == "old"


def test_overwrite_replaces_outputs_and_removes_stale_overlay(tmp_path, monkeypatch):
    runner = CliRunner()
    monkeypatch.chdir(tmp_path)
    _write_inputs(np.random.default_rng(17))
    res = runner.invoke(cli, ["gc-profile", "genome.fa", "--window", "500", "--overlay", "gen.fa", "-o", "out"])
    assert res.exit_code == 0, res.output
    Path("out/notes.txt").write_text("mine")
    Path("out/other.png").write_bytes(b"not ours")
    res = runner.invoke(cli, ["gc-profile", "genome.fa", "--window", "1000", "-o", "out", "--overwrite"])
    assert res.exit_code == 0, res.output
    assert "removed out/overlay.tsv (from an earlier run)" in res.stderr
    assert "removed out/overlay.png (from an earlier run)" in res.stderr and "removed" not in res.stdout
    # only the new run's files and the user's own remain; no temporary files are left
    assert sorted(p.name for p in Path("out").iterdir()) == [
        "gc_profile.png", "gc_profile.tsv", "notes.txt", "other.png", "report.md"]
    assert Path("out/notes.txt").read_text() == "mine" and Path("out/other.png").read_bytes() == b"not ours"
    report = Path("out/report.md").read_text()
    assert "Window 1000 nt" in report and "overlay" not in report
    assert _read_tsv(Path("out/gc_profile.tsv"))[1]["start"] == "500"  # window 1000, step 500
    # --overwrite into a fresh directory is fine too
    res = runner.invoke(cli, ["gc-profile", "genome.fa", "-o", "new", "--overwrite"])
    assert res.exit_code == 0 and "removed" not in res.output


def test_output_name_taken_by_a_directory_is_refused(tmp_path):
    fa = tmp_path / "g.fa"
    fa.write_text(">r\n" + "ACGT" * 100 + "\n")
    (tmp_path / "out" / "report.md").mkdir(parents=True)
    with pytest.raises(FileExistsError, match=r"report.md is a directory, where gc-profile writes a file"):
        run_gc_profile(fa, tmp_path / "out", window=100, overwrite=True)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.md"]
