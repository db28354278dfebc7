"""The one bandit loop under a rollout rule (``TrainConfig(rule=...)``): the rule's step with the
problem's sampler, the estimator's masked advantages, the rollouts spent; the masked forms equal
each estimator's advantage on the kept responses as a group of their own."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_theory import allocation as A
from grpo_theory import problems
from grpo_theory.core import (GradientProblem, LinearSoftmaxBandit, ProblemSampler,
                              PromptContext, available_estimators, get_estimator, loo_weights)
from grpo_theory.optim import TrainConfig, make_train, seed_keys, train_batch


def _bandit():
    rng = np.random.default_rng(3)
    return LinearSoftmaxBandit(rng.normal(size=(3, 4, 2)), np.zeros(2),
                               rng.uniform(0.05, 0.8, size=(3, 4)))


def _reference(keys, theta0, policy, lr, *, rule, B, n, masked=True, shift=0):
    return _reference_jit(keys, theta0, policy, lr, jnp.asarray(masked), jnp.asarray(shift),
                          rule=rule, B=B, n=n)


@partial(jax.jit, static_argnames=("rule", "B", "n"))
def _reference_jit(keys, theta0, policy, lr, masked, shift, *, rule, B, n):
    """The rule study's own scan before it moved into the loop (vmapped over keys, as it ran):
    rule.step with the problem's sampler, leave-one-out weights on the kept responses,
    theta += lr ghat."""
    return jax.vmap(lambda k: _one(k, theta0, policy, lr, rule, B, n, masked, shift))(keys)


def _one(key, theta0, policy, lr, rule, B, n, masked, shift):
    def step(carry, t):
        theta, state = carry
        dp = policy.problem(theta)
        st = rule.step(jax.random.fold_in(key, t + shift), ProblemSampler(dp), B, state)
        mask = jnp.where(masked, st.mask, jnp.ones_like(st.mask))
        w, _ = loo_weights(st.draw.z, mask)
        ghat = jnp.einsum("bg,bgd->d", w, dp.scores[st.draw.x[:, None], st.draw.y])
        theta = theta + lr * ghat.reshape(theta.shape)
        return (theta, st.state), (policy.problem(theta).objective(), st.rollouts)

    state0 = ProblemSampler(policy.problem(theta0)).init_state()
    _, (J, spent) = jax.lax.scan(step, (theta0, state0), jnp.arange(1, n + 1))
    return J, jnp.cumsum(spent)


RULES = [A.fixed(4), A.dynamic_sampling(4, 3), A.conformal_stopping((2, 4, 8), qhat=1.0,
                                                                    agree="answer"),
         A.optimal_rule(4, 16)]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_the_loop_under_a_rule_is_the_rules_step_bit_for_bit(rule):
    """Rivals: the same scan on the stream shifted by one step, and, for the rules that stop
    early or allocate, every drawn response kept (the mask ignored): both move elsewhere."""
    pol = _bandit()
    cfg = TrainConfig(batch_size=3, n_steps=6, lr=0.5, log_every=1, rule=rule)
    _, keys = seed_keys([0, 5])
    res = train_batch(pol, "grpo", cfg, keys, sup_objective=1.0)
    theta0 = jnp.asarray(pol.params, jnp.float64)
    J, spent = _reference(keys, theta0, pol, 0.5, rule=rule, B=3, n=6)
    np.testing.assert_array_equal(np.asarray(res.objective)[:, 1:], np.asarray(J))
    np.testing.assert_array_equal(np.asarray(res.rollouts)[:, 1:], np.asarray(spent))
    assert np.all(np.asarray(res.rollouts)[:, 0] == 0.0)
    Js, _ = _reference(keys, theta0, pol, 0.5, rule=rule, B=3, n=6, shift=1)
    assert np.abs(np.asarray(Js) - np.asarray(J)).max() > 1e-6
    if isinstance(rule, (A.ConformalStopping, A.OptimalAllocation)):
        Jr, _ = _reference(keys, theta0, pol, 0.5, rule=rule, B=3, n=6, masked=False)
        assert np.abs(np.asarray(Jr) - np.asarray(J)).max() > 1e-6


def test_the_fixed_path_counts_its_rollouts():
    res = make_train(_bandit(), "grpo", TrainConfig(batch_size=3, group_size=5, n_steps=4,
                                                    log_every=2))(0)
    assert np.asarray(res.rollouts).tolist() == [0.0, 30.0, 60.0]


def _compact(z, mask):
    """Each row's kept responses, in order (rows of equal kept size)."""
    idx = np.argsort(~mask.astype(bool), axis=1, kind="stable")
    n = int(mask[0].sum())
    return np.take_along_axis(z, idx, axis=1)[:, :n], idx[:, :n]


MASKED = [n for n in available_estimators() if get_estimator(n).masked is not None]


@pytest.mark.parametrize("name", MASKED)
def test_masked_forms_are_the_advantage_of_the_kept_group(name):
    """Rival: the estimator's advantage over the whole drawn row (dropped responses included)."""
    est = get_estimator(name)
    rng = np.random.default_rng(7)
    B, W = 40, 6
    z = (rng.uniform(size=(B, W)) < 0.5).astype(np.float64)
    x = rng.integers(0, 3, B)
    ctx = PromptContext(prompt=jnp.asarray(x), value=jnp.asarray([0.2, 0.5, 0.7])[x],
                        optimal_baseline=jnp.asarray([0.3, 0.4, 0.6])[x])
    for n in range(max(2, est.min_group_size), W + 1):
        mask = np.zeros((B, W))
        for b in range(B):
            mask[b, rng.choice(W, n, replace=False)] = 1.0
        got = np.asarray(est.masked_advantage(jnp.asarray(z), jnp.asarray(mask), ctx))
        zk, idx = _compact(z, mask)
        want = np.asarray(est.advantage(jnp.asarray(zk), ctx))
        np.testing.assert_allclose(np.take_along_axis(got, idx, axis=1), want, atol=1e-12)
        if n < W and name in ("grpo", "grpo_mean", "rloo"):
            full = np.asarray(est.advantage(jnp.asarray(z), ctx))
            assert np.abs(np.take_along_axis(full, idx, axis=1) - want).max() > 0.1


def test_a_rule_config_is_checked_and_every_refusal_names_its_piece():
    with pytest.raises(ValueError, match="group_size must be None with a rule"):
        TrainConfig(batch_size=2, group_size=4, n_steps=2, rule=A.fixed(4))
    with pytest.raises(ValueError, match="group_size is required"):
        TrainConfig(batch_size=2, n_steps=2)
    with pytest.raises(ValueError, match="rule must be None or a rollout rule"):
        TrainConfig(batch_size=2, n_steps=2, rule="fixed")
    with pytest.raises(ValueError, match="max_rounds"):
        TrainConfig(batch_size=2, n_steps=2, rule=A.dynamic_sampling(4))
    cfg = TrainConfig(batch_size=2, n_steps=2, rule=A.fixed(4))
    with pytest.raises(ValueError, match="has no masked form.*Estimator\\(masked="):
        make_train(_bandit(), "grpo_std", cfg)
    with pytest.raises(ValueError, match="reads the whole batch"):
        make_train(_bandit(), "jspo", cfg)


def test_oracle_and_prompt_baselines_train_under_a_rule():
    """The context a masked advantage reads (V(x), b*(x)) is filled under a rule: the oracle and
    the optimal baseline run and move the parameters differently from the leave-one-out (and
    from each other: a context left empty would raise, a wrong one would coincide)."""
    cfg = TrainConfig(batch_size=3, n_steps=6, lr=0.5, log_every=1, rule=RULES[1])
    _, keys = seed_keys([0, 5])
    outs = {n: np.asarray(train_batch(_bandit(), n, cfg, keys, sup_objective=1.0).theta_final)
            for n in ("grpo", "oracle", "optimal")}
    for a, b in (("oracle", "grpo"), ("optimal", "grpo"), ("oracle", "optimal")):
        assert np.abs(outs[a] - outs[b]).max() > 1e-6


def test_a_gradient_problem_is_refused_under_a_rule():
    gb = problems.default_gaussian_bandit()
    assert isinstance(gb, GradientProblem)
    with pytest.raises(ValueError, match="needs an enumerable policy"):
        make_train(gb, "grpo", TrainConfig(batch_size=2, n_steps=2, rule=A.fixed(4)),
                   sup_objective=1.0)
