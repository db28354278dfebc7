"""Exact vs Monte Carlo MSE of the four main estimators over G (the core engine).

For the default bandit (``grpo_theory.problems.default_bandit``: 4 prompts x 6 responses) and
G in {2, 4, ..., 64}, one cell per (estimator, G) computes the exact MSE (closed form, B = 1) of
vanilla / grpo / grpo_mean / oracle and a Monte Carlo estimate with its standard error. PASS
when every exact value lies within 4 standard errors of the Monte Carlo estimate (a 4-sigma
band: with 24 cells a 95% band would fail by chance too often).

    grpo-theory mse-table [--full] [--workers N]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

import grpo_theory as gt
from grpo_theory.plotting import integer_ticks, plt, save_figure
from grpo_theory.experiments import Cell, Experiment, Section, check, markdown_table
from grpo_theory._precision import float64
from grpo_theory.problems import default_bandit

NAME = "mse-table"
CLAIM = "exact finite-G MSE of vanilla/grpo/grpo_mean/oracle equals Monte Carlo (core engine)"
Z_TOL = 4.0
#: a cell counts for the check's power only where its exact MSE differs from the rival's (the
#: oracle's at the same G) by this share
RIVAL_GAP = 0.05


@dataclass(frozen=True)
class Settings:
    """The sweep: one cell per (estimator, G).

    Attributes:
        n_reps: Monte Carlo replicates per cell.
        estimators: the estimators compared (names of the estimator registry).
        group_sizes: the group sizes G.
    """

    n_reps: int
    estimators: tuple = ("vanilla", "grpo", "grpo_mean", "oracle")
    group_sizes: tuple = (2, 4, 8, 16, 32, 64)


SETTINGS = {"quick": Settings(n_reps=20_000), "full": Settings(n_reps=400_000)}

SCHEMA = {"table": dict(estimator="str", G="int", B="int", exact_mse="float", mc_mse="float",
                        mc_se="float", ci_low="float", ci_high="float", n_reps="int",
                        z="float")}


def cells(s: Settings) -> list[Cell]:
    return [Cell(f"{e}_G{G}", dict(estimator=e, G=G, n_reps=s.n_reps))
            for e in s.estimators for G in s.group_sizes]


@float64
def cell(config: dict, key) -> dict:
    """Exact and Monte Carlo MSE of one estimator at one group size (B = 1)."""
    bandit = default_bandit()
    est, G = config["estimator"], config["G"]
    exact = gt.exact_mse(bandit, est, G)
    r = gt.mc_mse(bandit, est, G, n_reps=config["n_reps"], key=key)
    return dict(estimator=est, G=G, B=1, exact_mse=exact, mc_mse=r.mse, mc_se=r.se,
                ci_low=r.ci_low, ci_high=r.ci_high, n_reps=config["n_reps"],
                z=(r.mse - exact) / r.se)


@float64
def _oracle_mse(G: int) -> float:
    return float(gt.exact_mse(default_bandit(), "oracle", int(G)))


def rival_z(df: pd.DataFrame) -> tuple[float, int]:
    """The check's rival in standard errors: every estimator with the oracle's exact MSE at the
    same G (the baseline not mattering), the smallest ``abs(mc_mse - rival) / mc_se`` over the
    cells whose exact MSE differs from the oracle's by more than :data:`RIVAL_GAP`.

    Args:
        df: the table (``G``, ``exact_mse``, ``mc_mse``, ``mc_se``).
    Returns:
        ``(distance, number of cells it is taken over)``; NaN when there is none.
    """
    rival = df.G.map({G: _oracle_mse(G) for G in set(df.G)})
    moved = (df.exact_mse / rival - 1).abs() > RIVAL_GAP
    if not moved.any():
        return float("nan"), 0
    z = ((df.mc_mse - rival) / df.mc_se).abs()[moved]
    return float(z.min()), int(moved.sum())


def report(tables, s: Settings) -> Section:
    df = tables["table"]
    tbl = df.pivot(index="G", columns="estimator", values="exact_mse")
    mc = df.pivot(index="G", columns="estimator", values="mc_mse")
    ests = [e for e in s.estimators if e in tbl.columns]
    zmax = float(df.z.abs().max())
    both = pd.DataFrame({"G": tbl.index, **{
        f"{e} exact / MC": [f"{tbl.loc[G, e]:.5f} / {mc.loc[G, e]:.5f}" for G in tbl.index]
        for e in ests}})
    lines = [f"Default bandit (4 prompts x 6 responses), B = 1, {s.n_reps} Monte Carlo "
             "replicates per cell.", "", markdown_table(both), "", "![](mse_exact_vs_mc.png)"]
    rz, n_rival = rival_z(df)
    checks = [check(f"every |MC - exact| / se <= {Z_TOL}", zmax <= Z_TOL, df.z.to_numpy(), rz,
                    kind="statistical",
                    excludes="every estimator having the oracle's exact MSE at the same G",
                    rival_se=rz, z_tol=Z_TOL,
                    detail=f"largest {zmax:.2f} over {len(df)} cells; the rival lies {rz:.1f} se "
                           f"away or more ({n_rival} cells whose exact MSE differs from the "
                           f"oracle's by more than {RIVAL_GAP:.0%})")]
    return Section("Exact vs Monte Carlo MSE (core engine)", "\n".join(lines), checks)


def plot(tables, s: Settings, out_dir) -> None:
    df = tables["table"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for est, d in df.groupby("estimator"):
        d = d.sort_values("G")
        line, = ax.plot(d.G, d.exact_mse, label=f"{est} (exact)")
        ax.errorbar(d.G, d.mc_mse, yerr=[d.mc_mse - d.ci_low, d.ci_high - d.mc_mse], fmt="o",
                    color=line.get_color(), ms=3, capsize=2)
    ax.set(xscale="log", yscale="log", xlabel="group size G", ylabel="MSE  E||ĝ − ∇J||²",
           title="Exact (lines) vs Monte Carlo (points, 95% CI), B = 1")
    integer_ticks(ax.xaxis, df.G)
    ax.legend(fontsize=8)
    save_figure(fig, out_dir / "mse_exact_vs_mc")


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=10)
