"""One table of problems, every backend, one dense reference.

The table is :data:`sinkalign.kernels.validation.KERNEL_CASES` (bands and dense, unequal and
length-1 sides, padding, marginals, T = 0, both dustbin variants), the same one
``sinkalign validate kernels`` sweeps. Each backend (the JAX reference with its shipped
one-reference backward in float64; the Pallas and Triton kernels in float32, in their
interpreters here and natively on a GPU) computes O and the gradient of <O, G> with respect to
every token input (dustbin tokens included), and each is compared with one dense float64
reference written here from the operator's definition alone: all L x L scores, the support as a
dense mask, T stopped and centred base steps, R = 2 differentiated tail steps, autodiff.
"""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sinkalign.kernels import validation as V
from sinkalign.sinkhorn import core
from sinkalign.sinkhorn.support import Support

CASES = V.KERNEL_CASES
NAMES = ("O", "dq", "dk", "dv", "dqd", "dkd", "dvd")


def _dense_mask(support: Support) -> np.ndarray:
    """The support's static (band / dense / dustbin) pattern as a dense [Lq, Lk] bool matrix."""
    with jax.ensure_compile_time_eval():  # static: computed while the operator is traced
        ones = [jnp.ones(p.static_mask.shape, jnp.float64) for p in support.pieces]
        return np.asarray(support.densify(ones)) > 0


def _dense_operator(q, k, v, qv, kv, la, lb, omega, eps, T, R):
    """O = P^(R,R) V on all L x L scores: the base duals stopped, R tail steps differentiated."""
    S = jnp.einsum("...id,...jd->...ij", q, k) / (np.sqrt(q.shape[-1]) * eps)
    mask = omega & qv[..., :, None] & kv[..., None, :]
    rows, cols = mask.any(-1), mask.any(-2)

    def row(vv):
        x = jnp.where(mask & rows[..., :, None], S + vv[..., None, :], -jnp.inf)
        x = jnp.where(rows[..., :, None], x, 0.0)
        return jnp.where(rows, la - jax.nn.logsumexp(x, axis=-1), 0.0)

    def col(u):
        x = jnp.where(mask & cols[..., None, :], S + u[..., :, None], -jnp.inf)
        x = jnp.where(cols[..., None, :], x, 0.0)
        return jnp.where(cols, lb - jax.nn.logsumexp(x, axis=-2), 0.0)

    u, vv = jnp.zeros(q.shape[:-1]), jnp.zeros(k.shape[:-1])
    for _ in range(T):
        u = row(vv)
        vv = col(u)
        c = jnp.sum(jnp.where(rows, u, 0.0), -1, keepdims=True) / jnp.maximum(rows.sum(-1, keepdims=True), 1)
        u, vv = jnp.where(rows, u - c, 0.0), jnp.where(cols, vv + c, 0.0)
    u, vv = jax.lax.stop_gradient(u), jax.lax.stop_gradient(vv)
    for _ in range(R):
        u = row(vv)
        vv = col(u)
    logits = jnp.where(mask, S + u[..., :, None] + vv[..., None, :], -jnp.inf)
    return jnp.einsum("...ij,...je->...ie", jnp.where(mask, jnp.exp(logits), 0.0), v)


def _grads(case, inp, operator, **kw):
    """O and d<O, G>/d(inputs) in float64 for ``operator(prepared problem, support, config)``."""
    return V._jax_grads(case, inp, backend="reference", dtype=jnp.float64, operator=operator, **kw)


def dense_reference(case, inp):
    return _grads(case, inp, lambda q, k, v, qv, kv, la, lb, support, cfg: _dense_operator(
        q, k, v, qv, kv, la, lb, jnp.asarray(_dense_mask(support)), cfg.eps, cfg.n_iters, cfg.tail))


def _run(backend, case, inp):
    if backend == "reference":  # the shipped one-reference backward, float64
        return V._jax_grads(case, inp, backend="reference", dtype=jnp.float64, backward="one_reference"), 1e-10
    if backend == "pallas":
        from sinkalign.kernels.pallas import BlockSizes

        got = V._jax_grads(case, inp, backend="pallas", dtype=jnp.float32,
                           blocks=BlockSizes(block_q=16, block_k=16), interpret=True)
        return got, 1e-5
    try:
        V.check_backend("triton", True)
    except ValueError as exc:
        pytest.skip(str(exc))
    return V._triton_grads(case, inp, interpret=True, block=16), 1e-5


BACKENDS = ["reference", "pallas",
            pytest.param("triton", marks=pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                                            reason="triton is not installed"))]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_matches_the_dense_reference(backend, case):
    inp = V._inputs(case, seed=1)
    ref = dense_reference(case, inp)
    got, tol = _run(backend, case, inp)
    assert set(got) == set(ref)
    for name in NAMES:
        if name in ref:
            scale = max(1.0, float(np.abs(ref[name]).max()))
            err = float(np.abs(got[name] - ref[name]).max())
            assert err <= tol * scale, f"{backend} {case.name} {name}: {err:.3e} > {tol * scale:.3e}"
            assert np.all(np.isfinite(got[name]))


def test_the_dense_reference_is_not_the_blockwise_code():
    """The dense reference fails a wrong operator: one base step fewer, or an ungated gradient
    through the base, is caught on the table's first case."""
    case = CASES[0]
    inp = V._inputs(case, seed=1)
    ref = dense_reference(case, inp)
    fewer = V.KernelCase(**{**case.__dict__, "n_iters": case.n_iters - 1})
    wrong = _grads(fewer, inp, None, backward="one_reference")
    assert float(np.abs(wrong["O"] - ref["O"]).max()) > 1e-6

    def full_backprop(q, k, v, qv, kv, la, lb, support, cfg):  # no stopped base: another gradient
        return core.tail_operator(q, k, v, qv, kv, la, lb, support, cfg.replace(tail=cfg.tail + cfg.n_iters,
                                                                                n_iters=0, backward="autodiff"))

    other = _grads(case, inp, full_backprop)
    np.testing.assert_allclose(other["O"], ref["O"], atol=1e-6)  # the same forward (to convergence noise)...
    assert float(np.abs(other["dq"] - ref["dq"]).max()) > 1e-6  # ...but not the stopped-base gradient
