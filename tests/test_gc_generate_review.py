"""Review of `generate-dna`, `gc-profile` and `lm eval` (an audit's findings): the overlay scores
only generated bases, the held-out LM/Markov comparison is paired, gc-profile's '-' handling and
messages, reproducible default ids and seeds, the temperature/seed coupling, and GC's treatment
of IUPAC codes and soft-masked bases."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from sinkalign.cli.main import cli
from sinkalign.lm import DNALanguageModel, LMConfig, save_checkpoint
from sinkalign.lm import evaluate as lm_evaluate
from sinkalign.lm.data import GenomeRecord, read_genome_records, train_val_split
from sinkalign.lm.evaluate import EvalConfig, evaluate_lm, heldout_bits_per_base
from sinkalign.lm.generate import SamplingConfig
from sinkalign.lm.markov import MarkovModel
from sinkalign.pipelines.gc_profile import compare_continuations, gc_profile, run_gc_profile
from tests.cli_errors import assert_one_line_error


def _random_dna(n: int, seed: int, gc: float = 0.5) -> str:
    p = [(1 - gc) / 2, gc / 2, gc / 2, (1 - gc) / 2]
    return "".join(np.random.default_rng(seed).choice(list("ACGT"), size=n, p=p))


def _tiny_model(seed: int = 0) -> DNALanguageModel:
    torch.manual_seed(seed)
    cfg = LMConfig(vocab_size=8, d_model=32, n_layers=2, n_heads=2, attention="rope", max_train_len=16,
                   init_std=0.3)
    return DNALanguageModel(cfg).eval()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    ck = tmp_path_factory.mktemp("ck") / "ck"
    save_checkpoint(ck, _tiny_model())
    return ck


@pytest.fixture(scope="module")
def genome(tmp_path_factory):
    """One 3,000-nt record whose GC changes along it (so a trajectory has something to follow)."""
    seq = "".join(_random_dna(500, k, gc) for k, gc in enumerate((0.3, 0.7, 0.4, 0.6, 0.35, 0.65)))
    path = tmp_path_factory.mktemp("genome") / "genome.fa"
    path.write_text(f">chr1\n{seq}\n")
    return path, seq


# ----------------------------------------------------------------------------- 1. overlay without the prompt


def _fasta(header: str, seq: str) -> str:
    return f">{header}\n{seq}\n"


def test_overlay_drops_an_included_prompt(genome, tmp_path):
    """A record with its prompt (prompt_included=true, start= at the prompt's start) gives the
    very figures of the same continuation without it: the prompt, copied from the genome, was
    scored against itself and inflated the correlation."""
    path, seq = genome
    start, p = 1400, 64
    cont = _random_dna(200, 99, gc=0.5)
    prompt = seq[start - p : start]
    plain = tmp_path / "plain.fa"
    plain.write_text(_fasta(f"g chrom=chr1 start={start} length=200 prompt_length={p} prompt_included=false", cont))
    withp = tmp_path / "withp.fa"
    withp.write_text(_fasta(f"g chrom=chr1 start={start - p} length={200 + p} prompt_length={p} "
                            "prompt_included=true", prompt + cont))
    genome_recs = read_genome_records(path)
    (a,) = compare_continuations(genome_recs, read_genome_records(plain))
    (b,) = compare_continuations(genome_recs, read_genome_records(withp))
    assert (b.chrom, b.start, b.length) == (a.chrom, a.start, a.length) == ("chr1", start, 200)
    assert b.pearson_r == a.pearson_r and b.true_gc == a.true_gc and b.generated_gc == a.generated_gc
    np.testing.assert_array_equal(b.generated_trajectory, a.generated_trajectory)
    np.testing.assert_array_equal(b.true_trajectory, a.true_trajectory)
    # the whole command: identical overlay tables
    for name, ov in (("a", plain), ("b", withp)):
        run_gc_profile(path, tmp_path / name, window=200, overlay=ov)
    assert (tmp_path / "a" / "overlay.tsv").read_text() == (tmp_path / "b" / "overlay.tsv").read_text()
    assert "compared without it" in (tmp_path / "b" / "report.md").read_text()


def test_overlay_prompt_tags_old_headers_and_errors(genome):
    path, seq = genome
    recs = read_genome_records(path)
    cont = _random_dna(100, 7)
    # a header without the tags (another tool, or an older generate-dna): all continuation
    (c,) = compare_continuations(recs, [GenomeRecord("old", "old chrom=chr1 start=500", cont)])
    assert (c.start, c.length) == (500, 100)
    (c,) = compare_continuations(recs, [GenomeRecord("f", "f chrom=chr1 start=500 prompt_included=false "
                                                          "prompt_length=9", cont)])
    assert (c.start, c.length) == (500, 100)
    with pytest.raises(ValueError, match="says prompt_included=true but has no prompt_length= tag"):
        compare_continuations(recs, [GenomeRecord("x", "x chrom=chr1 start=500 prompt_included=true", cont)])
    with pytest.raises(ValueError, match="prompt_included='maybe' is neither true nor false"):
        compare_continuations(recs, [GenomeRecord("x", "x start=500 prompt_included=maybe", cont)])
    with pytest.raises(ValueError, match="prompt_length=100 leaves no generated base"):
        compare_continuations(recs, [GenomeRecord("x", "x start=500 prompt_included=true prompt_length=100", cont)])


def test_generate_dna_include_prompt_overlays_like_the_continuation(genome, checkpoint, tmp_path):
    """End to end with generate-dna's own headers: --include-prompt or not, one overlay table."""
    path, seq = genome
    start = 1400
    prompt = seq[start - 40 : start]
    base = ["generate-dna", "--model", str(checkpoint), "--prompt", prompt, "--length", "150", "--seed", "3",
            "--format", "fasta", "--chrom", "chr1", "--start", str(start), "--id", "g"]
    runner = CliRunner()
    for name, extra in (("plain", []), ("withp", ["--include-prompt"])):
        res = runner.invoke(cli, [*base, *extra, "-o", str(tmp_path / f"{name}.fa")])
        assert res.exit_code == 0, res.output
        res = runner.invoke(cli, ["gc-profile", str(path), "--window", "200", "--overlay", str(tmp_path / f"{name}.fa"),
                                  "-o", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
    assert "prompt_included=true" in (tmp_path / "withp.fa").read_text()
    ov = (tmp_path / "plain" / "overlay.tsv").read_text()
    assert ov == (tmp_path / "withp" / "overlay.tsv").read_text()
    assert ov.splitlines()[1].split("\t")[:4] == ["g", "chr1", str(start), "150"]


# ----------------------------------------------------------------------------- 2. paired held-out comparison


def test_heldout_lm_and_markov_score_the_same_bases(tmp_path):
    """Held-out N runs: the Markov chain cannot score the bases just after them (an N in its
    context), the LM can; the comparison uses the bases both score, so the counts are equal and
    delta_vs_markov is the paired difference on them."""
    rng = np.random.default_rng(5)
    train = _random_dna(9000, 1)
    val = "".join(_random_dna(int(rng.integers(30, 80)), 10 + k) + "N" * int(rng.integers(1, 6)) for k in range(12))
    seq = train + val
    tr, va = train_val_split(seq, 0.1)
    assert "N" in va and "N" not in tr
    path = tmp_path / "withN.fa"
    path.write_text(f">r\n{seq}\n")
    model = _tiny_model().double()
    order = 3
    rep = evaluate_lm(model, EvalConfig(fasta=str(path), sections=("heldout",), markov_order=order))
    h = rep.heldout
    m = h["markov"]
    # by hand: the Markov chain scores a base without N in it or its 3 preceding bases, the LM
    # every A/C/G/T target (the training split precedes the held-out part)
    mk = -MarkovModel(order).fit([tr]).log2_probs(va, prefix=tr)
    acgt = np.array([c != "N" for c in va])
    shared = np.isfinite(mk) & acgt
    assert acgt.sum() > shared.sum()  # the LM scores bases the chain cannot
    assert h["n_scored"] == m["n_scored"] == int(shared.sum())  # it said 2252 vs 2247 on a real genome
    lm, _, _ = lm_evaluate._heldout_target_bits(model, va, context=16, prefix=tr)
    np.testing.assert_array_equal(np.isfinite(lm), acgt)
    assert m["bits_per_base"] == pytest.approx(mk[shared].mean())
    assert h["bits_per_base"] == pytest.approx(lm[shared].mean())
    assert h["delta_vs_markov"] == pytest.approx(lm[shared].mean() - mk[shared].mean())
    # the LM's own figure, every A/C/G/T target (contexts may hold N), is kept beside it
    own = heldout_bits_per_base(model, va, context=16, prefix=tr)
    assert h["all_targets"] == {"bits_per_base": pytest.approx(own.bits_per_base), "n_scored": own.n_scored}
    assert own.n_scored == sum(c != "N" for c in va)


# ----------------------------------------------------------------------------- 3. '-' for gc-profile


def test_gc_profile_refuses_dash_output(genome, tmp_path, monkeypatch):
    path, _ = genome
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["gc-profile", str(path), "-o", "-"])
    assert res.exit_code == 2 and "'-' (standard output) cannot hold the outputs" in res.output, res.output
    assert not (tmp_path / "-").exists()
    with pytest.raises(ValueError, match=r"the output directory cannot be '-'"):
        run_gc_profile(path, "-")
    assert not (tmp_path / "-").exists()


def test_gc_profile_refuses_a_file_name_as_the_output_directory(genome, tmp_path, monkeypatch):
    """-o report.png made a directory named report.png; an existing directory of that name is
    still taken (it is the user's)."""
    path, _ = genome
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["gc-profile", str(path), "-o", "report.PNG"])
    assert res.exit_code == 2 and "'report.PNG' names a file, and -o is the directory that gets" in res.output
    assert "-o report" in res.output and not (tmp_path / "report.PNG").exists()
    (tmp_path / "old.tsv").mkdir()
    res = CliRunner().invoke(cli, ["gc-profile", str(path), "-o", "old.tsv", "--no-progress"])
    assert res.exit_code == 0 and (tmp_path / "old.tsv" / "report.md").is_file(), res.output


def test_gc_profile_reads_standard_input(genome, tmp_path):
    path, seq = genome
    res = CliRunner().invoke(cli, ["gc-profile", "-", "--window", "200", "-o", str(tmp_path / "in")],
                             input=path.read_text())
    assert res.exit_code == 0, res.output
    ref = tmp_path / "ref"
    run_gc_profile(path, ref, window=200)
    assert (tmp_path / "in" / "gc_profile.tsv").read_text() == (ref / "gc_profile.tsv").read_text()
    assert "Input: `<stdin>`" in (tmp_path / "in" / "report.md").read_text()
    # the overlay from standard input; and not both
    ov = _fasta("g chrom=chr1 start=500", _random_dna(100, 3))
    res = CliRunner().invoke(cli, ["gc-profile", str(path), "--window", "200", "--overlay", "-",
                                   "-o", str(tmp_path / "ov")], input=ov)
    assert res.exit_code == 0, res.output
    assert (tmp_path / "ov" / "overlay.tsv").read_text().splitlines()[1].startswith("g\tchr1\t500\t100\t")
    res = CliRunner().invoke(cli, ["gc-profile", "-", "--overlay", "-", "-o", str(tmp_path / "both")], input=ov)
    assert_one_line_error(res, "the genome and the overlay cannot both be '-'")
    # an error in a record read from standard input names <stdin>, not a temporary file
    res = CliRunner().invoke(cli, ["gc-profile", "-", "-o", str(tmp_path / "bad")], input=">x\nAC-GT\n")
    assert_one_line_error(res, "<stdin>: record 'x' has invalid character '-'")


# ----------------------------------------------------------------------------- 4./5. gc-profile messages


def test_too_few_windows_counts_the_sequence_they_span():
    """1,338 nt, window 2,000, step 700: one informative (partial) window spanning 0.67 window
    lengths; it said 0.3 (1 window x step / window)."""
    p = gc_profile([("short", _random_dna(1338, 2))], window=2000, step=700)
    (s,) = p.summaries
    assert "they span 0.67 window lengths of sequence, 1,338 nt; at least 10 needed" in s.no_call_reason
    # 11 nt, window 4, step 2: all five windows informative, spanning the whole 11 nt
    (s,) = gc_profile([("r", "GGGCATNNATC")], window=4, step=2).summaries
    assert "they span 2.75 window lengths of sequence, 11 nt" in s.no_call_reason


def test_all_na_record_says_why_on_stdout(tmp_path):
    path = tmp_path / "gappy.fa"
    path.write_text(f">gappy\nACGTACGTAC{'N' * 3000}\n>ok\n{_random_dna(3000, 4)}\n")
    res = CliRunner().invoke(cli, ["gc-profile", str(path), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("gappy\t"))
    assert line.startswith("gappy\tlength=3010\tgc=")
    assert line.split("\t")[3:] == ["origin=-", "terminus=-", "candidate_islands=0",
                                    "no call: no window has 500 A/C/G/T bases (half the window): no skew"], line


# ----------------------------------------------------------------------------- 6. ids and seeds


def _header(text: str) -> tuple[str, dict[str, str]]:
    first = text.splitlines()[0][1:].split()
    return first[0], dict(t.split("=", 1) for t in first[1:])


def test_generate_default_id_names_the_seed_and_a_drawn_seed_reproduces(checkpoint, tmp_path):
    runner = CliRunner()
    base = ["generate-dna", "--model", str(checkpoint), "--prompt", "ACGTACGGTA", "--length", "30",
            "--format", "fasta"]
    res = runner.invoke(cli, [*base, "--seed", "4"])
    assert res.exit_code == 0 and _header(res.output) == ("gen_s4", {"length": "30", "prompt_length": "10",
                                                                    "prompt_included": "false", "seed": "4"})
    res = runner.invoke(cli, [*base, "--seed", "4", "--chrom", "chr1", "--start", "100"])
    assert _header(res.output)[0] == "gen_chr1_100_s4"
    res = runner.invoke(cli, [*base, "--temperature", "0"])
    rid, tags = _header(res.output)
    assert rid == "gen_greedy" and "seed" not in tags
    # no --seed: one is drawn, used, recorded and named; --seed with it repeats the run
    runs = [runner.invoke(cli, base) for _ in range(2)]
    assert all(r.exit_code == 0 for r in runs)
    (id1, tags1), (id2, tags2) = (_header(r.stdout) for r in runs)
    assert id1 == f"gen_s{tags1['seed']}" and id2 == f"gen_s{tags2['seed']}" and id1 != id2
    again = runner.invoke(cli, [*base, "--seed", tags1["seed"]])
    assert again.stdout.splitlines()[1:] == runs[0].stdout.splitlines()[1:]
    # plain output: the drawn seed on stderr, the sequence alone on stdout
    res = runner.invoke(cli, base[:-2])
    seed = re.search(r"seed (\d+) \(--seed \1 reproduces this run\)", res.stderr).group(1)
    assert res.stdout == runner.invoke(cli, [*base[:-2], "--seed", seed]).stdout
    # explicit --id is kept as given
    assert _header(runner.invoke(cli, [*base, "--id", "mine"]).output)[0] == "mine"


def test_concatenated_runs_overlay_together(genome, checkpoint, tmp_path):
    """Runs at two starts without --id used to share the id 'generated': --overlay refused the
    concatenation ("duplicate record id")."""
    path, seq = genome
    runner = CliRunner()
    parts = []
    for start in (1000, 2000):
        res = runner.invoke(cli, ["generate-dna", "--model", str(checkpoint), "--prompt", seq[start - 20 : start],
                                  "--length", "60", "--seed", "1", "--format", "fasta", "--chrom", "chr1",
                                  "--start", str(start)])
        assert res.exit_code == 0, res.output
        parts.append(res.stdout)
    both = tmp_path / "both.fa"
    both.write_text("".join(parts))
    res = runner.invoke(cli, ["gc-profile", str(path), "--window", "200", "--overlay", str(both),
                              "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    rows = (tmp_path / "out" / "overlay.tsv").read_text().splitlines()[1:]
    assert [r.split("\t")[0] for r in rows] == ["gen_chr1_1000_s1", "gen_chr1_2000_s1"]


# ----------------------------------------------------------------------------- 7. temperature with a seed


def test_temperature_applies_with_a_seed_and_shares_its_noise():
    """The same seed at another temperature is a coupled draw, not a copy: a model sure of A
    gives mostly A at temperature 1 and about a quarter A at 1e30 (uniform), from the same
    generator state; temperatures 1 and 1.0001 give (almost) the same draws."""
    logits = torch.tensor([[4.0, 0.0, 0.0, 0.0, -9.0]]).expand(4000, 5)  # [B, V]; N is never drawn

    def draw(temperature: float) -> torch.Tensor:
        return SamplingConfig(temperature).next_tokens(logits, torch.Generator().manual_seed(7))[:, 0]

    t1, t_near, t_flat = draw(1.0), draw(1.0001), draw(1e30)
    assert (t1 == 0).float().mean() > 0.9
    assert abs((t_flat == 0).float().mean().item() - 0.25) < 0.03
    assert (t1 == t_near).float().mean() > 0.99  # the same noise: all but the nearest ties agree
    res = CliRunner().invoke(cli, ["generate-dna", "--help"])
    assert "nearby temperatures (1 and 1.0001) can give the very same sequence" in " ".join(res.output.split())


# ----------------------------------------------------------------------------- 8. what GC counts


def test_gc_counts_iupac_as_n_and_soft_masked_bases(tmp_path):
    path = tmp_path / "iupac.fa"
    # 40 nt: 10 soft-masked gc, 10 GC, 10 AT, 10 IUPAC S / X / R (read as N)
    path.write_text(">r\ngcgcgcgcgcGCGCGCGCGCATATATATATSSSSXXXRRR\n")
    out = tmp_path / "out"
    res = run_gc_profile(path, out, window=40, step=40)
    (s,) = res.profile.summaries
    assert s.gc == pytest.approx(20 / 30) and s.n_fraction == pytest.approx(10 / 40)
    report = " ".join((out / "report.md").read_text().split())
    assert "the IUPAC ambiguity codes (RYSWKMBDHV, S included) and X count as N" in report
    assert "soft-masked (lowercase) bases count like uppercase ones" in report
    helptext = " ".join(CliRunner().invoke(cli, ["gc-profile", "--help"]).output.split())
    assert "S too, though it is G or C) and X, which are read as N" in helptext
    assert "Soft-masked (lowercase) bases count like uppercase ones" in helptext
