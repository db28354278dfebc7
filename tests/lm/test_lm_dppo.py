"""DPPO in the small transformer's GRPO step (grpo_theory.lm.training.dppo) and the lm-dppo driver.

What theory guarantees, checked exactly on a tiny model: packed logits equal unpacked ones, the
pruned/packed gradient's expectation over every keep mask equals the full-batch estimate, the
controls (no 1/q, advantages recomputed on the kept subset) are biased, and the clipped
multi-epoch update equals the one written with lm.training.loop.clipped_objective. One compiled
shape per bucket. The driver runs once on a tiny setting (tiny warm-up, a few steps).
"""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
import pytest
from jax.flatten_util import ravel_pytree

from grpo_theory.companions.dppo import KeepScheme
from grpo_theory.experiments.runner import run_experiment
from grpo_theory.lm.training import dppo as D
from grpo_theory.lm.training.loop import clipped_objective
from grpo_theory.lm.model import (ModelConfig, _positions, apply, init_params, make_apply,
                                  make_sampler)
from grpo_theory.lm.policy import LMPolicy, seq_log_probs, token_log_probs
from grpo_theory.lm.task import EOS, PAD, response_mask
from grpo_theory.lm.warmup import WarmupConfig
from grpo_theory.studies import lm_dppo

CFG = ModelConfig(d_model=8, n_layers=1, n_heads=2)
LP, R = 6, 4
#: every packed layout below is B = G = 2 in one bucket of 2 rows of CAP tokens (one compiled
#: shape shared by the tests; compilation is most of their time)
B2, G2, CAP = 2, 2, 2 * (LP + R)


@pytest.fixture(scope="module")
def pol():
    return LMPolicy(init_params(0, CFG), make_apply(CFG), make_sampler(CFG))


def _batch(B, G, seed=0):
    """A fixed batch: left-padded prompts, responses with EOS at varied places, rewards."""
    rng = np.random.default_rng(seed)
    n = B * G
    x = rng.integers(2, CFG.vocab_size, (n, LP)).astype(np.int32)
    for i in range(n):
        x[i, : rng.integers(0, LP - 1)] = PAD
    y = rng.integers(2, CFG.vocab_size, (n, R)).astype(np.int32)
    for i in range(n):
        e = rng.integers(0, R + 1)  # e == R: no EOS
        if e < R:
            y[i, e], y[i, e + 1:] = EOS, PAD
    z = (np.arange(n).reshape(B, G) % G == np.arange(B)[:, None] % G).astype(np.float32)
    from grpo_theory.core.estimators import PromptContext, get_estimator
    adv = np.asarray(get_estimator("grpo").advantage(jnp.asarray(z), PromptContext()),
                     np.float32)
    return dict(x=x, y=y, z=z, adv=adv, mask=np.asarray(response_mask(y)),
                qp=np.full(B, 0.6, np.float32), qc=np.full((B, G), 0.7, np.float32),
                m=np.ones(B, bool), c=np.ones((B, G), bool))


@jax.jit
def _ref(params, x, y, w):
    return ravel_pytree(jax.grad(lambda p: -jnp.sum(w * seq_log_probs(
        make_apply(CFG), p, x, y)))(params))[0]


def _ref_grad(pol, b, w):
    """The unpacked estimate sum_n w_n grad log pi(y_n|x_n), flattened."""
    return np.asarray(_ref(pol.params, b["x"], b["y"], jnp.asarray(w, jnp.float32)))


def test_model_segment_options_default_and_packed(pol):
    tok = _batch(B2, G2)["x"]
    pos = np.broadcast_to(np.asarray(_positions(LP, LP, CFG.max_prompt)), tok.shape)
    both = jax.jit(lambda p, t, s, q: (apply(p, t, LP, CFG),
                                       apply(p, t, LP, CFG, segment_ids=s, positions=q)))
    base, same = both(pol.params, tok, np.ones_like(tok), pos)
    np.testing.assert_array_equal(np.asarray(base), np.asarray(same))
    with pytest.raises(ValueError, match="together"):
        apply(pol.params, tok, LP, CFG, segment_ids=np.ones_like(tok))
    with pytest.raises(ValueError, match="positions"):
        apply(pol.params, tok, LP, CFG, segment_ids=np.ones_like(tok), positions=pos + 100)


@pytest.mark.parametrize("capacity", [None, CAP])
def test_layout_gradient_equals_unpacked(pol, capacity):
    b = _batch(B2, G2)
    w, keep = D.response_weights(b)
    keep[2] = False
    w[~keep] = 0
    lay = D.layout(b["x"], b["y"], b["mask"], w, keep, capacity, CFG.max_prompt, n_buckets=1)
    np.testing.assert_allclose(D.gradient(pol, lay), _ref_grad(pol, b, w), rtol=1e-5, atol=1e-6)
    assert lay["n_kept"] == 3
    real = (b["x"][keep] != PAD).sum() + b["mask"][keep].sum()
    assert lay["n_tokens"] == real
    if capacity is not None:  # several sequences per row
        assert lay["n_rows"] < lay["n_kept"]


def test_bucket():
    assert [D.bucket(n, 64, 8) for n in (0, 1, 8, 9, 63, 64)] == [8, 8, 8, 16, 64, 64]
    assert D.bucket(5, 5, 8) == 5
    with pytest.raises(ValueError, match="n"):
        D.bucket(65, 64)


def test_unbiased_over_all_masks_and_controls_biased(pol):
    """Enumerate all 2^(B + BG) masks of a B = 2, G = 2 batch: E[DPPO] = full estimate
    exactly; the no-1/q and the recompute controls are off."""
    B, G = B2, G2
    b = _batch(B, G, seed=1)
    g_full = _ref_grad(pol, b, b["adv"].reshape(-1) / (B * G))  # (1/BG) sum A s
    qp, qc = b["qp"][0], b["qc"][0, 0]
    means = {m: np.zeros_like(g_full) for m in D.METHODS}
    total = 0.0
    for bits in itertools.product((0, 1), repeat=B + B * G):
        m = np.array(bits[:B], bool)
        c = np.array(bits[B:], bool).reshape(B, G)
        p = np.prod(np.where(m, qp, 1 - qp)) * np.prod(np.where(c, qc, 1 - qc))
        total += p
        for meth in D.METHODS:
            w, keep = D.response_weights(b, meth, m=m, c=c)
            lay = D.layout(b["x"], b["y"], b["mask"], w, keep, CAP, CFG.max_prompt,
                           n_buckets=1)
            means[meth] += p * D.gradient(pol, lay)
    assert total == pytest.approx(1.0)
    scale = np.abs(g_full).max()
    np.testing.assert_allclose(means["dppo"], g_full, atol=1e-5 * scale)
    np.testing.assert_allclose(means["no_rescale"], qp * qc * g_full, atol=1e-5 * scale)
    # leave-one-out advantages of the kept subset: unbiased given >= 2 kept, 0 otherwise, so
    # E = (1 - (1 - qc)^(G-1)) x the full estimate
    np.testing.assert_allclose(means["recompute"], (1 - (1 - qc) ** (G - 1)) * g_full,
                               atol=1e-5 * scale)
    for meth in ("no_rescale", "recompute"):
        assert np.abs(means[meth] - g_full).max() > 0.05 * scale


def test_update_compiles_once_per_bucket(pol):
    b = _batch(B2, G2)
    opt = optax.adam(1e-3)
    state = opt.init(pol.params)
    w, keep = D.response_weights(b)
    sizes = []
    for drop in ([0], [1, 2], [3]):  # 2-3 kept, one bucket
        k = keep.copy()
        k[drop] = False
        lay = D.layout(b["x"], b["y"], b["mask"], w, k, CAP, CFG.max_prompt, n_buckets=1)
        assert lay["tokens"].shape == (2, CAP)
        D.update(pol, opt, pol.params, state, lay)
        sizes.append(D._update._cache_size())
    assert sizes[1] == sizes[2] == sizes[0]


def test_clipped_update_matches_grpo_objective(pol):
    """Two clipped epochs on the packed kept-all batch = two Adam steps on lm.training.grpo's
    clipped_objective (which averages over the N responses; the weights carry the 1/N)."""
    b = _batch(B2, G2)
    b["qp"][:], b["qc"][:] = 1.0, 1.0
    opt = optax.adam(1e-2)
    w, keep = D.response_weights(b)
    lay = D.layout(b["x"], b["y"], b["mask"], w, keep, CAP, CFG.max_prompt, n_buckets=1)
    p1, _ = D.update(pol, opt, pol.params, opt.init(pol.params), lay, epochs=2, clip_eps=0.2)

    @jax.jit
    def reference(params, x, y, adv, mask):
        old = token_log_probs(make_apply(CFG), params, x, y)
        p, s = params, opt.init(params)
        for _ in range(2):
            g = jax.grad(lambda q: -clipped_objective(token_log_probs(make_apply(CFG), q, x, y),
                                                      old, adv, mask, 0.2))(p)
            u, s = opt.update(g, s, p)
            p = optax.apply_updates(p, u)
        return ravel_pytree(p)[0]

    p2 = reference(pol.params, b["x"], b["y"], jnp.asarray(b["adv"].reshape(-1)), b["mask"])
    # Adam steps of size ~lr = 1e-2: agreement to 0.1% of a step (float32 sums in another order)
    np.testing.assert_allclose(ravel_pytree(p1)[0], p2, atol=1e-5)
    assert np.abs(ravel_pytree(p1)[0] - ravel_pytree(pol.params)[0]).max() > 5e-3


def test_sample_batch_and_errors(pol):
    px = np.full((5, LP), 3, np.int32)
    pc = np.full((5, R), EOS, np.int32)
    b = D.sample_batch(pol, jax.random.PRNGKey(0), px, pc, KeepScheme(q_prompt=0.5), 4, 3)
    assert b["y"].shape == (12, R) and b["adv"].shape == (4, 3) and b["m"].shape == (4,)
    np.testing.assert_allclose(b["qp"], 0.5)
    with pytest.raises(ValueError, match="scheme"):
        D.sample_batch(pol, 0, px, pc, 0.5, 4, 3)
    with pytest.raises(ValueError, match="method"):
        D.response_weights(_batch(2, 2), "nope")
    with pytest.raises(ValueError, match="max_prompt"):
        bb = _batch(2, 2)
        D.layout(bb["x"], bb["y"], bb["mask"], np.ones(4), np.ones(4, bool), 20)


#: tiny warm-up and run: every code path of the driver (gradient cell, Algorithm 1 at two
#: rates, the clipped variant), sized for seconds
TINY = dataclasses.replace(
    lm_dppo.SETTINGS["quick"],
    warmup=dataclasses.replace(lm_dppo.SETTINGS["quick"].warmup, d_model=16, base_steps=20,
                               instruct_steps=20, icl_steps=20, chunk=10),
    batch=4, group=4, steps=2, every=1, n_eval=8, n_pool=64, n_masks=8, n_buckets=2)


def test_summaries_equal_time_interpolation():
    """Speed-up = ratio of seconds per step; accuracy at equal time = linear interpolation
    in the pruned run's cumulative time at the full run's time of ``steps`` steps, on the CPU
    and on the wall clock."""
    rows = []
    for rq, sec, acc in ((0.0, 0.9, (0.2, 0.3, 0.4)), (0.5, 0.5, (0.2, 0.25, 0.3, 0.35, 0.5))):
        for i, a in enumerate(acc):  # checkpoints every step; wall = 2 x CPU
            rows.append(dict(variant="alg1", r_q=rq, r_o=0.0, run_seed=0, step=i, accuracy=a,
                             sample_seconds=i * sec, update_seconds=i * sec,
                             sample_cpu_seconds=i * sec / 2, update_cpu_seconds=i * sec / 2,
                             kept_share=1 - rq, token_share=1 - rq, row_share=1 - rq,
                             load1=1.0))
    runs = lm_dppo.run_summary(pd.DataFrame(rows), steps=2)
    pr = runs[runs.r_q == 0.5].iloc[0]
    assert pr.cpu_per_step == pytest.approx(0.5) and pr.acc_steps == pytest.approx(0.3)
    # the full run's 1.8 s = the pruned run's step 3.6: 0.35 + 0.6 (0.5 - 0.35), both clocks
    assert pr.acc_time_cpu == pytest.approx(0.44) and pr.acc_time_wall == pytest.approx(0.44)
    rs = lm_dppo.rate_summary(runs).set_index("r_q")
    assert rs.loc[0.5, "speedup_cpu"] == pytest.approx(1.8)
    assert rs.loc[0.5, "speedup_wall"] == pytest.approx(1.8)
    assert rs.loc[0.0, "acc_time_cpu"] == pytest.approx(0.4)  # its own step 2
    short = pd.DataFrame([r for r in rows if not (r["r_q"] == 0.5 and r["step"] > 3)])
    assert np.isnan(lm_dppo.run_summary(short, 2).set_index("r_q").loc[0.5, "acc_time_cpu"])


@pytest.mark.slow
def test_driver_tiny(tmp_path):
    res = run_experiment(lm_dppo.EXPERIMENT, tmp_path, TINY, seed=0, figures=False,
                         progress=False, verbose=False)
    train, grad = res.tables["train"], res.tables["grad"]
    assert set(grad.method) == set(D.METHODS)
    assert (grad.r_q == 0.5).all() and (grad.q == 0.25).all()
    full = train[(train.r_q == 0) & (train.step > 0)]
    assert np.allclose(full.kept_share, 1.0) and np.allclose(full.token_share, 1.0)
    assert (train.accuracy.between(0, 1)).all()
    pruned = train[(train.r_q == 0.5) & (train.variant == "alg1")]
    assert pruned.step.max() == 4  # min(max_factor = 2, 1/q = 4) x 2 steps
    assert res.verdict in ("PASS", "FAIL")  # every check has its numbers
    # every statistical check states its rival's distance (a finite number of se)
    stat = [c for c in res.section.checks if c.kind == "statistical"]
    assert len(stat) == 3 and all(np.isfinite(c.rival_se) for c in stat)
    assert "speed-up" in res.section.markdown
    # the power statement: the no-1/q control's bias (1 - q) along g_full, divided by its own z,
    # is the control's se; DPPO's detectable bias is 4 of its se relative to ||g_full||
    nr = grad[grad.method == "no_rescale"].iloc[0]
    dp = grad[grad.method == "dppo"].iloc[0]
    assert dp.detectable_bias > 0 and np.isfinite(dp.detectable_bias)
    np.testing.assert_allclose(nr.detectable_bias, nr.q * dp.detectable_bias, rtol=1e-6)
    assert "Power of (i)" in res.section.markdown and "measurements, not checks" in \
        res.section.markdown
