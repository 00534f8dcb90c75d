"""``esm2``: per-residue representations from a fair-esm ESM-2 protein language model.

Weights
-------
Nothing is ever downloaded. The checkpoint is, in this order:

1. ``weights=PATH`` (the CLI's ``--esm-weights PATH``): a fair-esm ``.pt`` file. The
   architecture is chosen by fair-esm from the model name, which is ``model=`` when
   given, else the file's stem; it must start with ``esm2`` (for instance
   ``esm2_t33_650M_UR50D.pt``).
2. otherwise the torch hub cache: ``<torch.hub.get_dir()>/checkpoints/<model>.pt``, i.e.
   ``$TORCH_HOME/hub/checkpoints/`` (default ``~/.cache/torch/hub/checkpoints/``),
   which is where ``esm.pretrained.<model>()`` puts the file when it downloads it.

A missing file raises :class:`~sinkalign.errors.MissingFileError` (a ``FileNotFoundError``)
naming the paths searched and, for a released model, the URL to fetch the weights from on a
machine with network access; an unreadable one a :class:`~sinkalign.errors.FormatError`.

Loading goes through fair-esm's own ``esm.pretrained.load_model_and_alphabet_core``
(the function that ``load_model_and_alphabet_local`` calls after reading the file).
The file is read with ``torch.load(..., weights_only=True)``, allowing only
``argparse.Namespace`` (which fair-esm checkpoints hold in ``cfg``) besides tensors and
containers: no arbitrary code runs when a checkpoint is opened. The contact-prediction
regression head (a separate ``-contact-regression.pt`` file) is not needed for
representations and is not loaded.

Computation
-----------
* Sequences are cut into windows of at most ``window`` residues (default 1022, ESM's
  limit: 1024 tokens with BOS and EOS). A longer sequence of length L gets windows
  starting at ``0, s, 2s, ...`` with stride ``s = window - overlap``, the last one
  moved to end exactly at L. Windows are embedded independently and stitched: each
  residue takes its vector from the window in which it lies furthest from a window
  edge, i.e. the overlap of two consecutive windows ``[a_k, b_k)`` and
  ``[a_{k+1}, b_{k+1})`` is split at ``(a_{k+1} + b_k) // 2``. Every output vector is
  thus the genuine output of one window (no averaging), with at least about
  ``overlap // 2`` residues of context on both sides except at the sequence ends.
* Windows are sorted by length (longest first) and packed into batches whose padded
  size ``n_windows * (longest + 2)`` stays within ``max_tokens``; padding is masked
  by ESM, so a sequence's embedding does not depend on its batch-mates (up to float
  summation order, ~1e-6).
* The representation is that of layer ``layer`` (default ``-1``: the last layer,
  after ESM's final layer norm; ``0`` is the token embedding, negative counts back
  from the last). BOS and EOS rows are dropped: row i is residue i.
* ``J`` (Leu/Ile, not in ESM's vocabulary) is embedded as ``X``; ``B Z U O X`` are ESM
  tokens of their own. Lower-case letters are upper-cased. One trailing stop ``*`` is
  dropped, as the FASTA reader drops it (a ``*`` elsewhere is an error).
* The width D and the depth are those of the released model of that name; for another
  name they are read from the checkpoint's ``cfg`` (without loading its tensors).
* ``device="auto"`` takes CUDA when ``torch.cuda.is_available()``, else the CPU;
  ``fp16=True`` (CUDA only) runs the model in half precision (outputs are float32
  arrays of half-precision values).
* Results are cached on disk under ``cache_dir`` (default
  :func:`~sinkalign.align.embed.base.default_cache_dir`:
  ``$XDG_CACHE_HOME/sinkalign/embeddings``, i.e. ``~/.cache/sinkalign/embeddings``;
  ``SINKALIGN_EMBED_CACHE=DIR`` moves it, ``SINKALIGN_EMBED_CACHE=off`` turns it off),
  keyed by :meth:`config` (which includes the sha256 of the weights file) and the
  sequence's sha1: one ``.npy`` file of ``L x D`` float32 per sequence (``4 D`` bytes a
  residue: 1,280 for the 8M model, 5,120 for the 650M one). A cached sequence does not run
  the model, and a run where everything is cached does not even load it. An entry of the
  wrong shape (length or width) is recomputed; a cache that cannot be written is said in
  one warning, and the run goes on without it.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import warnings
from collections.abc import Sequence as SequenceT
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sinkalign.align.embed.base import EmbeddingCache, SequenceLike, as_records, default_cache_dir
from sinkalign.errors import FormatError, InputError, MissingFileError, require
from sinkalign.utils import file_sha256

__all__ = ["DEFAULT_ESM2_MODEL", "ESM2_DIMS", "ESM2Config", "ESM2Embedder", "checkpoint_shape", "load_esm2",
           "plan_windows"]

logger = logging.getLogger(__name__)

DEFAULT_ESM2_MODEL = "esm2_t6_8M_UR50D"
#: Widths and depths of the released ESM-2 models (D, layers).
ESM2_DIMS = {
    "esm2_t6_8M_UR50D": (320, 6),
    "esm2_t12_35M_UR50D": (480, 12),
    "esm2_t30_150M_UR50D": (640, 30),
    "esm2_t33_650M_UR50D": (1280, 33),
    "esm2_t36_3B_UR50D": (2560, 36),
    "esm2_t48_15B_UR50D": (5120, 48),
}
#: Most residues ESM-2 sees at once (1024 tokens minus BOS and EOS).
ESM_MAX_RESIDUES = 1022
_MODEL_NAME = re.compile(r"^esm2[A-Za-z0-9_.\-]*$")
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
_WEIGHTS_URL = "https://dl.fbaipublicfiles.com/fair-esm/models/{name}.pt"


@dataclass(frozen=True, kw_only=True)
class ESM2Config:
    """Options of the ``esm2`` embedder (see the module docstring).

    Attributes:
        model: ESM-2 model name (``None``: the stem of ``weights``, else
            ``esm2_t6_8M_UR50D``); must start with ``esm2``.
        weights: path to a fair-esm ``.pt`` checkpoint; ``None`` searches the torch
            hub cache for ``<model>.pt``.
        layer: representation layer; ``-1`` is the last, ``0`` the token embedding.
        max_tokens: padded tokens per batch (BOS/EOS included); at least ``window + 2``.
        window: most residues per model call, ``<= 1022``.
        overlap: residues shared by consecutive windows of a long sequence, ``0 <= overlap < window``.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        fp16: half precision (CUDA only).
        cache: read and write the on-disk cache.
        cache_dir: cache root (``None``: :func:`default_cache_dir`).
        progress: show a tqdm bar over batches.
    """

    model: str | None = None
    weights: str | os.PathLike | None = None
    layer: int = -1
    max_tokens: int = 4096
    window: int = ESM_MAX_RESIDUES
    overlap: int = 256
    device: str = "auto"
    fp16: bool = False
    cache: bool = True
    cache_dir: str | os.PathLike | None = None
    progress: bool = False

    def __post_init__(self) -> None:
        if self.model is not None and (not isinstance(self.model, str) or not _MODEL_NAME.match(self.model)):
            raise InputError(
                f"model={self.model!r} must be an ESM-2 model name starting with 'esm2' (e.g. {DEFAULT_ESM2_MODEL!r})"
            )
        if self.weights is not None and not isinstance(self.weights, (str, os.PathLike)):
            raise InputError(f"weights={self.weights!r} must be a path or None")
        if not _is_int(self.layer):
            raise InputError(f"layer={self.layer!r} must be an integer")
        if not _is_int(self.window) or not 1 <= self.window <= ESM_MAX_RESIDUES:
            raise InputError(f"window={self.window!r} must be an integer in [1, {ESM_MAX_RESIDUES}]")
        if not _is_int(self.overlap) or not 0 <= self.overlap < self.window:
            raise InputError(f"overlap={self.overlap!r} must be an integer in [0, window={self.window})")
        if not _is_int(self.max_tokens) or self.max_tokens < self.window + 2:
            raise InputError(f"max_tokens={self.max_tokens!r} must be an integer >= window + 2 = {self.window + 2}")
        if not isinstance(self.device, str) or not _DEVICE.match(self.device):
            raise InputError(f"device={self.device!r} is not one of 'auto', 'cpu', 'cuda', 'cuda:N'")
        for flag in ("fp16", "cache", "progress"):
            if not isinstance(getattr(self, flag), bool):
                raise InputError(f"{flag}={getattr(self, flag)!r} must be True or False")
        if self.device == "cpu" and self.fp16:
            raise InputError("fp16=True needs a CUDA device, device='cpu'")
        if self.cache_dir is not None and not isinstance(self.cache_dir, (str, os.PathLike)):
            raise InputError(f"cache_dir={self.cache_dir!r} must be a path or None")


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def plan_windows(length: int, window: int, overlap: int) -> list[tuple[int, int, int, int]]:
    """Windows covering ``[0, length)`` and the part of each that is kept.

    Returns:
        ``(start, end, keep_start, keep_end)`` per window (0-based, half-open, in
        sequence coordinates). The kept parts tile ``[0, length)`` exactly, in order.
    """
    if length <= window:
        return [(0, length, 0, length)]
    stride = window - overlap
    starts = list(range(0, length - window, stride)) + [length - window]
    ends = [s + window for s in starts]
    cuts = [0] + [(starts[k + 1] + ends[k]) // 2 for k in range(len(starts) - 1)] + [length]
    return [(starts[k], ends[k], cuts[k], cuts[k + 1]) for k in range(len(starts))]


def _resolve_weights(options: ESM2Config) -> tuple[str, Path]:
    """(model name, checkpoint path); raises MissingFileError (a FileNotFoundError) listing what was searched."""
    if options.weights is not None:
        path = Path(options.weights).expanduser()
        if not path.is_file():  # before the name: a wrong name of a missing file is beside the point
            raise MissingFileError(f"ESM-2 weights file {path} does not exist")
        name = options.model if options.model is not None else path.stem
        if not _MODEL_NAME.match(name):
            raise InputError(
                f"weights={str(path)!r}: fair-esm picks the architecture from the model name, and {name!r} does "
                "not start with 'esm2'; rename the file (e.g. esm2_t6_8M_UR50D.pt) or pass model='esm2_...'"
            )
        return name, path
    torch = require("torch", "torch", "ESM-2 embeddings (--embedder esm2)")
    name = options.model or DEFAULT_ESM2_MODEL
    hub = Path(torch.hub.get_dir()) / "checkpoints"
    path = hub / f"{name}.pt"
    if not path.is_file():
        if name in ESM2_DIMS:
            fetch = (f"on a machine with network access fetch {_WEIGHTS_URL.format(name=name)} (or run "
                     f"esm.pretrained.{name}()), then copy the file to {hub}/ or pass its path")
        else:  # not a released model: there is nothing to download
            fetch = (f"{name!r} is not a released ESM-2 model ({', '.join(ESM2_DIMS)}): copy your "
                     f"{name}.pt to {hub}/ or pass its path")
        raise MissingFileError(
            f"ESM-2 weights for {name!r} not found; searched: {path} (the torch hub cache, "
            f"$TORCH_HOME/hub/checkpoints). Nothing is downloaded automatically: {fetch} with --esm-weights PATH "
            "(weights=PATH)."
        )
    return name, path


def _torch_reason(err: BaseException) -> str:
    """What went wrong in ``torch.load``, less torch's advice: its ``weights_only`` errors tell
    the reader to load again with ``weights_only=False`` (running whatever code the file holds)
    or to allow more globals, neither of which is for a weights file of unknown origin."""
    text = str(err)
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1]
    lines = [line.split(" Please use `torch.serialization", 1)[0].strip()  # the allow-listing advice
             for line in text.splitlines()]
    kept = [line for line in lines if line and "weights_only" not in line and "safe_globals" not in line
            and not line.startswith("Check the documentation")]
    return f"{type(err).__name__}: {kept[0]}" if kept else type(err).__name__


def _read_checkpoint(path: Path, mmap: bool = False):
    """``torch.load`` of a fair-esm file, tensors and ``argparse.Namespace`` only; a
    :class:`FormatError` naming the file when it cannot be read."""
    import torch

    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(str(path), map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # torch raises RuntimeError, UnpicklingError, EOFError, OSError, zipfile errors...
        raise FormatError(
            f"{path}: cannot read ESM-2 weights ({_torch_reason(err)}); "
            "the file is corrupt, truncated or not a fair-esm checkpoint"
        ) from err


def _architecture(data, path: Path):
    """The checked ``cfg['model']`` of a loaded fair-esm checkpoint (else :class:`FormatError`)."""
    cfg = data.get("cfg") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict) or not isinstance(cfg, dict):
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise FormatError(f"{path}: not a fair-esm ESM-2 checkpoint (expected keys 'model' and 'cfg', found {found})")
    arch = cfg.get("model")
    missing = [k for k in ("encoder_layers", "encoder_embed_dim", "encoder_attention_heads", "token_dropout")
               if not hasattr(arch, k)]  # fmt: skip
    if missing:
        raise FormatError(f"{path}: cfg['model'] lacks {missing}; not a fair-esm ESM-2 checkpoint")
    return arch


def checkpoint_shape(path: str | os.PathLike) -> tuple[int, int]:
    """``(layers, D)`` of a fair-esm ESM-2 checkpoint, from its ``cfg``, without reading its
    tensors (the file is memory-mapped; a file in torch's old format is read whole).

    Raises:
        FormatError: the file cannot be read, or is no fair-esm checkpoint.
    """
    require("torch", "torch", "reading ESM-2 weights")
    path = Path(path)
    try:
        data = _read_checkpoint(path, mmap=True)
    except FormatError:  # torch's old (non-zip) format cannot be mapped: read it whole
        data = _read_checkpoint(path)
    arch = _architecture(data, path)
    try:
        return int(arch.encoder_layers), int(arch.encoder_embed_dim)
    except (TypeError, ValueError) as err:
        raise FormatError(f"{path}: cfg['model'] has no whole numbers of layers and width ({err})") from err


def load_esm2(path: str | os.PathLike, name: str | None = None):
    """Load a fair-esm ESM-2 checkpoint without network access.

    Args:
        path: ``.pt`` file in fair-esm's format (``{"model": state_dict with
            "encoder."-prefixed keys, "cfg": {"model": Namespace(encoder_layers,
            encoder_embed_dim, encoder_attention_heads, token_dropout)}}``).
        name: model name for fair-esm's architecture choice (default: the file stem).

    Returns:
        ``(model, alphabet)`` as from ``esm.pretrained``, the model in eval mode on the CPU.

    Raises:
        FormatError: unreadable, truncated or non-ESM-2 file (the path is named); a ValueError.
    """
    require("esm", "torch", "loading ESM-2 weights")
    import esm.pretrained

    path = Path(path)
    name = path.stem if name is None else name
    if not name.startswith("esm2"):
        raise InputError(f"{path}: model name {name!r} must start with 'esm2'")
    data = _read_checkpoint(path)
    _architecture(data, path)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Regression weights not found")
            model, alphabet = esm.pretrained.load_model_and_alphabet_core(name, data, None)
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as err:
        detail = " ".join(str(err).split())
        raise FormatError(f"{path}: weights do not fit the ESM-2 architecture in its cfg: {detail}") from err
    model.eval()
    return model, alphabet


class ESM2Embedder:
    """ESM-2 per-residue representations (see the module docstring).

    The weights file is located (and its absence reported) at construction; it is
    hashed the first time :meth:`config` is needed, its ``cfg`` read (for a model name
    that is not a released one) the first time the width or depth is, and the model
    loaded the first time it must run.

    Attributes:
        options: the :class:`ESM2Config`.
        model_name: the resolved model name.
        weights_path: the resolved checkpoint path.
        device: the resolved torch device string.
    """

    name = "esm2"
    alphabet = "protein"

    def __init__(self, config: ESM2Config | None = None, **options) -> None:
        if config is not None and options:
            raise ValueError("give either config or keyword options, not both")
        self.options = config if config is not None else ESM2Config(**options)
        self.model_name, self.weights_path = _resolve_weights(self.options)
        self.device = self._resolve_device()
        known = ESM2_DIMS.get(self.model_name)
        self._dim, self._num_layers = known if known else (None, None)
        if self._num_layers is not None:
            self._check_layer(self._num_layers)
        self._model = None
        self._alphabet = None
        self._sha256: str | None = None
        self._cache: EmbeddingCache | None = None

    def __repr__(self) -> str:
        return f"ESM2Embedder(model={self.model_name!r}, weights={str(self.weights_path)!r}, device={self.device!r})"

    def _resolve_device(self) -> str:
        import torch

        device = self.options.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        elif device.startswith("cuda") and not torch.cuda.is_available():
            raise InputError(f"device={device!r} but torch.cuda.is_available() is False")
        if self.options.fp16 and device == "cpu":
            raise InputError(f"fp16=True needs a CUDA device (device={self.options.device!r} resolved to 'cpu')")
        return device

    def _check_layer(self, num_layers: int) -> None:
        if not -(num_layers + 1) <= self.options.layer <= num_layers:
            raise InputError(
                f"layer={self.options.layer} out of range for {self.model_name} with {num_layers} layers "
                f"(valid: {-(num_layers + 1)} .. {num_layers})"
            )

    # -- lazy model -------------------------------------------------------------------

    @property
    def model(self):
        """The fair-esm ``ESM2`` module (loaded on first access)."""
        if self._model is None:
            model, alphabet = load_esm2(self.weights_path, self.model_name)
            expected = ESM2_DIMS.get(self.model_name)
            if expected is not None and (model.embed_dim, model.num_layers) != expected:
                raise FormatError(
                    f"{self.weights_path}: has {model.num_layers} layers of width {model.embed_dim}, "
                    f"{self.model_name} should have {expected[1]} of width {expected[0]}"
                )
            self._num_layers, self._dim = model.num_layers, model.embed_dim
            self._check_layer(model.num_layers)
            model = model.to(self.device)
            if self.options.fp16:
                model = model.half()
            self._model, self._alphabet = model, alphabet
            logger.info("loaded %s (%d layers, D=%d) from %s on %s", self.model_name, model.num_layers,
                        model.embed_dim, self.weights_path, self.device)  # fmt: skip
        return self._model

    @property
    def model_loaded(self) -> bool:
        return self._model is not None

    def _shape(self) -> tuple[int, int]:
        """``(layers, D)``: the released model's, else the checkpoint's ``cfg`` (its tensors unread)."""
        if self._num_layers is None or self._dim is None:
            layers, dim = checkpoint_shape(self.weights_path)
            self._check_layer(layers)
            self._num_layers, self._dim = layers, dim
        return int(self._num_layers), int(self._dim)

    @property
    def dim(self) -> int:
        """D (known from the model name for released models, else read from the checkpoint's cfg)."""
        return self._shape()[1]

    @property
    def layer(self) -> int:
        """The representation layer as a non-negative index."""
        return self.options.layer % (self._shape()[0] + 1)

    def config(self) -> dict:
        """``{"name", "model", "weights_sha256", "layer", "window", "overlap", "fp16"}``.

        The sha256 of the weights file identifies the parameters exactly (hashing a
        large checkpoint takes a few seconds, once per embedder). Device, batch size
        and cache settings are left out: they change results only by float rounding.
        """
        if self._sha256 is None:
            self._sha256 = file_sha256(self.weights_path)
        return {
            "name": self.name,
            "model": self.model_name,
            "weights_sha256": self._sha256,
            "layer": int(self.options.layer),
            "window": int(self.options.window),
            "overlap": int(self.options.overlap),
            "fp16": self.options.fp16,
        }

    @property
    def cache(self) -> EmbeddingCache | None:
        """The on-disk cache (``None`` with ``cache=False``, or with no ``cache_dir`` and
        ``SINKALIGN_EMBED_CACHE=off``). Its entries are checked against the width D."""
        if not self.options.cache:
            return None
        if self._cache is None:
            root = self.options.cache_dir if self.options.cache_dir is not None else default_cache_dir()
            if root is None:
                return None
            self._cache = EmbeddingCache(Path(root).expanduser(), self.config(), self.dim)
        return self._cache

    # -- embedding --------------------------------------------------------------------

    def embed(self, seqs: SequenceT[SequenceLike] | SequenceLike) -> list[np.ndarray]:
        """One ``[L_i, D]`` float32 array per protein sequence, in input order.

        A protein's one trailing stop ``*`` is dropped (its array has a row fewer than the string).

        Raises:
            SequenceFormatError: an illegal character (input index, record id, position).
            InputError: empty input items. AlphabetError: DNA records (both ValueErrors).
        """
        records = as_records(seqs, "protein", ("protein",), self.name)
        seq_list = [residues for residues, _ in records]
        out: list[np.ndarray | None] = [None] * len(seq_list)
        cache = self.cache
        todo: dict[str, list[int]] = {}
        for k, seq in enumerate(seq_list):
            hit = cache.get(seq) if cache is not None else None
            if hit is not None:
                out[k] = hit
            else:
                todo.setdefault(seq, []).append(k)
        if todo:
            computed = self._compute(list(todo))
            for seq, arr in zip(todo, computed):
                if cache is not None:
                    cache.put(seq, arr)
                for j, k in enumerate(todo[seq]):
                    out[k] = arr if j == 0 else arr.copy()
        logger.debug("esm2: %d sequences, %d computed, %d from cache", len(seq_list), len(todo),
                     len(seq_list) - sum(len(v) for v in todo.values()))  # fmt: skip
        return out  # type: ignore[return-value]

    def _compute(self, seqs: list[str]) -> list[np.ndarray]:
        """Run the model over ``seqs`` (distinct, validated, upper case): windows, batches, stitching."""
        import torch
        from tqdm.auto import tqdm

        model = self.model
        layer = self.layer
        opts = self.options
        # Items: (sequence index, window start, window end); longest first, ties by position.
        plans = [plan_windows(len(s), opts.window, opts.overlap) for s in seqs]
        items = [(i, a, b) for i, plan in enumerate(plans) for (a, b, _, _) in plan]
        items.sort(key=lambda it: (-(it[2] - it[1]), it[0], it[1]))
        batches: list[list[tuple[int, int, int]]] = []
        for it in items:
            n = it[2] - it[1]
            if batches and (len(batches[-1]) + 1) * (batches[-1][0][2] - batches[-1][0][1] + 2) <= opts.max_tokens:
                batches[-1].append(it)
            else:
                batches.append([it])
            assert n + 2 <= opts.max_tokens
        converter = self._alphabet.get_batch_converter()
        reps: dict[tuple[int, int], np.ndarray] = {}
        with torch.inference_mode():
            for batch in tqdm(batches, unit="batch", desc="esm2", disable=not opts.progress):
                raw = [(str(i), seqs[i][a:b].replace("J", "X")) for i, a, b in batch]
                _, _, tokens = converter(raw)  # [B, T] with BOS, EOS, padding
                result = model(tokens.to(self.device), repr_layers=[layer])
                rep = result["representations"][layer].float().cpu().numpy()  # [B, T, D]
                for row, (i, a, b) in enumerate(batch):
                    reps[(i, a)] = rep[row, 1 : 1 + b - a]  # drop BOS, EOS, padding: [b - a, D]
        out = []
        for i, plan in enumerate(plans):
            parts = [reps[(i, a)][ka - a : kb - a] for (a, _, ka, kb) in plan]
            arr = np.ascontiguousarray(np.concatenate(parts, axis=0), dtype=np.float32)
            assert arr.shape == (len(seqs[i]), self._dim)
            out.append(arr)
        return out
