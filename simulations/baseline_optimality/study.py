r"""Claim 2 — optimality of the oracle among prompt-only baselines (Corollary 5).

For a constant prompt-only baseline b(x), with eps = Z - V(x) (Corollary 5),

.. math:: \mathrm{MSE}(b) - \mathrm{MSE}_{oracle} = \frac{1}{BG} E_X\Big[(V - b)^2 E[\|s\|^2|X]
          + 2 (V - b) E[\|s\|^2 \varepsilon | X]\Big].

Under Assumption 2 (||s||^2 uncorrelated with Z given x) the cross term vanishes and no b beats
the oracle b = V. Two tabular softmax bandits (3 prompts x 4 responses, same reward means):

* ``a2_holds``: uniform policy (all logits 0), so ||s(x, y)||^2 = 1 - 1/K is the same for every
  response and Assumption 2 holds exactly (b*(x) = V(x));
* ``a2_fails``: peaked logits whose rare responses are the correct ones, so large score norms go
  with Z = 1: the cross term is non-zero and the MSE-optimal baseline
  b*(x) = E[||s||^2 Z | x] / E[||s||^2 | x] beats V(x).

One cell per (problem, G) sweeps the baselines: shifts b = V + delta, the line
b = V + t (b* - V) through the oracle (t = 0) and b* (t = 1), random b(x) ~ U(0, 1) (drawn from
the cell's key), vanilla (b = 0); GRPO is shown for reference. Exact MSEs come from
:func:`grpo_theory.exact_mse` with :func:`grpo_theory.prompt_baseline`; the decomposition above
is checked as an identity; Monte Carlo evaluates every baseline on the same draws, so
differences to the oracle are paired.

PASS when the identity holds (1e-10), under Assumption 2 the cross term is 0, no baseline's exact
MSE is below the oracle's and none is significantly below in Monte Carlo (4-sigma), and when
Assumption 2 fails the cross term is non-zero, b* beats V exactly and significantly in Monte
Carlo (paired CI below 0) and the t-sweep is minimised at t = 1.

    grpo-theory baseline-optimality [--full] [--workers N]
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

import grpo_theory as gt
from grpo_theory.experiments import Cell, Experiment, key_seed, mean_ci, paired_squared_errors
from grpo_theory._precision import float64
from .analysis import Z_TOL, checks, plot, report, summary

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "a2_holds_bandit",
           "a2_fails_bandit", "baseline_family", "decomposition", "cells", "cell", "summary",
           "checks", "report", "plot", "EXPERIMENT"]

NAME = "baseline-optimality"
CLAIM = "no prompt-only baseline beats the oracle under Assumption 2; b* beats V(x) without it (Cor 5)"

REWARD_MEANS = np.array([[0.2, 0.3, 1.0, 0.9], [0.1, 0.5, 1.0, 0.2], [0.4, 0.2, 0.6, 1.0]])
PEAKED_LOGITS = np.array([[3.0, 0.0, -2.0, -2.0], [2.0, 1.0, -2.5, -1.0], [3.0, 0.0, 0.0, -2.5]])


def a2_holds_bandit() -> gt.SoftmaxBandit:
    """Uniform policy: equal score norms within each prompt, so Assumption 2 holds exactly."""
    return gt.SoftmaxBandit(np.zeros_like(REWARD_MEANS), REWARD_MEANS)


def a2_fails_bandit() -> gt.SoftmaxBandit:
    """Peaked policy whose rare (large-score-norm) responses are the correct ones."""
    return gt.SoftmaxBandit(PEAKED_LOGITS, REWARD_MEANS)


PROBLEMS = {"a2_holds": a2_holds_bandit, "a2_fails": a2_fails_bandit}


@dataclass(frozen=True)
class Settings:
    """The sweep: one cell per (problem, G), each sweeping the baselines.

    Attributes:
        group_sizes: the group sizes G.
        deltas: the shifts delta of the baselines b = V + delta.
        ts: the points t of the line b = V + t (b* - V) (t = 0: the oracle, t = 1: b*).
        n_random: random baselines b(x) ~ U(0, 1) per cell.
        n_reps: Monte Carlo replicates per cell (the same draws for every baseline).
    """

    group_sizes: tuple
    deltas: tuple
    ts: tuple
    n_random: int
    n_reps: int


SETTINGS = {
    "quick": Settings(group_sizes=(4,), deltas=tuple(np.linspace(-0.5, 0.5, 11).tolist()),
                      ts=(-1.0, -0.5, 0.0, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0), n_random=6,
                      n_reps=40_000),
    "full": Settings(group_sizes=(2, 4, 16), deltas=tuple(np.linspace(-0.5, 0.5, 41).tolist()),
                     ts=tuple(np.linspace(-1.0, 3.0, 33).tolist()), n_random=20,
                     n_reps=400_000),
}

SCHEMA = {"table": dict(problem="str", G="int", B="int", n_reps="int", baseline="str",
                        param="float?", exact="float", mc="float", mc_se="float",
                        ci_low="float", ci_high="float", diff_exact="float", diff_mc="float",
                        diff_se="float", diff_lo="float", diff_hi="float", quad="float?",
                        cross="float?", b="str?", oracle_exact="float", z="float")}


def baseline_family(problem, deltas, ts, n_random: int, key):
    """The swept prompt-only baselines.

    Args:
        problem: a DiscreteProblem (``bandit.problem()``).
        deltas: shifts delta of b = V + delta.
        ts: positions t on the line b = V + t (b* - V).
        n_random: number of random baselines b(x) ~ U(0, 1).
        key: JAX key for the random baselines.
    Returns:
        A list of (baseline kind, parameter, b of shape (P,)).
    """
    v = np.asarray(problem.values())
    bstar = np.asarray(problem.optimal_baselines())
    rows = [("vanilla", 0.0, np.zeros_like(v)), ("oracle", 0.0, v), ("optimal", 1.0, bstar)]
    rows += [("shift", float(d), v + d) for d in deltas]
    rows += [("line", float(t), v + t * (bstar - v)) for t in ts]
    rand = np.asarray(jax.random.uniform(key, (n_random,) + v.shape, dtype=np.float64))
    rows += [("random", float(i), rand[i]) for i in range(n_random)]
    return rows


def decomposition(problem, b, G: int, B: int = 1):
    """(quadratic term, cross term) of MSE(b) - MSE_oracle (eq. 25 plus the cross term).

    Args:
        problem: a DiscreteProblem; b: baseline per prompt (P,); G, B: group and batch size.
    Returns:
        ``(E_X[(V-b)^2 E[||s||^2|X]] / (BG), 2 E_X[(V-b) E[||s||^2 eps|X]] / (BG))``.
    """
    f = np.asarray(problem.prompt_probs)
    p, mu = np.asarray(problem.probs), np.asarray(problem.reward_means)
    ssq = np.asarray(problem.score_sq_norms())
    v = np.asarray(problem.values())
    es2 = np.sum(p * ssq, axis=1)
    es2eps = np.sum(p * ssq * (mu - v[:, None]), axis=1)  # E[||s||^2 (Z - V) | x]
    quad = f @ ((v - b) ** 2 * es2) / (B * G)
    cross = f @ (2 * (v - b) * es2eps) / (B * G)
    return float(quad), float(cross)


def cells(s: Settings) -> list[Cell]:
    return [Cell(f"{p}_G{G}", dict(problem=p, G=G, n_reps=s.n_reps, deltas=s.deltas, ts=s.ts,
                                   n_random=s.n_random))
            for p in PROBLEMS for G in s.group_sizes]


@float64
def cell(config: dict, key) -> list[dict]:
    """Exact and paired Monte Carlo MSE of every swept baseline (and GRPO) at one (problem, G)."""
    prob, G, R = config["problem"], config["G"], config["n_reps"]
    k_base, k_mc = jax.random.split(key)
    bandit = PROBLEMS[prob]()
    problem = bandit.problem()
    fam = baseline_family(problem, config["deltas"], config["ts"], config["n_random"], k_base)
    bs = np.stack([b for _, _, b in fam])
    err2 = paired_squared_errors(bandit, ("oracle", "grpo"), baselines=bs, group_size=G,
                                 n_reps=R, seed=key_seed(k_mc))
    m, se, lo, hi = mean_ci(err2)
    dm, dse, dlo, dhi = mean_ci(err2 - err2[:, [0]])  # paired difference to the oracle
    or_exact = gt.exact_mse(bandit, "oracle", G)
    grpo_exact = gt.exact_mse(bandit, "grpo", G)
    rows = [dict(baseline="grpo", param=np.nan, exact=grpo_exact, mc=m[1], mc_se=se[1],
                 ci_low=lo[1], ci_high=hi[1], diff_exact=grpo_exact - or_exact, diff_mc=dm[1],
                 diff_se=dse[1], diff_lo=dlo[1], diff_hi=dhi[1], quad=np.nan, cross=np.nan,
                 b=None)]
    for j, (kind, par, b) in enumerate(fam):
        c = j + 2
        ex = gt.exact_mse(bandit, gt.prompt_baseline(b), G)
        quad, cross = decomposition(problem, b, G)
        rows.append(dict(baseline=kind, param=par, exact=ex, mc=m[c], mc_se=se[c], ci_low=lo[c],
                         ci_high=hi[c], diff_exact=ex - or_exact, diff_mc=dm[c],
                         diff_se=dse[c], diff_lo=dlo[c], diff_hi=dhi[c], quad=quad,
                         cross=cross, b=" ".join(f"{x:.6f}" for x in b)))
    for r in rows:
        r.update(problem=prob, G=G, B=1, n_reps=R, oracle_exact=or_exact,
                 z=(r["mc"] - r["exact"]) / r["mc_se"])
    return rows


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=21)
