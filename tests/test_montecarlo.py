"""Monte Carlo MSE agrees with the exact MSE within its CI (fixed seeds, 4-sigma bands)."""

import jax
import numpy as np
import pytest

import grpo_theory as gt
from grpo_theory.problems import linear_bandit, sequence_policy

Z = 4.0  # many comparisons: a 4-sigma band keeps the fixed-seed suite far from chance failures
BANDITS = {
    "rand-3x4": gt.SoftmaxBandit.random(jax.random.PRNGKey(0), 3, 4),
    "rand-binary-5x3": gt.SoftmaxBandit.random(jax.random.PRNGKey(1), 5, 3, logit_scale=2.0,
                                                binary=True),
    "linear": linear_bandit(),
    "sequence": sequence_policy(),
}
ESTIMATORS = ["vanilla", "oracle", "grpo", "grpo_mean", "optimal", "grpo_std", "grpo_std_trl"]


# every estimator on every bandit; the (G, B) pairs rotate over bandits to bound compile time
SETTINGS = {"rand-3x4": [(2, 1), (8, 3)], "rand-binary-5x3": [(4, 2)], "linear": [(3, 4)],
            "sequence": [(2, 2), (16, 1)]}


@pytest.mark.parametrize("bname", list(BANDITS))
@pytest.mark.parametrize("name", ESTIMATORS)
def test_exact_mse_inside_mc_confidence_interval(bname, name):
    bandit = BANDITS[bname]
    for i, (G, B) in enumerate(SETTINGS[bname]):
        exact = gt.exact_mse(bandit, name, G, B)
        r = gt.mc_mse(bandit, name, G, B, n_reps=20_000, seed=100 + i)
        assert abs(r.mse - exact) <= Z * r.se, (name, G, B, r.mse, exact, r.se)
        assert r.ci_low < r.mse < r.ci_high


def test_mc_bias_and_trace_cov_match_exact_for_grpo_mean():
    b = BANDITS["rand-3x4"]
    G = 4
    r = gt.mc_mse(b, "grpo_mean", G, 2, n_reps=40_000, seed=5)
    g = np.asarray(b.problem().gradient())
    # bias of the self-inclusive mean is -g/G exactly; MC within 4 se per coordinate
    est = np.asarray(gt.mc_estimates(b, "grpo_mean", G, 2, n_reps=40_000, seed=5))
    se = est.std(axis=0, ddof=1) / np.sqrt(40_000)
    assert np.all(np.abs(est.mean(axis=0) - g + g / G) <= Z * se + 1e-15)
    assert np.all(np.abs(r.bias + g / G) <= Z * se * 1.5 + 1e-15)  # same law, other draws
    np.testing.assert_allclose(r.mse, r.trace_cov * (1 - 1 / 40_000) + r.bias_sq_norm, rtol=1e-9)


def test_mc_is_deterministic_and_seed_dependent():
    b = BANDITS["linear"]
    r1 = gt.mc_mse(b, "grpo", 4, 2, n_reps=2_000, seed=7)
    r2 = gt.mc_mse(b, "grpo", 4, 2, n_reps=2_000, seed=7)
    r3 = gt.mc_mse(b, "grpo", 4, 2, n_reps=2_000, seed=8)
    assert r1.mse == r2.mse and r1.mse != r3.mse


def test_chunking_and_padding():
    b = BANDITS["rand-3x4"]
    one = gt.mc_mse(b, "grpo", 4, 1, n_reps=1200, seed=0, chunk=1200)
    again = gt.mc_mse(b, "grpo", 4, 1, n_reps=1200, seed=0, chunk=1200)
    assert one.mse == again.mse
    three = gt.mc_mse(b, "grpo", 4, 1, n_reps=1200, seed=0, chunk=400)  # other draws, same law
    pad = gt.mc_mse(b, "grpo", 4, 1, n_reps=1000, seed=0, chunk=300)  # padded last chunk
    assert pad.n_reps == 1000 and np.isfinite(pad.trace_cov)
    exact = gt.exact_mse(b, "grpo", 4)
    for r in (one, three, pad):
        assert abs(r.mse - exact) <= Z * r.se
    direct = gt.mc_estimates(b, "grpo", 4, 1, n_reps=1000, seed=0)
    np.testing.assert_allclose(float(np.sum(np.var(np.asarray(direct), 0, ddof=1))),
                               pad.trace_cov, rtol=0.15)


def test_sample_groups_shapes_and_frequencies():
    b = BANDITS["rand-3x4"]
    p = b.problem()
    x, y, z = gt.sample_groups(jax.random.PRNGKey(0), p, 20_000, 2)
    assert x.shape == (20_000,) and y.shape == z.shape == (20_000, 2)
    freq = np.bincount(np.asarray(x), minlength=3) / 20_000
    se = np.sqrt(np.asarray(p.prompt_probs) * (1 - np.asarray(p.prompt_probs)) / 20_000)
    assert np.all(np.abs(freq - np.asarray(p.prompt_probs)) <= Z * se)
    assert set(np.unique(np.asarray(z))) <= {0.0, 1.0}


def test_mc_bad_inputs():
    b = BANDITS["rand-3x4"]
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        gt.mc_mse(b, "grpo", 1)
    with pytest.raises(ValueError, match="n_reps must be an integer >= 2"):
        gt.mc_mse(b, "grpo", 2, n_reps=1)
    with pytest.raises(ValueError, match="batch_size"):
        gt.mc_mse(b, "grpo", 2, batch_size=0)
    with pytest.raises(ValueError, match="bandit must be"):
        gt.mc_mse("not a bandit", "grpo", 2)
    with pytest.raises(ValueError, match="estimator must be one of"):
        gt.mc_mse(b, "nope", 2)
