"""Pallas Sinkhorn tail-refinement kernels against the JAX reference operator.

``KernelSuite`` compares ``backend="pallas"`` with the float64 reference differentiated by
``backward="autodiff"`` (the ground truth): the output O and dQ, dK, dV of ``<O, G>`` (and
the dustbin tokens' gradients), over shapes that include Lq != Lk, length 1, lengths that
are not block multiples, padding, band and dense, B*H > 1 and both dustbin variants.
``TestInterpreted`` runs it in the Pallas interpreter on the CPU with 16 x 16 tiles (several
tiles per row even on these small shapes); ``TestNativeGPU`` runs it natively and skips
without a GPU. The interpreter compiles each kernel for every new shape (~1 s each), so the
default cases are few and small; larger sweeps are marked ``slow``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from click.testing import CliRunner

from sinkalign.errors import InputError, SinkalignError
from sinkalign.kernels import pallas
from sinkalign.kernels.pallas import BlockSizes
from sinkalign.kernels.validation import KernelCase
from sinkalign.sinkhorn import DustbinConfig, SinkhornConfig, core, sinkhorn_attention
from sinkalign.sinkhorn.dustbin import augment, dustbin_attention
from sinkalign.sinkhorn.support import Piece, Support
from tests.cli_errors import assert_one_line_error

# the sweep dataclass of `sinkalign validate kernels`; here (make_inputs) a padded case also drops an
# inner key of batch 0, besides 3 queries and 2 keys at the end of batch 1
Case = KernelCase

FAST_CASES = [  # each compiles the forward and 5 backward kernels (~8 s on a loaded 2-core CPU)
    Case("unequal_band_pad_marginals_bh4", 2, 2, 33, 17, 20, pad=True, marginals=True),
    Case("len1_dense_bh2", 1, 2, 1, 17, None, n_iters=2),
]

SLOW_CASES = [
    Case("band1_unequal_bh2", 1, 2, 50, 49, 1, d=16, dv=16, eps=0.5),
    Case("dense_pad_bh4", 2, 2, 50, 50, None, d=16, pad=True),
    Case("band16_97x120_pad", 2, 2, 97, 120, 24, pad=True, marginals=True),
    Case("dense_64x90_cold", 1, 3, 64, 90, None, d=12, dv=20, n_iters=0, pad=True),
    Case("band_wider_than_block", 2, 1, 80, 80, 37, d=16, dv=8, eps=0.5),
    Case("len1x1", 1, 2, 1, 1, 1),
    Case("odd_257", 1, 1, 257, 257, 16, n_iters=15, pad=False),
]


def make_inputs(case: Case, seed: int = 0):
    """float32-representable inputs (as float64 numpy) and the masks / marginals of ``case``."""
    rng = np.random.default_rng(seed)
    r32 = lambda a: np.asarray(np.asarray(a, np.float32), np.float64)  # noqa: E731
    x = {"q": r32(rng.normal(size=(case.B, case.H, case.lq, case.d))),
         "k": r32(rng.normal(size=(case.B, case.H, case.lk, case.d))),
         "v": r32(rng.normal(size=(case.B, case.H, case.lk, case.dv)))}
    g = r32(rng.normal(size=(case.B, case.H, case.lq, case.dv)))
    qm = np.ones((case.B, case.lq), bool)
    km = np.ones((case.B, case.lk), bool)
    if case.pad:
        km[0, case.lk // 2] = False
        if case.B > 1:
            qm[1, -3:] = False
            km[1, -2:] = False
    la = lb = None
    if case.marginals:
        la = r32(rng.uniform(-0.5, 0.5, size=(case.B, case.lq)))
        lb = r32(rng.uniform(-0.5, 0.5, size=(case.B, case.lk)))
    return x, g, qm, km, la, lb


def _value_and_grads(fn, x: dict, g, dtype):
    """O = fn(x) and d<O, G>/dx for every entry of x, as float64 numpy."""
    xs = {n: jnp.asarray(a, dtype) for n, a in x.items()}

    def loss(xs):
        out = fn(xs)
        return jnp.sum(out.astype(jnp.float64) * g), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(xs)
    return {"O": np.asarray(out, np.float64), **{f"d{n}": np.asarray(a, np.float64) for n, a in grads.items()}}


def _operator(case: Case, qm, km, la, lb, impl, **kw):
    cfg = SinkhornConfig(eps=case.eps, n_iters=case.n_iters, band=case.band,
                         backward="autodiff" if impl == "reference" else "one_reference", backend=impl)

    def fn(xs):
        q, k, v, qv, kv, la_, lb_ = core.prepare(xs["q"], xs["k"], xs["v"], qm, km, xs.get("la", la),
                                                 xs.get("lb", lb), band=case.band)
        q, k, v = (t.astype(xs["q"].dtype) for t in (q, k, v))  # keep bfloat16 tiles bfloat16
        support = Support.single(case.lq, case.lk, case.band, cfg.block)
        if impl == "reference":
            return core.tail_operator(q, k, v, qv, kv, la_.astype(q.dtype), lb_.astype(q.dtype), support, cfg)
        return pallas.tail_operator(q, k, v, qv, kv, la_, lb_, support, cfg, **kw)

    return fn


def _max_err(a, b) -> float:
    return float(np.abs(a - b).max()) if a.size else 0.0


def tolerances(dtype) -> dict:
    """float32: absolute 1e-5 (relative to max(1, scale)); bfloat16: at most 2x the error of a
    same-precision (bfloat16) reference run plus 2e-3 * scale (flash-attention's rule)."""
    if dtype == jnp.float32:
        return {"abs": 1e-5}
    return {"factor": 2.0, "rel_atol": 2e-3}


class KernelSuite:
    INTERPRET = True
    BLOCKS = BlockSizes(block_q=16, block_k=16)
    CACHE = False  # cache_scores: the sweeps read S from one cache instead of recomputing their tiles

    def kernel(self, case, x, g, qm, km, la, lb, dtype=jnp.float32, blocks=None):
        fn = _operator(case, qm, km, la, lb, "pallas", block_sizes=blocks or self.BLOCKS, interpret=self.INTERPRET,
                       cache_scores=self.CACHE)
        return _value_and_grads(fn, x, g, dtype)

    def check_float32(self, case):
        x, g, qm, km, la, lb = make_inputs(case)
        core.prepare(x["q"], x["k"], x["v"], qm, km, la, lb, band=case.band)  # the case is a valid problem
        names = ("O", "dq", "dk", "dv")
        if case.marginals:  # the log marginals' gradients too (they were None: zeros)
            x, names = {**x, "la": la, "lb": lb}, names + ("dla", "dlb")
        ref = _value_and_grads(_operator(case, qm, km, la, lb, "reference"), x, g, jnp.float64)
        got = self.kernel(case, x, g, qm, km, la, lb)
        for name in names:
            scale = max(1.0, float(np.abs(ref[name]).max()))
            err = _max_err(got[name], ref[name])
            assert err <= tolerances(jnp.float32)["abs"] * scale, f"{case.name} {name}: {err:.3e}"
        # padded queries: zero output and dQ; padded keys: zero dK and dV
        q_pad = np.broadcast_to(~qm[:, None, :], got["O"].shape[:-1])
        k_pad = np.broadcast_to(~km[:, None, :], got["dk"].shape[:-1])
        assert np.all(got["O"][q_pad] == 0) and np.all(got["dq"][q_pad] == 0)
        assert np.all(got["dk"][k_pad] == 0) and np.all(got["dv"][k_pad] == 0)

    @pytest.mark.parametrize("case", FAST_CASES, ids=lambda c: c.name)
    def test_float32_matches_reference(self, case):
        self.check_float32(case)

    @pytest.mark.slow
    @pytest.mark.parametrize("case", SLOW_CASES, ids=lambda c: c.name)
    def test_float32_matches_reference_slow(self, case):
        self.check_float32(case)

    def test_bfloat16_within_twice_reference_error(self):
        case = Case("bf16", 2, 1, 33, 40, 12, d=16, dv=8, n_iters=5, pad=True)
        x, g, qm, km, la, lb = make_inputs(case)
        x = {n: np.asarray(jnp.asarray(a, jnp.bfloat16), np.float64) for n, a in x.items()}  # what the kernel sees
        ref64 = _value_and_grads(_operator(case, qm, km, la, lb, "reference"), x, g, jnp.float64)
        ref_low = _value_and_grads(_operator(case, qm, km, la, lb, "reference"), x, g, jnp.bfloat16)
        got = self.kernel(case, x, g, qm, km, la, lb, dtype=jnp.bfloat16)
        tol = tolerances(jnp.bfloat16)
        for name in ("O", "dq", "dk", "dv"):
            scale = float(np.abs(ref64[name]).max())
            bound = tol["factor"] * _max_err(ref_low[name], ref64[name]) + tol["rel_atol"] * scale
            err = _max_err(got[name], ref64[name])
            assert np.all(np.isfinite(got[name]))
            assert err <= bound, f"{name}: kernel {err:.3e}, bound {bound:.3e}"
            assert err <= 1e-2 * scale, f"{name}: kernel {err:.3e} vs scale {scale:.3e}"

    @pytest.mark.parametrize("variant", ["banded", pytest.param("paper", marks=pytest.mark.slow)])
    def test_dustbin_attention_token_gradients(self, variant):
        """Both dustbin variants through ``dustbin_attention(config=SinkhornConfig(backend="pallas"))``
        (default tiles), gradients w.r.t. real and dustbin tokens. The banded variant adds an
        always-active dustbin row and column: thin jnp pieces beside the kernel band."""
        self._check_dustbin(variant, blocks=None)

    @pytest.mark.slow
    @pytest.mark.parametrize("variant", ["banded", "paper"])
    def test_dustbin_small_tiles(self, variant):
        """The same through ``augment`` + :func:`pallas.tail_operator` with the suite's small tiles."""
        self._check_dustbin(variant, blocks=self.BLOCKS)

    def _check_dustbin(self, variant, blocks):
        lq, lk, band, B, H, d, dv = 33, 20, 6, 2, 2, 8, 4
        db = (DustbinConfig(variant="banded", mass="length") if variant == "banded"
              else DustbinConfig(variant="paper", mass="unit", filler=16))
        rng = np.random.default_rng(3)
        x = {"q": rng.normal(size=(B, H, lq, d)), "k": rng.normal(size=(B, H, lk, d)),
             "v": rng.normal(size=(B, H, lk, dv)), "qd": rng.normal(size=(d,)), "kd": rng.normal(size=(d,)),
             "vd": rng.normal(size=(dv,))}
        x = {n: np.asarray(np.asarray(a, np.float32), np.float64) for n, a in x.items()}
        g = rng.normal(size=(B, H, lq, dv))
        qm = np.ones((B, lq), bool)
        km = np.ones((B, lk), bool)
        qm[0, -2:] = False
        km[1, -3:] = False

        def op(impl):
            cfg = SinkhornConfig(n_iters=3, band=band, backend=impl,
                                 backward="autodiff" if impl == "reference" else "one_reference")
            if impl == "reference" or (blocks is None and self.INTERPRET and not self.CACHE):
                return lambda xs: dustbin_attention(xs["q"], xs["k"], xs["v"], xs["qd"], xs["kd"], xs["vd"],
                                                    q_mask=qm, k_mask=km, config=cfg, dustbin=db)

            def fn(xs):
                a = augment(xs["q"], xs["k"], xs["v"], xs["qd"], xs["kd"], xs["vd"], q_mask=qm, k_mask=km,
                            config=cfg, dustbin=db)
                out = pallas.tail_operator(a.q, a.k, a.v, a.q_valid, a.k_valid, a.log_a, a.log_b, a.support,
                                           a.config, block_sizes=blocks or self.BLOCKS, interpret=self.INTERPRET,
                                           cache_scores=self.CACHE)
                return out[..., :lq, :]

            return fn

        ref = _value_and_grads(op("reference"), x, g, jnp.float64)
        got = _value_and_grads(op("pallas"), x, g, jnp.float32)
        assert set(got) == {"O", "dq", "dk", "dv", "dqd", "dkd", "dvd"}
        for name in ref:
            err = _max_err(got[name], ref[name])
            assert err <= 1e-5 * max(1.0, float(np.abs(ref[name]).max())), f"{variant} {name}: {err:.3e}"

    @pytest.mark.slow
    def test_block_sizes_agree(self):
        case = Case("blocks", 1, 1, 40, 33, 9)
        x, g, qm, km, la, lb = make_inputs(case, seed=3)
        a = self.kernel(case, x, g, qm, km, la, lb, blocks=BlockSizes(block_q=16, block_k=32))
        b = self.kernel(case, x, g, qm, km, la, lb, blocks=BlockSizes(block_q=32, block_k=16))
        for name in a:
            assert _max_err(a[name], b[name]) <= 1e-5 * max(1.0, float(np.abs(b[name]).max())), name


def _forward_ref(case, x, qm, km, la, lb, dtype=jnp.float64):
    cfg = SinkhornConfig(eps=case.eps, n_iters=case.n_iters, band=case.band)
    args = core.prepare(*(jnp.asarray(x[n], dtype) for n in "qkv"), qm, km, la, lb, band=case.band)
    support = Support.single(case.lq, case.lk, case.band, cfg.block)
    return args, support, cfg


class TestInterpreted(KernelSuite):
    INTERPRET = True

    @pytest.mark.slow
    def test_duals_and_output_match_reference(self):
        """Forward only, a larger padded problem: the dual vectors themselves agree."""
        case = Case("duals", 2, 2, 57, 50, 8, n_iters=6, pad=True, marginals=True)
        x, _, qm, km, la, lb = make_inputs(case)
        (q, k, v, qv, kv, la_, lb_), support, cfg = _forward_ref(case, x, qm, km, la, lb)
        _, (us, vs) = core._forward(q, k, v, qv, kv, la_, lb_, support, cfg)
        args32 = [t.astype(jnp.float32) if t.dtype == jnp.float64 else t for t in (q, k, v, qv, kv, la_, lb_)]
        duals = pallas.tail_duals(*args32, support, cfg.replace(backend="pallas"), block_sizes=self.BLOCKS)
        want = {"v0": vs[0], "u1": us[1], "v1": vs[1], "u2": us[2], "v2": vs[2]}
        for name, ref in want.items():
            assert _max_err(np.asarray(duals[name]), np.asarray(ref)) <= 1e-5, name

    def test_public_api_dispatch(self):
        """backend='pallas' through sinkhorn_attention (default tiles, [B, L, d] inputs)."""
        rng = np.random.default_rng(7)
        q, k, v = (jnp.asarray(rng.normal(size=(2, 30, 8)), jnp.float32) for _ in range(3))
        qm = np.ones((2, 30), bool)
        qm[1, -4:] = False
        ref = sinkhorn_attention(q, k, v, q_mask=qm, band=5, n_iters=4)
        got = sinkhorn_attention(q, k, v, q_mask=qm, band=5, n_iters=4, backend="pallas")
        assert _max_err(np.asarray(got), np.asarray(ref)) <= 1e-5

    def test_huge_padded_values_do_not_leak(self):
        """Masking trap: a padded key with an enormous score must stay inactive."""
        case = Case("trap", 1, 1, 20, 20, 4, n_iters=3)
        x, _, qm, km, la, lb = make_inputs(case, seed=5)
        km = km.copy()
        km[0, 7] = False
        x = dict(x)
        x["k"] = x["k"].copy()
        x["k"][0, 0, 7] = 40.0 * x["q"][0, 0, 7]
        (q, k, v, qv, kv, la_, lb_), support, cfg = _forward_ref(case, x, qm, km, la, lb)
        ref = core.tail_operator(q, k, v, qv, kv, la_, lb_, support, cfg)
        args32 = [t.astype(jnp.float32) if t.dtype == jnp.float64 else t for t in (q, k, v, qv, kv, la_, lb_)]
        got = pallas.tail_operator(*args32, support, cfg, block_sizes=self.BLOCKS)
        assert np.all(np.isfinite(np.asarray(got)))
        assert _max_err(np.asarray(got), np.asarray(ref)) <= 1e-5

    @pytest.mark.slow
    def test_validate_kernels_cli_quick(self, tmp_path, monkeypatch):
        """--cache-scores reaches every kernel call (off here; the default, auto, passes None)."""
        from sinkalign.cli.main import cli

        seen, real = [], pallas.tail_operator

        def recording(*args, cache_scores=None, **kw):
            seen.append(cache_scores)
            return real(*args, cache_scores=cache_scores, **kw)

        monkeypatch.setattr(pallas, "tail_operator", recording)
        out = tmp_path / "k.json"
        res = CliRunner().invoke(cli, ["validate", "kernels", "--backend", "pallas", "--interpret", "--quick",
                                       "--cache-scores", "off", "--json", str(out)])
        assert res.exit_code == 0, res.output
        assert "score cache off" in res.output
        import json

        data = json.loads(out.read_text())
        assert data["backend"] == "pallas" and len(data["rows"]) == 3 and data["cache_scores"] == "off"
        assert data["max_abs_deviation"] <= 1e-4
        assert len(seen) >= 3 and set(seen) == {False}
        seen.clear()
        from sinkalign.kernels import validation as kval

        for value in (None, True):
            assert kval.kernels("pallas", True, cases=kval.KERNEL_CASES[:1], cache_scores=value)["max_abs_deviation"] <= 1e-4
        assert seen == [None, True]
        seen.clear()
        long = kval.long_forward((40,), band=6, cache_scores=False)  # --long's check takes the option too
        assert seen == [False] and long["cache_scores"] == "off" and long["max_abs_deviation"] <= 1e-4


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU JAX backend (native Pallas lowering)")
class TestNativeGPU(KernelSuite):
    INTERPRET = False
    BLOCKS = BlockSizes(block_q=32, block_k=32)

    def test_long_banded_problem(self):
        self.check_float32(Case("gpu_long", 2, 2, 960, 900, 64, d=32, dv=32, n_iters=15, pad=True, marginals=True))

    def test_second_order_gradients_are_refused_natively(self):
        """First-order gradients through the compiled kernels as before; grad of grad refused
        by name (the custom_jvp guard around the kernels' forward and backward)."""
        rng = np.random.default_rng(0)
        q, k, v = (jnp.asarray(rng.normal(size=(1, 1, 40, 16)), jnp.float32) for _ in range(3))
        cfg = SinkhornConfig(n_iters=3, band=8, backend="pallas")

        def loss(a):
            return sinkhorn_attention(a, k, v, config=cfg).sum()

        first = jax.grad(loss)(q)
        k64, v64 = (jnp.asarray(t, jnp.float64) for t in (k, v))  # float64: no TF32 dots in the reference
        ref = jax.grad(lambda a: sinkhorn_attention(a, k64, v64, config=SinkhornConfig(n_iters=3, band=8)).sum())(
            jnp.asarray(q, jnp.float64))
        assert _max_err(np.asarray(first, np.float64), np.asarray(ref)) <= 1e-5 * max(1.0, float(np.abs(ref).max()))
        with pytest.raises(NotImplementedError, match="second-order gradients .* need backend='reference'"):
            jax.grad(lambda a: jnp.sum(jax.grad(loss)(a) ** 2))(q)

    def test_tf32x3_dots_stay_near_float32_and_tf32_dots_cost_accuracy(self):
        """precision='tf32x3' stays within 8x the float32 tolerance; 'tf32' is measurably less
        accurate than 'ieee' (the setting reaches the dots)."""
        case = Case("tf32", 2, 2, 97, 120, 24, d=16, dv=16, n_iters=15, pad=True, marginals=True)
        x, g, qm, km, la, lb = make_inputs(case)
        ref = _value_and_grads(_operator(case, qm, km, la, lb, "reference"), x, g, jnp.float64)
        runs = {p: _value_and_grads(_operator(case, qm, km, la, lb, "pallas", block_sizes=self.BLOCKS,
                                              interpret=False, precision=p), x, g, jnp.float32)
                for p in ("ieee", "tf32x3", "tf32")}
        for name in ("O", "dq", "dk", "dv"):
            scale = max(1.0, float(np.abs(ref[name]).max()))
            err = _max_err(runs["tf32x3"][name], ref[name])
            assert err <= 8 * tolerances(jnp.float32)["abs"] * scale, f"tf32x3 {name}: {err:.3e}"
        err = {p: max(_max_err(out[n], ref[n]) for n in ("O", "dq", "dk", "dv")) for p, out in runs.items()}
        assert err["tf32"] > 4 * err["ieee"], err


class TestInterpretedCachedScores(KernelSuite):
    """The same checks with ``cache_scores=True``: every sweep reads its score tiles from the
    cache of :func:`sinkalign.kernels.pallas.kernels.scores` (the column sweeps transposed)."""

    INTERPRET = True
    CACHE = True

    @pytest.mark.parametrize("bq, bk", [(16, 32), (32, 16)])
    def test_cached_and_recomputed_tiles_agree_with_unequal_tiles(self, bq, bk):
        """Row blocks and key tiles of different sizes (a column sweep maps its tiles to the row
        blocks' slots); the two ways agree to float32 rounding and both meet the reference."""
        case = Case("cache_tiles", 2, 1, 70, 53, 20, d=8, dv=5, n_iters=5, pad=True, marginals=True)
        x, g, qm, km, la, lb = make_inputs(case, seed=4)
        x = {**x, "la": la, "lb": lb}
        blocks = BlockSizes(block_q=bq, block_k=bk)
        runs = {cache: _value_and_grads(_operator(case, qm, km, la, lb, "pallas", block_sizes=blocks,
                                                  cache_scores=cache), x, g, jnp.float32) for cache in (False, True)}
        ref = _value_and_grads(_operator(case, qm, km, la, lb, "reference"), x, g, jnp.float64)
        for name in ("O", "dq", "dk", "dv", "dla", "dlb"):
            scale = max(1.0, float(np.abs(ref[name]).max()))
            assert _max_err(runs[True][name], runs[False][name]) <= 1e-6 * scale, name
            assert _max_err(runs[True][name], ref[name]) <= tolerances(jnp.float32)["abs"] * scale, name


    @staticmethod
    def _doubled_cache_problem(monkeypatch, case, seed):
        """Every score cache built from here on holds doubled scores; the float32 problem of ``case``.
        The operator runs under a jit of its own for the test, so that no trace of the doubled
        caches outlives it."""
        from sinkalign.kernels.pallas import kernels as K
        from sinkalign.kernels.pallas import op

        real = K.scores
        monkeypatch.setattr(K, "scores", lambda ln, q, k: 2.0 * real(ln, q, k))
        monkeypatch.setattr(op, "_op_jit", jax.jit(op._op, static_argnums=(7,)))
        x, _, qm, km, la, lb = make_inputs(case, seed=seed)
        args, support, cfg = _forward_ref(case, x, qm, km, la, lb, dtype=jnp.float32)
        return args, support, cfg.replace(backend="pallas")

    def test_every_sweep_reads_the_cache(self, monkeypatch):
        """A cache of doubled scores gives the operator at half the temperature: the row and the
        column sweeps (and the output pass) all take S from the cache, none recomputes it."""
        case = Case("cache_read", 1, 1, 45, 38, 11, d=8, dv=3, n_iters=4, pad=True, marginals=True)
        (q, k, v, qv, kv, la_, lb_), support, cfg = self._doubled_cache_problem(monkeypatch, case, seed=9)
        blocks = BlockSizes(block_q=16, block_k=32)
        doubled = pallas.tail_operator(q, k, v, qv, kv, la_, lb_, support, cfg, block_sizes=blocks,
                                       cache_scores=True)
        colder = pallas.tail_operator(q, k, v, qv, kv, la_, lb_, support, cfg.replace(eps=cfg.eps / 2),
                                      block_sizes=blocks, cache_scores=False)
        plain = pallas.tail_operator(q, k, v, qv, kv, la_, lb_, support, cfg, block_sizes=blocks, cache_scores=False)
        assert _max_err(np.asarray(doubled), np.asarray(colder)) <= 1e-5
        assert _max_err(np.asarray(doubled), np.asarray(plain)) > 1e-2  # the cache made the difference

    def test_the_default_caches_only_exact_float32_dots_within_its_cap(self, monkeypatch):
        """cache_scores=None, the default, reads a cache where the dots are exact float32 and the
        cache fits ``AUTO_CACHE_MAX_BYTES``, and recomputes for bfloat16 inputs or past the cap.
        A cache of doubled scores shows which ran: it gives the operator at half the temperature."""
        from sinkalign.kernels import cache

        case = Case("cache_default", 1, 1, 43, 39, 11, d=8, dv=3, n_iters=4, pad=True, marginals=True)
        (q, k, v, qv, kv, la_, lb_), support, cfg = self._doubled_cache_problem(monkeypatch, case, seed=5)

        def run(dtype=jnp.float32, c=cfg, **kw):
            q_, k_, v_ = (a.astype(dtype) for a in (q, k, v))
            return np.asarray(pallas.tail_operator(q_, k_, v_, qv, kv, la_, lb_, support, c, interpret=True,
                                                   block_sizes=BlockSizes(block_q=16, block_k=32), **kw), np.float64)

        colder, plain = run(c=cfg.replace(eps=cfg.eps / 2), cache_scores=False), run(cache_scores=False)
        assert _max_err(colder, plain) > 1e-2
        assert _max_err(run(), colder) <= 1e-5  # the default read the (doubled) cache
        assert _max_err(run(jnp.bfloat16), run(jnp.bfloat16, cache_scores=False)) == 0.0  # bfloat16: recomputed
        monkeypatch.setattr(cache, "AUTO_CACHE_MAX_BYTES", 0)
        assert _max_err(run(), plain) == 0.0  # past the cap: recomputed
        assert _max_err(run(cache_scores=True), colder) <= 1e-5  # an explicit True ignores the cap

    def test_under_vmap_the_default_decides_the_cache_for_the_whole_batch(self, monkeypatch):
        """``jax.vmap`` merges its axis into the kernels' batch (one launch for all of it), so the
        default's cap counts every mapped slice: with room for two slices' caches, two mapped
        slices read a cache and three recompute, in the forward and the backward, under nested
        vmaps too. A vmapped slice's gradients are those of the slice alone."""
        from sinkalign.kernels import cache
        from sinkalign.kernels.pallas import op

        case = Case("cache_vmap", 1, 1, 43, 39, 11, d=8, dv=3, n_iters=4, pad=True, marginals=True)
        (q, k, v, qv, kv, la_, lb_), support, cfg = self._doubled_cache_problem(monkeypatch, case, seed=6)
        blocks = BlockSizes(block_q=16, block_k=32)
        rng = np.random.default_rng(6)
        qs, ks = (jnp.asarray(x[None] + 0.3 * rng.standard_normal((3,) + x.shape), jnp.float32) for x in (q, k))
        g = jnp.asarray(rng.standard_normal((3,) + q.shape[:-1] + (v.shape[-1],)), jnp.float32)

        def loss(q1, k1, g1, c=cfg, **kw):  # one slice: its output, its weighted sum for the gradients
            out = pallas.tail_operator(q1, k1, v, qv, kv, la_, lb_, support, c, interpret=True,
                                       block_sizes=blocks, **kw)
            return jnp.sum(out * g1), out

        def run(n, c=cfg, nested=False, **kw):  # vmapped over n slices: outputs and d/dq, d/dk
            f = jax.value_and_grad(lambda q1, k1, g1: loss(q1, k1, g1, c, **kw), argnums=(0, 1), has_aux=True)
            if nested:  # slices as 1 x n: two vmaps
                (_, out), grads = jax.vmap(jax.vmap(f))(qs[None, :n], ks[None, :n], g[None, :n])
                out, grads = out[0], tuple(x[0] for x in grads)
            else:
                (_, out), grads = jax.vmap(f)(qs[:n], ks[:n], g[:n])
            return [np.asarray(x, np.float64) for x in (out, *grads)]

        def same(a, b, tol):
            return max(_max_err(x, y) for x, y in zip(a, b)) <= tol

        st = op._static(support, cfg, blocks, True, bh=1)
        assert st.cache_rule and st.cache_scores
        monkeypatch.setattr(cache, "AUTO_CACHE_MAX_BYTES", 4 * st.cache_floats(2))  # two slices' caches fit
        for n in (2, 3):
            plain, colder = run(n, cache_scores=False), run(n, cfg.replace(eps=cfg.eps / 2), cache_scores=False)
            assert not same(plain, colder, 1e-2)
            alone = [np.asarray(x, np.float64) for x in jax.vmap(jax.grad(lambda *a: loss(*a, cache_scores=False)[0],
                                                                           argnums=(0, 1)))(qs[:n], ks[:n], g[:n])]
            assert same(plain[1:], alone, 1e-6)  # a vmapped slice is the slice alone
            # the doubled cache read (2 slices: the colder operator's plans, the gradients' 1 / (sqrt(d) eps)
            # at the given eps, so half the colder gradients) or recomputed (3 slices)
            expect = [colder[0], colder[1] / 2, colder[2] / 2] if n == 2 else plain
            for nested in (False, True):
                assert same(run(n, nested=nested), expect, 1e-5), (n, nested)


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU JAX backend (native Pallas lowering)")
class TestNativeGPUCachedScores(KernelSuite):
    INTERPRET = False
    BLOCKS = BlockSizes(block_q=32, block_k=32)
    CACHE = True

    def test_long_banded_problem(self):
        self.check_float32(Case("gpu_long", 2, 2, 960, 900, 64, d=32, dv=32, n_iters=15, pad=True, marginals=True))

    def test_unequal_tiles(self):
        self.check_float32(Case("gpu_tiles", 1, 2, 280, 257, 40, d=16, dv=16, n_iters=15, pad=True,
                                marginals=True))


@pytest.mark.parametrize("cache", [False, True])
def test_float32_gradients_keep_autodiffs_accuracy_when_scores_are_large(cache):
    """The kernels' backward brings each rebuilt tail plan back to its half-step's sums, as the
    reference does (tests/test_sinkhorn_backward.py): with tokens whose norms span 30x (max|S|
    over 500) each gradient stays within 3x of float32 autodiff's error against float64 (or
    1e-5 of its scale)."""
    rng = np.random.default_rng(2)
    L, d = 64, 16
    q, k = rng.normal(size=(2, 1, L, d)) * np.exp(rng.uniform(0, np.log(30.0), size=(2, 1, L, 1)))
    v, g = rng.normal(size=(2, 1, L, 8))
    q, k, v = (np.asarray(np.asarray(a, np.float32), np.float64) for a in (q, k, v))
    assert np.abs(q[0] @ k[0].T).max() / 4 > 500

    def grads(dtype, **kw):
        cfg = SinkhornConfig(eps=1.0, n_iters=15, band=10, **kw)

        def loss(*x):
            if kw.get("backend") == "pallas":
                out = pallas.sinkhorn_attention_pallas(*x, config=cfg, block_sizes=BlockSizes(block_q=16, block_k=32),
                                                       interpret=True, cache_scores=cache)
            else:
                out = sinkhorn_attention(*x, config=cfg)
            return jnp.sum(out * g.astype(dtype))

        return [np.asarray(x, np.float64) for x in jax.grad(loss, argnums=(0, 1, 2))(
            *(jnp.asarray(a, dtype) for a in (q, k, v)))]

    exact = grads(jnp.float64, backward="autodiff")
    auto = grads(jnp.float32, backward="autodiff")
    got = grads(jnp.float32, backend="pallas")
    for name, e, a_, x in zip(("dq", "dk", "dv"), exact, auto, got):
        scale = np.abs(e).max()
        err, err_auto = np.abs(x - e).max() / scale, np.abs(a_ - e).max() / scale
        assert err <= max(3 * err_auto, 1e-5), f"{name}: {err:.1e} against autodiff's {err_auto:.1e}"


def test_the_score_cache_holds_every_band_tile():
    """Launch.cache_slots bounds every row block's band tiles, and a column owner's tile of row
    block t (its slot j - lo_t) is one of that block's: over band and dense, Lq != Lk, tiles of
    different sizes, bands narrower and wider than a tile."""
    from sinkalign.kernels.pallas.kernels import Launch, _tile_range

    for lq, lk, bq, bk, band in [(70, 53, 16, 32, 20), (53, 70, 32, 16, 20), (100, 90, 32, 16, 9), (40, 40, 16, 16, None),
                                 (17, 130, 16, 64, 1), (130, 17, 64, 16, 0), (96, 96, 32, 32, 100)]:
        nx, ny = -(-lq // bq), -(-lk // bk)
        row = Launch(bq, bk, nx, ny, band, 1.0, False, "interpret", cache="row")
        col = row.swap()
        assert col.cache == "col" and col.swap() == row
        slots = row.cache_slots()
        ranges = [tuple(int(t) for t in _tile_range(row, i * bq)) for i in range(nx)]
        assert max(hi - lo for lo, hi in ranges) == slots
        for j in range(ny):
            lo_j, hi_j = (int(t) for t in _tile_range(col, j * bk))
            for t in range(lo_j, hi_j):  # the column owner's query tiles
                lo, hi = ranges[t]
                assert lo <= j < hi and j - lo < slots, (lq, lk, bq, bk, band, j, t)
            # and every row block whose band reaches key tile j is among them
            assert [t for t, (lo, hi) in enumerate(ranges) if lo <= j < hi] == list(range(lo_j, hi_j))


def test_the_score_cache_is_asked_for_consistently():
    from sinkalign.kernels.pallas import kernels as K

    row = K.Launch(16, 16, 2, 2, 4, 1.0, False, "interpret", cache="row")
    q = jnp.zeros((1, 32, 8), jnp.float32)
    with pytest.raises(ValueError, match=r"scores\(\) builds the cache of a row launch"):
        K.scores(row.swap(), q, q)
    vec = jnp.zeros((1, 2, 32), jnp.float32)
    with pytest.raises(ValueError, match="needs the score cache, and only it"):
        K.lse(row, q, vec, q, vec)  # a cached launch without its cache
    with pytest.raises(ValueError, match="needs the score cache, and only it"):
        K.lse(dataclasses.replace(row, cache=None), q, vec, q, vec, K.scores(row, q, q))
    with pytest.raises(ValueError, match="cache_scores='yes' must be True, False or None"):
        pallas.tail_operator(*_args(), cache_scores="yes")
    # 16 batch-heads of 65,536 queries at W = 1,024: 2.3e9 floats, past 32-bit offsets (traced, not allocated)
    big = K.Launch(64, 64, 1024, 1024, 1024, 1.0, False, "interpret", cache="row")
    tokens = jax.ShapeDtypeStruct((16, 65536, 64), jnp.float32)
    with pytest.raises(ValueError, match="past the 2\\^31 that 32-bit offsets reach"):
        jax.eval_shape(lambda a, b: K.scores(big, a, b), tokens, tokens)
    assert jax.eval_shape(lambda a, b: K.scores(big, a, b), *[jax.ShapeDtypeStruct((8, 65536, 64), jnp.float32)] * 2
                          ).shape == (8, 1024, big.cache_slots(), 64, 64)


def test_tf32_precisions_need_the_gpu_target_and_known_names():
    case = Case("prec", 1, 1, 9, 12, 3, n_iters=2)
    x, g, qm, km, la, lb = make_inputs(case)
    with pytest.raises(ValueError, match=r"precision='tf32x3' \(TF32 tensor-core dots\) needs the native GPU target"):
        _operator(case, qm, km, la, lb, "pallas", interpret=True, precision="tf32x3")(
            {n: jnp.asarray(a, jnp.float32) for n, a in x.items()})
    with pytest.raises(ValueError, match=r"precision='half' is not one of \('ieee', 'tf32x3', 'tf32'\)"):
        _operator(case, qm, km, la, lb, "pallas", interpret=True, precision="half")(
            {n: jnp.asarray(a, jnp.float32) for n, a in x.items()})


# --------------------------------------------------------------------------- the validation function


@pytest.mark.slow
def test_validation_kernels_reports_max_abs_deviation():
    from sinkalign.kernels.validation import KernelCase, kernels

    res = kernels("pallas", True, cases=(KernelCase("tiny", 1, 2, 9, 12, 3, n_iters=2),))
    assert set(res["rows"][0]) >= {"O", "dq", "dk", "dv", "max_abs_deviation"}
    assert res["max_abs_deviation"] == res["rows"][0]["max_abs_deviation"] <= 1e-5


@pytest.mark.slow
def test_validation_kernels_triton_interpreted():
    """The same harness drives the Triton kernels (interpreter; skips if triton was already
    imported natively in this process)."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:  # (importing it here would fix its mode: native)
        pytest.skip("triton is not installed")
    from sinkalign.kernels.validation import KernelCase, check_backend, kernels

    try:
        check_backend("triton", True)
    except ValueError as err:
        pytest.skip(str(err))
    cases = (KernelCase("tiny", 1, 2, 9, 12, 3, n_iters=2),
             KernelCase("dustbin", 1, 1, 9, 12, 3, dustbin=DustbinConfig(variant="paper", mass="unit", filler=8)))
    res = kernels("triton", True, cases=cases)
    assert len(res["rows"]) == 2 and res["rows"][1]["d_dustbin"] is not None
    assert res["max_abs_deviation"] == max(r["max_abs_deviation"] for r in res["rows"]) <= 1e-5


def test_dense_forward_matches_reference():
    from sinkalign.kernels.validation import dense_forward

    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(1, n, 4)) for n in (40, 37, 37))
    for band in (5,):
        (qq, kk, vv, qv, kv, la, lb) = core.prepare(q, k, v, band=band)
        cfg = SinkhornConfig(n_iters=5, band=band)
        ref = core.tail_operator(qq, kk, vv, qv, kv, la, lb, Support.single(40, 37, band), cfg)[0]
        got = dense_forward(jnp.asarray(q[0]), jnp.asarray(k[0]), jnp.asarray(v[0]), band=band, eps=1.0, n_iters=5,
                            chunk=16)
        assert _max_err(np.asarray(got), np.asarray(ref)) <= 1e-12


# --------------------------------------------------------------------------- bad inputs


def _args(lq=6, lk=5, dtype=jnp.float32, band=None):
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(2, lq, 4)), dtype)
    k = jnp.asarray(rng.normal(size=(2, lk, 4)), dtype)
    v = jnp.asarray(rng.normal(size=(2, lk, 3)), dtype)
    return [q, k, v, jnp.ones((2, lq), bool), jnp.ones((2, lk), bool), jnp.zeros((2, lq), dtype),
            jnp.zeros((2, lk), dtype), Support.single(lq, lk, band), SinkhornConfig(backend="pallas")]


def _replace(args, i, value):
    args = list(args)
    args[i] = value
    return args


BAD = [
    (lambda a: _replace(a, 8, SinkhornConfig(tail=3, backward="staircase")), r"tail=3: the Pallas operator"),
    (lambda a: _replace(a, 8, SinkhornConfig(backward="direct")), r"backward='direct': the Pallas operator"),
    (lambda a: _replace(a, 8, SinkhornConfig(backward="autodiff")), r"backward='autodiff'"),
    (lambda a: _replace(a, 8, {"eps": 1.0}), "cfg must be a SinkhornConfig, got dict"),
    (lambda a: _replace(a, 7, (6, 5)), "support must be a Support, got tuple"),
    (lambda a: _replace(a, 7, Support.single(6, 7, None)), r"support is 6 x 7 but q, k have lengths 6, 5"),
    (lambda a: _replace(a, 0, a[0][0, 0]), r"q must have shape \[..., L, d\], got \(4,\)"),
    (lambda a: _replace(a, 1, a[1][:1]), r"batch dims differ"),
    (lambda a: _replace(a, 1, a[1][..., :2]), "q and k feature dims differ: 4 vs 2"),
    (lambda a: _replace(a, 2, a[2][:, :4]), "k and v lengths differ: 5 vs 4"),
    (lambda a: _replace(a, 2, a[2].astype(jnp.bfloat16)), "q, k, v must share a dtype"),
    (lambda a: [x.astype(jnp.float64) if i < 3 else x for i, x in enumerate(a)],
     r"dtype float64 is not supported by the Pallas kernels"),
    (lambda a: _replace(a, 3, jnp.ones((2, 6), jnp.int32)), r"q_valid must be a bool array of shape \(2, 6\)"),
    (lambda a: _replace(a, 4, jnp.ones((2, 4), bool)), r"k_valid must be a bool array of shape \(2, 5\)"),
    (lambda a: _replace(a, 5, jnp.zeros((6,))), r"log_a must have shape \(2, 6\), got \(6,\)"),
    (lambda a: _replace(a, 6, jnp.zeros((2, 6))), r"log_b must have shape \(2, 5\), got \(2, 6\)"),
]


@pytest.mark.parametrize("make, message", BAD, ids=[m for _, m in BAD])
def test_bad_inputs_raise_before_tracing(make, message):
    with pytest.raises(ValueError, match=message):
        pallas.tail_operator(*make(_args()))


def test_bad_options():
    args = _args()
    with pytest.raises(ValueError, match="interpret='yes' must be True, False or None"):
        pallas.tail_operator(*args, interpret="yes")
    with pytest.raises(ValueError, match="block_sizes must be a BlockSizes, got int"):
        pallas.tail_operator(*args, block_sizes=16)
    two_bands = Support(12, 12, (Piece(0, 6, 0, 6, 2), Piece(6, 6, 6, 6, 2)))
    with pytest.raises(ValueError, match="neither the kernel piece nor one row/column wide"):
        pallas.tail_operator(*_replace(_args(12, 12), 7, two_bands))


@pytest.mark.parametrize("value", [12, 4, 0, True, 16.0, None])
def test_block_sizes_validation(value):
    with pytest.raises(ValueError, match=rf"block_q={value!r} must be a power of two >= 8"):
        BlockSizes(block_q=value)


@pytest.mark.parametrize("value", [3, 0, 64, True, 4.0, None])
def test_block_sizes_launch_validation(value):
    with pytest.raises(ValueError, match=rf"num_warps={value!r} must be a power of two from 1 to 32"):
        BlockSizes(num_warps=value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        with pytest.raises(ValueError, match=rf"num_stages={value!r} must be an integer >= 1"):
            BlockSizes(num_stages=value)


def test_block_sizes_effective_and_defaults():
    assert BlockSizes(block_q=128, block_k=64).effective(1, 300) == (16, 64)
    assert BlockSizes(block_q=8, block_k=8).effective(100, 5) == (8, 8)
    assert BlockSizes.get_default("interpret") == BlockSizes.get_default("tpu") == BlockSizes(block_q=128, block_k=128)
    assert BlockSizes.get_default("gpu") == BlockSizes(block_q=64, block_k=64)
    with pytest.raises(ValueError, match="target='cuda' is not one of"):
        BlockSizes.get_default("cuda")


@pytest.mark.parametrize("platform, dustbin, cache", [("cuda", False, False), ("tpu", False, False),
                                                      ("tpu", True, False), ("cuda", False, True),
                                                      ("cuda", True, True)])
def test_native_lowering_without_hardware(platform, dustbin, cache):
    """Every kernel of the fwd + bwd program lowers to Triton IR (cuda) / Mosaic (tpu) from a CPU
    process: 2 half-steps + output + 5 backward sweeps = 8 kernel calls, and with cached scores
    3 more, the cache of the duals, of the output and of the backward. (Lowering only; the
    device compilers are not run.)"""
    res = pallas.lower_native(platform, dtype=jnp.bfloat16, lq=200, lk=157, d=64, dv=32, band=40, dustbin=dustbin,
                              cache_scores=cache)
    assert res["kernels"] == (11 if cache else 8), res
    assert res["launches"] == ([(4, 2)] if platform == "cuda" else []), res  # BlockSizes' defaults on a GPU


def test_gpu_launch_options_reach_the_triton_calls():
    """BlockSizes' num_warps / num_stages are what every Triton custom call is launched with."""
    blocks = BlockSizes(block_q=32, block_k=64, num_warps=8, num_stages=3)
    res = pallas.lower_native("cuda", dtype=jnp.float32, lq=100, lk=90, d=16, dv=8, band=20, block_sizes=blocks)
    assert res["kernels"] == 8 and res["launches"] == [(8, 3)], res


def test_native_target():
    assert pallas.native_target("cuda") == "gpu" and pallas.native_target("tpu") == "tpu"
    with pytest.raises(ValueError, match="native Pallas kernels need a GPU or TPU, and the platform is 'cpu'"):
        pallas.native_target("cpu")
    if jax.default_backend() == "cpu":
        with pytest.raises(ValueError, match="pass interpret=True"):
            pallas.tail_operator(*_args(), interpret=False)


def test_dispatch_from_reference_operator_checks_config():
    q = jnp.ones((5, 4), jnp.float32)
    with pytest.raises(ValueError, match="tail=1: the Pallas operator"):
        sinkhorn_attention(q, q, q, backend="pallas", tail=1, backward="staircase")
    with pytest.raises(ValueError, match="dtype float64 is not supported by the Pallas kernels"):
        sinkhorn_attention(q.astype(jnp.float64), q, q, backend="pallas")


def test_validation_bad_backend_and_mode():
    from sinkalign.kernels.validation import check_backend, long_forward

    with pytest.raises(InputError, match="backend='cuda' is not one of"):  # also a ValueError
        check_backend("cuda", True)
    with pytest.raises(ValueError, match="interpret=1 must be True or False") as info:
        check_backend("pallas", 1)
    assert not isinstance(info.value, SinkalignError)  # a programming error, not a user's
    if jax.default_backend() == "cpu":
        with pytest.raises(InputError, match="native Pallas kernels need a GPU or TPU backend"):
            check_backend("pallas", False)
    with pytest.raises(ValueError, match="dense_dtype='float16' must be"):
        long_forward((8,), dense_dtype="float16")
    with pytest.raises(ValueError, match="length 0 must be a positive integer"):
        long_forward((0,))


def test_validate_kernels_cli_usage_errors():
    from sinkalign.cli.main import cli

    runner = CliRunner()
    res = runner.invoke(cli, ["validate", "kernels", "--backend", "triton", "--long", "--interpret"])
    assert res.exit_code == 2 and "--long is implemented for --backend pallas" in res.output
    res = runner.invoke(cli, ["validate", "kernels", "--backend", "pallas", "--interpret", "--block", "12"])
    assert res.exit_code == 2 and "block=12 must be a power of two" in res.output
    if jax.default_backend() == "cpu":  # a mode this machine cannot run: one 'Error:' line, exit status 1
        res = runner.invoke(cli, ["validate", "kernels", "--backend", "pallas"])
        assert_one_line_error(res, "native Pallas kernels need a GPU or TPU backend", "use interpret=True (--interpret)")


def test_validate_kernels_cli_bug_keeps_its_traceback(monkeypatch):
    import sinkalign.kernels.validation as kval
    from sinkalign.cli.main import cli

    def bug(*args, **kwargs):
        raise ValueError("an internal invariant broke")

    monkeypatch.setattr(kval, "check_backend", bug)
    res = CliRunner().invoke(cli, ["validate", "kernels", "--backend", "pallas", "--interpret", "--quick"])
    assert isinstance(res.exception, ValueError) and "Error:" not in res.output


def test_second_order_gradients_are_refused_by_name():
    """grad of grad through the Pallas kernels failed inside JAX with a bare AssertionError
    (a pallas_call has no derivative rule); it is refused, naming the reference backend."""
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(1, 1, 13, 4)), jnp.float32) for _ in range(3))
    cfg = SinkhornConfig(n_iters=3, band=4, backend="pallas", block=8)

    def loss(a):
        return sinkhorn_attention(a, k, v, config=cfg).sum()

    first = jax.grad(loss)(q)  # first order as before
    ref = jax.grad(lambda a: sinkhorn_attention(a, k, v, config=SinkhornConfig(n_iters=3, band=4)).sum())(q)
    np.testing.assert_allclose(first, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(NotImplementedError, match="second-order gradients .* need backend='reference'"):
        jax.grad(lambda a: jnp.sum(jax.grad(loss)(a) ** 2))(q)


def test_validate_kernels_compares_the_log_marginals_gradients():
    """`validate kernels` compared O, dq, dk, dv and the dustbin tokens, not the gradients of
    the log marginals, so the GPU check could not see them; its cases with marginals now do."""
    from sinkalign.kernels import validation as kval

    jax.config.update("jax_enable_x64", True)
    (case,) = [c for c in kval.KERNEL_CASES if c.marginals and c.dustbin is None][:1]
    row = kval.kernels("pallas", True, cases=[case])["rows"][0]
    assert row["d_marginals"] is not None and 0 < row["d_marginals"] <= 1e-5
    assert row["max_abs_deviation"] >= row["d_marginals"]
    plain = [c for c in kval.KERNEL_CASES if not c.marginals and c.dustbin is None][:1]
    assert kval.kernels("pallas", True, cases=plain)["rows"][0]["d_marginals"] is None


@pytest.mark.parametrize("target, precision, dtype, cached", [
    ("gpu", "ieee", jnp.float32, True), ("interpret", "ieee", jnp.float32, True),
    ("gpu", "tf32x3", jnp.float32, False), ("gpu", "tf32", jnp.float32, False), ("gpu", "ieee", jnp.bfloat16, False),
    ("gpu", "ieee", jnp.float16, False), ("tpu", "ieee", jnp.float32, False)])
def test_the_default_score_cache_follows_the_timed_rule(target, precision, dtype, cached):
    """The default's choice per target, dot precision and input type (no device needed): cached
    only with exact float32 dots on a GPU or in the interpreter (the TPU target is untimed)."""
    from sinkalign.kernels.pallas import op

    support, cfg = Support.single(300, 257, 40), SinkhornConfig(backend="pallas")
    st = op._static(support, cfg, None, target == "interpret", target=target, precision=precision, dtype=dtype, bh=4)
    assert st.cache_scores is cached
    assert op._static(support, cfg, None, True, target=target, precision=precision, dtype=dtype,
                      cache_scores=False).cache_scores is False


def test_the_default_score_cache_stops_at_its_cap(monkeypatch):
    """The cap counts the cache's floats over every batch-head: 4 bytes each, at most the cap."""
    from sinkalign.kernels import cache
    from sinkalign.kernels.pallas import op

    support, cfg = Support.single(1000, 1000, 100), SinkhornConfig(backend="pallas")
    slots = max(len({j // 32 for i in range(x0, min(x0 + 32, 1000)) for j in range(max(0, i - 100), min(1000, i + 101))})
                for x0 in range(0, 1000, 32))  # the key tiles a row block's band meets, at most
    need = 4 * 3 * 32 * slots * 32 * 32  # 3 batch-heads x 32 row blocks x slots tiles of 32 x 32
    for cap, cached in ((need, True), (need - 1, False)):
        monkeypatch.setattr(cache, "AUTO_CACHE_MAX_BYTES", cap)
        assert op._static(support, cfg, BlockSizes(block_q=32, block_k=32), False, target="gpu",
                          bh=3).cache_scores is cached
