"""One compiled loop for a problem family; optax inside the loop; numbers pinned to the old loop.

Problems used to be hashed into jit's static arguments, so every member of a family
(``scaling_family_bandit(delta)``: same shapes, different rewards) compiled the training loop
again (5 s each here). Problems are now traced pytrees, the update an optax transformation; the
pinned numbers (``tests/optim/results/train_reference.npz``, written by the loop before the
change) must be reproduced to float64 rounding.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from grpo_theory import problems
from grpo_theory.companions import length_weighting as LW
from grpo_theory.core.policies import SequencePolicy
from grpo_theory.optim import train as T
from grpo_theory.optim import step_sizes

from support import train_reference as R


def _family(deltas=(0.5, 0.25, 0.1, 0.047)):
    return [problems.scaling_family_bandit(d, at_optimum=False) for d in deltas]


def test_a_family_sweep_compiles_the_loop_once():
    """K members with equal shapes: the batched loop's cache grows by one (it grew by K)."""
    cfg = T.TrainConfig(batch_size=3, group_size=5, n_steps=7, lr=0.5)  # a shape no test uses
    keys = jnp.stack([jax.random.PRNGKey(s) for s in range(2)])
    n = T._run_batch._cache_size()
    gaps = [T.train_batch(p, "grpo", cfg, keys, sup_objective=0.6).gap for p in _family()]
    assert T._run_batch._cache_size() == n + 1
    assert len({float(g[0, -1]) for g in gaps}) == len(gaps)  # the members really differ
    # the same through the legacy wrapper (scaling-family's train cell) and make_train
    n = T._run_batch._cache_size()
    for p in _family():
        T.train_schedules(p, "grpo", 3, 5, 7, [("constant", 0.4, 0.0)], seeds=[1, 2],
                          log_every=1, max_objective=0.6)  # another config: compiles once
    assert T._run_batch._cache_size() == n + 1
    n = T._run._cache_size()
    for p in _family():
        T.make_train(p, "grpo", cfg, sup_objective=0.6)(0)
    assert T._run._cache_size() == n + 1


def test_family_members_match_separate_runs():
    """Tracing the problem changes nothing: member k of the sweep = member k run alone."""
    cfg = T.TrainConfig(batch_size=2, group_size=4, n_steps=5, lr=0.3, log_every=5)
    a, b = _family((0.3, 0.2))
    rb = T.make_train(b, "grpo", cfg, sup_objective=0.6)(3)
    ra = T.make_train(a, "grpo", cfg, sup_objective=0.6)(3)
    rb2 = T.make_train(b, "grpo", cfg, sup_objective=0.6)(3)
    np.testing.assert_array_equal(rb.theta_final, rb2.theta_final)
    assert not np.array_equal(ra.theta_final, rb.theta_final)


def test_length_weighting_alphas_share_one_loop():
    """alpha is traced (a leaf of the weighted problem): a sweep over alpha compiles once."""
    pol = problems.stop_or_run_policy()
    LW.train_length_weighted(pol, 0.0, 3, 2, 3, 1.0, [0])
    n = T._run_batch._cache_size()
    for a in (0.25, 0.5, 1.0):
        LW.train_length_weighted(pol, a, 3, 2, 3, 1.0, [0])
    assert T._run_batch._cache_size() == n


def test_policies_are_pytrees_with_static_shapes():
    seq = problems.sequence_policy()
    leaves, tree = jax.tree_util.tree_flatten(seq)
    back = jax.tree_util.tree_unflatten(tree, leaves)
    assert isinstance(back, SequencePolicy) and back.horizon == seq.horizon
    np.testing.assert_array_equal(back.log_probs(), seq.log_probs())
    other = problems.sequence_policy(seed=3)
    assert jax.tree_util.tree_structure(other) == tree  # same shapes: one treedef
    f = jax.jit(lambda p: p.problem().objective())
    assert float(f(seq)) == pytest.approx(float(seq.objective()), abs=1e-14)
    assert float(f(other)) == pytest.approx(float(other.objective()), abs=1e-14)
    assert f._cache_size() == 1


def test_pinned_numbers_of_the_old_loop():
    """Every case of ``tests/support/train_reference.py`` to float64 rounding (the loop is optax
    ``sgd`` on ``-ghat`` now; a few entries differ from the old loop in the last bit)."""
    ref = np.load(R.PATH)
    new = R.cases()
    assert sorted(ref.files) == sorted(new)
    for k in ref.files:
        np.testing.assert_allclose(np.asarray(new[k]), ref[k], rtol=1e-13, atol=1e-14,
                                   err_msg=k)


def test_schedules_are_optax_schedules():
    count = jnp.arange(4)
    np.testing.assert_allclose(T.schedule("inverse", 3.0, 2.0)(count),
                               step_sizes(3.0, 4, "inverse", 2.0), rtol=0, atol=0)
    np.testing.assert_allclose(T.schedule(jnp.int32(0), 0.5, 0.0)(count), 0.5)
    g = {"w": jnp.asarray([1.0, -2.0])}
    upd, _ = T.ascent(0.5).update(jax.tree.map(jnp.negative, g), T.ascent(0.5).init(g))
    np.testing.assert_array_equal(upd["w"], 0.5 * g["w"])  # ascent on ghat


def test_optimizer_in_the_config():
    bandit = problems.default_bandit()
    base = dict(batch_size=2, group_size=4, n_steps=6, log_every=3)
    ref = T.make_train(bandit, "grpo", T.TrainConfig(**base, lr=0.5))(1)
    sgd = T.make_train(bandit, "grpo", T.TrainConfig(**base, optimizer=optax.sgd(0.5)))(1)
    np.testing.assert_array_equal(sgd.theta_final, ref.theta_final)
    adam = T.make_train(bandit, "grpo", T.TrainConfig(**base, optimizer=optax.adam(0.1)))(1)
    assert adam.objective[-1] > adam.objective[0]  # Adam ascends J too
    with pytest.raises(ValueError, match="optimizer must be an optax"):
        T.TrainConfig(**base, optimizer="adam")


# --- the clipped multi-epoch update, shared with the LM loops (grpo_theory.optim.clipped) -----


def test_clipped_one_epoch_is_algorithm_1():
    """At ratio 1 the clipped surrogate's gradient is ghat: one epoch = the plain step."""
    bandit = problems.default_bandit()
    base = dict(batch_size=2, group_size=4, n_steps=6, lr=0.5, log_every=3)
    ref = T.make_train(bandit, "grpo", T.TrainConfig(**base))(1)
    one = T.make_train(bandit, "grpo", T.TrainConfig(**base, clip_eps=0.2))(1)
    np.testing.assert_allclose(one.theta_final, ref.theta_final, rtol=0, atol=1e-12)


def test_two_unclipped_epochs_by_hand():
    """epochs=2: theta_1 = theta_0 + eta_1 ghat, then theta_0' = theta_1 + eta_1 (1/BG) sum
    A r s(theta_1) with r = pi_(theta_1)(y|x) / pi_(theta_0)(y|x); both epochs use eta_1."""
    from grpo_theory._validation import seed_key
    from grpo_theory.core.estimators import PromptContext, get_estimator
    from grpo_theory.core.sampling import sample_groups

    bandit = problems.default_bandit()
    cfg = T.TrainConfig(batch_size=2, group_size=4, n_steps=1, schedule="inverse", lr=1.0,
                        offset=1.0, epochs=2)
    res = T.make_train(bandit, "grpo", cfg)(3)
    dp0 = bandit.problem()
    x, y, z = sample_groups(jax.random.fold_in(seed_key(3), 1), dp0, 2, 4)
    adv = get_estimator("grpo").advantage(z, PromptContext(prompt=x, value=dp0.values()[x]))
    eta = 0.5  # 1 / (1 + 1)
    th1 = bandit.params + eta * (jnp.einsum("bg,bgd->d", adv, dp0.scores[x[:, None], y]) / 8
                                 ).reshape(bandit.params.shape)
    dp1 = bandit.problem(th1)
    r = dp1.probs[x[:, None], y] / dp0.probs[x[:, None], y]
    th2 = th1 + eta * (jnp.einsum("bg,bgd->d", adv * r, dp1.scores[x[:, None], y]) / 8
                       ).reshape(bandit.params.shape)
    np.testing.assert_allclose(res.theta_final, th2, rtol=0, atol=1e-12)
    assert not np.allclose(th1, th2)


def test_clipping_bounds_the_move_and_bad_settings_fail():
    bandit = problems.default_bandit()
    base = dict(batch_size=4, group_size=4, n_steps=1, lr=5.0)
    free = T.make_train(bandit, "grpo", T.TrainConfig(**base, epochs=4))(0)
    clip = T.make_train(bandit, "grpo", T.TrainConfig(**base, epochs=4, clip_eps=0.05))(0)
    move = lambda r: float(np.linalg.norm(r.theta_final - bandit.params))  # noqa: E731
    assert move(clip) < move(free)
    with pytest.raises(ValueError, match="clip_eps"):
        T.TrainConfig(**base, clip_eps=-0.1)
    with pytest.raises(ValueError, match="epochs"):
        T.TrainConfig(**base, epochs=0)
    with pytest.raises(ValueError, match="enumerable"):
        T.make_train(problems.default_gaussian_bandit(), "grpo",
                     T.TrainConfig(**base, epochs=2))
