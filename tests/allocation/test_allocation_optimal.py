"""The MSE-optimal unbiased allocation: constants, greedy = brute force, the alike-prompts
reduction to G* = 1 + sqrt(c3/c1), matched budgets and the plug-in from noisy estimates."""

import itertools

import numpy as np
import pytest

import grpo_theory as gt
from grpo_theory.allocation.optimal import (PromptConstants, estimated_constants,
                                            greedy_allocation, optimal_allocation,
                                            plug_in_mse, prompt_constants, uniform_allocation)
from grpo_theory.core.exact import exact_prompt_mse
from grpo_theory.core.policies import SoftmaxBandit
from grpo_theory.problems import default_bandit, scaling_family_bandit


@pytest.fixture(scope="module")
def family():
    return scaling_family_bandit(0.1)


def test_constants_reproduce_exact_prompt_mse_and_scaling_constants(family):
    c = prompt_constants(family)
    for G in (2, 4, 7, 33):
        np.testing.assert_allclose(c.variance(G), np.asarray(exact_prompt_mse(family, "grpo", G)),
                                   rtol=1e-10, atol=1e-14)
        assert c.mse(G, batch_size=3) == pytest.approx(gt.exact_mse(family, "grpo", G, 3),
                                                       rel=1e-10)
    s, ref = c.scaling, gt.scaling_constants(family)
    assert (s.c1, s.c2, s.c3) == pytest.approx((ref.c1, ref.c2, ref.c3), rel=1e-10)


def test_prompt_baseline_estimators_have_no_pair_term():
    b = default_bandit()
    c = prompt_constants(b, "oracle")
    assert np.all(c.b == 0)
    np.testing.assert_allclose(c.variance(5), np.asarray(exact_prompt_mse(b, "oracle", 5)),
                               rtol=1e-10)


def _brute(c: PromptConstants, total: int):
    """min over all integer allocations with sum G = total (G >= 2) of sum_x v_x(G_x)."""
    P = c.n_prompts
    best = np.inf
    for head in itertools.product(range(2, total - 2 * (P - 1) + 1), repeat=P - 1):
        last = total - sum(head)
        if last < 2:
            continue
        best = min(best, float(np.sum(c.variance(np.array(head + (last,), float)))))
    return best


@pytest.mark.parametrize("total", [8, 11, 17, 26])
def test_greedy_equals_brute_force_over_all_allocations(family, total):
    c = prompt_constants(family)  # 4 prompts with uniform f: sum G = 4 m
    G = greedy_allocation(c.a, c.b, total)
    assert G.sum() == total and G.min() >= 2
    got = float(np.sum(c.variance(G.astype(float))))
    assert got == pytest.approx(_brute(c, total), rel=1e-12)
    opt = optimal_allocation(c, total / 4)  # the population form gives the same optimum
    assert 4 * opt.mse - 4 * c.c1 == pytest.approx(got, rel=1e-12)
    assert np.allclose(opt.group_sizes, np.round(opt.group_sizes))


def test_greedy_on_a_batch_with_repeated_prompts_matches_brute_force():
    c = prompt_constants(default_bandit())
    idx = np.array([0, 0, 3])
    a, b = c.a[idx], c.b[idx]
    G = greedy_allocation(a, b, 15)
    sub = PromptConstants(a, b, 0.0, np.full(3, 1 / 3), "grpo")
    assert float(np.sum(sub.variance(G.astype(float)))) == pytest.approx(_brute(sub, 15),
                                                                         rel=1e-12)


def test_uniform_weights_are_not_optimal_when_prompts_differ(family):
    """The rival: uniform G at the same budget is strictly worse (the check can fail)."""
    c = prompt_constants(family)
    for m in (3.0, 8.0, 20.0):
        assert optimal_allocation(c, m).mse < uniform_allocation(c, m).mse * (1 - 1e-3)


def test_alike_prompts_reduce_to_the_scaling_law_optimum():
    logits = np.tile([[0.3, -0.2, 1.1]], (5, 1))
    for mu_row in ([0.2, 0.9, 0.5], [0.45, 0.55, 0.5]):
        b = SoftmaxBandit(logits, np.tile([mu_row], (5, 1)))
        o = gt.optimal_group_size(b)
        al = optimal_allocation(b)
        np.testing.assert_array_equal(al.group_sizes, np.full(5, float(o.exact)))
        c = o.constants
        G = o.exact
        assert al.budget_mse == pytest.approx(c.c1 * G + c.c2 + c.c3 / (G - 1), rel=1e-10)


def test_free_budget_optimum_beats_every_greedy_point_and_uniform(family):
    c = prompt_constants(family)
    al = optimal_allocation(c)
    for m in np.arange(2.0, 40.0, 0.25):
        assert al.budget_mse <= m * optimal_allocation(c, m).mse + 1e-15
    G = gt.optimal_group_size(family).exact
    assert al.budget_mse < G * uniform_allocation(c, G).mse


def test_matched_budget_randomises_one_prompt_and_interpolates(family):
    c = prompt_constants(family)
    al = optimal_allocation(c, 5.3)
    assert al.expected_rollouts == pytest.approx(5.3, rel=1e-12)
    frac = al.group_sizes - np.floor(al.group_sizes)
    assert np.sum(frac > 1e-12) == 1
    lo, hi = optimal_allocation(c, 5.25), optimal_allocation(c, 5.5)
    assert al.mse == pytest.approx(0.8 * lo.mse + 0.2 * hi.mse, rel=1e-12)


def test_plug_in_from_large_previous_samples_tends_to_the_optimum(family):
    small = plug_in_mse(family, 8.0, n_previous=4, n_draws=40, seed=1)
    large = plug_in_mse(family, 8.0, n_previous=4000, n_draws=40, seed=1)
    assert small.ratio.value >= 1 - 1e-12 and large.ratio.value >= 1 - 1e-12
    assert large.ratio.value < 1 + 1e-3
    assert np.all(small.draws >= small.oracle.mse * (1 - 1e-12))


def test_pass_rate_model_is_a_valid_plug_in(family):
    hat = estimated_constants(family, 16, seed=3, model="pass_rate")
    assert hat.a.shape == (4,) and np.all(hat.a >= 0)
    sizes = optimal_allocation(hat, 8.0).group_sizes
    assert prompt_constants(family).expected_rollouts(sizes) == pytest.approx(8.0)


@pytest.mark.parametrize("call, name", [
    (lambda b: optimal_allocation(b, 1.5), "expected_rollouts"),
    (lambda b: prompt_constants(b, "grpo_mean"), "estimator"),
    (lambda b: prompt_constants(b).variance([2, 3]), "group_sizes"),
    (lambda b: prompt_constants(b).variance(1.0), "group_sizes"),
    (lambda b: greedy_allocation([1.0, 2.0], [0.0, 0.0], 3), "total"),
    (lambda b: greedy_allocation([1.0, -2.0], [0.0, 0.0], 6), "a and b"),
    (lambda b: estimated_constants(b, 0), "n_previous"),
    (lambda b: estimated_constants(b, 4, model="vip"), "model"),
    (lambda b: plug_in_mse(b, 4.0, 4, n_draws=1), "n_draws"),
])
def test_bad_arguments_name_the_argument(family, call, name):
    with pytest.raises(ValueError, match=name):
        call(family)


def test_the_jax_greedy_step_equals_the_heap_allocation():
    """sizes_from_gains (one sort, jit-able: the training loops' step) gives greedy_allocation's
    sizes for the MSE-optimal gains (a + 2b/(G - 1)) / (G (G + 1)); a flat gain table (the rival:
    gains that ignore the constants) does not."""
    import jax.numpy as jnp

    from grpo_theory._precision import float64
    from grpo_theory.allocation import greedy_allocation, sizes_from_gains

    @float64
    def sizes(a, b, total, flat=False):
        G = jnp.arange(2, total, dtype=jnp.float64)[None, :]
        gains = (jnp.asarray(a)[:, None] + 2.0 * jnp.asarray(b)[:, None] / (G - 1)) / (
            G * (G + 1))
        return np.asarray(sizes_from_gains(jnp.ones_like(gains) if flat else gains, total))

    rng = np.random.default_rng(3)
    for B, extra in ((5, 17), (8, 40), (3, 1)):
        a, b = rng.uniform(0.1, 2.0, B), rng.uniform(0.0, 3.0, B)
        total = 2 * B + extra
        got = sizes(a, b, total)
        np.testing.assert_array_equal(got, greedy_allocation(a, b, total))
        flat = sizes(a, b, total, flat=True)
        assert flat.sum() == total
        if B > 3:
            assert not np.array_equal(flat, got)
