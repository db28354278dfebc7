r"""Training at equal rollouts: Algorithm 1 with a rollout rule choosing each prompt's group.

Every step draws B prompts ``x_b ~ f``; the rule decides which responses are generated and which
enter the estimate; the estimate is the mean over the kept prompts of each prompt's
leave-one-out GRPO estimate on its kept responses,

.. math:: \hat g = \frac{1}{|K|} \sum_{b \in K} \frac{1}{n_b} \sum_{g \le n_b}
          \Big(z_{bg} - \frac{\sum_{h \ne g} z_{bh}}{n_b - 1}\Big) s(x_b, y_{bg}),

and ``theta += lr ghat``. The loop records the exact objective J after each step and the
rollouts generated (every generated response counts, kept or not). The rules, vectorised in
JAX (one padded ``(B, G_max)`` draw per step; ``lax.scan`` over steps, ``vmap`` over seeds):

* ``fixed``: ``G`` responses each (``n_b = G``).
* ``optimal``: ``N = B m`` responses a step split over the batch by greedy marginal allocation
  (:mod:`grpo_theory.allocation.optimal`) of the per-prompt constants ``a_x``, ``b_x``
  (:func:`grpo_theory.core.ustat.prompt_moments`) of the current policy with the reward means
  estimated from the previous steps' rewards only (Laplace counts over (prompt, response)): the
  sizes do not depend on the current rewards, so the step is unbiased.
* ``dynamic_sampling`` (DAPO, verl ``recipe/dapo`` ``filter_groups``): rounds of B fresh prompts
  with G responses; groups whose rewards are all equal are dropped; rounds continue until B
  groups are kept or ``max_rounds`` rounds ran (then the kept ones are used; verl raises).
  Every round's ``B G`` responses count.
* ``conformal_stopping`` (C-GRPO with ``qhat = 1``): responses are drawn along the grid; a
  prompt stops at the first grid size whose sampled responses are all the same response
  (the bandit's answer is the response itself), otherwise at the last grid size.

The comparison reads each run's gap ``sup J - J`` at common rollout budgets (the last step whose
cumulative rollouts do not pass the budget).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from grpo_theory._precision import float64
from grpo_theory.allocation.greedy import sizes_from_gains
from grpo_theory.core.gram import ExplicitScores
from grpo_theory.core.ustat import prompt_moments

__all__ = ["RULES", "rule_config", "max_group", "train_rule", "gap_at_budgets"]

#: the training rules of this study (name -> the parameters its config carries)
RULES = ("fixed", "optimal", "dynamic_sampling", "conformal_stopping")


def rule_config(name: str, **params) -> tuple:
    """A hashable rule configuration ``(name, ((key, value), ...))``.

    ``fixed``: ``group_size``; ``optimal``: ``rollouts`` (m per prompt, B m an integer) and
    ``max_group``; ``dynamic_sampling``: ``group_size``, ``max_rounds``;
    ``conformal_stopping``: ``grid`` (a tuple of increasing sizes >= 2).
    """
    if name not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {name!r}")
    need = {"fixed": {"group_size"}, "optimal": {"rollouts", "max_group"},
            "dynamic_sampling": {"group_size", "max_rounds"},
            "conformal_stopping": {"grid"}}[name]
    if set(params) != need:
        raise ValueError(f"rule {name!r} needs parameters {sorted(need)}, got {sorted(params)}")
    for k, v in params.items():
        vals = v if k == "grid" else (v,)
        if not vals or any(int(u) != u or u < (2 if k != "max_rounds" else 1) for u in vals):
            raise ValueError(f"{k} must hold integers >= 2 (max_rounds >= 1), got {v!r}")
    if name == "conformal_stopping" and list(params["grid"]) != sorted(set(params["grid"])):
        raise ValueError(f"grid must be strictly increasing, got {params['grid']!r}")
    return name, tuple(sorted((k, tuple(v) if k == "grid" else int(v))
                              for k, v in params.items()))


def max_group(rule: tuple) -> int:
    """The padded group width a rule draws per prompt and round."""
    name, params = rule
    p = dict(params)
    if name == "conformal_stopping":
        return int(p["grid"][-1])
    if name == "optimal":
        return int(p["max_group"])
    return int(p["group_size"])


def _loo(mask, y_scores, z):
    """Per-prompt leave-one-out estimates (B, D) on the kept responses ``mask`` (B, W)."""
    n = jnp.sum(mask, axis=1)
    s1 = jnp.sum(mask * z, axis=1)
    base = (s1[:, None] - z) / jnp.maximum(n[:, None] - 1, 1)
    adv = mask * (z - base)
    return jnp.einsum("bg,bgd->bd", adv, y_scores) / jnp.maximum(n, 1)[:, None]


def _draw(key, dp, shape):
    """Prompts ``x`` (shape[:-1]) ~ f, responses ~ pi and Bernoulli rewards (shape)."""
    kx, ky, kz = jax.random.split(key, 3)
    x = jax.random.categorical(kx, jnp.log(dp.prompt_probs), shape=shape[:-1])
    y = jax.random.categorical(ky, jnp.log(dp.probs)[x][..., None, :], axis=-1,
                               shape=shape)
    z = (jax.random.uniform(kz, shape) < dp.reward_means[x[..., None], y]).astype(jnp.float64)
    return x, y, z


def _greedy_sizes(a, b, total, width):
    """Integer sizes (B,) in [2, width] with sum ``total``: the ``total - 2B`` largest marginal
    gains ``(a + 2b/(G-1))/(G(G+1))`` over G = 2..width-1 (greedy marginal allocation; a stable
    sort breaks ties by prompt, then by G)."""
    G = jnp.arange(2, width, dtype=jnp.float64)[None, :]
    return sizes_from_gains((a[:, None] + 2.0 * b[:, None] / (G - 1)) / (G * (G + 1)), total)


def _step_rule(rule, key, dp, B, stats):
    """``(mask (B', W), x (B',), y, z, n_kept_prompts, rollouts, stats)`` for one step."""
    name, params = rule
    p = dict(params)
    W = max_group(rule)
    if name == "dynamic_sampling":
        R = p["max_rounds"]
        x, y, z = _draw(key, dp, (R * B, W))
        s = jnp.sum(z, axis=1)
        valid = (s > 0) & (s < W)
        rank = jnp.cumsum(valid)
        keep = valid & (rank <= B)
        n_valid = jnp.sum(valid)
        pos_b = jnp.argmax(rank >= B)  # index of the B-th valid group (if any)
        rounds = jnp.where(n_valid >= B, pos_b // B + 1, R)
        mask = jnp.broadcast_to(keep[:, None], (R * B, W)).astype(jnp.float64)
        return mask, x, y, z, jnp.sum(keep), rounds * B * W, stats
    x, y, z = _draw(key, dp, (B, W))
    g = jnp.arange(W)[None, :]
    if name == "fixed":
        n = jnp.full(B, p["group_size"])
    elif name == "optimal":
        mu_hat = (stats[1] + 1.0) / (stats[0] + 2.0)
        st = ExplicitScores(dp.prompt_probs, dp.probs, mu_hat, dp.scores)
        mo = prompt_moments(st)
        a = mo.tr_sigma_oracle
        bb = mo.score_sq * mo.sigma2 + mo.grad_sq
        n = _greedy_sizes(a[x], bb[x], int(round(p["rollouts"] * B)), W)
    else:  # conformal_stopping: first grid size whose responses are one response
        grid = jnp.asarray(p["grid"])
        same = jnp.cumprod(y == y[:, :1], axis=1)  # responses 0..g all equal the first
        agree = same[:, grid - 1] > 0  # (B, len(grid))
        first = jnp.argmax(agree, axis=1)
        n = jnp.where(jnp.any(agree, axis=1), grid[first], grid[-1])
    mask = (g < n[:, None]).astype(jnp.float64)
    if name == "optimal":  # only the generated responses update the reward-mean counts
        P, K = dp.probs.shape
        cell = x[:, None] * K + y
        trials = stats[0].reshape(-1).at[cell.reshape(-1)].add(mask.reshape(-1))
        wins = stats[1].reshape(-1).at[cell.reshape(-1)].add((mask * z).reshape(-1))
        stats = (trials.reshape(P, K), wins.reshape(P, K))
    return mask, x, y, z, jnp.asarray(B), jnp.sum(n), stats


@partial(jax.jit, static_argnames=("policy_def", "rule", "B", "n_steps"))
def _train(keys, theta0, leaves, lr, *, policy_def, rule, B, n_steps):
    policy = jax.tree_util.tree_unflatten(policy_def, leaves)

    def one(key):
        dp0 = policy.problem(theta0)
        stats0 = (jnp.zeros(dp0.probs.shape), jnp.zeros(dp0.probs.shape))

        def step(carry, t):
            theta, stats = carry
            dp = policy.problem(theta)
            mask, x, y, z, kept, spent, stats = _step_rule(
                rule, jax.random.fold_in(key, t), dp, B, stats)
            est = _loo(mask, dp.scores[x[:, None], y], z)
            ghat = jnp.sum(est * (jnp.sum(mask, 1) > 0)[:, None], 0) / jnp.maximum(kept, 1)
            theta = theta + lr * ghat.reshape(theta.shape)
            return (theta, stats), (policy.problem(theta).objective(), spent)

        _, (J, spent) = jax.lax.scan(step, (theta0, stats0), jnp.arange(1, n_steps + 1))
        return J, jnp.cumsum(spent)

    return jax.vmap(one)(keys)


@float64
def train_rule(policy, rule: tuple, batch_size: int, n_steps: int, lr: float, seeds):
    """Run one rule for every seed: ``(J (S, n+1), rollouts (S, n+1))`` with step 0 first.

    Args:
        policy: an enumerable policy (e.g. a ``LinearSoftmaxBandit``) at its start parameters.
        rule: a :func:`rule_config` value.
        batch_size: B prompts a step (kept prompts for ``dynamic_sampling``).
        n_steps: steps n.
        lr: the constant step size.
        seeds: integer seeds (one run each; run s uses ``PRNGKey(s)``).
    Returns:
        The exact objective after each step and the cumulative rollouts generated.
    """
    seeds = np.asarray(seeds, dtype=np.uint32)
    keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds))
    leaves, pdef = jax.tree_util.tree_flatten(policy)
    theta0 = jnp.asarray(policy.params, dtype=jnp.float64)
    J, spent = _train(keys, theta0, leaves, float(lr), policy_def=pdef, rule=rule,
                      B=int(batch_size), n_steps=int(n_steps))
    J0 = float(policy.problem(theta0).objective())
    S = seeds.size
    J = np.concatenate([np.full((S, 1), J0), np.asarray(J)], axis=1)
    spent = np.concatenate([np.zeros((S, 1)), np.asarray(spent, dtype=np.float64)], axis=1)
    return J, spent


def gap_at_budgets(J, spent, budgets, sup_objective: float) -> np.ndarray:
    """``sup J - J`` of each run (S,) at each budget (L,): the last step with rollouts <= budget.

    Returns NaN where a run's rollouts never reach the budget (its steps ran out first).
    """
    J, spent = np.asarray(J), np.asarray(spent)
    out = np.full((J.shape[0], len(budgets)), np.nan)
    for j, T in enumerate(budgets):
        idx = np.sum(spent <= T, axis=1) - 1  # spent is non-decreasing, spent[:, 0] = 0
        reached = spent[:, -1] >= T
        out[:, j] = np.where(reached, sup_objective - J[np.arange(J.shape[0]), idx], np.nan)
    return out
