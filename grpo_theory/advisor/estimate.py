r"""Sample-based, unbiased estimates of the scaling-law constants c1, c2, c3 and of G*.

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
* grpo_mean ``((G-1)/G)^2 MSE_grpo + ||grad J||^2 / G^2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from ..lm.memory import chunk_for_budget, default_memory_budget, out_of_memory_as_value_error, \
    process_rss
from .intervals import group_size_interval, jackknife_cov, normal_interval
from ..core.stats import ResultMixin
from .._precision import float64

__all__ = ["MIN_SAMPLES", "MIN_PROMPTS", "PARAMETERS", "ScalingEstimate", "prompt_pieces",
           "rollout_statistics", "scaling_intervals", "t_quantile", "estimate_from_rollouts",
           "estimate_scaling_constants", "lm_rollout_statistics", "resolve_chunk", "score_memory"]

MIN_SAMPLES = 3
"""Fewest responses per prompt: the order-3 U-statistics need 3 distinct responses."""
MIN_PROMPTS = 3
"""Fewest prompts: the across-prompt U-statistic needs 2 distinct prompts, its jackknife one
more."""
PARAMETERS = ("c1", "c2", "c3", "c_v", "grad_sq")
"""The estimated parameter vector, in order (``c_v``: vanilla's per-sample term; ``grad_sq``:
``||grad J||^2``)."""
#: rows of ScalingEstimate.conf_int() and .summary()
SUMMARY_ROWS = ("c1", "c2", "c3", "g_star", "c_v", "grad_norm_sq")
_ESTIMATORS = ("vanilla", "oracle", "grpo", "rloo", "grpo_mean")


# --- the U-statistics (pure jax.numpy, jit/vmap friendly) -----------------------------------------

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
    per = jnp.stack([p["grad_sq"], p["tr_oracle"], p["c3"], p["c_v"]], axis=1)  # (m, 4)
    tot = jnp.sum(per, axis=0)
    mean = tot / m
    loo_mean = (tot[None, :] - per) / (m - 1)
    theta = jnp.concatenate([jnp.stack([mean[0] - u]), mean[1:], jnp.stack([u])])
    loo = jnp.concatenate([(loo_mean[:, 0] - u_loo)[:, None], loo_mean[:, 1:], u_loo[:, None]],
                          axis=1)
    return theta, loo, p


@jax.jit
def _statistics_jit(z, q, mq, md):
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


_intervals_jit = jax.jit(scaling_intervals)


def t_quantile(alpha: float, n_prompts: int) -> float:
    """Two-sided Student t quantile ``t_{m-1, 1-alpha/2}`` (``scipy.special.stdtrit``)."""
    from scipy.special import stdtrit

    alpha = V.real_scalar("alpha", alpha, positive=True)
    if not alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    m = V.positive_int("n_prompts", n_prompts, 2)
    return float(stdtrit(m - 1, 1.0 - alpha / 2.0))


# --- the result object ------------------------------------------------------------------------------

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
    """

    theta: np.ndarray
    cov: np.ndarray
    pieces: dict = field(repr=False)
    rewards: np.ndarray = field(repr=False)
    alpha: float = 0.05

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
            out = _intervals_jit(jnp.asarray(self.theta), jnp.asarray(self.cov), q)
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
        from ..core.scaling import ScalingConstants

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
    def _weights(self, batch_size, group_size, estimator):
        if not isinstance(estimator, str) or estimator not in _ESTIMATORS:
            raise ValueError(f"estimator must be one of {list(_ESTIMATORS)}, got {estimator!r}")
        B = V.real_array("batch_size", batch_size)
        G = V.real_array("group_size", group_size)
        if np.any(B <= 0):
            raise ValueError(f"batch_size must be > 0, got min {float(np.min(B))!r}")
        low = 1 if estimator in ("vanilla", "oracle") else 2
        if np.any(G < low):
            raise ValueError(f"group_size must be >= {low} for {estimator}, got min "
                             f"{float(np.min(G))!r}")
        B, G = np.broadcast_arrays(B, G)
        z = np.zeros(B.shape)
        if estimator == "vanilla":
            return np.stack([1 / B, z, z, 1 / (B * G), z], axis=-1)
        if estimator == "oracle":
            return np.stack([1 / B, 1 / (B * G), z, z, z], axis=-1)
        with np.errstate(divide="ignore"):
            w = np.stack([1 / B, 1 / (B * G), 1 / (B * G * (G - 1)), z, z], axis=-1)
        if estimator == "grpo_mean":
            c = ((G - 1) / G)[..., None]
            w = c**2 * w
            w[..., 4] = 1 / G**2
        return w

    def mse(self, batch_size, group_size, estimator: str = "grpo"):
        """Predicted ``E||ghat - grad J||^2`` with B prompts and G responses each (unbiased).

        Args:
            batch_size: B > 0 (scalar or array); group_size: G (>= 2 for grpo/rloo/grpo_mean).
            estimator: ``"vanilla"``, ``"oracle"``, ``"grpo"`` (= ``"rloo"``) or ``"grpo_mean"``.

        Returns:
            The prediction (float, or an array for array inputs).
        """
        out = self._weights(batch_size, group_size, estimator) @ np.asarray(self.theta)
        return float(out) if np.ndim(out) == 0 else out

    def mse_ci(self, batch_size, group_size, estimator: str = "grpo", alpha: float = 0.05):
        """Jackknife interval ``(low, high)`` for :meth:`mse` (same arguments, scalars)."""
        w = self._weights(batch_size, group_size, estimator)
        if w.ndim != 1:
            raise ValueError("mse_ci takes scalar batch_size and group_size")
        val, se = float(w @ self.theta), float(np.sqrt(max(w @ self.cov @ w, 0.0)))
        q = t_quantile(alpha, self.n_prompts)
        return (val - q * se, val + q * se)

    def recommended_group_size(self, budget: int) -> int:
        """Integer G in [2, budget] minimising the estimated ``c1 G + c2 + c3/(G-1)``
        (the GRPO MSE at a fixed budget N = B G, B = N / G).

        ``budget`` when the c1 estimate is <= 0 (larger groups always better); 2 when the c3
        estimate is <= 0.

        Args:
            budget: N >= 2 responses per step.

        Returns:
            The integer G.
        """
        N = V.integer("budget", budget, 2)
        c1, c2, c3 = self.c1, self.c2, self.c3
        if c1 <= 0:
            return N
        if c3 <= 0:
            return 2
        r = 1.0 + math.sqrt(c3 / c1)
        cands = {min(max(2, math.floor(r)), N), min(max(2, math.floor(r) + 1), N)}
        return int(min(sorted(cands), key=lambda G: c1 * G + c2 + c3 / (G - 1)))


# --- building an estimate ------------------------------------------------------------------------

def _check_sizes(m, n):
    if n < MIN_SAMPLES:
        raise ValueError(f"n_samples must be >= {MIN_SAMPLES} (the order-3 U-statistics of "
                         f"E[||s||^2|x] sigma^2(x) and tr Sigma_or(x) need {MIN_SAMPLES} distinct "
                         f"responses per prompt), got {n}")
    if m < MIN_PROMPTS:
        raise ValueError(f"n_prompts must be >= {MIN_PROMPTS} (the across-prompt U-statistic of "
                         f"||grad J||^2 needs 2 distinct prompts and its jackknife one more), "
                         f"got {m}")


def _finite(name, value, shape=None, ndim=None):
    arr = V.finite_array(name, value, ndim=ndim).astype(np.float64)
    if shape is not None:
        V.same_shape(name, arr, shape, "rewards' (n_prompts, n_samples)"
                     if len(shape) == 2 else "(n_prompts,)" if len(shape) == 1 else "(m, m)")
    return arr


@float64
def estimate_from_rollouts(rewards, scores=None, *, sq_norms=None, mean_gram=None, mean_sq=None,
                           mean_dot=None, alpha: float = 0.05) -> ScalingEstimate:
    """:class:`ScalingEstimate` from per-prompt rollouts (the low-level entry point).

    Give the rewards and either the scores, or the inner products they enter through:

    * ``scores`` (m, n, D); or
    * ``sq_norms`` (m, n) ``||s_ai||^2`` and ``mean_gram`` (m, m) the Gram matrix of the
      per-prompt means ``ghat_a = (1/n) sum_i Z_ai s_ai``; or (streaming, O(D) memory)
    * ``sq_norms``, ``mean_sq`` (m,) ``||ghat_a||^2`` and ``mean_dot`` (m,)
      ``<ghat_a, sum_b ghat_b>``.

    Prompts must be iid draws from the prompt distribution and the n responses of a prompt iid
    from the policy (the scores true scores, ``E[s|x] = 0``).

    Args:
        rewards: (m, n) real rewards, m >= 3 prompts, n >= 3 responses each.
        scores, sq_norms, mean_gram, mean_sq, mean_dot: as above.
        alpha: level of the ``*_ci`` attributes (0.05: 95%), in (0, 1).

    Returns:
        :class:`ScalingEstimate`.

    Arithmetic: the U-statistics run on rewards and scores rescaled by powers of two (largest
    |Z| and |s| in [1/2, 1)) and the results are scaled back exactly (every constant scales as
    ``c(a Z, b s) = a^2 b^2 c(Z, s)``), so large-but-finite rewards or scores (1e150, 1e-150)
    neither overflow in the squares nor turn into NaN (a per-prompt piece whose value is beyond
    float64, e.g. ``sigma2`` of rewards near 1e160, is ``inf`` in :attr:`ScalingEstimate.pieces`).

    Raises:
        ValueError: a wrong shape, a non-finite or non-real input, fewer than 3 prompts or
            responses, ``sq_norms`` or ``mean_sq`` negative, ``mean_gram`` not symmetric (relative
            tolerance :data:`GRAM_SYMMETRY_RTOL`) or with a negative diagonal, or an estimate
            (or its covariance) beyond the float64 range, which is refused, never returned as
            inf or NaN.
    """
    z = _finite("rewards", rewards, ndim=2)
    m, n = z.shape
    _check_sizes(m, n)
    alpha = V.real_scalar("alpha", alpha, positive=True)
    if not alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    kz = _exponent(z)
    z_ = np.ldexp(z, -kz)  # rewards / 2^kz, exact: max |Z| in [1/2, 1)
    if scores is not None:
        if any(a is not None for a in (sq_norms, mean_gram, mean_sq, mean_dot)):
            raise ValueError("give scores or the inner products (sq_norms, mean_gram / mean_sq + "
                             "mean_dot), not both")
        s = V.finite_array("scores", scores, ndim=3).astype(np.float64)
        V.same_shape("scores", s, (m, n, s.shape[2]), "rewards' (n_prompts, n_samples, D)")
        ks = _exponent(s)
        s = np.ldexp(s, -ks)
        kq = 2 * ks  # ||s||^2 scales by 2^(2 ks)
        q = np.sum(s * s, axis=2)
        ghat = np.einsum("ai,aid->ad", z_, s) / n
        mq, md = np.sum(ghat * ghat, axis=1), ghat @ ghat.sum(axis=0)
    else:
        if sq_norms is None:
            raise ValueError("give scores (m, n, D), or sq_norms (m, n) with mean_gram (m, m) or "
                             "with mean_sq and mean_dot (m,)")
        q = _finite("sq_norms", sq_norms, (m, n))
        if np.any(q < 0):
            raise ValueError("sq_norms must be non-negative (squared norms)")
        if mean_gram is not None:
            if mean_sq is not None or mean_dot is not None:
                raise ValueError("give mean_gram or (mean_sq, mean_dot), not both")
            gram = _finite("mean_gram", mean_gram, (m, m))
            _check_gram(gram)
            mq, md = np.diag(gram).copy(), _row_sums(gram)
        elif mean_sq is not None and mean_dot is not None:
            mq = _finite("mean_sq", mean_sq, (m,))
            if np.any(mq < 0):
                raise ValueError(f"mean_sq must be non-negative (squared norms ||ghat_a||^2), "
                                 f"got min {float(np.min(mq))!r}")
            md = _finite("mean_dot", mean_dot, (m,))
        else:
            raise ValueError("with sq_norms give mean_gram (m, m), or both mean_sq and mean_dot "
                             "(m,)")
        kq = _exponent(q)
        q = np.ldexp(q, -kq)
        with np.errstate(over="ignore"):  # inf here: refused below as an overflow
            mq, md = np.ldexp(mq, -(2 * kz + kq)), np.ldexp(md, -(2 * kz + kq))
    with jax.enable_x64(True):
        theta, cov, pieces = _statistics_jit(jnp.asarray(z_), jnp.asarray(q), jnp.asarray(mq),
                                             jnp.asarray(md))
        theta, cov = np.asarray(theta), np.asarray(cov)
        pieces = {k: np.asarray(v) for k, v in pieces.items()}
    k = 2 * kz + kq  # every constant is quadratic in Z and in s: c(a Z, b s) = a^2 b^2 c(Z, s)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        tiny = np.finfo(np.float64).tiny
        lost = (k < 0) & (theta != 0) & (np.abs(np.ldexp(theta, k)) < tiny)
        if np.any(lost):
            raise ValueError(f"the estimates of {', '.join(np.asarray(PARAMETERS)[lost])} "
                             f"underflow float64 (rewards down to about 2^{kz}, squared scores "
                             f"2^{kq}; the constants scale as rewards^2 x ||s||^2): rescale the "
                             f"rewards or the scores (G* does not change)")
        theta, cov = np.ldexp(theta, k), np.ldexp(cov, 2 * k)
        pieces = {name: np.ldexp(v, _PIECE_SCALE[name](kz, kq)) for name, v in pieces.items()}
    _check_finite_results(theta, cov, kz, kq)
    return ScalingEstimate(theta, cov, pieces, z, float(alpha))


#: the power of two each per-prompt piece scales by, given rewards x 2^kz, ||s||^2 x 2^kq
_PIECE_SCALE = {"value": lambda kz, kq: kz, "sigma2": lambda kz, kq: 2 * kz,
                "score_sq": lambda kz, kq: kq}
for _name in ("grad_sq", "score_sq_sigma2", "score_sq_dev2", "tr_oracle", "score_sq_z2", "c3",
              "c_v"):
    _PIECE_SCALE[_name] = lambda kz, kq: 2 * kz + kq
del _name

#: relative tolerance of mean_gram's symmetry (|G - G^T| <= tol * max |G|)
GRAM_SYMMETRY_RTOL = 1e-8


def _exponent(x) -> int:
    """e with max |x| = f 2^e, f in [1/2, 1) (0 for an all-zero array): x / 2^e is exact."""
    top = float(np.max(np.abs(x))) if np.size(x) else 0.0
    return int(np.frexp(top)[1]) if top > 0 else 0


def _row_sums(gram):
    """Row sums of a finite matrix without overflow to inf where the sum itself is finite."""
    k = _exponent(gram)
    with np.errstate(over="ignore"):
        return np.ldexp(np.ldexp(gram, -k).sum(axis=1), k)


def _check_gram(gram):
    """mean_gram must be a Gram matrix: symmetric within a tolerance, non-negative diagonal."""
    diag = np.diag(gram)
    if np.any(diag < 0):
        a = int(np.argmin(diag))
        raise ValueError(f"mean_gram must have a non-negative diagonal (||ghat_a||^2), got "
                         f"mean_gram[{a}, {a}] = {float(diag[a])!r}")
    k = _exponent(gram)
    g = np.ldexp(gram, -k)
    asym = float(np.max(np.abs(g - g.T)))
    if asym > GRAM_SYMMETRY_RTOL * float(np.max(np.abs(g))):
        i, j = np.unravel_index(int(np.argmax(np.abs(g - g.T))), g.shape)
        raise ValueError(f"mean_gram must be symmetric (a Gram matrix <ghat_a, ghat_b>), got "
                         f"mean_gram[{i}, {j}] = {float(gram[i, j])!r} != mean_gram[{j}, {i}] = "
                         f"{float(gram[j, i])!r} (relative tolerance {GRAM_SYMMETRY_RTOL})")


def _check_finite_results(theta, cov, kz, kq):
    """The estimates and their covariance finite: beyond float64 is an error, never inf/NaN.

    (A per-prompt piece of :attr:`ScalingEstimate.pieces` whose true value lies beyond float64,
    e.g. ``sigma2`` of rewards near 1e160, is ``inf``; it is never NaN.)"""
    scale = (f"(rewards up to about 2^{kz}, squared scores up to about 2^{kq}; the constants "
             f"scale as rewards^2 x ||s||^2)")
    bad = [PARAMETERS[i] for i in range(len(PARAMETERS)) if not np.isfinite(theta[i])]
    if bad:
        raise ValueError(f"the estimates of {', '.join(bad)} overflow float64 {scale}: rescale "
                         f"the rewards or the scores (c1, c2, c3 scale by a^2 b^2 for rewards "
                         f"x a, scores x b; G* does not change)")
    if not np.all(np.isfinite(cov)):
        raise ValueError(f"the jackknife covariance of the estimates (their square) overflows "
                         f"float64 {scale}: rescale the rewards or the scores (c1, c2, c3 scale "
                         f"by a^2 b^2 for rewards x a, scores x b; G* does not change)")


# --- policies -------------------------------------------------------------------------------------

def _enumerable_rollouts(policy, m, n, key):
    from ..core.policies import as_problem

    prob = as_problem(policy)
    P, K, D = prob.scores.shape
    V.check_memory(f"the sampled ({m}, {n}, {D}) scores", 8.0 * m * n * D * 2,
                   "use fewer prompts or responses")
    with jax.enable_x64(True):
        z, s = _sample_scores(key, prob, m, n)
        return np.asarray(z), np.asarray(s)


@partial(jax.jit, static_argnames=("m", "n"))
def _sample_scores(key, prob, m, n):
    """Rewards (m, n) and the sampled scores (m, n, D) of a DiscreteProblem (one compile)."""
    from ..core.sampling import sample_from_uniforms

    kx, ky, kz = jax.random.split(key, 3)
    x, y, z = sample_from_uniforms(prob, jax.random.uniform(kx, (m,)),
                                   jax.random.uniform(ky, (m, n)), jax.random.uniform(kz, (m, n)))
    return z, prob.scores[x[:, None], y]


@partial(jax.jit, static_argnames=("apply_fn", "eos"))
def _weighted_grad(apply_fn, params, prompts, responses, weights, temperature, eos):
    """``grad_theta sum_i w_i log pi(y_i | x_i)`` as a flat vector (one backward pass)."""
    from jax.flatten_util import ravel_pytree

    from ..lm.policy import seq_log_probs

    flat, unravel = ravel_pytree(params)

    def obj(theta):
        lp = seq_log_probs(apply_fn, unravel(theta), prompts, responses, temperature, eos)
        return jnp.dot(weights.astype(lp.dtype), lp)

    return jax.grad(obj)(flat)


def score_memory(policy) -> tuple[int, int]:
    """``(D, bytes per parameter)`` of a policy's parameters (the widest floating leaf), what
    :func:`grpo_theory.lm.memory.chunk_for_budget` needs; read from the leaves' shapes (no
    copy)."""
    leaves = jax.tree_util.tree_leaves(policy.params)
    d = int(sum(np.size(x) for x in leaves))
    widths = [np.dtype(x.dtype).itemsize for x in leaves
              if hasattr(x, "dtype") and np.issubdtype(np.dtype(x.dtype), np.floating)]
    return d, max(widths, default=4)


def resolve_chunk(policy, chunk, n_items: int, memory_budget=None, n_accumulators: int = 1,
                  *, seq_len: int | None = None, response_len: int | None = None):
    """The chunk of sequences per block of pass 1: ``chunk`` when given (an int >= 1), else
    the largest that fits in ``memory_budget`` bytes (None: :func:`grpo_theory.lm.memory.
    default_memory_budget`) by :func:`grpo_theory.lm.memory.chunk_for_budget`.

    The budget is the whole process's: what it holds besides the parameters now
    (:func:`grpo_theory.lm.memory.process_rss`) is counted first.

    A policy on the ghost-norm route (one with ``ghost_row_bytes(seq_len, response_len)``, a
    :class:`grpo_theory.lm.hf.HFPolicy`) is budgeted by its activations per sequence when
    ``seq_len`` and ``response_len`` are given; otherwise by per-sample scores of D floats.

    Raises:
        ValueError: naming ``--memory-budget`` when even chunk 1 does not fit.
    """
    if chunk is not None:
        return V.positive_int("chunk", chunk)
    d, b = score_memory(policy)
    budget = default_memory_budget() if memory_budget is None else V.positive_int(
        "memory_budget", memory_budget)
    row = None
    if seq_len is not None and response_len is not None and hasattr(policy, "ghost_row_bytes"):
        row = policy.ghost_row_bytes(seq_len, response_len)
    return chunk_for_budget(d, dtype_bytes=b, memory_budget_bytes=budget, n_items=n_items,
                            n_accumulators=n_accumulators, row_bytes=row,
                            base_bytes=max(0, process_rss() - d * b))


#: pass 1 of :func:`lm_rollout_statistics` runs in at most this many calls (progress steps)
SCORE_CALLS = 16


def _call_rows(n_rows: int, chunk: int) -> int:
    """Rows per call: whole blocks of ``chunk``, at most :data:`SCORE_CALLS` calls."""
    n_chunks = -(-n_rows // chunk)
    return -(-n_chunks // SCORE_CALLS) * chunk


def _padded(arrays, rows: int):
    """Each array's leading axis padded to ``rows`` with copies of row 0 (zero-weighted by
    the caller)."""
    return [a if a.shape[0] == rows else
            np.concatenate([a, np.repeat(a[:1], rows - a.shape[0], 0)]) for a in arrays]


def _streamed_contractions(policy, xs, y, weights, chunk, stage):
    """``policy.score_contractions`` over all N rows in at most :data:`SCORE_CALLS` calls of
    ``k * chunk`` rows each (equal shapes, one compile; the last call padded with zero-weight
    copies of row 0), reporting ``stage("scores", done, total)`` after each call."""
    n = xs.shape[0]
    chunk = int(min(chunk, n))
    rows = _call_rows(n, chunk)
    calls = -(-n // rows)
    acc, sq = None, []
    if stage is not None:
        stage("scores", 0, calls)
    for i in range(calls):
        sl = slice(i * rows, min(n, (i + 1) * rows))
        bx, by, bw = xs[sl], y[sl], weights[:, sl]
        pad = rows - bx.shape[0]
        if pad and calls > 1:
            bx, by = _padded([bx, by], rows)
            bw = np.concatenate([bw, np.zeros((bw.shape[0], pad))], axis=1)
        with out_of_memory_as_value_error(f"the per-sample scores (chunk {chunk} of "
                                          f"{score_memory(policy)[0]:,} parameters)"):
            a, q = policy.score_contractions(bx, by, bw, chunk=chunk)
        if acc is None:  # the first result itself when writeable float64, then added in place
            acc = np.asarray(a, dtype=np.float64)
            if not acc.flags.writeable:
                acc = acc.copy()
        else:
            acc += np.asarray(a)
        sq.append(np.asarray(q)[:rows - pad if calls > 1 else None])
        if stage is not None:
            stage("scores", i + 1, calls)
    return acc, np.concatenate(sq)


def _ghost_statistics(policy, xs, y, w, n: int, chunk: int, stage, progress):
    """The ghost route of :func:`lm_rollout_statistics` (a policy with ``ghost_moments``):
    pass 1, one backward pass per block, gives ``S``, every ``||s_ai||^2`` and every
    ``||ghat_a||^2`` (group ghost norms); pass 2, forward mode, gives every ``<s_ai, S>``, so
    ``<ghat_a, S> = sum_i w_ai <s_ai, S>``. Blocks hold whole groups (``chunk`` a multiple of
    n); the last call is padded with zero-weight copies of row 0 (whole groups)."""
    big = xs.shape[0]
    m = big // n
    rows = _call_rows(big, chunk)
    calls = -(-big // rows)
    what = f"the ghost-norm statistics (chunk {chunk} of {score_memory(policy)[0]:,} parameters)"
    s_total, sq, gsq = None, [], []
    if stage is not None:
        stage("scores", 0, calls)
    for i in range(calls):
        sl = slice(i * rows, min(big, (i + 1) * rows))
        k = sl.stop - sl.start
        bx, by = _padded([xs[sl], y[sl]], rows)
        bw = np.concatenate([w[sl], np.zeros(rows - k)])
        with out_of_memory_as_value_error(what):
            s_total, q, gq = policy.ghost_moments(bx, by, bw, n, chunk=chunk, init=s_total)
        sq.append(q[:k])
        gsq.append(gq[:k // n])
        if stage is not None:
            stage("scores", i + 1, calls)
    dots = []
    if stage is not None:
        stage("dots", 0, calls)
    for i in range(calls):
        sl = slice(i * rows, min(big, (i + 1) * rows))
        bx, by = _padded([xs[sl], y[sl]], rows)
        with out_of_memory_as_value_error(f"the score dot products (chunk {chunk})"):
            dots.append(policy.score_dots(bx, by, s_total, chunk=chunk)[:sl.stop - sl.start])
        if progress is not None:
            progress(sl.stop // n, m)
        if stage is not None:
            stage("dots", i + 1, calls)
    mean_dot = (w * np.concatenate(dots)).reshape(m, n).sum(axis=1)
    return np.concatenate(sq), np.concatenate(gsq), mean_dot


def _dots64(g, s, block: int = 1 << 22):
    """``(g . g, g . s)`` accumulated in float64 over slices of ``block`` entries (no float64
    copy of the whole D-vector ``g``)."""
    gg = gs = 0.0
    for i in range(0, g.shape[0], block):
        gi = np.asarray(g[i:i + block], np.float64)
        gg += float(gi @ gi)
        gs += float(gi @ s[i:i + block])
    return gg, gs


def lm_rollout_statistics(policy, prompts, reward, n_samples: int, key, response_len: int,
                          chunk: int | None = 64, progress=None, *, memory_budget=None,
                          stage=None):
    """Rewards and inner products of a language-model policy, streamed (O(D) memory).

    Two passes over the same sampled responses, with ``ghat_a`` the gradient of
    ``(1/n) sum_i Z_ai log pi(y_ai|x_a)`` and ``S = sum_a ghat_a``:

    * a policy with ghost norms (``ghost_moments``: :class:`grpo_theory.lm.hf.HFPolicy`),
      ``chunk`` rounded down to whole prompts (a multiple of n): (1) one backward pass per
      block gives every ``||s_ai||^2``, every ``||ghat_a||^2`` (the group's ghost norm) and
      ``S``; (2) one forward-mode pass gives every ``<s_ai, S>``, hence ``<ghat_a, S>``
      (:func:`grpo_theory.lm.ghost.ghost_moments`, :func:`grpo_theory.lm.ghost.score_dots`);
    * otherwise (1) per-sample scores in chunks of ``chunk``
      (:func:`grpo_theory.lm.policy.score_contractions`) give every ``||s_ai||^2`` and ``S``;
      (2) one backward pass per prompt gives ``ghat_a``, hence ``||ghat_a||^2`` and
      ``<ghat_a, S>``.

    Args:
        policy: an :class:`grpo_theory.lm.policy.LMPolicy`.
        prompts: (m, P) integer prompt tokens (one row per sampled prompt).
        reward: ``reward(rows (N,), responses (N, R)) -> (N,)`` with ``rows`` the row of
            ``prompts`` each response answers.
        n_samples: n >= 3 responses per prompt.
        key: a JAX key or an integer seed.
        response_len: R >= 1 sampled tokens (the package's EOS, ``grpo_theory.lm.task.EOS``,
            ends a response; PAD after it).
        chunk: per-sample scores held at once in pass 1 (>= 1), or None: the largest that fits
            in ``memory_budget`` (:func:`resolve_chunk`).
        progress: optional ``progress(done, total)`` callback (prompts of pass 2).
        memory_budget: bytes for ``chunk=None`` (None: half the available memory,
            :func:`grpo_theory.lm.memory.default_memory_budget`).
        stage: optional ``stage(phase, done, total)`` callback, ``phase`` one of
            ``"sampling"`` (0/1 then 1/1), ``"scores"`` (the calls of pass 1) and
            ``"dots"`` (the calls of the forward-mode pass 2) or ``"gradients"`` (the prompts
            of the per-prompt pass 2).

    Returns:
        dict with ``rewards`` (m, n), ``sq_norms`` (m, n), ``mean_sq`` (m,), ``mean_dot`` (m,),
        ``responses`` (m, n, R) and ``chunk`` (the chunk used).

    Raises:
        ValueError: also for an out-of-memory error of XLA (naming ``--memory-budget`` and
            ``--chunk``).
    """
    key = V.key_or_seed(key)
    x = np.asarray(policy.check_prompts(prompts))
    m = x.shape[0]
    n = V.positive_int("n_samples", n_samples)
    R = V.positive_int("response_len", response_len)
    chunk = resolve_chunk(policy, chunk, m * n, memory_budget, seq_len=x.shape[1] + R,
                          response_len=R)
    xs = np.repeat(x, n, axis=0)
    if stage is not None:
        stage("sampling", 0, 1)
    with out_of_memory_as_value_error(f"sampling {m * n} responses"):
        y = np.asarray(policy.sample_blocked(key, xs, R))
    if stage is not None:
        stage("sampling", 1, 1)
    rows = np.repeat(np.arange(m), n)
    z = V.finite_array("reward(...)", np.asarray(reward(rows, y), np.float64).reshape(-1))
    if z.shape[0] != m * n:
        raise ValueError(f"reward must return one reward per response ({m * n}), got {z.shape[0]}")
    zz = z.reshape(m, n)
    group_chunk = (min(chunk, m * n) // n) * n
    if hasattr(policy, "ghost_moments") and group_chunk >= n:
        chunk = group_chunk
        sq, mean_sq, mean_dot = _ghost_statistics(policy, xs, y, z / n, n, chunk, stage,
                                                  progress)
        return dict(rewards=zz, sq_norms=sq.reshape(m, n), mean_sq=mean_sq, mean_dot=mean_dot,
                    responses=y.reshape(m, n, R), chunk=chunk)
    acc, sq = _streamed_contractions(policy, xs, y, (z / n)[None, :], chunk, stage)
    s_total = acc[0]
    mean_sq, mean_dot = np.zeros(m), np.zeros(m)
    for a in range(m):
        sl = slice(a * n, (a + 1) * n)
        with out_of_memory_as_value_error(f"the gradient of prompt {a + 1}'s {n} responses"):
            g = np.asarray(_weighted_grad(policy.apply_fn, policy.params, jnp.asarray(xs[sl]),
                                          jnp.asarray(y[sl]), jnp.asarray(zz[a] / n),
                                          policy.temperature, tuple(policy.eos_ids)))
        mean_sq[a], mean_dot[a] = _dots64(g, s_total)
        if progress is not None:
            progress(a + 1, m)
        if stage is not None:
            stage("gradients", a + 1, m)
    return dict(rewards=zz, sq_norms=np.asarray(sq).reshape(m, n), mean_sq=mean_sq,
                mean_dot=mean_dot, responses=y.reshape(m, n, R), chunk=chunk)


def estimate_scaling_constants(policy, n_prompts=None, n_samples: int = 8, seed=0, *,
                               prompts=None, reward=None, response_len=None,
                               chunk: int | None = 64, alpha: float = 0.05, progress=None,
                               memory_budget=None, stage=None, key=None) -> ScalingEstimate:
    """Unbiased c1, c2, c3 and G* with 95% intervals from sampled rollouts of ``policy``.

    ``policy`` may be

    * an enumerable policy of the package (:class:`~grpo_theory.SoftmaxBandit`,
      :class:`~grpo_theory.LinearSoftmaxBandit`, :class:`~grpo_theory.SequencePolicy`) or a
      :class:`~grpo_theory.DiscreteProblem`: ``n_prompts`` prompts drawn from its prompt
      distribution, ``n_samples`` responses each, Bernoulli rewards;
    * a language-model policy (:class:`grpo_theory.lm.policy.LMPolicy`), or a model given as
      ``(params, apply_fn)``: ``apply_fn(params, tokens, prompt_len) -> logits`` with ``tokens``
      an integer (N, T) array (prompt then response), ``prompt_len`` the prompt's length (a
      Python int) and ``logits`` (N, T, vocab) the next-token logits at every position
      (JAX-traceable in ``params``, which may be any pytree; responses end at
      ``grpo_theory.lm.task.EOS``). Then ``prompts`` (the pool, an integer (N, P) array),
      ``reward`` (``reward(rows, responses) -> rewards`` with ``rows`` indices into ``prompts``)
      and ``response_len`` are required; ``n_prompts`` prompts are drawn uniformly with
      replacement from the pool (``None``: each row once, the pool taken as the iid sample).
      Scores come from ``jax.grad`` and are streamed (:func:`lm_rollout_statistics`).

    Args:
        policy: see above.
        n_prompts: m >= 3 prompts (:data:`MIN_PROMPTS`).
        n_samples: n >= 3 responses per prompt (:data:`MIN_SAMPLES`).
        seed: integer seed or JAX key.
        key: a JAX PRNG key (or an integer), used instead of ``seed`` when given.
        prompts, reward, response_len, chunk, progress, memory_budget, stage: the
            language-model route (above; :func:`lm_rollout_statistics`).
        alpha: level of the ``*_ci`` attributes.

    Returns:
        :class:`ScalingEstimate` (``c1``, ``c2``, ``c3``, ``c*_ci``, ``g_star``, ``g_star_ci``,
        ``conf_int()``, ``summary()``, ``mse(B, G, estimator)``, ``recommended_group_size(N)``).
    """
    from ..lm.policy import LMPolicy

    n = V.integer("n_samples", n_samples)
    key = V.key_or_seed(seed, "seed") if key is None else V.key_or_seed(key, "key")
    if isinstance(policy, tuple):
        if len(policy) != 2 or not callable(policy[1]):
            raise ValueError("a model given as a tuple must be (params, apply_fn) with a callable "
                             "apply_fn(params, tokens, prompt_len) -> logits")
        policy = LMPolicy(policy[0], policy[1])
    if isinstance(policy, LMPolicy):
        if prompts is None or reward is None or response_len is None:
            raise ValueError("a language-model policy needs prompts (N, P), reward(rows, "
                             "responses) and response_len")
        if not callable(reward):
            raise ValueError(f"reward must be callable, got {type(reward).__name__}")
        pool = np.asarray(policy.check_prompts(prompts))
        kp, ks = jax.random.split(key)
        if n_prompts is None:
            rows = np.arange(pool.shape[0])
        else:
            m = V.integer("n_prompts", n_prompts)
            _check_sizes(m, n)
            rows = np.asarray(jax.random.randint(kp, (m,), 0, pool.shape[0]))
        _check_sizes(len(rows), n)
        st = lm_rollout_statistics(policy, pool[rows], lambda r, y: reward(rows[r], y), n, ks,
                                   response_len, chunk, progress, memory_budget=memory_budget,
                                   stage=stage)
        return estimate_from_rollouts(st["rewards"], sq_norms=st["sq_norms"],
                                      mean_sq=st["mean_sq"], mean_dot=st["mean_dot"], alpha=alpha)
    if n_prompts is None:
        raise ValueError("n_prompts is required for an enumerable policy")
    m = V.integer("n_prompts", n_prompts)
    _check_sizes(m, n)
    z, s = _enumerable_rollouts(policy, m, n, key)
    return estimate_from_rollouts(z, s, alpha=alpha)
