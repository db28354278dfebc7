"""Algorithm 1 (grpo_theory.optim.train): invariants, exactness of the logged gap, vmap, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_theory import problems
from grpo_theory._validation import seed_key
from grpo_theory.core.sampling import sample_groups
from grpo_theory.optim.train_types import TrainConfig
from grpo_theory.core.objective import exact_objective, maximise
from grpo_theory.optim.train import make_train, train, train_schedules
from grpo_theory.optim.objective import max_objective
from grpo_theory.optim.schedules import step_sizes
from grpo_theory.problems import scaling_bandit


@pytest.fixture(scope="module")
def bandit():
    return problems.default_bandit()


def test_eta_zero_keeps_theta_and_objective(bandit):
    r = train(bandit, "grpo", 4, 4, 20, eta=0.0, seeds=[0, 1, 2], log_every=5)
    assert r.steps.tolist() == [0, 5, 10, 15, 20]
    np.testing.assert_array_equal(r.theta_final, np.broadcast_to(bandit.params, (3, 4, 6)))
    np.testing.assert_allclose(r.objective, float(bandit.objective()), rtol=0, atol=1e-15)


def test_gap_at_step_zero_is_exact(bandit):
    r = train(bandit, "vanilla", 2, 2, 4, eta=0.3, seeds=[5], log_every=2)
    f = np.asarray(bandit.prompt_probs)
    p = np.asarray(bandit.probs())
    mu = np.asarray(bandit.reward_means)
    j0 = f @ np.sum(p * mu, axis=1)
    sup = f @ mu.max(axis=1)
    assert r.sup_objective == pytest.approx(sup, abs=1e-15)
    assert r.gap[0, 0] == pytest.approx(sup - j0, abs=1e-14)
    # every logged gap equals sup - J(theta) recomputed from the logged objective
    np.testing.assert_allclose(r.gap, sup - r.objective, atol=1e-15)


def test_logged_params_reproduce_logged_objective(bandit):
    r = train(bandit, "grpo", 3, 4, 6, eta=0.5, seeds=[0, 1], log_every=2, log_params=True)
    assert r.params.shape == (2, 4, 4, 6)
    for s in range(2):
        for i in range(4):
            j = float(exact_objective(bandit, jnp.asarray(r.params[s, i])))
            assert j == pytest.approx(r.objective[s, i], abs=1e-13)
    np.testing.assert_array_equal(r.params[:, -1], r.theta_final)


def test_vmap_over_seeds_equals_separate_runs(bandit):
    both = train(bandit, "grpo", 4, 4, 30, eta=1.0, seeds=[3, 8], log_every=10)
    for i, s in enumerate([3, 8]):
        one = train(bandit, "grpo", 4, 4, 30, eta=1.0, seeds=[s], log_every=10)
        np.testing.assert_allclose(one.gap[0], both.gap[i], rtol=0, atol=1e-13)
        np.testing.assert_allclose(one.theta_final[0], both.theta_final[i], rtol=0, atol=1e-12)


def test_train_schedules_equals_single_schedule_runs(bandit):
    sch = [("constant", 0.7, 0.0), ("inverse", 3.0, 4.0)]
    multi = train_schedules(bandit, "oracle", 2, 4, 12, sch, seeds=[0, 1], log_every=4)
    for (name, eta, off), m in zip(sch, multi):
        one = train(bandit, "oracle", 2, 4, 12, eta=eta, schedule=name, offset=off,
                    seeds=[0, 1], log_every=4)
        np.testing.assert_allclose(one.gap, m.gap, rtol=0, atol=1e-13)  # vmap width: 1 ulp
        assert m.config["schedule"] == name


def test_inverse_schedule_first_step_equals_constant_step(bandit):
    inv = train(bandit, "grpo", 2, 2, 1, eta=3.0, schedule="inverse", offset=2.0, seeds=[4])
    const = train(bandit, "grpo", 2, 2, 1, eta=1.0, schedule="constant", seeds=[4])
    np.testing.assert_allclose(inv.theta_final, const.theta_final, rtol=0, atol=1e-15)
    np.testing.assert_allclose(step_sizes(3.0, 3, "inverse", 2.0), [1.0, 0.75, 0.6])


def test_one_step_is_unbiased_for_the_exact_gradient(bandit):
    """E[theta_1 - theta_0] = eta grad J for the oracle estimator (4-sigma band per coordinate)."""
    eta, S = 0.1, 6000
    r = train(bandit, "oracle", 2, 3, 1, eta=eta, seeds=np.arange(S))
    steps = (r.theta_final - np.asarray(bandit.params)[None]) / eta
    mean = steps.mean(axis=0)
    se = steps.std(axis=0, ddof=1) / np.sqrt(S)
    z = np.abs(mean - np.asarray(bandit.gradient())) / se
    assert z.max() < 4.5  # 24 coordinates


def test_training_improves_the_objective(bandit):
    r = train(bandit, "grpo", 8, 8, 100, eta=2.0, seeds=np.arange(8), log_every=50)
    assert r.gap[:, -1].mean() < 0.5 * r.gap[:, 0].mean()
    assert (r.gap >= -1e-12).all()  # never above the supremum


def test_sequence_policy_trains_and_sup_is_best_response():
    pol = problems.sequence_policy()
    mu = np.asarray(pol.reward_means)
    assert max_objective(pol) == pytest.approx(float(np.asarray(pol.prompt_probs) @ mu.max(1)))
    r = train(pol, "grpo", 2, 4, 20, eta=1.0, seeds=[0, 1], log_every=10)
    assert r.theta_final.shape == (2,) + tuple(np.shape(pol.params))
    assert r.gap[:, -1].mean() < r.gap[:, 0].mean()


def test_linear_bandit_sup_is_interior_maximum():
    pol = scaling_bandit()
    th, val = maximise(lambda t: exact_objective(pol, t), pol.params)
    assert max_objective(pol) == pytest.approx(val, abs=1e-12)
    g = np.asarray(pol.with_params(th).gradient())
    assert np.linalg.norm(g) < 1e-6
    r = train(pol, "grpo", 2, 2, 2, eta=0.0, seeds=[0])
    assert r.gap[0, 0] == pytest.approx(val - 0.5, abs=1e-12)  # J(0) = 0.5


_SCHEDULES = [("constant", 0.5, 0.0), ("inverse", 2.0, 1.0)]


def test_train_schedules_takes_every_enumerable_policy_and_keeps_the_numbers():
    """The legacy entry accepts an MLPSequencePolicy (refused by concrete class before) and runs
    the one loop on it; the built-in kinds give the numbers they gave before (pinned)."""
    from grpo_theory.companions.mlp_policy import MLPSequencePolicy
    from grpo_theory.core import LinearSoftmaxBandit, SequencePolicy, SoftmaxBandit
    from grpo_theory.optim.train import train_batch

    mlp = MLPSequencePolicy(lambda p, t, l: float(t[0] == 0), 2, 2, 2, hidden=3, seed=0)
    r = train_schedules(mlp, "grpo", 2, 3, 6, _SCHEDULES[:1], seeds=[0, 1], log_every=3)[0]
    ref = train_batch(mlp, "grpo", TrainConfig(batch_size=2, group_size=3, n_steps=6,
                                               log_every=3, lr=0.5),
                      jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)]))
    for k in ("objective", "gap", "theta_final"):
        np.testing.assert_array_equal(getattr(r, k), getattr(ref, k))
    assert r.sup_objective == 1.0  # the best-response value E_X max_y mu
    np.testing.assert_allclose(r.gap, [[0.916413873811569, 0.8769360340265977,
                                        0.8356613896173273], [0.916413873811569,
                                        0.8769360340265977, 0.48029184424280513]],
                               rtol=0, atol=1e-12)
    rng = np.random.default_rng(0)
    lin = LinearSoftmaxBandit(rng.normal(size=(2, 3, 2)), [0.3, -0.2],
                              np.random.default_rng(1).uniform(size=(2, 3)))
    pinned = {  # train_schedules(policy, "grpo", 2, 3, 6, _SCHEDULES, seeds=[0, 1], log_every=3)
        "soft": (SoftmaxBandit.random(0, 3, 4), 0, "gap",
                 [[0.35328392224961513, 0.34687680162450907, 0.34687680162450907],
                  [0.35328392224961513, 0.3487468172599656, 0.33906820747502286]]),
        "seq": (SequencePolicy.random(1, 2, 2, 2), 1, "gap",
                [[0.29189346608323385, 0.2841971660175232, 0.2797045651336503],
                 [0.29189346608323385, 0.2863735723891593, 0.2863735723891593]]),
        "lin": (lin, 0, "objective",
                [[0.5904427605055578, 0.6826222657255665, 0.7342734899817673],
                 [0.5904427605055578, 0.6394221909395931, 0.6793827029299803]]),
    }
    for name, (pol, c, field, want) in pinned.items():
        res = train_schedules(pol, "grpo", 2, 3, 6, _SCHEDULES, seeds=[0, 1], log_every=3)[c]
        np.testing.assert_allclose(getattr(res, field), want, rtol=0, atol=1e-12, err_msg=name)
    assert res.sup_objective == pytest.approx(0.9495565704180237, abs=1e-12)  # lin's L-BFGS


@pytest.mark.parametrize("kwargs, match", [
    (dict(schedule="cosine"), "schedule"),
    (dict(n_steps=10, log_every=3), "log_every"),
    (dict(group_size=1), "group_size"),
    (dict(eta=-1.0), "eta"),
    (dict(eta=float("nan")), "eta"),
    (dict(seeds=[[0, 1]]), "seeds"),
    (dict(seeds=[]), "seeds"),
    (dict(seeds=[0.5]), "seeds"),
    (dict(batch_size=0), "batch_size"),
    (dict(n_steps=0), "n_steps"),
    (dict(estimator="nope"), "estimator"),
    (dict(params=np.zeros(3)), "params"),
    (dict(schedule="inverse", offset=-1.0), "offset"),
])
def test_bad_input_raises_value_error(bandit, kwargs, match):
    args = dict(policy=bandit, estimator="grpo", batch_size=2, group_size=2, n_steps=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        train(**args)


def test_problem_object_is_rejected(bandit):
    with pytest.raises(ValueError, match="policy"):
        train(bandit.problem(), "grpo", 2, 2, 4)
    with pytest.raises(ValueError, match="schedules"):
        train_schedules(bandit, "grpo", 2, 2, 4, [])
    with pytest.raises(ValueError, match="policy"):
        max_objective(bandit.problem())



# --- the one loop: make_train(problem, estimator, config) -> train(key) -------------------------

def test_make_train_equals_legacy_loop_and_vmaps_over_keys(bandit):
    cfg = TrainConfig(batch_size=4, group_size=4, n_steps=20, lr=1.0, log_every=5)
    train_fn = make_train(bandit, "grpo", cfg)
    legacy = train(bandit, "grpo", 4, 4, 20, eta=1.0, seeds=[3, 8], log_every=5)
    one = train_fn(3)
    np.testing.assert_array_equal(one.steps, [0, 5, 10, 15, 20])
    np.testing.assert_allclose(one.gap, legacy.gap[0], rtol=0, atol=1e-13)
    both = jax.vmap(train_fn)(jnp.stack([seed_key(3), seed_key(8)]))
    np.testing.assert_allclose(both.gap, legacy.gap, rtol=0, atol=1e-13)
    np.testing.assert_allclose(both.theta_final, legacy.theta_final, rtol=0, atol=1e-12)
    # the running maximum covers every step, so it bounds the logged gaps
    assert np.all(np.asarray(both.max_gap) >= np.asarray(both.gap).max(1) - 1e-15)


def test_optax_schedule_equals_the_named_schedule(bandit):
    import optax

    base = dict(batch_size=2, group_size=3, n_steps=6, log_every=3)
    named = make_train(bandit, "oracle", TrainConfig(**base, schedule="inverse", lr=3.0,
                                                     offset=2.0))(1)
    sched = make_train(bandit, "oracle", TrainConfig(
        **base, schedule=lambda count: 3.0 / (count + 1.0 + 2.0)))(1)  # optax counts from 0
    np.testing.assert_allclose(sched.theta_final, named.theta_final, rtol=0, atol=1e-14)
    const = make_train(bandit, "oracle", TrainConfig(**base, schedule=optax.constant_schedule(
        0.5)))(1)
    ref = make_train(bandit, "oracle", TrainConfig(**base, lr=0.5))(1)
    np.testing.assert_allclose(const.theta_final, ref.theta_final, rtol=0, atol=1e-14)


def test_optimal_estimator_subtracts_b_star_not_v(bandit):
    """One step of "optimal" equals the hand-computed step with b*(x), not with V(x)."""
    pol = bandit  # ||s(x, y)||^2 = 1 - 2 pi_y + ||pi||^2 varies with y: b* != V
    dp = pol.problem()
    assert np.abs(np.asarray(dp.values() - dp.optimal_baselines())).max() > 1e-3
    cfg = TrainConfig(batch_size=3, group_size=4, n_steps=1, lr=1.0)
    r_opt = make_train(pol, "optimal", cfg)(7)
    r_orc = make_train(pol, "oracle", cfg)(7)
    x, y, z = sample_groups(jax.random.fold_in(seed_key(7), 1), dp, 3, 4)
    adv = z - dp.optimal_baselines()[x][:, None]
    ghat = jnp.einsum("bg,bgd->d", adv, dp.scores[x[:, None], y]) / 12
    np.testing.assert_allclose(r_opt.theta_final, pol.params + ghat.reshape(pol.params.shape),
                               rtol=0, atol=1e-13)
    assert np.abs(np.asarray(r_opt.theta_final - r_orc.theta_final)).max() > 1e-6


def test_log_steps_and_integer_types(bandit):
    cfg = TrainConfig(batch_size=np.int64(2), group_size=jnp.int32(3), n_steps=np.int32(8),
                      log_steps=(0, 1, 2, 4, 8), lr=0.5)
    assert (cfg.batch_size, cfg.group_size, cfg.n_steps) == (2, 3, 8)
    assert hash(cfg) == hash(TrainConfig(batch_size=2, group_size=3, n_steps=8,
                                         log_steps=[8, 4, 2, 1, 0], lr=0.5))
    r = make_train(bandit, "grpo", cfg, sup_objective=1.0)(0, params=np.zeros((4, 6)))
    np.testing.assert_array_equal(r.steps, [0, 1, 2, 4, 8])
    j0 = float(exact_objective(bandit, jnp.zeros((4, 6))))
    assert r.objective[0] == pytest.approx(j0, abs=1e-15)
    np.testing.assert_allclose(r.gap, 1.0 - r.objective, atol=1e-15)


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch_size=0), "batch_size"),
    (dict(batch_size=2.0), "batch_size"),
    (dict(group_size="4"), "group_size"),
    (dict(n_steps=True), "n_steps"),
    (dict(schedule="cosine"), "schedule"),
    (dict(lr=float("inf")), "lr"),
    (dict(schedule="inverse", offset=-2.0), "offset"),
    (dict(log_every=3), "log_every"),
    (dict(log_steps=(0, 9)), "log_steps"),
    (dict(log_steps=(1,), log_every=2), "log_steps"),
])
def test_config_bad_input(kwargs, match):
    args = dict(batch_size=2, group_size=2, n_steps=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        TrainConfig(**args)


def test_make_train_bad_input(bandit):
    cfg = TrainConfig(batch_size=2, group_size=1, n_steps=2)
    with pytest.raises(ValueError, match="estimator"):
        make_train(bandit, "nope", cfg)
    with pytest.raises(ValueError, match="group_size"):
        make_train(bandit, "grpo", cfg)
    with pytest.raises(ValueError, match="problem"):
        make_train(bandit.problem(), "oracle", cfg)
    with pytest.raises(ValueError, match="config"):
        make_train(bandit, "oracle", dict(batch_size=2, group_size=2, n_steps=2))
    fn = make_train(bandit, "oracle", cfg)
    with pytest.raises(ValueError, match="seed"):
        fn(1.5)
    with pytest.raises(ValueError, match="params"):
        fn(0, params=np.zeros(3))


def test_any_integer_seed_is_reduced_like_seed_key(bandit):
    """Seeds go through _validation.seed_key everywhere: negative and huge seeds are valid."""
    seeds = [-3, 2**40 + 5, np.uint64(7)]
    r = train(bandit, "grpo", 2, 2, 3, eta=0.5, seeds=seeds, log_every=3)
    fn = make_train(bandit, "grpo", TrainConfig(batch_size=2, group_size=2, n_steps=3, lr=0.5,
                                                log_every=3))
    for i, s in enumerate(seeds):
        np.testing.assert_allclose(fn(s).gap, r.gap[i], rtol=0, atol=1e-13)
        np.testing.assert_allclose(fn(seed_key(int(s))).gap, r.gap[i], rtol=0, atol=1e-13)
