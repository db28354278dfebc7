r"""scaling-family's bandit cells: a member's constants, its fixed-budget MSE, one training G.

The family (:func:`grpo_theory.problems.scaling_family_bandit`) is the scaling-law bandit with
reward gap delta, at its maximiser theta*. Three cell kinds (one table each):

* ``constants`` (:func:`constants_cell`): exact c1, c2, c3 at theta* and theta0 = 0, G* in both
  forms, the exact integer argmin of ``G exact_mse(G, B=1)`` (= N MSE at budget N, B = N/G) over
  {G*-1, G*, G*+1} (N MSE is convex in G, so a local integer minimum is global), and the grid
  argmin of the law.
* ``mse`` (:func:`mse_cell`): for every G of the grid dividing N, the exact MSE (B = N/G) and a
  Monte Carlo estimate from per-replicate squared errors; ``boot_freq`` is how often G is the
  argmin when replicates are resampled within each G (:func:`bootstrap_argmin`).
* ``train`` (:func:`train_cell`): Algorithm 1 (GRPO, constant step ETA0/delta, so the
  deterministic part of the dynamics is the same for every member) from theta0 = 0; the exact
  final gap per seed.

:func:`bandit_points` turns the three tables into the report's best-G rows; :func:`law_z` puts
each member's Monte Carlo MSE against the law and its rival.
"""

from __future__ import annotations

import jax
import numpy as np
import pandas as pd

import grpo_theory as gt
from grpo_theory.core import exact_objective, grid_argmin
from grpo_theory.experiments import Cell, bootstrap_argmin, interval_from_freq, key_seed
from grpo_theory.optim import train_schedules
from grpo_theory.problems import scaling_family_bandit

__all__ = ["ETA0", "MC_CHUNK", "bandit_cells", "constants_cell", "mse_cell",
           "train_cell", "bandit_points", "rival_grid_argmin", "split_rows"]

ETA0 = 0.05  # constant step eta = ETA0 / delta (0.5 at delta = 0.1, as in scaling-law)
MC_CHUNK = 500  # replicates per mc_estimates call (one compiled shape per (B, G))


def bandit_cells(s) -> list[Cell]:
    """The constants, mse and train cells of settings ``s`` (scaling_family.Settings)."""
    out = [Cell(f"constants_d{d}", dict(part="constants", delta=d, grid=s.grid), kind="constants")
           for d in s.deltas]
    out += [Cell(f"mse_d{d}_N{N}", dict(part="mse", delta=d, N=N,
                                        grid=tuple(G for G in s.grid if G <= N),
                                        n_reps=s.mc_reps, n_boot=s.n_boot), kind="mse")
            for d in s.deltas for N in s.budgets]
    for d, N, grid, reps in s.split:  # members whose law and rival law argmins differ
        out += [Cell(f"constants_d{d}", dict(part="constants", delta=d, grid=grid),
                     kind="constants"),
                Cell(f"mse_d{d}_N{N}", dict(part="mse", delta=d, N=N, grid=grid, n_reps=reps,
                                            n_boot=s.n_boot), kind="mse")]
    runs = [("per_step", s.train_N, G, s.train_N // G, s.train_steps)
            for G in s.grid if G <= s.train_N]
    if s.train_B_total:
        T = s.train_B_total * max(s.grid) * s.total_steps_at_Gmax
        runs += [("total", T, G, s.train_B_total, T // (s.train_B_total * G)) for G in s.grid]
    out += [Cell(f"train_d{d}_{mode}_G{G}", dict(part="train", delta=d, mode=mode, budget=N,
                                                 G=G, B=B, n_steps=n, n_seeds=s.n_seeds),
                 kind="train")
            for d in s.train_deltas for mode, N, G, B, n in runs]
    return out


def constants_cell(config: dict, key=None) -> dict:
    """One member's scaling constants and G* (``config``: delta, grid)."""
    d = config["delta"]
    pol = scaling_family_bandit(d)
    o = gt.optimal_group_size(pol)
    oi = gt.optimal_group_size(scaling_family_bandit(d, at_optimum=False))
    cand = [G for G in (o.exact - 1, o.exact, o.exact + 1) if G >= 2]
    nmse = [G * float(gt.exact_mse(pol, "grpo", G, 1)) for G in cand]  # N MSE at B = N/G
    c = o.constants
    return dict(delta=d, c1=c.c1, c2=c.c2, c3=c.c3, c1_initial=oi.constants.c1,
                c3_initial=oi.constants.c3, G_paper=o.paper, G_continuous=o.continuous,
                G_exact=o.exact, G_exact_initial=oi.exact, int_argmin=cand[int(np.argmin(nmse))],
                G_grid=grid_argmin(c, config["grid"]), J_star=float(exact_objective(pol)))


def mse_cell(config: dict, key) -> list[dict]:
    """Exact and Monte Carlo MSE at every G of one member and budget (``config``: delta, N,
    grid (increasing), n_reps, n_boot)."""
    d, N, n_reps = config["delta"], config["N"], config["n_reps"]
    pol = scaling_family_bandit(d)
    grad = np.asarray(gt.exact_gradient(pol))
    grid = config["grid"]
    n_chunks = max(1, -(-n_reps // MC_CHUNK))
    err = {}
    for G, kG in zip(grid, jax.random.split(key, len(grid))):
        parts = [np.sum((np.asarray(gt.mc_estimates(pol, "grpo", G, N // G, n_reps=MC_CHUNK,
                                                    key=k)) - grad) ** 2, axis=1)
                 for k in jax.random.split(kG, n_chunks)]
        err[G] = np.concatenate(parts)
    freq = bootstrap_argmin(err, n_boot=config["n_boot"], seed=key).freq  # grid is increasing
    return [dict(delta=d, N=N, G=G, B=N // G, exact=float(gt.exact_mse(pol, "grpo", G, N // G)),
                 mc=float(err[G].mean()), mc_se=float(err[G].std(ddof=1) / np.sqrt(err[G].size)),
                 boot_freq=float(freq[j]), n_reps=int(err[G].size))
            for j, G in enumerate(grid)]


def train_cell(config: dict, key) -> list[dict]:
    """Algorithm 1 at one G: the exact final gap of ``n_seeds`` runs (``config``: delta, mode,
    budget, G, B, n_steps, n_seeds)."""
    d, G, B, n = config["delta"], config["G"], config["B"], config["n_steps"]
    start = scaling_family_bandit(d, at_optimum=False)
    jstar = float(exact_objective(scaling_family_bandit(d)))
    eta = ETA0 / d
    seeds = np.random.default_rng(key_seed(key)).choice(2**31, size=config["n_seeds"],
                                                        replace=False)
    r, = train_schedules(start, "grpo", B, G, n, [("constant", eta, 0.0)], seeds=seeds,
                         log_every=n, max_objective=jstar)
    return [dict(delta=d, mode=config["mode"], budget=config["budget"], G=G, B=B, n_steps=n,
                 eta=eta, run_seed=int(sd), final_gap=float(gap), gap0=float(g0))
            for sd, gap, g0 in zip(r.seeds, r.final_gap, r.gap[:, 0])]


def bandit_points(tables, n_boot: int) -> list[dict]:
    """Best-G rows of the bandit sources: ``exact`` (argmin of the exact MSE on the grid),
    ``mc`` (Monte Carlo argmin, CI from the cell's ``boot_freq``) and ``train_<mode>`` (best
    mean final gap, :func:`bootstrap_argmin` over seeds with NumPy seed N)."""
    const = tables["constants"].set_index("delta")

    def pred(d):
        return gt.ScalingConstants(*(float(const.loc[d, k]) for k in ("c1", "c2", "c3")))

    rows = []
    for (d, N), e in tables["mse"].groupby(["delta", "N"]):
        e = e.sort_values("G")
        grid = [int(g) for g in e.G]
        base = dict(delta=d, N=int(N), G_pred=float(const.loc[d, "G_continuous"]),
                    G_grid=grid_argmin(pred(d), grid))
        ex = grid[int(np.argmin(e.exact.values))]
        rows.append(dict(base, source="exact", best_G=ex, ci_low=ex, ci_high=ex))
        lo, hi = interval_from_freq(grid, e.boot_freq.values)
        rows.append(dict(base, source="mc", best_G=grid[int(np.argmin(e.mc.values))],
                         ci_low=lo, ci_high=hi))
    for (d, mode, N), e in tables["train"].groupby(["delta", "mode", "budget"]):
        by = {int(G): g.final_gap.values for G, g in e.groupby("G")}
        b = bootstrap_argmin(by, n_boot=n_boot, seed=int(N))
        rows.append(dict(delta=d, source=f"train_{mode}", N=int(N),
                         G_pred=float(const.loc[d, "G_continuous"]),
                         G_grid=grid_argmin(pred(d), sorted(by)), best_G=int(b.best),
                         ci_low=int(b.lo), ci_high=int(b.hi)))
    return rows


def law_z(tables):
    """Per member: the Monte Carlo MSE against the law and against its rival, in standard errors.

    The law is Theorem 7's ``(c1 G + c2 + c3/(G-1)) / N`` (the form with the +1 in
    ``G* = 1 + sqrt(c3/c1)``; :func:`grpo_theory.core.scaling.budget_mse`), the rival the paper's
    leading-order ``(c1 G + c2 + c3/G) / N`` (argmin ``sqrt(c3/c1)``), which differs by
    ``c3 / (N G (G-1))``, most at the smallest G.

    Returns:
        DataFrame (delta, max_abs_z, rival_z, n_cells): the largest ``|mc - law| / se`` over the
        member's (N, G) cells, and the largest ``|mc - rival| / se``.
    """
    const = tables["constants"].set_index("delta")
    rows = []
    for d, e in tables["mse"].groupby("delta"):
        c = gt.ScalingConstants(*(float(const.loc[d, k]) for k in ("c1", "c2", "c3")))
        G, N = e.G.to_numpy(float), e.N.to_numpy(float)
        law = np.asarray(gt.budget_mse(c, G, 1.0)) / N
        rival = (c.c1 * G + c.c2 + c.c3 / G) / N
        se = e.mc_se.to_numpy(float)
        rows.append(dict(delta=float(d), max_abs_z=float(np.max(np.abs(e.mc - law) / se)),
                         rival_z=float(np.max(np.abs(e.mc - rival) / se)), n_cells=len(e)))
    return pd.DataFrame(rows, columns=["delta", "max_abs_z", "rival_z", "n_cells"])


def rival_grid_argmin(c, grid) -> int:
    """The grid argmin of the rival leading-order law ``c1 G + c2 + c3/G`` (continuous argmin
    ``sqrt(c3/c1)``), the smallest G on a tie."""
    vals = [c.c1 * G + c.c2 + c.c3 / G for G in grid]
    return int(grid[int(np.argmin(vals))])


def split_rows(tables, split) -> pd.DataFrame:
    """Per member of ``split`` ((delta, N, grid, n_reps): the law's and the rival law's grid
    argmins differ): both argmins and how far the Monte Carlo MSE at the rival's argmin lies
    above the law's, ``z = (mc[G_rival] - mc[G_law]) / sqrt(se_rival^2 + se_law^2)``
    (independent cells; the rival law predicts z < 0).

    Returns:
        DataFrame (delta, N, G_law, G_rival, mc_law, mc_rival, z).
    """
    const = tables["constants"].set_index("delta")
    rows = []
    for d, N, grid, _ in split:
        c = gt.ScalingConstants(*(float(const.loc[d, k]) for k in ("c1", "c2", "c3")))
        e = tables["mse"][(tables["mse"].delta == d) & (tables["mse"].N == N)].set_index("G")
        gl, gr = grid_argmin(c, list(grid)), rival_grid_argmin(c, list(grid))
        z = (e.mc[gr] - e.mc[gl]) / np.hypot(e.mc_se[gr], e.mc_se[gl])
        rows.append(dict(delta=float(d), N=int(N), G_law=int(gl), G_rival=int(gr),
                         mc_law=float(e.mc[gl]), mc_rival=float(e.mc[gr]), z=float(z)))
    return pd.DataFrame(rows, columns=["delta", "N", "G_law", "G_rival", "mc_law", "mc_rival",
                                       "z"])
