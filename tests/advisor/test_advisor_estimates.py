"""Sample-based c1, c2, c3 and G* (grpo_theory.advisor): exact unbiasedness by enumeration,
interval coverage, agreement with the exact routes (bandit and a tiny transformer), bad input."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import grpo_theory as gt
from jax.flatten_util import ravel_pytree
from grpo_theory.advisor import estimate as E
from grpo_theory.advisor import intervals as I
from grpo_theory.advisor import prompt_pieces
from grpo_theory.advisor.coverage import enumerated_expectation, group_outcomes, interval_coverage
from grpo_theory.core.ustat import prompt_moments
from grpo_theory.lm.policy import seq_log_probs


# --- identities ---------------------------------------------------------------------------------

def _brute_pieces(z, s):
    """Averages over distinct indices, written out (the definitions of the module docstring)."""
    n = len(z)
    q = np.sum(s * s, axis=1)
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    trip = [t for t in itertools.permutations(range(n), 3)]
    t = np.mean([z[i] * z[j] * (s[i] @ s[j]) for i, j in pairs])
    r = np.mean([q[i] * (z[j] - z[k]) ** 2 / 2 for i, j, k in trip])
    w = np.mean([q[i] * (z[i] - z[j]) * (z[i] - z[k]) for i, j, k in trip])
    return t, r, w


@given(n=st.integers(3, 6), d=st.integers(1, 3), seed=st.integers(0, 2**31 - 1),
       binary=st.booleans())
def test_linear_time_u_statistics_equal_the_sums_over_distinct_indices(n, d, seed, binary):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=(n, d))
    z = rng.integers(0, 2, n).astype(float) if binary else rng.normal(size=n)
    ghat = (z[:, None] * s).mean(0)
    p = prompt_pieces(jnp.asarray(z[None]), jnp.asarray(np.sum(s * s, 1)[None]),
                        jnp.asarray([ghat @ ghat]))
    t, r, w = _brute_pieces(z, s)
    np.testing.assert_allclose([p["grad_sq"][0], p["score_sq_sigma2"][0], p["score_sq_dev2"][0]],
                               [t, r, w], rtol=1e-10, atol=1e-12)


@given(m=st.integers(3, 6), n=st.integers(3, 5), seed=st.integers(0, 2**31 - 1))
def test_the_three_input_forms_give_one_estimate(m, n, seed):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=(m, n, 4))
    z = rng.integers(0, 2, (m, n)).astype(float)
    a = gt.estimate_from_rollouts(z, s)
    ghat = np.einsum("ai,aid->ad", z, s) / n
    q = np.sum(s * s, axis=2)
    b = gt.estimate_from_rollouts(z, sq_norms=q, mean_gram=ghat @ ghat.T)
    c = gt.estimate_from_rollouts(z, sq_norms=q, mean_sq=np.sum(ghat**2, 1),
                                  mean_dot=ghat @ ghat.sum(0))
    for other in (b, c):
        np.testing.assert_allclose(other.theta, a.theta, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(other.cov, a.cov, rtol=1e-9, atol=1e-14)


def test_jackknife_of_a_mean_is_the_standard_error():
    x = np.random.default_rng(0).normal(size=(9, 1))
    loo = (x.sum() - x) / 8
    np.testing.assert_allclose(I.jackknife_cov(jnp.asarray(loo))[0, 0], x.var(ddof=1) / 9)


# --- exact unbiasedness by enumerating every sample ---------------------------------------------

N_RESP = 3  # responses per prompt (the minimum)


def _tiny_bandit():
    feats = np.array([[[1.0, 0.3], [-0.4, 0.8]], [[0.2, -1.0], [0.9, 0.5]]])
    return gt.LinearSoftmaxBandit(feats, np.array([0.7, -0.4]),
                                  np.array([[0.3, 0.8], [0.6, 0.1]]), prompt_probs=[0.35, 0.65])


def test_every_per_prompt_piece_is_unbiased_exactly():
    dp = _tiny_bandit().problem()
    x, pr, z, q, g = group_outcomes(dp, N_RESP)
    assert abs(pr.sum() - 1.0) < 1e-12
    p = prompt_pieces(jnp.asarray(z), jnp.asarray(q), jnp.asarray(np.sum(g * g, 1)))
    mo = prompt_moments(dp)
    f = np.asarray(dp.prompt_probs)
    exact = dict(value=mo.value, sigma2=mo.sigma2, score_sq=mo.score_sq, grad_sq=mo.grad_sq,
                 score_sq_sigma2=mo.score_sq * mo.sigma2, tr_oracle=mo.tr_sigma_oracle,
                 score_sq_z2=mo.score_sq_z, c_v=mo.score_sq_z - mo.grad_sq,
                 score_sq_dev2=mo.tr_sigma_oracle + mo.grad_sq,
                 c3=mo.score_sq * mo.sigma2 + mo.grad_sq)
    assert set(exact) == set(p)
    for name, val in exact.items():
        for xx in range(dp.n_prompts):  # E[piece | x] = the exact value at x
            sel = x == xx
            cond = np.sum(pr[sel] * np.asarray(p[name])[sel]) / f[xx]
            assert abs(cond - float(val[xx])) < 1e-12, (name, xx, cond, float(val[xx]))


def test_c1_c2_c3_and_the_mse_predictions_are_unbiased_exactly():
    """E over every draw of m = 3 prompts with n = 3 responses each = the exact values."""
    bandit = _tiny_bandit()
    mean, exact = enumerated_expectation(bandit, n_prompts=3, n_samples=N_RESP)
    err = np.abs(mean - exact)
    assert np.all(err < 1e-12), (mean, exact, err)
    # the MSE predictions are linear in theta: E[mse-hat(B, G)] = exact_mse(B, G)
    est = E.ScalingEstimate(mean, np.zeros((5, 5)), {}, np.zeros((3, 3)))
    for name in ("vanilla", "oracle", "grpo", "grpo_mean"):
        for B, G in ((1, 2), (3, 5)):
            assert abs(est.mse(B, G, name) - gt.exact_mse(bandit, name, G, B)) < 1e-12, (name, B, G)


# --- coverage ------------------------------------------------------------------------------------

def _cover_bandit():
    return gt.SoftmaxBandit.random(3, 5, 4)


def test_intervals_cover_at_least_90_percent_over_200_repetitions():
    r = interval_coverage(_cover_bandit(), n_prompts=40, n_samples=8, reps=200, seed=0)
    assert np.all(r.c >= 0.90), r.c
    assert r.g_star >= 0.90, r.g_star
    # and the estimates are unbiased: the mean of 200 lies within 4 standard errors
    assert np.all(np.abs(r.mean - r.exact) < 4 * r.se_mean), (r.mean, r.exact, r.se_mean)


# --- agreement with the exact routes -------------------------------------------------------------

def test_estimates_agree_with_the_exact_constants_of_a_bandit():
    rng = np.random.default_rng(1)
    bandit = gt.LinearSoftmaxBandit(rng.normal(size=(6, 4, 3)), rng.normal(size=3),
                                    rng.uniform(size=(6, 4)))
    est = gt.estimate_scaling_constants(bandit, n_prompts=200, n_samples=8, seed=1)
    ex = gt.scaling_constants(bandit)
    for name in ("c1", "c2", "c3"):
        lo, hi = getattr(est, f"{name}_ci")
        assert lo <= getattr(ex, name) <= hi, (name, lo, getattr(ex, name), hi)
    lo, hi = est.g_star_ci
    assert lo <= gt.optimal_group_size(bandit).continuous <= hi
    table = est.summary()
    assert list(table.index[:4]) == ["c1", "c2", "c3", "g_star"]
    assert np.isclose(table.loc["c1", "estimate"], est.c1)
    ci = est.conf_int()
    assert ci.loc["c2", "lower"] == est.c2_ci[0]
    assert est.prompt_values.shape == (200,)
    assert est.constants.c3 == est.c3
    lo, hi = est.mse_ci(4, 8, "grpo")
    assert lo <= gt.exact_mse(bandit, "grpo", 8, 4) <= hi


def test_recommended_group_size_and_zero_variance_share():
    est = gt.estimate_scaling_constants(_cover_bandit(), n_prompts=30, n_samples=6, seed=2)
    N = 64
    Gs = np.arange(2, N + 1)
    best = (int(Gs[np.argmin(est.c1 * Gs + est.c2 + est.c3 / (Gs - 1))]) if est.c1_resolved
            else None)
    assert est.recommended_group_size(N) == best
    z = est.rewards
    k = z.sum(1)
    share = np.mean([(math.comb(int(kk), 3) + math.comb(6 - int(kk), 3)) / math.comb(6, 3)
                     for kk in k])
    assert est.zero_variance_share(3) == pytest.approx(share)
    assert est.zero_variance_share(1) == 1.0
    with pytest.raises(ValueError, match="group_size"):
        est.zero_variance_share(7)


def _estimate(c1, se, m=20):
    """A ScalingEstimate with the given c1 and c1 standard error (c2 = c3 = 1)."""
    from grpo_theory.advisor.result import ScalingEstimate

    cov = np.diag([se**2, 0.01, 0.01, 0.01, 0.01])
    return ScalingEstimate(np.array([c1, 1.0, 1.0, 1.0, 1.0]), cov, {}, np.zeros((m, 4)))


@pytest.mark.parametrize("c1", [-0.5, 0.0, 0.05])
def test_no_recommended_group_size_while_c1_is_not_resolved(c1):
    """c1's interval reaches 0: no recommendation, with the reason (rivals: the whole budget
    when the estimate is <= 0, a finite G from a positive estimate whose interval covers 0)."""
    est = _estimate(c1, se=0.1)
    assert not est.c1_resolved
    assert est.recommended_group_size(256) is None
    assert "c1 is not resolved above 0" in est.no_recommendation_reason
    resolved = _estimate(0.04, se=0.001)
    assert resolved.c1_resolved and resolved.no_recommendation_reason is None
    assert resolved.recommended_group_size(256) == 6  # 1 + sqrt(1/0.04) = 6: 6 beats 7


# --- the language-model route ---------------------------------------------------------------------

def _tiny_lm():
    from grpo_theory.lm import model, policy

    cfg = model.ModelConfig(d_model=16, n_layers=1, n_heads=2, vocab_size=6, max_prompt=4,
                            max_response=2)
    params = model.init_params(jax.random.PRNGKey(4), cfg)
    params = dict(params, out=params["out"] * 4.0)  # prompt-dependent next-token laws
    pol = policy.LMPolicy(params, model.make_apply(cfg), model.make_sampler(cfg))
    pool = np.asarray(jax.random.randint(jax.random.PRNGKey(5), (8, 4), 2, 6), np.int32)
    target = np.arange(8) % 4 + 2  # reward 1 iff the first response token is the prompt's target

    def reward(rows, y):
        return (np.asarray(y)[:, 0] == target[np.asarray(rows)]).astype(float)

    return pol, pool, reward


def _lm_exact(pol, pool, reward):
    """Exact c1, c2, c3 over the pool (uniform prompts) by enumerating every 2-token response."""
    from grpo_theory.lm.task import EOS, PAD

    resp = [(EOS, PAD)] + [(a, b) for a in range(2, 6) for b in range(1, 6)]
    resp = np.array(resp, np.int32)
    B, K = len(pool), len(resp)
    xs = np.repeat(pool, K, axis=0)
    ys = np.tile(resp, (B, 1))
    pi = np.exp(np.asarray(pol.log_probs(xs, ys), np.float64)).reshape(B, K)
    assert np.allclose(pi.sum(1), 1.0, atol=1e-5)
    mu = reward(np.repeat(np.arange(B), K), ys).reshape(B, K)
    w = np.zeros((B, B * K))
    for a in range(B):
        w[a, a * K:(a + 1) * K] = pi[a] * mu[a]
    gx, sq = pol.score_contractions(xs, ys, w)
    q = sq.reshape(B, K)
    v = (pi * mu).sum(1)
    s2, s2z = (pi * q).sum(1), (pi * q * mu).sum(1)
    gx2 = np.sum(gx**2, 1)
    c1 = gx2.mean() - np.sum(gx.mean(0) ** 2)
    c2 = np.mean(s2z * (1 - 2 * v) + v**2 * s2 - gx2)
    c3 = np.mean(s2 * v * (1 - v) + gx2)
    return c1, c2, c3


def test_language_model_estimates_agree_with_exact_enumeration():
    pol, pool, reward = _tiny_lm()
    est = gt.estimate_scaling_constants(pol, n_prompts=96, n_samples=16, seed=0, prompts=pool,
                                        reward=reward, response_len=2)
    exact = _lm_exact(pol, pool, reward)
    for name, val in zip(("c1", "c2", "c3"), exact):
        lo, hi = getattr(est, f"{name}_ci")
        assert lo <= val <= hi, (name, lo, val, hi)
    lo, hi = est.g_star_ci
    assert 1 < lo <= 1 + math.sqrt(exact[2] / exact[0]) <= hi < np.inf
    # the streamed statistics behind it (same key, same rollouts) against dense per-sample scores
    kp, ks = jax.random.split(jax.random.PRNGKey(0))
    rows = np.asarray(jax.random.randint(kp, (96,), 0, len(pool)))
    st = E.lm_rollout_statistics(pol, pool[rows], lambda r, y: reward(rows[r], y), 16, ks, 2)
    np.testing.assert_array_equal(st.rewards, est.rewards)
    flat, unravel = ravel_pytree(pol.params)
    y = st.responses
    xs, ys, zs = np.repeat(pool[rows[:2]], 16, axis=0), y[:2].reshape(32, 2), st.rewards[:2]
    s = np.asarray(jax.jacrev(lambda t: seq_log_probs(pol.apply_fn, unravel(t), xs, ys))(flat),
                   np.float64).reshape(2, 16, -1)
    ghat = np.einsum("ai,aid->ad", zs, s) / 16
    total, _ = pol.score_contractions(np.repeat(pool[rows], 16, axis=0), y.reshape(-1, 2),
                                      st.rewards.reshape(1, -1) / 16, chunk=64)
    total = total[0]  # sum_a ghat_a
    np.testing.assert_allclose(st.sq_norms[:2], np.sum(s * s, 2), rtol=1e-4)
    np.testing.assert_allclose(st.mean_sq[:2], np.sum(ghat**2, 1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(st.mean_dot[:2], ghat @ total, rtol=1e-4,
                               atol=1e-5 * np.abs(st.mean_dot).max())
    # the same model given as (params, apply_fn) (sampled without the KV cache)
    est2 = gt.estimate_scaling_constants((pol.params, pol.apply_fn), n_prompts=96, n_samples=16,
                                         seed=0, prompts=pool, reward=reward, response_len=2)
    for name, val in zip(("c1", "c2", "c3"), exact):
        lo, hi = getattr(est2, f"{name}_ci")
        assert lo <= val <= hi, (name, lo, val, hi)


# --- Fieller ------------------------------------------------------------------------------------

def test_fieller_interval_is_the_set_of_accepted_ratios():
    q = 1.96
    for a, b, vaa, vbb, vab in ((2.0, 5.0, 0.1, 0.4, 0.05), (0.3, 4.0, 0.09, 0.2, 0.01),
                                (1.0, 1.0, 0.04, 0.04, -0.01)):
        lo, hi = (float(t) for t in I.fieller_interval(a, b, vaa, vbb, vab, q))
        grid = np.linspace(0, 200, 400001)
        ok = (b - grid * a) ** 2 <= q**2 * (vbb - 2 * grid * vab + grid**2 * vaa)
        acc = grid[ok]
        if a * a > q * q * vaa:
            assert np.isfinite(hi)
            assert abs(acc.min() - lo) < 1e-3 and abs(acc.max() - hi) < 1e-3
        else:  # c1 not clearly positive: unbounded above, reported as inf
            assert hi == np.inf and abs(acc.min() - lo) < 1e-3


# --- bad input ----------------------------------------------------------------------------------

def test_bad_input_names_the_minimum():
    b = _cover_bandit()
    with pytest.raises(ValueError, match="n_samples must be >= 3"):
        gt.estimate_scaling_constants(b, n_prompts=10, n_samples=2)
    for m in (1, 2):
        with pytest.raises(ValueError, match="n_prompts must be >= 3"):
            gt.estimate_scaling_constants(b, n_prompts=m, n_samples=4)
    z = np.zeros((4, 4))
    with pytest.raises(ValueError, match="n_samples must be >= 3"):
        gt.estimate_from_rollouts(np.zeros((4, 2)), np.zeros((4, 2, 3)))
    with pytest.raises(ValueError, match="scores"):
        gt.estimate_from_rollouts(z, np.zeros((4, 3, 2)))
    with pytest.raises(ValueError, match="mean_gram"):
        gt.estimate_from_rollouts(z, sq_norms=np.ones((4, 4)), mean_gram=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="sq_norms"):
        gt.estimate_from_rollouts(z)
    with pytest.raises(ValueError, match="estimator"):
        gt.estimate_scaling_constants(b, n_prompts=5, n_samples=4).mse(1, 4, "nope")
    pol, pool, reward = _tiny_lm()
    with pytest.raises(ValueError, match="prompts"):
        gt.estimate_scaling_constants(pol, n_prompts=5, n_samples=4)
