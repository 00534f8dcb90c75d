"""Attention layers of sinkalign.lm against their dense float64 references.

Every layer: forward and every gradient (input and parameters) against the explicit-bias
reference in ``sinkalign.lm.attention.reference`` over lengths 1, 7, 97, 130 (not chunk
multiples; 130 > 8x the training length 16), batch 2, heads 2; cached incremental decoding
against the full forward; SLA's chunkwise, recurrent and quadratic forms against each
other. Parameters are randomised (priors included) so that none of the checks is vacuous.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from sinkalign.lm.attention import (
    ATTENTIONS,
    BAMAttention,
    GoatAttention,
    KVCache,
    RecurrentState,
    SLAAttention,
    build_attention,
)
from sinkalign.lm.attention.bam import bam_attention_chunked, bam_attention_flex
from sinkalign.lm.attention.base import alibi_slopes
from sinkalign.lm.attention.goat import fit_alibi_fourier, geometric_frequencies
from sinkalign.lm.attention.reference import naive_linear_attention, reference_forward
from sinkalign.lm.attention.sla import chunk_linear_attention, recurrent_linear_attention
from sinkalign.lm.config import LMConfig

TRAIN_LEN = 16
LENGTHS = (1, 7, 97, 130)

# name -> (attention, extra config); every variant of every layer that changes its maths.
VARIANTS = {
    "goat": ("goat", {}),
    "bam_ssmax_mu": ("bam", {"bam_ssmax": True, "bam_learn_mu": True}),
    "bam_plain": ("bam", {"bam_ssmax": False}),
    "sla_gla": ("sla", {"sla_backbone": "gla"}),
    "sla_retnet": ("sla", {"sla_backbone": "retnet"}),
    "rope": ("rope", {}),
    "alibi": ("alibi", {}),
    "nope": ("nope", {}),
}


def make_config(attention: str, **kw) -> LMConfig:
    base = dict(vocab_size=8, d_model=32, n_layers=2, n_heads=2, attention=attention, max_train_len=TRAIN_LEN,
                goat_n_freqs=3, bam_chunk_size=16, sla_chunk_size=16)
    base.update(kw)
    return LMConfig(**base)


@torch.no_grad()
def randomize(layer: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random weights of a size that makes attention patterns sharp and priors matter."""
    g = torch.Generator().manual_seed(seed)
    for name, p in layer.named_parameters():
        p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * 0.3)
    if isinstance(layer, GoatAttention):
        layer.alpha.copy_(torch.randn(layer.alpha.shape, generator=g, dtype=torch.float64))
        layer.beta.copy_(torch.randn(layer.beta.shape, generator=g, dtype=torch.float64))
        layer.sink.slope.copy_(torch.linspace(1.5, -0.7, layer.n_heads, dtype=torch.float64))
        layer.sink.fc2.weight.mul_(3.0)
    if isinstance(layer, BAMAttention):
        h = layer.n_heads
        layer.theta_a.copy_(torch.linspace(-1.0, 0.3, h, dtype=torch.float64))
        layer.theta_b.copy_(torch.linspace(-0.4, 1.3, h, dtype=torch.float64))  # a negative shape too
        layer.mu.copy_(torch.linspace(0.0, 1.7, h, dtype=torch.float64))
        if layer.ssmax is not None:
            layer.ssmax.copy_(torch.linspace(0.8, 1.4, h, dtype=torch.float64))
    return layer


def build_variant(variant: str, dtype=torch.float64, seed: int = 0, **kw) -> torch.nn.Module:
    attention, extra = VARIANTS[variant]
    return randomize(build_attention(attention, make_config(attention, **extra, **kw)).to(dtype), seed)


def _grads(layer, x, fn):
    layer.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    y = fn(x)
    w = torch.linspace(-1.0, 1.0, y.numel(), dtype=y.dtype, device=y.device).view_as(y)  # a generic cotangent
    (y * w).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in layer.named_parameters() if p.requires_grad}
    return y.detach(), x.grad.detach().clone(), grads


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_forward_and_backward_match_reference(variant, length):
    layer = build_variant(variant)
    x = torch.randn(2, length, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(length))
    y, gx, gp = _grads(layer, x, layer)
    y_ref, gx_ref, gp_ref = _grads(layer, x, lambda t: reference_forward(layer, t))
    scale = y_ref.abs().max().item()
    assert scale > 1e-2, "reference output vanishes: the check would be vacuous"
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-11)
    torch.testing.assert_close(gx, gx_ref, rtol=1e-9, atol=1e-10)
    assert gp.keys() == gp_ref.keys()
    for name in gp:
        torch.testing.assert_close(gp[name], gp_ref[name], rtol=1e-9, atol=1e-10, msg=lambda m: f"{name}: {m}")
    # the parameters that carry the prior/gates actually receive gradient
    if variant.startswith("bam") and length > 1:
        assert gp["theta_b"].abs().min() > 0 and gp["theta_a"].abs().min() > 0
        if "ssmax" in gp:
            assert gp["ssmax"].abs().min() > 0
    if variant == "goat" and length > 1:
        assert gp["alpha"].abs().min() > 0 and gp["beta"].abs().min() > 0 and gp["sink.slope"].abs().min() > 0


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@torch.no_grad()
def test_incremental_decoding_matches_full_forward(variant):
    layer = build_variant(variant, seed=3)
    length = 40
    x = torch.randn(2, length, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    full, full_cache = layer(x, return_cache=True)
    pieces = [(0, 5)] + [(t, t + 1) for t in range(5, 20)] + [(20, 33), (33, 34), (34, 40)]
    cache, outs = None, []
    for t0, t1 in pieces:
        before = None if cache is None else _cache_contents(cache)
        y, new_cache = layer(x[:, t0:t1], cache=cache, return_cache=True)
        if before is not None:  # the given cache is left untouched
            after = _cache_contents(cache)
            assert before.keys() == after.keys()
            for key in before:
                a, b = before[key], after[key]
                assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
        assert new_cache.offset == t1
        outs.append(y)
        cache = new_cache
    torch.testing.assert_close(torch.cat(outs, dim=1), full, rtol=1e-10, atol=1e-12)
    if isinstance(cache, KVCache):
        torch.testing.assert_close(cache.k, full_cache.k, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(cache.v, full_cache.v, rtol=1e-12, atol=1e-12)
    else:
        assert isinstance(cache, RecurrentState) and cache.offset == full_cache.offset == length
        torch.testing.assert_close(cache.state, full_cache.state, rtol=1e-10, atol=1e-12)


def _cache_contents(cache):
    """What a cache shows its holder, copied (tensors cloned)."""
    if isinstance(cache, KVCache):
        return {"k": cache.k.clone(), "v": cache.v.clone(), "offset": cache.offset}
    return {"state": cache.state.clone(), "offset": cache.offset}


@pytest.mark.parametrize("variant", ["rope", "goat", "bam_ssmax_mu", "alibi"])
def test_preallocated_cache_decoding_and_branching(variant):
    """Without autograd the KV cache appends in place into grown storage: token-by-token
    decoding still matches the full forward, storage grows geometrically (not per token),
    and two continuations of one cached prefix do not overwrite each other."""
    layer = build_variant(variant)
    length = 150
    x = torch.randn(1, length, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    alt = torch.randn(1, 10, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full, full_cache = layer(x, return_cache=True)
        prefix_y, prefix = layer(x[:, :20], return_cache=True)
        cache, outs, capacities = prefix, [prefix_y], set()
        for t in range(20, length):
            y, cache = layer(x[:, t : t + 1], cache=cache, return_cache=True)
            outs.append(y)
            capacities.add(cache.capacity)
        # a second continuation of the same prefix, written after the first one
        y_alt, alt_cache = layer(alt, cache=prefix, return_cache=True)
        ref_alt = layer(torch.cat([x[:, :20], alt], dim=1))[:, 20:]
    torch.testing.assert_close(torch.cat(outs, dim=1), full, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(cache.k, full_cache.k, rtol=1e-12, atol=1e-12)  # first branch intact
    torch.testing.assert_close(cache.v, full_cache.v, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(y_alt, ref_alt, rtol=1e-10, atol=1e-12)
    assert prefix.offset == 20 and alt_cache.offset == 30 and cache.offset == length
    assert len(capacities) <= 3, capacities  # 64 -> 128 -> 256: doubling, not one copy per token


def test_kv_cache_rejects_mismatched_appends():
    cache = KVCache(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 5))
    with pytest.raises(ValueError, match="cannot append"):
        cache.append(torch.zeros(1, 2, 1, 4, dtype=torch.float64), torch.zeros(1, 2, 1, 5))
    with pytest.raises(ValueError, match="same B, H, T"):
        KVCache(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 4, 4))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_eight_times_training_length_float32(variant):
    """No fixed-size tables: 8x the training length runs in float32 and matches float64."""
    layer = build_variant(variant, dtype=torch.float32, seed=5)
    length = 8 * TRAIN_LEN
    x = torch.randn(1, length, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        y = layer(x)
        ref = reference_forward(copy.deepcopy(layer).double(), x.double())
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y.double(), ref, rtol=1e-3, atol=1e-4)


# ----------------------------------------------------------------------------- SLA forms

@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("chunk", (1, 16, 64))
@pytest.mark.parametrize("form", (None, True, False), ids=("auto", "factorised", "pairwise"))
def test_sla_chunkwise_recurrent_naive_agree(length, chunk, form):
    g = torch.Generator().manual_seed(10 * length + chunk)
    b, h, dk, dv = 2, 3, 5, 4

    def rnd(*shape):
        return torch.randn(*shape, dtype=torch.float64, generator=g)

    q, k, v = rnd(b, h, length, dk), rnd(b, h, length, dk), rnd(b, h, length, dv)
    # decays from ~1 down to exp(-6) per step: strong decays must not overflow the chunk form
    log_decay = -6.0 * torch.rand(b, h, length, dk, dtype=torch.float64, generator=g) ** 3
    s0 = rnd(b, h, dk, dv)
    leaves = [t.requires_grad_(True) for t in (q, k, v, log_decay, s0)]

    def run(fn):
        for t in leaves:
            t.grad = None
        o, s = fn(q, k, v, log_decay, s0)
        (o * torch.cos(o)).sum().add((s**2).sum()).backward()
        return o.detach(), s.detach(), [t.grad.clone() for t in leaves]

    o_n, s_n, g_n = run(naive_linear_attention)
    o_r, s_r, g_r = run(recurrent_linear_attention)
    o_c, s_c, g_c = run(lambda *a: chunk_linear_attention(*a, chunk_size=chunk, factorised=form))
    for o, s, gr in ((o_r, s_r, g_r), (o_c, s_c, g_c)):
        torch.testing.assert_close(o, o_n, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(s, s_n, rtol=1e-10, atol=1e-10)
        for a, ref in zip(gr, g_n):
            torch.testing.assert_close(a, ref, rtol=1e-9, atol=1e-9)


def test_sla_chunk_form_falls_back_to_pairwise_for_extreme_decay_float32():
    """A chunk whose total decay exceeds the factorised range (exp(-b) would overflow in
    float32) is computed pairwise: finite, and equal to the float64 naive form."""
    g = torch.Generator().manual_seed(5)
    b, h, length, dk, dv = 1, 2, 48, 4, 3
    q, k, v = (torch.randn(b, h, length, d, dtype=torch.float64, generator=g) for d in (dk, dk, dv))
    log_decay = -torch.full((b, h, length, dk), 4.0, dtype=torch.float64)  # span 4 * 32 = 128 > 60
    ref, ref_state = naive_linear_attention(q, k, v, log_decay)
    args32 = [t.float() for t in (q, k, v, log_decay)]
    o, state = chunk_linear_attention(*args32, chunk_size=32)
    torch.testing.assert_close(o.double(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state.double(), ref_state, rtol=1e-5, atol=1e-5)
    forced, _ = chunk_linear_attention(*args32, chunk_size=32, factorised=True)
    assert not torch.isfinite(forced).all()  # what the fallback avoids


def test_sla_forms_reject_bad_shapes():
    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"expected q, k, log_decay \[B, H, L, d_k\]"):
        chunk_linear_attention(q, q, q[..., :2], q[:, :, :2])
    with pytest.raises(ValueError, match=r"initial_state must be \[B, H, d_k, d_v\]"):
        recurrent_linear_attention(q, q, q, q, torch.zeros(1, 2, 4, 5))
    with pytest.raises(ValueError, match="chunk_size=0 must be positive"):
        chunk_linear_attention(q, q, q, q, chunk_size=0)


def test_sla_gates_are_softmax_over_heads():
    layer = build_variant("sla_gla")
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    gq = torch.softmax(layer.gate_q(layer.wq(x)), dim=-1)
    assert torch.allclose(gq.sum(-1), torch.ones(2, 9, dtype=torch.float64))
    # RetNet's decay is the fixed 1 - 2^(-5-h) per head
    retnet = build_variant("sla_retnet")
    decay = retnet.log_decay(x).exp()[0, :, 0, 0]
    torch.testing.assert_close(decay, torch.tensor([1 - 2**-5, 1 - 2**-6], dtype=torch.float64))


# ----------------------------------------------------------------------------- BAM kernels

@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("q_offset,lq", [(0, 1), (0, 37), (20, 17), (36, 1)])
def test_bam_flex_eager_forward_matches_chunked(q_offset, lq):
    """FlexAttention's score_mod (run eagerly, forward only on CPU) = the chunked kernel."""
    g = torch.Generator().manual_seed(q_offset + lq)
    b, h, d = 2, 2, 8
    lk = q_offset + lq
    q = torch.randn(b, h, lq, d, dtype=torch.float64, generator=g)
    k = torch.randn(b, h, lk, d, dtype=torch.float64, generator=g)
    v = torch.randn(b, h, lk, d, dtype=torch.float64, generator=g)
    params = (torch.tensor([-1.0, 0.2], dtype=torch.float64), torch.tensor([-0.3, 1.2], dtype=torch.float64),
              torch.tensor([0.0, 1.5], dtype=torch.float64), torch.tensor([0.9, 1.3], dtype=torch.float64))
    kw = dict(q_offset=q_offset, eps=1e-5, scale=d**-0.5)
    ref = bam_attention_chunked(q, k, v, *params, chunk_size=1000, **kw)
    with torch.no_grad():
        flex = bam_attention_flex(q, k, v, *params, compile=False, **kw)
    torch.testing.assert_close(flex, ref, rtol=1e-10, atol=1e-12)
    for chunk in (1, 5, 16):
        torch.testing.assert_close(bam_attention_chunked(q, k, v, *params, chunk_size=chunk, **kw), ref,
                                   rtol=1e-12, atol=1e-13)


def test_bam_uniform_init_is_nope_and_alibi_init_is_alibi():
    """theta_b = 0 is the uniform prior; theta_b = 1, exp(theta_a) = slope is ALiBi's bias."""
    uni = build_attention("bam", make_config("bam", bam_ssmax=False)).double()
    nope = build_attention("nope", make_config("nope")).double()
    nope.load_state_dict({"qkv.weight": uni.qkv.weight, "out.weight": uni.out.weight})
    x = torch.randn(2, 30, 32, dtype=torch.float64)
    torch.testing.assert_close(uni(x), nope(x), rtol=1e-10, atol=1e-12)
    al = build_attention("bam", make_config("bam", bam_ssmax=False, bam_init="alibi")).double()
    alibi = build_attention("alibi", make_config("alibi")).double()
    alibi.load_state_dict({"qkv.weight": al.qkv.weight, "out.weight": al.out.weight})
    torch.testing.assert_close(al(x), alibi(x), rtol=1e-8, atol=1e-10)  # eps = 1e-5 shifts |d| slightly


def test_bam_chunk_size_validation():
    q = torch.zeros(1, 1, 2, 4)
    with pytest.raises(ValueError, match="chunk_size=0 must be positive"):
        bam_attention_chunked(q, q, q, *(torch.zeros(1),) * 3, None, q_offset=0, eps=1e-5, scale=1.0,
                              chunk_size=0)


# ----------------------------------------------------------------------------- GOAT

def test_goat_composite_vectors_give_content_plus_prior():
    """<q~_i, k~_j> / sqrt(d_h) = <q_c, k_c> / sqrt(d_c) + K_rel(i - j) + u(j), at an offset."""
    layer = build_variant("goat")
    x = torch.randn(2, 11, 32, dtype=torch.float64)
    qc, kc, _ = layer.project(x)
    offset = 1000  # far beyond the training length
    qa, ka = layer.position(qc, kc, offset)
    assert qa.shape[-1] == ka.shape[-1] == layer.head_dim  # head dim preserved, no padding needed
    logits = qa @ ka.transpose(-1, -2) / math.sqrt(layer.head_dim)
    pos = torch.arange(offset, offset + 11)
    expect = qc @ kc.transpose(-1, -2) / math.sqrt(layer.content_dim) + layer.log_prior(pos, pos)
    torch.testing.assert_close(logits, expect, rtol=1e-10, atol=1e-10)


def test_goat_alibi_fourier_fit_quality():
    length = 128
    for n_freqs, tol in ((4, 0.02), (8, 0.005)):
        omega = geometric_frequencies(n_freqs, 3.0, 16.0 * length)
        slopes = alibi_slopes(4)
        alpha, beta, rms = fit_alibi_fourier(omega, slopes, length)
        assert (rms / (torch.tensor(slopes, dtype=torch.float64) * (length - 1))).max() < tol
        d = torch.arange(length, dtype=torch.float64)
        fitted = (torch.cos(d[:, None] * omega) @ alpha.T + torch.sin(d[:, None] * omega) @ beta.T)  # [n, H]
        fitted = fitted - fitted[0]  # drop the free constant
        target = -torch.tensor(slopes, dtype=torch.float64)[None, :] * d[:, None]
        assert (fitted - target).abs().max() < 0.1 * slopes[0] * length


def test_goat_alibi_inits():
    cfg = make_config("goat", goat_init="alibi", max_train_len=64, goat_n_freqs=4, d_model=64)
    layer = GoatAttention(cfg).double()
    pos = torch.arange(64)
    prior = layer.log_prior(pos, pos)  # [H, L, L]
    row = prior[:, 63, :] - prior[:, 63, 63:64]  # lags 63 .. 0 relative to lag 0
    target = -torch.tensor(alibi_slopes(2), dtype=torch.float64)[:, None] * (63 - pos).double()
    span = torch.tensor(alibi_slopes(2), dtype=torch.float64) * 63  # ALiBi's range over the window
    err = row - target
    err = err - err.mean(-1, keepdim=True)  # a per-row constant does not change the softmax
    assert (err.pow(2).mean(-1).sqrt() / span).max() < 0.02
    assert (err.abs().max(-1).values / span).max() < 0.06
    # "alibi_sink": exact ALiBi through u(j) = m j at any length (here 8x the training length)
    exact = GoatAttention(make_config("goat", goat_init="alibi_sink")).double()
    pos = torch.arange(8 * TRAIN_LEN)
    prior = exact.log_prior(pos, pos)
    causal = pos[None, :] <= pos[:, None]
    p_goat = torch.softmax(prior.masked_fill(~causal, float("-inf")), dim=-1)
    lag = (pos[:, None] - pos[None, :]).double()
    alibi = -torch.tensor(alibi_slopes(2), dtype=torch.float64)[:, None, None] * lag
    p_alibi = torch.softmax(alibi.masked_fill(~causal, float("-inf")), dim=-1)
    torch.testing.assert_close(p_goat, p_alibi, rtol=1e-9, atol=1e-12)


def test_goat_uniform_init_is_nope():
    goat = GoatAttention(make_config("goat")).double()
    pos = torch.arange(50)
    assert goat.log_prior(pos, pos).abs().max() == 0.0  # alpha = beta = 0, u = 0


# ----------------------------------------------------------------------------- errors

def test_unknown_attention_lists_valid():
    with pytest.raises(ValueError, match="unknown attention 'flash'; valid: goat, bam, sla, rope, alibi, nope"):
        build_attention("flash", make_config("nope"))


@pytest.mark.parametrize("variant", ["goat", "sla_gla"])
def test_bad_inputs(variant):
    layer = build_variant(variant)
    with pytest.raises(ValueError, match=r"x must be \[B, L, 32\], got \(2, 5, 31\)"):
        layer(torch.zeros(2, 5, 31, dtype=torch.float64))
    with pytest.raises(ValueError, match="at least one position"):
        layer(torch.zeros(2, 0, 32, dtype=torch.float64))
    wrong = RecurrentState(torch.zeros(2, 2, 16, 16), 3) if variant == "goat" else \
        KVCache(torch.zeros(2, 2, 3, 16), torch.zeros(2, 2, 3, 16))
    with pytest.raises(ValueError, match="expects a .* cache, got"):
        layer(torch.zeros(2, 1, 32, dtype=torch.float64), cache=wrong)
    _, cache = layer(torch.zeros(2, 3, 32, dtype=torch.float64), return_cache=True)
    with pytest.raises(ValueError, match="cache batch size 2 does not match x batch size 1"):
        layer(torch.zeros(1, 1, 32, dtype=torch.float64), cache=cache)


def test_registry_is_complete():
    assert set(ATTENTIONS) == {"goat", "bam", "sla", "rope", "alibi", "nope"}
    assert isinstance(build_attention("sla", make_config("sla")), SLAAttention)


# ----------------------------------------------------------------------------- GPU

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@requires_cuda
def test_goat_runs_on_the_flash_kernel():
    """The composite-vector GOAT runs under SDPBackend.FLASH_ATTENTION (no dense bias), and its
    bf16 error against the float64 reference is at most 2x that of the bf16 math backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cfg = make_config("goat", d_model=256, n_heads=4, goat_n_freqs=8, max_train_len=256)
    layer = randomize(GoatAttention(cfg), seed=1).cuda()
    x = torch.randn(2, 1000, 256, device="cuda")
    ref = reference_forward(copy.deepcopy(layer).double(), x.double())
    bf = copy.deepcopy(layer).to(torch.bfloat16)
    xb = x.to(torch.bfloat16).requires_grad_(True)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        y_flash = bf(xb)
        y_flash.float().square().sum().backward()
    with sdpa_kernel(SDPBackend.MATH):
        y_math = bf(x.to(torch.bfloat16))
    err_flash = (y_flash.double() - ref).abs().max().item()
    err_math = (y_math.double() - ref).abs().max().item()
    assert err_flash <= 2 * err_math + 1e-6, (err_flash, err_math)
    assert torch.isfinite(xb.grad).all() and torch.isfinite(bf.alpha.grad).all()


@pytest.mark.gpu
@requires_cuda
def test_bam_flex_compiled_forward_backward_on_cuda():
    layer = build_variant("bam_ssmax_mu", dtype=torch.float32, bam_impl="flex").cuda()
    x = torch.randn(2, 300, 32, device="cuda")
    y, gx, gp = _grads(layer, x, layer)
    y_ref, gx_ref, gp_ref = _grads(layer, x, lambda t: reference_forward(layer, t))
    torch.testing.assert_close(y, y_ref, rtol=2e-3, atol=2e-4)
    torch.testing.assert_close(gx, gx_ref, rtol=2e-3, atol=2e-3)
    for name in gp:
        torch.testing.assert_close(gp[name], gp_ref[name], rtol=5e-3, atol=5e-3, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("variant", ["goat", "alibi", "sla_retnet"])
def test_low_precision_cast_keeps_positional_constants_exact(variant):
    """``.to(bfloat16)`` casts parameters, never the float64 frequencies/slopes/decays."""
    layer = build_variant(variant, dtype=torch.float32).to(torch.bfloat16)
    consts = {"goat": lambda m: (m.omega, m.sink.omega), "alibi": lambda m: (m.slopes,),
              "sla_retnet": lambda m: (m.log_gamma,)}[variant](layer)
    assert all(c.dtype == torch.float64 for c in consts)
    x = torch.randn(1, 9, 32, dtype=torch.bfloat16)
    assert torch.isfinite(layer(x).float()).all()


def test_bam_prior_stays_finite_in_float32():
    """eps ** theta_b overflowed in float32 for strongly negative theta_b, so the first
    position (one key: its own, at distance 0) became NaN; the prior is now clamped."""
    from sinkalign.lm.attention.bam import bam_attention_chunked

    torch.manual_seed(0)
    q = k = v = torch.randn(1, 2, 9, 8)
    zero = torch.zeros(2)
    out = bam_attention_chunked(q, k, v, zero, torch.full((2,), -8.0), zero, None, q_offset=0, eps=1e-5,
                                scale=8 ** -0.5, chunk_size=4)
    assert torch.isfinite(out).all()
    # the first position attends to itself alone: its output is its value
    torch.testing.assert_close(out[:, :, 0], v[:, :, 0])
    ref = bam_attention_chunked(q.double(), k.double(), v.double(), zero.double(), torch.full((2,), -8.0).double(),
                                zero.double(), None, q_offset=0, eps=1e-5, scale=8 ** -0.5, chunk_size=4)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
