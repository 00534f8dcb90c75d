"""gc-profile review fixes: all-or-nothing outputs, inputs that are outputs, circular chromosomes,
where the origin/terminus positions come from, status on stderr."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sinkalign.cli.main import cli
from sinkalign.errors import InputError
from sinkalign.lm.data import read_genome_records
from sinkalign.pipelines.gc_profile import gc_profile, profile_figure, reads_as_circular, run_gc_profile

gp = importlib.import_module("sinkalign.pipelines.gc_profile")  # the package's gc_profile is the function


def _skewed(rng, n: int, skew: float, gc: float = 0.5) -> str:
    g, c, at = gc * (1 + skew) / 2, gc * (1 - skew) / 2, (1 - gc) / 2
    return "".join(rng.choice(list("ACGT"), size=n, p=[at, c, g, at]))


def _snapshot(out: Path) -> dict[str, bytes]:
    """Every entry of ``out``, hidden ones included (a leftover staging folder shows as b'<dir>')."""
    return {p.name: b"<dir>" if p.is_dir() else p.read_bytes() for p in sorted(out.iterdir())}


@pytest.fixture
def earlier_run(tmp_path):
    """A genome, an overlay, and ``out`` holding a window-500 run with an overlay plus a user's file."""
    rng = np.random.default_rng(0)
    chrom = _skewed(rng, 6000, 0.0)
    (tmp_path / "g.fa").write_text(f">chr1\n{chrom}\n")
    (tmp_path / "gen.fa").write_text(f">s0 chrom=chr1 start=3000\n{chrom[3000:3400]}\n")
    out = tmp_path / "out"
    run_gc_profile(tmp_path / "g.fa", out, window=500, overlay=tmp_path / "gen.fa")
    (out / "notes.txt").write_text("mine")
    return tmp_path, _snapshot(out)


# ----------------------------------------------------------------------------- 1. all-or-nothing outputs


@pytest.mark.parametrize("failing", ["plot_profile", "write_report"])
def test_a_run_failing_midway_leaves_the_earlier_run_whole(earlier_run, monkeypatch, failing):
    """The files were written one by one: a failure (or kill) after gc_profile.tsv left a
    2000-nt table beside the 500-nt report and plots."""
    tmp_path, before = earlier_run

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(gp, failing, boom)
    with pytest.raises(RuntimeError, match="disk full"):
        run_gc_profile(tmp_path / "g.fa", tmp_path / "out", window=2000, overwrite=True)
    after = _snapshot(tmp_path / "out")
    assert after == before  # every file as it was, overlay.* included; no staging folder left
    assert "Window 500 nt" in after["report.md"].decode() and b"\t250\t750\t" in after["gc_profile.tsv"]


_KILLER = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from sinkalign.pipelines.gc_profile import run_gc_profile
    out, k = Path(sys.argv[2]).resolve(), int(sys.argv[3])
    real, done = os.replace, [0]

    def replace(src, dst, *args, **kwargs):  # count the renames into out (or out of it), not the staging writes
        real(src, dst, *args, **kwargs)
        if not Path(dst).resolve().parent.name.startswith(".gc-profile-new-"):
            done[0] += 1
            if done[0] == k:
                os._exit(9)  # as kill -9: no cleanup

    os.replace = replace
    run_gc_profile(sys.argv[1], out, window=2000, overwrite=True)
""")


@pytest.mark.parametrize("k", [1, 5, 6, 7, 8])
def test_a_run_killed_while_replacing_is_undone_by_the_next(earlier_run, k):
    """Killed after k renames (5 earlier files set aside, then the 3 new ones moved in, report.md
    last): the next run, even one refused for want of --overwrite, puts the earlier run back, or
    keeps the new one when the kill came after its last file."""
    tmp_path, before = earlier_run
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", _KILLER, str(tmp_path / "g.fa"), str(out), str(k)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr
    with pytest.raises(FileExistsError, match="already holds the outputs"):
        run_gc_profile(tmp_path / "g.fa", out, window=2000)
    after = _snapshot(out)
    if k < 8:
        assert after == before
    else:
        ref = tmp_path / "ref"
        run_gc_profile(tmp_path / "g.fa", ref, window=2000)
        assert sorted(after) == ["gc_profile.png", "gc_profile.tsv", "notes.txt", "report.md"]
        assert after["gc_profile.tsv"] == (ref / "gc_profile.tsv").read_bytes() and after["notes.txt"] == b"mine"


def test_stale_staging_folder_is_removed_and_users_files_are_kept(earlier_run, caplog):
    tmp_path, before = earlier_run
    out = tmp_path / "out"
    (out / ".gc-profile-new-abc123.tmp").mkdir()
    (out / ".gc-profile-new-abc123.tmp" / "gc_profile.tsv").write_text("half")
    (out / ".hidden-of-mine").mkdir()  # not named as a run names its folders: left alone
    res = run_gc_profile(tmp_path / "g.fa", out, window=2000, overwrite=True)
    assert "removing .gc-profile-new-abc123.tmp, left by an interrupted gc-profile run" in caplog.text
    assert sorted(_snapshot(out)) == [".hidden-of-mine", "gc_profile.png", "gc_profile.tsv", "notes.txt", "report.md"]
    assert [p.name for p in res.removed] == ["overlay.tsv", "overlay.png"]


def test_a_running_runs_staging_folder_is_left_to_it(earlier_run, caplog):
    """Two runs into one folder: the second removed the first's staging folder as a killed run's.
    A folder named with the id of a process still running is now left alone; a dead one's goes."""
    import subprocess
    import sys

    tmp_path, before = earlier_run
    out = tmp_path / "out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for pid in (int(dead.stdout), live.pid):
            (out / f".gc-profile-new-{pid}-abc.tmp").mkdir()
            (out / f".gc-profile-new-{pid}-abc.tmp" / "gc_profile.tsv").write_text("half")
        run_gc_profile(tmp_path / "g.fa", out, window=2000, overwrite=True)
        assert not (out / f".gc-profile-new-{int(dead.stdout)}-abc.tmp").exists()
        assert (out / f".gc-profile-new-{live.pid}-abc.tmp" / "gc_profile.tsv").read_text() == "half"
        assert f"is another gc-profile run's (process {live.pid}, still running): left to it" in caplog.text
    finally:
        live.kill()
        live.wait()


# ----------------------------------------------------------------------------- 2. an input that is an output


def test_an_input_that_is_an_output_is_refused_even_with_overwrite(tmp_path, monkeypatch):
    """`gc-profile gcx/report.md -o gcx --overwrite` replaced the genome with the report."""
    monkeypatch.chdir(tmp_path)
    genome = ">r\n" + _skewed(np.random.default_rng(1), 3000, 0.0) + "\n"
    Path("gcx").mkdir()
    Path("gcx/report.md").write_text(genome)
    res = CliRunner().invoke(cli, ["gc-profile", "gcx/report.md", "--window", "500", "-o", "gcx", "--overwrite"])
    assert res.exit_code == 1 and "gc-profile output gcx/report.md is also an input" in res.output, res.output
    assert Path("gcx/report.md").read_text() == genome and sorted(os.listdir("gcx")) == ["report.md"]
    # through a link, and an --overlay file; and a file the run would remove (overlay.* of an earlier run)
    Path("g.fa").write_text(genome)
    Path("gcx/gc_profile.tsv").symlink_to(Path("g.fa").resolve())
    with pytest.raises(InputError, match="gc-profile output gcx/gc_profile.tsv is also an input"):
        run_gc_profile("g.fa", "gcx", window=500, overwrite=True)
    Path("gcx/gc_profile.tsv").unlink()
    Path("gcx/overlay.tsv").write_text(">s chrom=r start=0\nACGT\n")
    for kwargs in ({"overlay": "gcx/overlay.tsv"}, {"fasta": "gcx/overlay.tsv"}):
        with pytest.raises(InputError, match="gc-profile output gcx/overlay.tsv is also an input"):
            run_gc_profile(**{"fasta": "g.fa", "out_dir": "gcx", "window": 500, "overwrite": True, **kwargs})
    assert Path("gcx/report.md").read_text() == genome and Path("g.fa").read_text() == genome
    assert Path("gcx/overlay.tsv").read_text().startswith(">s chrom=r")


# ----------------------------------------------------------------------------- 3. circular chromosomes


def _chromosome(rng, n: int, shift: int) -> str:
    """A circular chromosome with its origin at 0 (G-rich leading strand to the terminus at n / 2,
    C-rich back), written from ``shift``."""
    seq = _skewed(rng, n // 2, 0.06) + _skewed(rng, n // 2, -0.06)
    return seq[shift:] + seq[:shift]


@pytest.mark.parametrize("shift", [0, 3000, -3000])
def test_origin_at_or_near_the_start_of_a_circular_chromosome_is_called(shift):
    """An extremum at or near an end never counted as turning: the usual chromosome, which starts at
    oriC, got no origin."""
    n = 200_000
    seq = _chromosome(np.random.default_rng(2), n, shift)
    (s,) = gc_profile([("chr", seq)], window=1000, circular=True).summaries
    want = -shift % n
    assert s.circular and min(abs(s.origin - want), n - abs(s.origin - want)) <= 1000
    assert abs(s.terminus - (want + n // 2) % n) <= 2000 and s.replichore_note() == ""
    (lin,) = gc_profile([("chr", seq)], window=1000, circular=False).summaries
    assert lin.origin is None and lin.terminus == s.terminus
    assert "the origin is there or beyond that end" in lin.replichore_note()


def test_circular_reading_keeps_contigs_on_one_replichore_and_random_sequence_uncalled():
    """Wrapping does not make a turn of a curve that climbs from end to end, and the range test
    still stops random sequence (the stated rate: below 1 in 1,000; 0 of 20 here)."""
    rng = np.random.default_rng(3)
    (c,) = gc_profile([("contig", _skewed(rng, 120_000, 0.05))], circular=True).summaries
    assert c.circular and c.one_replichore
    calls = [s for k in range(20) for s in gc_profile([(f"r{k}", _skewed(rng, 120_000, 0.0))], circular=True).summaries
             if s.origin is not None or s.terminus is not None]
    assert calls == []


GENOMES = {  # file: (record, base-level cumulative (G - C) minimum, terminus called before the fix)
    "Streptococcus_pyogenes__M1_GAS": ("NC_002737", 2823, 978_750),
    "Streptococcus_pyogenes__MGAS315": ("NC_004070", 1_898_698, 890_750),
    "Neisseria_meningitidis__MC58": ("NC_003112", 13_740, 1_232_250),
    "Brucella_melitensis__16M": ("NC_003317", 731, 956_250),
    "Mycoplasma_gallisepticum__NC_004829": ("NC_004829.2", 348, 533_250),
    "Blochmannia_floridanus__GCF_000043285.1": ("NC_005061.1", 0, 372_750),
}


@pytest.mark.parametrize("name", sorted(GENOMES))
def test_complete_chromosomes_starting_at_the_origin_get_it(shared_data, name):
    records = read_genome_records(shared_data / "genomes" / "multi" / f"{name}.fna.gz")
    chrom, minimum, terminus = GENOMES[name]
    rec = next(r for r in records if r.id == chrom)
    a = np.frombuffer(rec.seq.encode(), np.uint8)
    curve = np.concatenate([[0], np.cumsum((a == ord("G")).astype(np.int64) - (a == ord("C")))])
    assert int(np.argmin(curve)) == minimum
    (s,) = gc_profile([rec], window=1000).summaries
    n = s.length
    assert min(abs(s.origin - minimum), n - abs(s.origin - minimum)) <= 2000, s.origin
    assert s.terminus == terminus


def test_cli_circular_and_linear_choice(tmp_path):
    fa = tmp_path / "chr.fa"
    seq = _chromosome(np.random.default_rng(4), 200_000, 0)
    fa.write_text(f">chr Bug chromosome, complete genome\n{seq}\n")
    runner = CliRunner()
    res = runner.invoke(cli, ["gc-profile", str(fa), "-o", str(tmp_path / "c")])
    assert res.exit_code == 0 and "\torigin=0\t" in res.stdout, res.output
    assert "| chr | 200,000 | circular |" in (tmp_path / "c" / "report.md").read_text()
    res = runner.invoke(cli, ["gc-profile", str(fa), "--linear", "-o", str(tmp_path / "l")])
    assert res.exit_code == 0 and "\torigin=-\t" in res.stdout, res.output
    report = (tmp_path / "l" / "report.md").read_text()
    assert "| chr | 200,000 | linear |" in report
    assert "the origin is there or beyond that end" in report
    assert "--circular / --linear" in runner.invoke(cli, ["gc-profile", "--help"]).output
    # by default a record whose description names a draft piece is linear, and --circular overrules it
    fa.write_text(f">chr Bug strain X contig00001, whole genome shotgun sequence\n{seq}\n")
    res = runner.invoke(cli, ["gc-profile", str(fa), "-o", str(tmp_path / "w")])
    assert res.exit_code == 0 and "\torigin=-\t" in res.stdout, res.output
    assert "| chr | 200,000 | linear |" in (tmp_path / "w" / "report.md").read_text()
    res = runner.invoke(cli, ["gc-profile", str(fa), "--circular", "-o", str(tmp_path / "wc")])
    assert res.exit_code == 0 and "\torigin=0\t" in res.stdout, res.output


@pytest.mark.parametrize("description, circular", [
    ("NC_002737 Streptococcus pyogenes M1 GAS", True),
    ("NC_003450.3 Corynebacterium glutamicum ATCC 13032 chromosome, complete genome", True),
    ("NC_020075.1 Candidatus Blochmannia chromaiodes str. 640, complete sequence", True),
    ("1 length=2911421 depth=1.00x circular=true", True),  # Unicycler
    ("LUCD01000114.1 Candidatus Bathyarchaeota archaeon B26-1 scaffold10046, whole genome shotgun sequence", False),
    ("UHGG01000002.1 Streptococcus pneumoniae strain NCTC13755 genome assembly, contig: ERS1275658SCcontig000002",
     False),
    ("NZ_JNJU01000001.1 Mycoplasmoides alvi ATCC 29626 T383DRAFT_scaffold00001.1_C", False),
    ("NODE_1_length_301123_cov_22.4", False), ("k141_7 flag=1 multi=12.0 len=301123", False),  # SPAdes, MEGAHIT
    ("2 length=52011 depth=3.1x", False), ("x partial sequence", False), ("chr1", False), ("", False)])
def test_reads_as_circular_by_the_description(description, circular):
    assert reads_as_circular(description) is circular


# ----------------------------------------------------------------------------- 4. positions of the calls


def test_plot_draws_the_curve_where_the_calls_are_placed(tmp_path):
    """The cumulative skew was drawn at window midpoints and the origin line at midpoint + step/2."""
    rng = np.random.default_rng(5)
    seq = _skewed(rng, 50_000, -0.1) + _skewed(rng, 100_000, 0.1) + _skewed(rng, 50_000, -0.1)
    p = gc_profile([("chr", seq)], window=2000)
    (s,) = p.summaries
    ax_cum = profile_figure(p).axes[2]
    x, y = ax_cum.lines[0].get_data()
    assert x[:3].tolist() == [0, 1500, 2500] and x[-1] == 199_500  # 0, then after window [0, 2000): 1000 + 1000 / 2
    assert x[np.argmin(y)] == s.origin and x[np.argmax(y)] == s.terminus
    assert [line.get_xdata()[0] for line in ax_cum.lines[1:]] == [s.origin, s.terminus]
    assert "midpoint + step / 2" in ax_cum.get_xlabel()
    report = gp.write_report(p, tmp_path / "r.md").read_text()
    assert "placed at the window's midpoint + step/2" in report and "good to 1,000 nt (the step)" in report
    assert "midpoint + step/2" in CliRunner().invoke(cli, ["gc-profile", "--help"]).output


# ----------------------------------------------------------------------------- 5. status on stderr


def test_wrote_line_goes_to_stderr(tmp_path):
    fa = tmp_path / "g.fa"
    fa.write_text(">r\n" + _skewed(np.random.default_rng(6), 3000, 0.0) + "\n")
    res = CliRunner().invoke(cli, ["gc-profile", str(fa), "--window", "500", "-o", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("r\tlength=3000\t") and "wrote" not in res.stdout
    assert f"wrote {tmp_path / 'o' / 'report.md'}" in res.stderr
