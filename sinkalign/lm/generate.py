"""DNA generation with the language models: cached / recurrent decoding and sampling.

``generate(model, prompt, length, ...)`` continues ``prompt`` by ``length`` bases (``model`` a
:class:`~sinkalign.lm.model.DNALanguageModel` or the :class:`~sinkalign.lm.model.Checkpoint`
:func:`load_model` returns); :mod:`sinkalign.lm` exports it as ``generate_dna``, since the
package's own attribute ``generate`` is this module::

    from sinkalign.lm import generate_dna, load_model
    dna = generate_dna(load_model("default"), "ATGAAACGC", 200, seed=1)

The prompt is read as ``sinkalign lm eval`` reads a genome (either case, IUPAC ambiguity codes
and ``X`` as N) and, as the aligner reads RNA, ``U`` as T. Decoding
is incremental through :meth:`DNALanguageModel.step`: softmax attentions keep a KV cache
and SLA a constant-size recurrent state, so each new base costs one single-token forward
pass. ``use_cache=False`` recomputes the whole sequence for every base instead (the
reference the cached path is tested against).

Sampling is over the four bases A, C, G, T only (N and the special tokens are never
generated): logits / ``temperature`` (``temperature == 0``: greedy argmax), then top-k,
then nucleus (top-p) filtering, then a draw from a ``torch.Generator`` seeded with
``seed``, so equal seeds give equal output on the same device.

The draw (``torch.multinomial`` of one sample) is an exponential race: base
``argmax_i p_i / E_i`` with fresh ``E_i ~ Exp(1)``, i.e. ``argmax_i logit_i / T - log E_i``.
The temperature is always applied, but with the same seed every temperature sees the same
``E_i``, so runs at different temperatures are coupled: they pick the same base wherever
the noise outweighs the logits' spread, which for a DNA model close to 2 bits/base is most
positions (about 85% of bases agree between temperature 1 and 5, or 1 and 1e30, against 25%
for different seeds), and nearby temperatures (1 and 1.0001) usually give the very same
sequence. Independent samples need different seeds.

The default model is the checkpoint shipped in ``sinkalign/data/lm_default``
(:func:`default_model_path`): GOAT trained on 35 bacterial and archaeal genomes
(``data_manifests/genomes_multi_split.json``'s ``train`` genera and C. diphtheriae). The
earlier model trained on the C. diphtheriae chromosome alone ships as ``cdiph``
(:data:`SHIPPED_MODELS`). :func:`load_model` also accepts a checkpoint or a training run
directory (it follows ``checkpoints/latest.json``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from sinkalign.errors import CheckpointError, InputError, MissingFileError
from sinkalign.lm.checkpoints import (
    CHECKPOINT_CONFIG,
    DEFAULT_MODEL_DIR,
    SHIPPED_MODELS,
    aligner_layout,
    default_model_path,
    find_latest_checkpoint,
    names_shipped_model,
    not_a_genome_lm,
    shipped_model,
)
from sinkalign.lm.data import as_model_bases
from sinkalign.lm.model import Checkpoint, DNALanguageModel, load_checkpoint
from sinkalign.lm.tokenizer import NucleotideTokenizer

__all__ = [
    "DEFAULT_MODEL_DIR",
    "MAX_GENERATE_LENGTH",
    "SHIPPED_MODELS",
    "SamplingConfig",
    "default_model_path",
    "generate",
    "generate_batch",
    "generate_dna",
    "load_model",
    "resolve_model_path",
]

logger = logging.getLogger(__name__)

_N_BASES = 4  # A, C, G, T: the ids that may be generated
#: Most bases one call generates. Decoding is one forward pass per base (about 100 bases/s
#: for the shipped model on one CPU core) and the KV cache grows with the length, so a
#: longer request is refused up front instead of running for hours or exhausting memory.
MAX_GENERATE_LENGTH = 1_000_000


def resolve_model_path(path: str | os.PathLike | None) -> Path:
    """A checkpoint directory for ``path``: itself, or the newest checkpoint of a run directory.

    ``None`` gives :func:`default_model_path`; a name of :data:`SHIPPED_MODELS` (``default``,
    ``cdiph``) that is not an existing path gives that shipped checkpoint. A directory holding
    ``config.json`` is a checkpoint; one holding ``checkpoints/`` is a training run
    (``latest.json`` is followed). Raises :class:`~sinkalign.errors.MissingFileError` (a
    ``FileNotFoundError``) naming the path when neither exists, and
    :class:`~sinkalign.errors.CheckpointError` when ``path`` is an aligner's model or run
    directory (:func:`~sinkalign.lm.checkpoints.aligner_layout`), not a genome LM's.
    """
    if path is None or names_shipped_model(path):
        return shipped_model("default" if path is None else path)
    p = Path(path)
    if not p.exists():
        raise MissingFileError(f"model path not found: {p} (nor the name of a shipped model: "
                                f"{', '.join(SHIPPED_MODELS)})")
    if p.is_dir() and not (p / CHECKPOINT_CONFIG).exists():
        if (p / "checkpoints").is_dir():
            latest = find_latest_checkpoint(p)
        else:  # a run's checkpoints/ folder itself: its newest
            latest = find_latest_checkpoint(p.parent) if p.name == "checkpoints" else None
        if latest is not None:
            return latest
        kind = aligner_layout(p)
        if kind is not None:
            raise CheckpointError(f"{not_a_genome_lm(p, kind)}; give a genome LM: a checkpoint directory "
                                  f"(config.json + model.safetensors), a run of `sinkalign lm train` or a shipped "
                                  f"model's name ({', '.join(SHIPPED_MODELS)})")
        if (p / "checkpoints").is_dir():
            raise MissingFileError(f"training run {p} holds no complete checkpoint")
        if (p / "metrics.jsonl").is_file():
            raise MissingFileError(f"training run {p} holds no checkpoint yet: it stopped before its first (`sinkalign "
                                   f"lm train --out {p} --resume` with its settings starts it again)")
        if str(path) in SHIPPED_MODELS:  # a user's folder named "default" does not hide the shipped model
            logger.warning("%s holds no genome LM: model %r is the shipped model", p.resolve(), str(path))
            return shipped_model(str(path))
        raise MissingFileError(f"{p} holds no genome LM: give a checkpoint directory (config.json + "
                               f"model.safetensors), a run of `sinkalign lm train` or a shipped model's name "
                               f"({', '.join(SHIPPED_MODELS)})")
    return p


def load_model(path: str | os.PathLike | None = None, *, device: str | torch.device = "cpu") -> Checkpoint:
    """Load a genome LM in eval mode on ``device``: a checkpoint directory, a training run's newest
    checkpoint or a shipped model by name (``None``: ``"default"``; see :func:`resolve_model_path`).

    Returns the :class:`~sinkalign.lm.model.Checkpoint` (``.model``, ``.config``, ``.extra``), which
    :func:`generate` takes as it is. Raises :class:`~sinkalign.errors.MissingFileError` (a
    ``FileNotFoundError``) or :class:`~sinkalign.errors.CheckpointError` (a ``ValueError``) naming the
    missing or corrupt path.
    """
    return load_checkpoint(resolve_model_path(path), map_location=device)


def _check_sampling(length: int, temperature: float, top_k: int | None, top_p: float | None) -> None:
    if isinstance(length, bool) or not isinstance(length, int) or length <= 0:
        raise InputError(f"length={length!r} must be a positive integer")
    if length > MAX_GENERATE_LENGTH:
        raise InputError(f"length={length:,} exceeds the {MAX_GENERATE_LENGTH:,} bases one call generates (one "
                         f"forward pass per base, a few hundred bases/s on a CPU core, and a cache that grows with "
                         f"the length); generate in pieces, each prompted with the end of the previous one")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0 \
            or temperature == float("inf"):
        raise InputError(f"temperature={temperature!r} must be a finite number >= 0 (0 = greedy)")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise InputError(f"top_k={top_k!r} must be a positive integer (or None)")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float))
                              or not 0.0 < top_p <= 1.0):
        raise InputError(f"top_p={top_p!r} must be in (0, 1] (or None)")


@dataclass(frozen=True)
class SamplingConfig:
    """Validated sampling options: ``temperature`` (0 = greedy), ``top_k``, ``top_p``."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        _check_sampling(1, self.temperature, self.top_k, self.top_p)

    def next_tokens(self, logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """``logits [B, V]`` of the next position -> sampled base ids ``[B, 1]`` (0..3)."""
        logits = logits[:, :_N_BASES]  # [B, 4]: only A, C, G, T may be generated
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        if self.temperature == 0.0:
            return logits.argmax(dim=-1, keepdim=True)
        if self.temperature < 1e-3:  # logits / T would overflow to inf (NaN probabilities) as T -> 0: shifted
            # by the row's largest first (the same distribution) and divided in float64 (T is no float32
            # zero), the best base keeps 0 and the rest go to -inf
            logits = (logits - logits.max(dim=-1, keepdim=True).values).double()
        logits = logits / self.temperature
        if self.top_k is not None and self.top_k < _N_BASES:
            kth = logits.topk(self.top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p is not None and self.top_p < 1.0:
            probs_sorted, order = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True)
            # keep the smallest prefix whose mass reaches top_p (always the most likely base)
            drop_sorted = probs_sorted.cumsum(dim=-1) - probs_sorted >= self.top_p
            drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
            logits = logits.masked_fill(drop, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        return torch.multinomial(probs, 1, generator=generator)


def _encode_prompt(prompt: str, index: int | None = None) -> torch.Tensor:
    what = "prompt" if index is None else f"prompt {index}"
    if not isinstance(prompt, str):
        raise InputError(f"{what} must be a str, got {type(prompt).__name__}")
    if not prompt:
        raise InputError(f"{what} is empty: give at least one base (A, C, G, T or N)")
    try:
        return NucleotideTokenizer().encode(as_model_bases(prompt))
    except ValueError as exc:
        raise InputError(f"{what}: {exc}; IUPAC ambiguity codes and X are read as N") from None


@torch.inference_mode()
def _decode(model: DNALanguageModel, ids: torch.Tensor, length: int, sampling: SamplingConfig,
            generator: torch.Generator | None, use_cache: bool, progress: bool = False) -> torch.Tensor:
    """``ids [B, P]`` -> new ids ``[B, length]``; ``progress`` shows a bar of bases on stderr."""
    out = torch.empty(ids.shape[0], length, dtype=torch.long, device=ids.device)
    with tqdm(total=length, disable=not progress, desc="generate", unit="nt", unit_scale=True,
              file=sys.stderr, mininterval=0.5) as bar:
        if use_cache:
            logits, cache = model.step(ids)
            for t in range(length):
                nxt = sampling.next_tokens(logits[:, -1], generator)
                out[:, t : t + 1] = nxt
                if t + 1 < length:
                    logits, cache = model.step(nxt, cache)
                bar.update(1)
        else:
            seq = ids
            for t in range(length):
                nxt = sampling.next_tokens(model(seq)[:, -1], generator)
                out[:, t : t + 1] = nxt
                seq = torch.cat([seq, nxt], dim=1)
                bar.update(1)
    return out


def generate_batch(model: DNALanguageModel | Checkpoint, prompts: Sequence[str], length: int, *,
                   temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                   seed: int | None = None, use_cache: bool = True, progress: bool = False) -> list[str]:
    """Continue several equal-length prompts at once (one batch); see :func:`generate`.

    Returns the ``length`` new bases of each prompt, in input order. The draws for a given
    ``seed`` depend on the batch (a prompt's continuation differs from a single-prompt call).
    """
    _check_sampling(length, temperature, top_k, top_p)
    if isinstance(prompts, str) or not len(prompts):
        raise InputError("prompts must be a non-empty sequence of strings")
    ids = [_encode_prompt(p, i if len(prompts) > 1 else None) for i, p in enumerate(prompts)]
    if len({t.numel() for t in ids}) != 1:
        raise InputError(f"prompts must have equal lengths, got {sorted({t.numel() for t in ids})}")
    if isinstance(model, Checkpoint):  # what load_model returns
        model = model.model
    if not isinstance(model, DNALanguageModel):
        raise ValueError(f"model must be a DNALanguageModel or the Checkpoint load_model returns, got "
                         f"{type(model).__name__}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        raise InputError(f"seed={seed!r} must be an integer from 0 to 2**63 - 1 (a torch.Generator's seed), or None")
    device = next(model.parameters()).device
    generator = None
    if temperature > 0:
        generator = torch.Generator(device=device)
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
    batch = torch.stack(ids).to(device)  # [B, P]
    total = batch.shape[1] + length
    if total > 16 * model.config.max_train_len:
        logger.info("generating to length %d, %.0fx the training length %d", total,
                    total / model.config.max_train_len, model.config.max_train_len)
    was_training = model.training
    model.eval()
    try:
        new = _decode(model, batch, length, SamplingConfig(temperature, top_k, top_p), generator, use_cache,
                      progress)
    finally:
        model.train(was_training)
    tok = NucleotideTokenizer()
    return [tok.decode(row) for row in new.cpu()]


def generate(model: DNALanguageModel | Checkpoint, prompt: str, length: int, *, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
             use_cache: bool = True, progress: bool = False) -> str:
    """Continue ``prompt`` by ``length`` bases; returns only the new bases (A/C/G/T).

    Args:
        model: a :class:`DNALanguageModel` (evaluated in eval mode; its mode is restored) or the
            :class:`~sinkalign.lm.model.Checkpoint` that :func:`load_model` returns.
        prompt: the bases to continue, over ``ACGTN`` (either case; the IUPAC ambiguity codes
            and ``X`` are read as N, as :func:`~sinkalign.lm.data.read_genome` reads them, and
            ``U`` as T, as the aligner reads RNA), at least one.
        length: number of bases to generate, > 0.
        temperature: softmax temperature; 0 = greedy (argmax, no randomness).
        top_k: keep the ``top_k`` most likely bases (None: all four).
        top_p: nucleus sampling: keep the smallest set of bases whose probability reaches
            ``top_p`` (None or 1: all).
        seed: seed of the ``torch.Generator`` (None: fresh entropy, not reproducible). The
            same seed at another temperature draws the same noise: a coupled, largely equal
            sequence (see the module docstring), not an independent sample.
        use_cache: decode with the KV cache / recurrent state (True) or recompute the
            whole sequence for every base (False; slow, for testing).
        progress: show a tqdm bar of generated bases on stderr.

    Raises:
        InputError (a ValueError): empty prompt, a character outside ACGTN and those codes (naming it and
            its 0-based position), ``length <= 0`` or above :data:`MAX_GENERATE_LENGTH`, or
            bad sampling options.
        ValueError: ``model`` is neither a model nor a checkpoint.
    """
    return generate_batch(model, [prompt], length, temperature=temperature, top_k=top_k, top_p=top_p,
                          seed=seed, use_cache=use_cache, progress=progress)[0]


#: :func:`generate` under the name :mod:`sinkalign.lm` exports it by (there ``generate`` is this module).
generate_dna = generate
