r"""Claim 6 — std normalisation changes the objective (Proposition 13).

With binary rewards, ``(Z - Zbar)/std`` is about ``(Z - V)/sqrt(V(1-V))``, so the expected update of
std-normalised GRPO is about ``E_X[g(X)/sqrt(V(1-V))] = grad E_X[2 arcsin sqrt(V(X))]``: it ascends
``E[2 arcsin sqrt V]``, not ``J = E[V]``. When prompts share parameters, the two objectives have
different maximisers.

Exact finite-G form (derived here; checked numerically by the driver): for binary Z and a
permutation-equivariant, mean-centred advantage the expected per-prompt update is
``w_G(V(x)) g(x)``, so the expected update is the gradient of ``E_X[Phi_G(V(X))]`` with
``Phi_G' = w_G``; its zero ``theta_G`` is where Algorithm 1 converges with a ``beta/t`` schedule.
``w_G(V) -> 1/sqrt(V(1-V))`` as G grows, so ``theta_G -> theta_arcsin``. For G = 2 and 3 the weight
``w_G`` is constant in V (every non-degenerate group has the same |advantage| pattern), so
``theta_2 = theta_3 = theta_V`` exactly; at small G, groups whose
rewards are all equal (advantage 0) shrink the weight of prompts with V near 0 or 1, pulling
``theta_G`` back toward ``theta_V``. ``theta_G`` is computed as the root of the exact mean
update ``sum_x f(x) E[ghat | x]`` (:func:`grpo_theory.exact_prompt_mean_and_variance`).

Problem: :func:`grpo_theory.problems.scaling_bandit` with ``delta = 0.5`` — 4 prompts x 2
responses, theta in R^2, deterministic binary rewards (response 0 correct). Prompts pull theta in
opposite directions with different strengths, so both objectives have *finite* (interior)
maximisers, theta_V and theta_arcsin, which differ by a factor of about 1.6 (no regulariser
needed). Training: ``grpo_std`` (ddof 1, eps 1e-6, the registry default) and, as a control,
``grpo`` (leave-one-out, no std), G in {4, 16, 64} with B = 8 prompts per step,
eta_t = 4/(t + 100) (4 lambda_min > 1/2 for every mean field; the offset keeps early steps small
so no run is thrown into the flat region far from the optimum), from theta0 = 0; each seed's estimate is the Polyak
average of the second half of its logged iterates; the mean over seeds has a 95% CI.

PASS when: ``grpo`` lands on theta_V (within 4 se per coordinate) at every G; ``grpo_std`` lands on
theta_G (within 4 se) and excludes theta_V (more than 4 se away) for G >= 16; theta_G moves
monotonically toward theta_arcsin as G grows (exact); and at the largest trained G, grpo_std's
average is closer to theta_arcsin than to theta_V with E[2 arcsin sqrt V] higher and E[V] lower
than at theta_V.

Cells: ``exact`` (the two maximisers and the fixed points theta_G) and one ``train`` cell per
(estimator, G); each training run's seed is drawn from the cell's key.

    grpo-theory std-normalisation [--full] [--workers N]
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

import grpo_theory as gt
from grpo_theory.experiments import Cell, Experiment, key_seed
from grpo_theory._precision import float64
from grpo_theory.core import exact_objective, maximise
from grpo_theory.optim.train import train
from grpo_theory.problems import scaling_bandit

from .analysis import Z_TOL, checks, plot, report, summary

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "std_bandit", "arcsin_objective",
           "mean_update", "fixed_point", "cells", "cell", "summary", "checks", "report", "plot",
           "EXPERIMENT"]

NAME = "std-normalisation"
CLAIM = "grpo_std ascends E[2 arcsin sqrt V(X)], not E[V(X)]: different limits with shared params (Prop 13)"
BATCH = 8  # prompts per step (B); N = BG = 8G
BETA, OFFSET = 4.0, 100.0
PROBLEM = "scaling_bandit(delta=0.5)"
EXACT_G_FULL = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024)


def std_bandit() -> gt.LinearSoftmaxBandit:
    return scaling_bandit(delta=0.5)


def arcsin_objective(policy, params=None):
    """E_X[2 arcsin sqrt(V(X))] (exact, traceable)."""
    theta = policy.params if params is None else params
    v = jnp.sum(policy.probs(theta) * jnp.asarray(policy.reward_means), axis=1)
    return jnp.dot(jnp.asarray(policy.prompt_probs), 2 * jnp.arcsin(jnp.sqrt(v)))


_PROBLEM_FNS = {}


def _problem_fn(policy):
    """A jitted ``theta -> DiscreteProblem`` for this policy (cached by identity)."""
    key = id(policy)
    if key not in _PROBLEM_FNS or _PROBLEM_FNS[key][0] is not policy:
        _PROBLEM_FNS[key] = (policy, jax.jit(policy.problem))
    return _PROBLEM_FNS[key][1]


def mean_update(policy, theta, estimator: str, G: int) -> np.ndarray:
    """Exact E[ghat] = sum_x f(x) E[ghat | x] at theta (binary-reward conditioning)."""
    prob = _problem_fn(policy)(jnp.asarray(theta, dtype=jnp.float64))
    m, _ = gt.exact_prompt_mean_and_variance(prob, estimator, G)
    return np.asarray(prob.prompt_probs @ m)


def fixed_point(policy, estimator: str, G: int, start) -> np.ndarray:
    """theta_G: root of the exact mean update (scipy hybr; residual norm must be < 1e-10)."""
    from scipy.optimize import root

    res = root(lambda th: mean_update(policy, th, estimator, G), np.asarray(start, float),
               tol=1e-12)
    resid = float(np.linalg.norm(mean_update(policy, res.x, estimator, G)))
    if not resid < 1e-10:
        raise RuntimeError(f"fixed point of {estimator} at G={G} not found: residual {resid:.2e}")
    return res.x


@dataclass(frozen=True)
class Settings:
    """The exact cell and one training cell per (estimator, G).

    Attributes:
        group_sizes: the group sizes G trained (and evaluated exactly).
        n_steps: steps per training run.
        n_seeds: training runs per cell.
        exact_G: further group sizes of the exact cell.
    """

    group_sizes: tuple
    n_steps: int
    n_seeds: int
    exact_G: tuple


SETTINGS = {"quick": Settings(group_sizes=(4, 16, 64), n_steps=2000, n_seeds=64,
                              exact_G=(2, 3, 4, 16, 64, 256, 1024)),
            "full": Settings(group_sizes=(4, 16, 64), n_steps=8000, n_seeds=256,
                             exact_G=EXACT_G_FULL)}

_OBJ = dict(theta1="float", theta2="float", J="float", arcsin_obj="float")
SCHEMA = {
    # point: max_J (theta_V), max_arcsin (theta_arcsin) or fixed_point (theta_G of estimator)
    "exact": dict(point="str", estimator="str?", G="int?", **_OBJ),
    # theta1, theta2 (and J, arcsin_obj there): the Polyak average of the 2nd half of the run
    "train": dict(estimator="str", G="int", B="int", n_steps="int", eta="float",
                  offset="float", run_seed="int", final_theta1="float", final_theta2="float",
                  **_OBJ),
}


@functools.lru_cache(maxsize=1)
def _maximisers():
    """``(theta_V, J(theta_V), theta_arcsin)`` of :func:`std_bandit` (cached per process)."""
    pol = std_bandit()
    theta_v, j_v = maximise(lambda th: exact_objective(pol, th), pol.params)
    theta_a, _ = maximise(lambda th: arcsin_objective(pol, th), pol.params)
    return theta_v, float(j_v), theta_a


def _obj_row(pol, th) -> dict:
    return dict(theta1=float(th[0]), theta2=float(th[1]),
                J=float(exact_objective(pol, jnp.asarray(th))),
                arcsin_obj=float(arcsin_objective(pol, jnp.asarray(th))))


def cells(s: Settings) -> list[Cell]:
    out = [Cell("exact", dict(problem=PROBLEM, part="exact",
                              std_G=tuple(sorted(set(s.exact_G) | set(s.group_sizes))),
                              grpo_G=s.group_sizes), kind="exact")]
    out += [Cell(f"train_{e}_G{G}", dict(problem=PROBLEM, part="train", estimator=e, G=G,
                                         B=BATCH, n_steps=s.n_steps, n_seeds=s.n_seeds,
                                         eta=BETA, offset=OFFSET), kind="train")
            for e in ("grpo_std", "grpo") for G in s.group_sizes]
    return out


@float64
def cell(config: dict, key) -> list[dict]:
    """The exact points (maximisers, fixed points) or one (estimator, G) training sweep."""
    pol = std_bandit()
    theta_v, j_v, theta_a = _maximisers()
    if config["part"] == "exact":
        rows = [dict(point="max_J", estimator=None, G=None, **_obj_row(pol, theta_v)),
                dict(point="max_arcsin", estimator=None, G=None, **_obj_row(pol, theta_a))]
        rows += [dict(point="fixed_point", estimator="grpo_std", G=G,
                      **_obj_row(pol, fixed_point(pol, "grpo_std", G, theta_a)))
                 for G in config["std_G"]]
        rows += [dict(point="fixed_point", estimator="grpo", G=G,
                      **_obj_row(pol, fixed_point(pol, "grpo", G, theta_v)))
                 for G in config["grpo_G"]]
        return rows
    est, G, n = config["estimator"], config["G"], config["n_steps"]
    seeds = np.random.default_rng(key_seed(key)).choice(2**31, size=config["n_seeds"],
                                                        replace=False)  # distinct runs
    r = train(pol, est, config["B"], G, n, eta=config["eta"], schedule="inverse",
              offset=config["offset"], seeds=seeds, log_every=n // 100, max_objective=j_v,
              log_params=True)
    half = r.params[:, r.params.shape[1] // 2:, :].mean(axis=1)  # Polyak average, 2nd half
    return [dict(estimator=est, G=G, B=config["B"], n_steps=n, eta=config["eta"],
                 offset=config["offset"], run_seed=int(s), final_theta1=float(thn[0]),
                 final_theta2=float(thn[1]), **_obj_row(pol, th))
            for s, th, thn in zip(r.seeds, half, r.theta_final)]


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=25)
