"""The scaling-family figure: each source's empirical best G (95% CI) against the predicted
G* = 1 + sqrt(c3/c1), log-log, with y = x (:func:`plot_points`)."""

from __future__ import annotations

import numpy as np

from grpo_theory.plotting import integer_ticks, plt, save_figure

__all__ = ["MARKERS", "plot_points"]

MARKERS = {"exact": ("s", "exact MSE argmin"), "mc": ("o", "Monte Carlo argmin"),
           "train_per_step": ("^", "training, per-step budget"),
           "train_total": ("v", "training, total budget"),
           "lm:train": ("D", "language model, training (concentration p)"),
           "lm:mc": ("P", "language model, Monte Carlo MSE argmin (p, N)"),
           "lm:noise": ("X", "language model, noise-limited training (p)")}


def plot_points(p, out_dir) -> None:
    """Draw ``predicted_vs_best_G`` under ``out_dir`` from the summaries' ``points`` table
    (columns source, label, G_pred, best_G, ci_low, ci_high)."""
    fig, ax = plt.subplots(figsize=(7.5, 5))
    src = list(dict.fromkeys(p.source))
    n = max(1, len(src))
    for i, name in enumerate(src):
        e = p[p.source == name]
        mk, lab = MARKERS.get(name, ("D", f"language model ({name[3:]})"))
        jit = 1.0 + 0.04 * (i - (n - 1) / 2)  # small horizontal offset so markers do not overlap
        ax.errorbar(e.G_pred * jit, e.best_G, yerr=[e.best_G - e.ci_low, e.ci_high - e.best_G],
                    fmt=mk, ms=6 if name.startswith("lm:") else 5, capsize=2, label=lab,
                    alpha=0.85)
        if name.startswith("lm:"):
            for r in e.itertuples():
                ax.annotate(r.label, (r.G_pred * jit, r.best_G), fontsize=6,
                            xytext=(4, -8), textcoords="offset points")
    lo = max(1.5, 0.7 * float(np.nanmin(p[["G_pred", "ci_low"]].values)))
    hi = 1.4 * float(np.nanmax(p[["G_pred", "ci_high"]].values))
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="y = x")
    ticks = [2**k for k in range(1, 11) if lo <= 2**k <= hi]
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
           xlabel="predicted G* = 1 + √(c3/c1)", ylabel="empirical best G (95% CI)",
           title="Scaling law across the δ family" + (" and LM concentrations" if any(
               x.startswith("lm:") for x in src) else ""))
    for axis in (ax.xaxis, ax.yaxis):
        integer_ticks(axis, ticks)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))  # off the points
    save_figure(fig, out_dir / "predicted_vs_best_G")


