"""Unit tests of grpo_theory.optim.theory: exact quantities, covariances, Lyapunov weights,
the chi-square mixture, Lemma 6 bounds, Algorithm 1 and input validation."""

import jax
import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_theory import problems
import grpo_theory  # noqa: F401  (float64)
from grpo_theory.optim import theory as opt
from grpo_theory.optim import mixture_cdf, mixture_quantile, sample_mixture

P = problems.default_gaussian_bandit()
C = opt.problem_constants(P)
THETA = np.array([0.3, -0.2])
coords = st.floats(-3.0, 3.0, allow_nan=False)


# --- exact objective, gradient, constants ------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(coords, coords)
def test_exact_gradient_is_autodiff_of_exact_objective(a, b):
    th = np.array([a, b])
    np.testing.assert_allclose(P.gradient(th), jax.grad(P.objective)(th), rtol=1e-12, atol=1e-12)
    # gap identity: max J - J(theta) = 1/2 (theta - theta*)^T A (theta - theta*)
    np.testing.assert_allclose(P.max_objective() - P.objective(th), P.gap(th), rtol=1e-10,
                               atol=1e-12)


def test_gradient_matches_finite_differences_and_constants():
    h = 1e-6
    fd = [(P.objective(THETA + h * e) - P.objective(THETA - h * e)) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(P.gradient(THETA), fd, rtol=1e-7)
    hess = np.asarray(jax.hessian(P.objective)(THETA))
    np.testing.assert_allclose(-hess, P.curvature_matrix(), atol=1e-12)
    np.testing.assert_allclose(np.linalg.eigvalsh(-hess), [C.mu, C.L], rtol=1e-12)
    np.testing.assert_allclose(P.gradient(C.theta_star), 0.0, atol=1e-12)
    # PL inequality ||g||^2 >= 2 mu Delta, smoothness ||g||^2 <= 2 L Delta (quadratic J)
    g2, gap = float(np.sum(np.asarray(P.gradient(THETA)) ** 2)), float(P.gap(THETA))
    assert 2 * C.mu * gap <= g2 <= 2 * C.L * gap
    # the per-prompt gradients do not vanish at the optimum (a* is not realisable)
    assert np.abs(np.asarray(P.prompt_gradients(C.theta_star))).max() > 0.1


# --- exact covariance of ghat vs Monte Carlo ---------------------------------------------------


@pytest.mark.parametrize("est,G,B", [("vanilla", 3, 2), ("oracle", 3, 2), ("optimal", 2, 1),
                                     ("grpo", 3, 2)])
def test_gamma_formula_matches_monte_carlo(est, G, B):
    exact = np.asarray(opt.gradient_covariance(P, THETA, est, G, B))
    mean, mean_se, cov, cov_se = opt.mc_gradient_moments(P, THETA, est, G, B, n_reps=40_000,
                                                         seed=3)
    assert np.all(np.abs(mean - np.asarray(P.gradient(THETA))) <= 4.5 * mean_se)  # unbiased
    assert np.all(np.abs(cov - exact) <= 4.5 * cov_se), (cov, exact, cov_se)
    np.testing.assert_allclose(opt.gradient_mse(P, THETA, est, G, B), np.trace(exact))


def test_user_baseline_covariance_reduces_to_named_estimators():
    vals = np.asarray(P.values(THETA))
    for b, name in ((np.zeros(3), "vanilla"), (vals, "oracle")):
        est = grpo_theory.prompt_baseline(b)
        np.testing.assert_allclose(opt.gradient_covariance(P, THETA, est, 4, 2),
                                   opt.gradient_covariance(P, THETA, name, 4, 2), atol=1e-12)


def test_grpo_minus_oracle_covariance_is_exactly_order_G_minus_2():
    d = [np.asarray(opt.gradient_covariance(P, THETA, "grpo", G, 1)
                    - opt.gradient_covariance(P, THETA, "oracle", G, 1)) * G * (G - 1)
         for G in (2, 5, 40)]
    np.testing.assert_allclose(d[0], d[1], rtol=1e-10)
    np.testing.assert_allclose(d[0], d[2], rtol=1e-10)
    assert np.all(np.linalg.eigvalsh(d[0]) > 0)


def test_sup_mse_dominates_the_region_and_is_attained():
    gap_max = 0.8
    M = opt.sup_mse(P, "oracle", 4, 2, gap_max)
    key = jax.random.PRNGKey(5)
    v = np.asarray(jax.random.normal(key, (200, 2)))
    v = v / np.linalg.norm(v, axis=1, keepdims=True) * np.sqrt(
        np.asarray(jax.random.uniform(jax.random.fold_in(key, 1), (200, 1))))
    pts = C.theta_star + v @ (np.sqrt(2 * gap_max) * C.basis / np.sqrt(C.eigenvalues)).T
    mses = [opt.gradient_mse(P, t, "oracle", 4, 2) for t in pts]
    assert max(mses) <= M * (1 + 1e-9)
    assert max(mses) >= 0.9 * M
    assert all(P.gap(t) <= gap_max * (1 + 1e-9) for t in pts)
    np.testing.assert_allclose(opt.sup_mse(P, "oracle", 4, 2, 0.0),
                               opt.gradient_mse(P, C.theta_star, "oracle", 4, 2), rtol=1e-9)


# --- Theorem 8: Lyapunov covariance and weights ------------------------------------------------


def test_lyapunov_solution_satisfies_the_equation_and_weights():
    beta = 2.0
    gamma = opt.limiting_covariance(P, "grpo", 4, 2)
    gq = C.basis.T @ gamma @ C.basis
    lam = C.eigenvalues
    sig = opt.lyapunov_covariance(lam, gq, beta)
    a = beta * np.diag(lam) - 0.5 * np.eye(2)
    np.testing.assert_allclose(a @ sig + sig @ a, beta**2 * gq, atol=1e-12)
    assert np.all(np.linalg.eigvalsh(sig) > 0)
    sig_p = opt.lyapunov_covariance(lam, gq, beta, printed=True)
    np.testing.assert_allclose(a @ sig_p + sig_p @ a, gq, atol=1e-12)
    w = opt.chi2_weights(sig, lam)
    np.testing.assert_allclose(np.sort(np.linalg.eigvals(0.5 * np.diag(lam) @ sig).real), w,
                               rtol=1e-10)
    np.testing.assert_allclose(w.sum(), 0.5 * np.trace(np.diag(lam) @ sig), rtol=1e-12)
    pred = opt.asymptotic_prediction(P, "grpo", 4, 2, beta)
    np.testing.assert_allclose(pred.weights, w, rtol=1e-12)
    np.testing.assert_allclose(pred.weights_printed * beta**2, w, rtol=1e-10)


def test_scalar_case_reproduces_theory_note():
    """Theorem 8, scalar check: E[n Delta] -> 1.125 with beta^2, 0.5 without (lambda=1, Gamma=2,
    beta=1.5); a short simulation agrees with 1.125 and rejects 0.5."""
    sp = problems.scalar_gaussian_bandit()
    pred = opt.asymptotic_prediction(sp, "oracle", 1, 1, 1.5)
    np.testing.assert_allclose(pred.gamma, [[2.0]], rtol=1e-12)
    np.testing.assert_allclose(pred.mean, 1.125, rtol=1e-12)
    np.testing.assert_allclose(pred.mean_printed, 0.5, rtol=1e-12)
    res = opt.train(sp, "oracle", 1, 1, 1.5, "inverse", 1024, 3000, seed=1, theta0=[1.0],
                    log_steps=[1024])
    x = 1024 * res.gaps[:, -1]
    se = x.std(ddof=1) / np.sqrt(x.size)
    assert abs(x.mean() - 1.125) <= 4 * se, (x.mean(), se)
    assert abs(x.mean() - 0.5) > 8 * se
    assert scipy.stats.kstest(x / 1.125, "chi2", args=(1,)).pvalue > 1e-3


# --- the chi-square mixture --------------------------------------------------------------------


@pytest.mark.parametrize("w", [[0.7], [0.13, 0.22], [1e-3, 2.0], [0.1, 0.5, 2.0],
                               [0.1, 0.2, 0.3, 0.4]])
def test_mixture_cdf_matches_draws(w):
    x = sample_mixture(jax.random.PRNGKey(0), w, 400_000)
    grid = np.quantile(x, np.linspace(0.001, 0.999, 60))
    emp = np.searchsorted(np.sort(x), grid, side="right") / x.size
    # DKW: P(sup |F_n - F| > 0.005) <= 2 exp(-2 n 0.005^2) = 4e-9
    assert np.abs(mixture_cdf(grid, w) - emp).max() < 0.005
    q = mixture_quantile([0.1, 0.5, 0.9], w)
    np.testing.assert_allclose(mixture_cdf(q, w), [0.1, 0.5, 0.9], atol=1e-9)


def test_mixture_cdf_exact_cases():
    xs = np.array([0.01, 0.5, 2.0, 9.0])
    np.testing.assert_allclose(mixture_cdf(xs, [0.7]), scipy.stats.chi2.cdf(xs / 0.7, 1))
    # equal weights: w (chi^2_1 + chi^2_1) = w chi^2_2 (an exponential)
    np.testing.assert_allclose(mixture_cdf(xs, [0.4, 0.4]),
                               scipy.stats.chi2.cdf(xs / 0.4, 2), atol=1e-12)
    np.testing.assert_allclose(mixture_cdf(xs, [0.4, 0.4, 0.4]),
                               scipy.stats.chi2.cdf(xs / 0.4, 3), atol=1e-9)


# --- Lemma 6 -----------------------------------------------------------------------------------


def test_lemma6_bounds_dominate_the_iterated_recursion():
    L, mu, M, gap0 = C.L, C.mu, 3.0, 0.55
    n = np.arange(0, 400)
    beta = 0.25
    rec = opt.lemma6_recursion(399, gap0, L, mu, M, beta)
    bound_a = opt.lemma6_constant_bound(n, gap0, L, mu, beta, M)
    assert np.all(rec <= bound_a * (1 + 1e-12))
    assert bound_a[0] >= gap0
    np.testing.assert_allclose(bound_a[-1], L * beta**2 * M / (4 * mu * beta
                                                               - 2 * L * mu * beta**2), rtol=1e-9)
    beta = 1.2
    bound_b, n0 = opt.lemma6_decreasing_bound(n, gap0, L, mu, beta, M, eps=0.1)
    rec = opt.lemma6_recursion(399, gap0, L, mu, M, beta / np.arange(1, 400))
    assert n0 > 1 and np.all(rec <= bound_b * (1 + 1e-12))
    np.testing.assert_allclose(bound_b[:n0], rec[:n0])
    # the asymptotic constant: n * bound -> max((1+eps) K, c)
    k_eps = 1.1 * L * beta**2 * M / (4 * mu * beta - 2)
    assert n[-1] * bound_b[-1] >= k_eps * (1 - 1e-12)


# --- Algorithm 1 -------------------------------------------------------------------------------


def test_train_logs_exact_gap_and_takes_unbiased_steps():
    theta0 = C.theta_star + np.array([1.0, -1.0])
    res = opt.train(P, "grpo", 4, 2, 0.3, "constant", 1, 8000, seed=2, theta0=theta0,
                    log_steps=[0, 1])
    np.testing.assert_allclose(res.gaps[:, 0], P.gap(theta0))
    np.testing.assert_allclose(res.gaps[:, 1], jax.vmap(P.gap)(res.theta), rtol=1e-12)
    step = (res.theta - theta0) / 0.3
    se = step.std(0, ddof=1) / np.sqrt(step.shape[0])
    assert np.all(np.abs(step.mean(0) - np.asarray(P.gradient(theta0))) <= 4.5 * se)
    again = opt.train(P, "grpo", 4, 2, 0.3, "constant", 1, 8000, seed=2, theta0=theta0,
                      log_steps=[0, 1])
    np.testing.assert_array_equal(res.theta, again.theta)  # deterministic for a seed
    assert np.all(res.max_gap >= res.gaps.max(1) - 1e-15)


# --- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,word", [
    (dict(curvature=[1.0, -1.0, 1.0]), "curvature"),
    (dict(prompt_probs=[0.5, 0.5, 0.5]), "prompt_probs"),
    (dict(features=[[1.0, 0.0], [0.0, 1.0]]), "features"),
    (dict(sigma=0.0), "sigma"),
    (dict(noise_std=-1.0), "noise_std"),
    (dict(target=[1.0, np.nan, 0.0]), "target"),
])
def test_bad_problem_raises(kwargs, word):
    base = dict(prompt_probs=[0.5, 0.3, 0.2], features=[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
                curvature=[1.0, 2.0, 1.0], target=[1.0, -0.5, 1.5], sigma=0.5)
    with pytest.raises(ValueError, match=word):
        opt.gaussian_bandit(**{**base, **kwargs})


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="group_size"):
        opt.gradient_covariance(P, THETA, "grpo", 1)
    with pytest.raises(ValueError, match="estimator"):
        opt.gradient_covariance(P, THETA, "grpo_mean", 4)
    with pytest.raises(ValueError, match="theta"):
        opt.gradient_covariance(P, [1.0, 2.0, 3.0], "oracle", 4)
    with pytest.raises(ValueError, match="schedule"):
        opt.train(P, "oracle", 2, 1, 0.1, "cosine", 10, 2)
    with pytest.raises(ValueError, match="beta"):
        opt.train(P, "oracle", 2, 1, -0.1, "constant", 10, 2)
    with pytest.raises(ValueError, match="n_steps"):
        opt.train(P, "oracle", 2, 1, 0.1, "constant", 0, 2)
    with pytest.raises(ValueError, match="log_steps"):
        opt.train(P, "oracle", 2, 1, 0.1, "constant", 10, 2, log_steps=[11])
    with pytest.raises(ValueError, match="beta"):
        opt.lyapunov_covariance(C.eigenvalues, np.eye(2), 0.5)
    with pytest.raises(ValueError, match="beta"):
        opt.lemma6_constant_bound(3, 1.0, C.L, C.mu, 3.0, 1.0)
    with pytest.raises(ValueError, match="beta"):
        opt.lemma6_decreasing_bound(3, 1.0, C.L, C.mu, 0.5, 1.0)
    with pytest.raises(ValueError, match="mu"):
        opt.lemma6_constant_bound(3, 1.0, 1.0, 2.0, 0.1, 1.0)
    with pytest.raises(ValueError, match="weights"):
        mixture_cdf(1.0, [0.5, -0.1])
    with pytest.raises(ValueError, match="gap_max"):
        opt.sup_mse(P, "oracle", 2, 1, -1.0)
