"""Scoring a multiple alignment against a reference (`sinkalign.align.msa_scores`, `sinkalign
score-msa`): SP, precision, F1 and TC against brute-force counts over residue pairs and columns,
trusted cores, every readable format, errors that name the row."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from Bio import AlignIO
from Bio.Align import MultipleSeqAlignment
from Bio.Seq import Seq
from Bio.SeqRecord import SeqRecord
from click.testing import CliRunner

from sinkalign.align.msa_scores import aligned_pairs, pooled, score_alignment, total_column
from sinkalign.cli.main import cli
from sinkalign.errors import InputError, SinkalignError
from sinkalign.io.alignments import MSA, msa_to_pairs, read_alignment

PROTEIN = "ACDEFGHIKLMNPQRSTVWY"


def random_alignment(rng, seqs, width_extra=4, lower=0.0) -> list[str]:
    """Gapped rows of ``seqs``: each residue at a random increasing column; a share ``lower``
    of residues lower case."""
    width = max(map(len, seqs)) + width_extra
    rows = []
    for s in seqs:
        cols = np.sort(rng.choice(width, size=len(s), replace=False))
        row = ["-"] * width
        for c, a in zip(cols, s):
            row[c] = a.lower() if rng.random() < lower else a
        rows.append("".join(row))
    keep = [c for c in range(width) if any(r[c] != "-" for r in rows)]
    return ["".join(r[c] for c in keep) for r in rows]


def brute_pairs(row_a: str, row_b: str, upper_only=True) -> set:
    out, i, j = set(), -1, -1
    for a, b in zip(row_a, row_b):
        i += a.isalpha()
        j += b.isalpha()
        if a.isalpha() and b.isalpha() and (not upper_only or (a.isupper() and b.isupper())):
            out.add((i, j))
    return out


def brute_scores(test_rows: dict, ref_ids, ref_rows):
    tp = n_pred = n_ref = 0
    for a in range(len(ref_ids)):
        for b in range(a + 1, len(ref_ids)):
            truth = brute_pairs(ref_rows[a], ref_rows[b])
            pred = brute_pairs(test_rows[ref_ids[a]], test_rows[ref_ids[b]])
            tp += len(truth & pred)
            n_pred += len(pred)
            n_ref += len(truth)
    return tp, n_pred, n_ref


def brute_tc(test_rows: dict, ref_ids, ref_rows) -> tuple[int, int]:
    def column_of(row):
        out, k = {}, -1
        for c, a in enumerate(row):
            if a.isalpha():
                k += 1
                out[k] = c if a.isupper() else None
        return out

    test_cols = {name: column_of(row) for name, row in test_rows.items()}
    ok = total = 0
    for c in range(len(ref_rows[0])):
        members = []
        for name, row in zip(ref_ids, ref_rows):
            if row[c].isupper():
                members.append((name, sum(ch.isalpha() for ch in row[:c])))
        if len(members) < 2:
            continue
        total += 1
        placed = {test_cols[name][k] for name, k in members}
        ok += len(placed) == 1 and None not in placed
    return ok, total


def msa(ids, rows, fmt="fasta", source="ref") -> MSA:
    return MSA(tuple(ids), tuple(rows), source, fmt, "protein")


@pytest.mark.parametrize("seed", range(12))
def test_scores_match_brute_force_counts(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 7))
    seqs = ["".join(rng.choice(list(PROTEIN), size=int(rng.integers(1, 15)))) for _ in range(n)]
    ids = [f"s{k}" for k in range(n)]
    ref_rows = random_alignment(rng, seqs, lower=0.2 if seed % 2 else 0.0)  # Stockholm-like insertions
    test_rows = random_alignment(rng, seqs, lower=0.15 if seed % 3 == 0 else 0.0)
    order = rng.permutation(n)  # the test lists its rows in another order
    test = msa([ids[k] for k in order], [test_rows[k] for k in order], source="test")
    got = score_alignment(test, msa(ids, ref_rows, "stockholm"))
    tp, n_pred, n_ref = brute_scores(dict(zip(ids, test_rows)), ids, ref_rows)
    assert (got.overall["tp"], got.overall["n_pred"], got.overall["n_ref"]) == (tp, n_pred, n_ref)
    assert got.overall["pairs"] == n * (n - 1) // 2
    assert got.tc == brute_tc(dict(zip(ids, test_rows)), ids, ref_rows)
    assert sum(s["pairs"] for s in got.by_identity.values()) == sum(p[2] == p[2] for p in got.pairs)  # NaN: none
    for q, t, _, s in got.pairs:
        a, b = ids.index(q), ids.index(t)
        np.testing.assert_array_equal(sorted(map(tuple, aligned_pairs(test_rows[a], test_rows[b]).tolist())),
                                      sorted(brute_pairs(test_rows[a], test_rows[b])))
        assert s.tp == len(brute_pairs(test_rows[a], test_rows[b]) & brute_pairs(ref_rows[a], ref_rows[b]))


def test_an_alignment_against_itself_scores_one():
    rows = ["MK-VL", "MKAV-", "-KAVL"]
    s = score_alignment(msa("abc", rows, source="test"), msa("abc", rows))
    assert s.overall["precision"] == s.overall["recall"] == s.overall["f1"] == 1.0
    assert s.tc == (5, 5) and s.total_column == 1.0 and s.extra == ()


def test_an_all_lower_case_test_alignment_is_warned_of(caplog):
    """All-lower-case Stockholm rows are insertions: scored 0 with a warning saying why (it
    was 0 with no word; the reference side already warned)."""
    rows = ["MK-VL", "MKAV-", "-KAVL"]
    with caplog.at_level("WARNING", logger="sinkalign.align.msa_scores"):
        s = score_alignment(msa("abc", [r.lower() for r in rows], "stockholm", source="low.sto"),
                            msa("abc", rows))
        assert s.overall["recall"] == 0.0
        assert "low.sto: every residue of its rows is lower case, and in Stockholm" in caplog.text
        caplog.clear()
        score_alignment(msa("abc", [rows[0].lower(), *rows[1:]], "stockholm", source="t.sto"), msa("abc", rows))
    assert "lower case" not in caplog.text  # one lower-case row is a choice, not the whole file


def test_aligned_fasta_errors_name_the_row(tmp_path):
    """A non-ASCII letter in a row was Biopython's "'ascii' codec can't decode byte 0xc3 in
    position 4"; unaligned FASTA given as an alignment gets a hint."""
    bad = tmp_path / "u.afa"
    bad.write_bytes(b">a first\nA-CDE\n>b\nAKCD-\n>c\n-KC\nD\xc3\xa9\n")
    with pytest.raises(SinkalignError, match=r"u.afa: row 'c' \(#3\): non-ASCII character 'é' at column 4 "):
        read_alignment(bad)
    ragged = tmp_path / "un.fa"
    ragged.write_text(">a\nMKVLAAGIVALL\n>b\nMKVLAAGIV\n")
    with pytest.raises(SinkalignError, match=r"row 'b' \(#2\) has 9 columns, the first row has 12; the rows of an "
                                             r"alignment have one length: is this unaligned FASTA\?"):
        read_alignment(ragged)


def test_a_structural_reference_counts_its_trusted_core_only():
    # bench1.0: lower case = aligned but untrusted; a pair counts when either residue is trusted
    ref = msa("ab", ["ACDef", "ACDgh"], "bench")
    test = msa("ab", ["ACDEF-", "ACD-GH"], source="test")  # E/F mis-placed, but they are untrusted
    s = score_alignment(test, ref)
    assert (s.overall["tp"], s.overall["n_pred"], s.overall["n_ref"]) == (3, 3, 3)
    assert s.tc == (3, 3)
    wrong = msa("ab", ["ACD-EF", "AC-DGH"], source="test")  # D moved: a trusted pair lost and one made
    s = score_alignment(wrong, ref)
    assert (s.overall["tp"], s.overall["n_pred"], s.overall["n_ref"]) == (2, 2, 3)
    assert s.tc == (2, 3)


def test_rows_must_match_by_name_and_residues():
    ref = msa("ab", ["MKV-L", "MK-AL"])
    with pytest.raises(InputError, match="no row 'b' of the reference"):
        score_alignment(msa(["a", "c"], ["MKVL", "MKAL"], source="t.afa"), ref)
    with pytest.raises(InputError, match=r"row 'b' is not the reference's sequence .*residue 2 \(0-based\) is 'S' in the test "
                                         r"and 'A' in the reference"):
        score_alignment(msa("ab", ["MKVL", "MKSL"], source="t.afa"), ref)
    with pytest.raises(InputError, match="5 residues in the test and 4"):
        score_alignment(msa("ab", ["MKVL-", "MKALL"], source="t.afa"), ref)
    extra = score_alignment(msa("abz", ["MKV-L", "MK-AL", "WWWWW"], source="t.afa"), ref)
    assert extra.extra == ("z",) and extra.overall["pairs"] == 1


def test_total_column_needs_every_trusted_residue_in_one_test_column():
    ref = msa("abc", ["AC", "AC", "A-"])
    assert total_column(msa("abc", ["AC", "AC", "A-"]), ref) == (2, 2)
    assert total_column(msa("abc", ["A-C", "AC-", "A--"]), ref) == (1, 2)
    assert total_column(msa("abc", ["aC", "AC", "A-"]), ref) == (1, 2)  # an insertion is in no column


FORMATS = {"fasta": "fasta", "clustal": "clustal", "stockholm": "stockholm", "phylip": "phylip-relaxed"}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_reads_to_the_same_rows(tmp_path, fmt):
    rows = ["MKV-LAGH", "MK-ALAGH", "-KVALA-H"]
    aln = MultipleSeqAlignment([SeqRecord(Seq(r), id=i, description="") for i, r in zip(["x1", "x2", "x3"], rows)])
    path = tmp_path / f"a.{fmt}"
    AlignIO.write(aln, path, FORMATS[fmt])
    got = read_alignment(path)
    assert got.ids == ("x1", "x2", "x3") and got.rows == tuple(rows)


def test_read_alignment_errors(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("hello world\n")
    with pytest.raises(SinkalignError, match="not an aligned FASTA"):
        read_alignment(bad)
    two = tmp_path / "two.sto"
    two.write_text("# STOCKHOLM 1.0\na MKV\nb MKA\n//\n# STOCKHOLM 1.0\na MKV\nb MKA\n//\n")
    with pytest.raises(SinkalignError, match="holds 2 alignments"):
        read_alignment(two)


def _write(path: Path, ids, rows) -> Path:
    path.write_text("".join(f">{i}\n{r}\n" for i, r in zip(ids, rows)))
    return path


def test_score_msa_cli(tmp_path):
    ref = _write(tmp_path / "ref.afa", "abc", ["MKV-LAGH", "MK-ALAGH", "-KVALA-H"])
    test = _write(tmp_path / "test.afa", "cab", ["KVALAH", "MKVLAGH", "MKALAGH"])  # other order, no gaps
    r = CliRunner().invoke(cli, ["score-msa", str(test), str(ref), "--json", str(tmp_path / "s.json"),
                                 "--pairs", str(tmp_path / "p.tsv")])
    assert r.exit_code == 1 and "has 7 columns, the first row has 6" in r.output  # not an alignment
    test = _write(tmp_path / "test.afa", "cab", ["-KVALA-H", "MKV-LAGH", "MK-ALAGH"])
    r = CliRunner().invoke(cli, ["score-msa", str(test), str(ref), "--json", str(tmp_path / "s.json"),
                                 "--pairs", str(tmp_path / "p.tsv")])
    assert r.exit_code == 0, r.output
    assert "TC (total column): 1.000" in r.output
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["overall"]["recall"] == data["overall"]["precision"] == 1.0 and data["tc"] == 1.0
    lines = (tmp_path / "p.tsv").read_text().splitlines()
    assert lines[0].split("\t")[:4] == ["family", "query", "target", "identity"] and len(lines) == 4
    assert all(line.startswith("ref\t") for line in lines[1:])
    # nothing is clobbered unasked
    before = (tmp_path / "s.json").read_text()
    r = CliRunner().invoke(cli, ["score-msa", str(test), str(ref), "--json", str(tmp_path / "s.json")])
    assert r.exit_code == 1 and "already exists" in r.output and (tmp_path / "s.json").read_text() == before
    r = CliRunner().invoke(cli, ["score-msa", str(test), str(ref), "--json", str(tmp_path / "s.json"), "--overwrite"])
    assert r.exit_code == 0, r.output
    # a sequence that differs is named
    other = _write(tmp_path / "other.afa", "abc", ["MKV-LAGH", "MK-ALAGW", "-KVALA-H"])
    r = CliRunner().invoke(cli, ["score-msa", str(other), str(ref)])
    assert r.exit_code == 1 and "row 'b' is not the reference's sequence" in r.output


def test_score_msa_reads_standard_input_or_a_pipe_for_either_file(tmp_path):
    """``-`` (standard input) and a pipe (a shell's ``<(...)``) for TEST or REFERENCE are read once,
    through a copy: a pipe was taken for a missing file, or read empty by a second open after
    the format was sniffed. Both ``-`` is refused (standard input holds one file)."""
    import os
    import shlex
    import subprocess
    import sys

    ref = _write(tmp_path / "ref.afa", "abc", ["MKV-LAGH", "MK-ALAGH", "-KVALA-H"])
    sto = tmp_path / "fam.sto"
    sto.write_text("# STOCKHOLM 1.0\nb MK-ALAGH\na MKV-LAGH\nc -KVALA-H\n//\n")
    runner = CliRunner()
    for args in (["-", str(ref)], [str(ref), "-"]):
        r = runner.invoke(cli, ["score-msa", *args, "--json", "-"], input=sto.read_text())
        assert r.exit_code == 0, r.output
        data = json.loads(r.stdout)
        assert data["overall"]["recall"] == data["overall"]["precision"] == 1.0 and data["tc"] == 1.0
    r = runner.invoke(cli, ["score-msa", "-", "-"], input=sto.read_text())
    assert r.exit_code == 2 and "TEST and REFERENCE are both '-'" in r.output, r.output
    r = runner.invoke(cli, ["score-msa", str(ref), "-"], input="garbage\n")  # named as given, not as its copy
    assert r.exit_code == 1 and "<stdin>: line 1 starts with 'garbage'" in r.output, r.output
    code = "import sys; sys.argv[0] = 'sinkalign'; from sinkalign.cli.main import main; main()"  # the console script
    exe = shlex.join([sys.executable, "-c", code])
    out = [tmp_path / "a.json", tmp_path / "b.json"]
    script = (f"{exe} score-msa <(cat {shlex.quote(str(sto))}) {shlex.quote(str(ref))} --json {out[0]} && "
              f"{exe} score-msa {shlex.quote(str(ref))} <(cat {shlex.quote(str(sto))}) --json {out[1]}")
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert res.returncode == 0, res.stdout + res.stderr
    for path in out:
        data = json.loads(path.read_text())
        assert data["overall"]["recall"] == data["overall"]["precision"] == 1.0 and data["tc"] == 1.0


def test_sinkalign_msa_scored_against_a_structural_reference(tmp_path):
    """The command's own output, in each format, scores the same against a bench1.0 reference."""
    ref = tmp_path / "ref.afa"
    ref.write_text(">a\nMKVLAAGHWERTYLLKPQDESTRIVNG-\n>b\nMKILSAGHWERT-LLKPQDESTRIVNG-\n"
                   ">c\nMKVLA-GHWERTYLLKPQD-STRIVNga\n")
    fasta = tmp_path / "in.fa"
    fasta.write_text(">a\nMKVLAAGHWERTYLLKPQDESTRIVNG\n>b\nMKILSAGHWERTLLKPQDESTRIVNG\n"
                     ">c\nMKVLAGHWERTYLLKPQDSTRIVNGA\n")
    results = []
    for fmt in ("fasta", "clustal", "stockholm", "phylip"):
        out = tmp_path / f"out.{fmt}"
        r = CliRunner().invoke(cli, ["msa", str(fasta), "--format", fmt, "-o", str(out)])
        assert r.exit_code == 0, r.output
        r = CliRunner().invoke(cli, ["score-msa", str(out), str(ref), "--json", str(tmp_path / f"{fmt}.json")])
        assert r.exit_code == 0, r.output
        results.append(json.loads((tmp_path / f"{fmt}.json").read_text()))
    assert all(r["overall"] == results[0]["overall"] and r["tc"] == results[0]["tc"] for r in results)
    from sinkalign.io.structural import read_reference_alignment

    want = score_alignment(read_alignment(tmp_path / "out.fasta"), read_reference_alignment(ref)[0])
    assert results[0]["overall"] == json.loads(json.dumps(want.overall)) and results[0]["tc"] == want.total_column
    assert want.overall["n_ref"] == 26 + 24 + 23  # (a, b), (a, c), (b, c): c's last two residues untrusted


def test_read_alignment_takes_homstrad_pir_with_its_comment_lines(tmp_path):
    pir = tmp_path / "fam.ali"
    pir.write_text("C; a HOMSTRAD family\n\n>P1;a\nstructureX:a\nMKV-L*\n>P1;b\nsequence:b\nMK-AL*\n")
    got = read_alignment(pir)
    assert got.ids == ("a", "b") and got.rows == ("MKV-L", "MK-AL") and got.format == "pir"


def test_score_msa_cli_on_folders_pools_the_families(tmp_path):
    refs, tests = tmp_path / "refs", tmp_path / "tests"
    refs.mkdir()
    tests.mkdir()
    fams = {"fam1": ("abc", ["MKV-LAGH", "MK-ALAGH", "-KVALA-H"], ["MKVL-AGH", "MKAL-AGH", "-KVALA-H"]),
            "fam2": ("xy", ["WWERT-Y", "WWE-TTY"], ["WWERTY-", "WWETTY-"])}
    for name, (ids, ref_rows, test_rows) in fams.items():
        _write(refs / f"{name}.afa", ids, ref_rows)
        _write(tests / f"{name}.fasta", ids, test_rows)
    (tests / "extra.afa").write_text(">q\nMK\n")  # a test file without a reference: not scored
    r = CliRunner().invoke(cli, ["score-msa", str(tests), str(refs), "--json", str(tmp_path / "s.json"),
                                 "--families", str(tmp_path / "f.tsv"), "--pairs", str(tmp_path / "p.tsv")])
    assert r.exit_code == 0, r.output
    from sinkalign.io.structural import read_reference_alignment

    each = [score_alignment(read_alignment(tests / f"{n}.fasta"), read_reference_alignment(refs / f"{n}.afa")[0])
            for n in fams]
    want = pooled(each)
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["overall"] == json.loads(json.dumps(want.overall)) and data["tc_columns"] == list(want.tc)
    assert want.overall["pairs"] == 3 + 1 and want.tc == (each[0].tc[0] + each[1].tc[0], each[0].tc[1] + each[1].tc[1])
    assert set(data["families"]) == {"fam1", "fam2"}
    rows = [line.split("\t") for line in (tmp_path / "f.tsv").read_text().splitlines()]
    assert rows[0] == ["family", "pairs", "sp", "precision", "f1", "tc", "tc_columns"]
    assert [r[0] for r in rows[1:]] == ["fam1", "fam2"]
    assert float(rows[1][2]) == pytest.approx(each[0].overall["recall"], abs=1e-4)
    assert len((tmp_path / "p.tsv").read_text().splitlines()) == 1 + 4
    # a reference without its test alignment, a file against a folder, two files of one family
    (refs / "fam3.afa").write_text(">a\nMK\n>b\nMK\n")
    r = CliRunner().invoke(cli, ["score-msa", str(tests), str(refs)])
    assert r.exit_code == 2 and "no alignment of family 'fam3'" in r.output
    r = CliRunner().invoke(cli, ["score-msa", str(tests / "fam1.fasta"), str(refs)])
    assert r.exit_code == 2 and "both as files or both as folders" in r.output
    (refs / "fam3.afa").unlink()
    (tests / "fam1.sto").write_text("# STOCKHOLM 1.0\na MK\n//\n")
    r = CliRunner().invoke(cli, ["score-msa", str(tests), str(refs)])
    assert r.exit_code == 2 and "are both family 'fam1'" in r.output


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_score_msa_takes_a_reference_in_every_format(tmp_path, fmt):
    """As README says: either file may be any format read_alignment reads (Clustal, PHYLIP
    included), the same scores whatever the reference's format."""
    rows = ["MKV-LAGH", "MK-ALAGH", "-KVALA-H"]
    aln = MultipleSeqAlignment([SeqRecord(Seq(r), id=i, description="") for i, r in zip("abc", rows)])
    ref = tmp_path / f"ref.{fmt}"
    AlignIO.write(aln, ref, FORMATS[fmt])
    test = _write(tmp_path / "test.afa", "abc", ["MKVLAGH-", "MKALAGH-", "KVALAH--"])
    want = score_alignment(read_alignment(test), msa("abc", rows))
    r = CliRunner().invoke(cli, ["score-msa", str(test), str(ref), "--json", str(tmp_path / "s.json")])
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["overall"]["recall"] == pytest.approx(want.overall["recall"]) and 0 < want.overall["recall"] < 1


def test_an_a2m_reference_aligns_no_insertion(tmp_path):
    """An A2M reference, told by its suffix or by its ragged rows (not the bench1.0 reader, whose
    lower case is aligned but untrusted): its lower case are insertions, in no reference pair."""
    text = ">a\nMKgVLAGH\n>b\nMK.ALAGH\n>c\nMKvALAGH\n"
    for name in ("ref.a2m", "ref.fa"):
        path = tmp_path / name
        path.write_text(text if name.endswith("a2m") else text.replace(".", ""))
        ref = read_reference(path)
        assert ref.format == "a2m" and ref.rows[0] == "MKgVLAGH" and ref.rows[1] == "MK-ALAGH"
        counts = {(p.query_id, p.target_id): len(p.pairs) for p in msa_to_pairs(ref)}
        assert counts == {("a", "b"): 7, ("a", "c"): 7, ("b", "c"): 7}  # g and v are in no reference pair


def read_reference(path):
    from sinkalign.io.structural import read_reference_alignment

    (ref,) = read_reference_alignment(path)
    return ref


def test_a_test_that_aligns_nothing_has_no_precision(tmp_path):
    """Precision is 0 / 0 where the test aligns no scored pair: NaN in the scores, null in the
    JSON, NA in the TSV files and '-' in the table, not 0.000; recall and F1 are 0."""
    ref = msa("ab", ["MKV", "MKA"])
    s = score_alignment(msa("ab", ["MKV---", "---MKA"], source="test"), ref)
    assert np.isnan(s.overall["precision"]) and s.overall["recall"] == s.overall["f1"] == 0.0
    assert s.to_dict()["overall"]["precision"] is None and s.to_dict()["pairs"][0]["precision"] is None
    test, refile = tmp_path / "t.afa", tmp_path / "r.afa"
    test.write_text(">a\nMKV---\n>b\n---MKA\n")
    refile.write_text(">a\nMKV\n>b\nMKA\n")
    r = CliRunner().invoke(cli, ["score-msa", str(test), str(refile), "--json", str(tmp_path / "s.json"),
                                 "--pairs", str(tmp_path / "p.tsv")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "s.json").read_text())["overall"]["precision"] is None
    assert (tmp_path / "p.tsv").read_text().splitlines()[1].split("\t")[7:] == ["NA", "0.0000", "0.0000"]
    all_row = next(line for line in r.output.splitlines() if " all " in line)
    assert [cell.strip() for cell in all_row.split("\u2502")[1:-1]] == ["all", "1", "0.000", "-", "0.000"]


def test_a_reference_of_one_row_says_so(tmp_path):
    test, refile = tmp_path / "t.afa", tmp_path / "r.afa"
    test.write_text(">a\nMKV\n")
    refile.write_text(">a\nMKV\n")
    r = CliRunner().invoke(cli, ["score-msa", str(test), str(refile)])
    assert r.exit_code == 1 and "the reference holds one row (a): there is no pair of rows to score" in r.output


def test_a_subset_of_the_reference_rows_and_an_alignment_built_in_memory(tmp_path):
    """``subset=True`` (``score-msa --subset``) scores a test that aligned some of the family's
    sequences against the reference's rows it holds: the same as scoring against a reference
    cut to those rows by hand, TC over their columns; fewer than two shared rows is an error.
    An alignment built in memory (``align_multiple``'s, with no source file) is scored as one
    read from a file (it failed on the missing ``source``)."""
    rng = np.random.default_rng(3)
    seqs = ["".join(rng.choice(list(PROTEIN), n)) for n in (30, 34, 28, 31, 33)]
    ref_rows = random_alignment(rng, seqs)
    ref = msa("abcde", ref_rows)
    test_rows = random_alignment(np.random.default_rng(4), [seqs[k] for k in (3, 0, 1)])
    test = msa("dab", test_rows, source="part.afa")
    with pytest.raises(InputError, match="no row 'c' of the reference.*subset=True"):
        score_alignment(test, ref)
    got = score_alignment(test, ref, subset=True)
    cut = msa("abd", [ref_rows[0], ref_rows[1], ref_rows[3]])
    want = score_alignment(test, cut)
    assert got.overall == want.overall and got.tc == want.tc and got.overall["pairs"] == 3
    tp, n_pred, n_ref = brute_scores(dict(zip("dab", test_rows)), "abd", cut.rows)
    assert (got.overall["tp"], got.overall["n_pred"], got.overall["n_ref"]) == (tp, n_pred, n_ref)
    with pytest.raises(InputError, match="holds 1 of the rows"):
        score_alignment(msa("ax", ["MK", "MK"], source="t.afa"), ref, subset=True)
    from sinkalign.align.msa import MultipleAlignment

    built = MultipleAlignment(ids=("d", "a", "b"), rows=tuple(test_rows), tree="(d,(a,b));", score=0.0)
    assert score_alignment(built, ref, subset=True).overall == got.overall
    with pytest.raises(InputError, match="^the test alignment: no row 'c'"):
        score_alignment(built, ref)
    # the command line
    _write(tmp_path / "ref.afa", "abcde", ref_rows)
    _write(tmp_path / "part.afa", "dab", test_rows)
    r = CliRunner().invoke(cli, ["score-msa", str(tmp_path / "part.afa"), str(tmp_path / "ref.afa"), "--subset",
                                 "--json", str(tmp_path / "s.json")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "s.json").read_text())["overall"]["f1"] == pytest.approx(got.overall["f1"])
