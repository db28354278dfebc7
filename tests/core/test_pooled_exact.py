"""The exact pooled route (``batch_moments(route="pooled")``) and the PooledForm contract.

Rivals excluded: the pooled route equals the counts route (a separately coded enumeration of
batch states that calls the registered advantage) to rounding, so a wrong dynamic programme or a
pooled form that differs from the estimator fails; at a batch size the counts route cannot
reach, Monte Carlo's interval covers it, while leave-one-out's MSE at the same (B, G) (the rival
law: pooling changes nothing) lies outside.
"""

import numpy as np
import pytest

from grpo_theory.core import (Estimator, PooledForm, SoftmaxBandit, batch_moments,
                              get_estimator, mc_mse)
from grpo_theory.problems import scaling_family_bandit


def _toy():
    p = np.array([0.1, 0.3, 0.6, 0.9])
    return SoftmaxBandit(np.log(np.stack([p, 1 - p], 1)), [[1.0, 0.0]] * 4)


@pytest.mark.parametrize("name", ["jspo", "jspo_pooled"])
@pytest.mark.parametrize("problem,G,B", [(_toy(), 2, 2), (_toy(), 4, 3), (_toy(), 3, 5),
                                         (scaling_family_bandit(0.1), 5, 3)])
def test_pooled_route_equals_the_counts_route(name, problem, G, B):
    a = batch_moments(problem, name, G, B, route="counts")
    b = batch_moments(problem, name, G, B, route="pooled")
    assert b.route == "pooled"
    assert b.second == pytest.approx(a.second, rel=1e-12, abs=1e-15)
    assert b.mse == pytest.approx(a.mse, rel=1e-12, abs=1e-15)
    assert b.power == pytest.approx(a.power, rel=1e-12)
    np.testing.assert_allclose(b.prompt_means, a.prompt_means, rtol=1e-11, atol=1e-15)


def test_one_group_needs_no_others_where_the_form_allows_it():
    a = batch_moments(_toy(), "jspo_pooled", 4, 1, route="counts")
    b = batch_moments(_toy(), "jspo_pooled", 4, 1, route="pooled")
    assert b.mse == pytest.approx(a.mse, rel=1e-12)
    with pytest.raises(ValueError, match="batch_size >= 2"):
        batch_moments(_toy(), "jspo", 4, 1, route="pooled")


@pytest.mark.parametrize("name", ["jspo", "jspo_pooled"])
def test_pooled_form_is_the_estimator(name):
    """A group's pooled advantage from the others' summed statistics is the batch advantage, on
    rewards that are not binary."""
    est = get_estimator(name)
    z = np.random.default_rng(0).normal(size=(3, 5, 4))
    full = np.asarray(est(z))
    t = np.asarray(est.pooled.statistic(z))  # (3, 5, d)
    for x in range(5):
        others = t.sum(axis=1) - t[:, x]
        np.testing.assert_allclose(np.asarray(est.pooled.advantage(z[:, x], others, 4)),
                                   full[:, x], rtol=1e-10, atol=1e-12)


def test_auto_takes_the_pooled_route_where_counts_would_not_fit():
    small = batch_moments(_toy(), "jspo", 4, 3)
    assert small.route == "counts"
    big = batch_moments(_toy(), "jspo", 4, 32, max_states=200_000)
    assert big.route == "pooled"


def test_large_batch_against_monte_carlo_and_the_rival_law():
    """B = 32, G = 4 on the toy: 10^7 batch states for the counts route."""
    exact = batch_moments(_toy(), "jspo", 4, 32)
    loo = batch_moments(_toy(), "grpo", 4, 32)
    assert exact.route == "pooled"
    mc = mc_mse(_toy(), "jspo", 4, 32, n_reps=20_000, seed=1)
    lo, hi = mc.interval()
    assert lo <= exact.mse <= hi
    assert not lo <= loo.mse <= hi  # leave-one-out's MSE is the rival: pooling must matter


def test_route_and_contract_errors_name_the_fix():
    with pytest.raises(ValueError, match="route='pooled' needs an estimator with a pooled form"):
        batch_moments(_toy(), "grpo", 4, 2, route="pooled")
    with pytest.raises(ValueError, match="design='each'"):
        batch_moments(_toy(), "jspo", 4, 4, design="each", route="pooled")
    with pytest.raises(ValueError, match="PooledForm of a batch-coupled estimator"):
        Estimator("x", lambda z, ctx: z, pooled=PooledForm(lambda z: z, lambda z, t, n: z))
