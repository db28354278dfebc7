"""Length weighting f_alpha(L) = L^(alpha-1): exact bias, length sensitivity, training.

Weighting each completion's term by ``f_alpha(L) = L^(alpha-1)`` (alpha = 1: sequence sum,
alpha = 0: per-sequence token mean) on a tabular sequence policy. Five kinds of cells, one table
each (``<out>/length-weighting/<kind>.csv``):

* ``exact``: the exact expectation by conditioning equals brute-force enumeration of all
  G-tuples; mean-centred ``E ghat_alpha = (G-1)/G grad E[f_alpha(L)(r - b)]|_{b=V}``; alpha = 1 is
  ``(G-1)/G grad J``.
* ``modes``: verl/TRL aggregation modes by enumeration, mapped to alpha.
* ``sweep`` (one cell per policy, estimator and G): bias (cosine, sin, relative norm) and length
  sensitivity (token-weight and gradient-norm slopes vs log L) over an alpha grid, prompts of
  three difficulties, plus an equal-length control; the trade-off frontier figure.
* ``mc`` (one cell per estimator and alpha): Monte Carlo means of the estimator agree with the
  exact expectation.
* ``training`` (one cell per estimator and alpha): E[L | incorrect] under sampled training
  (independent runs) and the exact expected flow.

PASS when the exact identities hold to 1e-12, only alpha = 1 is unbiased (mean-centred), no alpha
is both unbiased and length-invariant, equal lengths make every alpha unbiased, Monte Carlo
agrees within 4.5 se, alpha = 0 lengthens incorrect answers in training and alpha = 1 does not.

    grpo-theory length-weighting [--full] [--workers N]
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

import grpo_theory as gt
from grpo_theory import problems
from grpo_theory.companions import length_weighting as LW
from grpo_theory.core import PromptContext
from grpo_theory.experiments import Cell, Experiment, key_seed
from grpo_theory._precision import float64

from . import analysis as _report
from .analysis import EXACT_TOL, Z_TOL, checks, plot, training_summary

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "cells", "cell", "training_summary",
           "checks", "report", "plot", "EXPERIMENT"]

NAME = "length-weighting"
CLAIM = ("f_alpha(L)=L^(alpha-1): alpha=1 unbiased, alpha<1 ascends E[f(L)(r-b)]; no alpha is "
         "unbiased and length-invariant; alpha=0 lengthens incorrect answers")
ESTIMATORS = ("grpo_mean", "grpo_std_trl")
MODES_G = 3
MC_G = 8
TRAIN = dict(lr=2.0, G=8, B=8)  # stop-or-run policy training
MC_ALPHAS = (0.0, 0.5, 1.0)


@dataclass(frozen=True)
class Settings:
    """The exact, modes, sweep, Monte Carlo and training cells.

    Attributes:
        alphas: the exponents alpha of the sweep cells.
        sweep_G: the group sizes of the sweep cells.
        mc_reps: Monte Carlo replicates per Monte Carlo cell.
        seeds: independent training runs per training cell.
        steps: steps per training run.
        train_alphas: the exponents alpha trained.
        exact_G: the group sizes of the exact cell.
        train_est: the estimators trained.
        exact_alphas: the exponents alpha of the exact cell.
    """

    alphas: tuple
    sweep_G: tuple
    mc_reps: int
    seeds: int
    steps: int
    train_alphas: tuple
    exact_G: tuple
    train_est: tuple
    exact_alphas: tuple


SETTINGS = {
    "quick": Settings(alphas=tuple(float(a) for a in np.linspace(0, 1, 11)), sweep_G=(8,),
                      mc_reps=20_000, seeds=64, steps=300, train_alphas=(0.0, 1.0),
                      exact_G=(2, 3), train_est=("grpo_mean",), exact_alphas=(0.0, 1.0)),
    "full": Settings(alphas=tuple(float(a) for a in np.linspace(0, 1, 41)), sweep_G=(4, 8, 16),
                     mc_reps=200_000, seeds=32, steps=600, train_alphas=(0.0, 0.5, 1.0),
                     exact_G=(2, 3, 4), train_est=ESTIMATORS,
                     exact_alphas=(0.0, 0.25, 0.5, 0.75, 1.0)),
}

_TRAIN_COLS = {f"{k}{suf}": "float" for k in ("L_incorrect", "L_correct", "L_mean", "J")
               for suf in ("", "_se", "_flow")}
SCHEMA = {
    "exact": dict(G="int", estimator="str", alpha="float", err_enum="float",
                  err_surrogate="float?", err_gradJ="float?"),
    "modes": dict(mode="str", estimator="str", G="int", alpha="float?", description="str",
                  err_vs_alpha="float?", cos="float", sin="float", rel_bias="float"),
    "sweep": dict(policy="str", alpha="float", G="int", estimator="str", cos="float",
                  rel_bias="float", sin="float", cos_vs_alpha1="float", norm_ratio="float",
                  token_slope="float?", grad_slope="float?", cos_prompt0="float?",
                  cos_prompt1="float?", cos_prompt2="float?"),
    "mc": dict(estimator="str", alpha="float", G="int", n_reps="int", max_abs_z="float",
               max_err_zero_var="float", rel_err="float", rival_z="float", rival_gap="float"),
    "training": dict(estimator="str", alpha="float", step="int", n_seeds="int", lr="float",
                     G="int", B="int", **_TRAIN_COLS, drift_incorrect="float?",
                     drift_incorrect_se="float?", drift_correct="float?",
                     drift_correct_se="float?"),
}


def cells(s: Settings) -> list[Cell]:
    out = [Cell("exact", dict(part="exact", G=tuple(s.exact_G), alphas=tuple(s.exact_alphas)),
                "exact"),
           Cell(f"modes_G{MODES_G}", dict(part="modes", G=MODES_G), "modes")]
    out += [Cell(f"sweep_{p}_{e}_G{G}", dict(part="sweep", policy=p, estimator=e, G=G,
                                             alphas=tuple(s.alphas)), "sweep")
            for p in ("varied", "equal") for e in ESTIMATORS for G in s.sweep_G]
    out += [Cell(f"mc_{e}_a{a:g}", dict(part="mc", estimator=e, alpha=a, G=MC_G,
                                        n_reps=s.mc_reps), "mc")
            for e in ESTIMATORS for a in MC_ALPHAS]
    out += [Cell(f"training_{e}_a{a:g}", dict(part="training", estimator=e, alpha=float(a),
                                              steps=s.steps, n_seeds=s.seeds, **TRAIN),
                 "training")
            for e in s.train_est for a in s.train_alphas]
    return out


@float64
def cell(config: dict, key):
    """One table's cell: exact identities, modes, one alpha sweep, one MC check or one training."""
    part = config["part"]
    if part == "exact":
        return _exact_rows(config["G"], config["alphas"])
    if part == "modes":
        return _mode_rows(config["G"])
    if part == "sweep":
        eos = config["policy"] == "varied"
        pol = problems.length_policy() if eos else problems.length_policy(eos=False)
        rows = LW.alpha_sweep(pol, np.asarray(config["alphas"]), group_size=config["G"],
                              estimator=config["estimator"])
        return [dict(r, policy=config["policy"]) for r in rows]
    if part == "mc":
        return _mc_row(config["estimator"], config["alpha"], config["G"], config["n_reps"], key)
    if part == "training":
        return _training_rows(config, key)
    raise ValueError(f"config['part'] must be exact, modes, sweep, mc or training, got {part!r}")


def _exact_rows(G_list, alphas):
    pol = problems.length_policy(horizon=3)
    g = np.asarray(pol.problem().gradient())
    rows = []
    for G in G_list:
        for est in ESTIMATORS:
            for a in alphas:
                m, _ = LW.exact_expected_gradient(pol, a, est, G)
                e, _ = LW.enumerate_expected_gradient(pol, a, est, G)
                r = dict(G=G, estimator=est, alpha=a, err_enum=float(np.max(np.abs(m - e))),
                         err_surrogate=np.nan, err_gradJ=np.nan)
                if est == "grpo_mean":
                    s = LW.surrogate_gradient(pol, a)
                    r["err_surrogate"] = float(np.max(np.abs(m - (G - 1) / G * s)))
                    r["err_gradJ"] = (float(np.max(np.abs(m - (G - 1) / G * g)))
                                      if a == 1 else np.nan)
                rows.append(r)
    return rows


def _mode_rows(G):
    pol = problems.length_policy(horizon=3)
    g = np.asarray(pol.problem().gradient())
    T = int(np.max(pol.lengths))
    rows = []
    for est in ESTIMATORS:
        ref = {a: np.asarray(LW.exact_expected_gradient(pol, a, est, G)[0]) for a in (0.0, 1.0)}
        for mode in LW.AGGREGATION_MODES:
            m = np.asarray(LW.enumerate_expected_gradient(pol, mode, est, G)[0])
            alpha = LW.mode_alpha(mode)
            bm = LW.bias_metrics(m, (G - 1) / G * g)
            if alpha is None:
                err = np.nan
            else:
                scale = G / T if mode == "seq-mean-token-sum-norm" else 1.0  # verl: B/T_max, B=1
                err = float(np.max(np.abs(m - scale * ref[alpha])))
            rows.append(dict(mode=mode, estimator=est, G=G,
                             alpha=np.nan if alpha is None else alpha,
                             description=LW.AGGREGATION_MODES[mode][1], err_vs_alpha=err,
                             cos=bm["cos"], sin=bm["sin"], rel_bias=bm["rel_bias"]))
    return rows


def _mc_row(est_name, a, G, n_reps, key):
    """Monte Carlo mean of ghat_alpha over ``n_reps`` groups vs the exact expectation."""
    pol = problems.length_policy()
    prob = pol.problem()
    lengths = jnp.asarray(pol.lengths, dtype=jnp.float64)
    est = gt.get_estimator(est_name)
    exact, _ = LW.exact_expected_gradient(pol, a, est, G)
    x, y, z = gt.sample_groups(key, prob, n_reps, G)
    vals = prob.values()
    adv = est.advantage(z, PromptContext(prompt=x, value=vals[x], optimal_baseline=vals[x]))
    coef = lengths[y] ** (a - 1.0) / G
    est_vals = _per_group(prob, x, y, coef * adv)  # (R, D), chunked
    mean = est_vals.mean(axis=0)
    se = est_vals.std(axis=0, ddof=1) / np.sqrt(n_reps)
    ok = se > 0
    zsc = np.where(ok, (mean - np.asarray(exact)) / np.where(ok, se, 1.0), 0.0)
    # the rival: the unweighted (alpha = 1) estimator's exact mean; its largest abs z is what
    # the check's statistic would read were the rival the truth (in SCHEMA: a cell written
    # before it was added fails validation and is recomputed)
    rival, _ = LW.exact_expected_gradient(pol, 1.0, est, G)
    rival = np.asarray(rival)
    rz = np.where(ok, (mean - rival) / np.where(ok, se, 1.0), 0.0)
    return dict(estimator=est_name, alpha=a, G=G, n_reps=n_reps,
                max_abs_z=float(np.max(np.abs(zsc))),
                max_err_zero_var=float(np.max(np.abs(mean - exact)[~ok])) if (~ok).any() else 0.0,
                rel_err=float(np.linalg.norm(mean - exact) / np.linalg.norm(exact)),
                rival_z=float(np.max(np.abs(rz))),
                rival_gap=float(np.linalg.norm(rival - np.asarray(exact))
                                / np.linalg.norm(exact)))


def _per_group(prob, x, y, w, chunk=5000):
    out = []
    for i in range(0, x.shape[0], chunk):  # chunks bound memory; each chunk is vectorised
        out.append(np.asarray(jnp.einsum("bg,bgd->bd", w[i:i + chunk],
                                         prob.scores[x[i:i + chunk, None], y[i:i + chunk]])))
    return np.concatenate(out)


def _training_rows(config, key):
    """``n_seeds`` independent sampled runs (seeds drawn from the cell key) and the exact flow."""
    pol = problems.stop_or_run_policy()
    est, alpha, steps = config["estimator"], config["alpha"], config["steps"]
    lr, G, B = config["lr"], config["G"], config["B"]
    tr = LW.train_length_weighted(pol, alpha, steps, B, G, lr, key_seed(key, config["n_seeds"]),
                                  est)
    fl = LW.expected_flow(pol, alpha, steps, G, lr, est)
    rows = []
    S = tr["J"].shape[0]
    for t in range(steps):
        r = dict(estimator=est, alpha=alpha, step=t, n_seeds=S, lr=lr, G=G, B=B,
                 drift_incorrect=np.nan, drift_incorrect_se=np.nan, drift_correct=np.nan,
                 drift_correct_se=np.nan)
        for k in ("L_incorrect", "L_correct", "L_mean", "J"):
            v = tr[k][:, t]
            r[k] = float(v.mean())
            r[k + "_se"] = float(v.std(ddof=1) / np.sqrt(S))
            r[k + "_flow"] = float(fl[k][t])
        if t == steps - 1:
            d = tr["L_incorrect"][:, -1] - tr["L_incorrect"][:, 0]
            r["drift_incorrect"] = float(d.mean())
            r["drift_incorrect_se"] = float(d.std(ddof=1) / np.sqrt(S))
            dc = tr["L_correct"][:, -1] - tr["L_correct"][:, 0]
            r["drift_correct"] = float(dc.mean())
            r["drift_correct_se"] = float(dc.std(ddof=1) / np.sqrt(S))
        rows.append(r)
    return rows


# --- summary, checks, report, figure: simulations/_length_weighting_report.py --------------------


def report(tables, s):
    """The section (:func:`._length_weighting_report.report`) with this driver's cell shapes."""
    return _report.report(tables, s, mc_g=MC_G, modes_g=MODES_G, train=TRAIN)


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=42)
