"""The user-facing aligner: load a trained model, align pairs, decode with confidences.

Two engines compute the transport plans, with the same result:

* ``numpy`` (:mod:`sinkalign.align.engine`): every model without embedder features and with
  banded dustbins (the shipped ``learned``, ``blosum`` and ``dna`` models), pair by pair in
  float64 with no padding and nothing to compile, on ``workers`` threads (NumPy and BLAS
  release the GIL); the residue encoder of the ``learned`` model runs per sequence, not per
  pair (a sequence used again is cached), so an all-against-all run encodes each sequence
  at most twice.
* ``jax``: the model's own forward pass (:func:`sinkalign.align.model.forward`), for every
  model and the only engine for models with embedder features (ESM-2, the built-in
  embedder) or the ``pallas`` backend; in batches padded to a length bucket, compiled once
  per bucket shape (kept across runs in JAX's persistent compilation cache, see
  :func:`enable_compilation_cache`); decoding a batch overlaps the solve of the next. On
  an accelerator this is the engine to use. For a model the numpy engine runs, the pairs the
  band policy puts on a corridor or in a box (long pairs, lopsided pairs, every pair with a
  ``band`` radius) are solved there by the numpy engine, on the host threads (or processes)
  that decode the batches: only dense plans are batched.

``engine="auto"`` (default) takes ``numpy`` whenever the model allows it. Either way results
come in input order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import multiprocessing
import numbers
import os
import pickle
import tempfile
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np

from sinkalign.align import model as M
from sinkalign.align.band import BandMatrix, band_mea, classical_guides, guide_corridor, identity_gain_band, local_corridor
from sinkalign.align.calibration import Calibration, check_min_confidence
from sinkalign.align.checkpoints import BUCKETS, load_checkpoint, read_best
from sinkalign.align.decode import alignment_of_pairs, identity_gain, keep_gaps, mea_batch, pair_identity, plan_posteriors
from sinkalign.align.engine import NumpyEngine, engine_support
from sinkalign.align.significance import Significance
from sinkalign.alignment import AlignedPair, reverse_complement
from sinkalign.errors import AlphabetError, CheckpointError, InputError, SinkalignError
from sinkalign.io.fasta import NUCLEOTIDE_CODES, detect_alphabet, rna_as_dna, sequence_text
from sinkalign.utils import ALIGNER_LAYOUT, SHIPPED_DATA, unguarded_main_call, user_cache_dir

__all__ = ["AlignedPair", "Aligner", "ENGINES", "PairResult", "SHIPPED_MODELS", "STRANDS", "default_model_path",
           "enable_compilation_cache", "resolve_model"]

log = logging.getLogger(__name__)


class _Malformed:
    """What stands for the sequences of an item that is not a pair: :meth:`Aligner._check`
    refuses it with ``message``, in its turn (after the results of the pairs before it)."""

    def __init__(self, message: str):
        self.message = message


def _malformed(k: int, what: str, item) -> tuple:
    shown = repr(item) if len(repr(item)) <= 60 else f"{repr(item)[:57]}..."
    bad = _Malformed(f"pair {k}: expected {what}, got {type(item).__name__} {shown}")
    return f"pair {k}", bad, f"pair {k}", bad


def _as_text(item, alphabet: str, k: int):
    """A pair ``(query_id, query, target_id, target)`` with ``bytes`` and Biopython ``Seq``
    sequences as ``str``, upper case (as the FASTA reader gives them: the results hold them, and a
    lower-case row means insertions to Stockholm and A2M readers), a protein's one trailing stop
    ``*`` dropped (as the FASTA reader drops it) and a nucleotide's U as T; anything else as
    given, for :meth:`Aligner._check` to refuse in turn (an item that is no 4-tuple as
    :class:`_Malformed`, naming it as the ``k``-th)."""
    if isinstance(item, (str, bytes)):
        return _malformed(k, "(query_id, query, target_id, target)", item)
    try:
        qid, q, tid, t = item
    except (TypeError, ValueError):
        if isinstance(item, (tuple, list)) and len(item) == 2 and all(hasattr(r, "seq") and hasattr(r, "id")
                                                                       for r in item):
            return _malformed(k, "(query_id, query, target_id, target) (a pair of Biopython records: "
                              "Aligner.align_pairs takes those)", item)
        return _malformed(k, "(query_id, query, target_id, target)", item)
    out = []
    for seq in (q, t):
        seq = sequence_text(seq)
        if isinstance(seq, str) and seq.isascii():  # (other letters are refused as given, by _check)
            seq = seq.upper()
        if isinstance(seq, str) and alphabet == "protein" and seq.endswith("*"):
            seq = seq[:-1]
        elif isinstance(seq, str) and alphabet == "dna":  # RNA as DNA: U is T for the model, identity, E-value
            seq = rna_as_dna(seq)
        out.append(seq)
    return qid, out[0], tid, out[1]

BACKENDS = ("reference", "pallas")
ENGINES = ("auto", "numpy", "jax")
STRANDS = ("plus", "minus", "both")  # BLAST's -strand


def strand_name(strand: str) -> str:
    """``strand`` as one of :data:`STRANDS`, in any case: ``"+"`` and ``"-"`` (the strand signs
    of SAM, PAF and :attr:`AlignedPair.strand`) are ``"plus"`` and ``"minus"``.

    Raises:
        InputError: anything else."""
    name = {"+": "plus", "-": "minus"}.get(strand, strand.lower()) if isinstance(strand, str) else strand
    if name not in STRANDS:
        raise InputError(f"strand={strand!r} is not one of {STRANDS} (or '+', '-'; any case)")
    return name

# A dense plan is [m + 1, n + 1] per pair: at most MAX_CELLS residue pairs (8192 x 8192, as
# before, when each sequence had that limit), so a short query may meet a long target (a gene
# against a contig); and at most MAX_LENGTH residues per sequence (the encoder holds [L, 480]).
# A longer pair is solved on a corridor around its classical alignments (sinkalign.align.band:
# at most MAX_CELLS cells in the corridor), up to MAX_PAIR_CELLS residue pairs: the
# Needleman-Wunsch and Smith-Waterman tracebacks that guide it (and the confidences) are dense
# (parasail: about 6 bytes a residue pair, 1.6 GB at the limit). The numpy engine only.
MAX_CELLS = 8192 * 8192
MAX_PAIR_CELLS = 16384 * 16384
LONG_BAND = 32  # the corridor's radius of a long pair (BENCHMARKS.md, "Banded plans")
# Past this many residue pairs the default aligner puts a pair on a LONG_BAND corridor (pairs past
# the lengths the shipped calibration was fitted on: dense plans of long pairs spread their mass
# and lose their confidences; BENCHMARKS.md, "Banded plans").
AUTO_BAND_CELLS = 1024 * 1024
# A lopsided pair (one side at least LOPSIDED_RATIO times the other: a domain against a whole
# protein, a gene against a contig) is solved inside the box around its Smith-Waterman hit,
# BOX_MARGIN of the shorter side's length wider each way (sinkalign.align.band.local_corridor);
# dense plans spread over the unrelated residues (BENCHMARKS.md, "Lopsided pairs in a box").
LOPSIDED_RATIO = 2
BOX_MARGIN = 0.1
# Whether the column confidences of a pair solved in its box read the box (its subsequences,
# their length ratio and ends, their classical alignments, as an ordinary pair's read the whole
# pair) instead of the whole pair. Off: with the column model fitted on whole-pair features it
# lost F1 at 2:1 and 4:1 (BENCHMARKS.md, "Lopsided pairs in a box": session 22); a column model
# fitted on box features is the next step. benchmarks/lopsided_pairs.py --compare-features
BOX_FEATURES = False
MAX_LENGTH = 131072
# Residue pairs of banded pairs in work at once in one process: their classical guides are dense
# (parasail's tracebacks, about 6 bytes a residue pair), so each thread aligning a gene against a
# long contig holds such a table (1.2 GB for 2 kb against 100 kb), and 16 threads would hold 16.
# Pairs above AUTO_BAND_CELLS wait while the others in work would take the total past this
# budget (a pair larger than it runs alone). None: half the memory available when it is first
# needed at BYTES_PER_CELL (at least MAX_PAIR_CELLS); a number: that many residue pairs.
HOST_CELL_BUDGET: int | None = None
BYTES_PER_CELL = 6
LONG_STEP = 512
TASK_PAIRS = 16  # pairs per task of the numpy engine (a thread aligns one task at a time)
TASK_CELLS = 2**22  # and at most this many residue pairs per task (a longer pair goes alone): bounded memory
CACHE_ENV = "SINKALIGN_JAX_CACHE"


# Cells (pairs x padded length^2) of one batch of the jax engine: 8 pairs of 1024 on the CPU
# (so a pair longer than 1024 goes alone), 2^27 on an accelerator (16 pairs of 2,560 residues).
JAX_BATCH_CELLS = {"cpu": 8 * 1024 * 1024, "accelerator": 2**27}


def jax_batch_cells() -> int:
    """The cell budget of one jax-engine batch on JAX's default backend."""
    import jax

    return JAX_BATCH_CELLS["cpu" if jax.default_backend() == "cpu" else "accelerator"]


def padded_length(longest: int) -> int:
    """The padded length a chunk is computed at by the ``jax`` engine: the training buckets
    up to 1024 residues, then multiples of 512."""
    if longest <= BUCKETS[-1]:
        return next(b for b in BUCKETS if longest <= b)
    return -(-longest // LONG_STEP) * LONG_STEP


def padded_shape(query_length: int, target_length: int) -> tuple[int, int]:
    """The padded ``(query, target)`` lengths of a ``jax`` engine batch whose longest query and
    target have these lengths: square at :func:`padded_length` of the longer (one compiled shape
    per bucket) while that fits :data:`MAX_CELLS`, else each side padded on its own (a short
    query against a long target)."""
    square = padded_length(max(query_length, target_length))
    if square * square <= MAX_CELLS:
        return square, square
    return padded_length(query_length), padded_length(target_length)


def _share(name: str, value) -> float:
    """``value`` as a float share in [0, 1], else :class:`~sinkalign.errors.InputError` naming it."""
    share = float(value)
    if not 0 <= share <= 1:  # NaN fails too
        raise InputError(f"{name}={share} must be a share between 0 and 1")
    return share


def lopsided(m: int, n: int) -> bool:
    """Whether a pair of these lengths is solved in the box around its local hit by default."""
    return max(m, n) >= LOPSIDED_RATIO * min(m, n)


def check_band(band) -> int | str | None:
    """``band`` as :class:`Aligner` takes it (a corridor radius, ``"dense"`` or ``None``), else
    :class:`~sinkalign.errors.InputError` naming it."""
    if band is None or band == "dense":
        return band
    if isinstance(band, bool) or not isinstance(band, (int, np.integer)) or band < 0:
        raise InputError(f"band={band!r} must be a whole number of residues >= 0, 'dense' or None")
    return int(band)


def default_workers() -> int:
    """Threads for the numpy engine: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def compilation_cache_dir() -> Path | None:
    """Where compiled JAX programs are kept across runs: ``$SINKALIGN_JAX_CACHE`` when set
    (``0``, ``off`` or empty: nowhere), else ``$XDG_CACHE_HOME/sinkalign/jax`` (default
    ``~/.cache/sinkalign/jax``)."""
    return user_cache_dir(CACHE_ENV, "jax")


def enable_compilation_cache() -> Path | None:
    """Turn on JAX's persistent compilation cache at :func:`compilation_cache_dir` (once, and
    only when the process has not configured one itself). Returns the directory in use."""
    import jax

    current = jax.config.jax_compilation_cache_dir
    if current:
        return Path(current)
    path = compilation_cache_dir()
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.warning("JAX compilation cache disabled: cannot create %s (%s)", path, exc)
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


_DATA = SHIPPED_DATA
# models shipped inside the package, by the name `--model NAME` takes
SHIPPED_MODELS = {"learned": "aligner_learned", "blosum": "aligner_blosum", "dna": "aligner_dna",
                  "default": "aligner_learned"}  # "default": the default protein model, by name
_DEFAULT_MODELS = {"protein": "learned", "dna": "dna"}  # the shipped model an alphabet gets


def _say_which_checkpoint(path: Path, state: dict) -> None:
    """A training run given as a model is its newest checkpoint; where its best on validation
    (``best/``, the one a user selected it by) is another step, a warning says so."""
    if ALIGNER_LAYOUT.kind(path) != "run":
        return
    try:
        best_step, best_f1 = read_best(path)
    except CheckpointError:
        return
    if best_step is not None and best_step != state.get("step"):
        log.warning("%s is a training run: its newest checkpoint (step %s) is used; its best on validation is "
                    "%s (step %d, F1 %.4f): give that to use it", path, state.get("step"), path / "best", best_step,
                    best_f1)


def resolve_model(model: str | os.PathLike) -> Path:
    """The directory of ``model``: a path (model, checkpoint or run directory) or the name of a
    shipped model (:data:`SHIPPED_MODELS`: ``learned``, the default protein model; ``blosum``,
    the BLOSUM62 window it starts from, faster (no encoder, a separable window) and less accurate; ``dna``;
    ``default``, the same as ``learned``). A path that holds a model wins over a name; a folder
    that holds none (a user's folder of DNA files named ``dna``) does not hide the shipped model
    of its name (a warning says which was taken)."""
    if isinstance(model, bool) or not isinstance(model, (str, os.PathLike)):
        hint = (": an Aligner aligns by itself (align, align_pairs, align_many; write_alignments writes the "
                "results)" if isinstance(model, Aligner) else "")
        raise InputError(f"model must be a shipped model's name or a model's path, got {type(model).__name__} "
                         f"{model!r:.60}{hint}")
    path = Path(model)
    name = str(model).lower()  # "DNA" and "Learned" name the shipped models too
    if path.exists():
        if name in SHIPPED_MODELS and ALIGNER_LAYOUT.kind(path) is None:  # a user's folder named "dna"
            log.warning("%s is not an aligner model: model %r is the shipped model %s", path.resolve(), str(model),
                        _DATA / SHIPPED_MODELS[name])
            return _DATA / SHIPPED_MODELS[name]
        return path
    if name in SHIPPED_MODELS:
        return _DATA / SHIPPED_MODELS[name]
    raise CheckpointError(f"model {model} does not exist (a model, checkpoint or run directory, or one of the "
                          f"shipped models {sorted(SHIPPED_MODELS)})")


def default_model_path(alphabet: str = "protein") -> Path:
    """The model shipped inside the package for ``alphabet``: ``protein`` (the learned aligner,
    trained on structure-based and Pfam reference alignments) or ``dna`` (fitted on MADE1
    sequences)."""
    if alphabet not in _DEFAULT_MODELS:
        raise InputError(f"alphabet={alphabet!r} is not one of {tuple(_DEFAULT_MODELS)}")
    return _DATA / SHIPPED_MODELS[_DEFAULT_MODELS[alphabet]]


PairResult = AlignedPair  # the name of earlier releases


class Aligner:
    """A trained OT aligner.

    Args:
        params: model parameters; config: its :class:`~sinkalign.align.model.AlignerConfig`.
        embedder: the feature embedder (built from ``config.embedder`` when omitted).
        embedder_options: what the model's config does not hold but building its embedder
            needs, e.g. ``{"weights": "esm2_t33_650M_UR50D.pt"}`` for ESM-2 (see
            :func:`sinkalign.align.embed.embedder_from_config`); the embedder is built with
            them at once, and must match the one the model was trained with (other ESM-2
            weights: an :class:`~sinkalign.errors.InputError` naming the file). A model
            without ESM-2 features refuses ``weights``.
        backend: ``reference`` (pure JAX operator) or ``pallas`` (blockwise kernels); the
            ``numpy`` engine computes the reference operator's plans.
        gap_weight: MEA gap weight (0 = gaps free, the decoding the shipped models were tuned
            with): a residue pair is aligned only where its match posterior beats this times the
            two residues' gap (dustbin) posteriors, which hold much of each residue's mass, so
            values near 0.5 and above leave most pairs nearly unaligned (human alpha against
            beta globin: 140 aligned pairs at 0, 68 at 0.05, 32 at 0.1, 1 at 0.5).
        identity_weight: MEA tie-break towards identical residues: ``tau * [a_i == b_j]``
            added to each residue pair's gain (:func:`~sinkalign.align.decode.identity_gain`;
            the alignment's posteriors and score are the model's). Default: the model's
            ``decode_identity_weight``; 0 = off.
        identity_min: apply ``identity_weight`` only to the pairs whose plain decoding aligns
            at least this share of identical residues (they are decoded again with it); 0: to
            every pair, decoded once (twice with ``identity_gaps="move"``, whose plain decoding
            keeps the gaps). Default: the model's ``decode_identity_min``.
        identity_gaps: ``add``: the tie-break may open gaps that the plain decoding does not
            have (it finds indels that decoding aligned as mismatches: the protein model);
            ``move``: it only moves the plain decoding's gaps to where the identities put them,
            keeping the plain stretch wherever it would add breaks
            (:func:`~sinkalign.align.decode.keep_gaps`: with four letters a shifted chance
            identity is common, so the DNA model would trade two mismatches for a gap pair).
            Default: the model's ``decode_identity_gaps``.
        identity_move_min: also decode the pairs whose plain decoding is at least this
            identical, but below ``identity_min``, with the tie-break moving gaps only (as
            ``identity_gaps="move"``): where chance identities are too common to open gaps for,
            a gap may still move onto identities. 0: no such pairs. Default: the model's
            ``decode_identity_move_min``.
        calibration: maps raw plan posteriors to calibrated probabilities (see
            :mod:`sinkalign.align.calibration`); a model directory carries its own, and
            ``None`` reports the raw posteriors.
        min_confidence: leave unaligned the MEA columns whose calibrated confidence is below
            this (default: the calibration's own threshold, 0 without a calibration); more
            precise, less complete alignments as it rises. Needs a calibration.
        significance: the null model of the pairs' E-values
            (:mod:`sinkalign.align.significance`); a model directory fitted with ``sinkalign
            fit-evalues`` carries its own. Needs a calibration; ``None``: no E-values.
        engine: ``auto`` (``numpy`` when the model allows it, else ``jax``), ``numpy`` (an
            error naming the reason when the model does not allow it) or ``jax`` (dense plans
            in batches, on a GPU when JAX has one; pairs on a corridor or in a box, below, on
            the host as the numpy engine solves them, so both engines give the same alignments).
        workers: threads of the ``numpy`` engine (default: the CPUs this process may use).
        processes: run the host's share (the ``numpy`` engine's pairs, the ``jax`` engine's
            decoding) on this many worker processes instead of ``workers`` threads. A pair's
            host work is many small NumPy calls that hold the GIL, so threads add up badly on
            many cores (16 gave 1.5x one thread); processes do not share it. Each is started
            (``spawn``) on first use with a copy of the aligner and kept until :meth:`close` (or
            the aligner is collected; ``with Aligner.load(...) as aligner:`` closes it). A script
            that uses them needs the ``if __name__ == "__main__":`` guard of
            :mod:`multiprocessing`: a call from an unguarded line of the main script is
            refused, and worker processes that die (at their start or later) are an error,
            never a wait without end. ``None`` or 0 (default): threads.
        band: a whole number: solve every pair on a corridor of this many residues around its
            Needleman-Wunsch and Smith-Waterman alignments (:mod:`sinkalign.align.band`),
            ``O((m + n) band)`` instead of ``O(m n)``, the same result wherever the plan's
            mass lies inside the corridor. ``None`` (default, the ``numpy`` engine): a lopsided
            pair (one side at least :data:`LOPSIDED_RATIO` times the other: a domain against a
            whole protein, a gene against a contig) inside the box around its Smith-Waterman hit,
            :data:`BOX_MARGIN` of the shorter side wider each way
            (:func:`~sinkalign.align.band.local_corridor`: the residues outside go to the
            dustbins); other pairs dense up to
            :data:`AUTO_BAND_CELLS` residue pairs, on a corridor of :data:`LONG_BAND` past it (and
            a box past it on that corridor inside it), on either engine. ``"dense"``: dense plans
            for every pair (up to :data:`MAX_CELLS`), as every pair of a model the numpy engine
            cannot run gets (:attr:`dense_only`).
        strand: nucleotide models only (``+`` and ``-`` name ``plus`` and ``minus``:
            :func:`strand_name`): ``plus`` aligns the query as given, ``minus`` its
            reverse complement, ``both`` (the default for a nucleotide model, as BLAST and
            minimap2 search) each pair both ways, keeping the strand of smaller E-value (of
            larger score without E-values; the plus strand on a tie). Searching both strands
            makes two comparisons of each pair, so ``both`` reports twice that strand's
            E-value. A result on the minus strand has ``strand="-"`` and holds the reverse
            complement as its query (:class:`~sinkalign.alignment.AlignedPair`). Protein
            models align the sequences as given (``plus``).
    """

    def __init__(self, params: dict, config: M.AlignerConfig, *, embedder=None,
                 embedder_options: dict | None = None, backend: str = "reference",
                 gap_weight: float | None = None, calibration: Calibration | None = None, engine: str = "auto",
                 workers: int | None = None, min_confidence: float | None = None,
                 significance: Significance | None = None, strand: str | None = None,
                 band: int | str | None = None, identity_weight: float | None = None,
                 identity_min: float | None = None, identity_gaps: str | None = None,
                 identity_move_min: float | None = None, processes: int | None = None):
        if backend not in BACKENDS:
            raise InputError(f"backend={backend!r} is not one of {BACKENDS}")
        if engine not in ENGINES:
            raise InputError(f"engine={engine!r} is not one of {ENGINES}")
        self.config = config
        self.params = params
        self.backend = backend
        self.gap_weight = config.decode_gap_weight if gap_weight is None else float(gap_weight)
        if not math.isfinite(self.gap_weight) or self.gap_weight < 0:
            raise InputError(f"gap_weight={self.gap_weight} must be a finite number >= 0")
        self.identity_weight = (config.decode_identity_weight if identity_weight is None
                                else float(identity_weight))
        if not math.isfinite(self.identity_weight) or self.identity_weight < 0:
            raise InputError(f"identity_weight={self.identity_weight} must be a finite number >= 0")
        self.identity_min = _share("identity_min", config.decode_identity_min if identity_min is None else identity_min)
        self.identity_gaps = config.decode_identity_gaps if identity_gaps is None else identity_gaps
        if self.identity_gaps not in M.IDENTITY_GAPS:
            raise InputError(f"identity_gaps={self.identity_gaps!r} is not one of {M.IDENTITY_GAPS}")
        move_min = config.decode_identity_move_min if identity_move_min is None else identity_move_min
        self.identity_move_min = _share("identity_move_min", move_min)
        if min_confidence is None:
            min_confidence = 0.0 if calibration is None else calibration.min_confidence
        self.min_confidence = check_min_confidence(min_confidence)
        if self.min_confidence > 0 and calibration is None:
            raise InputError("min_confidence needs calibrated confidences: this model has no calibration "
                             "(fit one with `sinkalign calibrate`)")
        self.strand = self._resolve_strand(strand)
        self._warned_dna = False  # a protein model given nucleotides: said once
        self._warned_mixed = False  # ... given nucleotides against protein: said once
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, numbers.Integral)
                                    or workers < 1):
            raise InputError(f"workers={workers!r} must be a whole number >= 1")
        self.workers = default_workers() if workers is None else int(workers)
        if processes is not None and (isinstance(processes, bool) or int(processes) != processes or processes < 0):
            raise InputError(f"processes={processes!r} must be a whole number >= 0")
        self.processes = int(processes or 0)
        if self.processes > default_workers():
            log.warning("processes=%d is more than the %d CPU(s) this process may use: the worker processes will "
                        "share them, so past %d none adds speed, and each holds its own copy of the model and its "
                        "libraries (~150 MB apart from what they share)", self.processes, default_workers(),
                        default_workers())
        self._pool: ProcessPoolExecutor | None = None  # started on first use
        if embedder is not None and embedder_options:
            raise InputError("give either embedder or embedder_options, not both")
        self._embedder = embedder
        self._embedder_options = dict(embedder_options or {})
        trained_with = config.embedder.get("name") if config.feature_dim else None
        if self._embedder_options.get("weights") is not None and trained_with != "esm2":
            raise InputError(f"ESM-2 weights {self._embedder_options['weights']} (--esm-weights, embedder_options): "
                             "this model takes no ESM-2 features (it was trained with "
                             + (f"the {trained_with!r} embedder" if trained_with else
                                "no embedder: its own residue encoder")
                             + "); drop them, or give a model trained on esm2 features")
        if significance is not None and calibration is None:
            raise InputError("E-values (significance) need calibrated confidences: this model has no calibration")
        self.calibration = calibration
        self.significance = significance
        self.provenance = ""  # how the model was made (set by :meth:`load` from its state.json)
        self.msa_calibration = None  # calibrated multiple-alignment confidences (sinkalign.align.msa), from state.json
        # The numpy engine: the plans of engine='numpy', and under engine='jax' the pairs the band
        # policy puts on a corridor or in a box (solved on the host, as the numpy engine does)
        self._numpy: NumpyEngine | None = None
        reason = engine_support(params, config) if backend == "reference" else f"backend={backend!r}"
        if reason is None:
            self._numpy = NumpyEngine.from_model(params, config)
        elif engine == "numpy":
            raise InputError(f"engine='numpy' cannot run this model: {reason}")
        elif engine == "auto":
            log.info("aligning with the jax engine: %s", reason)
        self._dense_reason = reason  # why every plan is dense (no corridors), or None
        self.engine = "numpy" if engine != "jax" and self._numpy is not None else "jax"
        band = check_band(band)
        if isinstance(band, int) and self._numpy is None:
            raise InputError(f"band={band}: banded plans need a model the numpy engine runs, and this one "
                             f"cannot ({reason})")
        self.band = band
        self._jax_plans: Callable | None = None  # compiled on first use
        if self._embedder_options and trained_with is not None:
            # built now, not at the first pair: options that do not rebuild the model's own embedder
            # (other ESM-2 weights) are an error when the model is loaded
            from sinkalign.align.embed import embedder_from_config

            self._embedder = embedder_from_config(config.embedder, feature_dim=config.feature_dim,
                                                  **self._embedder_options)

    @classmethod
    def load(cls, path: str | os.PathLike | None = None, **kwargs) -> Aligner:
        """Load a model directory, a checkpoint, a training run (its newest complete
        checkpoint) or a shipped model by name (``learned``, ``blosum``, ``dna``); default:
        the shipped protein model (``learned``). ``kwargs`` are those of
        :class:`Aligner` (``backend``, ``gap_weight``, ``embedder_options``, ``engine``, ...)."""
        path = resolve_model(path) if path is not None else default_model_path()
        params, state, _ = load_checkpoint(path)  # checked: a 'model' config matching the weights
        _say_which_checkpoint(path, state)
        own_calibration = "calibration" in state and "calibration" not in kwargs
        if own_calibration:
            try:
                kwargs["calibration"] = Calibration.from_dict(state["calibration"])
            except (TypeError, ValueError) as exc:
                raise CheckpointError(f"{path}/state.json: bad calibration: {exc}") from exc
        # the E-values' null was fitted on the model's own calibrated confidences: only with them
        if "significance" in state and "significance" not in kwargs and own_calibration:
            try:
                kwargs["significance"] = Significance.from_dict(state["significance"])
            except (TypeError, ValueError) as exc:
                raise CheckpointError(f"{path}/state.json: bad significance: {exc}") from exc
        msa_calibration = None
        if "msa_calibration" in state and own_calibration:  # fitted on the model's own confidences
            from sinkalign.align.msa import MsaCalibration

            try:
                msa_calibration = MsaCalibration.from_dict(state["msa_calibration"])
            except (TypeError, ValueError) as exc:
                raise CheckpointError(f"{path}/state.json: bad msa_calibration: {exc}") from exc
        aligner = cls(params, M.AlignerConfig.from_dict(state["model"]), **kwargs)
        aligner.provenance = state.get("provenance", "")
        aligner.msa_calibration = msa_calibration
        return aligner

    @property
    def embedder(self):
        if self._embedder is None and self.config.feature_dim:
            from sinkalign.align.embed import embedder_from_config

            self._embedder = embedder_from_config(self.config.embedder, **self._embedder_options)
        return self._embedder

    def _features(self, seqs: list[str]):
        if not self.config.feature_dim:
            return [None] * len(seqs)
        feats = self.embedder.embed(seqs)
        if feats and feats[0].shape[-1] != self.config.feature_dim:
            raise InputError(f"embedder gives {feats[0].shape[-1]}-dim features, the model expects "
                             f"{self.config.feature_dim}")
        return feats

    def __repr__(self) -> str:
        return (f"Aligner(alphabet={self.config.alphabet!r}, engine={self.engine!r}, strand={self.strand!r}, "
                f"min_confidence={self.min_confidence:g}, calibrated={self.calibration is not None}, "
                f"evalues={self.significance is not None})")

    # ---------------------------------------------------------------- public API
    def align(self, query: str, target: str, *, query_id: str = "query", target_id: str = "target",
              keep_plan: bool = False, strand: str | None = None) -> AlignedPair:
        """Align one pair of sequences: ``query`` and ``target`` as ``str``, ``bytes`` or a
        Biopython ``Seq`` (a nucleotide model reads U as T; a protein's trailing ``*`` is
        dropped), named ``query_id`` and ``target_id`` in the result and its outputs (ids without
        whitespace; SAM, BAM and PAF want more of them: :func:`sinkalign.io.writers.check_name`).

        Returns an :class:`~sinkalign.alignment.AlignedPair`: the aligned residue pairs with
        their calibrated confidences (``pair.alignment``), the score, the E-value where the
        model has a fitted null, the strand (``strand``: ``plus``, ``minus`` or ``both`` for a
        nucleotide model, default the aligner's) and, with ``keep_plan``, the transport plan
        ``[m + 1, n + 1]`` (last row and column: the dustbins). Raises
        :class:`~sinkalign.errors.InputError` (a ``ValueError``) for an empty sequence, a letter
        outside the model's alphabet (naming its position) or a pair too long
        (:data:`MAX_LENGTH`, :data:`MAX_CELLS`). Many pairs: :meth:`align_many` (tuples of ids and
        sequences) or :meth:`align_pairs` (pairs of Biopython records)."""
        return next(self.align_many([(query_id, query, target_id, target)], keep_plan=keep_plan, strand=strand))

    def align_many(self, pairs: Iterable[tuple[str, str, str, str]], *, batch_size: int = 8,
                   keep_plan: bool = False, strand: str | None = None) -> Iterator[AlignedPair]:
        """Align ``(query_id, query, target_id, target)`` tuples; results come in input order.
        ``strand`` (nucleotide models: ``plus``, ``minus``, ``both``) overrides the aligner's
        own :attr:`strand` for this call.

        The stream is consumed lazily and a bounded number of pairs is in flight at once
        (``numpy`` engine: ``2 * workers`` tasks of 16 pairs; ``jax`` engine: the batches of
        ``batch_size`` pairs, padded to a common length bucket, whose decoding tasks are among
        the ``2 * workers`` in flight, and the next batch being solved), so a long stream runs in
        bounded memory. A bad pair (an empty sequence, one longer than ``MAX_LENGTH``, more
        than ``MAX_CELLS`` residue pairs)
        raises ``ValueError`` naming it, after the results of the pairs before it.
        ``batch_size`` is the ``jax`` engine's (the ``numpy`` engine's tasks hold 16 pairs).
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
            raise InputError(f"batch_size={batch_size!r} must be a whole number >= 1")
        strand = self.strand if strand is None else self._resolve_strand(strand)
        pairs = (_as_text(item, self.config.alphabet, k) for k, item in enumerate(pairs))  # checked in _check

        def aligned(stream):
            if self.config.symmetric:
                return self._either_way(stream, batch_size, keep_plan)
            return self._results(stream, batch_size, keep_plan)

        return aligned(pairs) if strand == "plus" else self._strands(pairs, aligned, both=strand == "both")

    def _strands(self, pairs, aligned: Callable, *, both: bool) -> Iterator[AlignedPair]:
        """Results on the minus strand or on the better of both (see :class:`Aligner`)."""
        ways: deque = deque()  # (how, turned round?)

        def jobs():
            for item in pairs:
                qid, q, tid, t = item
                try:
                    self._check(item)  # a bad pair goes as given: its error names it as given
                    # A symmetric model solves the minus strand in one orientation whichever side is the
                    # query: the reverse complement of the sequence that sorts first, against the other
                    # (the same comparison read from its other end), turned back after.
                    turn = self.config.symmetric and (len(t), t) < (len(q), q)
                    reverse = (tid, reverse_complement(t), qid, q) if turn else (qid, reverse_complement(q), tid, t)
                except (ValueError, TypeError):
                    ways.append(("as given", False))
                    yield item
                    continue
                ways.append(("both" if both else "minus", turn))
                if both:
                    yield item
                yield reverse

        def minus_of(result, turn: bool) -> AlignedPair:
            result = result._replace(strand="-")
            return result.transposed() if turn else result  # the query's reverse complement against the target

        results = aligned(jobs())
        for first in results:
            way, turn = ways.popleft()
            if way == "minus":
                yield minus_of(first, turn)
            elif way == "both":
                plus, minus = first, minus_of(next(results), turn)
                if plus.evalue is not None and minus.evalue is not None:
                    best = minus if minus.evalue_rank < plus.evalue_rank else plus
                else:
                    best = minus if minus.score > plus.score else plus
                yield best.evalue_times(2.0)
            else:  # pragma: no cover - a pair that fails the checks raises before its result
                yield first

    def _results(self, pairs, batch_size: int, keep_plan: bool) -> Iterator[AlignedPair]:
        if self.engine == "numpy":
            return self._numpy_results(pairs, keep_plan)
        return self._jax_results(pairs, batch_size, keep_plan)

    def _either_way(self, pairs, batch_size: int, keep_plan: bool) -> Iterator[AlignedPair]:
        """A symmetric model's results: each pair aligned with its two sequences in one fixed
        order (the shorter first, then the one that sorts first) and turned round when given
        the other way, so that aligning b to a gives exactly the transpose of aligning a to b,
        alignment, confidences and E-value alike. (The model's scores are symmetric already;
        the solve's last half-step, the decoding's tie-breaks and the baselines the confidences
        read are not quite.)"""
        turned: deque = deque()  # (turned round?, the pair as given)

        def ordered():
            for item in pairs:
                _, q, _, t = item
                try:
                    self._check(item)  # a bad pair goes as given: its error names it as given
                    turn = (len(t), t) < (len(q), q)
                except (ValueError, TypeError):
                    turn = False
                turned.append((turn, item))
                yield (item[2], t, item[0], q) if turn else item

        results = self._results(ordered(), batch_size, keep_plan)
        while True:
            try:
                result = next(results)
            except StopIteration:
                return
            except InputError as exc:  # found after the turn (a banded pair's corridor): named as given
                turn, item = turned[0] if turned else (False, None)
                if not turn:
                    raise
                raise InputError(str(exc).replace(f"pair {item[2]} / {item[0]}:", f"pair {item[0]} / {item[2]}:", 1)) \
                    from exc
            yield result.transposed() if turned.popleft()[0] else result

    def align_pairs(self, pairs: Iterable[tuple[Any, Any]], *, batch_size: int = 8,
                    keep_plan: bool = False, strand: str | None = None) -> Iterator[AlignedPair]:
        """Align ``(query_record, target_record)`` pairs of records with ``.id`` and ``.seq``
        (e.g. :class:`sinkalign.io.fasta.Sequence` or Biopython's ``SeqRecord``), ``(id, seq)``
        tuples or plain sequence strings (named ``query<k>`` / ``target<k>`` by their pair's
        index ``k``); results come in input order, as in :meth:`align_many`."""

        def fields(rec, k: int, side: str):
            if isinstance(rec, str):
                return f"{side}{k}", rec
            if isinstance(rec, tuple) and len(rec) == 2:
                return rec[0], rec[1]
            if hasattr(rec, "id") and hasattr(rec, "seq"):
                return rec.id, str(rec.seq)
            raise InputError(f"pair {k}: the {side} must be a record with .id and .seq, an (id, seq) tuple or a "
                             f"sequence string, got {type(rec).__name__}")

        def items():
            for k, pair in enumerate(pairs):
                if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2:
                    yield _malformed(k, "(query, target): two records, (id, seq) tuples or sequences", pair)
                else:
                    q, t = pair
                    yield (*fields(q, k, "query"), *fields(t, k, "target"))

        return self.align_many(items(), batch_size=batch_size, keep_plan=keep_plan, strand=strand)

    # ---------------------------------------------------------------- shared pieces
    def _resolve_strand(self, strand: str | None) -> str:
        """``strand`` checked against the model's alphabet; ``None``: ``both`` for a nucleotide
        model, ``plus`` for protein."""
        nucleotide = self.config.alphabet == "dna"
        if strand is None:
            return "both" if nucleotide else "plus"
        strand = strand_name(strand)
        if strand != "plus" and not nucleotide:
            raise InputError(f"strand={strand!r}: strands are for nucleotide models; a {self.config.alphabet} "
                             "model aligns the sequences as given")
        return strand

    def _check(self, item) -> None:
        qid, q, tid, t = item
        if isinstance(q, _Malformed):
            raise InputError(q.message)
        for side, value in (("query_id", qid), ("target_id", tid)):
            if not isinstance(value, str) or not value or any(c.isspace() for c in value):
                # refused here, not by the writer after a long run: every output format takes an id
                # as one word (FASTA's is the first word of its header)
                raise InputError(f"pair {qid!r} / {tid!r}: {side}={value!r} must be a non-empty string without "
                                 "whitespace")
        for side, seq in (("query", q), ("target", t)):
            if not isinstance(seq, str):
                record = hasattr(seq, "seq") and hasattr(seq, "id")
                raise InputError(f"pair {qid} / {tid}: the {side} is of type {type(seq).__name__}, not a sequence (give a "
                                 "str, bytes or Bio.Seq" + ("; records go to align_pairs, which takes their ids, or "
                                                            "give record.seq" if record else "") + ")")
            if not seq.isascii() or not seq.isalpha():
                k = next((k for k, c in enumerate(seq) if not (c.isascii() and c.isalpha())), None)
                if k is not None:
                    raise InputError(f"pair {qid} / {tid}: the {side} has {seq[k]!r} at position {k} (0-based): a "
                                     "sequence is letters, ungapped (a protein may end in one '*')")
            if self.config.alphabet == "dna" and not set(seq.upper()) <= NUCLEOTIDE_CODES:
                k = next(k for k, c in enumerate(seq.upper()) if c not in NUCLEOTIDE_CODES)
                raise AlphabetError(f"pair {qid} / {tid}: the {side} has {seq[k]!r} at position {k} (0-based), no "
                                    "nucleotide code: the DNA model aligns nucleotides (a protein takes a protein "
                                    "model: Aligner.load() or 'blosum')")
        if self.config.alphabet == "protein" and not (self._warned_dna and self._warned_mixed):
            kinds = (detect_alphabet(q), detect_alphabet(t))
            if kinds == ("dna", "dna") and not self._warned_dna and max(len(q), len(t)) >= 30:  # not "AAA", "GGG"
                self._warned_dna = True
                log.warning("pair %s / %s: both sequences are nucleotides, and this is a protein model: "
                            "Aligner.load('dna') aligns DNA (said once per aligner)", qid, tid)
            elif "dna" in kinds and "protein" in kinds and not self._warned_mixed \
                    and len(q if kinds[0] == "dna" else t) >= 30:  # a short peptide may look like nucleotides
                self._warned_mixed = True
                log.warning("pair %s / %s: the %s looks like nucleotides and the %s like protein: aligned as two "
                            "proteins (translate the nucleotides first; said once per aligner)", qid, tid,
                            *(("query", "target") if kinds[0] == "dna" else ("target", "query")))
        longest = max(len(q), len(t))
        if longest > MAX_LENGTH:
            raise InputError(f"pair {qid} / {tid}: a sequence of {longest} residues is longer than "
                             f"the {MAX_LENGTH} the aligner takes; split it (into domains, or windows) first")
        cells = len(q) * len(t)
        limit = MAX_CELLS if self.dense_only else MAX_PAIR_CELLS
        if cells > limit:
            if not self.dense_only:
                how = "the classical alignments that guide its corridor are dense"
            elif self._numpy is None:
                how = f"its plan is dense: O(m n) memory, and this model takes no corridor: {self._dense_reason}"
            else:
                how = "its plan is dense: O(m n) memory; without band='dense' it takes longer pairs on a corridor"
            raise InputError(f"pair {qid} / {tid}: {len(q)} x {len(t)} residues make {cells:,} residue "
                             f"pairs, more than the {limit:,} the aligner takes ({how}); split the longer "
                             "sequence first")
        if not q or not t:
            raise InputError(f"pair {qid} / {tid}: the {'query' if not q else 'target'} sequence is empty")

    @property
    def dense_only(self) -> bool:
        """Whether every pair gets a dense plan: ``band="dense"``, or a model the numpy engine
        cannot run (embedder features, the paper's dustbin, ``backend="pallas"``), which takes
        no corridor or box; then a pair may have at most :data:`MAX_CELLS` residue pairs."""
        return self._numpy is None or self.band == "dense"

    def _banded(self, item) -> bool:
        """Whether this pair is solved on a corridor (or in a box), by the numpy engine on the
        host, whichever engine solves the dense pairs."""
        if self.dense_only:
            return False
        if self.band is None:
            return len(item[1]) * len(item[3]) > AUTO_BAND_CELLS or lopsided(len(item[1]), len(item[3]))
        return True  # band=R: every pair

    def _corridor(self, q: str, t: str, guides: dict) -> tuple[np.ndarray, np.ndarray, str]:
        """``(lo, hi, what)``: the corridor a banded pair is solved on, and its name for errors."""
        m, n = len(q), len(t)
        if self.band is None and lopsided(m, n):
            margin = math.ceil(BOX_MARGIN * min(m, n))
            box = local_corridor(guides, m, n, margin)
            if box is not None:
                what = f"box around its Smith-Waterman hit (+-{margin} residues)"
                if int((box[1] - box[0]).sum()) > AUTO_BAND_CELLS:  # a long box: on a corridor inside it
                    box = local_corridor(guides, m, n, margin, LONG_BAND)
                    what += f" and +-{LONG_BAND} of it"
                return *box, what
            if m * n <= AUTO_BAND_CELLS:  # no local hit: as a pair of its size that is not lopsided
                return np.zeros(m, np.int64), np.full(m, n, np.int64), "plan"
        radius = LONG_BAND if self.band is None else self.band
        return *guide_corridor(q, t, radius, guides=guides), f"corridor of +-{radius} residues"

    def _band_task(self, item, keep_plan: bool) -> AlignedPair:
        """One pair on its corridor (:mod:`sinkalign.align.band`), within the process's
        :data:`HOST_CELL_BUDGET` of residue pairs in work."""
        cells = len(item[1]) * len(item[3])
        if cells <= AUTO_BAND_CELLS:
            return self._band_solve(item, keep_plan)
        with _HOST_CELLS.hold(cells):
            return self._band_solve(item, keep_plan)

    def _band_solve(self, item, keep_plan: bool) -> AlignedPair:
        qid, q, tid, t = item
        if keep_plan and len(q) * len(t) > MAX_CELLS:
            raise InputError(f"pair {qid} / {tid}: its plan (a corridor of {len(q)} x {len(t)} residues) is too large "
                             f"to keep as a dense matrix (more than {MAX_CELLS:,} residue pairs); drop --plan-out "
                             "(keep_plan) for it")
        guides = classical_guides(q, t, kind=self._kind)
        lo, hi, what = self._corridor(q, t, guides)
        box = _box_of(lo, hi) if what.startswith("box") and BOX_FEATURES else None
        cells = int((hi - lo).sum())
        if cells > MAX_CELLS:
            raise InputError(f"pair {qid} / {tid}: its {what} holds {cells:,} residue "
                             f"pairs, more than the {MAX_CELLS:,} the aligner takes; give a narrower band or "
                             "split the longer sequence first")
        sides = self._numpy.sides_many([q, t])
        solution = self._numpy.solve_band(sides[0], sides[1], lo, hi)
        post = solution.posteriors()
        plan = solution.dense_plan() if keep_plan else None
        # the confidences compare with the same alignments when they score as the guides do
        same = self.calibration is not None and self.calibration.kind == self._kind
        aln, close = self._band_mea(item, post)
        return self._finish(item, post, aln, plan, baselines=guides if same else None, box=box, close=close)

    def _mea(self, items: list, posts: list) -> tuple[list, list]:
        """The MEA alignments of these pairs' dense posteriors, with the identity tie-break
        where it applies (:attr:`identity_weight`, :attr:`identity_min`, :attr:`identity_gaps`,
        :attr:`identity_move_min`), and for each pair whether its confidences are read with the
        calibration's close maps (:meth:`_close_maps`)."""
        if not self.identity_weight:
            return mea_batch(posts, gap_weight=self.gap_weight), [False] * len(posts)
        # a plain decoding first where it picks the pairs the tie-break applies to (identity_min)
        # or holds the gaps the tie-break may only move; else the tie-break's alone, for every pair
        alns = mea_batch(posts, gap_weight=self.gap_weight) if self._plain_first else [None] * len(posts)
        identity = [self._identity(item, aln) for item, aln in zip(items, alns)]
        gaps = [self._tie_break(ident) for ident in identity]
        redo = [k for k, g in enumerate(gaps) if g is not None]
        if redo:
            again = mea_batch([posts[k] for k in redo], gap_weight=self.gap_weight,
                              bonus=[self.identity_weight * identity_gain(items[k][1], items[k][3], self._kind)
                                     for k in redo])
            for k, aln in zip(redo, again):
                match = posts[k][0]
                alns[k] = aln if alns[k] is None else self._moved(alns[k], aln, gaps[k],
                                                                  lambda p, M=match: M[p[:, 0], p[:, 1]],
                                                                  *posts[k][1:])
        return alns, [self._close_maps(ident) for ident in identity]

    def _band_mea(self, item, post):
        """:meth:`_mea` of one pair's banded posteriors: ``(alignment, close maps?)``."""
        plain = None
        ident = float("nan")
        if not self.identity_weight or self._plain_first:
            plain = band_mea(post, gap_weight=self.gap_weight)
            if not self.identity_weight:
                return plain, False
            ident = self._identity(item, plain)
        gaps = self._tie_break(ident)
        if gaps is None:
            return plain, False
        bonus = self.identity_weight * identity_gain_band(item[1], item[3], post.match, self._kind)
        aln = band_mea(post, gap_weight=self.gap_weight, bonus=bonus)
        if plain is not None:
            aln = self._moved(plain, aln, gaps, lambda p: post.match.at(p[:, 0], p[:, 1]), post.query_gap,
                              post.target_gap)
        return aln, self._close_maps(ident)

    @property
    def _plain_first(self) -> bool:
        """Whether the tie-break needs each pair's plain decoding: to pick the pairs it applies
        to, or to keep their gaps."""
        return self.identity_min > 0 or self.identity_gaps == "move"

    def _tie_break(self, identity: float) -> str | None:
        """How the tie-break decodes a pair whose plain decoding is this identical (NaN: none
        made): ``"add"`` or ``"move"`` (:attr:`identity_gaps`, or ``"move"`` in the
        :attr:`identity_move_min` tier below :attr:`identity_min`), or ``None``: not at all."""
        if self.identity_min == 0 or identity >= self.identity_min:
            return self.identity_gaps
        if 0 < self.identity_move_min <= identity:
            return "move"
        return None

    def _moved(self, plain, moved, gaps: str, match_at: Callable, query_gap, target_gap):
        """``moved`` (the tie-break's decoding), with ``gaps="move"`` kept to the gaps of
        ``plain`` (:func:`~sinkalign.align.decode.keep_gaps`); ``match_at(pairs)``: their match
        posteriors."""
        if gaps == "add":
            return moved
        pairs = keep_gaps(plain.pairs, moved.pairs)
        if np.array_equal(pairs, moved.pairs):
            return moved
        return alignment_of_pairs(pairs, match_at(pairs) if len(pairs) else np.zeros(0), query_gap, target_gap,
                                  gap_weight=self.gap_weight)

    def _identity(self, item, aln) -> float:
        """The share of identical residues a pair's plain decoding aligns (NaN: none aligned, or
        no plain decoding)."""
        return float("nan") if aln is None else pair_identity(item[1], item[3], aln.pairs, self._kind)

    def _close_maps(self, identity: float) -> bool:
        """Whether a pair whose plain decoding is this identical, decoded with the tie-break, has
        its confidences read with the calibration's close maps (:meth:`Calibration.for_close`):
        when the tie-break picks pairs by identity and this one is at least as identical as
        both it and the close maps ask."""
        close = None if self.calibration is None else self.calibration.close
        return bool(close is not None and self.identity_weight and self.identity_min > 0
                    and identity >= max(self.identity_min, close["identity_min"]))  # NaN: no

    @property
    def _kind(self) -> str:
        """The classical baselines' scoring (``protein`` or ``dna``) for this model's alphabet."""
        return "dna" if self.config.alphabet == "dna" else "protein"

    def _finish(self, item, post, aln, plan, *, baselines: dict | None = None, box: tuple | None = None,
                close: bool = False) -> AlignedPair:
        evalue = log_evalue = None
        if self.calibration is not None:
            # a close pair's confidences are read with the calibration's close maps (_close_maps)
            calibration = self.calibration.for_close() if close else self.calibration
            if box is None:
                conf = calibration.column_confidences(aln, post.match, query=item[1], target=item[3],
                                                      baselines=baselines)
            else:  # the box as an ordinary pair: its subsequences, its plan's cells, its own guides
                r0, r1, c0, c1 = box
                conf = calibration.column_confidences(
                    _sub_alignment(aln, box), _sub_band(post.match, box), query=item[1][r0:r1],
                    target=item[3][c0:c1])
            if self.significance is not None:
                log_evalue = self.significance.pair_log_evalue(conf, item[1], item[3])
                with np.errstate(over="ignore"):
                    evalue = float(np.exp(log_evalue))
            aln = calibration.apply(aln, post.match, query=item[1], target=item[3], confidences=conf,
                                    min_confidence=self.min_confidence, gap_weight=self.gap_weight)
        return AlignedPair(item[0], item[1], item[2], item[3], aln, aln.score, plan, evalue, "+", log_evalue,
                           alphabet=self.config.alphabet)

    # ---------------------------------------------------------------- numpy engine
    def _task(self, items: list, keep_plan: bool, dense_plans: Callable) -> list:
        """A task's results in order: a pair the band policy puts on a corridor or in a box
        solved there (:meth:`_band_task`), the others' ``(plans, posteriors)`` from
        ``dense_plans(pairs)`` (plans ``None`` unless kept) decoded as one MEA batch. A bad pair
        ends the task: its error follows the results before it."""
        good, error, slots = [], None, []  # slots: the banded results, and None for each dense pair in turn
        for item in items:
            try:
                self._check(item)
                if self._banded(item):
                    slots.append(self._band_task(item, keep_plan))
                    continue
            except ValueError as exc:
                error = exc  # raised by the consumer, after the results before it
                break
            good.append(item)
            slots.append(None)
        plans, posts = dense_plans(good) if good else ([], [])
        alns, close = self._mea(good, posts)
        dense = iter([self._finish(item, post, aln, plan, close=c)
                      for item, plan, post, aln, c in zip(good, plans, posts, alns, close)])
        out = [next(dense) if slot is None else slot for slot in slots]
        return out + ([error] if error is not None else [])

    def _numpy_task(self, items: list, keep_plan: bool) -> list:
        """A task of the numpy engine: its dense pairs' plans one by one (:meth:`_task`)."""

        def dense_plans(good):
            sides = self._numpy.sides_many([seq for item in good for seq in (item[1], item[3])])  # each looked up once
            solved = [self._numpy.solve_sides(sides[2 * i], sides[2 * i + 1]) for i in range(len(good))]
            return [sol.plan() if keep_plan else None for sol in solved], [sol.posteriors() for sol in solved]

        return self._task(items, keep_plan, dense_plans)

    def _numpy_results(self, pairs, keep_plan):
        tasks = _chunks(pairs, TASK_PAIRS, TASK_CELLS)
        yield from self._run_tasks(("_numpy_task", (items, keep_plan)) for items in tasks)

    # ---------------------------------------------------------------- jax engine
    def _plans_fn(self) -> Callable:
        if self._jax_plans is None:
            import jax

            # an unpickled copy holds its parameters as NumPy arrays (__getstate__): on the device once
            self.params = jax.device_put(self.params)
            enable_compilation_cache()
            run_cfg = self.config.replace(backend=self.backend)

            def plans(p, b):
                # float32 products on a GPU too: its default is one TF32 pass (~1e-3 relative),
                # not the float32 arithmetic the model was trained and calibrated in
                with jax.default_matmul_precision("highest"):
                    return M.forward(p, b, run_cfg)[0]

            self._jax_plans = jax.jit(plans)
        return self._jax_plans

    def _jax_batches(self, pairs, batch_size):
        """Chunks of pairs for one padded batch each; a bad pair ends the stream with its error.

        A chunk's dense pairs are at most ``batch_size`` and at most :data:`JAX_BATCH_CELLS`
        cells (pairs x padded query length x padded target length) of the default backend, so
        long pairs are batched together on a GPU and go one at a time on the CPU. A pair the
        band policy puts on a corridor or in a box (:meth:`_banded`) rides in the chunk where it
        falls, at most ``batch_size`` of them, and is solved on the host when the chunk is
        decoded; the input order is kept."""
        budget = jax_batch_cells()
        chunk: list = []
        lq = lt = dense = 0
        for item in pairs:
            try:
                self._check(item)
                banded = self._banded(item)
            except ValueError as exc:
                if chunk:
                    yield chunk
                yield exc
                return
            if not banded:
                grown = math.prod(padded_shape(max(lq, len(item[1])), max(lt, len(item[3]))))
                if dense and (dense + 1) * grown > budget:
                    yield chunk
                    chunk, lq, lt, dense = [], 0, 0, 0
                lq, lt, dense = max(lq, len(item[1])), max(lt, len(item[3])), dense + 1
            chunk.append(item)
            if dense == batch_size or len(chunk) - dense == batch_size:
                yield chunk
                chunk, lq, lt, dense = [], 0, 0, 0
        if chunk:
            yield chunk

    def _jax_dispatch(self, chunk):
        """Start the solve of one chunk's dense pairs (JAX dispatches asynchronously); returns
        their rows, or ``None`` when every pair of the chunk is banded."""
        chunk = [item for item in chunk if not self._banded(item)]
        if not chunk:
            return None
        lq, lt = padded_shape(max(len(q) for _, q, _, _ in chunk), max(len(t) for _, _, _, t in chunk))
        feats = self._features([q for _, q, _, _ in chunk] + [t for _, _, _, t in chunk])
        n = len(chunk)
        items = [(q, t, feats[i], feats[n + i], None) for i, (_, q, _, t) in enumerate(chunk)]
        return self._plans_fn()(self.params, M.make_batch(items, self.config, lq, lt))

    def _jax_results(self, pairs, batch_size, keep_plan):
        def tasks():
            pending = None  # (chunk, rows being computed)
            for chunk in self._jax_batches(pairs, batch_size):
                if isinstance(chunk, Exception):
                    if pending is not None:
                        yield from self._jax_decode_tasks(*pending, keep_plan)
                    yield [chunk]  # a result: raised by the consumer, after the results before it
                    return
                rows = self._jax_dispatch(chunk)  # the next solve runs while the previous chunk decodes
                if pending is not None:
                    yield from self._jax_decode_tasks(*pending, keep_plan)
                pending = (chunk, rows)
            if pending is not None:
                yield from self._jax_decode_tasks(*pending, keep_plan)

        yield from self._run_tasks(tasks())

    def _jax_decode_tasks(self, chunk, rows, keep_plan) -> Iterator[tuple]:
        """The host's share of a solved chunk (on an accelerator the solve is fast and this is
        what sets the pace): tasks (:meth:`_decode_rows`) of at most :data:`TASK_PAIRS` pairs
        and :data:`TASK_CELLS` cells, as the numpy engine's, so a chunk of long pairs spreads
        over the threads or processes. Waits for the chunk's solve."""
        rows = None if rows is None else np.asarray(rows)  # the device's float32; each task widens its own rows
        first_row = np.cumsum([0] + [not self._banded(item) for item in chunk])  # the row of each dense pair
        for part in _chunks([(i, chunk[i][1], None, chunk[i][3]) for i in range(len(chunk))], TASK_PAIRS, TASK_CELLS):
            lo, hi = part[0][0], part[-1][0] + 1  # consecutive pairs: a view of their dense pairs' rows
            mine = None if rows is None else rows[first_row[lo]:first_row[hi]]
            yield "_decode_rows", (chunk[lo:hi], mine, keep_plan)

    def _decode_rows(self, items, rows, keep_plan) -> list:
        """A task of the jax engine (:meth:`_task`): widen the solved rows of its dense pairs, in
        order, to their plans and take their posteriors; its banded pairs are solved here."""

        def dense_plans(good):
            plans = [M.pair_plan(np.asarray(row, np.float64), len(item[1]), len(item[3]))
                     for row, item in zip(rows, good)]
            return [plan if keep_plan else None for plan in plans], [plan_posteriors(plan) for plan in plans]

        return self._task(items, keep_plan, dense_plans)

    def _run_tasks(self, tasks: Iterable) -> Iterator[AlignedPair]:
        """Run a stream's tasks, each ``(method name, args)`` of this aligner (or a list: its
        results, as they are), on one pool of ``workers`` threads (each keeps its work arrays
        from task to task), with BLAS on one thread, or on the ``processes``; results in
        order, and an exception a task returns is raised when the consumer reaches it."""
        if self.processes:
            if unguarded_main_call():
                raise SinkalignError(
                    f"processes={self.processes} from the top level of the main script: each worker process "
                    "runs the main script again as it starts (Python's 'spawn' start method), where this line "
                    "would start worker processes in turn, which Python refuses. Put the script's work under "
                    "`if __name__ == \"__main__\":`, or use threads (workers=N) instead of processes")
            pool = self._process_pool()
            submit = lambda task: pool.submit(_in_worker, *task)  # noqa: E731
            width = self.processes
            watch = functools.partial(_check_workers, pool)
        else:
            submit = watch = None
            width = self.workers
        with _BLAS_ONE_THREAD:
            try:
                for results in _ordered_map(lambda task: getattr(self, task[0])(*task[1]), tasks, width, submit,
                                            watch):
                    for res in results:
                        if isinstance(res, Exception):
                            raise res
                        yield res
            except BrokenProcessPool as exc:  # a worker process was killed (out of memory?) or crashed
                codes = _exit_codes(pool, wait_s=5.0)
                self._discard_pool()  # the next call starts new ones
                how = ("" if not codes else " (" + ", ".join(
                    f"killed by signal {-code}" if code < 0 else f"exit code {code}" for code in sorted(set(codes)))
                    + ")")
                raise SinkalignError(f"a worker process of the aligner (processes={self.processes}) died in the "
                                     f"middle of its pairs{how}, e.g. killed for want of memory; fewer processes "
                                     "need less; a traceback of its own, if any, is on standard error") from exc

    # ---------------------------------------------------------------- worker processes
    def _process_pool(self) -> ProcessPoolExecutor:
        """The worker processes' pool, started on first use. Each process reads its copy of the
        aligner from a file (removed when the pool stops), not from the pipe that starts it: the
        'spawn' start method writes a process's arguments into that pipe while holding its read
        end, so a process that died before it had read them all (e.g. a main script re-run
        without ``if __name__ == "__main__":``) left the write, and this process, blocked
        forever once they were longer than the pipe's buffer (the learned model is ~4 MB)."""
        if self._pool is None:
            if getattr(multiprocessing.current_process(), "_inheriting", False):  # as multiprocessing.spawn checks
                raise SinkalignError("a worker process of an aligner runs the main script again as it starts "
                                     "(Python's 'spawn' start method), and the script's top level starts worker "
                                     "processes: put its work under `if __name__ == \"__main__\":`")
            fd, path = tempfile.mkstemp(prefix="sinkalign-aligner-", suffix=".pickle")
            try:
                with os.fdopen(fd, "wb") as fh:
                    pickle.dump(self, fh, protocol=pickle.HIGHEST_PROTOCOL)
                pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"),
                                           initializer=_init_worker, initargs=(path,))
            except BaseException:
                _remove(path)
                raise
            self._pool = pool
            self._pool_finalizer = weakref.finalize(self, _stop_pool, pool, path)
        return self._pool

    def _take_pool(self) -> tuple[ProcessPoolExecutor, str] | None:
        """The worker processes' pool and the file its processes read the aligner from, now no
        longer this aligner's (``None`` if none was started)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return None
        _, _, (_, path), _ = self._pool_finalizer.detach()
        return pool, path

    def close(self) -> None:
        """Stop the worker processes (``processes``), if any were started; a later call starts
        them again."""
        taken = self._take_pool()
        if taken is not None:
            taken[0].shutdown(wait=True, cancel_futures=True)
            _remove(taken[1])

    def _discard_pool(self) -> None:
        """Kill the processes of a broken pool. Not :meth:`close`: a process killed while it
        held the task queue's lock leaves the others waiting on it forever, so joining them
        would hang."""
        taken = self._take_pool()
        if taken is None:
            return
        pool, path = taken
        kill = getattr(pool, "kill_workers", None)  # Python 3.14
        if kill is not None:
            kill()
        else:
            for proc in _pool_processes(pool):
                proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        _remove(path)

    def __enter__(self) -> Aligner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:
        """Pickled (e.g. for a worker process): no worker processes, nothing compiled, no
        embedder (rebuilt on use; a worker process computes no features), an empty sequence
        cache, and the parameters as NumPy arrays (the same values), put on JAX's device when
        the copy builds its compiled forward pass (:meth:`_plans_fn`): unpickling device arrays starts JAX's
        backend, so each worker process, which only decodes, held an accelerator context of its
        own (GPU memory, seconds of start, and on a GPU whose memory JAX preallocates, a
        failure)."""
        import jax

        state = self.__dict__.copy()
        state.pop("_pool_finalizer", None)
        state.update(_pool=None, _jax_plans=None, _embedder=None,
                     params=jax.tree_util.tree_map(np.asarray, self.params))
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __copy__(self) -> Aligner:
        """A shallow copy (its model, engine and compiled forward pass shared) that starts its
        own worker processes if it uses any."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.__dict__.pop("_pool_finalizer", None)
        new._pool = None
        return new


_WORKER: Aligner | None = None  # a worker process's copy of the aligner


def _stop_pool(pool: ProcessPoolExecutor, path: str) -> None:
    """An aligner's pool when the aligner is collected: stopped without waiting, its file removed."""
    pool.shutdown(wait=False, cancel_futures=True)
    _remove(path)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _init_worker(path: str) -> None:
    global _WORKER
    with open(path, "rb") as fh:
        aligner = pickle.load(fh)
    aligner.workers, aligner.processes = 1, 0  # one thread in each worker process
    _BLAS_ONE_THREAD.warned = True  # a failure to limit BLAS was said by the parent (its stream limits it first)
    _BLAS_ONE_THREAD.__enter__()  # and BLAS on one thread, for the process's life
    _WORKER = aligner


def _in_worker(name: str, args: tuple) -> list:
    """A task of :meth:`Aligner._run_tasks` in a worker process, on its copy of the aligner."""
    return getattr(_WORKER, name)(*args)


WORKER_POLL_S = 1.0  # how often a wait for a worker process's result checks that the workers live


def _pool_processes(pool: ProcessPoolExecutor) -> list:
    """The processes of ``pool`` (the executor's own record of them; none once it has dropped it)."""
    return list((getattr(pool, "_processes", None) or {}).values())


def _exit_codes(pool: ProcessPoolExecutor, wait_s: float = 0.0) -> list[int]:
    """The exit codes of the processes of ``pool`` that have exited (negative: killed by that
    signal), after waiting up to ``wait_s`` in all for them to end: a broken pool's futures fail
    as soon as one process's pipe closes, which can be before the process has exited."""
    procs = _pool_processes(pool)
    deadline = time.monotonic() + wait_s
    for proc in procs:
        if wait_s > 0:
            proc.join(max(0.0, deadline - time.monotonic()))
    return [proc.exitcode for proc in procs if proc.exitcode is not None]


def _check_workers(pool: ProcessPoolExecutor) -> None:
    """Raise :class:`BrokenProcessPool` if a process of ``pool`` has exited.

    A pool's processes live until it is shut down, so one that exited died. The executor sees
    such deaths itself, but a process that dies as it starts can be missed by its management
    thread (which waits on the processes it knew of when it last woke), and the wait for a
    result would then never end."""
    codes = _exit_codes(pool)
    if codes:
        raise BrokenProcessPool(f"{len(codes)} worker process(es) exited, exit codes {codes}")


class _SingleThreadedBlas:
    """While at least one numpy-engine stream is running, BLAS (OpenBLAS, MKL) runs on one
    thread: the engine's matrix-vector products are small and memory-bound, and the engine
    parallelises over pairs itself; a threaded BLAS under it spins its threads and, on a
    busy machine, costs many times the work (30x measured at length 1000). Reference
    counted across streams; the previous setting comes back when the last one ends.

    The limit is threadpoolctl's (a dependency). Where it cannot be set (threadpoolctl
    missing from an environment installed without dependencies, or failing) that is said
    once per process, as a warning: unlimited, every worker process or thread runs BLAS on
    all the cores (on 2 cores, ``benchmarks/host_parallel.py``: 2 worker processes ran 3.0x
    slower, 2 threads 1.7x)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._limit = None
        self.warned = False  # the failure to limit was said (a worker process is told its parent said it)

    def __enter__(self):
        with self._lock:
            if self._users == 0:
                try:
                    from threadpoolctl import ThreadpoolController

                    # looked up afresh (0.3 ms): a BLAS library loaded since (SciPy's) is limited too
                    self._limit = ThreadpoolController().limit(limits=1, user_api="blas")
                except Exception as exc:
                    self._limit = None
                    if not self.warned:
                        self.warned = True
                        log.warning("BLAS keeps all its threads under the aligner's threads and worker processes, "
                                    "which can make them several times slower: threadpoolctl could not limit it "
                                    "(%s: %s). threadpoolctl is a dependency of sinkalign: `pip install "
                                    "threadpoolctl`", type(exc).__name__, exc)
            self._users += 1
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._limit is not None:
                self._limit.restore_original_limits()
                self._limit = None


_BLAS_ONE_THREAD = _SingleThreadedBlas()


def _available_bytes() -> int | None:
    """Memory this process may still take: Linux's MemAvailable, less where a cgroup (v2) limit
    leaves less; ``None`` where neither can be read."""
    found = []
    try:
        with open("/proc/meminfo") as fh:
            found += [int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


class _CellBudget:
    """Residue pairs of large pairs in work at once in this process (:data:`HOST_CELL_BUDGET`,
    read when a pair asks, so a test or a benchmark may change it; ``None``: worked out once
    from the memory available): :meth:`hold` waits while the others in work would take the
    total past it; a pair alone may exceed it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._used = 0
        self._auto: int | None = None

    def cap(self) -> int:
        if HOST_CELL_BUDGET is not None:
            return HOST_CELL_BUDGET
        if self._auto is None:
            free = _available_bytes()
            self._auto = max(MAX_PAIR_CELLS, (free // 2) // BYTES_PER_CELL if free else 0)
            log.debug("banded pairs in work at once: up to %d residue pairs", self._auto)
        return self._auto

    @contextlib.contextmanager
    def hold(self, cells: int):
        with self._cond:
            cap = self.cap()
            while self._used and self._used + cells > cap:
                self._cond.wait()
            self._used += cells
        try:
            yield
        finally:
            with self._cond:
                self._used -= cells
                self._cond.notify_all()


_HOST_CELLS = _CellBudget()


def _chunks(items: Iterable, size: int, cells: int | None = None) -> Iterator[list]:
    """Lists of at most ``size`` consecutive items (``(qid, q, tid, t)``), and, with
    ``cells``, of at most that many ``len(q) * len(t)`` cells (a longer pair goes alone)."""
    chunk: list = []
    total = 0
    for item in items:
        area = len(item[1]) * len(item[3]) if isinstance(item[1], str) and isinstance(item[3], str) else 0  # else refused
        if chunk and cells is not None and total + area > cells:
            yield chunk
            chunk, total = [], 0
        chunk.append(item)
        total += area
        if len(chunk) == size:
            yield chunk
            chunk, total = [], 0
    if chunk:
        yield chunk


def _ordered_map(fn: Callable, tasks: Iterable, workers: int, submit: Callable | None = None,
                 watch: Callable[[], None] | None = None) -> Iterator:
    """``map(fn, tasks)`` on ``workers`` threads, in input order, with at most ``2 * workers``
    tasks submitted ahead of the consumer (so memory stays bounded on an endless stream). A
    task that is a list is its own result. ``submit(task)``: a future of the task's result
    from elsewhere (worker processes) instead of ``fn`` on this process's threads; ``watch()``,
    called every ``WORKER_POLL_S`` while a result is awaited, raises if that elsewhere is gone."""

    def result(fut: Future):
        while watch is not None:
            try:
                return fut.result(timeout=WORKER_POLL_S)
            except FutureTimeout:
                watch()
        return fut.result()

    if workers <= 1 and submit is None:
        yield from (task if isinstance(task, list) else fn(task) for task in tasks)
        return
    with contextlib.ExitStack() as stack:
        if submit is None:
            pool = stack.enter_context(ThreadPoolExecutor(workers, thread_name_prefix="sinkalign"))
            submit = functools.partial(pool.submit, fn)
        pending: deque = deque()
        try:
            for task in tasks:
                if isinstance(task, list):
                    done: Future = Future()
                    done.set_result(task)
                    pending.append(done)
                else:
                    pending.append(submit(task))
                if len(pending) >= 2 * workers:
                    yield result(pending.popleft())
            while pending:
                yield result(pending.popleft())
        finally:
            for fut in pending:
                fut.cancel()


def _box_of(lo: np.ndarray, hi: np.ndarray) -> tuple[int, int, int, int]:
    """``(r0, r1, c0, c1)``: the rows and columns a box strip spans (its non-empty rows)."""
    rows = np.flatnonzero(hi > lo)
    r0, r1 = int(rows[0]), int(rows[-1]) + 1
    return r0, r1, int(lo[r0:r1].min()), int(hi[r0:r1].max())


def _sub_band(match: BandMatrix, box: tuple) -> BandMatrix:
    """The cells of ``match`` inside ``box`` (:func:`_box_of`) as a band of its own."""
    r0, r1, c0, c1 = box
    ptr = match.indptr
    return BandMatrix(match.lo[r0:r1] - c0, match.hi[r0:r1] - c0, match.data[ptr[r0]:ptr[r1]], c1 - c0)


def _sub_alignment(aln, box: tuple):
    """``aln`` (whose pairs all lie in ``box``) as an alignment of the box's subsequences."""
    r0, r1, c0, c1 = box
    return dataclasses.replace(aln, pairs=aln.pairs - np.array([r0, c0], np.int64),
                               query_gap_posterior=aln.query_gap_posterior[r0:r1],
                               target_gap_posterior=aln.target_gap_posterior[c0:c1])
