"""The group-size advisor: sample-based estimates of c1, c2, c3 and G* (:mod:`.estimate`) with
jackknife and Fieller intervals (:mod:`.intervals`), their checks: exact expectations by
enumeration and interval coverage (:mod:`.coverage`), and the ``grpo-theory advise`` report
(:mod:`.advise`: ``from grpo_theory.advisor.advise import advise``).

This ``__init__`` is the face of :mod:`grpo_theory.advisor`: ``__all__`` lists the public names.
The function ``advise`` is not in it, since ``grpo_theory.advisor.advise`` names its module.

**The reward of this layer** is a function of decoded text, ``reward(text, answer) -> float``
(:class:`TextReward`): :func:`load_reward` reads one as ``"module:function"`` (default
:func:`grpo_theory.lm.reward_text`) and ``advise`` applies it to every sampled response.
:func:`estimate_scaling_constants` samples a policy itself: an enumerable policy's rewards are
its Bernoulli reward table; a language model's come from ``reward(rows, responses) -> rewards``
on token arrays (``rows`` index the prompt pool), which ``advise`` builds from the text reward.
:func:`estimate_from_rollouts` takes the rewards themselves, an (m, n) array.
"""

from .pieces import (MIN_PROMPTS, MIN_SAMPLES, PARAMETERS, prompt_pieces, rollout_statistics,
                     scaling_intervals, t_quantile)
from .result import ScalingEstimate
from .cross_prompt import CROSS_PROMPT, EXTENDED_PARAMETERS, cross_prompt_statistics
from .estimate import estimate_from_rollouts, estimate_scaling_constants
from .coverage import Coverage, enumerated_expectation, group_outcomes, interval_coverage
from .intervals import fieller_interval, group_size_interval, jackknife_cov
from .advise import (AdviceResult, c1_warning, exact_answer_reward, load_reward, read_prompts,
                     write_prompts)
from .schedule import allowed_group_sizes, propose_group_size
from .rewards import (RewardLog, RewardSummary, expected_rounds, informative_estimates,
                      read_reward_log, summarize_rewards)
# the lower layers' names this layer's users need beside its own (their homes' faces)
from ..lm import TextReward, lm_rollout_statistics
from ..core import RolloutStatistics

# the names the layers above use beside the ones listed first (one import path: this face)
from .advise import FigureWarning

__all__ = ["MIN_PROMPTS", "MIN_SAMPLES", "PARAMETERS", "ScalingEstimate",
           "estimate_from_rollouts", "estimate_scaling_constants", "lm_rollout_statistics",
           "prompt_pieces", "rollout_statistics", "scaling_intervals", "t_quantile",
           "fieller_interval", "group_size_interval", "jackknife_cov",
           "Coverage", "enumerated_expectation", "group_outcomes", "interval_coverage",
           "RolloutStatistics"]
# BASIS's cross-prompt pieces (advisor/cross_prompt.py): ScalingEstimate.mse(B, G, "basis")
__all__ += ["CROSS_PROMPT", "EXTENDED_PARAMETERS", "cross_prompt_statistics"]
__all__ += ["FigureWarning"]
__all__ += ["AdviceResult", "c1_warning", "exact_answer_reward", "load_reward",
            "read_prompts", "write_prompts", "TextReward",
            "allowed_group_sizes", "propose_group_size"]
# what rewards alone tell a trainer (``grpo-theory rewards``)
__all__ += ["RewardLog", "RewardSummary", "read_reward_log", "summarize_rewards",
            "informative_estimates", "expected_rounds"]


def __getattr__(name):
    """A one-line error naming the new home of a name that left this face."""
    if name == "advised_group_size":
        raise AttributeError("grpo_theory.advisor.advised_group_size is study code and moved to "
                             "grpo_theory.experiments.lm_support (from "
                             "grpo_theory.experiments.lm_support import advised_group_size)")
    raise AttributeError(f"module 'grpo_theory.advisor' has no attribute {name!r}")
