"""The small transformer's one training loop (grpo_theory.lm.training.loop) with the estimators
that read more than their own group: the batch (JSPO), each response's squared score norm (the
weighted baselines) and a state carried across steps (SPO's tracker).

Each is checked against one SGD step written out by hand from the same draws, the squared norms
from the policy's own weighted score (not the loop's per-sample gradients); the rival (the
weights ignored, the state not carried) moves the parameters elsewhere.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from grpo_theory import allocation as A
from grpo_theory.core import PromptContext, get_estimator
from grpo_theory.lm import model, policy, task
from grpo_theory.lm.training import grpo, loop

CFG = model.ModelConfig(d_model=16, n_layers=1, n_heads=2)
B, G, P = 4, 4, 12


@pytest.fixture(scope="module")
def setup():
    """A policy that ends at once with probability about 0.3, and a pool whose rewarded
    response is "EOS at once" (so groups are mixed)."""
    params = model.init_params(jax.random.PRNGKey(2), CFG)
    d = CFG.d_model
    beta = np.log(0.3 / 0.7 * (task.VOCAB_SIZE - 1))
    out = np.zeros((d, task.VOCAB_SIZE), np.float32)
    out[:, task.EOS] = beta / d
    params = dict(params, ln_f={"g": jnp.zeros(d), "b": jnp.ones(d)}, out=jnp.asarray(out))
    pol = policy.LMPolicy(params, model.make_apply(CFG), model.make_sampler(CFG))
    px = jnp.asarray(task.encode_prompts(task.eval_set().subset(np.arange(P)), "answer"))
    pc = jnp.zeros((P, task.RESPONSE_LEN["answer"]), jnp.int32).at[:, 0].set(task.EOS)
    return pol, px, pc


def _flat(tree):
    return np.concatenate([np.ravel(a) for a in jax.tree_util.tree_leaves(tree)])


def _draws(pol, px, pc, key):
    """The prompts, responses and rewards of the loop's first step (its key split)."""
    kx, ky = jax.random.split(jax.random.split(key, 1)[0])
    idx = jax.random.randint(kx, (B,), 0, P)
    x = jnp.repeat(px[idx], G, axis=0)
    y = pol.sample_fn(pol.params, ky, x, pc.shape[1], pol.temperature)
    z = task.reward_exact_tokens(y, jnp.repeat(pc[idx], G, axis=0)).astype(float).reshape(B, G)
    return idx, x, y, z


def _sq_norms(pol, x, y):
    """Each response's squared score norm from the policy's own weighted score, row by row."""
    return np.array([np.sum(pol.weighted_score(x[i:i + 1], y[i:i + 1], [1.0]) ** 2)
                     for i in range(B * G)]).reshape(B, G)


def _by_hand(pol, draws, est, state, opt, sq):
    """One step of Algorithm 1 with ``est`` written out on ``draws`` (squared norms ``sq``)."""
    idx, x, y, z = draws
    ctx = PromptContext(prompt=idx, score_sq=jnp.asarray(sq), state=state)
    adv = est.advantage(z, ctx).reshape(-1).astype(jnp.float32)
    grads = jax.grad(lambda p: -jnp.mean(adv * policy.seq_log_probs(
        pol.apply_fn, p, x, y, pol.temperature, pol.eos_ids)))(pol.params)
    upd, _ = opt.update(grads, opt.init(pol.params), pol.params)
    return optax.apply_updates(pol.params, upd), est.next_state(state, idx, z, ctx)


@pytest.mark.parametrize("name", ["norm_weighted", "jspo", "spo_raw"])
def test_one_step_equals_the_step_written_out(setup, name):
    pol, px, pc = setup
    est = get_estimator(name)
    opt = grpo.cached_optimizer(0.5, "sgd")
    key = jax.random.PRNGKey(11)
    s0 = est.initial_state(P)
    got, _, state, out = loop.train_chunk(
        pol.apply_fn, pol.sample_fn, opt, loop.LMVariant(name, group=G), pol.params,
        opt.init(pol.params), s0, key, px, pc, px, pc, B, 1, temperature=pol.temperature,
        eos=pol.eos_ids)
    draws = _draws(pol, px, pc, key)
    sq = _sq_norms(pol, draws[1], draws[2]) if "score_sq" in est.needs else np.ones((B, G))
    want, want_state = _by_hand(pol, draws, est, s0, opt, sq)
    z = np.asarray(draws[3])
    assert np.any((z.sum(1) > 0) & (z.sum(1) < G))  # a mixed group: the step moves
    assert float(out["reward"][0]) == pytest.approx(z.mean())
    moved = np.abs(_flat(want) - _flat(pol.params)).max()
    assert moved > 1e-4
    np.testing.assert_allclose(_flat(got), _flat(want), rtol=0, atol=1e-6 * max(moved, 1))
    if est.stateful:  # the tracker the loop carries is the one updated by hand
        for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(want_state)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
        assert any(np.abs(np.asarray(a) - np.asarray(b)).max() > 1e-3 for a, b in zip(
            jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(s0)))
    # the rival: equal weights in place of the squared score norms (the self-inclusive group
    # mean), another prompt mix for JSPO's pooled baseline (the whole batch read as one group),
    # a tracker at another state for SPO
    if name == "norm_weighted":
        rival, _ = _by_hand(pol, draws, est, s0, opt, np.ones((B, G)))
    elif name == "jspo":
        rival, _ = _by_hand(pol, draws, get_estimator("grpo"), s0, opt, sq)
    else:
        rival, _ = _by_hand(pol, draws, est, want_state, opt, sq)
    assert np.abs(_flat(rival) - _flat(got)).max() > 100 * 1e-6 * max(moved, 1)


def test_variants_the_loop_cannot_run_are_refused_by_name():
    with pytest.raises(ValueError, match="optimal_baseline"):
        loop.LMVariant("optimal", group=4)
    with pytest.raises(ValueError, match="masked form"):
        loop.LMVariant("jspo", rule=A.fixed(4))
    with pytest.raises(ValueError, match="exactly one of group"):
        loop.LMVariant("grpo")
    with pytest.raises(ValueError, match="exactly one of group"):
        loop.LMVariant("grpo", group=4, rule=A.fixed(4))
