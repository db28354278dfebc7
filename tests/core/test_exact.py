"""Exact identities by enumeration: unbiasedness and MSE, three independent routes agreeing."""

import jax
import numpy as np
import pytest

import grpo_theory as gt
from grpo_theory.problems import default_bandit, linear_bandit, sequence_policy

SMALL = gt.SoftmaxBandit.random(jax.random.PRNGKey(3), 2, 2)
SMALL3 = gt.SoftmaxBandit(np.array([[0.3, -0.2, 0.9], [1.0, 0.0, -1.0]]),
                          np.array([[0.2, 0.9, 0.5], [1.0, 0.0, 0.4]]), prompt_probs=[0.3, 0.7])
ALL = ["vanilla", "oracle", "grpo", "grpo_mean", "optimal", "grpo_std", "grpo_std_trl",
       "grpo_std_paper", "grpo_std_easydel"]


@pytest.mark.parametrize("G,B", [(2, 1), (3, 1), (2, 2)])
@pytest.mark.parametrize("bandit", [SMALL, SMALL3], ids=["2x2", "2x3"])
def test_unbiasedness_by_enumeration(bandit, G, B):
    g = np.asarray(bandit.problem().gradient())
    for name in ("vanilla", "grpo", "oracle", "optimal"):
        mean, _ = gt.enumerated_moments(bandit, name, G, B)
        np.testing.assert_allclose(mean, g, rtol=1e-12, atol=1e-14, err_msg=name)
    mean, _ = gt.enumerated_moments(bandit, "grpo_mean", G, B)
    np.testing.assert_allclose(mean, (G - 1) / G * g, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("G,B", [(2, 1), (3, 1), (2, 2)])
@pytest.mark.parametrize("name", ALL)
def test_exact_mse_routes_agree_with_enumeration(name, G, B):
    ref = gt.enumerated_moments(SMALL3, name, G, B)[1]
    binary = gt.exact_mse(SMALL3, name, G, B, method="binary")
    auto = gt.exact_mse(SMALL3, name, G, B)
    np.testing.assert_allclose(binary, ref, rtol=1e-11)
    np.testing.assert_allclose(auto, ref, rtol=1e-11)


@pytest.mark.parametrize("name", ["vanilla", "oracle", "grpo", "grpo_mean", "optimal"])
@pytest.mark.parametrize("policy", [default_bandit(), linear_bandit(), sequence_policy()],
                         ids=["softmax", "linear", "sequence"])
def test_closed_form_equals_binary_conditioning(policy, name):
    for G in (2, 5, 16):
        for B in (1, 3):
            np.testing.assert_allclose(gt.exact_mse(policy, name, G, B, method="closed_form"),
                                       gt.exact_mse(policy, name, G, B, method="binary"),
                                       rtol=1e-10)


def test_grpo_oracle_gap_times_G_Gminus1_is_constant():
    for policy in (default_bandit(), linear_bandit(), sequence_policy()):
        gaps = [(gt.exact_mse(policy, "grpo", G) - gt.exact_mse(policy, "oracle", G)) * G * (G - 1)
                for G in (2, 3, 4, 8, 16, 64, 256)]
        np.testing.assert_allclose(gaps, gaps[0], rtol=1e-9)
        assert gaps[0] > 0


def test_derived_grpo_formula_and_paper_leading_order():
    b = default_bandit()
    p = b.problem()
    mo = gt.core.ustat.prompt_moments(p)
    f = np.asarray(p.prompt_probs)
    for G in (2, 4, 16):
        per_prompt = mo.tr_sigma_oracle / G + (mo.score_sq * mo.sigma2 + mo.grad_sq) / (G * (G - 1))
        c1 = gt.scaling_constants(b).c1
        np.testing.assert_allclose(gt.exact_mse(b, "grpo", G), c1 + f @ per_prompt, rtol=1e-12)
        # vanilla's "leading order" (Prop. 3) is exact; grpo's differs by O(G^-2)
        np.testing.assert_allclose(gt.leading_order_mse(p, "vanilla", G), gt.exact_mse(b, "vanilla", G),
                                   rtol=1e-12)
        np.testing.assert_allclose(gt.leading_order_mse(p, "oracle", G), gt.exact_mse(b, "oracle", G),
                                   rtol=1e-12)
    r = [abs(gt.exact_mse(b, "grpo", G) - gt.leading_order_mse(p, "grpo", G)) * G**2
         for G in (64, 128, 256)]
    np.testing.assert_allclose(r, r[-1], rtol=0.02)


def test_scaling_constants_reproduce_exact_grpo_mse():
    b = linear_bandit()
    c = gt.scaling_constants(b)
    for B, G in [(1, 2), (4, 8), (16, 3)]:
        np.testing.assert_allclose(c.mse(B, G), gt.exact_mse(b, "grpo", G, B), rtol=1e-11)
    opt = gt.optimal_group_size(b)
    grid = np.arange(2, 400)
    assert opt.exact == grid[np.argmin(gt.budget_mse(c, grid))]
    np.testing.assert_allclose(opt.paper, np.sqrt(c.c3 / c.c1))


def test_grid_argmin_is_the_law_minimum_on_the_grid():
    from grpo_theory.core.scaling import ScalingConstants, grid_argmin

    c = ScalingConstants(1.0, 3.0, 49.0)  # G* = 1 + sqrt(49) = 8
    assert grid_argmin(c, (2, 4, 8, 16, 32)) == 8
    assert grid_argmin(c, [32, 2, 4]) == 4  # N MSE 36.6, 54, 23.3: any order of the grid
    assert grid_argmin(c, (2,)) == 2
    with pytest.raises(ValueError, match="grid"):
        grid_argmin(c, ())


def test_sigma_oracle_trace_matches_c2_and_oracle_mse():
    b = default_bandit()
    p = b.problem()
    sig = np.asarray(gt.sigma_oracle(p))
    np.testing.assert_allclose(np.trace(sig), gt.scaling_constants(b).c2, rtol=1e-12)
    assert np.all(np.linalg.eigvalsh(sig) > -1e-12)


def test_exact_mse_rejects_estimators_without_exact_form():
    import jax.numpy as jnp

    not_exch = gt.Estimator("first_only", lambda z, ctx: z * (jnp.arange(z.shape[-1]) == 0),
                            binary_exact=False)
    with pytest.raises(ValueError, match="has no exact MSE"):
        gt.exact_mse(default_bandit(), not_exch, 4)
    with pytest.raises(ValueError, match="no closed-form MSE"):
        gt.exact_mse(default_bandit(), "grpo_std", 4, method="closed_form")
    with pytest.raises(ValueError, match="method must be"):
        gt.exact_mse(default_bandit(), "grpo", 4, method="magic")
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        gt.exact_mse(default_bandit(), "grpo", 1)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        gt.exact_mse(default_bandit(), "grpo", 4, batch_size=0)
    with pytest.raises(ValueError, match="estimator must be one of"):
        gt.exact_mse(default_bandit(), "ppo", 4)
    with pytest.raises(ValueError, match="max_outcomes"):
        gt.enumerate_estimates(default_bandit(), "grpo", 8)


def test_user_prompt_baseline_exact_form():
    b = SMALL3
    base = gt.prompt_baseline(np.array([0.3, 0.6]))
    np.testing.assert_allclose(gt.exact_mse(b, base, 3), gt.enumerated_moments(b, base, 3)[1],
                               rtol=1e-11)
    with pytest.raises(ValueError, match="b must have shape"):
        gt.exact_mse(b, gt.prompt_baseline(np.array([0.3])), 3)


@pytest.mark.parametrize("name", ["vanilla", "grpo", "grpo_mean", "oracle", "grpo_std"])
def test_per_prompt_mse_matches_single_prompt_enumeration(name):
    import jax.numpy as jnp

    p = SMALL3.problem()
    per = np.asarray(gt.exact_prompt_mse(SMALL3, name, 3))
    for x in range(p.n_prompts):
        single = gt.DiscreteProblem(jnp.array([1.0]), p.probs[x:x + 1], p.scores[x:x + 1],
                                    p.reward_means[x:x + 1])
        np.testing.assert_allclose(per[x], gt.enumerated_moments(single, name, 3)[1], rtol=1e-11)
    # the B = 1 minibatch MSE adds the between-prompt spread c1 (unbiased estimators)
    if name in ("vanilla", "grpo", "oracle"):
        np.testing.assert_allclose(np.asarray(p.prompt_probs) @ per + gt.scaling_constants(p).c1,
                                   gt.exact_mse(p, name, 3), rtol=1e-11)
