"""GRPO training of the language model: Algorithm 1 and the clipped multi-epoch variant."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from grpo_theory.lm import model, policy, task
from grpo_theory.lm.training import grpo, loop

CFG = model.ModelConfig(d_model=32, n_layers=1, n_heads=2)


@pytest.fixture(scope="module")
def setup():
    params = model.init_params(jax.random.PRNGKey(2), CFG)
    pol = policy.LMPolicy(params, model.make_apply(CFG), model.make_sampler(CFG))
    q = task.eval_set().subset(np.arange(16))
    x = task.encode_prompts(q, "answer")
    y = np.asarray(pol.sample(jax.random.PRNGKey(0), x, task.RESPONSE_LEN["answer"]))
    adv = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (16,)), np.float32)
    return pol, q, x, y, adv


def _flat(tree):
    return np.concatenate([np.ravel(a) for a in jax.tree_util.tree_leaves(tree)])


def test_clipped_gradient_at_ratio_one_is_algorithm_1(setup):
    pol, _, x, y, adv = setup
    f = pol.apply_fn
    old = policy.token_log_probs(f, pol.params, x, y)
    mask = policy.response_mask(y)
    # both gradients in one jitted program: one compilation instead of op-by-op dispatch
    g_clip, g_alg1 = jax.jit(lambda p: (
        jax.grad(lambda q: loop.clipped_objective(
            policy.token_log_probs(f, q, x, y), jax.lax.stop_gradient(old), adv, mask, 0.2))(p),
        jax.grad(lambda q: jnp.mean(adv * policy.seq_log_probs(f, q, x, y)))(p)))(pol.params)
    a, b = _flat(g_clip), _flat(g_alg1)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6 * np.abs(b).max())


def test_clipping_stops_the_gradient_outside_the_trust_region():
    tok = jnp.log(jnp.array([[1.5, 1.0], [1.5, 1.0], [0.5, 1.0], [0.5, 1.0]]))
    old = jnp.zeros((4, 2))
    mask = jnp.array([[1.0, 0.0]] * 4)
    adv = jnp.array([1.0, -1.0, 1.0, -1.0])
    g = np.asarray(jax.grad(loop.clipped_objective)(tok, old, adv, mask, 0.2))
    # ratio 1.5 with A > 0 and ratio 0.5 with A < 0: clipped, no gradient
    assert g[0, 0] == 0.0 and g[3, 0] == 0.0
    # ratio 1.5 with A < 0 and 0.5 with A > 0: unclipped, d/dlog r (r A)/N = r A / N
    np.testing.assert_allclose([g[1, 0], g[2, 0]], [-1.5 / 4, 0.5 / 4], rtol=1e-6)
    assert np.all(g[:, 1] == 0.0)  # masked tokens (after EOS) never count


def test_one_epoch_clipped_step_equals_algorithm_1(setup):
    pol, _, x, _, _ = setup
    # uniform next-token logits and "EOS at once" as the rewarded response: reward rate 1/22,
    # so the groups have non-zero advantages and the parameters move
    params = dict(pol.params, out=pol.params["out"] * 0.0)
    px = jnp.asarray(x)
    pc = jnp.zeros((len(x), task.RESPONSE_LEN["answer"]), jnp.int32).at[:, 0].set(task.EOS)
    # the optimiser, shapes and static arguments of train_grpo(pol, q, q, 64, 8, 4, (2,), 1e-3)
    # below, so the Algorithm 1 chunk compiles once for this file
    opt = grpo.cached_optimizer(1e-3)
    s0 = opt.init(params)
    key = jax.random.PRNGKey(3)
    tail = dict(temperature=pol.temperature, eos=pol.eos_ids)

    def run(epochs, clip_eps):
        v = loop.LMVariant("grpo", group=8, epochs=epochs, clip_eps=clip_eps)
        p, _, _, out = loop.train_chunk(pol.apply_fn, pol.sample_fn, opt, v, params, s0, None,
                                        key, px, pc, px, pc, 8, 2, **tail)
        return p, out["reward"]

    p1, r1 = run(1, None)
    assert 0 < float(np.mean(r1)) < 0.5
    p2, r2 = run(1, 0.2)
    np.testing.assert_array_equal(np.asarray(r1), np.asarray(r2))
    moved = np.abs(_flat(p1) - _flat(params)).sum()
    assert moved > 0
    np.testing.assert_allclose(_flat(p1), _flat(p2), rtol=0, atol=1e-6)
    p3, _ = run(2, 0.2)  # more epochs per batch move further
    assert np.abs(_flat(p3) - _flat(params)).sum() > moved


def test_train_grpo_practical_variant_and_bad_input(setup):
    pol, q, _, _, _ = setup
    rows = grpo.train_grpo(pol, q, q, 32, 8, 4, (2,), 1e-3, seed=0, estimator="grpo_std",
                           epochs=2, clip_eps=0.2)
    assert [r["step"] for r in rows] == [0, 2, 4]
    assert all(0 <= r["accuracy"] <= 1 for r in rows)
    with pytest.raises(ValueError, match="epochs"):
        grpo.train_grpo(pol, q, q, 32, 8, 4, (2,), 1e-3, seed=0, epochs=0)
    with pytest.raises(ValueError, match="clip_eps"):
        grpo.train_grpo(pol, q, q, 32, 8, 4, (2,), 1e-3, seed=0, clip_eps=1.5)
    with pytest.raises(ValueError, match="group_size"):
        grpo.train_grpo(pol, q, q, 30, 8, 4, (2,), 1e-3, seed=0)


def test_runs_of_the_same_shape_reuse_the_compiled_step(setup):
    """A sweep calls train_grpo once per (N, G, seed): same shapes must not recompile (a new
    executable per run grew memory until a long full sweep ran out of it)."""
    pol, q, _, _, _ = setup
    grpo.train_grpo(pol, q, q, 64, 8, 4, (2,), 1e-3, seed=0)
    n = loop.train_chunk._cache_size()
    grpo.train_grpo(pol, q, q, 64, 8, 4, (2,), 1e-3, seed=1)
    assert loop.train_chunk._cache_size() == n
