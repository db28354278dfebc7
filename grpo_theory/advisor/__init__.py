"""The group-size advisor: sample-based estimates of c1, c2, c3 and G* (:mod:`.estimate`) with
jackknife and Fieller intervals (:mod:`.intervals`), their checks: exact expectations by
enumeration and interval coverage (:mod:`.coverage`), and the ``grpo-theory advise`` report
(:mod:`.advise`: ``from grpo_theory.advisor.advise import advise``)."""

from .estimate import (MIN_PROMPTS, MIN_SAMPLES, PARAMETERS, ScalingEstimate,
                       estimate_from_rollouts, estimate_scaling_constants, lm_rollout_statistics,
                       prompt_pieces, rollout_statistics, scaling_intervals, t_quantile)
from .coverage import Coverage, enumerated_expectation, group_outcomes, interval_coverage
from .intervals import fieller_interval, group_size_interval, jackknife_cov
from ..core.rollouts import RolloutStatistics

__all__ = ["MIN_PROMPTS", "MIN_SAMPLES", "PARAMETERS", "ScalingEstimate",
           "estimate_from_rollouts", "estimate_scaling_constants", "lm_rollout_statistics",
           "prompt_pieces", "rollout_statistics", "scaling_intervals", "t_quantile",
           "fieller_interval", "group_size_interval", "jackknife_cov",
           "Coverage", "enumerated_expectation", "group_outcomes", "interval_coverage",
           "RolloutStatistics"]
