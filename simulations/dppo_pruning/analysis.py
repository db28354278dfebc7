"""The PASS rule, report section and figure of ``dppo-pruning`` (its :mod:`.study`).

:func:`summary` reduces the tables to the quantities the checks of the study's docstring read;
:func:`report` and :func:`plot` write the section and the figure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from grpo_theory.companions import dppo
from grpo_theory.core import z_value
from grpo_theory.plotting import plt, save_figure
from grpo_theory.experiments import Section, check, markdown_table

__all__ = ["summary", "trade_view", "report", "plot"]

Z_TOL = 4.0
EXACT_TOL = 1e-12  # relative to the scale of the estimate
BIAS_MIN = 1e-8  # a control "shows a bias" when its bias exceeds this (>> rounding)
CONTROLS = tuple(m for m in dppo.METHODS if m != "dppo")
#: a speed-vs-MSE row counts for the check's power only where DPPO's added variance exceeds
#: this share of MSE(full) (the rival, no added variance, differs from the exact MSE there)
RIVAL_GAP = 0.05


def summary(tables) -> dict:
    """The numbers behind the checks (relative biases, variance identities, z-scores).

    Args:
        tables: ``{"masks", "batches", "tradeoff": DataFrame}`` of this experiment.
    Returns:
        dict of floats; ``mask_control_bias`` / ``batch_control_bias`` are ``{control: float}``.
    """
    masks, batches, trade = tables["masks"], tables["batches"], tables["tradeoff"]
    c = {}
    d = masks[masks.method == "dppo"]
    c["mask_dppo_bias"] = float((d.max_abs_bias / d.scale).max())
    c["mask_prob_total"] = float((masks.total_probability - 1).abs().max())
    c["mask_control_bias"] = {m: float((masks[masks.method == m].max_abs_bias
                                        / masks[masks.method == m].scale).max())
                              for m in CONTROLS}
    c["var_formula_rel"] = float(((d.var_enumerated - d.var_formula).abs() / d.var_formula).max())
    c["var_mc_z"] = float(((d.var_mc - d.var_formula) / d.var_mc_se).abs().max())
    # the rival of the mask Monte Carlo: pruning adding no variance (mean squared deviation 0),
    # on the rows where the formula's added variance is positive
    dv = d[(d.var_formula > 0) & (d.var_mc_se > 0)]
    c["var_mc_rival_z"] = float((dv.var_mc / dv.var_mc_se).abs().min()) if len(dv) else np.nan
    b = batches[batches.method == "dppo"]
    c["batch_dppo_bias"] = float((b.bias_vs_full / b.scale).max())
    c["batch_dppo_cond"] = float((b.cond_bias / b.scale).max())
    c["batch_closed_form_rel"] = float(((b.mse_pruned - b.mse_closed_form).abs()
                                        / b.mse_pruned).max())
    c["batch_identity_rel"] = float(((b.mse_pruned - b.mse_full - b.added_variance).abs()
                                     / b.mse_pruned).max())
    c["batch_kept_rel"] = float(((b.kept_tokens - b.kept_tokens_closed_form).abs()).max())
    c["batch_control_bias"] = {m: float((batches[batches.method == m].bias_vs_full
                                         / batches[batches.method == m].scale).max())
                               for m in CONTROLS}
    t = trade[trade.method.isin(["dppo", "full"])]
    c["trade_z"] = float(t.z.abs().max())
    # the rival of the speed-vs-MSE Monte Carlo: DPPO's MSE equal to the full batch's (no added
    # variance), on the DPPO rows whose exact added variance exceeds RIVAL_GAP of MSE(full)
    tr = trade[(trade.method == "dppo") & (trade.exact_added > RIVAL_GAP * trade.exact_mse_full)]
    c["trade_rival_z"] = (float(((tr.mc_mse - tr.exact_mse_full) / tr.mc_se).abs().min())
                          if len(tr) else np.nan)
    c["n_trade_rival"] = int(len(tr))
    zg = trade[(trade.method == "dppo") & (trade.family == "zero-groups-only")]
    c["zero_group_added"] = float((zg.exact_added / zg.exact_mse_full).abs().max())
    c["zero_group_kept_min"] = float(zg.kept_tokens.min())
    return c


def _checks(c: dict) -> list:
    mcb, bcb = list(c["mask_control_bias"].values()), list(c["batch_control_bias"].values())
    return [
        check(f"DPPO unbiased given the batch (relative bias <= {EXACT_TOL:g})",
              c["mask_dppo_bias"] <= EXACT_TOL, c["mask_dppo_bias"],
              kind="exact", detail=f"{c['mask_dppo_bias']:.1e}"),
        check("mask probabilities sum to 1 (to 1e-12)", c["mask_prob_total"] <= 1e-12,
              c["mask_prob_total"], kind="sanity", detail=f"{c['mask_prob_total']:.1e}"),
        check(f"every control biased given the batch (> {BIAS_MIN:g})", min(mcb) > BIAS_MIN,
              mcb, kind="sanity", detail=f"smallest {min(mcb):.3g}"),
        check("enumerated mask variance = Horvitz-Thompson formula (to 1e-10)",
              c["var_formula_rel"] <= 1e-10, c["var_formula_rel"],
              kind="exact", detail=f"{c['var_formula_rel']:.1e}"),
        check(f"Monte Carlo over masks within {Z_TOL:g} se", c["var_mc_z"] <= Z_TOL,
              c["var_mc_z"], c["var_mc_rival_z"],
              kind="statistical",
              excludes="pruning adding no variance (a zero added variance)",
              rival_se=c["var_mc_rival_z"], z_tol=Z_TOL,
              detail=f"{c['var_mc_z']:.2f}; zero lies {c['var_mc_rival_z']:.1f} se away or "
                     "more"),
        check(f"DPPO unbiased over batch sampling (<= {EXACT_TOL:g})",
              (c["batch_dppo_bias"] <= EXACT_TOL) & (c["batch_dppo_cond"] <= EXACT_TOL),
              c["batch_dppo_bias"], c["batch_dppo_cond"],
              kind="exact",
              detail=f"{c['batch_dppo_bias']:.1e} / conditional {c['batch_dppo_cond']:.1e}"),
        check("enumerated MSE = binary-conditioning closed form (to 1e-10)",
              c["batch_closed_form_rel"] <= 1e-10, c["batch_closed_form_rel"],
              kind="exact", detail=f"{c['batch_closed_form_rel']:.1e}"),
        check("MSE(DPPO) = MSE(full) + E[added variance] (to 1e-10)",
              c["batch_identity_rel"] <= 1e-10, c["batch_identity_rel"],
              kind="exact", detail=f"{c['batch_identity_rel']:.1e}"),
        check("kept tokens = closed form (to 1e-12)", c["batch_kept_rel"] <= 1e-12,
              c["batch_kept_rel"], kind="exact", detail=f"{c['batch_kept_rel']:.1e}"),
        check(f"every control biased over batch sampling (> {BIAS_MIN:g})", min(bcb) > BIAS_MIN,
              bcb, kind="sanity", detail=f"smallest {min(bcb):.3g}"),
        check(f"speed-vs-MSE Monte Carlo within {Z_TOL:g} se of exact", c["trade_z"] <= Z_TOL,
              c["trade_z"], c["trade_rival_z"],
              kind="statistical",
              excludes="DPPO's MSE equal to the full batch's (no added variance)",
              rival_se=c["trade_rival_z"], z_tol=Z_TOL,
              detail=f"{c['trade_z']:.2f}; the rival lies {c['trade_rival_z']:.1f} se away or "
                     f"more ({c['n_trade_rival']} DPPO rows whose added variance exceeds "
                     f"{RIVAL_GAP:.0%} of MSE(full))"),
        check("pruning only zero-advantage groups adds no variance and saves tokens",
              (c["zero_group_added"] <= 1e-12) & (c["zero_group_kept_min"] < 1.0),
              c["zero_group_added"], c["zero_group_kept_min"],
              kind="sanity", detail=f"added {c['zero_group_added']:.1e}, kept >= "
                     f"{c['zero_group_kept_min']:.3f}"),
    ]


def trade_view(trade: pd.DataFrame, est: str = "grpo") -> pd.DataFrame:
    """DPPO rows of one estimator's speed-vs-MSE table, ``mse_ratio`` = MSE / MSE(full)."""
    d = trade[(trade.method == "dppo") & (trade.estimator == est)].copy()
    d["mse_ratio"] = d.exact_mse / d.exact_mse_full
    return d.sort_values(["family", "kept_tokens"])


def _scheme_table(batches: pd.DataFrame) -> str:
    """The controls' relative bias over batch sampling, one row per (estimator, scheme, G, B)."""
    rows = []
    for (est, sch, G, B), g in batches.groupby(["estimator", "scheme", "G", "B"]):
        g = g.set_index("method")
        rows.append([est, sch, f"{int(G)},{int(B)}"] + [
            f"{g.loc[m, 'bias_vs_full'] / g.loc[m, 'scale']:.3g}" for m in CONTROLS])
    return markdown_table(pd.DataFrame(rows, columns=["estimator", "scheme", "G,B", *CONTROLS]))


def report(tables, s, mask_shape: tuple, trade_shape: tuple) -> Section:
    """The section; ``mask_shape`` and ``trade_shape``: (B, G) of the masks and trade-off cells."""
    masks, batches, trade = tables["masks"], tables["batches"], tables["tradeoff"]
    c = summary(tables)
    d = trade_view(trade)
    lines = [
        "DPPO (arXiv 2603.04135) keeps prompt b with probability qp and completion (b,g) with "
        "probability qc, rescales kept terms by 1/q and uses advantages of the full group. "
        "Exact checks enumerate every mask in float64.", "",
        f"**Given a batch** (difficulty policy, B={mask_shape[0]}, G={mask_shape[1]}, 2^10 "
        "masks, "
        f"{masks.batch.nunique()} batches x {masks.scheme.nunique()} schemes x "
        f"{masks.estimator.nunique()} estimators): max relative bias of DPPO "
        f"{c['mask_dppo_bias']:.1e} (tolerance {EXACT_TOL:g}).", "",
        markdown_table(pd.DataFrame(
            [("dppo", f"{c['mask_dppo_bias']:.2e}", f"{c['batch_dppo_bias']:.2e}")]
            + [(m, f"{c['mask_control_bias'][m]:.3g}", f"{c['batch_control_bias'][m]:.3g}")
               for m in CONTROLS],
            columns=["method", "max relative bias given the batch", "max relative bias over "
                     "batch sampling (2x3 bandit, all batches x masks)"])),
        "", "Per scheme (over batch sampling), the controls' relative biases:", "",
        _scheme_table(batches)]
    lines += [
        "", "A zero for `recompute` under the advantage-aware scheme with G = 2 is expected: "
        "there both completions of a mixed group have |A| = max|A| (kept surely), and pruning "
        "only touches zero-advantage groups, whose recomputed advantages are 0 as well.", "",
        f"**Variance cost**: enumerated mask variance = Horvitz-Thompson formula to "
        f"{c['var_formula_rel']:.1e} (relative); Monte Carlo over masks within "
        f"{c['var_mc_z']:.2f} se (PASS <= {Z_TOL}). Over batch sampling, MSE(DPPO) = MSE(full) + "
        f"E[added variance] to {c['batch_identity_rel']:.1e} and equals the binary-conditioning "
        f"closed form to {c['batch_closed_form_rel']:.1e}.", "",
        f"**Speed vs MSE** (difficulty policy, B={trade_shape[0]}, G={trade_shape[1]}, GRPO "
        "leave-one-out; "
        f"exact, MC within {c['trade_z']:.2f} se):", "",
        markdown_table(d[["family", "rate", "kept_tokens", "kept_completions",
                          "mse_ratio"]].set_axis(["family", "rate", "kept tokens",
                                                  "kept completions", "MSE / MSE(full)"], axis=1),
                       {"rate": "g", "kept tokens": ".3f", "kept completions": ".3f",
                        "MSE / MSE(full)": ".3f"})]
    adv = d[d.family == "advantage-aware"].sort_values("kept_tokens")
    if len(adv):
        r0 = adv.iloc[len(adv) // 2]
        lines += ["", f"At {r0.kept_tokens:.1%} kept tokens, advantage-aware pruning (floor "
                  f"{r0.rate:g}) costs MSE x{r0.mse_ratio:.3f}; at exactly the same expected "
                  f"kept-token share uniform completion pruning costs "
                  f"x{r0.completion_uniform_ratio_same_tokens:.3f} and uniform prompt pruning "
                  f"x{r0.prompt_uniform_ratio_same_tokens:.3f} (all exact). Pruning only "
                  f"zero-advantage groups keeps as little as {c['zero_group_kept_min']:.1%} of "
                  f"the tokens at exactly zero added variance (relative "
                  f"{c['zero_group_added']:.1e})."]
    lines += ["", "![](dppo_pruning.png)"]
    return Section("DPPO: unbiased pruning, negative controls, speed vs MSE", "\n".join(lines),
                   _checks(c))


def plot(tables, s, out_dir) -> None:
    masks, trade = tables["masks"], tables["tradeoff"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    ax = axes[0]
    colours = dict(zip(["prompt-uniform", "completion-uniform", "advantage-aware",
                        "zero-groups-only"], ["C2", "C1", "C0", "C3"]))
    for i, est in enumerate(sorted(trade.estimator.unique(), key=lambda e: e != "grpo")):
        d = trade_view(trade, est)
        for fam, f in d.groupby("family"):
            if fam == "none":
                continue
            f = pd.concat([d[d.family == "none"], f]).sort_values("kept_tokens")
            ax.plot(f.kept_tokens, f.mse_ratio, "-" if i == 0 else "--", color=colours[fam],
                    label=f"{fam} ({est})")
            ax.errorbar(f.kept_tokens, f.mc_mse / f.exact_mse_full,
                        yerr=z_value() * f.mc_se / f.exact_mse_full, fmt="o" if i == 0 else "s",
                        ms=3, color=colours[fam], capsize=2)
    k = np.linspace(trade.kept_tokens.min(), 1, 50)
    ax.plot(k, 1 / k, "k:", lw=1, label="1/kept (fewer prompts, same tokens)")
    ax.set(xlabel="kept-token share (training compute)", ylabel="MSE / MSE(no pruning)",
           yscale="log")
    ax.set_title("Speed vs MSE: exact (lines), MC (points)", fontsize=10)
    ax.legend(fontsize=6)
    ax = axes[1]
    agg = masks.assign(r=masks.max_abs_bias / masks.scale).groupby(["method", "scheme"]).r.max()
    agg = agg.unstack("scheme").reindex(list(dppo.METHODS))
    xs = np.arange(len(agg.index))
    for i, sch in enumerate(agg.columns):
        ax.bar(xs + 0.4 * i - 0.2, np.maximum(agg[sch].values, 1e-18), width=0.4, label=sch)
    ax.axhline(EXACT_TOL, color="k", ls=":", lw=1, label="float64 tolerance")
    ax.set(yscale="log", xticks=xs, ylabel="max |E_mask ĝ_pruned − ĝ| / max|ĝ|")
    ax.set_title("Bias given the batch (2^10 masks enumerated)", fontsize=10)
    ax.set_xticklabels(agg.index, rotation=20, fontsize=8)
    ax.legend(fontsize=6)
    ax = axes[2]
    d = masks[masks.method == "dppo"]
    ax.errorbar(d.var_formula, d.var_mc, yerr=z_value() * d.var_mc_se, fmt="o", ms=4, capsize=2)
    lim = [d.var_formula.min() * 0.8, d.var_formula.max() * 1.2]
    ax.plot(lim, lim, "k:", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="exact added variance (Horvitz-Thompson)",
           ylabel="Monte Carlo over masks (95% CI)")
    ax.set_title("Variance cost of pruning", fontsize=10)
    fig.tight_layout()
    save_figure(fig, out_dir / "dppo_pruning")
