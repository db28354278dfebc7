"""The advisor's prediction of BASIS's MSE (advisor/cross_prompt.py): the cross-prompt pieces
are unbiased exactly (every draw of 3 prompts enumerated; the plug-in products of means, the
rival, are biased), their power sums and leave-one-prompt-out values equal the sums written
out, the jackknife interval is sane, and bad sizes and estimators without a closed form are
refused naming the argument or the exact route."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grpo_theory as gt
from grpo_theory.advisor.coverage import group_outcomes
from grpo_theory.advisor import cross_prompt_statistics
from grpo_theory.advisor.pieces import rollout_statistics, t_quantile
from grpo_theory.core import BASIS_PIECES, basis_pieces

SIZES = ((2, 1), (3, 2), (8, 4))  # (B, G)
PI = np.array([[0.3, 0.7], [0.6, 0.4]])
# a tabular softmax policy as arrays (no compiled conversion): s(x, y) = e_y - pi(.|x) in the
# block of prompt x, so E[s|x] = 0 (true scores)
SCORES = np.zeros((2, 2, 4))
for _x in range(2):
    SCORES[_x, :, 2 * _x:2 * _x + 2] = np.eye(2) - PI[_x]
TINY = gt.DiscreteProblem.create([0.35, 0.65], PI, SCORES, [[0.3, 0.8], [0.6, 0.1]])


def _basis_statistics(z, q, mq, md):
    """The advisor's estimates of BASIS_PIECES (unbiased) and the plug-in rival's."""
    theta, _, _ = rollout_statistics(z, q, mq, md)  # c1, c_v, grad_sq are defined at n = 2
    cross, _ = cross_prompt_statistics(z, q)
    ours = jnp.concatenate([theta[jnp.array([0, 3, 4])], cross])
    n = z.shape[1]
    zbar, qbar = jnp.mean(z, 1), jnp.mean(q, 1)
    J, m0 = jnp.mean(zbar), jnp.mean(qbar)
    plug = jnp.stack([J * jnp.mean(q * z), J**2 * m0, jnp.mean(zbar**2) * m0,
                      jnp.mean(jnp.var(z, 1) * n / (n - 1)) * m0])
    return ours, jnp.concatenate([theta[jnp.array([0, 3, 4])], plug])


def test_the_basis_prediction_is_unbiased_exactly_and_the_plug_in_is_not():
    """E over every draw of m = 3 prompts with n = 2 responses each (32^3 draws)."""
    x, pr, z, q, g = group_outcomes(TINY, 2)
    idx = np.array(list(itertools.product(range(len(pr)), repeat=3)))
    gs = g[idx]  # (draws, 3, D)
    with jax.enable_x64(True):
        ours, plug = jax.jit(jax.vmap(_basis_statistics))(
            jnp.asarray(z[idx]), jnp.asarray(q[idx]), jnp.asarray(np.sum(gs * gs, 2)),
            jnp.asarray(np.einsum("sad,sd->sa", gs, gs.sum(1))))
    w = np.prod(pr[idx], axis=1)
    mean, mean_plug = w @ np.asarray(ours), w @ np.asarray(plug)
    p = basis_pieces(TINY)
    np.testing.assert_allclose(mean, p.vector(), rtol=1e-11, atol=1e-14)
    form = gt.get_estimator("basis").closed_form
    for B, G in SIZES:  # E[MSE-hat(B, G)] = the exact MSE; the plug-in's is off
        w_bg = form.mse_weights(B, G)
        assert abs(w_bg @ mean - p.mse(B, G)) < 1e-11 * p.mse(B, G), (B, G)
        assert abs(w_bg @ mean_plug - p.mse(B, G)) > 1e-3 * p.mse(B, G), (B, G)


def _distinct(x, y, w=None):
    m = len(x)
    if w is None:
        return np.mean([x[a] * y[b] for a, b in itertools.permutations(range(m), 2)])
    return np.mean([x[a] * y[b] * w[c] for a, b, c in itertools.permutations(range(m), 3)])


def test_power_sums_and_leave_one_out_values_equal_the_sums_written_out():
    rng = np.random.default_rng(3)
    m, n = 6, 3
    z, q = rng.normal(size=(m, n)), rng.exponential(size=(m, n))
    with jax.enable_x64(True):
        theta, loo = (np.asarray(a) for a in cross_prompt_statistics(jnp.asarray(z),
                                                                     jnp.asarray(q)))

    def brute(z, q):
        zbar, qbar, qz = z.mean(1), q.mean(1), (q * z).mean(1)
        k = z.shape[1]
        pair = (z.sum(1) ** 2 - (z * z).sum(1)) / (k * (k - 1))
        return [_distinct(zbar, qz), _distinct(zbar, zbar, qbar), _distinct(pair, qbar),
                _distinct(z.var(1, ddof=1), qbar)]

    np.testing.assert_allclose(theta, brute(z, q), rtol=1e-12)
    for a in range(m):  # the jackknife's leave-one-prompt-out values, exactly
        keep = np.arange(m) != a
        np.testing.assert_allclose(loo[a], brute(z[keep], q[keep]), rtol=1e-12)


@pytest.fixture(scope="module")
def estimate():
    """300 prompts x 4 responses of TINY, sampled with numpy."""
    rng = np.random.default_rng(0)
    m, n = 300, 4
    x = rng.choice(2, size=m, p=[0.35, 0.65])
    y = (rng.random((m, n)) > PI[x, 0][:, None]).astype(int)
    z = (rng.random((m, n)) < np.asarray(TINY.reward_means)[x[:, None], y]).astype(float)
    return gt.estimate_from_rollouts(z, SCORES[x[:, None], y])


def test_the_jackknife_interval_is_sane_and_the_best_group_size_is_one(estimate):
    p = basis_pieces(TINY)
    assert estimate.extended_theta.shape == (9,) and estimate.extended_cov.shape == (9, 9)
    q = t_quantile(0.05, estimate.n_prompts)
    for B, G in SIZES:  # (the 95% intervals covered the exact MSE in 93-95% of 300 seeds)
        lo, hi = estimate.mse_ci(B, G, "basis")
        val, se = estimate.mse(B, G, "basis"), (hi - lo) / (2 * q)
        assert lo < val < hi and 0 < hi - lo < 0.5 * val, (B, G, lo, hi)
        assert abs(val - p.mse(B, G)) <= 4 * se, (B, G, val, se, p.mse(B, G))
    # the prediction over arrays equals the scalar one; the rival grpo law is another number
    np.testing.assert_allclose(estimate.mse(np.array([2, 8]), np.array([1, 4]), "basis"),
                               [estimate.mse(2, 1, "basis"), estimate.mse(8, 4, "basis")])
    assert abs(estimate.mse(8, 4, "grpo") - p.mse(8, 4)) > 1e-2 * p.mse(8, 4)
    # the best G at a budget N: G = 1 for BASIS (B = N >= 2), GRPO's law unchanged by default
    N = 64
    G = np.arange(1, N // 2 + 1, dtype=np.float64)
    assert estimate.recommended_group_size(N, "basis") == 1 == int(
        G[np.argmin(p.mse(N / G, G))])
    assert estimate.recommended_group_size(N) == estimate.recommended_group_size(N, "grpo")
    assert estimate.recommended_group_size(3, "basis") == 1  # G in [1, N/2]: G = 1 only


def test_bad_sizes_and_estimators_without_a_closed_form_are_refused(estimate):
    with pytest.raises(ValueError, match="group_size must be >= 1 for basis"):
        estimate.mse(4, 0.5, "basis")
    with pytest.raises(ValueError, match="batch_size must be >= 2"):
        estimate.mse(1, 4, "basis")
    with pytest.raises(ValueError, match="batch_size must be >= 2"):
        estimate.mse_ci(1.5, 4, "basis")
    with pytest.raises(ValueError, match=r"budget must be an integer >= 2"):
        estimate.recommended_group_size(1, "basis")
    for name in ("jspo", "basis_self_inclusive"):
        with pytest.raises(gt.core.MissingClosedForm,
                           match=rf'allocation.audit\(problem, allocation.fixed\(G\), '
                                 rf'estimator="{name}", batch_size=B\)'):
            estimate.mse(4, 2, name)
    # three prompts give the five pieces but not the cross-prompt ones (triples + jackknife)
    z = np.random.default_rng(0).integers(0, 2, (3, 4)).astype(float)
    few = gt.estimate_from_rollouts(z, np.random.default_rng(1).normal(size=(3, 4, 2)))
    few.mse(2, 2, "grpo")
    with pytest.raises(ValueError, match="n_prompts must be >= 4"):
        few.mse(2, 2, "basis")
    bare = gt.advisor.ScalingEstimate(few.theta, few.cov, {}, np.zeros((5, 4)))
    with pytest.raises(ValueError, match="carry no rollouts"):
        bare.mse(2, 2, "basis")
    assert BASIS_PIECES[:3] == ("c1", "c_v", "grad_sq")
