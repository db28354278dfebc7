"""Exact vs Monte Carlo MSE of the four main estimators over G (issue: core engine).

For the default bandit (``grpo_theory.problems.default_bandit``) and G in {2, 4, ..., 64}, computes
the exact MSE (closed form) of vanilla / grpo / grpo_mean / oracle with B = 1 and a Monte Carlo
estimate with its 95% CI. PASS when every exact value lies within 4 standard errors of the
Monte Carlo estimate (a 4-sigma band: with 24 cells a 95% band would fail by chance too often).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

import grpo_theory as gt
from grpo_theory.experiments.plotting import plt, save_figure
from grpo_theory.experiments.results import CellStore, Progress
from grpo_theory.problems import default_bandit

NAME = "mse-table"
CLAIM = "exact finite-G MSE of vanilla/grpo/grpo_mean/oracle equals Monte Carlo (core engine)"
ORDER = 10
ESTIMATORS = ("vanilla", "grpo", "grpo_mean", "oracle")
GROUP_SIZES = (2, 4, 8, 16, 32, 64)
Z_TOL = 4.0


def run(out_dir: Path, quick: bool = True, seed: int = 0, estimators=ESTIMATORS,
        group_sizes=GROUP_SIZES) -> None:
    n_reps = 20_000 if quick else 400_000
    setting = "quick" if quick else "full"
    store = CellStore(out_dir, NAME, seed=seed, setting=setting)
    bandit = default_bandit()
    cells = [(e, G) for e in estimators for G in group_sizes]
    prog = Progress(NAME, len(cells))
    for est, G in cells:
        cid = f"{est}_G{G}"
        if store.done(cid):
            prog.step(cid, skipped=True)
            continue
        exact = gt.exact_mse(bandit, est, G)
        r = gt.mc_mse(bandit, est, G, n_reps=n_reps, seed=seed + G)
        store.write(cid, dict(estimator=est, G=G, B=1, exact_mse=exact, mc_mse=r.mse, mc_se=r.se,
                              ci_low=r.ci_low, ci_high=r.ci_high, n_reps=n_reps,
                              z=(r.mse - exact) / r.se),
                    config=dict(bandit="default_bandit(seed=2024)", n_reps=n_reps))
        prog.step(cid)
    df = store.save_table("table.csv")
    _print_table(df)


def _load(out_dir: Path) -> pd.DataFrame:
    return pd.read_csv(Path(out_dir) / "table.csv")


def _print_table(df: pd.DataFrame) -> None:
    wide = df.pivot(index="G", columns="estimator", values=["exact_mse", "mc_mse"])
    with pd.option_context("display.float_format", "{:.5f}".format, "display.width", 160):
        print(wide)


def plot(out_dir: Path) -> None:
    df = _load(out_dir)
    fig, ax = plt.subplots(figsize=(6, 4))
    for est, d in df.groupby("estimator"):
        d = d.sort_values("G")
        line, = ax.plot(d.G, d.exact_mse, label=f"{est} (exact)")
        ax.errorbar(d.G, d.mc_mse, yerr=[d.mc_mse - d.ci_low, d.ci_high - d.mc_mse], fmt="o",
                    color=line.get_color(), ms=3, capsize=2)
    ax.set(xscale="log", yscale="log", xlabel="group size G", ylabel="MSE  E||ĝ − ∇J||²",
           title="Exact (lines) vs Monte Carlo (points, 95% CI), B = 1")
    gs = sorted(df.G.unique())
    ax.set_xticks(gs, [str(g) for g in gs])
    ax.legend(fontsize=8)
    save_figure(fig, Path(out_dir) / "mse_exact_vs_mc")


def report(out_dir: Path) -> dict:
    df = _load(out_dir)
    passed = bool((df.z.abs() <= Z_TOL).all())
    tbl = df.pivot(index="G", columns="estimator", values="exact_mse")
    mc = df.pivot(index="G", columns="estimator", values="mc_mse")
    ests = [e for e in ESTIMATORS if e in tbl.columns]
    lines = ["Default bandit (4 prompts x 6 responses), B = 1, "
             f"{int(df.n_reps.iloc[0])} Monte Carlo replicates per cell.", "",
             "| G | " + " | ".join(f"{e} exact / MC" for e in ests) + " |",
             "|---|" + "---|" * len(ests)]
    for G in tbl.index:
        lines.append(f"| {G} | " + " | ".join(
            f"{tbl.loc[G, e]:.5f} / {mc.loc[G, e]:.5f}" for e in ests) + " |")
    lines += ["", f"Largest |MC - exact| / se: {df.z.abs().max():.2f} (PASS if <= {Z_TOL}).",
              "", "![](mse_exact_vs_mc.png)"]
    return dict(title="Exact vs Monte Carlo MSE (core engine)", markdown="\n".join(lines),
                passed=passed)


if __name__ == "__main__":  # pragma: no cover
    run(Path("results") / NAME)
