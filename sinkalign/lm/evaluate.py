"""Evaluation of the DNA language models: held-out bits/base (with an order-k Markov
baseline computed in the same run), length extrapolation, a DNA passkey test, and
completion quality (identity and GC-trajectory correlation with bootstrap intervals).

Scoring conventions (every function here):

* Bits/base is the mean of ``-log2 P(x_j | x_<j)`` over the *scored* bases. The LM's own
  definition (:func:`heldout_bits_per_base`, the extrapolation section): every A/C/G/T
  target is scored, an ``N`` target is skipped, and contexts may contain N.
* The held-out comparison with the Markov baseline is paired: both are averaged over the
  same bases, those both can score. The order-k chain has no probability for a base whose
  k preceding bases hold an N (nor for the first bases of a record without a prefix), while
  the LM scores it; averaging each model over its own bases would compare different sets
  (the LM's including the hard bases just after N runs), so the section's ``bits_per_base``,
  ``n_scored``, ``markov`` figures and ``delta_vs_markov`` all use the shared bases (the
  intersection), and ``all_targets`` gives the LM's own figure over every A/C/G/T target.
  Without N the two sets are equal.
* Held-out split: ``train_val_split`` of every record (the last ``val_fraction``); the
  first validation bases are conditioned on the end of the training split that precedes
  them, as the Markov reference figure (1.952 bits/base at order 6) is.
* Coordinates are 0-based, half-open.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from sinkalign.errors import InputError
from sinkalign.lm.data import as_model_bases, read_genome, train_val_split
from sinkalign.lm.gc import gc_trajectory, trajectory_correlation
from sinkalign.lm.generate import generate_batch
from sinkalign.lm.markov import MarkovModel
from sinkalign.lm.model import DNALanguageModel
from sinkalign.lm.seqstats import js_divergence, kmer_spectrum, orf_fraction
from sinkalign.lm.tokenizer import NucleotideTokenizer

__all__ = [
    "SECTIONS",
    "BitsPerBase",
    "Estimate",
    "EvalConfig",
    "EvalReport",
    "bootstrap_ci",
    "evaluate_lm",
    "heldout_bits_per_base",
]

logger = logging.getLogger(__name__)

_LN2 = math.log(2.0)
_N_ID = 4


class BitsPerBase(NamedTuple):
    """Result of :func:`heldout_bits_per_base`: mean bits over ``n_scored`` A/C/G/T targets."""

    bits_per_base: float
    n_scored: int
    context: int
    stride: int


def _nan_to_none(x: float) -> float | None:
    return None if math.isnan(x) else x


def _check_pos_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise InputError(f"{name}={value!r} must be a positive integer")
    return int(value)


def _strided_windows(first: int, n: int, context: int, stride: int) -> Iterator[tuple[int, int, int]]:
    """Windows ``(s, a, b)``: input ``T[s : b-1]`` scores targets ``T[a : b]``.

    Targets ``first .. n-1`` are covered once, in blocks of ``stride``; each target ``j``
    is predicted from ``j - s >= context - stride + 1`` preceding tokens (fewer only at
    the start of ``T``).
    """
    for a in range(first, n, stride):
        b = min(a + stride, n)
        yield max(0, b - 1 - context), a, b



def _target_bits(model: DNALanguageModel, tokens: torch.Tensor, first: int, *, context: int, stride: int,
                 batch_size: int, device: torch.device, autocast_bf16: bool) -> np.ndarray:
    """Bits ``-log2 P(T[j] | T[s:j])`` for every target ``j >= first`` of ``tokens [n]``.

    Returns float64 ``[n]``: NaN before ``first`` and at N targets. Windows as in
    :func:`_strided_windows`; equal-length windows are batched.
    """
    n = tokens.numel()
    out = torch.full((n,), float("nan"), dtype=torch.float64)
    tokens = tokens.to(device)

    def run(windows: list[tuple[int, int, int]]) -> None:
        inputs = torch.stack([tokens[s : b - 1] for s, _, b in windows])  # [w, Lw]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                            enabled=autocast_bf16 and device.type == "cuda"):
            logits = model(inputs)  # [w, Lw, V]
        for row, (s, a, b) in enumerate(windows):
            lp = F.log_softmax(logits[row, a - 1 - s : b - 1 - s].double(), dim=-1)  # [b-a, V]
            nll = -lp.gather(1, tokens[a:b, None]).squeeze(1) / _LN2
            out[a:b] = nll.cpu()

    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            batch: list[tuple[int, int, int]] = []
            for win in _strided_windows(first, n, context, stride):
                s, _, b = win
                if batch and (b - 1 - s) != (batch[0][2] - 1 - batch[0][0]):
                    run(batch)
                    batch = []
                batch.append(win)
                if len(batch) == batch_size:
                    run(batch)
                    batch = []
            if batch:
                run(batch)
    finally:
        model.train(was_training)
    bits = out.numpy()
    bits[(tokens == _N_ID).cpu().numpy()] = np.nan
    return bits


def _encode(seq: str, what: str) -> torch.Tensor:
    """Token ids of ``seq``, its IUPAC ambiguity codes and X read as N (as a genome file is read)."""
    try:
        return NucleotideTokenizer().encode(as_model_bases(seq) if isinstance(seq, str) else seq)
    except ValueError as exc:
        raise InputError(f"{what}: {exc}") from None


def _heldout_target_bits(
    model: DNALanguageModel,
    seq: str,
    *,
    context: int,
    stride: int | None = None,
    prefix: str = "",
    batch_size: int = 16,
    max_bases: int | None = None,
    device: str | torch.device | None = None,
    autocast_bf16: bool = False,
) -> tuple[np.ndarray, int, int]:
    """``(bits [len(seq[:max_bases])], context, stride)``: the bits of each base of ``seq`` as
    :func:`heldout_bits_per_base` scores them, NaN where a base is not scored (an N, or the
    first base without ``prefix``)."""
    context = _check_pos_int("context", context)
    stride = max(1, context // 2) if stride is None else _check_pos_int("stride", stride)
    if stride > context:
        raise InputError(f"stride={stride} must not exceed context={context}")
    batch_size = _check_pos_int("batch_size", batch_size)
    if max_bases is not None:
        seq = seq[: _check_pos_int("max_bases", max_bases)]
    tail = prefix[max(0, len(prefix) - context) :]
    tail_ids = _encode(tail, f"prefix (its last {len(tail)} bases)")
    tokens = torch.cat([tail_ids, _encode(seq, "evaluation sequence")])  # [n]
    n, m = tokens.numel(), tail_ids.numel()
    first = max(m, 1)
    if first >= n:
        raise InputError(f"nothing to score: sequence of length {len(seq)} with {m} prefix bases")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    bits = _target_bits(model, tokens, first, context=context, stride=stride, batch_size=batch_size,
                        device=device, autocast_bf16=autocast_bf16)
    return bits[m:], context, stride


def heldout_bits_per_base(
    model: DNALanguageModel,
    seq: str,
    *,
    context: int,
    stride: int | None = None,
    prefix: str = "",
    batch_size: int = 16,
    max_bases: int | None = None,
    device: str | torch.device | None = None,
    autocast_bf16: bool = False,
) -> BitsPerBase:
    """Sliding-window bits/base of ``model`` on ``seq`` (strided evaluation).

    Every base of ``seq`` (the first ``max_bases`` of it, if given) is scored once; N
    targets are skipped. Targets are taken in blocks of ``stride`` bases; a block is
    predicted by one forward pass over the (at most) ``context`` tokens that end just
    before its last base, so every scored base sees at least ``context - stride + 1``
    bases of context (fewer only where the available sequence is shorter). ``prefix``
    (e.g. the training split that directly precedes a validation split) supplies the
    context of the first bases; without it the first base of ``seq`` is not scored.

    Args:
        model: the language model (evaluated in eval mode; its mode is restored).
        seq: bases over ``ACGTN`` (either case; IUPAC ambiguity codes and ``X`` are read as N,
            as in a genome file).
        context: tokens per forward pass (usually the training length).
        stride: new targets per window, ``1 <= stride <= context`` (default ``context // 2``).
        prefix: preceding sequence; only its last ``context`` bases are used.
        batch_size: windows per forward pass.
        max_bases: score only ``seq[:max_bases]``.
        device: where to run (default: the model's device).
        autocast_bf16: bf16 autocast (CUDA only).

    Raises:
        ValueError: a bad argument, a non-ACGTN character (with its position), or nothing
            to score.
    """
    bits, context, stride = _heldout_target_bits(model, seq, context=context, stride=stride, prefix=prefix,
                                                 batch_size=batch_size, max_bases=max_bases, device=device,
                                                 autocast_bf16=autocast_bf16)
    scored = bits[np.isfinite(bits)]
    if scored.size == 0:
        raise InputError("nothing to score: every target base is N")
    return BitsPerBase(float(scored.mean()), int(scored.size), context, stride)


# ----------------------------------------------------------------------------- statistics


class Estimate(NamedTuple):
    """Mean of ``n`` per-item values with a percentile-bootstrap confidence interval."""

    mean: float
    ci_low: float
    ci_high: float
    n: int


def bootstrap_ci(values: Sequence[float] | np.ndarray, *, n_boot: int = 1000, level: float = 0.95,
                 seed: int = 0) -> Estimate:
    """Mean of the finite ``values`` and its percentile-bootstrap ``level`` interval.

    NaN / inf entries are dropped first (``n`` counts the rest). With fewer than two
    values the interval is ``(mean, mean)`` (NaN for none).
    """
    _check_pos_int("n_boot", n_boot)
    if not 0.0 < level < 1.0:
        raise InputError(f"{level=} must be in (0, 1)")
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if x.size < 2:
        return Estimate(mean, mean, mean, int(x.size))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return Estimate(mean, float(lo), float(hi), int(x.size))


# ----------------------------------------------------------------------------- configuration


@dataclass(frozen=True, kw_only=True)
class EvalConfig:
    """Configuration of :func:`evaluate_lm`.

    Held-out split: the last ``val_fraction`` of every record of ``fasta``. Records in which every
    base is N are left out (with a warning; the report's ``data.skipped_records`` names them), and
    held-out bits/base skip a record whose held-out part is all N (``heldout.skipped_records``).

    * Bits/base: windows of ``context`` tokens (None: the model's training length)
      advancing by ``stride`` (None: ``context // 2``), over the first ``max_bases``
      held-out bases of each record (None: all). Markov baseline of order
      ``markov_order``, or (None) the best of ``markov_orders`` chosen on the tail of the
      training split (its last ``val_fraction``, after fitting on the rest), then refitted
      on the whole training split. The LM and the chain are compared on exactly the same
      bases: those both score (``heldout.bits_per_base``, ``n_scored``, ``markov``,
      ``delta_vs_markov``), which leaves out the bases whose order-k context holds an N; the
      LM over every A/C/G/T target it scores is ``heldout.all_targets``.
    * Extrapolation: for each multiple ``m`` in ``length_multipliers``, bits/base on the same
      ``extrapolation_bases`` held-out targets (those after the first ``max(m) * train_len``
      bases of the longest held-out split), each predicted from between ``m * train_len -
      stride + 1`` and ``m * train_len`` preceding bases (strided windows, ``stride =
      extrapolation_stride``, None: ``train_len // 2``): the context a base sees is held fixed
      at each length, so the change with length is the model's; ``delta_vs_1x`` is the mean
      paired difference on the same bases.
    * Passkey: ``passkey_trials`` contexts of ``m * train_len`` real held-out bases for
      each ``m`` in ``passkey_multipliers``; at 10% of the context a random cue
      (``passkey_cue_len`` bases) and a random key (``passkey_k`` bases) are planted; the
      context ends with the cue again, and the key must be reproduced by greedy decoding.
    * Completion: ``completion_prompts`` prompts of ``prompt_len`` (None: the training
      length) held-out bases at random starts, continued by ``completion_len`` bases
      (sampling ``temperature``, ``top_k``, ``top_p``); per prompt the identity to the true
      continuation, the Pearson r of the GC trajectories (window ``gc_window``: the GOAT
      paper's 200-base continuations and 25-base window; window-level, within each prompt) and
      the fraction of the continuation
      inside open reading frames of at least ``orf_min_len`` bases on either strand (ORFs
      found on prompt + continuation; the true continuation's is reported beside it); over
      all prompts the Jensen-Shannon divergence (bits) of the pooled ``kmer_k``-mer spectrum
      of the continuations from that of the true ones (``kmer_js_noise_floor``: the true
      continuations of the even prompts against those of the odd ones); and across prompts the
      Pearson r of each continuation's GC fraction against the true continuation's
      (``gc_between_prompts_r``: whether completions follow the local composition of their
      prompt, the between-prompt variation the window-level r leaves out) with the mean GC of
      both. The Markov baseline continues the same prompts.
    * Intervals: percentile bootstrap, ``n_boot`` resamples at level ``ci_level``.
    """

    fasta: str
    #: what messages and the report call the FASTA (default: ``fasta``; ``<stdin>`` for a copy of
    #: standard input, whose temporary path means nothing to a user)
    name: str | None = None
    val_fraction: float = 0.1
    context: int | None = None
    stride: int | None = None
    max_bases: int | None = None
    markov_order: int | None = None
    markov_orders: tuple[int, ...] = tuple(range(13))
    length_multipliers: tuple[int, ...] = (1, 2, 4, 8, 16)
    extrapolation_bases: int = 8192
    extrapolation_stride: int | None = None
    passkey_multipliers: tuple[int, ...] = (1, 2, 4)
    passkey_trials: int = 50
    passkey_k: int = 16
    passkey_cue_len: int = 16
    completion_prompts: int = 100
    prompt_len: int | None = None
    completion_len: int = 200
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    gc_window: int = 25
    orf_min_len: int = 300
    kmer_k: int = 4
    n_boot: int = 1000
    ci_level: float = 0.95
    seed: int = 0
    batch_size: int = 16
    device: str = "cpu"
    sections: tuple[str, ...] = ("heldout", "extrapolation", "passkey", "completion")

    @property
    def label(self) -> str:
        """The FASTA as messages and the report name it: :attr:`name`, else :attr:`fasta`."""
        return self.name or self.fasta

    def __post_init__(self) -> None:
        if not isinstance(self.fasta, str) or not self.fasta:
            raise InputError(f"fasta={self.fasta!r} must be a non-empty path string")
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise InputError(f"name={self.name!r} must be a non-empty string or None")
        if not 0.0 < self.val_fraction < 1.0:
            raise InputError(f"val_fraction={self.val_fraction!r} must be in (0, 1)")
        for name in ("context", "stride", "max_bases", "prompt_len", "top_k", "extrapolation_stride"):
            if getattr(self, name) is not None:
                _check_pos_int(name, getattr(self, name))
        for name in ("extrapolation_bases", "passkey_trials", "passkey_k", "passkey_cue_len",
                     "completion_prompts", "gc_window", "n_boot", "batch_size", "orf_min_len", "kmer_k"):
            _check_pos_int(name, getattr(self, name))
        if self.markov_order is not None and (isinstance(self.markov_order, bool)
                                              or not isinstance(self.markov_order, int)
                                              or not 0 <= self.markov_order <= 30):
            raise InputError(f"markov_order={self.markov_order!r} must be an integer in [0, 30]")
        if not self.markov_orders or any(isinstance(o, bool) or not isinstance(o, int) or not 0 <= o <= 30
                                         for o in self.markov_orders):
            raise InputError(f"markov_orders={self.markov_orders!r} must be a non-empty tuple of ints in [0, 30]")
        for name in ("length_multipliers", "passkey_multipliers"):
            vals = getattr(self, name)
            if not isinstance(vals, tuple) or not vals or any(
                    isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in vals):
                raise InputError(f"{name}={vals!r} must be a non-empty tuple of positive ints")
        if self.completion_len <= self.gc_window:
            raise InputError(f"completion_len={self.completion_len} must exceed gc_window={self.gc_window} (--completion-len, "
                             "--gc-window)")
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) \
                or not 0 <= self.temperature < math.inf:
            raise InputError(f"temperature={self.temperature!r} must be a finite number >= 0")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise InputError(f"top_p={self.top_p!r} must be in (0, 1]")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise InputError(f"seed={self.seed!r} must be a non-negative integer")
        if not 0.0 < self.ci_level < 1.0:
            raise InputError(f"ci_level={self.ci_level!r} must be in (0, 1)")
        if self.device not in ("cpu", "cuda"):
            raise InputError(f"device={self.device!r} is not one of 'cpu', 'cuda'")
        bad = sorted(set(self.sections) - set(SECTIONS))
        if bad or not self.sections:
            raise InputError(f"sections={self.sections!r}: valid sections are {', '.join(SECTIONS)}")


SECTIONS = ("heldout", "extrapolation", "passkey", "completion")


@dataclass(frozen=True)
class EvalReport:
    """Everything :func:`evaluate_lm` measured; ``to_dict()`` gives the JSON document.

    ``heldout``, ``extrapolation``, ``passkey`` and ``completion`` are ``None`` for a
    section that was not run.
    """

    model: dict[str, Any]
    data: dict[str, Any]
    heldout: dict[str, Any] | None
    extrapolation: dict[str, Any] | None
    passkey: dict[str, Any] | None
    completion: dict[str, Any] | None
    elapsed_s: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------- sections


class _Split(NamedTuple):
    chrom: str
    train: str
    val: str


def _splits(config: EvalConfig) -> tuple[list[_Split], list[dict[str, Any]]]:
    """The records' ``(train, held-out)`` splits, and the records left out (every base N: nothing to
    score or fit), each as ``{"id", "length", "reason"}``."""
    out, skipped = [], []
    for rid, seq in read_genome(config.fasta):
        if seq.count("N") == len(seq):
            skipped.append({"id": rid, "length": len(seq), "reason": "every base is N"})
            continue
        try:
            tr, va = train_val_split(seq, config.val_fraction)
        except ValueError as exc:
            raise InputError(f"{config.label}: record {rid!r}: {exc}") from None
        out.append(_Split(rid, tr, va))
    if skipped:
        logger.warning("%s: skipped %d record(s) in which every base is N: %s", config.label, len(skipped),
                       ", ".join(repr(r["id"]) for r in skipped))
    if not out:
        raise InputError(f"{config.label}: every base of every record is N: nothing to evaluate")
    return out, skipped


class _Markov(NamedTuple):
    model: MarkovModel
    selection: str  # "fixed" | "train-tail"
    sweep: dict[int, float] | None  # bits/base on the training tail per order (train-tail only)


def _fit_markov(splits: list[_Split], config: EvalConfig) -> _Markov:
    """Fixed order, or the best of ``markov_orders`` on the training split's tail; refit on all training data.

    For the choice, each record's training split is split again (its last ``val_fraction``
    is the tuning part, conditioned on what precedes it); no held-out base is looked at.
    """
    sweep: dict[int, float] | None = None
    if config.markov_order is not None:
        order, selection = config.markov_order, "fixed"
    else:
        selection = "train-tail"
        fit_part, tune_part = [], []
        for sp in splits:
            if len(sp.train) >= 2:
                a, b = train_val_split(sp.train, config.val_fraction)
                fit_part.append(a)
                tune_part.append((b, a))
        sweep = {}
        for k in config.markov_orders:
            model = _fit_order(k, fit_part, splits, config, parts=2)
            lps = np.concatenate([model.log2_probs(b, prefix=a) for b, a in tune_part]) if tune_part else np.zeros(0)
            scored = lps[np.isfinite(lps)]
            if scored.size:  # else no base of the tail is scored at this order (N in every window)
                sweep[int(k)] = float(-scored.mean())
        if not sweep:
            raise InputError(f"{config.label}: no base of the training splits' tails can be scored by the Markov "
                             f"baseline, whose order is chosen there; give a fixed --markov-order")
        order = min(sweep, key=lambda o: (sweep[o], o))
        logger.info("Markov order %d chosen on the training tail", order)
    return _Markov(_fit_order(order, [sp.train for sp in splits], splits, config, parts=1), selection, sweep)


def _fit_order(order: int, seqs: list[str], splits: list[_Split], config: EvalConfig, *, parts: int) -> MarkovModel:
    """``MarkovModel(order).fit(seqs)``; when the sequences hold no N-free ``order + 1``-mer, an
    :class:`InputError` saying how long a record must be (``seqs`` is what is left of each record
    after ``parts`` train/validation splits: 1 to fit, 2 to choose the order)."""
    try:
        return MarkovModel(order).fit(seqs)
    except ValueError:  # the records were read and checked: too short (or N everywhere)
        pass
    top = max(config.markov_orders) if parts == 2 else order  # choosing the order fits every one of them
    frac = 1.0 - config.val_fraction  # about what a split keeps; the exact length is searched below
    need = max(top + 1, int((top + 1) / frac**parts) - 2)
    while _kept(need, config.val_fraction, parts) < top + 1:
        need += 1
    what = (f"choosing its order ({min(config.markov_orders)}-{top}) fits order {top} on the first "
            f"{100 * frac**parts:.0f}% of each record" if parts == 2 else
            f"order {order} is fitted on the first {100 * frac:.0f}% of each record")
    longest = max(len(sp.train) + len(sp.val) for sp in splits)
    raise InputError(f"{config.label}: too little sequence for the Markov baseline: {what}, which needs a record "
                     f"of at least {need} bases without N (the longest here has {longest}); give longer sequences, "
                     f"a{' lower' if parts == 1 else ''} fixed --markov-order, or leave out the heldout and "
                     f"completion sections")


def _kept(n: int, val_fraction: float, parts: int) -> int:
    """The length of the training part of a record of ``n`` bases after ``parts`` splits."""
    for _ in range(parts):
        try:
            n = len(train_val_split("A" * n, val_fraction)[0])
        except ValueError:
            return 0
    return n


def _heldout_section(model: DNALanguageModel, splits: list[_Split], config: EvalConfig, context: int,
                     device: torch.device, markov: _Markov) -> dict[str, Any]:
    stride = config.stride if config.stride is not None else max(1, context // 2)
    if stride > context:
        raise InputError(f"stride={stride} must not exceed context={context}")
    lm_bits, mk_bits, all_n = [], [], []
    for sp in splits:
        part = sp.val[: config.max_bases] if config.max_bases else sp.val
        if part.count("N") == len(part):  # no target to score in this record's held-out part
            all_n.append(sp.chrom)
            continue
        bits, _, _ = _heldout_target_bits(model, part, context=context, stride=stride, prefix=sp.train,
                                          batch_size=config.batch_size, device=device,
                                          autocast_bf16=device.type == "cuda")
        lm_bits.append(bits)
        mk_bits.append(-markov.model.log2_probs(part, prefix=sp.train))  # [len(part)], NaN where not scored
    if all_n:
        logger.warning("%s: held-out bits/base skip %d record(s) whose held-out part is all N: %s", config.label,
                       len(all_n), ", ".join(map(repr, all_n)))
    if not lm_bits:
        raise InputError(f"{config.label}: the held-out part (the last {config.val_fraction:g}) of every record is "
                         f"all N: nothing to score")
    lm_all, mk_all = np.concatenate(lm_bits), np.concatenate(mk_bits)
    lm_ok = np.isfinite(lm_all)
    # the comparison is paired: both models on exactly the same bases, those both score (an
    # N target neither; a base whose order-k context holds an N only the LM)
    shared = lm_ok & np.isfinite(mk_all)
    n = int(shared.sum())
    if n == 0:
        raise InputError(f"{config.label}: no held-out base can be scored by the order-{markov.model.order} Markov "
                         f"baseline (an N within {markov.model.order} bases before every one): give a lower "
                         "--markov-order")
    lm_bpb, mk_bpb = float(lm_all[shared].mean()), float(mk_all[shared].mean())
    mk: dict[str, Any] = {"order": markov.model.order, "order_selection": markov.selection,
                          "bits_per_base": mk_bpb, "n_scored": n, "pseudocount": markov.model.pseudocount}
    if markov.sweep is not None:
        mk["train_tail_sweep"] = {str(k): v for k, v in markov.sweep.items()}
    return {"bits_per_base": lm_bpb, "n_scored": n,
            "scored": "A/C/G/T targets that the Markov baseline scores too (no N among its order preceding bases)",
            "all_targets": {"bits_per_base": float(lm_all[lm_ok].mean()), "n_scored": int(lm_ok.sum())},
            "context": context, "stride": stride, "min_context": context - stride + 1, "markov": mk,
            "delta_vs_markov": lm_bpb - mk_bpb, "skipped_records": all_n}


def _extrapolation_section(model: DNALanguageModel, splits: list[_Split], config: EvalConfig, train_len: int,
                           device: torch.device) -> dict[str, Any]:
    """Bits/base on the same held-out targets at every context length, the context each target
    sees held fixed per length (strided windows), so a change with length is the model's and
    not the averaging of non-overlapping windows (where a base sees 1..length tokens)."""
    wmax = max(config.length_multipliers) * train_len
    stride = config.extrapolation_stride or max(1, train_len // 2)
    val = max((sp.val for sp in splits), key=len)
    n_targets = min(config.extrapolation_bases, len(val) - wmax)
    if n_targets < 1:
        raise InputError(f"the longest held-out split ({len(val)} bases) is too short for a window of "
                         f"{wmax} (= {max(config.length_multipliers)} x training length {train_len}) and one target")
    tokens = _encode(val[: wmax + n_targets], "held-out sequence")
    rows, per_base = [], {}
    for mult in config.length_multipliers:
        w = mult * train_len
        step = min(stride, w)
        bits = _target_bits(model, tokens, wmax, context=w, stride=step, batch_size=max(1, config.batch_size // mult),
                            device=device, autocast_bf16=device.type == "cuda")[wmax:]  # [n_targets]
        ok = np.isfinite(bits)
        per_base[mult] = bits
        rows.append({"multiplier": mult, "length": w, "stride": step, "context_min": w - step + 1, "context_max": w,
                     "bits_per_base": float(bits[ok].mean()), "n_scored": int(ok.sum())})
        logger.info("extrapolation %dx (%d, stride %d): %.4f bits/base", mult, w, step, rows[-1]["bits_per_base"])
    ref = per_base.get(1)
    for r in rows:
        if ref is None:
            r["delta_vs_1x"] = None
            continue
        diff = per_base[r["multiplier"]] - ref
        diff = diff[np.isfinite(diff)]
        r["delta_vs_1x"] = float(diff.mean())  # the same bases: a paired difference
    return {"train_len": train_len, "protocol": "fixed-context", "stride": stride, "first_target": wmax,
            "n_targets": n_targets,
            "windows": (f"the same {n_targets} held-out targets (after the first {wmax} bases) at every length; at "
                        "length w each target is predicted from between w - stride + 1 and w preceding bases"),
            "rows": rows}


def _random_bases(rng: np.random.Generator, k: int) -> str:
    return "".join("ACGT"[i] for i in rng.integers(0, 4, size=k))


def _passkey_section(model: DNALanguageModel, splits: list[_Split], config: EvalConfig, train_len: int) -> dict:
    rng = np.random.default_rng([config.seed, 1])
    k, cue_len = config.passkey_k, config.passkey_cue_len
    rows = []
    for mult in config.passkey_multipliers:
        length = mult * train_len
        p = length // 10
        if p + 2 * cue_len + k > length:
            raise InputError(f"passkey context {length} ({mult} x the model's training length {train_len}) is too short "
                             f"for cue {cue_len} + key {k} (twice): give longer --passkey-lengths, or leave passkey "
                             "out of --sections")
        pool = [sp.val for sp in splits if len(sp.val) >= length]
        if not pool:
            raise InputError(f"no held-out split holds a passkey context of {length} bases: give shorter "
                             "--passkey-lengths or a larger --val-fraction, or leave passkey out of --sections")
        prompts, keys = [], []
        for _ in range(config.passkey_trials):
            src = pool[int(rng.integers(len(pool)))]
            s = int(rng.integers(0, len(src) - length + 1))
            ctx = src[s : s + length]
            cue, key = _random_bases(rng, cue_len), _random_bases(rng, k)
            filler = ctx[p : length - 2 * cue_len - k]
            prompts.append(ctx[:p] + cue + key + filler + cue)
            keys.append(key)
        got: list[str] = []
        for i in range(0, len(prompts), config.batch_size):
            got += generate_batch(model, prompts[i : i + config.batch_size], k, temperature=0.0)
        per_base = np.array([np.mean([a == b for a, b in zip(g, key)]) for g, key in zip(got, keys)])
        exact = np.array([float(g == key) for g, key in zip(got, keys)])
        acc = bootstrap_ci(per_base, n_boot=config.n_boot, level=config.ci_level, seed=config.seed)
        rows.append({"multiplier": mult, "length": length, "key_position": p + cue_len,
                     "distance": length - (p + cue_len), "base_accuracy": acc._asdict(),
                     "exact_match_rate": float(exact.mean()), "trials": len(prompts)})
        logger.info("passkey %dx: base accuracy %.3f, exact %.3f", mult, acc.mean, exact.mean())
    return {"k": k, "cue_len": cue_len, "chance_base_accuracy": 0.25, "decoding": "greedy", "rows": rows}


def _completion_section(model: DNALanguageModel, splits: list[_Split], config: EvalConfig, prompt_len: int,
                        markov: MarkovModel | None) -> dict[str, Any]:
    rng = np.random.default_rng([config.seed, 2])
    span = prompt_len + config.completion_len
    pool = [sp for sp in splits if len(sp.val) >= span]
    if not pool:
        raise InputError(f"no held-out split holds a prompt + completion of {span} bases")
    weights = np.array([len(sp.val) - span + 1 for sp in pool], dtype=np.float64)
    prompts, truths = [], []
    for _ in range(config.completion_prompts):
        sp = pool[int(rng.choice(len(pool), p=weights / weights.sum()))]
        s = int(rng.integers(0, len(sp.val) - span + 1))
        prompts.append(sp.val[s : s + prompt_len])
        truths.append(sp.val[s + prompt_len : s + span])
    gen: list[str] = []
    for bi, i in enumerate(range(0, len(prompts), config.batch_size)):
        gen += generate_batch(model, prompts[i : i + config.batch_size], config.completion_len,
                              temperature=config.temperature, top_k=config.top_k, top_p=config.top_p,
                              seed=config.seed * 100_003 + bi)

    def ci(values):
        return bootstrap_ci(values, n_boot=config.n_boot, level=config.ci_level, seed=config.seed)._asdict()

    true_spectra = np.stack([kmer_spectrum(t, config.kmer_k) for t in truths])
    gc_true = np.array([gc_trajectory(t, len(t))[0] for t in truths])  # GC fraction of each true continuation

    def kmer_js(outputs: list[str]) -> dict[str, Any]:
        """JS divergence of the pooled spectra (a point estimate: a percentile bootstrap of it
        is biased upward, resampling thins the pool; the noise floor is reported instead)."""
        gen = np.stack([kmer_spectrum(o, config.kmer_k) for o in outputs])
        return {"value": js_divergence(gen.sum(0), true_spectra.sum(0)), "n": len(outputs), "k": config.kmer_k}

    def score(outputs: list[str]) -> dict[str, Any]:
        ident = [np.mean(np.frombuffer(o.encode(), np.uint8) == np.frombuffer(t.encode(), np.uint8))
                 for o, t in zip(outputs, truths)]
        corr = [trajectory_correlation(gc_trajectory(t, config.gc_window), gc_trajectory(o, config.gc_window))
                for o, t in zip(outputs, truths)]
        orf = [orf_fraction(p, o, config.orf_min_len) for p, o in zip(prompts, outputs)]
        gc_out = np.array([gc_trajectory(o, len(o))[0] for o in outputs])
        return {"identity": ci(ident), "gc_pearson_r": ci(corr), "orf_fraction": ci(orf),
                "kmer_js_divergence": kmer_js(outputs),
                "gc_between_prompts_r": {"value": _nan_to_none(trajectory_correlation(gc_true, gc_out)),
                                         "n": len(outputs)},
                "gc_mean": float(np.nanmean(gc_out))}

    res: dict[str, Any] = {"n_prompts": len(prompts), "prompt_len": prompt_len, "length": config.completion_len,
                           "temperature": config.temperature, "top_k": config.top_k, "top_p": config.top_p,
                           "gc_window": config.gc_window, "orf_min_len": config.orf_min_len,
                           "true_gc_mean": float(np.nanmean(gc_true)),
                           "true_orf_fraction": ci([orf_fraction(p, t, config.orf_min_len)
                                                   for p, t in zip(prompts, truths)]),
                           # two halves of the true continuations against each other: sampling noise alone
                           "kmer_js_noise_floor": (js_divergence(true_spectra[0::2].sum(0), true_spectra[1::2].sum(0))
                                                   if len(truths) > 1 else None),
                           "lm": score(gen)}
    if markov is not None:
        mrng = np.random.default_rng([config.seed, 3])
        try:
            res["markov"] = {"order": markov.order,
                             **score([markov.sample(config.completion_len, prompt=p, seed=mrng) for p in prompts])}
        except ValueError as exc:  # e.g. a prompt ending in N
            logger.warning("Markov completions skipped: %s", exc)
    return res


def evaluate_lm(model: DNALanguageModel, config: EvalConfig, *, model_path: str | None = None) -> EvalReport:
    """Run the evaluation sections of ``config.sections`` on ``model``; see :class:`EvalConfig`.

    Raises:
        ValueError: bad FASTA (naming file, record and position) or held-out splits too
            short for the requested windows.
    """
    if not isinstance(config, EvalConfig):
        raise InputError(f"config must be an EvalConfig, got {type(config).__name__}")
    if not isinstance(model, DNALanguageModel):
        raise InputError(f"model must be a DNALanguageModel, got {type(model).__name__}")
    if config.device == "cuda" and not torch.cuda.is_available():
        raise InputError("device='cuda' requested but CUDA is not available")
    t0 = time.perf_counter()
    device = torch.device(config.device)
    model = model.to(device)
    train_len = model.config.max_train_len
    context = config.context or train_len
    splits, skipped = _splits(config)
    heldout = extrap = passkey = completion = None
    markov = _fit_markov(splits, config) if {"heldout", "completion"} & set(config.sections) else None
    if "heldout" in config.sections:
        heldout = _heldout_section(model, splits, config, context, device, markov)
        logger.info("held-out: LM %.4f vs Markov order %d %.4f bits/base", heldout["bits_per_base"],
                    heldout["markov"]["order"], heldout["markov"]["bits_per_base"])
    if "extrapolation" in config.sections:
        extrap = _extrapolation_section(model, splits, config, train_len, device)
    if "passkey" in config.sections:
        passkey = _passkey_section(model, splits, config, train_len)
    if "completion" in config.sections:
        completion = _completion_section(model, splits, config, config.prompt_len or train_len, markov.model)
    return EvalReport(
        model={"path": model_path, "attention": model.config.attention, "max_train_len": train_len,
               "n_parameters": model.num_parameters(), "config": model.config.to_dict()},
        data={"fasta": config.label, "val_fraction": config.val_fraction,
              "records": [{"id": sp.chrom, "train_bases": len(sp.train), "val_bases": len(sp.val)}
                          for sp in splits],
              "skipped_records": skipped},
        heldout=heldout, extrapolation=extrap, passkey=passkey, completion=completion,
        elapsed_s=time.perf_counter() - t0)
