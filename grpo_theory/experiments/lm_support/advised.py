r"""The advisor on the package's language-model task: c1, c2, c3 and G* of a language-model
policy (the package's transformer or a Hugging Face checkpoint) on the arithmetic questions, from
the advisor's sample-based unbiased estimators, next to the exact pass rates of the answer-only
format (``V(x) = pi(y*|x)`` by teacher forcing).
"""

from __future__ import annotations

import numpy as np

from ...lm.training import best_integer_group_size, pass_rate_spread, pass_rates, task_tokens
from ...lm import LMPolicy, reward_exact_tokens
from ...advisor import estimate_scaling_constants


def advised_group_size(policy: LMPolicy, questions, n_samples: int, key,
                       chunk: int | None = 8, memory_budget=None, stage=None) -> dict:
    r"""c1, c2, c3 and G* at ``policy`` from the advisor's sample-based unbiased estimators.

    For any policy (a Hugging Face checkpoint included): prompts and canonical responses of
    :func:`~grpo_theory.lm.training.grpo.task_tokens`, ``n_samples`` sampled responses per question
    (every question once), the exact-token reward of GRPO training
    (:func:`~grpo_theory.lm.task.reward_exact_tokens`), and
    :func:`grpo_theory.advisor.estimate.estimate_scaling_constants` (U-statistics, 95%
    jackknife intervals, Fieller's interval for ``G* = 1 + sqrt(c3/c1)``). ``J`` and the
    pass-rate spread are exact (``V(x) = pi(y*|x)`` by teacher forcing).

    Args:
        policy: an :class:`~grpo_theory.lm.policy.LMPolicy` or
            :class:`~grpo_theory.lm.checkpoints.hf.HFPolicy`.
        questions: :class:`~grpo_theory.lm.task.Questions` (at least 3).
        n_samples: responses per question (>= 3).
        key: JAX key or integer seed.
        chunk: per-sample scores held at once (each is a parameter-sized vector); None: the
            largest that fits in ``memory_budget`` bytes (None: half the available memory;
            :meth:`grpo_theory.lm.budget.options.ModelOptions.resolve_chunk`).
        memory_budget, stage: as in
            :func:`grpo_theory.lm.budget.statistics.lm_rollout_statistics`.

    Returns:
        The columns of :func:`~grpo_theory.lm.training.grpo.predicted_group_size` plus ``c1_low,
        c1_high, c2_low, c2_high, c3_low, c3_high`` (95% intervals), ``G_low, G_high``
        (interval of ``G_continuous``; ``G_high = inf`` when c1 is not clearly positive) and
        ``n_samples``.
    """
    x, canon = task_tokens(policy, questions)

    def reward(rows, y):
        return np.asarray(reward_exact_tokens(y, canon[np.asarray(rows)]), np.float64)

    est = estimate_scaling_constants(policy, None, n_samples, key, prompts=x, reward=reward,
                                     response_len=canon.shape[1], chunk=chunk,
                                     memory_budget=memory_budget, stage=stage)
    ci = est.conf_int()
    g = est.g_star
    out = dict(c1=est.c1, c2=est.c2, c3=est.c3, G_paper=g - 1, G_continuous=g,
               G_exact=best_integer_group_size(est.constants),
               **pass_rate_spread(pass_rates(policy, x, canon)), n_samples=int(n_samples),
               G_low=float(ci.loc["g_star", "lower"]),
               G_high=float(ci.loc["g_star", "upper"]))
    for c in ("c1", "c2", "c3"):
        out[f"{c}_low"], out[f"{c}_high"] = (float(ci.loc[c, "lower"]),
                                             float(ci.loc[c, "upper"]))
    return out
