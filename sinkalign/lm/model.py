"""Decoder-only DNA language model and its checkpoints.

Architecture (pre-norm): token embedding (summed over the last ``input_kmer`` tokens, one
table per lag) -> dropout -> ``n_layers`` x [x + drop(attn(norm(x))),
x + drop(SwiGLU(norm(x)))] -> RMSNorm -> output projection (tied to the embedding when
``tie_embeddings``). There is no absolute position embedding: position enters only through
the attention layer chosen by ``config.attention``.

Interface for training / generation code::

    model = DNALanguageModel(config)
    logits = model(tokens)                      # tokens [B, L] int64 -> [B, L, V]
    loss = model.loss(tokens)                   # mean next-token cross-entropy
    logits, cache = model.step(prompt)          # prefill, cache=None: positions 0..L-1
    logits, cache = model.step(next_tok, cache) # next_tok [B, 1]; logits [B, 1, V]
    save_checkpoint(dir, model, config, extra={"step": 1000})
    ckpt = load_checkpoint(dir)                 # -> Checkpoint(model, config, extra)

``step`` accepts any number of new tokens ``[B, T]`` (T >= 1) and returns their logits;
feeding a sequence through ``step`` in pieces gives the logits of ``forward`` on the whole
sequence (up to rounding).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import safetensors.torch
import torch
import torch.nn.functional as F
from torch import nn

from sinkalign.errors import CheckpointError, MissingFileError, OutputExistsError
from sinkalign.lm.attention import AttentionCache, build_attention
from sinkalign.lm.checkpoints import CHECKPOINT_CONFIG, CHECKPOINT_WEIGHTS, holds_checkpoint, names_shipped_model, shipped_model
from sinkalign.lm.config import LMConfig
from sinkalign.utils import atomic_write_bytes, atomic_write_text

__all__ = [
    "CHECKPOINT_CONFIG",
    "CHECKPOINT_WEIGHTS",
    "Checkpoint",
    "DNALanguageModel",
    "ModelCache",
    "load_checkpoint",
    "load_checkpoint_config",
    "save_checkpoint",
]

logger = logging.getLogger(__name__)

_FORMAT = "sinkalign.lm/1"


@dataclass(frozen=True)
class ModelCache:
    """Per-layer attention caches after ``offset`` tokens (immutable; ``step`` returns a new one).

    ``history`` holds the last ``input_kmer - 1`` token ids ``[B, input_kmer - 1]`` (start
    padding included) for the k-mer input embedding.
    """

    layers: tuple[AttentionCache, ...]
    offset: int
    history: torch.Tensor | None = None


class SwiGLU(nn.Module):
    """``w_out(silu(w_gate x) * w_up x)``: ``[B, L, D] -> [B, L, D]``."""

    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.w_gate = nn.Linear(d_model, hidden, bias=False)
        self.w_up = nn.Linear(d_model, hidden, bias=False)
        self.w_out = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_out(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    """Pre-norm transformer block: attention then SwiGLU, each a residual branch."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.attn = build_attention(config.attention, config)
        self.mlp_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.mlp = SwiGLU(config.d_model, config.mlp_hidden)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, cache: AttentionCache | None = None, return_cache: bool = False):
        if return_cache:
            a, new_cache = self.attn(self.attn_norm(x), cache=cache, return_cache=True)
        else:
            a, new_cache = self.attn(self.attn_norm(x), cache=cache), None
        x = x + self.drop(a)
        x = x + self.drop(self.mlp(self.mlp_norm(x)))
        return x, new_cache


class DNALanguageModel(nn.Module):
    """Decoder-only pre-norm transformer over nucleotide tokens (see the module docstring)."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        if not isinstance(config, LMConfig):
            raise ValueError(f"config must be an LMConfig, got {type(config).__name__}")
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        # lag s = 1 .. input_kmer - 1: the embedding of the token s positions back
        self.lag_embed = nn.ModuleList(nn.Embedding(config.vocab_size, config.d_model)
                                       for _ in range(config.input_kmer - 1))
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.lm_head = None if config.tie_embeddings else nn.Linear(config.d_model, config.vocab_size, bias=False)
        self._init_weights()

    @torch.no_grad()
    def _init_weights(self) -> None:
        """Embedding and MLP ~ N(0, init_std); MLP output std ``init_std / sqrt(2 n_layers)``;
        norms 1. Attention layers initialise themselves (their ``reset_parameters``)."""
        std = self.config.init_std
        nn.init.normal_(self.embed.weight, std=std)
        for table in self.lag_embed:
            nn.init.normal_(table.weight, std=std)
        if self.lm_head is not None:
            nn.init.normal_(self.lm_head.weight, std=std)
        for block in self.blocks:
            nn.init.normal_(block.mlp.w_gate.weight, std=std)
            nn.init.normal_(block.mlp.w_up.weight, std=std)
            nn.init.normal_(block.mlp.w_out.weight, std=std / (2 * self.config.n_layers) ** 0.5)

    def _check_tokens(self, tokens: torch.Tensor) -> None:
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2:
            shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise ValueError(f"tokens must be a [B, L] tensor, got {shape}")
        if tokens.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise ValueError(f"tokens must be integer ids, got dtype {tokens.dtype}")
        if tokens.shape[1] < 1:
            raise ValueError(f"tokens must hold at least one position, got shape {tuple(tokens.shape)}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.config.vocab_size):
            bad = ((tokens < 0) | (tokens >= self.config.vocab_size)).nonzero()[0].tolist()
            raise ValueError(f"token id {int(tokens[bad[0], bad[1]])} at [batch {bad[0]}, position {bad[1]}] "
                             f"is outside 0..{self.config.vocab_size - 1}")

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        h = self.norm(h)
        if self.lm_head is None:
            return F.linear(h, self.embed.weight)
        return self.lm_head(h)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens [B, L]`` (ids, positions ``0 .. L-1``) -> ``logits [B, L, V]``."""
        self._check_tokens(tokens)
        h = self.drop(self._embed(tokens.long(), self._start_history(tokens)))
        for block in self.blocks:
            h, _ = block(h)
        return self._logits(h)

    def _start_history(self, tokens: torch.Tensor) -> torch.Tensor:
        """The ``[B, input_kmer - 1]`` ids before position 0: the pad id (0 without one)."""
        fill = self.config.pad_id if self.config.pad_id is not None else 0
        return torch.full((tokens.shape[0], self.config.input_kmer - 1), fill, dtype=torch.long,
                          device=tokens.device)

    def _embed(self, tokens: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        """``tokens [B, L]`` after ``history [B, k - 1]`` -> ``[B, L, D]``: the sum over lags
        ``s = 0 .. k - 1`` of the lag-``s`` table at the token ``s`` positions back."""
        h = self.embed(tokens)
        if self.lag_embed:
            ext = torch.cat([history, tokens], dim=1)  # [B, k - 1 + L]
            k1, length = history.shape[1], tokens.shape[1]
            for s, table in enumerate(self.lag_embed, start=1):
                h = h + table(ext[:, k1 - s : k1 - s + length])
        return h

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy (nats) of ``tokens [B, L]`` (``L >= 2``).

        Position ``t`` predicts ``tokens[:, t + 1]``; targets equal to ``config.pad_id`` are
        ignored. Bits per token = ``loss / ln 2``.
        """
        self._check_tokens(tokens)
        if tokens.shape[1] < 2:
            raise ValueError(f"loss needs at least 2 positions, got shape {tuple(tokens.shape)}")
        logits = self(tokens[:, :-1])
        target = tokens[:, 1:].long()
        ignore = self.config.pad_id if self.config.pad_id is not None else -100
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1),
                               ignore_index=ignore)

    def step(self, tokens: torch.Tensor, cache: ModelCache | None = None) -> tuple[torch.Tensor, ModelCache]:
        """Incremental forward for generation.

        Args:
            tokens: ``[B, T]`` new tokens at positions ``cache.offset .. cache.offset + T - 1``
                (``0 ..`` without a cache). ``T = 1`` for token-by-token sampling; a longer
                ``T`` prefills a prompt.
            cache: the :class:`ModelCache` returned by the previous call, or ``None``.
        Returns:
            ``(logits [B, T, V], new_cache)``; ``cache`` itself is left unchanged.
        """
        self._check_tokens(tokens)
        if cache is not None:
            if not isinstance(cache, ModelCache) or len(cache.layers) != len(self.blocks):
                raise ValueError("cache must be the ModelCache returned by step() of this model")
        tokens = tokens.long()
        history = self._start_history(tokens) if cache is None or cache.history is None else cache.history
        if history.shape != (tokens.shape[0], self.config.input_kmer - 1):
            raise ValueError(f"cache history {tuple(history.shape)} does not fit a batch of {tokens.shape[0]} "
                             f"with input_kmer={self.config.input_kmer}")
        h = self.drop(self._embed(tokens, history))
        new_layers = []
        for i, block in enumerate(self.blocks):
            h, c = block(h, None if cache is None else cache.layers[i], return_cache=True)
            new_layers.append(c)
        offset = (0 if cache is None else cache.offset) + tokens.shape[1]
        k1 = self.config.input_kmer - 1
        new_history = torch.cat([history, tokens], dim=1)[:, tokens.shape[1]:] if k1 else history
        return self._logits(h), ModelCache(layers=tuple(new_layers), offset=offset, history=new_history)

    def num_parameters(self, *, trainable_only: bool = False) -> int:
        """Number of parameters (a tied embedding counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)


class Checkpoint(NamedTuple):
    """What :func:`load_checkpoint` returns."""

    model: DNALanguageModel
    config: LMConfig
    extra: dict[str, Any]


def save_checkpoint(path_dir: str | os.PathLike, model: DNALanguageModel, config: LMConfig | None = None,
                    extra: dict[str, Any] | None = None, *, overwrite: bool = False) -> Path:
    """Write ``model.safetensors`` and ``config.json`` into ``path_dir`` (created if needed).

    Each file is written atomically (temporary file + rename); the weights go first, so a
    ``config.json`` is never newer than its weights. ``config`` defaults to ``model.config``
    and must equal it. ``extra`` is any JSON-serialisable dict (step, optimizer settings,
    metrics); it is stored in ``config.json`` under ``"extra"``. Returns the directory.
    A ``path_dir`` that already holds a checkpoint (either file) is refused with
    :class:`~sinkalign.errors.OutputExistsError` unless ``overwrite``.
    """
    held = [name for name in (CHECKPOINT_WEIGHTS, CHECKPOINT_CONFIG) if (Path(path_dir) / name).exists()]
    if held and not overwrite:
        raise OutputExistsError(f"{path_dir} already holds a checkpoint ({', '.join(held)}); pass overwrite=True "
                                "to replace it, or save elsewhere")
    config = model.config if config is None else config
    if config != model.config:
        raise ValueError("config differs from model.config; save the config the model was built with")
    extra = {} if extra is None else dict(extra)
    try:
        meta = json.dumps({"format": _FORMAT, "config": config.to_dict(), "extra": extra}, indent=2, sort_keys=True)
    except TypeError as exc:
        raise ValueError(f"extra must be JSON-serialisable: {exc}") from exc
    path_dir = Path(path_dir)
    path_dir.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    atomic_write_bytes(path_dir / CHECKPOINT_WEIGHTS, safetensors.torch.save(tensors, metadata={"format": _FORMAT}))
    atomic_write_text(path_dir / CHECKPOINT_CONFIG, meta + "\n")
    logger.info("saved checkpoint (%d parameters) to %s", model.num_parameters(), path_dir)
    return path_dir


def _checkpoint_dir(path_dir: str | os.PathLike) -> Path:
    """``path_dir`` as a directory: a shipped model's name (``"default"``, ``"cdiph"``) where no
    checkpoint directory of that name exists gives that model's directory, as ``sinkalign
    generate-dna --model`` reads it (:func:`~sinkalign.lm.checkpoints.names_shipped_model`)."""
    if names_shipped_model(path_dir, taken_as_path=holds_checkpoint):
        if Path(path_dir).exists():  # a folder of that name holding no model (a run is not read here), said
            logger.warning("%s holds no checkpoint directory: model %r is the shipped model (load_model reads a "
                           "training run)", Path(path_dir).resolve(), str(path_dir))
        return shipped_model(path_dir)  # also past a folder of that name holding no model, as load_model reads it
    return Path(path_dir)


def load_checkpoint_config(path_dir: str | os.PathLike) -> LMConfig:
    """The :class:`LMConfig` of a directory written by :func:`save_checkpoint` (or of a shipped
    model by name, as :func:`load_checkpoint` reads it), without loading its weights (it checks
    that they are there, not what they hold: :func:`load_checkpoint` does). Raises as
    :func:`load_checkpoint` does for the directory and ``config.json``."""
    return _read_config(_checkpoint_dir(path_dir))[0]


def _read_config(path_dir: Path) -> tuple[LMConfig, dict[str, Any]]:
    """``(config, meta)`` of checkpoint directory ``path_dir``: both files there, ``config.json`` valid."""
    if not path_dir.is_dir():
        if path_dir.exists():
            raise MissingFileError(f"{path_dir} is a file, not a checkpoint directory")
        raise MissingFileError(f"checkpoint directory not found: {path_dir}")
    cfg_path, w_path = path_dir / CHECKPOINT_CONFIG, path_dir / CHECKPOINT_WEIGHTS
    for p in (cfg_path, w_path):
        if not p.is_file():
            raise MissingFileError(f"checkpoint file not found: {p}")
    try:
        meta = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{cfg_path}: corrupt checkpoint config: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT or "config" not in meta:
        raise CheckpointError(f"{cfg_path}: not a sinkalign.lm checkpoint config (expected format {_FORMAT!r})")
    try:
        config = LMConfig.from_dict(meta["config"])
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"{cfg_path}: invalid model config: {exc}") from exc
    return config, meta


def load_checkpoint(path_dir: str | os.PathLike, *, map_location: str | torch.device = "cpu") -> Checkpoint:
    """Load a directory written by :func:`save_checkpoint`, its model on ``map_location``.

    ``path_dir`` may also name a shipped model (:data:`~sinkalign.lm.checkpoints.SHIPPED_MODELS`:
    ``"default"``, ``"cdiph"``) where no path of that name exists, as ``sinkalign generate-dna
    --model`` reads it; :func:`sinkalign.lm.generate.load_model` also follows a training run
    directory to its newest checkpoint. The model comes back in eval mode (dropout off), ready to
    generate or score; call ``.train()`` on it to train it.

    Raises:
        MissingFileError: the directory, ``config.json`` or ``model.safetensors`` is missing, or a
            shipped model is missing from the installation (a FileNotFoundError).
        CheckpointError: either file is corrupt, the config is invalid, or the weights do not
            match the model the config describes (missing/unexpected keys, shapes); a
            ValueError. Every message names the offending path.
    """
    path_dir = _checkpoint_dir(path_dir)
    config, meta = _read_config(path_dir)
    w_path = path_dir / CHECKPOINT_WEIGHTS
    try:
        tensors = safetensors.torch.load(w_path.read_bytes())
    except Exception as exc:  # safetensors raises its own SafetensorError / OSError types
        raise CheckpointError(f"{w_path}: corrupt safetensors file: {exc}") from exc
    model = DNALanguageModel(config)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"{w_path}: weights do not match the config: missing {missing}, unexpected {unexpected}")
    bad = [f"{k}: {tuple(tensors[k].shape)} != {tuple(v.shape)}" for k, v in expected.items()
           if tuple(tensors[k].shape) != tuple(v.shape)]
    if bad:
        raise CheckpointError(f"{w_path}: weight shapes do not match the config: {'; '.join(bad)}")
    model.to(dtype=tensors["embed.weight"].dtype)  # restore the saved precision
    model.load_state_dict(tensors, strict=True)
    model.to(map_location)
    model.eval()
    extra = meta.get("extra", {})
    return Checkpoint(model=model, config=config, extra=extra if isinstance(extra, dict) else {})
