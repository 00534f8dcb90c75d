"""`sinkalign msa` end to end: formats read back by Biopython, files kept, bad input named."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np
import pytest
from Bio import AlignIO, Phylo
from click.testing import CliRunner

from sinkalign.cli.main import cli

FAMILY = (">a first\nMKVLAAGHWERTYLLKPQDESTRIVNG\n>b\nMKILSAGHWERTLLKPQDESTRIVNG\n"
          ">c\nMSTNPKPQRKTKRNTNRRPQDVKFPGG\n>d\nMKVLAGHWERTYLLKPQDSTRIVNGA\n")
DNA = ">x\nACGTACGTTAGCTAGGCTAACG\n>y\nACGTACGATAGCTAGCTAACG\n>z\nACGTTCGTTAGCTAGGCTAAC\n"


@pytest.fixture()
def family(tmp_path):
    path = tmp_path / "family.fa"
    path.write_text(FAMILY)
    return path


def _run(*args, input=None):
    return CliRunner().invoke(cli, list(map(str, args)), input=input, catch_exceptions=False)


def _ungapped(aln) -> dict[str, str]:
    return {rec.id: str(rec.seq).replace("-", "") for rec in aln}


@pytest.mark.parametrize("fmt, bio", [("fasta", "fasta"), ("clustal", "clustal"), ("stockholm", "stockholm"),
                                      ("phylip", "phylip-relaxed")])
def test_every_format_reads_back_with_the_input_residues(family, tmp_path, fmt, bio):
    out = tmp_path / f"out.{fmt}"
    res = _run("msa", family, "-o", out, "--format", fmt)
    assert res.exit_code == 0, res.output
    aln = AlignIO.read(out, bio)
    assert [rec.id for rec in aln] == ["a", "b", "c", "d"]
    assert _ungapped(aln) == {"a": "MKVLAAGHWERTYLLKPQDESTRIVNG", "b": "MKILSAGHWERTLLKPQDESTRIVNG",
                              "c": "MSTNPKPQRKTKRNTNRRPQDVKFPGG", "d": "MKVLAGHWERTYLLKPQDSTRIVNGA"}
    grid = np.array([list(str(rec.seq)) for rec in aln])
    assert not (grid == "-").all(axis=0).any()  # no all-gap column


def test_aligned_fasta_keeps_each_header_whole(tmp_path):
    """The input's header lines come back as they were, a description whose first word is the id
    (Pfam's '>NAME/1-20 NAME/1-20') included: Biopython's writer alone would drop that word."""
    headers = [">a a copy of a", ">b/1-27 b/1-27", ">c", ">d first of d"]
    seqs = ["MKVLAAGHWERTYLLKPQDESTRIVNG", "MKILSAGHWERTLLKPQDESTRIVNG", "MKVLAGHWERTYLLKPQDSTRIVNGA",
            "MKVLAAGHWERTYLKPQDESTRIVNG"]
    family = tmp_path / "family.fa"
    family.write_text("".join(f"{h}\n{s}\n" for h, s in zip(headers, seqs)))
    res = _run("msa", family, "--format", "fasta")
    assert res.exit_code == 0, res.output
    assert [line for line in res.output.splitlines() if line.startswith(">")] == headers


@pytest.mark.parametrize("name, fmt", [("out.aln", "clustal"), ("out.sto", "stockholm"), ("out.phy", "phylip"),
                                       ("out.afa.gz", "fasta"), ("out", "fasta")])
def test_the_format_follows_the_output_name(family, tmp_path, name, fmt):
    out = tmp_path / name
    res = _run("msa", family, "-o", out)
    assert res.exit_code == 0, res.output
    bio = {"phylip": "phylip-relaxed"}.get(fmt, fmt)
    opened = gzip.open(out, "rt") if name.endswith(".gz") else open(out)
    with opened as handle:
        assert [rec.id for rec in AlignIO.read(handle, bio)] == ["a", "b", "c", "d"]


def test_a_format_the_output_name_contradicts_is_refused(family, tmp_path):
    res = _run("msa", family, "-o", tmp_path / "out.sto", "--format", "clustal")
    assert res.exit_code != 0
    assert ("the output " + str(tmp_path / "out.sto") + " is named as a stockholm file, and the format asked for "
            "is clustal") in " ".join(res.output.split())
    assert not (tmp_path / "out.sto").exists()


def test_the_library_and_the_command_give_the_same_alignment(family, tmp_path):
    from sinkalign.align.aligner import Aligner
    from sinkalign.align.msa import align_multiple

    out = tmp_path / "out.afa"
    assert _run("msa", family, "-o", out, "--consistency", "1").exit_code == 0
    recs = [r.split("\n", 1) for r in FAMILY.strip(">\n").split("\n>")]
    ids, seqs = [r[0].split()[0] for r in recs], [r[1].strip() for r in recs]
    want = align_multiple(ids, seqs, Aligner.load("learned"), consistency=1)
    got = AlignIO.read(out, "fasta")
    assert tuple(str(rec.seq) for rec in got) == want.rows


def test_stdout_stdin_and_the_guide_tree(family, tmp_path):
    tree = tmp_path / "guide.nwk"
    res = _run("msa", "-", "--tree", tree, input=family.read_text())
    assert res.exit_code == 0, res.output
    assert res.output.startswith(">a")
    leaves = {c.name for c in Phylo.read(tree, "newick").get_terminals()}
    assert leaves == {"a", "b", "c", "d"}


def test_existing_files_are_kept_unless_overwrite(family, tmp_path):
    out = tmp_path / "out.afa"
    out.write_text("precious\n")
    res = CliRunner().invoke(cli, ["msa", str(family), "-o", str(out)])
    assert res.exit_code != 0 and "already exists" in res.output and "--overwrite" in res.output
    assert out.read_text() == "precious\n"
    tree = tmp_path / "t.nwk"
    tree.write_text("keep\n")
    res = CliRunner().invoke(cli, ["msa", str(family), "-o", str(tmp_path / "new.afa"), "--tree", str(tree)])
    assert res.exit_code != 0 and "already exists" in res.output
    assert tree.read_text() == "keep\n" and not (tmp_path / "new.afa").exists()
    assert _run("msa", family, "-o", out, "--overwrite").exit_code == 0
    assert out.read_text().startswith(">a")


def test_nucleotides_get_the_dna_model_on_the_strand_given(tmp_path, monkeypatch):
    import sinkalign.align.msa as msa_mod

    path = tmp_path / "dna.fa"
    path.write_text(DNA)
    used = []
    real = msa_mod.aligner_posteriors

    def spy(aligner, seqs, **kw):
        used.append(aligner.config.alphabet)
        return real(aligner, seqs, **kw)

    monkeypatch.setattr(msa_mod, "aligner_posteriors", spy)
    res = _run("msa", path)
    assert res.exit_code == 0, res.output
    assert used == ["dna"]
    rows = [line for line in res.output.splitlines() if not line.startswith(">")]
    assert "".join(rows).replace("-", "") == "ACGTACGTTAGCTAGGCTAACG" "ACGTACGATAGCTAGCTAACG" "ACGTTCGTTAGCTAGGCTAAC"


def test_the_example_aligns_three_globins():
    res = _run("msa", "--example")
    assert res.exit_code == 0, res.output
    assert [line[1:].split()[0] for line in res.output.splitlines() if line.startswith(">")] == [
        "HBA_HUMAN", "MYG_HUMAN", "HBB_HUMAN"]


@pytest.mark.parametrize("text, words", [
    (">a\nMKV\n>a\nMKL\n", ["record 'a'", "duplicate"]),
    (">a\nMKV-L\n", ["record 'a'", "position 3"]),
    (">a\nMKVLLAG\n>b\n" + "ACGT" * 10 + "\n", ["record 'b' is DNA", "record 'a' is protein"]),
])
def test_bad_input_names_file_and_record(tmp_path, text, words):
    path = tmp_path / "bad.fa"
    path.write_text(text)
    res = CliRunner().invoke(cli, ["msa", str(path), "-o", str(tmp_path / "o.afa")])
    assert res.exit_code != 0
    assert "bad.fa" in res.output
    for word in words:
        assert word in res.output
    assert not (tmp_path / "o.afa").exists()


def test_a_model_without_calibration_is_refused(family, tmp_path, monkeypatch):
    from sinkalign.align import aligner as A

    real = A.Aligner.__init__

    def no_calibration(self, *args, **kwargs):
        kwargs["calibration"] = None
        kwargs["significance"] = None
        kwargs["min_confidence"] = 0.0
        real(self, *args, **kwargs)

    monkeypatch.setattr(A.Aligner, "__init__", no_calibration)
    import sinkalign.pipelines.runner as P

    monkeypatch.setattr(P, "_ALIGNERS", {})
    res = CliRunner().invoke(cli, ["msa", str(family), "--model", "blosum"])
    assert res.exit_code != 0 and "calibrat" in res.output


def test_usage_errors(family):
    res = CliRunner().invoke(cli, ["msa"])
    assert res.exit_code == 2 and "FASTA or --example" in res.output
    res = CliRunner().invoke(cli, ["msa", str(family), "--example"])
    assert res.exit_code == 2
    res = CliRunner().invoke(cli, ["msa", str(family), "--consistency", "-1"])
    assert res.exit_code == 2


def test_progress_counts_the_pairwise_alignments(family, tmp_path):
    res = _run("msa", family, "-o", tmp_path / "o.afa", "--progress")
    assert res.exit_code == 0
    assert "6/6" in res.output  # four records: six pairs
    res = _run("msa", family, "-o", tmp_path / "p.afa", "--no-progress")
    assert "pairwise" not in res.output


def test_a_local_cluster_gives_the_single_process_alignment(family, tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    import sinkalign.align.msa as msa_mod

    monkeypatch.setenv("JAX_ENABLE_X64", "1")  # the workers compute as this process does
    one, two = tmp_path / "one.afa", tmp_path / "two.afa"
    assert _run("msa", family, "-o", one, "--tree", tmp_path / "one.nwk").exit_code == 0
    monkeypatch.setattr(msa_mod, "aligner_posteriors", None)  # from here on, only workers may align
    res = _run("msa", family, "-o", two, "--tree", tmp_path / "two.nwk", "--workers", "2", "--chunk-size", "2")
    assert res.exit_code == 0, res.output
    assert two.read_text() == one.read_text()
    assert (tmp_path / "two.nwk").read_text() == (tmp_path / "one.nwk").read_text()
    res = CliRunner().invoke(cli, ["msa", str(family), "--workers", "2", "--threads", "2"])
    assert res.exit_code == 2 and "--threads is for a local run" in res.output


def test_a_short_nucleotide_looking_record_in_a_protein_family_is_a_peptide(tmp_path):
    path = tmp_path / "family.fa"
    path.write_text(FAMILY + ">e\nGATTACAGAT\n")  # all nucleotide codes, but 10 residues: a peptide
    res = _run("msa", path)
    assert res.exit_code == 0, res.output
    rows = AlignIO.read(io.StringIO(res.output), "fasta")
    assert _ungapped(rows)["e"] == "GATTACAGAT" and len(rows) == 5


def test_a_pair_the_aligner_refuses_is_named_by_its_records(family, tmp_path, monkeypatch):
    import sinkalign.align.aligner as A

    monkeypatch.setattr(A, "MAX_LENGTH", 26)  # records a and c have 27 residues
    res = CliRunner().invoke(cli, ["msa", str(family), "-o", str(tmp_path / "o.afa")])
    assert res.exit_code != 0
    assert "pair a / b: a sequence of 27 residues" in res.output  # named by its records, not "0 / 1"
    assert not (tmp_path / "o.afa").exists()


@pytest.mark.parametrize("records", [">only\nMKVLAAGHW\n", ">a\nMKVLAAGHW\n>b\nMKVLSAGHWE\n"])
def test_one_and_two_records(tmp_path, records):
    path = tmp_path / "f.fa"
    path.write_text(records)
    res = _run("msa", path, "--tree", tmp_path / "t.nwk")
    assert res.exit_code == 0, res.output
    aln = AlignIO.read(io.StringIO(res.output), "fasta")
    assert {k: v for k, v in _ungapped(aln).items()} == dict(
        (r.split("\n")[0], r.split("\n")[1]) for r in records.strip(">\n").split("\n>"))
    leaves = {c.name for c in Phylo.read(tmp_path / "t.nwk", "newick").get_terminals()}
    assert leaves == {rec.id for rec in aln}


def test_clustal_names_that_would_collide_are_refused_before_aligning(tmp_path, caplog):
    long = "sp|P69905|HBA_HUMAN_Hemoglobin_subunit_alpha"
    path = tmp_path / "f.fa"
    path.write_text(f">{long}_1\nMKVLAAGHWERTY\n>{long}_2\nMKVLSAGHWERTY\n>b\nMKILAAGHWERT\n")
    res = CliRunner().invoke(cli, ["msa", str(path), "--format", "clustal", "-o", str(tmp_path / "o.aln")])
    assert res.exit_code != 0 and f"'{long}_1' and '{long}_2'" in res.output and "--format fasta" in res.output
    assert not (tmp_path / "o.aln").exists()
    path.write_text(f">{long}_1\nMKVLAAGHWERTY\n>b\nMKILAAGHWERT\n")
    with caplog.at_level("WARNING"):
        res = _run("msa", path, "--format", "clustal", "-o", tmp_path / "o.aln")
    assert res.exit_code == 0 and "cut to 30 characters" in caplog.text
    assert _run("msa", path, "--format", "fasta").exit_code == 0  # other formats keep whole names


def test_confidences_in_stockholm_and_the_column_scores(family, tmp_path):
    from sinkalign.align.aligner import Aligner
    from sinkalign.align.msa import align_multiple, clustal_consensus

    out, scores = tmp_path / "out.sto", tmp_path / "columns.tsv"
    res = _run("msa", family, "-o", out, "--format", "stockholm", "--column-scores", scores)
    assert res.exit_code == 0, res.output
    recs = [r.split("\n", 1) for r in FAMILY.strip(">\n").split("\n>")]
    ids, seqs = [r[0].split()[0] for r in recs], [r[1].strip() for r in recs]
    want = align_multiple(ids, seqs, Aligner.load("learned"))
    aln = AlignIO.read(out, "stockholm")
    assert tuple(str(rec.seq) for rec in aln) == want.rows
    pp_rows, pp_cons = want.pp_lines()
    assert [rec.letter_annotations["posterior_probability"] for rec in aln] == list(pp_rows)
    assert aln.column_annotations["posterior_probability"] == pp_cons
    lines = scores.read_text().splitlines()
    assert lines[0] == f"# column confidences: {'calibrated' if want.calibrated else 'not calibrated'}"
    assert lines[1].split("\t") == ["column", "residues", "confidence", "conservation"]
    marks = clustal_consensus(want.rows)
    assert len(lines) == 2 + want.n_columns
    for c, line in enumerate(lines[2:]):
        col, residues, conf, mark = line.split("\t")
        assert int(col) == c + 1 and int(residues) == sum(row[c] != "-" for row in want.rows)
        assert mark == marks[c].strip()
        if int(residues) < 2:
            assert conf == "NA"
        else:
            assert abs(float(conf) - want.column_confidence[c]) <= 5e-5
            assert pp_cons[c] != "."
    # the clustal file carries the conservation line
    aln_file = tmp_path / "out.aln"
    assert _run("msa", family, "-o", aln_file, "--format", "clustal").exit_code == 0
    assert AlignIO.read(aln_file, "clustal").column_annotations["clustal_consensus"] == marks
    from Bio import Align

    from sinkalign import __version__

    # headed by the program that wrote it, as MAFFT heads its Clustal output (Biopython wrote "CLUSTAL X (1.81)")
    assert aln_file.read_text().split("\n", 1)[0] == f"CLUSTAL format alignment by sinkalign (v{__version__})"
    assert len(Align.read(aln_file, "clustal").sequences) == len(AlignIO.read(aln_file, "clustal"))


def test_column_scores_are_kept_unless_overwrite_and_share_stdout_with_nothing(family, tmp_path):
    scores = tmp_path / "columns.tsv"
    scores.write_text("mine")
    res = _run("msa", family, "-o", tmp_path / "o.afa", "--column-scores", scores)
    assert res.exit_code != 0 and "already exists" in res.output and scores.read_text() == "mine"
    assert not (tmp_path / "o.afa").exists()
    res = _run("msa", family, "--column-scores", "-")
    assert res.exit_code != 0 and "both go to standard output" in res.output
    res = _run("msa", family, "-o", tmp_path / "o.afa", "--column-scores", "-")
    assert res.exit_code == 0 and res.output.startswith("# column confidences")


def test_trim_drops_the_low_confidence_columns(family, tmp_path):
    from sinkalign.align.aligner import Aligner
    from sinkalign.align.msa import align_multiple

    recs = [r.split("\n", 1) for r in FAMILY.strip(">\n").split("\n>")]
    ids, seqs = [r[0].split()[0] for r in recs], [r[1].strip() for r in recs]
    whole = align_multiple(ids, seqs, Aligner.load("learned"))
    threshold = float(np.nanmedian(whole.column_confidence))
    out, scores = tmp_path / "trimmed.sto", tmp_path / "columns.tsv"
    res = _run("msa", family, "--trim", threshold, "--format", "stockholm", "-o", out, "--column-scores", scores)
    assert res.exit_code == 0, res.output
    want, kept = whole.trimmed(threshold)
    aln = AlignIO.read(out, "stockholm")
    assert tuple(str(rec.seq) for rec in aln) == want.rows and 0 < len(kept) < whole.n_columns
    assert [rec.letter_annotations["posterior_probability"] for rec in aln] == list(want.pp_lines()[0])
    assert len(scores.read_text().splitlines()) == 2 + whole.n_columns  # every column listed
    res = _run("msa", family, "--trim", 1.5)
    assert res.exit_code == 2 and "1.5" in res.output


def test_sequence_scores(family, tmp_path):
    from sinkalign.align.aligner import Aligner
    from sinkalign.align.msa import align_multiple

    scores = tmp_path / "seqs.tsv"
    res = _run("msa", family, "-o", tmp_path / "o.afa", "--sequence-scores", scores)
    assert res.exit_code == 0, res.output
    recs = [r.split("\n", 1) for r in FAMILY.strip(">\n").split("\n>")]
    ids, seqs = [r[0].split()[0] for r in recs], [r[1].strip() for r in recs]
    want = align_multiple(ids, seqs, Aligner.load("learned"))
    lines = scores.read_text().splitlines()
    assert lines[:2] == ["# sequence confidences: calibrated", "id\tresidues\tconfidence"]
    for line, name, seq, conf in zip(lines[2:], ids, seqs, want.sequence_confidence):
        assert line.split("\t")[:2] == [name, str(len(seq))] and abs(float(line.split("\t")[2]) - conf) <= 5e-5
    assert len(lines) == 2 + len(ids)
    assert min(want.sequence_confidence) == want.sequence_confidence[2]  # c is the unrelated record
    res = _run("msa", family, "--sequence-scores", "-", "--tree", "-", "-o", tmp_path / "x.afa")
    assert res.exit_code != 0 and "would both go to standard output" in res.output


def test_close_variants_get_their_indels_exactly(tmp_path):
    """Near-identical sequences differing by single indels: the library's pairs are decoded
    with the model's identity tie-break (as `sinkalign align` decodes them), so every gap is
    where the indel is, not a column or two off with mismatches around it (as before)."""
    import sinkalign
    from sinkalign.io.fasta import read_fasta

    examples = Path(sinkalign.__file__).parent / "data" / "examples"
    hbb = next(r.seq for r in read_fasta(examples / "globins_target.fasta") if r.id == "HBB_HUMAN")
    members = {"hbb": (hbb, list(range(len(hbb))))}
    for name, at in (("del75", 75), ("del30", 30), ("del110", 110)):
        members[name] = (hbb[:at] + hbb[at + 1:], [k for k in range(len(hbb)) if k != at])
    (tmp_path / "close.fasta").write_text("".join(f">{k}\n{s}\n" for k, (s, _) in members.items()))
    res = _run("msa", str(tmp_path / "close.fasta"))
    assert res.exit_code == 0, res.output
    rows = dict(zip([line[1:].split()[0] for line in res.output.splitlines() if line.startswith(">")],
                    "".join(line if not line.startswith(">") else "\n" for line in res.output.splitlines()).split()))
    for name, (seq, origin) in members.items():  # every column holds one residue of HBB, or a gap
        k = 0
        for c, ch in enumerate(rows[name]):
            if ch != "-":
                assert origin[k] == c, (name, c)
                k += 1


def test_an_unrelated_record_is_named_in_a_warning(tmp_path, caplog):
    """A record with no likely homolog among the others (E-value >= 0.3 as a search of them) is
    aligned all the same, with a warning naming it; the family's members are not named."""
    import logging

    rng = np.random.default_rng(3)
    odd = "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), 150))
    globins = (Path(__file__).parents[1] / "sinkalign" / "data" / "examples")
    text = "".join(p.read_text() for p in sorted(globins.glob("globins_*.fasta"))) + f">odd\n{odd}\n"
    (tmp_path / "fam.fasta").write_text(text)
    with caplog.at_level(logging.WARNING, logger="sinkalign.pipelines.msa"):
        res = _run("msa", str(tmp_path / "fam.fasta"))
    assert res.exit_code == 0, res.output
    warned = [r.getMessage() for r in caplog.records if "no likely homolog" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("record odd has no likely homolog"), warned


def test_one_record_is_written_as_one_row_with_a_warning(tmp_path, caplog):
    """`sinkalign msa` of a file of one record writes it as a one-row alignment, as other
    aligners do, and says nothing was aligned (it wrote the row without a word)."""
    import logging

    (tmp_path / "one.fasta").write_text(">solo\nMKVLAAGIVGLLLAQ\n")
    with caplog.at_level(logging.WARNING, logger="sinkalign.pipelines.msa"):
        res = _run("msa", str(tmp_path / "one.fasta"), "-o", str(tmp_path / "out.afa"))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out.afa").read_text().split() == [">solo", "MKVLAAGIVGLLLAQ"]
    warned = [r.getMessage() for r in caplog.records if "one record" in r.getMessage()]
    assert warned == [f"{tmp_path / 'one.fasta'} holds one record (solo): nothing to align it to; it is written as "
                      "a one-row alignment"], caplog.text
