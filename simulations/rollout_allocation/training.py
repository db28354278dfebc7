r"""Training at equal rollouts: Algorithm 1 with a rollout rule choosing each prompt's group.

Every step draws B prompts ``x_b ~ f``; the rule decides which responses are generated and which
enter the estimate; the estimate is the mean over the kept prompts of each prompt's
leave-one-out GRPO estimate on its kept responses,

.. math:: \hat g = \frac{1}{|K|} \sum_{b \in K} \frac{1}{n_b} \sum_{g \le n_b}
          \Big(z_{bg} - \frac{\sum_{h \ne g} z_{bh}}{n_b - 1}\Big) s(x_b, y_{bg}),

and ``theta += lr ghat``. The loop records the exact objective J after each step and the
rollouts generated (every generated response counts, kept or not). The rules are the allocation
package's values with their jit-able steps (:mod:`grpo_theory.allocation.steps`), this module
giving them the bandit's sampler (:class:`BanditSampler`; ``lax.scan`` over steps, ``vmap`` over
seeds):

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

from grpo_theory import allocation as A
from grpo_theory._precision import float64
from grpo_theory.allocation import Draw, Sampler, loo_weights
from grpo_theory.core import ExplicitScores, prompt_moments

__all__ = ["RULES", "rule_config", "BanditSampler", "train_rule", "gap_at_budgets"]

#: the training rules of this study (name -> the parameters its config carries)
RULES = ("fixed", "optimal", "dynamic_sampling", "conformal_stopping")


def rule_config(name: str, **params) -> A.Rule:
    """The allocation package's rule for one of this study's :data:`RULES`.

    ``fixed``: ``group_size``; ``optimal``: ``rollouts`` (m per prompt) and ``max_group``;
    ``dynamic_sampling``: ``group_size``, ``max_rounds``; ``conformal_stopping``: ``grid`` (a
    tuple of increasing sizes >= 2; stopping on answers, the bandit's responses).
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
    p = params
    return {"fixed": lambda: A.fixed(p.get("group_size")),
            "optimal": lambda: A.optimal_rule(p.get("rollouts"), p.get("max_group")),
            "dynamic_sampling": lambda: A.dynamic_sampling(p.get("group_size"),
                                                           p.get("max_rounds")),
            "conformal_stopping": lambda: A.conformal_stopping(p.get("grid"), qhat=1.0,
                                                               agree="answer")}[name]()


class BanditSampler(Sampler):
    """An enumerable problem's :class:`~grpo_theory.allocation.Sampler`: prompts ~ f, responses
    ~ pi, Bernoulli rewards; an answer is the response itself.

    ``mse_constants`` are the leave-one-out constants ``a_x = tr Sigma_or(x)``, ``b_x = E||s||^2
    Var(Z|x) + ||g(x)||^2`` (:func:`grpo_theory.core.prompt_moments`) of the current policy with
    the reward means estimated from the earlier steps' rewards only (the state: Laplace counts
    ``(trials, wins)`` over (prompt, response), updated with the generated responses).
    """

    def __init__(self, dp):
        self.dp = dp

    def draw(self, key, n, width):
        dp = self.dp
        kx, ky, kz = jax.random.split(key, 3)
        x = jax.random.categorical(kx, jnp.log(dp.prompt_probs), shape=(n,))
        y = jax.random.categorical(ky, jnp.log(dp.probs)[x][..., None, :], axis=-1,
                                   shape=(n, width))
        z = (jax.random.uniform(kz, (n, width)) < dp.reward_means[x[..., None], y]
             ).astype(jnp.float64)
        return Draw(x, y, z, y == y[:, :1])

    def init_state(self):
        return (jnp.zeros(self.dp.probs.shape), jnp.zeros(self.dp.probs.shape))

    def mse_constants(self, x, state):
        dp = self.dp
        mu_hat = (state[1] + 1.0) / (state[0] + 2.0)
        mo = prompt_moments(ExplicitScores(dp.prompt_probs, dp.probs, mu_hat, dp.scores))
        return mo.tr_sigma_oracle[x], (mo.score_sq * mo.sigma2 + mo.grad_sq)[x]

    def observe(self, state, draw, mask):
        P, K = self.dp.probs.shape
        cell = (draw.x[:, None] * K + draw.y).reshape(-1)
        trials = state[0].reshape(-1).at[cell].add(mask.reshape(-1))
        wins = state[1].reshape(-1).at[cell].add((mask * draw.z).reshape(-1))
        return trials.reshape(P, K), wins.reshape(P, K)


@partial(jax.jit, static_argnames=("policy_def", "rule", "B", "n_steps"))
def _train(keys, theta0, leaves, lr, *, policy_def, rule, B, n_steps):
    policy = jax.tree_util.tree_unflatten(policy_def, leaves)

    def one(key):
        stats0 = BanditSampler(policy.problem(theta0)).init_state()

        def step(carry, t):
            theta, stats = carry
            dp = policy.problem(theta)
            st = rule.step(jax.random.fold_in(key, t), BanditSampler(dp), B, stats)
            d = st.draw
            w, _ = loo_weights(d.z, st.mask)
            ghat = jnp.einsum("bg,bgd->d", w, dp.scores[d.x[:, None], d.y])
            theta = theta + lr * ghat.reshape(theta.shape)
            return (theta, st.state), (policy.problem(theta).objective(), st.rollouts)

        _, (J, spent) = jax.lax.scan(step, (theta0, stats0), jnp.arange(1, n_steps + 1))
        return J, jnp.cumsum(spent)

    return jax.vmap(one)(keys)


@float64
def train_rule(policy, rule, batch_size: int, n_steps: int, lr: float, seeds):
    """Run one rule for every seed: ``(J (S, n+1), rollouts (S, n+1))`` with step 0 first.

    Args:
        policy: an enumerable policy (e.g. a ``LinearSoftmaxBandit``) at its start parameters.
        rule: an allocation :class:`~grpo_theory.allocation.Rule` with a training step (e.g.
            :func:`rule_config`).
        batch_size: B prompts a step (kept prompts for ``dynamic_sampling``).
        n_steps: steps n.
        lr: the constant step size.
        seeds: integer seeds (one run each; run s uses ``PRNGKey(s)``).
    Returns:
        The exact objective after each step and the cumulative rollouts generated.
    """
    rule.training_rounds()  # a refilling rule without its cap is refused before tracing
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
