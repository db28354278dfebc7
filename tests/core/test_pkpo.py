"""PKPO's pass@k gradient (``grpo_theory.core.pkpo``) and the pass@k target of the exact routes.

Rivals excluded: the same advantages measured against ``grad J`` (the mean reward's gradient)
are biased, so an exact route that ignored the estimator's target would fail; the three exact
routes (count classes, binary conditioning, brute-force enumeration) and Monte Carlo agree.
"""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from grpo_theory.core import (SoftmaxBandit, batch_moments, enumerated_moments, exact_mse,
                              get_estimator, mc_mse, pkpo)
from grpo_theory.problems import default_bandit


def _toy():
    p = np.array([0.1, 0.3, 0.6, 0.9])
    return SoftmaxBandit(np.log(np.stack([p, 1 - p], 1)), [[1.0, 0.0]] * 4)


@pytest.mark.parametrize("k,G", [(2, 2), (2, 4), (3, 4), (4, 6)])
@pytest.mark.parametrize("problem", [_toy(), default_bandit()])
def test_unbiased_for_the_pass_k_gradient_and_not_for_grad_j(problem, k, G):
    est = pkpo(k)
    bm = batch_moments(problem, est, G, 2)
    assert bm.relative_bias < 1e-12
    pr = problem.problem()
    V = np.asarray(pr.values())
    want = (np.asarray(pr.prompt_probs) * k * (1 - V) ** (k - 1)) @ np.asarray(
        pr.prompt_gradients())
    np.testing.assert_allclose(bm.gradient, want, rtol=1e-12, atol=1e-15)
    rival = batch_moments(problem, dataclasses.replace(est, pass_k=1, name="rival"), G, 2)
    assert rival.relative_bias > 0.05  # the same advantages against grad J


@pytest.mark.parametrize("k,G,B", [(2, 3, 1), (2, 2, 2), (3, 3, 1)])
def test_exact_routes_agree(k, G, B):
    est = pkpo(k)
    bm = batch_moments(_toy(), est, G, B)
    _, brute = enumerated_moments(_toy(), est, G, B)
    assert bm.mse == pytest.approx(brute, rel=1e-10)
    assert exact_mse(_toy(), est, G, B) == pytest.approx(brute, rel=1e-10)


def test_monte_carlo_covers_the_exact_mse_against_pass_k():
    est = pkpo(2)
    exact = batch_moments(_toy(), est, 4, 2).mse
    r = mc_mse(_toy(), est, 4, 2, n_reps=20_000, seed=3)
    lo, hi = r.interval()
    assert lo <= exact <= hi
    assert np.linalg.norm(r.bias) < 4 * np.sqrt(r.trace_cov / 20_000)
    rival = batch_moments(_toy(), dataclasses.replace(est, pass_k=1, name="rival"), 4, 2).mse
    assert not lo <= rival <= hi


def test_k_one_is_reinforce_and_the_registered_name():
    z = jnp.array([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    np.testing.assert_allclose(pkpo(1)(z), get_estimator("vanilla")(z))
    assert get_estimator("pkpo").pass_k == 2
    # G = 4, c = 1, k = 3: an incorrect response's (k-1)-subsets of the other 3 hold the correct
    # one in 2 of 3 cases
    np.testing.assert_allclose(pkpo(3)(jnp.array([1.0, 0.0, 0.0, 0.0])), [3.0, 2.0, 2.0, 2.0])


def test_bad_k_and_small_groups_are_named():
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        pkpo(0)
    with pytest.raises(ValueError, match="at least k = 3"):
        pkpo(3)(jnp.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="pass_k must be an integer"):
        dataclasses.replace(pkpo(2), pass_k=0)


# --- the (k - 1)-subset baseline s^(loo-1) ----------------------------------------------------

def _loo1_by_subsets(z, k):
    """The definition: (n / C(n, k)) sum over k-subsets I holding i of max_I z - max_{I \\ i} z
    (the package's scale: n times the paper's weight)."""
    from itertools import combinations
    from math import comb

    n = len(z)
    out = np.zeros(n)
    for I in combinations(range(n), k):
        for i in I:
            out[i] += max(z[j] for j in I) - max(z[j] for j in I if j != i)
    return out * n / comb(n, k)


@pytest.mark.parametrize("k,G", [(2, 2), (2, 5), (3, 4), (4, 6)])
def test_loo1_equals_its_subset_definition(k, G):
    rng = np.random.default_rng(k * 10 + G)
    for _ in range(6):
        z = (rng.random(G) < 0.4).astype(float)
        np.testing.assert_allclose(pkpo(k, baseline="loo-1")(jnp.asarray(z)),
                                   _loo1_by_subsets(z, k), atol=1e-12)
    # the rival, the estimator without a baseline, differs from the definition
    z = np.array([1.0] + [0.0] * (G - 1))
    assert not np.allclose(pkpo(k)(jnp.asarray(z)), _loo1_by_subsets(z, k))


@pytest.mark.parametrize("k,G", [(2, 2), (2, 4), (3, 4)])
def test_loo1_is_unbiased_for_pass_k_and_cuts_the_mse_on_the_toy(k, G):
    est = get_estimator("pkpo_loo1") if k == 2 else pkpo(k, baseline="loo-1")
    bm = batch_moments(_toy(), est, G, 2)
    assert bm.relative_bias < 1e-12
    rival = batch_moments(_toy(), dataclasses.replace(est, pass_k=1, name="rival"), G, 2)
    assert rival.relative_bias > 0.05
    _, brute = enumerated_moments(_toy(), est, G, 1)
    assert batch_moments(_toy(), est, G, 1).mse == pytest.approx(brute, rel=1e-10)
    assert bm.mse < batch_moments(_toy(), pkpo(k), G, 2).mse


def test_loo1_monte_carlo_covers_the_exact_mse():
    est = get_estimator("pkpo_loo1")
    exact = batch_moments(_toy(), est, 4, 2).mse
    r = mc_mse(_toy(), est, 4, 2, n_reps=20_000, seed=5)
    lo, hi = r.interval()
    assert lo <= exact <= hi
    rival = batch_moments(_toy(), pkpo(2), 4, 2).mse  # the estimator without a baseline
    assert not lo <= rival <= hi


def test_loo1_bad_arguments_are_named():
    with pytest.raises(ValueError, match="baseline must be one of"):
        pkpo(2, baseline="loo")
    with pytest.raises(ValueError, match="needs k >= 2"):
        pkpo(1, baseline="loo-1")
