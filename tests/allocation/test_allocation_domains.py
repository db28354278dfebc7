"""Malformed inputs of the allocation package: the jit-able greedy helpers check their documented
domains on concrete inputs (naming the argument), the Monte Carlo audit of a rule that drops
every group ends with an error (as the exact audit does), and the uncapped dynamic-sampling audit
sums its expected rounds to convergence instead of truncating them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_theory import SoftmaxBandit, allocation
from grpo_theory.allocation import mse_gains, sizes_from_gains, unique_answer_constants
from grpo_theory.allocation import reference

GAINS = jnp.array([[0.5, 0.2, 0.1], [0.4, 0.3, 0.0]])


@pytest.mark.parametrize("kw, match", [
    (dict(total=11), "total must be an integer <= 10"),
    (dict(total=3), "total must be an integer >= 4"),
    (dict(total=7.0), "total must be an integer"),
    (dict(total=7, min_size=0), "min_size must be an integer >= 1"),
    (dict(total=7, min_size=2.5), "min_size must be an integer"),
    (dict(gains=GAINS.at[0, 1].set(jnp.nan), total=7), "gains must not be NaN"),
    (dict(gains=GAINS[0], total=3), r"gains must be a \(B, n\) array")])
def test_sizes_from_gains_domain(kw, match):
    kw = dict(dict(gains=GAINS), **kw)
    with pytest.raises(ValueError, match=match):
        sizes_from_gains(kw.pop("gains"), **kw)


def test_the_unchecked_route_would_return_a_wrong_allocation():
    """The rival the check excludes: a total outside the range, traced (unchecked), gives sizes
    that do not sum to it; a concrete one is refused."""
    wrong = jax.jit(sizes_from_gains)(GAINS, 11)
    assert int(wrong.sum()) != 11
    below = jax.jit(sizes_from_gains)(GAINS, 3)
    assert int(below.sum()) != 3
    assert np.asarray(sizes_from_gains(GAINS, 7)).tolist() == [3, 4]
    # concrete inputs under jit's static arguments are checked too
    with pytest.raises(ValueError, match="total"):
        jax.jit(sizes_from_gains, static_argnums=1)(GAINS, 11)


@pytest.mark.parametrize("a, b, width, match", [
    ([1.0], [0.0], 2, "width must be an integer >= 3"),
    ([1.0], [0.0], 4.0, "width must be an integer"),
    ([-1.0], [0.0], 4, "a must be finite and >= 0"),
    ([1.0], [np.nan], 4, "b must be finite and >= 0"),
    ([np.inf], [0.0], 4, "a must be finite and >= 0")])
def test_mse_gains_domain(a, b, width, match):
    with pytest.raises(ValueError, match=match):
        mse_gains(jnp.array(a), jnp.array(b), width)


@pytest.mark.parametrize("v, star, s2, match", [
    ([1.5], [1.0], [1.0], r"value must be in \[0, 1\]"),
    ([-0.1], [1.0], [1.0], r"value must be in \[0, 1\]"),
    ([np.nan], [1.0], [1.0], "value"),
    ([0.5], [-1.0], [1.0], "answer_score_sq must be finite and >= 0"),
    ([0.5], [1.0], [np.inf], "score_sq must be finite and >= 0")])
def test_unique_answer_constants_domain(v, star, s2, match):
    with pytest.raises(ValueError, match=match):
        unique_answer_constants(jnp.array(v), jnp.array(star), jnp.array(s2))


def test_the_helpers_still_trace_inside_jit():
    f = jax.jit(lambda g, a, b, v: (sizes_from_gains(g, 7), mse_gains(a, b, 4),
                                    unique_answer_constants(v, a, b)))
    sizes, gains, (a, b) = f(GAINS, jnp.array([6.0, 1.0]), jnp.array([0.0, 1.0]),
                             jnp.array([0.5, 0.2]))
    assert np.asarray(sizes).tolist() == [3, 4] and gains.shape == (2, 2)


def test_monte_carlo_of_a_rule_that_drops_every_group_ends(monkeypatch):
    """The exact audit refuses a rule that drops every group; the Monte Carlo audit used to draw
    for ever (the rival: an unbounded refill loop). Now both refuse, the sampled one at its
    bound on drawn prompts."""
    bandit = SoftmaxBandit(np.log([[0.5, 0.5]]), [[1.0, 1.0]])  # every group all-equal
    with pytest.raises(ValueError, match="every group is dropped"):
        allocation.audit(bandit, allocation.dynamic_sampling(4))
    monkeypatch.setattr(reference, "MAX_DRAWS_EMPTY", 5_000)
    with pytest.raises(ValueError, match=r"kept 0 of the 10 groups .* drops \(almost\) every"):
        allocation.monte_carlo(bandit, allocation.dynamic_sampling(4), n_batches=10)


def test_uncapped_dynamic_sampling_rollouts_are_not_truncated():
    """With B = 1 the rounds are geometric: E[R] = 1 / a, a = 1 - V^G - (1 - V)^G. The rival
    (rounds cut at 10,000 and renormalised, E[R | R <= 10,000]) is 9% low here."""
    p = 1e-4
    bandit = SoftmaxBandit(np.log([[1 - p, p]]), [[0.0, 1.0]])
    a = 1 - (1 - p) ** 2 - p**2
    got = allocation.audit(bandit, allocation.dynamic_sampling(2)).expected_rollouts
    assert got == pytest.approx(2 / a, rel=1e-9)
    rule = allocation.dynamic_sampling(2)
    r, pmf = rule.rounds_pmf(np.array([1.0]), np.array([a]), 1, 10_000)
    truncated = 2 * float(np.dot(r, pmf) / pmf.sum())
    assert abs(truncated - 2 / a) > 0.05 * (2 / a)
    # capped: the conditional mean, as documented (unchanged)
    capped = allocation.audit(bandit, allocation.dynamic_sampling(2, max_rounds=10_000))
    assert capped.expected_rollouts == pytest.approx(truncated, rel=1e-12)
