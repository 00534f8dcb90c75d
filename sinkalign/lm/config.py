"""Typed configuration of the DNA language models (:class:`LMConfig`).

One frozen, keyword-only dataclass holds every option of the model, including the options
of the attention variants (prefixed ``goat_``, ``bam_``, ``sla_``, ``rope_``). Options of
the variants not selected by ``attention`` are validated but otherwise ignored, so that
one JSON schema covers every model. ``to_dict`` / ``from_dict`` round-trip through JSON.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sinkalign.errors import InputError

__all__ = ["ATTENTION_NAMES", "LMConfig"]

#: The attention variants (keys of ``sinkalign.lm.attention.ATTENTIONS``).
ATTENTION_NAMES: tuple[str, ...] = ("goat", "bam", "sla", "rope", "alibi", "nope")

_GOAT_INITS = ("uniform", "alibi", "alibi_sink")
_BAM_INITS = ("uniform", "alibi")
_BAM_IMPLS = ("auto", "chunked", "flex")
_SLA_BACKBONES = ("gla", "retnet")
# The fields every saved config.json has held since the first checkpoint format: from_dict refuses
# a config without them (their defaults are for building a model in Python: a saved model is read
# as saved, never completed from defaults that a later version may change).
_SAVED_REQUIRED = ("vocab_size", "d_model", "n_layers", "n_heads", "attention", "max_train_len")


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{name}={value!r} must be an int")
    if value < minimum:
        raise InputError(f"{name}={value!r} must be >= {minimum}")


def _check_float(name: str, value: Any, *, minimum: float | None = None, strict: bool = False,
                 maximum: float | None = None, max_strict: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{name}={value!r} must be a finite number")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        raise InputError(f"{name}={value!r} must be {'>' if strict else '>='} {minimum}")
    if maximum is not None and (value >= maximum if max_strict else value > maximum):
        raise InputError(f"{name}={value!r} must be {'<' if max_strict else '<='} {maximum}")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InputError(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise InputError(f"{name}={value!r} must be a bool")


@dataclass(frozen=True, kw_only=True)
class LMConfig:
    """Configuration of :class:`sinkalign.lm.DNALanguageModel`.

    Every field but ``attention`` has a default: those of ``sinkalign lm train``, which reads
    them from here (``LMConfig(attention="goat")`` is the model that command trains by default,
    dropout and all). :meth:`from_dict` reads a saved config as saved.

    Core:
        vocab_size: token ids are ``0 .. vocab_size - 1`` (8 for :class:`NucleotideTokenizer`).
        d_model: residual width ``D``; must be divisible by ``n_heads``.
        n_layers, n_heads: depth and heads per layer; head dim ``d_h = d_model // n_heads``.
        attention: one of ``ATTENTION_NAMES``.
        max_train_len: the training context length. It sets length-dependent defaults
            (GOAT's longest Fourier period, the ALiBi-fit range, the sink-feature scale);
            nothing is a table of this size, so any length can be evaluated.
        mlp_ratio: SwiGLU hidden width is ``ceil8(2/3 * mlp_ratio * d_model)`` (the
            parameter count of a plain MLP of width ``mlp_ratio * d_model``).
        dropout: dropout on the embedding and on each residual branch (not inside attention).
        tie_embeddings: output projection shares the token-embedding matrix.
        norm_eps: RMSNorm epsilon. init_std: std of the normal weight initialisation.
        pad_id: target id ignored by ``loss`` (``None``: no target is ignored).
        input_kmer: the input embedding of position ``t`` is the sum of learned embeddings of
            the ``input_kmer`` tokens ``t, t-1, ..`` (one table per lag; positions before the
            sequence start read ``pad_id``, or id 0 when ``pad_id`` is None). ``1`` is the plain
            token embedding. A k-mer input hands every layer the local order of the last
            few bases whatever the attention, which NoPE otherwise has to infer; attention
            stays the only carrier of position beyond ``input_kmer - 1`` lags.

    GOAT (``attention="goat"``): ``goat_n_freqs`` Fourier frequencies R (the positional
    subspace takes ``2R + 1`` of the ``d_h`` query/key dims, content keeps
    ``d_c = d_h - 2R - 1 >= 1``); periods geometric from ``goat_min_period`` to
    ``goat_max_period`` (``None``: ``16 * max_train_len``); ``goat_init`` "uniform" (zero
    prior), "alibi" (Fourier weights least-squares fitted to ALiBi slopes over
    ``max_train_len`` lags) or "alibi_sink" (exact ALiBi through the sink's key-linear
    decay); sink MLP width ``goat_sink_hidden`` over ``goat_sink_n_freqs`` sinusoid pairs.

    BAM (``attention="bam"``): prior ``-exp(theta_a) * (|j - i - mu| + bam_eps) ** theta_b``
    per head; ``bam_init`` "uniform" (theta_b = 0) or "alibi" (theta_b = 1, exp(theta_a) =
    ALiBi slope); ``bam_ssmax`` scalable softmax; ``bam_learn_mu`` learnable location;
    ``bam_impl`` "auto" | "chunked" | "flex"; ``bam_chunk_size`` query rows per block.

    SLA (``attention="sla"``): ``sla_backbone`` "gla" (data-dependent decay, low-rank gate
    of rank ``sla_gate_rank``, temperature ``sla_gla_tau``) or "retnet" (fixed per-head
    decay ``1 - 2**(-5 - h)``); ``sla_chunk_size`` for the chunkwise-parallel form.

    RoPE: ``rope_base``.
    """

    vocab_size: int = 8  # NucleotideTokenizer's (sinkalign.lm.tokenizer imports torch; a test ties the two)
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    attention: str  # required (keyword-only fields may follow defaults)
    max_train_len: int = 256  # sinkalign lm train --seq-len
    mlp_ratio: float = 4.0
    dropout: float = 0.0
    tie_embeddings: bool = True
    norm_eps: float = 1e-5
    init_std: float = 0.02
    pad_id: int | None = 5  # NucleotideTokenizer's PAD_ID
    input_kmer: int = 1
    # GOAT
    goat_n_freqs: int = 4
    goat_min_period: float = 3.0
    goat_max_period: float | None = None
    goat_init: str = "uniform"
    goat_sink_hidden: int = 16
    goat_sink_n_freqs: int = 4
    # BAM
    bam_init: str = "uniform"
    bam_ssmax: bool = True
    bam_eps: float = 1e-5
    bam_learn_mu: bool = False
    bam_impl: str = "auto"
    bam_chunk_size: int = 128
    # SLA
    sla_backbone: str = "gla"
    sla_chunk_size: int = 32
    sla_gate_rank: int = 16
    sla_gla_tau: float = 16.0
    # RoPE
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        _check_int("vocab_size", self.vocab_size, 1)
        _check_int("d_model", self.d_model, 1)
        _check_int("n_layers", self.n_layers, 1)
        _check_int("n_heads", self.n_heads, 1)
        if self.d_model % self.n_heads:
            raise InputError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        _check_choice("attention", self.attention, ATTENTION_NAMES)
        _check_int("max_train_len", self.max_train_len, 1)
        _check_float("mlp_ratio", self.mlp_ratio, minimum=0.0, strict=True)
        _check_float("dropout", self.dropout, minimum=0.0, maximum=1.0, max_strict=True)
        _check_bool("tie_embeddings", self.tie_embeddings)
        _check_float("norm_eps", self.norm_eps, minimum=0.0, strict=True)
        _check_float("init_std", self.init_std, minimum=0.0, strict=True)
        if self.pad_id is not None:
            _check_int("pad_id", self.pad_id, 0)
            if self.pad_id >= self.vocab_size:
                raise InputError(f"pad_id={self.pad_id} must be < vocab_size={self.vocab_size}")
        _check_int("input_kmer", self.input_kmer, 1)
        # GOAT
        _check_int("goat_n_freqs", self.goat_n_freqs, 1)
        if self.attention == "goat" and self.head_dim - 2 * self.goat_n_freqs - 1 < 1:
            need = 2 * self.goat_n_freqs + 2
            raise InputError(
                f"goat_n_freqs={self.goat_n_freqs} leaves no content dims: head_dim={self.head_dim} "
                f"(d_model {self.d_model} / n_heads {self.n_heads}) must be >= 2 * goat_n_freqs + 2 = {need}: "
                f"a d_model of at least {need * self.n_heads} with {self.n_heads} heads (--d-model, --n-heads), "
                f"or a smaller goat_n_freqs (--model-option goat_n_freqs=N)"
            )
        _check_float("goat_min_period", self.goat_min_period, minimum=2.0)
        if self.goat_max_period is not None:
            _check_float("goat_max_period", self.goat_max_period, minimum=self.goat_min_period)
        _check_choice("goat_init", self.goat_init, _GOAT_INITS)
        _check_int("goat_sink_hidden", self.goat_sink_hidden, 1)
        _check_int("goat_sink_n_freqs", self.goat_sink_n_freqs, 1)
        # BAM
        _check_choice("bam_init", self.bam_init, _BAM_INITS)
        _check_bool("bam_ssmax", self.bam_ssmax)
        _check_float("bam_eps", self.bam_eps, minimum=0.0, strict=True)
        _check_bool("bam_learn_mu", self.bam_learn_mu)
        _check_choice("bam_impl", self.bam_impl, _BAM_IMPLS)
        _check_int("bam_chunk_size", self.bam_chunk_size, 1)
        # SLA
        _check_choice("sla_backbone", self.sla_backbone, _SLA_BACKBONES)
        _check_int("sla_chunk_size", self.sla_chunk_size, 1)
        _check_int("sla_gate_rank", self.sla_gate_rank, 1)
        _check_float("sla_gla_tau", self.sla_gla_tau, minimum=0.0, strict=True)
        # RoPE
        _check_float("rope_base", self.rope_base, minimum=1.0, strict=True)

    @property
    def head_dim(self) -> int:
        """``d_h = d_model // n_heads``."""
        return self.d_model // self.n_heads

    @property
    def mlp_hidden(self) -> int:
        """SwiGLU hidden width: ``2/3 * mlp_ratio * d_model`` rounded up to a multiple of 8."""
        raw = 2.0 * self.mlp_ratio * self.d_model / 3.0
        return max(8, 8 * math.ceil(raw / 8))

    @property
    def goat_periods(self) -> tuple[float, float]:
        """``(min_period, max_period)`` of GOAT's geometric Fourier frequencies."""
        hi = self.goat_max_period if self.goat_max_period is not None else 16.0 * self.max_train_len
        return float(self.goat_min_period), float(max(hi, self.goat_min_period))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict of every field."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LMConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError``, and so does a missing key
        of the fields every saved config holds (``vocab_size``, ``d_model``, ``n_layers``,
        ``n_heads``, ``attention``, ``max_train_len``): their defaults never fill a saved config. A
        field added later (``input_kmer``) takes its default, which is what older models were."""
        if not isinstance(data, Mapping):
            raise InputError(f"LMConfig.from_dict expects a mapping, got {type(data).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise InputError(f"unknown LMConfig keys {unknown}; valid keys: {sorted(fields)}")
        missing = [n for n in _SAVED_REQUIRED if n not in data]
        if missing:
            raise InputError(f"LMConfig is missing required keys {missing}")
        kwargs = dict(data)
        # JSON has one number type: accept 4 for a float field (4.0 for an int is rejected).
        for name in ("mlp_ratio", "dropout", "norm_eps", "init_std", "goat_min_period",
                     "goat_max_period", "bam_eps", "sla_gla_tau", "rope_base"):
            if isinstance(kwargs.get(name), int) and not isinstance(kwargs.get(name), bool):
                kwargs[name] = float(kwargs[name])
        return cls(**kwargs)
