"""Knapsack RL's allocation: the exact optimum of its value (brute force over every allocation),
its sizes fixed before sampling (so leave-one-out stays unbiased), and its errors."""

import itertools

import numpy as np
import pytest

import grpo_theory.allocation as A
from grpo_theory import SoftmaxBandit
from grpo_theory.allocation.greedy import knapsack_value


def _brute(p, N, lo, hi):
    best = -np.inf
    for g in itertools.product(range(lo, hi + 1), repeat=len(p)):
        if sum(g) == N:
            best = max(best, float(np.sum(knapsack_value(g, p))))
    return best


@pytest.mark.parametrize("p,N,lo,hi", [((0.05, 0.3, 0.6), 18, 2, 12), ((0.5, 0.5, 0.9), 12, 2, 6),
                                        ((0.0, 0.2, 1.0), 9, 1, 5), ((0.33, 0.1), 20, 2, 20)])
def test_the_sizes_maximise_the_value(p, N, lo, hi):
    rule = A.pass_rate_allocation(p, N, "knapsack", min_size=lo, max_size=hi)
    sizes = np.asarray(rule.sizes)
    assert sizes.sum() == N and sizes.min() >= lo and sizes.max() <= hi
    assert np.sum(knapsack_value(sizes, p)) == pytest.approx(_brute(p, N, lo, hi), rel=1e-12)
    # the rival: equal sizes are not optimal where the pass rates differ
    if len(set(p)) > 1 and N % len(p) == 0:
        equal = np.full(len(p), N // len(p))
        assert np.sum(knapsack_value(equal, p)) < _brute(p, N, lo, hi) - 1e-12


def test_hard_prompts_get_the_budget():
    """The paper's point: a rarely solved prompt gets many rollouts, a solved one the minimum."""
    sizes = A.pass_rate_allocation([0.02, 0.3, 0.5, 0.95], 64, "knapsack").sizes
    assert sizes == (36, 16, 10, 2)


def test_fixed_before_sampling_keeps_leave_one_out_unbiased():
    bandit = SoftmaxBandit(np.array([[0.3, -0.2], [0.1, 0.5]]), [[1.0, 0.0], [0.0, 1.0]],
                           prompt_probs=[0.4, 0.6])
    rule = A.pass_rate_allocation([0.2, 0.6], 7, "knapsack")
    assert rule.sizes == (4, 3)
    res = A.audit(bandit, rule, "grpo")
    assert res.bias_norm < 1e-14
    # the rival: the mean-centred advantage weights prompt x by (G_x - 1) / G_x: biased
    assert A.audit(bandit, rule, "grpo_mean").bias_norm > 1e-3


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="budget 30 exceeds max_size 4"):
        A.pass_rate_allocation([0.2, 0.5, 0.7], 30, "knapsack", max_size=4)
    with pytest.raises(ValueError, match="'vip', 'sgpo' or 'knapsack'"):
        A.pass_rate_allocation([0.2, 0.5], 8, "knap")
