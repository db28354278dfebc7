"""The rules' jit-able training steps (grpo_theory.allocation.steps): every step equals the
rule's own decisions on the same draws (the numpy reference ``Rule.run`` that the exact audit's
enumeration is tested against), the size rules equal the allocation package's exact solutions,
and the leave-one-out weights give the registry's GRPO estimate."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grpo_theory as gt
from grpo_theory import allocation as A
from grpo_theory.core import Draw, Sampler, loo_weights


class TableSampler(Sampler):
    """Draws read from fixed arrays (the first n rows): the step sees exactly these."""

    def __init__(self, x, y, z, p=None, ab=None):
        self.x, self.y, self.z, self.p, self.ab = x, y, z, p, ab

    def draw(self, key, n, width):
        x, y, z = self.x[:n], self.y[:n, :width], self.z[:n, :width]
        return Draw(x, y, z, y == y[:, :1])

    def pass_rates(self, x, state):
        return self.p[x]

    def mse_constants(self, x, state):
        return self.ab[0][x], self.ab[1][x]

    def observe(self, state, draw, mask):
        return state + jnp.sum(mask)


def _table(rng, n, H, P=3, K=4, p=0.4):
    x = rng.integers(0, P, n)
    y = rng.integers(0, K, (n, H))
    z = (rng.uniform(size=(n, H)) < p).astype(np.float64)
    return jnp.asarray(x), jnp.asarray(y), jnp.asarray(z)


COUNT_RULES = [A.fixed(5), A.per_prompt([2, 4, 6]), A.max_variance_subset(6, 4),
               A.successive_elimination(3, 3, 4), A.balanced_elimination(2, 3, 4),
               A.conformal_stopping((2, 4, 6), qhat=[0.9, 0.75, 1.0], agree="reward")]


@pytest.mark.parametrize("rule", COUNT_RULES, ids=lambda r: r.name)
def test_count_step_equals_the_rules_own_decisions(rule):
    """Rival: a step that keeps every sampled response (or stops at the horizon) differs."""
    rng = np.random.default_rng(0)
    B, H = 40, rule.horizon()
    x, y, z = _table(rng, B, H)
    st = rule.step(jax.random.PRNGKey(0), TableSampler(x, y, z), B, None)
    n_sampled, keep = rule.run(np.asarray(x), np.asarray(y), np.asarray(z))
    np.testing.assert_array_equal(np.asarray(st.mask), keep.astype(float))
    assert int(st.rollouts) == int(n_sampled.sum())
    everything = np.arange(H)[None, :] < n_sampled[:, None]
    if not np.array_equal(keep, everything):  # the rule discards some: the rival is caught
        assert not np.array_equal(np.asarray(st.mask), everything.astype(float))


def test_dynamic_sampling_refills_with_the_first_kept_groups():
    rng = np.random.default_rng(1)
    B, G, R = 5, 4, 3
    rule = A.dynamic_sampling(G, max_rounds=R)
    for p in (0.5, 0.05):  # enough mixed groups, then too few
        x, y, z = _table(rng, R * B, G, p=p)
        st = rule.step(jax.random.PRNGKey(0), TableSampler(x, y, z), B, None)
        zz = np.asarray(z)
        tot = zz.sum(1)
        valid = np.flatnonzero((tot > 0) & (tot < G))
        k = min(B, valid.size)
        rounds = valid[B - 1] // B + 1 if valid.size >= B else R
        assert int(st.rollouts) == rounds * B * G
        np.testing.assert_array_equal(np.asarray(st.draw.z)[:k], zz[valid[:k]])
        np.testing.assert_array_equal(np.asarray(st.mask).sum(1) > 0, np.arange(B) < k)
    with pytest.raises(ValueError, match="max_rounds"):
        A.dynamic_sampling(G).step(jax.random.PRNGKey(0), TableSampler(x, y, z), B, None)


def test_conformal_on_answers_equals_its_run():
    rng = np.random.default_rng(2)
    rule = A.conformal_stopping((2, 4, 8))
    x, _, z = _table(rng, 60, 8)
    y = jnp.asarray(rng.integers(0, 2, (60, 8)))  # two answers: agreement is common
    st = rule.step(jax.random.PRNGKey(0), TableSampler(x, y, z), 60, None)
    n_sampled, keep = rule.run(np.asarray(x), np.asarray(y), np.asarray(z))
    np.testing.assert_array_equal(np.asarray(st.mask), keep.astype(float))
    assert int(st.rollouts) == int(n_sampled.sum()) and len(set(n_sampled)) > 1


@pytest.mark.parametrize("method", ["knapsack", "vip", "sgpo"])
def test_pass_rate_step_equals_the_exact_allocation(method):
    rng = np.random.default_rng(3)
    B, m, W = 6, 4, 12
    p = rng.uniform(0.02, 0.98, size=B)
    x = jnp.arange(B)
    _, y, z = _table(rng, B, W)
    rule = A.pass_rate_rule(method, rollouts=m, max_group=W)
    st = rule.step(jax.random.PRNGKey(0), TableSampler(x, y, z, p=jnp.asarray(p)), B, None)
    want = A.pass_rate_allocation(p, m * B, method, max_size=W).sizes
    np.testing.assert_array_equal(np.asarray(st.mask).sum(1), want)
    np.testing.assert_array_equal(rule.sizes(p, m * B), want)
    assert int(st.rollouts) == sum(want)


def test_pass_rate_rules_differ_and_are_unbiased_in_the_exact_audit():
    bandit = gt.SoftmaxBandit.random(1, 4, 3)
    k = A.pass_rate_rule("knapsack", rollouts=4, max_group=8)
    v = A.pass_rate_rule("vip", rollouts=4, max_group=8)
    p = np.asarray(gt.as_structure(bandit).values())
    assert list(k.sizes(p, 16)) != list(v.sizes(p, 16))
    for rule in (k, v, A.optimal_rule(4, 8)):
        au = A.audit(bandit, rule, "grpo")
        assert au.bias_norm < 1e-12  # sizes fixed before sampling: unbiased per prompt
    # the rival that decides on the current samples is biased
    assert A.audit(bandit, A.dynamic_sampling(4), "grpo").bias_norm > 1e-4


def test_optimal_step_equals_the_greedy_allocation_and_reads_its_state():
    rng = np.random.default_rng(4)
    B, m, W = 5, 4, 30
    a, b = rng.uniform(0.1, 2.0, B), rng.uniform(0.0, 1.0, B)
    x = jnp.arange(B)
    _, y, z = _table(rng, B, W)
    rule = A.optimal_rule(m, W)
    st = rule.step(jax.random.PRNGKey(0), TableSampler(x, y, z, ab=(jnp.asarray(a),
                                                                     jnp.asarray(b))), B, 0.0)
    sizes = np.asarray(st.mask).sum(1)
    np.testing.assert_array_equal(sizes, A.greedy_allocation(a, b, m * B))
    assert float(st.state) == m * B  # observe ran with the step's mask
    assert rule.reads_state and not A.fixed(4).reads_state


def test_loo_weights_give_the_registry_grpo_estimate():
    rng = np.random.default_rng(5)
    B, G, D = 4, 5, 3
    z = jnp.asarray((rng.uniform(size=(B, G)) < 0.5).astype(float))
    s = jnp.asarray(rng.normal(size=(B, G, D)))
    w, kept = loo_weights(z, jnp.ones((B, G)))
    got = jnp.einsum("bg,bgd->d", w, s)
    adv = gt.compute_advantages("grpo", z)
    np.testing.assert_allclose(got, jnp.einsum("bg,bgd->d", adv, s) / (B * G), rtol=1e-12)
    rival = gt.compute_advantages("grpo_mean", z)
    assert np.abs(np.asarray(got - jnp.einsum("bg,bgd->d", rival, s) / (B * G))).max() > 1e-3
    assert int(kept) == B


def test_a_sampler_without_what_a_rule_reads_is_named():
    x, y, z = _table(np.random.default_rng(6), 4, 8)

    class Plain(Sampler):
        def draw(self, key, n, width):
            return Draw(x[:n], y[:n, :width], z[:n, :width], y[:n, :width] == y[:n, :1])

    with pytest.raises(ValueError, match="pass_rates"):
        A.pass_rate_rule("knapsack", 4, 8).step(jax.random.PRNGKey(0), Plain(), 4, None)
    with pytest.raises(ValueError, match="mse_constants"):
        A.optimal_rule(4, 8).step(jax.random.PRNGKey(0), Plain(), 4, None)
