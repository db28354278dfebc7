r"""Practical GRPO (main paper, Appendix A: Lemma 11, Theorem 12) on an enumerable sequence policy.

The practical group gradient for one prompt x, responses ``y_1..y_G ~ pi_old(.|x)`` with 0/1
rewards ``Z_i`` and the current parameters ``theta`` (one step ``eta`` away from ``theta_old``):

* advantages: leave-one-out ``A_i = (Z_i - Zbar_(-i)) / (S + eps)`` with ``S`` the group's
  sample standard deviation (divisor G - 1); a group with equal rewards has ``A = 0``. Without
  std-normalisation ``A_i = Z_i - Zbar_(-i)`` (then the estimator is GRPO's U-statistic);
* token-level importance ratios ``mu_t = pi_theta(y_t|.) / pi_old(y_t|.)``; each response
  contributes ``w(y) = sum_t mu_t grad log pi_theta(y_t|.) = grad sum_t mu_t``
  (``pi_old`` held fixed);
* a KL penalty of weight ``kappa`` with the K3 estimator per token,
  ``k3 = r - log r - 1``, ``r = pi_ref(y_t|.) / pi_theta(y_t|.)``, whose exact derivative is
  ``grad k3 = (1 - r) grad log pi_theta(y_t|.)``; each response contributes
  ``q(y) = -kappa grad sum_t k3_t``.

The estimator is ``g_hat = (1/G) sum_i (A_i w(y_i) + q(y_i))``. Writing
``N = (1/G) sum_i (Z_i - Zbar_(-i)) w(y_i)`` (an order-2 U-statistic with kernel
``1/2 (w_a - w_b)(Z_a - Z_b)``), ``g_hat = N / S + mean_i q(y_i)``. Lemma 11 compares it with the
order-2 U-statistic ``U`` whose kernel divides by the population standard deviation
``sigma(x) = sqrt(V(1 - V))`` instead, ``h = 1/2 (w_a - w_b)(Z_a - Z_b) / sigma + 1/2 (q_a + q_b)``:
``g_hat - U = N (1/S - 1/sigma)`` is ``O_p(G^-1/2)``, with
``G E||g_hat - U||^2 -> ||Cov(w, Z)||^2 Var((Z - V)^2) / (4 sigma^6)``.

Everything is exact. Given the number k of successes in the group (``k ~ Binomial(G, V)``), the
responses are independent draws from the reward-conditioned laws ``pi_old(y) mu(y) / V`` (Z = 1)
and ``pi_old(y)(1 - mu(y)) / (1 - V)`` (Z = 0), the advantages take two values, and every moment
of ``g_hat`` is a finite sum over k of moments of ``w`` and ``q`` under these two laws. The
first-order (Hajek) term of ``g_hat`` has influence function
``psi = [(w - E w)(Z - V) - Cov(w, Z)] / sigma - Cov(w, Z) [(Z - V)^2 - sigma^2] / (2 sigma^3)
+ (q - E q)``; ``tr Sigma_1 = E||psi||^2`` gives Theorem 12's variance ``tr Sigma_1 / G``. The
bias (the ``G -> inf`` mean minus the target ``grad V_theta(x) / sigma(x)``) has two parts: the
token-level ratios ignore the change of the prefix distribution (first order in ``eta``, zero
at ``eta = 0``), and the K3 term (``kappa`` times a first-order term in ``eta`` when the KL
reference is ``theta_old``; of order ``kappa`` at ``eta = 0`` for a fixed ``theta_ref``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
import weakref

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats
from scipy.special import gammaln as _gammaln

from .. import _validation as V
from ..core import SequencePolicy
from .._precision import float64


@dataclass(frozen=True)
class ResponseTerms:
    """Per-response vectors of the practical estimator at (theta, theta_old, theta_ref, kappa).

    ``w`` (P, K, D): ``sum_t mu_t grad log pi_theta(y_t)``; ``q`` (P, K, D): ``-kappa grad sum_t
    k3_t``; ``probs_old`` (P, K): ``pi_old(y|x)``; ``reward_means`` (P, K); ``prompt_probs`` (P,);
    ``grad_value`` (P, D): ``grad_theta V_theta(x)`` (exact, full-sequence); ``kl_grad`` (P, D):
    ``grad_theta KL(pi_theta(.|x) || pi_ref(.|x))`` (sequence level, exact); ``kappa``.
    """

    w: jnp.ndarray
    q: jnp.ndarray
    probs_old: jnp.ndarray
    reward_means: jnp.ndarray
    prompt_probs: jnp.ndarray
    grad_value: jnp.ndarray
    kl_grad: jnp.ndarray
    kappa: float


def _flat_jac(fn, theta):
    jac = jax.jacfwd(fn)(theta)
    lead = jac.ndim - theta.ndim
    return jac.reshape(jac.shape[:lead] + (-1,))


def _check_params(policy, name, value):
    arr = V.finite_array(name, value)
    if arr.shape != tuple(policy.params.shape):
        raise ValueError(f"{name} must have shape {tuple(policy.params.shape)}, got {arr.shape}")
    return jnp.asarray(arr, dtype=jnp.float64)


@float64
def response_terms(policy: SequencePolicy, theta, theta_old, theta_ref=None,
                   kappa: float = 0.0) -> ResponseTerms:
    """Exact per-response terms ``w`` and ``q`` of the practical GRPO gradient (module docstring).

    Args:
        policy: a :class:`~grpo_theory.core.policies.SequencePolicy` (its rewards and prompts).
        theta: current parameters (shape of ``policy.params``).
        theta_old: the sampling parameters.
        theta_ref: the KL reference parameters; ``None`` means ``theta_old`` (the printed form).
        kappa: KL weight >= 0.

    Returns:
        :class:`ResponseTerms`.
    """
    if not isinstance(policy, SequencePolicy):
        raise ValueError(f"policy must be a SequencePolicy, got {type(policy).__name__}")
    th = _check_params(policy, "theta", theta)
    old = _check_params(policy, "theta_old", theta_old)
    ref = old if theta_ref is None else _check_params(policy, "theta_ref", theta_ref)
    kappa = V.real_scalar("kappa", kappa, minimum=0.0)
    w, k3g, pi_old, grad_value, kl_grad = _terms_fn(policy)(th, old, ref)
    return ResponseTerms(
        w=w, q=-kappa * k3g, probs_old=pi_old, reward_means=jnp.asarray(policy.reward_means),
        prompt_probs=jnp.asarray(policy.prompt_probs), grad_value=grad_value, kl_grad=kl_grad,
        kappa=kappa)


_TERMS_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _terms_fn(policy):
    """One compiled function per policy: (theta, theta_old, theta_ref) -> the exact terms."""
    fn = _TERMS_CACHE.get(policy)
    if fn is not None:
        return fn

    handle = weakref.ref(policy)  # no strong reference from the cached value to its key

    def compute(th, old, ref):
        policy = handle()
        lp_old = policy.token_log_probs(old)
        lp_ref = policy.token_log_probs(ref)

        def ratio_sum(t):  # sum_t pi_theta / pi_old per response (padding: exp(0) = 1, constant)
            return jnp.sum(jnp.exp(policy.token_log_probs(t) - lp_old), axis=-1)

        def k3_sum(t):  # sum_t (r - log r - 1), log r = log pi_ref - log pi_theta
            d = lp_ref - policy.token_log_probs(t)
            return jnp.sum(jnp.exp(d) - d - 1.0, axis=-1)

        def value(t):
            return jnp.sum(jnp.exp(policy.log_probs(t)) * policy.reward_means, axis=-1)

        def kl(t):
            lp = policy.log_probs(t)
            return jnp.sum(jnp.exp(lp) * (lp - policy.log_probs(ref)), axis=-1)

        return (_flat_jac(ratio_sum, th), _flat_jac(k3_sum, th),
                jnp.exp(policy.log_probs(old)), _flat_jac(value, th), _flat_jac(kl, th))

    fn = jax.jit(compute)
    _TERMS_CACHE[policy] = fn
    return fn

@float64
def k3_gradient_forms(policy: SequencePolicy, theta, theta_ref) -> dict:
    """Per-token gradients of the K3 estimator, by autodiff and in closed forms.

    With ``r = pi_ref / pi_theta`` (token level), ``k3 = r - log r - 1`` and
    ``grad k3 = (1 - r) grad log pi_theta``. The forms with the ratio inverted,
    ``(1 - 1/r) grad log pi_theta`` and its negative ``(1/r - 1) grad log pi_theta``, agree with it
    only to first order in ``log r`` (the negative) or not at all (the other).

    Args:
        policy: a :class:`~grpo_theory.core.policies.SequencePolicy`.
        theta: parameters at which to differentiate.
        theta_ref: the reference parameters.

    Returns:
        dict of (P, K, T, D) arrays: ``autodiff`` (``jax.jacfwd`` of k3), ``corrected``
        (``(1 - r) grad log pi``), ``inverted`` (``(1 - 1/r) grad log pi``), ``inverted_neg``
        (``(1/r - 1) grad log pi``).
    """
    th = _check_params(policy, "theta", theta)
    ref = _check_params(policy, "theta_ref", theta_ref)
    lp_ref = policy.token_log_probs(ref)

    def k3(t):
        d = lp_ref - policy.token_log_probs(t)
        return jnp.exp(d) - d - 1.0

    r = jnp.exp(lp_ref - policy.token_log_probs(th))[..., None]
    glp = _flat_jac(policy.token_log_probs, th)
    return dict(autodiff=_flat_jac(k3, th), corrected=(1.0 - r) * glp,
                inverted=(1.0 - 1.0 / r) * glp, inverted_neg=(1.0 / r - 1.0) * glp)


@float64
def advantages(rewards, std_normalise: bool = True, eps: float = 0.0):
    """Leave-one-out advantages ``(Z_i - Zbar_(-i)) / (S + eps)`` over the last axis (G >= 2).

    ``S`` is the sample standard deviation (divisor G - 1); with ``eps = 0`` a group of equal
    rewards gets zero advantages.

    Args:
        rewards: (..., G) rewards.
        std_normalise: divide by ``S + eps``.
        eps: non-negative constant added to ``S``.

    Returns:
        (..., G) advantages.
    """
    z = jnp.asarray(rewards, dtype=jnp.float64)
    G = z.shape[-1]
    if G < 2:
        raise ValueError(f"rewards must have a group axis of size >= 2, got {G}")
    loo = (jnp.sum(z, axis=-1, keepdims=True) - z) / (G - 1)
    a = z - loo
    if not std_normalise:
        return a
    den = jnp.std(z, axis=-1, ddof=1, keepdims=True) + eps
    return jnp.where(den > 0, a / jnp.where(den > 0, den, 1.0), 0.0)


@float64
def practical_group_gradient(w, q, rewards, std_normalise: bool = True, eps: float = 0.0):
    """The practical group gradient ``(1/G) sum_i (A_i w_i + q_i)`` for one sampled group.

    Args:
        w: (G, D) per-response ratio-weighted scores.
        q: (G, D) per-response KL terms (``-kappa grad sum_t k3_t``).
        rewards: (G,) rewards.
        std_normalise, eps: see :func:`advantages`.

    Returns:
        (D,) estimate.
    """
    a = advantages(rewards, std_normalise, eps)
    return jnp.mean(a[:, None] * w + q, axis=0)


@float64
def lemma11_ustat(w, q, rewards, sigma):
    """Lemma 11's order-2 U-statistic with kernel
    ``h = 1/2 (w_a - w_b)(Z_a - Z_b) / sigma + 1/2 (q_a + q_b)``.

    Args:
        w, q: (G, D) per-response terms; rewards: (G,); sigma: the population reward standard
            deviation ``sqrt(V(1 - V))`` (> 0).

    Returns:
        (D,) value (computed pairwise, not by the leave-one-out shortcut).
    """
    z = jnp.asarray(rewards, dtype=jnp.float64)
    G = z.shape[0]
    if G < 2:
        raise ValueError(f"rewards must have size >= 2, got {G}")
    h = (0.5 * (w[:, None] - w[None]) * (z[:, None] - z[None])[..., None] / sigma
         + 0.5 * (q[:, None] + q[None]))
    off = 1.0 - jnp.eye(G)
    return jnp.einsum("ij,ijd->d", off, h) / (G * (G - 1))


@dataclass(frozen=True)
class ExactMoments:
    """Exact per-prompt moments of the practical estimator at one G (arrays over prompts P).

    ``mean`` (P, D) ``E[g_hat|x]``; ``second`` (P,) ``E[||g_hat||^2|x]``; ``diff_sq`` (P,)
    ``E[||g_hat - U||^2|x]``; ``asym_mean`` (P, D) the ``G -> inf`` mean; ``tr_sigma1`` (P,) and
    ``tr_sigma1_ustat`` (P,) ``E||psi||^2`` of ``g_hat`` and of ``U``; ``diff_limit`` (P,) the
    limit of ``G E||g_hat - U||^2``; ``sigma`` (P,) reward standard deviation; ``value`` (P,) V.
    """

    G: int
    mean: jnp.ndarray
    second: jnp.ndarray
    diff_sq: jnp.ndarray
    asym_mean: jnp.ndarray
    tr_sigma1: jnp.ndarray
    tr_sigma1_ustat: jnp.ndarray
    diff_limit: jnp.ndarray
    sigma: jnp.ndarray
    value: jnp.ndarray


def _sq(x):
    return (x * x).sum(axis=-1)


@float64
def exact_moments(terms: ResponseTerms, group_size: int, std_normalise: bool = True,
                  eps: float = 0.0) -> ExactMoments:
    """Exact moments of ``g_hat`` by conditioning on the number of successes k ~ Bin(G, V).

    Given k, ``A`` equals ``a1 = (G-k)/((G-1) S_k)`` on the k successes and
    ``a0 = -k/((G-1) S_k)`` on the failures, ``S_k^2 = k(G-k)/(G(G-1))``, and the responses are
    independent draws from the reward-conditioned laws, so
    ``E[g_hat|k] = (k mu_1 + (G-k) mu_0)/G`` with ``mu_z = a_z E[w|z] + E[q|z]`` and the
    conditional covariance is ``(k Cov[u|1] + (G-k) Cov[u|0]) / G^2`` for ``u = a_z w + q``.

    Args:
        terms: :class:`ResponseTerms`; every prompt needs ``0 < V(x) < 1``.
        group_size: G >= 2.
        std_normalise, eps: see :func:`advantages`.

    Returns:
        :class:`ExactMoments`.
    """
    G = V.positive_int("group_size", group_size, 2)
    eps = V.real_scalar("eps", eps, minimum=0.0)
    val = jnp.sum(terms.probs_old * terms.reward_means, axis=1)
    if not bool(jnp.all((val > 0) & (val < 1))):
        raise ValueError("terms: every prompt needs a success probability V(x) strictly in (0, 1)")
    out = _moments_core(terms.probs_old, terms.reward_means, terms.w, terms.q, G, eps, G + 1,
                        bool(std_normalise))
    return ExactMoments(G, *out)


def _moments_core(pi, mu, w, q, G, eps, n_k, std_normalise):
    """NumPy float64 (no compilation per G); see :func:`exact_moments`."""
    pi, mu, w, q = (np.asarray(a, dtype=np.float64) for a in (pi, mu, w, q))
    G, eps = float(G), float(eps)
    val = np.sum(pi * mu, axis=1)
    p1 = pi * mu / val[:, None]
    p0 = pi * (1 - mu) / (1 - val)[:, None]
    m1, m0 = np.einsum("pk,pkd->pd", p1, w), np.einsum("pk,pkd->pd", p0, w)
    n1, n0 = np.einsum("pk,pkd->pd", p1, q), np.einsum("pk,pkd->pd", p0, q)
    ww, wq, qq = _sq(w), np.sum(w * q, -1), _sq(q)
    Eww1, Eww0 = np.sum(p1 * ww, 1), np.sum(p0 * ww, 1)
    Ewq1, Ewq0 = np.sum(p1 * wq, 1), np.sum(p0 * wq, 1)
    Eqq1, Eqq0 = np.sum(p1 * qq, 1), np.sum(p0 * qq, 1)

    k = np.arange(n_k, dtype=np.float64)
    live = k <= G
    k = np.where(live, k, 0.0)
    v = val[:, None]
    logpmf = (_gammaln(G + 1.0) - _gammaln(k + 1) - _gammaln(G - k + 1)
              + k * np.log(v) + (G - k) * np.log1p(-v))
    pk = np.where(live[None], np.exp(logpmf), 0.0)  # (P, n_k), zero beyond k = G
    s_k = np.sqrt(k * (G - k) / (G * (G - 1.0)))
    a1u, a0u = (G - k) / (G - 1.0), -k / (G - 1.0)
    sigma = np.sqrt(val * (1 - val))
    if std_normalise:
        den = s_k + eps
        inv = np.where(den > 0, 1.0 / np.where(den > 0, den, 1.0), 0.0)
        c = np.where(s_k > 0, inv[None] - 1.0 / sigma[:, None], 0.0)  # (P, G+1)
    else:
        inv = np.ones_like(k)
        c = np.zeros((val.shape[0], n_k))
    a1, a0 = a1u * inv, a0u * inv  # (G+1,)

    def cls(a, m, n, Eww, Ewq, Eqq):  # mean (P, G+1, D) and E||u||^2 (P, G+1)
        mean = a[None, :, None] * m[:, None] + n[:, None]
        e2 = a[None] ** 2 * Eww[:, None] + 2 * a[None] * Ewq[:, None] + Eqq[:, None]
        return mean, e2

    mu1, e1 = cls(a1, m1, n1, Eww1, Ewq1, Eqq1)
    mu0, e0 = cls(a0, m0, n0, Eww0, Ewq0, Eqq0)
    kk, rest = k[None, :, None], (G - k)[None, :, None]
    M = (kk * mu1 + rest * mu0) / G
    second_k = (k * (e1 - _sq(mu1)) + (G - k) * (e0 - _sq(mu0))) / G**2 + _sq(M)
    mean = np.einsum("pk,pkd->pd", pk, M)
    second = np.sum(pk * second_k, axis=1)
    nmean = (kk * a1u[None, :, None] * m1[:, None] + rest * a0u[None, :, None] * m0[:, None]) / G
    n2 = (k * a1u**2 * (Eww1 - _sq(m1))[:, None]
          + (G - k) * a0u**2 * (Eww0 - _sq(m0))[:, None]) / G**2 + _sq(nmean)
    diff_sq = np.sum(pk * c**2 * n2, axis=1)

    # influence functions over (y, z) for the Hajek variance
    Ew = np.einsum("pk,pkd->pd", pi, w)
    Eq = np.einsum("pk,pkd->pd", pi, q)
    cov = (val * (1 - val))[:, None] * (m1 - m0)  # Cov(w, Z) = E[w Z] - E[w] V
    scale = sigma if std_normalise else np.ones_like(sigma)

    def psi(z, with_std):
        d = z - val
        out = ((w - Ew[:, None]) * d[:, None, None] - cov[:, None]) / scale[:, None, None]
        out = out + q - Eq[:, None]
        if with_std:
            s2 = d**2 - sigma**2
            out = out - (cov / (2 * sigma[:, None] ** 3) * s2[:, None])[:, None]
        return out

    def tr(with_std):
        return np.sum(pi * (mu * _sq(psi(1.0, with_std)) + (1 - mu) * _sq(psi(0.0, with_std))), 1)

    tr_u = tr(False)
    tr_g = tr(True) if std_normalise else tr_u
    if std_normalise:
        var_s2 = val * (1 - val) * (1 - 2 * val) ** 2  # Var((Z - V)^2), Z ~ Bernoulli(V)
        diff_limit = _sq(cov) * var_s2 / (4 * sigma**6)
    else:
        diff_limit = np.zeros_like(val)
    asym = cov / scale[:, None] + (val[:, None] * n1 + (1 - val)[:, None] * n0)
    return (mean, second, diff_sq, asym, tr_g, tr_u, diff_limit, sigma, val)


@float64
def target_gradient(terms: ResponseTerms, std_normalise: bool = True,
                    regularised: bool = False):
    """The per-prompt estimand: ``grad V_theta(x) / sigma_old(x)`` (or without the division).

    Args:
        terms: :class:`ResponseTerms`.
        std_normalise: divide by ``sigma_old(x) = sqrt(V_old(x)(1 - V_old(x)))``.
        regularised: subtract ``kappa grad KL(pi_theta || pi_ref)`` (the KL-regularised target).

    Returns:
        (P, D) target.
    """
    val = jnp.sum(terms.probs_old * terms.reward_means, axis=1)
    t = terms.grad_value
    if std_normalise:
        t = t / jnp.sqrt(val * (1 - val))[:, None]
    if regularised:
        t = t - terms.kappa * terms.kl_grad
    return t


@float64
def decomposition(terms: ResponseTerms, mom: ExactMoments, target) -> dict:
    """Theorem 12's decomposition, averaged over prompts with ``f(x)``.

    Args:
        terms: :class:`ResponseTerms` (for the prompt probabilities).
        mom: :class:`ExactMoments` at some G.
        target: (P, D) estimand (:func:`target_gradient`).

    Returns:
        dict of floats: ``mse`` (E||g_hat - T||^2), ``bias_sq`` (finite G), ``variance``,
        ``bias_sq_asym`` (``||lim E g_hat - T||^2``), ``tr_sigma1``, ``tr_sigma1_ustat``,
        ``predicted`` (``bias_sq_asym + tr_sigma1 / G``), ``diff_sq``, ``diff_limit``.
    """
    f = np.asarray(terms.prompt_probs, dtype=np.float64)
    T = np.asarray(target, dtype=np.float64)
    var = mom.second - _sq(mom.mean)
    out = dict(mse=f @ (mom.second - 2 * np.sum(mom.mean * T, -1) + _sq(T)),
               bias_sq=f @ _sq(mom.mean - T), variance=f @ var,
               bias_sq_asym=f @ _sq(mom.asym_mean - T), tr_sigma1=f @ mom.tr_sigma1,
               tr_sigma1_ustat=f @ mom.tr_sigma1_ustat, diff_sq=f @ mom.diff_sq,
               diff_limit=f @ mom.diff_limit)
    out = {k: float(v) for k, v in out.items()}
    out["predicted"] = out["bias_sq_asym"] + out["tr_sigma1"] / mom.G
    return out


@float64
def mc_squared_errors(terms: ResponseTerms, group_size: int, n_reps: int, key, target,
                      std_normalise: bool = True, eps: float = 0.0):
    """Monte Carlo ``||g_hat - T(x)||^2`` and ``||g_hat - U||^2`` per prompt from sampled groups.

    Groups are drawn directly (responses from ``pi_old``, Bernoulli rewards) and the estimator is
    computed from :func:`advantages`, independently of :func:`exact_moments`.

    Args:
        terms: :class:`ResponseTerms`; group_size: G >= 2; n_reps: groups per prompt;
        key: JAX PRNG key; target: (P, D); std_normalise, eps: see :func:`advantages`.

    Returns:
        ``(err, diff)``: two (P, n_reps) arrays.
    """
    G = V.positive_int("group_size", group_size, 2)
    n = V.positive_int("n_reps", n_reps)
    key = V.key_or_seed(key)
    P, K = terms.probs_old.shape
    val = jnp.sum(terms.probs_old * terms.reward_means, axis=1)
    sigma = jnp.sqrt(val * (1 - val))
    errs, diffs = [], []
    for p in range(P):
        sub, key = jax.random.split(key)
        e, d = _mc_prompt(sub, jnp.log(terms.probs_old[p]), terms.reward_means[p], terms.w[p],
                          terms.q[p], jnp.asarray(target)[p], sigma[p], jnp.float64(eps), n, G,
                          bool(std_normalise))
        errs.append(e)
        diffs.append(d)
    return jnp.stack(errs), jnp.stack(diffs)


@partial(jax.jit, static_argnums=(8, 9, 10))
def _mc_prompt(key, logp, mu, w, q, target, sigma, eps, n, G, std_normalise):
    K = logp.shape[0]
    k1, k2 = jax.random.split(key)
    y = jax.random.categorical(k1, logp, shape=(n, G))
    z = jax.random.bernoulli(k2, mu[y]).astype(jnp.float64)
    rows = jnp.repeat(jnp.arange(n), G)

    def scatter(vals):
        return jnp.zeros((n, K)).at[rows, y.ravel()].add(vals.ravel())

    cnt = scatter(jnp.ones_like(z))
    g = (scatter(advantages(z, std_normalise, eps)) @ w + cnt @ q) / G
    scale = sigma if std_normalise else 1.0
    u = (scatter(advantages(z, False) / scale) @ w + cnt @ q) / G
    return _sq(g - target), _sq(g - u)


@float64
def loglog_slope(x, y, level: float = 0.95) -> tuple[float, float, float]:
    """Least-squares slope of ``log y`` on ``log x`` with a t confidence interval.

    Args:
        x, y: positive arrays of equal length >= 3.
        level: confidence level in (0, 1).

    Returns:
        ``(slope, low, high)``.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 3:
        raise ValueError(f"x and y must be 1-d of equal length >= 3, got {x.shape}, {y.shape}")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("x and y must be positive for a log-log fit")
    res = stats.linregress(np.log(x), np.log(y))
    half = stats.t.ppf(0.5 + level / 2, x.size - 2) * res.stderr
    return float(res.slope), float(res.slope - half), float(res.slope + half)
