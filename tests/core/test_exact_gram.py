"""Exact routines through the score structures (core/gram.py) equal the dense (P, K, D) route."""

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grpo_theory as gt
from grpo_theory.core.estimators import _REGISTRY
from grpo_theory.core.gram import ExplicitScores, TabularScores, as_structure
from grpo_theory.core.ustat import prompt_moments
from grpo_theory.problems import default_bandit, linear_bandit, sequence_policy

POLICIES = {
    "softmax": default_bandit(),
    "linear": linear_bandit(),
    "sequence": sequence_policy(),
    "softmax_random": gt.SoftmaxBandit.random(jax.random.PRNGKey(5), 7, 9, logit_scale=2.0),
    "softmax_binary": gt.SoftmaxBandit.random(jax.random.PRNGKey(6), 5, 4, binary=True),
    "sequence_noeos": gt.SequencePolicy.random(jax.random.PRNGKey(8), 3, 2, 3, eos=False),
    "sequence_random": gt.SequencePolicy.random(jax.random.PRNGKey(9), 4, 3, 3),
}
EXACT = sorted(k for k, e in _REGISTRY.items() if e.rewards_only)  # the per-group exact routes


def _one_per_signature(names):
    """One estimator per (fields read, closed form's type, pass@k): the variants of a base kind
    run the same structure code as its base policy, which runs every estimator."""
    seen = {}
    for k in names:
        e = _REGISTRY[k]
        seen.setdefault((tuple(e.needs), type(e.closed_form).__name__, e.pass_k), k)
    return sorted(seen.values())


EXACT_VARIANTS = _one_per_signature(EXACT)
KINDS = {"softmax": TabularScores, "linear": ExplicitScores, "sequence": TabularScores}


@pytest.mark.parametrize("name", list(POLICIES))
def test_structure_primitives_equal_dense_scores(name):
    pol = POLICIES[name]
    st, prob = as_structure(pol), pol.problem()
    assert isinstance(st, KINDS[name.split("_")[0]])
    assert st.dim == prob.dim
    w = jax.random.normal(jax.random.PRNGKey(1), prob.probs.shape)
    dense = jnp.einsum("pk,pkd->pd", w, prob.scores)  # (P, D)
    np.testing.assert_allclose(st.embed(st.project(w)), dense, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(st.sq_norms(), prob.score_sq_norms(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(st.probs, prob.probs, rtol=1e-13, atol=1e-15)
    f = prob.prompt_probs
    np.testing.assert_allclose(st.combine(f, st.project(w)), f @ dense, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(st.mean_sq(f, st.project(w)), jnp.sum((f @ dense) ** 2),
                               rtol=1e-12)
    np.testing.assert_allclose(st.spread(f, st.project(w)),
                               f @ jnp.sum((dense - f @ dense) ** 2, axis=1), rtol=1e-12)
    grad = gt.exact_gradient(pol)
    assert grad.shape == jnp.shape(pol.params)
    np.testing.assert_allclose(grad.reshape(-1), prob.gradient(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", list(POLICIES))
def test_exact_routes_equal_dense_route_all_estimators(name):
    pol = POLICIES[name]
    prob = pol.problem()  # a DiscreteProblem goes through the dense (shared, D_b = D) fallback
    assert isinstance(as_structure(prob), ExplicitScores) and not as_structure(prob).disjoint
    for est in (EXACT if name in KINDS else EXACT_VARIANTS):
        for G in (2, 5):
            for B in ((1, 3) if G == 2 else (3,)):  # G = 2 at B = 1 and B > 1; G = 5 at B > 1
                new = gt.exact_mse(pol, est, G, B, method="binary")
                old = gt.exact_mse(prob, est, G, B, method="binary")
                np.testing.assert_allclose(new, old, rtol=1e-10, err_msg=f"{est} G={G} B={B}")
                if _REGISTRY[est].closed_form is not None:
                    np.testing.assert_allclose(gt.exact_mse(pol, est, G, B), old, rtol=1e-10)
            np.testing.assert_allclose(gt.exact_prompt_mse(pol, est, G),
                                       gt.exact_prompt_mse(prob, est, G), rtol=1e-10, atol=1e-14)
    c_new, c_old = gt.scaling_constants(pol), gt.scaling_constants(prob)
    np.testing.assert_allclose([c_new.c1, c_new.c2, c_new.c3], [c_old.c1, c_old.c2, c_old.c3],
                               rtol=1e-10)
    assert gt.optimal_group_size(pol).exact == gt.optimal_group_size(prob).exact
    for kind in ("vanilla", "grpo"):
        np.testing.assert_allclose(gt.leading_order_mse(pol, kind, 4),
                                   gt.leading_order_mse(prob, kind, 4), rtol=1e-10)
    mo_new, mo_old = prompt_moments(pol), prompt_moments(prob)
    for field in ("value", "grad_sq", "score_sq", "score_sq_z", "tr_sigma_oracle"):
        np.testing.assert_allclose(getattr(mo_new, field), getattr(mo_old, field), rtol=1e-10,
                                   atol=1e-14, err_msg=field)
    m_new, v_new = gt.exact_prompt_mean_and_variance(pol, "grpo_std", 4)
    m_old, v_old = gt.exact_prompt_mean_and_variance(prob, "grpo_std", 4)
    np.testing.assert_allclose(m_new, m_old, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(v_new, v_old, rtol=1e-10, atol=1e-14)


def test_tabular_scale_needs_no_dense_tensor():
    bandit = gt.SoftmaxBandit.random(jax.random.PRNGKey(0), 2000, 50)
    st = as_structure(bandit)
    assert isinstance(st, TabularScores) and st.disjoint
    assert st.project(st.probs).shape == (2000, 50)
    with pytest.raises(ValueError, match=r"dense \(2000, 50, 100000\) score tensor"):
        bandit.problem()  # the dense route would need 2000 * 50 * 100000 floats
    t0 = time.perf_counter()
    mses = [gt.exact_mse(bandit, name, 8) for name in ("vanilla", "oracle", "grpo", "grpo_mean")]
    opt = gt.optimal_group_size(bandit)
    std = gt.exact_mse(bandit, "grpo_std", 8)
    assert time.perf_counter() - t0 < 60.0  # a few seconds on an idle 2-core machine
    assert all(np.isfinite(mses)) and np.isfinite(std) and opt.exact >= 2
    c = opt.constants
    np.testing.assert_allclose(c.mse(1, 8), mses[2], rtol=1e-10)  # Theorem 7 at this scale
    # Theorem 2 at B = 1: the oracle's MSE is below GRPO's (gap c3 / (G (G-1)))
    assert mses[1] <= mses[2]


def test_too_large_routes_raise_value_errors():
    with pytest.raises(ValueError, match=r"binary route's \(30001, 30000\) advantage table"):
        gt.exact_mse(default_bandit(), "grpo_std", 30_000)
    needy = gt.Estimator("oracle_like", lambda z, ctx: z - ctx.value[..., None],
                         needs=("value",))
    with pytest.raises(ValueError, match=r"\(4, 8001, 8000\) advantage table"):
        gt.exact_mse(default_bandit(), needy, 8000)
    with pytest.raises(ValueError, match="enumerate_estimates.*use exact_mse"):
        gt.enumerate_estimates(default_bandit(), "grpo", 6, max_outcomes=10**9)
    big = gt.SoftmaxBandit.random(jax.random.PRNGKey(0), 4000, 20)
    with pytest.raises(ValueError, match="sigma_oracle|score tensor"):
        gt.sigma_oracle(big)
    with pytest.raises(ValueError, match=r"\(4000, 80000\) array"):
        gt.exact_prompt_mean_and_variance(big, "grpo_std", 4)
    assert np.isfinite(gt.exact_prompt_mse(big, "grpo_std", 4)).all()  # the per-prompt route fits


@pytest.mark.parametrize("name", ["grpo_std_trl_batch", "reinforce_plus_plus_baseline"])
def test_batch_coupled_estimators_are_refused(name):
    assert _REGISTRY[name].batch_coupled
    for call in (lambda: gt.exact_mse(default_bandit(), name, 4, 2),
                 lambda: gt.exact_mse(default_bandit(), name, 4, method="binary"),
                 lambda: gt.exact_prompt_mse(default_bandit(), name, 4)):
        with pytest.raises(ValueError, match="couple the prompts of a batch.*mc_mse"):
            call()


def test_large_group_sizes():
    b = default_bandit()
    for name in ("grpo", "grpo_mean", "vanilla"):  # binary route at G = 2000: log-space binomials
        np.testing.assert_allclose(gt.exact_mse(b, name, 2000, method="binary"),
                                   gt.exact_mse(b, name, 2000, method="closed_form"), rtol=1e-9)
    std = gt.exact_mse(b, "grpo_std", 2000)
    assert np.isfinite(std) and std > 0
    c = gt.scaling_constants(b)
    for G in (10**4, 10**6):
        np.testing.assert_allclose(gt.exact_mse(b, "grpo", G), c.mse(1, G), rtol=1e-10)


def test_optimal_group_size_when_c1_underflows():
    # two prompts whose gradients differ by ~1e-162: c1 ~ 1e-324 underflows next to c3 ~ 0.1
    base = gt.SoftmaxBandit(np.array([[0.2, -0.1, 0.4]]), np.array([[0.3, 0.8, 0.5]])).problem()
    scores = jnp.concatenate([base.scores, base.scores * (1 + 1e-162)], axis=0)
    prob = gt.DiscreteProblem(jnp.array([0.5, 0.5]), jnp.concatenate([base.probs] * 2),
                              scores, jnp.concatenate([base.reward_means] * 2))
    c = gt.scaling_constants(prob)
    assert c.c3 > 0.01 and c.c1 < 1e-300
    opt = gt.optimal_group_size(prob)
    assert opt.continuous == float("inf") and opt.exact == np.iinfo(np.int64).max
    # a large but representable ratio keeps a finite optimum
    far = gt.DiscreteProblem(jnp.array([0.5, 0.5]), prob.probs,
                             jnp.concatenate([base.scores, base.scores * (1 + 1e-6)], axis=0),
                             prob.reward_means)
    o = gt.optimal_group_size(far)
    assert np.isfinite(o.continuous) and o.exact >= 2
    np.testing.assert_allclose(o.continuous, 1 + np.sqrt(o.constants.c3 / o.constants.c1))
