r"""Intervals over prompts: the delete-one-prompt jackknife and Fieller's interval for a ratio.

**Jackknife.** For an estimate ``theta`` (a vector) computed from m iid prompts and its
leave-one-prompt-out values ``theta_(-a)``, the jackknife covariance is

.. math:: \widehat{\mathrm{Cov}} = \frac{m-1}{m}\sum_{a=1}^m (\theta_{(-a)} - \bar\theta_{(\cdot)})
          (\theta_{(-a)} - \bar\theta_{(\cdot)})^\top,

which for a mean over prompts is exactly ``s^2 / m`` and is consistent for U-statistics over
prompts (the ``||grad J||^2`` term of c1).

**Fieller.** For a ratio ``rho = b / a`` of two asymptotically normal estimates with covariance
``(v_aa, v_ab, v_bb)``, the 1 - alpha set is ``{rho : (b - rho a)^2 <= z^2 Var(b - rho a)}``, i.e.

.. math:: (a^2 - z^2 v_{aa})\rho^2 - 2 (a b - z^2 v_{ab})\rho + (b^2 - z^2 v_{bb}) \le 0 .

It is a bounded interval only when ``a`` is significantly non-zero (``a^2 > z^2 v_aa``);
otherwise it is unbounded (a complement of an interval or the whole line) and the honest report
is an upper bound of ``inf``. :func:`fieller_interval` returns the hull of the set intersected
with ``rho >= 0`` (the ratios c3/c1 of the scaling law are non-negative).

Every function is pure ``jax.numpy`` (jit- and vmap-friendly).
"""

from __future__ import annotations

import jax.numpy as jnp
from .._precision import float64


@float64
def jackknife_cov(loo):
    """Jackknife covariance from leave-one-out values.

    Args:
        loo: (m, k) array, row a = the estimate with prompt a left out (m >= 2).

    Returns:
        (k, k) covariance ``(m - 1)/m sum_a (loo_a - mean)(loo_a - mean)^T``.
    """
    loo = jnp.asarray(loo)
    m = loo.shape[0]
    d = loo - jnp.mean(loo, axis=0)
    return (m - 1) / m * (d.T @ d)


@float64
def normal_interval(value, se, quantile):
    """``(value - q se, value + q se)`` (arrays broadcast)."""
    return value - quantile * se, value + quantile * se


@float64
def fieller_interval(a, b, v_aa, v_bb, v_ab, quantile):
    """Fieller's 1 - alpha set for ``rho = b / a`` intersected with ``rho >= 0`` (its hull).

    Args:
        a, b: the estimates of the denominator and numerator.
        v_aa, v_bb, v_ab: their (co)variances.
        quantile: the normal (or t) quantile, e.g. 1.96.

    Returns:
        ``(low, high)``: ``high = inf`` when ``a`` is not significantly non-zero
        (``a^2 <= quantile^2 v_aa``); ``(nan, nan)`` when no non-negative ratio is in the set
        (``a`` significantly negative while ``b`` is positive, or the reverse).
    """
    z2 = quantile**2
    A = a * a - z2 * v_aa
    Bq = a * b - z2 * v_ab
    C = b * b - z2 * v_bb
    disc = Bq * Bq - A * C
    sq = jnp.sqrt(jnp.maximum(disc, 0.0))
    bounded = A > 0
    safe_a = jnp.where(A == 0, -jnp.finfo(jnp.result_type(float)).tiny, A)
    # bounded case: [r_lo, r_hi]
    r_lo = (Bq - sq) / jnp.where(bounded, A, 1.0)
    r_hi = (Bq + sq) / jnp.where(bounded, A, 1.0)
    b_empty = r_hi < 0
    b_low = jnp.maximum(r_lo, 0.0)
    # unbounded case (A <= 0): (-inf, r1] u [r2, inf) when disc >= 0, else the whole line
    r1 = (Bq + sq) / jnp.where(bounded, -1.0, safe_a)
    r2 = (Bq - sq) / jnp.where(bounded, -1.0, safe_a)
    u_low = jnp.where(disc < 0, 0.0, jnp.where(r1 >= 0, 0.0, jnp.maximum(r2, 0.0)))
    low = jnp.where(bounded, jnp.where(b_empty, jnp.nan, b_low), u_low)
    high = jnp.where(bounded, jnp.where(b_empty, jnp.nan, r_hi), jnp.inf)
    return low, high


@float64
def group_size_interval(c1, c3, v11, v33, v13, quantile):
    """Interval for ``G* = 1 + sqrt(c3 / c1)`` from Fieller's interval for ``c3 / c1``.

    ``G*`` is increasing in the ratio, so the interval maps endpoint by endpoint; an unbounded
    ratio interval gives ``high = inf`` (c1 not clearly positive: more prompts are needed).

    Args:
        c1, c3: estimates; v11, v33, v13: their jackknife (co)variances; quantile: e.g. 1.96.

    Returns:
        ``(low, high)`` for G*.
    """
    lo, hi = fieller_interval(c1, c3, v11, v33, v13, quantile)
    return 1.0 + jnp.sqrt(lo), 1.0 + jnp.sqrt(hi)
