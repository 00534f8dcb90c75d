"""Bad input gets a ValueError that says what is wrong, before any tracing."""

from __future__ import annotations

import numpy as np
import pytest

from sinkalign.sinkhorn import DustbinConfig, SinkhornConfig, sinkhorn_attention
from sinkalign.sinkhorn.dustbin import dustbin_attention

rng = np.random.default_rng(0)
Q = rng.normal(size=(2, 10, 4))
K = rng.normal(size=(2, 12, 4))
V = rng.normal(size=(2, 12, 3))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"eps": 0.0}, "eps=0.0 must be a finite number > 0"),
        ({"eps": -1.0}, "eps=-1.0 must be a finite number > 0"),
        ({"eps": float("inf")}, "eps=inf must be a finite number > 0"),
        ({"band": 0}, "band=0 must be an integer >= 1"),
        ({"n_iters": -1}, "n_iters=-1 must be an integer >= 0"),
        ({"tail": 3, "backward": "one_reference"}, r"supports tail \(R\) in \(2,\), got tail=3"),
        ({"backward": "adjoint"}, "backward='adjoint' is not one of"),
        ({"backend": "cuda"}, "backend='cuda' is not one of"),
        ({"block": 0}, "block=0 must be a positive integer"),
    ],
)
def test_config_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SinkhornConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"variant": "superglue"}, "variant='superglue' is not one of"),
        ({"mass": "two"}, "mass='two' is not one of"),
        ({"variant": "paper", "mass": "length"}, "variant='paper' uses unit dustbin mass"),
        ({"filler": 0}, "filler=0 must be a positive integer"),
    ],
)
def test_dustbin_config_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DustbinConfig(**kwargs)


@pytest.mark.parametrize(
    "args,kwargs,message",
    [
        ((Q, K[:1], V[:1]), {}, "batch dims differ"),
        ((Q, K[..., :3], V), {}, "q and k feature dims differ: 4 vs 3"),
        ((Q, K, V[:, :11]), {}, "k and v lengths differ: 12 vs 11"),
        ((Q[0, 0], K, V), {}, r"q must have shape \[..., L, d\]"),
        ((Q[:, :0], K, V), {}, "empty input"),
        ((Q.astype(np.int32), K, V), {}, "q must be a floating-point array"),
        ((np.where(np.arange(4) == 2, np.nan, Q), K, V), {}, r"q has a non-finite value at index \(0, 0, 2\)"),
        ((Q, K, np.where(np.arange(3) == 1, np.inf, V)), {}, r"v has a non-finite value at index \(0, 0, 1\)"),
        ((Q, K, V), {"log_a": np.full((2, 10), np.nan)}, "log_a has a non-finite value"),
        ((Q, K, V), {"q_mask": np.ones((2, 10), int)}, "q_mask must be a boolean array"),
        ((Q, K, V), {"k_mask": np.ones((3, 12), bool)}, r"k_mask of shape \(3, 12\) does not broadcast to \(2, 12\)"),
        ((Q, K, V), {"log_b": np.zeros(5)}, r"log_b of shape \(5,\) does not broadcast"),
        ((Q, K, V), {"band": 1, "k_mask": np.arange(12)[None, :].repeat(2, 0) < 3},
         r"batch 0: valid query position 4 has no active key within band=1 \(\|i - j\| <= 1\)"),
        ((Q, K, V), {"band": 1}, r"batch 0: valid key position 11 has no active query within band=1"),
    ],
)
def test_input_errors(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        sinkhorn_attention(*args, **kwargs)


def test_empty_row_is_fine_when_the_query_is_masked():
    qm = np.ones((2, 10), bool)
    km = np.arange(12)[None, :].repeat(2, 0) < 3
    qm[:, 5:] = False  # queries 5.. cannot reach keys 0..2 with band 1, but they are masked
    km[:, 5:] = False
    qm[:, 4] = False
    out = sinkhorn_attention(Q, K, V, q_mask=qm, k_mask=km, band=1)
    assert np.isfinite(np.asarray(out)).all()


@pytest.mark.parametrize(
    "tokens,message",
    [
        ((np.zeros(3), np.zeros(4)), r"q_dustbin must have last dimension 4, got shape \(3,\)"),
        ((np.zeros(4), np.full(4, np.nan)), "k_dustbin has a non-finite value"),
        ((np.zeros((3, 4)), np.zeros(4)), r"q_dustbin of shape \(3, 4\) does not broadcast to \(2, 4\)"),
        ((np.zeros(4), np.zeros(4), np.full(V.shape[-1], np.inf)), "v_dustbin has a non-finite value"),
    ],
)
def test_dustbin_token_errors(tokens, message):
    with pytest.raises(ValueError, match=message):
        dustbin_attention(Q, K, V, *tokens)


def test_banded_dustbin_tolerates_rows_outside_the_band():
    # With a dustbin every valid token has somewhere to send its mass.
    km = np.arange(12)[None, :].repeat(2, 0) < 3
    out = dustbin_attention(Q, K, V, np.zeros(4), np.zeros(4), k_mask=km, config=SinkhornConfig(band=1))
    assert np.isfinite(np.asarray(out)).all()


def test_every_backend_words_a_bad_setting_or_an_empty_row_the_same_way():
    """One checker (sinkalign.sinkhorn.checks): the JAX operator, its config and the Triton /
    torch reference raise the same message for the same bad input."""
    torch = pytest.importorskip("torch")
    from sinkalign.kernels.triton.ref import sinkhorn_attention_ref
    from sinkalign.sinkhorn import SinkhornConfig, sinkhorn_attention

    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 1, 10, 4)), rng.normal(size=(2, 1, 12, 4)), rng.normal(size=(2, 1, 12, 3))
    km = np.arange(12)[None, :].repeat(2, 0) < 3
    tq, tk, tv = (torch.tensor(x) for x in (q, k, v))
    cases = [({"eps": -2.0}, {}), ({"n_iters": 1.5}, {}), ({"band": 0}, {}), ({"band": 1}, {"k_mask": km})]
    for settings, masks in cases:
        messages = []
        for run in (lambda: SinkhornConfig(**settings) and sinkhorn_attention(q, k, v, **settings, **masks),
                    lambda: sinkhorn_attention_ref(tq, tk, tv, **settings,
                                                   **{n: torch.tensor(m) for n, m in masks.items()})):
            with pytest.raises(ValueError) as info:
                run()
            messages.append(str(info.value))
        assert messages[0] == messages[1], messages


@pytest.mark.parametrize("bad", ["nan_q", "inf_v", "feature_dims", "v_length", "batch"])
def test_every_backend_words_bad_arrays_the_same_way(bad):
    """The same bad arrays through the JAX operator, the Pallas kernels (interpreter), the torch
    reference and the Triton operator: one message (sinkalign.sinkhorn.checks)."""
    torch = pytest.importorskip("torch")
    import sinkalign.kernels.pallas  # noqa: F401  (registers backend="pallas")
    from sinkalign.kernels.triton import sinkhorn_attention_triton
    from sinkalign.kernels.triton.ref import sinkhorn_attention_ref
    from sinkalign.sinkhorn import SinkhornConfig, sinkhorn_attention

    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=s).astype(np.float32) for s in ((2, 1, 10, 4), (2, 1, 12, 4), (2, 1, 12, 3)))
    if bad == "nan_q":
        q[1, 0, 7, 2] = np.nan
    elif bad == "inf_v":
        v[0, 0, 11, 1] = -np.inf
    elif bad == "feature_dims":
        k = k[..., :3]
    elif bad == "v_length":
        v = v[:, :, :11]
    else:
        v = v[:1]
    cfg = SinkhornConfig(eps=1.0, n_iters=3, band=4)
    tq, tk, tv = (torch.tensor(x) for x in (q, k, v))
    runs = {"jax": lambda: sinkhorn_attention(q, k, v, config=cfg),
            "pallas": lambda: sinkhorn_attention(q, k, v, config=cfg.replace(backend="pallas")),
            "torch reference": lambda: sinkhorn_attention_ref(tq, tk, tv, eps=1.0, n_iters=3, band=4),
            "triton": lambda: sinkhorn_attention_triton(tq, tk, tv, config=cfg)}
    messages = {}
    for name, run in runs.items():
        with pytest.raises(ValueError) as info:
            run()
        messages[name] = str(info.value)
    want = {"nan_q": "q has a non-finite value at index (1, 0, 7, 2)",
            "inf_v": "v has a non-finite value at index (0, 0, 11, 1)",
            "feature_dims": "q and k feature dims differ: 4 vs 3",
            "v_length": "k and v lengths differ: 12 vs 11",
            "batch": "batch dims differ: q (2, 1, 10, 4), k (2, 1, 12, 4), v (1, 1, 12, 3)"}[bad]
    assert set(messages.values()) == {want}, messages


def test_support_check_names_the_batch_index_the_user_gave():
    from sinkalign.sinkhorn.checks import check_support

    qv, kv = np.ones((2, 3, 6), bool), np.ones((2, 3, 5), bool)
    kv[1, :, :] = [True, False, False, False, False]  # the same for every head: reported as batch 1
    with pytest.raises(ValueError, match=r"^batch 1: valid query position 2 has no active key within band=1"):
        check_support(qv, kv, 1)
    kv[1] = True
    kv[1, 2] = [True, False, False, False, False]  # head 2 only: the index has the head
    with pytest.raises(ValueError, match=r"^batch \(1, 2\): valid query position 2 has no active key"):
        check_support(qv, kv, 1)
    with pytest.raises(ValueError, match=r"^valid key position 0 has no active query at all"):
        check_support(np.zeros(3, bool), np.ones(5, bool), None)
    check_support(qv, np.ones((2, 3, 5), bool), 1)  # a valid problem passes


def test_what_padding_holds_is_never_refused_nor_used():
    """A NaN or infinity at a padded position (q, k, v, log_a, log_b) is not refused eagerly (it
    was, while under jax.jit the same call ran: the check could not see it there), and reaches
    neither the output nor a gradient; at a valid position it is still refused, naming it."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(2)
    q, k, v = (rng.normal(size=s) for s in ((2, 1, 8, 4), (2, 1, 9, 4), (2, 1, 9, 3)))
    qm, km = np.ones((2, 8), bool), np.ones((2, 9), bool)
    qm[1, 6:] = km[0, 7:] = False
    dirty = [x.copy() for x in (q, k, v)]
    dirty[0][1, 0, 7, 1] = np.nan
    dirty[1][0, 0, 8, 0] = np.inf
    dirty[2][0, 0, 7, 2] = -np.inf
    la, lb = np.zeros((2, 8)), np.zeros((2, 9))
    la_dirty, lb_dirty = la.copy(), lb.copy()
    la_dirty[1, 7], lb_dirty[0, 8] = np.nan, np.inf
    cfg = SinkhornConfig(eps=1.0, n_iters=4, band=3)

    def loss(q, k, v, la, lb):
        return sinkhorn_attention(q, k, v, q_mask=qm, k_mask=km, log_a=la, log_b=lb, config=cfg).sum()

    clean = jax.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v, la, lb)
    for run in (jax.value_and_grad(loss, argnums=(0, 1, 2)), jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))):
        value, grads = run(*dirty, la_dirty, lb_dirty)
        assert np.isfinite(value) and value == pytest.approx(float(clean[0]), rel=1e-12)
        for g, want in zip(grads, clean[1]):
            np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=1e-12, atol=1e-15)
    valid_nan = q.copy()
    valid_nan[1, 0, 5, 0] = np.nan  # position 5 of batch 1 is valid
    with pytest.raises(ValueError, match=r"q has a non-finite value at index \(1, 0, 5, 0\)"):
        sinkhorn_attention(valid_nan, k, v, q_mask=qm, k_mask=km, config=cfg)
    assert float(jnp.abs(sinkhorn_attention(*dirty, q_mask=qm, k_mask=km, config=cfg)[1, 0, 6:]).max()) == 0.0
