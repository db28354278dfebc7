"""The rates behind Lemma 6's bounds, measured: the 1/n decay of the ``beta/i`` run and the
constant step's plateau.

* **Rate.** The seeds are split into :data:`N_BATCHES` independent batches; in each batch the
  least-squares slope of ``log E[Delta_n]`` (the batch mean) on ``log n`` over the logged
  ``n >= N_RATE_MIN`` is one draw. The slope's interval is the batch mean ``+-`` the two-sided
  t-quantile at :data:`ALPHA` times its standard error (``N_BATCHES - 1`` degrees of freedom),
  so the correlation between the logged n of one seed is accounted for. The check asks the
  interval to lie inside ``-1 +- SLOPE_TOL``: a ``1/sqrt(n)`` decay (slope -1/2) or a plateau
  (slope 0) cannot pass.
* **Plateau.** With the constant step ``beta``, ``theta_n - theta*`` follows ``e' = (I - beta A)
  e + beta xi`` near the optimum (``A = -H``, ``Cov xi = Gamma(theta*)``), whose stationary
  covariance solves the discrete Lyapunov equation ``Sigma = (I - beta A) Sigma (I - beta A)^T +
  beta^2 Gamma``; the stationary gap is ``1/2 tr(A Sigma)`` (the gap is exactly quadratic here).
  Each seed's gap averaged over the logged ``n >= N_PLATEAU_MIN`` gives the plateau (with its
  standard error over seeds, about 3% of it in the quick setting); the plateau must lie within
  ``PLATEAU_TOL`` (relative) of ``1/2 tr(A Sigma)``. The tolerance covers the state dependence
  of ``Gamma(theta)``, which the linearisation leaves out (the measured plateaus lie 9-17% above
  it: the noise grows with the gap).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from grpo_theory.core import t_value, z_value
from grpo_theory.experiments import check
from grpo_theory.optim import theory as opt

__all__ = ["N_BATCHES", "N_RATE_MIN", "N_PLATEAU_MIN", "ALPHA", "SLOPE_TOL", "PLATEAU_TOL",
           "RIVAL_SLOPE", "batch_slope", "plateau", "stationary_gap", "lemma6_limit",
           "rate_checks"]

N_BATCHES = 20
N_RATE_MIN = 32  # the beta/i run is in its 1/n regime from here (beta / i < 1 / (2 mu))
N_PLATEAU_MIN = 128  # (1 - beta mu)^128 < 1e-7: the start is forgotten
ALPHA = 0.05
SLOPE_TOL = 0.25
PLATEAU_TOL = 0.25
RIVAL_SLOPE = -0.5  # the rate check's rival: a 1/sqrt(n) decay
Z95 = z_value(0.05)


def batch_slope(gaps, steps, n_min: int = N_RATE_MIN, n_batches: int = N_BATCHES,
                alpha: float = ALPHA) -> tuple[float, float, float]:
    """``(slope, low, high)`` of ``log E[Delta_n]`` on ``log n`` over ``n >= n_min``.

    Args:
        gaps: ``(n_seeds, n_logged)`` gaps of independent seeds.
        steps: the logged n.
        n_min: the smallest n of the fit.
        n_batches: independent batches of seeds, one slope each.
        alpha: the interval's level (two-sided t quantile, ``n_batches - 1`` df).

    Returns:
        The mean of the batch slopes and its interval (NaN when fewer than 3 logged n or a
        batch mean is not positive and finite).
    """
    gaps, steps = np.asarray(gaps, dtype=float), np.asarray(steps)
    keep = steps >= n_min
    if keep.sum() < 3 or gaps.shape[0] < 2 * n_batches:
        return np.nan, np.nan, np.nan
    x = np.log(steps[keep].astype(float))
    means = np.stack([b.mean(0) for b in np.array_split(gaps[:, keep], n_batches)])
    if not np.all(np.isfinite(means) & (means > 0)):
        return np.nan, np.nan, np.nan
    slopes = np.polyfit(x, np.log(means).T, 1)[0]
    m, se = float(slopes.mean()), float(slopes.std(ddof=1) / np.sqrt(n_batches))
    h = t_value(alpha, n_batches - 1) * se
    return m, m - h, m + h


def plateau(gaps, steps, n_min: int = N_PLATEAU_MIN) -> tuple[float, float]:
    """``(mean, se)`` over seeds of each seed's gap averaged over the logged ``n >= n_min``."""
    gaps, steps = np.asarray(gaps, dtype=float), np.asarray(steps)
    keep = steps >= n_min
    if not keep.any():
        return np.nan, np.nan
    per_seed = gaps[:, keep].mean(1)
    return float(per_seed.mean()), float(per_seed.std(ddof=1) / np.sqrt(len(per_seed)))


def stationary_gap(problem, estimator, group_size: int, batch_size: int, beta: float) -> float:
    """``1/2 tr(A Sigma)``, ``Sigma`` the discrete-Lyapunov stationary covariance of the
    constant-step iteration linearised at ``theta*`` with ``Gamma(theta*)``."""
    a = np.asarray(problem.curvature_matrix(), dtype=float)
    gamma = np.asarray(opt.limiting_covariance(problem, estimator, group_size, batch_size))
    m = np.eye(a.shape[0]) - beta * a
    sigma = scipy.linalg.solve_discrete_lyapunov(m, beta**2 * gamma)
    return float(0.5 * np.trace(a @ sigma))


def lemma6_limit(L: float, mu: float, beta: float, M: float) -> float:
    """Lemma 6's constant-step limit ``L beta^2 M / (4 mu beta - 2 L mu beta^2)`` (the bound as
    ``n -> inf``): the rival of the plateau check."""
    return float(L * beta**2 * M / (4 * mu * beta - 2 * L * mu * beta**2))


def rate_checks(df) -> list:
    """The rate and plateau checks, one per run with finite M (see the module doc); each
    states its rival's distance (the slope -1/2 in standard errors of the batch-mean slope;
    Lemma 6's constant-step limit in standard errors of the plateau).

    Args:
        df: the study's table (columns ``slope``, ``slope_low``, ``slope_high``, ``plateau``,
            ``plateau_se``, ``stationary_gap``, ``L``, ``mu``, ``beta`` and ``M``, one value per
            cell).
    """
    out = []
    for (sch, est), d in df.groupby(["schedule", "estimator"], sort=False):
        if (d.diverged_seeds > 0).any():
            continue
        r = d.iloc[0]
        if sch == "inverse":
            # the rival slope -1/2 in standard errors of the batch mean (the interval's
            # half-width is t se), and the t-quantile beyond which the interval excludes a value
            t_q = t_value(ALPHA, N_BATCHES - 1)
            se = (r.slope_high - r.slope_low) / (2 * t_q)
            rival_z = abs(RIVAL_SLOPE - r.slope) / se if se > 0 else np.nan
            out.append(check(
                f"{sch}/{est}: slope of log E[Delta_n] on log n within -1 ± {SLOPE_TOL:g} "
                f"(n >= {N_RATE_MIN}, {1 - ALPHA:.0%} interval)",
                (r.slope_low >= -1 - SLOPE_TOL) and (r.slope_high <= -1 + SLOPE_TOL),
                r.slope, r.slope_low, r.slope_high, rival_z, kind="statistical",
                excludes="a 1/sqrt(n) decay (slope -1/2)", rival_se=rival_z, z_tol=t_q,
                detail=f"slope {r.slope:.3f} [{r.slope_low:.3f}, {r.slope_high:.3f}] over "
                       f"{N_BATCHES} batches of seeds; slope -1/2 lies {rival_z:.1f} se away"))
        elif sch == "constant":
            lo, hi = r.plateau - Z95 * r.plateau_se, r.plateau + Z95 * r.plateau_se
            s = r.stationary_gap
            # the rival plateau, Lemma 6's constant-step limit, in standard errors of the plateau,
            # and the check's band (PLATEAU_TOL of 1/2 tr(A Sigma)) in the same units
            limit = lemma6_limit(r.L, r.mu, r.beta, r.M)
            rival_z = abs(limit - r.plateau) / r.plateau_se if r.plateau_se > 0 else np.nan
            band_z = PLATEAU_TOL * s / r.plateau_se if r.plateau_se > 0 else np.nan
            out.append(check(
                f"{sch}/{est}: plateau within {PLATEAU_TOL:.0%} of 1/2 tr(A Sigma) "
                "(discrete Lyapunov)", abs(r.plateau / s - 1) <= PLATEAU_TOL,
                r.plateau, r.plateau_se, s, rival_z, kind="statistical",
                excludes="Lemma 6's constant-step limit L beta^2 M / (4 mu beta - 2 L mu "
                         "beta^2) as the plateau", rival_se=rival_z, z_tol=band_z,
                detail=f"plateau {r.plateau:.4g} (95% CI [{lo:.4g}, {hi:.4g}]) vs "
                       f"{s:.4g}: ratio {r.plateau / s:.3f}; Lemma 6's limit {limit:.4g} lies "
                       f"{rival_z:.1f} se away (the 25% band is {band_z:.1f} se)"))
    return out
