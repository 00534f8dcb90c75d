"""Small genome language models whose attention carries learned priors.

A decoder-only pre-norm transformer over single nucleotides (:class:`DNALanguageModel`,
configured by :class:`LMConfig`) with a choice of attention (``LMConfig.attention``):

* ``goat``  -- learned Fourier relative prior + key-only sink inside one SDPA call,
* ``bam``   -- generalized-Gaussian positional prior with optional scalable softmax,
* ``sla``   -- softmax head gates over linear attention (GLA / RetNet backbones),
* ``rope``, ``alibi``, ``nope`` -- baselines.

Every attention layer follows the interface documented in
:mod:`sinkalign.lm.attention.base` (``forward(x, *, cache=None, return_cache=False)``).
Tokens come from :class:`NucleotideTokenizer` (``A C G T N`` + ``<pad> <bos> <eos>``; ``U``
is read as T). Checkpoints are a directory with ``model.safetensors`` + ``config.json``
(:func:`save_checkpoint` / :func:`load_checkpoint`, which returns the model in eval mode).

Generating DNA (what ``sinkalign generate-dna`` runs)::

    from sinkalign.lm import generate_dna, load_model

    ckpt = load_model("default")             # a shipped model (SHIPPED_MODELS), a checkpoint or a run
    dna = generate_dna(ckpt, "ATGAAACGC", 200, temperature=1.0, seed=1)   # the 200 new bases

:func:`load_model` resolves a shipped model's name (``"default"``, ``"cdiph"``), a checkpoint
directory or a training run (its newest checkpoint), as ``generate-dna --model`` does, and
returns the :class:`Checkpoint` in eval mode. :func:`generate_dna` is
:func:`sinkalign.lm.generate.generate` under a name of its own (``sinkalign.lm.generate`` is
the module); it takes the checkpoint or its ``.model``, and :func:`generate_batch` continues
equal-length prompts together. Prompts are read as a genome is (either case, IUPAC codes and
``X`` as N) and ``U`` as T. The GC profile of a sequence, generated or not, is
:func:`sinkalign.pipelines.gc_profile.gc_profile`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The re-exports are resolved lazily (PEP 562) so that the torch-free modules of this
# package (``sinkalign.lm.data``, ``sinkalign.lm.markov``) import without PyTorch.
_EXPORTS = {
    "ATTENTIONS": "sinkalign.lm.attention",
    "KVCache": "sinkalign.lm.attention",
    "RecurrentState": "sinkalign.lm.attention",
    "build_attention": "sinkalign.lm.attention",
    "SHIPPED_MODELS": "sinkalign.lm.checkpoints",
    "ATTENTION_NAMES": "sinkalign.lm.config",
    "LMConfig": "sinkalign.lm.config",
    "generate_batch": "sinkalign.lm.generate",
    "generate_dna": "sinkalign.lm.generate",
    "load_model": "sinkalign.lm.generate",
    "Checkpoint": "sinkalign.lm.model",
    "DNALanguageModel": "sinkalign.lm.model",
    "ModelCache": "sinkalign.lm.model",
    "load_checkpoint": "sinkalign.lm.model",
    "load_checkpoint_config": "sinkalign.lm.model",
    "save_checkpoint": "sinkalign.lm.model",
    "BOS_ID": "sinkalign.lm.tokenizer",
    "EOS_ID": "sinkalign.lm.tokenizer",
    "PAD_ID": "sinkalign.lm.tokenizer",
    "VOCAB": "sinkalign.lm.tokenizer",
    "NucleotideTokenizer": "sinkalign.lm.tokenizer",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from sinkalign.lm.attention import ATTENTIONS, KVCache, RecurrentState, build_attention
    from sinkalign.lm.checkpoints import SHIPPED_MODELS
    from sinkalign.lm.config import ATTENTION_NAMES, LMConfig
    from sinkalign.lm.generate import generate_batch, generate_dna, load_model
    from sinkalign.lm.model import (
        Checkpoint,
        DNALanguageModel,
        ModelCache,
        load_checkpoint,
        load_checkpoint_config,
        save_checkpoint,
    )
    from sinkalign.lm.tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB, NucleotideTokenizer


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sinkalign.lm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
