r"""Claim 3 — the group-size scaling law (Theorem 7) for the gradient MSE and for training.

Problem (:func:`grpo_theory.problems.scaling_bandit`): a linear softmax bandit with shared
parameters theta in R^2, 4 prompts x 2 responses, rewards Bernoulli(0.6) for response 0 and
Bernoulli(0.4) for response 1. Response 0 has feature 8 e1, -4 e1, 6 e2, -3 e2 in the four prompts
(response 1 has feature 0): prompts pull theta in opposite directions with different strengths,
so J has an *interior* maximiser theta* (negative-definite Hessian) where per-prompt gradients
disagree (c1 > 0) while their mean is 0. The axis-2 prompts are a 0.75-scaled copy of the axis-1
prompts, so the gradient covariance's components all scale alike in G. A reward gap of 0.2 puts
G* at a moderate value (about 6 at theta0 = 0 and 8 at theta*), visible on a grid of G that
divides N.

Three kinds of cells (one table each):

1. ``constants`` (one cell): ``gt.scaling_constants`` at theta0 = 0 (the initial policy) and at
   theta* (L-BFGS on the exact objective); ``gt.optimal_group_size``: the paper's sqrt(c3/c1),
   the exact 1 + sqrt(c3/c1) and its integer argmin; on the grid G in {2, 4, ...} the predicted
   best G is the grid argmin of ``budget_mse`` (scaling constants route).
2. ``mse`` (one cell per policy, N, G): the gradient MSE under a fixed budget N = BG with
   B = N/G, exact from ``gt.exact_mse`` (closed-form route), from the scaling constants, and
   Monte Carlo (``gt.mc_mse``) with a 95% CI. The exact argmin must equal the prediction and not
   move with N; the Monte Carlo argmin must equal it too.
3. ``train`` (one cell per budget, G): Algorithm 1
   (:func:`grpo_theory.optim.train.train_schedules`) from theta0 with GRPO, exact suboptimality
   gap Delta_n after n steps for many seeds (drawn from the cell's key), for both schedules
   (constant eta = 0.5; eta_t = 10/(t + 40), with 10 * lambda_min(-H*) > 1/2), under (a) a
   per-step budget N = BG = 64 (B = N/G, n fixed) and (b) a total budget T = n B G with B = 16
   fixed (n = T/(BG) steps). The report gives the empirical best G with a bootstrap 95% CI over
   seeds. Theory (Theorem 7 via Lemma 6) predicts the same G* in every case; this is reported
   against the measurement, not tuned: see the report for where it holds.

PASS (what the theory guarantees): exact argmin = prediction at every N (both policies), the
Monte Carlo argmin equals it at every N, the scaling constants reproduce the exact MSE (1e-9),
and every training cell has a finite best-G CI.

    grpo-theory scaling-law [--full] [--workers N]
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

import grpo_theory as gt
from grpo_theory.core import exact_objective, grid_argmin, maximise
from grpo_theory.experiments import Cell, Experiment, key_seed
from grpo_theory._precision import float64
from grpo_theory.optim import train_schedules
from grpo_theory.problems import scaling_bandit

from .analysis import TRAIN_B_TOTAL, checks, plot, report, summaries

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "optimum", "grid_argmin",
           "cells", "cell", "summaries", "checks", "report", "plot",
           "EXPERIMENT"]

NAME = "scaling-law"
CLAIM = "G* = 1 + sqrt(c3/c1) minimises the fixed-budget gradient MSE for every N; training (Thm 7)"
SCHEDULES = (("constant", 0.5, 0.0), ("inverse", 10.0, 40.0))
PROBLEM = "scaling_bandit(delta=0.1)"


@dataclass(frozen=True)
class Settings:
    """The constants cell, the MSE cells and the training cells.

    Attributes:
        budgets: the budgets N = B G of the MSE cells.
        grid: the group sizes G (each MSE cell has G <= N).
        mc_reps: Monte Carlo replicates per MSE cell.
        train_N: the per-step budgets N of the training cells.
        n_steps: steps of a training run under a per-step budget.
        n_seeds: training runs per cell.
        total_steps_at_Gmax: steps at the largest G under the total budget T = n B G
            (B = ``TRAIN_B_TOTAL``), which fixes T.
        n_boot: bootstrap resamples of the training best-G interval.
    """

    budgets: tuple
    grid: tuple
    mc_reps: int
    train_N: tuple
    n_steps: int
    n_seeds: int
    total_steps_at_Gmax: int
    n_boot: int


SETTINGS = {
    "quick": Settings(budgets=(64, 1024), grid=(2, 4, 8, 16, 32), mc_reps=10_000, train_N=(64,),
                      n_steps=200, n_seeds=384, total_steps_at_Gmax=100, n_boot=2000),
    "full": Settings(budgets=(64, 256, 1024, 4096), grid=(2, 4, 8, 16, 32, 64), mc_reps=40_000,
                     train_N=(64, 256), n_steps=800, n_seeds=2048, total_steps_at_Gmax=200,
                     n_boot=5000),
}

SCHEMA = {
    "constants": dict(policy="str", theta="str", J="float", J_star="float", c1="float",
                      c2="float", c3="float", G_paper="float?", G_continuous="float?",
                      G_exact="int", G_grid="int"),
    "mse": dict(policy="str", N="int", G="int", B="int", exact="float", scaling="float",
                mc="float", mc_se="float", ci_low="float", ci_high="float", n_reps="int"),
    "train": dict(mode="str", budget="int", G="int", B="int", n_steps="int", schedule="str",
                  eta="float", offset="float", run_seed="int", final_gap="float",
                  gap0="float"),
}


def optimum(bandit):
    """(theta*, J*) by L-BFGS on the exact objective."""
    return maximise(lambda th: exact_objective(bandit, th), bandit.params)


@functools.lru_cache(maxsize=1)
def _policies():
    """``({"initial": pi_theta0, "optimum": pi_theta*}, J*)`` (deterministic; cached per process)."""
    bandit = scaling_bandit()
    th, val = optimum(bandit)
    return {"initial": bandit, "optimum": bandit.with_params(th)}, float(val)


def _distinct_seeds(key, n: int) -> np.ndarray:
    """``n`` distinct integer seeds in [0, 2**31) drawn from ``key`` (one per training run)."""
    return np.random.default_rng(key_seed(key)).choice(2**31, size=n, replace=False)


def cells(s: Settings) -> list[Cell]:
    out = [Cell("constants", dict(part="constants", problem=PROBLEM, grid=s.grid),
                kind="constants")]
    out += [Cell(f"mse_{p}_N{N}_G{G}", dict(part="mse", problem=PROBLEM, policy=p, N=N,
                                            G=G, n_reps=s.mc_reps), kind="mse")
            for p in ("initial", "optimum") for N in s.budgets for G in s.grid if G <= N]
    total = TRAIN_B_TOTAL * max(s.grid) * s.total_steps_at_Gmax
    runs = [("per_step", N, G, N // G, s.n_steps) for N in s.train_N for G in s.grid if G <= N]
    runs += [("total", total, G, TRAIN_B_TOTAL, total // (TRAIN_B_TOTAL * G)) for G in s.grid]
    out += [Cell(f"train_{mode}_N{N}_G{G}",
                 dict(part="train", problem=PROBLEM, mode=mode, budget=N, G=G, B=B, n_steps=n,
                      n_seeds=s.n_seeds, schedules=SCHEDULES), kind="train")
            for mode, N, G, B, n in runs]
    return out


@float64
def cell(config: dict, key):
    """One cell: the constants, one fixed-budget MSE, or one training budget x G (see docs)."""
    pols, jstar = _policies()
    if config["part"] == "constants":
        rows = []
        for name, pol in pols.items():
            o = gt.optimal_group_size(pol)
            c = o.constants
            rows.append(dict(policy=name, theta=" ".join(f"{x:.6f}" for x in np.ravel(pol.params)),
                             J=float(exact_objective(pol)), J_star=jstar, c1=c.c1, c2=c.c2,
                             c3=c.c3, G_paper=o.paper, G_continuous=o.continuous,
                             G_exact=o.exact, G_grid=grid_argmin(c, config["grid"])))
        return rows
    G = config["G"]
    if config["part"] == "mse":
        pol, N = pols[config["policy"]], config["N"]
        B = N // G
        ex = gt.exact_mse(pol, "grpo", G, B)
        r = gt.mc_mse(pol, "grpo", G, batch_size=B, n_reps=config["n_reps"], key=key)
        return dict(policy=config["policy"], N=N, G=G, B=B, exact=ex,
                    scaling=float(gt.scaling_constants(pol).mse(B, G)), mc=r.mse, mc_se=r.se,
                    ci_low=r.ci_low, ci_high=r.ci_high, n_reps=config["n_reps"])
    B, n = config["B"], config["n_steps"]  # part == "train"
    schedules = [tuple(sc) for sc in config["schedules"]]
    res = train_schedules(pols["initial"], "grpo", B, G, n, schedules,
                          seeds=_distinct_seeds(key, config["n_seeds"]), log_every=n // 4,
                          max_objective=jstar)
    rows = []
    for (sch, eta, off), r in zip(schedules, res):
        for s, gap, g0 in zip(r.seeds, r.final_gap, r.gap[:, 0]):
            rows.append(dict(mode=config["mode"], budget=config["budget"], G=G, B=B, n_steps=n,
                             schedule=sch, eta=eta, offset=off, run_seed=int(s),
                             final_gap=float(gap), gap0=float(g0)))
    return rows


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=22)
