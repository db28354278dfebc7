"""The checks, report section and figures of ``rollout-allocation``."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from grpo_theory.experiments import (Check, Section, bootstrap_ci, bootstrap_ratio_ci, check,
                                     markdown_table)
from grpo_theory.plotting import plt, save_figure

from .cells import UNBIASED

__all__ = ["summaries", "checks", "report", "plot", "Z_MAX"]

#: |z| above which a Monte Carlo mean disagrees with the exact one (about 16 comparisons)
Z_MAX = 4.0
#: a rule biased by more than this share of ||grad J|| must have grad J rejected by Monte Carlo
BIASED = 0.05


def summaries(tables, n_boot: int = 1000, unbiased=UNBIASED) -> dict:
    """The tables the checks and the report read.

    Args:
        tables: the experiment's tables.
        n_boot: bootstrap resamples of the training CIs.
        unbiased: the rule families expected unbiased (the check compares the audit to it).
    Returns:
        ``{"optimal", "audit", "mc", "plugin", "train", "min_rival_z", "mc_mean"}``.
    """
    au = tables["audit"].copy()
    au["expected_unbiased"] = au.family.isin(unbiased)
    # at theta* grad J is zero up to rounding (about 1e-9): a bias relative to it, and its
    # direction, are then rounding noise, not numbers (the cells blank them only below 1e-9)
    gn = au.bias_norm / au.relative_bias
    flat = (gn < 1e-6 * np.sqrt(au.mse)).fillna(False)
    au.loc[flat, ["relative_bias", "cosine"]] = np.nan
    tr = tables["train"]
    rows = []
    base = {fr: d[d.rule == "fixed"].gap.dropna().values for fr, d in tr.groupby("fraction")}
    for (rule, fr), d in tr.groupby(["rule", "fraction"]):
        g = d.gap.dropna().values
        lo, hi = bootstrap_ci(g, n_boot=n_boot, seed=1) if g.size else (np.nan, np.nan)
        rlo, rhi = (bootstrap_ratio_ci(g, base[fr], n_boot=n_boot, seed=2)
                    if g.size and base.get(fr, np.array([])).size else (np.nan, np.nan))
        rows.append(dict(rule=rule, fraction=fr, budget=float(d.budget.iloc[0]),
                         n_runs=int(g.size), n_seeds=int(d.run_seed.nunique()),
                         gap=float(np.mean(g)) if g.size else np.nan, ci_low=lo, ci_high=hi,
                         ratio=(float(np.mean(g) / np.mean(base[fr])) if g.size else np.nan),
                         ratio_low=rlo, ratio_high=rhi,
                         rollouts_per_prompt=float(d.rollouts_per_prompt.mean())))
    return dict(optimal=tables["optimal"], audit=au, mc=tables["mc"], plugin=tables["plugin"],
                train=pd.DataFrame(rows), min_rival_z=_min_rival_z(tables["mc"]),
                mc_mean=tables["mc_mean"])


def _se_distance(rival, value, se):
    """``|rival - value| / se``, infinite where ``se = 0`` and the two differ, 0 where equal."""
    d = np.abs(np.asarray(rival, float) - np.asarray(value, float))
    se = np.asarray(se, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(se > 0, d / np.where(se > 0, se, 1.0), np.where(d > 0, np.inf, 0.0))


def _min_rival_z(mc: pd.DataFrame) -> float:
    """The Monte Carlo check's rival, every rule with the fixed-G* rule's exact MSE and expected
    rollouts: its distance from each other rule's Monte Carlo (the larger of the two, in se),
    the smallest over the rules whose exact MSE or rollouts differ from the fixed rule's
    (relative 1e-9; a rule of the same sizes is the rival itself); NaN without a fixed rule or
    such a rule."""
    fixed = mc[mc.rule.str.startswith("fixed")]
    if len(fixed) != 1:
        return float("nan")
    f = fixed.iloc[0]
    rest = mc[(np.abs(mc.exact_mse / f.exact_mse - 1) > 1e-9)
              | (np.abs(mc.exact_rollouts / f.exact_rollouts - 1) > 1e-9)]
    if not len(rest):
        return float("nan")
    z = np.maximum(_se_distance(f.exact_mse, rest.mc_mse, rest.mc_se),
                   _se_distance(f.exact_rollouts, rest.mc_rollouts, rest.rollouts_se))
    return float(np.min(z))


def checks(s: dict) -> list[Check]:
    """Each check names the alternative it excludes."""
    o, au, mc, tr = s["optimal"], s["audit"], s["mc"], s["train"]
    unb = au[au.expected_unbiased]
    bia = au[~au.expected_unbiased]
    unb_rule = unb[unb.family != "optimal"]
    opt_rows = au[au.family == "optimal"]
    mm = s["mc_mean"]
    mb = mm[mm.relative_bias > BIASED]
    rz = float(mb.z_rival.min()) if len(mb) else float("nan")
    return [
        check("greedy marginal allocation = brute force over all allocations (1e-12)",
              len(o) > 0 and (o.brute_err < 1e-12).all(),
              o.brute_err,
              kind="exact", excludes="a greedy that is not the optimum",
              detail=f"largest relative gap {o.brute_err.max():.1e}"),
        check("alike prompts: the optimal allocation is uniform at the scaling law's G*",
              len(o) > 0 and (o.alike_ok == 1).all(), o.alike_ok,
              kind="exact", excludes="an optimum that differs from 1 + sqrt(c3/c1)"),
        check("optimal allocation at or below uniform G* at matched rollouts on every member, "
              "strictly below on some",
              len(o) > 0 and (o.matched_ratio <= 1 + 1e-12).all()
              and (o.matched_ratio < 1 - 1e-6).any(), o.matched_ratio,
              kind="sanity", excludes="an 'optimal' allocation that is only uniform",
              detail=", ".join(f"{r.member}: {r.matched_ratio:.4f}" for r in o.itertuples())),
        check("its exact MSE (greedy constants) = the auditor's exact MSE of the same sizes "
              "(1e-9)",
              len(opt_rows) > 0 and (np.abs(opt_rows.opt_check / opt_rows.mse - 1) < 1e-9).all(),
              opt_rows.opt_check, opt_rows.mse,
              kind="exact", excludes="constants that disagree with the dynamic programme"),
        check("rules with sizes fixed before sampling have zero bias (relative 1e-9 of the "
              "gradient-free scale sqrt(mse))",
              len(unb) > 0 and (unb.bias_norm <= 1e-9 * np.sqrt(unb.mse) + 1e-12).all(),
              unb.bias_norm, kind="exact", excludes="a biased rule listed as unbiased"),
        check("every data-dependent rule is biased (bias above 1e-9 sqrt(mse)) on some member",
              len(bia) > 0 and bia.groupby("family").apply(
                  lambda d: (d.bias_norm > 1e-9 * np.sqrt(d.mse)).any()).all(), bia.bias_norm,
                  kind="sanity", excludes="an unbiased rule listed as biased"),
        check("optimal allocation's MSE <= every unbiased rule's at matched rollouts "
              "(1e-9)",
              len(unb_rule) > 0 and (unb_rule.opt_mse <= unb_rule.mse * (1 + 1e-9)).all(),
              unb_rule.opt_mse, unb_rule.mse,
              kind="sanity", excludes="an unbiased allocation that beats it"),
        check(f"exact MSE and expected rollouts = Monte Carlo (|z| < {Z_MAX})",
              len(mc) > 0 and (mc.z_mse.abs() < Z_MAX).all() and (mc.z_rollouts.abs()
                                                                   < Z_MAX).all(),
              mc.z_mse, mc.z_rollouts, s["min_rival_z"],
              kind="statistical",
              excludes="every rule with the fixed-G* rule's exact MSE and expected rollouts "
              "(the allocation rule making no difference)",
              rival_se=s["min_rival_z"], z_tol=Z_MAX,
              detail=f"largest |z| {max(mc.z_mse.abs().max(), mc.z_rollouts.abs().max()):.2f}; "
              f"the rival lies {s['min_rival_z']:.1f} se away or more"),
        check(f"Monte Carlo mean gradient = the audit's exact E[ghat] (|z| < {Z_MAX} in every "
              f"coordinate) for every rule on the member of large bias; grad J beyond {Z_MAX} "
              f"se for every rule biased by more than {BIASED:.0%}",
              len(mm) > 0 and (mm.z_mean < Z_MAX).all() and len(mb) > 0
              and (mb.z_rival > Z_MAX).all(), mm.z_mean, mb.z_rival,
              kind="statistical",
              excludes="an audit without its bias term (E[ghat] = grad J, the rules only "
              "reweighting noise)", rival_se=rz, z_tol=Z_MAX,
              detail=(f"{mm.member.iloc[0]}, {int(mm.n_batches.iloc[0])} batches per rule: "
                      f"largest |z| {mm.z_mean.max():.2f}; grad J lies {rz:.1f} se away or more "
                      f"({len(mb)} rules biased by more than {BIASED:.0%})") if len(mm) else ""),
        check("every training rule x budget has a bootstrap CI over >= 16 seeds",
              len(tr) > 0 and (tr.n_runs >= 16).all(), tr.ci_low, tr.ci_high, kind="sanity"),
    ]


def report(tables, s) -> Section:
    sm = summaries(tables, n_boot=s.n_boot)
    o, au, pl, tr = sm["optimal"], sm["audit"], sm["plugin"], sm["train"]
    B1 = au[au.B == au.B.min()]
    lines = [
        "Members: the scaling-law bandit family (`scaling_family_bandit(delta)`, 4 prompts x 2 "
        "responses) at θ0 = 0 and at θ*, and a two-prompt difficulty mix (3 responses, pass "
        "rates 0.1 and 0.9). Rules at each member's uniform G*; the optimal allocation "
        "(`grpo_theory.allocation.optimal`) at the same expected rollouts m.", "",
        "**The optimal unbiased allocation** (N·MSE ratio to uniform G*: free budget / "
        "matched at m = G*):", "",
        markdown_table(o[["member", "c1", "c2", "c3", "G_star", "free_m", "sizes",
                          "free_ratio", "matched_ratio"]], {"c1": ".4g"}), "",
        f"**Every rule, exact** (B = {int(B1.B.iloc[0])}; ratio = rule MSE / optimal MSE at "
        "the rule's expected rollouts; weight dev = max_x |w_x/f_x − 1|; bias share = "
        "‖bias‖²/MSE):", "",
        markdown_table(B1[["member", "family", "rollouts", "bias_norm", "relative_bias",
                           "cosine", "weight_dev", "bias_share", "mse", "opt_mse", "ratio"]],
                       {"rollouts": ".2f", "bias_norm": ".3g", "relative_bias": ".3f",
                        "cosine": ".4f", "weight_dev": ".3f", "bias_share": ".3f",
                        "mse": ".4g", "opt_mse": ".4g", "ratio": ".3f"}), "",
        f"At B = {int(au.B.max())} (bias does not shrink with B):", "",
        markdown_table(au[au.B == au.B.max()][["member", "family", "rollouts", "bias_share",
                                               "ratio"]],
                       {"rollouts": ".2f", "bias_share": ".3f", "ratio": ".3f"}), "",
        "**Monte Carlo mean gradient against the exact audit** on the member of large bias "
        "(largest |z| over coordinates: against the audit's E[ĝ], and against ∇J, the audit "
        "with its bias term dropped):", "",
        markdown_table(sm["mc_mean"][["member", "rule", "relative_bias", "n_batches", "z_mean",
                                      "z_rival"]],
                       {"relative_bias": ".3f", "z_mean": ".2f", "z_rival": ".1f"}), "",
        "**Plug-in** (sizes chosen from an independent previous sample; exact MSE given the "
        "sizes, averaged over draws; ratio to the oracle optimum, ± 1.96 se; uniform's ratio "
        "for reference):", "",
        markdown_table(pl.assign(ci=1.96 * pl.ratio_se)[["member", "n_previous", "model", "m",
                                                         "ratio", "ci", "uniform_ratio"]],
                       {"ratio": ".4f", "ci": ".1e", "uniform_ratio": ".4f"}), "",
        "**Training at equal rollouts** (family δ = 0.1 from θ0; gap J* − J at a common rollout "
        "budget, bootstrap 95% CI over seeds; ratio to fixed G* with a bootstrap CI):", "",
        markdown_table(tr.assign(
            gap_ci=[f"{r.gap:.3g} [{r.ci_low:.3g}, {r.ci_high:.3g}]" for r in tr.itertuples()],
            ratio_ci=[f"{r.ratio:.3f} [{r.ratio_low:.3f}, {r.ratio_high:.3f}]"
                      for r in tr.itertuples()])[["rule", "budget", "n_runs", "gap_ci",
                                                  "ratio_ci", "rollouts_per_prompt"]],
            {"budget": ".0f", "rollouts_per_prompt": ".2f"}),
        "", "![](bias_mse_vs_rollouts.png)", "", "![](training_gap_vs_rollouts.png)"]
    return Section("Rollout allocation: bias, MSE and rollouts of the field's rules, and the "
                   "MSE-optimal unbiased allocation", "\n".join(lines), checks(sm))


def plot(tables, s, out_dir) -> None:
    au = tables["audit"]
    d = au[au.B == au.B.min()]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    markers = dict(zip(sorted(d.member.unique()), itertools.cycle("osD^v<>")))
    colours = dict(zip(sorted(d.family.unique()), plt.cm.tab10.colors))
    for r in d.itertuples():
        kw = dict(marker=markers[r.member], color=colours[r.family], ls="none")
        axes[0].plot(r.rollouts, r.bias_share, **kw)
        axes[1].plot(r.rollouts, r.mse / r.opt_mse, **kw)
    for fam, c in colours.items():
        axes[0].plot([], [], "s", color=c, label=fam)
    for mem, mk in markers.items():
        axes[1].plot([], [], mk, color="k", label=mem)
    axes[0].set(xscale="log", xlabel="expected rollouts per prompt",
                ylabel="‖bias‖² / MSE (B = 1)", title="bias share of the exact MSE")
    axes[1].axhline(1.0, color="k", lw=0.8, ls="--")
    axes[1].set(xscale="log", yscale="log", xlabel="expected rollouts per prompt",
                ylabel="MSE / optimal unbiased MSE at the same rollouts",
                title="exact MSE against the optimal allocation")
    axes[0].legend(fontsize=6)
    axes[1].legend(fontsize=6)
    save_figure(fig, out_dir / "bias_mse_vs_rollouts")
    tr = tables["train"]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for rule, e in tr.groupby("rule"):
        g = e.groupby("budget").gap
        m, se = g.mean(), g.std(ddof=1) / np.sqrt(g.count())
        ax.errorbar(m.index, m.values, yerr=1.96 * se.values, fmt="o-", ms=3, capsize=2,
                    label=rule)
    ax.set(yscale="log", xlabel="rollouts spent", ylabel="gap J* − J (mean, 95% CI)",
           title="training at equal rollouts")
    ax.legend(fontsize=7)
    save_figure(fig, out_dir / "training_gap_vs_rollouts")
