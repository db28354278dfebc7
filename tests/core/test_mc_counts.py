"""The Monte Carlo engine's counts route: each group's cell counts and the estimator's binary
advantage tables give the same estimates as each response's advantages, on the same uniforms.

The responses route calls the estimator's own ``advantage`` on every sampled group, so this
equality is what keeps the engine an independent check of the exact binary route (which shares
the tables): a rival estimator whose advantages are not a function of (its reward, the group's
count) breaks it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grpo_theory as gt
from grpo_theory.core.estimators import Estimator, _REGISTRY
from grpo_theory.core.sampling import (sample_cell_counts_from_uniforms,
                                       sample_cells_from_uniforms)

BANDIT = gt.SoftmaxBandit.random(jax.random.PRNGKey(0), 3, 4)
REWARDS_ONLY = sorted({e.name for e in _REGISTRY.values() if e.rewards_only})


def _cells_counted(problem, ux, uc):
    x, y, z = sample_cells_from_uniforms(problem, ux, uc)
    cell = 2 * y + z.astype(jnp.int32)
    return x, jnp.sum(cell[..., None] == jnp.arange(2 * problem.n_responses), axis=-2)


def _weights_both_routes(est, G, B):
    """Per-replicate weights of the two routes on the same uniforms (the rival's tables forced)."""
    from grpo_theory.core import montecarlo as mc
    from grpo_theory.core.estimators import batch_context
    from grpo_theory.core.exact import binary_advantages

    p = BANDIT.problem()
    with jax.enable_x64(True):
        u = jax.random.uniform(jax.random.PRNGKey(7), (200, B, G + 1), dtype=jnp.float64)
        x, y, z = sample_cells_from_uniforms(p, u[..., 0], u[..., 1:])
        x2, n = sample_cell_counts_from_uniforms(p, u[..., 0], u[..., 1:])
        ctx = batch_context(est, x, y, p.values(), p.optimal_baselines(),
                            lambda: jnp.sum(p.scores**2, axis=-1), p.n_prompts)
        adv = jax.vmap(est.advantage, in_axes=(0, mc._ctx_axes(ctx)))(z, ctx)
        a1, a0 = (jnp.asarray(t) for t in binary_advantages(p, est, G))
        return (np.asarray(mc._count_weights(p, x2, n, a1, a0)),
                np.asarray(mc._weights(p, adv, x, y, False)))


@pytest.mark.parametrize("G", [1, 17, 40])
def test_cell_counts_are_the_sampled_cells_counted(G):
    """Every group's counts equal the joint sampler's cells counted, on the same uniforms,
    including the blocks of 16 responses with padding (17, 40), uniforms at 0 and just below 1,
    float32 uniforms, and zero-mass cells (binary rewards: a cell with mu = 0 or 1 is empty)."""
    with jax.enable_x64(True):
        for bandit in (BANDIT, gt.SoftmaxBandit.random(jax.random.PRNGKey(1), 5, 3, binary=True)):
            p = bandit.problem()
            u = jax.random.uniform(jax.random.PRNGKey(G), (300, 2, G + 1), dtype=jnp.float64)
            u = u.at[:3, 0, 1:].set(0.0).at[3:6, 1, 1:].set(1.0 - 2.0**-53)
            for uu in (u, u.astype(jnp.float32)):
                x, n = sample_cell_counts_from_uniforms(p, uu[..., 0], uu[..., 1:])
                x_ref, n_ref = _cells_counted(p, uu[..., 0], uu[..., 1:])
                assert n.dtype == jnp.float64 and n.shape == (300, 2, 2 * p.n_responses)
                np.testing.assert_array_equal(np.asarray(x), np.asarray(x_ref))
                np.testing.assert_array_equal(np.asarray(n), np.asarray(n_ref))
                assert np.all(np.asarray(n).sum(-1) == G)


def _routes(est, G, B, **kw):
    a = gt.mc_mse(BANDIT, est, G, B, n_reps=300, seed=5, chunk=128, route="counts", **kw)
    b = gt.mc_mse(BANDIT, est, G, B, n_reps=300, seed=5, chunk=128, route="responses", **kw)
    return a, b


def _assert_same(a, b, what):
    assert a.mse == pytest.approx(b.mse, rel=1e-11, abs=1e-300), what
    assert a.se == pytest.approx(b.se, rel=1e-8, abs=1e-300), what
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-11, atol=1e-13 * np.abs(b.mean).max(),
                               err_msg=str(what))


def test_count_weights_equal_response_weights_for_every_rewards_only_estimator():
    """For every registered rewards-only estimator, on the same uniforms (three prompts per
    batch, groups of 17: a padded block of the counts), the counts route's per-replicate weights
    W equal the responses route's (the estimator's own advantages, scattered) to rounding."""
    for name in REWARDS_ONLY:
        w_counts, w_resp = _weights_both_routes(_REGISTRY[name], 17, 3)
        np.testing.assert_allclose(w_counts, w_resp, rtol=1e-12,
                                   atol=1e-12 * np.abs(w_resp).max(), err_msg=name)


@pytest.mark.parametrize("kw", [dict(), dict(rng="splitmix")])
def test_counts_route_equals_responses_route_in_the_engine(kw):
    """``mc_mse``'s MSE, standard error and mean estimate agree between the routes to rounding,
    with one prompt per batch (the counts route places the group's weights by a one-hot of its
    prompt) and with several, for estimators with prompt constants (optimal) and without."""
    for name, G, B in (("grpo_std", 5, 1), ("optimal", 5, 1), ("grpo", 17, 3)):
        _assert_same(*_routes(name, G, B, **kw), (name, G, B, kw))


def test_counts_route_is_chosen_by_default_and_tells_a_rival_apart():
    """``auto`` is the counts route for a rewards-only estimator (the same numbers bit for bit
    here). The rival: an estimator that says its advantages depend on the rewards alone but
    weights responses by their position in the group. Its forced tables give weights far from
    its own advantages' (so the equality above can fail); the shuffled-group check
    (``binary_advantages_hold``) catches it, so ``auto`` gives it the responses route and
    ``counts`` refuses it by name."""
    from grpo_theory.core.exact import binary_advantages_hold

    a = gt.mc_mse(BANDIT, "grpo", 6, 2, n_reps=300, seed=5, chunk=128)
    c, r = _routes("grpo", 6, 2)
    assert a.mse == c.mse and np.array_equal(a.mean, c.mean)

    def positional(z, ctx):
        g = z.shape[-1]
        w = 1.0 + jnp.arange(g) / g
        return w * (z - jnp.mean(z, axis=-1, keepdims=True))

    rival = Estimator("positional_rival", positional, min_group_size=2)
    assert rival.rewards_only
    w_counts, w_resp = _weights_both_routes(rival, 6, 2)
    assert np.abs(w_counts - w_resp).max() > 1e-2 * np.abs(w_resp).max()
    p = BANDIT.problem()
    assert not binary_advantages_hold(p, rival, 6)
    assert all(binary_advantages_hold(p, _REGISTRY[name], 6) for name in REWARDS_ONLY)
    auto = gt.mc_mse(BANDIT, rival, 6, 2, n_reps=300, seed=5, chunk=128)
    resp = gt.mc_mse(BANDIT, rival, 6, 2, n_reps=300, seed=5, chunk=128, route="responses")
    assert auto.mse == resp.mse
    with pytest.raises(ValueError, match="route='counts' .*'positional_rival'.*shuffled"):
        gt.mc_mse(BANDIT, rival, 6, 2, n_reps=300, route="counts")


def test_counts_route_refusals():
    """``route='counts'`` names why it does not apply; an unknown route is refused by name."""
    with pytest.raises(ValueError, match="route='counts' does not apply .*'kae'.*rewards alone"):
        gt.mc_mse(BANDIT, "kae", 4, 2, n_reps=100, route="counts")
    with pytest.raises(ValueError, match="route='counts' does not apply .*sampler='separate'"):
        gt.mc_mse(BANDIT, "grpo", 4, 2, n_reps=100, route="counts", sampler="separate")
    with pytest.raises(ValueError, match="route must be one of"):
        gt.mc_mse(BANDIT, "grpo", 4, 2, n_reps=100, route="cells")
    # auto falls back to the responses route where counts do not apply (same numbers as asked)
    a = gt.mc_mse(BANDIT, "grpo", 4, 2, n_reps=200, seed=1, sampler="separate")
    b = gt.mc_mse(BANDIT, "grpo", 4, 2, n_reps=200, seed=1, sampler="separate", route="responses")
    assert a.mse == b.mse


def test_counts_route_only_where_its_table_is_small():
    """The tables evaluate the estimator on G + 1 binary groups of G, O(G^2) numbers: past the
    engine's chunk budget ``auto`` takes the responses route and ``counts`` is refused by name."""
    from grpo_theory.core.montecarlo import _count_tables

    p = BANDIT.problem()
    est = _REGISTRY["grpo"]
    assert _count_tables(p, est, 1000, "joint", "auto") is not None
    assert _count_tables(p, est, 2000, "joint", "auto") is None
    with pytest.raises(ValueError, match=r"route='counts' .*\(1, 2001, 2000\) .*route='responses'"):
        _count_tables(p, est, 2000, "joint", "counts")
