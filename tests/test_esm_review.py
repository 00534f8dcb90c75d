"""ESM-2 review: the weights a command is given are the ones it uses, and the ones a model was
trained with (checked when the model is loaded, in words, as one error line); every command that
loads a model takes --esm-weights; the embedding cache survives an unwritable directory, can be
turned off, and checks the width of its entries; smaller message and input fixes.

Tiny randomly initialised ESM-2 models (2 layers, D=32 or 48) are saved in fair-esm's checkpoint
layout and read through the same path as released weights. Every test runs with its own
``XDG_CACHE_HOME`` and ``TORCH_HOME``, so no real cache is read or written.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sinkalign.align.embed import embed_shards, embedder_from_config, get_embedder
from sinkalign.errors import FormatError, InputError, MissingFileError
from sinkalign.io.fasta import SequenceFormatError
from sinkalign.io.shards import build_shards, read_index
from tests.cli_errors import assert_one_line_error
from tests.test_embed import AMINO, write_family

torch = pytest.importorskip("torch")
esm = pytest.importorskip("esm")


def write_esm2(path: Path, dim: int = 32, seed: int = 0) -> Path:
    """A 2-layer ESM-2 of width ``dim`` in fair-esm's checkpoint layout (as /tmp/audit_esm/mk.py)."""
    torch.manual_seed(seed)
    alphabet = esm.data.Alphabet.from_architecture("ESM-1b")
    model = esm.model.esm2.ESM2(num_layers=2, embed_dim=dim, attention_heads=4, alphabet=alphabet)
    state = {f"encoder.{k}": v for k, v in model.state_dict().items() if not k.startswith("contact_head.regression")}
    cfg = argparse.Namespace(encoder_layers=2, encoder_embed_dim=dim, encoder_attention_heads=4, token_dropout=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": state, "cfg": {"model": cfg}}, path)
    return path


@pytest.fixture(autouse=True)
def private_caches(tmp_path, monkeypatch):
    """No real cache: embeddings, torch hub and JAX programs under this test's directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    monkeypatch.setenv("SINKALIGN_JAX_CACHE", "off")
    monkeypatch.delenv("SINKALIGN_EMBED_CACHE", raising=False)


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """The model's weights (``esm2_t2_tiny.pt``, not a released name), other weights of the same
    name and width, wider ones (D=48) and a truncated copy."""
    root = tmp_path_factory.mktemp("esm_weights")
    tiny = write_esm2(root / "esm2_t2_tiny.pt")
    data = tiny.read_bytes()
    truncated = root / "cut" / "esm2_t2_tiny.pt"
    truncated.parent.mkdir()
    truncated.write_bytes(data[: len(data) // 2])
    return {
        "tiny": tiny,
        "other": write_esm2(root / "other" / "esm2_t2_tiny.pt", seed=1),
        "wide": write_esm2(root / "esm2_t2_wide.pt", dim=48, seed=2),
        "truncated": truncated,
    }


@pytest.fixture(scope="module")
def esm_model(weights, tmp_path_factory):
    """An (untrained) aligner on the tiny ESM-2's features, as a model directory."""
    from sinkalign.align import model as M
    from sinkalign.align.checkpoints import export_model

    emb = get_embedder("esm2", weights=weights["tiny"], cache=False)
    config = M.AlignerConfig(embedder=emb.config(), feature_dim=emb.dim)
    return export_model(tmp_path_factory.mktemp("esm_model") / "model", M.init_params(config, seed=0), config,
                        provenance="test: tiny ESM-2 features")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Protein shards: three families of five sequences (10 pairs each), one per split."""
    root = tmp_path_factory.mktemp("esm_shards")
    src = root / "src"
    src.mkdir()
    fams = [write_family(src / f"p{k}.sto", f"p{k}", 5, 20 + k, k, AMINO) for k in range(3)]
    build_shards(fams, root / "shards", split=(0.34, 0.33, 0.33), seed=0)
    return root / "shards"


def _cli(*args):
    from sinkalign.cli.main import cli

    return CliRunner().invoke(cli, [str(a) for a in args])


def _fasta(path: Path) -> Path:
    path.write_text(">q1\nMVLSPADKTNVKAAWGKVGAHAGEYGAEALERMF\n>q2\nMVHLTPEEKSAVTALWGKVNVDEVGGEALGRL\n")
    return path


# --------------------------------------------------------------------------------------
# 1. shards embed: the architecture comes from the weights file, not the 8M model's name
# --------------------------------------------------------------------------------------


def test_shards_embed_takes_the_model_name_from_the_weights_file(weights, shards, tmp_path):
    work = tmp_path / "shards"
    shutil.copytree(shards, work)
    res = _cli("shards", "embed", work, "--embedder", "esm2", "--esm-weights", weights["tiny"])
    assert res.exit_code == 0, res.output
    stored = read_index(work)["embeddings"]
    assert stored["dim"] == 32 and stored["dtype"] == "float32"
    assert json.loads(stored["name"])["model"] == "esm2_t2_tiny"  # the file's stem
    # --esm-model still names the architecture when given
    res = _cli("shards", "embed", work, "--embedder", "esm2", "--esm-weights", weights["tiny"],
               "--esm-model", "esm2_t2_custom", "--overwrite")
    assert res.exit_code == 0, res.output
    assert json.loads(read_index(work)["embeddings"]["name"])["model"] == "esm2_t2_custom"
    help_text = " ".join(_cli("shards", "embed", "--help").output.split())
    assert "Default: the --esm-weights file's stem, else esm2_t6_8M_UR50D" in help_text


# --------------------------------------------------------------------------------------
# 2. other weights for a model trained on ESM-2 features: one error line, when it is loaded
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("which, words", [
    ("other", "they have 2 layers of width 32, but other parameters"),
    ("wide", "they give 48-dim features from 2 layers, the model takes 32-dim ones"),
    ("truncated", "the file cannot be read either"),
])
def test_align_refuses_other_esm_weights_before_any_pair(weights, esm_model, tmp_path, monkeypatch, which, words):
    import sinkalign.pipelines.runner as runner

    def no_pair(*args, **kwargs):
        raise AssertionError("a pair was aligned before the weights were checked")

    monkeypatch.setattr(runner, "_align_pairs", no_pair)
    fasta, out = _fasta(tmp_path / "q.fa"), tmp_path / "out.tsv"
    res = _cli("align", fasta, fasta, "--model", esm_model, "--esm-weights", weights[which], "-o", out)
    assert_one_line_error(res, f"the ESM-2 weights {weights[which]} are not the ones the model was trained with",
                          "of esm2_t2_tiny", words, "give the esm2_t2_tiny weights it was trained with")
    assert not out.exists() and not list(tmp_path.glob(".out.tsv*"))


def test_the_weights_check_is_made_when_the_aligner_is_loaded(weights, esm_model, tmp_path):
    from sinkalign.align.aligner import Aligner
    from sinkalign.pipelines.runner import ModelSpec, load_aligner

    with pytest.raises(InputError, match="not the ones the model was trained with"):
        Aligner.load(esm_model, embedder_options={"weights": str(weights["other"])})
    with pytest.raises(ValueError, match="48-dim features"):  # an InputError is a ValueError for API callers
        load_aligner(ModelSpec(str(esm_model), esm_weights=str(weights["wide"])))
    aligner = Aligner.load(esm_model, embedder_options={"weights": str(weights["tiny"]), "cache": False})
    assert aligner._embedder is not None and not aligner._embedder.model_loaded  # built and checked, not run
    fasta, out = _fasta(tmp_path / "q.fa"), tmp_path / "out.tsv"
    res = _cli("align", fasta, fasta, "--model", esm_model, "--esm-weights", weights["tiny"], "-o", out)
    assert res.exit_code == 0, res.output
    assert len(out.read_text().splitlines()) == 1 + 4


def test_other_esm_settings_are_still_named(weights, esm_model):
    from sinkalign.align.aligner import Aligner

    with pytest.raises(InputError, match=r"differs from the recorded one in \['layer'\]"):
        Aligner.load(esm_model, embedder_options={"weights": str(weights["tiny"]), "layer": 1})


# --------------------------------------------------------------------------------------
# 3. --esm-weights on evaluate, calibrate, fit-evalues and msa; refused by models without ESM-2
# --------------------------------------------------------------------------------------


def test_evaluate_calibrate_fit_evalues_and_msa_take_esm_weights(weights, esm_model, shards, tmp_path):
    ref = ("--reference", shards, "--split", "train")
    tiny, other = weights["tiny"], weights["other"]
    res = _cli("evaluate", *ref, "--model", esm_model, "--esm-weights", tiny, "--methods", "sinkalign",
               "--json", tmp_path / "eval.json")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "eval.json").read_text())["sets"]
    assert_one_line_error(_cli("evaluate", *ref, "--model", esm_model, "--esm-weights", other, "--methods",
                               "sinkalign"), f"the ESM-2 weights {other} are not the ones")

    assert_one_line_error(_cli("calibrate", *ref, "--model", esm_model, "--esm-weights", other, "-o",
                               tmp_path / "bad"), f"the ESM-2 weights {other} are not the ones")
    assert not (tmp_path / "bad").exists()
    cal = tmp_path / "cal"
    res = _cli("calibrate", *ref, "--model", esm_model, "--esm-weights", tiny, "-o", cal)
    assert res.exit_code == 0, res.output

    assert_one_line_error(_cli("fit-evalues", *ref, "--model", cal, "--esm-weights", other, "-o", tmp_path / "ev"),
                          f"the ESM-2 weights {other} are not the ones")
    res = _cli("fit-evalues", *ref, "--model", cal, "--esm-weights", tiny, "-o", tmp_path / "ev")
    assert res.exit_code == 0, res.output

    fam = tmp_path / "fam.fa"
    fam.write_text(">a\nMKVLAAGHWER\n>b\nMKVLAGHWER\n>c\nMKILAAGHWR\n")
    assert_one_line_error(_cli("msa", fam, "--model", cal, "--esm-weights", other, "-o", tmp_path / "bad.afa"),
                          f"the ESM-2 weights {other} are not the ones")
    assert not (tmp_path / "bad.afa").exists()
    res = _cli("msa", fam, "--model", cal, "--esm-weights", tiny, "-o", tmp_path / "fam.afa")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "fam.afa").read_text().count(">") == 3


def test_models_without_esm_features_refuse_esm_weights(weights, shards, tmp_path):
    from sinkalign.align import model as M
    from sinkalign.align.aligner import Aligner

    tiny = weights["tiny"]
    for command in (("evaluate", "--methods", "sinkalign"), ("calibrate", "-o", tmp_path / "c"),
                    ("fit-evalues", "-o", tmp_path / "e")):
        res = _cli(*command, "--reference", shards, "--split", "train", "--esm-weights", tiny)
        assert_one_line_error(res, "takes no ESM-2 features")
    fam = tmp_path / "fam.fa"
    fam.write_text(">a\nMKVLAAGHWER\n>b\nMKVLAGHWER\n")
    assert_one_line_error(_cli("msa", fam, "--esm-weights", tiny), "--esm-weights", "takes no ESM-2 features")
    # the aligner itself, whatever calls it: no features, or the builtin embedder's
    config = M.AlignerConfig()
    with pytest.raises(InputError, match=r"takes no ESM-2 features \(it was trained with no embedder"):
        Aligner(M.init_params(config, seed=0), config, embedder_options={"weights": str(tiny)})
    builtin = get_embedder("builtin", alphabet="protein")
    config = M.AlignerConfig(embedder=builtin.config(), feature_dim=builtin.dim)
    with pytest.raises(InputError, match=r"takes no ESM-2 features \(it was trained with the 'builtin' embedder"):
        Aligner(M.init_params(config, seed=0), config, embedder_options={"weights": str(tiny)})


# --------------------------------------------------------------------------------------
# 4. the embedding cache: unwritable, turned off, moved
# --------------------------------------------------------------------------------------


def test_an_unwritable_cache_is_one_warning_and_the_run_goes_on(weights, tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory\n")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    seqs = ["MKTAYIAKQRQISFVK", "MVLSPADKTNV"]
    expected = get_embedder("esm2", weights=weights["tiny"], cache=False).embed(seqs)
    emb = get_embedder("esm2", weights=weights["tiny"])
    with caplog.at_level(logging.WARNING, logger="sinkalign.align.embed.base"):
        first = emb.embed(seqs)
        second = emb.embed(seqs + ["MKV"])
    for a, b in zip(first + second[:2], expected + expected):
        np.testing.assert_array_equal(a, b)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert str(blocker / "sinkalign" / "embeddings") in warnings[0] and "Not a directory" in warnings[0]
    assert "SINKALIGN_EMBED_CACHE=off" in warnings[0]


def test_shards_embed_with_an_unwritable_cache(weights, shards, tmp_path, monkeypatch, caplog):
    work = tmp_path / "shards"
    shutil.copytree(shards, work)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    with caplog.at_level(logging.WARNING, logger="sinkalign.align.embed.base"):
        res = _cli("shards", "embed", work, "--embedder", "esm2", "--esm-weights", weights["tiny"],
                   "--esm-model", "esm2_t2_tiny")
    assert res.exit_code == 0, res.output
    assert read_index(work)["embeddings"]["dim"] == 32
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cannot be written (Not a directory)" in warnings[0], warnings


def test_the_cache_switch(weights, tmp_path, monkeypatch):
    from sinkalign.align.embed import default_cache_dir

    monkeypatch.setenv("SINKALIGN_EMBED_CACHE", "off")
    emb = get_embedder("esm2", weights=weights["tiny"])
    assert default_cache_dir() is None and emb.cache is None
    assert emb.embed(["MKVL"])[0].shape == (4, 32)
    assert not (tmp_path / "xdg").exists()
    monkeypatch.setenv("SINKALIGN_EMBED_CACHE", str(tmp_path / "elsewhere"))
    emb = get_embedder("esm2", weights=weights["tiny"])
    emb.embed(["MKVL"])
    assert emb.cache.dir.parent == tmp_path / "elsewhere" and len(list((tmp_path / "elsewhere").rglob("*.npy"))) == 1
    monkeypatch.delenv("SINKALIGN_EMBED_CACHE")
    assert default_cache_dir() == tmp_path / "xdg" / "sinkalign" / "embeddings"


# --------------------------------------------------------------------------------------
# 5. the cache knows the width of a model whose name is not a released one
# --------------------------------------------------------------------------------------


def test_a_cache_entry_of_the_wrong_width_is_recomputed(weights, tmp_path, caplog):
    seq = "MKTAYIAKQRQISFVK"
    first = get_embedder("esm2", weights=weights["tiny"], cache_dir=tmp_path / "c")
    good = first.embed([seq])[0]
    entry = first.cache.path(seq)
    again = get_embedder("esm2", weights=weights["tiny"], cache_dir=tmp_path / "c")
    np.testing.assert_array_equal(again.embed([seq])[0], good)
    assert not again.model_loaded  # the width comes from the checkpoint's cfg, not from running the model
    np.save(entry, np.zeros((len(seq), 16), np.float32))  # damaged: right length, wrong width
    damaged = get_embedder("esm2", weights=weights["tiny"], cache_dir=tmp_path / "c")
    with caplog.at_level(logging.WARNING, logger="sinkalign.align.embed.base"):
        out = damaged.embed([seq])[0]
    assert out.shape == (len(seq), 32) and "ignoring cache entry" in caplog.text
    np.testing.assert_allclose(out, good, atol=1e-6)
    assert damaged.cache.dim == 32


# --------------------------------------------------------------------------------------
# 6. smaller: messages and a trailing stop
# --------------------------------------------------------------------------------------


def test_unreadable_weights_do_not_pass_on_torchs_advice(tmp_path):
    garbage = tmp_path / "esm2_t2_random.pt"
    garbage.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(FormatError) as info:
        get_embedder("esm2", weights=garbage, cache=False).embed(["MKV"])
    msg = str(info.value)
    assert f"{garbage}: cannot read ESM-2 weights" in msg and "corrupt, truncated" in msg
    assert "weights_only" not in msg and "trusted source" not in msg and "safe_globals" not in msg
    pickled = tmp_path / "esm2_t2_pickled.pt"  # an object that is no tensor: refused, saying which
    torch.save({"model": {}, "cfg": {"model": Path("/")}}, pickled)
    with pytest.raises(FormatError) as info:
        get_embedder("esm2", weights=pickled, cache=False).embed(["MKV"])
    msg = str(info.value)
    assert "(UnpicklingError: Unsupported global: GLOBAL pathlib.PosixPath was not an allowed global" in msg
    assert "weights_only" not in msg and "safe_globals" not in msg


def test_a_missing_weights_file_is_reported_before_its_name(tmp_path):
    with pytest.raises(MissingFileError, match=r"ESM-2 weights file .*nonexist.pt does not exist"):
        get_embedder("esm2", weights=tmp_path / "nonexist.pt")


def test_missing_weights_of_an_unreleased_name_suggest_no_download():
    with pytest.raises(MissingFileError) as info:
        get_embedder("esm2", model="esm2_t2_custom")
    msg = str(info.value)
    assert "https://" not in msg and "esm.pretrained" not in msg
    assert "'esm2_t2_custom' is not a released ESM-2 model" in msg and "--esm-weights PATH" in msg
    with pytest.raises(MissingFileError, match=r"fetch https://dl.fbaipublicfiles.com/fair-esm/models/"
                                               r"esm2_t12_35M_UR50D.pt"):
        get_embedder("esm2", model="esm2_t12_35M_UR50D")


def test_one_trailing_stop_is_dropped(weights):
    emb = get_embedder("esm2", weights=weights["tiny"], cache=False)
    with_stop, plain = emb.embed(["MKTAYIAKQR*", "MKTAYIAKQR"])
    assert with_stop.shape == (10, 32)
    np.testing.assert_array_equal(with_stop, plain)
    with pytest.raises(SequenceFormatError, match=r"stop '\*' inside the sequence"):
        emb.embed(["MKT*AYI"])
    with pytest.raises(SequenceFormatError, match=r"stop '\*' inside the sequence"):
        emb.embed(["MKTAYI**"])  # only one
    with pytest.raises(InputError, match=r"is empty \(only a stop"):
        emb.embed(["*"])
    builtin = get_embedder("builtin")
    np.testing.assert_array_equal(builtin.embed(["MKV*"])[0], builtin.embed(["MKV"])[0])


# --------------------------------------------------------------------------------------
# 7. embed_shards stores float32 by default, as the command does
# --------------------------------------------------------------------------------------


def test_embed_shards_defaults_to_float32(shards, tmp_path):
    work = tmp_path / "shards"
    shutil.copytree(shards, work)
    assert inspect.signature(embed_shards).parameters["dtype"].default == "float32"
    index = embed_shards(work, get_embedder("builtin"))
    assert index["embeddings"]["dtype"] == "float32"


def test_embedder_from_config_errors_are_input_errors():
    with pytest.raises(InputError, match=r"must be a dict with a 'name'"):
        embedder_from_config({"model": "x"})
