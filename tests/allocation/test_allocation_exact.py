"""The allocation auditor's dynamic programme against brute-force enumeration and closed forms."""

import doctest
import re

import numpy as np
import pytest

from grpo_theory import SoftmaxBandit, exact_gradient, exact_mse
from grpo_theory import allocation as A
import importlib

# two prompts, two responses, fractional reward means: every (response, reward) atom occurs
TINY = SoftmaxBandit(np.array([[0.3, -0.2], [0.1, 0.5]]), [[1.0, 0.2], [0.0, 0.7]],
                     prompt_probs=[0.4, 0.6])

RULES = [
    A.fixed(3),
    A.per_prompt([2, 4]),
    A.pass_rate_allocation([0.3, 0.6], 6, "sgpo"),
    A.pass_rate_allocation([0.3, 0.9], 7, "vip"),
    A.pass_rate_allocation([0.1, 0.6], 7, "knapsack"),
    A.dynamic_sampling(3),
    A.conformal_stopping((2, 3, 4)),
    A.conformal_stopping((2, 4), agree="reward"),
    A.conformal_stopping((2, 3, 4), qhat=0.7, agree="reward"),
    A.conformal_stopping((2, 3, 4), qhat=(0.9, 0.6, 1.0), agree="reward"),
    A.conformal_stopping((2, 3, 4), qhat=0.5, score="pass_rate"),
    A.max_variance_subset(4, 2),
    A.max_variance_subset(5, 3),
    A.successive_elimination(2, 2, 3),
    A.balanced_elimination(2, 2, 3),
]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
@pytest.mark.parametrize("estimator,normaliser", [("grpo", "group"), ("grpo_mean", "token"),
                                                  ("vanilla", "group"), ("oracle", "token")])
def test_dp_equals_brute_force_enumeration(rule, estimator, normaliser):
    res = A.audit(TINY, rule, estimator, normaliser=normaliser)
    ref = A.enumerate_rule(TINY, rule, estimator, normaliser)
    np.testing.assert_allclose(np.ravel(res.mean), ref.mean, rtol=0, atol=1e-13)
    np.testing.assert_allclose(res.mse, ref.mse, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(res.expected_rollouts, ref.expected_rollouts, rtol=1e-12)
    np.testing.assert_allclose(res.acceptance, ref.acceptance, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(res.prompt_rollouts, ref.prompt_rollouts, rtol=1e-12)


@pytest.mark.parametrize("estimator", ["grpo", "grpo_mean", "vanilla", "oracle"])
def test_fixed_group_size_is_the_package_exact_mse(estimator):
    for B in (1, 3):
        res = A.audit(TINY, A.fixed(4), estimator, batch_size=B)
        assert res.mse == pytest.approx(exact_mse(TINY, estimator, 4, B), rel=1e-12)
    if estimator != "grpo_mean":
        assert res.bias_norm < 1e-15


def test_unequal_group_sizes_mean_centred_factor():
    """Leave-one-out stays unbiased with per-prompt G_x; the mean-centred advantage weights prompt
    x by (G_x - 1) / G_x under the group normaliser and by (G_x - 1) / E[G] under the token one."""
    sizes = np.array([2, 5])
    rule = A.per_prompt(sizes)
    g_x = np.asarray(TINY.problem().prompt_gradients())
    f = np.asarray(TINY.problem().prompt_probs)
    assert A.audit(TINY, rule, "grpo").bias_norm < 1e-15
    mean = np.ravel(A.audit(TINY, rule, "grpo_mean").mean)
    np.testing.assert_allclose(mean, ((f * (sizes - 1) / sizes)[:, None] * g_x).sum(0),
                               atol=1e-15)
    token = np.ravel(A.audit(TINY, rule, "grpo_mean", normaliser="token").mean)
    np.testing.assert_allclose(token, ((f * (sizes - 1) / (f @ sizes))[:, None] * g_x).sum(0),
                               atol=1e-15)
    w = A.audit(TINY, rule, "grpo").prompt_weights
    np.testing.assert_allclose(w, f, rtol=1e-12)


def test_data_dependent_rules_are_biased_and_fixed_is_not():
    """The rival: a rule that reads the current samples is shown not to equal the unbiased mean."""
    grad = np.ravel(exact_gradient(TINY))
    assert np.max(np.abs(np.ravel(A.audit(TINY, A.fixed(4)).mean) - grad)) < 1e-15
    for rule in (A.conformal_stopping((2, 4)), A.max_variance_subset(4, 2),
                 A.successive_elimination(2, 2, 3), A.balanced_elimination(2, 2, 3)):
        res = A.audit(TINY, rule)
        assert res.relative_bias > 0.01, rule.name
    # DAPO with leave-one-out only reweights prompts: each prompt's conditional mean is g(x)/a(x)
    res = A.audit(TINY, A.dynamic_sampling(3))
    a = res.acceptance
    f = res.prompt_probs
    np.testing.assert_allclose(res.slot_weights, f * a / (f @ a), rtol=1e-12)
    np.testing.assert_allclose(res.prompt_weights, f / (f @ a), rtol=1e-12)


@pytest.mark.parametrize("p,probs,loo,mean_centred,rollouts", [
    (0.1, (0.1, 0.6, 0.3), 0.3784, 0.4560, 5.24),
    (0.6, (0.6, 0.3, 0.1), 0.4311, 0.5022, 5.24),
    (0.9, (0.9, 0.05, 0.05), 0.6402, 0.6852, 3.11),
])
def test_conformal_stopping_reproduces_the_first_enumeration(p, probs, loo, mean_centred, rollouts):
    """C-GRPO (grid 2, 4, 8; qhat = 1) on one softmax prompt whose correct response has
    probability p: the gradient keeps its direction but shrinks by 0.38 / 0.43 / 0.64."""
    bandit = SoftmaxBandit(np.log([probs]), [[1.0, 0.0, 0.0]])
    rule = A.conformal_stopping((2, 4, 8))
    res = A.audit(bandit, rule, "grpo")
    assert res.relative_bias == pytest.approx(loo, abs=5e-5)
    assert res.cosine > 0.999
    assert res.expected_rollouts == pytest.approx(rollouts, abs=1e-12)
    assert A.audit(bandit, rule, "grpo_mean").relative_bias == pytest.approx(mean_centred,
                                                                             abs=5e-5)


def test_token_normaliser_large_batch_model_is_exact_for_constant_groups():
    """For a rule that always keeps k responses the token normaliser is 1/k at every B."""
    a = A.audit(TINY, A.max_variance_subset(4, 2), "grpo", normaliser="token")
    b = A.audit(TINY, A.max_variance_subset(4, 2), "grpo", normaliser="group")
    np.testing.assert_allclose(np.ravel(a.mean), np.ravel(b.mean), atol=1e-15)
    assert a.mse == pytest.approx(b.mse, rel=1e-12)


def test_summary_follows_the_result_interface():
    res = A.audit(TINY, A.conformal_stopping((2, 4)), batch_size=2)
    table = res.summary()
    assert list(table.index) == list(A.result.SUMMARY_ROWS)
    assert table.loc["mse", "estimate"] == res.mse
    assert table.loc["expected_rollouts", "estimate"] == res.expected_rollouts
    assert res.batch_rollouts == pytest.approx(2 * res.expected_rollouts)
    assert res.mean.shape == res.bias.shape == np.shape(exact_gradient(TINY))


def test_audit_doctest():
    failed, tried = doctest.testmod(importlib.import_module("grpo_theory.allocation.auditor"),
                                   verbose=False)
    assert tried > 0 and failed == 0


def test_registry():
    assert {"fixed", "dapo", "cgrpo", "pods", "reinforce_ada",
            "reinforce_ada_balanced"} <= set(A.available_rules())
    assert A.get_rule("cgrpo") is A.get_rule("conformal_stopping")
    rule = A.fixed(3)
    assert A.get_rule(rule) is rule


@pytest.mark.parametrize("rule", [A.fixed(1), A.per_prompt([1, 3])])
def test_a_group_too_small_for_the_estimator_is_refused_by_name(rule):
    with pytest.raises(ValueError, match=re.escape(f"rule '{rule.name}'") + ".*fewer than estimator"):
        A.audit(TINY, rule, "grpo")


# every response of the second prompt rewarded: with these logits its pass rate sum(p mu) rounds
# to 1 + 2^-52, and scipy's binom.pmf is NaN for a probability above 1 (the case that made the
# answer-agreement audit NaN before the pass rate was clipped)
ALL_RIGHT = SoftmaxBandit(np.array([[0.3, -0.2, 1.1, 0.0],
                                    [-0.12853466294403426, 1.3664634705496859,
                                     -0.6651946734866135, 0.3515100700930197]]),
                          [[1.0, 0.0, 0.0, 0.5], [1.0, 1.0, 1.0, 1.0]])


@pytest.mark.parametrize("rule", [A.fixed(3), A.dynamic_sampling(3), A.conformal_stopping((2, 3)),
                                  A.conformal_stopping((2, 3), agree="reward"),
                                  A.max_variance_subset(4, 2)], ids=lambda r: r.name)
def test_a_prompt_whose_every_response_is_rewarded(rule):
    res = A.audit(ALL_RIGHT, rule)
    ref = A.enumerate_rule(ALL_RIGHT, rule)
    assert np.isfinite(res.mse) and np.all(np.isfinite(res.mean))
    np.testing.assert_allclose(np.ravel(res.mean), ref.mean, rtol=0, atol=1e-13)
    np.testing.assert_allclose(res.mse, ref.mse, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("rule", [A.fixed(4), A.dynamic_sampling(4, 3),
                                  A.conformal_stopping((2, 4))], ids=lambda r: r.name)
def test_pass_k_estimators_are_audited_against_grad_pass_k(rule):
    """PKPO's estimators target grad pass@k (Estimator.pass_k = 2): the audit's gradient is that
    target, equal to the brute-force enumeration's, and under the fixed rule their bias is zero
    and their MSE the exact one; the rival target grad J would report a 40% bias there."""
    from grpo_theory.core import batch_moments

    for est in ("pkpo", "pkpo_loo1"):
        res = A.audit(TINY, rule, est, batch_size=2)
        ref = A.enumerate_rule(TINY, rule, est)
        np.testing.assert_allclose(np.ravel(res.mean), ref.mean, rtol=0, atol=1e-13)
        want = np.asarray(TINY.problem().pass_k_gradient(2))
        np.testing.assert_allclose(np.ravel(res.gradient), want, rtol=1e-12, atol=1e-15)
        one = A.audit(TINY, rule, est)
        np.testing.assert_allclose(one.mse, ref.mse, rtol=1e-12, atol=1e-15)
        if rule.name == "fixed(4)":
            assert res.relative_bias < 1e-12
            assert res.mse == pytest.approx(batch_moments(TINY, est, 4, 2).mse, rel=1e-12)
            g_j = np.asarray(TINY.problem().gradient())
            assert np.linalg.norm(np.ravel(res.mean) - g_j) / np.linalg.norm(g_j) > 0.05
