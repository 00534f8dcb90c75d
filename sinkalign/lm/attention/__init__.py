"""Attention layers of the DNA language models, behind one interface (see ``base``).

``ATTENTIONS`` maps a name to its layer class; ``build_attention(name, config)`` builds one.

=========  =====================================================================
``goat``   learned Fourier relative prior + key-only sink, one SDPA call (flash-ready)
``bam``    generalized-Gaussian prior per head, optional SSMax; chunked or FlexAttention
``sla``    softmax head gates over linear attention (GLA or RetNet decay); recurrent cache
``rope``   rotary position embedding (SDPA)
``alibi``  fixed linear recency bias (SDPA with a float bias)
``nope``   no positional encoding (SDPA)
=========  =====================================================================
"""

from __future__ import annotations

from sinkalign.lm.attention.alibi import ALiBiAttention
from sinkalign.lm.attention.bam import BAMAttention
from sinkalign.lm.attention.base import (
    AttentionCache,
    CausalSelfAttention,
    KVCache,
    RecurrentState,
    SoftmaxAttention,
)
from sinkalign.lm.attention.goat import GoatAttention
from sinkalign.lm.attention.nope import NoPEAttention
from sinkalign.lm.attention.rope import RoPEAttention
from sinkalign.lm.attention.sla import SLAAttention
from sinkalign.lm.config import ATTENTION_NAMES, LMConfig

__all__ = [
    "ALiBiAttention",
    "ATTENTIONS",
    "AttentionCache",
    "BAMAttention",
    "CausalSelfAttention",
    "GoatAttention",
    "KVCache",
    "NoPEAttention",
    "RecurrentState",
    "RoPEAttention",
    "SLAAttention",
    "SoftmaxAttention",
    "build_attention",
]

ATTENTIONS: dict[str, type[CausalSelfAttention]] = {
    "goat": GoatAttention,
    "bam": BAMAttention,
    "sla": SLAAttention,
    "rope": RoPEAttention,
    "alibi": ALiBiAttention,
    "nope": NoPEAttention,
}
assert tuple(ATTENTIONS) == ATTENTION_NAMES, "config.ATTENTION_NAMES and ATTENTIONS disagree"


def build_attention(name: str, config: LMConfig) -> CausalSelfAttention:
    """Build the attention layer ``name`` for ``config`` (``name`` usually ``config.attention``).

    Raises:
        ValueError: unknown ``name`` (the message lists the valid ones).
    """
    cls = ATTENTIONS.get(name)
    if cls is None:
        raise ValueError(f"unknown attention {name!r}; valid: {', '.join(ATTENTIONS)}")
    return cls(config)
