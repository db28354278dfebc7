r"""Training at equal rollouts: Algorithm 1 with a rollout rule choosing each prompt's group.

Every step draws B prompts ``x_b ~ f``; the rule decides which responses are generated and which
enter the estimate; the estimate is the mean over the kept prompts of each prompt's
leave-one-out GRPO estimate on its kept responses,

.. math:: \hat g = \frac{1}{|K|} \sum_{b \in K} \frac{1}{n_b} \sum_{g \le n_b}
          \Big(z_{bg} - \frac{\sum_{h \ne g} z_{bh}}{n_b - 1}\Big) s(x_b, y_{bg}),

and ``theta += lr ghat``. The loop records the exact objective J after each step and the
rollouts generated (every generated response counts, kept or not). The loop is the package's
one bandit loop, :func:`grpo_theory.optim.train_batch` with the rule in its config
(``TrainConfig(rule=...)``: the allocation package's values with their jit-able steps, the
problem's :class:`~grpo_theory.core.ProblemSampler`; ``lax.scan`` over steps, ``vmap`` over
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

import numpy as np

from grpo_theory import allocation as A
from grpo_theory._precision import float64
from grpo_theory.optim import TrainConfig, seed_keys, train_batch

__all__ = ["RULES", "rule_config", "train_rule", "gap_at_budgets"]

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
    config = TrainConfig(batch_size=batch_size, n_steps=n_steps, lr=lr, log_every=1, rule=rule)
    _, keys = seed_keys(np.asarray(seeds, dtype=np.uint32))
    res = train_batch(policy, "grpo", config, keys, sup_objective=0.0)  # the gap is not read
    return np.asarray(res.objective), np.asarray(res.rollouts, dtype=np.float64)


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
