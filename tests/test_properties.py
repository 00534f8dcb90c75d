"""Property tests (hypothesis): random FASTA, Stockholm and alignment (CIGAR) inputs either
round-trip or fail with sinkalign's own error type, never with anything else."""

from __future__ import annotations

import gzip
import re
import tempfile
from pathlib import Path

import numpy as np
import pysam
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sinkalign.errors import SinkalignError
from sinkalign.io.alignments import msa_to_pairs, read_aligned_fasta, read_stockholm
from sinkalign.io.fasta import STANDARD, Sequence, read_fasta, write_fasta
from sinkalign.io.writers import write_alignments

SETTINGS = settings(max_examples=int(__import__("os").environ.get("SINKALIGN_HYPOTHESIS_EXAMPLES", 60)), deadline=None, suppress_health_check=[HealthCheck.too_slow])

_IDS = st.text(alphabet=st.sampled_from("abcXYZ019_|.-"), min_size=1, max_size=12)
_PROTEIN = st.text(alphabet=st.sampled_from(sorted(STANDARD["protein"])), min_size=1, max_size=80)
_DNA = st.text(alphabet=st.sampled_from("ACGT"), min_size=1, max_size=80)


def _tmp(data: bytes, suffix: str) -> Path:
    fd, name = tempfile.mkstemp(suffix=suffix)
    with open(fd, "wb") as fh:
        fh.write(data)
    return Path(name)


def _read_all(reader, data: bytes, suffix: str):
    path = _tmp(data, suffix)
    try:
        return reader(path)
    finally:
        path.unlink()


# ------------------------------------------------------------------------------ FASTA


@st.composite
def fasta_records(draw, alphabet: str):
    ids = draw(st.lists(_IDS, min_size=1, max_size=6, unique=True))
    seqs = draw(st.lists(_PROTEIN if alphabet == "protein" else _DNA, min_size=len(ids), max_size=len(ids)))
    descs = draw(st.lists(st.text(alphabet=st.sampled_from("ab c=1"), max_size=10).map(str.strip),
                          min_size=len(ids), max_size=len(ids)))
    return [Sequence(i, d, s, alphabet) for i, d, s in zip(ids, descs, seqs)]


@SETTINGS
@given(records=fasta_records("protein"), width=st.integers(0, 70), gz=st.booleans(), lower=st.booleans())
def test_fasta_round_trip(records, width, gz, lower):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / ("x.fa.gz" if gz else "x.fa")
        write_fasta(records, path, line_width=width)
        if lower:  # soft-masking is read back upper case
            data = path.read_bytes()
            text = (gzip.decompress(data) if gz else data).decode()
            text = "\n".join(line if line.startswith(">") else line.lower() for line in text.split("\n"))
            path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
        assert list(read_fasta(path, "protein")) == records


_FASTA_NOISE = st.lists(
    st.one_of(
        st.sampled_from([">", ">r1", ">r1 desc", ">r2", "\n", "\r\n", " ", "ACGT", "MKV*", "*", "-", ".", "x", "1",
                         ">\n", "\t", "\x00", "é", "\ufeff"]),
        st.text(max_size=5),
    ),
    max_size=30,
).map("".join)


@SETTINGS
@given(text=_FASTA_NOISE, alphabet=st.sampled_from(["protein", "dna", "auto"]), gz=st.booleans(),
       cut=st.one_of(st.none(), st.integers(1, 200)), raw=st.binary(max_size=40), header=st.booleans())
def test_fasta_reader_accepts_or_raises_its_own_error(text, alphabet, gz, cut, raw, header):
    if header:  # a valid start, so that the noise reaches the record parser too
        text = ">r0 first\nACGT\n" + text
    data = text.encode("utf-8") + (raw if cut is not None else b"")
    if gz:
        data = gzip.compress(data)
        if cut is not None:
            data = data[: max(2, len(data) - cut)]  # a truncated stream
    try:
        out = _read_all(lambda p: list(read_fasta(p, alphabet)), data, ".fa.gz" if gz else ".fa")
    except SinkalignError as err:
        event(f"raised {type(err).__name__}: {str(err).split(': ')[-1][:30]}")
        return
    event("accepted")
    assert out and all(isinstance(r, Sequence) and r.seq for r in out)


# ------------------------------------------------------------------------------ Stockholm


@st.composite
def msas(draw):
    n_rows = draw(st.integers(2, 5))
    n_cols = draw(st.integers(1, 40))
    ids = draw(st.lists(st.text(alphabet=st.sampled_from("abcdXYZ0189_"), min_size=1, max_size=8),
                        min_size=n_rows, max_size=n_rows, unique=True))
    cell = st.sampled_from(list("ACDEFGHIKLMNPQRSTVWY") + ["-"] * 6)
    rows = []
    for _ in ids:
        row = "".join(draw(st.lists(cell, min_size=n_cols, max_size=n_cols)))
        if row.count("-") == len(row):
            row = "A" + row[1:]
        rows.append(row)
    return ids, rows


def _stockholm(ids, rows, family="FAM") -> str:
    width = max(len(i) for i in ids) + 1
    return ("# STOCKHOLM 1.0\n#=GF ID " + family + "\n"
            + "".join(f"{i.ljust(width)}{r}\n" for i, r in zip(ids, rows)) + "//\n")


@SETTINGS
@given(msa=msas(), copies=st.integers(1, 3))
def test_stockholm_round_trip(msa, copies):
    ids, rows = msa
    text = _stockholm(ids, rows) * copies
    got = _read_all(lambda p: list(read_stockholm(p, alphabet="protein")), text.encode(), ".sto")
    assert len(got) == copies
    for m in got:
        assert m.ids == tuple(ids) and m.rows == tuple(rows) and m.family == "FAM"
        for pair in msa_to_pairs(m):
            a, b = ids.index(pair.query_id), ids.index(pair.target_id)
            cols = [k for k in range(len(rows[a])) if rows[a][k] != "-" and rows[b][k] != "-"]
            assert pair.n_aligned == len(cols)
            assert all(pair.query_seq[i] == rows[a][c] and pair.target_seq[j] == rows[b][c]
                       for (i, j), c in zip(pair.pairs.tolist(), cols))


@SETTINGS
@given(msa=msas(), edits=st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(
    ["", "\n", "//\n", "# STOCKHOLM 1.0\n", "#=GC SS_cons ...\n", " ", "x", "!", "\x00", "é", "seqA ACD\n"])),
    max_size=4), gz_cut=st.one_of(st.none(), st.integers(1, 100)))
def test_stockholm_reader_accepts_or_raises_its_own_error(msa, edits, gz_cut):
    text = _stockholm(*msa)
    for pos, insert in edits:
        pos %= len(text) + 1
        text = text[:pos] + insert + text[pos:]
    data = text.encode()
    if gz_cut is not None:
        data = gzip.compress(data)
        data = data[: max(2, len(data) - gz_cut)]
    for reader, suffix in ((lambda p: list(read_stockholm(p)), ".sto"), (read_aligned_fasta, ".afa")):
        try:
            _read_all(reader, data, suffix)
            event(f"{suffix} accepted")
        except SinkalignError:
            event(f"{suffix} raised")


# ------------------------------------------------------------------------------ CIGAR


@st.composite
def alignments(draw):
    m, n = draw(st.integers(1, 60)), draw(st.integers(1, 60))
    k = draw(st.integers(0, min(m, n)))
    qi = sorted(draw(st.lists(st.integers(0, m - 1), min_size=k, max_size=k, unique=True)))
    tj = sorted(draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k, unique=True)))
    q = "".join(draw(st.lists(st.sampled_from("ACGT"), min_size=m, max_size=m)))
    t = "".join(draw(st.lists(st.sampled_from("ACGT"), min_size=n, max_size=n)))
    return q, t, np.array(list(zip(qi, tj)), dtype=np.int64).reshape(-1, 2)


def _pairs_from_cigar(cig: str, target_start: int) -> list[tuple[int, int]]:
    i, j, out = 0, target_start, []
    for count, op in re.findall(r"(\d+)([MIDS])", cig):
        for _ in range(int(count)):
            if op == "M":
                out.append((i, j))
                i, j = i + 1, j + 1
            elif op in "IS":
                i += 1
            else:
                j += 1
    return out


@SETTINGS
@given(aln=alignments())
def test_cigar_round_trips_through_tsv_and_sam(aln):
    q, t, pairs = aln
    with tempfile.TemporaryDirectory() as d:
        rec = [("q", q, "t", t, pairs, 1.5)]
        write_alignments(rec, Path(d) / "a.tsv", "tsv")
        header, row = (Path(d) / "a.tsv").read_text().splitlines()
        fields = dict(zip(header.split("\t"), row.split("\t")))
        if len(pairs):
            assert _pairs_from_cigar(fields["cigar"], int(fields["target_start"])) == [tuple(p) for p in pairs]
            assert (int(fields["query_start"]), int(fields["query_end"])) == (pairs[0, 0], pairs[-1, 0] + 1)
        else:
            assert fields["cigar"] == "*"
        write_alignments(rec, Path(d) / "a.sam", "sam")
        with pysam.AlignmentFile(str(Path(d) / "a.sam")) as sam:
            (seg,) = list(sam)
        if len(pairs):
            got = [(i, j) for i, j in seg.get_aligned_pairs(matches_only=True)]
            assert got == [tuple(p) for p in pairs.tolist()]
        else:
            assert seg.is_unmapped


@SETTINGS
@given(q=st.text(max_size=8), t=st.text(max_size=8),
       pairs=st.lists(st.tuples(st.integers(-3, 12), st.integers(-3, 12)), max_size=5),
       qid=st.text(max_size=6), fmt=st.sampled_from(["tsv", "sam", "stockholm", "json", "fasta"]))
def test_writers_accept_or_raise_their_own_error(q, t, pairs, qid, fmt):
    rec = (qid, q, "t", t, np.array(pairs, dtype=np.int64).reshape(-1, 2))
    with tempfile.TemporaryDirectory() as d:
        try:
            write_alignments([rec], Path(d) / "out", fmt)
            event("written")
        except SinkalignError:
            event("raised")
            assert [p.name for p in Path(d).iterdir()] == []  # nothing half-written left behind
