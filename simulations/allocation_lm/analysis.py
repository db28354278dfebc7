"""The tables, figure and report of the small-transformer allocation study: each rule's held-out
accuracy at common rollout budgets with percentile-bootstrap CIs over seeds, and its difference
to fixed G* (independent runs: the bootstrap resamples both rules' seeds)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from grpo_theory.experiments import bootstrap_ci, minimum_detectable_effect
from grpo_theory.lm.training.allocation import accuracy_at_budgets

#: bootstrap resamples of every interval
N_BOOT = 4000
#: each arm is compared with fixed G*, except the scheduled one: with the fixed arm it starts from
REFERENCE = {"scheduled-8": "fixed-8"}


def at_budgets(runs: pd.DataFrame, fractions) -> pd.DataFrame:
    """One row per (rule, seed, fraction): the run's accuracy at ``fraction * budget``
    responses (the last step not past it) and the responses it generated per prompt trained
    on (``B`` of each step)."""
    rows = []
    for (rule, seed), d in runs.groupby(["rule", "seed"]):
        d = d.sort_values("step")
        budget = float(d.budget.iloc[0])
        acc = accuracy_at_budgets(d.accuracy, d.rollouts, [f * budget for f in fractions])
        steps = int(d.step.iloc[-1])
        for f, a in zip(fractions, acc):
            rows.append(dict(rule=rule, seed=int(seed), fraction=float(f), budget=f * budget,
                             accuracy=float(a), steps=steps,
                             per_prompt=float(d.rollouts.iloc[-1]) / float(d.B.sum())))
    return pd.DataFrame(rows)


def _diff_mde(a, b) -> float:
    """The smallest true difference of means a two-sided 5% test detects with 80% power for
    independent samples of these sizes and spreads (Welch's standard error and degrees of
    freedom)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or b.size < 2:
        return float("nan")
    va, vb = np.var(a, ddof=1) / a.size, np.var(b, ddof=1) / b.size
    if va + vb == 0:
        return 0.0
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    return minimum_detectable_effect(np.sqrt(va + vb), df=df)


def _diff_ci(a, b, n_boot: int = N_BOOT, seed: int = 3):
    """Percentile bootstrap interval of ``mean(a) - mean(b)`` for independent samples."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    rng = np.random.default_rng(seed)
    d = (a[rng.integers(0, a.size, (n_boot, a.size))].mean(1)
         - b[rng.integers(0, b.size, (n_boot, b.size))].mean(1))
    return float(np.quantile(d, 0.025)), float(np.quantile(d, 0.975))


def summarise(runs: pd.DataFrame, fractions, n_boot: int = N_BOOT) -> pd.DataFrame:
    """Tidy summary: per (rule, fraction) the mean accuracy and its 95% CI, the difference to
    its ``reference`` arm (``fixed``, or :data:`REFERENCE`) and its CI, the difference the seeds
    could detect (``delta_mde``: 5% two-sided, 80% power), seeds, responses per prompt a
    step."""
    ab = at_budgets(runs, fractions)
    out = []
    for (rule, f), d in ab.groupby(["rule", "fraction"]):
        acc = d.accuracy.dropna().to_numpy()
        base = REFERENCE.get(rule, "fixed")
        ref = ab[(ab.rule == base) & (ab.fraction == f)].accuracy.dropna().to_numpy()
        lo, hi = bootstrap_ci(acc, n_boot=n_boot, seed=1)
        dlo, dhi = _diff_ci(acc, ref, n_boot) if acc.size and ref.size else (np.nan, np.nan)
        out.append(dict(rule=rule, reference=base, fraction=f, budget=float(d.budget.iloc[0]),
                        seeds=int(acc.size), accuracy=float(np.mean(acc)) if acc.size else np.nan,
                        ci_low=lo, ci_high=hi,
                        delta=float(np.mean(acc) - np.mean(ref)) if acc.size and ref.size
                        else np.nan, delta_low=dlo, delta_high=dhi,
                        delta_mde=_diff_mde(acc, ref) if rule != base else np.nan,
                        per_prompt=float(d.per_prompt.mean()),
                        version=runs.version.iloc[0]))
    return pd.DataFrame(out)


def figure(runs: pd.DataFrame, path) -> None:
    """Held-out accuracy against responses generated, one line per rule (mean over seeds on a
    common grid of budgets, 95% bootstrap band)."""
    from grpo_theory.plotting import plt

    budget = float(runs.budget.iloc[0])
    grid = np.linspace(0, budget, 41)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for rule, d in runs.groupby("rule"):
        curves = np.array([accuracy_at_budgets(e.sort_values("step").accuracy,
                                               e.sort_values("step").rollouts, grid)
                           for _, e in d.groupby("seed")])
        m = np.nanmean(curves, axis=0)
        ci = np.array([bootstrap_ci(c[np.isfinite(c)], n_boot=500, seed=0) for c in curves.T])
        ax.plot(grid, m, label=rule)
        ax.fill_between(grid, ci[:, 0], ci[:, 1], alpha=0.15)
    ax.set(xlabel="responses generated", ylabel="held-out accuracy (exact)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _verdict(r) -> str:
    if r.rule == r.reference:
        return "reference"
    if not np.isfinite(r.delta_low):
        return "no interval"
    if r.delta_low > 0:
        return f"higher than {r.reference} (the interval excludes 0)"
    if r.delta_high < 0:
        return f"lower than {r.reference} (the interval excludes 0)"
    return f"not distinguishable from {r.reference} (the interval contains 0)"


def _schedule_lines(runs: pd.DataFrame) -> list:
    """What the scheduled arm did: its final G and its changes per run."""
    d = runs[runs.rule == "scheduled-8"]
    if not len(d):
        return []
    last = d.sort_values("step").groupby("seed").tail(1)
    lo, hi = bootstrap_ci(last.G.to_numpy(), n_boot=N_BOOT, seed=4)
    return [f"The scheduled arm changed G {last.changes.mean():.2f} times a run on average "
            f"(final G {last.G.mean():.1f} [{lo:.1f}, {hi:.1f}] from "
            f"{int(d[d.step == 1].G.iloc[0])}; the G of each step is in runs.csv)."]


def report(runs: pd.DataFrame, summary: pd.DataFrame, pred: dict) -> str:
    """REPORT.md: the setting, G*, the table by budget with verdicts, the figure."""
    c = json.loads(runs.config.iloc[0])
    G = int(runs.G_star.iloc[0])
    wall = runs.groupby(["rule", "seed"]).wall_s.first().sum() if "wall_s" in runs else np.nan
    consts = (f" (c1 = {pred['c1']:.4g}, c2 = {pred['c2']:.4g}, c3 = {pred['c3']:.4g} measured "
              f"exactly at the start policy, {c['gstar_samples']} responses a question behind "
              "E||s||^2)" if "c1" in pred else " (given)")
    lines = ["# Rollout rules at equal rollouts on the small transformer", "",
             f"GRPO (leave-one-out, Adam, lr {c['lr']:g}) from the {c['warmup']} warm-up's "
             f"instruct policy, B = {c['batch']} prompts a step, {c['seeds']} seeds per rule, "
             f"every run until it has generated {int(runs.budget.iloc[0])} responses (the "
             f"fixed-G* rule's {c['steps']} steps); G* = {G}{consts}. Accuracy: the exact "
             f"expected reward on {c['n_eval']} held-out questions. grpo-theory "
             f"{runs.version.iloc[0]}; wall time {wall:.0f} s for all runs.", "",
             "Rules: `fixed` (G* a prompt); `dynamic_sampling` (DAPO: all-equal groups dropped "
             f"and refilled, at most {c['max_rounds']} rounds); `conformal_stopping` (C-GRPO, "
             f"qhat = 1, grid {tuple(c['grid'])}); `knapsack` (Knapsack RL's sizes from the "
             f"exact pass rates, G* a prompt on average, at most {c['knapsack_cap']} G*); "
             "`optimal` (the MSE-optimal unbiased allocation of the same responses, from the "
             "exact V and ||s*||^2 and the previous step's E||s||^2; its first plug-in's B "
             "responses counted); "
             "`fixed-8` (the same responses a step as `fixed`, in groups of TRL's default 8) "
             f"and `scheduled-8` (from G = 8, G re-estimated every {c['every']} steps by the "
             f"advisor from {c['sched_questions']} questions x {c['sched_samples']} responses, "
             "moved by the rule of TRL's GroupSizeScheduler; compared with `fixed-8`).", "",
             "Detectable: the smallest true difference to the reference a two-sided 5% test "
             "finds with 80% power at these seeds (Welch's standard error).", "",
             "| rule | budget (share) | responses / prompt / step | accuracy | 95% CI | "
             "- reference | 95% CI | detectable | verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in summary.sort_values(["fraction", "rule"]).itertuples():
        mde = f"±{r.delta_mde:.4f}" if np.isfinite(r.delta_mde) else ""
        lines.append(f"| {r.rule} | {r.budget:.0f} ({r.fraction:.0%}) | {r.per_prompt:.2f} | "
                     f"{r.accuracy:.4f} | [{r.ci_low:.4f}, {r.ci_high:.4f}] | {r.delta:+.4f} | "
                     f"[{r.delta_low:+.4f}, {r.delta_high:+.4f}] | {mde} | {_verdict(r)} |")
    last = summary[summary.fraction == summary.fraction.max()]
    up = [f"{r.rule} (vs {r.reference})" for r in last.itertuples()
          if r.rule != r.reference and r.delta_low > 0]
    down = [f"{r.rule} (vs {r.reference})" for r in last.itertuples()
            if r.rule != r.reference and r.delta_high < 0]
    lines += ["", f"At the whole budget: higher: {', '.join(up) or 'none'}; "
              f"lower: {', '.join(down) or 'none'}; the others are not distinguishable with "
              f"{c['seeds']} seeds."] + _schedule_lines(runs) + [
              "Dynamic sampling and conformal stopping are biased "
              "estimators of the gradient (their exact audits on the bandit families, "
              "`rollout-allocation`); Knapsack's and the optimal allocation's sizes are fixed "
              "before sampling, so their estimates are unbiased.", "", "![accuracy against responses](accuracy.png)", ""]
    return "\n".join(lines)
