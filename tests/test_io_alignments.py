"""Reference alignments: Stockholm, aligned FASTA / A2M, MSF, TM-align pairs -> ReferencePair."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from Bio import AlignIO

from sinkalign.io.alignments import (
    MSA,
    ReferencePair,
    msa_to_pairs,
    percent_identity,
    read_aligned_fasta,
    read_alignment,
    read_msf,
    read_stockholm,
    read_tmalign_pairs,
    rows_as_written,
)
from sinkalign.io.fasta import SequenceFormatError


def naive_pairs(row_a: str, row_b: str) -> list[list[int]]:
    """Independent oracle: walk the columns, count residues, pair upper-case residues."""
    out, i, j = [], -1, -1
    for a, b in zip(row_a, row_b):
        i += a.isalpha()
        j += b.isalpha()
        if a.isupper() and b.isupper():
            out.append([i, j])
    return out


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


STOCKHOLM = """# STOCKHOLM 1.0
#=GF ID   Fam1
#=GF AC   PF99999.1
#=GF DE   a test family
#=GS s1/1-6    AC Q00001.1

s1/1-6     AC-DE
s2/3-9     ACgDE
s3         -CwD.
#=GC RF    xx.xx

s1/1-6     YG
s2/3-9     F-
s3         FG
#=GC RF    xx
//
# STOCKHOLM 1.0
s1   MKV
s4   M-V
//
"""


# ----------------------------------------------------------------------------- Stockholm


def test_stockholm_two_interleaved_alignments_with_inserts(tmp_path: Path) -> None:
    path = _write(tmp_path / "fam.sto", STOCKHOLM)
    first, second = list(read_stockholm(path))
    assert first.ids == ("s1/1-6", "s2/3-9", "s3")
    assert first.rows == ("AC-DEYG", "ACgDEF-", "-CwD-FG")
    assert (first.family, first.accession, first.format, first.alphabet, first.index) == (
        "Fam1", "PF99999.1", "stockholm", "protein", 0)
    assert [first.ungapped(k) for k in range(3)] == ["ACDEYG", "ACGDEF", "CWDFG"]
    pairs = msa_to_pairs(first)
    assert [(p.query_id, p.target_id) for p in pairs] == [("s1/1-6", "s2/3-9"), ("s1/1-6", "s3"), ("s2/3-9", "s3")]
    assert pairs[0].pairs.tolist() == [[0, 0], [1, 1], [2, 3], [3, 4], [4, 5]]
    assert pairs[1].pairs.tolist() == [[1, 0], [2, 2], [4, 3], [5, 4]]
    # column 2 holds two insert residues (g, w): they are aligned to nothing
    assert pairs[2].pairs.tolist() == [[1, 0], [3, 2], [5, 3]]
    assert pairs[0].pairs.dtype == np.int32
    assert [percent_identity(p) for p in pairs] == [80.0, 75.0, 100.0]
    assert pairs[0].family == "Fam1" and pairs[0].source == str(path)
    assert pairs[0].meta == {"alphabet": "protein", "accession": "PF99999.1"}
    assert (second.family, second.accession, second.index) == (None, None, 1)
    assert msa_to_pairs(second)[0].pairs.tolist() == [[0, 0], [2, 1]]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", r"empty file, no Stockholm alignments"),
        ("# STOCKHOLM 1.0\na ACD\nb ACD\n", r"alignment #1 starting at line 1 has no '//' terminator"),
        ("a ACD\nb ACD\n//\n", r"alignment #1 \(starting at line 1\): expected '# STOCKHOLM 1.0' header, found 'a ACD'"),
        ("# STOCKHOLM 1.0\na ACD\nb AC\n//\n", r"alignment #1 \(starting at line 1\): row 'b' has 2 columns, the "
                                                r"first row \('a'\) has 3"),
        ("# STOCKHOLM 1.0\na AC\nb AC\n#=GC SS_cons ..\n\na D\nb DE\n//\n",  # interleaved blocks: the sum
         r"row 'b' has 4 columns, the first row \('a'\) has 3"),
        ("# STOCKHOLM 1.0\na ACD\nb AC1\n//\n", r"alignment #1: row 'b' \(#2\): illegal character '1' for alphabet "
                                                 r"'protein' at column 2 \(0-based\)"),
        ("# STOCKHOLM 1.0\na ACD\na ACD\nb ACDACD\n//\n", r"alignment #1: line 3: duplicate row id 'a' \(also on line 2\)"),
        ("# STOCKHOLM 1.0\na ACD\nb ---\n//\n", r"alignment #1: row 'b' \(#2\) has no residues"),
        ("# STOCKHOLM 1.0\na AC\n//\n\n# STOCKHOLM 1.0\n#=GF ID x\n//\n",
         r"alignment #2 \(starting at line 5\): cannot parse Stockholm: No records"),
        # malformed rows named by line (Biopython said "Sequences have different lengths, or repeated
        # identifier", "Could not split line", or kept the space as a residue)
        ("# STOCKHOLM 1.0\na ACD-F\nb AC D-F\n//\n", r"alignment #1: line 3: row 'b' has 2 words after the id \(a "
                                                       r"space inside the sequence\?\); a Stockholm row is an id and"),
        ("# STOCKHOLM 1.0\na ACD\nb AC D\n//\n", r"line 3: row 'b' has 2 words after the id"),
        ("# STOCKHOLM 1.0\na ACD\n\nb\n//\n", r"alignment #1: line 4: row 'b' has no sequence"),
        ("# STOCKHOLM 1.0\na ACD\nb ACD\n#=GC SS_cons HHHH\n//\n",
         r"alignment #1 \(starting at line 1\): line 4: the #=GC SS_cons annotation has 4 characters, the alignment 3 "
         r"columns"),
    ],
)
def test_stockholm_errors(tmp_path: Path, text: str, expected: str) -> None:
    path = _write(tmp_path / "bad.sto", text)
    with pytest.raises(SequenceFormatError, match=expected) as err:
        list(read_stockholm(path))
    assert str(err.value).startswith(str(path))


def test_stockholm_gzip(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "fam.sto.gz"
    path.write_bytes(gzip.compress(STOCKHOLM.encode()))
    assert [m.rows for m in read_stockholm(path)] == [m.rows for m in read_stockholm(_write(tmp_path / "f.sto", STOCKHOLM))]


def test_stockholm_argument_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"alphabet='rna' is not one of \('protein', 'dna', 'auto'\)"):
        read_stockholm(tmp_path / "x.sto", alphabet="rna")
    with pytest.raises(FileNotFoundError, match="x.sto: no such Stockholm file"):
        read_stockholm(tmp_path / "x.sto")


def test_stockholm_dna_alphabet(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.sto", "# STOCKHOLM 1.0\na ACGT-N\nb AC-TTA\n//\n")
    (msa,) = read_stockholm(path)
    assert msa.alphabet == "dna"
    (forced,) = read_stockholm(path, alphabet="protein")
    assert forced.alphabet == "protein"
    bad = _write(tmp_path / "e.sto", "# STOCKHOLM 1.0\na ACGT\nb ACEF\n//\n")
    with pytest.raises(SequenceFormatError, match=r"row 'b' \(#2\): illegal character 'E' for alphabet 'dna' at column 2"):
        list(read_stockholm(bad, alphabet="dna"))


# ----------------------------------------------------------------------------- aligned FASTA / A2M


def test_aligned_fasta_case_ignored_and_dot_gaps(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.afa", ">a first\nAC-DE\n>b\nAc.DE\n")
    msa = read_aligned_fasta(path)
    assert (msa.format, msa.rows, msa.ids) == ("fasta", ("AC-DE", "AC-DE"), ("a", "b"))
    assert msa_to_pairs(msa)[0].pairs.tolist() == [[0, 0], [1, 1], [2, 2], [3, 3]]


def test_a2m_unpadded_inserts_are_repadded_and_unaligned(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.a2m", ">a\nACgtDE\n>b\nAC..DE\n>c\nA-wDE\n")
    msa = read_aligned_fasta(path)  # format from the suffix
    assert msa.format == "a2m"
    assert msa.rows == ("ACgtDE", "AC--DE", "A-w-DE")
    ab, ac, bc = msa_to_pairs(msa)
    assert ab.pairs.tolist() == [[0, 0], [1, 1], [4, 2], [5, 3]]
    assert ac.pairs.tolist() == [[0, 0], [4, 2], [5, 3]]
    assert bc.pairs.tolist() == [[0, 0], [2, 2], [3, 3]]
    assert (ac.query_seq, ac.target_seq) == ("ACGTDE", "AWDE")
    for pair, (x, y) in zip((ab, ac, bc), ((0, 1), (0, 2), (1, 2))):
        assert pair.pairs.tolist() == naive_pairs(msa.rows[x], msa.rows[y])


def test_a2m_already_rectangular_is_kept(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.txt", ">a\nAC.gDE\n>b\nACwk-E\n")
    msa = read_aligned_fasta(path, format="a2m")
    assert msa.rows == ("AC-gDE", "ACwk-E")
    assert msa_to_pairs(msa)[0].pairs.tolist() == [[0, 0], [1, 1], [4, 4]]  # g, w, k are inserts


@pytest.mark.parametrize(
    ("name", "text", "fmt", "expected"),
    [
        ("u.afa", ">a\nAC-DE\n>b\nACDE\n", "fasta", r"row 'b' \(#2\) has 4 columns, the first row has 5"),
        ("m.a2m", ">a\nACDE\n>b\nACwD\n", None, r"row 'b' \(#2\) has 3 match columns \(upper case or '-'\), the first row has 4"),
        ("i.a2m", ">a\nACDE\n>b\nAC1E\n", None, r"row 'b' \(#2\): illegal A2M character '1' at column 2 \(0-based\)"),
        ("d.afa", ">a\nAC-DE\n>a\nACCDE\n", "fasta", r"duplicate row id 'a' \(rows #1 and #2\)"),
        ("c.afa", ">a\nAC-DE\n>b\nAC*DE\n", "fasta", r"row 'b' \(#2\): illegal character '\*' for alphabet 'protein' at column 2"),
        ("e.afa", "", "fasta", r"empty file, no aligned sequences"),
    ],
)
def test_aligned_fasta_errors(tmp_path: Path, name: str, text: str, fmt: str | None, expected: str) -> None:
    path = _write(tmp_path / name, text)
    with pytest.raises(SequenceFormatError, match=expected) as err:
        read_aligned_fasta(path, format=fmt)
    assert str(err.value).startswith(str(path))


def test_aligned_fasta_bad_format_value(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.afa", ">a\nAC\n")
    with pytest.raises(ValueError, match=r"format='clustal' is not one of \('fasta', 'a2m'\)"):
        read_aligned_fasta(path, format="clustal")


# ----------------------------------------------------------------------------- MSF


MSF = """!!AA_MULTIPLE_ALIGNMENT 1.0

 known.msf MSF: 10 Type: P Check: 0 ..

 Name: seqA Len: 10 Check: 0 Weight: 1.00
 Name: seqB Len: 10 Check: 0 Weight: 1.00

//

seqA  AC.DE FGhIK
seqB  ~~WDE F~~IK
"""


def test_msf_known_alignment(tmp_path: Path) -> None:
    # The alignment AC-DEFGHIK / --WDEF--IK written by hand in MSF ('.', '~' gaps, a lower-case h).
    path = _write(tmp_path / "known.msf", MSF)
    msa = read_msf(path)
    assert msa.ids == ("seqA", "seqB")
    assert msa.rows == ("AC-DEFGHIK", "--WDEF--IK")
    (pair,) = msa_to_pairs(msa)
    assert pair.pairs.tolist() == [[2, 1], [3, 2], [4, 3], [7, 4], [8, 5]]
    assert (pair.query_seq, pair.target_seq) == ("ACDEFGHIK", "WDEFIK")
    assert percent_identity(pair) == 100.0  # aligned: (D,D) (E,E) (F,F) (I,I) (K,K)


def test_msf_errors(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.msf", "garbage\n")
    with pytest.raises(SequenceFormatError, match=r"bad.msf: cannot parse MSF: garbage is not a known GCG MSF header"):
        read_msf(path)
    bad_char = _write(tmp_path / "c.msf", MSF.replace("seqB  ~~WDE", "seqB  ~~W1E"))
    with pytest.raises(SequenceFormatError, match=r"row 'seqB' \(#2\): illegal character '1' for alphabet 'protein' at column 3"):
        read_msf(bad_char)


# ----------------------------------------------------------------------------- pairs


def test_msa_to_pairs_subsampling_is_deterministic(tmp_path: Path) -> None:
    rows = ["ACDEFGHIK", "AC-EFGHIK", "ACD-FGHIK", "ACDE-GHIK", "ACDEF-HIK", "ACDEFG-IK"]
    msa = MSA(ids=tuple(f"r{k}" for k in range(6)), rows=tuple(rows), source="mem", format="fasta", alphabet="protein")
    everything = msa_to_pairs(msa)
    assert len(everything) == 15
    some = msa_to_pairs(msa, max_pairs=5, rng=3)
    again = msa_to_pairs(msa, max_pairs=5, rng=np.random.default_rng(3))
    assert some == again and len(some) == 5
    keys = [(p.query_id, p.target_id) for p in some]
    assert keys == sorted(keys) and set(keys) <= {(p.query_id, p.target_id) for p in everything}
    assert msa_to_pairs(msa, max_pairs=100) == everything
    with pytest.raises(ValueError, match="max_pairs=0 must be a positive integer or None"):
        msa_to_pairs(msa, max_pairs=0)
    with pytest.raises(ValueError, match="rng='x' must be a numpy Generator"):
        msa_to_pairs(msa, max_pairs=2, rng="x")


def test_reference_pair_validation() -> None:
    ok = ReferencePair("q", "t", "ACD", "AC", np.array([[0, 0], [2, 1]]))
    assert ok.pairs.dtype == np.int32 and not ok.pairs.flags.writeable
    assert ok == ReferencePair("q", "t", "ACD", "AC", [[0, 0], [2, 1]])
    assert ok != ReferencePair("q", "t", "ACD", "AC", [[0, 0], [1, 1]])
    empty = ReferencePair("q", "t", "ACD", "AC", np.zeros((0, 2), dtype=np.int64))
    assert empty.n_aligned == 0 and math.isnan(percent_identity(empty))
    with pytest.raises(ValueError, match=r"pairs of \(q, t\) are not strictly increasing in both columns at rows 0, 1"):
        ReferencePair("q", "t", "ACD", "AC", [[0, 1], [1, 1]])
    with pytest.raises(ValueError, match=r"pairs of \(q, t\) out of range for lengths \(3, 2\)"):
        ReferencePair("q", "t", "ACD", "AC", [[0, 0], [1, 2]])
    with pytest.raises(ValueError, match=r"pairs.shape=\(3,\) must be \[n, 2\]"):
        ReferencePair("q", "t", "ACD", "AC", [0, 1, 2])
    with pytest.raises(ValueError, match="pairs.dtype=float64 must be an integer type"):
        ReferencePair("q", "t", "ACD", "AC", [[0.0, 0.0]])
    with pytest.raises(ValueError, match="query_id='' must be a non-empty string"):
        ReferencePair("", "t", "ACD", "AC", [[0, 0]])
    with pytest.raises(ValueError, match=r"target_seq='' of pair \(q, t\) must be non-empty"):
        ReferencePair("q", "t", "ACD", "", [[0, 0]])


def test_percent_identity_definition() -> None:
    pair = ReferencePair("q", "t", "ACDE", "ACQEW", [[0, 0], [1, 1], [2, 2], [3, 3]])
    assert percent_identity(pair) == 75.0  # 3 identical of 4 aligned; the unaligned W does not count


# ----------------------------------------------------------------------------- TM-align


TM_LINES = [
    "/x/pdb1abc.ent\t/x/pdb2xyz.ent\t0.6\t0.7\t1.5\tMKVL\tAKLL\t1:2.:",
    "/x/pdb3def.ent\t/x/other_name.pdb\t0.3\t0.9\t4.0\tMK\tMK\t::",
]


def test_tmalign_small_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "tm.tsv", "\n".join(TM_LINES) + "\n")
    first, second = list(read_tmalign_pairs(path))
    assert (first.query_id, first.target_id) == ("1abc", "2xyz")
    assert first.pairs.tolist() == [[1, 0], [2, 2], [3, 3]]
    assert first.meta == {"tm1": 0.6, "tm2": 0.7, "rmsd": 1.5, "line": 1, "pdb1": "/x/pdb1abc.ent", "pdb2": "/x/pdb2xyz.ent"}
    assert (second.target_id, second.pairs.tolist()) == ("other_name", [[0, 0], [1, 1]])
    assert [p.query_id for p in read_tmalign_pairs(path, min_tm=0.5)] == ["1abc"]
    with_header = _write(tmp_path / "h.tsv", "pdb1\tpdb2\ttm1\ttm2\trmsd\tseq1\tseq2\tstate\n" + TM_LINES[0] + "\n")
    assert [p.meta["line"] for p in read_tmalign_pairs(with_header)] == [2]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("a\tb\t0.5\t0.5\t1\tMKVL\tAKLL\t1:x.:", r"line 1: illegal state character 'x' at position 2 \(0-based\)"),
        ("a\tb\t0.5\t0.5\t1\tMKV\tAKLL\t1:2.:", r"line 1: state string runs past the end of seq1 \(length 3\) at position 4"),
        ("a\tb\t0.5\t0.5\t1\tMKVL\tAKLLW\t1:2.:", r"line 1: state string ends at position 5 \(0-based\) having used 4 of the 5 residues of seq2"),
        ("a\tb\t0.5\t0.5\t1\tMKVL\tAKLL", r"line 1: expected 8 tab-separated columns, found 7"),
        ("a\tb\tzero\t0.5\t1\tMKVL\tAKLL\t1:2.:", r"line 1: bad number in tm1/tm2/rmsd columns"),
        ("a\tb\t0.5\t0.5\t1\tMK1L\tAKLL\t1:2.:", r"line 1: seq1 has illegal character '1' at position 2 \(0-based\)"),
        ("a\tb\t0.5\t0.5\t1\t\tAKLL\t2222", r"line 1: seq1 is empty"),
    ],
)
def test_tmalign_errors(tmp_path: Path, line: str, expected: str) -> None:
    path = _write(tmp_path / "bad.tsv", line + "\n")
    with pytest.raises(SequenceFormatError, match=expected) as err:
        list(read_tmalign_pairs(path))
    assert str(err.value).startswith(str(path))


def test_tmalign_argument_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"min_tm=1.5 must be a number in \[0, 1\] or None"):
        read_tmalign_pairs(tmp_path / "x.tsv", min_tm=1.5)
    empty = _write(tmp_path / "empty.tsv", "")
    with pytest.raises(SequenceFormatError, match="empty.tsv: no TM-align pairs"):
        list(read_tmalign_pairs(empty))


# ----------------------------------------------------------------------------- real data

# (file, family, accession, alphabet, sequences, columns), read off the files with grep
PFAM = [
    ("Caudal_act.sto", "Caudal_act", "PF04731.3", "protein", 9, 196),
    ("LuxC.sto", "LuxC", "PF05893.5", "protein", 13, 445),
    ("MADE1_dfam_dna.sto", "MADE1", "DF0000629.2", "dna", 100, 304),
    ("Patched.sto", "Patched", "PF02460.9", "protein", 10, 1027),
    ("Pkinase.sto", "Pkinase", "PF00069.24", "protein", 38, 419),
    ("RRM_1.sto", "RRM_1", "PF00076.13", "protein", 79, 80),
    ("SMC_N.sto", "SMC_N", "PF02463.10", "protein", 29, 1498),
    ("biopython_pfam3.sto", "12TM_1", "PF09847.11", "protein", 7, 504),
    ("biopython_pfam4.sto", "3Beta_HSD", "PF01073.21", "protein", 8, 301),
    ("biopython_pfam5.sto", "ArsP_1", "PF03773.15", "protein", 11, 369),
    ("biopython_pfam6.sto", "COX2_TM", "PF02790.17", "protein", 11, 93),
    ("biopython_pfam8.sto", "Cyclin_N", "PF00134.25", "protein", 95, 187),
    ("fn3.sto", "fn3", "PF00041.20", "protein", 98, 117),
    ("globins4.sto", None, None, "protein", 4, 171),
]


def test_real_stockholm_files(shared_data: Path) -> None:
    files = sorted(p.name for p in (shared_data / "pfam_seed").glob("*.sto"))
    assert files == sorted(row[0] for row in PFAM)
    rng = np.random.default_rng(0)
    for name, family, accession, alphabet, n_seqs, n_cols in PFAM:
        (msa,) = list(read_stockholm(shared_data / "pfam_seed" / name))
        assert (msa.family, msa.accession, msa.alphabet, len(msa), msa.n_columns) == (
            family, accession, alphabet, n_seqs, n_cols), name
        pairs = msa_to_pairs(msa)
        assert len(pairs) == n_seqs * (n_seqs - 1) // 2
        row = {rid: k for k, rid in enumerate(msa.ids)}
        for k in rng.choice(len(pairs), size=min(40, len(pairs)), replace=False):
            p = pairs[k]
            assert p.pairs.tolist() == naive_pairs(msa.rows[row[p.query_id]], msa.rows[row[p.target_id]]), name
            assert p.query_seq == msa.ungapped(row[p.query_id])


def test_real_smc_n_insert_residues_are_unaligned(shared_data: Path) -> None:
    (msa,) = read_stockholm(shared_data / "pfam_seed" / "SMC_N.sto")
    first = msa.rows[0]
    insert_residues = [k for k, c in enumerate(first.replace("-", "")) if c.islower()]
    assert len(insert_residues) > 100
    aligned_query = {int(i) for p in msa_to_pairs(msa, max_pairs=20) if p.query_id == msa.ids[0] for i in p.pairs[:, 0]}
    assert aligned_query and not aligned_query & set(insert_residues)


def test_real_globins4_interleaved(shared_data: Path) -> None:
    (msa,) = read_stockholm(shared_data / "pfam_seed" / "globins4.sto")
    assert msa.ids == ("HBB_HUMAN", "HBA_HUMAN", "MYG_PHYCA", "GLB5_PETMA")
    assert msa.ungapped(1).startswith("VLSPADKTNVKAAWGKVGAHAGEYGAEALERMFLSFPTTKTYFPHF")
    assert [len(msa.ungapped(k)) for k in range(4)] == [146, 141, 153, 149]


def test_real_tmalign_pairs(shared_data: Path) -> None:
    path = shared_data / "tmalign_pairs" / "valid.tsv"
    pairs = list(read_tmalign_pairs(path))
    assert len(pairs) == 1000
    assert len(list(read_tmalign_pairs(path, min_tm=0.5))) == 95
    lines = path.read_text().splitlines()
    for pair in pairs:
        state = lines[pair.meta["line"] - 1].split("\t")[7]
        assert pair.n_aligned == state.count(":") + state.count(".")
        assert min(pair.meta["tm1"], pair.meta["tm2"]) == min(
            float(x) for x in lines[pair.meta["line"] - 1].split("\t")[2:4])
    # first line against an independent walk of the state string
    first = pairs[0]
    i = j = 0
    expected = []
    for c in lines[0].split("\t")[7]:
        if c in ":.":
            expected.append([i, j])
        i += c in ":.1"
        j += c in ":.2"
    assert first.pairs.tolist() == expected
    assert (first.query_id, first.target_id) == ("3bxk", "3viq")


def test_a2m_under_another_name_is_told_by_its_rows(tmp_path: Path, caplog) -> None:
    # hmmalign's A2M (lower-case insertions, no '.' padding) saved as .fa: no aligned FASTA is ragged
    text = ">a\nACgtDE\n>b\nAC..DE\n>c\nA-wDE\n"
    named = read_aligned_fasta(_write(tmp_path / "a.a2m", text))
    with caplog.at_level("INFO", logger="sinkalign.io.alignments"):
        told = read_aligned_fasta(_write(tmp_path / "a.fa", text))
    assert "read as A2M" in caplog.text
    assert (told.format, told.rows, told.ids) == ("a2m", named.rows, named.ids)
    assert read_alignment(tmp_path / "a.fa").rows == named.rows
    # a rectangular file stays aligned FASTA (case ignored); ragged rows without insertions, or
    # whose match columns differ, are not A2M and keep the aligned-FASTA error
    assert read_aligned_fasta(_write(tmp_path / "r.fa", ">a\nACgDE\n>b\nAC-DE\n")).rows == ("ACGDE", "AC-DE")
    for bad in (">a\nAC-DE\n>b\nACDE\n", ">a\nACgDE\n>b\nACDEFG\n"):
        with pytest.raises(SequenceFormatError, match="columns, the first row has 5"):
            read_aligned_fasta(_write(tmp_path / "bad.fa", bad))
    with pytest.raises(SequenceFormatError, match="columns"):  # told as FASTA: no guessing
        read_aligned_fasta(_write(tmp_path / "t.fa", text), format="fasta")


def test_clustal_without_its_conservation_lines_blanks_is_read(tmp_path: Path) -> None:
    """A Clustal file whose conservation line lost its trailing blanks (an editor, a git hook)
    reads as the file did; a broken one is a SequenceFormatError, not Biopython's assertion."""
    rows = ["-MVLSPADKT-", "MVHLTPEEKSA", "-MGLSDGEWQ-"]
    body = "".join(f"{i}      {r}\n" for i, r in zip(["s1", "s2", "s3"], rows))
    path = _write(tmp_path / "a.aln", f"CLUSTAL W\n\n{body}         *   *     \n")
    trimmed = _write(tmp_path / "trimmed.aln", f"CLUSTAL W\n\n{body}         *   *\n")  # its blanks trimmed
    with pytest.raises(AssertionError):  # what Biopython does with it
        AlignIO.read(trimmed, "clustal")
    assert read_alignment(trimmed).rows == read_alignment(path).rows == tuple(rows)
    assert rows_as_written(trimmed, read_alignment(trimmed)) == tuple(rows)
    broken = tmp_path / "broken.aln"
    broken.write_text("CLUSTAL W\n\ns1 MKV\ns2 MKVLL\n\ns1 MK\n")
    with pytest.raises(SequenceFormatError, match="cannot parse clustal"):
        read_alignment(broken)
