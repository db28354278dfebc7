"""Exact moments by count states (``core.batch_exact``) against brute force and Monte Carlo;
the baselines beyond the prompt (``core.baselines``): JSPO from its code, the score-norm weights.

Rivals each check excludes: the wrong estimator (brute force of one estimator against the count
route of another must differ), the self-inclusive forms for "unbiased", the independent design
for the one-of-each numbers.
"""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from grpo_theory import allocation
from grpo_theory.core import (DiscreteProblem, PromptContext, SoftmaxBandit, batch_moments,
                              enumerated_moments, exact_mse, get_estimator, mc_mse)


def _toy(p):
    """B prompts, each a two-armed softmax with pass rate p_x (reward 1 on the first arm)."""
    p = np.asarray(p, np.float64)
    return SoftmaxBandit(np.log(np.stack([p, 1 - p], 1)), [[1.0, 0.0]] * len(p))


def _mixed():
    """Two prompts, three arms with partial rewards: several scores per reward class."""
    return SoftmaxBandit([[0.0, 1.0, -1.0], [0.5, 0.0, 0.0]], [[1.0, 0.0, 0.5], [0.2, 0.9, 0.0]])


def _each_brute(bandit, estimator, G):
    """Every outcome of a batch holding each prompt once (B = P): (E ghat, MSE)."""
    pr = bandit.problem()
    est = get_estimator(estimator)
    P, K = pr.n_prompts, pr.n_responses
    p, mu = np.asarray(pr.probs), np.asarray(pr.reward_means)
    S = np.asarray(pr.scores)
    groups = list(itertools.product(range(2 * K), repeat=G))  # atoms (y, z) = divmod(a, 2)
    mean, second = 0.0, 0.0
    grad = np.asarray(pr.gradient())
    for combo in itertools.product(groups, repeat=P):
        a = np.array(combo)
        y, z = a // 2, (a % 2).astype(float)
        x = np.arange(P)[:, None]
        prob = np.prod(p[x, y] * np.where(z == 1, mu[x, y], 1 - mu[x, y]))
        if prob == 0:
            continue
        ctx = PromptContext(prompt=jnp.arange(P), value=pr.values(),
                            optimal_baseline=pr.optimal_baselines(),
                            score_sq=jnp.asarray(np.sum(S**2, -1)[x, y]))
        adv = np.asarray(est.advantage(jnp.asarray(z), ctx))
        g = np.einsum("bg,bgd->d", adv, S[x, y]) / (P * G)
        mean = mean + prob * g
        second += prob * np.sum((g - grad) ** 2)
    return mean, second


@pytest.mark.parametrize("name,bandit,G,B", [
    ("jspo", _toy([0.2, 0.7]), 2, 2),
    ("jspo_pooled", _toy([0.2, 0.7]), 2, 2),
    ("jspo", _mixed(), 2, 2),
    ("reinforce_plus_plus_baseline_verl", _mixed(), 2, 2),
    ("grpo_std_trl_batch", _toy([0.2, 0.7]), 3, 2),
    ("norm_weighted", _mixed(), 3, 1),
    ("norm_weighted", _mixed(), 2, 2),
    ("norm_weighted_loo", _mixed(), 3, 1),
    ("grpo_std", _mixed(), 3, 1),
])
def test_count_states_equal_brute_force(name, bandit, G, B):
    mean, mse = enumerated_moments(bandit, name, G, B)
    bm = batch_moments(bandit, name, G, B)
    np.testing.assert_allclose(bm.mean, np.asarray(mean), rtol=1e-9, atol=1e-13)
    assert bm.mse == pytest.approx(mse, rel=1e-9, abs=1e-14)


@pytest.mark.parametrize("name,bandit,G", [
    ("jspo", _toy([0.2, 0.7]), 2), ("jspo_pooled", _mixed(), 2), ("norm_weighted", _mixed(), 2),
    ("grpo", _toy([0.3, 0.6]), 3),
])
def test_each_design_equals_brute_force(name, bandit, G):
    mean, mse = _each_brute(bandit, name, G)
    bm = batch_moments(bandit, name, G, design="each")
    np.testing.assert_allclose(bm.mean, mean, rtol=1e-9, atol=1e-13)
    assert bm.mse == pytest.approx(mse, rel=1e-9, abs=1e-14)


def test_brute_force_tells_estimators_apart():
    """The rival: the count route of JSPO++ against JSPO's brute force must differ."""
    b = _toy([0.2, 0.7])
    _, mse = enumerated_moments(b, "jspo", 2, 2)
    assert abs(batch_moments(b, "jspo_pooled", 2, 2).mse - mse) > 1e-4 * mse


@pytest.mark.parametrize("name", ["grpo", "grpo_mean", "grpo_std", "vanilla"])
def test_routes_agree_with_the_binary_route(name):
    """Counts, classes and the package's binary route: three codings of one number."""
    b = _mixed()
    ref = exact_mse(b, name, 3, 2, method="binary")
    assert batch_moments(b, name, 3, 2, route="counts").mse == pytest.approx(ref, rel=1e-10)
    assert batch_moments(b, name, 3, 2, route="classes").mse == pytest.approx(ref, rel=1e-10)


def test_jspo_toy_numbers():
    """One of each prompt per batch: JSPO is unbiased, 0.593 x RLOO's MSE at G = 4, 0.567 x at
    G = 2, 0.231 x at four pass rates of 0.5; the independent design gives another number."""
    toy = _toy([0.1, 0.3, 0.6, 0.9])
    ratio = {}
    for G in (2, 4):
        js = batch_moments(toy, "jspo", G, design="each")
        assert js.relative_bias < 1e-12
        ratio[G] = js.mse / batch_moments(toy, "grpo", G, design="each").mse
    assert (round(ratio[4], 3), round(ratio[2], 3)) == (0.593, 0.567)
    half = _toy([0.5] * 4)
    r = batch_moments(half, "jspo", 4, design="each").mse / batch_moments(
        half, "grpo", 4, design="each").mse
    assert round(r, 3) == 0.231
    ind = batch_moments(toy, "jspo", 4, 4).mse / batch_moments(toy, "grpo", 4, 4).mse
    assert round(ind, 3) == 0.852  # prompts drawn independently: less to borrow


def test_jspo_pooled_is_biased():
    """The rival of "unbiased": the pooled (self-inclusive) form must fail it."""
    toy = _toy([0.1, 0.3, 0.6, 0.9])
    assert batch_moments(toy, "jspo_pooled", 4, design="each").relative_bias > 0.05


def test_norm_weighted_keeps_a_share_of_the_gradient():
    """Self-inclusive weights keep 11%, 29%, 54% at p = 0.1 (36%, 67%, 85% at p = 0.3) of the
    true gradient at G = 2, 4, 8; the leave-one-out form keeps all of it."""
    for p, want in ((0.1, (0.11, 0.29, 0.54)), (0.3, (0.36, 0.67, 0.85))):
        one = _toy([p])
        kept = tuple(round(batch_moments(one, "norm_weighted", G).kept, 2) for G in (2, 4, 8))
        assert kept == want
        for G in (2, 4, 8):
            assert batch_moments(one, "norm_weighted_loo", G).relative_bias < 1e-12


def test_jspo_matches_its_code_on_one_batch():
    """JSPO's advantage against a literal transcription of the code's loops (commit 6071c3bb)."""
    rng = np.random.default_rng(0)
    z = rng.integers(0, 2, (5, 4)).astype(float)
    n, m = z.shape
    want = np.zeros_like(z)
    for i in range(n):
        others = [y for y in range(n) if y != i]
        means = np.array([z[y].mean() for y in others])
        vars_ = np.array([z[y].var(ddof=1) / m for y in others])
        bm = means.mean()
        v2, s2 = vars_.mean(), ((means - bm) ** 2).mean()
        lam = v2 / (v2 + s2 + 1e-6)
        rloo = (z[i].sum() - z[i]) / (m - 1)
        want[i] = z[i] - (rloo * (1 - lam) + z[others].mean() * lam)
    np.testing.assert_allclose(np.asarray(get_estimator("jspo")(z)), want, rtol=1e-12)
    with pytest.raises(ValueError, match="at least 2 prompts"):
        get_estimator("jspo")(z[:1])


def test_monte_carlo_agrees_with_count_states():
    """mc_mse takes the new estimators; its CI covers the exact MSE (independent design)."""
    toy = _toy([0.1, 0.3, 0.6, 0.9])
    for name in ("jspo", "norm_weighted"):
        exact = batch_moments(toy, name, 4, 4).mse
        mc = mc_mse(toy, name, 4, 4, n_reps=20_000, seed=3)
        assert mc.contains(exact, alpha=0.001), (name, exact, mc.value)


def test_audit_takes_batch_and_weighted_estimators():
    toy = _toy([0.1, 0.3, 0.6, 0.9])
    a = allocation.audit(toy, allocation.fixed(4), estimator="jspo", batch_size=4, design="each")
    assert a.mse == pytest.approx(batch_moments(toy, "jspo", 4, design="each").mse, rel=1e-12)
    assert a.bias_norm < 1e-12
    np.testing.assert_allclose(a.prompt_weights, 0.25, atol=1e-12)
    w = allocation.audit(toy, allocation.fixed(4), estimator="norm_weighted", batch_size=4)
    assert w.relative_bias > 0.3 and np.all(w.prompt_weights < 0.25)
    with pytest.raises(ValueError, match="fixed rule only"):
        allocation.audit(toy, allocation.conformal_stopping((2, 4)), estimator="jspo",
                         batch_size=4)


def test_bad_input_is_refused():
    toy = _toy([0.2, 0.7])
    with pytest.raises(ValueError, match="batch_size must be the number of prompts 2"):
        batch_moments(toy, "jspo", 2, 3, design="each")
    skew = DiscreteProblem.create([0.3, 0.7], toy.problem().probs, toy.problem().scores,
                                  toy.problem().reward_means)
    with pytest.raises(ValueError, match="prompt_probs must be uniform"):
        batch_moments(skew, "jspo", 2, design="each")
    with pytest.raises(ValueError, match="couples the prompts"):
        batch_moments(toy, "jspo", 2, 2, route="classes")
    with pytest.raises(ValueError, match="per-response weights"):
        batch_moments(toy, "norm_weighted", 2, 2, route="counts")
    with pytest.raises(ValueError, match="max_states=10"):
        batch_moments(toy, "jspo", 4, 4, max_states=10)
    with pytest.raises(ValueError, match="design must be one of"):
        batch_moments(toy, "jspo", 2, 2, design="pairs")


@pytest.mark.parametrize("name", ["jspo", "norm_weighted_loo", "norm_weighted"])
def test_training_takes_the_new_estimators(name):
    """The bandit training loop passes each response's squared score norm (and the batch)."""
    import grpo_theory as gt

    toy = _toy([0.1, 0.3, 0.6, 0.9])
    r = gt.train(toy, name, 4, 4, 30, eta=0.5, seeds=[0])
    obj = np.asarray(r.objective)
    assert np.all(np.isfinite(obj)) and obj[..., -1].item() > obj[..., 0].item()
