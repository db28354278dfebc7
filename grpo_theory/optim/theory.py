r"""Optimisation theory of Algorithm 1 (Lemma 6 and Theorem 8 of the main paper) on a problem with known constants.

**The Gaussian-action bandit.** Prompts ``x = 1..P`` with probabilities ``f(x)`` and features
``phi(x)`` in R^d; a scalar action ``a ~ N(m(x), sigma^2)`` with mean ``m(x) = phi(x)^T theta``
(fixed ``sigma``); reward ``Z = r(x, a) + tau * eta`` (``eta ~ N(0, 1)``) with the concave
quadratic ``r(x, a) = c(x) - h(x)/2 (a - a*(x))^2``. With ``delta(x) = m(x) - a*(x)`` and
``u = a - m(x)``:

* ``V(x) = c(x) - h(x)/2 (delta(x)^2 + sigma^2)``, ``J(theta) = sum_x f(x) V(x)``;
* ``-H = A = sum_x f(x) h(x) phi(x) phi(x)^T`` (constant), so ``J`` is a concave quadratic,
  ``L = lambda_max(A)`` (smoothness), ``mu`` = smallest non-zero eigenvalue of ``A`` (PL
  constant: ``||grad J||^2 >= 2 mu Delta``), interior maximiser ``theta* = A^+ b``,
  ``b = sum_x f h a* phi`` and ``Delta(theta) = J* - J(theta) = 1/2 (theta - theta*)^T A
  (theta - theta*)``;
* score ``s = u / sigma^2 * phi(x)``; per-prompt gradient ``g(x) = -h(x) delta(x) phi(x)``.

Gaussian moments used by the exact covariances (``e = Z - V(x)``, all **derived** and checked
against Monte Carlo in the tests): ``E[u^2 e] = -h sigma^4``, ``Var(Z|x) = h^2 (sigma^4/2 +
delta^2 sigma^2) + tau^2``, ``E[u^2 e^2] = h^2 (5/2 sigma^6 + 3 delta^2 sigma^4) + tau^2
sigma^2``. Assumption 2 fails here (``||s||^2`` and ``Z`` are correlated given ``x``), so the
MSE-optimal baseline ``b*(x) = V(x) - h(x) sigma^2`` is not ``V(x)``.

Contents: exact objective/gradient/constants; exact covariance ``Gamma(theta)`` of the gradient
estimate for vanilla / oracle / optimal / user prompt baselines and GRPO (leave-one-out); its
supremum over a sublevel set (the ``M`` of Lemma 6); Algorithm 1 (``lax.scan`` over steps,
``vmap`` over seeds) logging the exact gap; Lemma 6 bounds; Theorem 8's Lyapunov covariance,
chi-square weights (corrected form with ``beta^2`` and the paper's printed form without it) and
the weighted chi-square mixture's exact CDF (nested one-dimensional integrals).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from .. import _validation as V
from ..core import Estimator, GradientProblem, PromptContext, closed_form_of, get_estimator
from .chi2_mixture import chi2_weights, lyapunov_covariance
from .schedules import SCHEDULES
from .train import train_batch
from .train_types import TrainConfig, TrainResult
from .._precision import float64


class _GaussianBanditFields(NamedTuple):
    prompt_probs: jnp.ndarray  # (P,) f(x)
    features: jnp.ndarray  # (P, d) phi(x)
    curvature: jnp.ndarray  # (P,) h(x) > 0
    target: jnp.ndarray  # (P,) a*(x)
    offset: jnp.ndarray  # (P,) c(x)
    sigma: jnp.ndarray  # () policy standard deviation
    noise_std: jnp.ndarray  # () tau, reward noise standard deviation


class GaussianBandit(_GaussianBanditFields, GradientProblem):
    """Gaussian-action bandit with concave quadratic reward (a JAX pytree; see module doc).

    A :class:`~grpo_theory.core.policy.GradientProblem` (the training loop's second kind): its
    core ``params``, ``objective`` and ``sample_gradient``; it overrides ``max_objective`` and
    ``objective_and_gap`` with their closed forms.
    """

    __slots__ = ()

    @property
    @float64
    def dim(self) -> int:
        return self.features.shape[1]

    @property
    @float64
    def n_prompts(self) -> int:
        return self.features.shape[0]

    # -- exact quantities (pure, jit/vmap friendly) ---------------------------------------------
    @float64
    def means(self, theta):
        return self.features @ theta

    @float64
    def deltas(self, theta):
        return self.means(theta) - self.target

    @float64
    def values(self, theta):
        """V(x) = c(x) - h(x)/2 (delta(x)^2 + sigma^2)."""
        return self.offset - 0.5 * self.curvature * (self.deltas(theta) ** 2 + self.sigma**2)

    @float64
    def objective(self, theta):
        """J(theta) = sum_x f(x) V(x)."""
        return jnp.sum(self.prompt_probs * self.values(theta))

    @float64
    def prompt_gradients(self, theta):
        """g(x) = E[s Z | x] = -h(x) delta(x) phi(x), shape (P, d)."""
        return -(self.curvature * self.deltas(theta))[:, None] * self.features

    @float64
    def gradient(self, theta):
        """grad J(theta) = sum_x f(x) g(x)."""
        return self.prompt_probs @ self.prompt_gradients(theta)

    @float64
    def optimal_baselines(self, theta):
        """b*(x) = E[||s||^2 Z | x] / E[||s||^2 | x] = V(x) - h(x) sigma^2."""
        return self.values(theta) - self.curvature * self.sigma**2

    @float64
    def curvature_matrix(self):
        """A = -Hessian of J = sum_x f h phi phi^T."""
        w = self.prompt_probs * self.curvature
        return jnp.einsum("p,pi,pj->ij", w, self.features, self.features)

    @float64
    def maximiser(self):
        """theta* = A^+ sum_x f h a* phi (minimum-norm maximiser)."""
        b = self.features.T @ (self.prompt_probs * self.curvature * self.target)
        return jnp.linalg.pinv(self.curvature_matrix()) @ b

    @float64
    def max_objective(self):
        return self.objective(self.maximiser())

    # -- the training contract of grpo_theory.optim.train.make_train ----------------------------
    @property
    @float64
    def params(self):
        """Default initial parameters theta = 0 (d,)."""
        return jnp.zeros(self.features.shape[1])

    @float64
    def sample_gradient(self, key, theta, est, batch_size: int, group_size: int):
        """One draw of Algorithm 1's estimate at theta (see :func:`sample_gradient`)."""
        x, u, noise = _draws(key, self, (batch_size,), group_size)
        return _gradient_from_draws(self, theta, est, x, u, noise)

    @float64
    def gap(self, theta):
        """Delta(theta) = max J - J(theta) = 1/2 (theta - theta*)^T A (theta - theta*)."""
        d = theta - self.maximiser()
        return 0.5 * d @ self.curvature_matrix() @ d

    @float64
    def objective_and_gap(self, params, sup_objective):
        """``(sup_objective - gap, gap)``: the closed-form gap, not a difference of objectives."""
        g = self.gap(params)
        return sup_objective - g, g


@float64
def gaussian_bandit(prompt_probs, features, curvature, target, sigma, noise_std=0.0,
                    offset=None) -> GaussianBandit:
    """Validated constructor (``ValueError`` naming the argument on bad input)."""
    f = V.probability_vector("prompt_probs", prompt_probs)
    phi = V.finite_array("features", features, ndim=2)
    p = f.shape[0]
    if phi.shape[0] != p:
        raise ValueError(f"features must have shape (P, d) with P={p} rows, got {phi.shape}")
    h = V.finite_array("curvature", curvature, ndim=1)
    V.same_shape("curvature", h, (p,), "prompt_probs")
    if np.any(h <= 0):
        raise ValueError("curvature must be > 0 for every prompt (a concave reward)")
    a = V.finite_array("target", target, ndim=1)
    V.same_shape("target", a, (p,), "prompt_probs")
    c = np.zeros(p) if offset is None else V.finite_array("offset", offset, ndim=1)
    V.same_shape("offset", c, (p,), "prompt_probs")
    s = float(sigma)
    if not (np.isfinite(s) and s > 0):
        raise ValueError(f"sigma must be a finite number > 0, got {sigma!r}")
    t = float(noise_std)
    if not (np.isfinite(t) and t >= 0):
        raise ValueError(f"noise_std must be a finite number >= 0, got {noise_std!r}")
    prob = GaussianBandit(*(jnp.asarray(v, dtype=jnp.float64) for v in (f, phi, h, a, c, s, t)))
    if not np.any(np.asarray(prob.curvature_matrix()) != 0):
        raise ValueError("features must not all be zero (J would be flat)")
    return prob


@dataclass(frozen=True)
class Constants:
    """Constants of section 6: smoothness ``L``, PL constant ``mu``, the non-flat eigenbasis."""

    L: float
    mu: float
    rank: int
    eigenvalues: np.ndarray  # Lambda (r,), non-zero eigenvalues of A = -H*
    basis: np.ndarray  # Q (d, r)
    theta_star: np.ndarray
    max_objective: float


@float64
def problem_constants(problem: GaussianBandit, tol: float = 1e-10) -> Constants:
    """L, mu, Lambda, Q of ``A = -H* = Q Lambda Q^T`` (flat directions dropped)."""
    a = np.asarray(problem.curvature_matrix())
    lam, q = np.linalg.eigh(a)
    keep = lam > tol * max(lam.max(), 1.0)
    lam, q = lam[keep], q[:, keep]
    return Constants(L=float(lam.max()), mu=float(lam.min()), rank=int(keep.sum()),
                     eigenvalues=lam, basis=q, theta_star=np.asarray(problem.maximiser()),
                     max_objective=float(problem.max_objective()))


# --- exact covariance of the gradient estimate -------------------------------------------------


def _unbiased_form(est: Estimator):
    """The estimator's closed form, which must be unbiased (every formula here assumes it)."""
    form = closed_form_of(est, "exact covariance (an unbiased ClosedForm)")
    if not form.unbiased:
        raise ValueError(f"estimator {est.name!r} is biased: the exact covariance here needs an "
                         "unbiased estimator (its ClosedForm.unbiased)")
    return form


class _GaussianRoute:
    """The Gaussian bandit's route of :meth:`~grpo_theory.core.ClosedForm.moments`: per-prompt
    mean ``g(x)`` (P, d) and covariance ``Cov(ghat_x | x)`` (P, d, d) of one G-group."""

    def __init__(self, problem: GaussianBandit, theta):
        self.problem, self.theta = problem, theta
        s2 = self.s2 = problem.sigma**2
        h, tau2 = self.h, self.tau2 = problem.curvature, problem.noise_std**2
        delta = self.delta = problem.deltas(theta)
        phi = problem.features
        self.pp = jnp.einsum("pi,pj->pij", phi, phi)
        gx = self.gx = problem.prompt_gradients(theta)
        self.gg = jnp.einsum("pi,pj->pij", gx, gx)
        self.ue2 = h**2 * (2.5 * s2**3 + 3.0 * delta**2 * s2**2) + tau2 * s2  # E[u^2 e^2 | x]

    def leave_one_out(self, group_size):
        """``Sigma_or/G + (S Var(Z|x) + g g^T)/(G(G-1))`` (Lemma 1, matrix form of Theorem 2)."""
        h, s2 = self.h, self.s2
        var_z = h**2 * (0.5 * s2**2 + self.delta**2 * s2) + self.tau2
        oracle = (self.ue2 / s2**2)[:, None, None] * self.pp - self.gg
        second = (var_z / s2)[:, None, None] * self.pp + self.gg
        return self.gx, oracle / group_size + second / (group_size * (group_size - 1))

    def prompt_baseline(self, b, group_size):
        """``Cov[s (Z - b)|x] / G`` with ``E[u^2 (Z - b)^2] / sigma^4`` in closed form."""
        h, s2 = self.h, self.s2
        d = self.problem.values(self.theta) - b
        m2 = (self.ue2 - 2.0 * d * h * s2**2 + d**2 * s2) / s2**2  # E[u^2 (Z - b)^2] / sigma^4
        return self.gx, (m2[:, None, None] * self.pp - self.gg) / group_size


@partial(jax.jit, static_argnames=("est",))
def _gamma(problem, theta, est, group_size, batch_size):
    form = _unbiased_form(est)
    b = form.baseline(lambda: problem.values(theta), lambda: problem.optimal_baselines(theta),
                      est)
    f = problem.prompt_probs
    gx = problem.prompt_gradients(theta)
    gbar = f @ gx
    between = jnp.einsum("p,pi,pj->ij", f, gx, gx) - jnp.outer(gbar, gbar)
    _, cov = form.moments(_GaussianRoute(problem, theta), group_size, b)
    within = jnp.einsum("p,pij->ij", f, cov)
    return (between + within) / batch_size


@float64
def gradient_covariance(problem: GaussianBandit, theta, estimator, group_size: int,
                        batch_size: int = 1) -> jnp.ndarray:
    """Exact ``Gamma(theta) = Cov(ghat)`` of Algorithm 1's estimate with B prompts x G draws.

    ``Gamma = (1/B) [Cov_X g(X) + E_X C(X)]`` with, per prompt (``S = E[s s^T|x]``,
    ``Sigma_or = Cov[s (Z - V)|x]``), ``C = Cov[s (Z - b)|x] / G`` for a prompt baseline ``b``
    and ``C = Sigma_or/G + (S Var(Z|x) + g g^T)/(G(G-1))`` for GRPO (Lemma 1's U-statistic,
    the matrix form of Theorem 2). All estimators here are unbiased, so the MSE is
    ``tr Gamma``.
    """
    est = get_estimator(estimator)
    _unbiased_form(est)
    V.group_run(est, group_size, batch_size)
    theta = jnp.asarray(V.finite_array("theta", theta, ndim=1))
    if theta.shape[0] != problem.dim:
        raise ValueError(f"theta must have shape ({problem.dim},), got {theta.shape}")
    return _gamma(problem, theta, est, float(group_size), float(batch_size))


@float64
def gradient_mse(problem, theta, estimator, group_size: int, batch_size: int = 1) -> float:
    """Exact MSE ``E||ghat - grad J||^2 = tr Gamma(theta)``."""
    return float(jnp.trace(gradient_covariance(problem, theta, estimator, group_size,
                                               batch_size)))


@float64
def limiting_covariance(problem, estimator, group_size: int, batch_size: int = 1) -> np.ndarray:
    """``Gamma = Gamma(theta*)``: the covariance of ghat at the optimum (Theorem 8)."""
    return np.asarray(gradient_covariance(problem, problem.maximiser(), estimator, group_size,
                                          batch_size))


@float64
def sup_mse(problem: GaussianBandit, estimator, group_size: int, batch_size: int,
            gap_max: float, n_dirs: int = 2048, n_radii: int = 33) -> float:
    """``M = sup { tr Gamma(theta) : Delta(theta) <= gap_max }`` (Lemma 6's constant).

    The sublevel set is the ellipsoid ``theta* + sqrt(2 gap_max) Q Lambda^(-1/2) v``,
    ``||v|| <= 1`` (flat directions change neither Delta nor the MSE). The MSE is maximised over
    a polar grid of ``n_dirs`` directions (equally spaced for r <= 2, quasi-random otherwise)
    times ``n_radii`` radii, then polished with a bounded local optimiser.
    """
    est = get_estimator(estimator)
    _unbiased_form(est)
    V.group_run(est, group_size, batch_size)
    gap_max = float(gap_max)
    if not (np.isfinite(gap_max) and gap_max >= 0):
        raise ValueError(f"gap_max must be a finite number >= 0, got {gap_max!r}")
    V.positive_int("n_dirs", n_dirs, 2)
    V.positive_int("n_radii", n_radii, 2)
    c = problem_constants(problem)
    r = c.rank
    if r == 1:
        dirs = np.array([[1.0], [-1.0]])
    elif r == 2:
        t = np.linspace(0.0, 2 * np.pi, n_dirs, endpoint=False)
        dirs = np.stack([np.cos(t), np.sin(t)], 1)
    else:
        z = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (n_dirs, r)))
        dirs = z / np.linalg.norm(z, axis=1, keepdims=True)
    radii = np.linspace(0.0, 1.0, n_radii)
    scale = np.sqrt(2.0 * gap_max) * c.basis / np.sqrt(c.eigenvalues)  # (d, r)
    pts = (radii[:, None, None] * dirs[None]).reshape(-1, r)
    thetas = c.theta_star + pts @ scale.T

    def mse_at(th):
        return jnp.trace(_gamma(problem, th, est, float(group_size), float(batch_size)))

    vals = np.asarray(jax.jit(jax.vmap(mse_at))(jnp.asarray(thetas)))
    best = pts[int(np.argmax(vals))]

    def neg(v):  # v in the unit ball (projected), r coordinates
        n = np.linalg.norm(v)
        v = v / n if n > 1 else v
        return -float(mse_at(jnp.asarray(c.theta_star + scale @ v)))

    res = scipy.optimize.minimize(neg, best, method="Nelder-Mead",
                                  options=dict(xatol=1e-10, fatol=1e-14, maxiter=2000))
    return float(max(vals.max(), -res.fun))


# --- sampling Algorithm 1 ----------------------------------------------------------------------


def _draws(key, problem: GaussianBandit, shape: tuple, group_size: int):
    """Prompts ``x`` (*shape), action deviations ``u`` and reward noise (*shape, G)."""
    kx, ku, kn = jax.random.split(key, 3)
    x = jax.random.categorical(kx, jnp.log(problem.prompt_probs), shape=shape)
    u = problem.sigma * jax.random.normal(ku, (*shape, group_size))
    noise = problem.noise_std * jax.random.normal(kn, (*shape, group_size))
    return x, u, noise


def _gradient_from_draws(problem: GaussianBandit, theta, est: Estimator, x, u, noise):
    """``ghat = (1/BG) sum_bg s_bg A_bg`` for one batch: x (B,), u and noise (B, G)."""
    b, g = u.shape
    delta = problem.deltas(theta)[x][:, None]
    z = (problem.offset[x][:, None] - 0.5 * problem.curvature[x][:, None] * (delta + u) ** 2
         + noise)
    ctx = PromptContext(prompt=x, value=problem.values(theta)[x],
                        optimal_baseline=problem.optimal_baselines(theta)[x])
    adv = est.advantage(z, ctx)
    w = jnp.sum(adv * u, axis=1) / problem.sigma**2  # (B,)
    return w @ problem.features[x] / (b * g)


@float64
def sample_gradient(key, problem: GaussianBandit, theta, est: Estimator, batch_size: int,
                    group_size: int):
    """One draw of ``ghat = (1/BG) sum_bg s_bg A_bg`` (B prompts, G actions each), shape (d,)."""
    x, u, noise = _draws(key, problem, (batch_size,), group_size)
    return _gradient_from_draws(problem, theta, est, x, u, noise)


@partial(jax.jit, static_argnames=("est", "batch_size", "group_size", "n_reps"))
def _mc_moments(key, problem, theta, est, batch_size, group_size, n_reps):
    keys = jax.random.split(key, n_reps)
    g = jax.vmap(lambda k: sample_gradient(k, problem, theta, est, batch_size, group_size))(keys)
    mean = g.mean(0)
    c = g - mean
    outer = jnp.einsum("ri,rj->rij", c, c)
    cov = outer.sum(0) / (n_reps - 1)
    se = outer.std(0, ddof=1) / jnp.sqrt(n_reps)
    return mean, g.std(0, ddof=1) / jnp.sqrt(n_reps), cov, se


@float64
def mc_gradient_moments(problem, theta, estimator, group_size: int, batch_size: int = 1,
                        n_reps: int = 100_000, seed: int = 0, *, key=None):
    """Monte Carlo ``(mean, mean_se, cov, cov_se)`` of ghat at ``theta`` (R replicates).

    ``key`` (a JAX key or an integer) replaces the integer ``seed`` when given.
    """
    est = get_estimator(estimator)
    V.group_run(est, group_size, batch_size)
    V.positive_int("n_reps", n_reps, 2)
    theta = jnp.asarray(V.finite_array("theta", theta, ndim=1))
    out = _mc_moments(V.random_key(seed, key), problem, theta, est, int(batch_size),
                      int(group_size), int(n_reps))
    return tuple(np.asarray(o) for o in out)


@float64
def train(problem: GaussianBandit, estimator, group_size: int, batch_size: int, beta: float,
          schedule: str, n_steps: int, n_seeds: int, seed: int = 0, theta0=None,
          log_steps=None, offset: float = 0.0, *, key=None) -> TrainResult:
    """Algorithm 1 on the Gaussian bandit: a thin use of :func:`grpo_theory.optim.train.make_train`.

    ``theta_i = theta_(i-1) + eta_i ghat_i`` with ``eta_i = beta`` (constant) or
    ``eta_i = beta / (i + offset)`` (inverse; the paper's ``beta/i`` has offset 0), ``n_steps``
    steps for each of ``n_seeds`` independent seeds (run ``s`` uses ``fold_in(seed_key(seed),
    s)``), the exact gap ``Delta = 1/2 (theta - theta*)^T A (theta - theta*)`` logged at
    ``log_steps`` (default: every power of two and ``n_steps``; 0 allowed = the start).
    ``key`` (a JAX key or an integer) replaces the integer ``seed`` when given.

    Returns:
        A :class:`~grpo_theory.optim.train_types.TrainResult`: ``log_steps``, ``gaps`` (S, n_log),
        ``max_gap`` (S,) (the largest Delta over every step 0..n) and ``theta`` (S, d).
    """
    est = get_estimator(estimator)
    V.group_run(est, group_size, batch_size)
    if not (isinstance(schedule, str) and schedule in SCHEDULES):
        raise ValueError(f"schedule must be one of {tuple(SCHEDULES)}, got {schedule!r}")
    beta = float(beta)
    if not (np.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    offset = float(offset)
    if not (np.isfinite(offset) and offset >= 0):
        raise ValueError(f"offset must be a finite number >= 0, got {offset!r}")
    n_steps = V.positive_int("n_steps", n_steps, 1)
    n_seeds = V.positive_int("n_seeds", n_seeds, 1)
    theta0 = (np.zeros(problem.dim) if theta0 is None
              else V.finite_array("theta0", theta0, ndim=1))
    if theta0.shape[0] != problem.dim:
        raise ValueError(f"theta0 must have shape ({problem.dim},), got {theta0.shape}")
    if log_steps is None:
        log_steps = sorted({0, n_steps, *(2**k for k in range(int(np.log2(n_steps)) + 1))})
    log_steps = np.unique(np.asarray(log_steps, dtype=np.int64))
    if log_steps.size == 0 or log_steps.min() < 0 or log_steps.max() > n_steps:
        raise ValueError(f"log_steps must lie in [0, n_steps={n_steps}]")
    cfg = TrainConfig(batch_size=batch_size, group_size=group_size, n_steps=n_steps,
                      schedule=schedule, lr=beta, offset=offset,
                      log_steps=tuple(int(s) for s in log_steps))
    base = V.random_key(seed, key)
    keys = jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(n_seeds))
    r = train_batch(problem, est, cfg, keys, params=theta0)
    return TrainResult(steps=log_steps, objective=np.asarray(r.objective),
                       gap=np.asarray(r.gap), max_gap=np.asarray(r.max_gap),
                       theta_final=np.asarray(r.theta_final), sup_objective=r.sup_objective,
                       config=cfg)


# --- Lemma 6 -----------------------------------------------------------------------------------


def _check_constants(L, mu, M, gap0):
    for name, v in (("L", L), ("mu", mu)):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    if mu > L:
        raise ValueError(f"mu must be <= L, got mu={mu}, L={L}")
    for name, v in (("M", M), ("gap0", gap0)):
        if not (np.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")


@float64
def lemma6_constant_bound(n, gap0: float, L: float, mu: float, beta: float, M: float):
    """Lemma 6(a): ``E Delta_n <= rho^n Delta_0 + L beta^2 M / (4 mu beta - 2 L mu beta^2)``,
    ``rho = 1 - 2 mu beta + L mu beta^2``.

    The lemma assumes ``beta < 1/(2L)``; its proof needs only ``beta < 2/L`` (``rho < 1``),
    which is what is enforced here.
    """
    _check_constants(L, mu, M, gap0)
    if not (np.isfinite(beta) and 0 < beta < 2.0 / L):
        raise ValueError(f"beta must lie in (0, 2/L) = (0, {2 / L:.6g}), got {beta!r}")
    n = np.asarray(n, dtype=np.float64)
    if np.any(n < 0):
        raise ValueError("n must be >= 0")
    rho = 1.0 - 2.0 * mu * beta + L * mu * beta**2
    return rho**n * gap0 + L * beta**2 * M / (4.0 * mu * beta - 2.0 * L * mu * beta**2)


@float64
def lemma6_recursion(n_steps: int, gap0: float, L: float, mu: float, M: float, steps) -> np.ndarray:
    """The one-step bound behind Lemma 6, iterated: ``u_0 = Delta_0``,
    ``u_i = (1 - 2 mu eta_i + L mu eta_i^2) u_(i-1) + L eta_i^2 M / 2`` (valid while
    ``eta_i <= 2/L``). Returns ``u_0..u_n`` (n_steps + 1,)."""
    _check_constants(L, mu, M, gap0)
    V.positive_int("n_steps", n_steps, 1)
    eta = np.broadcast_to(np.asarray(steps, dtype=np.float64), (n_steps,))
    if np.any(eta <= 0) or np.any(eta > 2.0 / L):
        raise ValueError(f"steps must lie in (0, 2/L] = (0, {2 / L:.6g}]")
    coef = 1.0 - 2.0 * mu * eta + L * mu * eta**2
    add = 0.5 * L * eta**2 * M
    u = np.empty(n_steps + 1)
    u[0] = gap0
    for i in range(n_steps):  # scalar recursion over steps (not over samples)
        u[i + 1] = coef[i] * u[i] + add[i]
    return u


@float64
def lemma6_decreasing_bound(n, gap0: float, L: float, mu: float, beta: float, M: float,
                            eps: float = 0.1):
    """Lemma 6(b) for ``eta_i = beta / i`` (``beta > 1/(2 mu)``):
    ``E Delta_n <= max((1+eps) L beta^2 M / ((4 mu beta - 2) n), c/n)`` for ``n >= n0``.

    Made explicit **(derived)**: the induction ``u_n <= C/n`` closes when
    ``C >= L beta^2 M / (4 mu beta - 2 - 2 L mu beta^2 / n)``, which holds with the
    ``(1+eps)`` factor for ``n >= n0 = ceil(2 L mu beta^2 (1+eps) / ((4 mu beta - 2) eps))``;
    ``c = n0 u_(n0)`` with ``u`` the iterated one-step bound from ``Delta_0`` (needs
    ``beta <= 2/L`` so every step obeys it). Returns ``(bound (len n,), n0)``; for ``n < n0``
    the bound is ``u_n`` itself.
    """
    _check_constants(L, mu, M, gap0)
    if not (np.isfinite(beta) and 1.0 / (2.0 * mu) < beta <= 2.0 / L):
        raise ValueError(
            f"beta must lie in (1/(2 mu), 2/L] = ({1 / (2 * mu):.6g}, {2 / L:.6g}], got {beta!r}")
    if not (np.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")
    n = np.atleast_1d(np.asarray(n, dtype=np.int64))
    if np.any(n < 0):
        raise ValueError("n must be >= 0")
    n0 = max(1, int(np.ceil(2 * L * mu * beta**2 * (1 + eps) / ((4 * mu * beta - 2) * eps))))
    n_max = int(max(n.max(), n0))
    u = lemma6_recursion(n_max, gap0, L, mu, M, beta / np.arange(1, n_max + 1))
    k_eps = (1 + eps) * L * beta**2 * M / (4 * mu * beta - 2)
    c = n0 * u[n0]
    tail = np.maximum(k_eps, c) / np.maximum(n, 1)
    return np.where(n >= n0, tail, u[np.minimum(n, n_max)]), n0


# --- Theorem 8: Lyapunov covariance and chi-square weights ------------------------------------


@dataclass(frozen=True)
class AsymptoticPrediction:
    """Theorem 8 for one estimator: ``n Delta_n -> sum_k w_k chi^2_1``."""

    estimator: str
    group_size: int
    batch_size: int
    beta: float
    gamma: np.ndarray  # Gamma (d, d) at theta*
    sigma: np.ndarray  # Lyapunov solution (r, r), corrected form
    weights: np.ndarray  # corrected w_k
    weights_printed: np.ndarray  # without beta^2 (= weights / beta^2)

    @property
    @float64
    def mean(self) -> float:
        return float(self.weights.sum())

    @property
    @float64
    def mean_printed(self) -> float:
        return float(self.weights_printed.sum())


@float64
def asymptotic_prediction(problem: GaussianBandit, estimator, group_size: int, batch_size: int,
                          beta: float) -> AsymptoticPrediction:
    """Gamma at theta*, the Lyapunov Sigma and the chi-square weights (both forms)."""
    est = get_estimator(estimator)
    c = problem_constants(problem)
    gamma = limiting_covariance(problem, est, group_size, batch_size)
    gq = c.basis.T @ gamma @ c.basis
    sig = lyapunov_covariance(c.eigenvalues, gq, beta)
    sig_p = lyapunov_covariance(c.eigenvalues, gq, beta, printed=True)
    return AsymptoticPrediction(est.name, int(group_size), int(batch_size), float(beta), gamma,
                                sig, chi2_weights(sig, c.eigenvalues),
                                chi2_weights(sig_p, c.eigenvalues))
