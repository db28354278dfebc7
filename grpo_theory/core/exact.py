r"""Exact gradients, exact expectations and exact MSE by enumeration and closed forms.

Three independent routes to the same numbers, so each checks the others:

1. **Closed forms** (:mod:`grpo_theory.ustat`): prompt-only baselines (vanilla, oracle, b*(x),
   user b(x)), leave-one-out GRPO (U-statistic variance) and the self-inclusive mean.
2. **Binary-reward conditioning**: rewards are Bernoulli, so a group is described by the number
   k ~ Binomial(G, V(x)) of correct responses. Given k, correct responses are iid from
   ``pi(y|x, Z=1) ∝ pi(y|x) mu(x,y)`` and incorrect ones from ``∝ pi(y|x)(1 - mu(x,y))``, and any
   permutation-equivariant advantage takes one value ``a1(k)`` on correct and ``a0(k)`` on
   incorrect responses. Then ``E[ghat | k]`` and ``E[||ghat||^2 | k]`` have closed forms in the
   conditional score moments: the exact MSE of *every* registry estimator, ``grpo_std`` included.
3. **Brute-force enumeration** of every outcome of a minibatch (prompts, responses, rewards):
   used to test routes 1 and 2 as equalities on small problems.
"""

from __future__ import annotations

import itertools
from math import comb

import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from .estimators import PromptContext, get_estimator
from .policies import DiscreteProblem, as_problem
from .ustat import exact_mse_closed_form, minibatch_mse

__all__ = ["exact_gradient", "exact_mse", "exact_prompt_mse", "exact_prompt_mean_and_variance",
           "enumerate_estimates", "enumerated_moments"]


def exact_gradient(bandit):
    """grad J(theta) with the shape of the policy's parameters ((P, K) for a SoftmaxBandit)."""
    return bandit.gradient()  # DiscreteProblem: flat (D,); policies reshape to their parameters


def _binary_advantages(problem: DiscreteProblem, est, group_size: int):
    """a1[x, k], a0[x, k] for k = 0..G correct responses (undefined entries are 0)."""
    G, P = group_size, problem.n_prompts
    k = np.arange(G + 1)
    z = (np.arange(G)[None, :] < k[:, None]).astype(np.float64)  # (G+1, G): k ones first
    z = jnp.broadcast_to(jnp.asarray(z), (P, G + 1, G))
    xs = jnp.broadcast_to(jnp.arange(P)[:, None], (P, G + 1))
    ctx = PromptContext(
        prompt=xs,
        value=jnp.broadcast_to(problem.values()[:, None], (P, G + 1)),
        optimal_baseline=jnp.broadcast_to(problem.optimal_baselines()[:, None], (P, G + 1)),
    )
    adv = np.asarray(est.advantage(z, ctx))  # (P, G+1, G)
    a1 = np.where(k[None, :] > 0, adv[:, :, 0], 0.0)
    a0 = np.where(k[None, :] < G, adv[:, :, -1], 0.0)
    return a1, a0


def exact_prompt_mean_and_variance(problem: DiscreteProblem, estimator, group_size: int):
    """Per-prompt exact mean (P, D) and trace variance (P,) by binary-reward conditioning."""
    est = get_estimator(estimator)
    G = group_size
    p = np.asarray(problem.probs)
    mu = np.asarray(problem.reward_means)
    s = np.asarray(problem.scores)
    ssq = np.sum(s**2, axis=-1)
    v = np.sum(p * mu, axis=1)
    w1, w0 = p * mu, p * (1 - mu)  # unnormalised conditional laws of y given Z = 1, 0
    n1 = np.where(v > 0, v, 1.0)[:, None]
    n0 = np.where(v < 1, 1 - v, 1.0)[:, None]
    m1 = np.einsum("pk,pkd->pd", w1 / n1, s)
    m0 = np.einsum("pk,pkd->pd", w0 / n0, s)
    q1 = np.sum(w1 / n1 * ssq, axis=1)
    q0 = np.sum(w0 / n0 * ssq, axis=1)
    a1, a0 = _binary_advantages(problem, est, G)
    k = np.arange(G + 1)[None, :].astype(np.float64)
    binom = np.array([comb(G, j) for j in range(G + 1)], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        pk = binom[None, :] * v[:, None] ** k * (1 - v[:, None]) ** (G - k)  # 0**0 = 1
    mean = (np.einsum("pk,pd->pd", pk * a1 * k, m1)
            + np.einsum("pk,pd->pd", pk * a0 * (G - k), m0)) / G
    m11 = np.sum(m1**2, axis=1)[:, None]
    m00 = np.sum(m0**2, axis=1)[:, None]
    m10 = np.sum(m1 * m0, axis=1)[:, None]
    second = (a1**2 * (k * q1[:, None] + k * (k - 1) * m11)
              + a0**2 * ((G - k) * q0[:, None] + (G - k) * (G - k - 1) * m00)
              + 2 * a1 * a0 * k * (G - k) * m10)
    second = np.sum(pk * second, axis=1) / G**2
    return jnp.asarray(mean), jnp.asarray(second - np.sum(mean**2, axis=1))


def exact_mse(bandit, estimator, group_size: int, batch_size: int = 1, method: str = "auto"):
    """Exact ``E||ghat - grad J||^2`` (trace) for B prompts drawn iid and G responses each.

    ``method``: ``"closed_form"`` (ustat formulas; vanilla, oracle, optimal, baseline, grpo,
    grpo_mean), ``"binary"`` (conditioning on the number of correct responses; every estimator
    whose advantages depend only on the group's rewards, e.g. ``grpo_std``) or ``"auto"`` (closed
    form when there is one). Raises ``ValueError`` when the estimator has no exact form.
    """
    problem = as_problem(bandit)
    est = get_estimator(estimator)
    V.group_run(est, group_size, batch_size)
    if method not in ("auto", "closed_form", "binary"):
        raise ValueError(f"method must be 'auto', 'closed_form' or 'binary', got {method!r}")
    if method in ("auto", "closed_form") and est.exact is not None:
        return exact_mse_closed_form(problem, est.exact, group_size, batch_size,
                                     _baseline_of(problem, est))
    if method == "closed_form":
        raise ValueError(f"estimator {est.name!r} has no closed-form MSE; use method='binary'")
    if not est.binary_exact:
        raise ValueError(
            f"estimator {est.name!r} has no exact MSE (its advantages are not a function of the "
            "group's rewards alone); use mc_mse for a Monte Carlo estimate"
        )
    mean, var = exact_prompt_mean_and_variance(problem, est, group_size)
    return minibatch_mse(problem, mean, var, batch_size)


def exact_prompt_mse(bandit, estimator, group_size: int, method: str = "auto") -> jnp.ndarray:
    """Per-prompt exact MSE ``E[||ghat_x - g(x)||^2 | x]`` of one prompt's G-group, shape (P,).

    Uses the closed form where there is one (``method="auto"``), else binary conditioning.
    """
    from .ustat import prompt_mean_and_variance

    problem = as_problem(bandit)
    est = get_estimator(estimator)
    V.group_run(est, group_size, 1)
    if method not in ("auto", "closed_form", "binary"):
        raise ValueError(f"method must be 'auto', 'closed_form' or 'binary', got {method!r}")
    if method != "binary" and est.exact is not None:
        mean, var = prompt_mean_and_variance(problem, est.exact, group_size,
                                             _baseline_of(problem, est))
    elif method == "closed_form":
        raise ValueError(f"estimator {est.name!r} has no closed-form MSE; use method='binary'")
    else:
        mean, var = exact_prompt_mean_and_variance(problem, est, group_size)
    return var + jnp.sum((mean - problem.prompt_gradients()) ** 2, axis=1)


def _baseline_of(problem: DiscreteProblem, est):
    """The prompt-only baseline b(x) of an estimator with ``exact == "prompt_baseline"``."""
    if est.exact != "prompt_baseline":
        return None
    if "value" in est.needs:
        return problem.values()
    if "optimal_baseline" in est.needs:
        return problem.optimal_baselines()
    if "b" in est.params:
        b = est.params["b"]
        if b.shape != (problem.n_prompts,):
            raise ValueError(f"b must have shape ({problem.n_prompts},), got {b.shape}")
        return b
    return jnp.zeros(problem.n_prompts)


def enumerate_estimates(bandit, estimator, group_size: int, batch_size: int = 1,
                        max_outcomes: int = 2_000_000):
    """Every outcome of a minibatch with its probability: ``(probs (N,), estimates (N, D))``.

    Enumerates prompts, responses and binary rewards: N = (P (2K)^G)^B outcomes, so only for
    tiny problems (the reference that the closed forms are tested against).
    """
    problem = as_problem(bandit)
    est = get_estimator(estimator)
    V.group_run(est, group_size, batch_size)
    P, K, G, B = problem.n_prompts, problem.n_responses, group_size, batch_size
    n_group = P * (2 * K) ** G
    if n_group**B > max_outcomes:
        raise ValueError(f"enumeration has {n_group ** B} outcomes > max_outcomes={max_outcomes}")
    f = np.asarray(problem.prompt_probs)
    p = np.asarray(problem.probs)
    mu = np.asarray(problem.reward_means)
    # one group's outcomes: prompt x, atoms a_g = (y_g, z_g)
    grid = np.array(list(itertools.product(range(P), *[range(2 * K)] * G)))  # (n_group, 1+G)
    x1 = grid[:, 0]
    y1, z1 = grid[:, 1:] // 2, (grid[:, 1:] % 2).astype(np.float64)
    pz = np.where(z1 == 1, mu[x1[:, None], y1], 1 - mu[x1[:, None], y1])
    prob1 = f[x1] * np.prod(p[x1[:, None], y1] * pz, axis=1)
    combos = np.array(list(itertools.product(range(n_group), repeat=B)))  # (N, B)
    x, y, z = x1[combos], y1[combos], z1[combos]
    prob = np.prod(prob1[combos], axis=1)
    vals = problem.values()
    ctx = PromptContext(prompt=jnp.asarray(x), value=vals[x],
                        optimal_baseline=problem.optimal_baselines()[x])
    adv = est.advantage(jnp.asarray(z), ctx)  # (N, B, G)
    sc = problem.scores[x[:, :, None], y]  # (N, B, G, D)
    est_vals = jnp.einsum("nbg,nbgd->nd", adv, sc) / (B * G)
    return jnp.asarray(prob), est_vals


def enumerated_moments(bandit, estimator, group_size: int, batch_size: int = 1):
    """Exact ``(E ghat, E||ghat - grad J||^2)`` by brute-force enumeration."""
    problem = as_problem(bandit)
    prob, vals = enumerate_estimates(problem, estimator, group_size, batch_size)
    mean = prob @ vals
    mse = prob @ jnp.sum((vals - problem.gradient()) ** 2, axis=1)
    return mean, float(mse)


from .._precision import scope_module as _scope  # noqa: E402

_scope(globals())
