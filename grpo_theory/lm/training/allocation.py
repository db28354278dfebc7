r"""GRPO training of the small transformer with a rollout rule choosing each prompt's group.

Every step draws B prompts uniformly from the training pool; the rule decides which responses
are generated and which enter the estimate; the update is Adam after global-norm clipping at 1
(as :func:`grpo_theory.lm.training.grpo.train_grpo`) along the mean over the kept prompts ``K`` of
each prompt's estimate on its ``n_b`` kept responses (any estimator with a masked form,
``estimator=``; by default the leave-one-out estimate),

.. math:: \hat g = \frac{1}{|K|} \sum_{b \in K} \frac{1}{n_b} \sum_{g \le n_b}
          \Big(z_{bg} - \frac{\sum_{h \ne g} z_{bh}}{n_b - 1}\Big) \nabla \log\pi(y_{bg}|x_b).

The rules (one padded ``(B, W)`` draw per step and a mask; :func:`lm_rule` makes them):

* ``fixed``: ``G`` responses each.
* ``dynamic_sampling`` (DAPO; verl ``recipe/dapo``, ``filter_groups``): rounds of B fresh
  prompts with G responses; groups whose rewards are all equal are dropped; the first B kept
  groups are used (fewer when ``max_rounds`` rounds run out: verl raises there); every response
  of the rounds used counts.
* ``conformal_stopping`` (C-GRPO with ``qhat = 1``): responses along the grid; a prompt stops at
  the first grid size whose responses are all one response, token for token, otherwise at the
  last grid size. A prompt that stops early has equal rewards, so it adds no gradient.
* ``knapsack`` (Knapsack RL, arXiv 2509.25849, with the policy's exact pass rates
  ``V(x) = pi(y*|x)``, teacher forced before sampling: the rule as it would run with perfect
  pass-rate predictions): sizes in ``[2, W]`` summing to ``m B`` that maximise
  ``sum_b v(G_b, V_b)``, ``v(G, p) = (1 - p^G - (1 - p)^G) p (1 - p)^2`` (greedy on its concave
  marginals, as :func:`grpo_theory.allocation.pass_rate_allocation`). The sizes do not depend
  on the current samples, so each prompt's estimate stays unbiased and the prompts keep equal
  weights.
* ``optimal`` (the MSE-optimal unbiased allocation, :mod:`grpo_theory.allocation.optimal`):
  sizes in ``[2, W]`` summing to ``m B`` that minimise ``sum_b a_b / G_b + b_b / (G_b (G_b -
  1))``, the leave-one-out variance (greedy on its convex marginals,
  :func:`grpo_theory.allocation.mse_gains`), with ``(a_b, b_b)`` of a prompt whose one correct
  response is ``y*`` (:func:`grpo_theory.allocation.unique_answer_constants`): ``V = pi(y*|x)``
  and ``||s*||^2`` exact by teacher forcing, and ``E[||s||^2 | x]`` replaced by the previous
  step's mean over its prompts of one sampled response's ``||s||^2`` (before the first step, B
  responses drawn for it, counted in the rollouts). The sizes use no current sample: unbiased,
  equal prompt weights.

The held-out accuracy, the exact expected reward ``mean_x pi(y*|x)`` of the evaluation questions
(teacher forcing), is recorded after every step, with the responses generated; runs are then
compared at common rollout budgets (:func:`accuracy_at_budgets`).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ... import _validation as V, allocation as A
from ...allocation import Rule
from .grpo import cached_optimizer, task_tokens
from .loop import LMVariant, sq_norms, train_chunk
from ..policy import LMPolicy, seq_log_probs


#: shorthands of :func:`lm_rule` (name -> the parameters its rule takes)
LM_RULES = {"fixed": ("group_size",), "dynamic_sampling": ("group_size", "max_rounds"),
            "conformal_stopping": ("grid",), "knapsack": ("rollouts", "max_group"),
            "optimal": ("rollouts", "max_group")}


def lm_rule(name: str, **params) -> Rule:
    """The allocation package's rule for a shorthand (any :class:`~grpo_theory.allocation.Rule`
    with a training step also goes to :func:`train_with_rule` directly).

    Args:
        name: one of :data:`LM_RULES`: ``fixed`` (:func:`~grpo_theory.allocation.fixed`),
            ``dynamic_sampling`` (:func:`~grpo_theory.allocation.dynamic_sampling`),
            ``conformal_stopping`` (on answers, ``qhat = 1``:
            :func:`~grpo_theory.allocation.conformal_stopping`), ``knapsack``
            (:func:`~grpo_theory.allocation.pass_rate_rule`) or ``optimal``
            (:func:`~grpo_theory.allocation.optimal_rule`).
        **params: ``fixed``: ``group_size``; ``dynamic_sampling``: ``group_size``,
            ``max_rounds``; ``conformal_stopping``: ``grid`` (strictly increasing sizes >= 2);
            ``knapsack`` and ``optimal``: ``rollouts`` (m per prompt, an integer) and
            ``max_group`` (>= m).

    Returns:
        The rule.

    >>> lm_rule("conformal_stopping", grid=(2, 4, 8)).name
    'conformal_stopping(grid=(2, 4, 8),qhat=1,answer)'
    """
    if name not in LM_RULES:
        raise ValueError(f"rule must be one of {sorted(LM_RULES)}, got {name!r}")
    if set(params) != set(LM_RULES[name]):
        raise ValueError(f"rule {name!r} needs parameters {list(LM_RULES[name])}, "
                         f"got {sorted(params)}")
    if name == "conformal_stopping":
        g = params["grid"]
        if np.ndim(g) != 1 or not len(g):
            raise ValueError(f"grid must be strictly increasing integers >= 2, got {g!r}")
        return A.conformal_stopping(tuple(V.integer("grid", u, 2) for u in g), qhat=1.0,
                                    agree="answer")
    p = {k: V.integer(k, v, 1 if k == "max_rounds" else 2) for k, v in params.items()}
    if name in ("knapsack", "optimal") and p["max_group"] < p["rollouts"]:
        raise ValueError(f"max_group must be >= rollouts={p['rollouts']}, got {p['max_group']}")
    return {"fixed": lambda: A.fixed(p["group_size"]),
            "dynamic_sampling": lambda: A.dynamic_sampling(p["group_size"], p["max_rounds"]),
            "knapsack": lambda: A.pass_rate_rule("knapsack", p["rollouts"], p["max_group"]),
            "optimal": lambda: A.optimal_rule(p["rollouts"], p["max_group"])}[name]()


def _check_rule(rule) -> Rule:
    """Refuse anything but a rule with a training step (the jitted step reads its fields)."""
    if not isinstance(rule, Rule):
        raise ValueError(f"rule must be an allocation Rule (e.g. lm_rule(...)), got {rule!r}")
    rule.training_rounds()  # a refilling rule without its cap is refused here
    return rule


@partial(jax.jit, static_argnames=("apply_fn", "sample_fn", "B", "eos"))
def _first_s2(apply_fn, sample_fn, params, key, pool_x, pool_c, B, temperature, eos):
    """``optimal``'s first plug-in: mean ``||s||^2`` of one response to each of B prompts."""
    kx, ky = jax.random.split(key)
    idx = jax.random.randint(kx, (B,), 0, pool_x.shape[0])
    y = jax.lax.stop_gradient(sample_fn(params, ky, pool_x[idx], pool_c.shape[1], temperature))
    return jnp.mean(sq_norms(apply_fn, params, pool_x[idx], y, temperature, eos))


def train_with_rule(policy: LMPolicy, pool, eval_questions, rule: Rule, batch_size: int,
                    rollout_budget: int, lr: float, seed: int, *, chunk_steps: int = 10,
                    max_steps: int = 10_000, key=None, schedule=None, estimator="grpo",
                    epochs: int = 1, clip_eps: float | None = None) -> dict:
    """Train from ``policy`` under ``rule`` until ``rollout_budget`` responses are generated.

    Args:
        policy: the starting :class:`~grpo_theory.lm.policy.LMPolicy` (answer-only task).
        pool: the training questions the prompts are drawn from (uniformly, with replacement).
        eval_questions: the held-out questions of the exact accuracy.
        rule: an allocation :class:`~grpo_theory.allocation.Rule` with a training step (e.g.
            :func:`lm_rule`); its state (if it reads one) is
            :class:`~grpo_theory.lm.training.loop.LMSampler`'s.
        batch_size: B prompts a step (kept prompts for ``dynamic_sampling``).
        rollout_budget: run whole chunks of ``chunk_steps`` steps until the responses generated
            reach it (or ``max_steps``).
        lr: Adam's learning rate.
        seed: the run's seed (``key``, a JAX key or an integer, instead when given).
        schedule: optional ``schedule(step, policy, rule, batch_size)`` called after each chunk
            with the policy reached; it returns ``None`` (keep) or a new ``(rule, batch_size)``
            for the next chunks (a scheduler of G; the optimiser's state carries over).
        estimator: the estimator of each kept group (one with a masked form: ``grpo``, the
            leave-one-out estimate of the module doc, by default).
        epochs, clip_eps: the clipped multi-epoch variant (the ratio clip of each kept
            response's weighted term), as in :func:`~grpo_theory.lm.training.grpo.train_grpo`.

    Returns:
        ``dict(accuracy=(n + 1,), rollouts=(n + 1,), kept=(n,), reward=(n,), group=(n,),
        batch=(n,))``: the exact held-out accuracy before and after each step, the cumulative
        responses generated, the prompts kept, the mean reward of the kept responses, the
        rule's group width and B of each step.
    """
    rule = _check_rule(rule)
    B = V.integer("batch_size", batch_size, 1)
    budget = V.integer("rollout_budget", rollout_budget, 1)
    chunk_steps = V.integer("chunk_steps", chunk_steps, 1)
    if policy.sample_fn is None:
        raise ValueError("policy needs a jit-able sample_fn for GRPO training")
    px, pc = task_tokens(policy, pool)
    ex, ec = task_tokens(policy, eval_questions)
    pool_x, pool_c, ex, ec = map(jnp.asarray, (px, pc, ex, ec))
    opt = cached_optimizer(float(lr), "adam")
    params, key = policy.params, V.random_key(seed, key)
    opt_state = opt.init(params)
    acc0 = float(jnp.mean(jnp.exp(seq_log_probs(policy.apply_fn, params, ex, ec,
                                                policy.temperature, policy.eos_ids))))
    parts, spent, steps, s2 = [], 0.0, 0, None
    while spent < budget and steps < max_steps:
        key, k = jax.random.split(key)
        extra = 0
        if rule.reads_state and s2 is None:
            key, k0 = jax.random.split(key)
            s2 = _first_s2(policy.apply_fn, policy.sample_fn, params, k0, pool_x, pool_c, B,
                           policy.temperature, policy.eos_ids)
            extra = B
        variant = LMVariant(estimator, rule=rule, epochs=epochs, clip_eps=clip_eps)
        params, opt_state, s2_out, out = train_chunk(
            policy.apply_fn, policy.sample_fn, opt, variant, params, opt_state,
            jnp.asarray(0.0 if s2 is None else s2, jnp.float32), k, pool_x, pool_c, ex, ec, B,
            chunk_steps, policy.temperature, policy.eos_ids)
        s2 = s2_out if rule.reads_state else None
        out = [np.asarray(out[n], np.float64) for n in ("accuracy", "rollouts", "kept", "reward")]
        out[1][0] += extra
        parts.append(out + [np.full(chunk_steps, rule.horizon(), float),
                            np.full(chunk_steps, B, float)])
        spent += float(out[1].sum())
        steps += chunk_steps
        if schedule is not None and spent < budget:
            new = schedule(steps, policy.with_params(params), rule, B)
            if new is not None:
                rule, B = new
                rule = _check_rule(rule)
                B = V.integer("batch_size", B, 1)
    acc, gen, kept, rew, width, bs = (np.concatenate([p[i] for p in parts]) for i in range(6))
    return dict(accuracy=np.concatenate([[acc0], acc]),
                rollouts=np.concatenate([[0.0], np.cumsum(gen)]), kept=kept, reward=rew,
                group=width, batch=bs)


def accuracy_at_budgets(accuracy, rollouts, budgets) -> np.ndarray:
    """The accuracy of a run at each budget: at the last step whose cumulative rollouts do not
    pass it (NaN where the run stopped before reaching it).

    >>> accuracy_at_budgets([0.1, 0.2, 0.3], [0, 10, 20], [5, 15, 20, 30]).tolist()
    [0.1, 0.2, 0.3, nan]
    """
    a, r = np.asarray(accuracy, float), np.asarray(rollouts, float)
    out = []
    for T in budgets:
        out.append(a[np.sum(r <= T) - 1] if r[-1] >= T else np.nan)
    return np.asarray(out)
