"""Pfam pair shards: build, read back, family-disjoint splits, atomicity, embeddings, CLI, manifests."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import sinkalign.io.shards as shards_mod
from sinkalign.cli.shards import shards as shards_cli
from sinkalign.errors import AlphabetError, FormatError, InputError, MissingFileError
from sinkalign.io.alignments import msa_to_pairs, percent_identity, read_stockholm
from sinkalign.io.shards import (
    SPLITS,
    ShardDataset,
    add_embeddings,
    build_shards,
    check_split,
    read_index,
    shard_summary,
    split_families,
    verify_shards,
)
from tests.cli_errors import assert_one_line_error

AMINO = "ACDEFGHIKLMNPQRSTVWY"
MANIFESTS = Path(__file__).resolve().parents[1] / "data_manifests"


def make_family(path: Path, name: str, n_seqs: int, n_cols: int, seed: int, *, gf: bool = True) -> Path:
    """Write a random Stockholm family; column 3 is an insert column (lower case)."""
    rng = np.random.default_rng(seed)
    lines = ["# STOCKHOLM 1.0"]
    if gf:
        lines += [f"#=GF ID   {name}", f"#=GF AC   PF{seed:05d}.1"]
    for k in range(n_seqs):
        row = []
        for c in range(n_cols):
            letter = AMINO[rng.integers(20)]
            if c == 3:
                row.append(letter.lower() if rng.random() < 0.5 else ".")
            else:
                row.append(letter if rng.random() < 0.85 or c == 0 else "-")
        lines.append(f"{name}_s{k}/1-{n_cols}  {''.join(row)}")
    lines.append("//")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture()
def families(tmp_path: Path) -> list[Path]:
    src = tmp_path / "src"
    src.mkdir()
    sizes = [3, 4, 5, 3, 6, 4]
    return [make_family(src / f"fam{k}.sto", f"fam{k}", n, 12 + k, seed=k) for k, n in enumerate(sizes)]


def expected_pairs(paths: list[Path]) -> dict[str, list]:
    out = {}
    for path in paths:
        for msa in read_stockholm(path):
            out[msa.family] = msa_to_pairs(msa)
    return out


# ----------------------------------------------------------------------------- split


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 14, 100])
def test_split_families_counts_and_disjointness(n: int) -> None:
    names = [f"f{k:03d}" for k in range(n)]
    split = split_families(names, (0.8, 0.1, 0.1), seed=0)
    got = [name for s in SPLITS for name in split[s]]
    assert sorted(got) == names  # every family exactly once
    assert all(split[s] == sorted(split[s]) for s in SPLITS)
    if n >= 3:
        assert all(len(split[s]) >= 1 for s in SPLITS)
    assert len(split["train"]) >= 1
    if n == 100:
        assert [len(split[s]) for s in SPLITS] == [80, 10, 10]
    assert split_families(list(reversed(names)), (0.8, 0.1, 0.1), seed=0) == split


def test_split_families_seed_and_zero_fraction() -> None:
    names = [f"f{k}" for k in range(20)]
    assert split_families(names, seed=1) != split_families(names, seed=2)
    no_test = split_families(names, (0.9, 0.1, 0.0), seed=0)
    assert no_test["test"] == [] and len(no_test["valid"]) == 2


@pytest.mark.parametrize(
    ("split", "expected"),
    [
        ((0.5, 0.5), r"must be three non-negative finite fractions"),
        ((0.8, 0.1, 0.2), r"must sum to 1 \(sums to 1.1\)"),
        ((0.0, 0.5, 0.5), r"the train fraction must be positive"),
        ((1.2, -0.1, -0.1), r"must be three non-negative finite fractions"),
        ("abc", r"must be three fractions"),
    ],
)
def test_split_fraction_errors(split, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        split_families(["a", "b", "c"], split)


# ----------------------------------------------------------------------------- build / read back


def test_build_read_back_equality(tmp_path: Path, families: list[Path]) -> None:
    out = tmp_path / "shards"
    index = build_shards(families, out, pairs_per_shard=7, min_length=1)
    assert index == read_index(out)
    expected = expected_pairs(families)
    seen_families: dict[str, str] = {}
    for split in SPLITS:
        ds = ShardDataset(out, split)
        assert not ds.has_embeddings
        want = [p for fam in index["splits"][split]["families"] for p in expected[fam]]
        got = list(ds)
        assert [ex.pair for ex in got] == want
        assert len(ds) == len(want) == index["splits"][split]["n_pairs"]
        for ex in got:
            pid = percent_identity(ex.pair)
            assert ex.percent_identity == pytest.approx(pid, rel=1e-6) or (math.isnan(pid) and math.isnan(ex.percent_identity))
            assert ex.query_embedding is None and ex.target_embedding is None
            seen_families.setdefault(ex.pair.family, split)
            assert seen_families[ex.pair.family] == split  # a family never crosses splits
        if want:
            assert ds[-1].pair == want[-1]
    assert set(seen_families) == set(expected)
    # several shards per split, each listed with its checksum
    train = index["splits"]["train"]["shards"]
    assert len(train) == math.ceil(index["splits"]["train"]["n_pairs"] / 7)
    for entry in train:
        assert hashlib.sha256((out / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]
    assert verify_shards(out) == sum(len(v["shards"]) for v in index["splits"].values())


def test_build_is_deterministic_and_order_independent(tmp_path: Path, families: list[Path]) -> None:
    a = build_shards(families, tmp_path / "a", seed=3)
    b = build_shards(list(reversed(families)), tmp_path / "b", seed=3)
    assert {s: v["families"] for s, v in a["splits"].items()} == {s: v["families"] for s, v in b["splits"].items()}
    for split in SPLITS:
        assert [e["sha256"] for e in a["splits"][split]["shards"]] == [e["sha256"] for e in b["splits"][split]["shards"]]


def test_build_filters_and_subsampling(tmp_path: Path, families: list[Path]) -> None:
    index = build_shards(families, tmp_path / "s", max_pairs_per_family=2, min_length=1)
    assert all(f["n_pairs"] == 2 for f in index["families"].values())
    again = build_shards(families, tmp_path / "t", max_pairs_per_family=2, min_length=1)
    assert [ex.pair for ex in ShardDataset(tmp_path / "s", "train")] == [ex.pair for ex in ShardDataset(tmp_path / "t", "train")]
    assert again["families"] == index["families"]
    # max_length drops every sequence longer than 13 residues; families left with < 2 are skipped
    short = build_shards(families, tmp_path / "u", min_length=1, max_length=13)
    assert short["skipped_families"]
    assert all("within the length limits" in why for why in short["skipped_families"].values())
    for split in SPLITS:
        for ex in ShardDataset(tmp_path / "u", split):
            assert len(ex.pair.query_seq) <= 13 and len(ex.pair.target_seq) <= 13
    # a family of one sequence has no pair, whatever its length (it said "1 of 1 sequences within
    # the length limits")
    single = tmp_path / "one.sto"
    single.write_text("# STOCKHOLM 1.0\n#=GF ID one\nA1 ACDEFGHIKLMNPQRSTVWY\n//\n")
    index = build_shards([*families, single], tmp_path / "v", min_length=1)
    assert index["skipped_families"] == {"one": "1 sequence: no pair to make"}


def test_family_without_gf_id_is_named_after_file(tmp_path: Path, families: list[Path]) -> None:
    plain = make_family(tmp_path / "nameless.sto", "zz", 3, 10, seed=9, gf=False)
    index = build_shards(families + [plain], tmp_path / "s", min_length=1)
    assert "nameless" in index["families"] and index["families"]["nameless"]["accession"] is None
    split = index["families"]["nameless"]["split"]
    assert {ex.pair.family for ex in ShardDataset(tmp_path / "s", split) if ex.pair.query_id.startswith("zz")} == {"nameless"}


def test_build_errors(tmp_path: Path, families: list[Path]) -> None:
    out = tmp_path / "s"
    with pytest.raises(ValueError, match=r"family 'fam0' appears twice: .*fam0.sto and .*fam0.sto"):
        build_shards([families[0], families[0]], out)
    clash = tmp_path / "clash.sto"
    clash.write_text("# STOCKHOLM 1.0\n#=GF ID other\nfam0_s0/1-12 MKVLAAAAAAAA\nx/1-3 MKVLAAAAAAAA\n//\n")
    with pytest.raises(ValueError, match=r"sequence id 'fam0_s0/1-12' has different sequences in families 'fam0' and 'other'"):
        build_shards([families[0], clash], out, min_length=1)
    with pytest.raises(ValueError, match="pairs_per_shard=0 must be a positive integer"):
        build_shards(families, out, pairs_per_shard=0)
    with pytest.raises(ValueError, match="max_length=5 must be an integer >= min_length=10 or None"):
        build_shards(families, out, max_length=5)
    with pytest.raises(ValueError, match=r"alphabet='rna' is not one of \(None, 'protein', 'dna'\)"):
        build_shards(families, out, alphabet="rna")
    with pytest.raises(ValueError, match="stockholm_paths is empty"):
        build_shards([], out)
    with pytest.raises(FileNotFoundError, match="nope.sto: no such Stockholm file"):
        build_shards([tmp_path / "nope.sto"], out)
    with pytest.raises(ValueError, match=r"no family left to shard \(skipped: .*alphabet protein \(kept only dna\)"):
        build_shards(families, out, alphabet="dna")
    assert not (out / "index.json").exists()
    build_shards(families, out, min_length=1)
    with pytest.raises(FileExistsError, match=r"index.json already exists; pass --overwrite to rebuild"):
        build_shards(families, out)
    # a folder of other files is never written into, even with overwrite
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    for overwrite in (False, True):
        with pytest.raises(FileExistsError, match=r"mine holds other files \(notes.txt\); give a new or empty"):
            build_shards(families, mine, min_length=1, overwrite=overwrite)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_user_errors_are_sinkalign_errors(tmp_path: Path, families: list[Path]) -> None:
    """The errors a user can fix are SinkalignErrors, and still the built-in they were before."""
    out = tmp_path / "s"
    for bad in ((0.5, 0.1, 0.1), (0.8, 0.2), ("a", 0, 0), (0.0, 0.5, 0.5)):
        with pytest.raises(InputError, match=r"split=.*") as info:
            check_split(bad)
        assert isinstance(info.value, ValueError)
    with pytest.raises(InputError, match="appears twice") as info:
        build_shards([families[0], families[0]], out)
    assert isinstance(info.value, ValueError)
    with pytest.raises(InputError, match="no family left to shard") as info:
        build_shards(families, out, alphabet="dna")
    assert isinstance(info.value, ValueError)
    with pytest.raises(InputError, match="must map family names to splits, got a list"):
        build_shards(families, out, assignment=["fam0"])
    with pytest.raises(MissingFileError, match="nope.sto: no such Stockholm file") as info:
        build_shards([tmp_path / "nope.sto"], out)
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(MissingFileError, match="is not a shard directory") as info:
        read_index(tmp_path)
    assert isinstance(info.value, FileNotFoundError)
    build_shards(families, out, pairs_per_shard=4, min_length=1)
    with pytest.raises(InputError, match="split='training' is not one of") as info:
        ShardDataset(out, "training")
    assert isinstance(info.value, ValueError)
    entry = read_index(out)["splits"]["train"]["shards"][0]
    (out / entry["file"]).write_bytes(b"not the shard")
    with pytest.raises(FormatError, match="does not match index.json") as info:
        verify_shards(out)
    assert isinstance(info.value, ValueError)
    (out / entry["file"]).unlink()
    with pytest.raises(MissingFileError, match="listed in index.json but missing") as info:
        ShardDataset(out, "train")
    assert isinstance(info.value, FileNotFoundError)
    (out / "index.json").write_text("[]")
    with pytest.raises(FormatError, match="format=None, expected 'sinkalign-pair-shards'") as info:
        read_index(out)
    assert isinstance(info.value, ValueError)


def test_interrupted_build_leaves_no_index(tmp_path: Path, families: list[Path], monkeypatch) -> None:
    out = tmp_path / "s"
    real_write = shards_mod._write_shard
    calls = {"n": 0}

    def failing_write(directory, name, data):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full (injected)")
        return real_write(directory, name, data)

    monkeypatch.setattr(shards_mod, "_write_shard", failing_write)
    with pytest.raises(OSError, match="injected"):
        build_shards(families, out, pairs_per_shard=3, min_length=1)
    assert not (out / "index.json").exists()
    assert not list(out.glob("*.npz"))  # the shards written before the failure went with the staging folder
    assert not list(out.glob(".*.tmp"))
    with pytest.raises(FileNotFoundError, match=r"index.json not found: .* is not a shard directory \(or its build was interrupted\)"):
        ShardDataset(out, "train")

    # An interrupted *rebuild* leaves the old build as it was (tests/test_shards_review.py has more).
    monkeypatch.setattr(shards_mod, "_write_shard", real_write)
    build_shards(families, out, pairs_per_shard=3, min_length=1, overwrite=True)
    old = {p.name: p.read_bytes() for p in out.iterdir()}
    assert len(ShardDataset(out, "train")) > 0
    calls["n"] = 0
    monkeypatch.setattr(shards_mod, "_write_shard", failing_write)
    with pytest.raises(OSError, match="injected"):
        build_shards(families, out, pairs_per_shard=5, min_length=1, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == old

    # A completed rebuild with bigger shards removes the stale files of the old build.
    monkeypatch.setattr(shards_mod, "_write_shard", real_write)
    build_shards(families, out, pairs_per_shard=3, min_length=1, overwrite=True)
    index = build_shards(families, out, pairs_per_shard=1000, min_length=1, overwrite=True)
    listed = {e["file"] for v in index["splits"].values() for e in v["shards"]}
    assert {p.name for p in out.glob("*.npz")} == listed


def test_dataset_errors(tmp_path: Path, families: list[Path]) -> None:
    out = tmp_path / "s"
    build_shards(families, out, pairs_per_shard=4, min_length=1)
    with pytest.raises(ValueError, match=r"split='training' is not one of \('train', 'valid', 'test'\)"):
        ShardDataset(out, "training")
    ds = ShardDataset(out, "train")
    with pytest.raises(IndexError, match=f"index {len(ds)} out of range for split 'train' with {len(ds)} pairs"):
        ds[len(ds)]
    with pytest.raises(ValueError, match="batch_size=0 must be a positive integer"):
        next(ds.iter_batches(0))
    with pytest.raises(ValueError, match="epoch=-1 must be a non-negative integer"):
        next(ds.iter_batches(2, epoch=-1))
    # a corrupted shard is detected by its checksum, a missing one when the dataset opens
    entry = ds.index["splits"]["train"]["shards"][1]
    victim = out / entry["file"]
    data = bytearray(victim.read_bytes())
    data[-10] ^= 0xFF
    victim.write_bytes(bytes(data))
    fresh = ShardDataset(out, "train")
    with pytest.raises(ValueError, match=rf"{entry['file']}: sha256 [0-9a-f]+ does not match index.json"):
        fresh[4]
    assert fresh[0].pair.n_aligned >= 0  # other shards still load
    with pytest.raises(ValueError, match="does not match index.json"):
        verify_shards(out)
    victim.unlink()
    with pytest.raises(FileNotFoundError, match=rf"{entry['file']}: listed in index.json but missing"):
        ShardDataset(out, "train")
    index = json.loads((out / "index.json").read_text())
    index["format_version"] = 99
    (out / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="format_version=99, this sinkalign reads format versions 1, 2"):
        read_index(out)


def test_iter_batches_deterministic_shuffle(tmp_path: Path, families: list[Path]) -> None:
    out = tmp_path / "s"
    build_shards(families, out, pairs_per_shard=5, min_length=1)
    ds = ShardDataset(out, "train", cache_shards=1)
    n = len(ds)

    def keys(batches):
        return [[(ex.pair.query_id, ex.pair.target_id) for ex in b] for b in batches]

    epoch0 = keys(ds.iter_batches(4, seed=7, epoch=0))
    assert epoch0 == keys(ds.iter_batches(4, seed=7, epoch=0))
    assert epoch0 != keys(ds.iter_batches(4, seed=7, epoch=1))
    flat = [k for b in epoch0 for k in b]
    in_order = [(ex.pair.query_id, ex.pair.target_id) for ex in ds]
    assert sorted(flat) == sorted(in_order) and len(flat) == n and flat != in_order
    assert [len(b) for b in epoch0] == [4] * (n // 4) + ([n % 4] if n % 4 else [])
    dropped = keys(ds.iter_batches(4, seed=7, epoch=0, drop_last=True))
    assert all(len(b) == 4 for b in dropped) and len(dropped) == n // 4
    assert keys(ds.iter_batches(3, shuffle=False))[0] == in_order[:3]


# ----------------------------------------------------------------------------- embeddings


def toy_embed(seq: str) -> np.ndarray:
    """[L, 4]: residue code, position, and two fixed functions of them."""
    codes = np.array([AMINO.index(c) if c in AMINO else 20 for c in seq], dtype=np.float64)
    pos = np.arange(len(seq), dtype=np.float64)
    return np.stack([codes, pos, np.sin(codes + pos), codes / (1 + pos)], axis=1)


def test_add_embeddings_round_trip(tmp_path: Path, families: list[Path]) -> None:
    out = tmp_path / "s"
    build_shards(families, out, pairs_per_shard=5, min_length=1)
    index = add_embeddings(out, toy_embed, name="toy", dtype="float16")
    assert index["embeddings"] == {"name": "toy", "dim": 4, "dtype": "float16"}
    assert read_index(out) == index
    for split in SPLITS:
        ds = ShardDataset(out, split)
        assert ds.has_embeddings
        for ex in ds:
            for seq, emb in ((ex.pair.query_seq, ex.query_embedding), (ex.pair.target_seq, ex.target_embedding)):
                assert emb.dtype == np.float16 and emb.shape == (len(seq), 4)
                np.testing.assert_array_equal(emb, toy_embed(seq).astype(np.float16))
        assert ShardDataset(out, split, load_embeddings=False)[0].query_embedding is None
    assert shard_summary(out)["embeddings"]["dim"] == 4
    with pytest.raises(FileExistsError, match=r"already has embeddings \(toy\); pass --overwrite"):
        add_embeddings(out, toy_embed, name="toy")
    index32 = add_embeddings(out, toy_embed, name="toy32", dtype="float32", overwrite=True)
    assert index32["embeddings"]["dtype"] == "float32"
    assert ShardDataset(out, "train")[0].query_embedding.dtype == np.float32


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (lambda s: np.zeros((len(s) + 1, 4)), r"embed_fn returned shape \(\d+, 4\) for sequence '.*' of length \d+; expected \[L, D\]"),
        (lambda s: np.zeros(len(s)), r"embed_fn returned shape \(\d+,\) for sequence"),
        (lambda s: np.full((len(s), 2), np.nan), r"non-finite or non-numeric values"),
        (lambda s: np.full((len(s), 2), 1e6), r"overflows float16"),
    ],
)
def test_add_embeddings_errors_leave_index_without_embeddings(tmp_path: Path, families: list[Path], fn, expected) -> None:
    out = tmp_path / "s"
    build_shards(families, out, pairs_per_shard=5, min_length=1)
    with pytest.raises(ValueError, match=expected):
        add_embeddings(out, fn, name="bad")
    assert read_index(out)["embeddings"] is None
    assert not ShardDataset(out, "train").has_embeddings
    assert len(list(ShardDataset(out, "train"))) > 0


def test_add_embeddings_inconsistent_dim_and_arguments(tmp_path: Path, families: list[Path]) -> None:
    out = tmp_path / "s"
    build_shards(families, out, min_length=1)
    dims = iter(range(2, 1000))
    with pytest.raises(ValueError, match=r"embed_fn returned D=3 for .*, earlier sequences had D=2"):
        add_embeddings(out, lambda s: np.zeros((len(s), next(dims))), name="x")
    with pytest.raises(ValueError, match=r"dtype='bfloat16' is not one of \('float16', 'float32'\)"):
        add_embeddings(out, toy_embed, name="x", dtype="bfloat16")
    with pytest.raises(ValueError, match="name='' must be a non-empty string"):
        add_embeddings(out, toy_embed, name="")


# ----------------------------------------------------------------------------- CLI


def test_cli_build_and_info(tmp_path: Path, families: list[Path]) -> None:
    runner = CliRunner()
    out = tmp_path / "cli"
    result = runner.invoke(
        shards_cli,
        ["build", *map(str, families), "--out", str(out), "--split", "0.5,0.25,0.25", "--seed", "1",
         "--max-pairs-per-family", "4", "--min-length", "1"],
    )
    assert result.exit_code == 0, result.output
    index = read_index(out)
    assert index["build"]["split_fractions"] == [0.5, 0.25, 0.25]
    assert index["build"]["seed"] == 1 and index["build"]["max_pairs_per_family"] == 4
    assert index["splits"] == build_shards(families, tmp_path / "lib", split=(0.5, 0.25, 0.25), seed=1,
                                           max_pairs_per_family=4, min_length=1)["splits"]
    for split in SPLITS:
        assert f"{split}: {index['splits'][split]['n_families']} families" in result.output
    info = runner.invoke(shards_cli, ["info", str(out), "--verify"])
    assert info.exit_code == 0, info.output
    for split in SPLITS:
        assert re.search(rf"{split}\s*│\s*{index['splits'][split]['n_families']}\s*│", info.output)
    assert "fam0" in info.output and "verified" in info.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--split", "0.8,0.2"], "has 2 fields"),
        (["--split", "a,b,c"], "is not three comma-separated numbers"),
        (["--split", "0.8,0.1,0.2"], "must sum to 1"),
        (["--max-length", "5"], "--max-length 5 is below --min-length 10"),
    ],
)
def test_cli_bad_arguments(tmp_path: Path, families: list[Path], args: list[str], expected: str) -> None:
    result = CliRunner().invoke(shards_cli, ["build", str(families[0]), "--out", str(tmp_path / "o"), *args])
    assert result.exit_code == 2 and expected in result.output


def _write_bad_input(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.sto"
    if kind == "binary":
        path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff" * 8)
    elif kind == "illegal":
        path.write_text("# STOCKHOLM 1.0\nx/1-4 MKV1\ny/1-4 MKVL\n//\n")
    elif kind == "unterminated":
        path.write_text("# STOCKHOLM 1.0\nx/1-4 MKVL\ny/1-4 MKVL\n")
    else:
        path.write_text("")
    return path


@pytest.mark.parametrize(
    ("kind", "fragments"),
    [
        ("binary", ["binary.sto: line 1: byte 0x89 of the file is not UTF-8 text: a binary file"]),
        ("illegal", ["illegal.sto: alignment #1: row 'x/1-4' (#1): illegal character '1'", "column 3"]),
        ("unterminated", ["unterminated.sto: alignment #1 starting at line 1 has no '//' terminator"]),
        ("empty", ["empty.sto: empty file"]),
    ],
)
def test_cli_build_bad_alignment_file(tmp_path: Path, families: list[Path], kind: str, fragments: list[str]) -> None:
    from sinkalign.cli.main import cli

    bad = _write_bad_input(tmp_path, kind)
    result = CliRunner().invoke(cli, ["shards", "build", str(families[0]), str(bad), "--out", str(tmp_path / "o")])
    assert_one_line_error(result, *fragments)
    assert not (tmp_path / "o" / "index.json").exists()


def test_cli_build_user_errors(tmp_path: Path, families: list[Path]) -> None:
    from sinkalign.cli.main import cli

    runner = CliRunner()
    out = str(tmp_path / "o")
    fams = [str(f) for f in families]
    assert_one_line_error(runner.invoke(cli, ["shards", "build", fams[0], fams[0], "--out", out]),
                          "family 'fam0' appears twice:", f"{families[0]} and {families[0]}")
    clash = tmp_path / "clash.sto"
    clash.write_text("# STOCKHOLM 1.0\n#=GF ID other\nfam0_s0/1-12 MKVLAAAAAAAA\nx/1-3 MKVLAAAAAAAA\n//\n")
    assert_one_line_error(runner.invoke(cli, ["shards", "build", fams[0], str(clash), "--out", out, "--min-length", "1"]),
                          "sequence id 'fam0_s0/1-12' has different sequences in families 'fam0' and 'other'")
    assert_one_line_error(runner.invoke(cli, ["shards", "build", *fams, "--out", out, "--alphabet", "dna"]),
                          "no family left to shard", "'fam0': 'alphabet protein (kept only dna)'")
    manifest = tmp_path / "split.json"
    manifest.write_text(json.dumps({"assignment": ["fam0"]}))
    assert_one_line_error(runner.invoke(cli, ["shards", "build", *fams, "--out", out, "--split-manifest", str(manifest)]),
                          "the split assignment must map family names to splits, got a list")
    manifest.write_text(json.dumps({"assignment": {f"fam{k}": "train" for k in range(6)} | {"fam1": "dev"}}))
    assert_one_line_error(runner.invoke(cli, ["shards", "build", *fams, "--out", out, "--split-manifest", str(manifest)]),
                          "the split assignment uses 'dev'; valid splits: train, valid, test")
    manifest.write_text("{not json")
    assert_one_line_error(runner.invoke(cli, ["shards", "build", *fams, "--out", out, "--split-manifest", str(manifest)]),
                          f"{manifest}: not a split manifest with an 'assignment' object")
    assert not (tmp_path / "o" / "index.json").exists()
    assert runner.invoke(cli, ["shards", "build", *fams, "--out", out, "--min-length", "1"]).exit_code == 0
    assert_one_line_error(runner.invoke(cli, ["shards", "build", *fams, "--out", out, "--min-length", "1"]),
                          f"{tmp_path / 'o' / 'index.json'} already exists; pass --overwrite")


def test_cli_split_option_names_the_value(tmp_path: Path, families: list[Path]) -> None:
    from sinkalign.cli.main import cli

    result = CliRunner().invoke(cli, ["shards", "build", str(families[0]), "--out", str(tmp_path / "o"),
                                      "--split", "0.5,0.1,0.1"])
    assert result.exit_code == 2 and "Invalid value for '--split': split=(0.5, 0.1, 0.1) must sum to 1" in result.output
    result = CliRunner().invoke(cli, ["shards", "build", str(families[0]), "--out", str(tmp_path / "o"),
                                      "--split", "0,0.5,0.5"])
    assert result.exit_code == 2 and "the train fraction must be positive" in result.output


def test_cli_info_and_embed_user_errors(tmp_path: Path, families: list[Path]) -> None:
    from sinkalign.cli.main import cli

    runner = CliRunner()
    empty = tmp_path / "empty"
    empty.mkdir()
    for command in (["shards", "info"], ["shards", "embed"]):
        assert_one_line_error(runner.invoke(cli, [*command, str(empty)]),
                              f"{empty / 'index.json'} not found: {empty} is not a shard directory",
                              f"sinkalign shards build ALIGNMENTS --out {empty}")
    out = tmp_path / "s"
    build_shards(families, out, pairs_per_shard=4, min_length=1)
    assert runner.invoke(cli, ["shards", "embed", str(out)]).exit_code == 0
    assert_one_line_error(runner.invoke(cli, ["shards", "embed", str(out)]),
                          f"{out} already has embeddings", "pass --overwrite")
    entry = read_index(out)["splits"]["train"]["shards"][0]
    # embeddings deleted, pair shards there: said so, with the command that makes them again (training
    # said the directory held no pair shards)
    emb = out / entry["embeddings"]["file"]
    saved = emb.read_bytes()
    emb.unlink()
    with pytest.raises(FileNotFoundError, match=rf"{emb}: the embeddings of pair shard {entry['file']}, listed in "
                       rf"index.json but missing \(the pair shards are there\): embed again \(`sinkalign shards "
                       rf"embed {out} --overwrite`\)"):
        ShardDataset(out, "train")
    emb.write_bytes(saved)
    victim = out / entry["file"]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    assert runner.invoke(cli, ["shards", "info", str(out)]).exit_code == 0  # the index alone is fine
    assert_one_line_error(runner.invoke(cli, ["shards", "info", str(out), "--verify"]),
                          f"{victim}: sha256", "does not match index.json", "the file is corrupt or stale")
    victim.unlink()
    assert_one_line_error(runner.invoke(cli, ["shards", "info", str(out), "--verify"]),
                          f"{victim}: listed in index.json but missing")
    (out / "index.json").write_text("{")
    assert_one_line_error(runner.invoke(cli, ["shards", "info", str(out)]), f"{out / 'index.json'}: not valid JSON")
    (out / "index.json").write_text(json.dumps({"format": "something-else"}))
    assert_one_line_error(runner.invoke(cli, ["shards", "embed", str(out), "--overwrite"]),
                          f"{out / 'index.json'}: format='something-else', expected 'sinkalign-pair-shards'")


def test_cli_bugs_keep_their_traceback(tmp_path: Path, families: list[Path], monkeypatch) -> None:
    """A plain ValueError from the library is a bug: no 'Error:' line, the exception stays."""
    from sinkalign.cli.main import cli

    def bug(*args, **kwargs):
        raise ValueError("an internal invariant broke")

    monkeypatch.setattr(shards_mod, "build_shards", bug)
    result = CliRunner().invoke(cli, ["shards", "build", str(families[0]), "--out", str(tmp_path / "o")])
    assert isinstance(result.exception, ValueError) and "Error:" not in result.output
    monkeypatch.setattr(shards_mod, "shard_summary", bug)
    result = CliRunner().invoke(cli, ["shards", "info", str(tmp_path)])
    assert isinstance(result.exception, ValueError) and "Error:" not in result.output


def test_cli_registered_in_main() -> None:
    from sinkalign.cli.main import cli

    assert cli.get_command(None, "shards") is shards_cli


# ----------------------------------------------------------------------------- real data


def test_real_pfam_shards(shared_data: Path, tmp_path: Path) -> None:
    files = sorted((shared_data / "pfam_seed").glob("*.sto"))
    out = tmp_path / "pfam"
    with pytest.raises(AlphabetError, match=r"pfam_seed/MADE1_dfam_dna\.sto \(family MADE1: dna\) among 13 protein"):
        build_shards(files, out, seed=0)
    index = build_shards(files, out, seed=0, mixed_alphabets=True)
    assert len(index["families"]) == 14 and not index["skipped_families"]
    split_of = {fam: info["split"] for fam, info in index["families"].items()}
    assert {s: sorted(f for f, v in split_of.items() if v == s) for s in SPLITS} == {
        s: index["splits"][s]["families"] for s in SPLITS}
    assert all(index["splits"][s]["n_families"] >= 1 for s in SPLITS)
    assert sum(index["splits"][s]["n_pairs"] for s in SPLITS) == 18682
    expected = {}
    for path in files:
        (msa,) = read_stockholm(path)
        expected[msa.family or path.stem] = msa_to_pairs(msa)
    for split in SPLITS:
        ds = ShardDataset(out, split)
        ids = {ex.pair.family for ex in ds}
        assert ids == set(index["splits"][split]["families"])
        want = [dataclasses.replace(p, family=fam) for fam in index["splits"][split]["families"] for p in expected[fam]]
        step = max(1, len(want) // 300)
        for k in range(0, len(want), step):
            assert ds[k].pair == want[k]
    assert index["families"]["MADE1"]["alphabet"] == "dna"
    few = [shared_data / "pfam_seed" / name for name in ("MADE1_dfam_dna.sto", "globins4.sto", "Caudal_act.sto")]
    protein = build_shards(few, tmp_path / "protein", alphabet="protein")
    assert list(protein["skipped_families"]) == ["MADE1"] and sorted(protein["families"]) == ["Caudal_act", "globins4"]


def test_manifest_pfam_table_matches_data(shared_data: Path) -> None:
    text = (MANIFESTS / "pfam_seed.md").read_text()
    rows = re.findall(r"^\| (\S+\.sto) \| .*? \| (\S+) \| (protein|dna) \| (\d+) \| (\d+) \| (\d+) \| ([\d.]+) \|$",
                      text, flags=re.M)
    assert len(rows) == 14
    for name, accession, alphabet, n_seqs, n_cols, n_pairs, mean_pid in rows:
        (msa,) = read_stockholm(shared_data / "pfam_seed" / name)
        pairs = msa_to_pairs(msa)
        assert (msa.accession or "-", msa.alphabet, len(msa), msa.n_columns, len(pairs)) == (
            accession, alphabet, int(n_seqs), int(n_cols), int(n_pairs)), name
        assert np.nanmean([percent_identity(p) for p in pairs]) == pytest.approx(float(mean_pid), abs=0.051)


def test_manifest_checksums(shared_data: Path) -> None:
    rows = []
    for manifest in sorted(MANIFESTS.glob("*.md")):
        rows += re.findall(r"^\| `([^`]+)` \| (\d+) \| ([0-9a-f]{64}) \|$", manifest.read_text(), flags=re.M)
    listed = {path for path, _, _ in rows}
    on_disk = {str(p.relative_to(shared_data)) for d in ("pfam_seed", "tmalign_pairs", "genomes", "genomes/multi",
                                                         "structural")
               for p in (shared_data / d).iterdir() if p.is_file()}
    assert listed == on_disk
    for path, size, sha in rows:
        data = (shared_data / path).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (int(size), sha), path


def test_the_embedder_reads_as_its_name_and_options():
    from sinkalign.io.shards import embedder_label as _embedder_label

    assert _embedder_label('{"name": "builtin", "dim": 53, "version": 1}') == "builtin (dim=53, version=1)"
    assert _embedder_label('{"name": "esm2"}') == "esm2"
    assert _embedder_label("esm2_t6_8M") == "esm2_t6_8M"  # an older index: the name alone


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda i: i.pop("splits"), r"index.json: no 'splits' object"),
        (lambda i: i["splits"]["train"].pop("shards"), r"split 'train' has no 'shards' list"),
        (lambda i: i["splits"]["train"]["shards"][0].pop("sha256"), r"shard entry 0 of split 'train' lacks 'sha256'"),
        (lambda i: i["splits"]["train"]["shards"][0].update(n_pairs="7"),
         r"shard entry 0 of split 'train' lacks 'n_pairs' \(a int\)"),
        (lambda i: i["splits"]["train"]["shards"][0].update(embeddings={"file": "x"}),
         r"the embeddings of shard entry 0 of split 'train' lack 'file' or 'sha256'"),
    ],
)
def test_an_index_missing_entries_is_a_format_error(tmp_path: Path, families: list[Path], edit, expected) -> None:
    """An index.json edited by hand or written by another tool: a FormatError naming the entry
    (each was a KeyError traceback in `evaluate`, `shards info` and `shards embed`)."""
    out = tmp_path / "shards"
    build_shards(families, out, split=(0.5, 0.25, 0.25), seed=0)
    index = json.loads((out / "index.json").read_text())
    edit(index)
    (out / "index.json").write_text(json.dumps(index))
    with pytest.raises(FormatError, match=expected):
        read_index(out)
    with pytest.raises(FormatError, match=expected):
        ShardDataset(out, "train")
    from sinkalign.cli.main import cli

    assert_one_line_error(CliRunner().invoke(cli, ["shards", "info", str(out)]), "index.json")


def test_a_listed_file_that_is_no_shard_is_a_format_error(tmp_path: Path, families: list[Path]) -> None:
    """A file whose sha256 the index lists but that is no .npz: one line naming it (numpy's
    'pickled (object) data' traceback)."""
    out = tmp_path / "shards"
    build_shards(families, out, split=(0.5, 0.25, 0.25), seed=0)
    index = json.loads((out / "index.json").read_text())
    entry = index["splits"]["train"]["shards"][0]
    data = b"not a shard at all\n"
    (out / entry["file"]).write_bytes(data)
    entry["sha256"] = hashlib.sha256(data).hexdigest()
    (out / "index.json").write_text(json.dumps(index))
    with pytest.raises(FormatError, match=rf"{entry['file']}: not a shard \(.npz\) file"):
        ShardDataset(out, "train")[0]
