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
``G E||g_hat - U||^2`` is within 2% of its predicted limit at the largest G and its Richardson
extrapolation (the 1/G term eliminated between the two largest G) within 0.1%;
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

from grpo_theory.companions import practical as pr
from grpo_theory.core import SequencePolicy, n_sequences
from grpo_theory.experiments import Cell, Experiment
from grpo_theory._precision import float64

from .analysis import FIT_FROM, SLOPE_TOL, Z_TOL, plot, report, summary

NAME = "practical-grpo"
CLAIM = ("practical GRPO (std-normalised advantages, token ratios, K3 KL) is asymptotically "
         "Lemma 11's U-statistic; its MSE is bias^2 (O(eta^2), O(kappa^2 eta^2)) + tr Sigma_1/G "
         "(Theorem 12)")


@dataclass(frozen=True)
class Settings:
    """The exact cells (Lemma 11, eta, kappa, K3) and the Monte Carlo cells.

    Attributes:
        vocab_size: tokens of the tabular sequence policy.
        horizon: tokens per response.
        n_prompts: prompts of the problem.
        reward_scale: reward means drawn from U(0, reward_scale), so V(x) stays away from 1/2.
        problem_seed: seed of the problem's parameters and rewards.
        eta: the step theta = theta_old + eta * direction of the lemma11 and Monte Carlo cells.
        kappa: the K3 KL penalty's weight.
        ref_offset: theta_ref = theta_old + ref_offset * another direction.
        group_sizes: the group sizes G of the lemma11 cell.
        etas: the steps eta of the eta cell.
        kappas: the weights kappa of the kappa cell.
        ref_offsets: the reference offsets of the K3 cell.
        mc_groups: the group sizes of the Monte Carlo cells.
        n_reps: Monte Carlo replicates per Monte Carlo cell.
    """

    vocab_size: int = 2
    horizon: int = 3
    n_prompts: int = 2
    reward_scale: float = 0.5
    problem_seed: int = 0
    eta: float = 0.3
    kappa: float = 0.1
    ref_offset: float = 0.5
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


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=75)
