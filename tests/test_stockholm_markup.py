"""A Stockholm alignment's markup kept through ``sinkalign msa --add-to``
(:mod:`sinkalign.io.stockholm`): ``#=GF`` and ``#=GS`` lines as written, ``#=GC`` / ``#=GR``
annotations moved with their columns, the rows' own gap characters; and the Stockholm
writer of ``sinkalign msa``."""

from __future__ import annotations

import io

import numpy as np
import pytest
from Bio import AlignIO

from sinkalign.align.msa import add_to_alignment
from sinkalign.io.alignments import row_descriptions
from sinkalign.io.fasta import SequenceFormatError
from sinkalign.io.stockholm import StockholmMarkup, read_stockholm_markup, write_stockholm
from tests.test_msa_add import REF_IDS, REF_ROWS, _run, is_subsequence, lcs_posterior

# two interleaved blocks; '.' and '-' gaps; a lower-case insertion; every kind of markup
SMALL = """# STOCKHOLM 1.0
#=GF ID   toy
#=GF AC   PF00000.1
#=GF DE   a toy family
#=GF SQ   3
# a free comment
#=GS s1/1-9   AC Q00001.1
#=GS s1/1-9   DE first
#=GS s1/1-9   DE   sequence
#=GS s2/3-10  AC Q00002.1

s1/1-9        MKV.LA
#=GR s1/1-9 SS HHH.EE
s2/3-10       MK-aLA
s3            ------
#=GC SS_cons  HHH.EE
#=GC RF       xxx.xx

s1/1-9        GHW
#=GR s1/1-9 SS E-C
s2/3-10       GHW
s3            ---
#=GC SS_cons  E-C
#=GC RF       xxx
//
"""


def test_the_markup_is_read_as_written(tmp_path):
    path = tmp_path / "toy.sto"
    path.write_text(SMALL)
    m = read_stockholm_markup(path)
    assert m.file == ("#=GF ID   toy", "#=GF AC   PF00000.1", "#=GF DE   a toy family", "# a free comment")
    assert m.sequences == ("#=GS s1/1-9   AC Q00001.1", "#=GS s1/1-9   DE first", "#=GS s1/1-9   DE   sequence",
                           "#=GS s2/3-10  AC Q00002.1")
    assert m.columns == {"SS_cons": "HHH.EEE-C", "RF": "xxx.xxxxx"}
    assert m.residues == {"s1/1-9": {"SS": "HHH.EEE-C"}}
    assert m.rows == {"s1/1-9": "MKV.LAGHW", "s2/3-10": "MK-aLAGHW", "s3": "---------"}
    assert m.descriptions() == {"s1/1-9": "first sequence"}
    assert row_descriptions(path) == {"s1/1-9": "first sequence"}  # not the id of an undescribed row


def test_row_descriptions_of_a_stockholm_file_without_de_lines_are_empty(tmp_path):
    path = tmp_path / "plain.sto"
    path.write_text("# STOCKHOLM 1.0\n#=GS a AC P1\na MKV\nb MKV\n//\n")
    assert row_descriptions(path) == {}


@pytest.mark.parametrize("index, line, words", [
    (15, "#=GC SS_cons  HHH.E", ["line 16", "#=GC SS_cons", "8 characters", "9 columns"]),
    (12, "#=GR s1/1-9 SS HHH.E", ["line 13", "#=GR s1/1-9 SS", "8 characters", "9 columns"]),
])
def test_an_annotation_of_the_wrong_length_is_named(tmp_path, index, line, words):
    path = tmp_path / "bad.sto"
    lines = SMALL.splitlines()
    assert lines[index].split()[:2] == line.split()[:2]  # the first block's line of that annotation
    lines[index] = line
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SequenceFormatError) as err:
        read_stockholm_markup(path)
    for word in [str(path), *words]:
        assert word in str(err.value)


def test_spread_moves_each_annotation_with_its_column():
    m = StockholmMarkup(("#=GF ID x",), (), {"SS_cons": "HE-"}, {"a": {"SS": "hE."}}, {"a": "Mk."})
    out = m.spread([0, 2, 3], 5)
    assert out.file == m.file
    assert out.columns == {"SS_cons": "H.E-."}
    assert out.residues == {"a": {"SS": "h.E.."}}
    assert out.rows == {"a": "M.k.."}
    assert m.spread([0, 1, 2], 3) == m
    with pytest.raises(ValueError, match="increase"):
        m.spread([0, 0, 1], 5)
    with pytest.raises(ValueError, match="increase"):
        m.spread([-1, 0, 1], 5)
    with pytest.raises(ValueError, match="column map"):
        m.spread([0, 1], 5)


def test_the_writer_reads_back_and_keeps_the_markup():
    m = StockholmMarkup(("#=GF ID x", "#=GF DE y"), ("#=GS a AC P1", "#=GS a DE given"),
                        {"SS_cons": "HE-."}, {"a": {"SS": "hE.."}}, {"a": "Mk.."})
    handle = io.StringIO()
    write_stockholm(handle, ["a", "new"], ["Mk--", "M-KV"], markup=m, descriptions={"a": "other", "new": "added one"},
                    residues={"a": {"SS": "XXXX", "PP": "9..."}, "new": {"PP": "8.77"}},
                    columns={"SS_cons": "XXXX", "PP_cons": "8.77"})
    text = handle.getvalue()
    lines = text.splitlines()
    assert lines[:6] == ["# STOCKHOLM 1.0", "#=GF ID x", "#=GF DE y", "#=GF SQ 2", "#=GS a AC P1", "#=GS a DE given"]
    assert lines[6] == "#=GS new DE added one"  # the row the markup does not describe
    assert "#=GS a DE other" not in text
    assert "a" + " " * 12 + "Mk.." in lines  # as written, names padded past the longest, "#=GC PP_cons"
    aln = AlignIO.read(io.StringIO(text), "stockholm")
    assert [str(r.seq) for r in aln] == ["Mk--", "M-KV"]  # Biopython reads every gap as '-'
    assert aln[0].letter_annotations == {"secondary_structure": "hE..", "posterior_probability": "9..."}
    assert aln[1].letter_annotations == {"posterior_probability": "8.77"}
    assert aln.column_annotations == {"secondary_structure": "HE-.", "posterior_probability": "8.77"}
    assert lines[-1] == "//"


def test_the_writer_refuses_rows_and_annotations_that_do_not_fit():
    with pytest.raises(ValueError, match="one row per id"):
        write_stockholm(io.StringIO(), ["a", "b"], ["MK", "M"])
    with pytest.raises(ValueError, match="3 characters"):
        write_stockholm(io.StringIO(), ["a"], ["MK"], columns={"SS_cons": "HHH"})


def test_a_row_with_other_residues_is_written_as_given():
    m = StockholmMarkup(rows={"a": "MK.."})
    handle = io.StringIO()
    write_stockholm(handle, ["a"], ["MR--"], markup=m)
    assert "a MR--" in handle.getvalue().splitlines()


def test_add_to_alignment_says_where_each_column_went():
    posteriors = lambda a, b: lcs_posterior(a.upper(), b.upper())  # noqa: E731
    full = add_to_alignment(REF_IDS, REF_ROWS, ["n"], ["MQQKVLAGHWERTY"], posteriors, consistency=0)
    dashed = ["".join(c if c.isalpha() else "-" for c in row) for row in REF_ROWS]
    assert len(full.source_columns) == len(REF_ROWS[0])
    assert np.all(np.diff(full.source_columns) > 0) and full.n_columns > len(REF_ROWS[0])
    for row, given in zip(full.rows, dashed):
        assert "".join(row[c] for c in full.source_columns) == given
    new = np.setdiff1d(np.arange(full.n_columns), full.source_columns)
    assert all(full.rows[r][c] == "-" for r in range(len(REF_ROWS)) for c in new)
    kept = add_to_alignment(REF_IDS, REF_ROWS, ["n"], ["MQQKVLAGHWERTY"], posteriors, consistency=0, keep_length=True)
    assert kept.source_columns.tolist() == list(range(len(REF_ROWS[0])))
    # a selection of columns follows them; a column dropped is -1
    some = full.columns(np.array([c for c in range(full.n_columns) if c != full.source_columns[1]]))
    assert some.source_columns[1] == -1
    assert some.source_columns[0] == full.source_columns[0]
    assert some.source_columns[2] == full.source_columns[2] - 1


# ----------------------------------------------------------------------------- the command

def test_cli_keeps_a_real_pfam_seed_whole(shared_data, tmp_path):
    """A Pfam seed (interleaved, with #=GF, #=GS AC and DR, #=GR SS and #=GC lines) with one of
    its rows taken out and added back: every markup line of the other rows survives."""
    src = shared_data / "pfam_seed" / "Pkinase.sto"
    lines = src.read_text().splitlines()
    gone = "AKT1_HUMAN/150-408"
    rows = [ln for ln in lines if ln.startswith(gone + " ")]
    seq = "".join(ln.split()[1] for ln in rows).replace(".", "").replace("-", "").upper()
    ref = tmp_path / "ref.sto"
    ref.write_text("\n".join(ln for ln in lines if gone not in ln) + "\n")
    new = tmp_path / "new.fa"
    new.write_text(f">{gone}\n{seq}\n")
    out = tmp_path / "out.sto"
    res = _run("msa", new, "--add-to", ref, "--independent", "--consistency", "0", "--nearest", "5",
               "--keep-length", "--format", "stockholm", "-o", out)
    assert res.exit_code == 0, res.output
    given, got = read_stockholm_markup(ref), read_stockholm_markup(out)
    assert got.file == given.file and got.sequences == given.sequences
    assert "PP_cons" not in given.columns and set(got.columns) == {*given.columns, "PP_cons"}
    assert {k: v for k, v in got.columns.items() if k != "PP_cons"} == given.columns  # every column where it was
    assert set(got.residues[gone]) == {"PP"}
    assert {k: v for k, v in got.residues.items() if k != gone} == given.residues
    assert {k: v for k, v in got.rows.items() if k != gone} == given.rows
    assert is_subsequence(got.rows[gone].replace("-", "").replace(".", "").upper(), seq)  # some residues dropped
