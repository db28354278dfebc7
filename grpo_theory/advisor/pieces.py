r"""The U-statistics behind the sample-based estimates of c1, c2, c3 and G* (pure jax.numpy).

From m prompts ``x_a`` drawn iid from the prompt distribution and n responses each (scores
``s_ai = grad log pi(y_ai | x_a)``, rewards ``Z_ai``), every per-prompt quantity of Theorem 7 is
estimated by a U-statistic over *distinct* responses, so only rewards, the squared norms
``q_ai = ||s_ai||^2`` and inner products of the per-prompt means ``ghat_a = (1/n) sum_i Z_ai s_ai``
are needed (O(D) memory when streamed; never an n x D matrix):

* ``||g(x)||^2``: ``T_a = (||sum_i s_i Z_i||^2 - sum_i q_i Z_i^2) / (n (n-1))``;
* ``E[||s||^2 | x] sigma^2(x)``: ``R_a`` = average over distinct (i, j, k) of
  ``q_i (Z_j - Z_k)^2 / 2``;
* ``E[||s||^2 (Z - V)^2 | x]``: ``W_a`` = average over distinct (i, j, k) of
  ``q_i (Z_i - Z_j)(Z_i - Z_k)``, so ``tr Sigma_or(x) = W_a - T_a`` (true scores: E[s|x] = 0);
* ``||grad J||^2``: ``U = (||sum_a ghat_a||^2 - sum_a ||ghat_a||^2) / (m (m-1))`` (distinct
  prompts).

Hence, with the definitions of :func:`grpo_theory.core.scaling.scaling_constants`,

.. math:: \hat c_1 = \overline{T} - U,\qquad \hat c_2 = \overline{W - T},\qquad
          \hat c_3 = \overline{R + T},

each unbiased (``E hat c = c`` exactly; the tests check it by enumerating every sample). The
order-3 statistics need ``n >= 3`` responses per prompt and the across-prompt statistic with its
jackknife ``m >= 3`` prompts. The sums over distinct triples are O(n) through
``sum_{j<k, j,k != i} (Z_j - Z_k)^2 = (n-1) A_{-i} - B_{-i}^2`` (``A``, ``B``: sums of ``Z^2``,
``Z`` without i) and ``sum_{j != k, j,k != i} (Z_i - Z_j)(Z_i - Z_k) = d_i^2 - e_i``
(``d_i = sum_{j != i}(Z_i - Z_j)``, ``e_i = sum_{j != i} (Z_i - Z_j)^2``).

:func:`rollout_statistics` gives the parameter vector and its leave-one-prompt-out values,
:func:`scaling_intervals` the intervals (jit/vmap friendly); the result class is
:class:`~grpo_theory.advisor.result.ScalingEstimate`, the builders are in
:mod:`grpo_theory.advisor.estimate`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import _validation as V
from .._precision import float64
from ..core import PIECES
from .intervals import group_size_interval, jackknife_cov, normal_interval


MIN_SAMPLES = 3
"""Fewest responses per prompt: the order-3 U-statistics need 3 distinct responses."""
MIN_PROMPTS = 3
"""Fewest prompts: the across-prompt U-statistic needs 2 distinct prompts, its jackknife one
more."""
PARAMETERS = PIECES
"""The estimated parameter vector, in order (the closed forms' pieces) (``c_v``: vanilla's per-sample term; ``grad_sq``:
``||grad J||^2``)."""


@float64
def prompt_pieces(rewards, sq_norms, mean_sq):
    """Unbiased per-prompt pieces from n >= 3 responses per prompt (module docstring).

    Args:
        rewards: (m, n) rewards Z.
        sq_norms: (m, n) squared score norms ``||s||^2``.
        mean_sq: (m,) ``||ghat_a||^2`` with ``ghat_a = (1/n) sum_i Z_ai s_ai``.

    Returns:
        dict of (m,) arrays: ``value`` (V(x)), ``sigma2`` (Var(Z|x), ddof 1), ``score_sq``
        (E[||s||^2|x]), ``grad_sq`` (||g(x)||^2), ``score_sq_sigma2`` (E[||s||^2|x] sigma^2(x)),
        ``score_sq_dev2`` (E[||s||^2 (Z - V)^2|x]), ``tr_oracle`` (tr Sigma_or(x)),
        ``score_sq_z2`` (E[||s||^2 Z^2|x]), ``c3`` and ``c_v`` (their per-prompt terms).
    """
    z = jnp.asarray(rewards)
    q = jnp.asarray(sq_norms)
    n = z.shape[1]
    sz = jnp.sum(z, axis=1, keepdims=True)
    sz2 = jnp.sum(z * z, axis=1, keepdims=True)
    b = sz - z  # B_{-i}
    a = sz2 - z * z  # A_{-i}
    n3 = n * (n - 1) * (n - 2)
    qz2 = jnp.sum(q * z * z, axis=1)
    t = (n * n * jnp.asarray(mean_sq) - qz2) / (n * (n - 1))
    # sum_{i != j} Z_i Z_j <s_i, s_j>: exactly 0 with at most one nonzero reward (not rounding)
    t = jnp.where(jnp.sum(z != 0, axis=1) <= 1, 0.0, t)
    r = jnp.sum(q * ((n - 1) * a - b * b), axis=1) / n3
    d = (n - 1) * z - b
    e = (n - 1) * z * z - 2 * z * b + a
    w = jnp.sum(q * (d * d - e), axis=1) / n3
    value = jnp.mean(z, axis=1)
    return dict(value=value, sigma2=jnp.var(z, axis=1, ddof=1), score_sq=jnp.mean(q, axis=1),
                grad_sq=t, score_sq_sigma2=r, score_sq_dev2=w, tr_oracle=w - t,
                score_sq_z2=qz2 / n, c3=r + t, c_v=qz2 / n - t)


@float64
def rollout_statistics(rewards, sq_norms, mean_sq, mean_dot):
    """The parameter vector ``(c1, c2, c3, c_v, ||grad J||^2)`` and its leave-one-prompt-out values.

    Args:
        rewards, sq_norms: (m, n); mean_sq: (m,) ``||ghat_a||^2``; mean_dot: (m,)
            ``<ghat_a, sum_b ghat_b>`` (so ``sum_a mean_dot_a = ||sum_a ghat_a||^2``).

    Returns:
        ``(theta (5,), loo (m, 5), pieces)``: estimates in the order of :data:`PARAMETERS`, the
        same with each prompt left out (m >= 3), and :func:`prompt_pieces`.
    """
    p = prompt_pieces(rewards, sq_norms, mean_sq)
    mq = jnp.asarray(mean_sq)
    md = jnp.asarray(mean_dot)
    m = mq.shape[0]
    s_sq, qsum = jnp.sum(md), jnp.sum(mq)
    u = (s_sq - qsum) / (m * (m - 1))
    u_loo = (s_sq - 2 * md + 2 * mq - qsum) / ((m - 1) * (m - 2))
    # sum_{a != b} <ghat_a, ghat_b> is exactly 0 when at most one prompt has a nonzero reward
    # (ghat_b = 0 for the others): the two routes' rounding must not make it a c1
    active = jnp.any(jnp.asarray(rewards) != 0, axis=1)
    n_active = jnp.sum(active)
    u = jnp.where(n_active <= 1, 0.0, u)
    u_loo = jnp.where(n_active - active <= 1, 0.0, u_loo)
    per = jnp.stack([p["grad_sq"], p["tr_oracle"], p["c3"], p["c_v"]], axis=1)  # (m, 4)
    tot = jnp.sum(per, axis=0)
    mean = tot / m
    loo_mean = (tot[None, :] - per) / (m - 1)
    theta = jnp.concatenate([jnp.stack([mean[0] - u]), mean[1:], jnp.stack([u])])
    loo = jnp.concatenate([(loo_mean[:, 0] - u_loo)[:, None], loo_mean[:, 1:], u_loo[:, None]],
                          axis=1)
    return theta, loo, p


@jax.jit
def statistics_jit(z, q, mq, md):
    theta, loo, pieces = rollout_statistics(z, q, mq, md)
    return theta, jackknife_cov(loo), pieces


@float64
def scaling_intervals(theta, cov, quantile):
    """Point estimates and intervals of c1, c2, c3 and G* (jit/vmap friendly).

    Args:
        theta: (5,) parameter vector (:data:`PARAMETERS`); cov: (5, 5) its covariance;
        quantile: the two-sided quantile (e.g. :func:`t_quantile`).

    Returns:
        dict: ``c`` (3,), ``se`` (3,), ``low``/``high`` (3,) for c1, c2, c3, ``g_star`` (``inf``
        when c1 <= 0; ``1 + sqrt(max(c3, 0)/c1)`` otherwise) and ``g_low``/``g_high``
        (Fieller; ``g_high = inf`` when c1 is not clearly positive).
    """
    c = theta[:3]
    se = jnp.sqrt(jnp.maximum(jnp.diag(cov)[:3], 0.0))
    lo, hi = normal_interval(c, se, quantile)
    c1, c3 = theta[0], theta[2]
    g = jnp.where(c1 > 0, 1.0 + jnp.sqrt(jnp.maximum(c3, 0.0) / jnp.where(c1 > 0, c1, 1.0)),
                  jnp.inf)
    g_lo, g_hi = group_size_interval(c1, c3, cov[0, 0], cov[2, 2], cov[0, 2], quantile)
    return dict(c=c, se=se, low=lo, high=hi, g_star=g, g_low=g_lo, g_high=g_hi)


intervals_jit = jax.jit(scaling_intervals)


def t_quantile(alpha: float, n_prompts: int) -> float:
    """Two-sided Student t quantile ``t_{m-1, 1-alpha/2}`` (``scipy.special.stdtrit``)."""
    from scipy.special import stdtrit

    alpha = V.real_scalar("alpha", alpha, positive=True)
    if not alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    m = V.positive_int("n_prompts", n_prompts, 2)
    return float(stdtrit(m - 1, 1.0 - alpha / 2.0))
