r"""The law against its rival on measured groups: GRPO's budget MSE against G (no model; arrays).

Theorem 2 gives leave-one-out GRPO at B groups of G (N = B G responses)

.. math:: N\,\mathrm{MSE}(G) = c_1 G + c_2 + \frac{c_3}{G - 1}
    \quad\text{(law)},\qquad c_1 G + c_2 + \frac{c_3}{G}\quad\text{(rival)},

the rival putting ``c3 / G`` in place of the leave-one-out term ``c3 / (G - 1)``. They differ
by ``d_G = c3 / (G (G - 1))``: ``c3 / 2`` at G = 2, ``c3 / 6`` at G = 3, ``c3 / 12`` at G = 4.
The measured ``y_G = N MSE(G) = G (E||ghat_1||^2 - ||grad J||^2)`` of independent groups
(:mod:`.measured_stats`) has a delete-one-batch jackknife covariance ``C`` over the G's of one
run (they share ``||grad J||^2``); runs with their own seeds are independent (block-diagonal
``C``). Every statistic here is linear, ``a . y``, with variance ``a' C a``:

* per G: ``z_rival = (y_G - rival_G) / se_G`` and ``z_law = (y_G - law_G) / se_G``; if the law
  holds, ``E z_rival = d_G / se_G``;
* pooled per G over runs: inverse-variance weights;
* combined over every (run, G): ``T = sum w_i (y_i - rival_i)`` with ``w_i = d_i / se_i^2`` (the
  most powerful weights when the entries are independent), ``z = T / sqrt(w' C w)``.

The constants' own error enters a second set of columns: the rival's (or the law's) value is a
linear function ``u . theta`` of the advisor's ``theta = (c1, c2, c3, c_v, ||grad J||^2)``, whose
jackknife covariance (from the study's rollouts, independent of the measurement) adds
``u' cov u``.

The plan (:func:`rival_plan`) is the power computation from a pilot: at one G, the measured se
scales as ``1 / sqrt(responses)``, so ``responses_G = pilot_G (z se_G / d_G)^2`` put the rival at
``z`` se if the law holds; a G the pilot lacks takes the per-response variance interpolated
linearly in ``log G`` on ``log (se^2 responses)`` between its measured neighbours.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from grpo_theory import _validation as V

from .measured_stats import group_squared_norms, u_statistic

__all__ = ["law_weights", "budget_mse_replicates", "run_entries", "rival_check",
           "pooled_difference", "per_response_variance", "rival_plan"]


def law_weights(G, rival: bool = False) -> np.ndarray:
    """``u`` with GRPO's ``N MSE(G) = u . theta`` (theta = c1, c2, c3, c_v, ||grad J||^2).

    Args:
        G: group size (>= 2); rival: the rival's ``c3 / G`` in place of ``c3 / (G - 1)``.

    Returns:
        (5,) float64 array.
    """
    G = float(G)
    if not G >= 2:
        raise ValueError(f"G must be >= 2, got {G}")
    return np.array([G, 1.0, 1.0 / G if rival else 1.0 / (G - 1.0), 0.0, 0.0])


def budget_mse_replicates(groups: pd.DataFrame, gram, n_batches: int,
                          estimator: str = "grpo"):
    """``y_G = G (E||ghat_1||^2 - ||grad J||^2)`` at every measured G and its delete-one-batch
    replicates (the same statistic as :func:`.measured_stats.budget_differences`).

    Args:
        groups: one row per group (columns ``G, batch, k, vhat, s11, s10, s00``).
        gram: (K, K) Gram matrix of the batch means; n_batches: K (>= 3).
        estimator: one of :data:`.measured_stats.ESTIMATORS`.

    Returns:
        ``(Gs, y, cov)``: the sorted G's, (n,) values and their (n, n) jackknife covariance.
    """
    K = V.integer("n_batches", n_batches, 3)
    batch = groups.batch.to_numpy()
    sq = group_squared_norms(groups, estimator)
    G_col = groups.G.to_numpy()
    Gs = sorted(int(g) for g in np.unique(G_col))

    def values(keep, J):
        return np.array([G * (np.sum(sq[(G_col == G) & keep]) / np.sum((G_col == G) & keep) - J)
                         for G in Gs])

    y = values(np.ones(len(groups), bool), u_statistic(gram))
    th = np.array([values(batch != k, u_statistic(gram, np.delete(np.arange(K), k)))
                   for k in range(K)])
    dev = th - th.mean(axis=0)
    return Gs, y, (K - 1) / K * dev.T @ dev


def run_entries(label: str, Gs, y, cov, responses) -> dict:
    """One run's entries for :func:`rival_check` (``responses``: scored responses per G)."""
    y = np.asarray(y, np.float64)
    cov = np.asarray(cov, np.float64)
    n = len(Gs)
    if y.shape != (n,) or cov.shape != (n, n) or len(responses) != n:
        raise ValueError(f"run {label!r}: y, cov and responses must match the {n} G's")
    return dict(label=str(label), G=[int(g) for g in Gs], y=y, cov=cov,
                responses=[int(r) for r in responses])


def _stack(runs):
    G = np.concatenate([r["G"] for r in runs]).astype(int)
    y = np.concatenate([r["y"] for r in runs])
    lab = sum(([r["label"]] * len(r["G"]) for r in runs), [])
    resp = np.concatenate([r["responses"] for r in runs]).astype(int)
    C = np.zeros((len(y), len(y)))
    i = 0
    for r in runs:
        n = len(r["G"])
        C[i:i + n, i:i + n] = r["cov"]
        i += n
    return lab, G, y, resp, C


def rival_check(runs, theta, theta_cov, target: float = 3.0) -> pd.DataFrame:
    """The measured GRPO budget MSE against the law and the rival (module docstring).

    Args:
        runs: :func:`run_entries` of independent runs (own seeds).
        theta: the advisor's (5,) constants; theta_cov: their (5, 5) covariance.
        target: the z at which the rival counts as excluded.

    Returns:
        ``DataFrame``, one row per (run, G), per G pooled over runs (``run = "pooled"``, only
        for a G in more than one run) and ``combined``: ``run, G, responses, measured, se, law,
        rival, z_law, z_rival, expected_z_rival`` (``(law - rival) / se``), ``se_law_total,
        se_rival_total`` (the constants' error added), ``z_law_total, z_rival_total`` and
        ``rival_excluded`` (``z_rival >= target``, measured se only).
    """
    if not runs:
        raise ValueError("runs must hold at least one run")
    th = V.real_array("theta", theta)
    tc = np.asarray(theta_cov, np.float64)
    if th.shape != (5,) or tc.shape != (5, 5):
        raise ValueError(f"theta must have shape (5,) and theta_cov (5, 5), got {th.shape} "
                         f"and {tc.shape}")
    lab, G, y, resp, C = _stack(runs)
    U_law = np.array([law_weights(g) for g in G])
    U_riv = np.array([law_weights(g, rival=True) for g in G])
    law, riv = U_law @ th, U_riv @ th
    se = np.sqrt(np.diag(C))
    rows = []

    def row(run, g, n, a):
        s = float(np.sqrt(max(a @ C @ a, 0.0)))
        m, lw, rv = float(a @ y), float(a @ law), float(a @ riv)
        sl = float(np.hypot(s, np.sqrt(max((a @ U_law) @ tc @ (a @ U_law), 0.0))))
        sr = float(np.hypot(s, np.sqrt(max((a @ U_riv) @ tc @ (a @ U_riv), 0.0))))
        z = (lambda v, q: v / q if q > 0 else np.nan)
        rows.append(dict(run=run, G=g, responses=int(n), measured=m, se=s, law=lw, rival=rv,
                         z_law=z(m - lw, s), z_rival=z(m - rv, s),
                         expected_z_rival=z(lw - rv, s), se_law_total=sl, se_rival_total=sr,
                         z_law_total=z(m - lw, sl), z_rival_total=z(m - rv, sr),
                         rival_excluded=bool(s > 0 and (m - rv) / s >= target)))

    for i in range(len(y)):
        a = np.zeros(len(y))
        a[i] = 1.0
        row(lab[i], int(G[i]), resp[i], a)
    for g in sorted(set(G.tolist())):
        idx = np.flatnonzero(G == g)
        if len(idx) > 1:
            row("pooled", g, resp[idx].sum(), _pooled(G, se, g))
    w = np.where(se > 0, (law - riv) / np.where(se > 0, se, 1.0) ** 2, 0.0)
    row("combined", np.nan, resp.sum(), w)
    return pd.DataFrame(rows)


def _pooled(G, se, g):
    """Inverse-variance weights of the entries at ``g`` (those with se = 0, if any, alone)."""
    at = G == g
    if not at.any():
        raise ValueError(f"G = {g} is not measured in any run")
    exact = at & (se == 0)
    a = exact.astype(float) if exact.any() else np.where(at, 1.0 / np.where(at, se, 1.0) ** 2,
                                                          0.0)
    return a / a.sum()


def pooled_difference(runs, G: int, reference: int, theta=None) -> dict:
    """``N MSE(G) - N MSE(reference)``, each pooled over the runs (inverse-variance weights),
    with its se (``a' C a``, runs independent) and z; ``predicted`` is the law's difference at
    ``theta`` (NaN without it).

    Returns:
        dict with ``G, reference, responses, difference, se, z, predicted``.
    """
    lab, Gv, y, resp, C = _stack(runs)
    se = np.sqrt(np.diag(C))
    a = _pooled(Gv, se, int(G)) - _pooled(Gv, se, int(reference))
    d, s = float(a @ y), float(np.sqrt(max(a @ C @ a, 0.0)))
    pred = np.nan if theta is None else float(
        (law_weights(G) - law_weights(reference)) @ np.asarray(theta, np.float64))
    return dict(G=int(G), reference=int(reference), responses=int(resp[Gv == G].sum()),
                difference=d, se=s, z=d / s if s > 0 else np.nan, predicted=pred)


def per_response_variance(Gs, se, responses, G: int) -> float:
    """``se_G^2 responses_G`` at ``G``: measured, or interpolated linearly in ``log G`` on the
    log of it between the nearest measured G's on either side (none outside their range)."""
    Gs = np.asarray(Gs, np.float64)
    v = np.asarray(se, np.float64) ** 2 * np.asarray(responses, np.float64)
    if G in Gs:
        return float(v[Gs == G][0])
    v = np.maximum(v, np.finfo(np.float64).tiny)  # a G with no spread: log of the tiniest
    lo, hi = Gs[Gs < G], Gs[Gs > G]
    if not len(lo) or not len(hi):
        raise ValueError(f"G = {G} is outside the pilot's G's {Gs.astype(int).tolist()}")
    a, b = lo.max(), hi.min()
    t = (np.log(G) - np.log(a)) / (np.log(b) - np.log(a))
    return float(np.exp((1 - t) * np.log(v[Gs == a][0]) + t * np.log(v[Gs == b][0])))


def rival_plan(Gs, se, responses, c3: float, new_Gs=(2, 3), target: float = 3.0,
               seconds_per_sample: float = np.nan, n_value: int = 1) -> pd.DataFrame:
    """Responses that put the rival at ``target`` se if the law holds, from a pilot.

    With ``v_G = se_G^2 responses_G`` and ``d_G = c3 / (G (G - 1))``, ``R`` responses at G give
    ``E z = d_G sqrt(R / v_G)``; independent entries add their ``z^2``: the pilot's
    ``z_p^2 = sum_G d_G^2 responses_G / v_G`` and a new run of ``R`` responses at each G of a
    set S, ``R sum_S d_G^2 / v_G`` (the shared ``||grad J||^2`` of one run is ignored here; the
    check, :func:`rival_check`, includes it).

    Args:
        Gs, se, responses: the pilot's G's, measured se of ``N MSE(G)`` and responses per G.
        c3: the advisor's c3.
        new_Gs: the G's of the new run (one outside the pilot's is interpolated,
            :func:`per_response_variance`).
        target: the z to reach.
        seconds_per_sample: the pilot's seconds per sampled response (for ``minutes``).
        n_value: m, the further responses sampled per group of the new run.

    Returns:
        ``DataFrame``, one row per design (each G alone, the pilot extended by the same number
        of responses at each of its G's, the pilot plus a run at ``new_Gs``): ``design, G, d,
        v, pilot_z, added_per_G`` (responses to add at each G of the design), ``sampled`` (with
        m per group) and ``minutes``.
    """
    c3 = V.real_scalar("c3", c3, positive=True)
    target = V.real_scalar("target", target, positive=True)
    Gs = [int(g) for g in Gs]
    resp = np.asarray(responses, np.float64)
    if len(resp) != len(Gs) or len(np.asarray(se)) != len(Gs):
        raise ValueError(f"se and responses must hold one entry per G of {Gs}")
    have = dict(zip(Gs, resp))
    S = sorted(int(g) for g in new_Gs)
    d = {g: np.float64(c3 / (g * (g - 1.0))) for g in sorted(set(Gs) | set(S))}
    v = {g: np.float64(per_response_variance(Gs, se, responses, g)) for g in d}
    with np.errstate(divide="ignore"):  # se = 0 (no spread): infinite information, 0 added
        info = {g: d[g] ** 2 / v[g] for g in d}
    z_p2 = sum(info[g] * have[g] for g in Gs)
    rows = []

    def add(design, Ss, added, pilot_z):
        sampled = sum(added * (g + n_value) / g for g in Ss)
        one = len(Ss) == 1
        rows.append(dict(design=design, G=",".join(str(g) for g in Ss),
                         d=d[Ss[0]] if one else np.nan, v=v[Ss[0]] if one else np.nan,
                         pilot_z=float(pilot_z), added_per_G=float(np.ceil(added)),
                         sampled=float(np.ceil(sampled)),
                         minutes=float(sampled * seconds_per_sample / 60)))

    for g in d:
        n = have.get(g, 0.0)
        add(f"G = {g} alone", [g], max(target ** 2 / info[g] - n, 0.0), np.sqrt(n * info[g]))
    add("the pilot's G's", Gs, max(target ** 2 - z_p2, 0.0) / sum(info[g] for g in Gs),
        np.sqrt(z_p2))
    add("the pilot plus a run at G = " + ", ".join(str(g) for g in S), S,
        max(target ** 2 - z_p2, 0.0) / sum(info[g] for g in S), np.sqrt(z_p2))
    return pd.DataFrame(rows)
