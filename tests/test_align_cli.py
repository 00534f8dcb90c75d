"""`sinkalign align` and `sinkalign evaluate` end to end, checked through the library."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pysam
import pytest
from Bio import SeqIO
from click.testing import CliRunner

from sinkalign.align.aligner import Aligner, default_model_path
from sinkalign.cli.main import cli
from sinkalign.errors import InputError, SinkalignError

Q = ">q1 first\nMKVLAAGHWERTYLLKPQ\n>q2\nMSTNPKPQRKTKRNTNRRPQDVKFPGG\n"
T = ">t1\nMKILSAGHWERTLLKPQ\n>t2\nMSNPKPQRKTRRNTNRRPQDVKFPG\n"


@pytest.fixture()
def fastas(tmp_path):
    (tmp_path / "a.fa").write_text(Q)
    (tmp_path / "b.fa").write_text(T)
    return tmp_path / "a.fa", tmp_path / "b.fa"


def test_shipped_model_loads_and_aligns_identical_sequences_exactly():
    aligner = Aligner.load()
    assert default_model_path().is_dir()
    seq = "MKVLAAGHWERTYLLKPQDESTRIVNG"
    res = aligner.align(seq, seq)
    np.testing.assert_array_equal(res.alignment.pairs, np.stack([np.arange(len(seq))] * 2, 1))


def test_identity_weight_option_places_a_deletion_between_close_variants(tmp_path):
    """--identity-weight reaches the aligner: a 300-residue protein and its copy without residue
    150 get the CIGAR of that deletion with the shipped model's tie-break (0.05 for pairs at least
    90% identical) and with --identity-weight 0.05, not with --identity-weight 0
    (benchmarks/single_indels.py); --identity-min 1 is above this pair's plain decoding, which the
    tie-break then only moves gaps of (--identity-move-min, 0.7 for the shipped model), unless
    --identity-move-min 0."""
    rng = np.random.default_rng(300 * 1000 + 150)
    a = "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), 300))
    (tmp_path / "a.fa").write_text(f">a\n{a}\n")
    (tmp_path / "b.fa").write_text(f">b\n{a[:150] + a[151:]}\n")
    cigars = []
    runs = ([], ["--identity-weight", "0"], ["--identity-weight", "0.05", "--identity-min", "0"],
            ["--identity-min", "1", "--identity-move-min", "0"], ["--identity-min", "1"])
    for k, extra in enumerate(runs):
        out = tmp_path / f"x{k}.tsv"
        r = CliRunner().invoke(cli, ["align", str(tmp_path / "a.fa"), str(tmp_path / "b.fa"), "-o", str(out),
                                     "--min-confidence", "0", "--no-progress", *extra])
        assert r.exit_code == 0, r.output
        header, row = out.read_text().splitlines()[:2]
        cigars.append(row.split("\t")[header.split("\t").index("cigar")])
    assert cigars[0] == cigars[2] == cigars[4] == "150M1I149M" != cigars[1] and cigars[3] == cigars[1]
    r = CliRunner().invoke(cli, ["align", str(tmp_path / "a.fa"), str(tmp_path / "b.fa"), "--identity-weight", "-1"])
    assert r.exit_code == 2 and "--identity-weight" in r.output


def test_identity_gaps_option_reaches_the_aligner(tmp_path):
    """--identity-gaps: on the golden DNA pair (94% identical) the DNA model's default ("move")
    keeps its plain decoding's five gap runs, and "add" opens more (a gap pair around a chance
    identity instead of two mismatches)."""
    from tests.test_golden import GOLDEN

    gaps = {}
    for choice in (None, "add", "move"):
        out = tmp_path / f"{choice}.tsv"
        extra = [] if choice is None else ["--identity-gaps", choice]
        r = CliRunner().invoke(cli, ["align", str(GOLDEN / "dna_query.fasta"), str(GOLDEN / "dna_target.fasta"),
                                     "-o", str(out), "--min-confidence", "0", "--no-progress", *extra])
        assert r.exit_code == 0, r.output
        rows = [line.split("\t") for line in out.read_text().splitlines()]
        row = next(row for row in rows[1:] if row[rows[0].index("query")] == "dna_a")
        cig = row[rows[0].index("cigar")]
        gaps[choice] = sum(op in "ID" for op in cig if not op.isdigit())
    assert gaps[None] == gaps["move"] == 5 < gaps["add"], gaps
    r = CliRunner().invoke(cli, ["align", "--example", "--identity-gaps", "shift"])
    assert r.exit_code == 2 and "--identity-gaps" in r.output
    r = CliRunner().invoke(cli, ["align", "--example", "--identity-move-min", "1.5"])
    assert r.exit_code == 2 and "--identity-move-min" in r.output


def test_pairs_longer_than_the_largest_bucket_align_in_input_order(monkeypatch):
    """A pair past 1024 residues is aligned alone at a multiple of 512, between the others,
    and a sequence past MAX_LENGTH gets an error naming the pair."""
    import sinkalign.align.aligner as A

    rng = np.random.default_rng(0)
    long_q = "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), 1100))
    long_t = long_q[:500] + long_q[503:]  # a 3-residue deletion
    aligner = Aligner.load()
    items = [("s1", "MKVLAAGHWER", "s2", "MKVLAGHWER"), ("L1", long_q, "L2", long_t),
             ("s3", "PQDESTRIV", "s4", "PQDESTRIV")]
    results = list(aligner.align_many(items, batch_size=2))
    assert [(r.query_id, r.target_id) for r in results] == [("s1", "s2"), ("L1", "L2"), ("s3", "s4")]
    expect = np.array([(i, i) for i in range(500)] + [(i, i - 3) for i in range(503, 1100)])
    got = {tuple(x) for x in results[1].alignment.pairs.tolist()}
    assert len(got & {tuple(x) for x in expect.tolist()}) >= 0.99 * len(expect)
    assert A.padded_length(1100) == 1536 and A.padded_length(1024) == 1024 and A.padded_length(300) == 384
    monkeypatch.setattr(A, "MAX_LENGTH", 1050)
    with pytest.raises(ValueError, match="pair L1 / L2: a sequence of 1100 residues is longer than the 1050"):
        list(aligner.align_many(items))


def test_nucleotide_inputs_get_the_shipped_dna_model(tmp_path, caplog):
    """With no --model, two nucleotide FASTA files are aligned by the DNA model, two protein
    files by the protein model, and DNA against protein is an error naming both records; with
    an explicit --model the mismatch is a warning and the CLI result is the library's."""
    rng = np.random.default_rng(1)
    a = "".join(rng.choice(list("ACGT"), 90))
    b = a[:40] + a[44:]  # a 4-base deletion
    (tmp_path / "a.fa").write_text(f">a\n{a}\n")
    (tmp_path / "b.fa").write_text(f">b\n{b}\n")
    (tmp_path / "p.fa").write_text(">p\nMKVLAAGHWERTYLLKPQ\n")
    dna = Aligner.load(default_model_path("dna"))
    assert dna.config.alphabet == "dna" and dna.calibration is not None
    out = tmp_path / "x.tsv"
    r = CliRunner().invoke(cli, ["align", str(tmp_path / "a.fa"), str(tmp_path / "b.fa"), "-o", str(out),
                                 "--format", "tsv", "--no-progress"])
    assert r.exit_code == 0, r.output
    row = out.read_text().splitlines()[1].split("\t")
    expect = dna.align(a, b).alignment
    from sinkalign.align.decode import cigar
    from sinkalign.alignment import format_number

    assert row[9] == cigar(expect.pairs, len(a), len(b))
    assert re.fullmatch(r"(\d+)M4I(\d+)M", row[9]) and len(expect.pairs) == 86  # the deletion, placed
    assert row[10] == format_number(expect.mean_posterior)  # the TSV's own rounding
    r = CliRunner().invoke(cli, ["align", str(tmp_path / "a.fa"), str(tmp_path / "p.fa"), "-o", str(out),
                                 "--overwrite", "--no-progress"])
    assert r.exit_code == 1
    assert (f"DNA against protein: record 'a' (#1) of {tmp_path / 'a.fa'} is DNA, record 'p' (#1) of "
            f"{tmp_path / 'p.fa'} is protein") in r.output
    assert "give --model" in r.output and row == out.read_text().splitlines()[1].split("\t")  # output kept
    with caplog.at_level("WARNING", logger="sinkalign.pipelines.align"):
        r = CliRunner().invoke(cli, ["align", str(tmp_path / "a.fa"), str(tmp_path / "p.fa"), "-o", str(out),
                                     "--overwrite", "--model", str(default_model_path("protein")), "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "DNA against protein" in caplog.text and "aligning with the given protein model anyway" in caplog.text
    # a DNA record read as protein keeps its residues: every nucleotide code is a protein letter
    from sinkalign.io.fasta import AMBIGUOUS, STANDARD

    assert STANDARD["dna"] | AMBIGUOUS["dna"] <= STANDARD["protein"] | AMBIGUOUS["protein"]
    prot = Aligner.load(default_model_path("protein")).align(a, "MKVLAAGHWERTYLLKPQ").alignment
    row = out.read_text().splitlines()[1].split("\t")
    if len(prot.pairs):
        assert row[9] == cigar(prot.pairs, len(a), 18, local=True)  # TSV CIGARs clip unaligned ends
        assert row[10] == format_number(prot.mean_posterior)
    else:  # the learned model finds no column it trusts between unrelated DNA and protein
        assert row[9] == "*" and row[10] == "NA"
    with pytest.raises(ValueError, match="alphabet='rna' is not one of"):
        default_model_path("rna")


def test_all_vs_all_tsv_in_input_order(fastas, tmp_path):
    out = tmp_path / "x.tsv"
    r = CliRunner().invoke(cli, ["align", str(fastas[0]), str(fastas[1]), "-o", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    assert rows[0][:3] == ["query", "target", "score"]
    assert [(x[0], x[1]) for x in rows[1:]] == [("q1", "t1"), ("q1", "t2"), ("q2", "t1"), ("q2", "t2")]
    # homologous pairs score higher than the swapped ones
    score = {(x[0], x[1]): float(x[2]) for x in rows[1:]}
    assert score["q1", "t1"] > score["q1", "t2"] and score["q2", "t2"] > score["q2", "t1"]


@pytest.mark.parametrize("fmt", ["fasta", "sam", "bam", "stockholm", "json", "text"])
def test_formats_zip(fastas, tmp_path, fmt):
    out = tmp_path / f"x.{fmt}"
    plans = tmp_path / "plans.npz"
    r = CliRunner().invoke(cli, ["align", str(fastas[0]), str(fastas[1]), "--pairing", "zip", "--format", fmt,
                                 "-o", str(out), "--plan-out", str(plans), "--no-progress"])
    assert r.exit_code == 0, r.output
    if fmt == "fasta":
        recs = list(SeqIO.parse(out, "fasta"))
        assert [x.id for x in recs] == ["q1", "t1", "q2", "t2"]
        assert str(recs[0].seq).replace("-", "") == "MKVLAAGHWERTYLLKPQ"
        assert len(recs[0].seq) == len(recs[1].seq)
    elif fmt in ("sam", "bam"):
        with pysam.AlignmentFile(str(out), "r" if fmt == "sam" else "rb") as fh:
            assert fh.references == ("t1", "t2")
            assert [a.query_name for a in fh] == ["q1", "q2"]
    elif fmt == "json":
        objs = [json.loads(line) for line in out.read_text().splitlines()]
        assert [o["query_id"] for o in objs] == ["q1", "q2"]
    elif fmt == "text":
        heads = [line for line in out.read_text().splitlines() if line.startswith("# ")]
        assert [h.split()[1] + h.split()[4] for h in heads] == ["q1t1", "q2t2"]
    else:
        assert out.read_text().count("# STOCKHOLM 1.0") == 2
    with np.load(plans) as z:
        shapes = sorted(z[k].shape for k in z.files)
    assert shapes == [(19, 18), (28, 26)]


@pytest.mark.parametrize("name, fmt", [("hits.sam", "sam"), ("hits.bam", "bam"), ("hits.m8", "blast6"),
                                       ("hits.paf.gz", "paf"), ("hits.out", "tsv")])
def test_the_format_follows_the_output_name(fastas, tmp_path, name, fmt):
    """Without --format the -o file's extension names the format (a text file named .bam
    would fail in samtools); a name that says nothing gives the default, TSV."""
    out = tmp_path / name
    r = CliRunner().invoke(cli, ["align", str(fastas[0]), str(fastas[1]), "--pairing", "zip", "-o", str(out),
                                 "--no-progress"])
    assert r.exit_code == 0, r.output
    if fmt in ("sam", "bam"):
        with pysam.AlignmentFile(str(out), "r" if fmt == "sam" else "rb") as fh:
            assert [a.query_name for a in fh] == ["q1", "q2"]
        return
    import gzip

    text = (gzip.open(out, "rt") if name.endswith(".gz") else open(out)).read().splitlines()
    if fmt == "tsv":
        assert text[0].startswith("query\ttarget\tscore") and len(text) == 3
    else:  # blast6 and paf: a line per pair, query first, no header
        assert [line.split("\t")[0] for line in text] == ["q1", "q2"]
        assert len(text[0].split("\t")) == (12 if fmt == "blast6" else 18)  # 12, tp, cg, AS, ZS, XP, ZE


def test_a_format_the_output_name_contradicts_is_refused(fastas, tmp_path):
    out = tmp_path / "hits.bam"
    r = CliRunner().invoke(cli, ["align", str(fastas[0]), str(fastas[1]), "--format", "tsv", "-o", str(out)])
    assert r.exit_code == 1
    assert (f"the output {out} is named as a bam file, and the format asked for is tsv: leave the format out or "
            "give bam (--format bam, fmt='bam')") in " ".join(r.output.split())
    assert not out.exists()


def test_example_runs():
    r = CliRunner().invoke(cli, ["align", "--example", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "HBA_HUMAN\tHBB_HUMAN" in r.output and "MYG_HUMAN\tHBB_HUMAN" in r.output


def test_align_errors(fastas, tmp_path):
    runner = CliRunner()
    (tmp_path / "one.fa").write_text(">x\nMKV\n")
    r = runner.invoke(cli, ["align", str(fastas[0]), str(tmp_path / "one.fa"), "--pairing", "zip"])
    assert r.exit_code == 1 and "needs equal record counts" in r.output
    r = runner.invoke(cli, ["align", str(fastas[0]), str(fastas[1]), "--format", "bam"])
    assert r.exit_code == 2 and "--format bam needs -o FILE" in r.output
    (tmp_path / "bad.fa").write_text(">ok\nMKV\n>bad\nMK1V\n")
    r = runner.invoke(cli, ["align", str(tmp_path / "bad.fa"), str(fastas[1]), "--no-progress"])
    assert r.exit_code == 1 and "bad.fa" in r.output and "bad" in r.output and "position 2" in r.output
    r = runner.invoke(cli, ["align", "--example", str(fastas[0])])
    assert r.exit_code == 2 and "--example takes no FASTA arguments" in r.output
    r = runner.invoke(cli, ["align", str(fastas[0]), str(fastas[1]), "--model", str(tmp_path)])
    assert r.exit_code == 1 and "is not an aligner checkpoint" in r.output
    out = tmp_path / "keep.tsv"
    out.write_text("previous\n")
    r = runner.invoke(cli, ["align", str(fastas[0]), str(fastas[1]), "-o", str(out), "--no-progress"])
    assert r.exit_code == 1 and f"output {out} already exists" in r.output and "--overwrite" in r.output
    assert out.read_text() == "previous\n"  # never clobbered unless asked
    r = runner.invoke(cli, ["align", str(tmp_path / "bad.fa"), str(fastas[1]), "-o", str(out), "--overwrite",
                            "--no-progress"])
    assert r.exit_code == 1 and out.read_text() == "previous\n"  # nothing half-written
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".keep.tsv")]  # no temporary left


@pytest.mark.parametrize("model", ["learned", "blosum", "dna"])
def test_every_shipped_model_aligns_the_files_the_same_either_way(model, tmp_path):
    """`sinkalign align B A` reports what `sinkalign align A B` does, query and target exchanged:
    the same score, identity, aligned length, spans (swapped), confidence and E-value."""
    from pathlib import Path

    golden = Path(__file__).resolve().parent / "golden"
    examples = Path(__file__).resolve().parents[1] / "sinkalign" / "data" / "examples"
    a, b = ((golden / "dna_query.fasta", golden / "dna_target.fasta") if model == "dna"
            else (examples / "globins_query.fasta", examples / "globins_target.fasta"))
    rows = []
    for first, second in ((a, b), (b, a)):
        out = tmp_path / f"{first.stem}.tsv"
        r = CliRunner().invoke(cli, ["align", str(first), str(second), "--model", model, "-o", str(out)])
        assert r.exit_code == 0, r.output
        lines = out.read_text().splitlines()
        header = lines[0].split("\t")
        rows.append({(d["query"], d["target"]): d for d in (dict(zip(header, line.split("\t"))) for line in lines[1:])})
    forward, backward = rows
    assert len(forward) == len(backward) >= 2
    for (q, t), row in forward.items():
        other = backward[(t, q)]
        for column in ("score", "identity", "aligned_length", "mean_posterior", "evalue"):
            assert row[column] == other[column], (q, t, column)
        assert (row["query_start"], row["query_end"]) == (other["target_start"], other["target_end"])
        assert (row["target_start"], row["target_end"]) == (other["query_start"], other["query_end"])


def test_evaluate_against_needleman_wunsch(tmp_path):
    from tests.aligner_fixtures import write_family

    sto = write_family(tmp_path / "fam.sto", "famX", 5, 50, seed=3)
    out = tmp_path / "eval.json"
    r = CliRunner().invoke(cli, ["evaluate", "--reference", str(sto), "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    methods = data["sets"]["fam.sto"]["methods"]
    assert set(methods) == {"sinkalign", "nw", "sw", "pairhmm"}
    for m in methods.values():
        assert 0.0 <= m["micro"]["f1"] <= 1.0 and m["pairs_per_s"] > 0
        assert m["bins"][-1]["bin"] == "all" and m["bins"][-1]["n"] == 10
    assert methods["nw"]["micro"]["f1"] > 0.5  # a real alignment problem, not noise


def test_evaluate_cli_keeps_existing_files_and_its_reference(tmp_path):
    from tests.aligner_fixtures import write_family

    sto = write_family(tmp_path / "fam.sto", "famX", 4, 40, seed=3)
    given = sto.read_text()
    run = ["evaluate", "--reference", str(sto), "--methods", "nw", "--max-pairs", "2"]
    r = CliRunner().invoke(cli, [*run, "--json", str(sto)])  # it replaced the reference with its JSON
    assert r.exit_code == 1 and "is also an input" in r.output and sto.read_text() == given
    out = tmp_path / "keep.json"
    out.write_text("mine\n")
    r = CliRunner().invoke(cli, [*run, "--json", str(out)])
    assert r.exit_code == 1 and "already exists" in r.output and out.read_text() == "mine\n"
    r = CliRunner().invoke(cli, [*run, "--json", str(out), "--overwrite"])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["methods"] == ["nw"]
    r = CliRunner().invoke(cli, [*run, "--json", "-"])  # click 8.2+: stdout and stderr kept apart
    assert r.exit_code == 0 and json.loads(r.stdout)["methods"] == ["nw"] and "pooled F1" in r.stderr
    r = CliRunner().invoke(cli, [*run[:-4], "--methods", " , "])
    assert r.exit_code == 2 and "--methods" in r.output and "name at least one" in r.output


def test_evaluate_reads_a_reference_from_a_pipe(tmp_path):
    """``--reference <(...)``: the pipe is read once, through a copy (the format was sniffed on one
    open and the pairs read on another, which found the pipe empty), and scores as the file."""
    import os
    import shlex
    import subprocess
    import sys

    from tests.aligner_fixtures import write_family

    sto = write_family(tmp_path / "fam.sto", "famX", 4, 40, seed=3)
    run = ["--methods", "nw", "--json"]
    r = CliRunner().invoke(cli, ["evaluate", "--reference", str(sto), *run, str(tmp_path / "file.json")])
    assert r.exit_code == 0, r.output
    code = "import sys; sys.argv[0] = 'sinkalign'; from sinkalign.cli.main import main; main()"  # the console script
    script = (f"{shlex.join([sys.executable, '-c', code, 'evaluate', '--reference'])} <(cat {shlex.quote(str(sto))}) "
              f"{shlex.join([*run, str(tmp_path / 'pipe.json')])}")
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert res.returncode == 0, res.stdout + res.stderr
    (file_set,) = json.loads((tmp_path / "file.json").read_text())["sets"].values()
    (pipe_set,) = json.loads((tmp_path / "pipe.json").read_text())["sets"].values()
    assert pipe_set["n_pairs"] == file_set["n_pairs"] == 6
    assert pipe_set["methods"]["nw"]["micro"] == file_set["methods"]["nw"]["micro"]


def test_model_by_shipped_name(tmp_path):
    """--model takes a shipped model's name; a name that is neither a path nor shipped is one line."""
    from click.testing import CliRunner

    from sinkalign.align.aligner import SHIPPED_MODELS, resolve_model
    from sinkalign.cli.main import cli

    for name in SHIPPED_MODELS:
        assert (resolve_model(name) / "state.json").is_file(), name
    out = tmp_path / "l.tsv"
    res = CliRunner().invoke(cli, ["align", "--example", "--model", "learned", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert [r.split("\t")[:2] for r in out.read_text().splitlines()[1:]] == [["HBA_HUMAN", "HBB_HUMAN"],
                                                                            ["MYG_HUMAN", "HBB_HUMAN"]]
    res = CliRunner().invoke(cli, ["align", "--example", "--model", "nonesuch"])
    assert res.exit_code == 1
    assert res.output.startswith("Error: model nonesuch does not exist") and "'learned'" in res.output


def test_align_turns_only_user_errors_into_one_line(monkeypatch, tmp_path):
    """A SinkalignError or a file the OS refuses is one 'Error:' line; any other exception is a
    bug and keeps its traceback (the command does not swallow plain ValueError)."""
    import sinkalign.pipelines.align as P
    from sinkalign.errors import InputError

    fa = tmp_path / "a.fa"
    fa.write_text(">a\nMKV\n")
    for exc, one_line in ((InputError("bad record"), True), (PermissionError(13, "Permission denied", "out.tsv"), True),
                          (ValueError("internal shape mismatch"), False)):
        def boom(*args, exc=exc, **kwargs):
            raise exc

        monkeypatch.setattr(P, "align_fasta", boom)
        res = CliRunner().invoke(cli, ["align", str(fa), str(fa)])
        assert res.exit_code == 1
        if one_line:
            assert res.output.startswith("Error: ") and res.output.count("\n") == 1, res.output
        else:
            assert isinstance(res.exception, ValueError) and "Error:" not in res.output


def test_threads_option_sets_the_engines_threads(fastas, tmp_path):
    """--threads N runs the numpy engine on N threads (the same output as the default), and is
    refused with a cluster, whose workers use their own."""
    from sinkalign.pipelines import runner as pipeline

    outs = {}
    for threads in (None, 1, 3):
        outs[threads] = tmp_path / f"t{threads}.tsv"
        extra = [] if threads is None else ["--threads", str(threads)]
        r = CliRunner().invoke(cli, ["align", str(fastas[0]), str(fastas[1]), *extra, "-o", str(outs[threads]),
                                     "--no-progress"])
        assert r.exit_code == 0, r.output
    assert outs[1].read_text() == outs[None].read_text() == outs[3].read_text()
    loaded = {spec.threads: aligner for spec, (_, aligner) in pipeline._ALIGNERS.items() if spec.path is None}
    assert loaded[1].workers == 1 and loaded[3].workers == 3
    r = CliRunner().invoke(cli, ["align", str(fastas[0]), str(fastas[1]), "--threads", "2", "--workers", "2"])
    assert r.exit_code == 2 and "--threads is for a local run" in r.output
    r = CliRunner().invoke(cli, ["align", str(fastas[0]), str(fastas[1]), "--threads", "0"])
    assert r.exit_code == 2


def test_engine_option(fastas, tmp_path):
    """--engine numpy and --engine jax give the same alignments (the scores differ in the last
    digits: float64 against float32 plans); --engine numpy on a model it cannot run is one
    'Error:' line naming the reason; a bad choice is Click's usage error."""
    from sinkalign.align import model as M
    from sinkalign.align.checkpoints import export_model
    from sinkalign.align.embed import get_embedder

    outs = {}
    for engine in ("numpy", "jax", "auto"):
        outs[engine] = tmp_path / f"{engine}.tsv"
        r = CliRunner().invoke(cli, ["align", str(fastas[0]), str(fastas[1]), "--engine", engine, "-o",
                                     str(outs[engine]), "--no-progress"])
        assert r.exit_code == 0, r.output
    rows = {e: [line.split("\t") for line in p.read_text().splitlines()] for e, p in outs.items()}
    assert rows["auto"] == rows["numpy"]
    for a, b in zip(rows["numpy"][1:], rows["jax"][1:]):
        assert a[:2] + a[3:10] == b[:2] + b[3:10]  # ids, identity, spans, CIGAR
        assert float(a[2]) == pytest.approx(float(b[2]), rel=1e-5)
    emb = get_embedder("builtin", alphabet="protein")
    config = M.AlignerConfig(embedder=emb.config(), feature_dim=emb.dim)
    export_model(tmp_path / "feat", M.init_params(config), config, provenance="test: embedder features")
    r = CliRunner().invoke(cli, ["align", str(fastas[0]), str(fastas[1]), "--model", str(tmp_path / "feat"),
                                 "--engine", "numpy", "--no-progress"])
    assert r.exit_code == 1
    assert r.output.startswith("Error: engine='numpy' cannot run this model: the model has embedder features")
    r = CliRunner().invoke(cli, ["align", "--example", "--engine", "fast"])
    assert r.exit_code == 2 and "'fast' is not one of" in r.output


def test_min_confidence_help_names_the_shipped_protein_threshold():
    """The help's figure is the shipped model's own threshold, not a copy that can go stale."""
    out = CliRunner().invoke(cli, ["align", "--help"], terminal_width=1000).output
    stated = re.search(r"default: the model's own threshold, ([0-9.]+) for the shipped protein model, ([0-9.]+) for "
                       r"the shipped DNA model", out)
    assert stated is not None, out
    assert float(stated.group(1)) == Aligner.load("learned").min_confidence
    assert float(stated.group(2)) == Aligner.load("dna").min_confidence


def test_band_option_aligns_on_corridors_or_densely_and_keeps_plans(fastas, tmp_path):
    from sinkalign.align.aligner import AUTO_BAND_CELLS, BOX_MARGIN, LONG_BAND, LOPSIDED_RATIO

    runner = CliRunner()
    dense, banded = tmp_path / "dense.tsv", tmp_path / "band.tsv"
    r = runner.invoke(cli, ["align", "--example", "-o", str(dense), "--no-progress"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["align", "--example", "--band", "200", "-o", str(banded), "--no-progress"])
    assert r.exit_code == 0, r.output
    # the globins (141-154 residues) lie inside a corridor of 200: the dense alignments, the same
    # CIGARs and spans (the E-values and scores agree to rounding)
    def columns(path):
        rows = [line.split("\t") for line in path.read_text().splitlines()]
        head = rows[0]
        keep = [head.index(k) for k in ("query", "target", "query_start", "query_end", "cigar")]
        return [[row[k] for k in keep] for row in rows[1:]]

    assert columns(banded) == columns(dense) and len(columns(dense)) == 2
    r = runner.invoke(cli, ["align", "--example", "--band", "dense", "-o", str(tmp_path / "d.tsv"), "--no-progress"])
    assert r.exit_code == 0 and columns(tmp_path / "d.tsv") == columns(dense)
    # a banded plan is written dense, 0 outside its corridor
    r = runner.invoke(cli, ["align", str(fastas[0]), str(fastas[1]), "--band", "1", "--plan-out",
                            str(tmp_path / "p.npz"), "-o", str(tmp_path / "x.tsv"), "--no-progress"])
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "p.npz") as z:
        plans = [z[k] for k in z.files]
    assert len(plans) == 4 and all((p[:-1, :-1] == 0).any() for p in plans)
    r = runner.invoke(cli, ["align", "--example", "--band", "-3"])
    assert r.exit_code == 2 and "'-3' is not a whole number >= 0 or 'dense'" in r.output
    # the jax engine solves banded pairs as the numpy engine does (on the host)
    r = runner.invoke(cli, ["align", "--example", "--band", "200", "--engine", "jax", "-o", str(tmp_path / "j.tsv"),
                            "--no-progress"])
    assert r.exit_code == 0 and columns(tmp_path / "j.tsv") == columns(banded), r.output
    r = runner.invoke(cli, ["align", "--example", "--band", "4", "--backend", "pallas"])
    assert r.exit_code == 1 and "banded plans need a model the numpy engine runs" in r.output
    help_text = " ".join(runner.invoke(cli, ["align", "--help"]).output.split())
    assert f"other pairs dense up to {round(AUTO_BAND_CELLS ** 0.5)} x {round(AUTO_BAND_CELLS ** 0.5)} residues, a " \
           f"corridor of {LONG_BAND} past it" in help_text
    assert LOPSIDED_RATIO == 2 and "a pair with one side at least twice the other" in help_text
    assert f"Smith-Waterman hit, {round(100 * BOX_MARGIN)}% of the shorter side wider each way" in help_text


def test_sigterm_inside_a_gc_callback_del_or_import_is_sent_again_not_dropped(monkeypatch, tmp_path):
    """Python runs the SIGTERM handler between any two instructions, also inside a
    garbage-collector callback (JAX registers one) or a __del__, which print and drop its
    SystemExit, and inside an import, whose module may catch everything (parasail's does): there
    the handler sends the signal again shortly instead (handled once that code is left);
    anywhere else it raises SystemExit(143)."""
    import gc
    import signal
    import sys
    import time

    from sinkalign.cli import main as main_module

    sent = []
    monkeypatch.setattr(main_module.os, "kill", lambda pid, signum: sent.append(signum))
    raised = []

    def handle_here():
        try:
            main_module._terminated(signal.SIGTERM, sys._getframe(1))
        except SystemExit as exc:
            raised.append(exc.code)

    def sent_again() -> bool:
        deadline = time.monotonic() + 5
        while not sent and time.monotonic() < deadline:
            time.sleep(0.005)
        return sent == [signal.SIGTERM]

    def callback(phase, info):
        if phase == "start":  # once per collection
            handle_here()

    gc.callbacks.append(callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(callback)
    assert not raised and sent_again()

    class Finalised:
        def __del__(self):
            handle_here()

    sent.clear()
    Finalised()  # collected at once: its __del__ runs here
    assert not raised and sent_again()

    sent.clear()
    (tmp_path / "signalled_module.py").write_text("HANDLE()  # the handler, run while this module is imported\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import builtins

    monkeypatch.setattr(builtins, "HANDLE", handle_here, raising=False)
    __import__("signalled_module")
    assert not raised and sent_again()

    with pytest.raises(SystemExit) as exc:
        main_module._terminated(signal.SIGTERM, sys._getframe())
    assert exc.value.code == 143


@pytest.mark.parametrize(("signame", "status"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_sigterm_removes_the_half_written_output(tmp_path, signame, status):
    """What a batch scheduler sends (SIGTERM), or Ctrl-C (SIGINT): the run ends with the
    shell's status (143, 130; Ctrl-C gave click's 1) and leaves neither the output nor its
    temporary file, and an existing output is kept."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.cli_errors import terminal_signals

    rng = np.random.default_rng(0)
    seqs = tmp_path / "seqs.fa"
    seqs.write_text("".join(f">s{k}\n{''.join(rng.choice(list('ACDEFGHIKLMNPQRSTVWY'), 300))}\n" for k in range(80)))
    out = tmp_path / "out.tsv"
    out.write_text("mine\n")
    code = "import sys; sys.argv[0] = 'sinkalign'; from sinkalign.cli.main import main; main()"  # the console script
    proc = subprocess.Popen([sys.executable, "-c", code, "align", str(seqs), str(seqs), "-o", str(out), "--overwrite",
                             "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=terminal_signals, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    deadline = time.monotonic() + 240
    while not list(tmp_path.glob(".out.tsv.*.tmp")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before its output was opened: give it more pairs"
    proc.send_signal(getattr(signal, signame))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err.decode()[-2000:]
    assert not list(tmp_path.glob(".out.tsv.*")) and out.read_text() == "mine\n"


def test_evaluate_baselines_score_dna_with_ambiguity_codes_and_rna_as_dna(tmp_path):
    """The classical baselines of `sinkalign evaluate` read a DNA reference as DNA whatever its
    letters (an IUPAC code made it protein: BLOSUM62 on nucleotides) and RNA's U as T (it
    failed); the same pairs with a code or as RNA score as the plain DNA does."""
    from sinkalign.align.evaluate import _baseline_pair, evaluate_sets, load_reference_set

    rng = np.random.default_rng(0)
    rows = ["".join(rng.choice(list("ACGT"), 60))]
    for _ in range(3):
        row = list(rows[0])
        for k in rng.choice(60, 8, replace=False):
            row[k] = "ACGT"[("ACGT".index(row[k]) + 1) % 4]
        rows.append("".join(row[:20]) + "---" + "".join(row[23:]))
    texts = {"plain": rows, "iupac": [rows[0][:10] + "R" + rows[0][11:]] + rows[1:],
             "rna": [r.replace("T", "U") for r in rows]}
    scores = {}
    for name, rs in texts.items():
        path = tmp_path / f"{name}.sto"
        path.write_text("# STOCKHOLM 1.0\n" + "".join(f"s{k} {r}\n" for k, r in enumerate(rs)) + "//\n")
        pairs = load_reference_set(path)
        dna, q, t = _baseline_pair(pairs[0])
        assert dna and set(q + t) <= set("ACGTN")
        got = evaluate_sets({name: pairs}, methods=("nw",), n_boot=10)["sets"][name]["methods"]["nw"]["micro"]
        scores[name] = got["f1"]
    assert scores["rna"] == scores["plain"]
    assert abs(scores["iupac"] - scores["plain"]) < 0.02  # one letter unknown, not a protein scoring


def test_evaluate_says_why_a_reference_set_is_empty(tmp_path):
    from sinkalign.align.evaluate import load_reference_set
    from sinkalign.errors import InputError

    one = tmp_path / "one.sto"
    one.write_text("# STOCKHOLM 1.0\nHBB_HUMAN VHLTPEEKSAVTALWGKV\n//\n")
    with pytest.raises(InputError, match="one.sto: no reference pairs: its alignments hold fewer than two rows each"):
        load_reference_set(one)
    low = tmp_path / "low.tsv"
    low.write_text("a\tb\t0.3\t0.3\t1.0\tMKVL\tMKVL\t" + "1" * 4 + "\n")
    with pytest.raises(InputError, match=r"low.tsv: no reference pairs: no pair in it reaches --min-tm 0.5"):
        load_reference_set(low)


def test_evaluate_names_sets_apart_reads_by_content_and_writes_valid_json(tmp_path, monkeypatch):
    """An evaluate audit: two --reference files of one name were one set (the second replaced
    the first); a bench1.0 file named .fa was read as plain FASTA (its lower-case untrusted
    residues scored) though `shards build` reads it by content; a set whose pairs align nothing
    wrote NaN, which is no JSON; --methods was checked after the model was loaded, and a method
    named twice ran twice; a folder of sub-folders was said to hold one-row alignments."""
    from sinkalign.align import evaluate as E

    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    Path("x/fam.sto").write_text("# STOCKHOLM 1.0\na ACDEFGHIKL\nb ACDEFGHIKL\n//\n")
    Path("y/fam.sto").write_text("# STOCKHOLM 1.0\na ACDEFGHIKL\nb ACDEYGHIKL\nc ACDEYGHIKL\n//\n")
    run = ["evaluate", "--methods", "nw,NW", "--json", "-"]
    r = CliRunner().invoke(cli, [*run, "--reference", "x/fam.sto", "--reference", "y/fam.sto"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["methods"] == ["nw"]
    assert {k: v["n_pairs"] for k, v in data["sets"].items()} == {"x/fam.sto": 1, "y/fam.sto": 3}
    r = CliRunner().invoke(cli, [*run, "--reference", "x/fam.sto", "--reference", "x/../x/fam.sto"])
    assert r.exit_code == 2 and "x/../x/fam.sto is given twice (as x/fam.sto before)" in r.output
    r = CliRunner().invoke(cli, ["evaluate", "--reference", "x/fam.sto", "--methods", "nw,foo", "--model", "nowhere"])
    assert r.exit_code == 2 and "unknown 'foo'; choose from sinkalign,nw,sw,pairhmm" in r.output  # not the model

    # bench1.0 case (upper = trusted core) by content, whatever the suffix
    bench = ">a\nACDEFghikLMNPQ\n>b\nACDEFghikLMNPQ\n"
    Path("p1").write_text(bench)
    Path("p1.fa").write_text(bench)
    (named,), (bare,) = E.load_reference_set("p1.fa"), E.load_reference_set("p1")
    assert named.query_core is not None and named.query_core.tolist() == bare.query_core.tolist()
    assert int(np.sum(named.query_core)) == 10
    Path("s.fa").write_text(Path("y/fam.sto").read_text())  # a Stockholm file under a FASTA name
    assert len(E.load_reference_set("s.fa")) == 3

    Path("none.sto").write_text("# STOCKHOLM 1.0\na ACDEF-----\nb -----GHIKL\n//\n")  # aligns no pair
    r = CliRunner().invoke(cli, ["evaluate", "--reference", "none.sto", "--methods", "nw", "--json", "out.json"])
    assert r.exit_code == 0, r.output
    text = Path("out.json").read_text()
    assert "NaN" not in text and json.loads(text)["sets"]["none.sto"]["mean_identity"] is None

    (tmp_path / "outer" / "prefab").mkdir(parents=True)
    with pytest.raises(InputError, match=r"no alignment file in it \(sub-folders are not read; give one of them, "
                                         r"e.g. .*outer/prefab\)"):
        E.load_reference_set(tmp_path / "outer")
    Path("junk.sto").write_text("this is not an alignment\n")
    with pytest.raises(SinkalignError, match=r"junk.sto") as err:
        E.load_reference_set("junk.sto")
    assert "TM-align" not in str(err.value) and "tab-separated" not in str(err.value)
    Path("tm.txt").write_text("pdb1\tpdb2\ttm1\ttm2\trmsd\tseq1\tseq2\tstate\n"
                              "1abc\t2def\t0.8\t0.7\t1.2\tACDEFGHIKL\tACDEFGHIKL\t1111111111\n")
    assert E._reference_kind(Path("tm.txt")) == "tmalign"  # a TM-align table under another name
