"""GRPO training of the small transformer under a rollout rule (grpo_theory.lm.training.allocation).

The rules are checked against what they claim: fixed G is Algorithm 1's step exactly; the
Knapsack sizes are the allocation package's exact solution; dynamic sampling keeps exactly the
first B mixed groups and counts the rounds it used; conformal stopping stops at the first grid
size whose responses agree; the loop spends what the rules say.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_theory import allocation as A
from grpo_theory.allocation.steps import knapsack_sizes
from grpo_theory.lm.training import allocation as AT
from grpo_theory.lm import model, policy, task
from grpo_theory.lm.training import grpo, loop

CFG = model.ModelConfig(d_model=32, n_layers=1, n_heads=2)


def _eos_policy(p_eos: float):
    """Every position's next token is EOS with probability ``p_eos``, else uniform over the
    rest: the final layer norm outputs a constant, the head reads only it."""
    params = model.init_params(jax.random.PRNGKey(2), CFG)
    d = CFG.d_model
    beta = np.log(p_eos / (1 - p_eos) * (task.VOCAB_SIZE - 1))
    out = np.zeros((d, task.VOCAB_SIZE), np.float32)
    out[:, task.EOS] = beta / d
    params = dict(params, ln_f={"g": jnp.zeros(d), "b": jnp.ones(d)}, out=jnp.asarray(out))
    return policy.LMPolicy(params, model.make_apply(CFG), model.make_sampler(CFG))


def _eos_pool(n: int):
    """Prompts of real questions whose rewarded response is "EOS at once"."""
    x = jnp.asarray(task.encode_prompts(task.eval_set().subset(np.arange(n)), "answer"))
    c = jnp.zeros((n, task.RESPONSE_LEN["answer"]), jnp.int32).at[:, 0].set(task.EOS)
    return x, c


def _flat(tree):
    return np.concatenate([np.ravel(a) for a in jax.tree_util.tree_leaves(tree)])


def test_fixed_rule_is_algorithm_1_step_for_step():
    """Rival: any other weighting of the leave-one-out terms (1/(G-1), a mean-centred advantage)
    moves the parameters differently."""
    pol = _eos_policy(0.3)
    px, pc = _eos_pool(16)
    opt = grpo.cached_optimizer(1e-2)
    s0 = opt.init(pol.params)
    key = jax.random.PRNGKey(5)
    tail = dict(temperature=pol.temperature, eos=pol.eos_ids)
    fixed = dict(group=6)

    def run(variant, n=3):
        p, _, _, out = loop.train_chunk(pol.apply_fn, pol.sample_fn, opt, variant, pol.params,
                                        s0, variant.est.initial_state(16), key, px, pc, px, pc,
                                        4, n, **tail)
        return p, out

    ref, out = run(loop.LMVariant("grpo", **fixed))
    assert 0 < float(np.mean(out["reward"])) < 1
    rule = AT.lm_rule("fixed", group_size=6)
    got, _, _, out = loop.train_chunk(pol.apply_fn, pol.sample_fn, opt,
                                      loop.LMVariant("grpo", rule=rule), pol.params, s0,
                                      jnp.float32(0.0), key, px, pc, px, pc, 4, 3, **tail)
    spent, kept = out["rollouts"], out["kept"]
    moved = np.abs(_flat(ref) - _flat(pol.params)).sum()
    assert moved > 0
    np.testing.assert_allclose(_flat(got), _flat(ref), rtol=0, atol=1e-6)
    assert np.all(np.asarray(spent) == 24) and np.all(np.asarray(kept) == 4)
    # the rival: the mean-centred advantage (TRL's) moves elsewhere
    riv, _ = run(loop.LMVariant("vanilla", **fixed))
    assert np.abs(_flat(riv) - _flat(ref)).max() > 1e-4


def _knapsack_value(sizes, p):
    g = np.asarray(sizes, float)
    return float(np.sum((1 - p**g - (1 - p)**g) * p * (1 - p) ** 2))


@pytest.mark.parametrize("B,width,m", [(5, 12, 4), (7, 6, 3), (3, 40, 16), (6, 2, 2)])
def test_knapsack_sizes_equal_the_allocation_package(B, width, m):
    rng = np.random.default_rng(B * width)
    for _ in range(6):
        p = rng.uniform(size=B)
        p[0] = 0.0 if width > 2 else p[0]  # a prompt with no value keeps the minimum
        got = np.asarray(knapsack_sizes(jnp.asarray(p, jnp.float32), m * B, width))
        want = np.array(A.pass_rate_allocation(p, m * B, "knapsack", max_size=width).sizes)
        if width <= 12:  # float32 gains: exact sizes where the marginals are well apart
            np.testing.assert_array_equal(got, want)
        # everywhere the value reached is the optimum's (ties of float32 gains at large G)
        np.testing.assert_allclose(_knapsack_value(got, p), _knapsack_value(want, p), rtol=1e-6)
        assert got.sum() == m * B and got.min() >= 2 and got.max() <= width


def test_knapsack_is_not_vip():
    """The two pass-rate rules differ (so the equality above can fail)."""
    p = np.array([0.05, 0.5, 0.95, 0.3])
    k = np.asarray(knapsack_sizes(jnp.asarray(p), 24, 16)).tolist()
    assert k != list(A.pass_rate_allocation(p, 24, "vip").sizes)


def _batch(pol, rule, key, px, pc, B, s2):
    """``(x, y, z, mask, rollouts, state)`` of one step of ``rule`` with the transformer's
    sampler (what the training loop draws)."""
    sampler = loop.LMSampler(pol.apply_fn, pol.sample_fn, pol.params, px, pc, pol.temperature,
                             pol.eos_ids)
    st = rule.step(key, sampler, B, s2)
    x, y = (a.reshape(-1, a.shape[-1]) for a in st.draw.y)
    return x, y, st.draw.z, st.mask, st.rollouts, st.state


def _draws(pol, key, px, pc, n_prompts, width):
    """The prompts and responses ``_batch`` draws with ``key`` (its own key split)."""
    kx, ky = jax.random.split(key)
    idx = jax.random.randint(kx, (n_prompts,), 0, px.shape[0])
    x, y, z = loop.draw_responses(pol.sample_fn, pol.params, ky, px[idx], pc[idx], width, pol.temperature)
    return np.asarray(y), np.asarray(z)


def test_dynamic_sampling_keeps_the_first_b_mixed_groups():
    px, pc = _eos_pool(16)
    B, G, R = 6, 4, 5
    rule = AT.lm_rule("dynamic_sampling", group_size=G, max_rounds=R)
    seen_short = seen_full = False
    for s in range(12):  # mixed groups are common at p = 0.15, rare at p = 0.02
        pol = _eos_policy(0.15 if s % 2 else 0.02)
        key = jax.random.PRNGKey(s)
        x, y, z, mask, spent, _ = _batch(pol, rule, key, px, pc, B, 0.0)
        _, z_all = _draws(pol, key, px, pc, R * B, G)
        tot = z_all.sum(1)
        valid = np.flatnonzero((tot > 0) & (tot < G))
        n_keep = min(B, valid.size)
        want_rounds = valid[B - 1] // B + 1 if valid.size >= B else R
        assert int(spent) == want_rounds * B * G
        mask, z = np.asarray(mask), np.asarray(z)
        assert mask[:, 0].sum() == n_keep
        np.testing.assert_array_equal(z[:n_keep], z_all[valid[:n_keep]])
        np.testing.assert_array_equal(mask[:n_keep], 1.0)
        seen_short |= valid.size < B
        seen_full |= valid.size >= B
    assert seen_short and seen_full  # both branches ran


def test_conformal_stopping_stops_at_the_first_agreeing_grid_size():
    pol = _eos_policy(0.6)
    px, pc = _eos_pool(16)
    grid, B = (2, 4, 8), 8
    rule = AT.lm_rule("conformal_stopping", grid=grid)
    sizes = []
    for s in range(4):
        key = jax.random.PRNGKey(s)
        _, _, _, mask, spent, _ = _batch(pol, rule, key, px, pc, B, 0.0)
        y, _ = _draws(pol, key, px, pc, B, grid[-1])
        y = y.reshape(B, grid[-1], -1)
        for b in range(B):
            n = next((g for g in grid if all((y[b, i] == y[b, 0]).all() for i in range(g))),
                     grid[-1])
            assert np.asarray(mask)[b].sum() == n
            sizes.append(n)
        assert int(spent) == np.asarray(mask).sum()
    assert len(set(sizes)) > 1  # early and late stops both occur


def test_unique_answer_constants_are_the_exact_prompt_constants():
    """``(a_x, b_x)`` from ``V``, ``||s*||^2`` and ``E||s||^2`` equal the allocation package's
    exact constants of a bandit with one rewarded response per prompt; rival: the pass-rate-only
    model (``g(x) = 0``) misses ``V^2 ||s*||^2``."""
    from grpo_theory.core import SoftmaxBandit
    from grpo_theory.core.problem import as_problem

    rng = np.random.default_rng(0)
    star = rng.integers(0, 5, 6)
    mu = np.zeros((6, 5))
    mu[np.arange(6), star] = 1.0
    bandit = SoftmaxBandit(rng.normal(0, 1.5, (6, 5)), mu)
    pc = A.prompt_constants(bandit, "grpo")
    p = as_problem(bandit)
    v = np.asarray(p.values())
    s_star = np.asarray(p.score_sq_norms())[np.arange(6), star]
    s2 = np.asarray(p.mean_score_sq_norm())
    a, b = A.unique_answer_constants(v, s_star, s2)
    np.testing.assert_allclose(a, pc.a, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(b, pc.b, rtol=1e-5, atol=1e-9)
    assert np.abs(s2 * v * (1 - v) - pc.b).max() > 1e-3 * pc.b.max()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_optimal_sizes_are_the_greedy_optimum(seed):
    rng = np.random.default_rng(seed)
    B, m = 7, 5
    a, b = rng.exponential(size=B), rng.exponential(size=B) * rng.uniform(0, 4, B)
    got = np.asarray(A.sizes_from_gains(A.mse_gains(jnp.asarray(a), jnp.asarray(b), m * B),
                                        m * B))
    want = A.greedy_allocation(a, b, m * B)
    v = lambda g: np.sum(a / g + b / (g * (g - 1)))  # noqa: E731
    assert got.sum() == m * B and v(got) == pytest.approx(v(want), rel=1e-6)
    assert v(got) < v(np.full(B, m)) or np.allclose(got, m)


def test_optimal_rule_sizes_from_exact_values_and_the_previous_plug_in():
    """The step's sizes are the greedy optimum of the teacher-forced ``V``, ``||s*||^2`` and
    the given ``E||s||^2`` plug-in; the plug-in handed on is the mean ``||s||^2`` of each
    prompt's first response (both recomputed here by the policy's own weighted score)."""
    pol = policy.LMPolicy(model.init_params(jax.random.PRNGKey(7), CFG), model.make_apply(CFG),
                          model.make_sampler(CFG))
    px, pc = map(jnp.asarray, grpo.task_tokens(pol, task.eval_set().subset(np.arange(16))))
    B, m, W = 6, 4, 10
    rule = AT.lm_rule("optimal", rollouts=m, max_group=W)
    key = jax.random.PRNGKey(3)
    x, y, z, mask, spent, s2 = _batch(pol, rule, key, px, pc, B, 2.5)
    kx, _ = jax.random.split(key)
    idx = np.asarray(jax.random.randint(kx, (B,), 0, px.shape[0]))
    xb, cb = np.asarray(px)[idx], np.asarray(pc)[idx]
    v = np.exp(np.asarray(pol.log_probs(xb, cb), np.float64))
    sq = lambda xs, ys: np.array([np.sum(pol.weighted_score(xs[i:i + 1], ys[i:i + 1], [1.0]) ** 2)  # noqa: E731
                                  for i in range(len(xs))])
    a, b = A.unique_answer_constants(v, sq(xb, cb), 2.5)
    want = A.greedy_allocation(np.asarray(a), np.asarray(b), m * B)
    got = np.asarray(mask).sum(1)
    f = lambda g: np.sum(np.asarray(a) / g + np.asarray(b) / (g * (g - 1)))  # noqa: E731
    assert int(spent) == m * B and got.sum() == m * B and got.max() <= W
    assert f(got) == pytest.approx(f(want), rel=1e-5) and len(set(got)) > 1
    first = np.asarray(y).reshape(B, W, -1)[:, 0]
    assert float(s2) == pytest.approx(np.mean(sq(xb, first)), rel=1e-4)


def test_train_with_rule_spends_its_budget_and_reports_accuracy():
    pol = _eos_policy(0.3)
    q = task.eval_set().subset(np.arange(8))
    rule = AT.lm_rule("knapsack", rollouts=4, max_group=8)
    r = AT.train_with_rule(pol, q, q, rule, 4, 40, 1e-3, seed=1, chunk_steps=2)
    assert r["rollouts"][-1] >= 40 and np.all(np.diff(r["rollouts"]) == 16)
    assert r["accuracy"].shape == r["rollouts"].shape and np.all((0 <= r["accuracy"]) &
                                                                 (r["accuracy"] <= 1))
    # step 0 is the exact accuracy of the starting policy
    x, c = grpo.task_tokens(pol, q)
    assert r["accuracy"][0] == pytest.approx(grpo.exact_accuracy(pol, x, c), rel=1e-5)
    # optimal: m B a step, plus the B responses of its first plug-in before step 1
    r = AT.train_with_rule(pol, q, q, AT.lm_rule("optimal", rollouts=4, max_group=8), 4, 40,
                           1e-3, seed=1, chunk_steps=2)
    np.testing.assert_array_equal(np.diff(r["rollouts"]), [20, 16, 16, 16])  # whole chunks


def test_a_schedule_changes_the_rule_between_chunks():
    """The first rule is the Knapsack rule of the test above (its chunk, compiled there, is
    reused: same rule, policy shapes, pool, B, lr and chunk length); the schedule hands over to
    fixed G = 2 at twice the prompts, so the group width changes from 8 to 2 at the same N."""
    pol = _eos_policy(0.3)
    q = task.eval_set().subset(np.arange(8))
    first = AT.lm_rule("knapsack", rollouts=4, max_group=8)
    calls = []

    def schedule(step, now, rule, B):
        calls.append((step, rule, B))
        assert isinstance(now, policy.LMPolicy)
        return AT.lm_rule("fixed", group_size=2), 8

    r = AT.train_with_rule(pol, q, q, first, 4, 64, 1e-3, seed=0, chunk_steps=2,
                           schedule=schedule)
    assert calls[0] == (2, first, 4)
    np.testing.assert_array_equal(r["group"], [8, 8, 2, 2])  # 64 responses: 4 steps
    np.testing.assert_array_equal(r["batch"], [4, 4, 8, 8])
    np.testing.assert_array_equal(np.diff(r["rollouts"]), 16)  # the same N = B G a step
    with pytest.raises(ValueError, match="lm_rule"):
        AT.train_with_rule(pol, q, q, first, 4, 64, 1e-3, seed=0,
                           chunk_steps=2, schedule=lambda *a: (("fixed", 4), 8))


def test_accuracy_at_budgets_and_bad_rules():
    acc = AT.accuracy_at_budgets([0.1, 0.2, 0.3], [0, 8, 20], [0, 7, 8, 19, 20, 21])
    np.testing.assert_array_equal(acc[:5], [0.1, 0.1, 0.2, 0.2, 0.3])
    assert np.isnan(acc[5])
    with pytest.raises(ValueError, match="rule must be one of"):
        AT.lm_rule("pods", group_size=4)
    with pytest.raises(ValueError, match="needs parameters"):
        AT.lm_rule("fixed", grid=(2, 4))
    with pytest.raises(ValueError, match="grid"):
        AT.lm_rule("conformal_stopping", grid=(4, 2))
    with pytest.raises(ValueError, match="max_group"):
        AT.lm_rule("knapsack", rollouts=8, max_group=4)
    with pytest.raises(ValueError, match="group_size"):
        AT.lm_rule("fixed", group_size=1)
    with pytest.raises(ValueError, match="lm_rule"):
        AT.train_with_rule(_eos_policy(0.3), None, None, ("fixed", 4), 4, 10, 1e-3, seed=0)
