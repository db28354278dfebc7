"""Practical GRPO (Appendix A): Lemma 11 and Theorem 12 on an enumerable sequence policy.

The practical GRPO gradient (std-normalised leave-one-out advantages, token-level importance
ratios ``mu_t = pi_theta / pi_old``, a K3 KL penalty of weight kappa) is evaluated EXACTLY on a
small :class:`~grpo_theory.core.policies.SequencePolicy` (every response and token enumerated;
group expectations by conditioning on the number of successes, see
:mod:`grpo_theory.companions.practical`), at ``theta = theta_old + eta * direction``.

Cells (one per kind, except Monte Carlo):

* ``lemma11``: over G, ``E||g_hat - U||^2`` (U: Lemma 11's U-statistic) and its predicted
  ``G -> inf`` constant, ``G Var / tr Sigma_1``, the MSE against Theorem 12's
  ``bias^2 + tr Sigma_1 / G``;
* ``eta``: the asymptotic squared bias over eta, split into the importance-ratio part and the K3
  part, with the KL reference at theta_old (as printed) and at a fixed theta_ref (as meant);
* ``kappa``: the K3 part of the bias over kappa;
* ``k3``: the K3 gradient by ``jax.jacfwd`` against the corrected closed form and the forms with
  the ratio inverted;
* ``mc``: Monte Carlo (sampled groups) against the exact MSE and ``E||g_hat - U||^2``.

PASS when: the corrected K3 form equals autodiff (1e-10) and the inverted ones do not; the
log-log slope of ``E||g_hat - U||^2`` in G (G >= 1024) is -1 within 0.1 and
``G E||g_hat - U||^2`` is within 10% of its predicted limit at the largest G;
``G Var / tr Sigma_1`` is within 2% of 1 at the largest G; the MSE is within 1% of
``bias^2 + tr Sigma_1/G`` at the largest G; the squared bias vanishes at eta = 0 (< 1e-20)
and its slope in eta is 2 within 0.1 (importance-ratio part, and K3 part with reference
theta_old); the K3 part scales as kappa^2 (slope 2 within 0.01); with a
reference theta_ref != theta_old the K3 bias does not vanish at eta = 0; every exact value lies
within 4 standard errors of Monte Carlo.

    grpo-theory practical-grpo [--full]
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np
import pandas as pd

from grpo_theory.companions import practical as pr
from grpo_theory.core.policies import SequencePolicy, n_sequences
from grpo_theory.plotting import plt, save_figure
from grpo_theory.experiments.runner import Cell, Experiment, Section, check, float64
from grpo_theory.experiments.stats import markdown_table

NAME = "practical-grpo"
CLAIM = ("practical GRPO (std-normalised advantages, token ratios, K3 KL) is asymptotically "
         "Lemma 11's U-statistic; its MSE is bias^2 (O(eta^2), O(kappa^2 eta^2)) + tr Sigma_1/G "
         "(Theorem 12)")
Z_TOL = 4.0
SLOPE_TOL = 0.1
FIT_FROM = 1024  # smallest G in the Lemma-11 slope fit (G E||g_hat - U||^2 = L + O(1/G))


@dataclass(frozen=True)
class Settings:
    vocab_size: int = 2
    horizon: int = 3
    n_prompts: int = 2
    reward_scale: float = 0.5  # reward means ~ U(0, reward_scale): V(x) away from 1/2
    problem_seed: int = 0
    eta: float = 0.3  # step of the lemma11 / mc cells
    kappa: float = 0.1
    ref_offset: float = 0.5  # theta_ref = theta_old + ref_offset * another direction
    group_sizes: tuple = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
    etas: tuple = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02)
    kappas: tuple = (0.01, 0.03, 0.1, 0.3, 1.0)
    ref_offsets: tuple = (0.1, 0.3, 1.0)
    mc_groups: tuple = (4, 16)
    n_reps: int = 20_000


SETTINGS = {
    "quick": Settings(),
    "full": Settings(horizon=4, group_sizes=(8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                                                  16384, 32768),
                     etas=(0.0, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05),
                     mc_groups=(4, 8, 16, 32), n_reps=200_000),
}

SCHEMA = {
    "lemma11": dict(G="int", eta="float", kappa="float", diff_sq="float", G_diff_sq="float",
                    diff_limit="float", variance="float", tr_sigma1="float",
                    tr_sigma1_ustat="float", var_ratio="float", mse="float", predicted="float",
                    bias_sq="float", bias_sq_asym="float"),
    "eta": dict(eta="float", kappa="float", kl_ref="str", bias_sq="float", bias_sq_is="float",
                bias_sq_kl="float", bias_sq_reg="float"),
    "kappa": dict(kappa="float", eta="float", bias_sq_kl="float", bias_sq="float"),
    "k3": dict(ref_offset="float", eta="float", err_corrected="float", err_inverted="float",
               rel_err_inverted="float", rel_err_inverted_neg="float"),
    "mc": dict(G="int", exact_mse="float", mc_mse="float", mc_se="float", exact_diff="float",
               mc_diff="float", mc_diff_se="float", z_mse="float", z_diff="float"),
}


def setup(c: dict):
    """The policy, theta_old and two unit directions (update, reference) of a configuration."""
    K = n_sequences(c["vocab_size"], c["horizon"], True)
    rng = np.random.default_rng(c["problem_seed"])
    means = c["reward_scale"] * rng.uniform(size=(c["n_prompts"], K))
    v, T = c["vocab_size"], c["horizon"]
    old = rng.normal(size=(c["n_prompts"], T, v + 1, v + 1))  # logits; EOS is the extra output
    pol = SequencePolicy(old, means, v, T, eos=True)
    d = rng.normal(size=old.shape)
    d_ref = rng.normal(size=old.shape)
    return pol, old, d / np.linalg.norm(d), d_ref / np.linalg.norm(d_ref)


def _sq(x):
    return float(np.sum(np.asarray(x) ** 2))


def _kl_part(terms):
    """f-weighted ||E_old[q|x]||^2: the K3 part of the asymptotic bias."""
    eq = np.einsum("pk,pkd->pd", np.asarray(terms.probs_old), np.asarray(terms.q))
    return float(np.asarray(terms.prompt_probs) @ np.sum(eq**2, axis=1))


def _bias_sq(terms, target):
    m = pr.exact_moments(terms, 2)
    return float(np.asarray(terms.prompt_probs)
                 @ np.sum((np.asarray(m.asym_mean) - np.asarray(target)) ** 2, axis=1))


def cells(s: Settings) -> list[Cell]:
    base = dict(vocab_size=s.vocab_size, horizon=s.horizon, n_prompts=s.n_prompts,
                reward_scale=s.reward_scale, problem_seed=s.problem_seed, eta=s.eta,
                kappa=s.kappa, ref_offset=s.ref_offset)
    out = [Cell("lemma11", dict(base, part="lemma11", group_sizes=s.group_sizes), "lemma11"),
           Cell("eta", dict(base, part="eta", etas=s.etas), "eta"),
           Cell("kappa", dict(base, part="kappa", kappas=s.kappas), "kappa"),
           Cell("k3", dict(base, part="k3", ref_offsets=s.ref_offsets), "k3")]
    out += [Cell(f"mc_G{G}", dict(base, part="mc", G=G, n_reps=s.n_reps), "mc")
            for G in s.mc_groups]
    return out


@float64
def cell(config: dict, key):
    """One part (see the module docstring); exact except ``mc``."""
    with jax.enable_x64(True):
        return _cell(config, key)


def _cell(c, key):
    pol, old, d, d_ref = setup(c)
    eta, kappa, part = c["eta"], c["kappa"], c["part"]
    ref = old + c["ref_offset"] * d_ref
    if part == "lemma11":
        terms = pr.response_terms(pol, old + eta * d, old, None, kappa)
        tgt = pr.target_gradient(terms)
        rows = []
        for G in c["group_sizes"]:
            dec = pr.decomposition(terms, pr.exact_moments(terms, G), tgt)
            rows.append(dict(G=G, eta=eta, kappa=kappa, diff_sq=dec["diff_sq"],
                             G_diff_sq=G * dec["diff_sq"], diff_limit=dec["diff_limit"],
                             variance=dec["variance"], tr_sigma1=dec["tr_sigma1"],
                             tr_sigma1_ustat=dec["tr_sigma1_ustat"],
                             var_ratio=G * dec["variance"] / dec["tr_sigma1"], mse=dec["mse"],
                             predicted=dec["predicted"], bias_sq=dec["bias_sq"],
                             bias_sq_asym=dec["bias_sq_asym"]))
        return rows
    if part == "eta":
        rows = []
        for e in c["etas"]:
            th = old + e * d
            t0 = pr.response_terms(pol, th, old, None, 0.0)
            b_is = _bias_sq(t0, pr.target_gradient(t0))
            for name, r in (("old", None), ("ref", ref)):
                t = pr.response_terms(pol, th, old, r, kappa)
                rows.append(dict(eta=e, kappa=kappa, kl_ref=name, bias_sq_is=b_is,
                                 bias_sq=_bias_sq(t, pr.target_gradient(t)),
                                 bias_sq_kl=_kl_part(t),
                                 bias_sq_reg=_bias_sq(t, pr.target_gradient(t, regularised=True))))
        return rows
    if part == "kappa":
        rows = []
        for k in c["kappas"]:
            t = pr.response_terms(pol, old + eta * d, old, None, k)
            rows.append(dict(kappa=k, eta=eta, bias_sq_kl=_kl_part(t),
                             bias_sq=_bias_sq(t, pr.target_gradient(t))))
        return rows
    if part == "k3":
        rows = []
        for r in c["ref_offsets"]:
            f = pr.k3_gradient_forms(pol, old + eta * d, old + r * d_ref)
            auto = np.asarray(f["autodiff"])
            norm = np.sqrt(np.sum(auto**2))

            def err(name):
                return float(np.max(np.abs(np.asarray(f[name]) - auto)))

            def rel(name):
                return float(np.sqrt(np.sum((np.asarray(f[name]) - auto) ** 2)) / norm)

            rows.append(dict(ref_offset=r, eta=eta, err_corrected=err("corrected"),
                             err_inverted=err("inverted"), rel_err_inverted=rel("inverted"),
                             rel_err_inverted_neg=rel("inverted_neg")))
        return rows
    if part == "mc":
        G, n = c["G"], c["n_reps"]
        terms = pr.response_terms(pol, old + eta * d, old, None, kappa)
        tgt = pr.target_gradient(terms)
        dec = pr.decomposition(terms, pr.exact_moments(terms, G), tgt)
        err, diff = pr.mc_squared_errors(terms, G, n, key, tgt)
        f = np.asarray(terms.prompt_probs)
        err, diff = np.asarray(err), np.asarray(diff)
        mse, se = float(f @ err.mean(1)), float(np.sqrt(f**2 @ (err.var(1, ddof=1) / n)))
        dm, dse = float(f @ diff.mean(1)), float(np.sqrt(f**2 @ (diff.var(1, ddof=1) / n)))
        return dict(G=G, exact_mse=dec["mse"], mc_mse=mse, mc_se=se, exact_diff=dec["diff_sq"],
                    mc_diff=dm, mc_diff_se=dse, z_mse=(mse - dec["mse"]) / se,
                    z_diff=(dm - dec["diff_sq"]) / dse)
    raise ValueError(f"config['part'] must be lemma11, eta, kappa, k3 or mc, got {part!r}")


def summary(tables) -> dict:
    """The fitted slopes and limits the checks use (public for tests)."""
    lm, et, kp = tables["lemma11"], tables["eta"], tables["kappa"]
    big = lm[lm.G >= FIT_FROM]
    last = lm.sort_values("G").iloc[-1]
    old = et[(et.kl_ref == "old") & (et.eta > 0)]
    out = dict(
        diff_slope=pr.loglog_slope(big.G, big.diff_sq),
        diff_ratio_last=float(last.G_diff_sq / last.diff_limit),
        var_ratio_last=float(last.var_ratio),
        mse_rel_last=float(abs(last.mse - last.predicted) / last.mse),
        is_slope=pr.loglog_slope(old.eta, old.bias_sq_is),
        kl_slope=pr.loglog_slope(old.eta, old.bias_sq_kl),
        kappa_slope=pr.loglog_slope(kp.kappa, kp.bias_sq_kl),
        is_at0=float(et[et.eta == 0].bias_sq_is.max()),
        kl_old_at0=float(et[(et.eta == 0) & (et.kl_ref == "old")].bias_sq.max()),
        kl_ref_at0=float(et[(et.eta == 0) & (et.kl_ref == "ref")].bias_sq_kl.max()),
    )
    return out


def _fmt_ci(t):
    return f"{t[0]:.3f} [{t[1]:.3f}, {t[2]:.3f}]"


def report(tables, s: Settings) -> Section:
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
              detail=f"largest {k3.err_corrected.max():.1e}"),
        check("K3 gradient: the inverted-ratio forms differ from autodiff",
              bool(k3.rel_err_inverted.min() > 1e-3 and k3.rel_err_inverted_neg.min() > 1e-6),
              k3.rel_err_inverted.to_numpy(), k3.rel_err_inverted_neg.to_numpy()),
        check("Lemma 11: slope of E||g_hat - U||^2 in G is -1 (within 0.1)",
              abs(ds[0] + 1) <= SLOPE_TOL, *ds, detail=_fmt_ci(ds)),
        check("Lemma 11: G E||g_hat - U||^2 within 10% of its limit at the largest G",
              abs(sm["diff_ratio_last"] - 1) <= 0.1, sm["diff_ratio_last"],
              detail=f"ratio {sm['diff_ratio_last']:.4f}"),
        check("Theorem 12: G Var / tr Sigma_1 within 2% of 1 at the largest G",
              abs(sm["var_ratio_last"] - 1) <= 0.02, sm["var_ratio_last"],
              detail=f"{sm['var_ratio_last']:.4f}"),
        check("Theorem 12: MSE within 1% of bias^2 + tr Sigma_1 / G at the largest G",
              sm["mse_rel_last"] <= 0.01, sm["mse_rel_last"], detail=f"{sm['mse_rel_last']:.2e}"),
        check("bias^2 vanishes at eta = 0 (ratio part, K3 with reference theta_old)",
              sm["is_at0"] < 1e-20 and sm["kl_old_at0"] < 1e-20, sm["is_at0"], sm["kl_old_at0"]),
        check("bias^2 (ratio part) grows as eta^2 (slope 2 within 0.1)",
              abs(is_s[0] - 2) <= SLOPE_TOL, *is_s, detail=_fmt_ci(is_s)),
        check("K3 bias (reference theta_old) grows as eta^2 (slope 2 within 0.1)",
              abs(kl_s[0] - 2) <= SLOPE_TOL, *kl_s, detail=_fmt_ci(kl_s)),
        check("K3 bias scales as kappa^2 (slope 2 within 0.01)", abs(kp_s[0] - 2) <= 0.01, *kp_s,
              detail=_fmt_ci(kp_s)),
        check("K3 bias with reference theta_ref != theta_old does not vanish at eta = 0",
              sm["kl_ref_at0"] > 1e-8, sm["kl_ref_at0"], detail=f"{sm['kl_ref_at0']:.3e}"),
        check(f"Monte Carlo within {Z_TOL} se of exact (MSE and E||g_hat - U||^2)",
              zmax <= Z_TOL, mc.z_mse.to_numpy(), mc.z_diff.to_numpy(),
              detail=f"largest |z| {zmax:.2f}"),
    ]
    return Section("Practical GRPO (Appendix A: Lemma 11, Theorem 12)", "\n".join(lines), checks)


def plot(tables, s: Settings, out_dir) -> None:
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


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=75)
