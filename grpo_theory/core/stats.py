r"""One result type for Monte Carlo and statistical estimates, and a streaming moment accumulator.

:class:`Estimate` holds a point estimate, its standard error and the sample size, and gives
normal-approximation intervals ``value -/+ z_{1-alpha/2} se`` (statsmodels style:
``conf_int(alpha=0.05)``). Every z quantile of the package comes from :func:`z_value`
(``scipy.stats.norm.ppf``), so no 1.96 is written anywhere else.

:class:`Moments` is a pytree of running sums (count, mean, centred sum of squares ``M2``) that is
updated a batch at a time with Chan, Golub and LeVeque's pairwise merge

.. math:: n = n_a + n_b,\quad \delta = \bar x_b - \bar x_a,\quad
          \bar x = \bar x_a + \delta\, n_b / n,\quad M_2 = M_{2,a} + M_{2,b} + \delta^2 n_a n_b / n,

which is Welford's update generalised to batches: no ``sum x^2 - n \bar x^2`` cancellation, so
float64 variances stay accurate when the coefficient of variation is tiny. It runs inside
``lax.scan`` (the Monte Carlo engine keeps one in its carry), so summaries of R replicates need
O(1) memory in R.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from .._precision import float64

__all__ = ["z_value", "Estimate", "estimate_mean", "Moments", "moments_init", "moments_update",
           "moments_estimate"]


@lru_cache(maxsize=64)
def _z(alpha: float) -> float:
    from scipy.special import ndtri  # norm.ppf's kernel, without importing scipy.stats

    return float(ndtri(1.0 - alpha / 2.0))


def z_value(alpha: float = 0.05) -> float:
    """Two-sided standard-normal quantile ``z_{1-alpha/2}`` (1.959963984540054 for alpha=0.05).

    Args:
        alpha: the level, ``0 < alpha < 1`` (``1 - alpha`` is the coverage).

    Returns:
        ``scipy.special.ndtri(1 - alpha / 2)`` (= ``scipy.stats.norm.ppf``) as a float.
    """
    if isinstance(alpha, (bool, str)) or not isinstance(alpha, (int, float, np.floating,
                                                                 np.integer)):
        raise ValueError(f"alpha must be a real number in (0, 1), got {alpha!r}")
    a = float(alpha)
    if not 0.0 < a < 1.0:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    return _z(a)


@dataclass(frozen=True)
class Estimate:
    """A point estimate with standard error ``se`` from ``n`` observations.

    Attributes:
        value: the estimate (e.g. a sample mean).
        se: its standard error (e.g. ``std(ddof=1) / sqrt(n)``).
        n: number of observations it was computed from.
    """

    value: float
    se: float
    n: int

    def conf_int(self, alpha: float = 0.05) -> tuple[float, float]:
        """Normal interval ``value -/+ z_value(alpha) * se``.

        Args:
            alpha: 1 - coverage (default 0.05, a 95% interval).

        Returns:
            ``(low, high)``.
        """
        h = z_value(alpha) * self.se
        return self.value - h, self.value + h

    def contains(self, x: float, alpha: float = 0.05) -> bool:
        """Whether ``x`` lies in ``conf_int(alpha)`` (closed interval)."""
        lo, hi = self.conf_int(alpha)
        return lo <= x <= hi

    def zscore(self, x: float) -> float:
        """``(value - x) / se`` (``inf``/``nan`` rules of float division when ``se == 0``)."""
        d = self.value - x
        if self.se == 0.0:
            return 0.0 if d == 0.0 else math.copysign(math.inf, d)
        return d / self.se

    def __float__(self) -> float:
        return float(self.value)


def estimate_mean(x) -> Estimate:
    """Sample mean of ``x`` with standard error ``std(x, ddof=1) / sqrt(n)``.

    Args:
        x: a 1-d array of at least two finite observations.

    Returns:
        :class:`Estimate`.
    """
    arr = np.asarray(x, dtype=np.float64).reshape(-1)
    if arr.size < 2:
        raise ValueError(f"x must hold at least 2 observations for a standard error, got "
                         f"{arr.size}")
    return Estimate(float(arr.mean()), float(arr.std(ddof=1) / np.sqrt(arr.size)), int(arr.size))


class Moments(NamedTuple):
    """Running count, mean and centred sum of squares of a stream (a JAX pytree).

    ``mean`` and ``m2`` have the shape of one observation (``()`` for scalars, ``(D,)`` for
    vectors); ``count`` is a float scalar.
    """

    count: jnp.ndarray
    mean: jnp.ndarray
    m2: jnp.ndarray


@float64
def moments_init(shape=(), dtype=jnp.float64) -> Moments:
    """Empty accumulator for observations of the given ``shape``."""
    return Moments(jnp.zeros((), dtype), jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))


@float64
def moments_update(state: Moments, x, weights=None) -> Moments:
    """Merge a batch ``x`` (axis 0 = observations) into ``state``; ``weights`` in {0, 1} masks.

    Chan-Golub-LeVeque merge (see the module docstring) of the batch's mean and ``M2``, the batch
    mean from sums shifted by its first row; jit- and scan-friendly. A batch whose weights are
    all zero leaves ``state`` unchanged.

    Args:
        state: the accumulator so far.
        x: array ``(n, *shape)``.
        weights: optional ``(n,)`` array of 0/1 (padding mask).

    Returns:
        The updated :class:`Moments`.
    """
    x = jnp.asarray(x, state.mean.dtype)
    w = jnp.ones(x.shape[:1], x.dtype) if weights is None else jnp.asarray(weights, x.dtype)
    wb = w.reshape(w.shape + (1,) * (x.ndim - 1))
    nb = jnp.sum(w)
    safe = jnp.maximum(nb, 1.0)
    shift = x[0]  # shifted sums: the batch mean is accurate even when |mean| >> sd
    mb = shift + jnp.sum(wb * (x - shift), axis=0) / safe
    m2b = jnp.sum(wb * (x - mb) ** 2, axis=0)
    n = state.count + nb
    nsafe = jnp.maximum(n, 1.0)
    delta = mb - state.mean
    mean = state.mean + delta * (nb / nsafe)
    m2 = state.m2 + m2b + delta**2 * (state.count * nb / nsafe)
    return Moments(n, mean, m2)


@float64
def moments_estimate(state: Moments) -> Estimate:
    """The mean of a scalar stream as an :class:`Estimate` (se from the ddof=1 variance).

    Args:
        state: a scalar accumulator with ``count >= 2``.

    Returns:
        :class:`Estimate` ``(mean, sqrt(m2 / (n - 1) / n), n)``.
    """
    n = int(round(float(state.count)))
    if n < 2:
        raise ValueError(f"need at least 2 observations for a standard error, got {n}")
    var = max(float(state.m2), 0.0) / (n - 1)
    return Estimate(float(state.mean), math.sqrt(var / n), n)
