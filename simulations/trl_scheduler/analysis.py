"""The A/B study's tables, figure and report: per-arm means and paired differences over seeds
with Student-t intervals (95%)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from scipy import stats

from grpo_theory.experiments import minimum_detectable_effect

#: paired comparisons (a, b): a - b per seed
PAIRS = (("scheduled-8", "fixed-8"), ("scheduled-3", "fixed-3"), ("fixed-3", "fixed-8"),
         ("scheduled-3", "fixed-8"))
METRICS = ("mean_reward", "last_quarter_reward", "final_G", "changes")


def per_seed(runs: pd.DataFrame, extra) -> pd.DataFrame:
    """One row per (arm, seed): the mean reward over the run and over its last quarter of steps,
    and the metrics ``extra(d)`` returns (a dict) from the cell's steps ``d``."""
    rows = []
    for (arm, seed), d in runs.groupby(["arm", "seed"]):
        d = d.sort_values("step")
        q = max(1, len(d) // 4)
        rows.append(dict(arm=arm, seed=seed, mean_reward=d["reward"].mean(),
                         last_quarter_reward=d["reward"].iloc[-q:].mean(), **extra(d)))
    return pd.DataFrame(rows)


def _per_seed(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (arm, seed): the metrics of :data:`METRICS`."""
    return per_seed(runs, lambda d: dict(final_G=float(d["G"].iloc[-1]),
                                         changes=float(d["changes"].iloc[0])))


def _t_interval(x: np.ndarray, level: float = 0.95):
    x = np.asarray(x, float)
    n, m = len(x), float(np.mean(x))
    if n < 2:
        return m, np.nan, np.nan
    h = stats.t.ppf(0.5 + level / 2, n - 1) * np.std(x, ddof=1) / np.sqrt(n)
    return m, m - h, m + h


def summarise_seeds(ps: pd.DataFrame, metrics, pairs, paired_metrics, version) -> pd.DataFrame:
    """Tidy summary of per-(arm, seed) metrics ``ps``: ``kind`` (arm or difference), ``name``,
    ``metric``, ``mean``, ``ci_low``, ``ci_high``, ``seeds``; differences ``a - b`` of ``pairs``
    paired by seed (the same initial model and prompts), for ``paired_metrics``, with ``mde``:
    the smallest true difference the paired t test (5%, two-sided) detects with 80% power at
    these seeds (NaN for the arms' rows)."""
    rows = []
    for arm, d in ps.groupby("arm"):
        for m in metrics:
            mean, lo, hi = _t_interval(d[m])
            rows.append(dict(kind="arm", name=arm, metric=m, mean=mean, ci_low=lo, ci_high=hi,
                             seeds=len(d), mde=np.nan))
    wide = ps.set_index(["seed", "arm"]).unstack("arm")
    for a, b in pairs:
        if a not in ps["arm"].values or b not in ps["arm"].values:
            continue
        for m in paired_metrics:
            diff = (wide[m][a] - wide[m][b]).dropna()
            mean, lo, hi = _t_interval(diff)
            n = len(diff)
            se = float(np.std(diff, ddof=1) / np.sqrt(n)) if n >= 2 else np.nan
            rows.append(dict(kind="difference", name=f"{a} - {b}", metric=m, mean=mean,
                             ci_low=lo, ci_high=hi, seeds=n,
                             mde=minimum_detectable_effect(se, df=n - 1)))
    out = pd.DataFrame(rows)
    out["version"] = version
    return out


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """The scheduler study's summary (:func:`summarise_seeds` of :data:`METRICS` and
    :data:`PAIRS`)."""
    return summarise_seeds(_per_seed(runs), METRICS, PAIRS, ("mean_reward", "last_quarter_reward"),
                           runs["version"].iloc[0])


def figure(runs: pd.DataFrame, path, right: str = "G",
           right_label: str = "group size G (mean over seeds)", right_scale: str = "log",
           left_label: str = "mean reward of the step's rollouts") -> None:
    """Mean reward against completions generated, one line per arm (95% band), and the mean of
    the column ``right`` beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6))
    for arm, d in runs.groupby("arm"):
        g = d.groupby("completions")
        m, s, n = g["reward"].mean(), g["reward"].std(ddof=1), g["reward"].count()
        h = stats.t.ppf(0.975, np.maximum(n - 1, 1)) * s / np.sqrt(n)
        ax.plot(m.index, m.values, label=arm)
        ax.fill_between(m.index, (m - h).values, (m + h).values, alpha=0.15)
        bx.plot(m.index, g[right].mean().values, label=arm)
    ax.set(xlabel="completions generated", ylabel=left_label)
    bx.set(xlabel="completions generated", ylabel=right_label, yscale=right_scale)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _verdict(r) -> str:
    if not np.isfinite(r.ci_low):
        return "one seed: no interval"
    if r.ci_low > 0:
        return "higher (the interval excludes 0)"
    if r.ci_high < 0:
        return "lower (the interval excludes 0)"
    return "not distinguishable (the interval contains 0)"


def tables(summary: pd.DataFrame) -> list[str]:
    """The report's per-arm table and its table of paired differences with verdicts."""
    lines = ["| arm | metric | mean | 95% CI |", "|---|---|---|---|"]
    for r in summary[summary.kind == "arm"].itertuples():
        lines.append(f"| {r.name} | {r.metric} | {r.mean:.4g} | [{r.ci_low:.4g}, "
                     f"{r.ci_high:.4g}] |")
    lines += ["", "Paired differences (per seed, then t over seeds); detectable: the smallest "
              "true difference the paired t test (5%, two-sided) finds with 80% power at these "
              "seeds:", "",
              "| difference | metric | mean | 95% CI | detectable | verdict |",
              "|---|---|---|---|---|---|"]
    for r in summary[summary.kind == "difference"].itertuples():
        lines.append(f"| {r.name} | {r.metric} | {r.mean:+.4f} | [{r.ci_low:+.4f}, "
                     f"{r.ci_high:+.4f}] | ±{r.mde:.4f} | {_verdict(r)} |")
    return lines


def page(title: str, setting: str, runs: pd.DataFrame, summary: pd.DataFrame, alt: str) -> str:
    """A study's REPORT.md: ``title``, the ``setting`` sentence followed by the version and the
    runs' wall time, the :func:`tables` and the figure ``reward.png`` (alt text ``alt``)."""
    wall = runs.groupby(["arm", "seed"])["wall_s"].first().sum()
    lines = [f"# {title}", "", f"{setting} grpo-theory {runs['version'].iloc[0]}; wall time "
             f"{wall:.0f} s for all runs.", ""]
    lines += tables(summary)
    lines += ["", f"![{alt}](reward.png)", ""]
    return "\n".join(lines)


def report(runs: pd.DataFrame, summary: pd.DataFrame, cfg) -> str:
    """REPORT.md: the setting, the per-arm table, the paired differences with verdicts."""
    c = json.loads(runs["config"].iloc[0])
    setting = (f"Real `trl.GRPOTrainer` runs of a tiny random Llama on CPU; {c['budget']} "
               f"completions per step in every arm, {c['steps']} steps, {c['seeds']} seeds "
               f"(paired: the same initial model and prompts per seed); advisor every "
               f"{c['every']} steps.")
    return page("Does acting pay? TRL's fixed G against GroupSizeScheduler", setting, runs,
                summary, "reward and G against completions")
