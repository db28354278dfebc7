r"""Theorem 8's limit law: the Lyapunov covariance, its chi-square weights and the mixture.

Under Theorem 8 of the main paper, ``n Delta_n -> sum_k w_k chi^2_1`` with ``w_k`` the
eigenvalues of ``(1/2) Sigma^(1/2) Lambda Sigma^(1/2)``, ``Sigma`` solving the Lyapunov equation
``(beta Lambda - I/2) Sigma + Sigma (beta Lambda - I/2) = beta^2 Gamma_Q``
(:func:`lyapunov_covariance`, :func:`chi2_weights`). The weighted chi-square mixture's CDF is
computed exactly, to quadrature rounding (:func:`mixture_cdf`, :func:`mixture_quantile`), and
sampled with an explicit key (:func:`sample_mixture`).
:func:`grpo_theory.optim.theory.asymptotic_prediction` assembles them for one estimator.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.special
import scipy.stats

from .. import _validation as V
from .._precision import float64


@float64
def lyapunov_covariance(eigenvalues, gamma_q, beta: float, printed: bool = False) -> np.ndarray:
    """Sigma solving ``(beta Lambda - I/2) Sigma + Sigma (beta Lambda - I/2) = beta^2 Gamma_Q``
    (``Gamma_Q = Q^T Gamma Q``; Theorem 8, corrected). ``printed=True`` drops the ``beta^2``
    as the printed paper does."""
    lam = V.finite_array("eigenvalues", eigenvalues, ndim=1)
    gq = V.finite_array("gamma_q", gamma_q, ndim=2)
    V.same_shape("gamma_q", gq, (lam.size, lam.size), "eigenvalues")
    if not (np.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    if np.any(beta * lam <= 0.5):
        raise ValueError(f"beta must exceed 1/(2 lambda_min) = {0.5 / lam.min():.6g} "
                         f"(Theorem 8), got {beta!r}")
    a = beta * np.diag(lam) - 0.5 * np.eye(lam.size)
    sig = scipy.linalg.solve_continuous_lyapunov(a, (1.0 if printed else beta**2) * gq)
    return 0.5 * (sig + sig.T)


@float64
def chi2_weights(sigma, eigenvalues) -> np.ndarray:
    """w_k = eigenvalues of ``(1/2) Sigma^(1/2) Lambda Sigma^(1/2)`` (ascending)."""
    s = V.finite_array("sigma", sigma, ndim=2)
    lam = V.finite_array("eigenvalues", eigenvalues, ndim=1)
    ev, vec = np.linalg.eigh(s)
    root = vec @ np.diag(np.sqrt(np.clip(ev, 0, None))) @ vec.T
    return np.linalg.eigvalsh(0.5 * root @ np.diag(lam) @ root)


# --- the weighted chi-square mixture -----------------------------------------------------------


def _weights(weights) -> np.ndarray:
    w = V.finite_array("weights", weights, ndim=1)
    if w.size == 0 or np.any(w < 0) or w.sum() <= 0:
        raise ValueError("weights must be a non-empty 1-d array of non-negative numbers, not all 0")
    return w[w > 0]


def _cdf_nested(x: np.ndarray, w: np.ndarray, n_nodes: int) -> np.ndarray:
    """``P(sum_k w_k X_k <= x)`` (X_k ~ chi^2_1, w ascending) by conditioning on the last term:
    with ``X_K = s^2``, ``s = sqrt(x/w_K) sin(phi)`` the remaining sum must be below
    ``x cos^2 phi``, so ``F_K(x) = int_0^(pi/2) sqrt(2/pi) exp(-x sin^2 phi / (2 w_K))
    F_(K-1)(x cos^2 phi) sqrt(x/w_K) cos phi dphi`` with ``F_1(y) = erf(sqrt(y / (2 w_1)))``.
    The integrands are smooth in phi, so Gauss-Legendre converges fast."""
    x = np.maximum(x, 0.0)
    if w.size == 1:
        return scipy.special.erf(np.sqrt(x / (2.0 * w[0])))
    nodes, wts = np.polynomial.legendre.leggauss(n_nodes)
    phi = 0.25 * np.pi * (nodes + 1.0)  # [-1, 1] -> [0, pi/2]
    wts = 0.25 * np.pi * wts
    xe = x[..., None]
    inner = _cdf_nested(xe * np.cos(phi) ** 2, w[:-1], n_nodes)
    integrand = (np.sqrt(2.0 / np.pi) * np.exp(-xe * np.sin(phi) ** 2 / (2.0 * w[-1])) * inner
                 * np.sqrt(xe / w[-1]) * np.cos(phi))
    return np.clip(integrand @ wts, 0.0, 1.0)


@float64
def mixture_cdf(x, weights) -> np.ndarray:
    """``P(sum_k w_k chi^2_1 <= x)``, exact to quadrature rounding: the chi^2_1 CDF for one
    weight; for K weights a (K-1)-fold nested Gauss-Legendre integral of the conditional CDF
    (:func:`_cdf_nested`; 128 nodes per level for K = 2, fewer for larger K). Vectorised over x.
    """
    w = np.sort(_weights(weights))
    xs = np.atleast_1d(np.asarray(x, dtype=np.float64))
    if w.size == 1:
        return scipy.stats.chi2.cdf(xs / w[0], 1)
    if w.size > 4:
        raise ValueError(f"weights: at most 4 positive weights are supported, got {w.size}")
    n_nodes = {2: 128, 3: 64, 4: 32}[w.size]
    out = np.empty(xs.shape)
    flat, res = xs.reshape(-1), out.reshape(-1)
    step = max(1, 2**22 // n_nodes ** (w.size - 1))  # bound memory
    for i in range(0, flat.size, step):
        res[i:i + step] = _cdf_nested(flat[i:i + step], w, n_nodes)
    return out


@float64
def mixture_quantile(q, weights) -> np.ndarray:
    """Quantiles of ``sum_k w_k chi^2_1`` (root of :func:`mixture_cdf`, brentq)."""
    w = _weights(weights)
    qs = np.atleast_1d(np.asarray(q, dtype=np.float64))
    if np.any((qs <= 0) | (qs >= 1)):
        raise ValueError("q must lie in (0, 1)")
    hi = w.max() * scipy.stats.chi2.ppf(qs.max(), w.size) * 1.01 + 1e-12  # chi^2_K dominates
    return np.array([scipy.optimize.brentq(lambda x: mixture_cdf(x, w)[0] - qq, 0.0, hi,
                                           xtol=1e-12) for qq in qs])


@float64
def sample_mixture(key, weights, n: int) -> np.ndarray:
    """n draws of ``sum_k w_k chi^2_1`` (explicit JAX key)."""
    w = _weights(weights)
    V.positive_int("n", n, 1)
    z = jax.random.normal(key, (n, w.size))
    return np.asarray((z**2) @ jnp.asarray(w))
