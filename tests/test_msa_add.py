"""Adding sequences to an existing alignment without changing it (MAFFT's --add):
:func:`sinkalign.align.msa.add_to_alignment` and ``sinkalign msa NEW --add-to ALIGNMENT``."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from Bio import AlignIO, SeqIO
from click.testing import CliRunner

from sinkalign.align.aligner import Aligner, resolve_model
from sinkalign.align.baselines import Scoring, align_pair
from sinkalign.align.msa import MsaCalibration, MultipleAlignment, add_to_alignment, align_multiple, nearest_rows
from sinkalign.cli.align import EXAMPLES
from sinkalign.cli.main import cli
from sinkalign.errors import InputError
from sinkalign.io.alignments import read_alignment
from sinkalign.io.stockholm import read_stockholm_markup

# a hand-written alignment: '.' and '-' gaps, lower-case letters, an all-gap column (14) and a
# row with no residues at all
REF_IDS = ["r1", "r2", "r3", "r4"]
REF_ROWS = ["MKV.LAg-HWE-RT-Y",
            "MK--LAGaHWE-RT-Y",
            "................",
            "MkVL-AG.HWEkRT-."]


# ----------------------------------------------------------------------------- helpers

def nw_posterior(a: str, b: str) -> np.ndarray:
    """1 at the residue pairs of the Needleman-Wunsch alignment of ``a`` and ``b``, else 0."""
    pairs = align_pair(a.upper(), b.upper(), "nw", scoring=Scoring.protein()).pairs
    M = np.zeros((len(a), len(b)))
    M[pairs[:, 0], pairs[:, 1]] = 1.0
    return M


def lcs_posterior(a: str, b: str) -> np.ndarray:
    """1 at the residue pairs of a longest common subsequence of ``a`` and ``b`` (identical
    letters along one path; every case below has a single such path), else 0."""
    m, n = len(a), len(b)
    D = np.zeros((m + 1, n + 1), np.int64)
    for i in range(m - 1, -1, -1):
        for j in range(n - 1, -1, -1):
            D[i, j] = D[i + 1, j + 1] + 1 if a[i] == b[j] else max(D[i + 1, j], D[i, j + 1])
    M = np.zeros((m, n))
    i = j = 0
    while i < m and j < n:
        if a[i] == b[j]:
            M[i, j] = 1.0
            i, j = i + 1, j + 1
        elif D[i + 1, j] >= D[i, j + 1]:
            i += 1
        else:
            j += 1
    return M


def never_called(a: str, b: str) -> np.ndarray:
    raise AssertionError("the input should have been refused before any pairwise alignment")


def dashed(row: str) -> str:
    """Every character that is not a letter written '-'."""
    return "".join(c if c.isalpha() else "-" for c in row)


def without_all_gap_columns(rows) -> list[str]:
    keep = [c for c in range(len(rows[0])) if any(row[c] != "-" for row in rows)]
    return ["".join(row[c] for c in keep) for row in rows]


def existing_columns(out_rows, in_rows) -> list[int]:
    """The output columns that are the input's, in order: the input's columns must appear, in
    order, among the output's, and every other output column be a gap in every row (a greedy
    match is exact: all-gap columns are interchangeable)."""
    width = len(in_rows[0])
    place, k = [], 0
    for c in range(len(out_rows[0])):
        column = [row[c] for row in out_rows]
        if k < width and column == [row[k] for row in in_rows]:
            place.append(c)
            k += 1
        else:
            assert set(column) == {"-"}, f"output column {c} is neither the next existing column nor a new one"
    assert k == width, f"only {k} of the {width} existing columns are in the output"
    return place


def is_subsequence(short: str, long: str) -> bool:
    it = iter(long)
    return all(c in it for c in short)


def check_shape(aln: MultipleAlignment) -> None:
    """Rows of one width; one confidence per residue of each row and per column."""
    width = aln.n_columns
    assert all(len(row) == width for row in aln.rows)
    assert len(aln.confidence) == len(aln.rows)
    for row, conf in zip(aln.rows, aln.confidence):
        assert len(conf) == sum(c != "-" for c in row)
    assert len(aln.column_confidence) == width


# ----------------------------------------------------------------------------- the existing rows are kept

NEW_SETS = [
    (["n1"], ["MKVLAGHWERTY"]),
    (["n1"], ["MKVLWWWAGHWERTYYY"]),  # insertions that no column takes
    (["n1"], ["QQQPPP"]),  # nothing in common with the alignment
    (["n1"], ["GHWE"]),  # a fragment
    (["n1", "n2", "n3"], ["MKVLAGHWERTY", "WWMKVLAGHWERTYWW", "KVLAGHW"]),
]


@pytest.mark.parametrize("consistency", [0, 2])
@pytest.mark.parametrize("ids, seqs", NEW_SETS)
def test_full_mode_keeps_the_existing_rows_and_adds_every_residue(ids, seqs, consistency):
    out = add_to_alignment(REF_IDS, REF_ROWS, ids, seqs, nw_posterior, consistency=consistency)
    check_shape(out)
    assert out.ids == tuple(REF_IDS + ids)
    ref_out, new_out = list(out.rows[:len(REF_IDS)]), list(out.rows[len(REF_IDS):])
    given = [dashed(row) for row in REF_ROWS]
    # the existing rows, the columns new to them deleted, are the rows given
    assert without_all_gap_columns(ref_out) == without_all_gap_columns(given)
    place = existing_columns(ref_out, given)  # every existing column, the all-gap one too, in order
    assert ref_out[2] == "-" * out.n_columns  # the row without residues stays so
    assert out.rows[0][place[6]] == "g" and out.rows[3][place[1]] == "k"  # letter case kept
    # each new row holds its sequence, and a column is opened only for a new residue: no column
    # is all gaps but (at most) the one given so
    assert [row.replace("-", "") for row in new_out] == seqs
    assert sum(all(row[c] == "-" for row in out.rows) for c in range(out.n_columns)) <= 1
    assert out.tree == "" and out.calibrated is False


@pytest.mark.parametrize("ids, seqs", NEW_SETS)
def test_keep_length_keeps_the_rows_and_the_width_exactly(ids, seqs):
    out = add_to_alignment(REF_IDS, REF_ROWS, ids, seqs, nw_posterior, keep_length=True)
    check_shape(out)
    assert out.ids == tuple(REF_IDS + ids)
    assert out.n_columns == len(REF_ROWS[0])
    assert list(out.rows[:len(REF_IDS)]) == [dashed(row) for row in REF_ROWS]
    for row, seq in zip(out.rows[len(REF_IDS):], seqs):
        assert is_subsequence(row.replace("-", ""), seq)


def test_keep_length_drops_what_full_mode_puts_in_new_columns():
    ids, seqs = ["n1", "n2"], ["MKVLWWWAGHWERTYYY", "QMKVLAGHWERTY"]
    full = add_to_alignment(REF_IDS, REF_ROWS, ids, seqs, nw_posterior)
    kept = add_to_alignment(REF_IDS, REF_ROWS, ids, seqs, nw_posterior, keep_length=True)
    assert full.n_columns > len(REF_ROWS[0])  # the W and Y insertions opened columns
    place = existing_columns(full.rows[:len(REF_IDS)], [dashed(row) for row in REF_ROWS])
    # the all-gap column is matched to some all-gap column of the existing rows: compare the others
    real = [k for k in range(len(REF_ROWS[0])) if k != 14]
    for full_row, kept_row in zip(full.rows, kept.rows):
        assert [full_row[place[k]] for k in real] == [kept_row[k] for k in real]


# ----------------------------------------------------------------------------- a case checked by hand

# the rows AC-GT and ACAGT; a posterior function matching identical letters along their single
# longest common path
HAND = ["AC-GT", "ACAGT"]


@pytest.mark.parametrize("consistency", [0, 2])
@pytest.mark.parametrize("seq, full, kept", [
    ("ACAGT", ["AC-GT", "ACAGT", "ACAGT"], "ACAGT"),  # fits the existing columns
    ("ACGT", ["AC-GT", "ACAGT", "AC-GT"], "AC-GT"),
    ("ACAWGT", ["AC--GT", "ACA-GT", "ACAWGT"], "ACAGT"),  # W: exactly one new column, inside
    ("WACGT", ["-AC-GT", "-ACAGT", "WAC-GT"], "AC-GT"),  # ... at the start
    ("ACGTW", ["AC-GT-", "ACAGT-", "AC-GTW"], "AC-GT"),  # ... at the end
    ("WW", ["AC-GT--", "ACAGT--", "-----WW"], "-----"),  # nothing matches: every residue its own column
])
def test_a_residue_no_column_takes_opens_one_column_or_is_dropped(seq, full, kept, consistency):
    out = add_to_alignment(["a", "b"], HAND, ["n"], [seq], lcs_posterior, consistency=consistency)
    assert out.ids == ("a", "b", "n")
    assert list(out.rows) == full
    out = add_to_alignment(["a", "b"], HAND, ["n"], [seq], lcs_posterior, consistency=consistency, keep_length=True)
    assert list(out.rows) == [*HAND, kept]


def test_new_sequences_share_the_column_they_open_together():
    out = add_to_alignment(["a", "b"], HAND, ["n1", "n2", "n3"], ["ACAWGT", "ACAWGT", "CG"], lcs_posterior)
    assert list(out.rows) == ["AC--GT", "ACA-GT", "ACAWGT", "ACAWGT", "-C--G-"]
    out = add_to_alignment(["a", "b"], HAND, ["n1", "n2", "n3"], ["ACAWGT", "ACAWGT", "CG"], lcs_posterior,
                           keep_length=True)
    assert list(out.rows) == [*HAND, "ACAGT", "ACAGT", "-C-G-"]


def test_each_new_sequence_is_aligned_to_every_nonempty_row_and_the_others():
    calls, counted = [], []

    def spy(a, b):
        calls.append((a, b))
        return lcs_posterior(a, b)

    out = add_to_alignment(["a", "e", "b"], ["Ac-Gt", "-.-.-", "ACAGT"], ["n1", "n2", "n3"], ["ACAWGT", "CG", "AT"],
                           spy, progress=counted.append)
    # N K + N (N - 1) / 2 pairs: 3 * 2 + 3, the row without residues not aligned; the rows given
    # to the function ungapped and upper-cased
    assert sum(counted) == len(calls) == 9
    assert sorted(calls) == sorted([("ACGT", "ACAWGT"), ("ACAGT", "ACAWGT"), ("ACGT", "CG"), ("ACAGT", "CG"),
                                    ("ACAWGT", "CG"), ("ACGT", "AT"), ("ACAGT", "AT"), ("ACAWGT", "AT"), ("CG", "AT")])
    assert out.rows[:3] == ("Ac--Gt", "------", "ACA-GT")


def test_independent_records_are_aligned_to_the_rows_alone_and_open_their_own_columns():
    calls = []

    def spy(a, b):
        calls.append((a, b))
        return lcs_posterior(a, b)

    out = add_to_alignment(["a", "b"], HAND, ["n1", "n2", "n3"], ["ACAWGT", "ACAWGT", "CG"], spy, consistency=0,
                           independent=True)
    assert len(calls) == 6 and all(a in ("ACGT", "ACAGT") for a, _ in calls)  # N K, never two new records
    # the two W's are not matched to each other: one column each (with them shared, above, one)
    assert list(out.rows) == ["AC---GT", "ACA--GT", "ACAW-GT", "ACA-WGT", "-C---G-"]
    kept = add_to_alignment(["a", "b"], HAND, ["n1", "n2", "n3"], ["ACAWGT", "ACAWGT", "CG"], lcs_posterior,
                            consistency=0, keep_length=True, independent=True)
    assert list(kept.rows) == [*HAND, "ACAGT", "ACAGT", "-C-G-"]
    with pytest.raises(ValueError, match="independent placement takes no consistency rounds"):
        add_to_alignment(["a", "b"], HAND, ["n"], ["ACGT"], never_called, consistency=2, independent=True)


def test_an_independent_record_is_placed_as_if_it_were_added_alone(shipped, globins, base):
    seqs = {"MYG_HUMAN": globins["MYG_HUMAN"], "HBA_FRAG": globins["HBA_HUMAN"][30:100],
            "HBB_FRAG": globins["HBB_HUMAN"][5:60]}
    together = add_to_alignment(base.ids, base.rows, list(seqs), list(seqs.values()), shipped, consistency=0,
                                keep_length=True, independent=True)
    for k, (name, seq) in enumerate(seqs.items()):
        alone = add_to_alignment(base.ids, base.rows, [name], [seq], shipped, consistency=0, keep_length=True)
        assert together.rows[2 + k] == alone.rows[2], name
        np.testing.assert_allclose(together.confidence[2 + k], alone.confidence[2])
    # one record: the default recipe at 0 rounds, alignment for alignment, in full mode too
    one = add_to_alignment(base.ids, base.rows, ["MYG_HUMAN"], [globins["MYG_HUMAN"]], shipped, consistency=0,
                           independent=True)
    assert one.rows == add_to_alignment(base.ids, base.rows, ["MYG_HUMAN"], [globins["MYG_HUMAN"]], shipped,
                                        consistency=0).rows


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("args, kwargs, message", [
    ((["a", "b"], ["MK-V", "MKV"], ["n"], ["MKV"]), {}, "row 'b' has 3 columns, expected 4"),
    ((["a", "b"], ["MK-V", "MKIV"], ["b"], ["MKV"]), {}, "unique.*'b' is repeated"),
    ((["a"], ["MK-V"], ["n", "n"], ["MKV", "MV"]), {}, "unique.*'n' is repeated"),
    ((["a"], ["MK-V"], ["n", "m"], ["MKV", ""]), {}, "sequence 'm' is empty"),
    ((["a"], ["MK-V"], [], []), {}, "no sequences to add"),
    ((["a"], ["MK-V"], ["n"], ["MKV"]), {"consistency": -1}, "consistency=-1 must be >= 0"),
    ((["a"], ["MK-V"], ["n"], ["MKV", "MV"]), {}, "1 ids but 2 sequences"),
    (([], [], ["n"], ["MKV"]), {}, "needs rows"),
    ((["a", "b"], ["MK-V"], ["n"], ["MKV"]), {}, "needs rows.*2 ids, 1 rows"),
    ((["a"], ["MK\u00e9V"], ["n"], ["MKV"]), {}, "row 'a' has a character that is not ASCII"),
    ((["a"], ["MK-V"], ["n"], ["MK\u00e9V"]), {}, "sequence 'n' has a character that is not ASCII"),
    ((["a", "b"], ["---", "..."], ["n"], ["MKV"]), {}, "the alignment has no residues to add to"),
    ((["a"], [""], ["n"], ["MKV"]), {}, "the alignment has no residues to add to"),
    ((["a"], ["MK*V"], ["n"], ["MKV"]), {}, "row 'a' has '\\*' at column 3"),
    ((["a"], ["MK-V"], ["n"], ["--MKV"]), {}, "sequence 'n' has '-' at position 1: .* ungapped"),
])
def test_bad_input_is_refused_before_any_alignment(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        add_to_alignment(*args, never_called, **kwargs)


def test_posteriors_of_another_kind_are_refused():
    with pytest.raises(TypeError, match="an Aligner, a mapping of pairs of names or a function"):
        add_to_alignment(["a"], ["MK-V"], ["n"], ["MKV"], [np.ones((3, 3))])
    with pytest.raises(ValueError, match="no posteriors for the pair 'a', 'n'"):  # keyed by index, not name
        add_to_alignment(["a"], ["MK-V"], ["n"], ["MKV"], {(0, 1): np.ones((3, 3))})
    with pytest.raises(ValueError, match=r"posteriors of 'a' and 'n' have shape \(2, 3\), expected \(3, 3\)"):
        add_to_alignment(["a"], ["MK-V"], ["n"], ["MKV"], {("a", "n"): np.ones((2, 3))})


# ----------------------------------------------------------------------------- the shipped aligner

@pytest.fixture(scope="module")
def shipped() -> Aligner:
    return Aligner.load()


@pytest.fixture(scope="module")
def globins() -> dict[str, str]:
    return {r.id: str(r.seq) for name in ("globins_query.fasta", "globins_target.fasta")
            for r in SeqIO.parse(EXAMPLES / name, "fasta")}


@pytest.fixture(scope="module")
def base(shipped, globins) -> MultipleAlignment:
    """HBA_HUMAN and HBB_HUMAN aligned from scratch (no all-gap column)."""
    return align_multiple(["HBA_HUMAN", "HBB_HUMAN"], [globins["HBA_HUMAN"], globins["HBB_HUMAN"]], shipped)


def residues_kept(row: str, start: int, stop: int) -> str:
    """``row`` with its residues outside ``[start, stop)`` written '-'."""
    out, k = [], 0
    for c in row:
        out.append(c if c != "-" and start <= k < stop else "-")
        k += c != "-"
    return "".join(out)


@pytest.mark.parametrize("keep_length", [False, True])
def test_a_copy_of_a_row_gets_exactly_that_row(shipped, globins, base, keep_length):
    out = add_to_alignment(base.ids, base.rows, ["HBA_COPY"], [globins["HBA_HUMAN"]], shipped, keep_length=keep_length)
    check_shape(out)
    assert out.ids == ("HBA_HUMAN", "HBB_HUMAN", "HBA_COPY")
    assert out.rows == (*base.rows, base.rows[0])


def test_sequences_and_rows_are_taken_as_align_multiple_takes_them(shipped, globins, base):
    """bytes, Bio.Seq and a protein's trailing '*' as align_multiple takes them (str() of them was
    read: "sequence 'n' has \"'\" at position 2"); a SeqRecord is named as a record."""
    from Bio.Seq import Seq
    from Bio.SeqRecord import SeqRecord

    frag = globins["HBB_HUMAN"][20:70]
    want = add_to_alignment(base.ids, base.rows, ["FRAG"], [frag], shipped, keep_length=True).rows
    for given in (frag.encode(), Seq(frag), frag + "*"):
        rows = [r.encode() for r in base.rows] if isinstance(given, bytes) else list(base.rows)
        assert add_to_alignment(base.ids, rows, ["FRAG"], [given], shipped, keep_length=True).rows == want
    with pytest.raises(InputError, match=r"sequence 'FRAG' is of type SeqRecord, not a sequence .*; for a record, "
                                         r"its .seq"):
        add_to_alignment(base.ids, base.rows, ["FRAG"], [SeqRecord(Seq(frag), id="FRAG")], shipped)


def test_a_fragment_of_a_row_gets_that_rows_columns(shipped, globins, base):
    out = add_to_alignment(base.ids, base.rows, ["FRAG"], [globins["HBB_HUMAN"][20:70]], shipped)
    assert out.rows == (*base.rows, residues_kept(base.rows[1], 20, 70))


def test_adding_myoglobin_keeps_the_two_rows(shipped, globins, base):
    myg = globins["MYG_HUMAN"]
    full = add_to_alignment(base.ids, base.rows, ["MYG_HUMAN"], [myg], shipped)
    check_shape(full)
    place = existing_columns(full.rows[:2], base.rows)
    assert full.rows[2].replace("-", "") == myg
    kept = add_to_alignment(base.ids, base.rows, ["MYG_HUMAN"], [myg], shipped, keep_length=True)
    check_shape(kept)
    assert kept.rows[:2] == base.rows and kept.n_columns == base.n_columns
    assert is_subsequence(kept.rows[2].replace("-", ""), myg)
    # keep_length is full mode without the new columns (base has no all-gap column to confuse them)
    assert kept.rows == tuple("".join(row[c] for c in place) for row in full.rows)
    assert full.n_columns - base.n_columns == len(myg) - len(kept.rows[2].replace("-", ""))


def test_several_sequences_added_at_once(shipped, globins, base):
    ids = ["MYG_HUMAN", "HBA_COPY", "HBB_FRAG"]
    seqs = [globins["MYG_HUMAN"], globins["HBA_HUMAN"], globins["HBB_HUMAN"][20:70]]
    out = add_to_alignment(base.ids, base.rows, ids, seqs, shipped, consistency=1)
    check_shape(out)
    assert out.ids == (*base.ids, *ids)
    existing_columns(out.rows[:2], base.rows)
    assert [row.replace("-", "") for row in out.rows[2:]] == seqs
    assert out.rows[3] == out.rows[0]  # the copy in HBA's columns, new ones included
    assert out.rows[4] == residues_kept(out.rows[1], 20, 70)
    kept = add_to_alignment(base.ids, base.rows, ids, seqs, shipped, consistency=1, keep_length=True)
    assert kept.rows[:2] == base.rows and kept.rows[3:] == (base.rows[0], residues_kept(base.rows[1], 20, 70))


# ----------------------------------------------------------------------------- the command

def _run(*args, input=None):
    return CliRunner().invoke(cli, list(map(str, args)), input=input, catch_exceptions=False)


@pytest.fixture()
def ref_file(tmp_path, base):
    path = tmp_path / "ref.afa"
    path.write_text("".join(f">{i}\n{row}\n" for i, row in zip(base.ids, base.rows)))
    return path


@pytest.fixture()
def new_file(tmp_path, globins):
    path = tmp_path / "new.fa"
    path.write_text(f">MYG_HUMAN Myoglobin\n{globins['MYG_HUMAN']}\n>HBB_FRAG\n{globins['HBB_HUMAN'][20:70]}\n")
    return path


def test_cli_adds_the_records_as_the_library_does(ref_file, new_file, tmp_path, shipped, globins, base):
    out = tmp_path / "out.afa"
    res = _run("msa", new_file, "--add-to", ref_file, "-o", out)
    assert res.exit_code == 0, res.output
    aln = AlignIO.read(out, "fasta")
    assert [rec.id for rec in aln] == ["HBA_HUMAN", "HBB_HUMAN", "MYG_HUMAN", "HBB_FRAG"]
    rows = [str(rec.seq) for rec in aln]
    existing_columns(rows[:2], base.rows)
    assert rows[2].replace("-", "") == globins["MYG_HUMAN"]
    assert rows[3] == residues_kept(rows[1], 20, 70)
    assert "Myoglobin" in aln[2].description
    want = add_to_alignment(base.ids, base.rows, ["MYG_HUMAN", "HBB_FRAG"],
                            [globins["MYG_HUMAN"], globins["HBB_HUMAN"][20:70]], shipped)
    assert tuple(rows) == want.rows


@pytest.mark.parametrize("fmt, bio", [("fasta", "fasta"), ("stockholm", "stockholm")])
def test_cli_keep_length_writes_the_alignments_columns(ref_file, new_file, tmp_path, base, globins, fmt, bio):
    out = tmp_path / f"out.{fmt}"
    res = _run("msa", new_file, "--add-to", ref_file, "--keep-length", "--format", fmt, "-o", out)
    assert res.exit_code == 0, res.output
    aln = AlignIO.read(out, bio)
    assert [rec.id for rec in aln] == ["HBA_HUMAN", "HBB_HUMAN", "MYG_HUMAN", "HBB_FRAG"]
    assert aln.get_alignment_length() == base.n_columns
    assert tuple(str(rec.seq) for rec in aln[:2]) == base.rows
    assert is_subsequence(str(aln[2].seq).replace("-", ""), globins["MYG_HUMAN"])
    assert str(aln[3].seq) == residues_kept(base.rows[1], 20, 70)


def test_cli_stockholm_reads_back_with_the_librarys_confidences(ref_file, new_file, tmp_path, shipped, base, globins):
    out = tmp_path / "out.sto"
    res = _run("msa", new_file, "--add-to", ref_file, "--format", "stockholm", "--consistency", "1", "-o", out)
    assert res.exit_code == 0, res.output
    aln = AlignIO.read(out, "stockholm")
    assert [rec.id for rec in aln] == ["HBA_HUMAN", "HBB_HUMAN", "MYG_HUMAN", "HBB_FRAG"]
    existing_columns([str(rec.seq) for rec in aln[:2]], base.rows)
    assert str(aln[2].seq).replace("-", "") == globins["MYG_HUMAN"]
    # the rounds given reach the library: its residues' confidences at one round, not the default two
    want = add_to_alignment(base.ids, base.rows, ["MYG_HUMAN", "HBB_FRAG"],
                            [globins["MYG_HUMAN"], globins["HBB_HUMAN"][20:70]], shipped, consistency=1)
    assert tuple(str(rec.seq) for rec in aln) == want.rows
    pp_rows, pp_cons = want.pp_lines()
    # the existing rows' residues were given, not placed: no PP line (it would be all '.')
    assert [rec.letter_annotations.get("posterior_probability", "." * want.n_columns) for rec in aln] == list(pp_rows)
    assert not any("posterior_probability" in rec.letter_annotations for rec in aln[:2])
    assert aln.column_annotations["posterior_probability"] == pp_cons


@pytest.mark.parametrize("records, args, words", [
    (None, ["--keep-length"], ["--keep-length", "--add-to"]),
    (None, ["--add-to", "{ref}", "--tree", "{tmp}/guide.nwk"], ["--tree"]),
    (">HBB_HUMAN\nMVHLTPEEKSAVTALWG\n", ["--add-to", "{ref}"], ["'HBB_HUMAN'", "already a row", "ref.afa"]),
    (">x\n" + "ACGTTGCA" * 6 + "\n", ["--add-to", "{ref}"], ["ref.afa", "protein", "dna"]),
])
def test_cli_errors_are_one_line_naming_the_option_or_record(ref_file, new_file, tmp_path, records, args, words):
    fasta = new_file
    if records is not None:
        fasta = tmp_path / "other.fa"
        fasta.write_text(records)
    out = tmp_path / "out.afa"
    args = [a.format(ref=ref_file, tmp=tmp_path) for a in args]
    res = CliRunner().invoke(cli, ["msa", str(fasta), "-o", str(out), *args])
    assert res.exit_code != 0
    assert "Traceback" not in res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), res.output
    for word in words:
        assert word in lines[0]
    assert not out.exists() and not (tmp_path / "guide.nwk").exists()


def test_cli_keeps_existing_files_and_its_inputs(ref_file, new_file, tmp_path):
    out = tmp_path / "out.afa"
    out.write_text("precious\n")
    res = CliRunner().invoke(cli, ["msa", str(new_file), "--add-to", str(ref_file), "-o", str(out)])
    assert res.exit_code != 0 and "already exists" in res.output and "--overwrite" in res.output
    assert out.read_text() == "precious\n"
    before = ref_file.read_text()
    res = CliRunner().invoke(cli, ["msa", str(new_file), "--add-to", str(ref_file), "-o", str(ref_file), "--overwrite"])
    assert res.exit_code != 0 and "ref.afa" in res.output and "Traceback" not in res.output
    assert ref_file.read_text() == before
    assert _run("msa", new_file, "--add-to", ref_file, "-o", out, "--overwrite").exit_code == 0
    assert out.read_text().startswith(">HBA_HUMAN")


def test_the_confidences_are_of_what_was_added():
    # the existing residues were given, not placed: NaN; a column's is the mean of its new
    # residues' (NaN without one); a new residue's is its pairings' mean, mapped when a map for
    # added records at those rounds is given
    ids, rows = ["a", "b"], ["MKVLAGHWE", "MKILSGHWE"]
    cal = MsaCalibration({2: ((3, (0.0, 1.0), (0.0, 1.0)),)}, added={0: ((0.0, 1.0), (0.5, 0.9))})
    for consistency in (0, 2):
        out = add_to_alignment(ids, rows, ["n1", "n2"], ["LAGH", "MKV"], nw_posterior, consistency=consistency)
        assert all(np.isnan(out.confidence[r]).all() and len(out.confidence[r]) == 9 for r in range(2))
        assert all(np.isfinite(out.confidence[r]).all() for r in (2, 3)) and not out.calibrated
        for c in range(out.n_columns):
            new = [out.confidence[r][len(out.rows[r][:c].replace("-", ""))]
                   for r in (2, 3) if out.rows[r][c] != "-"]
            if new:
                assert out.column_confidence[c] == pytest.approx(np.mean(new))
            else:
                assert np.isnan(out.column_confidence[c])
        mapped = add_to_alignment(ids, rows, ["n1", "n2"], ["LAGH", "MKV"], nw_posterior, consistency=consistency,
                                  calibration=cal)
        assert mapped.rows == out.rows and mapped.calibrated == (consistency == 0)
        for r in (2, 3):
            want = np.interp(out.confidence[r], (0.0, 1.0), (0.5, 0.9)) if consistency == 0 else out.confidence[r]
            np.testing.assert_allclose(mapped.confidence[r], want)
    # with no consistency each pairing is the pairwise library's: NW puts LAGH on a's LAGH (1.0)
    # and on b's L-S-G-H, of which it aligned L, G and H (1.0) and S (1.0 too: NW's pair)
    out = add_to_alignment(ids, rows, ["n"], ["LAGH"], nw_posterior, consistency=0)
    assert out.rows[2] == "---LAGH--"
    np.testing.assert_allclose(out.confidence[2], 1.0)


@pytest.mark.parametrize("fmt", ["fasta", "stockholm"])
def test_cli_keeps_the_descriptions_of_the_alignments_rows(tmp_path, base, new_file, fmt):
    # as MAFFT keeps them: '>id description' of an aligned FASTA reference, '#=GS id DE' of a Stockholm one
    ref = tmp_path / f"ref.{fmt}"
    if fmt == "fasta":
        ref.write_text(f">HBA_HUMAN Hemoglobin subunit alpha\n{base.rows[0]}\n>HBB_HUMAN\n{base.rows[1]}\n")
    else:
        ref.write_text(f"# STOCKHOLM 1.0\n#=GS HBA_HUMAN DE Hemoglobin subunit alpha\nHBA_HUMAN {base.rows[0]}\n"
                       f"HBB_HUMAN {base.rows[1]}\n//\n")
    out = tmp_path / "out"
    res = _run("msa", new_file, "--add-to", ref, "--format", fmt, "-o", out)
    assert res.exit_code == 0, res.output
    aln = AlignIO.read(out, fmt)
    described = {rec.id: rec.description for rec in aln}
    assert "Hemoglobin subunit alpha" in described["HBA_HUMAN"]
    assert "Hemoglobin" not in described["HBB_HUMAN"] and "Myoglobin" in described["MYG_HUMAN"]


def test_cli_independent_places_each_record_on_the_rows(ref_file, new_file, tmp_path, shipped, base, globins):
    out = tmp_path / "placed.afa"
    res = _run("msa", new_file, "--add-to", ref_file, "--independent", "--keep-length", "-o", out)
    assert res.exit_code == 0, res.output
    want = add_to_alignment(base.ids, base.rows, ["MYG_HUMAN", "HBB_FRAG"],
                            [globins["MYG_HUMAN"], globins["HBB_HUMAN"][20:70]], shipped, consistency=0,
                            keep_length=True, independent=True)
    assert tuple(str(rec.seq) for rec in AlignIO.read(out, "fasta")) == want.rows
    for args, message in [(("--consistency", "2"), "--independent takes no consistency rounds"),
                          ((), "--independent places records on the alignment given by --add-to")]:
        extra = ("--add-to", ref_file) if args else ()
        res = _run("msa", new_file, *extra, "--independent", *args, "-o", tmp_path / "x.afa")
        assert res.exit_code != 0 and message in res.output and "Traceback" not in res.output
        assert not (tmp_path / "x.afa").exists()


def test_msa_calibration_keeps_its_maps_for_added_records():
    cal = MsaCalibration({2: ((3, (0.1, 0.9), (0.2, 0.95)),)}, "here", added={0: ((0.1, 0.5), (0.4, 0.9)),
                                                                             2: ((0.3,), (0.8,))})
    back = MsaCalibration.from_dict(json.loads(json.dumps(cal.to_dict())))
    assert back.added == {0: ((0.1, 0.5), (0.4, 0.9)), 2: ((0.3,), (0.8,))} and back.knots == cal.knots
    np.testing.assert_allclose(back.added_mapper(0)(np.array([0.0, 0.3, 1.0])), [0.4, 0.65, 0.9])
    assert back.added_mapper(1) is None
    assert "added" not in MsaCalibration({2: ((3, (0.5,), (0.5,)),)}).to_dict()  # as the files before it
    for bad, message in [({0: ((0.5, 0.4), (0.1, 0.2))}, "added knots of 0 rounds: xs must be finite and increasing"),
                         ({1: ((0.1, 0.2), (0.9, 0.1))}, "added knots of 1 rounds: ys must be non-decreasing"),
                         ({-1: ((0.1,), (0.5,))}, "rounds must be integers >= 0")]:
        with pytest.raises(ValueError, match=message):
            MsaCalibration({}, added=bad)
    with pytest.raises(ValueError, match="added knots of 0 rounds: a mapping of x and y"):
        MsaCalibration.from_dict({"knots": {}, "added": {"0": [0.1, 0.2]}})


def test_the_shipped_model_calibrates_added_records(shipped, globins, base):
    assert sorted(shipped.msa_calibration.added) == [0, 1, 2, 3]
    for consistency in (0, 2):
        out = add_to_alignment(base.ids, base.rows, ["MYG_HUMAN"], [globins["MYG_HUMAN"]], shipped,
                               consistency=consistency)
        raw = add_to_alignment(base.ids, base.rows, ["MYG_HUMAN"], [globins["MYG_HUMAN"]], shipped,
                               consistency=consistency, calibration=MsaCalibration({}))
        assert out.calibrated and not raw.calibrated and out.rows == raw.rows
        np.testing.assert_allclose(out.confidence[2], shipped.msa_calibration.added_mapper(consistency)(raw.confidence[2]))
        # the library's own understate how often an added residue's pairings are right
        assert np.nanmean(out.confidence[2]) > np.nanmean(raw.confidence[2])
    # the maps were fitted on the mean's placements, not on combine="max"'s
    assert not add_to_alignment(base.ids, base.rows, ["MYG_HUMAN"], [globins["MYG_HUMAN"]], shipped, consistency=0,
                                combine="max").calibrated


def test_cli_warns_only_where_the_confidences_of_added_records_are_not_calibrated(ref_file, new_file, tmp_path,
                                                                                 caplog):
    with caplog.at_level("WARNING"):
        res = _run("msa", new_file, "--add-to", ref_file, "--format", "stockholm", "-o", tmp_path / "a.sto")
    assert res.exit_code == 0 and "not calibrated" not in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):  # the other shipped protein model has its own maps
        res = _run("msa", new_file, "--add-to", ref_file, "--model", "blosum", "--format", "stockholm",
                   "-o", tmp_path / "b.sto")
    assert res.exit_code == 0 and "not calibrated" not in caplog.text
    # a model without them (the shipped one, its maps for added records taken out)
    model = tmp_path / "model"
    shutil.copytree(resolve_model("learned"), model)
    state = json.loads((model / "state.json").read_text())
    del state["msa_calibration"]["added"]
    (model / "state.json").write_text(json.dumps(state))
    caplog.clear()
    with caplog.at_level("WARNING"):
        res = _run("msa", new_file, "--add-to", ref_file, "--model", model, "--format", "stockholm",
                   "-o", tmp_path / "c.sto")
    assert res.exit_code == 0 and "no calibration for records added with 2 consistency rounds" in caplog.text


def test_posteriors_given_by_pairs_of_names_are_the_functions(shipped, globins, base):
    new = {"MYG_HUMAN": globins["MYG_HUMAN"], "HBB_FRAG": globins["HBB_HUMAN"][20:70]}
    rows = {i: r.replace("-", "") for i, r in zip(base.ids, base.rows)}
    given = {(a, b): nw_posterior(rows.get(a, new.get(a)), new[b]) for a in rows for b in new}
    given[("HBB_FRAG", "MYG_HUMAN")] = nw_posterior(new["HBB_FRAG"], new["MYG_HUMAN"])  # either order
    want = add_to_alignment(base.ids, base.rows, list(new), list(new.values()), nw_posterior)
    got = add_to_alignment(base.ids, base.rows, list(new), list(new.values()), given)
    assert got.rows == want.rows
    np.testing.assert_allclose(got.confidence[2], want.confidence[2])
    del given[("HBA_HUMAN", "HBB_FRAG")]
    with pytest.raises(ValueError, match="no posteriors for the pair 'HBA_HUMAN', 'HBB_FRAG'"):
        add_to_alignment(base.ids, base.rows, list(new), list(new.values()), given)


def test_a_local_cluster_adds_as_one_process_does(ref_file, new_file, tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    import sinkalign.align.msa as msa_mod

    monkeypatch.setenv("JAX_ENABLE_X64", "1")  # the workers compute as this process does
    one, two = tmp_path / "one.sto", tmp_path / "two.sto"
    assert _run("msa", new_file, "--add-to", ref_file, "--format", "stockholm", "-o", one).exit_code == 0
    monkeypatch.setattr(msa_mod, "aligner_posteriors", None)  # from here on, only workers may align
    res = _run("msa", new_file, "--add-to", ref_file, "--format", "stockholm", "-o", two, "--workers", "2",
               "--chunk-size", "2")
    assert res.exit_code == 0, res.output
    assert two.read_text() == one.read_text()


def test_cli_keeps_the_letter_case_of_every_format(tmp_path, base, new_file):
    # aligned FASTA, Clustal, PHYLIP and MSF readers upper-case their rows; the rows added to come
    # back as the file has them (a bench1.0 core, a lower-case DNA alignment from MAFFT)
    rows = [base.rows[0][:12].lower() + base.rows[0][12:], base.rows[1].lower()]
    files = {"afa": "".join(f">{i}\n{r}\n" for i, r in zip(base.ids, rows)),
             "aln": "CLUSTAL W\n\n" + "".join(f"{i:12s}{r}\n" for i, r in zip(base.ids, rows)),
             "phy": f" 2 {len(rows[0])}\n" + "".join(f"{i} {r}\n" for i, r in zip(base.ids, rows))}
    for suffix, text in files.items():
        ref = tmp_path / f"ref.{suffix}"
        ref.write_text(text)
        out = tmp_path / f"out_{suffix}.afa"
        res = _run("msa", new_file, "--add-to", ref, "--keep-length", "-o", out)
        assert res.exit_code == 0, res.output
        assert [str(r.seq) for r in AlignIO.read(out, "fasta")][:2] == rows, suffix


def test_cli_case_follows_what_the_output_format_reads_it_as(tmp_path, base, new_file, caplog):
    """A msa audit: lower-case rows of an aligned FASTA (case means nothing) written as Stockholm
    became insert residues (score-msa: SP 0.49 against the file itself); they are upper-cased
    there, with a warning. A Stockholm input's lower-case insertions written as FASTA are kept
    and warned of; an output named as a format msa does not write is refused."""
    from sinkalign.io.alignments import read_stockholm

    rows = [base.rows[0][:12].lower() + base.rows[0][12:], base.rows[1].lower()]
    ref = tmp_path / "ref.afa"
    ref.write_text("".join(f">{i}\n{r}\n" for i, r in zip(base.ids, rows)))
    out = tmp_path / "out.sto"
    with caplog.at_level("WARNING", logger="sinkalign.pipelines.msa"):
        res = _run("msa", new_file, "--add-to", ref, "--keep-length", "-o", out)
    assert res.exit_code == 0, res.output
    assert "its rows are written upper case, as Stockholm reads lower case as insert residues" in caplog.text
    (msa,) = read_stockholm(out)
    assert list(msa.rows[:2]) == [r.upper() for r in rows]
    sto = tmp_path / "ins.sto"
    sto.write_text("# STOCKHOLM 1.0\n" + "".join(f"{i} {r}\n" for i, r in zip(base.ids, rows)) + "//\n")
    caplog.clear()
    with caplog.at_level("WARNING", logger="sinkalign.pipelines.msa"):
        res = _run("msa", new_file, "--add-to", sto, "--keep-length", "-o", tmp_path / "out.afa")
    assert res.exit_code == 0, res.output
    assert "lower-case residues are insertions (aligned to nothing) in stockholm; the fasta output keeps" in caplog.text
    for name in ("out.a2m", "out.msf.gz", "out.NEX"):
        res = _run("msa", new_file, "--add-to", ref, "-o", tmp_path / name)
        assert res.exit_code == 1 and "which sinkalign msa does not write" in res.output, res.output
        assert not (tmp_path / name).exists()


def test_cli_reads_an_msf_alignment_with_columns_of_gaps_only(tmp_path, base, new_file):
    # Bio.Align's MSF parser drops such columns and then counts fewer than the header says
    rows = [base.rows[0] + "--", base.rows[1] + ".."]
    width = len(rows[0])
    lines = ["PileUp", "", f"   MSF: {width}  Type: P  Check: 0  ..", ""]
    lines += [f" Name: {i}  Len: {width}  Check: 0  Weight: 1.00" for i in base.ids] + ["", "//", ""]
    for start in range(0, width, 50):
        lines += [f"{i:12s}{r[start:start + 50].replace('-', '.')}" for i, r in zip(base.ids, rows)] + [""]
    ref = tmp_path / "ref.msf"
    ref.write_text("\n".join(lines))
    out = tmp_path / "out.afa"
    res = _run("msa", new_file, "--add-to", ref, "--keep-length", "-o", out)
    assert res.exit_code == 0, res.output
    assert AlignIO.read(out, "fasta").get_alignment_length() == width


@pytest.mark.parametrize("args, words", [
    (["--trim", "0.5"], ["--trim", "columns"]),
    (["--format", "phylip", "--new-names"], ["'a(1)'", "'a[1]'", "'a1'", "PHYLIP"]),
    (["--model", "learned", "--dna"], ["the alignment is dna", "the model (learned) is protein"]),
])
def test_cli_refuses_what_it_cannot_do_right(tmp_path, ref_file, new_file, base, args, words):
    fasta, ref = new_file, ref_file
    if "--new-names" in args:
        args = [a for a in args if a != "--new-names"]
        fasta = tmp_path / "names.fa"
        fasta.write_text(f">a(1)\n{base.rows[0].replace('-', '')[:40]}\n>a[1]\n{base.rows[1].replace('-', '')[:40]}\n")
    if "--dna" in args:
        args = [a for a in args if a != "--dna"]
        ref = tmp_path / "dna.afa"
        ref.write_text(">x\nACGTACGTAC-GTACGTACGT\n>y\nACGTACGTACAGTACG-ACGT\n")
        fasta = tmp_path / "dna.fa"
        fasta.write_text(">z\nACGTACGTACGTACGTACGT\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["msa", str(fasta), "--add-to", str(ref), "-o", str(out), *args])
    assert res.exit_code != 0 and "Traceback" not in res.output and not out.exists(), res.output
    for word in words:
        assert word in res.output, (word, res.output)


def test_cli_names_a_bad_row_name_by_the_file_it_is_in(tmp_path, base, new_file):
    ref = tmp_path / "ref.afa"
    ref.write_text(f">#odd\n{base.rows[0]}\n>HBB_HUMAN\n{base.rows[1]}\n")
    res = CliRunner().invoke(cli, ["msa", str(new_file), "--add-to", str(ref), "--format", "stockholm"])
    assert res.exit_code != 0 and "record #1 of the alignment" in res.output and "ref.afa" in res.output, res.output


def test_combine_max_follows_the_most_confident_pairing():
    # a copy of r1 is sure of r1's columns (1.0) and less so of the other three rows' (0.9): the
    # mean over the rows follows the three, the most confident pairing follows r1
    def soft(a, b):
        M = lcs_posterior(a, b)
        return M if a == b else 0.9 * M

    ids, rows = ["r1", "r2", "r3", "r4"], ["AC-GT", "ACG-S", "ACG-S", "ACG-S"]
    mean = add_to_alignment(ids, rows, ["copy"], ["ACGT"], soft, consistency=0)
    most = add_to_alignment(ids, rows, ["copy"], ["ACGT"], soft, consistency=0, combine="max")
    assert mean.rows[-1] == "ACG-T" and most.rows[-1] == "AC-GT"
    with pytest.raises(ValueError, match="combine='sum' is not 'mean' or 'max'"):
        add_to_alignment(ids, rows, ["copy"], ["ACGT"], never_called, combine="sum")


def test_nearest_rows_are_the_most_similar_by_local_score():
    rows = ["MKVLAAGHWERT", "QQQQPPPPNNNN", "MKVLSAGHWEKT", "WWWWYYYYFFFF"]
    near = nearest_rows(rows, ["MKVLAAGHWERT", "PPPPNNNNQQQ"], 2)
    assert near[0] == [0, 2] and 1 in near[1] and len(near[1]) == 2
    assert nearest_rows(rows, ["MKV"], 4) == [[0, 1, 2, 3]] and nearest_rows(rows, ["MKV"], None) == [[0, 1, 2, 3]]


def test_independent_nearest_aligns_each_record_to_its_nearest_rows_only(shipped, globins, base):
    calls = []

    def spy(a, b):
        calls.append((a, b))
        return lcs_posterior(a, b)

    ids, rows = ["a", "b", "c"], ["ACDEFGHIK-LM", "ACDEFGHIKQLM", "WWYYWWYY-WWY"]
    out = add_to_alignment(ids, rows, ["n"], ["ACDEFGHIKLM"], spy, consistency=0, independent=True, nearest=2)
    assert sorted(a for a, _ in calls) == ["ACDEFGHIKLM", "ACDEFGHIKQLM"]  # c is not among its two nearest
    assert out.rows[-1] == "ACDEFGHIK-LM"
    # every row, when there are no more than the nearest asked for
    every = add_to_alignment(ids, rows, ["n"], ["ACDEFGHIKLM"], lcs_posterior, consistency=0, independent=True)
    assert add_to_alignment(ids, rows, ["n"], ["ACDEFGHIKLM"], lcs_posterior, consistency=0, independent=True,
                            nearest=3).rows == every.rows
    # a copy of a row placed on its one nearest row lands on that row's columns
    twin = add_to_alignment(base.ids, base.rows, ["copy"], [globins["HBA_HUMAN"]], shipped, consistency=0,
                            independent=True, nearest=1)
    assert twin.rows[-1] == twin.rows[0]
    for kwargs, message in [({"nearest": 2}, "nearest=2 needs independent placement"),
                            ({"nearest": 0, "independent": True}, "must be >= 1")]:
        with pytest.raises(ValueError, match=message):
            add_to_alignment(ids, rows, ["n"], ["ACD"], never_called, consistency=0, **kwargs)


def test_cli_nearest_needs_independent_and_runs_on_a_cluster(ref_file, new_file, tmp_path, monkeypatch):
    res = CliRunner().invoke(cli, ["msa", str(new_file), "--add-to", str(ref_file), "--nearest", "1"])
    assert res.exit_code != 0 and "--nearest 1: only with --independent" in res.output
    pytest.importorskip("distributed")
    import sinkalign.align.msa as msa_mod

    monkeypatch.setenv("JAX_ENABLE_X64", "1")
    one, two = tmp_path / "one.afa", tmp_path / "two.afa"
    args = ["--add-to", ref_file, "--independent", "--nearest", "1"]
    assert _run("msa", new_file, *args, "-o", one).exit_code == 0
    monkeypatch.setattr(msa_mod, "aligner_posteriors", None)  # from here on, only workers may align
    res = _run("msa", new_file, *args, "-o", two, "--workers", "2")
    assert res.exit_code == 0, res.output
    assert two.read_text() == one.read_text()


# ----------------------------------------------------------------------------- Stockholm markup and stdin

def _globin_stockholm(path, base):
    """``base`` (HBA and HBB, aligned) as an interleaved Pfam-like Stockholm file: '.' gaps in
    HBB's row, secondary structure, a reference line, accessions and family lines."""
    width = base.n_columns
    ss = "".join("HHHHEEE-CC"[c % 10] for c in range(width))
    rf = "".join("x" if any(row[c] != "-" for row in base.rows) else "." for c in range(width))
    hbb = base.rows[1].replace("-", ".")
    half = width // 2
    lines = ["# STOCKHOLM 1.0", "#=GF ID   Globin", "#=GF AC   PF00042.1", "#=GF DE   Globin", "#=GF SQ   2",
             "#=GF CC   two globins", "#=GS HBA_HUMAN AC P69905.2", "#=GS HBB_HUMAN AC P68871.2",
             "#=GS HBB_HUMAN DE Hemoglobin subunit beta", ""]
    for lo, hi in ((0, half), (half, width)):
        lines += [f"HBA_HUMAN {base.rows[0][lo:hi]}", f"#=GR HBA_HUMAN SS {ss[lo:hi]}", f"HBB_HUMAN {hbb[lo:hi]}",
                  f"#=GC SS_cons {ss[lo:hi]}", f"#=GC RF {rf[lo:hi]}", ""]
    path.write_text("\n".join(lines[:-1] + ["//"]) + "\n")
    return ss, rf, hbb


@pytest.mark.parametrize("keep_length", [False, True])
def test_cli_keeps_the_markup_of_a_stockholm_alignment(tmp_path, base, new_file, keep_length):
    ref = tmp_path / "ref.sto"
    ss, rf, hbb = _globin_stockholm(ref, base)
    out = tmp_path / "out.sto"
    res = _run("msa", new_file, "--add-to", ref, "--format", "stockholm", "-o", out,
               *(["--keep-length"] if keep_length else []))
    assert res.exit_code == 0, res.output
    text = out.read_text()
    lines = text.splitlines()
    assert lines[:6] == ["# STOCKHOLM 1.0", "#=GF ID   Globin", "#=GF AC   PF00042.1", "#=GF DE   Globin",
                         "#=GF CC   two globins", "#=GF SQ 4"]
    assert lines[6:10] == ["#=GS HBA_HUMAN AC P69905.2", "#=GS HBB_HUMAN AC P68871.2",
                           "#=GS HBB_HUMAN DE Hemoglobin subunit beta", "#=GS MYG_HUMAN DE Myoglobin"]
    assert " AC MYG_HUMAN" not in text and " AC HBB_FRAG" not in text  # no invented accession
    aln = AlignIO.read(out, "stockholm")
    assert [r.id for r in aln] == ["HBA_HUMAN", "HBB_HUMAN", "MYG_HUMAN", "HBB_FRAG"]
    raw = read_stockholm_markup(out).rows  # as written (Biopython reads every gap as '-')
    rows = [raw[r.id] for r in aln]
    place = existing_columns([r.replace(".", "-") for r in rows[:2]], base.rows)
    new = [c for c in range(len(rows[0])) if c not in set(place)]
    assert bool(new) != keep_length
    # the existing rows as written ('.' gaps kept), '.' in the new columns
    assert "".join(rows[1][c] for c in place) == hbb
    assert "".join(rows[0][c] for c in place) == base.rows[0]
    assert all(rows[r][c] == "." for r in (0, 1) for c in new)
    # the annotations follow their columns, '.' in the new ones
    for got, given in ((aln.column_annotations["secondary_structure"], ss),
                       (aln[0].letter_annotations["secondary_structure"], ss),
                       (aln.column_annotations["reference_annotation"], rf)):
        assert "".join(got[c] for c in place) == given
        assert all(got[c] == "." for c in new)
    assert "secondary_structure" not in aln[1].letter_annotations
    # the new rows' confidences; none for the rows given
    assert "posterior_probability" in aln[2].letter_annotations
    assert not any("posterior_probability" in aln[r].letter_annotations for r in (0, 1))
    # the file reads back as the alignment the toolkit wrote
    again = read_alignment(out)
    assert again.ids[:2] == ("HBA_HUMAN", "HBB_HUMAN") and again.n_columns == len(rows[0])


def test_cli_reads_the_alignment_from_standard_input(tmp_path, base, new_file):
    ref = tmp_path / "ref.sto"
    _globin_stockholm(ref, base)
    piped, named = tmp_path / "piped.sto", tmp_path / "named.sto"
    for out, where, stdin in ((piped, "-", ref.read_text()), (named, ref, None)):
        res = _run("msa", new_file, "--add-to", where, "--format", "stockholm", "-o", out, input=stdin)
        assert res.exit_code == 0, res.output
    assert piped.read_text() == named.read_text()


def test_cli_refuses_standard_input_twice(tmp_path, base):
    res = _run("msa", "-", "--add-to", "-", input=">a\nMKV\n")
    assert res.exit_code != 0
    assert "standard input can be read once" in res.output


def test_cli_names_standard_input_in_its_errors(new_file):
    res = _run("msa", new_file, "--add-to", "-", input="# STOCKHOLM 1.0\na MKV\nb MK\n")
    assert res.exit_code != 0
    assert "<stdin>" in res.output and "sinkalign-stdin" not in res.output


def test_cli_one_record_warns_of_no_missing_calibration(tmp_path, caplog):
    # it said the model had no multiple-alignment calibration: it has; one record has no pairs
    one = tmp_path / "one.fa"
    one.write_text(">solo\nMKVLAAGHWERTY\n")
    with caplog.at_level("INFO", logger="sinkalign.pipelines.msa"):
        res = _run("msa", one, "--format", "stockholm", "-o", tmp_path / "one.sto")
    assert res.exit_code == 0, res.output
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "not calibrated" in r.getMessage()]
    assert said and all(level == "INFO" and "one record (solo)" in text for level, text in said)


def test_cli_a_side_output_under_a_file_is_refused_before_the_alignment_is_written(tmp_path, new_file, ref_file):
    """--column-scores afile/c.tsv, afile a file: the run failed with 'File exists: afile' after
    it had replaced the --overwrite output (the side outputs are written after it)."""
    out = tmp_path / "part.afa"
    out.write_text("mine\n")
    (tmp_path / "afile").write_text("a file\n")
    for option in ("--column-scores", "--sequence-scores"):
        res = _run("msa", new_file, "--add-to", ref_file, "-o", out, "--overwrite", option,
                   tmp_path / "afile" / "deeper" / "x")
        assert res.exit_code == 1 and f"{option} {tmp_path}/afile/deeper/x: {tmp_path}/afile is a file, not a " \
                                      "directory" in res.output, res.output
        assert out.read_text() == "mine\n"


def test_cli_add_to_warns_of_a_record_with_no_likely_homolog_among_the_rows(tmp_path, ref_file, globins, caplog):
    """A fresh msa warns of a record unrelated to the others; --add-to placed one without a word
    (a README audit: RRM records added to LuxC). Myoglobin, a homolog of the rows, is not named;
    the same on a cluster."""
    rng = np.random.default_rng(0)
    unrelated = "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), 120))
    new = tmp_path / "two.fa"
    new.write_text(f">MYG_HUMAN\n{globins['MYG_HUMAN']}\n>RANDOM\n{unrelated}\n")
    for extra in ([], ["--workers", "2", "--chunk-size", "2"]):
        caplog.clear()
        with caplog.at_level("WARNING", logger="sinkalign.pipelines.msa"):
            res = _run("msa", new, "--add-to", ref_file, "-o", tmp_path / f"out{len(extra)}.afa", *extra)
        assert res.exit_code == 0, res.output
        said = [r.getMessage() for r in caplog.records if "no likely homolog" in r.getMessage()]
        assert len(said) == 1 and said[0].startswith(f"record RANDOM has no likely homolog among the rows of {ref_file}")


def test_special_outputs_skip_the_folder_check(monkeypatch):
    """/dev/null (and /dev/stdout) is written in place: its folder (/dev, root's) is not checked
    for writing (a review: a user who is not root was refused -o /dev/null)."""
    import os

    from sinkalign.pipelines.runner import check_output

    monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)  # as a user who cannot write in /dev
    check_output("/dev/null", False, [], "output")  # (/dev/stdout is a file under pytest's capture)
    with pytest.raises(InputError, match=r"cannot write in .* \(permission denied\)"):
        check_output("/tmp/sinkalign-no-such-dir/x.afa", False, [], "output")
