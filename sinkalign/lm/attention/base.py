"""The common interface of every attention layer in :mod:`sinkalign.lm`.

Interface
---------
Every layer is a :class:`CausalSelfAttention` (``torch.nn.Module``) built from an
:class:`~sinkalign.lm.config.LMConfig` and called as::

    y = attn(x)                                        # x, y: [B, L, D]
    y, cache = attn(x, return_cache=True)              # start a cache at position 0
    y, cache = attn(x_next, cache=cache, return_cache=True)   # continue at cache.offset

* ``x`` holds the tokens at absolute positions ``offset .. offset + L - 1`` where
  ``offset = cache.offset`` (0 without a cache); attention is causal: the token at
  position ``i`` sees positions ``0 .. i``, the cached ones included.
* Feeding a sequence in pieces (``L`` tokens, then 1 token at a time, or any split) gives
  the same outputs as one call over the whole sequence, up to floating-point rounding.
* Caches are immutable: a call never modifies the cache it was given; it returns a new one.
  Softmax layers return a :class:`KVCache` (keys and values of every position seen so far,
  stored as fed to the kernel, i.e. after the positional transform); SLA returns a
  :class:`RecurrentState` (the ``[B, H, d_k, d_v]`` state, constant size in ``L``).
* No layer holds a table sized by a maximum length: every positional term is a function
  of the positions, so any length can be evaluated (the tests run 8x the training length).
* Attention layers hold no dropout, so training and evaluation differ only in the model's
  residual dropout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from sinkalign.lm.config import LMConfig

__all__ = [
    "AttentionCache",
    "CausalSelfAttention",
    "KVCache",
    "RecurrentState",
    "SoftmaxAttention",
    "alibi_slopes",
    "causal_sdpa",
    "positions",
]


class _KVStore:
    """Growable key/value storage shared by the caches of one decoding lineage.

    ``k``/``v`` are ``[B, H, capacity, d]``; positions ``0 .. used - 1`` are written.
    """

    __slots__ = ("k", "v", "used")

    def __init__(self, k: torch.Tensor, v: torch.Tensor, used: int) -> None:
        self.k, self.v, self.used = k, v, used


class KVCache:
    """Keys and values of every position seen so far by one softmax attention layer.

    Attributes:
        k: ``[B, H, T, d_k]`` keys as given to the kernel (RoPE-rotated, GOAT-augmented, ...).
        v: ``[B, H, T, d_v]`` values.
    ``offset`` (= ``T``) is the absolute position of the next token.

    Storage is preallocated and grown geometrically (capacity doubles), so appending a
    token costs O(1) amortised instead of the O(T) copy of a ``torch.cat``: the cost of
    a decoding step does not grow with the cached length beyond attention itself.
    A cache is still immutable to its holder: :meth:`append` writes only past this
    cache's ``T`` positions, and when another cache of the same lineage has already
    written there (the caller branched, e.g. two continuations of one prompt) it copies
    first. Under autograd (inputs that require grad) it falls back to ``torch.cat``, so
    no tensor in a graph is modified in place.
    """

    __slots__ = ("_store", "_length")

    def __init__(self, k: torch.Tensor, v: torch.Tensor) -> None:
        if k.ndim != 4 or v.ndim != 4 or k.shape[:3] != v.shape[:3]:
            raise ValueError(f"KVCache needs k [B, H, T, d_k] and v [B, H, T, d_v] with the same "
                             f"B, H, T; got k {tuple(k.shape)}, v {tuple(v.shape)}")
        self._store = _KVStore(k, v, int(k.shape[-2]))
        self._length = int(k.shape[-2])

    @classmethod
    def _of(cls, store: _KVStore, length: int) -> KVCache:
        cache = cls.__new__(cls)
        cache._store, cache._length = store, length
        return cache

    @property
    def k(self) -> torch.Tensor:
        return self._store.k[:, :, : self._length]

    @property
    def v(self) -> torch.Tensor:
        return self._store.v[:, :, : self._length]

    @property
    def offset(self) -> int:
        return self._length

    @property
    def capacity(self) -> int:
        """Positions the current storage holds before it must grow."""
        return int(self._store.k.shape[-2])

    def append(self, k: torch.Tensor, v: torch.Tensor) -> KVCache:
        """A new cache holding this cache's positions followed by ``k [B, H, n, d_k]``, ``v``."""
        store, length, n = self._store, self._length, int(k.shape[-2])
        if torch.is_grad_enabled() and any(t.requires_grad for t in (k, v, store.k, store.v)):
            return KVCache(torch.cat([self.k, k], dim=-2), torch.cat([self.v, v], dim=-2))
        if (k.dtype != store.k.dtype or v.dtype != store.v.dtype or k.device != store.k.device
                or k.shape[:2] != store.k.shape[:2] or k.shape[-1] != store.k.shape[-1]
                or v.shape[-1] != store.v.shape[-1]):
            raise ValueError(f"cannot append k {tuple(k.shape)} {k.dtype}, v {tuple(v.shape)} {v.dtype} "
                             f"to a cache of k {tuple(self.k.shape)} {store.k.dtype}, "
                             f"v {tuple(self.v.shape)} {store.v.dtype}")
        need = length + n
        if store.used != length or need > store.k.shape[-2]:
            # branched (positions past ``length`` belong to another cache) or full: new storage
            cap = max(need, 2 * store.k.shape[-2], 64) if store.used == length else max(need, store.k.shape[-2])
            new_k = store.k.new_empty(*store.k.shape[:2], cap, store.k.shape[-1])
            new_v = store.v.new_empty(*store.v.shape[:2], cap, store.v.shape[-1])
            new_k[:, :, :length] = store.k[:, :, :length]
            new_v[:, :, :length] = store.v[:, :, :length]
            store = _KVStore(new_k, new_v, length)
        store.k[:, :, length:need] = k
        store.v[:, :, length:need] = v
        store.used = need
        return KVCache._of(store, need)


@dataclass(frozen=True)
class RecurrentState:
    """State of a linear-attention layer after ``offset`` positions.

    Attributes:
        state: ``[B, H, d_k, d_v]`` the recurrent memory ``S``.
        offset: number of positions consumed (absolute position of the next token).
    """

    state: torch.Tensor
    offset: int


AttentionCache = KVCache | RecurrentState


def positions(offset: int, length: int, device: torch.device) -> torch.Tensor:
    """Absolute positions ``offset .. offset + length - 1`` as float64 ``[length]``.

    Positional features are computed in float64 and cast to the working dtype afterwards,
    so that large positions (8x the training length and beyond) keep their phase.
    """
    return torch.arange(offset, offset + length, device=device, dtype=torch.float64)


def alibi_slopes(n_heads: int) -> list[float]:
    """The ALiBi head slopes of Press et al. (geometric, ``2**(-8/n)`` for a power of two ``n``)."""

    def pow2(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n_heads).is_integer():
        return pow2(n_heads)
    closest = 2 ** math.floor(math.log2(n_heads))
    return pow2(closest) + alibi_slopes(2 * closest)[0::2][: n_heads - closest]


def causal_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float,
                attn_bias: torch.Tensor | None = None) -> torch.Tensor:
    """Causal ``scaled_dot_product_attention`` for queries at the *end* of the key sequence.

    Args:
        q: ``[B, H, Lq, E]``; query ``t`` sits at absolute position ``Lk - Lq + t``.
        k: ``[B, H, Lk, E]``; v: ``[B, H, Lk, Ev]``.
        scale: softmax scale applied to ``q @ k^T``.
        attn_bias: optional additive float bias broadcastable to ``[B, H, Lq, Lk]``
            (ALiBi); the causal mask is folded into it.

    Without a bias: ``Lq == Lk`` uses ``is_causal=True`` (no mask tensor, so the flash and
    memory-efficient kernels apply); ``Lq == 1`` needs no mask; otherwise (a multi-token
    step after a cache) a boolean ``[Lq, Lk]`` mask is built.
    Returns ``[B, H, Lq, Ev]``.
    """
    lq, lk = q.shape[-2], k.shape[-2]
    if lq > lk:
        raise ValueError(f"queries ({lq}) cannot outnumber keys ({lk}) in causal attention")
    if attn_bias is None:
        if lq == 1:  # the newest token sees every key
            return F.scaled_dot_product_attention(q, k, v, scale=scale)
        if lq == lk:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    qpos = torch.arange(lk - lq, lk, device=q.device)
    kpos = torch.arange(lk, device=q.device)
    allowed = kpos[None, :] <= qpos[:, None]  # [Lq, Lk]
    if attn_bias is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
    bias = attn_bias.masked_fill(~allowed, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)


class CausalSelfAttention(nn.Module):
    """Base class: multi-head causal self-attention ``[B, L, D] -> [B, L, D]``.

    Subclasses implement :meth:`forward` with the signature documented in the module
    docstring. ``n_heads``, ``head_dim`` and ``d_model`` are set here.
    """

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        self.config = config
        self.d_model = config.d_model
        self.n_heads = config.n_heads
        self.head_dim = config.head_dim

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Initialise: every ``nn.Linear`` ~ N(0, init_std) with zero bias, the output
        projection ``out`` with std ``init_std / sqrt(2 n_layers)`` (GPT-2), then
        :meth:`reset_special_parameters` for the variant's own parameters.

        Subclasses call this at the end of ``__init__``; the model does not re-initialise
        attention layers.
        """
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        out = getattr(self, "out", None)
        if isinstance(out, nn.Linear):
            nn.init.normal_(out.weight, mean=0.0, std=std / math.sqrt(2 * self.config.n_layers))
        self.reset_special_parameters()

    def reset_special_parameters(self) -> None:
        """Variant-specific initialisation (priors, gates); default: nothing."""

    def forward(self, x: torch.Tensor, *, cache: AttentionCache | None = None,
                return_cache: bool = False):  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_input(self, x: torch.Tensor, cache: AttentionCache | None, cache_type: type) -> int:
        """Validate ``x`` and ``cache``; return the position offset."""
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be [B, L, {self.d_model}], got {tuple(x.shape)}")
        if x.shape[1] < 1:
            raise ValueError(f"x must hold at least one position, got {tuple(x.shape)}")
        if cache is None:
            return 0
        if not isinstance(cache, cache_type):
            raise ValueError(f"{type(self).__name__} expects a {cache_type.__name__} cache, "
                             f"got {type(cache).__name__}")
        batch = cache.k.shape[0] if isinstance(cache, KVCache) else cache.state.shape[0]
        if batch != x.shape[0]:
            raise ValueError(f"cache batch size {batch} does not match x batch size {x.shape[0]}")
        return cache.offset

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        """``[B, L, H * e] -> [B, H, L, e]``."""
        b, l, _ = t.shape
        return t.view(b, l, self.n_heads, -1).transpose(1, 2)

    def _merge_heads(self, t: torch.Tensor) -> torch.Tensor:
        """``[B, H, L, e] -> [B, L, H * e]``."""
        b, h, l, e = t.shape
        return t.transpose(1, 2).reshape(b, l, h * e)


class SoftmaxAttention(CausalSelfAttention):
    """Softmax attention with a KV cache: project, position, attend, project back.

    Subclasses provide :meth:`project` (``x -> q, k, v`` per head), :meth:`position`
    (the positional transform of ``q`` and ``k`` given absolute positions) and may override
    :meth:`attend` (default: :func:`causal_sdpa` at ``scale``).
    """

    def __init__(self, config: LMConfig) -> None:
        super().__init__(config)
        self.out = nn.Linear(config.d_model, config.d_model, bias=False)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x [B, L, D] -> (q [B, H, L, e_q], k [B, H, L, e_q], v [B, H, L, d_h])``."""
        raise NotImplementedError  # pragma: no cover - abstract

    def position(self, q: torch.Tensor, k: torch.Tensor, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Positional transform of queries and keys at positions ``offset ..``."""
        return q, k

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int) -> torch.Tensor:
        """Attention of ``q [B, H, Lq, e]`` (at ``offset ..``) over every key ``[B, H, Lk, e]``."""
        return causal_sdpa(q, k, v, scale=self.scale)

    def forward(self, x: torch.Tensor, *, cache: KVCache | None = None, return_cache: bool = False):
        """``x [B, L, D] -> y [B, L, D]`` (and the new :class:`KVCache` if ``return_cache``)."""
        offset = self._check_input(x, cache, KVCache)
        q, k, v = self.project(x)
        q, k = self.position(q, k, offset)
        new_cache = KVCache(k, v) if cache is None else cache.append(k, v)
        y = self.out(self._merge_heads(self.attend(q, new_cache.k, new_cache.v, offset)))
        if return_cache:
            return y, new_cache
        return y
