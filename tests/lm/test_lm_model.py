"""Plain-JAX transformer, KV-cache sampling and the (params, apply_fn) policy interface."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_theory.lm import model, policy, task

CFG = model.ModelConfig(d_model=32, n_layers=1, n_heads=2)


@pytest.fixture(scope="module")
def pol():
    p = model.init_params(jax.random.PRNGKey(1), CFG)
    return policy.LMPolicy(p, model.make_apply(CFG), model.make_sampler(CFG))


@pytest.fixture(scope="module")
def prompts():
    return task.encode_prompts(task.eval_set().subset(np.arange(8)), "trace")


def test_causal_and_left_padding_invariant(pol, prompts):
    y = task.target_responses(task.eval_set().subset(np.arange(8)), "trace")
    tok = np.concatenate([prompts, y], 1)
    p = prompts.shape[1]
    app = jax.jit(pol.apply_fn, static_argnums=2)
    lg = np.asarray(app(pol.params, tok, p))
    tok2 = tok.copy()
    tok2[:, -1] = (tok2[:, -1] + 3) % task.VOCAB_SIZE  # change the last token only
    lg2 = np.asarray(app(pol.params, tok2, p))
    np.testing.assert_allclose(lg[:, :-1], lg2[:, :-1], atol=1e-5)
    # extra left padding changes nothing after the prompt (relative positions, PAD masked)
    padded = np.concatenate([np.zeros((8, 5), np.int32), tok], 1)
    lg3 = np.asarray(app(pol.params, padded, p + 5))
    np.testing.assert_allclose(lg[:, p - 1:], lg3[:, p + 4:], atol=1e-4)


def test_kv_cache_sampler_matches_full_recompute(pol, prompts):
    """At a tiny temperature both samplers are greedy: identical tokens (peaked logits, so no
    near-ties decided by float rounding)."""
    key = jax.random.PRNGKey(0)
    params = dict(pol.params, out=pol.params["out"] * 30.0)
    a = model.sample(params, CFG, key, prompts, 16, 1e-3)
    b = policy.generic_sample(pol.apply_fn, params, key, jnp.asarray(prompts), 16, 1e-3)
    assert np.array_equal(np.asarray(a), np.asarray(b))
    # PAD after the first EOS
    m = np.asarray(policy.response_mask(a))
    assert np.all(np.asarray(a)[m == 0] == task.PAD)


def test_sample_blocked(pol, prompts):
    """One block: the same draws as ``sample``; several blocks: per-block keys, same law."""
    key = jax.random.PRNGKey(5)
    x = np.repeat(prompts, 50, 0)  # 400 prompts
    one = pol.sample_blocked(key, x, 16)
    np.testing.assert_array_equal(one, np.asarray(pol.sample(key, x, 16)))
    many = pol.sample_blocked(key, x, 16, max_elems=x.shape[1] ** 2 * 100)  # 4 blocks of 100
    assert many.shape == one.shape and not np.array_equal(many, one)
    np.testing.assert_array_equal(
        many[100:200], np.asarray(pol.sample(jax.random.fold_in(key, 1), x[100:200], 16)))
    # same distribution: the mean log-probability of both samples agrees within 5 se
    lp1 = np.asarray(pol.log_probs(x, one))
    lp2 = np.asarray(pol.log_probs(x, many))
    se = np.sqrt((lp1.var() + lp2.var()) / len(x))
    assert abs(lp1.mean() - lp2.mean()) < 5 * se


def test_sample_frequencies_match_log_probs(pol, prompts):
    """pi(y|x) from teacher forcing equals the sampling frequency (4-sigma band)."""
    n = 4000
    x = np.repeat(prompts[:1], n, 0)
    y = np.asarray(pol.sample(jax.random.PRNGKey(3), x, 5))
    rows, counts = np.unique(y, axis=0, return_counts=True)
    top = np.argsort(counts)[-3:]
    p = np.exp(np.asarray(pol.log_probs(x[:3], rows[top])))
    freq = counts[top] / n
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / n) + 1e-9)


def test_score_contractions_equal_weighted_gradient(pol, prompts):
    from jax.flatten_util import ravel_pytree

    x = prompts
    y = np.asarray(pol.sample(jax.random.PRNGKey(5), x, 16))
    w = np.asarray(jax.random.normal(jax.random.PRNGKey(6), (2, x.shape[0])), np.float64)
    acc, sq = pol.score_contractions(x, y, w, chunk=3)  # chunk not dividing N: padding path

    @jax.jit
    def wgrad(wk):
        g = jax.grad(lambda p: jnp.sum(wk * policy.seq_log_probs(pol.apply_fn, p, x, y)))(
            pol.params)
        return ravel_pytree(g)[0]

    for k in range(2):
        np.testing.assert_allclose(acc[k], np.asarray(wgrad(jnp.asarray(w[k], jnp.float32))),
                                   rtol=2e-3, atol=2e-4)
    e0 = np.zeros(x.shape[0], np.float32)
    e0[0] = 1.0
    np.testing.assert_allclose(sq[0], float(jnp.sum(wgrad(jnp.asarray(e0)) ** 2)), rtol=1e-3)


def test_user_supplied_model_plugs_in():
    """Any (params, apply_fn) works: a bigram model with the generic sampler."""
    table = jnp.asarray(np.random.default_rng(0).normal(size=(task.VOCAB_SIZE, task.VOCAB_SIZE)),
                        jnp.float32)

    def bigram(params, tokens, prompt_len):
        return params["t"][tokens]

    user = policy.LMPolicy({"t": table}, bigram)
    x = task.encode_prompts(task.eval_set().subset(np.arange(4)), "answer")
    y = user.sample(jax.random.PRNGKey(0), x, 5)
    assert y.shape == (4, 5)
    lp = np.asarray(user.log_probs(x, y))
    assert np.all(np.isfinite(lp)) and np.all(lp <= 0)
    acc, sq = user.score_contractions(x, y, np.ones((1, 4)))
    assert acc.shape == (1, task.VOCAB_SIZE ** 2) and np.all(sq > 0)
    with pytest.raises(ValueError, match="weights"):
        user.score_contractions(x, y, np.ones((1, 3)))
