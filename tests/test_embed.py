"""Per-residue embeddings: the builtin table, ESM-2 through fair-esm's real loader, caching, file helpers.

ESM-2 tests build a tiny randomly initialised ESM-2 (2 layers, D=32), save it in
fair-esm's checkpoint format and load it through the same path as released weights.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from sinkalign.align.embed import (
    BUILTIN_DIM,
    EMBEDDERS,
    BuiltinEmbedder,
    Embedder,
    ESM2Embedder,
    embed_fasta,
    embed_shards,
    embedder_from_config,
    embedding_name,
    get_embedder,
    load_esm2,
    plan_windows,
)
from sinkalign.errors import AlphabetError, FormatError, InputError, MissingFileError, OutputExistsError
from sinkalign.io.fasta import Sequence, SequenceFormatError
from sinkalign.io.shards import ShardDataset, build_shards, read_index

torch = pytest.importorskip("torch")
esm = pytest.importorskip("esm")

AMINO = "ACDEFGHIKLMNPQRSTVWY"
TINY = dict(encoder_layers=2, encoder_embed_dim=32, encoder_attention_heads=4, token_dropout=True)


def random_protein(rng: np.random.Generator, n: int) -> str:
    return "".join(rng.choice(list(AMINO), size=n))


# --------------------------------------------------------------------------------------
# fixtures: a tiny ESM-2 saved in fair-esm's checkpoint format
# --------------------------------------------------------------------------------------


def make_tiny_esm2(seed: int = 0):
    torch.manual_seed(seed)
    alphabet = esm.data.Alphabet.from_architecture("ESM-1b")
    model = esm.model.esm2.ESM2(num_layers=2, embed_dim=32, attention_heads=4, alphabet=alphabet)
    return model.eval(), alphabet


def save_fair_esm_checkpoint(model, path: Path) -> Path:
    """fair-esm's ESM-2 layout: "encoder."-prefixed state dict (no contact regression) and cfg["model"]."""
    state = {f"encoder.{k}": v for k, v in model.state_dict().items() if not k.startswith("contact_head.regression")}
    torch.save({"model": state, "cfg": {"model": argparse.Namespace(**TINY)}}, path)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(path to esm2_t2_tiny.pt, the in-memory reference model, its alphabet)."""
    model, alphabet = make_tiny_esm2()
    path = save_fair_esm_checkpoint(model, tmp_path_factory.mktemp("weights") / "esm2_t2_tiny.pt")
    return path, model, alphabet


def reference_repr(model, alphabet, seq: str, layer: int = 2) -> np.ndarray:
    """ESM-2 representation of one sequence computed directly on the in-memory model: [L, D]."""
    _, _, tokens = alphabet.get_batch_converter()([("x", seq)])
    with torch.no_grad():
        rep = model(tokens, repr_layers=[layer])["representations"][layer]
    return rep[0, 1 : 1 + len(seq)].numpy()


def count_forward(embedder: ESM2Embedder) -> list[int]:
    """Batch sizes of every forward call of the embedder's model (a real hook, not a mock)."""
    calls: list[int] = []
    embedder.model.register_forward_hook(lambda mod, args, out: calls.append(int(args[0].shape[0])))
    return calls


# --------------------------------------------------------------------------------------
# registry and options
# --------------------------------------------------------------------------------------


def test_registry_names_and_errors(tiny):
    assert set(EMBEDDERS) == {"esm2", "builtin"}
    with pytest.raises(InputError, match=r"embedder 'esm3' is not one of \('builtin', 'esm2'\)"):
        get_embedder("esm3")
    with pytest.raises(InputError, match=r"unknown option\(s\) \['colour'\] for embedder 'builtin'; valid options"):
        get_embedder("builtin", colour="red")
    with pytest.raises(InputError, match=r"alphabet='rna' is not one of"):
        get_embedder("builtin", alphabet="rna")
    emb = get_embedder("esm2", weights=tiny[0], cache=False)
    assert isinstance(emb, Embedder) and isinstance(get_embedder("builtin"), Embedder)
    assert (emb.name, emb.alphabet, emb.dim) == ("esm2", "protein", 32)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"window": 1023}, r"window=1023 must be an integer in \[1, 1022\]"),
        ({"window": 50, "overlap": 50}, r"overlap=50 must be an integer in \[0, window=50\)"),
        ({"window": 50, "overlap": -1}, r"overlap=-1 must be"),
        ({"max_tokens": 100}, r"max_tokens=100 must be an integer >= window \+ 2 = 1024"),
        ({"device": "tpu"}, r"device='tpu' is not one of"),
        ({"device": "cpu", "fp16": True}, r"fp16=True needs a CUDA device"),
        ({"layer": 1.5}, r"layer=1.5 must be an integer"),
        ({"model": "esm1b_t33_650M_UR50S"}, r"model='esm1b_t33_650M_UR50S' must be an ESM-2 model name"),
        ({"cache": "yes"}, r"cache='yes' must be True or False"),
    ],
)
def test_esm2_option_errors(tiny, options, message):
    with pytest.raises(InputError, match=message):
        get_embedder("esm2", weights=tiny[0], **options)


def test_esm2_fp16_auto_without_cuda(tiny):
    if torch.cuda.is_available():
        pytest.skip("CUDA present: fp16 is allowed")
    with pytest.raises(InputError, match=r"fp16=True needs a CUDA device \(device='auto' resolved to 'cpu'\)"):
        get_embedder("esm2", weights=tiny[0], fp16=True)


def test_esm2_layer_out_of_range(tiny):
    emb = get_embedder("esm2", weights=tiny[0], layer=3, cache=False)
    with pytest.raises(InputError, match=r"layer=3 out of range for esm2_t2_tiny with 2 layers \(valid: -3 .. 2\)"):
        emb.embed(["MKV"])
    # a released model's depth is known from its name: checked before any file is read
    with pytest.raises(InputError, match=r"layer=7 out of range for esm2_t6_8M_UR50D with 6 layers"):
        get_embedder("esm2", weights=tiny[0], model="esm2_t6_8M_UR50D", layer=7)


# --------------------------------------------------------------------------------------
# builtin
# --------------------------------------------------------------------------------------


def test_builtin_shapes_config_determinism():
    emb = get_embedder("builtin")
    assert isinstance(emb, BuiltinEmbedder) and emb.dim == BUILTIN_DIM == 53 and emb.alphabet == "both"
    seqs = ["MKTAYIAKQRQISFVKSHFSRQ", "acgtacgtnn", Sequence("p1", "", "ACGT", "protein")]
    out = emb.embed(seqs)
    assert [o.shape for o in out] == [(22, 53), (10, 53), (4, 53)]
    assert all(o.dtype == np.float32 and o.flags.writeable for o in out)
    again = emb.embed(seqs)
    assert all(np.array_equal(a, b) for a, b in zip(out, again))
    cfg = emb.config()
    assert json.loads(json.dumps(cfg)) == cfg and cfg["dim"] == 53 and cfg["name"] == "builtin"
    assert embedder_from_config(cfg).config() == cfg
    # one string is a list of one
    assert np.array_equal(emb.embed("MKV")[0], emb.embed(["MKV"])[0])


def test_builtin_protein_golden_values():
    emb = get_embedder("builtin", alphabet="protein")
    (x,) = emb.embed(["WCARIGDH"])
    col = {a: k for k, a in enumerate(AMINO)}
    # BLOSUM62 (Henikoff & Henikoff 1992): W-W 11, C-C 9, A-R -1, W-C -2, A-A 4; divided by 4
    assert x[0, col["W"]] == 11 / 4 and x[1, col["C"]] == 9 / 4 and x[0, col["C"]] == -2 / 4
    assert x[2, col["A"]] == 1.0 and x[2, col["R"]] == -1 / 4
    # one-hot over 20 + X
    assert np.array_equal(x[:, 20:41].argmax(1), [col[a] for a in "WCARIGDH"])
    assert np.all(x[:, 20:41].sum(1) == 1)
    kd, charge, volume = x[:, 41], x[:, 42], x[:, 43]
    np.testing.assert_allclose(kd[4], 1.0)  # I: +4.5 (most hydrophobic)
    np.testing.assert_allclose(kd[3], -1.0)  # R: -4.5
    np.testing.assert_allclose(kd[2], 1.8 / 4.5, rtol=1e-6)  # A
    np.testing.assert_allclose(charge, [0, 0, 0, 1, 0, 0, -1, 0.1], rtol=1e-6)
    np.testing.assert_allclose(volume[[0, 5]], [1.0, -1.0])  # W largest, G smallest
    assert np.all(x[:, 44:] == 0)  # DNA block empty for protein


def test_builtin_protein_ambiguity_rules():
    emb = get_embedder("builtin", alphabet="protein")
    table = dict(zip(AMINO + "XBZJUO", emb.embed([AMINO + "XBZJUO"])[0]))
    np.testing.assert_allclose(table["B"], (table["D"] + table["N"]) / 2)
    np.testing.assert_allclose(table["Z"], (table["E"] + table["Q"]) / 2)
    np.testing.assert_allclose(table["J"], (table["I"] + table["L"]) / 2)
    assert np.array_equal(table["U"], table["C"]) and np.array_equal(table["O"], table["K"])
    standard = np.stack([table[a] for a in AMINO])
    x = table["X"]
    assert x[40] == 1 and np.all(x[20:40] == 0)  # own one-hot column
    np.testing.assert_allclose(x[:20], standard[:, :20].mean(0), rtol=1e-6)
    np.testing.assert_allclose(x[41:44], standard[:, 41:44].mean(0), rtol=1e-5, atol=1e-7)
    # lower case reads as upper case
    assert np.array_equal(emb.embed(["mkbx"])[0], emb.embed(["MKBX"])[0])


def test_builtin_dna_block_and_ambiguity():
    emb = get_embedder("builtin", alphabet="dna")
    table = dict(zip("ACGTNURYSWKMBDHV", emb.embed(["ACGTNURYSWKMBDHV"])[0]))
    # TRANS (Wheeler 1996): match 5, transition 4, transversion 0 -> (s - 2.5) / 2.5
    np.testing.assert_allclose(table["A"][49:53], [1.0, -1.0, 0.6, -1.0])
    np.testing.assert_allclose(table["C"][49:53], [-1.0, 1.0, -1.0, 0.6])
    assert np.array_equal(table["A"][44:49], [1, 0, 0, 0, 0]) and table["N"][48] == 1
    np.testing.assert_allclose(table["N"][49:53], np.mean([table[b][49:53] for b in "ACGT"], axis=0))
    assert np.array_equal(table["U"], table["T"])
    np.testing.assert_allclose(table["R"], (table["A"] + table["G"]) / 2)
    np.testing.assert_allclose(table["B"], (table["C"] + table["G"] + table["T"]) / 3, rtol=1e-6)
    assert all(np.all(v[:44] == 0) for v in table.values())  # protein block empty for DNA
    # auto: per string; records keep their own alphabet
    auto = get_embedder("builtin")
    dna, prot = auto.embed(["ACGTACGT", "ACGTMKWYL"])
    assert np.all(dna[:, :44] == 0) and np.all(prot[:, 44:] == 0)
    rec = auto.embed([Sequence("r", "", "ACGT", "protein")])[0]
    assert np.all(rec[:, 44:] == 0) and np.any(rec[:, :44] != 0)


def test_builtin_input_errors():
    emb = get_embedder("builtin", alphabet="protein")
    with pytest.raises(SequenceFormatError, match=r"builtin input sequence #1 \(0-based\): illegal character '1' "
                       r"for alphabet 'protein' at position 2 \(0-based\)") as info:  # fmt: skip
        emb.embed(["MKV", "MK1V"])
    assert (info.value.position, info.value.char) == (2, "1")
    with pytest.raises(SequenceFormatError, match=r"#1 \(0-based\): gap character '-'.* at position 3"):
        emb.embed([Sequence("ok", "", "MKV", "protein"), "MKV-L"])
    with pytest.raises(SequenceFormatError, match=r"#1 \(0-based, record 'bad'\): illegal character '1' .* position 2"):
        emb.embed([Sequence("ok", "", "MKV", "protein"), Sequence("bad", "", "MK1", "protein")])
    with pytest.raises(SequenceFormatError, match=r"#0 \(0-based\): stop"):
        emb.embed(["MK*V"])
    with pytest.raises(SequenceFormatError, match=r"illegal character 'é' .* at position 1"):
        emb.embed(["Mé"])
    with pytest.raises(InputError, match=r"builtin input sequence #1 \(0-based\) is empty"):
        emb.embed(["MKV", ""])
    with pytest.raises(ValueError, match=r"builtin input sequence #0 \(0-based\) is a int, not a string"):
        emb.embed([5])
    with pytest.raises(SequenceFormatError, match=r"illegal character 'E' for alphabet 'dna' at position 1"):
        get_embedder("builtin", alphabet="dna").embed(["AE"])


# --------------------------------------------------------------------------------------
# ESM-2: loading
# --------------------------------------------------------------------------------------


def test_esm2_matches_fair_esm_model(tiny):
    path, model, alphabet = tiny
    emb = get_embedder("esm2", weights=path, cache=False)
    rng = np.random.default_rng(0)
    seqs = [random_protein(rng, n) for n in (7, 31, 1, 64)]
    out = emb.embed(seqs)
    assert [o.shape for o in out] == [(len(s), 32) for s in seqs]
    assert all(o.dtype == np.float32 for o in out)
    for s, o in zip(seqs, out):
        np.testing.assert_allclose(o, reference_repr(model, alphabet, s), atol=1e-5, rtol=0)
    # determinism
    assert all(np.array_equal(a, b) for a, b in zip(out, emb.embed(seqs)))
    # other layers, negative indices
    l1 = get_embedder("esm2", weights=path, layer=1, cache=False).embed([seqs[1]])[0]
    np.testing.assert_allclose(l1, reference_repr(model, alphabet, seqs[1], layer=1), atol=1e-5, rtol=0)
    l0 = get_embedder("esm2", weights=path, layer=-3, cache=False).embed([seqs[1]])[0]
    np.testing.assert_allclose(l0, reference_repr(model, alphabet, seqs[1], layer=0), atol=1e-6, rtol=0)
    assert not np.allclose(l1, out[1])


def test_esm2_ambiguous_and_lowercase(tiny):
    path, model, alphabet = tiny
    emb = get_embedder("esm2", weights=path, cache=False)
    j, x, low, bz = emb.embed(["MKJVL", "MKXVL", "mkxvl", "MBZUOX"])
    assert np.array_equal(j, x) and np.array_equal(low, x)  # J (not an ESM token) is X
    np.testing.assert_allclose(bz, reference_repr(model, alphabet, "MBZUOX"), atol=1e-5, rtol=0)


def test_esm2_batch_invariance(tiny):
    path = tiny[0]
    rng = np.random.default_rng(1)
    target = random_protein(rng, 40)
    others = [random_protein(rng, n) for n in (5, 90, 41, 12, 200)]
    alone = get_embedder("esm2", weights=path, cache=False).embed([target])[0]
    small = get_embedder("esm2", weights=path, cache=False, window=250, overlap=50, max_tokens=252)
    big = get_embedder("esm2", weights=path, cache=False)
    calls_small, calls_big = count_forward(small), count_forward(big)
    mixed_small = small.embed(others[:2] + [target] + others[2:])
    mixed_big = big.embed(others[:2] + [target] + others[2:])
    # longest first, padded size within 252 tokens: [200], [90, 41], [40, 12, 5]
    assert calls_small == [1, 2, 3]
    assert len(calls_big) == 1 and calls_big[0] == 6  # all in one padded batch
    np.testing.assert_allclose(mixed_small[2], alone, atol=1e-5, rtol=0)
    np.testing.assert_allclose(mixed_big[2], alone, atol=1e-5, rtol=0)
    for a, b in zip(mixed_small, mixed_big):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("length", [1, 39, 40, 41, 70, 100, 257])
def test_plan_windows_tiles(length):
    plan = plan_windows(length, 40, 10)
    assert plan[0][0] == 0 and plan[-1][1] == length
    keep = [(ka, kb) for _, _, ka, kb in plan]
    assert keep[0][0] == 0 and keep[-1][1] == length
    assert all(keep[k][1] == keep[k + 1][0] for k in range(len(keep) - 1))
    for a, b, ka, kb in plan:
        assert 0 <= a <= ka < kb <= b <= length and b - a <= 40
    if length > 40:
        starts = [a for a, *_ in plan]
        assert all(0 < s2 - s1 <= 30 for s1, s2 in zip(starts, starts[1:]))


def test_esm2_long_sequence_windows(tiny):
    path, model, alphabet = tiny
    seq = random_protein(np.random.default_rng(2), 100)
    emb = get_embedder("esm2", weights=path, cache=False, window=40, overlap=10, max_tokens=42)
    calls = count_forward(emb)
    out = emb.embed([seq])[0]
    assert out.shape == (100, 32) and sorted(calls) == [1, 1, 1]
    # windows [0, 40), [30, 70), [60, 100); overlaps cut at 35 and 65
    assert plan_windows(100, 40, 10) == [(0, 40, 0, 35), (30, 70, 35, 65), (60, 100, 65, 100)]
    np.testing.assert_allclose(out[:35], reference_repr(model, alphabet, seq[:40])[:35], atol=1e-5, rtol=0)
    np.testing.assert_allclose(out[35:65], reference_repr(model, alphabet, seq[30:70])[5:35], atol=1e-5, rtol=0)
    np.testing.assert_allclose(out[65:], reference_repr(model, alphabet, seq[60:])[5:], atol=1e-5, rtol=0)
    # the context really is limited: the whole-sequence pass differs
    assert not np.allclose(out, reference_repr(model, alphabet, seq), atol=1e-3)


def test_esm2_default_window_limit(tiny):
    """Above 1022 residues the default embedder never gives ESM more than 1024 tokens."""
    path = tiny[0]
    emb = get_embedder("esm2", weights=path, cache=False)
    shapes: list[tuple[int, ...]] = []
    emb.model.register_forward_hook(lambda mod, args, out: shapes.append(tuple(args[0].shape)))
    out = emb.embed([random_protein(np.random.default_rng(3), 1500)])[0]
    assert out.shape == (1500, 32) and shapes == [(2, 1024)]  # two windows of 1022 + BOS/EOS, one batch


# --------------------------------------------------------------------------------------
# ESM-2: cache
# --------------------------------------------------------------------------------------


def test_esm2_disk_cache(tiny, tmp_path, caplog):
    path = tiny[0]
    rng = np.random.default_rng(4)
    seqs = [random_protein(rng, n) for n in (20, 33, 20)]
    first = get_embedder("esm2", weights=path, cache_dir=tmp_path / "cache")
    calls = count_forward(first)
    out1 = first.embed(seqs)
    assert calls == [3]
    files = sorted((tmp_path / "cache").rglob("*.npy"))
    assert len(files) == 3
    cfg_files = list((tmp_path / "cache").glob("esm2-*/config.json"))
    assert len(cfg_files) == 1 and json.loads(cfg_files[0].read_text()) == first.config()

    # a fresh embedder reads everything from disk without even loading the model
    second = get_embedder("esm2", weights=path, cache_dir=tmp_path / "cache")
    out2 = second.embed(seqs)
    assert not second.model_loaded
    assert all(np.array_equal(a, b) for a, b in zip(out1, out2))

    # partly cached: only the new sequence runs; duplicates run once
    calls2 = count_forward(second)
    new = random_protein(rng, 15)
    out3 = second.embed([seqs[0], new, new])
    assert calls2 == [1] and np.array_equal(out3[0], out1[0]) and np.array_equal(out3[1], out3[2])
    assert out3[1] is not out3[2]

    # a corrupt entry is ignored (logged) and recomputed
    second.cache.path(seqs[1]).write_bytes(b"not numpy")
    with caplog.at_level(logging.WARNING, logger="sinkalign.align.embed.base"):
        out4 = second.embed([seqs[1]])
    assert calls2 == [1, 1] and "ignoring unreadable cache entry" in caplog.text
    np.testing.assert_array_equal(out4[0], out1[1])
    assert np.load(second.cache.path(seqs[1])).shape == (33, 32)

    # another layer is another cache key; cache=False writes nothing
    other = get_embedder("esm2", weights=path, cache_dir=tmp_path / "cache", layer=1)
    assert other.cache.dir != second.cache.dir
    nocache = get_embedder("esm2", weights=path, cache=False, cache_dir=tmp_path / "none")
    nocache.embed(seqs)
    assert nocache.cache is None and not (tmp_path / "none").exists()


def test_esm2_default_cache_dir(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    emb = get_embedder("esm2", weights=tiny[0])
    emb.embed(["MKVL"])
    assert emb.cache.dir.parent == tmp_path / "xdg" / "sinkalign" / "embeddings"
    assert len(list((tmp_path / "xdg").rglob("*.npy"))) == 1


# --------------------------------------------------------------------------------------
# ESM-2: finding and reading weights
# --------------------------------------------------------------------------------------


def test_esm2_from_torch_hub_cache(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "th"))
    hub = tmp_path / "th" / "hub" / "checkpoints"
    with pytest.raises(MissingFileError) as info:
        get_embedder("esm2")
    msg = str(info.value)
    assert str(hub / "esm2_t6_8M_UR50D.pt") in msg and "--esm-weights PATH" in msg
    assert "https://dl.fbaipublicfiles.com/fair-esm/models/esm2_t6_8M_UR50D.pt" in msg
    assert "Nothing is downloaded automatically" in msg
    hub.mkdir(parents=True)
    shutil.copy(tiny[0], hub / "esm2_t2_tiny.pt")
    emb = get_embedder("esm2", model="esm2_t2_tiny", cache=False)
    assert emb.weights_path == hub / "esm2_t2_tiny.pt"
    np.testing.assert_allclose(emb.embed(["MKVL"])[0], reference_repr(tiny[1], tiny[2], "MKVL"), atol=1e-5)


def test_esm2_weights_errors(tiny, tmp_path):
    with pytest.raises(MissingFileError, match=r"ESM-2 weights file .*esm2_missing.pt does not exist"):
        get_embedder("esm2", weights=tmp_path / "esm2_missing.pt")
    renamed = shutil.copy(tiny[0], tmp_path / "model.pt")
    with pytest.raises(InputError, match=r"'model' does not start with 'esm2'; rename the file"):
        get_embedder("esm2", weights=renamed)
    # ... or name the architecture explicitly
    assert get_embedder("esm2", weights=renamed, model="esm2_t2_custom", cache=False).embed(["MK"])[0].shape == (2, 32)

    garbage = tmp_path / "esm2_t2_garbage.pt"
    garbage.write_bytes(b"\x00not a torch file" * 10)
    with pytest.raises(FormatError, match=r"esm2_t2_garbage.pt: cannot read ESM-2 weights .*corrupt, truncated"):
        get_embedder("esm2", weights=garbage, cache=False).embed(["MKV"])
    truncated = tmp_path / "esm2_t2_truncated.pt"
    data = Path(tiny[0]).read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match=r"esm2_t2_truncated.pt: cannot read ESM-2 weights"):
        load_esm2(truncated)
    not_esm = tmp_path / "esm2_t2_plain.pt"
    torch.save({"weights": torch.zeros(3)}, not_esm)
    with pytest.raises(FormatError, match=r"not a fair-esm ESM-2 checkpoint \(expected keys 'model' and 'cfg', found"):
        load_esm2(not_esm)
    no_arch = tmp_path / "esm2_t2_noarch.pt"
    torch.save({"model": {}, "cfg": {"model": argparse.Namespace(encoder_layers=2)}}, no_arch)
    with pytest.raises(FormatError, match=r"cfg\['model'\] lacks \['encoder_embed_dim'"):
        load_esm2(no_arch)
    missing_key = tmp_path / "esm2_t2_missing.pt"
    ckpt = torch.load(tiny[0], weights_only=False)
    del ckpt["model"]["encoder.layers.1.fc1.weight"]
    torch.save(ckpt, missing_key)
    with pytest.raises(FormatError, match=r"weights do not fit the ESM-2 architecture.*layers.1.fc1.weight"):
        load_esm2(missing_key)
    # arbitrary pickled objects are refused (weights_only loading)
    evil = tmp_path / "esm2_t2_evil.pt"
    torch.save({"model": {}, "cfg": {"model": Path("/")}}, evil)
    with pytest.raises(FormatError, match=r"esm2_t2_evil.pt: cannot read ESM-2 weights \(UnpicklingError"):
        load_esm2(evil)


def test_esm2_weights_do_not_match_released_name(tiny, tmp_path):
    fake = shutil.copy(tiny[0], tmp_path / "esm2_t6_8M_UR50D.pt")
    emb = get_embedder("esm2", weights=fake, cache=False)
    assert emb.dim == 320  # known from the name, before loading
    with pytest.raises(FormatError, match=r"has 2 layers of width 32, esm2_t6_8M_UR50D should have 6 of width 320"):
        emb.embed(["MKV"])
    with pytest.raises(InputError, match=r"model name 'tiny' must start with 'esm2'"):
        load_esm2(tiny[0], name="tiny")


def test_esm2_construction_errors(tiny):
    from sinkalign.align.embed import BuiltinConfig, ESM2Config

    with pytest.raises(ValueError, match=r"give either config or keyword options, not both"):
        ESM2Embedder(ESM2Config(weights=tiny[0]), layer=1)
    with pytest.raises(ValueError, match=r"give either config or keyword options, not both"):
        BuiltinEmbedder(BuiltinConfig(), alphabet="dna")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match=r"device='cuda:1' but torch.cuda.is_available\(\) is False"):
            get_embedder("esm2", weights=tiny[0], device="cuda:1")
    emb = get_embedder("esm2", weights=tiny[0], cache=False)
    with pytest.raises(ValueError, match=r"seqs must be a list of strings or Sequence records, got int"):
        emb.embed(5)
    assert emb.embed([]) == []


def test_esm2_input_errors(tiny):
    emb = get_embedder("esm2", weights=tiny[0], cache=False)
    with pytest.raises(SequenceFormatError, match=r"esm2 input sequence #1 \(0-based\): illegal character '1' "
                       r"for alphabet 'protein' at position 2 \(0-based\)"):  # fmt: skip
        emb.embed(["MKV", "MK1V"])
    with pytest.raises(SequenceFormatError, match=r"#1 \(0-based, record 'r2'\): stop '\*' inside the sequence.* "
                       r"at position 1 \(0-based\)"):  # fmt: skip
        emb.embed([Sequence("r1", "", "MKV", "protein"), Sequence("r2", "", "M*K", "protein")])
    with pytest.raises(AlphabetError, match=r"record 'd1'\): alphabet 'dna' cannot be embedded by esm2"):
        emb.embed([Sequence("d1", "", "ACGT", "dna")])
    assert not emb.model_loaded  # input is checked before the model is loaded


def test_embedder_from_config(tiny, tmp_path):
    emb = get_embedder("esm2", weights=tiny[0], layer=1, cache=False)
    cfg = emb.config()
    assert json.loads(json.dumps(cfg)) == cfg and cfg["weights_sha256"] and cfg["layer"] == 1
    again = embedder_from_config(cfg, weights=tiny[0], cache=False)
    assert again.config() == cfg
    other_model, _ = make_tiny_esm2(seed=1)
    other = save_fair_esm_checkpoint(other_model, tmp_path / "esm2_t2_tiny.pt")
    with pytest.raises(InputError, match=r"esm2_t2_tiny.pt are not the ones the model was trained with"):
        embedder_from_config(cfg, weights=other, cache=False)  # an InputError: a ValueError too
    with pytest.raises(ValueError, match=r"must be a dict with a 'name'"):
        embedder_from_config({"model": "x"})


@pytest.mark.gpu
def test_esm2_cuda_fp16(tiny):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    seqs = [random_protein(np.random.default_rng(5), n) for n in (50, 300)]
    cpu = get_embedder("esm2", weights=tiny[0], device="cpu", cache=False).embed(seqs)
    gpu = get_embedder("esm2", weights=tiny[0], device="auto", cache=False)
    assert gpu.device == "cuda"
    for a, b in zip(cpu, gpu.embed(seqs)):
        np.testing.assert_allclose(b, a, atol=1e-4, rtol=1e-4)
    half = get_embedder("esm2", weights=tiny[0], device="cuda", fp16=True, cache=False).embed(seqs)
    for a, b in zip(cpu, half):
        assert b.dtype == np.float32
        np.testing.assert_allclose(b, a, atol=5e-2, rtol=5e-2)


# --------------------------------------------------------------------------------------
# file helpers
# --------------------------------------------------------------------------------------


def test_embed_fasta(tiny, tmp_path):
    fasta = tmp_path / "in.fa"
    fasta.write_text(">p1 first\nMKTAYIAKQR\nQISFVK\n>d1\nacgtacgtNN\n>p2\nMVLSPADKTNV*\n")
    res = embed_fasta(fasta, get_embedder("builtin"), chunk_size=2)
    assert res.ids == ["p1", "d1", "p2"] and [r.alphabet for r in res.records] == ["protein", "dna", "protein"]
    assert [e.shape for e in res.embeddings] == [(16, 53), (10, 53), (11, 53)]
    np.testing.assert_array_equal(res.embeddings[1], get_embedder("builtin", alphabet="dna").embed(["ACGTACGTNN"])[0])
    assert res.config == get_embedder("builtin").config()

    esm_emb = get_embedder("esm2", weights=tiny[0], cache=False)
    bad = tmp_path / "bad.fa"
    bad.write_text(">p1\nMKV\n>x2\nMK1V\n")
    with pytest.raises(SequenceFormatError, match=r"bad.fa: record 'x2' \(#2\): illegal character '1' "
                       r"for alphabet 'protein' at position 2"):  # fmt: skip
        embed_fasta(bad, esm_emb)
    prot = tmp_path / "prot.fa"
    prot.write_text(">a\nMKTAYIAKQR\n>b\nMVLSPADKTNV\n")
    res = embed_fasta(prot, esm_emb)
    np.testing.assert_allclose(res.embeddings[1], reference_repr(tiny[1], tiny[2], "MVLSPADKTNV"), atol=1e-5)
    with pytest.raises(ValueError, match=r"chunk_size=0 must be a positive integer"):
        embed_fasta(prot, esm_emb, chunk_size=0)


def write_family(path: Path, name: str, n_seqs: int, n_cols: int, seed: int, letters: str) -> Path:
    rng = np.random.default_rng(seed)
    lines = ["# STOCKHOLM 1.0", f"#=GF ID   {name}"]
    for k in range(n_seqs):
        row = "".join(letters[rng.integers(len(letters))] if rng.random() < 0.85 or c == 0 else "-"
                      for c in range(n_cols))  # fmt: skip
        lines.append(f"{name}_s{k}/1-{n_cols}  {row}")
    path.write_text("\n".join(lines + ["//"]) + "\n")
    return path


def test_embed_shards(tiny, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    fams = [write_family(src / f"p{k}.sto", f"p{k}", 3 + k, 15 + k, k, AMINO) for k in range(4)]
    fams.append(write_family(src / "d0.sto", "d0", 4, 30, 9, "ACGT"))
    out = tmp_path / "shards"
    index = build_shards(fams, out, split=(0.6, 0.2, 0.2), seed=0, mixed_alphabets=True)  # on purpose
    assert index["families"]["d0"]["alphabet"] == "dna"

    builtin = get_embedder("builtin")
    index = embed_shards(out, builtin, dtype="float32")
    assert index["embeddings"] == {"name": embedding_name(builtin), "dim": 53, "dtype": "float32"}
    assert json.loads(index["embeddings"]["name"]) == builtin.config()
    seen_dna = False
    for split in index["splits"]:
        for ex in ShardDataset(out, split):
            alphabet = index["families"][ex.pair.family]["alphabet"]
            seen_dna |= alphabet == "dna"
            ref = builtin.embed([Sequence("q", "", ex.pair.query_seq, alphabet)])[0]
            np.testing.assert_array_equal(ex.query_embedding, ref)
    assert seen_dna

    with pytest.raises(OutputExistsError, match=r"already has embeddings \(builtin \(.*=.*\)\); pass --overwrite"):
        embed_shards(out, builtin)
    # ESM-2 cannot embed the DNA family
    esm_emb = get_embedder("esm2", weights=tiny[0], cache=False)
    with pytest.raises(AlphabetError, match=r"alphabet 'dna' cannot be embedded by esm2"):
        embed_shards(out, esm_emb, overwrite=True)

    prot_out = tmp_path / "prot_shards"
    build_shards(fams[:4], prot_out, split=(0.5, 0.25, 0.25), seed=0)
    index = embed_shards(prot_out, esm_emb, dtype="float16", chunk_size=3)
    assert read_index(prot_out)["embeddings"]["dim"] == 32
    ex = ShardDataset(prot_out, "train")[0]
    np.testing.assert_allclose(
        ex.target_embedding.astype(np.float32), reference_repr(tiny[1], tiny[2], ex.pair.target_seq), atol=2e-2
    )
    with pytest.raises(ValueError, match=r"dtype='int8' is not one of"):
        embed_shards(prot_out, esm_emb, dtype="int8", overwrite=True)


def test_embed_real_shards(shared_data, tmp_path):
    """Builtin embeddings of real Pfam (protein) and Dfam (DNA) seed families."""
    seed = shared_data / "pfam_seed"
    out = tmp_path / "shards"
    build_shards([seed / "globins4.sto", seed / "MADE1_dfam_dna.sto", seed / "LuxC.sto"], out,
                 split=(0.34, 0.33, 0.33), max_pairs_per_family=20, seed=0, mixed_alphabets=True)  # fmt: skip
    index = embed_shards(out, get_embedder("builtin"))
    assert index["embeddings"]["dim"] == 53
    by_alphabet = {}
    for split in index["splits"]:
        for ex in ShardDataset(out, split):
            alphabet = index["families"][ex.pair.family]["alphabet"]
            by_alphabet[alphabet] = ex.query_embedding
            assert ex.query_embedding.shape == (len(ex.pair.query_seq), 53)
    assert set(by_alphabet) == {"protein", "dna"}
    assert np.all(by_alphabet["dna"][:, :44] == 0) and np.all(by_alphabet["protein"][:, 44:] == 0)


def test_cli_embed_user_errors(tiny, tmp_path, monkeypatch):
    """`sinkalign shards embed`: what a user can get wrong is one 'Error:' line naming the value or file."""
    from click.testing import CliRunner

    from sinkalign.cli.main import cli
    from tests.cli_errors import assert_one_line_error

    src = tmp_path / "src"
    src.mkdir()
    fams = [write_family(src / f"p{k}.sto", f"p{k}", 3 + k, 15 + k, k, AMINO) for k in range(3)]
    mixed, prot = tmp_path / "mixed", tmp_path / "prot"
    build_shards([*fams, write_family(src / "d0.sto", "d0", 4, 30, 9, "ACGT")], mixed, mixed_alphabets=True)
    build_shards(fams, prot)
    runner = CliRunner()
    assert_one_line_error(runner.invoke(cli, ["shards", "embed", str(mixed), "--embedder", "esm2",
                                              "--esm-weights", str(tiny[0])]),
                          "alphabet 'dna' cannot be embedded by esm2")
    assert_one_line_error(runner.invoke(cli, ["shards", "embed", str(prot), "--embedder", "esm2", "--esm-model", "bert"]),
                          "model='bert' must be an ESM-2 model name")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "th"))
    assert_one_line_error(runner.invoke(cli, ["shards", "embed", str(prot), "--embedder", "esm2"]),
                          "ESM-2 weights for 'esm2_t6_8M_UR50D' not found",
                          str(tmp_path / "th" / "hub" / "checkpoints" / "esm2_t6_8M_UR50D.pt"))
    garbage = tmp_path / "esm2_t2_garbage.pt"
    garbage.write_bytes(b"\x00not a torch file" * 10)
    assert_one_line_error(runner.invoke(cli, ["shards", "embed", str(prot), "--embedder", "esm2",
                                              "--esm-weights", str(garbage)]),
                          f"{garbage}: cannot read ESM-2 weights")
    assert read_index(prot)["embeddings"] is None  # nothing was written


def test_load_esm2_without_fair_esm_names_the_extra(monkeypatch, tmp_path):
    """Without fair-esm installed, loading ESM-2 weights is a DependencyError naming the
    'torch' extra (not a bare ImportError)."""
    import sys

    from sinkalign.align.embed import load_esm2
    from sinkalign.errors import DependencyError

    monkeypatch.setitem(sys.modules, "esm", None)  # `import esm` raises ImportError
    weights = tmp_path / "esm2_t6_8M_UR50D.pt"
    weights.write_bytes(b"")
    with pytest.raises(DependencyError, match=r"loading ESM-2 weights needs esm, which is not installed; "
                                              r"install the 'torch' extra"):
        load_esm2(weights)


def test_esm2_without_torch_names_the_extra(monkeypatch, tmp_path):
    """``shards embed --embedder esm2`` with no weights file given looks in torch's hub folder:
    without torch that was a bare ModuleNotFoundError, now the 'torch' extra is named."""
    import sys

    from sinkalign.align.embed.esm2 import ESM2Embedder
    from sinkalign.errors import DependencyError

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(DependencyError, match=r"ESM-2 embeddings \(--embedder esm2\) needs torch.*'torch' extra"):
        ESM2Embedder()
