"""`shards build` review: rebuilds that survive an interruption, a user's index.json and files,
an interrupted build's leftovers, Stockholm #=GR errors, families with nothing aligned, sequences
shared by two splits, unknown manifest names, and the formats the help lists."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import sinkalign.io.shards as shards_mod
from sinkalign.errors import FormatError, OutputExistsError
from sinkalign.io.alignments import msa_to_pairs, read_stockholm
from sinkalign.io.shards import ShardDataset, add_embeddings, build_shards, read_index, split_families
from tests.cli_errors import assert_one_line_error

AMINO = "ACDEFGHIKLMNPQRSTVWY"


def make_family(path: Path, name: str, n_seqs: int, n_cols: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    rows = ["".join(AMINO[rng.integers(20)] for _ in range(n_cols)) for _ in range(n_seqs)]
    body = "".join(f"{name}_s{k}/1-{n_cols}  {row}\n" for k, row in enumerate(rows))
    path.write_text(f"# STOCKHOLM 1.0\n#=GF ID   {name}\n{body}//\n")
    return path


@pytest.fixture()
def families(tmp_path: Path) -> list[Path]:
    src = tmp_path / "src"
    src.mkdir()
    return [make_family(src / f"fam{k}.sto", f"fam{k}", 4 + k % 3, 14 + k, seed=k) for k in range(6)]


def snapshot(directory: Path) -> dict[str, str]:
    """Every entry of ``directory`` (hidden ones too) with the sha256 of its bytes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "<dir>"
            for p in sorted(directory.iterdir())}


# ----------------------------------------------------------------------------- 1. interrupted rebuild


def test_interrupted_rebuild_keeps_the_previous_build(tmp_path: Path, families: list[Path], monkeypatch) -> None:
    out = tmp_path / "shards"
    build_shards(families, out, pairs_per_shard=3)
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    pairs_before = [ex.pair for ex in ShardDataset(out, "train")]
    real_write = shards_mod._write_shard
    calls = {"n": 0}

    def interrupted_write(directory, name, data):
        calls["n"] += 1
        if calls["n"] == 2:  # Ctrl-C after the first shard of the rebuild
            raise KeyboardInterrupt
        return real_write(directory, name, data)

    monkeypatch.setattr(shards_mod, "_write_shard", interrupted_write)
    with pytest.raises(KeyboardInterrupt):
        build_shards(families, out, pairs_per_shard=5, seed=3, overwrite=True)
    assert snapshot(out) == before  # old index and shards byte for byte, no staging folder left
    assert [ex.pair for ex in ShardDataset(out, "train")] == pairs_before

    # a complete rebuild replaces the shards (stale ones go), keeping the user's file
    monkeypatch.setattr(shards_mod, "_write_shard", real_write)
    index = build_shards(families, out, pairs_per_shard=1000, overwrite=True)
    listed = {e["file"] for v in index["splits"].values() for e in v["shards"]}
    assert {p.name for p in out.iterdir()} == listed | {"index.json", "notes.txt"}
    assert (out / "notes.txt").read_text() == "mine"


def test_interrupted_swap_moves_everything_back(tmp_path: Path, families: list[Path], monkeypatch) -> None:
    out = tmp_path / "shards"
    build_shards(families, out, pairs_per_shard=2)
    before = snapshot(out)
    real_replace = os.replace
    moved = {"n": 0}

    def replace(src, dst, *args, **kwargs):
        if ".sinkalign-shards-new-" in str(src) and Path(dst).parent == out:
            moved["n"] += 1
            if moved["n"] == 2:  # Ctrl-C while the new shards are being moved in
                raise KeyboardInterrupt
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        build_shards(families, out, pairs_per_shard=3, seed=1, overwrite=True)
    monkeypatch.setattr(os, "replace", real_replace)
    assert moved["n"] == 2
    assert snapshot(out) == before


def test_a_build_killed_while_swapping_is_put_back(tmp_path: Path, families: list[Path], caplog) -> None:
    """A kill between setting the old build aside and moving the new index in leaves no index;
    the next build puts the previous one back before anything else."""
    out = tmp_path / "shards"
    build_shards(families, out, pairs_per_shard=3)
    before = snapshot(out)
    aside = out / ".sinkalign-shards-old-k1ll3d.tmp"
    staging = out / ".sinkalign-shards-new-k1ll3d.tmp"
    aside.mkdir()
    staging.mkdir()
    (staging / "train-00000.npz").write_bytes(b"half a build")
    for name in ["index.json", "train-00000.npz", "train-00001.npz"]:
        os.replace(out / name, aside / name)
    (out / "train-00000.npz").write_bytes((staging / "train-00000.npz").read_bytes())  # one new shard moved in
    with caplog.at_level(logging.WARNING, logger="sinkalign.io.shards"), \
            pytest.raises(OutputExistsError, match="index.json already exists; pass --overwrite"):
        build_shards(families, out, pairs_per_shard=3)
    assert snapshot(out) == before
    assert "put back the previous build" in caplog.text and "removing .sinkalign-shards-new-k1ll3d.tmp" in caplog.text


# ----------------------------------------------------------------------------- 2. a user's index.json


@pytest.mark.parametrize("content", ['{"experiment": 7}', '{"format": "my-format"}', "not json", "[1, 2]"])
def test_a_users_index_json_is_never_replaced(tmp_path: Path, families: list[Path], content: str) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "index.json").write_text(content)
    (out / "results.csv").write_text("a,b\n")
    for overwrite in (False, True):
        with pytest.raises(OutputExistsError, match="index.json is not a sinkalign shard index") as info:
            build_shards(families, out, overwrite=overwrite)
        assert "--overwrite" not in str(info.value)
        assert str(out / "index.json") in str(info.value)
    assert snapshot(out) == {"index.json": hashlib.sha256(content.encode()).hexdigest(),
                             "results.csv": hashlib.sha256(b"a,b\n").hexdigest()}


def test_cli_refuses_a_users_index_json(tmp_path: Path, families: list[Path]) -> None:
    from sinkalign.cli.main import cli

    out = tmp_path / "mine"
    out.mkdir()
    (out / "index.json").write_text('{"experiment": 7}')
    for extra in ([], ["--overwrite"]):
        result = CliRunner().invoke(cli, ["shards", "build", *map(str, families), "--out", str(out), *extra])
        assert_one_line_error(result, f"{out / 'index.json'} is not a sinkalign shard index",
                              "give a new or empty directory")
        assert "pass --overwrite" not in result.output
    assert (out / "index.json").read_text() == '{"experiment": 7}'


# ----------------------------------------------------------------------------- 3. leftovers


def test_an_interrupted_builds_leftovers_are_removed(tmp_path: Path, families: list[Path], caplog) -> None:
    other = tmp_path / "other"
    build_shards(families, other, pairs_per_shard=2)
    add_embeddings(other, lambda seq: np.zeros((len(seq), 2), np.float32), name="zeros")
    assert list(other.glob("*.emb.safetensors"))
    out = tmp_path / "shards"
    out.mkdir()
    for p in other.iterdir():  # what an older version's interrupted build left: shards, no index
        if p.name != "index.json":
            (out / p.name).write_bytes(p.read_bytes())
    (out / ".train-00007.npz.x1y2z3.tmp").write_bytes(b"half")
    (out / ".sinkalign-shards-new-abc123.tmp").mkdir()
    with caplog.at_level(logging.WARNING, logger="sinkalign.io.shards"):
        index = build_shards(families, out, pairs_per_shard=100)
    listed = {e["file"] for v in index["splits"].values() for e in v["shards"]}
    assert {p.name for p in out.iterdir()} == listed | {"index.json"}
    assert "shard files that no index.json lists (left by an interrupted build" in caplog.text
    assert "removing .train-00007.npz.x1y2z3.tmp" in caplog.text
    assert "removing .sinkalign-shards-new-abc123.tmp" in caplog.text


def test_a_file_named_like_a_shard_but_not_one_is_kept(tmp_path: Path, families: list[Path]) -> None:
    out = tmp_path / "shards"
    out.mkdir()
    (out / "train-00000.npz").write_bytes(b"someone else's archive")
    with pytest.raises(OutputExistsError, match="holds train-00000.npz, named like a shard file but not one"):
        build_shards(families, out)
    assert snapshot(out) == {"train-00000.npz": hashlib.sha256(b"someone else's archive").hexdigest()}


def test_a_failed_fresh_build_leaves_nothing(tmp_path: Path, families: list[Path], monkeypatch) -> None:
    out = tmp_path / "new"

    def failing_write(directory, name, data):
        raise OSError("disk full (injected)")

    monkeypatch.setattr(shards_mod, "_write_shard", failing_write)
    with pytest.raises(OSError, match="injected"):
        build_shards(families, out)
    assert not out.exists()


# ----------------------------------------------------------------------------- 4. #=GR of the wrong length


GR_SHORT = """# STOCKHOLM 1.0
#=GF ID GSGR
seqA/1-20   ACDEF..GHIKLmnpQRSTVWY
#=GR seqA/1-20 SS HHHHHHHHHHHHHHHHHH
seqB/3-22   AC-EFkkGHIKL...QRSTVXY
//
"""


def test_stockholm_gr_line_of_the_wrong_length(tmp_path: Path) -> None:
    path = tmp_path / "badgr.sto"
    path.write_text(GR_SHORT)
    with pytest.raises(FormatError, match=r"badgr.sto: alignment #1 \(starting at line 1\): line 4: the #=GR "
                                          r"seqA/1-20 SS annotation has 18 characters, row 'seqA/1-20' has 22 "
                                          "columns") as info:
        list(read_stockholm(path))
    assert info.value.record_id == "seqA/1-20"
    from sinkalign.cli.main import cli

    result = CliRunner().invoke(cli, ["shards", "build", str(path), "--out", str(tmp_path / "o")])
    assert_one_line_error(result, f"{path}: alignment #1", "the #=GR seqA/1-20 SS annotation has 18 characters")


# ----------------------------------------------------------------------------- 5. nothing aligned


def test_a_family_with_nothing_aligned_is_named(tmp_path: Path, families: list[Path], caplog) -> None:
    low = tmp_path / "src" / "low.sto"
    low.write_text("# STOCKHOLM 1.0\n#=GF ID LOWFAM\ns1 acdefghiklmnpqrst\ns2 acdefghiklmnpqrsa\n"
                   "s3 acdefghik.mnpqrst\n//\n")
    with caplog.at_level(logging.WARNING):
        index = build_shards([*families, low], tmp_path / "o")
    warned = [r.getMessage() for r in caplog.records if "no aligned residue pair" in r.getMessage()]
    assert len(warned) == 1
    assert f"{low} (family LOWFAM)" in warned[0]
    assert "every residue is lower case" in warned[0] and "insert columns" in warned[0]
    assert index["families"]["LOWFAM"]["n_pairs"] == 3  # the convention is kept: stored, 0 aligned
    msa = next(read_stockholm(low))
    assert all(p.n_aligned == 0 for p in msa_to_pairs(msa))


# ----------------------------------------------------------------------------- 6. sequences in two splits


def test_identical_sequences_in_two_splits_are_reported(tmp_path: Path, families: list[Path], caplog) -> None:
    text = families[0].read_text()
    copy = tmp_path / "src" / "copy.sto"
    copy.write_text(text.replace("#=GF ID   fam0", "#=GF ID   famcopy").replace("fam0_s", "other_s"))
    names = [f"fam{k}" for k in range(6)] + ["famcopy"]
    split = split_families(names, seed=0)
    side = {f: s for s, fs in split.items() for f in fs}
    assert side["fam0"] != side["famcopy"]  # this seed puts the copies on two sides
    with caplog.at_level(logging.WARNING, logger="sinkalign.io.shards"):
        index = build_shards([*families, copy], tmp_path / "o", seed=0)
    assert {s: v["families"] for s, v in index["splits"].items()} == split  # the split is kept
    (message,) = [r.getMessage() for r in caplog.records if "more than one split" in r.getMessage()]
    n_rows = len(next(read_stockholm(copy)))
    assert message.startswith(f"{n_rows} distinct sequences (identical residues, case and gaps aside)")
    assert "fam0" in message and "famcopy" in message

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sinkalign.io.shards"):
        build_shards(families, tmp_path / "o2", seed=0)
    assert "more than one split" not in caplog.text


# ----------------------------------------------------------------------------- 7. unknown manifest names


def test_unknown_manifest_families_are_named(tmp_path: Path, families: list[Path], caplog) -> None:
    assignment = {f"fam{k}": ("train", "valid", "test")[k % 3] for k in range(6)}
    assignment |= {"Bogus": "test", "Other": "train"}
    with caplog.at_level(logging.WARNING, logger="sinkalign.io.shards"):
        build_shards(families, tmp_path / "o", assignment=assignment)
    (message,) = [r.getMessage() for r in caplog.records if "no input holds" in r.getMessage()]
    assert "names 2 families that no input holds, ignored: Bogus, Other" in message


# ----------------------------------------------------------------------------- 8. help


def test_build_help_names_every_format_read(tmp_path: Path) -> None:
    from sinkalign.cli.main import cli

    text = " ".join(CliRunner().invoke(cli, ["shards", "build", "--help"]).output.split())
    for word in ("Stockholm", "bench1.0", "A2M", "PIR", "Clustal", "MSF", "PHYLIP", "by its content"):
        assert word in text, word


def test_the_help_is_right_about_a_clustal_input(tmp_path: Path, families: list[Path]) -> None:
    """A Clustal file is read by content: one family named <folder>/<file name>, every residue aligned."""
    clustal = tmp_path / "src" / "clu.aln"
    clustal.write_text("CLUSTAL W (1.83) multiple sequence alignment\n\n"
                       "cA    ACDEFGHIKLMNPQ\ncB    ACDEFGHIKLMNPA\ncC    ACDEF-HIKLMNPQ\n\n")
    index = build_shards([*families, clustal], tmp_path / "o")
    fam = index["families"]["src/clu.aln"]
    assert fam["n_pairs"] == 3 and fam["mean_percent_identity"] is not None
    assert read_index(tmp_path / "o")["families"]["src/clu.aln"]["source"] == str(clustal)
    assert json.loads((tmp_path / "o" / "index.json").read_text())["format"] == "sinkalign-pair-shards"
