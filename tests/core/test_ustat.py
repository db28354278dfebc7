"""The general U-statistic toolkit and the GRPO kernel as an instance."""

import itertools
from math import comb

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grpo_theory as gt
from grpo_theory.core.ustat import (grpo_kernel, hoeffding_exact, hoeffding_mc, prompt_mean_and_variance,
                               u_statistic, ustat_variance)

ATOMS = jnp.array([0.0, 1.0, 3.0])
W = np.array([0.5, 0.3, 0.2])


def k3(a, b, c):
    """An asymmetric-looking but symmetric order-3 kernel."""
    return a * b * c + (a + b + c) ** 2 / 3.0 + jnp.maximum(jnp.maximum(a, b), c)


def test_ustatistic_matches_classical_special_cases():
    x = jnp.array([0.3, -1.2, 2.0, 0.7, 5.0])
    np.testing.assert_allclose(u_statistic(lambda a: a, x, 1), x.mean(), rtol=1e-14)
    var_kernel = lambda a, b: 0.5 * (a - b) ** 2  # noqa: E731
    np.testing.assert_allclose(u_statistic(var_kernel, x, 2), np.var(np.asarray(x), ddof=1),
                               rtol=1e-13)


@pytest.mark.parametrize("n", [3, 4, 5])
def test_exact_variance_formula_matches_bruteforce_order3(n):
    res = hoeffding_exact(k3, ATOMS, W, 3)
    # brute force: every n-tuple of atoms, its probability and its U_n
    tuples = np.array(list(itertools.product(range(3), repeat=n)))
    probs = np.prod(W[tuples], axis=1)
    idx = list(itertools.combinations(range(n), 3))
    a = np.asarray(ATOMS)[tuples]
    vals = np.mean([np.asarray(k3(a[:, i], a[:, j], a[:, k])) for i, j, k in idx], axis=0)
    mean = probs @ vals
    var = probs @ (vals - mean) ** 2
    np.testing.assert_allclose(mean, res.theta, rtol=1e-13)
    np.testing.assert_allclose(res.variance(n), var, rtol=1e-12)
    assert res.sigma_sq[0] <= res.sigma_sq[1] <= res.sigma_sq[2]  # sigma_c^2 increasing in c


def test_ustat_variance_formula_for_sample_mean():
    np.testing.assert_allclose(ustat_variance([2.0], 10), 0.2)
    with pytest.raises(ValueError, match="n must be an integer >= 3"):
        ustat_variance([1.0, 1.0, 1.0], 2)


def test_hoeffding_monte_carlo_agrees_with_exact():
    res = hoeffding_exact(k3, ATOMS, W, 3)

    def sampler(key, n):
        return ATOMS[jax.random.choice(key, 3, (n,), p=jnp.asarray(W))]

    sig, se = hoeffding_mc(k3, sampler, 3, jax.random.PRNGKey(0), n_pairs=200_000)
    assert np.all(np.abs(sig - res.sigma_sq) <= 4 * se + 1e-3 * res.sigma_sq), (sig, res.sigma_sq)


def _grpo_atoms(bandit, x):
    p = bandit.problem()
    K = p.n_responses
    s = jnp.repeat(p.scores[x], 2, axis=0)  # atom 2k + z
    z = jnp.tile(jnp.array([0.0, 1.0]), K)
    mu = np.repeat(np.asarray(p.reward_means[x]), 2)
    w = np.repeat(np.asarray(p.probs[x]), 2) * np.where(np.asarray(z) == 1, mu, 1 - mu)
    return p, (s, z), w


def test_grpo_kernel_hoeffding_projection_and_variance():
    bandit = gt.SoftmaxBandit.random(jax.random.PRNGKey(4), 2, 3)
    for x in range(2):
        p, atoms, w = _grpo_atoms(bandit, x)
        res = hoeffding_exact(grpo_kernel, atoms, w, 2)
        g = np.asarray(p.prompt_gradients()[x])
        np.testing.assert_allclose(res.theta, g, atol=1e-14)  # h_0 = g(x)
        v = float(p.values()[x])
        s, z = map(np.asarray, atoms)
        h1 = 0.5 * (s * (z - v)[:, None] + g)  # Lemma 1's first projection
        np.testing.assert_allclose(res.projections[0], h1, atol=1e-14)
        tr_or = float(np.trace(np.asarray(p.oracle_covariances()[x])))
        np.testing.assert_allclose(res.sigma_sq[0], tr_or / 4, rtol=1e-12)
        # the classical variance formula equals the package's exact per-prompt GRPO variance
        single = gt.DiscreteProblem(jnp.array([1.0]), p.probs[x:x + 1], p.scores[x:x + 1],
                                    p.reward_means[x:x + 1])
        for G in (2, 3, 7):
            _, var = prompt_mean_and_variance(single, "grpo", G)
            np.testing.assert_allclose(res.variance(G), float(var[0]), rtol=1e-11)


def test_degenerate_part_is_orthogonal_to_first_order_part():
    """zeta_2 = h - h_1(a) - h_1(b) + g has zero conditional mean (Hoeffding, derived form)."""
    bandit = gt.SoftmaxBandit.random(jax.random.PRNGKey(9), 1, 4)
    p, atoms, w = _grpo_atoms(bandit, 0)
    res = hoeffding_exact(grpo_kernel, atoms, w, 2)
    s, z = map(np.asarray, atoms)
    v = float(p.values()[0])
    eps = z - v
    h = np.asarray(res.projections[1])
    h1 = np.asarray(res.projections[0])
    zeta2 = h - h1[:, None, :] - h1[None, :, :] + np.asarray(res.theta)
    derived = -0.5 * (s[:, None, :] * eps[None, :, None] + s[None, :, :] * eps[:, None, None])
    np.testing.assert_allclose(zeta2, derived, atol=1e-13)
    np.testing.assert_allclose(np.tensordot(w, zeta2, axes=([0], [0])), 0.0, atol=1e-13)


def test_combinatorics_helper_consistency():
    assert comb(5, 3) == len(list(itertools.combinations(range(5), 3)))
    with pytest.raises(ValueError, match="at least order=3"):
        u_statistic(k3, jnp.array([1.0, 2.0]), 3)
    with pytest.raises(ValueError, match="weights must sum to 1"):
        hoeffding_exact(k3, ATOMS, np.array([0.5, 0.5, 0.5]), 3)
