"""What a hostile-input review of `sinkalign align`, `msa` and `score-msa` found (session 20):
each case failed before its fix (a silent loss, a wrong number or a traceback)."""

from __future__ import annotations

import gzip
import json

import pytest
from Bio import AlignIO
from click.testing import CliRunner

from sinkalign.cli.main import cli
from tests.cli_errors import assert_one_line_error

FAMILY = (">a first\nMKVLAAGHWERTYLLKPQDESTRIVNG\n>b\nMKILSAGHWERTLLKPQDESTRIVNG\n"
          ">c\nMSTNPKPQRKTKRNTNRRPQDVKFPGG\n>d\nMKVLAGHWERTYLLKPQDSTRIVNGA\n")
QUERY, TARGET = "MVLSPADKTNVKAAWGKVGAHAGEYGAEALERMF", "MVHLTPEEKSAVTALWGKVNVDEVGGEALGRLL"
# one DNA pair: a 60-base stretch and a copy with a few substitutions
DNA_Q = "ATGGCGTACGTTAGCCTAGGCTTACGATCGGATCCATGCAAGTTCGCGATATCGGCTAAC"
DNA_T = "ATGGCGTACGATAGCCTAGGCTTACGTTCGGATCCATGCTAGTTCGCGATATCGGCTAAC"


def _run(*args, input=None):
    return CliRunner().invoke(cli, list(map(str, args)), input=input, catch_exceptions=False)


@pytest.fixture()
def family(tmp_path):
    path = tmp_path / "family.fa"
    path.write_text(FAMILY)
    return path


@pytest.mark.parametrize("side", ["--tree", "--column-scores", "--sequence-scores"])
def test_msa_refuses_a_side_output_on_the_alignment_path(family, tmp_path, side):
    out = tmp_path / "out.afa"
    res = _run("msa", family, "-o", out, side, out)
    assert res.exit_code != 0 and "are the same file" in res.output, res.output
    assert not out.exists()  # nothing was aligned, nothing written
    res = _run("msa", family, "-o", out, side, tmp_path / "sub" / ".." / "out.afa")  # the same file by another name
    assert res.exit_code != 0 and "are the same file" in res.output, res.output


def test_msa_keeps_consistency_to_the_rounds_it_is_calibrated_for(family, tmp_path):
    res = _run("msa", family, "--consistency", "4")
    assert res.exit_code == 2 and "--consistency" in res.output and "0<=x<=3" in res.output


@pytest.mark.parametrize("args, option", [(["align", "--example", "--gap-weight", "nan"], "--gap-weight"),
                                          (["align", "--example", "--gap-weight", "inf"], "--gap-weight"),
                                          (["align", "--example", "--min-confidence", "nan"], "--min-confidence"),
                                          (["msa", "--example", "--trim", "nan"], "--trim"),
                                          (["msa", "--example", "--seed", "-5"], "--seed")])
def test_nonsense_numbers_are_usage_errors_naming_the_option(args, option):
    res = _run(*args)
    assert res.exit_code == 2 and f"Invalid value for '{option}'" in res.output, res.output
    assert "Traceback" not in res.output


def test_an_unparseable_scheduler_address_is_one_clean_error():
    pytest.importorskip("distributed")
    res = CliRunner().invoke(cli, ["align", "--example", "--scheduler", "foo"])
    assert res.exit_code == 1 and "cannot reach the Dask scheduler at foo" in res.output, res.output
    assert not isinstance(res.exception, ValueError) or isinstance(res.exception, SystemExit)


def test_stockholm_refuses_row_names_that_readers_take_for_markup(tmp_path):
    fa = tmp_path / "h.fa"
    fa.write_text(f">#hash\n{QUERY}\n>ok\n{TARGET}\n>//end\n{QUERY[:20]}\n")
    res = _run("msa", fa, "--format", "stockholm", "-o", tmp_path / "h.sto")
    assert res.exit_code == 1 and "'#hash' would be read as markup" in res.output
    assert not (tmp_path / "h.sto").exists()
    fa.write_text(f">ok\n{TARGET}\n>//end\n{QUERY[:20]}\n")
    res = _run("msa", fa, "--format", "stockholm")
    assert res.exit_code == 1 and "'//end' would be read as the end of the alignment" in res.output
    q, t = tmp_path / "q.fa", tmp_path / "t.fa"
    q.write_text(f">#q\n{QUERY}\n")
    t.write_text(f">t\n{TARGET}\n")
    res = _run("align", q, t, "--format", "stockholm")
    assert res.exit_code == 1 and "record #1 of" in res.output and "'#q' would be read as markup" in res.output
    assert "# STOCKHOLM" not in res.output
    fa.write_text(f">ok\n{TARGET}\n>fine#inside\n{QUERY[:20]}\n")  # a '#' inside a name is fine
    assert _run("msa", fa, "--format", "stockholm", "-o", tmp_path / "ok.sto").exit_code == 0
    assert [r.id for r in AlignIO.read(tmp_path / "ok.sto", "stockholm")] == ["ok", "fine#inside"]


def test_sam_names_are_checked_before_the_first_record_is_written(tmp_path):
    q, t = tmp_path / "q.fa", tmp_path / "t.fa"
    q.write_text(f">good\n{QUERY}\n>also_good\n{QUERY}\n>bad@id\n{QUERY}\n")
    t.write_text(f">t\n{TARGET}\n")
    res = _run("align", q, t, "--format", "sam")
    assert res.exit_code == 1 and "record #3 of" in res.output and "query_id is not a valid SAM QNAME ([!-?A-~]{1,254}): 'bad@id'" in res.output
    assert "@HD" not in res.output and "good\t" not in res.output  # no partial SAM on standard output


def test_options_a_model_cannot_use_are_errors(tmp_path):
    q, t = tmp_path / "q.fa", tmp_path / "t.fa"
    q.write_text(f">q\n{QUERY}\n")
    t.write_text(f">t\n{TARGET}\n")
    res = _run("align", q, t, "--embedder", "foo")
    assert res.exit_code == 1 and "--embedder foo" in res.output and "no embedder" in res.output
    res = _run("align", q, t, "--esm-weights", q)
    assert res.exit_code == 1 and "--esm-weights" in res.output and "takes no ESM-2 features" in res.output
    assert _run("align", q, t, "--embedder", "none").exit_code == 0


@pytest.mark.parametrize("command, fmt", [("align", "tsv"), ("align", "sam"), ("msa", "stockholm"), ("msa", "fasta")])
def test_outputs_named_gz_are_gzip_compressed(tmp_path, command, fmt):
    plain, packed = tmp_path / f"out.{fmt}", tmp_path / f"out.{fmt}.gz"
    for out in (plain, packed):
        assert _run(command, "--example", "--format", fmt, "-o", out).exit_code == 0
    assert packed.read_bytes()[:2] == b"\x1f\x8b"
    unpacked, written = gzip.decompress(packed.read_bytes()), plain.read_bytes()
    if fmt == "sam":  # the @PG line's command names each run's own -o file
        assert f" -o {packed}".encode() in unpacked and f" -o {plain}".encode() in written
        unpacked, written = unpacked.replace(str(packed).encode(), b"OUT"), written.replace(str(plain).encode(), b"OUT")
    assert unpacked == written
    assert not list(tmp_path.glob(".*.tmp"))


def test_msa_tree_named_gz_is_compressed_too(family, tmp_path):
    assert _run("msa", family, "-o", tmp_path / "a.afa", "--tree", tmp_path / "t.nwk.gz").exit_code == 0
    assert gzip.decompress((tmp_path / "t.nwk.gz").read_bytes()).decode().rstrip().endswith(";")


def test_rna_aligns_to_dna_as_its_dna(tmp_path):
    q_dna, q_rna, t = tmp_path / "q.fa", tmp_path / "r.fa", tmp_path / "t.fa"
    q_dna.write_text(f">q\n{DNA_Q}\n")
    q_rna.write_text(f">q\n{DNA_Q.replace('T', 'U')}\n")
    t.write_text(f">t\n{DNA_T}\n")
    rows = []
    for q in (q_dna, q_rna):
        res = _run("align", q, t, "--format", "json", "--strand", "plus")
        assert res.exit_code == 0, res.output
        rows.append(json.loads(res.output.splitlines()[0]))
    dna, rna = rows
    assert rna["identity"] == dna["identity"] > 90  # the U's were compared with T's as mismatches before
    assert rna["evalue"] == dna["evalue"] and rna["cigar"] == dna["cigar"]

    from sinkalign.align.aligner import Aligner

    aligner = Aligner.load("dna", strand="plus")
    a = aligner.align(DNA_Q, DNA_T)
    b = aligner.align(DNA_Q.replace("T", "U"), DNA_T)
    assert b.identity == a.identity and b.evalue == a.evalue


# --------------------------------------------------------------------------------------- score-msa
REF = ">a\nMKVLAAGHWERTYLLK-PQDESTRIVNG\n>b\nMKILSAGHWERT-LLKPQDESTRIVNG-\n>c\nMKVLAGHWERTYLLKPQD-STRIVNGA-\n"


def test_score_msa_reads_an_all_lower_case_reference_as_wholly_trusted(tmp_path):
    test, upper, lower = tmp_path / "t.afa", tmp_path / "u.afa", tmp_path / "l.afa"
    test.write_text(REF)
    upper.write_text(REF)
    lower.write_text("".join(line.lower() if not line.startswith(">") else line for line in REF.splitlines(True)))
    got = []
    for ref in (upper, lower):
        res = _run("score-msa", test, ref, "--json", "-")
        assert res.exit_code == 0, res.output
        got.append(json.loads(res.stdout))
    assert got[0]["overall"]["n_ref"] > 0 and got[0]["overall"]["recall"] == 1.0
    assert got[1]["overall"] == got[0]["overall"]  # was SP 0 over 0 trusted pairs


def test_score_msa_refuses_a_reference_with_nothing_trusted_to_score(tmp_path):
    test, ref = tmp_path / "t.afa", tmp_path / "r.afa"
    test.write_text(">a\nMKVLA\n>b\n--ILS\n")
    ref.write_text(">a\nMKvla\n>b\n--ils\n")  # the trusted residues face gaps: no trusted pair
    res = _run("score-msa", test, ref)
    assert res.exit_code == 1 and "aligns no pair of trusted residues" in res.output, res.output


def test_score_msa_outputs_to_standard_output_and_never_onto_each_other(tmp_path):
    test, ref = tmp_path / "t.afa", tmp_path / "r.afa"
    test.write_text(REF)
    ref.write_text(REF)
    res = _run("score-msa", test, ref, "--pairs", "-")
    assert res.exit_code == 0 and res.stdout.splitlines()[0].startswith("family\tquery\ttarget")
    assert len(res.stdout.splitlines()) == 4 and not (tmp_path / "-").exists()
    res = _run("score-msa", test, ref, "--json", "-", "--pairs", "-")
    assert res.exit_code == 1 and "would both go to standard output" in res.output  # as msa: one check, one status
    same = tmp_path / "same.out"
    res = _run("score-msa", test, ref, "--json", same, "--pairs", same)
    assert res.exit_code == 1 and "are the same file" in res.output and not same.exists()


def test_a_byte_order_mark_is_not_part_of_the_first_record(tmp_path):
    q, t = tmp_path / "q.fa", tmp_path / "t.fa"
    q.write_bytes(b"\xef\xbb\xbf" + f">q1\n{QUERY}\n".encode())
    t.write_text(f">t\n{TARGET}\n")
    res = _run("align", q, t, "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.splitlines()[0])["query_id"] == "q1"


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs named pipes")
@pytest.mark.parametrize("command", ["align", "msa"])
def test_an_existing_named_pipe_is_written_in_place_without_overwrite(tmp_path, command):
    import os
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    res = _run(command, "--example", "-o", fifo)
    reader.join(timeout=60)
    assert res.exit_code == 0, res.output
    want = _run(command, "--example").stdout.encode()
    assert got == [want] and want
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary file beside it


@pytest.mark.parametrize("fmt", ["sam", "bam"])
def test_all_vs_all_sam_has_one_primary_line_per_query(tmp_path, fmt):
    import pysam

    q, t = tmp_path / "q.fa", tmp_path / "t.fa"
    q.write_text(f">q1\n{QUERY}\n>q2\n{TARGET}\n")
    t.write_text(f">t1\n{TARGET}\n>t2\n{QUERY}\n>t3\n{QUERY[:25]}\n")
    out = tmp_path / f"out.{fmt}"
    assert _run("align", q, t, "--format", fmt, "-o", out).exit_code == 0
    with pysam.AlignmentFile(str(out), "r" if fmt == "sam" else "rb", check_sq=False) as fh:
        segs = list(fh)
    assert [s.query_name for s in segs] == ["q1"] * 3 + ["q2"] * 3
    for name in ("q1", "q2"):
        mapped = [s for s in segs if s.query_name == name and not s.is_unmapped]
        primary = [s for s in mapped if not s.is_secondary]
        assert len(mapped) >= 2 and len(primary) == 1  # the best hit: the smallest E-value
        assert primary[0].get_tag("ZE") == min(s.get_tag("ZE") for s in mapped)
        assert primary[0].reference_name == {"q1": "t2", "q2": "t1"}[name]  # the query itself
        assert all(s.flag & ~(16 | 256) == 0 for s in mapped)


def test_msa_keeps_each_header_description(tmp_path):
    fa = tmp_path / "f.fa"
    fa.write_text(">a first protein [Homo sapiens]\nMKVLAAGHWERTYLLKPQDESTRIVNG\n>b\nMKILSAGHWERTLLKPQDESTRIVNG\n"
                  ">c some desc\nMSTNPKPQRKTKRNTNRRPQDVKFPGG\n")
    out, sto = tmp_path / "out.afa", tmp_path / "out.sto"
    assert _run("msa", fa, "-o", out).exit_code == 0
    assert [line for line in out.read_text().splitlines() if line.startswith(">")] == [
        ">a first protein [Homo sapiens]", ">b", ">c some desc"]
    assert _run("msa", fa, "-o", sto, "--format", "stockholm").exit_code == 0
    assert "#=GS a DE first protein [Homo sapiens]" in sto.read_text()
    read = {r.id: r.description for r in AlignIO.read(sto, "stockholm")}  # (Biopython: the id where there is none)
    assert read["a"] == "first protein [Homo sapiens]" and read["c"] == "some desc"
    res = _run("score-msa", out, sto, "--json", "-")  # the rows still match by name
    assert res.exit_code == 0 and json.loads(res.stdout)["overall"]["recall"] == 1.0


@pytest.mark.parametrize("case", ["msa-stdout", "score-msa-stdout", "msa-same", "align-same", "score-msa-same",
                                  "msa-exists", "align-exists", "score-msa-exists"])
def test_align_msa_and_score_msa_check_their_outputs_in_one_wording(tmp_path, family, case):
    """One check of a command's outputs (``runner.check_outputs``): the same message, and exit
    status 1, from each command; nothing is read or aligned before it."""
    test, ref, query = tmp_path / "t.afa", tmp_path / "r.afa", tmp_path / "q.fa"
    test.write_text(REF)
    ref.write_text(REF)
    query.write_text(f">q\n{QUERY}\n")
    out, old = tmp_path / "out.txt", tmp_path / "old.txt"
    old.write_text("mine\n")
    command, check = case.rsplit("-", 1)
    inputs = {"msa": [family], "align": [query, query], "score-msa": [test, ref]}[command]
    first, second = {"msa": ("output", "--tree"), "align": ("output", "--plan-out"),
                     "score-msa": ("--json", "--pairs")}[command]
    flag = {"output": "-o"}.get(first, first)
    if check == "stdout":
        res = _run(command, *inputs, second, "-", *([first, "-"] if command == "score-msa" else []))
        message = f"{first} and {second} would both go to standard output; give all but one a file"
    elif check == "same":
        res = _run(command, *inputs, flag, out, second, out)
        message = f"{first} and {second} are the same file, {out}; give each its own"
    else:
        res = _run(command, *inputs, flag, old)
        message = f"{first} {old} already exists; remove it, or pass --overwrite to replace it"
    assert_one_line_error(res, message)
    assert not out.exists() and old.read_text() == "mine\n"


BAD_STDIN = ">a\nMKVLAAGHWERT\n>b\nMKV1LSAGHW\n"


@pytest.mark.parametrize("args", [["msa", "-"], ["align", "-", "{query}"], ["align", "{query}", "-"],
                                  ["align", "--pairs", "{pairs}", "-"]])
def test_errors_in_fasta_from_standard_input_name_stdin_not_its_temporary_copy(tmp_path, args):
    query, pairs = tmp_path / "q.fa", tmp_path / "pairs.tsv"
    query.write_text(f">q\n{QUERY}\n")
    pairs.write_text("a\tb\n")
    res = _run(*(a.format(query=query, pairs=pairs) for a in args), input=BAD_STDIN)
    where = "record 'b'" if "--pairs" in args else "record 'b' (#2)"  # an indexed FASTA's records have no number
    assert_one_line_error(res, f"Error: <stdin>: {where}: illegal character '1' for alphabet 'protein' at position 3")
    assert "sinkalign-stdin" not in res.output


def test_msa_names_stdin_in_its_own_errors_too():
    res = _run("msa", "-", input=f">p\n{QUERY}\n>d\n{DNA_Q}\n")
    assert_one_line_error(res, "Error: <stdin>: record 'd' is DNA but record 'p' is protein")
