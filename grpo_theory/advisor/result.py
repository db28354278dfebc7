r"""The result of the sample-based estimates: :class:`ScalingEstimate` (c1, c2, c3, G*, intervals).

95% intervals: c1, c2, c3 by the delete-one-prompt jackknife (:mod:`.intervals`) with the
Student t quantile on m - 1 degrees of freedom; ``G* = 1 + sqrt(c3/c1)`` by Fieller's interval
for ``c3/c1`` with the jackknife covariance of (c1, c3), unbounded above (``inf``, never clipped)
when c1 is not clearly positive. Fieller is kept over a percentile bootstrap over prompts
because it covered better in every setting measured (:func:`.coverage.interval_coverage`, 200
repetitions, 8 responses per prompt): G* coverage 93% vs 86.5% on ``SoftmaxBandit.random(3, 5,
4)`` with 40 prompts, 89.5% vs 82% on a 6-prompt linear softmax bandit with 40 prompts, and equal
(94%, 95%) with 200 prompts. The jackknife intervals covered c1, c2, c3 in 93%, 94.5%, 93%
(softmax bandit, 40 prompts) and 85.5%, 92.5%, 91.5% (linear bandit, 40 prompts; c1 is
skewed at few prompts), 93.5-95% with 200 prompts.

The finite-(B, G) MSE predictions (:meth:`ScalingEstimate.mse`) are linear in the unbiased
pieces, hence unbiased too (Theorem 2, Proposition 3, Theorem 7; true scores):

* vanilla ``c1/B + c_v/(BG)`` with ``c_v = E_X[E[||s||^2 Z^2|X] - ||g(X)||^2]``;
* oracle ``c1/B + c2/(BG)``; grpo ``c1/B + c2/(BG) + c3/(BG(G-1))``;
* grpo_mean ``((G-1)/G)^2 MSE_grpo + ||grad J||^2 / G^2``;
* basis (the other prompts' mean as the baseline, B >= 2, any G >= 1) ``c1/B + c_J/(BG) +
  (Var_X V + E sigma^2/G) m0/(BG(B-1)) + ||grad J||^2/(B(B-1)G^2)``, ``c_J = c_v - 2 J E[qZ] +
  J^2 m0``, ``m0 = E||s||^2``: linear in the cross-prompt pieces of :mod:`.cross_prompt`
  (U-statistics over distinct prompts, m >= 4), computed from the rollouts when first asked for.

An estimator without a closed form (JSPO: its shrinkage coefficient is a ratio of batch
statistics) is refused with a message naming its exact route on an enumerable problem,
``grpo_theory.allocation.audit(problem, allocation.fixed(G), estimator=..., batch_size=B)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from ..core import (PIECES, Estimate, MissingClosedForm, ResultMixin, closed_form_of,
                    get_estimator, grpo_noise_scale)
from .cross_prompt import EXTENDED_PARAMETERS, MIN_PROMPTS as CROSS_MIN_PROMPTS
from .cross_prompt import extended_statistics_jit
from .pieces import intervals_jit, t_quantile


#: rows of ScalingEstimate.conf_int() and .summary()
SUMMARY_ROWS = ("c1", "c2", "c3", "g_star", "c_v", "grad_norm_sq")


def _interval(lo, hi):
    return (float(lo), float(hi))


@dataclass(frozen=True, eq=False)
class ScalingEstimate(ResultMixin):
    """Sample-based c1, c2, c3, G* with 95% intervals (statsmodels-like result).

    The :class:`~grpo_theory.core.stats.Result` interface: ``conf_int(alpha)`` (columns
    ``lower``, ``upper``) and ``summary(alpha)`` (``estimate``, ``std_err``, ``ci_low``,
    ``ci_high``) with rows c1, c2, c3, g_star, c_v, grad_norm_sq.

    Attributes:
        theta: (5,) estimates of :data:`PARAMETERS` (c1, c2, c3, c_v, ||grad J||^2), unbiased.
        cov: (5, 5) their delete-one-prompt jackknife covariance.
        pieces: per-prompt unbiased pieces (:func:`prompt_pieces`), (m,) arrays.
        rewards: (m, n) the sampled rewards.
        alpha: the level of the ``*_ci`` attributes (0.05: 95% intervals).
        rollouts: ``(rewards, sq_norms, mean_sq, mean_dot, k)`` as the U-statistics read them
            (rescaled by powers of two; the pieces scale back by ``2^k``), or ``None``: the
            cross-prompt pieces (:attr:`extended_theta`) are computed from them when asked for.
    """

    theta: np.ndarray
    cov: np.ndarray
    pieces: dict = field(repr=False)
    rewards: np.ndarray = field(repr=False)
    alpha: float = 0.05
    rollouts: tuple | None = field(default=None, repr=False)

    # -- sizes and point estimates
    @property
    def n_prompts(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def n_samples(self) -> int:
        return int(self.rewards.shape[1])

    @property
    def c1(self) -> float:
        return float(self.theta[0])

    @property
    def c2(self) -> float:
        return float(self.theta[1])

    @property
    def c3(self) -> float:
        return float(self.theta[2])

    @property
    def grad_norm_sq(self) -> float:
        """``||grad J||^2`` (unbiased, distinct prompts)."""
        return float(self.theta[4])

    @property
    def bse(self) -> np.ndarray:
        """Jackknife standard errors of :data:`PARAMETERS` (statsmodels' name)."""
        return np.sqrt(np.maximum(np.diag(self.cov), 0.0))

    def _intervals(self, alpha=None):
        a = self.alpha if alpha is None else alpha
        q = t_quantile(a, self.n_prompts)
        with jax.enable_x64(True):
            out = intervals_jit(jnp.asarray(self.theta), jnp.asarray(self.cov), q)
        return {k: np.asarray(v) for k, v in out.items()}

    @property
    def c1_ci(self) -> tuple:
        r = self._intervals()
        return _interval(r["low"][0], r["high"][0])

    @property
    def c2_ci(self) -> tuple:
        r = self._intervals()
        return _interval(r["low"][1], r["high"][1])

    @property
    def c3_ci(self) -> tuple:
        r = self._intervals()
        return _interval(r["low"][2], r["high"][2])

    @property
    def g_star(self) -> float:
        """``1 + sqrt(c3/c1)`` (``inf`` when the c1 estimate is <= 0)."""
        return float(self._intervals()["g_star"])

    @property
    def g_star_ci(self) -> tuple:
        """Fieller interval for G*; the upper end is ``inf`` when c1 is not clearly positive."""
        r = self._intervals()
        return _interval(r["g_low"], r["g_high"])

    @property
    def constants(self):
        """The point estimates as a :class:`grpo_theory.core.scaling.ScalingConstants`."""
        from ..core import ScalingConstants

        return ScalingConstants(self.c1, self.c2, self.c3)

    # -- tables (the Result interface of grpo_theory.core.stats)
    def _params(self):
        se = self.bse
        t = self.theta
        return (SUMMARY_ROWS, (t[0], t[1], t[2], self.g_star, t[3], t[4]),
                (se[0], se[1], se[2], np.nan, se[3], se[4]), self.n_prompts - 1)

    def _bounds(self, alpha):
        """Jackknife t intervals (m - 1 df); G*'s is Fieller's, unbounded above if c1 may be 0."""
        r = self._intervals(alpha)
        q = t_quantile(alpha, self.n_prompts)
        se = self.bse
        lo = [*r["low"][:3], r["g_low"], self.theta[3] - q * se[3], self.theta[4] - q * se[4]]
        hi = [*r["high"][:3], r["g_high"], self.theta[3] + q * se[3], self.theta[4] + q * se[4]]
        return np.asarray(lo, np.float64), np.asarray(hi, np.float64)

    def summary(self, alpha: float | None = None):
        """Estimates, standard errors and intervals as a ``pandas.DataFrame``.

        Rows c1, c2, c3, g_star, c_v, grad_norm_sq; columns ``estimate``, ``std_err`` (jackknife;
        NaN for G*, whose interval is Fieller's), ``ci_low``, ``ci_high``.

        Args:
            alpha: 1 - coverage; ``None`` (default) uses the result's ``alpha`` field (0.05
                unless set otherwise).
        """
        return super().summary(self.alpha if alpha is None else alpha)

    def prompt_table(self):
        """Per-prompt unbiased pieces (one row per sampled prompt) as a ``pandas.DataFrame``."""
        import pandas as pd

        return pd.DataFrame({k: np.asarray(v) for k, v in self.pieces.items()})

    @property
    def prompt_values(self) -> np.ndarray:
        """Per-prompt pass rates ``V-hat(x_a)`` (m,): the distribution of prompt difficulty."""
        return np.asarray(self.pieces["value"])

    def zero_variance_share(self, group_size) -> float:
        """Unbiased ``E_X[V^G + (1 - V)^G]``: the share of all-equal groups of size G (binary Z).

        ``C(k, G) / C(n, G)`` is unbiased for ``V^G`` with k correct among n responses.

        Args:
            group_size: integer G with 1 <= G <= n_samples.

        Returns:
            The estimated share (float).
        """
        G = V.integer("group_size", group_size, 1, self.n_samples)
        z = np.asarray(self.rewards)
        if not np.all((z == 0) | (z == 1)):
            raise ValueError("zero_variance_share needs binary (0/1) rewards")
        n = self.n_samples
        k = z.sum(axis=1).astype(int)
        tot = math.comb(n, G)
        share = [(math.comb(int(kk), G) + math.comb(n - int(kk), G)) / tot for kk in k]
        return float(np.mean(share))

    # -- predictions
    @cached_property
    def _extended(self):
        """``(theta (9,), cov (9, 9))`` over :data:`~.cross_prompt.EXTENDED_PARAMETERS`."""
        if self.rollouts is None:
            raise ValueError("these estimates carry no rollouts: the cross-prompt pieces need "
                             "an estimate built by estimate_from_rollouts or "
                             "estimate_scaling_constants")
        if self.n_prompts < CROSS_MIN_PROMPTS:
            raise ValueError(f"n_prompts must be >= {CROSS_MIN_PROMPTS} for the cross-prompt "
                             f"pieces (U-statistics over triples of distinct prompts and their "
                             f"jackknife), got {self.n_prompts}")
        z, q, mq, md, k = self.rollouts
        with jax.enable_x64(True):
            theta, cov = (np.asarray(a) for a in extended_statistics_jit(
                jnp.asarray(z), jnp.asarray(q), jnp.asarray(mq), jnp.asarray(md)))
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            scaled = np.ldexp(theta, k)
            if np.any((theta != 0) & (np.abs(scaled) < np.finfo(np.float64).tiny)):
                raise ValueError("the cross-prompt pieces underflow float64: rescale the rewards "
                                 "or the scores")
            theta, cov = scaled, np.ldexp(cov, 2 * k)
        if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(cov))):
            raise ValueError("the cross-prompt pieces or their covariance overflow float64: "
                             "rescale the rewards or the scores")
        # the first five are the advisor's own estimates (the same U-statistics)
        theta[:len(PIECES)] = self.theta
        return theta, cov

    @property
    def extended_theta(self) -> np.ndarray:
        """Unbiased estimates of :data:`~.cross_prompt.EXTENDED_PARAMETERS` (9,): the five
        :data:`PARAMETERS` and the cross-prompt pieces ``J E[qZ]``, ``J^2 E[q]``,
        ``E[V^2] E[q]``, ``E[sigma^2] E[q]`` (m >= 4 prompts)."""
        return self._extended[0].copy()

    @property
    def extended_cov(self) -> np.ndarray:
        """The joint delete-one-prompt jackknife covariance of :attr:`extended_theta` (9, 9)."""
        return self._extended[1].copy()

    def _weights(self, batch_size, group_size, estimator):
        """The estimator's MSE as weights over the pieces its closed form names, with their
        estimates and covariance: ``(w, theta, cov)``. An estimator without such weights is
        refused, naming the missing piece (and, without a closed form, its exact route)."""
        est = get_estimator(estimator)
        form = closed_form_of(est, "MSE over the advisor's pieces", _exact_route(est.name))
        B = V.real_array("batch_size", batch_size)
        G = V.real_array("group_size", group_size)
        if np.any(B <= 0):
            raise ValueError(f"batch_size must be > 0, got min {float(np.min(B))!r}")
        low = est.min_group_size
        if np.any(G < low):
            raise ValueError(f"group_size must be >= {low} for {est.name}, got min "
                             f"{float(np.min(G))!r}")
        B, G = np.broadcast_arrays(B, G)
        w = form.mse_weights(B, G)
        if tuple(form.pieces) == PIECES:
            return w, np.asarray(self.theta), np.asarray(self.cov)
        missing = [p for p in form.pieces if p not in EXTENDED_PARAMETERS]
        if missing:
            raise MissingClosedForm(est.name, f"advisor estimates of the pieces {missing} (its "
                                    f"closed form's mse_weights run over {list(form.pieces)})")
        idx = [EXTENDED_PARAMETERS.index(p) for p in form.pieces]
        theta, cov = self._extended
        return w, theta[idx], cov[np.ix_(idx, idx)]

    def mse(self, batch_size, group_size, estimator: str = "grpo"):
        """Predicted ``E||ghat - grad J||^2`` with B prompts and G responses each (unbiased).

        Args:
            batch_size: B > 0 (scalar or array; >= 2 for basis); group_size: G (>= 2 for
                grpo/rloo/grpo_mean, >= 1 for basis).
            estimator: a registry name or ``Estimator`` whose closed form has ``mse_weights``
                (``"vanilla"``, ``"oracle"``, ``"grpo"`` = ``"rloo"``, ``"grpo_mean"``,
                ``"basis"`` among the built-ins; basis needs m >= 4 prompts); any other is
                refused with a message naming the missing piece.

        Returns:
            The prediction (float, or an array for array inputs).
        """
        w, theta, _ = self._weights(batch_size, group_size, estimator)
        out = w @ theta
        return float(out) if np.ndim(out) == 0 else out

    def mse_ci(self, batch_size, group_size, estimator: str = "grpo", alpha: float = 0.05):
        """Jackknife interval ``(low, high)`` for :meth:`mse` (same arguments, scalars)."""
        w, theta, cov = self._weights(batch_size, group_size, estimator)
        if w.ndim != 1:
            raise ValueError("mse_ci takes scalar batch_size and group_size")
        val, se = float(w @ theta), float(np.sqrt(max(w @ cov @ w, 0.0)))
        q = t_quantile(alpha, self.n_prompts)
        return (val - q * se, val + q * se)

    @property
    def c1_resolved(self) -> bool:
        """Whether c1's interval (at :attr:`alpha`) lies above 0: only then is there a finite
        recommended G (else the rollouts show no between-prompt spread)."""
        return bool(self.c1_ci[0] > 0)

    def noise_scale(self, group_size) -> Estimate:
        """GRPO's gradient noise scale ``B_noise(G) = (c1 G + c2 + c3/(G - 1)) / ||grad J||^2``
        in responses (:mod:`grpo_theory.core.noise`): the budget at which the MSE equals
        ``||grad J||^2``, McCandlish et al.'s critical batch size for GRPO.

        The ratio of the unbiased estimates, with a delta-method standard error from the
        jackknife covariance (a ratio: consistent, not unbiased, at few prompts).

        Args:
            group_size: G > 1 (a real number).

        Returns:
            :class:`~grpo_theory.core.stats.Estimate` (``n`` = prompts).

        Raises:
            ValueError: ``group_size`` <= 1, or an estimate of ``||grad J||^2`` that is not
                positive (the noise scale is then not estimated).
        """
        G = V.real_scalar("group_size", group_size)
        if not G > 1:
            raise ValueError(f"group_size must be > 1 (the c3/(G-1) term), got {G!r}")
        theta = np.asarray(self.theta, dtype=np.float64)
        den = theta[4]
        if not den > 0:
            raise ValueError(f"the estimate of ||grad J||^2 is {den:.3g} (not positive) from "
                             f"{self.n_prompts} prompts: the noise scale is not estimated")
        val = float(grpo_noise_scale(*theta[:3], den, G))
        grad = np.array([G, 1.0, 1.0 / (G - 1), 0.0, -val]) / den
        se = float(np.sqrt(max(grad @ np.asarray(self.cov) @ grad, 0.0)))
        return Estimate(val, se, self.n_prompts)

    @property
    def no_recommendation_reason(self) -> str | None:
        """Why there is no recommended G (c1's interval at :attr:`alpha` reaches 0: these
        rollouts show no between-prompt spread, so neither a finite G* nor "the whole budget"
        follows from them); ``None`` when c1 is resolved above 0."""
        if self.c1_resolved:
            return None
        lo, hi = self.c1_ci
        return (f"c1 is not resolved above 0 (estimate {self.c1:.4g}, "
                f"{100 * (1 - self.alpha):g}% CI [{lo:.4g}, {hi:.4g}]): no recommended G")

    def recommended_group_size(self, budget: int, estimator=None) -> int | None:
        """Integer G in [2, budget] minimising the estimated ``c1 G + c2 + c3/(G-1)``
        (the GRPO MSE at a fixed budget N = B G, B = N / G); with ``estimator``, the integer G
        minimising that estimator's predicted MSE at ``B = N / G`` instead.

        ``None`` when c1 is not resolved above 0 (:attr:`c1_resolved`;
        :attr:`no_recommendation_reason` says why): the rollouts then show no between-prompt
        spread and recommend nothing, in particular not the whole budget. 2 when the c3
        estimate is <= 0.

        With an estimator (``"basis"``: G in [1, N/2], B >= 2; its fixed-budget MSE is
        ``(c1 G + c_J + ((Var_X V G + E sigma^2) m0 + ||grad J||^2)/(N - G)) / N``, usually
        least at G = 1) every integer G from the estimator's ``min_group_size`` to
        ``N / min_batch_size`` of its closed form is compared (ties to the smallest G); the c1
        gate above is GRPO's law's and does not apply.

        Args:
            budget: N >= 2 responses per step.
            estimator: ``None`` (GRPO's law, above) or a registry name or ``Estimator`` whose
                closed form has ``mse_weights`` (:meth:`mse`).

        Returns:
            The integer G, or ``None`` (no recommendation).
        """
        N = V.integer("budget", budget, 2)
        if estimator is not None:
            return self._argmin_group_size(N, estimator)
        c1, c2, c3 = self.c1, self.c2, self.c3
        if not self.c1_resolved:
            return None
        if c3 <= 0:
            return 2
        r = 1.0 + math.sqrt(c3 / c1)
        cands = {min(max(2, math.floor(r)), N), min(max(2, math.floor(r) + 1), N)}
        return int(min(sorted(cands), key=lambda G: c1 * G + c2 + c3 / (G - 1)))

    def _argmin_group_size(self, N: int, estimator) -> int:
        """The integer G minimising ``estimator``'s predicted MSE at ``B = N / G``."""
        est = get_estimator(estimator)
        form = closed_form_of(est, "MSE over the advisor's pieces", _exact_route(est.name))
        low, high = max(1, est.min_group_size), N // form.min_batch_size
        if high < low:
            raise ValueError(f"budget must be >= {low * form.min_batch_size} for {est.name} "
                             f"(G >= {low}, B >= {form.min_batch_size}), got {N}")
        if high - low >= MAX_GROUP_CANDIDATES:
            raise ValueError(f"budget must give at most {MAX_GROUP_CANDIDATES} candidate group "
                             f"sizes for {est.name}, got {high - low + 1} (budget {N})")
        G = np.arange(low, high + 1, dtype=np.float64)
        return int(G[int(np.argmin(self.mse(N / G, G, est)))])


#: the most integer group sizes :meth:`ScalingEstimate.recommended_group_size` compares
MAX_GROUP_CANDIDATES = 100_000


def _exact_route(name: str) -> str:
    """The exact route of an estimator without a closed form, for the advisor's refusal."""
    return (f"its exact MSE on an enumerable problem with binary rewards is "
            f"grpo_theory.allocation.audit(problem, allocation.fixed(G), estimator=\"{name}\", "
            f"batch_size=B).mse")
