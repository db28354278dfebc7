"""Training a language-model policy with GRPO and its companions.

* :mod:`.loop`: the one GRPO training loop (a jitted ``lax.scan`` over a static variant:
  estimator, fixed G or rollout rule, clipping);
* :mod:`.grpo`: GRPO training under a sample budget (the loop at a fixed G), the exact pass
  rates of the answer-only format and the group size they predict;
* :mod:`.dppo`: the DPPO-style trainer (rollouts kept by a scheme, reweighted);
* :mod:`.allocation`: training under a group-size allocation rule (the loop under a rule).

This ``__init__`` is the face of :mod:`grpo_theory.lm.training`: ``__all__`` lists its public
names.
"""

from .grpo import (exact_accuracy, exact_answer_quantities, pass_rates, predicted_group_size,
                   task_tokens, train_grpo)
from .dppo import train_dppo
from .allocation import LM_RULES, lm_rule, train_with_rule

# the names the layers above use beside the ones listed first (one import path: this face)
from .grpo import best_integer_group_size, pass_rate_spread

__all__ = ["train_grpo", "exact_accuracy", "exact_answer_quantities", "pass_rates",
           "predicted_group_size", "task_tokens", "train_dppo", "LM_RULES", "lm_rule",
           "train_with_rule"]
__all__ += ["best_integer_group_size", "pass_rate_spread"]
