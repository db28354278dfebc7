r"""The result interface of the package, the scalar :class:`Estimate`, and a streaming accumulator.

Every result that carries estimates with standard errors (:class:`Estimate`,
:class:`~grpo_theory.core.montecarlo.MCResult`, :class:`~grpo_theory.advisor.result.ScalingEstimate`,
...) implements one interface (:class:`Result`, through :class:`ResultMixin`), statsmodels style:

* ``conf_int(alpha=0.05)`` -> ``pandas.DataFrame`` indexed by parameter name, columns ``lower``,
  ``upper`` (the ``1 - alpha`` intervals);
* ``summary(alpha=0.05)`` -> ``pandas.DataFrame`` indexed by parameter name, columns ``estimate``,
  ``std_err``, ``ci_low``, ``ci_high``;
* one-parameter results also give ``value``, ``se`` and ``interval(alpha) -> (low, high)``, the
  plain pair of floats.

:class:`Estimate` holds a point estimate, its standard error and the sample size, and gives
normal-approximation intervals ``value -/+ z_{1-alpha/2} se``. Every z quantile of the package
comes from :func:`z_value` (``scipy.stats.norm.ppf``), so no 1.96 is written anywhere else.

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
from typing import NamedTuple, Protocol, runtime_checkable

import jax.numpy as jnp
import numpy as np
import pandas as pd
from scipy.special import ndtri, stdtrit  # norm.ppf's and t.ppf's kernels, not scipy.stats

from .._precision import float64


@lru_cache(maxsize=64)
def _z(alpha: float) -> float:
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


def t_value(alpha: float, df: float) -> float:
    """Two-sided Student t quantile ``t_{df, 1-alpha/2}`` (``scipy.special.stdtrit``).

    Args:
        alpha: the level, ``0 < alpha < 1``.
        df: degrees of freedom, a real number > 0.

    Returns:
        The quantile as a float (:func:`z_value` as ``df -> inf``).
    """
    z_value(alpha)  # the same checks and messages for alpha
    if isinstance(df, (bool, str)) or not isinstance(df, (int, float, np.floating, np.integer)):
        raise ValueError(f"df must be a real number > 0, got {df!r}")
    if not float(df) > 0.0:
        raise ValueError(f"df must be > 0, got {df!r}")
    return float(stdtrit(float(df), 1.0 - float(alpha) / 2.0))


#: columns of every ``conf_int`` and ``summary`` table
CONF_INT_COLUMNS = ("lower", "upper")
SUMMARY_COLUMNS = ("estimate", "std_err", "ci_low", "ci_high")


@runtime_checkable
class Result(Protocol):
    """What every result with standard errors offers (see the module docstring)."""

    def conf_int(self, alpha: float = 0.05) -> pd.DataFrame: ...

    def summary(self, alpha: float = 0.05) -> pd.DataFrame: ...


class ResultMixin:
    """``conf_int`` and ``summary`` from one method, ``_params``.

    A subclass implements ``_params() -> (names, values, ses, df)``: parameter names, point
    estimates, standard errors (NaN where none), and the degrees of freedom of a Student t
    interval (``None``: normal interval with :func:`z_value`). The default interval is
    ``value -/+ q se``; a result whose intervals are not of that form (Fieller's interval of a
    ratio) overrides ``_bounds(alpha) -> (lower, upper)``.
    """

    __slots__ = ()

    def _params(self):
        raise NotImplementedError(f"{type(self).__name__} must implement _params()")

    def _quantile(self, alpha: float) -> float:
        df = self._params()[3]
        return z_value(alpha) if df is None else t_value(alpha, df)

    def _bounds(self, alpha: float):
        _, values, ses, _ = self._params()
        q = self._quantile(alpha)
        v, s = np.asarray(values, np.float64), np.asarray(ses, np.float64)
        return v - q * s, v + q * s

    def conf_int(self, alpha: float = 0.05) -> pd.DataFrame:
        """The ``1 - alpha`` intervals of every parameter.

        Args:
            alpha: 1 - coverage, ``0 < alpha < 1`` (default 0.05, 95% intervals).

        Returns:
            ``pandas.DataFrame`` indexed by parameter name with float columns ``lower``,
            ``upper``.
        """
        names = list(self._params()[0])
        lo, hi = self._bounds(alpha)
        return pd.DataFrame({c: np.asarray(v, np.float64).reshape(-1)
                             for c, v in zip(CONF_INT_COLUMNS, (lo, hi))},
                            index=names, dtype=float)

    def summary(self, alpha: float = 0.05) -> pd.DataFrame:
        """Estimates, standard errors and ``1 - alpha`` intervals.

        Args:
            alpha: 1 - coverage of the interval columns (default 0.05).

        Returns:
            ``pandas.DataFrame`` indexed by parameter name with float columns ``estimate``,
            ``std_err`` (NaN where the interval is not estimate -/+ q se), ``ci_low``,
            ``ci_high``.
        """
        names, values, ses, _ = self._params()
        lo, hi = self._bounds(alpha)
        cols = (values, ses, lo, hi)
        return pd.DataFrame({c: np.asarray(v, np.float64).reshape(-1)
                             for c, v in zip(SUMMARY_COLUMNS, cols)},
                            index=list(names), dtype=float)


class ScalarResultMixin(ResultMixin):
    """One-parameter results: ``value``, ``se`` and ``interval(alpha) -> (low, high)``."""

    __slots__ = ()

    def interval(self, alpha: float = 0.05) -> tuple[float, float]:
        """The interval ``value -/+ q se`` as a pair of floats.

        ``q`` is :func:`z_value` ``(alpha)``, or :func:`t_value` when ``_params`` gives degrees
        of freedom.

        Args:
            alpha: 1 - coverage (default 0.05, a 95% interval).

        Returns:
            ``(low, high)``.
        """
        _, values, ses, _ = self._params()
        h = self._quantile(alpha) * float(ses[0])
        v = float(values[0])
        return v - h, v + h


@dataclass(frozen=True)
class Estimate(ScalarResultMixin):
    """A point estimate with standard error ``se`` from ``n`` observations.

    Attributes:
        value: the estimate (e.g. a sample mean).
        se: its standard error (e.g. ``std(ddof=1) / sqrt(n)``).
        n: number of observations it was computed from.

    ``interval(alpha)`` gives ``(low, high)``; ``conf_int(alpha)`` and ``summary(alpha)`` the
    one-row tables (row ``"value"``) of the :class:`Result` interface.
    """

    value: float
    se: float
    n: int

    def _params(self):
        return ("value",), (self.value,), (self.se,), None

    def contains(self, x: float, alpha: float = 0.05) -> bool:
        """Whether ``x`` lies in ``interval(alpha)`` (closed interval)."""
        lo, hi = self.interval(alpha)
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
