"""The open estimator contract: a closed form travels with its estimator and reaches every route
(exact MSE, Monte Carlo, the advisor's prediction, the leading order, the Gaussian theory); an
estimator without one is refused naming the missing piece; per-response weights and a carried
state reach Monte Carlo and enumeration through the context."""

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
import pytest

import grpo_theory as gt
from grpo_theory import problems
from grpo_theory.core import ClosedForm, Estimator, LeaveOneOut, MissingClosedForm
from grpo_theory.core.closed_forms import PromptBaseline
from grpo_theory.core.estimators import _loo
from grpo_theory.core.ustat import _pieces, prompt_moments
from grpo_theory.optim import theory as opt

BANDIT = gt.SoftmaxBandit([[0.0, 1.0, -1.0], [0.5, 0.0, 0.0]],
                          [[1.0, 0.0, 0.5], [0.2, 0.9, 0.0]])
LAM = 0.7


@dataclass(frozen=True)
class Shrunk(ClosedForm):
    """``A = lam x leave-one-out``: per-prompt mean ``lam g``, variance ``lam^2 v_loo``, so
    ``MSE = lam^2 (c1/B + c2/(BG) + c3/(BG(G-1))) + (1 - lam)^2 ||grad J||^2``."""

    lam: float = LAM
    keep_bias: bool = True  # False: the rival that forgets the shrinkage bias

    def moments(self, route, group_size, baseline):
        mean, var = route.leave_one_out(group_size)
        return self.lam * mean, self.lam**2 * var

    def mse_weights(self, batch_size, group_size):
        w = self.lam**2 * LeaveOneOut().mse_weights(batch_size, group_size)
        w[..., 4] = (1 - self.lam) ** 2 if self.keep_bias else 0.0
        return w


def _shrunk(form=Shrunk()):
    return Estimator("shrunk_loo_test", lambda z, ctx: LAM * _loo(z, ctx), min_group_size=2,
                     closed_form=form)


@dataclass(frozen=True, eq=False)
class HalfBaseline(PromptBaseline):
    """A user's prompt baseline ``b = 1/2`` as a closed form (no advisor pieces)."""

    def baseline(self, values, optimal_baselines, estimator):
        return 0.5 * jnp.ones(jnp.shape(values()))


def _half():
    return Estimator("half_test", lambda z, ctx: z - 0.5, closed_form=HalfBaseline())


def _pieces_of(problem):
    st = gt.as_structure(problem)
    return np.asarray(_pieces(st, prompt_moments(st)))


@pytest.mark.parametrize("G,B", [(2, 1), (4, 3)])
def test_a_new_closed_form_equals_the_binary_route_and_enumeration(G, B):
    est = _shrunk()
    closed = gt.exact_mse(BANDIT, est, G, B, method="closed_form")
    binary = gt.exact_mse(BANDIT, est, G, B, method="binary")
    np.testing.assert_allclose(closed, binary, rtol=1e-10)
    # the advisor's weights over the exact pieces give the same number
    w = est.closed_form.mse_weights(B, G)
    np.testing.assert_allclose(w @ _pieces_of(BANDIT), closed, rtol=1e-10)
    if G == 2 and B == 1:
        _, mse = gt.enumerated_moments(BANDIT, est, G, B)
        np.testing.assert_allclose(closed, mse, rtol=1e-10)


def test_the_rival_form_without_the_shrinkage_bias_is_caught():
    rival = _shrunk(Shrunk(keep_bias=False))
    true = gt.exact_mse(BANDIT, rival, 4, 2, method="binary")
    w = rival.closed_form.mse_weights(2, 4)
    wrong = w @ _pieces_of(BANDIT)
    assert abs(wrong - true) > 1e-3 * true  # (1 - lam)^2 ||grad J||^2 is missing


def test_a_new_closed_form_reaches_monte_carlo_and_the_advisor():
    est = _shrunk()
    exact = gt.exact_mse(BANDIT, est, 4, 2)
    mc = gt.mc_mse(BANDIT, est, 4, 2, n_reps=20_000, seed=1)
    assert abs(mc.mse - exact) <= 4 * mc.se
    # the rival law (no bias term) lies far outside Monte Carlo's interval
    rival = Shrunk(keep_bias=False).mse_weights(2, 4) @ _pieces_of(BANDIT)
    assert abs(mc.mse - rival) > 4 * mc.se
    # the advisor predicts it from rollouts: weights over its unbiased pieces
    res = gt.estimate_scaling_constants(BANDIT, n_prompts=40, n_samples=6, seed=0)
    np.testing.assert_allclose(res.mse(2, 4, est), Shrunk().mse_weights(2, 4) @ res.theta)
    lo, hi = res.mse_ci(2, 4, est)
    assert lo <= res.mse(2, 4, est) <= hi


def test_a_prompt_baseline_form_reaches_the_exact_routes_and_the_theory():
    est = _half()
    np.testing.assert_allclose(gt.exact_mse(BANDIT, est, 3, 2),
                               gt.exact_mse(BANDIT, est, 3, 2, method="binary"), rtol=1e-10)
    given = gt.prompt_baseline(jnp.full(2, 0.5))
    np.testing.assert_allclose(gt.exact_mse(BANDIT, est, 3, 2), gt.exact_mse(BANDIT, given, 3, 2),
                               rtol=1e-12)
    # the Gaussian bandit's exact covariance through the same form
    P = problems.default_gaussian_bandit()
    theta = np.array([0.3, -0.2])
    given_g = gt.prompt_baseline(jnp.full(P.n_prompts, 0.5))
    np.testing.assert_allclose(opt.gradient_mse(P, theta, est, 3, 2),
                               opt.gradient_mse(P, theta, given_g, 3, 2), rtol=1e-12)
    # and a different baseline gives a different covariance (the route reads the form's b)
    assert abs(opt.gradient_mse(P, theta, est, 3, 2)
               - opt.gradient_mse(P, theta, "vanilla", 3, 2)) > 1e-6


def test_a_missing_piece_is_named():
    res = gt.estimate_scaling_constants(BANDIT, n_prompts=10, n_samples=4, seed=0)
    with pytest.raises(MissingClosedForm, match=r"mse_weights"):
        res.mse(2, 4, _half())
    with pytest.raises(MissingClosedForm, match=r"mse_weights"):
        res.mse(2, 4, "optimal")
    with pytest.raises(MissingClosedForm, match=r"leading_order_weights"):
        gt.leading_order_mse(BANDIT, _shrunk(), 4)
    bare = Estimator("bare_test", lambda z, ctx: _loo(z, ctx), min_group_size=2)
    for call in (lambda: gt.exact_mse(BANDIT, bare, 4, method="closed_form"),
                 lambda: res.mse(2, 4, bare),
                 lambda: opt.gradient_mse(problems.default_gaussian_bandit(),
                                          np.zeros(2), bare, 3)):
        with pytest.raises(MissingClosedForm, match=r"Estimator.closed_form is None"):
            call()
    # without a form the binary route still serves it exactly
    np.testing.assert_allclose(gt.exact_mse(BANDIT, bare, 4), gt.exact_mse(BANDIT, "grpo", 4),
                               rtol=1e-10)
    # a biased form is refused by the theory, which needs an unbiased estimator
    with pytest.raises(ValueError, match="biased"):
        opt.gradient_mse(problems.default_gaussian_bandit(), np.zeros(2), _shrunk(), 3)


def test_builtin_forms_give_the_documented_weights():
    B, G = 2.0, 4.0
    c1, c2, c3, cv, g2 = np.eye(5)
    get = lambda name: gt.get_estimator(name).closed_form.mse_weights(B, G)  # noqa: E731
    np.testing.assert_allclose(get("vanilla"), c1 / B + cv / (B * G))
    np.testing.assert_allclose(get("oracle"), c1 / B + c2 / (B * G))
    loo = c1 / B + c2 / (B * G) + c3 / (B * G * (G - 1))
    np.testing.assert_allclose(get("grpo"), loo)
    np.testing.assert_allclose(get("grpo_mean"), ((G - 1) / G) ** 2 * loo + g2 / G**2)
    # the exact MSE of every form with weights equals the weights over the exact pieces
    pieces = _pieces_of(BANDIT)
    for name in ("vanilla", "oracle", "grpo", "grpo_mean", "grpo_std_drgrpo"):
        w = gt.get_estimator(name).closed_form.mse_weights(3, 5)
        np.testing.assert_allclose(w @ pieces, gt.exact_mse(BANDIT, name, 5, 3), rtol=1e-10)


# --- per-response weights and a carried state --------------------------------------------------


def _norm_weighted(z, ctx):
    """Self-inclusive squared-score-norm-weighted group baseline (biased: a response's own
    reward is in its baseline)."""
    w = ctx.score_sq
    return z - jnp.sum(w * z, axis=-1, keepdims=True) / jnp.sum(w, axis=-1, keepdims=True)


def test_per_response_weights_reach_monte_carlo_and_enumeration():
    est = Estimator("norm_weighted_test", _norm_weighted, min_group_size=2, binary_exact=False,
                    needs=("score_sq",))
    mean, _ = gt.enumerated_moments(BANDIT, est, 2, 1)
    draws = np.asarray(gt.mc_estimates(BANDIT, est, 2, 1, n_reps=20_000, seed=2))
    se = draws.std(axis=0, ddof=1) / np.sqrt(len(draws))
    assert np.all(np.abs(draws.mean(axis=0) - np.asarray(mean)) <= 4.5 * se + 1e-12)
    # the rival that ignores the weights (the self-inclusive group mean) has another mean
    rival, _ = gt.enumerated_moments(BANDIT, "grpo_mean", 2, 1)
    assert np.max(np.abs(np.asarray(rival) - np.asarray(mean)) / (se + 1e-12)) > 10
    with pytest.raises(ValueError, match="has no exact MSE"):
        gt.exact_mse(BANDIT, est, 2)


def test_a_stateful_estimator_reads_its_initial_state():
    def adv(z, ctx):
        return z - ctx.state[ctx.prompt][..., None]

    def make(b0):
        return Estimator(f"tracked_{b0}", adv, needs=("prompt", "state"),
                         init_state=lambda n: jnp.full(n, b0),
                         update_state=lambda s, x, z, ctx: s.at[x].set(jnp.mean(z, axis=-1)))

    for b0, ref in ((0.0, "vanilla"), (0.5, gt.prompt_baseline(jnp.full(2, 0.5)))):
        a = np.asarray(gt.mc_estimates(BANDIT, make(b0), 3, 2, n_reps=50, seed=4))
        b = np.asarray(gt.mc_estimates(BANDIT, ref, 3, 2, n_reps=50, seed=4))
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
        r1 = gt.mc_mse(BANDIT, make(b0), 3, 2, n_reps=300, seed=5)
        r2 = gt.mc_mse(BANDIT, ref, 3, 2, n_reps=300, seed=5)
        np.testing.assert_allclose(r1.mse, r2.mse, rtol=1e-12)
    est = make(0.0)
    s1 = est.next_state(est.initial_state(2), jnp.array([1]), jnp.array([[1.0, 0.0, 0.0]]))
    np.testing.assert_allclose(s1, [0.0, 1 / 3])
    assert est.stateful and not est.rewards_only
    with pytest.raises(ValueError, match="has no exact MSE"):
        gt.exact_mse(BANDIT, est, 3, method="binary")
    with pytest.raises(ValueError, match="go together"):
        Estimator("half_state", adv, init_state=lambda n: jnp.zeros(n))


def test_bad_contract_values_are_refused():
    with pytest.raises(ValueError, match="needs must name"):
        Estimator("typo", lambda z, ctx: z, needs=("values",))
    with pytest.raises(ValueError, match="closed_form must be a ClosedForm"):
        Estimator("kind_string", lambda z, ctx: z, closed_form="loo")
