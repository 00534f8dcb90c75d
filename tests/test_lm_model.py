"""DNA language model, tokenizer, config and checkpoints (sinkalign.lm)."""

from __future__ import annotations

import json
import os
import re
from collections import Counter

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sinkalign.errors import CheckpointError, MissingFileError
from sinkalign.lm import (
    ATTENTION_NAMES,
    BOS_ID,
    EOS_ID,
    PAD_ID,
    DNALanguageModel,
    LMConfig,
    ModelCache,
    NucleotideTokenizer,
    load_checkpoint,
    save_checkpoint,
)
from sinkalign.lm.model import CHECKPOINT_CONFIG, CHECKPOINT_WEIGHTS, load_checkpoint_config

TRAIN_LEN = 32


def tiny_config(attention: str, **kw) -> LMConfig:
    base = dict(vocab_size=8, d_model=32, n_layers=2, n_heads=2, attention=attention, max_train_len=TRAIN_LEN,
                goat_n_freqs=3, bam_chunk_size=16, sla_chunk_size=16)
    base.update(kw)
    return LMConfig(**base)


# ----------------------------------------------------------------------------- tokenizer

def test_tokenizer_roundtrip_and_ids():
    tok = NucleotideTokenizer()
    ids = tok.encode("ACGTN")
    assert ids.dtype == torch.int64 and ids.tolist() == [0, 1, 2, 3, 4]
    assert tok.vocab_size == 8 and (PAD_ID, BOS_ID, EOS_ID) == (5, 6, 7)
    assert tok.encode("acgtn").tolist() == [0, 1, 2, 3, 4]  # soft-masked lowercase is uppercased
    assert tok.encode("GA", add_bos=True, add_eos=True).tolist() == [BOS_ID, 2, 0, EOS_ID]
    assert tok.encode("").tolist() == []
    assert tok.decode(tok.encode("TTgaN", add_bos=True, add_eos=True)) == "TTGAN"
    assert tok.decode([BOS_ID, 0, PAD_ID], skip_special=False) == "<bos>A<pad>"
    # the data module's int8 tokens are already valid ids
    assert tok.from_data(np.array([[0, 4], [3, 1]], dtype=np.int8)).tolist() == [[0, 4], [3, 1]]


def test_tokenizer_errors_name_the_position():
    tok = NucleotideTokenizer()
    with pytest.raises(ValueError, match=r"invalid character 'R' at 0-based position 3"):
        tok.encode("ACGRT")
    with pytest.raises(ValueError, match=r"invalid character '-' at 0-based position 0"):
        tok.encode("-ACG")
    with pytest.raises(ValueError, match=r"invalid character 'é' at 0-based position 2"):
        tok.encode("ACéGT")
    with pytest.raises(ValueError, match=r"invalid token id 9 at 0-based position 1: valid ids are 0..7"):
        tok.decode([0, 9])
    with pytest.raises(ValueError, match=r"decode expects 1-D ids"):
        tok.decode(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"invalid nucleotide token 5 at flat 0-based position 2"):
        tok.from_data(np.array([0, 1, 5]))
    with pytest.raises(ValueError, match="encode expects a str"):
        tok.encode(b"ACGT")


# ----------------------------------------------------------------------------- config

def test_config_json_roundtrip():
    cfg = tiny_config("bam", bam_ssmax=False, goat_max_period=100.0, dropout=0.1)
    back = LMConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg
    data = cfg.to_dict() | {"mlp_ratio": 3}  # JSON integers are accepted for float fields
    assert LMConfig.from_dict(data).mlp_ratio == 3.0


@pytest.mark.parametrize("kw,msg", [
    ({"attention": "flash"}, "attention='flash' is not one of 'goat', 'bam', 'sla', 'rope', 'alibi', 'nope'"),
    ({"d_model": 30, "n_heads": 4}, "d_model=30 must be divisible by n_heads=4"),
    ({"n_heads": 0}, "n_heads=0 must be >= 1"),
    ({"n_layers": True}, "n_layers=True must be an int"),
    ({"dropout": 1.0}, "dropout=1.0 must be < 1.0"),
    ({"goat_n_freqs": 8}, "goat_n_freqs=8 leaves no content dims: head_dim=16 (d_model 32 / n_heads 2) must be "
                          ">= 2 * goat_n_freqs + 2 = 18: a d_model of at least 36 with 2 heads (--d-model, "
                          "--n-heads), or a smaller goat_n_freqs (--model-option goat_n_freqs=N)"),
    ({"goat_init": "random"}, "goat_init='random' is not one of 'uniform', 'alibi', 'alibi_sink'"),
    ({"bam_impl": "triton"}, "bam_impl='triton' is not one of 'auto', 'chunked', 'flex'"),
    ({"sla_backbone": "mamba"}, "sla_backbone='mamba' is not one of 'gla', 'retnet'"),
    ({"pad_id": 8}, "pad_id=8 must be < vocab_size=8"),
    ({"goat_min_period": 1.0}, "goat_min_period=1.0 must be >= 2.0"),
    ({"max_train_len": 0}, "max_train_len=0 must be >= 1"),
    ({"input_kmer": 0}, "input_kmer=0 must be >= 1"),
])
def test_config_validation(kw, msg):
    base = dict(vocab_size=8, d_model=32, n_layers=2, n_heads=2, attention="goat", max_train_len=16)
    with pytest.raises(ValueError, match=re.escape(msg)):
        LMConfig(**(base | kw))


def test_config_from_dict_errors():
    good = tiny_config("nope").to_dict()
    with pytest.raises(ValueError, match=r"unknown LMConfig keys \['attn'\]"):
        LMConfig.from_dict(good | {"attn": "x"})
    missing = dict(good)
    del missing["d_model"]
    with pytest.raises(ValueError, match=r"missing required keys \['d_model'\]"):
        LMConfig.from_dict(missing)
    with pytest.raises(TypeError):
        LMConfig(8, 32, 2, 2, "nope", 16)  # keyword-only


def test_config_defaults_are_those_of_lm_train_and_build_a_model():
    """LMConfig had no defaults for its core fields (a Python user passed every one): they are now
    ``sinkalign lm train``'s, which reads them from LMConfig, and ``LMConfig(attention=...)`` runs.
    A saved config is still read as saved: it holds every field, and the core ones stay required."""
    import dataclasses

    from sinkalign.cli.lm import train as train_cmd
    from sinkalign.lm.checkpoints import default_model_path
    from sinkalign.lm.train import TrainConfig

    cfg = LMConfig(attention="goat")
    tok = NucleotideTokenizer()
    assert (cfg.vocab_size, cfg.pad_id) == (tok.vocab_size, PAD_ID)
    cli_defaults = {p.name: p.default for p in train_cmd.params}
    assert (cli_defaults["d_model"], cli_defaults["n_layers"], cli_defaults["n_heads"], cli_defaults["seq_len"],
            cli_defaults["dropout"]) == (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.max_train_len, cfg.dropout) \
        == (128, 4, 4, 256, 0.0)
    tokens = tok.encode("ACGTTGCAAGGCTTAN")[None]  # [1, 16]
    for attention in ATTENTION_NAMES:
        default = LMConfig(attention=attention)
        assert TrainConfig(fasta="genome.fa", attention=attention).model_config() == default  # lm train's model
        torch.manual_seed(0)
        logits = DNALanguageModel(default).eval()(tokens)
        assert logits.shape == (1, 16, tok.vocab_size) and torch.isfinite(logits).all(), attention
    for name in ("default", "cdiph"):
        saved = json.loads((default_model_path(name) / CHECKPOINT_CONFIG).read_text())["config"]
        assert set(saved) == {f.name for f in dataclasses.fields(LMConfig)}
        assert load_checkpoint_config(name).to_dict() == saved
    for key in ("vocab_size", "d_model", "n_layers", "n_heads", "attention", "max_train_len"):
        with pytest.raises(ValueError, match=rf"LMConfig is missing required keys \['{key}'\]"):
            LMConfig.from_dict({k: v for k, v in cfg.to_dict().items() if k != key})


# ----------------------------------------------------------------------------- model

def test_forward_shapes_loss_and_parameter_count():
    torch.manual_seed(0)
    model = DNALanguageModel(tiny_config("goat"))
    tokens = torch.randint(0, 5, (3, 20))
    logits = model(tokens)
    assert logits.shape == (3, 20, 8)
    manual = F.cross_entropy(model(tokens[:, :-1]).reshape(-1, 8), tokens[:, 1:].reshape(-1))
    torch.testing.assert_close(model.loss(tokens), manual)
    # padded targets are ignored
    padded = torch.cat([tokens, torch.full((3, 4), PAD_ID)], dim=1)
    logits_p = model(padded[:, :-1])
    expect = F.cross_entropy(logits_p[:, :19].reshape(-1, 8), tokens[:, 1:].reshape(-1))
    torch.testing.assert_close(model.loss(padded), expect)
    tied = model.num_parameters()
    untied = DNALanguageModel(tiny_config("goat", tie_embeddings=False)).num_parameters()
    assert untied - tied == 8 * 32
    assert tied == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("attention", ATTENTION_NAMES)
@torch.no_grad()
def test_step_matches_forward(attention):
    torch.manual_seed(1)
    model = DNALanguageModel(tiny_config(attention, init_std=0.2)).double().eval()
    tokens = torch.randint(0, 5, (2, 30))
    full = model(tokens)
    logits, cache = model.step(tokens[:, :7])
    outs = [logits]
    for t in range(7, 30):
        logits, cache = model.step(tokens[:, t : t + 1], cache)
        assert logits.shape == (2, 1, 8)
        outs.append(logits)
    assert isinstance(cache, ModelCache) and cache.offset == 30 and len(cache.layers) == 2
    torch.testing.assert_close(torch.cat(outs, dim=1), full, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("attention", ["nope", "sla"])
@torch.no_grad()
def test_kmer_input_embedding_sums_lag_tables_and_steps_match_forward(attention):
    torch.manual_seed(3)
    model = DNALanguageModel(tiny_config(attention, init_std=0.2, input_kmer=3)).double().eval()
    assert len(model.lag_embed) == 2
    tokens = torch.randint(0, 5, (2, 20))
    # the embedding by hand: lag s reads token t - s, the pad id before the start
    pad = model.config.pad_id
    ext = torch.cat([torch.full((2, 2), pad), tokens], dim=1)
    by_hand = (model.embed(tokens) + model.lag_embed[0](ext[:, 1:21]) + model.lag_embed[1](ext[:, 0:20]))
    torch.testing.assert_close(model._embed(tokens, model._start_history(tokens)), by_hand)
    # changing a token changes the logits of exactly the next input_kmer positions' inputs
    # (and, through attention, later ones), never earlier ones
    other = tokens.clone()
    other[:, 10] = (other[:, 10] + 1) % 4
    diff = (model(other) - model(tokens)).abs().amax(dim=(0, 2))
    assert diff[:10].max() == 0 and diff[10:13].min() > 0
    full = model(tokens)
    logits, cache = model.step(tokens[:, :1])
    outs = [logits]
    for t0, t1 in ((1, 2), (2, 9), (9, 10), (10, 20)):
        logits, cache = model.step(tokens[:, t0:t1], cache)
        outs.append(logits)
    assert cache.history.tolist() == tokens[:, 18:20].tolist()
    torch.testing.assert_close(torch.cat(outs, dim=1), full, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("attention", ATTENTION_NAMES)
@torch.no_grad()
def test_eight_times_training_length(attention):
    torch.manual_seed(2)
    model = DNALanguageModel(tiny_config(attention)).eval()
    logits = model(torch.randint(0, 5, (1, 8 * TRAIN_LEN)))
    assert logits.shape == (1, 8 * TRAIN_LEN, 8) and torch.isfinite(logits).all()


REPEAT = "ACGTTGCAAC"  # period 10; unigram entropy ln-based 1.366 nats


@pytest.mark.parametrize("attention", ATTENTION_NAMES)
def test_few_steps_learn_a_repetitive_string(attention):
    """40 AdamW steps bring the loss well below the unigram entropy: context is being used."""
    torch.manual_seed(0)
    tok = NucleotideTokenizer()
    ids = tok.encode(REPEAT * 30)
    counts = np.array(list(Counter(REPEAT).values()), dtype=float) / len(REPEAT)
    unigram = float(-(counts * np.log(counts)).sum())
    model = DNALanguageModel(tiny_config(attention))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(40):
        starts = torch.randint(0, len(ids) - TRAIN_LEN - 1, (8,), generator=g)
        batch = torch.stack([ids[s : s + TRAIN_LEN + 1] for s in starts])
        loss = model.loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > 1.9  # starts near ln(8)
    final = sum(losses[-5:]) / 5
    assert final < 0.75 * unigram, (attention, losses[0], final, unigram)


def test_model_input_errors():
    model = DNALanguageModel(tiny_config("nope"))
    with pytest.raises(ValueError, match=r"tokens must be a \[B, L\] tensor, got \(5,\)"):
        model(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"token id 8 at \[batch 1, position 2\] is outside 0..7"):
        model(torch.tensor([[0, 1, 2], [0, 1, 8]]))
    with pytest.raises(ValueError, match="tokens must be integer ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="loss needs at least 2 positions"):
        model.loss(torch.zeros(1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="cache must be the ModelCache returned by step"):
        model.step(torch.zeros(1, 1, dtype=torch.long), cache=ModelCache(layers=(), offset=0))
    with pytest.raises(ValueError, match="config must be an LMConfig"):
        DNALanguageModel({"attention": "nope"})


# ----------------------------------------------------------------------------- checkpoints

@pytest.mark.parametrize("attention", ["goat", "sla"])
def test_checkpoint_roundtrip(tmp_path, attention):
    torch.manual_seed(3)
    cfg = tiny_config(attention, tie_embeddings=attention == "goat")
    model = DNALanguageModel(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))  # differ from a fresh init
    out = save_checkpoint(tmp_path / "ckpt", model, cfg, extra={"step": 7, "lr": 1e-3})
    assert sorted(os.listdir(out)) == [CHECKPOINT_CONFIG, CHECKPOINT_WEIGHTS]  # no temp files left
    loaded = load_checkpoint(out)
    assert loaded.config == cfg and loaded.extra == {"step": 7, "lr": 1e-3}
    assert load_checkpoint_config(out) == cfg
    tokens = torch.randint(0, 5, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(tokens), model(tokens), rtol=0, atol=0)


def test_save_checkpoint_does_not_replace_a_checkpoint_unasked(tmp_path):
    """A second save_checkpoint into a directory that holds one replaced it silently."""
    from sinkalign.errors import OutputExistsError

    first, second = DNALanguageModel(tiny_config("rope")), DNALanguageModel(tiny_config("alibi"))
    out = save_checkpoint(tmp_path / "ck", first, extra={"step": 1})
    before = {name: (out / name).read_bytes() for name in (CHECKPOINT_CONFIG, CHECKPOINT_WEIGHTS)}
    with pytest.raises(OutputExistsError, match=r"ck already holds a checkpoint \(model.safetensors, config.json\); "
                                                r"pass overwrite=True"):
        save_checkpoint(out, second)
    assert {name: (out / name).read_bytes() for name in before} == before
    save_checkpoint(out, second, overwrite=True)
    assert load_checkpoint(out).config.attention == "alibi"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine\n")  # a folder with other files: saved beside them
    save_checkpoint(tmp_path / "other", first)
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine\n"


def test_checkpoint_errors_name_the_path(tmp_path):
    cfg = tiny_config("rope")
    model = DNALanguageModel(cfg)
    # a missing directory or file: MissingFileError, still a FileNotFoundError
    with pytest.raises(MissingFileError, match=f"checkpoint directory not found: {tmp_path / 'nope'}") as info:
        load_checkpoint(tmp_path / "nope")
    assert isinstance(info.value, FileNotFoundError)
    (tmp_path / "file").write_text("x")
    with pytest.raises(MissingFileError, match=f"{tmp_path / 'file'} is a file, not a checkpoint directory"):
        load_checkpoint(tmp_path / "file")
    ck = save_checkpoint(tmp_path / "a", model)
    (ck / CHECKPOINT_WEIGHTS).unlink()
    with pytest.raises(MissingFileError, match=f"checkpoint file not found: {ck / CHECKPOINT_WEIGHTS}"):
        load_checkpoint(ck)
    with pytest.raises(MissingFileError, match=f"checkpoint file not found: {ck / CHECKPOINT_WEIGHTS}"):
        load_checkpoint_config(ck)  # the config alone is read, but the weights must be there
    # a corrupt or inconsistent one: CheckpointError, still a ValueError
    ck = save_checkpoint(tmp_path / "b", model)
    (ck / CHECKPOINT_WEIGHTS).write_bytes(b"\x00\x01garbage")
    with pytest.raises(CheckpointError, match=f"{ck / CHECKPOINT_WEIGHTS}: corrupt safetensors file") as info:
        load_checkpoint(ck)
    assert isinstance(info.value, ValueError)
    assert load_checkpoint_config(ck) == cfg  # the weights are not read
    ck = save_checkpoint(tmp_path / "c", model)
    (ck / CHECKPOINT_CONFIG).write_text("{not json")
    with pytest.raises(CheckpointError, match=f"{ck / CHECKPOINT_CONFIG}: corrupt checkpoint config"):
        load_checkpoint(ck)
    with pytest.raises(CheckpointError, match=f"{ck / CHECKPOINT_CONFIG}: corrupt checkpoint config"):
        load_checkpoint_config(ck)
    ck = save_checkpoint(tmp_path / "d", model)
    meta = json.loads((ck / CHECKPOINT_CONFIG).read_text())
    meta["config"]["attention"] = "alibi"  # same shapes, but alibi has no extra weights either
    meta["config"]["n_layers"] = 3
    (ck / CHECKPOINT_CONFIG).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=f"{ck / CHECKPOINT_WEIGHTS}: weights do not match the config: missing"):
        load_checkpoint(ck)
    meta["config"]["n_heads"] = 3
    (ck / CHECKPOINT_CONFIG).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=f"{ck / CHECKPOINT_CONFIG}: invalid model config: d_model=32 must be"):
        load_checkpoint(ck)
    with pytest.raises(ValueError, match="extra must be JSON-serialisable"):
        save_checkpoint(tmp_path / "e", model, extra={"bad": object()})
    with pytest.raises(ValueError, match="config differs from model.config"):
        save_checkpoint(tmp_path / "f", model, tiny_config("nope"))
