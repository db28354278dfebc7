"""Claim 5 (Theorem 8, Corollaries 9-10): n Delta_n -> sum_k w_k chi^2_1, weights from the
Lyapunov equation *with* the factor beta^2 (the printed form without it disagrees).

Simulation: Algorithm 1 with the step ``beta / i`` (beta = 2 > 1/(2 mu)) on the Gaussian-action
bandit ``default_gaussian_bandit`` (d = 2, interior maximiser), B = 2 prompts per step, for
oracle (G = 2), GRPO (G = 2) and GRPO (G = 8), started at ``theta* + (0.5, -0.5)``; plus
the scalar check of Theorem 8 (``scalar_gaussian_bandit``: lambda = 1, Gamma = 2, beta = 1.5,
oracle with B = G = 1: E[n Delta] = 1.125 corrected, 0.5 printed). For every run, n Delta_n at
the last step over many seeds is compared with the exact mixture (mean with 95% CI, quantiles /
QQ plot, Kolmogorov-Smirnov test against the exact mixture CDF, ``optimization.mixture_cdf``).

Exact part (Corollaries 9-10): ``w_k(grpo) - w_k(oracle)`` over G = 2..1024; the slope of
``log`` difference on ``log G`` (G >= 16) by statsmodels OLS with its 95% CI.

Cells: one ``samples`` cell per run (n Delta_n of every seed at n/16, n/4 and n), one
``predictions`` cell (the exact weights, corrected and printed, of every run) and one
``group_sweep`` cell (exact weights over G); the report computes the statistics from them.

PASS when, for every run: the corrected mean lies within 4 standard errors of the simulated mean
and the KS test does not reject it (p >= 0.001), while the printed form is rejected by both
(|z| > 4 and KS p < 1e-6); and both slopes lie within 0.05 of -2.

    grpo-theory asymptotic-distribution [--full]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from grpo_theory import problems
from grpo_theory.experiments import Cell, Experiment
from grpo_theory._precision import float64
from grpo_theory.optim import theory as opt

from . import analysis as _report
from .analysis import (G_FIT_MIN, KS_ACCEPT, KS_REJECT, SLOPE_TOL, Z_TOL, analyse, plot, report,
                       slopes)

__all__ = ["NAME", "CLAIM", "RUNS", "Settings", "SETTINGS", "SCHEMA", "cells", "cell",
           "predictions", "group_sweep", "analyse", "slopes", "checks", "report", "plot",
           "EXPERIMENT"]

NAME = "asymptotic-distribution"
CLAIM = ("Theorem 8: n*Delta_n -> weighted chi-square mixture with the beta^2-corrected Lyapunov "
         "weights; w(grpo) - w(oracle) = O(G^-2) (Cor 9-10)")
BATCH = 2
BETA = 2.0
RUNS = (  # (run id, problem, estimator, G, B, beta)
    ("oracle_G2", "default", "oracle", 2, BATCH, BETA),
    ("grpo_G2", "default", "grpo", 2, BATCH, BETA),
    ("grpo_G8", "default", "grpo", 8, BATCH, BETA),
    ("scalar_oracle", "scalar", "oracle", 1, 1, 1.5),
)
G_GRID = tuple(2**k for k in range(1, 11))
START_OFFSET = (0.5, -0.5)
SWEEP_ESTIMATORS = ("oracle", "grpo", "vanilla", "optimal")


@dataclass(frozen=True)
class Settings:
    """The sample cells (one per run), the predictions and the group sweep.

    Attributes:
        n_seeds: independent runs per sample cell.
        n_steps: steps per run; the suboptimality is logged at n/16, n/4 and n.
        runs: ``(run id, problem, estimator, G, B, beta)`` of each sample cell.
    """

    n_seeds: int
    n_steps: int
    runs: tuple = RUNS


SETTINGS = {"quick": Settings(n_seeds=1500, n_steps=1024),
            "full": Settings(n_seeds=10_000, n_steps=8192)}

SCHEMA = {
    "samples": dict(run="str", problem="str", estimator="str", G="int", B="int", beta="float",
                    seed_index="int", n="int", n_gap="float?"),
    "predictions": dict(run="str", problem="str", estimator="str", G="int", B="int",
                        beta="float", k="int", weight="float", weight_printed="float",
                        mean="float", mean_printed="float"),
    "group_sweep": dict(estimator="str", G="int", B="int", beta="float", k="int",
                        weight="float"),
}


def cells(s: Settings) -> list[Cell]:
    n = s.n_steps
    log_steps = sorted({n // 16, n // 4, n})
    out = [Cell(rid, dict(part="samples", run=rid, problem=pname, estimator=est, G=G, B=B,
                          beta=beta, schedule="inverse", start_offset=list(START_OFFSET),
                          n_seeds=s.n_seeds, n_steps=n, log_steps=log_steps), "samples")
           for rid, pname, est, G, B, beta in s.runs]
    out.append(Cell("predictions", dict(part="predictions", runs=[list(r) for r in s.runs]),
                    "predictions"))
    out.append(Cell("group_sweep", dict(part="group_sweep", G_grid=list(G_GRID),
                                        estimators=list(SWEEP_ESTIMATORS), B=BATCH, beta=BETA),
                    "group_sweep"))
    return out


def _problem(name: str):
    if name == "default":
        return problems.default_gaussian_bandit()
    if name == "scalar":
        return problems.scalar_gaussian_bandit()
    raise ValueError(f"problem must be 'default' or 'scalar', got {name!r}")


def predictions(runs=RUNS) -> pd.DataFrame:
    """Exact Gamma-derived weights (corrected and printed) for every simulated run.

    Args:
        runs: ``(run id, problem, estimator, G, B, beta)`` tuples.

    Returns:
        One row per (run, k): weight ``w_k`` (with beta^2), ``weight_printed`` (without), and
        the means ``sum_k w_k`` of both forms.
    """
    rows = []
    for rid, pname, est, G, B, beta in runs:
        a = opt.asymptotic_prediction(_problem(pname), est, G, B, beta)
        for k, (w, wp) in enumerate(zip(a.weights, a.weights_printed)):
            rows.append(dict(run=rid, problem=pname, estimator=est, G=G, B=B, beta=beta, k=k,
                             weight=w, weight_printed=wp, mean=a.mean,
                             mean_printed=a.mean_printed))
    return pd.DataFrame(rows)


def group_sweep(G_grid=G_GRID, estimators=SWEEP_ESTIMATORS, B: int = BATCH,
                beta: float = BETA) -> pd.DataFrame:
    """w_k for each estimator over G (default problem, B prompts, step beta / i).

    Returns:
        One row per (G, estimator, k) with the corrected weight ``w_k``.
    """
    p = problems.default_gaussian_bandit()
    rows = []
    for G in G_grid:
        for est in estimators:
            a = opt.asymptotic_prediction(p, est, G, B, beta)
            for k, w in enumerate(a.weights):
                rows.append(dict(estimator=est, G=G, B=B, beta=beta, k=k, weight=w))
    return pd.DataFrame(rows)


@float64
def cell(config: dict, key) -> pd.DataFrame:
    """``samples``: n Delta_n of every seed of one run at its logged n; ``predictions`` /
    ``group_sweep``: the exact weights (no randomness)."""
    part = config["part"]
    if part == "predictions":
        return predictions([tuple(r) for r in config["runs"]])
    if part == "group_sweep":
        return group_sweep(config["G_grid"], config["estimators"], config["B"], config["beta"])
    if part != "samples":
        raise ValueError(f"config['part'] must be samples/predictions/group_sweep, got {part!r}")
    problem = _problem(config["problem"])
    c = opt.problem_constants(problem)
    theta0 = c.theta_star + np.asarray(config["start_offset"])[: problem.dim]
    S, log_steps = config["n_seeds"], config["log_steps"]
    res = opt.train(problem, config["estimator"], config["G"], config["B"], config["beta"],
                    config["schedule"], config["n_steps"], S, key=key,
                    theta0=theta0, log_steps=log_steps)
    return pd.DataFrame(dict(
        run=config["run"], problem=config["problem"], estimator=config["estimator"],
        G=config["G"], B=config["B"], beta=config["beta"],
        seed_index=np.repeat(np.arange(S), len(res.log_steps)),
        n=np.tile(res.log_steps, S),
        n_gap=(res.gaps * res.log_steps[None, :]).reshape(-1)))


def checks(stats: pd.DataFrame, slope_tbl: pd.DataFrame, runs=RUNS) -> list:
    """The PASS criteria (module doc) at each run's last logged n (:func:`analyse`'s ``stats``,
    :func:`slopes`' table), every run of ``runs`` required: see
    :func:`._asymptotic_distribution_report.checks`."""
    return _report.checks(stats, slope_tbl, runs)


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=35)
