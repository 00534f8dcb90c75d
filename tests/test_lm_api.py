"""The genome LM's Python entry points: what sinkalign.lm exports, loading by name, RNA prompts."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest
import torch

import sinkalign.lm as lm
from sinkalign.lm.generate import default_model_path, generate, generate_batch
from sinkalign.lm.model import Checkpoint, DNALanguageModel, load_checkpoint, load_checkpoint_config, save_checkpoint
from sinkalign.lm.tokenizer import NucleotideTokenizer

ROOT = Path(__file__).resolve().parents[1]


def _tiny(dropout: float = 0.0) -> DNALanguageModel:
    torch.manual_seed(0)
    return DNALanguageModel(lm.LMConfig(vocab_size=8, d_model=32, n_layers=2, n_heads=2, attention="goat",
                                        max_train_len=16, goat_n_freqs=3, dropout=dropout, init_std=0.3))


def test_generation_and_the_loader_are_exported():
    """sinkalign.lm named no way to generate: its __all__ and docstring now do."""
    for name in ("generate_dna", "generate_batch", "load_model", "SHIPPED_MODELS"):
        assert name in lm.__all__ and name in dir(lm)
    assert lm.generate_dna is generate and lm.generate_batch is generate_batch
    assert set(lm.SHIPPED_MODELS) == {"default", "cdiph"}
    assert "generate_dna" in lm.__doc__ and "load_model" in lm.__doc__
    from sinkalign.lm import generate_dna, load_model  # the documented import

    assert callable(generate_dna) and callable(load_model)


def test_load_checkpoint_takes_a_shipped_name_and_returns_eval_mode(tmp_path, monkeypatch):
    """load_checkpoint("default") raised MissingFileError and returned its model in training mode."""
    ckpt = lm.load_checkpoint("default")
    assert not ckpt.model.training and not any(m.training for m in ckpt.model.modules())
    reference = load_checkpoint(default_model_path())
    assert ckpt.config == reference.config and not reference.model.training
    assert all(torch.equal(a, b) for a, b in zip(ckpt.model.state_dict().values(),
                                                  reference.model.state_dict().values()))
    assert load_checkpoint("cdiph").config == load_checkpoint_config("cdiph") == load_checkpoint(
        default_model_path("cdiph")).config
    assert not lm.load_model("cdiph").model.training
    # a folder of that name holding no model is passed over, as load_model (generate-dna --model) passes it
    monkeypatch.chdir(tmp_path)
    (tmp_path / "default").mkdir()
    assert load_checkpoint("default").config == reference.config == lm.load_model("default").config
    # an existing folder of that name holding a model is taken as given, as generate-dna --model reads it
    save_checkpoint(tmp_path / "default", _tiny(dropout=0.1))
    mine = load_checkpoint("default")
    assert mine.config.d_model == 32 and not mine.model.training
    mine.model.train()  # to train it, as the trainer does with the weights it loads
    assert mine.model.training


def test_generate_takes_the_checkpoint_load_model_returns():
    """generate(load_model(), ...) raised "model must be a DNALanguageModel, got Checkpoint"."""
    model = _tiny().eval()
    ckpt = Checkpoint(model=model, config=model.config, extra={})
    assert generate(ckpt, "ACGTAC", 20, seed=4) == generate(model, "ACGTAC", 20, seed=4)
    assert generate_batch(ckpt, ["ACGT", "TTTT"], 8, temperature=0) == generate_batch(model, ["ACGT", "TTTT"], 8,
                                                                                      temperature=0)
    with pytest.raises(ValueError, match="model must be a DNALanguageModel or the Checkpoint load_model returns, "
                                         "got str"):
        generate("default", "ACGT", 5)


def test_rna_prompts_and_tokens_read_u_as_t():
    """generate(model, "AUGAAACGC", 20) and NucleotideTokenizer().encode("ACGUN") raised on U."""
    tok = NucleotideTokenizer()
    assert tok.encode("ACGUN").tolist() == tok.encode("ACGTN").tolist() == [0, 1, 2, 3, 4]
    assert tok.encode("acgun").tolist() == [0, 1, 2, 3, 4]
    assert tok.decode(tok.encode("AUG")) == "ATG"
    with pytest.raises(ValueError, match=r"invalid character 'R' at 0-based position 1: allowed are A, C, G, T, N "
                                         r"and U \(read as T\), either case"):
        tok.encode("ARG")
    model = _tiny().eval()
    assert generate(model, "AUGAAACGC", 20, seed=2) == generate(model, "ATGAAACGC", 20, seed=2)
    assert generate(model, "augaaacgc", 20, temperature=0) == generate(model, "ATGAAACGC", 20, temperature=0)
    assert generate_batch(model, ["AUGU", "UUUU"], 6, temperature=0) == generate_batch(model, ["ATGT", "TTTT"], 6,
                                                                                       temperature=0)


def test_tokenizer_repr():
    """It was the default <... object at 0x...>."""
    assert repr(NucleotideTokenizer()) == "NucleotideTokenizer(vocab_size=8: A C G T N <pad> <bos> <eos>)"


def test_readme_genome_lm_python_example_runs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Genome language models\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```pycon\n(.*?)```", section, flags=re.S)
    assert blocks
    test = doctest.DocTestParser().get_doctest("\n".join(blocks), {}, "README.md: Genome language models",
                                               "README.md", 0)
    assert len(test.examples) >= 6
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)
