r"""Baselines beyond the prompt: which of the field's baselines are unbiased, and what they cost.

The estimate is ``ghat = (1/BG) sum_x sum_i (r_xi - b_xi) s_xi``; it is unbiased iff ``b_xi`` is
independent of ``(r_xi, s_xi)`` given the prompt. The estimators (registry names):

* ``grpo`` (leave-one-out, the reference) and ``grpo_mean`` (the self-inclusive group mean);
* ``jspo``: JSPO's two-level leave-one-out James-Stein baseline (other prompts only): unbiased;
  ``jspo_pooled``: JSPO++'s pooled form (own prompt included): biased;
* ``norm_weighted``: the squared-score-norm-weighted group mean (the form of verl's optimal
  token baseline and of the "exact optimal baseline"), self-inclusive: biased;
  ``norm_weighted_loo``: its leave-one-out form: unbiased;
* ``reinforce_plus_plus_baseline_verl``: group mean, then whitening over the batch;
* ``spo_raw`` and ``spo``: SPO's per-prompt Beta tracker (at its initial state, alpha = beta =
  1/2), before and after the recipe's batch whitening: exact conditional on the tracker;
* in a table of their own, the history baselines ``ebpo`` (an empirical-Bayes prior over
  prompts' means, Welford-updated after the step), ``dbb`` (a discounted Beta-Bernoulli tracker
  per prompt) and ``kae`` (kernel smoothing of a prompt's past batch means, mixed with the
  leave-one-out mean), each exact conditional on a state reached by a sampled history, and
  ``basis`` (the other prompts' mean as the baseline, any G, by the pooled route), beside their
  self-inclusive rivals ``ebpo_self_inclusive`` (the prior updated with the current batch before
  the advantage) and ``basis_self_inclusive`` (the mean over all prompts).

A family of problems: four prompts, each a two-armed softmax whose first arm is correct, with
pass rates ``p_x = sigmoid(logit(m) + spread * q_x)``, ``q = (-1.5, -0.5, 0.5, 1.5)`` (the
spread of pass rates across prompts), plus the toy ``p = (0.1, 0.3, 0.6, 0.9)``. Every number is
exact (:func:`grpo_theory.core.batch_moments`, by count states) under two batch designs: one of
each prompt per batch (``"each"``, B = 4) and B = 4 prompts drawn independently (the package's
default), with Monte Carlo (:func:`grpo_theory.mc_mse`) beside the second.

The scaling law under pooling: on the scaling family (:func:`grpo_theory.problems.scaling_family_bandit`,
whose leave-one-out G* runs from 2.4 to about 70 as its reward gap delta falls), the exact MSE of
JSPO and of leave-one-out at a fixed budget N = BG for every G of a grid (B = N/G prompts drawn
independently; JSPO by the pooled route, a dynamic programme over the other groups' statistics),
the best G of each, and Monte Carlo at both best G's; the same for BASIS, whose baseline is the
other prompts' mean, at every G and G = 1 (:mod:`.pooled_basis`).

SPO over a training path: the policy follows the expected path of unbiased training (the drift
model), SPO's per-prompt trackers are updated from sampled rewards as the recipe's code does,
and the exact MSE of its raw step given each sampled tracker is averaged over the histories.

PASS when the count states equal brute-force enumeration for every estimator and both designs
(1e-9; the rival, JSPO++'s route against JSPO's enumeration, is far off), Monte Carlo lies
within 4 se of every exact MSE while the rival (leave-one-out's exact MSE in place of the
estimator's) lies beyond it, the unbiased estimators have zero bias (1e-12) while the
self-inclusive ones are biased in every cell, JSPO's MSE is below leave-one-out's in every
cell with G <= 4 of both designs (at larger G its estimated shrinkage can lose: reported), the
pooled route equals the counts route where both apply (1e-10; the
rival, leave-one-out's MSE, is far off), and Monte Carlo lies within 4 se of the pooled law's
MSE at every checked (B, G) while leave-one-out's law at the same (B, G) lies beyond, and SPO's
step given its tracker along a drifting policy has the same exact MSE by a closed form and by
``batch_moments`` at the tracker's state (1e-10; the rival, the initial tracker, is off), and
for EBPO, DBB, KAE and BASIS: the count states equal brute-force enumeration at a sampled state
(1e-9; the rival, the state ignored, or for BASIS its self-inclusive form, is off), Monte Carlo
at that state lies within 4 se of the exact MSE while leave-one-out's lies beyond, and the four
are unbiased (1e-12) while both self-inclusive rivals are biased, and along a drifting policy
EBPO, DBB and KAE stay unbiased given their sampled states at every step (1e-12) while EBPO's
self-inclusive form along the same histories is biased (:mod:`.history_path`), and Monte Carlo
at BASIS's best G under the budget lies within 4 se of its exact MSE by the pooled route while
the MSE without a baseline at the same (B, G) lies beyond (:mod:`.pooled_basis`). The small
transformer trained at equal rollouts with five of the estimators (:mod:`.lm_training`) is a
measurement, not a check.

    grpo-theory baselines [--full] [--workers N]
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import expit, logit

import grpo_theory as gt
from grpo_theory.core import (PromptContext, at_state, batch_moments, enumerated_moments,
                              get_estimator, scaling_constants, spo)
from grpo_theory.problems import scaling_family_bandit
from grpo_theory.experiments import Cell, Experiment, key_seed
from grpo_theory._precision import float64
from .analysis import checks, plot, report, summary
from .history_path import bootstrap_interval, history_path_rows
from .lm_training import SCHEMA as LM_SCHEMA, lm_training_cells, lm_training_rows
from .pooled_basis import SCHEMA as BASIS_SCHEMA, pooled_basis_cells, pooled_basis_rows

NAME = "baselines"
CLAIM = ("cross-prompt (JSPO) and leave-one-out weighted baselines are unbiased; JSPO beats "
         "leave-one-out at small G and lowers the best G at a fixed budget; self-inclusive "
         "weighted and pooled baselines are biased (exact)")

#: the estimators compared with leave-one-out (``grpo``)
ESTIMATORS = ("grpo", "grpo_mean", "jspo", "jspo_pooled", "norm_weighted", "norm_weighted_loo",
              "reinforce_plus_plus_baseline_verl", "spo_raw", "spo")
#: those whose baseline excludes the response's own reward
UNBIASED = ("grpo", "jspo", "norm_weighted_loo", "spo_raw")
#: the quantiles of the pass rates' spread
QUANTILES = (-1.5, -0.5, 0.5, 1.5)
TOY = (0.1, 0.3, 0.6, 0.9)
#: the history and cross-prompt baselines of the ``history`` table, then their rivals
HISTORY = ("ebpo", "dbb", "kae", "basis")
HISTORY_RIVALS = ("ebpo_self_inclusive", "basis_self_inclusive")


@dataclass(frozen=True)
class Settings:
    """The sweep.

    Attributes:
        problems: ``(mean pass rate, spread)`` pairs of the family (``None``: the toy).
        group_sizes: the group sizes G.
        n_reps: Monte Carlo replicates per (cell, estimator).
        kept_rates: one-prompt pass rates at which the self-inclusive weighted baseline's kept
            share of the gradient is tabulated; kept_sizes: its group sizes.
        train_problem, train_sizes, train_steps, train_seeds, train_eta: the training at equal
            rollouts (family member, G, steps, seeds, step size).
        estimators: the registry names compared (leave-one-out, ``grpo``, among them).
        lm_sizes, lm_budget, lm_steps, lm_seeds, lm_lr, lm_eval, lm_pool: the training of the
            small transformer at equal rollouts (:mod:`.lm_training`): its G's, responses a
            step, steps, seeds, Adam's learning rate, held-out and training questions.
        history_problems, history_size, history_steps, history_reps: the ``history`` table's
            family members, G, steps of the sampled history that sets the state, and Monte
            Carlo replicates; history_mc: how many of its members (the first) get Monte Carlo.
    """

    problems: tuple
    group_sizes: tuple
    n_reps: int
    kept_rates: tuple = (0.1, 0.3)
    kept_sizes: tuple = (2, 4, 8)
    train_problem: tuple = (0.2, 1.0)
    train_sizes: tuple = (4,)
    train_steps: int = 40
    train_seeds: int = 16
    train_eta: float = 0.5
    estimators: tuple = ESTIMATORS
    pooled_deltas: tuple = (0.5, 0.1, 0.02)
    pooled_budget: int = 64
    pooled_sizes: tuple = (2, 4, 8, 16, 32)
    pooled_reps: int = 20_000
    spo_seeds: int = 64
    spo_rho: float = 0.9
    history_problems: tuple = (None, (0.5, 1.0), (0.2, 1.0))
    history_size: int = 4
    history_steps: int = 8
    history_reps: int = 20_000
    history_mc: int = 1
    path_histories: int = 16
    path_every: int = 10
    lm_sizes: tuple = (4,)
    lm_budget: int = 32
    lm_steps: int = 10
    lm_seeds: int = 8
    lm_lr: float = 1e-3
    lm_eval: int = 100
    lm_pool: int = 2000


SETTINGS = {
    "quick": Settings(problems=(None, (0.5, 0.0), (0.5, 1.0), (0.5, 2.0), (0.2, 1.0)),
                      group_sizes=(2, 4), n_reps=20_000),
    "full": Settings(problems=(None,) + tuple((m, s) for m in (0.1, 0.2, 0.5)
                                              for s in (0.0, 0.5, 1.0, 2.0, 3.0)),
                     group_sizes=(2, 4, 8), n_reps=100_000, kept_rates=(0.05, 0.1, 0.3, 0.5),
                     kept_sizes=(2, 4, 8, 16), train_sizes=(2, 4, 8), train_steps=60,
                     train_seeds=64,
                     # the scaling family's full members: leave-one-out's G* from 2 to 128
                     pooled_deltas=(0.5, 0.25, 0.1, 0.047, 0.0226, 0.0111, 0.0055),
                     pooled_budget=256, pooled_sizes=(2, 4, 8, 16, 32, 64, 128),
                     pooled_reps=100_000, spo_seeds=256, history_mc=3, path_histories=64,
                     path_every=5, lm_sizes=(2, 4, 8), lm_steps=40, lm_seeds=32),
}

SCHEMA = {
    "table": dict(problem="str", mean_rate="float?", spread="float?", rates="str", G="int",
                  B="int", design="str", estimator="str", exact_mse="float",
                  relative_bias="float", kept="float", ratio_loo="float", n_states="int",
                  mc="float?", mc_se="float?", z="float?", rival_z="float?"),
    "brute": dict(design="str", estimator="str", G="int", B="int", rel_err="float",
                  rival_rel_err="float"),
    "kept": dict(p="float", G="int", estimator="str", kept="float", relative_bias="float"),
    "training": dict(problem="str", G="int", B="int", steps="int", n_seeds="int", eta="float",
                     estimator="str", start="float", final="float", final_lo="float",
                     final_hi="float", diff_loo="float", diff_lo="float", diff_hi="float"),
    "pooled": dict(delta="float", N="int", G="int", B="int", estimator="str", exact_mse="float",
                   ratio_loo="float", route="str", n_states="int", g_star_loo="float",
                   mc="float?", mc_se="float?", z="float?", rival_z="float?"),
    "pooled_route": dict(delta="float", G="int", B="int", rel_err="float",
                         rival_rel_err="float"),
    "history": dict(problem="str", rates="str", G="int", B="int", steps="int",
                    estimator="str", exact_mse="float", relative_bias="float", kept="float",
                    ratio_loo="float", state_err="float?", mc="float?", mc_se="float?",
                    z="float?", rival_z="float?"),
    "lm_training": LM_SCHEMA,
    "pooled_basis": BASIS_SCHEMA,
    "history_brute": dict(estimator="str", G="int", B="int", rel_err="float",
                          rival_rel_err="float"),
    "history_path": dict(problem="str", G="int", B="int", eta="float", step="int",
                         histories="int", estimator="str", objective="float", loo_mse="float",
                         ratio="float", ratio_lo="float", ratio_hi="float",
                         max_relative_bias="float", min_relative_bias="float"),
    "spo_path": dict(problem="str", G="int", B="int", eta="float", rho="float", step="int",
                     n_seeds="int", objective="float", loo_mse="float", oracle_ratio="float",
                     spo_ratio="float", spo_lo="float", spo_hi="float", route_err="float",
                     rival_err="float"),
}


def family_bandit(mean_rate=None, spread=None) -> gt.SoftmaxBandit:
    """Four two-armed prompts with spread pass rates (``None``: the toy (0.1, 0.3, 0.6, 0.9))."""
    p = (np.asarray(TOY) if mean_rate is None
         else expit(logit(mean_rate) + spread * np.asarray(QUANTILES)))
    return _two_armed(p)


def _two_armed(p) -> gt.SoftmaxBandit:
    p = np.asarray(p, np.float64)
    return gt.SoftmaxBandit(np.log(np.stack([p, 1 - p], 1)), [[1.0, 0.0]] * len(p))


def each_design_brute_force(bandit, estimator, G: int):
    """``(E ghat, MSE)`` by enumerating every outcome of a batch holding each prompt once.

    A route coded apart from the count states: every response and reward of every prompt's
    group, ``(2K)^(G P)`` outcomes (tiny problems only).
    """
    pr = bandit.problem()
    est = get_estimator(estimator)
    P, K = pr.n_prompts, pr.n_responses
    p, mu, S = (np.asarray(a) for a in (pr.probs, pr.reward_means, pr.scores))
    sq = np.sum(S**2, -1)
    combos = np.array(list(itertools.product(range(2 * K), repeat=G * P))).reshape(-1, P, G)
    y, z = combos // 2, (combos % 2).astype(np.float64)
    x = np.arange(P)[None, :, None]
    prob = np.prod(p[x, y] * np.where(z == 1, mu[x, y], 1 - mu[x, y]), axis=(1, 2))
    n = len(combos)
    ctx = PromptContext(prompt=jnp.broadcast_to(jnp.arange(P), (n, P)),
                        value=jnp.broadcast_to(pr.values(), (n, P)),
                        optimal_baseline=jnp.broadcast_to(pr.optimal_baselines(), (n, P)),
                        score_sq=jnp.asarray(sq[x, y]), state=est.initial_state(P))
    adv = np.asarray(est.advantage(jnp.asarray(z), ctx))
    g = np.einsum("npg,npgd->nd", adv, S[x, y]) / (P * G)
    grad = np.asarray(pr.gradient())
    return prob @ g, float(prob @ np.sum((g - grad) ** 2, axis=1))


def cells(s: Settings) -> list[Cell]:
    names = list(s.estimators)
    out = [Cell("brute", dict(estimators=names), kind="brute"),
           Cell("kept", dict(rates=list(s.kept_rates), sizes=list(s.kept_sizes)), kind="kept")]
    for G in s.train_sizes:
        m, sp = s.train_problem
        out.append(Cell(f"train_G{G}", dict(train=True, mean_rate=m, spread=sp, G=G,
                                            steps=s.train_steps, seeds=s.train_seeds,
                                            eta=s.train_eta, estimators=names),
                        kind="training"))
    m, sp = s.train_problem
    out.append(Cell("spo_path", dict(spo_path=True, mean_rate=m, spread=sp,
                                     G=s.train_sizes[0], steps=s.train_steps, eta=s.train_eta,
                                     seeds=s.spo_seeds, rho=s.spo_rho), kind="spo_path"))
    out.append(Cell("history_path", dict(history_path=True, mean_rate=m, spread=sp,
                                         problem=f"m{m:g}_s{sp:g}", G=s.train_sizes[0],
                                         steps=s.train_steps, eta=s.train_eta,
                                         histories=s.path_histories, every=s.path_every),
                    kind="history_path"))
    out.append(Cell("history_brute", dict(history_brute=True), kind="history_brute"))
    out += lm_training_cells(s.lm_sizes, s.lm_budget, s.lm_steps, s.lm_seeds, s.lm_lr,
                             s.lm_eval, s.lm_pool)
    for j, prob in enumerate(s.history_problems):
        pid = "toy" if prob is None else f"m{prob[0]:g}_s{prob[1]:g}"
        out.append(Cell(f"history_{pid}", dict(history=True, problem=pid,
                                               mean_rate=None if prob is None else prob[0],
                                               spread=None if prob is None else prob[1],
                                               G=s.history_size, steps=s.history_steps,
                                               n_reps=s.history_reps if j < s.history_mc
                                               else None), kind="history"))
    for d in s.pooled_deltas:
        out.append(Cell(f"pooled_d{d:g}", dict(pooled=True, delta=d, N=s.pooled_budget,
                                               sizes=list(s.pooled_sizes), n_reps=s.pooled_reps),
                        kind="pooled"))
        out.append(Cell(f"pooled_route_d{d:g}", dict(pooled_route=True, delta=d),
                        kind="pooled_route"))
    out += pooled_basis_cells(s.pooled_deltas, s.pooled_budget, s.pooled_sizes, s.pooled_reps)
    for prob in s.problems:
        pid = "toy" if prob is None else f"m{prob[0]:g}_s{prob[1]:g}"
        for G in s.group_sizes:
            out.append(Cell(f"{pid}_G{G}", dict(problem=pid, mean_rate=None if prob is None
                                                else prob[0], spread=None if prob is None
                                                else prob[1], G=G, n_reps=s.n_reps,
                                                estimators=names)))
    return out


def _brute_rows(names) -> list[dict]:
    """Count states against the two brute-force routes, on two prompts (G = 2, B = 2)."""
    bandit = _two_armed([0.2, 0.7])
    rows = []
    for name in names:
        for design in ("independent", "each"):
            if design == "independent":
                mean, mse = enumerated_moments(bandit, name, 2, 2)
                _, rival = enumerated_moments(bandit, "jspo_pooled" if name == "jspo"
                                              else "jspo", 2, 2)
            else:
                mean, mse = each_design_brute_force(bandit, name, 2)
                _, rival = each_design_brute_force(bandit, "jspo_pooled" if name == "jspo"
                                                   else "jspo", 2)
            bm = batch_moments(bandit, name, 2, 2, design=design)
            scale = max(mse, 1e-300)
            err = max(abs(bm.mse - mse) / scale,
                      float(np.max(np.abs(bm.mean - np.asarray(mean)))) / np.sqrt(scale))
            rows.append(dict(design=design, estimator=name, G=2, B=2, rel_err=err,
                             rival_rel_err=abs(bm.mse - rival) / scale))
    return rows


def _kept_rows(rates, sizes) -> list[dict]:
    rows = []
    for p in rates:
        for G in sizes:
            for name in ("norm_weighted", "norm_weighted_loo", "grpo_mean"):
                bm = batch_moments(_two_armed([p]), name, G)
                rows.append(dict(p=float(p), G=int(G), estimator=name, kept=bm.kept,
                                 relative_bias=bm.relative_bias))
    return rows


def _training_rows(config, key) -> list[dict]:
    """Every estimator trained at equal rollouts (B = 4 prompts of G a step, the same steps and
    seeds): the final objective J and its difference to leave-one-out's, paired by seed."""
    G, T, n, eta = config["G"], config["steps"], config["seeds"], config["eta"]
    bandit = family_bandit(config["mean_rate"], config["spread"])
    seeds = list(range(n))
    names = config["estimators"]
    finals, start = {}, None
    for name in names:
        r = gt.train(bandit, name, 4, G, T, eta=eta, seeds=seeds, log_every=T)
        obj = np.asarray(r.objective)
        finals[name], start = obj[:, -1], float(obj[0, 0])
    rng = np.random.default_rng(key_seed(key))
    rows = []
    for name in names:
        lo, hi = bootstrap_interval(finals[name], rng)
        dlo, dhi = bootstrap_interval(finals[name] - finals["grpo"], rng)
        rows.append(dict(problem=f"m{config['mean_rate']:g}_s{config['spread']:g}", G=G, B=4,
                         steps=T, n_seeds=n, eta=eta, estimator=name, start=start,
                         final=float(finals[name].mean()), final_lo=lo, final_hi=hi,
                         diff_loo=float(np.mean(finals[name] - finals["grpo"])), diff_lo=dlo,
                         diff_hi=dhi))
    return rows


def _pooled_route_rows(delta) -> list[dict]:
    """The pooled route against the counts route where both apply (B = 3, G = 4)."""
    bandit = scaling_family_bandit(delta)
    a = batch_moments(bandit, "jspo", 4, 3, route="counts")
    b = batch_moments(bandit, "jspo", 4, 3, route="pooled")
    loo = batch_moments(bandit, "grpo", 4, 3)
    return [dict(delta=float(delta), G=4, B=3, rel_err=abs(b.mse - a.mse) / a.mse,
                 rival_rel_err=abs(loo.mse - a.mse) / a.mse)]


def _pooled_rows(config, key) -> list[dict]:
    """Exact MSE of leave-one-out and JSPO at a fixed budget N over the G grid (B = N/G), and
    Monte Carlo of JSPO at its best G and at leave-one-out's."""
    d, N = config["delta"], config["N"]
    bandit = scaling_family_bandit(d)
    c = scaling_constants(bandit)
    g_star = float(1 + np.sqrt(c.c3 / c.c1))
    rows = []
    for G in config["sizes"]:
        B = N // G
        loo = batch_moments(bandit, "grpo", G, B)
        js = batch_moments(bandit, "jspo", G, B, max_states=20_000_000)
        for name, bm in (("grpo", loo), ("jspo", js)):
            rows.append(dict(delta=float(d), N=N, G=int(G), B=int(B), estimator=name,
                             exact_mse=bm.mse, ratio_loo=bm.mse / loo.mse, route=bm.route,
                             n_states=bm.n_states, g_star_loo=g_star, mc=None, mc_se=None,
                             z=None, rival_z=None))
    best = {n: min((r for r in rows if r["estimator"] == n), key=lambda r: r["exact_mse"])["G"]
            for n in ("grpo", "jspo")}
    seeds = key_seed(key, 2)
    for G, seed in zip(sorted(set(best.values())), seeds):
        r = next(r for r in rows if r["estimator"] == "jspo" and r["G"] == G)
        loo = next(q for q in rows if q["estimator"] == "grpo" and q["G"] == G)["exact_mse"]
        mc = gt.mc_mse(bandit, "jspo", G, N // G, n_reps=config["n_reps"], seed=seed)
        r.update(mc=mc.value, mc_se=mc.se, z=(mc.value - r["exact_mse"]) / mc.se,
                 rival_z=(loo - mc.value) / mc.se)
    return rows


def _given_baseline_mse(problem, b, G: int, B: int) -> np.ndarray:
    """Exact MSE of the step whose baseline for prompt x is ``b[..., x]``, fixed before the step
    (B prompts iid, binary rewards): ``(E_x[E((r - b_x)^2 ||s||^2 | x)/G + (1 - 1/G)
    ||g(x)||^2] - ||grad J||^2) / B``. Coded apart from ``batch_moments``."""
    p, mu = np.asarray(problem.probs), np.asarray(problem.reward_means)
    sq = np.sum(np.asarray(problem.scores) ** 2, axis=-1)  # (P, K)
    f, gx = np.asarray(problem.prompt_probs), np.asarray(problem.prompt_gradients())
    e1, e0 = np.sum(p * mu * sq, axis=1), np.sum(p * (1 - mu) * sq, axis=1)  # E[1{r=1,0} ||s||^2]
    e = e1 * (1 - b) ** 2 + e0 * b**2  # (..., P)
    g = f @ gx
    return ((e / G + (1 - 1 / G) * np.sum(gx**2, axis=1)) @ f - g @ g) / B


def _spo_path_rows(config, key) -> list[dict]:
    """SPO's tracker along a drifting policy: the exact MSE of its raw step given the tracker,
    averaged over sampled tracker histories, against leave-one-out's and the oracle's.

    The drift model: the policy follows the expected path of unbiased training,
    ``theta_{t+1} = theta_t + eta grad J(theta_t)``; each step B prompts are drawn, and the last
    response of each drawn prompt updates its tracker, as the recipe's code does."""
    G, B, T, eta, rho = config["G"], 4, config["steps"], config["eta"], config["rho"]
    n = config["seeds"]
    bandit = family_bandit(config["mean_rate"], config["spread"])
    est = get_estimator("spo_raw") if rho == 0.9 else spo(rho, whiten=False)
    P = bandit.problem().n_prompts
    rng = np.random.default_rng(key_seed(key))
    alpha, beta = np.full((n, P), 0.5), np.full((n, P), 0.5)
    theta = np.asarray(bandit.params, np.float64)
    rows = []
    for t in range(T + 1):
        pol = bandit.with_params(theta)
        pr = pol.problem()
        V = np.asarray(pr.values())
        loo = batch_moments(pol, "grpo", G, B).mse
        spo_mse = _given_baseline_mse(pr, alpha / (alpha + beta), G, B)  # (n,)
        if t % 5 == 0:
            i = t // 5 % n
            bm = batch_moments(pol, est, G, B, state=(jnp.asarray(alpha[i]),
                                                      jnp.asarray(beta[i])))
            start = batch_moments(pol, est, G, B)  # the rival: the tracker ignored
            lo, hi = bootstrap_interval(spo_mse / loo, rng)
            rows.append(dict(problem=f"m{config['mean_rate']:g}_s{config['spread']:g}", G=G,
                             B=B, eta=eta, rho=rho, step=t, n_seeds=n,
                             objective=float(pr.objective()), loo_mse=loo,
                             oracle_ratio=float(_given_baseline_mse(pr, V, G, B)) / loo,
                             spo_ratio=float(np.mean(spo_mse)) / loo, spo_lo=lo, spo_hi=hi,
                             route_err=abs(bm.mse - spo_mse[i]) / spo_mse[i],
                             rival_err=abs(start.mse - spo_mse[i]) / spo_mse[i]))
        seen = np.zeros((n, P), bool)
        x = rng.choice(P, size=(n, B), p=np.asarray(pr.prompt_probs))
        seen[np.arange(n)[:, None], x] = True
        r = (rng.random((n, P)) < V[None]).astype(np.float64)  # a drawn prompt's last reward
        alpha = np.where(seen, rho * alpha + r, alpha)
        beta = np.where(seen, rho * beta + 1 - r, beta)
        theta = theta + eta * np.asarray(pol.gradient())
    return rows


def _sampled_state(est, problem, G: int, B: int, steps: int, rng):
    """``est``'s state after ``steps`` steps at a fixed policy: B prompts drawn iid, G binary
    rewards each, the state updated after each step as training does."""
    V, f = np.asarray(problem.values()), np.asarray(problem.prompt_probs)
    state = est.initial_state(problem.n_prompts)
    update = jax.jit(est.update_state)  # one compilation, not one per operation
    for _ in range(steps):
        x = rng.choice(problem.n_prompts, size=B, p=f)
        z = (rng.random((B, G)) < V[x][:, None]).astype(np.float64)
        state = update(state, jnp.asarray(x), jnp.asarray(z), PromptContext())
    return state


def _enumerable(est, state):
    """``est`` at ``state`` (stateful ones) with its compiled advantage, for enumeration."""
    out = at_state(est, state) if est.stateful else est
    return dataclasses.replace(out, advantage=jax.jit(est.advantage))


def _history_states(bandit, G: int, B: int, steps: int, rng) -> dict:
    """A sampled state of every history baseline (the rivals share their estimator's)."""
    pr = bandit.problem()
    st = {n: _sampled_state(get_estimator(n), pr, G, B, steps, rng)
          for n in ("ebpo", "dbb", "kae")}
    return dict(st, ebpo_self_inclusive=st["ebpo"], basis=None, basis_self_inclusive=None)


def _history_brute_rows() -> list[dict]:
    """Count states at a sampled state against brute-force enumeration (two prompts, G = 3,
    B = 2); the rival: the moments with the state ignored (BASIS: its self-inclusive form's)."""
    bandit = _two_armed([0.3, 0.5])  # alike rates: EBPO's prior moves its baseline
    states = _history_states(bandit, 3, 2, 6, np.random.default_rng(0))
    rows = []
    for name in HISTORY:  # the rivals' routes are the same code (tests/core checks them)
        est, st = get_estimator(name), states[name]
        mean, mse = enumerated_moments(bandit, _enumerable(est, st), 3, 2)
        bm = batch_moments(bandit, est, 3, 2, state=st)
        if est.stateful:
            rival = batch_moments(bandit, est, 3, 2).mse
        else:
            rival = batch_moments(bandit, "basis_self_inclusive" if name == "basis" else "basis",
                                  3, 2).mse
        err = max(abs(bm.mse - mse) / mse,
                  float(np.max(np.abs(bm.mean - np.asarray(mean)))) / np.sqrt(mse))
        rows.append(dict(estimator=name, G=3, B=2, rel_err=err,
                         rival_rel_err=abs(rival - mse) / mse))
    return rows


def _history_rows(config, key) -> list[dict]:
    """Exact moments of EBPO, DBB, KAE (given a state from a sampled history) and BASIS, with
    their rivals, B = 4 prompts drawn independently; Monte Carlo at the state beside the four."""
    G, B, T, R = config["G"], 4, config["steps"], config["n_reps"]
    bandit = family_bandit(config["mean_rate"], config["spread"])
    rates = " ".join(f"{v:.3f}" for v in np.asarray(bandit.problem().values()))
    rng = np.random.default_rng(key_seed(key))
    states = _history_states(bandit, G, B, T, rng)
    loo = batch_moments(bandit, "grpo", G, B).mse
    seeds = key_seed(key, len(HISTORY))
    rows = []
    for i, name in enumerate(HISTORY + HISTORY_RIVALS):
        est, st = get_estimator(name), states[name]
        bm = batch_moments(bandit, est, G, B, state=st)
        row = dict(problem=config["problem"], rates=rates, G=G, B=B, steps=T, estimator=name,
                   exact_mse=bm.mse, relative_bias=bm.relative_bias, kept=bm.kept,
                   ratio_loo=bm.mse / loo, state_err=None, mc=None, mc_se=None, z=None,
                   rival_z=None)
        if est.stateful:  # how far the state moves the MSE (the rival: the state ignored)
            row["state_err"] = abs(batch_moments(bandit, est, G, B).mse - bm.mse) / bm.mse
        if name in HISTORY and R:
            mc = gt.mc_mse(bandit, at_state(est, st) if est.stateful else est, G, B,
                           n_reps=R, seed=seeds[i])
            row.update(mc=mc.value, mc_se=mc.se, z=(mc.value - bm.mse) / mc.se,
                       rival_z=(loo - mc.value) / mc.se)
        rows.append(row)
    return rows


@float64
def cell(config: dict, key) -> list[dict]:
    """Exact moments of every estimator under both designs (and Monte Carlo) at one (problem, G);
    the brute-force and kept-share cells."""
    if config.get("spo_path"):
        return _spo_path_rows(config, key)
    if config.get("history_path"):
        return history_path_rows(family_bandit(config["mean_rate"], config["spread"]), config,
                                 key)
    if config.get("history"):
        return _history_rows(config, key)
    if config.get("history_brute"):
        return _history_brute_rows()
    if config.get("lm_train"):
        return lm_training_rows(config, key)
    if config.get("pooled_basis"):
        return pooled_basis_rows(config, key)
    if config.get("pooled"):
        return _pooled_rows(config, key)
    if config.get("pooled_route"):
        return _pooled_route_rows(config["delta"])
    if "mean_rate" not in config and "rates" not in config:
        return _brute_rows(config["estimators"])
    if "rates" in config:
        return _kept_rows(config["rates"], config["sizes"])
    if config.get("train"):
        return _training_rows(config, key)
    G, R = config["G"], config["n_reps"]
    bandit = family_bandit(config["mean_rate"], config["spread"])
    rates = " ".join(f"{v:.3f}" for v in np.asarray(bandit.problem().values()))
    names = config["estimators"]
    seeds = key_seed(key, len(names))
    rows = []
    for design in ("each", "independent"):
        exact = {n: batch_moments(bandit, n, G, 4, design=design) for n in names}
        loo = exact["grpo"].mse
        for n, seed in zip(names, seeds):
            bm = exact[n]
            row = dict(problem=config["problem"], mean_rate=config["mean_rate"],
                       spread=config["spread"], rates=rates, G=G, B=4, design=design,
                       estimator=n, exact_mse=bm.mse, relative_bias=bm.relative_bias,
                       kept=bm.kept, ratio_loo=bm.mse / loo, n_states=bm.n_states, mc=None,
                       mc_se=None, z=None, rival_z=None)
            if design == "independent":  # the Monte Carlo engine draws prompts independently
                mc = gt.mc_mse(bandit, n, G, 4, n_reps=R, seed=seed)
                row.update(mc=mc.value, mc_se=mc.se, z=(mc.value - bm.mse) / mc.se,
                           rival_z=(loo - mc.value) / mc.se if n != "grpo" else None)
            rows.append(row)
    return rows


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=95)
