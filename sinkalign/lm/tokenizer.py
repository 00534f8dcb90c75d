"""Single-nucleotide tokenizer for the DNA language models.

Vocabulary (8 ids)::

    A=0  C=1  G=2  T=3  N=4  <pad>=5  <bos>=6  <eos>=7

The nucleotide ids are those of :mod:`sinkalign.lm.data` (``A=0 .. N=4``), so the int8
windows produced there are already valid token ids (see :meth:`NucleotideTokenizer.from_data`).

Input rules: ``encode`` accepts ``A C G T N`` in either case; lowercase (soft-masked
repeats in genome FASTA) is uppercased, i.e. the mask is dropped. ``U`` (either case) is read
as ``T``, as the aligner reads RNA against DNA (:func:`sinkalign.io.fasta.rna_as_dna`), so
``decode(encode("ACGU"))`` is ``"ACGT"``. Anything else -- IUPAC ambiguity codes, gaps,
whitespace, non-ASCII -- raises ``ValueError`` naming the character and its 0-based position.
(Callers that want IUPAC codes read as ``N`` should use
:func:`sinkalign.lm.data.as_model_bases` first, the mapping :func:`sinkalign.lm.data.read_genome`
applies.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["BOS_ID", "EOS_ID", "PAD_ID", "NucleotideTokenizer", "VOCAB"]

#: Token strings by id.
VOCAB: tuple[str, ...] = ("A", "C", "G", "T", "N", "<pad>", "<bos>", "<eos>")
PAD_ID = 5
BOS_ID = 6
EOS_ID = 7
_N_BASES = 5

_LUT = np.full(256, -1, dtype=np.int64)
for _i, _c in enumerate("ACGTN"):
    _LUT[ord(_c)] = _i
    _LUT[ord(_c.lower())] = _i
_LUT[ord("U")] = _LUT[ord("u")] = _LUT[ord("T")]  # RNA: U is T
_ALLOWED = "allowed are A, C, G, T, N and U (read as T), either case"


class NucleotideTokenizer:
    """Map DNA strings to ``LongTensor`` ids and back (stateless; see module docstring)."""

    vocab: tuple[str, ...] = VOCAB
    vocab_size: int = len(VOCAB)
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID

    def __repr__(self) -> str:
        """``NucleotideTokenizer(vocab_size=8: A C G T N <pad> <bos> <eos>)``: the tokens by id."""
        return f"NucleotideTokenizer(vocab_size={self.vocab_size}: {' '.join(self.vocab)})"

    def encode(self, seq: str, *, add_bos: bool = False, add_eos: bool = False) -> torch.Tensor:
        """Encode ``seq`` into ids ``[L]`` (``[L + add_bos + add_eos]``), dtype int64.

        ``U`` / ``u`` (RNA) give the id of ``T``.

        Raises:
            ValueError: a character outside ``ACGTNUacgtnu``, naming it and its 0-based position.
        """
        if not isinstance(seq, str):
            raise ValueError(f"encode expects a str, got {type(seq).__name__}")
        try:
            raw = seq.encode("ascii")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"invalid character {seq[exc.start]!r} at 0-based position {exc.start}: {_ALLOWED}"
            ) from None
        ids = _LUT[np.frombuffer(raw, dtype=np.uint8)]
        bad = np.flatnonzero(ids < 0)
        if bad.size:
            pos = int(bad[0])
            raise ValueError(
                f"invalid character {seq[pos]!r} at 0-based position {pos}: {_ALLOWED}"
            )
        parts = [np.array([BOS_ID])] if add_bos else []
        parts.append(ids)
        if add_eos:
            parts.append(np.array([EOS_ID]))
        return torch.from_numpy(np.concatenate(parts).astype(np.int64))

    def decode(self, ids: torch.Tensor | Sequence[int] | np.ndarray, *, skip_special: bool = True) -> str:
        """Decode 1-D ids into a string (uppercase).

        Special tokens are dropped (``skip_special=True``) or written as ``<pad>``,
        ``<bos>``, ``<eos>``.

        Raises:
            ValueError: ids not 1-D, or an id outside ``0 .. vocab_size - 1`` (naming its position).
        """
        arr = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
        if arr.ndim != 1:
            raise ValueError(f"decode expects 1-D ids, got shape {tuple(arr.shape)}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"decode expects integer ids, got dtype {arr.dtype}")
        bad = np.flatnonzero((arr < 0) | (arr >= self.vocab_size))
        if bad.size:
            pos = int(bad[0])
            raise ValueError(f"invalid token id {int(arr[pos])} at 0-based position {pos}: "
                             f"valid ids are 0..{self.vocab_size - 1}")
        if skip_special:
            arr = arr[arr < _N_BASES]
        return "".join(VOCAB[int(i)] for i in arr)

    def from_data(self, tokens: np.ndarray) -> torch.Tensor:
        """Convert ``sinkalign.lm.data`` tokens (int8, ``A=0 .. N=4``) to an int64 tensor.

        Raises:
            ValueError: a value outside ``0..4`` (naming its flat 0-based position).
        """
        arr = np.asarray(tokens)
        bad = np.flatnonzero((arr < 0) | (arr >= _N_BASES))
        if bad.size:
            pos = int(bad[0])
            raise ValueError(f"invalid nucleotide token {int(arr.reshape(-1)[pos])} at flat "
                             f"0-based position {pos}: expected 0..4 (A, C, G, T, N)")
        return torch.from_numpy(arr.astype(np.int64))
