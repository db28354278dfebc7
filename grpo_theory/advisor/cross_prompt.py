r"""Unbiased estimates of BASIS's cross-prompt pieces from rollouts (pure jax.numpy).

BASIS's exact MSE (:class:`~grpo_theory.core.closed_forms.CrossPromptMean`) is linear in
:data:`~grpo_theory.core.closed_forms.BASIS_PIECES`: ``c1``, ``c_v``, ``||grad J||^2`` (the
advisor's :data:`~grpo_theory.advisor.pieces.PARAMETERS`) and four products of population means,
``j_qz = J E[q Z]``, ``j2_q = J^2 E[q]``, ``v2_q = E[V(X)^2] E[q]``, ``s2_q = E[sigma^2(X)] E[q]``
(``q = ||s||^2``). From m prompts with n responses each, per prompt a:

* ``zbar_a`` (unbiased for ``V(x_a)``), ``qbar_a`` (``E[q|x_a]``), ``(qz)bar_a`` (``E[qZ|x_a]``),
  the within-prompt pair statistic ``p_a = sum_{i != j} Z_i Z_j / (n (n-1))`` (``V(x_a)^2``) and
  ``sigma2_a`` (ddof 1, ``sigma^2(x_a)``);
* a product of population means is a U-statistic over *distinct* prompts (the same prompt's
  statistics are dependent): ``j_qz = sum_{a != b} zbar_a (qz)bar_b / (m (m-1))``, ``v2_q``,
  ``s2_q`` likewise with ``(p_a, qbar_b)``, ``(sigma2_a, qbar_b)``, and ``j2_q = sum_{a, b, c
  distinct} zbar_a zbar_b qbar_c / (m (m-1)(m-2))``, O(m) by power sums
  (``X^2 W - S W - 2 X P + 2 R`` with ``X = sum zbar``, ``S = sum zbar^2``, ``W = sum qbar``,
  ``P = sum zbar qbar``, ``R = sum zbar^2 qbar``).

Each is unbiased, hence so is the MSE prediction. The triples need m >= 3 prompts and their
delete-one-prompt jackknife (computed exactly, as
:func:`~grpo_theory.advisor.pieces.rollout_statistics` does) one more: :data:`MIN_PROMPTS`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._precision import float64
from ..core import PIECES
from .intervals import jackknife_cov
from .pieces import rollout_statistics

CROSS_PROMPT = ("j_qz", "j2_q", "v2_q", "s2_q")
"""The cross-prompt pieces, in order (:data:`~grpo_theory.core.closed_forms.BASIS_PIECES`)."""
EXTENDED_PARAMETERS = PIECES + CROSS_PROMPT
"""The advisor's extended parameter vector: :data:`PIECES` then :data:`CROSS_PROMPT`."""
MIN_PROMPTS = 4
"""Fewest prompts for the cross-prompt pieces: triples of distinct prompts and their jackknife."""


def _pair(x, y):
    """``sum_{a != b} x_a y_b / (m (m-1))`` and its values with each prompt left out (m,)."""
    m = x.shape[0]
    X, Y, XY = jnp.sum(x), jnp.sum(y), jnp.sum(x * y)
    full = (X * Y - XY) / (m * (m - 1))
    loo = ((X - x) * (Y - y) - (XY - x * y)) / ((m - 1) * (m - 2))
    return full, loo


def _triple(x, w):
    """``sum_{a, b, c distinct} x_a x_b w_c / (m (m-1)(m-2))`` and its leave-one-out values."""
    m = x.shape[0]

    def total(X, S, W, P, R):
        return X * X * W - S * W - 2 * X * P + 2 * R

    sums = (jnp.sum(x), jnp.sum(x * x), jnp.sum(w), jnp.sum(x * w), jnp.sum(x * x * w))
    own = (x, x * x, w, x * w, x * x * w)
    full = total(*sums) / (m * (m - 1) * (m - 2))
    loo = total(*(s - o for s, o in zip(sums, own))) / ((m - 1) * (m - 2) * (m - 3))
    return full, loo


@float64
def cross_prompt_statistics(rewards, sq_norms):
    """The unbiased cross-prompt pieces and their leave-one-prompt-out values.

    Args:
        rewards: (m, n) rewards Z, n >= 2 (m >= 3; the leave-one-out values need m >= 4).
        sq_norms: (m, n) squared score norms ``||s||^2``.

    Returns:
        ``(theta (4,), loo (m, 4))`` in the order of :data:`CROSS_PROMPT`.
    """
    z, q = jnp.asarray(rewards), jnp.asarray(sq_norms)
    n = z.shape[1]
    sz, sz2 = jnp.sum(z, axis=1), jnp.sum(z * z, axis=1)
    zbar, qbar, qzbar = sz / n, jnp.mean(q, axis=1), jnp.mean(q * z, axis=1)
    pair_sq = (sz * sz - sz2) / (n * (n - 1))  # V(x)^2, unbiased
    sigma2 = (sz2 - sz * sz / n) / (n - 1)
    parts = [_pair(zbar, qzbar), _triple(zbar, qbar), _pair(pair_sq, qbar), _pair(sigma2, qbar)]
    theta = jnp.stack([p[0] for p in parts])
    loo = jnp.stack([p[1] for p in parts], axis=1)
    return theta, loo


@jax.jit
def extended_statistics_jit(z, q, mq, md):
    """``(theta (9,), cov (9, 9))`` over :data:`EXTENDED_PARAMETERS` with the joint
    delete-one-prompt jackknife covariance (m >= :data:`MIN_PROMPTS`)."""
    theta, loo, _ = rollout_statistics(z, q, mq, md)
    theta_x, loo_x = cross_prompt_statistics(z, q)
    loo_all = jnp.concatenate([loo, loo_x], axis=1)
    return jnp.concatenate([theta, theta_x]), jackknife_cov(loo_all)
