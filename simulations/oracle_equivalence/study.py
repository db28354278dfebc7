r"""Claim 1 — oracle equivalence of GRPO's gradient (Theorem 2, Proposition 3, Corollary 4).

For three problems (tabular softmax bandit, prompt-sharing linear softmax bandit, enumerable
sequence policy; :mod:`grpo_theory.problems`) and G in a grid, B = 1, one cell per (problem, G)
computes:

* the exact MSE of vanilla / grpo / oracle (closed forms) and a Monte Carlo estimate with a 95% CI;
  all three estimators are evaluated on the *same* draws, so the gap GRPO - oracle is estimated
  from paired differences (its variance is then O(G^-3) instead of O(G^-1));
* the scaling constants c1, c2, c3 of the problem.

The report checks

* the exact identity ``(MSE_grpo - MSE_oracle) G (G - 1) = c3`` (from Theorem 2 and Proposition 3);
* the ratio ``MSE_grpo / MSE_oracle -> 1``;
* a log-log fit ``log gap = a + b log G`` (statsmodels WLS, weights from the Monte Carlo standard
  errors, taken as known variances) over the four largest G (8-64 quick, 32-256 full) with a
  95% CI for the slope b; the check is that the slope of the exact values over the same G lies
  within 4 standard errors of b (several fits are judged at once; the exact form
  c3 / (G (G - 1)) has the local log-log slope -2 - 1/(G - 1), not -2), and that the rival
  slope -1 (an estimator whose excess MSE over the oracle's falls only as 1/G) lies beyond 4
  standard errors, so the fit can tell the two apart.

PASS when every Monte Carlo MSE is within 4 standard errors of the exact value, the identity holds
to 1e-9 relative error, the exact ratio decreases to within 2% of 1 at the largest G, and every
problem's slope is within 4 standard errors of its exact slope and beyond 4 of -1.

    grpo-theory oracle-equivalence [--full] [--workers N]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

import grpo_theory as gt
from grpo_theory import problems
from grpo_theory.core import z_value
from grpo_theory.plotting import plt, save_figure
from grpo_theory.experiments import (Cell, Experiment, Section, check, key_seed, markdown_table,
                                     mean_ci, paired_squared_errors)
from grpo_theory._precision import float64

__all__ = ["NAME", "CLAIM", "ESTIMATORS", "Settings", "SETTINGS", "SCHEMA", "cells", "cell",
           "n_reps_for", "slope_fit", "summary", "report", "plot", "EXPERIMENT"]

NAME = "oracle-equivalence"
CLAIM = "GRPO's gradient MSE -> oracle's; gap = c3/(G(G-1)) ~ G^-2 (Thm 2, Prop 3, Cor 4)"
ESTIMATORS = ("vanilla", "grpo", "oracle")
PROBLEMS = {"softmax": problems.default_bandit, "linear": problems.linear_bandit,
            "sequence": problems.sequence_policy}
Z_TOL = 4.0
IDENTITY_TOL = 1e-9
RATIO_TOL = 1.02
N_FIT = 4  # the slope is fitted over the N_FIT largest group sizes


@dataclass(frozen=True)
class Settings:
    """The sweep: one cell per (problem, G).

    Attributes:
        group_sizes: the group sizes G.
        base_reps: Monte Carlo replicates at G <= 16; :func:`n_reps_for` takes more at larger G
            (at most 8x).
        problems: the problems (``softmax``, ``linear``, ``sequence``).
    """

    group_sizes: tuple
    base_reps: int
    problems: tuple = ("softmax", "linear", "sequence")


SETTINGS = {"quick": Settings(group_sizes=(2, 8, 16, 32, 64), base_reps=10_000),
            "full": Settings(group_sizes=(2, 4, 8, 16, 32, 64, 128, 256), base_reps=100_000)}

SCHEMA = {"table": dict(problem="str", G="int", quantity="str", exact="float", mc="float",
                        mc_se="float", ci_low="float", ci_high="float", B="int", n_reps="int",
                        c1="float", c2="float", c3="float", z="float")}


def n_reps_for(G: int, base: int) -> int:
    """More replicates at large G (the gap's relative standard error grows like sqrt(G)),
    at most 8x the base."""
    return int(base * min(8, max(1, G // 16)))


def cells(s: Settings) -> list[Cell]:
    return [Cell(f"{p}_G{G}", dict(problem=p, G=G, n_reps=n_reps_for(G, s.base_reps),
                                   estimators=ESTIMATORS))
            for p in s.problems for G in s.group_sizes]


@float64
def cell(config: dict, key) -> list[dict]:
    """Exact and paired Monte Carlo MSE of vanilla/grpo/oracle and the gap grpo - oracle."""
    prob, G, R, ests = config["problem"], config["G"], config["n_reps"], config["estimators"]
    bandit = PROBLEMS[prob]()
    c = gt.scaling_constants(bandit)
    err2 = paired_squared_errors(bandit, tuple(ests), group_size=G, n_reps=R,
                                 seed=key_seed(key))
    m, se, lo, hi = mean_ci(err2)
    exact = {e: gt.exact_mse(bandit, e, G) for e in ests}
    rows = [dict(quantity=e, exact=exact[e], mc=m[j], mc_se=se[j], ci_low=lo[j], ci_high=hi[j])
            for j, e in enumerate(ests)]
    d = err2[:, ests.index("grpo")] - err2[:, ests.index("oracle")]  # paired differences
    dm, dse, dlo, dhi = mean_ci(d)
    rows.append(dict(quantity="gap_grpo_oracle", exact=exact["grpo"] - exact["oracle"], mc=dm,
                     mc_se=dse, ci_low=dlo, ci_high=dhi))
    for r in rows:
        r.update(problem=prob, G=G, B=1, n_reps=R, c1=c.c1, c2=c.c2, c3=c.c3,
                 z=(r["mc"] - r["exact"]) / r["mc_se"])
    return rows


def slope_fit(G, gap, se):
    """WLS of log gap on log G (weights 1/se(log gap)^2, known variances).

    Args:
        G, gap, se: group sizes, Monte Carlo gaps and their standard errors (non-positive gaps
            are left out).
    Returns:
        (slope, se, lo95, hi95).
    """
    import statsmodels.api as sm

    G, gap, se = map(np.asarray, (G, gap, se))
    keep = gap > 0
    x = sm.add_constant(np.log(G[keep]))
    y = np.log(gap[keep])
    w = (gap[keep] / se[keep]) ** 2
    # the variances of log gap are known from the Monte Carlo (delta method), so the fit uses
    # them as they are (fixed scale) instead of a residual scale estimated from 2 dof
    res = sm.WLS(y, x, weights=w).fit(cov_type="fixed scale")
    lo, hi = res.conf_int(0.05)[1]
    return float(res.params[1]), float(res.bse[1]), float(lo), float(hi)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per problem: identity error, ratios, slope fits.

    Args:
        df: the experiment's table (rows of :func:`cell`).
    Returns:
        A DataFrame with one row per problem.
    """
    out = []
    for prob, d in df.groupby("problem", sort=False):
        gap = d[d.quantity == "gap_grpo_oracle"].sort_values("G")
        wide = d.pivot(index="G", columns="quantity", values="exact")
        ratio = (wide["grpo"] / wide["oracle"]).sort_index()
        c3 = float(gap.c3.iloc[0])
        ident = np.max(np.abs(gap.exact * gap.G * (gap.G - 1) - c3) / c3)
        fit = gap.iloc[-N_FIT:]
        slope, sse, lo, hi = slope_fit(fit.G, fit.mc, fit.mc_se)
        ex_slope = float(np.polyfit(np.log(fit.G), np.log(fit.exact), 1)[0])
        out.append(dict(
            problem=prob, c3=c3, identity_rel_err=float(ident),
            ratio_G2=float(ratio.iloc[0]), ratio_Gmax=float(ratio.iloc[-1]),
            ratio_decreasing=bool(np.all(np.diff(ratio.values) < 0)),
            vanilla_over_oracle_Gmax=float(wide["vanilla"].iloc[-1] / wide["oracle"].iloc[-1]),
            slope=slope, slope_se=sse, slope_lo=lo, slope_hi=hi, exact_slope=ex_slope,
            z_slope_minus2=(slope + 2) / sse, ci95_contains_minus2=bool(lo <= -2 <= hi),
            z_slope_exact=(slope - ex_slope) / sse, z_slope_rival=(slope + 1) / sse,
            fit_G=f"{int(fit.G.min())}-{int(fit.G.max())}", n_negative=int((fit.mc <= 0).sum()),
            max_abs_z=float(d.z.abs().max()),
            # the rival of the MC-vs-exact check: grpo's MSE equal to the oracle's (a zero
            # paired gap), its distance from the measured gap in se, the smallest over G
            min_rival_z=float((gap.mc / gap.mc_se).abs().min())))
    return pd.DataFrame(out)


def report(tables, s: Settings) -> Section:
    df = tables["table"]
    sm = summary(df)
    checks = [
        check(f"every abs(MC − exact)/se <= {Z_TOL:g}", (sm.max_abs_z <= Z_TOL).all(),
              sm.max_abs_z, sm.min_rival_z,
              kind="statistical",
              excludes="grpo's MSE equal to the oracle's (a zero paired gap grpo - oracle)",
              rival_se=sm.min_rival_z.min(), z_tol=Z_TOL,
              detail=f"largest {sm.max_abs_z.max():.2f}; the zero gap lies "
              f"{sm.min_rival_z.min():.1f} se away or more"),
        check(f"gap·G(G−1) = c3 to {IDENTITY_TOL:g} relative error",
              (sm.identity_rel_err <= IDENTITY_TOL).all(), sm.identity_rel_err,
              kind="exact", detail=f"largest {sm.identity_rel_err.max():.1e}"),
        check(f"exact grpo/oracle decreasing in G and <= {RATIO_TOL} at the largest G",
              (sm.ratio_decreasing & (sm.ratio_Gmax <= RATIO_TOL)).all(), sm.ratio_Gmax,
              kind="sanity",
              detail=", ".join(f"{r.problem} {r.ratio_Gmax:.4f}" for r in sm.itertuples())),
        check(f"slope of the MC gap within {Z_TOL:g} se of the exact slope",
              (sm.z_slope_exact.abs() <= Z_TOL).all(), sm.z_slope_exact, sm.z_slope_rival,
              kind="statistical",
              excludes="the rival gap slope -1 (gap proportional to 1/G)",
              rival_se=sm.z_slope_rival.abs().min(), z_tol=Z_TOL,
              detail=", ".join(f"{r.problem} {r.z_slope_exact:+.2f}" for r in sm.itertuples())),
        check(f"the rival slope −1 lies beyond {Z_TOL:g} se",
              (sm.z_slope_rival.abs() > Z_TOL).all(), sm.z_slope_rival,
              kind="statistical", excludes="the rival gap slope -1 (gap proportional to 1/G)",
              rival_se=sm.z_slope_rival.abs().min(), z_tol=Z_TOL,
              detail=", ".join(f"{r.problem} {r.z_slope_rival:+.1f}" for r in sm.itertuples())),
    ]
    n_reps = int(df.n_reps.min())
    lines = [f"B = 1; problems: {', '.join(sm.problem)}; G = "
             f"{', '.join(str(g) for g in sorted(df.G.unique()))}; >= {n_reps} paired Monte Carlo "
             "replicates per cell (vanilla, grpo and oracle on the same draws).", "",
             markdown_table(pd.DataFrame({
                 "problem": sm.problem, "c3": sm.c3,
                 "max rel. err of gap·G(G−1) = c3": sm.identity_rel_err,
                 "grpo/oracle at G=2 → G max": [f"{r.ratio_G2:.3f} → {r.ratio_Gmax:.4f}"
                                                for r in sm.itertuples()],
                 "vanilla/oracle at G max": sm.vanilla_over_oracle_Gmax,
                 "slope (MC, WLS) [95% CI]": [f"{r.slope:.3f} [{r.slope_lo:.3f}, "
                                              f"{r.slope_hi:.3f}]" for r in sm.itertuples()],
                 "(slope + 2)/se": sm.z_slope_minus2, "exact slope": sm.exact_slope,
                 "(slope − exact)/se": sm.z_slope_exact, "(slope + 1)/se": sm.z_slope_rival,
                 "fit G": sm.fit_G, "max abs(MC−exact)/se": sm.max_abs_z}),
                 {"c3": ".4f", "max rel. err of gap·G(G−1) = c3": ".1e",
                  "vanilla/oracle at G max": ".3f", "(slope + 2)/se": "+.2f",
                  "exact slope": ".3f", "(slope − exact)/se": "+.2f", "(slope + 1)/se": "+.1f",
                  "max abs(MC−exact)/se": ".2f"})]
    lines += ["", f"MC within {Z_TOL:g} se of exact; identity to {IDENTITY_TOL:g}; exact ratio "
              f"decreasing and <= {RATIO_TOL} at the largest G; slope within {Z_TOL:g} se of the "
              f"exact slope over the fitted G (a {Z_TOL:g}-sigma band because several fits are "
              f"judged at once) and the rival −1 beyond it. The exact slope differs slightly "
              "from −2 because the gap is c3/(G(G−1)), whose local log-log slope is "
              "−2 − 1/(G−1); −2 is the large-G limit. The 95% CI contains −2 for "
              f"{int(sm.ci95_contains_minus2.sum())} of {len(sm)} problems.",
              "", "![](mse_vs_G.png)", "", "![](gap_and_ratio.png)"]
    return Section("Claim 1: oracle equivalence (Theorem 2, Proposition 3, Corollary 4)",
                   "\n".join(lines), checks)


def plot(tables, s: Settings, out_dir) -> None:
    df = tables["table"]
    probs = list(dict.fromkeys(df.problem))
    fig, axes = plt.subplots(1, len(probs), figsize=(4.2 * len(probs), 3.6), squeeze=False)
    for ax, prob in zip(axes[0], probs):
        d = df[df.problem == prob]
        for est in ESTIMATORS:
            e = d[d.quantity == est].sort_values("G")
            line, = ax.plot(e.G, e.exact, label=f"{est} (exact)")
            ax.errorbar(e.G, e.mc, yerr=[e.mc - e.ci_low, e.ci_high - e.mc], fmt="o", ms=3,
                        capsize=2, color=line.get_color())
        ax.set(xscale="log", yscale="log", xlabel="group size G", ylabel="MSE  E||ĝ − ∇J||²",
               title=f"{prob}: exact (lines), MC ±95% CI")
        ax.legend(fontsize=7)
    save_figure(fig, out_dir / "mse_vs_G")

    summ = summary(df).set_index("problem")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for prob in probs:
        g = df[(df.problem == prob) & (df.quantity == "gap_grpo_oracle")].sort_values("G")
        line, = ax1.plot(g.G, g.exact, label=f"{prob}: exact c3/(G(G−1))")
        pos = g.mc > 0
        ax1.errorbar(g.G[pos], g.mc[pos], yerr=z_value() * g.mc_se[pos], fmt="o", ms=3,
                     capsize=2, color=line.get_color(),
                     label=f"{prob}: MC, slope {summ.loc[prob, 'slope']:.2f} "
                           f"[{summ.loc[prob, 'slope_lo']:.2f}, {summ.loc[prob, 'slope_hi']:.2f}]")
        w = df[df.problem == prob].pivot(index="G", columns="quantity", values="exact")
        ax2.plot(w.index, w["grpo"] / w["oracle"], "o-", ms=3, label=f"{prob}: grpo/oracle")
        ax2.plot(w.index, w["vanilla"] / w["oracle"], "s--", ms=3,
                 color=ax2.lines[-1].get_color(), label=f"{prob}: vanilla/oracle")
    ax1.set(xscale="log", yscale="log", xlabel="group size G", ylabel="MSE_grpo − MSE_oracle",
            title="Gap (paired MC ±95% CI) vs exact")
    ax1.legend(fontsize=6)
    ax2.axhline(1, color="k", lw=0.8)
    ax2.set(xscale="log", xlabel="group size G", ylabel="exact MSE ratio",
            title="Ratio to the oracle (exact)")
    ax2.legend(fontsize=6)
    save_figure(fig, out_dir / "gap_and_ratio")


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=20)
