r"""The statistics and table rendering the study reports share.

One rule each, written once:

* :func:`bootstrap_argmin`: which option (a group size G, a learning rate, ...) has the smallest
  mean, and how sure that is. Replicates are resampled **within each option independently**
  (a percentile bootstrap of ``argmin_o mean_o``): for every option in increasing order, ``n_boot``
  resamples of its replicates with replacement, all from one NumPy generator seeded by ``seed``
  (so a report is deterministic). Ties go to the **smallest option** (``np.argmin`` order). The
  ``level`` interval is the percentile interval of the resampled argmin on the ordered options
  (:func:`interval_from_freq`). For an argmax pass the negated values.
* :func:`bootstrap_ci`: the percentile interval of a statistic of one sample.
* :func:`bootstrap_ratio_ci`: the percentile interval of ``mean(num) / mean(den)`` for two
  independent samples, each resampled within itself (for a handful of seeds, where the delta
  method of :func:`ratio_ci` is not trusted).
* :func:`spearman`: Spearman's rank correlation and its p-value, via
  :func:`scipy.stats.spearmanr` (average ranks for ties).
* :func:`ratio_ci`: the delta-method interval of a ratio of two independent estimates,
  ``r = a/b``, ``se_r = sqrt(se_a^2 + r^2 se_b^2)/|b|``, ``r -/+ z_{1-alpha/2} se_r``.
* :func:`markdown_table`: a DataFrame as a GitHub markdown table (no ``tabulate`` needed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import pandas as pd
from scipy import stats as _sps

from ..core import z_value
from .runner import key_seed


def _seed(seed) -> int:
    """An int seed from ``seed`` (an int, or a JAX PRNG key through ``key_seed``)."""
    if isinstance(seed, bool):
        raise TypeError(f"seed must be an int or a JAX PRNG key, got {seed!r}")
    if isinstance(seed, Integral):
        if int(seed) < 0:
            raise ValueError(f"seed must be >= 0, got {seed!r}")
        return int(seed)
    try:
        return key_seed(seed)
    except Exception as e:  # not a key: say what is allowed
        raise TypeError(f"seed must be an int or a JAX PRNG key, got {type(seed).__name__}") \
            from e


def _level(level) -> float:
    if not isinstance(level, Real) or isinstance(level, bool) or not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must be a number strictly between 0 and 1, got {level!r}")
    return float(level)


def _n_boot(n_boot) -> int:
    if isinstance(n_boot, bool) or not isinstance(n_boot, Integral) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int, got {n_boot!r}")
    return int(n_boot)


def interval_from_freq(options, freq, level: float = 0.95) -> tuple:
    """Percentile interval on the ordered ``options`` from bootstrap argmin frequencies.

    With ``F`` the cumulative frequency and ``a = (1 - level)/2``: the low end is the first
    option with ``F >= a``, the high end the first with ``F >= 1 - a`` (the inverted-CDF
    quantiles, with a 1e-12 tolerance for frequencies stored as floats).

    Args:
        options: the options in increasing order.
        freq: the share of resamples in which each option is the argmin (sums to 1).
        level: the coverage, in (0, 1).
    Returns:
        ``(low option, high option)``.
    """
    opts = list(options)
    f = np.asarray(freq, dtype=np.float64)
    if f.ndim != 1 or len(f) != len(opts) or not len(opts):
        raise ValueError(f"freq must be 1-d with one value per option ({len(opts)}), got shape "
                         f"{f.shape}")
    cdf = np.cumsum(f)
    a = (1 - _level(level)) / 2
    lo = int(np.searchsorted(cdf, a - 1e-12, side="right"))
    hi = int(np.searchsorted(cdf, 1 - a - 1e-12, side="left"))
    return opts[min(lo, len(opts) - 1)], opts[min(hi, len(opts) - 1)]


@dataclass(frozen=True)
class ArgminBootstrap:
    """The result of :func:`bootstrap_argmin`.

    Attributes:
        options: the options in increasing order.
        means: the mean of each option's replicates.
        best: the option with the smallest mean (ties: the smallest option).
        freq: the share of resamples in which each option is the argmin.
        lo, hi: the percentile interval of the resampled argmin (:func:`interval_from_freq`).
        level: its coverage.
    """

    options: tuple
    means: np.ndarray
    best: object
    freq: np.ndarray
    lo: object
    hi: object
    level: float

    @property
    def p_best(self) -> float:
        """The share of the most frequent resampled argmin."""
        return float(self.freq.max())

    @property
    def support(self) -> dict:
        """``{option: share}`` of the options that were ever the resampled argmin."""
        return {o: float(f) for o, f in zip(self.options, self.freq) if f > 0}

    def contains(self, option) -> bool:
        """Whether ``option`` lies in ``[lo, hi]``."""
        return self.lo <= option <= self.hi


def bootstrap_argmin(values_by_option: Mapping, n_boot: int = 2000, seed=0, key=None,
                     level: float = 0.95) -> ArgminBootstrap:
    """Bootstrap of ``argmin_o mean(values_by_option[o])`` (the rule of the module docstring).

    Args:
        values_by_option: ``{option: 1-d replicates}``; options are sortable (G values, ...),
            each with at least one finite-or-inf replicate (NaN is not allowed).
        n_boot: resamples.
        seed: an int or a JAX PRNG key (turned into an int by ``key_seed``).
        key: a JAX PRNG key (or an int), used instead of ``seed`` when given.
        level: the interval's coverage.
    Returns:
        :class:`ArgminBootstrap`.
    """
    if not isinstance(values_by_option, Mapping) or not values_by_option:
        raise ValueError("values_by_option must be a non-empty mapping {option: replicates}")
    n_boot = _n_boot(n_boot)
    options = tuple(sorted(values_by_option))
    rng = np.random.default_rng(_seed(seed if key is None else key))
    boot = np.empty((n_boot, len(options)))
    means = np.empty(len(options))
    for j, o in enumerate(options):
        x = np.asarray(values_by_option[o], dtype=np.float64).reshape(-1)
        if not x.size or np.isnan(x).any():
            raise ValueError(f"values_by_option[{o!r}] must hold at least one replicate and no "
                             "NaN")
        means[j] = x.mean()
        boot[:, j] = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    freq = np.bincount(np.argmin(boot, axis=1), minlength=len(options)) / n_boot
    lo, hi = interval_from_freq(options, freq, level)
    return ArgminBootstrap(options, means, options[int(np.argmin(means))], freq, lo, hi,
                           _level(level))


def bootstrap_ci(values, n_boot: int = 2000, seed=0, stat=np.mean, key=None,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of ``stat`` over ``values`` (resampled with replacement).

    Args:
        values: 1-d sample (one value per seed, ...).
        n_boot: resamples; seed: an int or a JAX PRNG key; stat: a reducer taking ``axis=``;
            key: a JAX PRNG key (or an int), used instead of ``seed`` when given.
        level: the coverage.
    Returns:
        ``(lo, hi)`` (linear-interpolation quantiles); ``(nan, nan)`` for an empty sample.
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    a = (1 - _level(level)) / 2
    n_boot = _n_boot(n_boot)
    if v.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(_seed(seed if key is None else key))
    s = stat(v[rng.integers(0, v.size, (n_boot, v.size))], axis=1)
    return float(np.quantile(s, a)), float(np.quantile(s, 1 - a))


def bootstrap_ratio_ci(num, den, n_boot: int = 2000, seed=0, key=None,
                       level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(num) / mean(den)`` for independent samples.

    One NumPy generator seeded by ``seed`` (or ``key``) draws ``n_boot`` resamples of ``num``,
    then ``n_boot`` of ``den``, each with replacement within its own sample; the interval is the
    percentile interval of the ratios of the resampled means.

    Args:
        num, den: 1-d samples (one value per seed, ...), each non-empty.
        n_boot: resamples; seed: an int or a JAX PRNG key; key: used instead of ``seed`` when
            given; level: the coverage.
    Returns:
        ``(lo, hi)`` (linear-interpolation quantiles).
    """
    a = (1 - _level(level)) / 2
    n_boot = _n_boot(n_boot)
    f = np.asarray(num, dtype=np.float64).reshape(-1)
    p = np.asarray(den, dtype=np.float64).reshape(-1)
    if not f.size or not p.size:
        raise ValueError(f"num and den must be non-empty, got sizes {f.size} and {p.size}")
    rng = np.random.default_rng(_seed(seed if key is None else key))
    b = (f[rng.integers(0, f.size, (n_boot, f.size))].mean(1)
         / p[rng.integers(0, p.size, (n_boot, p.size))].mean(1))
    return float(np.quantile(b, a)), float(np.quantile(b, 1 - a))


@dataclass(frozen=True)
class SpearmanResult:
    """Spearman's ``rho``, its two-sided ``pvalue`` (scipy's t approximation) and ``n``."""

    rho: float
    pvalue: float
    n: int


def spearman(x, y) -> SpearmanResult:
    """Spearman's rank correlation of ``x`` and ``y`` (:func:`scipy.stats.spearmanr`).

    Args:
        x, y: 1-d samples of one length.
    Returns:
        :class:`SpearmanResult`; ``rho`` and ``pvalue`` are NaN with fewer than 3 points or
        when either sample has no spread (a rank correlation is undefined there).
    """
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    b = np.asarray(y, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"x and y must have one length, got {a.size} and {b.size}")
    if a.size < 3 or np.unique(a).size < 2 or np.unique(b).size < 2:
        return SpearmanResult(float("nan"), float("nan"), int(a.size))
    r = _sps.spearmanr(a, b)
    return SpearmanResult(float(r.statistic), float(r.pvalue), int(a.size))


def minimum_detectable_effect(se, df=None, alpha: float = 0.05, power: float = 0.8) -> float:
    r"""The smallest true difference a two-sided level-``alpha`` test detects with ``power``.

    ``MDE = (q_{1 - alpha/2} + q_{power}) se``, with Student t quantiles on ``df`` degrees of
    freedom (normal quantiles when ``df`` is None): a study that reports a difference's interval
    states beside it the effect it could have seen (2.80 se at 5% and 80% with many seeds).

    Args:
        se: the standard error of the estimated difference (>= 0).
        df: its degrees of freedom (e.g. seeds - 1 for a paired t), or None.
        alpha: the test's level, in (0, 1). power: the detection probability, in (0, 1).

    Returns:
        The MDE (NaN when ``se`` is NaN or ``df`` < 1).

    Examples:
        >>> round(minimum_detectable_effect(1.0), 3)
        2.802
        >>> round(minimum_detectable_effect(1.0, df=7), 3)  # 8 seeds, paired
        3.261
    """
    for name, v in (("alpha", alpha), ("power", power)):
        if not 0 < float(v) < 1:
            raise ValueError(f"{name} must be in (0, 1), got {v!r}")
    se = float(se)
    if np.isnan(se) or (df is not None and not float(df) >= 1):
        return float("nan")
    if se < 0:
        raise ValueError(f"se must be >= 0, got {se}")
    if df is None:
        q = _sps.norm.ppf(1 - alpha / 2) + _sps.norm.ppf(power)
    else:
        q = _sps.t.ppf(1 - alpha / 2, df) + _sps.t.ppf(power, df)
    return float(q * se)


def ratio_ci(num, den, alpha: float = 0.05) -> tuple[float, float, float]:
    """Delta-method interval of ``num.value / den.value`` for independent estimates.

    ``r = a/b``, ``se_r = sqrt(se_a^2 + r^2 se_b^2) / |b|`` (first-order expansion of a/b,
    = ``|r| sqrt((se_a/a)^2 + (se_b/b)^2)`` for a != 0; good when both relative errors are
    small), interval ``r -/+ z_value(alpha) se_r``.

    Args:
        num, den: Estimate-like (attributes ``value`` and ``se``; ``den.value != 0``).
        alpha: 1 - coverage.
    Returns:
        ``(r, low, high)``.
    """
    for name, e in (("num", num), ("den", den)):
        if not (hasattr(e, "value") and hasattr(e, "se")):
            raise TypeError(f"{name} must have attributes value and se (an Estimate), got "
                            f"{type(e).__name__}")
        if not float(e.se) >= 0:
            raise ValueError(f"{name}.se must be >= 0, got {e.se!r}")
    a, b = float(num.value), float(den.value)
    if b == 0:
        raise ValueError("den.value must be non-zero for a ratio")
    r = a / b
    se = float(np.hypot(float(num.se), r * float(den.se))) / abs(b)
    h = z_value(alpha) * se
    return r, r - h, r + h


def _cell(v, fmt) -> str:
    if callable(fmt):
        return str(fmt(v))
    if isinstance(v, (bool, np.bool_)) or v is None or isinstance(v, str):
        return "" if v is None else str(v)
    if isinstance(v, (Integral, np.integer)):
        return str(int(v))
    if isinstance(v, (Real, np.floating)):
        return format(float(v), fmt)
    return str(v)


def markdown_table(df: pd.DataFrame, floatfmt=".4g", index: bool = False) -> str:
    """``df`` as a GitHub markdown table (header, ``|---|`` rule, one line per row).

    Args:
        df: the rows; column names become the header.
        floatfmt: a format spec for every float cell (``".4g"``), or ``{column: spec or
            callable}`` for some columns (others ``".4g"``); a callable gets the raw value.
            Ints, bools and strings are written as they are.
        index: also write the index as the first column.
    Returns:
        The table (no trailing newline).
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"df must be a pandas DataFrame, got {type(df).__name__}")
    if index:
        df = df.reset_index()
    fmts = dict(floatfmt) if isinstance(floatfmt, Mapping) else {}
    default = ".4g" if isinstance(floatfmt, Mapping) else floatfmt
    if not isinstance(default, str):
        raise TypeError(f"floatfmt must be a format spec or a mapping, got {floatfmt!r}")
    unknown = set(fmts) - set(df.columns)
    if unknown:
        raise ValueError(f"floatfmt names columns not in df: {sorted(map(str, unknown))}")
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v, fmts.get(c, default))
                                        for c, v in zip(cols, row)) + " |")
    return "\n".join(lines)
