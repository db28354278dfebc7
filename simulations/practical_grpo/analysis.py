"""The report section and figure of ``practical-grpo`` (its :mod:`.study`).

:func:`summary` reduces the tables to the quantities the checks of the study's docstring read;
:func:`report` and :func:`plot` write the section and the figure.
"""

from __future__ import annotations

import pandas as pd

from grpo_theory.companions import practical as pr
from grpo_theory.plotting import plt, save_figure
from grpo_theory.experiments import Section, check, markdown_table

__all__ = ["FIT_FROM", "LIMIT_TOL", "RICHARDSON_TOL", "SLOPE_TOL", "Z_TOL", "plot", "report",
           "richardson", "summary"]

Z_TOL = 4.0
SLOPE_TOL = 0.1
FIT_FROM = 1024  # smallest G in the Lemma-11 slope fit (G E||g_hat - U||^2 = L + O(1/G))
LIMIT_TOL = 0.02  # G E||g_hat - U||^2 at the largest G within 2% of its limit
RICHARDSON_TOL = 1e-3  # the 1/G-eliminated extrapolation within 0.1% of the limit


def richardson(G, f) -> float:
    """``(G2 f2 - G1 f1) / (G2 - G1)`` of the two largest G: the limit of ``f = L + a/G``."""
    order = pd.Series(list(f), index=list(G)).sort_index()
    (g1, f1), (g2, f2) = order.iloc[-2:].items()
    return float((g2 * f2 - g1 * f1) / (g2 - g1))


def summary(tables) -> dict:
    """The fitted slopes and limits the checks use (public for tests)."""
    lm, et, kp = tables["lemma11"], tables["eta"], tables["kappa"]
    big = lm[lm.G >= FIT_FROM]
    last = lm.sort_values("G").iloc[-1]
    old = et[(et.kl_ref == "old") & (et.eta > 0)]
    out = dict(
        diff_slope=pr.loglog_slope(big.G, big.diff_sq),
        diff_ratio_last=float(last.G_diff_sq / last.diff_limit),
        richardson_rel=float(richardson(lm.G, lm.G_diff_sq) / last.diff_limit - 1)
        if len(lm) >= 2 else float("nan"),
        var_ratio_last=float(last.var_ratio),
        mse_rel_last=float(abs(last.mse - last.predicted) / last.mse),
        is_slope=pr.loglog_slope(old.eta, old.bias_sq_is),
        kl_slope=pr.loglog_slope(old.eta, old.bias_sq_kl),
        kappa_slope=pr.loglog_slope(kp.kappa, kp.bias_sq_kl),
        is_at0=float(et[et.eta == 0].bias_sq_is.max()),
        kl_old_at0=float(et[(et.eta == 0) & (et.kl_ref == "old")].bias_sq.max()),
        kl_ref_at0=float(et[(et.eta == 0) & (et.kl_ref == "ref")].bias_sq_kl.max()),
        # the Monte Carlo check's rival, g_hat equal to the U-statistic (E||g_hat - U||^2 = 0):
        # its distance from the sampled E||g_hat - U||^2 in se, the smallest over G
        min_rival_z=float((tables["mc"].mc_diff / tables["mc"].mc_diff_se).abs().min()),
    )
    return out


def _fmt_ci(t):
    return f"{t[0]:.3f} [{t[1]:.3f}, {t[2]:.3f}]"


def report(tables, s) -> Section:
    lm, et, kp, k3, mc = (tables[k] for k in ("lemma11", "eta", "kappa", "k3", "mc"))
    sm = summary(tables)
    lines = [f"SequencePolicy: {s.n_prompts} prompts, vocabulary {s.vocab_size} + EOS, horizon "
             f"{s.horizon} (every response enumerated), reward means ~ U(0, {s.reward_scale}). "
             f"theta = theta_old + eta d (|d| = 1); lemma11/mc cells at eta = {s.eta}, "
             f"kappa = {s.kappa}, KL reference theta_old.", "",
             "**Lemma 11 / Theorem 12 over G (exact)**", "",
             markdown_table(pd.DataFrame({
                 "G": lm.G, "E‖ĝ−U‖²": lm.diff_sq,
                 "G·E‖ĝ−U‖² (limit)": [f"{r.G_diff_sq:.4f} ({r.diff_limit:.4f})"
                                       for r in lm.itertuples()],
                 "G·Var/trΣ₁": lm.var_ratio,
                 "trΣ₁ (ĝ / U)": [f"{r.tr_sigma1:.4f} / {r.tr_sigma1_ustat:.4f}"
                                  for r in lm.itertuples()],
                 "MSE": lm.mse, "bias²+trΣ₁/G": lm.predicted}),
                 {"E‖ĝ−U‖²": ".3e", "G·Var/trΣ₁": ".4f", "MSE": ".5f", "bias²+trΣ₁/G": ".5f"})]
    lines += ["", f"log-log slope of E‖ĝ−U‖² in G (G ≥ {FIT_FROM}): {_fmt_ci(sm['diff_slope'])} "
              "(predicted −1).", "", "**Asymptotic squared bias over eta (exact)**", "",
              markdown_table(et[["eta", "kl_ref", "bias_sq_is", "bias_sq_kl", "bias_sq",
                                 "bias_sq_reg"]].set_axis(
                  ["eta", "KL ref", "bias² (ratios only)", "K3 part ‖E q‖²", "bias² (total)",
                   "bias² vs KL-regularised target"], axis=1),
                  {"eta": "g", "bias² (ratios only)": ".3e", "K3 part ‖E q‖²": ".3e",
                   "bias² (total)": ".3e", "bias² vs KL-regularised target": ".3e"})]
    lines += ["", f"slopes in eta (KL ref theta_old, eta > 0): ratio part "
              f"{_fmt_ci(sm['is_slope'])}, K3 part {_fmt_ci(sm['kl_slope'])}; slope of the K3 "
              f"part in kappa (eta = {s.eta}): {_fmt_ci(sm['kappa_slope'])}.", "",
              "**K3 gradient: jax autodiff vs closed forms (per token, all responses)**", "",
              markdown_table(k3[["ref_offset", "err_corrected", "err_inverted",
                                 "rel_err_inverted", "rel_err_inverted_neg"]].set_axis(
                  ["ref offset", "max err (1−π_ref/π_θ)∇logπ", "max err (1−π_θ/π_ref)∇logπ",
                   "rel err (1−π_θ/π_ref)", "rel err (π_θ/π_ref−1)"], axis=1),
                  {"ref offset": "g", "max err (1−π_ref/π_θ)∇logπ": ".1e",
                   "max err (1−π_θ/π_ref)∇logπ": ".3e", "rel err (1−π_θ/π_ref)": ".3f",
                   "rel err (π_θ/π_ref−1)": ".4f"})]
    lines += ["", "**Monte Carlo vs exact**", "", markdown_table(pd.DataFrame({
        "G": mc.G,
        "MSE exact / MC ± se": [f"{r.exact_mse:.5f} / {r.mc_mse:.5f} ± {r.mc_se:.5f}"
                                for r in mc.itertuples()],
        "E‖ĝ−U‖² exact / MC ± se": [f"{r.exact_diff:.3e} / {r.mc_diff:.3e} ± {r.mc_diff_se:.1e}"
                                    for r in mc.itertuples()]}))]
    lines += ["", "![](practical_grpo.png)"]
    zmax = float(max(mc.z_mse.abs().max(), mc.z_diff.abs().max()))
    ds, is_s, kl_s, kp_s = sm["diff_slope"], sm["is_slope"], sm["kl_slope"], sm["kappa_slope"]
    checks = [
        check("K3 gradient: autodiff = (1 - pi_ref/pi_theta) grad log pi (1e-10)",
              bool(k3.err_corrected.max() < 1e-10), k3.err_corrected.to_numpy(),
              kind="exact", detail=f"largest {k3.err_corrected.max():.1e}"),
        check("K3 gradient: the inverted-ratio forms differ from autodiff",
              bool(k3.rel_err_inverted.min() > 1e-3 and k3.rel_err_inverted_neg.min() > 1e-6),
              k3.rel_err_inverted.to_numpy(), k3.rel_err_inverted_neg.to_numpy(), kind="sanity"),
        check("Lemma 11: slope of E||g_hat - U||^2 in G is -1 (within 0.1)",
              abs(ds[0] + 1) <= SLOPE_TOL, *ds,
              kind="sanity", excludes="a slope other than -1 for E||g_hat - U||^2 in G",
              detail=_fmt_ci(ds)),
        check(f"Lemma 11: G E||g_hat - U||^2 within {LIMIT_TOL:.0%} of its limit at the "
              "largest G", abs(sm["diff_ratio_last"] - 1) <= LIMIT_TOL, sm["diff_ratio_last"],
              kind="sanity", detail=f"ratio {sm['diff_ratio_last']:.4f}"),
        check(f"Lemma 11: Richardson extrapolation (1/G eliminated, two largest G) within "
              f"{RICHARDSON_TOL:.1%} of the limit", abs(sm["richardson_rel"]) <= RICHARDSON_TOL,
              sm["richardson_rel"], kind="sanity",
              excludes="a limit off Lemma 11's by more than 0.1%, or a 1/sqrt(G) approach",
              detail=f"relative error {sm['richardson_rel']:+.1e}"),
        check("Theorem 12: G Var / tr Sigma_1 within 2% of 1 at the largest G",
              abs(sm["var_ratio_last"] - 1) <= 0.02, sm["var_ratio_last"],
              kind="sanity", detail=f"{sm['var_ratio_last']:.4f}"),
        check("Theorem 12: MSE within 1% of bias^2 + tr Sigma_1 / G at the largest G",
              sm["mse_rel_last"] <= 0.01, sm["mse_rel_last"],
              kind="sanity", detail=f"{sm['mse_rel_last']:.2e}"),
        check("bias^2 vanishes at eta = 0 (ratio part, K3 with reference theta_old)",
              sm["is_at0"] < 1e-20 and sm["kl_old_at0"] < 1e-20, sm["is_at0"], sm["kl_old_at0"],
              kind="sanity"),
        check("bias^2 (ratio part) grows as eta^2 (slope 2 within 0.1)",
              abs(is_s[0] - 2) <= SLOPE_TOL, *is_s,
              kind="sanity", excludes="a ratio bias growing other than as eta^2",
              detail=_fmt_ci(is_s)),
        check("K3 bias (reference theta_old) grows as eta^2 (slope 2 within 0.1)",
              abs(kl_s[0] - 2) <= SLOPE_TOL, *kl_s,
              kind="sanity", excludes="a K3 bias growing other than as eta^2",
              detail=_fmt_ci(kl_s)),
        check("K3 bias scales as kappa^2 (slope 2 within 0.01)", abs(kp_s[0] - 2) <= 0.01, *kp_s,
              kind="sanity", excludes="a K3 bias scaling other than as kappa^2",
              detail=_fmt_ci(kp_s)),
        check("K3 bias with reference theta_ref != theta_old does not vanish at eta = 0",
              sm["kl_ref_at0"] > 1e-8, sm["kl_ref_at0"],
              kind="sanity", detail=f"{sm['kl_ref_at0']:.3e}"),
        check(f"Monte Carlo within {Z_TOL} se of exact (MSE and E||g_hat - U||^2)",
              zmax <= Z_TOL, mc.z_mse.to_numpy(), mc.z_diff.to_numpy(), sm["min_rival_z"],
              kind="statistical",
              excludes="g_hat equal to the U-statistic U (E||g_hat - U||^2 = 0 at every G)",
              rival_se=sm["min_rival_z"], z_tol=Z_TOL,
              detail=f"largest |z| {zmax:.2f}; the rival lies {sm['min_rival_z']:.1f} se away "
              "or more"),
    ]
    return Section("Practical GRPO (Appendix A: Lemma 11, Theorem 12)", "\n".join(lines), checks)


def plot(tables, s, out_dir) -> None:
    lm, et = tables["lemma11"], tables["eta"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ax = axes[0]
    ax.plot(lm.G, lm.diff_sq, "o-", label="E‖ĝ − U‖² (exact)")
    ax.plot(lm.G, lm.diff_limit / lm.G, "--", label="predicted limit / G")
    ax.set(xscale="log", yscale="log", xlabel="G", title="Lemma 11: ĝ − U")
    ax.legend(fontsize=8)
    ax = axes[1]
    ax.plot(lm.G, lm.var_ratio, "o-")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set(xscale="log", xlabel="G", ylabel="G·Var / tr Σ₁", title="Theorem 12: variance")
    ax = axes[2]
    pos = et[et.eta > 0]
    o, r = pos[pos.kl_ref == "old"], pos[pos.kl_ref == "ref"]
    ax.plot(o.eta, o.bias_sq_is, "o-", label="ratio part")
    ax.plot(o.eta, o.bias_sq_kl, "s-", label="K3 part, ref = θ_old")
    ax.plot(r.eta, r.bias_sq_kl, "^-", label="K3 part, ref = θ_ref")
    ax.set(xscale="log", yscale="log", xlabel="η", ylabel="squared bias",
           title=f"Theorem 12: bias (κ = {s.kappa})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out_dir / "practical_grpo")
