r"""The SmolLM2 study's tables, figure and REPORT.md (the study itself: ``study``).

Tables from the rollouts: the zero-variance share predicted from phase 1's independent responses
against the share observed in phase 2 (:func:`zero_variance_table`), the advisor's MSE of vanilla,
GRPO and oracle against G (:func:`mse_table`) and the recommended G per budget
(:func:`budget_table`); :func:`figure` and :func:`report` read only the saved tables.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from grpo_theory import _validation as V
from grpo_theory.advisor import ScalingEstimate, t_quantile
from grpo_theory.experiments import markdown_table
from grpo_theory.experiments.lm_support import zero_share_unbiased
from grpo_theory.plotting import plt, save_figure

__all__ = ["WINDOW", "MSE_GROUP_SIZES", "BUDGETS", "zero_variance_table", "mse_table",
           "budget_table", "figure", "report"]

#: the pass-rate window the task must spread over
WINDOW = (0.2, 0.8)
#: G values of the MSE table (the MSE scales as 1/B: the table is at B = 1)
MSE_GROUP_SIZES = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
BUDGETS = (16, 64, 256, 1024, 4096)


def prompt_mean_ci(x, alpha=0.05):
    """Mean and t interval over prompts (the spread of per-prompt values)."""
    x = np.asarray(x, np.float64)
    m = x.shape[0]
    se = float(np.std(x, ddof=1) / np.sqrt(m)) if m > 1 else float("nan")
    q = t_quantile(alpha, m) if m > 1 else float("nan")
    mu = float(np.mean(x))
    return mu, se, mu - q * se, mu + q * se


def zero_variance_table(ref_rewards, rewards, group_sizes=None) -> pd.DataFrame:
    r"""Share of zero-variance (all-equal) groups of G: predicted vs observed.

    Predicted: ``mean_x [V(x)^G + (1 - V(x))^G]`` with each prompt's ``V^G`` estimated without
    bias from independent reference responses (``C(k,G)/C(n_ref,G)``, k correct of ``n_ref``),
    and the plug-in ``V-hat^G + (1 - V-hat)^G`` of those pass rates (biased upwards, shown for
    comparison). Observed: each prompt's ``n`` responses split into ``floor(n/G)`` disjoint
    sub-groups of G in sampling order; the share of them that are all-equal. Intervals: t over
    prompts (95%).

    Args:
        ref_rewards: (m, n_ref) binary rewards of the reference (pass-rate) responses.
        rewards: (m, n) binary rewards of the study's responses, the same m prompts.
        group_sizes: G values (default: every G in [2, n] that divides n).

    Returns:
        ``pandas.DataFrame`` one row per G: ``G, groups_per_prompt, predicted, predicted_low,
        predicted_high, predicted_plugin, observed, observed_low, observed_high, z`` (observed
        minus predicted over the standard error of the per-prompt differences).
    """
    zr = V.finite_array("ref_rewards", ref_rewards, ndim=2)
    z = V.finite_array("rewards", rewards, ndim=2)
    for name, a in (("ref_rewards", zr), ("rewards", z)):
        if not np.all((a == 0) | (a == 1)):
            raise ValueError(f"{name} must be binary (0/1)")
    if zr.shape[0] != z.shape[0]:
        raise ValueError(f"ref_rewards and rewards must have the same prompts (rows), got "
                         f"{zr.shape[0]} and {z.shape[0]}")
    m, n = z.shape
    n_ref = zr.shape[1]
    if group_sizes is None:
        group_sizes = [G for G in range(2, n + 1) if n % G == 0]
    k = zr.sum(axis=1)
    v = k / n_ref
    rows = []
    for G in group_sizes:
        G = V.integer("group_sizes", G, 1, min(n, n_ref))
        pred = zero_share_unbiased(k, n_ref, G)
        nb = n // G
        blocks = z[:, :nb * G].reshape(m, nb, G)
        obs = np.mean(np.all(blocks == blocks[:, :, :1], axis=2), axis=1)
        mp, _, pl, ph = prompt_mean_ci(pred)
        mo, _, ol, oh = prompt_mean_ci(obs)
        _, sd, _, _ = prompt_mean_ci(obs - pred)
        rows.append(dict(G=G, groups_per_prompt=nb, predicted=mp, predicted_low=pl,
                         predicted_high=ph, predicted_plugin=float(np.mean(v**G + (1 - v)**G)),
                         observed=mo, observed_low=ol, observed_high=oh,
                         z=(mo - mp) / sd if sd > 0 else float("nan")))
    return pd.DataFrame(rows)


def mse_table(est: ScalingEstimate, group_sizes=MSE_GROUP_SIZES) -> pd.DataFrame:
    """Predicted per-prompt MSE (B = 1; at B prompts divide by B) of vanilla, GRPO and oracle
    against G, with 95% jackknife intervals (:meth:`ScalingEstimate.mse_ci`)."""
    rows = []
    for est_name in ("vanilla", "grpo", "oracle"):
        for G in group_sizes:
            lo, hi = est.mse_ci(1, G, est_name)
            rows.append(dict(estimator=est_name, G=int(G), B=1, mse=est.mse(1, G, est_name),
                             mse_low=lo, mse_high=hi,
                             budget_mse=G * est.mse(1, G, est_name)))
    return pd.DataFrame(rows)


def budget_table(est: ScalingEstimate, budgets=BUDGETS) -> pd.DataFrame:
    """Recommended G per budget N = B G (:meth:`ScalingEstimate.recommended_group_size`; G and
    B missing when c1 is not resolved above 0) and the integer range the G* interval allows
    (floor(low) .. ceil(high), clipped to [2, N])."""
    lo, hi = est.g_star_ci
    rows = []
    for N in budgets:
        G = est.recommended_group_size(N)  # None: c1 not resolved above 0, no recommendation
        g_lo = 2 if not math.isfinite(lo) else min(max(2, math.floor(lo)), N)
        g_hi = N if not math.isfinite(hi) else min(max(2, math.ceil(hi)), N)
        rows.append(dict(N=int(N), G=pd.NA if G is None else int(G),
                         B=pd.NA if G is None else int(N // G), G_low=g_lo, G_high=g_hi))
    return pd.DataFrame(rows)


def figure(out) -> list:
    """The study's figure from the saved tables under ``out`` (``smollm2.png``/``.pdf``)."""
    out = Path(out)
    pr = pd.read_csv(out / "passrates.csv")
    summ = pd.read_csv(out / "passrates_summary.csv")
    mse = pd.read_csv(out / "mse.csv")
    zv = pd.read_csv(out / "zero_variance.csv")
    const = pd.read_csv(out / "constants.csv").set_index("parameter")
    task = str(summ.loc[summ.chosen.astype(bool), "task"].iloc[0])
    fig, ax = plt.subplots(1, 4, figsize=(18, 3.8))
    bins = np.linspace(0, 1, 18)
    for t in summ.task:
        v = pr.loc[pr.task == t, "pass_rate"]
        ax[0].hist(v, bins=bins, histtype="step", lw=2.5 if t == task else 1,
                   label=t + (" (chosen)" if t == task else ""))
    ax[0].axvspan(*WINDOW, color="0.9", zorder=0)
    ax[0].set(xlabel="pass rate per prompt (T = 1)", ylabel="prompts",
              title="task choice: pass rates")
    ax[0].legend(fontsize=7)
    for i, e in enumerate(("vanilla", "grpo", "oracle")):
        t = mse[mse.estimator == e]
        ax[1].plot(t.G, t.mse, "o-", color=f"C{i}", ms=3, label=e)
        ax[1].fill_between(t.G, np.maximum(t.mse_low, mse.mse.min() / 4), t.mse_high,
                           color=f"C{i}", alpha=0.15)  # a lower end <= 0 drawn at the floor
    ax[1].set(xscale="log", yscale="log", xlabel="G", ylabel="predicted MSE (B = 1)",
              title="Figure 4 analogue (estimates, 95% CI)")
    ax[1].legend()
    t = mse[mse.estimator == "grpo"]
    ax[2].plot(t.G, t.budget_mse, "o-", color="C1")
    g, lo, hi = (const.loc["g_star", c] for c in ("estimate", "ci_low", "ci_high"))
    if np.isfinite(g):
        ax[2].axvline(g, color="C3", label=f"G* = {g:.1f}")
    ax[2].axvspan(max(lo, 1) if np.isfinite(lo) else 1, hi if np.isfinite(hi) else t.G.max(),
                  color="C3", alpha=0.15, label="95% CI")
    ax[2].set(xscale="log", xlabel="G", ylabel="N x MSE_grpo(N/G, G)",
              title="GRPO at a fixed budget N = BG")
    ax[2].legend()
    ax[3].errorbar(zv.G - 0.08, zv.predicted, yerr=[zv.predicted - zv.predicted_low,
                                                    zv.predicted_high - zv.predicted],
                   fmt="o", label="predicted (phase 1 pass rates)")
    ax[3].errorbar(zv.G + 0.08, zv.observed, yerr=[zv.observed - zv.observed_low,
                                                   zv.observed_high - zv.observed],
                   fmt="s", label="observed (disjoint groups)")
    ax[3].set(xlabel="G", ylabel="share", title="zero-variance groups", ylim=(0, 1))
    ax[3].legend(fontsize=8)
    from matplotlib.ticker import FuncFormatter, NullFormatter

    for a in ax[1:3]:
        a.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        a.xaxis.set_minor_formatter(NullFormatter())
    fig.suptitle(f"SmolLM2-135M-Instruct, task {task}", y=1.02)
    fig.tight_layout()
    return save_figure(fig, out / "smollm2")


def _md(df: pd.DataFrame, cols, fmt=".4g") -> str:
    return markdown_table(df[cols], fmt) + "\n"


def report(out) -> Path:
    """REPORT.md under ``out`` from the saved tables and meta.json."""
    out = Path(out)
    meta = json.loads((out / "meta.json").read_text())
    summ = pd.read_csv(out / "passrates_summary.csv")
    const = pd.read_csv(out / "constants.csv")
    mse = pd.read_csv(out / "mse.csv")
    zv = pd.read_csv(out / "zero_variance.csv")
    bud = pd.read_csv(out / "budgets.csv")
    c = meta["config"]
    c1 = const.set_index("parameter").loc["c1"]
    piv = mse.pivot(index="G", columns="estimator", values="mse").reset_index()
    lines = [
        "# SmolLM2-135M-Instruct: the advisor on a real model", "",
        f"Command: `make smollm2-study` (model file `{c['model']}`, D = {meta['dim']:,} "
        f"parameters; package {meta['version']}; seed {c['seed']}). Total "
        f"{meta['seconds_total'] / 60:.1f} min, of which the advisor's rollouts and gradients "
        f"{meta['seconds_phase2'] / 60:.1f} min (nan: loaded from rollouts.npz).", "",
        f"## Task choice (phase 1: {c['n_prompts']} prompts x {c['n_ref']} responses of "
        f"{c['response_len']} tokens, T = 1, chat template)", "",
        _md(summ, ["task", "prompts", "n_in_window", "mean_pass_rate", "median_pass_rate", "share_in_window",
                   "share_zero", "share_one", "q10", "q90", "chosen"], ".3f"),
        f"Chosen: **{meta['task']}** (the most prompts with pass rate in "
        f"[{WINDOW[0]}, {WINDOW[1]}]).", "",
        *([] if "pass_rate" not in meta else [
            "Phase 2 redraws responses to the same prompts; its mean pass rate "
            f"{meta['pass_rate']['phase2']:.3f} against phase 1's "
            f"{meta['pass_rate']['phase1']:.3f} on those prompts: difference "
            f"{meta['pass_rate']['diff']:+.3f}, 95% CI [{meta['pass_rate']['diff_low']:+.3f}, "
            f"{meta['pass_rate']['diff_high']:+.3f}] (t over prompts, z = "
            f"{meta['pass_rate']['z']:.2f}).", ""]),
        f"## Constants (phase 2: {c['n_study'] or c['n_prompts']} of those prompts x "
        f"{c['n_samples']} responses, scores in chunks of {c['chunk']})", "",
        _md(const, ["parameter", "estimate", "std_err", "ci_low", "ci_high"]),
        f"c1 {'is' if c1.ci_low > 0 else 'is NOT'} resolved above zero (95% CI "
        f"[{c1.ci_low:.4g}, {c1.ci_high:.4g}]).", "",
        *([meta["c1_warning"], ""] if meta.get("c1_warning") else []),
        "## Predicted MSE against G (B = 1; estimates from rollouts, not a Monte Carlo)", "",
        _md(piv, list(piv.columns)),
        "Intervals per row in `mse.csv` (`mse_low`, `mse_high`).", "",
        "## Zero-variance share: predicted (phase 1) vs observed (phase 2, disjoint groups)", "",
        _md(zv, ["G", "groups_per_prompt", "predicted", "predicted_low", "predicted_high",
                 "predicted_plugin", "observed", "observed_low", "observed_high", "z"], ".3f"),
        "## Recommended G per budget N = B G", "",
        _md(bud, ["N", "G", "B", "G_low", "G_high"]),
        "![figure](smollm2.png)", ""]
    p = out / "REPORT.md"
    p.write_text("\n".join(lines))
    return p
