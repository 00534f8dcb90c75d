"""Structure-based references: PIR / bench1.0 readers, core masks in pairs, shards, metrics,
losses, mixed-alphabet refusal, leak-free splits, cropping and the residue encoder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import sinkalign.io.shards as shards_mod
from sinkalign.align import model as M
from sinkalign.align.evaluate import load_reference_set
from sinkalign.align.metrics import core_pair_scores, pair_scores
from sinkalign.align.train import crop_example, examples_to_batch, flank_example
from sinkalign.cli.main import cli
from sinkalign.cli.shards import shards as shards_cli
from sinkalign.errors import AlphabetError, FormatError, InputError
from sinkalign.io.alignments import ReferencePair, msa_to_pairs
from sinkalign.io.shards import ShardDataset, build_shards, read_index
from sinkalign.io.splits import SplitItem, crossing_keys, leak_free_split, split_links
from sinkalign.io.structural import (
    detect_alignment_format,
    family_name,
    pdb_code,
    read_bench_fasta,
    read_pir,
)
from tests.cli_errors import assert_one_line_error

MANIFESTS = Path(__file__).resolve().parents[1] / "data_manifests"

PIR = """C; family: test family
C; class: test
>P1;1abca
structureX:1abc:   1 :A:  10 :A:thing:organism: 2.0: 19.8
ACDEF-GH/IK*
>P1;2xyz
structureX:2xyz:   1 : :  10 : :thing:organism: 2.0: 19.8
AC-EFWGHLIK*
"""

# columns:   0123456789
BENCH = """>d1gtea1
ACdeF-GH..
>1xyzA
AC-eFWGhIK
"""


@pytest.fixture()
def sdir(tmp_path: Path) -> Path:
    d = tmp_path / "coll"
    d.mkdir()
    (d / "FAM1.ali").write_text(PIR)
    (d / "set1").write_text(BENCH)
    return d


# ------------------------------------------------------------------ readers


def test_read_pir_chain_break_and_name(sdir):
    msa = read_pir(sdir / "FAM1.ali")
    assert msa.ids == ("1abca", "2xyz")
    assert msa.rows == ("ACDEF-GH-IK", "AC-EFWGHLIK")  # '/' is a gap column, '*' dropped
    assert msa.family == "coll/FAM1" and msa.format == "pir"
    pairs = msa_to_pairs(msa)
    assert len(pairs) == 1 and pairs[0].query_core is None  # every PIR residue is trusted
    assert pairs[0].pairs.tolist() == [[0, 0], [1, 1], [3, 2], [4, 3], [5, 5], [6, 6], [7, 8], [8, 9]]


def test_read_bench_core_mask(sdir):
    msa = read_bench_fasta(sdir / "set1")
    assert msa.family == "coll/set1" and msa.format == "bench"
    (p,) = msa_to_pairs(msa)
    assert p.query_seq == "ACDEFGH" and p.target_seq == "ACEFWGHIK"
    # trusted aligned pairs: both upper case in a column: cols 0, 1, 4, 6
    assert p.pairs.tolist() == [[0, 0], [1, 1], [4, 3], [5, 5]]
    # query: A C d e F G H -> d (col 2, other row '-') and e (col 3) lower -> untrusted;
    # H (col 7) is upper but the target has lower-case h there -> untrusted
    assert p.query_core.tolist() == [True, True, False, False, True, True, False]
    # target: A C e F W G h I K: e lower; W (col 5) upper vs query gap -> trusted gap;
    # h lower; I, K (cols 8, 9) upper vs query '.' gaps -> trusted
    assert p.target_core.tolist() == [True, True, False, True, True, True, False, True, True]


@pytest.mark.parametrize("name, text, reader, message", [
    ("bad", ">a\nAC-D\n>b\nAC1D\n", read_bench_fasta, r"bad: record 'b' \(#2\): illegal character '1' at column 2"),
    ("ragged", ">a\nAC-D\n>b\nACD\n", read_bench_fasta, r"ragged: record 'b' \(#2\) has 3 columns"),
    ("bad.ali", ">P1;x\nstructureX:x\nAC#D*\n>P1;y\nstructureX:y\nACED*\n", read_pir,
     r"bad.ali: record 'x' \(#1\): illegal character '#' at column 2"),
    ("lead", "\nACD\n>a\nAC-D\n", read_bench_fasta,
     r"lead: line 2: expected a '>' header before any sequence, found 'ACD'"),
    ("anon", ">a\nAC-D\n>\nACED\n", read_bench_fasta, r"anon: record #2: a record without an id"),
    ("empty", "\n", read_bench_fasta, r"empty: empty file"),
    ("junk.txt", "hello\n", detect_alignment_format, "junk.txt: line 1"),
])
def test_reader_errors_name_file_record_and_column(tmp_path, name, text, reader, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(FormatError, match=message):
        reader(path)


def test_pdb_codes_and_family_names(tmp_path):
    assert pdb_code("d1gtea1") == "1gte"
    assert pdb_code("1pgjB") == "1pgj"
    assert pdb_code("1axn-4-AUTO.1") == "1axn"
    assert pdb_code("153l") == "153l"
    assert pdb_code("Q9XYZ1_HUMAN/1-20") is None
    assert family_name(tmp_path / "homstrad" / "6PGD.ali") == "homstrad/6PGD"
    assert family_name(tmp_path / "prefab" / "1a02N_1a3qA") == "prefab/1a02N_1a3qA"


# ------------------------------------------------------------------ metrics and losses


def test_core_pair_scores_ignore_untrusted_pairs(sdir):
    (p,) = msa_to_pairs(read_bench_fasta(sdir / "set1"))
    # right: (0,0), (4,3); wrong and counted: (1, 2) (query C trusted); ignored: (2, 2), (3, 6)
    # (both residues untrusted)
    pred = np.array([[0, 0], [1, 2], [2, 2], [3, 6], [4, 3]])
    s = core_pair_scores(pred, p)
    assert (s.tp, s.n_pred, s.n_ref) == (2, 3, 4)
    assert s.f1 == pytest.approx(2 * 2 / 7)
    plain = ReferencePair("a", "b", p.query_seq, p.target_seq, p.pairs)
    assert core_pair_scores(pred, plain) == pair_scores(pred, p.pairs)


def test_untrusted_residues_get_no_loss_target(sdir):
    (p,) = msa_to_pairs(read_bench_fasta(sdir / "set1"))
    cfg = M.preset("default", embedder={"name": "none"}, feature_dim=0)
    b = examples_to_batch([p], cfg)
    lq, lk = b.a.shape[1], b.b.shape[1]
    assert b.ta[0, :7].tolist() == [0, 1, -1, -1, 3, 5, -1]
    assert b.tb[0, :9].tolist() == [0, 1, -1, 4, lq, 5, -1, lq, lq]  # W, I, K: trusted gaps
    assert (b.ta[0, 7:] == -1).all() and lk == lq


def test_crop_keeps_pairs_and_masks_consistent():
    rng = np.random.default_rng(0)
    amino = "ACDEFGHIKLMNPQRSTVWY"
    q = "".join(rng.choice(list(amino), 300))
    t = "".join(rng.choice(list(amino), 280))
    pairs = np.stack([np.arange(10, 290), np.arange(0, 280)], 1)
    p = ReferencePair("q", "t", q, t, pairs)
    for seed in range(5):
        c = crop_example(p, 100, np.random.default_rng(seed))
        assert len(c.query_seq) <= 100 and len(c.target_seq) <= 100
        assert c.n_aligned > 0
        q0, t0 = q.index(c.query_seq), t.index(c.target_seq)
        for i, j in c.pairs:
            assert (i + q0) - 10 == j + t0  # the same reference pairs, shifted
        # a query residue whose partner fell outside the target window is not a trusted gap
        partner_in = [(i + q0 - 10) - t0 in range(len(c.target_seq)) for i in range(len(c.query_seq))]
        has_ref = [(i + q0) in range(10, 290) for i in range(len(c.query_seq))]
        expected = [not h or pi for h, pi in zip(has_ref, partner_in)]
        assert c.query_core.tolist() == expected
    assert crop_example(p, 400, rng) is p


def test_flank_puts_the_longer_side_inside_other_proteins_and_moves_the_reference():
    """flank_example: the longer side grows to R times the shorter (R <= max_ratio, within
    max_length) with windows of donor sequences of other families; the reference pairs point
    at the same residues, the added residues are trusted gaps, embeddings move with them."""
    from sinkalign.io.shards import ShardExample

    rng = np.random.default_rng(1)
    amino = list("ACDEFGHIKLMNPQRSTVWY")
    seq = lambda n: "".join(rng.choice(amino, n))  # noqa: E731
    q, t = seq(40), seq(46)
    pairs = np.stack([np.arange(2, 40), np.arange(5, 43)], 1).astype(np.int32)
    core_q, core_t = np.ones(40, bool), np.ones(46, bool)
    core_q[:2] = core_t[-2:] = False
    emb = lambda n, v: np.full((n, 3), v, np.float32)  # noqa: E731
    ex = ShardExample(ReferencePair("q", "t", q, t, pairs, family="A", query_core=core_q, target_core=core_t),
                      30.0, emb(40, 1.0), emb(46, 2.0))
    donors = [ShardExample(ReferencePair(f"d{k}", f"e{k}", seq(70), seq(90), np.zeros((0, 2), np.int32),
                                         family=f"D{k}"), 20.0, emb(70, 3.0), emb(90, 3.0)) for k in range(3)]
    same_family = ShardExample(ReferencePair("s", "s2", "X" * 200, "X" * 200, np.zeros((0, 2), np.int32),
                                             family="A"), 20.0, emb(200, 9.0), emb(200, 9.0))
    grown = 0
    for seed in range(30):
        f = flank_example(ex, [*donors, same_family], 256, 4.0, np.random.default_rng(seed))
        p = f.pair
        assert len(p.query_seq) == 40  # the shorter side is left alone
        if len(p.target_seq) == 46:
            assert f is ex  # nothing to add: returned as it is
            continue
        grown += 1
        left = p.target_seq.index(t)
        assert 46 < len(p.target_seq) <= 4.0 * 40 and "X" not in p.target_seq  # no donor of the same family
        np.testing.assert_array_equal(p.pairs, pairs + [0, left])
        added = np.r_[np.arange(left), np.arange(left + 46, len(p.target_seq))]
        assert p.target_core[added].all() and (p.target_core[left:left + 46] == core_t).all()
        assert (p.query_core == core_q).all()
        assert (f.target_embedding[left:left + 46] == 2.0).all() and (f.target_embedding[added] == 3.0).all()
        assert f.target_embedding.shape == (len(p.target_seq), 3) and (f.query_embedding == 1.0).all()
    assert grown >= 20
    # a pair too long for the ratio within max_length is cut first, around its reference pairs
    cut = flank_example(ex.pair, [d.pair for d in donors], 64, 8.0, np.random.default_rng(3))
    assert max(len(cut.query_seq), len(cut.target_seq)) <= 64 and cut.n_aligned > 0
    q0 = q.index(cut.query_seq)
    assert len(cut.target_seq) > 64 // 8 and cut.target_core is not None
    for i, j in cut.pairs:  # query residue i0 was aligned with target residue i0 + 3
        assert cut.target_seq[j] == t[i + q0 + 3]
    with pytest.raises(InputError, match="flank=1.5 must be a share"):
        from sinkalign.align.train import TrainConfig

        TrainConfig(shards="x", out="y", model=M.preset("default", feature_dim=0, embedder={"name": "none"}),
                    flank=1.5)


def test_residue_encoder_starts_at_the_substitution_model(sdir):
    (p,) = msa_to_pairs(read_bench_fasta(sdir / "set1"))
    base = M.preset("default", embedder={"name": "none"}, feature_dim=0)
    cfg = base.replace(res_ctx_dim=16, res_ctx_layers=2, res_qk_dim=8, gap_head=True)
    b = examples_to_batch([p, p], base)
    r0 = M.forward(M.init_params(base), b, base)[0]
    r1 = M.forward(M.init_params(cfg), b, cfg)[0]
    np.testing.assert_allclose(np.asarray(r1), np.asarray(r0), atol=1e-6)
    import jax

    g = jax.grad(lambda prm: M.loss_fn(prm, b, cfg)[0])(M.init_params(cfg))
    assert float(np.abs(np.asarray(g["res_wk"])).max()) > 0  # the residual can start to learn
    assert float(np.abs(np.asarray(g["gap_w"])).max()) > 0
    with pytest.raises(ValueError, match="gap_head needs"):
        base.replace(gap_head=True)


# ------------------------------------------------------------------ shards


def test_shards_carry_the_core_mask(sdir, tmp_path):
    index = build_shards([sdir / "FAM1.ali", sdir / "set1"], tmp_path / "sh", split=(1.0, 0.0, 0.0), min_length=1)
    assert index["format_version"] == 2
    ds = ShardDataset(tmp_path / "sh", "train")
    got = {ds[k].pair.family: ds[k].pair for k in range(len(ds))}
    expected = {p.family: p for f in (sdir / "FAM1.ali", sdir / "set1")
                for p in msa_to_pairs(read_pir(f) if f.suffix else read_bench_fasta(f))}
    assert set(got) == {"coll/FAM1", "coll/set1"}
    for fam, pair in expected.items():
        g = got[fam]
        assert g.pairs.tolist() == pair.pairs.tolist() and g.query_seq == pair.query_seq
        if pair.query_core is None:
            assert g.query_core is None
        else:
            assert g.query_core.tolist() == pair.query_core.tolist()
            assert g.target_core.tolist() == pair.target_core.tolist()
    sets = load_reference_set(tmp_path / "sh", split="train")
    assert sum(p.query_core is not None for p in sets) == 1


def test_version_1_shards_still_load(tmp_path, monkeypatch):
    sto = tmp_path / "f.sto"
    sto.write_text("# STOCKHOLM 1.0\n#=GF ID fam\na/1-5 ACDEF\nb/1-5 AC-EF\n//\n")
    monkeypatch.setattr(shards_mod, "FORMAT_VERSION", 1)
    build_shards([sto], tmp_path / "v1", split=(1.0, 0.0, 0.0), min_length=1)
    monkeypatch.undo()
    assert read_index(tmp_path / "v1")["format_version"] == 1
    (ex,) = list(ShardDataset(tmp_path / "v1", "train"))
    assert ex.pair.pairs.tolist() == [[0, 0], [1, 1], [3, 2], [4, 3]] and ex.pair.query_core is None


def _dna_and_protein(tmp_path: Path) -> tuple[Path, Path]:
    prot = tmp_path / "prot.sto"
    prot.write_text("# STOCKHOLM 1.0\n#=GF ID prot\na/1-6 MKLWVE\nb/1-6 MKIWVE\n//\n")
    dna = tmp_path / "MADE1_dfam_dna.sto"
    dna.write_text("# STOCKHOLM 1.0\n#=GF ID MADE1\nx ACGTACGT\ny ACGAACGT\n//\n")
    return prot, dna


def test_shards_build_refuses_mixed_alphabets(tmp_path):
    prot, dna = _dna_and_protein(tmp_path)
    with pytest.raises(AlphabetError, match=r"MADE1_dfam_dna\.sto \(family MADE1: dna\).*--alphabet.*"
                                            r"--mixed-alphabets"):
        build_shards([prot, dna], tmp_path / "out", split=(1.0, 0.0, 0.0), min_length=1)
    assert not (tmp_path / "out" / "index.json").exists()
    both = build_shards([prot, dna], tmp_path / "mixed", split=(1.0, 0.0, 0.0), mixed_alphabets=True, min_length=1)
    assert sorted(both["families"]) == ["MADE1", "prot"]
    only = build_shards([prot, dna], tmp_path / "prot_only", split=(1.0, 0.0, 0.0), alphabet="protein", min_length=1)
    assert sorted(only["families"]) == ["prot"] and "MADE1" in only["skipped_families"]
    runner = CliRunner()
    res = runner.invoke(cli, ["shards", "build", str(prot), str(dna), "--min-length", "1", "--out", str(tmp_path / "cli")])
    assert_one_line_error(res, "MADE1_dfam_dna.sto", "--mixed-alphabets")  # through the group, as a user runs it
    res = runner.invoke(shards_cli, ["build", str(prot), str(dna), "--mixed-alphabets", "--split", "1,0,0",
                                     "--min-length", "1", "--out", str(tmp_path / "cli")])
    assert res.exit_code == 0, res.output


def test_split_manifest_assignment(sdir, tmp_path):
    manifest = tmp_path / "split.json"
    manifest.write_text(json.dumps({"assignment": {"coll/FAM1": "test", "coll/set1": "train"}}))
    res = CliRunner().invoke(shards_cli, ["build", str(sdir), "--split-manifest", str(manifest),
                                          "--min-length", "1", "--out", str(tmp_path / "sh")])
    assert res.exit_code == 0, res.output
    index = read_index(tmp_path / "sh")
    assert index["splits"]["test"]["families"] == ["coll/FAM1"]
    assert index["splits"]["train"]["families"] == ["coll/set1"]
    with pytest.raises(InputError, match=r"no entry for 1 families, e.g. \['coll/set1'\]"):
        build_shards([sdir / "FAM1.ali", sdir / "set1"], tmp_path / "sh2", assignment={"coll/FAM1": "train"}, min_length=1)


def test_evaluate_reads_structural_files_and_folders(sdir):
    assert len(load_reference_set(sdir / "set1")) == 1
    assert len(load_reference_set(sdir / "FAM1.ali")) == 1
    both = load_reference_set(sdir)
    assert sorted(p.family for p in both) == ["coll/FAM1", "coll/set1"]


# ------------------------------------------------------------------ leak-free splits


def test_leak_free_split_keeps_linked_items_together():
    items = [
        SplitItem.make("a", "s", 5, ["1abcA", "2defB"], ["AAAA", "CCCC"]),
        SplitItem.make("b", "s", 5, ["d2defb1"], ["GGGG"]),  # shares PDB 2def with a
        SplitItem.make("c", "s", 5, ["3ghiA"], ["CCCC"]),  # shares a sequence with a
        SplitItem.make("d", "s", 5, ["4jklA"], ["TTTT"]),
        SplitItem.make("e", "s", 5, ["5mnoA"], ["WWWW"], fixed="test"),
        SplitItem.make("f", "s", 5, ["5mnoB"], ["YYYY"]),  # linked to the pinned e
    ]
    comps = [[items[k].name for k in c] for c in split_links(items)]
    assert comps == [["a", "b", "c"], ["d"], ["e", "f"]]
    for seed in range(5):
        side = leak_free_split(items, seed=seed)
        assert side["a"] == side["b"] == side["c"]
        assert side["e"] == side["f"] == "test"
        assert crossing_keys(items, side) == {}
    items.append(SplitItem.make("g", "s", 1, ["5mnoC"], ["MMMM"], fixed="train"))
    with pytest.raises(InputError, match="pinned to different sides"):
        leak_free_split(items)


@pytest.mark.shared_data
def test_structural_folders_read_completely(shared_data):
    counts = json.loads((shared_data / "structural" / "counts.json").read_text())
    for src in ("homstrad", "sabre", "prefab", "oxbench"):
        pairs = load_reference_set(shared_data / "structural" / src, min_tm=None)
        assert len(pairs) == counts[src]["pairs_kept"], src
        with_core = sum(p.query_core is not None for p in pairs)
        assert with_core == (0 if src == "homstrad" else len(pairs)), src


@pytest.mark.shared_data
def test_split_manifest_reproduces_and_does_not_leak(shared_data):
    from sinkalign.io.splits import data_split_items, data_split_manifest

    committed = json.loads((MANIFESTS / "structural_split.json").read_text())
    fresh = data_split_manifest(shared_data, seed=committed["seed"], fractions=tuple(committed["fractions"]))
    assert fresh["assignment"] == committed["assignment"]
    assert fresh["files_sha256"] == committed["files_sha256"]
    items, _ = data_split_items(shared_data)
    side = {**committed["assignment"], **{n: "test" for n in committed["pinned_test"]}}
    assert crossing_keys(items, side) == {}
    # every PDB code and every sequence sits on one side only
    seen: dict[str, set] = {}
    for it in items:
        for n, s in zip(it.names, it.seqs):
            if it.source != "pfam" and pdb_code(n):
                seen.setdefault(pdb_code(n), set()).add(side[it.name])
            seen.setdefault(s.upper(), set()).add(side[it.name])
    assert all(len(v) == 1 for v in seen.values())


def test_shipped_learned_model_loads_and_aligns_a_sequence_to_itself():
    from sinkalign.align.aligner import Aligner, default_model_path

    path = default_model_path().parent / "aligner_learned"
    aligner = Aligner.load(path)
    assert aligner.config.res_ctx_dim == 96 and aligner.config.gap_head
    assert aligner.calibration is not None
    seq = "MVLSPADKTNVKAAWGKVGAHAGEYGAEALERMFLSFPTTKTYFPHFDLSHGSAQVKGHGKKVADALTNAVAHVDDMPNALSALSDLHAHKL"
    res = aligner.align(seq, seq)
    assert res.alignment.pairs.tolist() == [[i, i] for i in range(len(seq))]


def test_evaluate_names_a_bad_split_or_a_missing_shard(sdir, tmp_path):
    """`sinkalign evaluate --reference SHARDS`: an unknown split and a shard listed but gone are
    one 'Error:' line naming the split or the file (the shard reader's own errors)."""
    import json

    from click.testing import CliRunner

    from sinkalign.cli.main import cli
    from tests.cli_errors import assert_one_line_error

    build_shards([sdir / "FAM1.ali", sdir / "set1"], tmp_path / "sh", split=(1.0, 0.0, 0.0), min_length=1)
    r = CliRunner().invoke(cli, ["evaluate", "--reference", str(tmp_path / "sh"), "--split", "nonesuch",
                                 "--methods", "nw"])
    assert_one_line_error(r, "split='nonesuch' is not one of")
    index = json.loads((tmp_path / "sh" / "index.json").read_text())
    shard = index["splits"]["train"]["shards"][0]["file"]
    (tmp_path / "sh" / shard).unlink()
    r = CliRunner().invoke(cli, ["evaluate", "--reference", str(tmp_path / "sh"), "--split", "train",
                                 "--methods", "nw"])
    assert_one_line_error(r, f"{shard}: listed in index.json but missing")


def test_reference_files_are_read_by_content_where_the_suffix_does_not_say(tmp_path):
    """`evaluate --reference` chose the reader by suffix alone: `.sth` and `.sto.gz` were an
    unknown format and a Stockholm file named `.txt` was read as a TM-align table."""
    import gzip

    from sinkalign.align.evaluate import load_reference_set

    sto = ("# STOCKHOLM 1.0\n#=GF ID FAM\n"
           "a/1-10 ACDEFGHIKL\nb/1-9  ACDE-GHIKL\nc/1-10 ACDEFGHIKM\n//\n")
    plain = tmp_path / "fam.sto"
    plain.write_text(sto)
    want = [(p.query_id, p.target_id, p.pairs.tolist()) for p in load_reference_set(plain)]
    assert len(want) == 3
    for name in ("fam.sth", "fam.txt", "fam.sto.gz", "pfam.seed.txt.gz"):
        path = tmp_path / name
        if name.endswith(".gz"):
            path.write_bytes(gzip.compress(sto.encode()))
        else:
            path.write_text(sto)
        got = [(p.query_id, p.target_id, p.pairs.tolist()) for p in load_reference_set(path)]
        assert got == want, name
    # a TM-align table keeps being read as one, whatever its suffix
    row = "/x/pdb1abc.ent\t/x/pdb2xyz.ent\t0.6\t0.7\t2.0\tACDEFGHIKL\tACDEFGHIKM\t::::::::::\n"
    (tmp_path / "tm.txt").write_text(row)
    (tmp_path / "tm.tsv").write_text(row)
    assert len(load_reference_set(tmp_path / "tm.txt")) == len(load_reference_set(tmp_path / "tm.tsv")) == 1


def test_evaluate_by_source_scores_each_collection_from_the_same_alignments(tmp_path):
    """``evaluate --by-source``: a shard set built from two collections gets a pooled F1 per
    collection and method (homstrad, sabre: the folder part of the family name), each
    recounted exactly from the per-pair rows of --pair-scores; the collections' counts add up
    to the set's. A set from one collection says that its tables are the set's."""
    import csv

    for coll, name, text in (("homstrad", "FAM1.ali", PIR), ("sabre", "set1", BENCH)):
        (tmp_path / coll).mkdir()
        (tmp_path / coll / name).write_text(text)
    build_shards([tmp_path / "homstrad" / "FAM1.ali", tmp_path / "sabre" / "set1"], tmp_path / "sh",
                 split=(1.0, 0.0, 0.0), min_length=1)
    res = CliRunner().invoke(cli, ["evaluate", "--reference", str(tmp_path / "sh"), "--split", "train", "--methods",
                                   "nw,sw", "--by-source", "--json", str(tmp_path / "e.json"), "--pair-scores",
                                   str(tmp_path / "p.tsv")])
    assert res.exit_code == 0, res.output
    assert "by collection" in res.output
    (data,) = json.loads((tmp_path / "e.json").read_text())["sets"].values()
    assert {src: info["n_pairs"] for src, info in data["sources"].items()} == {"homstrad": 1, "sabre": 1}
    rows = list(csv.DictReader((tmp_path / "p.tsv").open(), delimiter="\t"))
    for method in ("nw", "sw"):
        by_source = data["methods"][method]["by_source"]
        for src in ("homstrad", "sabre"):
            mine = [r for r in rows if r["method"] == method and r["family"].startswith(src + "/")]
            tp, pred, ref = (sum(int(r[k]) for r in mine) for k in ("tp", "predicted", "reference"))
            micro = by_source[src]["micro"]
            assert (micro["tp"], micro["n_pred"], micro["n_ref"]) == (tp, pred, ref)
            assert by_source[src]["bins"][-1]["n"] == len(mine) == 1
        whole = data["methods"][method]["micro"]
        assert whole["tp"] == sum(by_source[s]["micro"]["tp"] for s in by_source)
    res = CliRunner().invoke(cli, ["evaluate", "--reference", str(tmp_path / "sabre"), "--methods", "nw",
                                   "--by-source"])
    assert res.exit_code == 0, res.output
    assert "every pair is from one collection" in res.output
