"""The PASS rule, report section and figure of ``length-weighting`` (its :mod:`.study`).

:func:`checks` evaluates the criteria of the study's docstring on the tables; :func:`report` and
:func:`plot` write the section and the figure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from grpo_theory.core import t_value
from grpo_theory.plotting import plt, save_figure
from grpo_theory.experiments import Section, check, markdown_table

__all__ = ["training_summary", "checks", "report", "plot"]

EXACT_TOL = 1e-12
Z_TOL = 4.5
#: two-sided level of the t test that alpha = 1 leaves E[L | incorrect] where it started
DRIFT_ALPHA = 1e-3
#: a Monte Carlo row counts for the check's power only where the rival's exact mean (alpha = 1's)
#: differs from the row's by this share (relative norm)
RIVAL_GAP = 0.05


def training_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per (estimator, alpha): E[L | incorrect] at the start (flow) and end, drifts and J."""
    last = df.dropna(subset=["drift_incorrect"]).copy()
    first = df[df.step == 0].set_index(["estimator", "alpha"])
    last = last.set_index(["estimator", "alpha"])
    out = pd.DataFrame({
        "L_incorrect_start": first.L_incorrect_flow,
        "L_incorrect_end": last.L_incorrect, "drift_incorrect": last.drift_incorrect,
        "drift_incorrect_se": last.drift_incorrect_se,
        "flow_drift_incorrect": last.L_incorrect_flow - first.L_incorrect_flow,
        "drift_correct": last.drift_correct, "J_end": last.J, "n_seeds": last.n_seeds,
    }).reset_index()
    return out


def _finite_all(mask) -> bool:
    return bool(len(mask) > 0 and np.all(mask))


def mc_rival_z(mc: pd.DataFrame) -> tuple[float, int]:
    """The Monte Carlo check's rival in standard errors: the unweighted (alpha = 1) estimator's
    exact mean, the smallest ``rival_z`` (largest abs z over coordinates were the rival the
    truth) over the rows whose exact mean differs from it by more than :data:`RIVAL_GAP`.

    Args:
        mc: the ``mc`` table (``rival_z``, ``rival_gap``; NaN when absent).
    Returns:
        ``(distance, number of rows)``.
    """
    if "rival_z" not in mc or "rival_gap" not in mc:
        return float("nan"), 0
    moved = mc[mc.rival_gap > RIVAL_GAP]
    return (float(moved.rival_z.min()) if len(moved) else float("nan")), int(len(moved))


def drift_rival_z(tr: pd.DataFrame) -> float:
    """The alpha = 1 drift check's rival in standard errors: alpha = 1 drifting as alpha = 0
    does, the smallest ``abs(drift_0 - drift_1) / se_1`` over the estimators.

    Args:
        tr: :func:`training_summary`.
    """
    a0 = tr[tr.alpha == 0.0].set_index("estimator")
    a1 = tr[tr.alpha == 1.0].set_index("estimator")
    z = ((a0.drift_incorrect.reindex(a1.index) - a1.drift_incorrect)
         / a1.drift_incorrect_se).abs().to_numpy(dtype=float)
    return float(z.min()) if z.size and np.isfinite(z).all() else float("nan")


def checks(tables) -> dict:
    """``{key: Check}``: the claims, each INCOMPLETE when a number it needs is missing.

    Args:
        tables: ``{"exact", "modes", "sweep", "mc", "training": DataFrame}`` of this experiment.
    Returns:
        dict of :class:`grpo_theory.experiments.checks.Check` keyed by a short name.
    """
    ex, md, sw, mc = tables["exact"], tables["modes"], tables["sweep"], tables["mc"]
    tr = training_summary(tables["training"])
    exm = ex[ex.estimator == "grpo_mean"]
    ex1 = exm[exm.alpha == 1.0]
    mda = md[md.alpha.notna()]
    tm = md[md["mode"] == "token-mean"]
    var = sw[(sw.policy == "varied") & (sw.estimator == "grpo_mean")]
    unbiased = var[var.sin < 1e-10]
    sin_n = var.sin / var.sin.max()
    tok, grd = var.token_slope.abs(), var.grad_slope.abs()
    both_tok, both_grd = np.maximum(sin_n, tok), np.maximum(sin_n, grd / grd.max())
    eq = sw[sw.policy == "equal"]
    eqm = eq[eq.estimator == "grpo_mean"]
    a0, a1 = tr[tr.alpha == 0.0], tr[tr.alpha == 1.0]
    a0d = a0.set_index("estimator").drift_incorrect
    a1d = a1.set_index("estimator").drift_incorrect
    gap = 0.25 * a0d.reindex(a1d.index) - a1d.abs()  # > 0: alpha=1 drifts < 1/4 of alpha=0
    t1 = np.array([t_value(DRIFT_ALPHA, n - 1) for n in a1.n_seeds], dtype=float)
    mc_rz, n_mc_rival = mc_rival_z(mc)
    z0 = ((a0.drift_incorrect / a0.drift_incorrect_se).abs().min() if len(a0) else np.nan)
    z1 = drift_rival_z(tr)
    c = {
        "exact_enumeration": check(
            f"conditioning formula = enumeration of all G-tuples (<= {EXACT_TOL:g})",
            ex.err_enum.max() <= EXACT_TOL, ex.err_enum,
            kind="exact", detail=f"{ex.err_enum.max():.1e}"),
        "exact_surrogate": check(
            "mean-centred E ĝ_α = (G-1)/G ∇E[f_α(L)(r-b)] at b = V",
            exm.err_surrogate.max() <= EXACT_TOL, exm.err_surrogate,
            kind="exact", detail=f"{exm.err_surrogate.max():.1e}"),
        "alpha1_is_scaled_gradJ": check(
            "α = 1 equals (G-1)/G ∇J", ex1.err_gradJ.max() <= EXACT_TOL, ex1.err_gradJ,
            kind="exact", detail=f"{ex1.err_gradJ.max():.1e}"),
        "modes_map_to_alpha": check(
            "verl/TRL aggregation modes = their alpha form", mda.err_vs_alpha.max() <= EXACT_TOL,
            mda.err_vs_alpha, kind="exact", detail=f"{mda.err_vs_alpha.max():.1e}"),
        "token_mean_biased": check(
            "token-mean aggregation is biased (sin > 1e-3)", _finite_all(tm.sin > 1e-3), tm.sin,
            kind="sanity", detail=f"smallest sin {tm.sin.min():.4f}"),
        "only_alpha1_unbiased": check(
            "only α = 1 is unbiased (mean-centred, sin < 1e-10)",
            len(unbiased) > 0 and (unbiased.alpha == 1.0).all(), var.sin,
            kind="exact", detail=f"unbiased at α = {sorted(set(unbiased.alpha))}"),
        "alpha_lt1_biased": check(
            "every α < 1 is biased (sin > 1e-3)", _finite_all(var[var.alpha < 1].sin > 1e-3),
            var[var.alpha < 1].sin,
            kind="sanity", detail=f"smallest sin {var[var.alpha < 1].sin.min():.4f}"),
        "no_alpha_both": check(
            "no α is both unbiased and length-invariant (max(bias, abs slope) > 0.05)",
            _finite_all(both_tok > 0.05) and _finite_all(both_grd > 0.05), sin_n, tok, grd,
            kind="sanity",
            detail=f"smallest {min(both_tok.min(), both_grd.min()):.3f}" if len(var) else ""),
        "equal_lengths_unbiased_all_alpha": check(
            "equal lengths: every α unbiased and in the α = 1 direction",
            _finite_all(eqm.sin < 1e-6) and _finite_all((1 - eq.cos_vs_alpha1).abs() < 1e-10),
            eqm.sin, eq.cos_vs_alpha1,
            kind="exact", detail=f"sin <= {eqm.sin.max():.1e}, 1 - cos <= "
                   f"{(1 - eq.cos_vs_alpha1).abs().max():.1e}"),
        "mc_agrees": check(
            f"Monte Carlo mean = exact (abs z <= {Z_TOL}, zero-variance coordinates exact)",
            _finite_all(mc.max_abs_z <= Z_TOL) and _finite_all(mc.max_err_zero_var < 1e-12),
            mc.max_abs_z, mc.max_err_zero_var, mc_rz,
            kind="statistical",
            excludes="the unweighted (α = 1) estimator's exact mean", rival_se=mc_rz,
            z_tol=Z_TOL,
            detail=f"largest abs z {mc.max_abs_z.max():.2f}; the rival lies {mc_rz:.1f} se "
                   f"away or more ({n_mc_rival} rows whose exact mean differs from it by more "
                   f"than {RIVAL_GAP:.0%})"),
        "alpha0_lengthens_incorrect": check(
            "α = 0 lengthens incorrect answers (sampled drift > 4 se, flow drift > 0.1)",
            _finite_all(a0.drift_incorrect > 4 * a0.drift_incorrect_se)
            and _finite_all(a0.flow_drift_incorrect > 0.1),
            a0.drift_incorrect, a0.drift_incorrect_se, a0.flow_drift_incorrect, z0,
            kind="statistical", excludes="alpha = 0 leaving incorrect answers' length unchanged "
            "(a zero drift)", rival_se=z0, z_tol=4.0,
            detail=f"drift {a0.drift_incorrect.min():+.3f}, "
                   f"flow {a0.flow_drift_incorrect.min():+.3f}; zero lies {z0:.1f} se away or "
                   "more" if len(a0) else ""),
        "alpha1_does_not": check(
            f"α = 1 does not (abs flow drift < 0.01, abs drift < t(n_seeds - 1) se at level "
            f"{DRIFT_ALPHA:g}, and < α = 0's / 4)",
            _finite_all(a1.flow_drift_incorrect.abs() < 0.01)
            and _finite_all(a1.drift_incorrect.abs() < t1 * a1.drift_incorrect_se)
            and _finite_all(gap > 0),
            a1.drift_incorrect, a1.drift_incorrect_se, a1.flow_drift_incorrect, gap, t1, z1,
            kind="statistical", excludes="alpha = 1 lengthening incorrect answers as alpha = 0 "
            "does (α = 0's drift)", rival_se=z1,
            z_tol=float(t1.max()) if t1.size else 4.0,
            detail=(f"largest abs drift {a1.drift_incorrect.abs().max():.3f} vs "
                    f"{(t1 * a1.drift_incorrect_se).min():.3f} (t = {t1.min():.2f}, "
                    f"{int(a1.n_seeds.min())} seeds); α = 0's drift lies {z1:.1f} se away or "
                    "more") if len(a1) else ""),
    }
    return c


def _g0(var: pd.DataFrame) -> int:
    return 8 if 8 in set(var.G) else int(var.G.iloc[0])


def _modes_table(md: pd.DataFrame) -> str:
    """The aggregation modes' bias (— where a mode has no alpha form)."""
    dash = {"alpha": lambda a: "—" if np.isnan(a) else f"{a:g}",
            "max err vs alpha form": lambda e: "—" if np.isnan(e) else f"{e:.1e}",
            "cos": ".5f", "sin": ".4f"}
    return markdown_table(pd.DataFrame({
        "mode": [f"{r.mode} ({r.description.split(':')[0]})" for r in md.itertuples()],
        "alpha": md.alpha, "max err vs alpha form": md.err_vs_alpha, "cos": md.cos,
        "sin": md.sin}), dash)


def report(tables, s, mc_g: int, modes_g: int, train: dict) -> Section:
    """The section; ``mc_g``, ``modes_g``: G of the Monte Carlo and aggregation-mode cells,
    ``train``: the training cells' ``lr``, ``G``, ``B``."""
    c = checks(tables)
    ex, md, sw, mc = tables["exact"], tables["modes"], tables["sweep"], tables["mc"]
    tr = training_summary(tables["training"])
    var = sw[(sw.policy == "varied") & (sw.estimator == "grpo_mean")]
    G0 = _g0(var)
    var = var[var.G == G0].sort_values("alpha")
    zero_grad = var.iloc[(var.grad_slope.abs()).argmin()]
    v = var.iloc[::max(1, len(var) // 10)]  # about ten rows of the sweep
    std1 = sw[(sw.policy == "varied") & (sw.estimator != "grpo_mean") & (sw.alpha == 1)]
    std_bias = std1.sin.max() if len(std1) else float("nan")
    L = ["Weights f_alpha(L) = L^(alpha-1) on a tabular sequence policy (vocab 2 + EOS, lengths "
         "1..5, three prompts of different difficulty). Exact numbers by enumeration.", "",
         f"* Conditioning formula = brute-force enumeration of all G-tuples (G in "
         f"{sorted(set(int(g) for g in ex.G))}): max error {ex.err_enum.max():.1e}; mean-centred "
         f"E ĝ_α = (G-1)/G ∇E[f_α(L)(r-b)]|b=V: max error {ex.err_surrogate.max():.1e}; "
         f"α = 1 equals (G-1)/G ∇J: {ex.err_gradJ.max():.1e}.",
         f"* Monte Carlo mean (G={mc_g}, {int(mc.n_reps.iloc[0])} groups) vs exact: largest "
         f"|z| = {mc.max_abs_z.max():.2f} (PASS if <= {Z_TOL}).", "",
         f"Aggregation modes (G = {modes_g}, enumeration; bias vs (G-1)/G ∇J, mean-centred):", "",
         _modes_table(md[md.estimator == "grpo_mean"])]
    L += ["", f"Alpha sweep (mean-centred, G = {G0}): bias as sin∠(E ĝ_α, ∇J), sensitivity as "
          "slopes vs log L.", "", markdown_table(pd.DataFrame({
              "alpha": v.alpha, "cos": v.cos, "sin": v.sin, "rel. norm bias": v.rel_bias,
              "token slope": v.token_slope, "grad-norm slope": v.grad_slope,
              "cos prompt 0/1/2": [f"{r.cos_prompt0:.4f} / {r.cos_prompt1:.4f} / "
                                   f"{r.cos_prompt2:.4f}" for r in v.itertuples()]}),
              {"alpha": ".2f", "cos": ".5f", "sin": ".4f", "rel. norm bias": ".3f",
               "token slope": ".2f", "grad-norm slope": ".3f"})]
    L += ["", f"Only alpha = 1 has zero bias; the token-weight slope (P2) is alpha itself, zero "
          f"only at alpha = 0; the gradient-norm slope crosses zero near alpha = "
          f"{zero_grad.alpha:.2f}, where the bias is sin = {zero_grad.sin:.3f}. No alpha reaches "
          "(0, 0). With all lengths equal (eos=False control) the mean-centred direction bias is "
          f"{sw[(sw.policy == 'equal') & (sw.estimator == 'grpo_mean')].sin.max():.1e} for every "
          "alpha, and every alpha gives the alpha = 1 direction (cos "
          f"{sw[sw.policy == 'equal'].cos_vs_alpha1.min():.12f}). Std-normalised advantages are "
          "biased even at alpha = 1 (sin "
          f"{std_bias:.3f}"
          "): a prompt reweighting (Proposition 13), not a length effect.", "",
          f"Training (stop-or-run policy: answer token then free length; lr {train['lr']:g}, "
          f"B = G = {train['G']}; mean ± se over {int(tables['training'].n_seeds.iloc[0])} "
          "independent runs; flow = exact expected update):", "",
          markdown_table(pd.DataFrame({
              "advantage": tr.estimator, "alpha": tr.alpha,
              "E[L \\| incorrect] start → end": [f"{r.L_incorrect_start:.3f} → "
                                                 f"{r.L_incorrect_end:.3f}" for r in tr.itertuples()],
              "drift ± se": [f"{r.drift_incorrect:+.3f} ± {r.drift_incorrect_se:.3f}"
                             for r in tr.itertuples()],
              "flow drift": tr.flow_drift_incorrect, "drift of E[L \\| correct]": tr.drift_correct,
              "J end": tr.J_end}),
              {"alpha": "g", "flow drift": "+.4f", "drift of E[L \\| correct]": "+.3f",
               "J end": ".3f"})]
    L += ["", "![](length_weighting.png)"]
    return Section("Length weighting f_alpha(L) = L^(alpha-1)", "\n".join(L), list(c.values()))


def plot(tables, s, out_dir) -> None:
    sw = tables["sweep"]
    v = sw[(sw.policy == "varied") & (sw.estimator == "grpo_mean")]
    G0 = _g0(v)
    v = v[v.G == G0].sort_values("alpha")
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    ax = axes[0]
    ax.plot(v.alpha, v.sin, "o-", label="bias: sin∠(E ĝ_α, ∇J)")
    ax.plot(v.alpha, v.token_slope.abs(), "s-", label="|token-weight slope| (P2)")
    ax.plot(v.alpha, v.grad_slope.abs(), "^-", label="|gradient-norm slope|")
    ax.set(xlabel="alpha", title=f"bias vs length sensitivity (mean-centred, G={G0})")
    ax.legend(fontsize=8)
    ax = axes[1]
    for col, mk in (("token_slope", "s-"), ("grad_slope", "^-")):
        ax.plot(v[col].abs(), v.sin, mk, label=col.replace("_", " "))
    for _, r in v.iloc[::max(1, len(v) // 5)].iterrows():
        ax.annotate(f"α={r.alpha:.1f}", (abs(r.token_slope), r.sin), fontsize=7)
    ax.set(xlabel="length sensitivity |slope|", ylabel="bias sin∠",
           title="trade-off frontier: no point at (0, 0)")
    ax.legend(fontsize=8)
    ax = axes[2]
    tr = tables["training"]
    for (est, a), d in tr.groupby(["estimator", "alpha"]):
        if est != "grpo_mean":
            continue
        line, = ax.plot(d.step, d.L_incorrect, label=f"α={a:g} incorrect (sampled)")
        ax.fill_between(d.step, d.L_incorrect - 2 * d.L_incorrect_se,
                        d.L_incorrect + 2 * d.L_incorrect_se, color=line.get_color(), alpha=0.2)
        ax.plot(d.step, d.L_incorrect_flow, "--", color=line.get_color(), lw=1)
        ax.plot(d.step, d.L_correct, ":", color=line.get_color(), label=f"α={a:g} correct")
    ax.set(xlabel="step", ylabel="E[L | class]", title="training: dashed = exact expected flow")
    ax.legend(fontsize=7)
    save_figure(fig, out_dir / "length_weighting")
