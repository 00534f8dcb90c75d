"""The `sinkalign align` pipeline: streams, pair lists, stdin/stdout, alphabets, up-front checks."""

from __future__ import annotations

import io
import json
import os
import time

import numpy as np
import pysam
import pytest
from click.testing import CliRunner

import sinkalign.pipelines.align as pipeline
from sinkalign.align.aligner import Aligner, default_model_path
from sinkalign.cli.main import cli
from sinkalign.errors import AlphabetError, FormatError, InputError, OutputExistsError
from sinkalign.pipelines.align import align_fasta

SEQS = {
    "q1": "MKVLAAGHWERTYLLKPQ", "q2": "MSTNPKPQRKTKRNTNRRPQDVKFPGG", "q3": "MKVLSAGHWERTLLKPQDE",
    "t1": "MKILSAGHWERTLLKPQ", "t2": "MSNPKPQRKTRRNTNRRPQDVKFPG",
}


def fasta(ids):
    return "".join(f">{i}\n{SEQS[i]}\n" for i in ids)


@pytest.fixture()
def files(tmp_path):
    (tmp_path / "q.fa").write_text(fasta(["q1", "q2", "q3"]))
    (tmp_path / "t.fa").write_text(fasta(["t1", "t2"]))
    (tmp_path / "all.fa").write_text(fasta(list(SEQS)))
    return tmp_path


def rows(text):
    return [line.split("\t") for line in text.splitlines()[1:]]


def expected_rows(pairs):
    """The library's own alignments of ``pairs`` (ids), written by the library's TSV writer."""
    from sinkalign.io.writers import write_alignments

    aligner = Aligner.load(default_model_path("protein"))
    res = aligner.align_many([(q, SEQS[q], t, SEQS[t]) for q, t in pairs])
    buf = io.StringIO()
    write_alignments(res, buf, "tsv")  # writers take the aligner's records as they are
    return rows(buf.getvalue())


def test_stdout_is_streamed_in_input_order(files, monkeypatch):
    """With chunk_size=1, every earlier pair is already on stdout when a pair is aligned."""
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    seen = []
    real = pipeline.align_chunk

    def spy(spec, chunk, batch_size, keep_plan):
        seen.append((chunk[0][0], chunk[0][2], out.getvalue().count("\n")))
        return real(spec, chunk, batch_size, keep_plan)

    monkeypatch.setattr(pipeline, "align_chunk", spy)
    n = align_fasta(files / "q.fa", files / "t.fa", output="-", chunk_size=1)
    order = [("q1", "t1"), ("q1", "t2"), ("q2", "t1"), ("q2", "t2"), ("q3", "t1"), ("q3", "t2")]
    assert n == 6 and [s[:2] for s in seen] == order
    assert [s[2] for s in seen] == [1, 2, 3, 4, 5, 6]  # the header, then one row per finished pair
    assert rows(out.getvalue()) == expected_rows(order)


def test_file_output_equals_stdout_and_chunking_changes_nothing(files, monkeypatch):
    out = files / "x.tsv"
    align_fasta(files / "q.fa", files / "t.fa", output=out, chunk_size=3, batch_size=2)
    buf = io.StringIO()
    monkeypatch.setattr("sys.stdout", buf)
    align_fasta(files / "q.fa", files / "t.fa", output=None, chunk_size=256, batch_size=2)
    assert buf.getvalue() == out.read_text()


def test_dash_reads_stdin_and_writes_stdout(files):
    runner = CliRunner()
    ref = files / "ref.tsv"
    r = runner.invoke(cli, ["align", str(files / "q.fa"), str(files / "t.fa"), "-o", str(ref), "--no-progress"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["align", "-", str(files / "t.fa"), "-o", "-", "--no-progress"],
                      input=fasta(["q1", "q2", "q3"]))
    assert r.exit_code == 0, r.output
    assert r.stdout == ref.read_text() and not (files / "-").exists()
    # the same stream on both sides: an all-vs-all self comparison of standard input
    r = runner.invoke(cli, ["align", "-", "-", "--format", "json", "--no-progress"], input=fasta(["q1", "t1"]))
    assert r.exit_code == 0, r.output
    objs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(o["query_id"], o["target_id"]) for o in objs] == [("q1", "q1"), ("q1", "t1"), ("t1", "q1"),
                                                                ("t1", "t1")]


def test_existing_outputs_are_never_replaced_unless_asked(files):
    out, plans = files / "x.tsv", files / "p.npz"
    out.write_text("mine\n")
    plans.write_bytes(b"mine")
    with pytest.raises(OutputExistsError, match=f"output {out} already exists"):
        align_fasta(files / "q.fa", files / "t.fa", output=out)
    with pytest.raises(OutputExistsError, match=f"--plan-out {plans} already exists"):
        align_fasta(files / "q.fa", files / "t.fa", output=files / "new.tsv", plan_out=plans)
    assert out.read_text() == "mine\n" and plans.read_bytes() == b"mine" and not (files / "new.tsv").exists()
    with pytest.raises(InputError, match="is also an input"):
        align_fasta(files / "q.fa", files / "t.fa", output=files / "t.fa", overwrite=True)
    assert align_fasta(files / "q.fa", files / "t.fa", output=out, plan_out=plans, overwrite=True) == 6
    assert len(rows(out.read_text())) == 6
    with np.load(plans) as z:
        assert len(z.files) == 6
    assert sorted(p.name for p in files.iterdir()) == ["all.fa", "p.npz", "q.fa", "t.fa", "x.tsv"]


def test_plans_are_written_per_pair_with_their_index(files):
    plans = files / "p.npz"
    align_fasta(files / "q.fa", files / "t.fa", output=files / "x.tsv", pairing="all", plan_out=plans,
                chunk_size=4)
    aligner = Aligner.load(default_model_path("protein"))
    with np.load(plans) as z:
        assert z.files == ["q1|t1|0", "q1|t2|1", "q2|t1|2", "q2|t2|3", "q3|t1|4", "q3|t2|5"]
        got = z["q2|t1|2"]
    want = next(aligner.align_many([("q2", SEQS["q2"], "t1", SEQS["t1"])], keep_plan=True)).plan
    assert got.dtype == np.float32 and got.shape == (len(SEQS["q2"]) + 1, len(SEQS["t1"]) + 1)
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-5, atol=1e-7)


def test_plan_names_keep_ids_with_bars_apart(tmp_path):
    """UniProt ids hold `|`: in a plan's name `%` and `|` of an id are escaped, so the name
    splits into query, target and index, and unquoting gives each id back."""
    import urllib.parse

    seq = SEQS["q1"]
    ids = [("sp|P69905|HBA_HUMAN", "tr|Q9|Ωβ_100%"), ("a|b", "c"), ("a", "b|c"), ("x%7Cy", "z")]
    (tmp_path / "p.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in ids))
    (tmp_path / "s.fa").write_text("".join(f">{rid}\n{seq}\n" for rid in dict.fromkeys(r for p in ids for r in p)))
    align_fasta(tmp_path / "s.fa", pairs=tmp_path / "p.tsv", output=tmp_path / "x.tsv",
                plan_out=tmp_path / "p.npz")
    with np.load(tmp_path / "p.npz") as z:
        names = z.files
    assert names == ["sp%7CP69905%7CHBA_HUMAN|tr%7CQ9%7CΩβ_100%25|0", "a%7Cb|c|1", "a|b%7Cc|2", "x%257Cy|z|3"]
    assert len(set(names)) == len(names)  # "a|b" / "c" and "a" / "b|c" no longer both read a|b|c
    assert [tuple(urllib.parse.unquote(f) for f in name.split("|")) for name in names] == \
        [(q, t, str(k)) for k, (q, t) in enumerate(ids)]
    assert pipeline.plan_key("q1", "t1", 7) == "q1|t1|7"  # plain ids as before


@pytest.mark.parametrize("zip64_at", [None, 1000])
def test_plan_archive_is_a_valid_npz(tmp_path, monkeypatch, zip64_at):
    """The streamed .npz reads back with numpy and zipfile, also in its ZIP64 layout (offsets
    past 4 GiB, forced here by lowering the threshold) and past 65,535 members."""
    import zipfile

    if zip64_at is not None:
        monkeypatch.setattr(pipeline._PlanWriter, "_ZIP64_AT", zip64_at)
    rng = np.random.default_rng(0)
    n = 66_000 if zip64_at is None else 50
    arrays = {f"q{i}|t{i}|{i}": rng.random((rng.integers(1, 9), rng.integers(1, 9))).astype(np.float32)
              for i in range(n)}
    path = tmp_path / "p.npz"
    with open(path, "wb") as fh:
        writer = pipeline._PlanWriter(fh)
        for key, a in arrays.items():
            writer.add(key, a)
        writer.close()
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None and len(z.infolist()) == n
    with np.load(path) as z:
        assert z.files == list(arrays)
        for key in list(arrays)[:: max(1, n // 40)]:
            np.testing.assert_array_equal(z[key], arrays[key])


def test_sam_streams_with_the_target_file_as_header(files, monkeypatch):
    buf = io.StringIO()
    monkeypatch.setattr("sys.stdout", buf)
    align_fasta(files / "q.fa", files / "t.fa", fmt="sam", output="-", chunk_size=1)
    sam = files / "x.sam"
    align_fasta(files / "q.fa", files / "t.fa", fmt="sam", output=sam)
    assert buf.getvalue() == sam.read_text()
    with pysam.AlignmentFile(str(sam)) as fh:
        assert fh.references == ("t1", "t2") and fh.lengths == (len(SEQS["t1"]), len(SEQS["t2"]))
        assert [(a.query_name, a.reference_name) for a in fh] == [
            ("q1", "t1"), ("q1", "t2"), ("q2", "t1"), ("q2", "t2"), ("q3", "t1"), ("q3", "t2")]


# ------------------------------------------------------------------ pair lists
def test_pair_list_from_indexed_fasta(files):
    pairs = files / "pairs.tsv"
    pairs.write_text("# hits of a search\nq2\tt1\t87.5\t1e-20\n\nq1 t2\nq3\tq1\nq2\tt1\n")
    assert not (files / "all.fa.fai").exists()
    out = files / "x.tsv"
    r = CliRunner().invoke(cli, ["align", "--pairs", str(pairs), str(files / "all.fa"), "-o", str(out),
                                 "--no-progress"])
    assert r.exit_code == 0, r.output
    order = [("q2", "t1"), ("q1", "t2"), ("q3", "q1"), ("q2", "t1")]  # list order, duplicates kept
    assert rows(out.read_text()) == expected_rows(order)
    assert (files / "all.fa.fai").exists()  # built beside the FASTA, reused next time
    # queries and targets from two files
    (files / "pairs2.tsv").write_text("q3 t2\nq1 t1\n")
    out2 = files / "y.tsv"
    assert align_fasta(files / "q.fa", files / "t.fa", pairs=files / "pairs2.tsv", output=out2) == 2
    assert rows(out2.read_text()) == expected_rows([("q3", "t2"), ("q1", "t1")])
    # a bgzip-compressed FASTA is indexed too (.fai and .gzi)
    pysam.tabix_compress(str(files / "all.fa"), str(files / "all.fa.gz"))
    out3 = files / "z.tsv"
    assert align_fasta(files / "all.fa.gz", pairs=files / "pairs2.tsv", output=out3) == 2
    assert out3.read_text() == out2.read_text() and (files / "all.fa.gz.fai").exists()
    # SAM: the header lists the targets of the list, first-seen order, a protein's stop '*' not counted
    (files / "stop.fa").write_text(fasta(["q1", "q3"]) + f">t2\n{SEQS['t2']}*\n>t1\n{SEQS['t1']}\n")
    sam = files / "x.sam"
    assert align_fasta(files / "stop.fa", pairs=files / "pairs2.tsv", fmt="sam", output=sam) == 2
    with pysam.AlignmentFile(str(sam)) as fh:
        assert fh.references == ("t2", "t1") and fh.lengths == (len(SEQS["t2"]), len(SEQS["t1"]))


def test_pair_list_errors_name_the_line(files, monkeypatch):
    calls = []
    monkeypatch.setattr(pipeline, "align_chunk", lambda *a: calls.append(a) or [])
    pairs = files / "pairs.tsv"
    pairs.write_text("q1\tt1\n# comment\nq2\tt9\n")
    with pytest.raises(InputError, match=rf"{pairs}: line 3: target id 't9' is not in {files / 'all.fa'}"):
        align_fasta(files / "all.fa", pairs=pairs, output=files / "x.tsv")
    pairs.write_text("q1\tt1\nx1\n")
    with pytest.raises(FormatError, match=rf"{pairs}: line 2: expected a query id and a target id"):
        align_fasta(files / "all.fa", pairs=pairs, output=files / "x.tsv")
    pairs.write_text("q1\tt1\nqq\tt2\n")
    with pytest.raises(InputError, match=rf"line 2: query id 'qq' is not in {files / 'q.fa'}"):
        align_fasta(files / "q.fa", files / "t.fa", pairs=pairs, output=files / "x.tsv")
    (files / "empty.fa").write_text(fasta(["q1", "t1"]) + ">t2 nothing here\n>t3\nMKV\n")
    pairs.write_text("q1\tt2\n")
    with pytest.raises(InputError, match=rf"line 1: target id 't2' is an empty record of {files / 'empty.fa'}"):
        align_fasta(files / "empty.fa", pairs=pairs, output=files / "x.tsv")
    pairs.write_text("q1\tt1\n")
    (files / "dup.fa").write_text(fasta(["q1", "t1"]) + ">q1\nMKV\n")
    with pytest.raises(FormatError, match=rf"{files / 'dup.fa'}: line 5: duplicate record id 'q1'"):
        align_fasta(files / "dup.fa", pairs=pairs, output=files / "x.tsv")
    assert not (files / "dup.fa.fai").exists()
    # an index built before (samtools faidx keeps the first of the two records) hides nothing either,
    # and is the user's: it stays
    verbosity = pysam.set_verbosity(0)
    try:
        pysam.faidx(str(files / "dup.fa"))
    finally:
        pysam.set_verbosity(verbosity)
    index = (files / "dup.fa.fai").read_text()
    assert index.count("q1\t") == 1
    with pytest.raises(FormatError, match=rf"{files / 'dup.fa'}: line 5: duplicate record id 'q1'"):
        align_fasta(files / "dup.fa", pairs=pairs, output=files / "x.tsv")
    assert (files / "dup.fa.fai").read_text() == index
    import gzip

    (files / "z.fa.gz").write_bytes(gzip.compress(fasta(["q1", "t1"]).encode()))
    with pytest.raises(InputError, match="gzip-compressed FASTA cannot be indexed.*bgzip"):
        align_fasta(files / "z.fa.gz", pairs=pairs, output=files / "x.tsv")
    (files / "bad.fa").write_text(">q1\nMKV1L\n>t1\nMKV\n")
    with pytest.raises(ValueError, match=r"bad.fa: record 'q1': illegal character '1'.*position 3"):
        align_fasta(files / "bad.fa", pairs=pairs, output=files / "x.tsv")
    assert calls == [] and not (files / "x.tsv").exists()  # all of it before aligning anything


def test_indexing_a_pair_list_fasta_keeps_htslib_quiet(files, capfd):
    """htslib's own messages while pysam builds a .fai (a duplicate name's [W::fai_insert_index], a
    line width's [E::fai_build_core]) stay off stderr: the errors are ours, naming file and line."""
    pairs = files / "pairs.tsv"
    pairs.write_text("q1\tt1\n")
    verbosity = pysam.get_verbosity()
    (files / "dup.fa").write_text(fasta(["q1", "t1"]) + ">q1\nMKV\n")
    with pytest.raises(FormatError, match=rf"{files / 'dup.fa'}: line 5: duplicate record id 'q1'"):
        align_fasta(files / "dup.fa", pairs=pairs, output=files / "x.tsv")
    (files / "wide.fa").write_text(">q1\nMKVLA\nMKVLAAGH\n>t1\nMKV\n")
    with pytest.raises(FormatError, match=rf"{files / 'wide.fa'}: line 3: record 'q1' has a line longer than its "
                                          r"first \(5 characters\); .* rewrap it"):
        align_fasta(files / "wide.fa", pairs=pairs, output=files / "x.tsv")
    (files / "gap.fa").write_text(">q1\nMKVLA\n\nMKV\n>t1\nMKV\n")
    with pytest.raises(FormatError, match=rf"{files / 'gap.fa'}: line 4: record 'q1' goes on after line 3, which "
                                          "is shorter"):
        align_fasta(files / "gap.fa", pairs=pairs, output=files / "x.tsv")
    err = capfd.readouterr().err
    assert "[W::" not in err and "[E::" not in err, err
    assert pysam.get_verbosity() == verbosity  # htslib's verbosity is the process's: given back


def test_pair_list_index_that_cannot_be_built_or_is_stale(files, monkeypatch):
    pairs = files / "pairs.tsv"
    pairs.write_text("q1\tt1\n")
    monkeypatch.setattr(pipeline, "_writable_dir", lambda path: False)
    with pytest.raises(InputError, match=rf"all.fa.fai, which is missing and cannot be built because {files} is "
                                         "not writable"):
        align_fasta(files / "all.fa", pairs=pairs, output=files / "x.tsv")
    monkeypatch.undo()
    pysam.faidx(str(files / "all.fa"))
    later = time.time() + 10
    os.utime(files / "all.fa", (later, later))
    with pytest.raises(InputError, match="all.fa.fai is older than .*all.fa"):
        align_fasta(files / "all.fa", pairs=pairs, output=files / "x.tsv")


def test_pair_list_fasta_with_whitespace_in_a_sequence_line_names_it(files):
    """Whitespace inside a sequence line (read as nothing all-vs-all) cannot be indexed: htslib
    counts it, or fetches it as a residue, or fails on the line widths it breaks. The error names
    record, line and column and how to fix it, not an index that "does not match" (which this run
    built) or a line width."""
    pairs = files / "pairs.tsv"
    pairs.write_text("q1\tt1\n")
    ws = files / "ws.fa"
    ws.write_text(f">q1\nMKVLAAGHWE\nRTY LLKPQ\n>t1\n{SEQS['t1']}\n")  # htslib indexes it: 18 residues
    for _ in range(2):  # the index this run built is removed with the error: the second run says the same
        r = CliRunner().invoke(cli, ["align", "--pairs", str(pairs), str(ws), "--no-progress"])
        assert r.exit_code == 1, r.output
        assert (f"{ws}: line 3, column 4: record 'q1' has a space inside its sequence" in r.output
                and "seqkit seq -g -w 60" in r.output and "does not match" not in r.output), r.output
        assert not (files / "ws.fa.fai").exists()
    # in a line before the last (htslib fails on the line widths it breaks), a tab at every line's end
    for text, where in ((">q1\nMKVLA\nAG HW\nERTYL\nLKPQ\n>t1\nMKV\n", "line 3, column 3: record 'q1' has a space"),
                        (">t1\nMKV\n>q1\nMKVLA\t\nAGHWE\t\nRT\t\n", "line 4, column 6: record 'q1' has a tab")):
        ws.write_text(text)
        with pytest.raises(FormatError, match=rf"{ws}: {where} inside its sequence; --pairs reads the FASTA through "
                                              r"a \.fai index.*seqkit seq -g -w 60"):
            align_fasta(ws, pairs=pairs, output=files / "x.tsv")
    # an index that samtools faidx built before (htslib indexes the first file) is no excuse either
    ws.write_text(f">q1\nMKVLAAGHWE\nRTY LLKPQ\n>t1\n{SEQS['t1']}\n")
    verbosity = pysam.set_verbosity(0)
    try:
        pysam.faidx(str(ws))
    finally:
        pysam.set_verbosity(verbosity)
    with pytest.raises(FormatError, match=rf"{ws}: line 3, column 4: record 'q1' has a space"):
        align_fasta(ws, pairs=pairs, output=files / "x.tsv")
    assert (files / "ws.fa.fai").exists()  # the user's: it stays


def test_pair_list_fasta_with_a_byte_order_mark_or_cr_line_ends_is_refused_saying_so(files):
    """A UTF-8 byte-order mark and classic Mac (CR-only) line ends are read all-vs-all, but a
    .fai index cannot hold them: the error names them and the fix, not a line width."""
    pairs = files / "pairs.tsv"
    pairs.write_text("q1\tt1\n")
    bom = files / "bom.fa"
    bom.write_bytes(b"\xef\xbb\xbf" + fasta(["q1", "t1"]).encode())
    r = CliRunner().invoke(cli, ["align", "--pairs", str(pairs), str(bom), "--no-progress"])
    assert r.exit_code == 1, r.output
    assert (f"{bom}: starts with a UTF-8 byte-order mark (BOM" in r.output and "sed -i" in r.output
            and "line width" not in r.output), r.output
    cr = files / "cr.fa"
    cr.write_bytes(fasta(["q1", "t1"]).replace("\n", "\r").encode())
    with pytest.raises(FormatError, match=rf"{cr}: its lines end in CR alone \(classic Mac line ends\).*"
                                          r"tr '\\r' '\\n'"):
        align_fasta(cr, pairs=pairs, output=files / "x.tsv")
    assert not (files / "bom.fa.fai").exists() and not (files / "cr.fa.fai").exists()


def test_pairs_cli_usage(files):
    runner = CliRunner()
    (files / "pairs.tsv").write_text("q1\tt1\n")
    r = runner.invoke(cli, ["align", "--pairs", str(files / "pairs.tsv")])
    assert r.exit_code == 2 and "--pairs PAIRS needs the FASTA file" in r.output
    r = runner.invoke(cli, ["align", "--pairs", str(files / "pairs.tsv"), str(files / "all.fa"),
                            "--pairing", "zip"])
    assert r.exit_code == 2 and "--pairing does not apply to --pairs" in r.output
    r = runner.invoke(cli, ["align", "--pairs", "-", "-"], input="q1 t1\n")
    assert r.exit_code == 1 and "only one input can be read from standard input" in r.output
    r = runner.invoke(cli, ["align", "--pairs", "-", str(files / "all.fa"), "--no-progress"], input="q1 t1\n")
    assert r.exit_code == 0, r.output
    assert rows(r.stdout) == expected_rows([("q1", "t1")])


# ------------------------------------------------------------------ alphabets and up-front checks
def test_mixed_file_is_an_alphabet_error_unless_a_model_is_given(files, caplog):
    (files / "mixed.fa").write_text(">p1\nMKVLAAGHWER\n>short\nGAGATTAC\n>n1\n" + "ACGTACGTTGCA" * 3 + "\n")
    with pytest.raises(AlphabetError, match=rf"{files / 'mixed.fa'} mixes DNA and protein: record 'n1' \(#3\) "
                                            rf"of {files / 'mixed.fa'} is DNA, record 'p1' \(#1\) .* is protein"):
        align_fasta(files / "mixed.fa", files / "t.fa", output=files / "x.tsv")
    with caplog.at_level("WARNING", logger="sinkalign.pipelines.align"):
        n = align_fasta(files / "mixed.fa", files / "t.fa", output=files / "x.tsv",
                        model=default_model_path("protein"))
    assert n == 6 and "mixes DNA and protein" in caplog.text
    # a short peptide made of nucleotide letters is a peptide: no error, the protein model
    (files / "peptides.fa").write_text(">p1\nMKVLAAGHWER\n>short\nGAGATTAC\n")
    assert align_fasta(files / "peptides.fa", files / "t.fa", output=files / "z.tsv") == 4
    # a protein record cannot meet the DNA model at all
    (files / "n.fa").write_text(">n2\nACGTTGCAAC\n")
    caplog.clear()
    with caplog.at_level("WARNING", logger="sinkalign.pipelines.align"), \
            pytest.raises(AlphabetError, match=rf"DNA model and record 't1' \(#1\) of {files / 't.fa'} is protein"):
        align_fasta(files / "n.fa", files / "t.fa", output=files / "y.tsv", model=default_model_path("dna"))
    assert caplog.text == ""  # the error alone: it was preceded by a warning saying the same


def test_pair_list_alphabet_mismatch_names_the_record(files):
    (files / "n.fa").write_text(">n1\nACGTACGTTGCAAC\n")
    (files / "pairs.tsv").write_text("q1 n1\n")
    with pytest.raises(AlphabetError, match=rf"DNA against protein: record 'n1' of {files / 'n.fa'} is DNA, "
                                            rf"record 'q1' of {files / 'q.fa'} is protein"):
        align_fasta(files / "q.fa", files / "n.fa", pairs=files / "pairs.tsv", output=files / "x.tsv")


def test_stockholm_self_pairs_fail_before_aligning(files, monkeypatch):
    """A Stockholm block needs two distinct names, so a record paired with itself (an
    all-vs-all self comparison) cannot be written: it is refused before any pair is aligned."""
    calls = []
    monkeypatch.setattr(pipeline, "align_chunk", lambda *a: calls.append(a) or [])
    with pytest.raises(InputError, match=r"record 'q1' \(#1\) of .*q.fa \(all-vs-all\): pairs 'q1' with itself, "
                                         r"and a Stockholm block needs two distinct sequence names: give the "
                                         r"pairs without self pairs \(--pairs FILE"):
        align_fasta(files / "q.fa", files / "q.fa", fmt="stockholm", output=files / "x.sto")
    (files / "same.fa").write_text(fasta(["t2", "q2", "t1"]))
    with pytest.raises(InputError, match=r"pair #2 .*: pairs 'q2' with itself"):
        align_fasta(files / "q.fa", files / "same.fa", pairing="zip", fmt="stockholm", output=files / "x.sto")
    (files / "pairs.tsv").write_text("q1 t1\nt2 t2\n")
    with pytest.raises(InputError, match=r"pairs.tsv: line 2: pairs 't2' with itself"):
        align_fasta(files / "all.fa", pairs=files / "pairs.tsv", fmt="stockholm", output=files / "x.sto")
    assert calls == [] and not (files / "x.sto").exists()
    monkeypatch.undo()
    # the same self comparison in another format works
    assert align_fasta(files / "q.fa", files / "q.fa", fmt="json", output=files / "x.json") == 9


def test_stockholm_two_records_sharing_an_id_are_not_called_a_self_pair(files, monkeypatch):
    """Two different sequences under one id (one in each file) cannot share a Stockholm block
    either, but that is not a record paired with itself: the error says they share the id and
    differ, and how to go on; a real self pair keeps its own message."""
    calls = []
    monkeypatch.setattr(pipeline, "align_chunk", lambda *a: calls.append(a) or [])
    (files / "other.fa").write_text(f">q2\n{SEQS['t1']}\n>q1\n{SEQS['t2']}\n")
    def share(rid):
        return (rf"share the id '{rid}' but are different sequences, and a Stockholm block needs two distinct "
                r"sequence names: rename one of them, or use a format without that limit \(--format tsv, sam")

    r = CliRunner().invoke(cli, ["align", str(files / "q.fa"), str(files / "other.fa"), "-o", str(files / "x.sto"),
                                 "--no-progress"])
    assert r.exit_code == 1, r.output
    msg = " ".join(r.output.split())
    assert (f"record 'q1' (#1) of {files / 'q.fa'} and record 'q1' (#2) of {files / 'other.fa'} share the id 'q1' "
            "but are different sequences" in msg and "with itself" not in msg), r.output
    with pytest.raises(InputError, match=rf"pair #2 \({files / 'q.fa'} x {files / 'same.fa'}\): the query and the target "
                                         rf"{share('q2')}"):
        (files / "same.fa").write_text(f">t1\n{SEQS['t1']}\n>q2\n{SEQS['t2']}\n>t2\n{SEQS['t2']}\n")
        align_fasta(files / "q.fa", files / "same.fa", pairing="zip", fmt="stockholm", output=files / "x.sto")
    (files / "pairs.tsv").write_text("q1 q2\nq1 q1\n")
    with pytest.raises(InputError, match=rf"pairs.tsv: line 2: query 'q1' of {files / 'q.fa'} and target 'q1' of "
                                         rf"{files / 'other.fa'} {share('q1')}"):
        align_fasta(files / "q.fa", files / "other.fa", pairs=files / "pairs.tsv", fmt="stockholm",
                    output=files / "x.sto")
    # the same sequence under its own id in both files is a self pair
    (files / "copy.fa").write_text(fasta(["q1", "q2"]))
    with pytest.raises(InputError, match=r"pairs.tsv: line 2: pairs 'q1' with itself"):
        align_fasta(files / "q.fa", files / "copy.fa", pairs=files / "pairs.tsv", fmt="stockholm",
                    output=files / "x.sto")
    with pytest.raises(InputError, match=r"\(all-vs-all\): pairs 'q1' with itself"):
        align_fasta(files / "q.fa", files / "copy.fa", fmt="stockholm", output=files / "x.sto")
    assert calls == [] and not (files / "x.sto").exists()


def test_zip_counts_and_lengths_fail_before_aligning(files, monkeypatch):
    calls = []
    monkeypatch.setattr(pipeline, "align_chunk", lambda *a: calls.append(a) or [])
    with pytest.raises(InputError, match=r"needs equal record counts: .*q.fa has 3, .*t.fa has 2"):
        align_fasta(files / "q.fa", files / "t.fa", pairing="zip", output=files / "x.tsv")
    import sinkalign.align.aligner as A

    monkeypatch.setattr(A, "MAX_LENGTH", 20)
    with pytest.raises(InputError, match=r"record 't2' \(#2\) of .*t.fa has 25 residues, more than the 20"):
        align_fasta(files / "q.fa", files / "t.fa", output=files / "x.tsv")
    (files / "pairs.tsv").write_text("q1 t1\nq2 t2\n")
    with pytest.raises(InputError, match=r"record 'q2' of .*all.fa has 27 residues, more than the 20"):
        align_fasta(files / "all.fa", pairs=files / "pairs.tsv", output=files / "x.tsv")
    assert calls == []


def test_bad_options(files):
    with pytest.raises(InputError, match="--format bam is binary"):
        align_fasta(files / "q.fa", files / "t.fa", fmt="bam", output="-")
    with pytest.raises(InputError, match="--plan-out is a .npz archive"):
        align_fasta(files / "q.fa", files / "t.fa", output=files / "x.tsv", plan_out="-")
    with pytest.raises(InputError, match="either workers .* or scheduler"):
        align_fasta(files / "q.fa", files / "t.fa", workers=2, scheduler="tcp://127.0.0.1:1")
    r = CliRunner().invoke(cli, ["align", str(files / "q.fa"), str(files / "t.fa"), "--format", "bam", "-o", "-"])
    assert r.exit_code == 2 and "--format bam needs -o FILE" in r.output


def test_cluster_without_dask_names_the_extra(files, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    r = CliRunner().invoke(cli, ["align", str(files / "q.fa"), str(files / "t.fa"), "--workers", "2",
                                 "-o", str(files / "x.tsv"), "--no-progress"])
    assert r.exit_code == 1
    assert "needs distributed, which is not installed; install the 'cluster' extra" in r.output
    assert not (files / "x.tsv").exists()
    r = CliRunner().invoke(cli, ["align", str(files / "q.fa"), str(files / "t.fa"), "--workers", "2"])
    assert r.exit_code == 1 and r.stdout == ""  # refused before the first byte of output


def test_duplicate_ids_are_found_in_constant_memory_scans(files, monkeypatch):
    """Queries are streamed without remembering their ids; a duplicate is still an error
    naming both records, before anything is aligned."""
    calls = []
    monkeypatch.setattr(pipeline, "align_chunk", lambda *a: calls.append(a) or [])
    (files / "dup.fa").write_text(fasta(["q1", "q2", "q3"]) + f">q2\n{SEQS['q1']}\n")
    for pairing, query, target in (("all", "dup.fa", "t.fa"), ("zip", "dup.fa", "all.fa"),
                                   ("zip", "all.fa", "dup.fa"), ("all", "t.fa", "dup.fa")):
        with pytest.raises(ValueError, match=r"dup.fa: record 'q2' \(#4\): duplicate record id \(first seen as "
                                             r"record #2\)"):
            align_fasta(files / query, files / target, pairing=pairing, output=files / "x.tsv")
    assert calls == []
    h = pipeline._UniqueIds(files / "q.fa")  # a hash collision alone is no duplicate
    for rid in ("q1", "q2", "q3"):
        h.add(rid)
    h._hashes.append(hash("q2"))  # as if another id hashed like q2
    h.check()


def test_pairs_past_the_cell_budget_fail_before_aligning(files, monkeypatch):
    """The aligner's budget is m x n residue pairs (MAX_PAIR_CELLS: past MAX_CELLS a pair is
    solved on a corridor): all-vs-all checks each query against the longest target, zip each pair, a pair list each listed pair, all before the first pair is
    aligned, naming both records."""
    import sinkalign.align.aligner as A

    calls = []
    monkeypatch.setattr(pipeline, "align_chunk", lambda *a: calls.append(a) or [])
    monkeypatch.setattr(A, "MAX_PAIR_CELLS", 600)  # q2 (27) x t2 (25) = 675; every other pair fits
    with pytest.raises(InputError, match=r"record 'q2' \(#2\) of .*q.fa \(27 residues\) against record 't2' "
                                         r"\(#2\) of .*t.fa \(25\) makes 675 residue pairs \(all-vs-all aligns "
                                         r"every pair\), more than the 600"):
        align_fasta(files / "q.fa", files / "t.fa", output=files / "x.tsv")
    (files / "z.fa").write_text(fasta(["q1", "q2"]))
    with pytest.raises(InputError, match=r"record 'q2' \(#2\) of .*z.fa \(27 residues\) against record 't2' "
                                         r"\(#2\) of .*t.fa \(25\) makes 675 residue pairs, more than the 600"):
        align_fasta(files / "z.fa", files / "t.fa", pairing="zip", output=files / "x.tsv")
    (files / "pairs.tsv").write_text("q1 t2\nq2 t1\nq2 t2\n")
    with pytest.raises(InputError, match=r"record 'q2' of .*all.fa \(27 residues\) against record 't2' of "
                                         r".*all.fa \(25\) makes 675 residue pairs \(.*pairs.tsv: line 3\)"):
        align_fasta(files / "all.fa", pairs=files / "pairs.tsv", output=files / "x.tsv")
    assert calls == [] and not (files / "x.tsv").exists()
    monkeypatch.undo()
    monkeypatch.setattr(A, "MAX_PAIR_CELLS", 700)  # now every pair fits
    assert align_fasta(files / "all.fa", pairs=files / "pairs.tsv", output=files / "x.tsv") == 3


def test_pairs_past_the_dense_limit_are_refused_up_front_only_with_dense_plans(files, monkeypatch):
    """A pair past MAX_CELLS is solved on a corridor, on either engine; where every plan is
    dense (--band dense, --backend pallas) such a pair is an error before anything is aligned,
    naming both records."""
    import sinkalign.align.aligner as A

    monkeypatch.setattr(A, "MAX_CELLS", 600)  # q2 (27) x t2 (25) = 675
    monkeypatch.setattr(A, "LONG_BAND", 2)  # so that its corridor fits
    (files / "z.fa").write_text(fasta(["q1", "q2"]))
    for options in ({"band": "dense"}, {"backend": "pallas"}):
        with pytest.raises(InputError, match=r"record 'q2' \(#2\) of .*z.fa \(27 residues\) against record 't2' "
                                             r"\(#2\) of .*t.fa \(25\) makes 675 residue pairs, more than the 600 "
                                             r".*these plans are dense \(--band dense, --backend pallas"):
            align_fasta(files / "z.fa", files / "t.fa", pairing="zip", output=files / "x.tsv", **options)
        assert not (files / "x.tsv").exists()

    def cigars(path):
        rows = [line.split("\t") for line in path.read_text().splitlines()]
        return [row[rows[0].index("cigar")] for row in rows[1:]]

    assert align_fasta(files / "z.fa", files / "t.fa", pairing="zip", output=files / "j.tsv", engine="jax") == 2
    assert align_fasta(files / "z.fa", files / "t.fa", pairing="zip", output=files / "x.tsv") == 2
    assert cigars(files / "j.tsv") == cigars(files / "x.tsv")  # the same corridor, whichever engine


@pytest.mark.parametrize("change", ["swap", "grow"])
def test_an_index_of_another_file_is_refused_whatever_its_time(tmp_path, change):
    """A .fai of an earlier file is refused even when the new file kept an older time (cp -p,
    rsync -a, tar x): two records of one length swapped would fetch each other's residues, a
    grown last record would be cut; the index is checked against every record's id, length and
    offset."""
    rng = np.random.default_rng(0)
    recs = [(f"r{k}", "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), n))) for k, n in enumerate((60, 99, 99, 70))]
    fa = tmp_path / "s.fasta"
    fa.write_text("".join(f">{i}\n{s}\n" for i, s in recs))
    (tmp_path / "pairs.tsv").write_text("r1\tr2\n")
    assert CliRunner().invoke(cli, ["align", "--pairs", str(tmp_path / "pairs.tsv"), str(fa), "--no-progress"]
                              ).exit_code == 0  # builds s.fasta.fai
    assert (tmp_path / "s.fasta.fai").exists()
    new = list(recs)
    if change == "swap":
        new[1], new[2] = new[2], new[1]
    else:
        new[3] = (new[3][0], new[3][1] + "KKKKWWWW")
    fa.write_text("".join(f">{i}\n{s}\n" for i, s in new))
    old = time.time() - 10 * 86400
    os.utime(fa, (old, old))  # older than the index, as cp -p keeps it
    (tmp_path / "pairs.tsv").write_text("r1\tr3\n")
    r = CliRunner().invoke(cli, ["align", "--pairs", str(tmp_path / "pairs.tsv"), str(fa), "--no-progress"])
    assert r.exit_code == 1 and "s.fasta.fai does not match" in r.output and "samtools faidx" in r.output, r.output


def test_a_pair_list_or_fasta_from_a_named_pipe_is_read_whole(tmp_path):
    """A named pipe (or a shell's <(...)) is copied first, as standard input is: its readers open
    it more than once (a gzip test, two passes over a pair list), which lost pairs or hung."""
    import threading

    rng = np.random.default_rng(1)
    recs = [(f"r{k}", "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), 50))) for k in range(6)]
    fa = tmp_path / "s.fasta"
    fa.write_text("".join(f">{i}\n{s}\n" for i, s in recs))
    listed = "".join(f"r{a}\tr{b}\n" for a in range(6) for b in range(6) if a != b)
    pipes = {name: tmp_path / name for name in ("pairs.fifo", "fasta.fifo")}
    for p in pipes.values():
        os.mkfifo(p)

    def feed(path, text):
        with open(path, "w") as fh:
            fh.write(text)

    threads = [threading.Thread(target=feed, args=(pipes["pairs.fifo"], listed), daemon=True),
               threading.Thread(target=feed, args=(pipes["fasta.fifo"], fa.read_text()), daemon=True)]
    for t in threads:
        t.start()
    out = tmp_path / "out.tsv"
    r = CliRunner().invoke(cli, ["align", "--pairs", str(pipes["pairs.fifo"]), str(pipes["fasta.fifo"]), "-o",
                                 str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    rows = out.read_text().splitlines()[1:]
    assert [tuple(row.split("\t")[:2]) for row in rows] == [tuple(line.split("\t")) for line in listed.splitlines()]
