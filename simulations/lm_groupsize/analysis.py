"""The report section and figure of ``lm-groupsize`` (its :mod:`.study`).

:func:`bootstrap_best_g` (the best G per checkpoint with its bootstrap interval), :func:`summary`
and :func:`prediction` reduce the tables; :func:`report` and :func:`plot` write the section (with
its checks) and the figure.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from grpo_theory.core import z_value
from grpo_theory.plotting import plt, save_figure
from grpo_theory.experiments import (Section, bootstrap_argmin, check,
                                     minimum_detectable_effect)

__all__ = ["N_BOOT", "GATE_T", "bootstrap_best_g", "summary", "prediction", "training_gate", "learning_gate",
           "report", "plot"]

N_BOOT = 2000
#: the training gate's bound: Welch t of the accuracy difference
GATE_T = 4.0


def bootstrap_best_g(acc: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """The best G's distribution when seeds are resampled within each G
    (:func:`grpo_theory.experiments.stats.bootstrap_argmin` of the negated accuracies: ties to
    the smallest G, percentile interval on the ordered G).

    Args:
        acc: accuracies, rows G, columns seeds.
        n_boot: bootstrap resamples.
        seed: the resampling's NumPy seed.

    Returns:
        ``best`` (argmax of the mean), ``lo``/``hi`` (the 95% percentile interval of the
        resampled argmax), ``p_best`` (share of the most frequent argmax) and ``support``.
    """
    b = bootstrap_argmin({int(g): -acc.loc[g].to_numpy(np.float64) for g in acc.index},
                         n_boot=n_boot, seed=seed)
    return dict(best=int(b.best), lo=int(b.lo), hi=int(b.hi), p_best=b.p_best,
                support={int(g): f for g, f in b.support.items()})


def summary(train: pd.DataFrame, sweep: str = "main") -> pd.DataFrame:
    """Best G per (hard fraction, N, checkpoint) of one sweep of the ``train`` table, with a
    bootstrap CI over seeds (step 0, the starting policy, is left out)."""
    tr = train[(train.step > 0) & (train.sweep == sweep)]
    out = []
    for (h, n, step), d in tr.groupby(["hard_fraction", "N", "step"]):
        acc = d.pivot_table(index="G", columns="run_seed", values="accuracy")
        acc = acc.dropna(axis=1)
        if acc.shape[1] == 0:
            continue
        bs = bootstrap_best_g(acc, seed=int(n) + int(step))
        out.append(dict(hard_fraction=float(h), N=int(n), step=int(step), seeds=int(acc.shape[1]),
                        **{k: v for k, v in bs.items() if k != "support"},
                        support=bs["support"],
                        mean_by_G={int(g): float(a) for g, a in acc.mean(axis=1).round(4).items()}))
    return pd.DataFrame(out)


def training_gate(train: pd.DataFrame, pred: pd.Series) -> dict:
    r"""Theorem 7's ordering in training: at the smallest budget N of the main sweep and its last
    checkpoint, the held-out accuracy of the grid G with the least predicted fixed-budget MSE,
    :math:`(c_1 G + c_2 + c_3/(G-1))/N`, against the grid G with the largest.

    Args:
        train: the ``train`` table (main sweep rows are used).
        pred: the starting policy's prediction row (``c1``, ``c2``, ``c3``).

    Returns:
        ``N``, ``step``, ``g_low``/``g_high`` (least / largest predicted MSE), their mean
        accuracies and seeds, the difference ``diff`` (low minus high) with its Welch standard
        error ``se``, degrees of freedom ``df``, ``t = diff / se`` and the minimum detectable
        difference ``mde`` (5% two-sided, 80% power).
    """
    tr = train[(train.sweep == "main") & (train.step > 0)]
    N = int(tr.N.min())
    d = tr[tr.N == N]
    step = int(d.step.max())
    d = d[d.step == step]
    gs = np.array(sorted(int(g) for g in d.G.unique()))
    mse = (pred.c1 * gs + pred.c2 + pred.c3 / np.maximum(gs - 1, 1e-300)) / N
    g_lo, g_hi = int(gs[np.argmin(mse)]), int(gs[np.argmax(mse)])
    a = d[d.G == g_lo].accuracy.to_numpy(np.float64)
    b = d[d.G == g_hi].accuracy.to_numpy(np.float64)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = float(np.sqrt(va + vb))
    df = float((va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1)))
    diff = float(a.mean() - b.mean())
    return dict(N=N, step=step, g_low=g_lo, g_high=g_hi, acc_low=float(a.mean()),
                acc_high=float(b.mean()), n_low=int(a.size), n_high=int(b.size), diff=diff,
                se=se, df=df, t=diff / se if se > 0 else float("nan"),
                mde=minimum_detectable_effect(se, df))


def learning_gate(train: pd.DataFrame) -> dict:
    """Every G of the main sweep learns: at the smallest budget's last checkpoint, the held-out
    accuracy's gain over the starting policy (one-sample t over seeds), for each G.

    Returns:
        ``N``, ``step``, ``start`` (the starting accuracy), and per G (dicts keyed by G) the mean
        gain, its standard error and t; ``t_min`` the smallest t.
    """
    tr = train[train.sweep == "main"]
    N = int(tr.N.min())
    d = tr[tr.N == N]
    start = float(d[d.step == 0].accuracy.mean())
    step = int(d.step.max())
    gain, se, t = {}, {}, {}
    for g, e in d[d.step == step].groupby("G"):
        x = e.accuracy.to_numpy(np.float64) - start
        gain[int(g)] = float(x.mean())
        se[int(g)] = float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else float("nan")
        t[int(g)] = gain[int(g)] / se[int(g)] if se[int(g)] > 0 else float("nan")
    return dict(N=N, step=step, start=start, gain=gain, se=se, t=t,
                t_min=min(t.values()) if t else float("nan"))


def _learning_check(lg: dict):
    """The statistical row of :func:`learning_gate` (rival: training leaves accuracy as it was)."""
    parts = ", ".join(f"G = {g}: {lg['gain'][g]:+.4f} +- {lg['se'][g]:.4f} (t = {lg['t'][g]:.1f})"
                      for g in sorted(lg["gain"]))
    return check(
        f"training learns at every G: held-out accuracy at N = {lg['N']}, step {lg['step']} "
        f"above the start ({lg['start']:.4f}) by more than {GATE_T:g} se at every G",
        lg["t_min"] > GATE_T, lg["t_min"], kind="statistical",
        excludes="training that leaves the held-out accuracy where it started (a zero or "
        "sign-flipped gradient)", rival_se=lg["t_min"], z_tol=GATE_T,
        detail=f"gains over the start {parts}; the rival lies {lg['t_min']:.1f} se away or more")


def prediction(pred: pd.DataFrame, sweep: str = "main", hard=None) -> pd.Series:
    """The G* prediction row of ``sweep`` (and of hard fraction ``hard`` when given)."""
    p = pred[pred.sweep == sweep]
    if hard is not None:
        p = p[np.isclose(p.hard_fraction, hard)]
    return p.iloc[0]


def _start_lines(pred, s) -> str:
    """The first paragraph: the starting policy and its constants (with intervals for a
    model, whose constants are the advisor's estimates)."""
    if s.model is None:
        return (f"Start: instruct policy, exact held-out accuracy {pred.J:.3f} (hard fraction "
                f"{pred.hard_fraction:g}). Measured there: c1 = {pred.c1:.4g}, c2 = "
                f"{pred.c2:.4g}, c3 = {pred.c3:.4g}; predicted G* = 1 + sqrt(c3/c1) = "
                f"{pred.G_continuous:.1f} (paper's form sqrt(c3/c1) = {pred.G_paper:.1f}; "
                f"integer argmin {int(pred.G_exact)}).")
    return (f"Start: the checkpoint `{s.model}`, exact held-out accuracy {pred.J:.3f} "
            f"(hard fraction {pred.hard_fraction:g}; text prompts in its tokenization, reward "
            "= exact-token match of the answer's canonical tokenization followed by EOS). "
            f"Advisor's estimates there ({int(pred.n_samples)} responses per question, 95% "
            f"intervals): c1 = {pred.c1:.4g} [{pred.c1_low:.4g}, {pred.c1_high:.4g}], c2 = "
            f"{pred.c2:.4g} [{pred.c2_low:.4g}, {pred.c2_high:.4g}], c3 = {pred.c3:.4g} "
            f"[{pred.c3_low:.4g}, {pred.c3_high:.4g}]; predicted G* = 1 + sqrt(c3/c1) = "
            f"{pred.G_continuous:.1f} [{pred.G_low:.1f}, {pred.G_high:.1f}] (integer argmin "
            f"{int(pred.G_exact)}).")


def _seeds(sm: pd.DataFrame) -> str:
    """``"2"`` or ``"2 to 8"``: the seeds per G of the summary rows."""
    lo, hi = (int(sm.seeds.min()), int(sm.seeds.max())) if len(sm) else (0, 0)
    return f"{lo}" if lo == hi else f"{lo} to {hi}"


def report(tables, s) -> Section:
    tr_all = tables["train"]
    pr = tables["prediction" if s.model is None else "prediction_model"]
    pred = prediction(pr)
    sm = summary(tr_all)
    tr = tr_all[tr_all.sweep == "main"]
    gs = sorted(int(g) for g in tr.G.unique())
    lines = [f"Setting `{tr_all.setting.iloc[0]}`. " + _start_lines(pred, s),
             "", "| N | step | seeds | mean accuracy by G (" + ", ".join(map(str, gs)) + ") | "
             "best G | 95% bootstrap CI | P(best) | G* (integer) inside CI |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sm.itertuples():
        accs = " ".join(f"{r.mean_by_G.get(g, float('nan')):.3f}" for g in gs)
        inside = r.lo <= pred.G_exact <= r.hi
        lines.append(f"| {r.N} | {r.step} | {r.seeds} | {accs} | {r.best} | [{r.lo}, {r.hi}] | "
                     f"{r.p_best:.2f} | {'yes' if inside else 'no'} |")
    held = [r.lo <= pred.G_exact <= r.hi for r in sm.itertuples()]
    span = [sum(r.lo <= g <= r.hi for g in gs) for r in sm.itertuples()]
    whole = sum(n == len(gs) for n in span)
    lines += ["", f"The predicted integer G* = {int(pred.G_exact)} lies inside the bootstrap CI "
              f"of the best G in {sum(held)} of {len(held)} (N, checkpoint) rows. This is a "
              "measurement, not a check: with "
              f"{_seeds(sm)} seeds per G the CIs cover {np.mean(span) if span else float('nan'):.1f} of the "
              f"{len(gs)} grid values on average ({whole} of {len(span)} rows the whole grid), "
              "so this setting cannot decide whether training's best G is the predicted G*."]
    sps = tr.groupby("N").steps_per_s.mean()
    lines += ["", "Training speed (steps/s, mean over runs): " +
              ", ".join(f"N={int(n)}: {v:.2f}" for n, v in sps.items()) + ".", "",
              "Paper: Figure 5 (GSM8K, N = 1024) best G* = 32 at every checkpoint but the "
              "first; Table 2 (MATH) best G = 64, 64, 128 for N = 1024, 2048, 4096." +
              (" Rows with one seed have a one-point bootstrap CI (no seed variability "
               "measured)." if (sm.seeds == 1).any() else "") +
              f" The grid starts at G = {gs[0]}: a predicted G* at or below it can only be "
              "checked from one side."]
    lines += _knob_lines(tr_all, pr, sm)
    lines += _practical_lines(tr_all, sm)
    lines += ["", "![](lm_groupsize.png)"]
    ckpts = sorted({int(c) for c in s.checkpoints if 0 < c <= s.steps} | {s.steps})
    want = {(int(n), c) for n in s.budgets if min(s.group_sizes) <= n for c in ckpts}
    got = set(zip(sm.N, sm.step)) if len(sm) else set()
    gate = training_gate(tr_all, pred)
    lines += ["", f"**Theorem 7's ordering in training** (N = {gate['N']}, step "
              f"{gate['step']}): the grid G of least predicted fixed-budget MSE, G = "
              f"{gate['g_low']}, reaches held-out accuracy {gate['acc_low']:.4f} "
              f"({gate['n_low']} seeds); the grid G of largest, G = {gate['g_high']}, "
              f"{gate['acc_high']:.4f} ({gate['n_high']} seeds): difference "
              f"{gate['diff']:+.4f} +- {gate['se']:.4f} (Welch t = {gate['t']:.1f}, df "
              f"{gate['df']:.1f}). With these seeds a difference of {gate['mde']:.4f} is "
              "detected with 80% power at the 5% level"
              + (", so the ordering is a measurement here, not a check." if gate["t"] <= GATE_T
                 else f": the ordering holds beyond {GATE_T:g} se.")]
    checks = [
        _learning_check(learning_gate(tr_all)),
        check("c1 > 0 at the starting policy, so G* = 1 + sqrt(c3/c1) is finite",
              pred.c1 > 0 and np.isfinite(pred.G_continuous), pred.c1, pred.c3,
              kind="sanity",
              detail=f"c1 = {pred.c1:.4g}, c3 = {pred.c3:.4g}, G* = {pred.G_continuous:.1f}"),
        check("every held-out accuracy is a probability (in [0, 1])",
              tr_all.accuracy.between(0, 1).all(), tr_all.accuracy.to_numpy(),
              kind="sanity", detail=f"{len(tr_all)} accuracies in [{tr_all.accuracy.min():.3f}, "
              f"{tr_all.accuracy.max():.3f}]"),
        check("a best G with its bootstrap CI for every (N, checkpoint) of the main sweep",
              len(sm) > 0 and got == want, len(sm),
              kind="sanity", detail=f"{len(got & want)} of {len(want)}"),
    ]
    title = ("Small-LM optimal group size" if s.model is None else
             f"Optimal group size of {Path(s.model).name}")
    return Section(title + " (Figure 5 / Table 2 analogue)", "\n".join(lines), checks)


def _knob_lines(train: pd.DataFrame, pred: pd.DataFrame, main: pd.DataFrame) -> list:
    """The difficulty-knob table: pass-rate spread, predicted G* and best G per hard fraction."""
    kn = summary(train, "knob")
    if kn.empty:
        return []
    n = int(kn.N.iloc[0])
    last = int(kn.step.max())
    rows = pd.concat([main[(main.N == n) & (main.step == last)].assign(sweep="main"),
                      kn[kn.step == last].assign(sweep="knob")]).sort_values("hard_fraction")
    lines = ["", f"**Difficulty knob** (`TaskConfig.hard_fraction`, share of two-digit "
             f"questions): same starting policy, questions drawn at each hard fraction; N = {n}, "
             f"step {last}. V = per-question pass rate of the starting policy (exact).", "",
             "| hard fraction | seeds | J at start | share V < 5% | median V | predicted G* "
             "(continuous / integer) | mean accuracy by G | best G | 95% bootstrap CI | "
             "G* inside CI |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows.itertuples():
        p = prediction(pred, r.sweep, r.hard_fraction if r.sweep == "knob" else None)
        accs = ", ".join(f"{g}: {a:.3f}" for g, a in sorted(r.mean_by_G.items()))
        lines.append(f"| {r.hard_fraction:g} | {r.seeds} | {p.J:.3f} | "
                     f"{p.frac_V_below_5pct:.2f} | {p.V_median:.3f} | "
                     f"{p.G_continuous:.1f} / {int(p.G_exact)} | {accs} | {r.best} | "
                     f"[{r.lo}, {r.hi}] | {'yes' if r.lo <= p.G_exact <= r.hi else 'no'} |")
    return lines


def _practical_lines(train: pd.DataFrame, main: pd.DataFrame) -> list:
    """Practical variant vs Algorithm 1 at the same budget, per checkpoint."""
    pr = summary(train, "practical")
    if pr.empty:
        return []
    r0 = train[train.sweep == "practical"].iloc[0]
    n = int(pr.N.iloc[0])
    lines = ["", f"**Practical variant** ({r0.estimator} advantages, {int(r0.epochs)} clipped "
             f"epochs per batch, clip 1 +/- {r0.clip_eps:g}) against Algorithm 1 at N = {n}; "
             "G* is the Algorithm-1 prediction (Theorem 7 does not cover this variant).", "",
             "| step | variant | seeds | mean accuracy by G | best G | 95% bootstrap CI |",
             "|---|---|---|---|---|---|"]
    for step in sorted(pr.step.unique()):
        for name, t in (("Algorithm 1", main), ("practical", pr)):
            r = t[(t.N == n) & (t.step == step)]
            if r.empty:
                continue
            r = r.iloc[0]
            accs = ", ".join(f"{g}: {a:.3f}" for g, a in sorted(r.mean_by_G.items()))
            lines.append(f"| {step} | {name} | {r.seeds} | {accs} | {r.best} | "
                         f"[{r.lo}, {r.hi}] |")
    return lines


def plot(tables, s, out_dir) -> None:
    train = tables["train"]
    preds = tables["prediction" if s.model is None else "prediction_model"]
    tr = train[train.sweep == "main"]
    budgets = sorted(tr.N.unique())
    knob = train[train.sweep == "knob"]
    prac = train[train.sweep == "practical"]
    extra = not (knob.empty and prac.empty)
    fig, axes = plt.subplots(1, len(budgets) + extra, figsize=(4.2 * (len(budgets) + extra), 3.6),
                             squeeze=False)
    pred = prediction(preds)
    for ax, n in zip(axes[0], budgets):
        d = tr[tr.N == n]
        for step, e in d[d.step > 0].groupby("step"):
            m = e.groupby("G").accuracy.agg(["mean", "sem"])
            ax.errorbar(m.index, m["mean"], yerr=z_value() * m["sem"].fillna(0), fmt="o-", ms=3,
                        capsize=2, label=f"step {int(step)}")
        ax.axvline(pred.G_continuous, color="k", ls="--", lw=1, label="predicted G*")
        ax.set(xscale="log", xlabel="G", ylabel="held-out accuracy", title=f"N = {int(n)}")
        gs = sorted(d.G.unique())
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_xticks(gs, [str(int(g)) for g in gs])
        ax.legend(fontsize=7)
    if extra:
        ax = axes[0, -1]
        last = int(train.step.max())
        n_x = int(pd.concat([knob, prac]).N.iloc[0])
        both = pd.concat([knob, tr[tr.N == n_x]])
        for i, (h, d) in enumerate(both[both.step == last].groupby("hard_fraction")):
            m = d.groupby("G").accuracy.agg(["mean", "sem"])
            ax.errorbar(m.index, m["mean"], yerr=z_value() * m["sem"].fillna(0), fmt="o-", ms=3,
                        capsize=2, color=f"C{i}", label=f"hard fraction {h:g}")
            sw = "main" if d.sweep.iloc[0] == "main" else "knob"
            ax.axvline(prediction(preds, sw, h if sw == "knob" else None).G_continuous,
                       color=f"C{i}", ls="--", lw=1)
        if not prac.empty:
            m = prac[prac.step == last].groupby("G").accuracy.agg(["mean", "sem"])
            ax.errorbar(m.index, m["mean"], yerr=z_value() * m["sem"].fillna(0), fmt="s:", ms=3,
                        capsize=2, color="k", label=f"practical ({prac.estimator.iloc[0]}, "
                        f"{int(prac.epochs.iloc[0])} clipped epochs), hard "
                        f"{prac.hard_fraction.iloc[0]:g}")
        ax.set(xscale="log", xlabel="G", ylabel=f"held-out accuracy, step {last}",
               title=f"difficulty knob and practical variant, N = {n_x} (dashed: G*)")
        gs = sorted(both.G.unique())
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_xticks(gs, [str(int(g)) for g in gs])
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    start = "the instruct policy" if s.model is None else Path(s.model).name
    fig.suptitle(f"Fixed-budget GRPO from {start} (Figure 5 analogue)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, out_dir / "lm_groupsize")
