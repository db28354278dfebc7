r"""Measured gradient MSE from independent groups: the statistics (no model; pure arrays).

Design. A group is one prompt ``x`` drawn uniformly from the study's prompts and G responses
``y_i`` drawn from the policy, with binary rewards ``r_i``. With ``S_1 = sum_{r_i = 1} s_i`` and
``S_0 = sum_{r_i = 0} s_i`` (``s_i = grad log pi(y_i | x)``) each estimator of one group is a
combination ``ghat = a S_1 + b S_0`` (:func:`coefficients`):

* vanilla ``(1/G) sum r_i s_i``: ``(a, b) = (1/G, 0)``;
* grpo (leave-one-out) ``(1/G) sum (r_i - mean_{k != i} r_k) s_i = (S_1 - rbar (S_1 + S_0)) / (G - 1)``;
* oracle_hat ``(1/G) sum (r_i - Vhat) s_i`` with ``Vhat`` the mean reward of ``m`` further,
  independent responses to the same prompt (the oracle with an estimated value).

so ``||ghat||^2 = a^2 S_1.S_1 + 2 a b S_1.S_0 + b^2 S_0.S_0`` from the group's 2 x 2 Gram matrix.
All three are unbiased for ``grad J`` (``E[s | x] = 0``; ``Vhat`` is independent of the group), and
B independent groups average, so the MSE at B groups of G (budget N = B G) is

.. math:: \mathrm{MSE}(N, G) = \frac{G}{N}\left(E\|\hat g_1\|^2 - \|\nabla J\|^2\right),

an identity of independent averaging, not of the theory under test (Theorem 2's
``c1 G + c2 + c3 / (G - 1)``). ``||grad J||^2`` is shared by every (estimator, G): it is estimated
without bias from K batches (group ``j`` of each G goes to batch ``j mod K``) by the U-statistic
``sum_{k != l} Tbar_k . Tbar_l / (K (K - 1))`` of the batch means ``Tbar_k`` of the vanilla vectors.
Standard errors are delete-one-batch jackknife (the shared estimate and its covariance with each
mean square included); the argmin's interval is a bootstrap over batches.

The oracle_hat's prediction adds its extra term ``E_x[V(1 - V) E(||s||^2 | x)] / (m G)`` (per
group) to the oracle's, which is :func:`oracle_hat_extra`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from grpo_theory import _validation as V

__all__ = ["ESTIMATORS", "coefficients", "group_squared_norms", "u_statistic",
           "measured_group_variance", "measured_mse_table", "budget_differences",
           "bootstrap_argmin", "oracle_hat_extra"]

#: the estimators measured (the oracle with ``V(x)`` estimated from independent responses)
ESTIMATORS = ("vanilla", "grpo", "oracle_hat")


def coefficients(estimator: str, G, k, vhat=None):
    """``(a, b)`` with the group's estimate ``ghat = a S_1 + b S_0`` (module docstring).

    Args:
        estimator: one of :data:`ESTIMATORS`.
        G: group sizes (>= 2), k: rewarded responses among them (0 <= k <= G), vhat: the
            independent value estimates (oracle_hat only); arrays broadcast.

    Returns:
        ``(a, b)`` float64 arrays.

    Examples:
        >>> a, b = coefficients("grpo", 4, 1)  # (3/4 S_1 - 1/4 S_0) / 3
        >>> print(round(float(a), 4), round(float(b), 4))
        0.25 -0.0833
    """
    G = np.asarray(G, np.float64)
    k = np.asarray(k, np.float64)
    if np.any(G < 2) or np.any((k < 0) | (k > G)):
        raise ValueError("G must be >= 2 and 0 <= k <= G")
    if estimator == "vanilla":
        return 1.0 / G, np.zeros_like(G * k)
    if estimator == "grpo":
        rbar = k / G
        return (1.0 - rbar) / (G - 1.0), -rbar / (G - 1.0)
    if estimator == "oracle_hat":
        if vhat is None:
            raise ValueError("oracle_hat needs vhat (the independent value estimates)")
        v = np.asarray(vhat, np.float64)
        return (1.0 - v) / G, -v / G
    raise ValueError(f"estimator must be one of {list(ESTIMATORS)}, got {estimator!r}")


def group_squared_norms(groups: pd.DataFrame, estimator: str) -> np.ndarray:
    """``||ghat||^2`` of every group from its Gram entries (columns ``G, k, vhat, s11, s10,
    s00``: ``S_1.S_1``, ``S_1.S_0``, ``S_0.S_0``)."""
    a, b = coefficients(estimator, groups.G.to_numpy(), groups.k.to_numpy(),
                        groups.vhat.to_numpy())
    return a * a * groups.s11.to_numpy() + 2 * a * b * groups.s10.to_numpy() \
        + b * b * groups.s00.to_numpy()


def u_statistic(gram, index=None) -> float:
    """``sum_{i != j} M[idx_i, idx_j] / #pairs`` over positions with different batches.

    Args:
        gram: (K, K) Gram matrix of the batch means; index: batch indices (with repeats, as a
            bootstrap draws them; default all K once).

    Returns:
        The unbiased estimate of ``||grad J||^2`` (float).
    """
    M = np.asarray(gram, np.float64)
    idx = np.arange(M.shape[0]) if index is None else np.asarray(index)
    sub = M[np.ix_(idx, idx)]
    off = idx[:, None] != idx[None, :]
    if not off.any():
        raise ValueError("the U-statistic needs at least two distinct batches")
    return float(sub[off].sum() / off.sum())


def _means(groups, sq, weights):
    """Weighted mean of ``sq`` per G (weights: the group's batch multiplicity)."""
    out = {}
    for G, rows in groups.groupby("G").indices.items():
        w = weights[rows]
        out[int(G)] = float(np.sum(w * sq[rows]) / np.sum(w)) if w.sum() > 0 else np.nan
    return out


def measured_group_variance(groups: pd.DataFrame, gram, n_batches: int) -> pd.DataFrame:
    """``E||ghat_1||^2 - ||grad J||^2`` per (estimator, G) (one group: B = 1) with jackknife SEs.

    Args:
        groups: one row per group (columns ``G, batch, k, vhat, s11, s10, s00``).
        gram: (K, K) Gram matrix of the batch means of the vanilla vectors.
        n_batches: K (>= 3).

    Returns:
        ``DataFrame`` with ``estimator, G, group_mse, se, mean_sq, grad_norm_sq, grad_norm_sq_se,
        replicates``.
    """
    K = V.integer("n_batches", n_batches, 3)
    batch = groups.batch.to_numpy()
    J = u_statistic(gram)
    J_jk = np.array([u_statistic(gram, np.delete(np.arange(K), k)) for k in range(K)])
    J_se = float(np.sqrt((K - 1) / K * np.sum((J_jk - J_jk.mean()) ** 2)))
    rows = []
    for e in ESTIMATORS:
        sq = group_squared_norms(groups, e)
        full = _means(groups, sq, np.ones(len(groups)))
        jk = [_means(groups, sq, (batch != k).astype(float)) for k in range(K)]
        for G, m in full.items():
            th = np.array([jk[k][G] - J_jk[k] for k in range(K)])
            se = float(np.sqrt((K - 1) / K * np.sum((th - th.mean()) ** 2)))
            rows.append(dict(estimator=e, G=G, group_mse=m - J, se=se, mean_sq=m, grad_norm_sq=J,
                             grad_norm_sq_se=J_se, replicates=int(np.sum(groups.G == G))))
    return pd.DataFrame(rows)


def measured_mse_table(variance: pd.DataFrame, budgets) -> pd.DataFrame:
    """The MSE at budgets N = B G (G dividing N): ``var G / N`` and ``se G / N``."""
    rows = []
    for N in budgets:
        N = V.positive_int("budget", N)
        for r in variance.itertuples(index=False):
            if N % r.G == 0:
                rows.append(dict(estimator=r.estimator, N=N, G=r.G, B=N // r.G,
                                 mse=r.group_mse * r.G / N, se=r.se * r.G / N,
                                 replicates=r.replicates, responses=r.replicates * r.G))
    return pd.DataFrame(rows)


def budget_differences(groups: pd.DataFrame, gram, n_batches: int, estimator: str,
                       reference: int) -> pd.DataFrame:
    """``N MSE(G) - N MSE(reference)`` (``G v_G - G_ref v_ref``, the same at every N) for every
    G, with delete-one-batch jackknife SEs (the shared ``||grad J||^2``, which enters with the
    factor ``G_ref - G``, included) and ``z = difference / se``.

    Returns:
        ``DataFrame`` with ``estimator, G, reference, difference, se, z``.
    """
    K = V.integer("n_batches", n_batches, 3)
    batch = groups.batch.to_numpy()
    sq = group_squared_norms(groups, estimator)
    J = u_statistic(gram)
    J_jk = [u_statistic(gram, np.delete(np.arange(K), k)) for k in range(K)]
    full = _means(groups, sq, np.ones(len(groups)))
    jk = [_means(groups, sq, (batch != k).astype(float)) for k in range(K)]
    if reference not in full:
        raise ValueError(f"reference must be a measured G {sorted(full)}, got {reference!r}")
    R = reference
    rows = []
    for G in sorted(full):
        d = G * (full[G] - J) - R * (full[R] - J)
        th = np.array([G * (jk[k][G] - J_jk[k]) - R * (jk[k][R] - J_jk[k]) for k in range(K)])
        se = float(np.sqrt((K - 1) / K * np.sum((th - th.mean()) ** 2)))
        rows.append(dict(estimator=estimator, G=G, reference=R, difference=d, se=se,
                         z=d / se if se > 0 else np.nan))
    return pd.DataFrame(rows)


def bootstrap_argmin(groups: pd.DataFrame, gram, n_batches: int, n_boot: int = 2000,
                     seed: int = 0) -> pd.DataFrame:
    """The measured argmin over G of the budget MSE ``G (E||ghat_1||^2 - ||grad J||^2)`` (the
    same at every N) and its bootstrap over batches.

    Returns:
        ``DataFrame`` with ``estimator, argmin, G_low, G_high`` (2.5% and 97.5% quantiles of the
        bootstrap argmin) and ``share_<G>`` (how often each G is the bootstrap argmin).
    """
    K = V.integer("n_batches", n_batches, 3)
    rng = np.random.default_rng(seed)
    batch = groups.batch.to_numpy()
    Gs = sorted(int(g) for g in groups.G.unique())
    draws = [rng.integers(0, K, K) for _ in range(n_boot)]
    draws = [d for d in draws if len(np.unique(d)) >= 2]
    out = []
    for e in ESTIMATORS:
        sq = group_squared_norms(groups, e)
        J = u_statistic(gram)
        full = _means(groups, sq, np.ones(len(groups)))
        best = min(Gs, key=lambda G: G * (full[G] - J))
        arg = []
        for d in draws:
            w = np.bincount(d, minlength=K)[batch].astype(float)
            m = _means(groups, sq, w)
            Jb = u_statistic(gram, d)
            arg.append(min(Gs, key=lambda G: G * (m[G] - Jb)))
        arg = np.asarray(arg)
        row = dict(estimator=e, argmin=best, G_low=int(np.quantile(arg, 0.025, method="lower")),
                   G_high=int(np.quantile(arg, 0.975, method="higher")), n_boot=len(draws))
        row.update({f"share_{G}": float(np.mean(arg == G)) for G in Gs})
        out.append(row)
    return pd.DataFrame(out)


def oracle_hat_extra(ref_rewards, score_sq, n_value: int):
    """The oracle_hat's extra MSE of one group of G = 1 response, and its standard error.

    ``E_x[V(1 - V) E(||s||^2 | x)] / m``, divided by G for a group of G: ``V(1 - V)`` is
    estimated without bias from independent reference rewards (``k (n - k) / (n (n - 1))``) and
    multiplied by the per-prompt ``E||s||^2`` estimate from other responses (independent, so
    the product is unbiased).

    Args:
        ref_rewards: (m, n_ref) binary rewards; score_sq: (m,) ``E[||s||^2 | x]`` estimates;
        n_value: responses behind each ``Vhat``.

    Returns:
        ``(value, se)`` (floats).
    """
    z = np.asarray(ref_rewards, np.float64)
    n = z.shape[1]
    k = z.sum(axis=1)
    piece = k * (n - k) / (n * (n - 1)) * np.asarray(score_sq, np.float64)
    m = V.positive_int("n_value", n_value)
    return float(piece.mean() / m), float(piece.std(ddof=1) / np.sqrt(len(piece)) / m)
