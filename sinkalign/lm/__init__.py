"""Small genome language models whose attention carries learned priors.

A decoder-only pre-norm transformer over single nucleotides (:class:`DNALanguageModel`,
configured by :class:`LMConfig`) with a choice of attention (``LMConfig.attention``):

* ``goat``  -- learned Fourier relative prior + key-only sink inside one SDPA call,
* ``bam``   -- generalized-Gaussian positional prior with optional scalable softmax,
* ``sla``   -- softmax head gates over linear attention (GLA / RetNet backbones),
* ``rope``, ``alibi``, ``nope`` -- baselines.

Every attention layer follows the interface documented in
:mod:`sinkalign.lm.attention.base` (``forward(x, *, cache=None, return_cache=False)``).
Tokens come from :class:`NucleotideTokenizer` (``A C G T N`` + ``<pad> <bos> <eos>``).
Checkpoints are a directory with ``model.safetensors`` + ``config.json``
(:func:`save_checkpoint` / :func:`load_checkpoint`).
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
    "ATTENTION_NAMES": "sinkalign.lm.config",
    "LMConfig": "sinkalign.lm.config",
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
    from sinkalign.lm.config import ATTENTION_NAMES, LMConfig
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
