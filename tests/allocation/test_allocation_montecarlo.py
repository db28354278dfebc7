"""The allocation auditor against Monte Carlo (within a CI) and the bad-input errors."""

import numpy as np
import pytest

from grpo_theory import SoftmaxBandit
from grpo_theory import allocation as A

TINY = SoftmaxBandit(np.array([[0.3, -0.2], [0.1, 0.5]]), [[1.0, 0.2], [0.0, 0.7]],
                     prompt_probs=[0.4, 0.6])
Z = 4.5  # |z| bound: a per-coordinate family of a few normal tests at ~1e-5 each


@pytest.mark.parametrize("rule,batch_size,normaliser", [
    (A.dynamic_sampling(3), 1, "group"),
    (A.dynamic_sampling(3), 4, "token"),
    (A.conformal_stopping((2, 4)), 1, "group"),
    (A.conformal_stopping((2, 3, 4), qhat=0.7, agree="reward"), 2, "group"),
    (A.max_variance_subset(6, 3), 4, "token"),
    (A.balanced_elimination(2, 3, 4), 1, "group"),
    (A.per_prompt([2, 5]), 3, "group"),
], ids=lambda v: getattr(v, "name", str(v)))
def test_dp_agrees_with_monte_carlo(rule, batch_size, normaliser):
    res = A.audit(TINY, rule, "grpo", batch_size=batch_size, normaliser=normaliser)
    mc = A.monte_carlo(TINY, rule, "grpo", n_batches=8000, batch_size=batch_size,
                       normaliser=normaliser, seed=3)
    z = (np.ravel(res.mean) - mc.mean) / mc.mean_se
    assert np.max(np.abs(z)) < Z
    assert abs(mc.mse.zscore(res.mse)) < Z
    if batch_size == 1 and mc.expected_rollouts.se > 0:
        assert abs(mc.expected_rollouts.zscore(res.expected_rollouts)) < Z
    table = mc.summary()
    assert table.loc["mse", "estimate"] == mc.mse.value


def test_monte_carlo_can_tell_a_biased_rule_from_fixed_g():
    """The rival: Monte Carlo of C-GRPO rejects the unbiased fixed-G mean."""
    rule = A.conformal_stopping((2, 4))
    mc = A.monte_carlo(TINY, rule, "grpo", n_batches=8000, seed=5)
    fixed = np.ravel(A.audit(TINY, A.fixed(4)).mean)
    assert np.max(np.abs((fixed - mc.mean) / mc.mean_se)) > 2 * Z


@pytest.mark.parametrize("call,match", [
    (lambda: A.fixed(0), "group_size"),
    (lambda: A.per_prompt([2, 0]), "group_sizes"),
    (lambda: A.pass_rate_allocation([0.2, 1.5], 8), "pass_rates"),
    (lambda: A.pass_rate_allocation([0.2, 0.5], 3), "budget"),
    (lambda: A.pass_rate_allocation([0.2, 0.5], 8, method="knap"), "method"),
    (lambda: A.dynamic_sampling(1), "group_size"),
    (lambda: A.conformal_stopping((4, 2)), "grid"),
    (lambda: A.conformal_stopping((1, 2)), "grid"),
    (lambda: A.conformal_stopping(qhat=1.5), "qhat"),
    (lambda: A.conformal_stopping(qhat=0.8), "qhat"),
    (lambda: A.conformal_stopping(agree="tokens"), "agree"),
    (lambda: A.max_variance_subset(4, 6), "n"),
    (lambda: A.max_variance_subset(4, 1), "m"),
    (lambda: A.successive_elimination(0), "samples_per_round"),
    (lambda: A.balanced_elimination(final_size=1), "final_size"),
    (lambda: A.audit(TINY, "no_such_rule"), "rule"),
    (lambda: A.audit(TINY, A.fixed(3), "no_such_estimator"), "estimator"),
    # batch-coupled estimators: exact under the fixed rule only (core.batch_moments)
    (lambda: A.audit(TINY, A.conformal_stopping((2, 4)), "grpo_std_trl_batch"), "estimator"),
    (lambda: A.audit(TINY, A.fixed(3), batch_size=0), "batch_size"),
    (lambda: A.audit(TINY, A.fixed(3), normaliser="sequence"), "normaliser"),
    (lambda: A.audit(TINY, A.per_prompt([2, 3, 4])), "group_sizes"),
    (lambda: A.audit(TINY, A.successive_elimination(2, 2, 2)), "rule"),
    (lambda: A.monte_carlo(TINY, A.fixed(3), n_batches=1), "n_batches"),
])
def test_bad_arguments_give_one_line_errors(call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert "\n" not in str(info.value)
